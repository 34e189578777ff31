//! A failed attempt as the gateway records it (store, NATS history, RabbitMQ headers).

use serde::{Deserialize, Serialize};
use verdict_runtime::AttemptSpec;

/// A failed delivery, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// When.
    pub at_ms: u64,
    /// Error kind.
    pub kind: String,
    /// Error message.
    pub message: String,
}

impl From<&AttemptRecord> for AttemptSpec {
    fn from(r: &AttemptRecord) -> Self {
        AttemptSpec {
            at_ms: r.at_ms,
            kind: r.kind.clone(),
            message: r.message.clone(),
        }
    }
}
