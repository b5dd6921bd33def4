//! Message move tasks (StartMessageMoveTask, ListMessageMoveTasks,
//! CancelMessageMoveTask) on the engine's `redrive`.
//!
//! Invariants: a task without `MaxNumberOfMessagesPerSecond` moves the
//! dead-letter queue's ready messages in one engine call, so it has finished
//! by the time StartMessageMoveTask answers. A task with a rate runs on a
//! thread of its own, moving at most that many messages a second until it
//! has moved the ready count it started with, the source has no more ready
//! messages, it is cancelled, the engine refuses (`FAILED`), or the server
//! stops; at most one task per source runs at a time. The server keeps the
//! last `KEPT_PER_SOURCE` tasks of each source queue to report.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::address::{name_from_arn, queue_arn};
use crate::api::{Call, required};
use crate::error::{ErrorCode, SqsError};
use crate::registry::unix_now_ms;

/// Tasks reported per source queue (ListMessageMoveTasks' largest page).
const KEPT_PER_SOURCE: usize = 10;
/// How often a throttled task wakes to move what its rate allows by then.
const TICK: Duration = Duration::from_millis(50);

// A task's status (SQS's names in `Status::name`).
const RUNNING: u8 = 0;
const COMPLETED: u8 = 1;
const CANCELLING: u8 = 2;
const CANCELLED: u8 = 3;
const FAILED: u8 = 4;

/// What a task's thread and the actions share. The count and the cancel
/// flag are read on their own (a report, a check per tick), so Relaxed is
/// enough for them; `status` is
/// stored Release after `failure` and read Acquire, so a `FAILED` status
/// is seen with its reason.
#[derive(Debug, Default)]
struct Progress {
    moved: AtomicUsize,
    status: AtomicU8,
    cancel: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl Progress {
    fn finished(status: u8, moved: usize, failure: Option<String>) -> Progress {
        Progress {
            moved: AtomicUsize::new(moved),
            status: AtomicU8::new(status),
            cancel: AtomicBool::new(false),
            failure: Mutex::new(failure),
        }
    }

    fn status(&self) -> u8 {
        let status = self.status.load(Ordering::Acquire);
        if status == RUNNING && self.cancel.load(Ordering::Relaxed) { CANCELLING } else { status }
    }

    fn end(&self, status: u8, failure: Option<String>) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = failure;
        self.status.store(status, Ordering::Release);
    }
}

fn status_name(status: u8) -> &'static str {
    match status {
        RUNNING => "RUNNING",
        COMPLETED => "COMPLETED",
        CANCELLING => "CANCELLING",
        CANCELLED => "CANCELLED",
        _ => "FAILED",
    }
}

/// One task.
#[derive(Debug, Clone)]
struct MoveTask {
    handle: String,
    source: String,
    destination: Option<String>,
    rate: Option<u32>,
    to_move: usize,
    started_ms: u64,
    progress: Arc<Progress>,
}

/// The recent tasks of each source queue.
#[derive(Debug, Default)]
pub(crate) struct MoveTasks {
    by_source: Mutex<HashMap<String, Vec<MoveTask>>>,
    started: Mutex<u64>,
}

/// StartMessageMoveTask's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct StartInput {
    source_arn: Option<String>,
    destination_arn: Option<String>,
    max_number_of_messages_per_second: Option<i64>,
}

/// ListMessageMoveTasks' input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ListInput {
    source_arn: Option<String>,
    max_results: Option<i64>,
}

/// CancelMessageMoveTask's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct CancelInput {
    task_handle: Option<String>,
}

fn not_found(what: &str) -> SqsError {
    SqsError::new(ErrorCode::ResourceNotFound, what.to_string())
}

/// The queue an ARN names, which must exist.
fn existing(call: &Call<'_>, arn: &str) -> Result<String, SqsError> {
    let name = name_from_arn(arn).map_err(|_| {
        not_found("The resource that you specified for the SourceArn or DestinationArn parameter doesn't exist.")
    })?;
    call.registry.get(name).map_err(|_| not_found(&format!("The queue {arn} does not exist.")))?;
    Ok(name.to_string())
}

pub(crate) fn start(call: &Call<'_>, input: StartInput) -> Result<Value, SqsError> {
    let source_arn = required(input.source_arn, "SourceArn")?;
    let source = existing(call, &source_arn)?;
    let sources = call.registry.dead_letter_sources(&source);
    if sources.is_empty() {
        return Err(SqsError::invalid(format!(
            "Source queue {source} is not a dead-letter queue: no queue's RedrivePolicy targets it."
        )));
    }
    let rate = match input.max_number_of_messages_per_second {
        None => None,
        Some(r @ 1..=500) => Some(r as u32),
        Some(r) => {
            return Err(SqsError::invalid(format!(
                "Value {r} for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be from 1 to 500."
            )));
        }
    };
    let destination = match input.destination_arn {
        Some(arn) => existing(call, &arn)?,
        // SQS returns each message to the queue it came from; the engine
        // moves to one queue, so that works when the source has one.
        None if sources.len() == 1 => sources[0].clone(),
        None => {
            return Err(SqsError::invalid(format!(
                "Dead-letter queue {source} serves {} queues ({}); name one with DestinationArn.",
                sources.len(),
                sources.join(", ")
            )));
        }
    };
    if destination == source {
        return Err(SqsError::invalid(format!(
            "The value of parameter DestinationArn is invalid. Reason: it names the source queue {source}; a move \
             needs another queue."
        )));
    }
    let tasks = &call.registry.tasks;
    // Held to the end, so two starts for one source cannot both run.
    let mut by_source = tasks.by_source.lock().unwrap_or_else(|p| p.into_inner());
    let running = |t: &MoveTask| matches!(t.progress.status(), RUNNING | CANCELLING);
    if by_source.get(&source).is_some_and(|list| list.iter().any(running)) {
        return Err(SqsError::invalid(format!(
            "A message move task of {source} is running; only one task per source queue runs at a time."
        )));
    }
    let handle = {
        let mut started = tasks.started.lock().unwrap_or_else(|p| p.into_inner());
        *started += 1;
        format!("lq-move-{}-{started}", unix_now_ms())
    };
    let started_ms = unix_now_ms();
    let engine = call.registry.engine();
    let (to_move, progress) = match rate {
        None => match engine.redrive(&source, &destination, u32::MAX as usize) {
            Ok(moved) => (moved, Progress::finished(COMPLETED, moved, None)),
            Err(e) => (0, Progress::finished(FAILED, 0, Some(SqsError::from(e).message))),
        },
        Some(rate) => {
            let to_move = engine.queue(&source).map(|q| q.stats().ready as usize).unwrap_or(0);
            let progress = Arc::new(Progress::default());
            let run = Throttled {
                engine: engine.clone(),
                source: source.clone(),
                destination: destination.clone(),
                rate,
                to_move,
                progress: progress.clone(),
                shutdown: call.shutdown.clone(),
            };
            std::thread::Builder::new()
                .name("leaseq-move-task".into())
                .spawn(move || run.run())
                .map_err(|e| SqsError::new(ErrorCode::InternalFailure, format!("The task could not start: {e}.")))?;
            let task = MoveTask {
                handle: handle.clone(),
                source: source.clone(),
                destination: Some(destination),
                rate: Some(rate),
                to_move,
                started_ms,
                progress,
            };
            remember(&mut by_source, task);
            return Ok(json!({ "TaskHandle": handle }));
        }
    };
    let task = MoveTask {
        handle: handle.clone(),
        source: source.clone(),
        destination: Some(destination),
        rate,
        to_move,
        started_ms,
        progress: Arc::new(progress),
    };
    remember(&mut by_source, task);
    Ok(json!({ "TaskHandle": handle }))
}

fn remember(by_source: &mut HashMap<String, Vec<MoveTask>>, task: MoveTask) {
    let list = by_source.entry(task.source.clone()).or_default();
    list.insert(0, task);
    list.truncate(KEPT_PER_SOURCE);
}

/// A task with a rate, run on its own thread.
struct Throttled {
    engine: leaseq::Engine,
    source: String,
    destination: String,
    rate: u32,
    to_move: usize,
    progress: Arc<Progress>,
    shutdown: watch::Receiver<bool>,
}

impl Throttled {
    fn run(self) {
        let started = Instant::now();
        let mut moved = 0;
        loop {
            if self.progress.cancel.load(Ordering::Relaxed) {
                return self.progress.end(CANCELLED, None);
            }
            if *self.shutdown.borrow() {
                return self.progress.end(FAILED, Some("The server stopped before the task finished.".into()));
            }
            // What the rate allows by now (one at once, so a task starts
            // moving when it starts), less what has moved.
            let allowed = ((started.elapsed().as_secs_f64() * f64::from(self.rate)) as usize + 1).min(self.to_move);
            let step = allowed.saturating_sub(moved);
            if step > 0 {
                match self.engine.redrive(&self.source, &self.destination, step) {
                    Ok(n) => {
                        moved += n;
                        self.progress.moved.store(moved, Ordering::Relaxed);
                        if n < step {
                            // No more ready messages to move.
                            return self.progress.end(COMPLETED, None);
                        }
                    }
                    Err(e) => return self.progress.end(FAILED, Some(SqsError::from(e).message)),
                }
            }
            if moved >= self.to_move {
                return self.progress.end(COMPLETED, None);
            }
            std::thread::sleep(TICK);
        }
    }
}

pub(crate) fn list(call: &Call<'_>, input: ListInput) -> Result<Value, SqsError> {
    let source_arn = required(input.source_arn, "SourceArn")?;
    let source = existing(call, &source_arn)?;
    let limit = match input.max_results {
        None => 1,
        Some(n @ 1..=10) => n as usize,
        Some(n) => {
            return Err(SqsError::invalid(format!(
                "Value {n} for parameter MaxResults is invalid. Reason: must be from 1 to 10."
            )));
        }
    };
    let by_source = call.registry.tasks.by_source.lock().unwrap_or_else(|p| p.into_inner());
    let results: Vec<Value> =
        by_source.get(&source).map(|tasks| tasks.iter().take(limit).map(task_json).collect()).unwrap_or_default();
    Ok(json!({ "Results": results }))
}

fn task_json(task: &MoveTask) -> Value {
    let status = task.progress.status();
    let mut out = json!({
        "TaskHandle": task.handle,
        "Status": status_name(status),
        "SourceArn": queue_arn(&task.source),
        "ApproximateNumberOfMessagesMoved": task.progress.moved.load(Ordering::Relaxed),
        "ApproximateNumberOfMessagesToMove": task.to_move,
        "StartedTimestamp": task.started_ms,
    });
    if let Some(destination) = &task.destination {
        out["DestinationArn"] = json!(queue_arn(destination));
    }
    if let Some(rate) = task.rate {
        out["MaxNumberOfMessagesPerSecond"] = json!(rate);
    }
    if status == FAILED {
        if let Some(reason) = task.progress.failure.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            out["FailureReason"] = json!(reason);
        }
    }
    out
}

pub(crate) fn cancel(call: &Call<'_>, input: CancelInput) -> Result<Value, SqsError> {
    let handle = required(input.task_handle, "TaskHandle")?;
    let by_source = call.registry.tasks.by_source.lock().unwrap_or_else(|p| p.into_inner());
    let Some(task) = by_source.values().flatten().find(|t| t.handle == handle) else {
        return Err(not_found(&format!("No message move task has the handle {handle}.")));
    };
    if task.progress.status() != RUNNING {
        return Err(SqsError::new(
            ErrorCode::UnsupportedOperation,
            format!("Task {handle} is {}; only a running task can be cancelled.", status_name(task.progress.status())),
        ));
    }
    // The thread sees it at its next tick and stops (CANCELLING until then).
    task.progress.cancel.store(true, Ordering::Relaxed);
    Ok(json!({ "ApproximateNumberOfMessagesMoved": task.progress.moved.load(Ordering::Relaxed) }))
}
