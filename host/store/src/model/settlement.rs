//! What a source must do with a delivery once the pipeline is done with it, and what that
//! came to (the `outcome` label of `verdict_handling_seconds`).

use super::{AttemptRecord, DeadLetter};

/// What a source must do with a delivery once the pipeline is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The consumer took it.
    Delivered,
    /// Deliver again after `delay_ms`, recording the failure; a retry spends an attempt, a
    /// delay counts a deferral instead.
    Again {
        /// The failure.
        failed: AttemptRecord,
        /// How long to wait.
        delay_ms: u64,
        /// Retry (true) or delay (false).
        spend_attempt: bool,
    },
    /// Retire it to a DLQ.
    DeadLetter {
        /// The failure.
        failed: AttemptRecord,
        /// The envelope.
        letter: DeadLetter,
    },
    /// Drop it on the policy's word, with an audit record.
    Discard {
        /// The failure.
        failed: AttemptRecord,
        /// The verdict's reason.
        reason: String,
    },
    /// Give it back untouched, to be delivered after `delay_ms`: nothing spent. For a message
    /// without a route now, and a retry its route's retry budget holds back.
    Release {
        /// How long to wait.
        delay_ms: u64,
    },
}

impl Settlement {
    /// What applying it does, for the `verdict_handling_seconds` metric.
    pub fn handled(&self) -> Handled {
        match self {
            Settlement::Delivered => Handled::Delivered,
            Settlement::Again { .. } => Handled::Again,
            Settlement::DeadLetter { .. } => Handled::DeadLettered,
            Settlement::Discard { .. } => Handled::Discarded,
            Settlement::Release { .. } => Handled::Released,
        }
    }
}

/// What a source did with one delivery (the `outcome` label of `verdict_handling_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Acknowledged: the consumer took it.
    Delivered,
    /// Scheduled again (retry or delay).
    Again,
    /// Written to a DLQ.
    DeadLettered,
    /// Dropped on the policy's word (audited).
    Discarded,
    /// Put back untouched (no route, shutting down).
    Released,
}

impl Handled {
    /// The `outcome` label.
    pub fn name(self) -> &'static str {
        match self {
            Handled::Delivered => "delivered",
            Handled::Again => "again",
            Handled::DeadLettered => "dead-letter",
            Handled::Discarded => "discard",
            Handled::Released => "release",
        }
    }

    /// Whether the message is gone from the source for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Handled::Delivered | Handled::DeadLettered | Handled::Discarded
        )
    }
}
