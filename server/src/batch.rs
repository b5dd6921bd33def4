//! The rules every batch action shares, and its result shape.
//!
//! Invariant: a batch that breaks a whole-request rule (no entries, more than
//! ten, repeated or malformed ids) is refused before any entry runs; after
//! that every entry runs on its own and lands in `Successful` or `Failed`.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::error::{ErrorCode, SqsError};
use crate::settings::MAX_BATCH_ENTRIES;

/// Checks the entry ids of a batch.
pub(crate) fn check_ids<'a>(ids: impl ExactSizeIterator<Item = Option<&'a str>>) -> Result<(), SqsError> {
    let count = ids.len();
    if count == 0 {
        return Err(SqsError::new(ErrorCode::EmptyBatchRequest, "There should be at least one entry in the request."));
    }
    if count > MAX_BATCH_ENTRIES {
        return Err(SqsError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!("Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {count}."),
        ));
    }
    let mut seen = HashSet::new();
    for id in ids {
        let id = id.ok_or_else(|| SqsError::missing("Id"))?;
        let valid =
            !id.is_empty() && id.len() <= 80 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(SqsError::new(
                ErrorCode::InvalidBatchEntryId,
                format!(
                    "A batch entry id can only contain alphanumeric characters, hyphens and underscores, and be \
                     at most 80 letters long: {id:?}."
                ),
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                ErrorCode::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated: batch entry ids must be distinct."),
            ));
        }
    }
    Ok(())
}

/// A batch's results, in entry order.
#[derive(Debug, Default)]
pub(crate) struct BatchResult {
    successful: Vec<Value>,
    failed: Vec<Value>,
}

impl BatchResult {
    /// Records a successful entry (`fields` plus its `Id`).
    pub(crate) fn ok(&mut self, id: &str, mut fields: Value) {
        fields["Id"] = json!(id);
        self.successful.push(fields);
    }

    /// Records a failed entry.
    pub(crate) fn failed(&mut self, id: &str, error: &SqsError) {
        self.failed.push(json!({
            "Id": id,
            "SenderFault": error.code.is_sender_fault(),
            "Code": error.code.shape(),
            "Message": error.message,
        }));
    }

    /// The action's result.
    pub(crate) fn into_json(self) -> Value {
        json!({ "Successful": self.successful, "Failed": self.failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_request_rules() {
        let code = |ids: &[Option<&str>]| check_ids(ids.iter().copied()).err().map(|e| e.code);
        assert_eq!(code(&[]), Some(ErrorCode::EmptyBatchRequest));
        assert_eq!(code(&[Some("a"); 11]), Some(ErrorCode::TooManyEntriesInBatchRequest));
        assert_eq!(code(&[Some("a"), Some("a")]), Some(ErrorCode::BatchEntryIdsNotDistinct));
        assert_eq!(code(&[Some("a b")]), Some(ErrorCode::InvalidBatchEntryId));
        assert_eq!(code(&[None]), Some(ErrorCode::MissingParameter));
        assert_eq!(code(&[Some("a"), Some("b-2_c")]), None);
    }
}
