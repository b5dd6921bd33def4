//! Message move tasks (StartMessageMoveTask, ListMessageMoveTasks,
//! CancelMessageMoveTask) on the engine's `redrive`.
//!
//! Invariant: the engine moves a dead-letter queue's ready messages in one
//! call, so a task has finished by the time StartMessageMoveTask answers; the
//! server keeps the last `KEPT_PER_SOURCE` tasks of each source queue to
//! report, all `COMPLETED` (or `FAILED` when the engine refused).

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::address::{name_from_arn, queue_arn};
use crate::api::{Call, required};
use crate::error::{ErrorCode, SqsError};
use crate::registry::unix_now_ms;

/// Tasks reported per source queue (ListMessageMoveTasks' largest page).
const KEPT_PER_SOURCE: usize = 10;

/// One finished task.
#[derive(Debug, Clone)]
struct MoveTask {
    handle: String,
    source: String,
    destination: Option<String>,
    rate: Option<u32>,
    moved: usize,
    failure: Option<String>,
    started_ms: u64,
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
    let handle = {
        let mut started = tasks.started.lock().unwrap_or_else(|p| p.into_inner());
        *started += 1;
        format!("lq-move-{}-{started}", unix_now_ms())
    };
    let started_ms = unix_now_ms();
    let (moved, failure) = match call.registry.engine().redrive(&source, &destination, u32::MAX as usize) {
        Ok(moved) => (moved, None),
        Err(e) => (0, Some(SqsError::from(e).message)),
    };
    let task = MoveTask {
        handle: handle.clone(),
        source: source.clone(),
        destination: Some(destination),
        rate,
        moved,
        failure,
        started_ms,
    };
    let mut by_source = tasks.by_source.lock().unwrap_or_else(|p| p.into_inner());
    let list = by_source.entry(source).or_default();
    list.insert(0, task);
    list.truncate(KEPT_PER_SOURCE);
    Ok(json!({ "TaskHandle": handle }))
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
    let mut out = json!({
        "Status": if task.failure.is_some() { "FAILED" } else { "COMPLETED" },
        "SourceArn": queue_arn(&task.source),
        "ApproximateNumberOfMessagesMoved": task.moved,
        "ApproximateNumberOfMessagesToMove": task.moved,
        "StartedTimestamp": task.started_ms,
    });
    if let Some(destination) = &task.destination {
        out["DestinationArn"] = json!(queue_arn(destination));
    }
    if let Some(rate) = task.rate {
        out["MaxNumberOfMessagesPerSecond"] = json!(rate);
    }
    if let Some(reason) = &task.failure {
        out["FailureReason"] = json!(reason);
    }
    out
}

pub(crate) fn cancel(call: &Call<'_>, input: CancelInput) -> Result<Value, SqsError> {
    let handle = required(input.task_handle, "TaskHandle")?;
    let by_source = call.registry.tasks.by_source.lock().unwrap_or_else(|p| p.into_inner());
    let known = by_source.values().flatten().any(|t| t.handle == handle);
    // Every task has finished before its start returned: nothing is running.
    if known {
        Err(SqsError::new(
            ErrorCode::UnsupportedOperation,
            format!("Task {handle} has already completed; only running tasks can be cancelled."),
        ))
    } else {
        Err(not_found(&format!("No message move task has the handle {handle}.")))
    }
}
