//! The one error type of the load generator: a sentence naming the backend
//! operation that failed, so a broken peer or a protocol mismatch stops the
//! run with something a person can act on instead of a wrong number.

use std::fmt;

/// A failed connection, request or protocol exchange.
#[derive(Debug)]
pub(crate) struct LoadError(pub(crate) String);

impl LoadError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        LoadError(message.into())
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

impl From<std::io::Error> for LoadError {
    fn from(e: std::io::Error) -> Self {
        LoadError(format!("i/o error: {e}"))
    }
}

impl From<serde_json::Error> for LoadError {
    fn from(e: serde_json::Error) -> Self {
        LoadError(format!("bad JSON: {e}"))
    }
}

impl From<lapin::Error> for LoadError {
    fn from(e: lapin::Error) -> Self {
        LoadError(format!("AMQP: {e}"))
    }
}
