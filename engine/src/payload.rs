//! What `Queue::send` accepts as a message body.
//!
//! Invariant: a [`Payload`] is a [`Bytes`] and nothing more, so converting
//! one into the engine's stored form never copies. Conversions from owned
//! buffers (`Bytes`, `BytesMut`, `Vec<u8>`, `Box<[u8]>`, `String`) hand the
//! allocation over; conversions from borrowed data (`&[u8]`, `&[u8; N]`,
//! `&str`, `&Bytes`) copy the bytes, except `&Bytes`, which shares them.
//!
//! The newtype exists because `Bytes` itself only converts from `'static`
//! slices, so `q.send(b"hello")` (a `&[u8; 5]`) and `q.send(&buf[..n])` (a
//! borrowed slice) would not compile against `impl Into<Bytes>`, and the
//! orphan rule forbids adding those conversions to `Bytes` here. A `'static`
//! slice copies too (a borrowed and a `'static` slice are one type to the
//! trait system); [`Payload::from_static`] or `Bytes::from_static` keeps it
//! in place.

use bytes::{Bytes, BytesMut};

/// A message body on its way into a queue. Any of the types it converts
/// from can be passed to `Queue::send`, `send_with` and `send_batch`
/// directly:
///
/// ```
/// use leaseq::{Bytes, Engine, ManualClock, QueueConfig};
///
/// let engine = Engine::builder().clock(ManualClock::new()).build();
/// let q = engine.create_queue("jobs", QueueConfig::default())?;
/// let buf = [7u8; 64];
/// q.send(b"hello")?;                             // &[u8; N]: copied
/// q.send(&buf[..3])?;                            // a borrowed slice: copied
/// q.send("text")?;                               // &str: copied
/// q.send(String::from("owned"))?;                // String, Vec<u8>: moved in
/// q.send(Bytes::from_static(b"shared"))?;        // Bytes: never copied
/// assert_eq!(&q.receive(5)?[1].payload[..], &[7, 7, 7]);
/// # Ok::<(), leaseq::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Payload(Bytes);

impl Payload {
    /// A payload that points at `bytes` without copying them.
    #[must_use]
    pub const fn from_static(bytes: &'static [u8]) -> Self {
        Payload(Bytes::from_static(bytes))
    }

    /// The bytes, as the engine stores them.
    #[must_use]
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the payload is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Payload> for Bytes {
    fn from(payload: Payload) -> Self {
        payload.0
    }
}

impl From<Bytes> for Payload {
    fn from(bytes: Bytes) -> Self {
        Payload(bytes)
    }
}

impl From<&Bytes> for Payload {
    /// Shares the buffer (a reference-count increment, no copy).
    fn from(bytes: &Bytes) -> Self {
        Payload(bytes.clone())
    }
}

impl From<BytesMut> for Payload {
    fn from(bytes: BytesMut) -> Self {
        Payload(bytes.freeze())
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        Payload(Bytes::from(bytes))
    }
}

impl From<Box<[u8]>> for Payload {
    fn from(bytes: Box<[u8]>) -> Self {
        Payload(Bytes::from(bytes))
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Self {
        Payload(Bytes::from(text))
    }
}

impl From<&[u8]> for Payload {
    fn from(bytes: &[u8]) -> Self {
        Payload(Bytes::copy_from_slice(bytes))
    }
}

impl<const N: usize> From<&[u8; N]> for Payload {
    fn from(bytes: &[u8; N]) -> Self {
        Payload(Bytes::copy_from_slice(bytes))
    }
}

impl<const N: usize> From<[u8; N]> for Payload {
    fn from(bytes: [u8; N]) -> Self {
        Payload(Bytes::copy_from_slice(&bytes))
    }
}

impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Payload(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl From<&String> for Payload {
    fn from(text: &String) -> Self {
        Payload::from(text.as_str())
    }
}

impl From<&Vec<u8>> for Payload {
    fn from(bytes: &Vec<u8>) -> Self {
        Payload::from(bytes.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_shared_buffers_are_not_copied() {
        let shared = Bytes::from(vec![1u8, 2, 3]);
        assert_eq!(Payload::from(shared.clone()).into_bytes().as_ptr(), shared.as_ptr());
        assert_eq!(Payload::from(&shared).into_bytes().as_ptr(), shared.as_ptr());

        let vec = vec![4u8; 32];
        let at = vec.as_ptr();
        assert_eq!(Payload::from(vec).into_bytes().as_ptr(), at);

        static TEXT: &[u8] = b"static";
        assert_eq!(Payload::from_static(TEXT).into_bytes().as_ptr(), TEXT.as_ptr());
    }

    #[test]
    fn borrowed_data_is_copied_with_its_contents() {
        let mut buf = *b"abcdef";
        let payload = Payload::from(&buf[1..4]);
        buf[2] = b'X'; // the payload no longer borrows `buf`
        assert_eq!((payload.as_ref(), &buf[1..4]), (&b"bcd"[..], &b"bXd"[..]));
        assert_eq!(Payload::from(b"hi").as_ref(), b"hi");
        assert_eq!(Payload::from([1u8, 2]).as_ref(), &[1, 2]);
        assert_eq!(Payload::from("text").as_ref(), b"text");
        assert_eq!(Payload::from(&String::from("s")).len(), 1);
        assert!(Payload::from(&Vec::new()).is_empty());
    }
}
