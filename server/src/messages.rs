//! The message actions: SendMessage(Batch), ReceiveMessage,
//! DeleteMessage(Batch), ChangeMessageVisibility(Batch).
//!
//! Invariant: a receipt handle is the engine's receipt text, so every lease
//! operation goes through the engine's attempt check: a handle of an earlier
//! receive can never delete or extend a newer one (`ReceiptHandleIsInvalid`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use leaseq::{Delivery, Receipt, ReceiveOptions, SendOptions};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{Call, queue_of, required};
use crate::batch::{BatchResult, check_ids};
use crate::checksum::{attributes_md5, body_md5};
use crate::envelope::{AttributeValue, Envelope, MessageAttribute};
use crate::error::{ErrorCode, SqsError};
use crate::registry::{QueueEntry, unix_now_ms};
use crate::settings::{
    MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS, MAX_MESSAGE_SIZE, MAX_VISIBILITY_SECONDS, MAX_WAIT_SECONDS,
};

/// Most message attributes on one message.
const MAX_ATTRIBUTES: usize = 10;
/// Longest attribute name and data type.
const MAX_ATTRIBUTE_NAME: usize = 256;

/// One message attribute as the JSON protocol sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct AttributeInput {
    data_type: Option<String>,
    string_value: Option<String>,
    binary_value: Option<String>,
    #[serde(default)]
    string_list_values: Vec<String>,
    #[serde(default)]
    binary_list_values: Vec<String>,
}

/// SendMessage's input (and one SendMessageBatch entry).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SendInput {
    queue_url: Option<String>,
    id: Option<String>,
    message_body: Option<String>,
    delay_seconds: Option<i64>,
    #[serde(default)]
    message_attributes: HashMap<String, AttributeInput>,
    #[serde(default)]
    message_system_attributes: HashMap<String, AttributeInput>,
    message_deduplication_id: Option<String>,
}

/// SendMessageBatch's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SendBatchInput {
    queue_url: Option<String>,
    #[serde(default)]
    entries: Vec<SendInput>,
}

/// ReceiveMessage's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ReceiveInput {
    queue_url: Option<String>,
    max_number_of_messages: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_time_seconds: Option<i64>,
    #[serde(default)]
    attribute_names: Vec<String>,
    #[serde(default)]
    message_system_attribute_names: Vec<String>,
    #[serde(default)]
    message_attribute_names: Vec<String>,
}

/// DeleteMessage's and ChangeMessageVisibility's input (and their batch
/// entries).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ReceiptInput {
    queue_url: Option<String>,
    id: Option<String>,
    receipt_handle: Option<String>,
    visibility_timeout: Option<i64>,
}

/// DeleteMessageBatch's and ChangeMessageVisibilityBatch's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ReceiptBatchInput {
    queue_url: Option<String>,
    #[serde(default)]
    entries: Vec<ReceiptInput>,
}

pub(crate) async fn send(call: &Call<'_>, input: SendInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    let (envelope, delay) = message_of(&entry, &input)?;
    send_one(&entry, &envelope, delay).await
}

pub(crate) async fn send_batch(call: &Call<'_>, input: SendBatchInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    check_ids(input.entries.iter().map(|e| e.id.as_deref()))?;
    let total: usize = input.entries.iter().map(message_size).sum();
    if total > MAX_MESSAGE_SIZE as usize {
        return Err(SqsError::new(
            ErrorCode::BatchRequestTooLong,
            format!("Batch requests cannot be longer than {MAX_MESSAGE_SIZE} bytes; this one is {total}."),
        ));
    }
    // Entries without a delay go to the engine as one batch: one log group,
    // so one sync (or one replicated entry) for all of them.
    // Delayed entries are sent one by one; every send is made before any
    // wait, so their records share the batch's group commit.
    let mut answers: Vec<Option<Result<Value, SqsError>>> = Vec::with_capacity(input.entries.len());
    let mut undelayed: Vec<(usize, Envelope)> = Vec::new();
    let mut delayed = Vec::new();
    for item in &input.entries {
        match message_of(&entry, item) {
            Ok((envelope, delay)) if delay.is_zero() => {
                undelayed.push((answers.len(), envelope));
                answers.push(None);
            }
            Ok((envelope, delay)) => {
                let sending = entry.queue.send_async(envelope.encode(), SendOptions { delay });
                delayed.push((answers.len(), envelope, sending));
                answers.push(None);
            }
            Err(e) => answers.push(Some(Err(e))),
        }
    }
    let sent = entry.queue.send_batch_async(undelayed.iter().map(|(_, envelope)| envelope.encode())).await;
    for (at, envelope, sending) in delayed {
        answers[at] = Some(sending.await.map_err(SqsError::from).map(|id| sent_fields(id, &envelope)));
    }
    for ((at, envelope), outcome) in undelayed.iter().zip(sent) {
        answers[*at] = Some(outcome.map_err(SqsError::from).map(|id| sent_fields(id, envelope)));
    }
    let mut result = BatchResult::default();
    for (item, answer) in input.entries.iter().zip(answers) {
        let id = item.id.as_deref().unwrap_or_default();
        match answer {
            Some(Ok(fields)) => result.ok(id, fields),
            Some(Err(e)) => result.failed(id, &e),
            None => result.failed(id, &SqsError::new(ErrorCode::InternalFailure, "The entry was not sent.")),
        }
    }
    Ok(result.into_json())
}

async fn send_one(entry: &QueueEntry, envelope: &Envelope, delay: Duration) -> Result<Value, SqsError> {
    let id = entry.queue.send_async(envelope.encode(), SendOptions { delay }).await?;
    Ok(sent_fields(id, envelope))
}

/// SendMessage's result fields for message `id`.
fn sent_fields(id: leaseq::MessageId, envelope: &Envelope) -> Value {
    let mut out = json!({ "MessageId": id.to_string(), "MD5OfMessageBody": body_md5(&envelope.body) });
    if let Some(md5) = attributes_md5(&envelope.attributes) {
        out["MD5OfMessageAttributes"] = json!(md5);
    }
    if let Some(md5) = attributes_md5(&system_attributes(envelope)) {
        out["MD5OfMessageSystemAttributes"] = json!(md5);
    }
    out
}

/// Body plus attribute names, types and values: what SQS counts.
fn message_size(input: &SendInput) -> usize {
    let body = input.message_body.as_ref().map_or(0, String::len);
    let attributes: usize = input
        .message_attributes
        .iter()
        .map(|(name, a)| {
            name.len()
                + a.data_type.as_ref().map_or(0, String::len)
                + a.string_value.as_ref().map_or(0, String::len)
                + a.binary_value.as_ref().map_or(0, |b| b.len() * 3 / 4)
        })
        .sum();
    body + attributes
}

/// The validated message and delay of a send.
fn message_of(entry: &QueueEntry, input: &SendInput) -> Result<(Envelope, Duration), SqsError> {
    let settings = entry.settings();
    let body = required(input.message_body.clone(), "MessageBody")?;
    if body.is_empty() {
        return Err(SqsError::invalid("The request must contain a non-empty MessageBody."));
    }
    if let Some(bad) = body.chars().find(|c| !allowed_char(*c)) {
        return Err(SqsError::new(
            ErrorCode::InvalidMessageContents,
            format!("Invalid binary character '#x{:X}' was found in the message body.", bad as u32),
        ));
    }
    if input.message_deduplication_id.is_some() {
        return Err(SqsError::invalid("MessageDeduplicationId is only for FIFO queues, which leaseq-server lacks."));
    }
    let delay = match input.delay_seconds {
        None => settings.delay_seconds,
        Some(d) => range("DelaySeconds", d, 0, MAX_DELAY_SECONDS)?,
    };
    let attributes = attributes_of(&input.message_attributes)?;
    let size = body.len() + attributes.iter().map(|(name, a)| name.len() + a.size()).sum::<usize>();
    if size > settings.maximum_message_size as usize {
        return Err(SqsError::invalid(format!(
            "One or more parameters are invalid. Reason: Message must be shorter than {} bytes (it is {size}).",
            settings.maximum_message_size
        )));
    }
    let trace_header = trace_header_of(&input.message_system_attributes)?;
    let envelope = Envelope { body, attributes, sent_ms: Some(unix_now_ms()), trace_header };
    Ok((envelope, Duration::from_secs(delay.into())))
}

/// Longest `AWSTraceHeader` kept (an X-Ray header is about 80 bytes; SQS
/// does not count it toward the message size).
const MAX_TRACE_HEADER: usize = 4096;

/// The `AWSTraceHeader` of a send's `MessageSystemAttributes`, the one
/// system attribute SQS takes on a send.
fn trace_header_of(input: &HashMap<String, AttributeInput>) -> Result<Option<String>, SqsError> {
    let mut trace = None;
    for (name, attribute) in input {
        if name != "AWSTraceHeader" {
            return Err(SqsError::invalid(format!(
                "Message system attribute name '{name}' is invalid: only AWSTraceHeader can be sent."
            )));
        }
        let value = match (attribute.data_type.as_deref(), &attribute.string_value, &attribute.binary_value) {
            (Some("String"), Some(value), None) if !value.is_empty() => value.clone(),
            _ => {
                return Err(SqsError::invalid(
                    "The message system attribute AWSTraceHeader must have DataType String and a non-empty \
                     StringValue.",
                ));
            }
        };
        if value.len() > MAX_TRACE_HEADER || !value.chars().all(allowed_char) {
            return Err(SqsError::invalid(format!(
                "The AWSTraceHeader value is invalid: at most {MAX_TRACE_HEADER} bytes of the characters a \
                 message body may hold."
            )));
        }
        trace = Some(value);
    }
    Ok(trace)
}

/// The system attributes a digest covers: the trace header, if any.
fn system_attributes(envelope: &Envelope) -> BTreeMap<String, MessageAttribute> {
    let trace = envelope.trace_header.iter().map(|value| {
        let attribute = MessageAttribute { data_type: "String".into(), value: AttributeValue::String(value.clone()) };
        ("AWSTraceHeader".to_string(), attribute)
    });
    trace.collect()
}

/// The characters SQS allows in a body and in string attribute values.
fn allowed_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

fn attributes_of(input: &HashMap<String, AttributeInput>) -> Result<BTreeMap<String, MessageAttribute>, SqsError> {
    if input.len() > MAX_ATTRIBUTES {
        return Err(SqsError::invalid(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
            input.len()
        )));
    }
    let mut out = BTreeMap::new();
    for (name, attribute) in input {
        check_attribute_name(name)?;
        let data_type = attribute.data_type.clone().ok_or_else(|| {
            SqsError::invalid(format!("The message attribute '{name}' must contain a non-empty attribute type."))
        })?;
        if data_type.len() > MAX_ATTRIBUTE_NAME {
            return Err(SqsError::invalid(format!(
                "The message attribute '{name}' has a data type over 256 characters."
            )));
        }
        if !attribute.string_list_values.is_empty() || !attribute.binary_list_values.is_empty() {
            return Err(SqsError::invalid(format!(
                "The message attribute '{name}': list values are reserved by SQS and not supported."
            )));
        }
        let (base, suffix) = data_type.split_once('.').map_or((data_type.as_str(), None), |(b, s)| (b, Some(s)));
        if suffix == Some("") {
            return Err(SqsError::invalid(format!(
                "The type of message attribute '{name}' is invalid: {data_type:?} ends in a '.' without a \
                 custom type name after it."
            )));
        }
        let value = match (base, &attribute.string_value, &attribute.binary_value) {
            ("String" | "Number", Some(s), None) => {
                if s.is_empty() || s.chars().any(|c| !allowed_char(c)) {
                    return Err(SqsError::invalid(format!(
                        "The message attribute '{name}' must have a non-empty value of valid characters."
                    )));
                }
                if base == "Number" && !is_number(s) {
                    return Err(SqsError::invalid(format!(
                        "Can't cast the value of message attribute '{name}' to a number: {s:?}."
                    )));
                }
                AttributeValue::String(s.clone())
            }
            ("Binary", None, Some(b)) => {
                let bytes = BASE64.decode(b).map_err(|_| {
                    SqsError::invalid(format!("The message attribute '{name}' has a BinaryValue that is not base64."))
                })?;
                if bytes.is_empty() {
                    return Err(SqsError::invalid(format!("The message attribute '{name}' has an empty value.")));
                }
                AttributeValue::Binary(bytes)
            }
            ("String" | "Number" | "Binary", _, _) => {
                return Err(SqsError::invalid(format!(
                    "The message attribute '{name}' with type '{data_type}' must carry exactly the matching \
                     {} field.",
                    if base == "Binary" { "BinaryValue" } else { "StringValue" }
                )));
            }
            _ => {
                return Err(SqsError::invalid(format!(
                    "The type of message attribute '{name}' is invalid: {data_type:?} (String, Number or Binary, \
                     optionally with a .suffix)."
                )));
            }
        };
        out.insert(name.clone(), MessageAttribute { data_type, value });
    }
    Ok(out)
}

fn check_attribute_name(name: &str) -> Result<(), SqsError> {
    let lower = name.to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= MAX_ATTRIBUTE_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.");
    if valid {
        Ok(())
    } else {
        Err(SqsError::invalid(format!(
            "Message attribute name '{name}' is invalid: up to 256 letters, digits, '-', '_' or '.', no leading, \
             trailing or repeated '.', and not starting with AWS. or Amazon."
        )))
    }
}

/// A decimal number as SQS accepts it (sign, digits, one point, exponent).
fn is_number(s: &str) -> bool {
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    digits > 0 && digits <= 38 && s.parse::<f64>().is_ok_and(f64::is_finite)
}

/// An integer parameter in `min..=max`.
fn range(name: &str, value: i64, min: u32, max: u32) -> Result<u32, SqsError> {
    if (i64::from(min)..=i64::from(max)).contains(&value) {
        Ok(value as u32)
    } else {
        Err(SqsError::invalid(format!(
            "Value {value} for parameter {name} is invalid. Reason: must be between {min} and {max}."
        )))
    }
}

pub(crate) async fn receive(call: &Call<'_>, input: ReceiveInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    let settings = entry.settings();
    let max = range("MaxNumberOfMessages", input.max_number_of_messages.unwrap_or(1), 1, MAX_BATCH_ENTRIES as u32)?;
    let visibility = match input.visibility_timeout {
        None => settings.visibility_timeout,
        Some(v) => range("VisibilityTimeout", v, 0, MAX_VISIBILITY_SECONDS)?,
    };
    let wait = match input.wait_time_seconds {
        None => settings.receive_wait_seconds,
        Some(w) => range("WaitTimeSeconds", w, 0, MAX_WAIT_SECONDS)?,
    };
    let options = ReceiveOptions {
        visibility: Some(Duration::from_secs(visibility.into())),
        wait: Some(Duration::from_secs(wait.into())),
    };
    let mut shutdown = call.shutdown.clone();
    // The engine's future parks no thread: it is woken by a send, a release
    // or an expiry. Shutdown ends the poll early with no messages (dropping
    // the future deregisters it; anything it had taken is redelivered).
    let deliveries = tokio::select! {
        received = entry.queue.receive_async(max as usize, options) => received?,
        _ = shutdown.wait_for(|stopping| *stopping) => Vec::new(),
    };
    if deliveries.is_empty() {
        return Ok(json!({}));
    }
    let system: Vec<&String> = input.attribute_names.iter().chain(&input.message_system_attribute_names).collect();
    let now_ms = unix_now_ms();
    let messages: Vec<Value> =
        deliveries.iter().map(|d| message_json(&entry, d, &system, &input.message_attribute_names, now_ms)).collect();
    Ok(json!({ "Messages": messages }))
}

fn message_json(entry: &QueueEntry, delivery: &Delivery, system: &[&String], wanted: &[String], now_ms: u64) -> Value {
    let envelope = Envelope::decode(&delivery.payload);
    let mut out = json!({
        "MessageId": delivery.id.to_string(),
        "ReceiptHandle": delivery.receipt.to_string(),
        "MD5OfBody": body_md5(&envelope.body),
        "Body": envelope.body,
    });
    let asks = |name: &str| system.iter().any(|n| *n == "All" || *n == name);
    let first = entry.first_receive(delivery.id.as_u64(), delivery.delivery_count, now_ms);
    let mut attributes = serde_json::Map::new();
    if asks("ApproximateReceiveCount") {
        attributes.insert("ApproximateReceiveCount".into(), json!(delivery.delivery_count.to_string()));
    }
    if asks("SentTimestamp") {
        let sent = envelope.sent_ms.unwrap_or(now_ms);
        attributes.insert("SentTimestamp".into(), json!(sent.to_string()));
    }
    if asks("ApproximateFirstReceiveTimestamp") {
        attributes.insert("ApproximateFirstReceiveTimestamp".into(), json!(first.to_string()));
    }
    if let Some(trace) = envelope.trace_header.as_ref().filter(|_| asks("AWSTraceHeader")) {
        attributes.insert("AWSTraceHeader".into(), json!(trace));
    }
    if !attributes.is_empty() {
        out["Attributes"] = Value::Object(attributes);
    }
    let chosen: BTreeMap<String, MessageAttribute> =
        envelope.attributes.into_iter().filter(|(name, _)| attribute_wanted(name, wanted)).collect();
    if let Some(md5) = attributes_md5(&chosen) {
        out["MD5OfMessageAttributes"] = json!(md5);
        let map: serde_json::Map<String, Value> = chosen
            .into_iter()
            .map(|(name, a)| {
                let value = match a.value {
                    AttributeValue::String(s) => json!({ "DataType": a.data_type, "StringValue": s }),
                    AttributeValue::Binary(b) => json!({ "DataType": a.data_type, "BinaryValue": BASE64.encode(b) }),
                };
                (name, value)
            })
            .collect();
        out["MessageAttributes"] = Value::Object(map);
    }
    out
}

/// `All`, `.*`, `prefix.*` or the exact name.
fn attribute_wanted(name: &str, wanted: &[String]) -> bool {
    wanted.iter().any(|w| {
        w == "All"
            || w == ".*"
            || w == name
            || w.strip_suffix(".*").is_some_and(|prefix| name.strip_prefix(prefix).is_some_and(|r| r.starts_with('.')))
    })
}

fn receipt_of(handle: Option<&str>) -> Result<Receipt, SqsError> {
    let handle = required(handle, "ReceiptHandle")?;
    handle.parse::<Receipt>().map_err(|e| {
        SqsError::new(
            ErrorCode::ReceiptHandleIsInvalid,
            format!("The input receipt handle \"{handle}\" is not valid: {e}."),
        )
    })
}

pub(crate) async fn delete(call: &Call<'_>, input: ReceiptInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    let receipt = receipt_of(input.receipt_handle.as_deref())?;
    entry.queue.ack_async(&receipt).await?;
    Ok(json!({}))
}

pub(crate) async fn delete_batch(call: &Call<'_>, input: ReceiptBatchInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    check_ids(input.entries.iter().map(|e| e.id.as_deref()))?;
    // Valid handles go to the engine as one batch (one log group).
    let parsed: Vec<Result<leaseq::Receipt, SqsError>> =
        input.entries.iter().map(|item| receipt_of(item.receipt_handle.as_deref())).collect();
    let receipts: Vec<leaseq::Receipt> = parsed.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    let mut acked = entry.queue.ack_batch_async(&receipts).await.into_iter();
    let mut result = BatchResult::default();
    for (item, receipt) in input.entries.iter().zip(parsed) {
        let id = item.id.as_deref().unwrap_or_default();
        let outcome = receipt.and_then(|_| match acked.next() {
            Some(outcome) => outcome.map_err(SqsError::from),
            None => Err(SqsError::new(ErrorCode::InternalFailure, "The entry was not deleted.")),
        });
        match outcome {
            Ok(()) => result.ok(id, json!({})),
            Err(e) => result.failed(id, &e),
        }
    }
    Ok(result.into_json())
}

pub(crate) async fn change_visibility(call: &Call<'_>, input: ReceiptInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    change_one(&entry, &input)?.settled().await?;
    Ok(json!({}))
}

/// A visibility change applied, waiting for its record.
enum Change {
    Released(leaseq::Settle<Result<(), leaseq::LeaseError>>),
    Extended(leaseq::Settle<Result<leaseq::Nanos, leaseq::LeaseError>>),
}

impl Change {
    async fn settled(self) -> Result<(), SqsError> {
        match self {
            Change::Released(settle) => settle.await?,
            Change::Extended(settle) => {
                settle.await?;
            }
        }
        Ok(())
    }
}

/// Applies one visibility change; the change's future waits for its record.
fn change_one(entry: &QueueEntry, input: &ReceiptInput) -> Result<Change, SqsError> {
    let receipt = receipt_of(input.receipt_handle.as_deref())?;
    let seconds = range(
        "VisibilityTimeout",
        required(input.visibility_timeout, "VisibilityTimeout")?,
        0,
        MAX_VISIBILITY_SECONDS,
    )?;
    Ok(if seconds == 0 {
        // Visible again now: the attempt ends (and counts toward the
        // redrive policy's maxReceiveCount, as in SQS).
        Change::Released(entry.queue.release_async(&receipt, Duration::ZERO))
    } else {
        Change::Extended(entry.queue.extend_async(&receipt, Duration::from_secs(seconds.into())))
    })
}

pub(crate) async fn change_visibility_batch(call: &Call<'_>, input: ReceiptBatchInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    check_ids(input.entries.iter().map(|e| e.id.as_deref()))?;
    // Every change is applied before any wait, so their records share a
    // group commit.
    let changes: Vec<Result<Change, SqsError>> = input.entries.iter().map(|item| change_one(&entry, item)).collect();
    let mut result = BatchResult::default();
    for (item, change) in input.entries.iter().zip(changes) {
        let id = item.id.as_deref().unwrap_or_default();
        let outcome = match change {
            Ok(change) => change.settled().await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => result.ok(id, json!({})),
            Err(e) => result.failed(id, &e),
        }
    }
    Ok(result.into_json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_name_filters() {
        let w = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(attribute_wanted("a.b", &w(&["a.*"])));
        assert!(!attribute_wanted("ab", &w(&["a.*"])));
        assert!(attribute_wanted("x", &w(&["All"])));
        assert!(attribute_wanted("x", &w(&[".*"])));
        assert!(!attribute_wanted("x", &w(&["y"])));
        assert!(!attribute_wanted("x", &[]));
    }

    #[test]
    fn body_characters_and_numbers() {
        assert!(allowed_char('\n') && allowed_char('é') && allowed_char('😀'));
        assert!(!allowed_char('\u{0}') && !allowed_char('\u{1F}') && !allowed_char('\u{FFFF}'));
        assert!(is_number("-1.5e3") && is_number("42"));
        assert!(!is_number("abc") && !is_number("inf") && !is_number("1e999"));
        assert!(check_attribute_name("trace.id").is_ok());
        for bad in ["", ".a", "a.", "a..b", "AWS.x", "amazon.y", "a b"] {
            assert!(check_attribute_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn data_types_take_an_optional_custom_suffix_but_not_an_empty_one() {
        let typed = |data_type: &str| {
            let attribute = AttributeInput {
                data_type: Some(data_type.to_string()),
                string_value: Some("7".to_string()),
                binary_value: None,
                string_list_values: Vec::new(),
                binary_list_values: Vec::new(),
            };
            attributes_of(&HashMap::from([("a".to_string(), attribute)]))
        };
        for good in ["String", "Number", "String.json", "Number.int.v2"] {
            assert_eq!(typed(good).unwrap()["a"].data_type, good);
        }
        for bad in ["String.", "Number.", "Stringy", "", "string"] {
            assert_eq!(typed(bad).unwrap_err().code, ErrorCode::InvalidParameterValue, "{bad}");
        }
    }
}
