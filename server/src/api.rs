//! The SQS actions: one entry point from an `X-Amz-Target` action name and
//! a JSON body to a JSON result.
//!
//! Invariant: an action either returns its SQS result or one `SqsError`; an
//! unknown action or a body that is not JSON of the action's shape is refused
//! before anything runs.

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::{ErrorCode, SqsError};
use crate::registry::{QueueEntry, Registry};
use crate::{address, messages, move_tasks, queues};

/// What one call sees: the queues, the host its queue URLs name, and the
/// server's shutdown signal (which ends long polls early).
#[derive(Debug)]
pub(crate) struct Call<'a> {
    /// The server's queues.
    pub(crate) registry: &'a Registry,
    /// `host:port` for queue URLs (the request's `Host` header).
    pub(crate) host: &'a str,
    /// Turns `true` when the server shuts down.
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// Every action the server implements.
pub(crate) const ACTIONS: &[&str] = &[
    "CreateQueue",
    "GetQueueUrl",
    "ListQueues",
    "DeleteQueue",
    "PurgeQueue",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "ListDeadLetterSourceQueues",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "StartMessageMoveTask",
    "ListMessageMoveTasks",
    "CancelMessageMoveTask",
    "TagQueue",
    "UntagQueue",
    "ListQueueTags",
];

/// SQS actions that exist but that leaseq-server does not implement.
const UNSUPPORTED: &[&str] = &["AddPermission", "RemovePermission"];

/// Runs `action` on `body`.
pub(crate) async fn dispatch(call: Call<'_>, action: &str, body: &[u8]) -> Result<Value, SqsError> {
    match action {
        "CreateQueue" => queues::create(&call, parse(body)?),
        "GetQueueUrl" => queues::get_url(&call, parse(body)?),
        "ListQueues" => queues::list(&call, parse(body)?),
        "DeleteQueue" => queues::delete(&call, parse(body)?),
        "PurgeQueue" => queues::purge(&call, parse(body)?),
        "GetQueueAttributes" => queues::get_attributes(&call, parse(body)?),
        "SetQueueAttributes" => queues::set_attributes(&call, parse(body)?),
        "ListDeadLetterSourceQueues" => queues::dead_letter_sources(&call, parse(body)?),
        "SendMessage" => messages::send(&call, parse(body)?).await,
        "SendMessageBatch" => messages::send_batch(&call, parse(body)?).await,
        "ReceiveMessage" => messages::receive(&call, parse(body)?).await,
        "DeleteMessage" => messages::delete(&call, parse(body)?).await,
        "DeleteMessageBatch" => messages::delete_batch(&call, parse(body)?).await,
        "ChangeMessageVisibility" => messages::change_visibility(&call, parse(body)?).await,
        "ChangeMessageVisibilityBatch" => messages::change_visibility_batch(&call, parse(body)?).await,
        "StartMessageMoveTask" => move_tasks::start(&call, parse(body)?),
        "ListMessageMoveTasks" => move_tasks::list(&call, parse(body)?),
        "CancelMessageMoveTask" => move_tasks::cancel(&call, parse(body)?),
        "TagQueue" => queues::tag(&call, parse(body)?),
        "UntagQueue" => queues::untag(&call, parse(body)?),
        "ListQueueTags" => queues::list_tags(&call, parse(body)?),
        other if UNSUPPORTED.contains(&other) => Err(SqsError::new(
            ErrorCode::UnsupportedOperation,
            format!("leaseq-server does not implement {other} (docs/server.md lists what it does)."),
        )),
        other => Err(SqsError::new(ErrorCode::UnknownOperation, format!("Unknown action AmazonSQS.{other}."))),
    }
}

/// The body as the action's input shape.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, SqsError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) { &b"{}"[..] } else { body };
    serde_json::from_slice(body).map_err(|e| {
        SqsError::new(ErrorCode::Serialization, format!("The request body is not valid input for this action: {e}."))
    })
}

/// A required field.
pub(crate) fn required<T>(value: Option<T>, name: &str) -> Result<T, SqsError> {
    value.ok_or_else(|| SqsError::missing(name))
}

/// The queue a `QueueUrl` field names.
pub(crate) fn queue_of(call: &Call<'_>, url: Option<&str>) -> Result<std::sync::Arc<QueueEntry>, SqsError> {
    let url = required(url, "QueueUrl")?;
    call.registry.get(address::name_from_url(url)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every action meets odd input with an SQS error (or a result), never a
    /// panic: wrong types, huge and negative numbers, junk URLs and handles.
    #[tokio::test]
    async fn odd_input_never_panics() {
        let registry = Registry::open(leaseq::Engine::new(), None).unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let url = "http://h/000000000000/q";
        let call = || Call { registry: &registry, host: "h", shutdown: shutdown.clone() };
        dispatch(call(), "CreateQueue", br#"{"QueueName":"q"}"#).await.unwrap();
        let bodies = [
            "".to_string(),
            "null".into(),
            "[]".into(),
            "{".into(),
            "\"text\"".into(),
            format!(r#"{{"QueueUrl":"{url}"}}"#),
            format!(
                r#"{{"QueueUrl":"{url}","MaxNumberOfMessages":-1,"VisibilityTimeout":99999999999,"WaitTimeSeconds":-5}}"#
            ),
            format!(r#"{{"QueueUrl":"{url}","MaxNumberOfMessages":1e3}}"#),
            format!(
                r#"{{"QueueUrl":"{url}","ReceiptHandle":"lq1.ffffffffffffffff.0.0.0.0.0","VisibilityTimeout":-1}}"#
            ),
            format!(r#"{{"QueueUrl":"{url}","ReceiptHandle":"{}"}}"#, "x".repeat(5000)),
            format!(r#"{{"QueueUrl":"{url}","Entries":[{{}},{{"Id":""}}]}}"#),
            format!(
                r#"{{"QueueUrl":"{url}","Entries":[{{"Id":"a","MessageBody":"x","MessageAttributes":{{"n":{{}}}}}}]}}"#
            ),
            format!(
                r#"{{"QueueUrl":"{url}","MessageBody":"x","MessageAttributes":{{"b":{{"DataType":"Binary","BinaryValue":"!!"}}}}}}"#
            ),
            format!(r#"{{"QueueUrl":"{url}","Attributes":{{"RedrivePolicy":"{{\"maxReceiveCount\":1e9}}"}}}}"#),
            format!(r#"{{"QueueUrl":"{url}","AttributeNames":["All","Nope"],"MaxResults":0}}"#),
            r#"{"QueueUrl":"http://h/000000000000/../../etc","QueueName":"../x"}"#.into(),
            r#"{"QueueUrl":7,"QueueName":[]}"#.into(),
            r#"{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q","DestinationArn":"x","MaxResults":99}"#.into(),
            r#"{"SourceArn":"arn:aws:sqs:us-east-1:000000000000:q","MaxNumberOfMessagesPerSecond":0,"TaskHandle":"h"}"#
                .into(),
        ];
        for action in ACTIONS.iter().chain(&["Nope", "AddPermission", ""]) {
            for body in &bodies {
                let _ = dispatch(call(), action, body.as_bytes()).await;
            }
        }
        // The server still works afterwards (DeleteQueue above removed `q`).
        dispatch(call(), "CreateQueue", br#"{"QueueName":"q"}"#).await.unwrap();
        let sent = dispatch(call(), "SendMessage", format!(r#"{{"QueueUrl":"{url}","MessageBody":"ok"}}"#).as_bytes())
            .await
            .unwrap();
        assert!(sent["MessageId"].is_string());
    }
}
