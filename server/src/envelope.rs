//! How an SQS message (body, message attributes, send time) is stored as one
//! leaseq payload.
//!
//! Invariant: `encode` then `decode` gives back the same message. The layout
//! is versioned and starts with a NUL byte, which an SQS body may not contain,
//! so a payload that some other producer put on the queue without the header
//! decodes as a plain body and is never misread as an envelope.
//!
//! Layout (integers big-endian): `00 'L' 'Q' 'S'`, version (1, or 2 with a
//! trace header), send time in Unix milliseconds (u64), attribute count (u8),
//! then per attribute: name (u16 length + bytes), data type (u16 length +
//! bytes), transport (1 string, 2 binary), value (u32 length + bytes); in
//! version 2 the `AWSTraceHeader` system attribute (u16 length + bytes);
//! then the body's UTF-8 bytes.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

const MAGIC: [u8; 4] = [0, b'L', b'Q', b'S'];
const VERSION: u8 = 1;
/// The layout with a trace header (written only for messages that have one,
/// so the others stay readable by servers from before it).
const VERSION_TRACED: u8 = 2;

/// One message attribute's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttributeValue {
    /// `StringValue` (data types `String` and `Number`).
    String(String),
    /// `BinaryValue` (data type `Binary`).
    Binary(Vec<u8>),
}

/// One message attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageAttribute {
    /// `String`, `Number` or `Binary`, optionally with a `.custom` suffix.
    pub(crate) data_type: String,
    /// The value.
    pub(crate) value: AttributeValue,
}

impl MessageAttribute {
    /// The bytes SQS counts toward the message size: type and value.
    pub(crate) fn size(&self) -> usize {
        self.data_type.len()
            + match &self.value {
                AttributeValue::String(s) => s.len(),
                AttributeValue::Binary(b) => b.len(),
            }
    }
}

/// An SQS message as the server stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    /// The body.
    pub(crate) body: String,
    /// Message attributes, sorted by name.
    pub(crate) attributes: BTreeMap<String, MessageAttribute>,
    /// When it was sent (Unix ms); `None` for a payload without the header.
    pub(crate) sent_ms: Option<u64>,
    /// The `AWSTraceHeader` system attribute (an X-Ray trace header), if sent.
    pub(crate) trace_header: Option<String>,
}

impl Envelope {
    /// The payload to hand to the engine. Callers bound attribute count (10),
    /// name and type lengths (256) and the total size first.
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(16 + self.body.len());
        out.put_slice(&MAGIC);
        out.put_u8(if self.trace_header.is_some() { VERSION_TRACED } else { VERSION });
        out.put_u64(self.sent_ms.unwrap_or(0));
        out.put_u8(self.attributes.len() as u8);
        for (name, attribute) in &self.attributes {
            out.put_u16(name.len() as u16);
            out.put_slice(name.as_bytes());
            out.put_u16(attribute.data_type.len() as u16);
            out.put_slice(attribute.data_type.as_bytes());
            let (transport, value) = match &attribute.value {
                AttributeValue::String(s) => (1, s.as_bytes()),
                AttributeValue::Binary(b) => (2, b.as_slice()),
            };
            out.put_u8(transport);
            out.put_u32(value.len() as u32);
            out.put_slice(value);
        }
        if let Some(trace) = &self.trace_header {
            out.put_u16(trace.len() as u16);
            out.put_slice(trace.as_bytes());
        }
        out.put_slice(self.body.as_bytes());
        out.freeze()
    }

    /// Reads a payload back. One without the header (or with a damaged one)
    /// is a plain body, decoded lossily if it is not UTF-8.
    pub(crate) fn decode(payload: &[u8]) -> Envelope {
        Self::decode_header(payload).unwrap_or_else(|| Envelope {
            body: String::from_utf8_lossy(payload).into_owned(),
            attributes: BTreeMap::new(),
            sent_ms: None,
            trace_header: None,
        })
    }

    fn decode_header(payload: &[u8]) -> Option<Envelope> {
        let mut r = Reader(payload);
        if r.take(4)? != MAGIC {
            return None;
        }
        let traced = match r.take(1)?[0] {
            VERSION => false,
            VERSION_TRACED => true,
            _ => return None,
        };
        let sent_ms = u64::from_be_bytes(r.take(8)?.try_into().ok()?);
        let count = r.take(1)?[0];
        let mut attributes = BTreeMap::new();
        for _ in 0..count {
            let name = r.text()?;
            let data_type = r.text()?;
            let transport = r.take(1)?[0];
            let len = u32::from_be_bytes(r.take(4)?.try_into().ok()?) as usize;
            let raw = r.take(len)?;
            let value = match transport {
                1 => AttributeValue::String(String::from_utf8(raw.to_vec()).ok()?),
                2 => AttributeValue::Binary(raw.to_vec()),
                _ => return None,
            };
            attributes.insert(name, MessageAttribute { data_type, value });
        }
        let trace_header = if traced { Some(r.text()?) } else { None };
        let body = String::from_utf8(r.0.to_vec()).ok()?;
        Some(Envelope { body, attributes, sent_ms: Some(sent_ms), trace_header })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn text(&mut self) -> Option<String> {
        let len = u16::from_be_bytes(self.take(2)?.try_into().ok()?) as usize;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_body_attributes_and_send_time() {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "color".to_string(),
            MessageAttribute { data_type: "String".into(), value: AttributeValue::String("blue".into()) },
        );
        attributes.insert(
            "blob".to_string(),
            MessageAttribute { data_type: "Binary.png".into(), value: AttributeValue::Binary(vec![0, 255, 7]) },
        );
        let mut message =
            Envelope { body: "héllo".into(), attributes, sent_ms: Some(1_700_000_000_123), trace_header: None };
        assert_eq!(Envelope::decode(&message.encode()), message);
        assert_eq!(message.encode()[4], VERSION, "no trace header: the first layout");
        message.trace_header = Some("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".into());
        assert_eq!(Envelope::decode(&message.encode()), message);
    }

    #[test]
    fn a_payload_without_the_header_is_a_plain_body() {
        let decoded = Envelope::decode(b"plain text");
        assert_eq!(decoded.body, "plain text");
        assert!(decoded.attributes.is_empty());
        assert_eq!(decoded.sent_ms, None);
        // A truncated header is not misread either.
        let message = Envelope { body: "x".into(), attributes: BTreeMap::new(), sent_ms: Some(1), trace_header: None };
        let truncated = &message.encode()[..6];
        assert_eq!(Envelope::decode(truncated).sent_ms, None);
    }
}
