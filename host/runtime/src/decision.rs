//! What `decide` returns: the verdict to apply, who made it, and what the host changed.

use std::sync::Arc;

use serde::Serialize;
use verdict_types::Verdict;

use crate::Fault;

/// Which policy made a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The policy's name (from `describe`).
    pub name: String,
    /// The policy's version (from `describe`).
    pub version: String,
    /// SHA-256 of the component bytes, hex.
    pub sha256: String,
}

/// A guardrail the host applied to the policy's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "clamp", rename_all = "kebab-case")]
pub enum Clamp {
    /// A retry at or past the attempt ceiling became a dead-letter (class exhausted).
    AttemptCeiling {
        /// The ceiling.
        max_attempts: u32,
    },
    /// A delay above the cap was lowered to it.
    DelayCapped {
        /// What the policy asked for.
        requested_ms: u64,
        /// What applies.
        applied_ms: u64,
    },
    /// A delay past the deferral bound became a dead-letter (class exhausted).
    DeferralBound {
        /// Which bound: `count` or `age`.
        bound: &'static str,
    },
    /// A retry or delay with a terminal class (poison, permanent, ...) became a
    /// dead-letter: those classes are never retried.
    TerminalClass,
    /// The reason was longer than the limit and was cut.
    ReasonTruncated {
        /// Its length.
        bytes: usize,
    },
    /// Labels beyond the limit, or over-long keys/values, were cut.
    LabelsTruncated {
        /// How many labels the policy gave.
        count: usize,
    },
}

/// The outcome of asking a topic's policy about a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The verdict to apply, after guardrails.
    pub verdict: Verdict,
    /// The policy that was asked.
    pub provenance: Arc<Provenance>,
    /// The registry generation that routed the decision (absent outside a registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// Set when the policy failed and the topic's fallback verdict applies instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fault>,
    /// Guardrails that changed the verdict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clamps: Vec<Clamp>,
}

impl Decision {
    /// True when the fallback verdict applies.
    pub fn is_fallback(&self) -> bool {
        self.fallback.is_some()
    }
}
