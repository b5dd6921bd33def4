//! Writes that wait for their log record without blocking a thread: the
//! futures of `Queue::send_async`, `send_batch_async`, `ack_async`,
//! `ack_batch_async`, `extend_async` and `release_async`.
//!
//! Invariant: each future's call does its work when the method is called,
//! exactly as the blocking method does, and the future only waits, as the
//! blocking method's thread would, for the group commit (or replication)
//! of the record that work pushed; it resolves to what the blocking method
//! returns. A send's message is staged, not published, until its record is
//! durable, so no consumer sees a message a crash could take back; if the
//! record fails the message is taken back out and the error hands the
//! payload back. A send future dropped before it resolves still finishes
//! its send: its drop waits (on the thread that drops it, at most one group
//! commit) for the record, then publishes or unstages, so cancelling never
//! leaves a slot staged forever and never loses a message whose record is
//! in the log. The other futures have nothing to finish: their effect is
//! applied when the method returns, and dropping one only stops waiting.
//!
//! Without a data dir, or under `SyncPolicy::Interval` or `Never`, nothing
//! waits and every future is ready at its first poll.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Error, LeaseError};
use crate::journal::StorageFailure;
use crate::lifecycle::DetachedStage;
use crate::queue::Queue;
use crate::receipt::MessageId;

/// The sequence number a future waits on, and the queue whose journal has it.
struct Wait {
    queue: Queue,
    seq: u64,
    /// The waker registered with the journal last (`Journal::poll_durable`).
    registered: Option<std::task::Waker>,
}

impl Wait {
    fn new(queue: &Queue, seq: u64) -> Self {
        Wait { queue: queue.clone(), seq, registered: None }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StorageFailure>> {
        match self.queue.core.journal() {
            Some(journal) => journal.poll_durable(self.seq, cx, &mut self.registered),
            None => Poll::Ready(Ok(())),
        }
    }

    /// `poll` on a thread that may block (a dropped send finishing).
    fn block(&self) -> Result<(), StorageFailure> {
        self.queue.core.journal().map_or(Ok(()), |journal| journal.wait_durable(self.seq))
    }
}

/// The future of a lease operation or ack whose effect is already applied:
/// it resolves to the operation's result once its record is durable (or to
/// the storage error if the record failed).
#[must_use = "the operation is applied already; the future only waits for its record to be durable"]
pub struct Settle<T> {
    wait: Option<Wait>,
    value: Option<T>,
    on_failure: fn(T, StorageFailure) -> T,
}

impl<T> fmt::Debug for Settle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settle").field("waiting", &self.wait.is_some()).finish_non_exhaustive()
    }
}

impl<T> Settle<T> {
    /// A future that resolves to `value` once record `seq` of `queue`'s
    /// journal is durable (`None`: at once).
    pub(crate) fn new(queue: &Queue, seq: Option<u64>, value: T, on_failure: fn(T, StorageFailure) -> T) -> Self {
        Settle { wait: seq.map(|seq| Wait::new(queue, seq)), value: Some(value), on_failure }
    }
}

impl<T: Unpin> Future for Settle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let durable = match &mut this.wait {
            Some(wait) => match wait.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(durable) => durable,
            },
            None => Ok(()),
        };
        this.wait = None;
        let value = this.value.take().expect("a Settle future is not polled after it resolved");
        Poll::Ready(match durable {
            Ok(()) => value,
            Err(failure) => (this.on_failure)(value, failure),
        })
    }
}

/// A successful lease result turned into the storage failure of its record.
pub(crate) fn lease_failed<T>(result: Result<T, LeaseError>, failure: StorageFailure) -> Result<T, LeaseError> {
    result.and_then(|_| Err(LeaseError::from(failure)))
}

/// Every successful result of a batch turned into the storage failure.
pub(crate) fn batch_failed(
    mut results: Vec<Result<(), LeaseError>>,
    failure: StorageFailure,
) -> Vec<Result<(), LeaseError>> {
    for result in results.iter_mut().filter(|r| r.is_ok()) {
        *result = Err(LeaseError::from(failure.clone()));
    }
    results
}

/// The future of `Queue::send_async`.
#[must_use = "the message is staged already; dropping the future waits for its record and then publishes it"]
pub struct SendFuture {
    state: SendState,
}

enum SendState {
    Done(Option<Result<MessageId, Error>>),
    Staged { wait: Wait, stage: DetachedStage, now: u64 },
}

impl fmt::Debug for SendFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendFuture").field("waiting", &matches!(self.state, SendState::Staged { .. })).finish()
    }
}

impl SendFuture {
    pub(crate) fn done(result: Result<MessageId, Error>) -> Self {
        SendFuture { state: SendState::Done(Some(result)) }
    }

    pub(crate) fn staged(queue: &Queue, seq: u64, stage: DetachedStage, now: u64) -> Self {
        SendFuture { state: SendState::Staged { wait: Wait::new(queue, seq), stage, now } }
    }

    /// Publishes the staged message if its record is durable, else takes it
    /// back out.
    fn finish(
        wait: &Wait,
        stage: DetachedStage,
        now: u64,
        durable: Result<(), StorageFailure>,
    ) -> Result<MessageId, Error> {
        let core = &wait.queue.core;
        let result = core.finish_staged(core.reattach(stage), durable, now);
        if result.is_ok() {
            core.waiters.notify();
        }
        result
    }
}

impl Future for SendFuture {
    type Output = Result<MessageId, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let result = match &mut this.state {
            SendState::Done(done) => done.take().expect("a SendFuture is not polled after it resolved"),
            SendState::Staged { wait, stage, now } => {
                let Poll::Ready(durable) = wait.poll(cx) else {
                    return Poll::Pending;
                };
                Self::finish(wait, *stage, *now, durable)
            }
        };
        // Resolved: nothing left for the drop to finish.
        this.state = SendState::Done(None);
        Poll::Ready(result)
    }
}

impl Drop for SendFuture {
    fn drop(&mut self) {
        if let SendState::Staged { wait, stage, now } = &self.state {
            let durable = wait.block();
            let _ = Self::finish(wait, *stage, *now, durable);
        }
    }
}

/// The future of `Queue::send_batch_async`.
#[must_use = "the messages are staged already; dropping the future waits for their records and then publishes them"]
pub struct SendBatchFuture {
    results: Vec<Result<MessageId, Error>>,
    staged: Vec<(usize, DetachedStage)>,
    wait: Option<Wait>,
    now: u64,
}

impl fmt::Debug for SendBatchFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendBatchFuture")
            .field("entries", &self.results.len())
            .field("waiting", &self.wait.is_some())
            .finish()
    }
}

impl SendBatchFuture {
    pub(crate) fn new(
        queue: &Queue,
        results: Vec<Result<MessageId, Error>>,
        staged: Vec<(usize, DetachedStage)>,
        seq: Option<u64>,
        now: u64,
    ) -> Self {
        let wait = seq.map(|seq| Wait::new(queue, seq));
        SendBatchFuture { results, staged, wait, now }
    }

    fn finish(&mut self, durable: &Result<(), StorageFailure>) {
        let Some(wait) = self.wait.take() else {
            return;
        };
        let core = &wait.queue.core;
        let staged = self.staged.drain(..).map(|(at, stage)| (at, core.reattach(stage))).collect();
        core.finish_many(&mut self.results, staged, durable, self.now);
        if self.results.iter().any(Result::is_ok) {
            core.waiters.notify();
        }
    }
}

impl Future for SendBatchFuture {
    type Output = Vec<Result<MessageId, Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(wait) = &mut this.wait {
            let Poll::Ready(durable) = wait.poll(cx) else {
                return Poll::Pending;
            };
            this.finish(&durable);
        }
        Poll::Ready(std::mem::take(&mut this.results))
    }
}

impl Drop for SendBatchFuture {
    fn drop(&mut self) {
        if let Some(wait) = &self.wait {
            let durable = wait.block();
            self.finish(&durable);
        }
    }
}
