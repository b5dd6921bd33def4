//! What every backend offers the workload: one connection's send, receive and
//! delete, each a single request (or one pipelined round trip) whatever the
//! batch size, so the per-operation latencies compare like with like.
//!
//! A `Target` prepares the queue once, opens one `Session` per connection and
//! removes the queue at the end.

use std::future::Future;

use bytes::Bytes;

use crate::error::LoadError;

/// One keep-alive connection to a queue.
pub(crate) trait Session: Send + 'static {
    /// What a delete or an ack needs of a received message.
    type Handle: Send;

    /// Puts `bodies` on the queue and waits for the server to confirm them.
    fn send(&mut self, bodies: &[Bytes]) -> impl Future<Output = Result<(), LoadError>> + Send;

    /// Takes up to `max` messages under a lease; may return none.
    fn receive(&mut self, max: usize) -> impl Future<Output = Result<Vec<Self::Handle>, LoadError>> + Send;

    /// Deletes (acks) received messages, ending their leases for good;
    /// returns how many were deleted. A message whose lease was lost (it
    /// expired and the server refused the handle) is not an error: at least
    /// once means it will be delivered again.
    fn delete(&mut self, handles: Vec<Self::Handle>) -> impl Future<Output = Result<u64, LoadError>> + Send;

    /// Takes over messages whose lease ran out, where the client must do that
    /// itself (Redis Streams' XAUTOCLAIM); returns how many it found. The
    /// servers that expire leases on their own have nothing to do here.
    fn reclaim(&mut self) -> impl Future<Output = Result<Option<Vec<Self::Handle>>, LoadError>> + Send {
        async { Ok(None) }
    }
}

/// A queue on one server.
pub(crate) trait Target: Send + Sync + 'static {
    /// The connection type.
    type Session: Session;

    /// Creates the queue (fresh, empty).
    fn prepare(&self) -> impl Future<Output = Result<(), LoadError>> + Send;

    /// Opens connection number `index`.
    fn connect(&self, index: usize) -> impl Future<Output = Result<Self::Session, LoadError>> + Send;

    /// Removes the queue.
    fn finish(&self) -> impl Future<Output = Result<(), LoadError>> + Send;
}
