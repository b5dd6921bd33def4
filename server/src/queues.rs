//! The queue actions: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue,
//! PurgeQueue, Get/SetQueueAttributes, ListDeadLetterSourceQueues.
//!
//! Invariant: each action checks its whole input before it changes a queue.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::address::{ACCOUNT, name_from_url, queue_url};
use crate::api::{Call, queue_of, required};
use crate::error::SqsError;

/// CreateQueue's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct CreateQueueInput {
    queue_name: Option<String>,
    #[serde(default)]
    attributes: HashMap<String, String>,
    #[serde(default, rename = "tags")]
    tags: HashMap<String, String>,
}

/// An input that names a queue by URL only.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct QueueUrlInput {
    queue_url: Option<String>,
}

/// GetQueueUrl's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct GetQueueUrlInput {
    queue_name: Option<String>,
    #[serde(rename = "QueueOwnerAWSAccountId")]
    owner: Option<String>,
}

/// ListQueues' input (also ListDeadLetterSourceQueues').
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ListQueuesInput {
    queue_url: Option<String>,
    queue_name_prefix: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

/// GetQueueAttributes' input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct GetAttributesInput {
    queue_url: Option<String>,
    #[serde(default)]
    attribute_names: Vec<String>,
}

/// TagQueue's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct TagQueueInput {
    queue_url: Option<String>,
    tags: Option<HashMap<String, String>>,
}

/// UntagQueue's input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct UntagQueueInput {
    queue_url: Option<String>,
    tag_keys: Option<Vec<String>>,
}

/// SetQueueAttributes' input.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SetAttributesInput {
    queue_url: Option<String>,
    attributes: Option<HashMap<String, String>>,
}

pub(crate) fn create(call: &Call<'_>, input: CreateQueueInput) -> Result<Value, SqsError> {
    let name = required(input.queue_name, "QueueName")?;
    call.registry.create(&name, &input.attributes, &input.tags)?;
    Ok(json!({ "QueueUrl": queue_url(call.host, &name) }))
}

pub(crate) fn get_url(call: &Call<'_>, input: GetQueueUrlInput) -> Result<Value, SqsError> {
    let name = required(input.queue_name, "QueueName")?;
    if input.owner.as_deref().is_some_and(|owner| owner != ACCOUNT) {
        return Err(SqsError::no_queue());
    }
    call.registry.get(&name)?;
    Ok(json!({ "QueueUrl": queue_url(call.host, &name) }))
}

pub(crate) fn list(call: &Call<'_>, input: ListQueuesInput) -> Result<Value, SqsError> {
    let names = call.registry.names(input.queue_name_prefix.as_deref().unwrap_or(""));
    page(call, names, input, "QueueUrls")
}

pub(crate) fn dead_letter_sources(call: &Call<'_>, input: ListQueuesInput) -> Result<Value, SqsError> {
    let url = required(input.queue_url.as_deref(), "QueueUrl")?;
    let name = name_from_url(url)?.to_string();
    call.registry.get(&name)?;
    let names = call.registry.dead_letter_sources(&name);
    // The SQS model spells this one field in lower camel case.
    page(call, names, input, "queueUrls")
}

/// One page of queue URLs: `NextToken` is the last name of the page.
fn page(call: &Call<'_>, names: Vec<String>, input: ListQueuesInput, field: &str) -> Result<Value, SqsError> {
    let limit = match input.max_results {
        None => 1000,
        Some(n @ 1..=1000) => n as usize,
        Some(n) => {
            return Err(SqsError::invalid(format!(
                "Value {n} for parameter MaxResults is invalid. Reason: must be between 1 and 1000."
            )));
        }
    };
    let after = input.next_token.unwrap_or_default();
    let rest: Vec<&String> = names.iter().filter(|n| after.is_empty() || n.as_str() > after.as_str()).collect();
    let shown = &rest[..rest.len().min(limit)];
    let mut out = json!({ field: shown.iter().map(|n| queue_url(call.host, n)).collect::<Vec<_>>() });
    if input.max_results.is_some() && rest.len() > shown.len() {
        out["NextToken"] = json!(shown.last().map(|n| n.as_str()));
    }
    Ok(out)
}

/// TagQueue: adds tags, replacing the values of keys given again.
pub(crate) fn tag(call: &Call<'_>, input: TagQueueInput) -> Result<Value, SqsError> {
    let url = required(input.queue_url.as_deref(), "QueueUrl")?;
    let tags = required(input.tags, "Tags")?;
    call.registry.change_tags(name_from_url(url)?, |current| crate::settings::with_tags(current, &tags))?;
    Ok(json!({}))
}

/// UntagQueue: removes the tags with the keys given (absent keys are no
/// error, as in SQS).
pub(crate) fn untag(call: &Call<'_>, input: UntagQueueInput) -> Result<Value, SqsError> {
    let url = required(input.queue_url.as_deref(), "QueueUrl")?;
    let keys = required(input.tag_keys, "TagKeys")?;
    call.registry.change_tags(name_from_url(url)?, |current| {
        Ok(current.iter().filter(|(k, _)| !keys.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect())
    })?;
    Ok(json!({}))
}

/// ListQueueTags: every tag of the queue (`Tags` left out when there are none).
pub(crate) fn list_tags(call: &Call<'_>, input: QueueUrlInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    let tags = entry.settings().tags;
    Ok(if tags.is_empty() { json!({}) } else { json!({ "Tags": tags }) })
}

pub(crate) fn delete(call: &Call<'_>, input: QueueUrlInput) -> Result<Value, SqsError> {
    let url = required(input.queue_url.as_deref(), "QueueUrl")?;
    call.registry.delete(name_from_url(url)?)?;
    Ok(json!({}))
}

pub(crate) fn purge(call: &Call<'_>, input: QueueUrlInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    entry.queue.purge()?;
    entry.forget_receives();
    Ok(json!({}))
}

pub(crate) fn get_attributes(call: &Call<'_>, input: GetAttributesInput) -> Result<Value, SqsError> {
    let entry = queue_of(call, input.queue_url.as_deref())?;
    let stats = entry.queue.stats();
    let attributes = entry.settings().report(entry.queue.name(), &input.attribute_names, &stats)?;
    if attributes.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Attributes": attributes }))
}

pub(crate) fn set_attributes(call: &Call<'_>, input: SetAttributesInput) -> Result<Value, SqsError> {
    let url = required(input.queue_url.as_deref(), "QueueUrl")?;
    let attributes = required(input.attributes, "Attributes")?;
    call.registry.set_attributes(name_from_url(url)?, &attributes)?;
    Ok(json!({}))
}
