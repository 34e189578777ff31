//! A dead letter ready to be written, and the headers every broker DLQ indexes it by.

use super::{AttemptRecord, Delivery};

/// A dead letter ready to be written: the encoded envelope and what indexes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The DLQ's name.
    pub dlq: String,
    /// The verdict's class (kebab-case).
    pub class: String,
    /// The verdict's reason.
    pub reason: String,
    /// `json` or `msgpack`.
    pub format: &'static str,
    /// The encoded envelope.
    pub envelope: Vec<u8>,
}

/// The headers a broker dead letter carries beside its envelope, written by every broker
/// source and read back by the DLQ tools, so listing and filtering a DLQ
/// never decodes the envelopes' own fields.
pub mod letter_headers {
    /// The source topic.
    pub const TOPIC: &str = "verdict-topic";
    /// The message id.
    pub const MESSAGE_ID: &str = "verdict-message-id";
    /// The verdict's class.
    pub const CLASS: &str = "verdict-class";
    /// The last error's kind.
    pub const KIND: &str = "verdict-kind";
    /// The verdict's reason (one line, at most 512 characters).
    pub const REASON: &str = "verdict-reason";
    /// The envelope's encoding (`json`, `msgpack`).
    pub const FORMAT: &str = "verdict-format";
    /// Attempts made.
    pub const ATTEMPTS: &str = "verdict-attempts";
    /// When it was dead-lettered (ms since the epoch).
    pub const AT_MS: &str = "verdict-at-ms";
}

impl DeadLetter {
    /// The [`letter_headers`] of this dead letter of `delivery`, which failed with `failed`.
    pub fn headers(
        &self,
        delivery: &Delivery,
        failed: &AttemptRecord,
    ) -> [(&'static str, String); 8] {
        use letter_headers::*;
        use verdict_runtime::text::one_line;
        // Header values are one bounded line: a CR/LF would inject headers, and some
        // clients refuse such a value with a panic.
        [
            (TOPIC, one_line(&delivery.topic, 1_024)),
            (MESSAGE_ID, one_line(&delivery.id, 1_024)),
            (CLASS, one_line(&self.class, 64)),
            (
                KIND,
                one_line(&failed.kind, verdict_runtime::text::MAX_KIND_BYTES),
            ),
            (REASON, one_line(&self.reason, 512)),
            (FORMAT, self.format.to_string()),
            (
                ATTEMPTS,
                delivery.attempts_spent.saturating_add(1).to_string(),
            ),
            (AT_MS, failed.at_ms.to_string()),
        ]
    }
}
