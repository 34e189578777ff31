//! Shadow evaluation: a candidate policy decides alongside the active one, its verdict is
//! never applied, and every disagreement is counted (per route and class) and logged with
//! both verdicts, so an operator promotes with evidence.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use verdict_types::Action;

use verdict_runtime::{CLASSES, class_index, class_name};
use verdict_runtime::{Decider, Decision, Failure};

/// The shadow of one route, with its counters (lock-free: decisions only add).
#[derive(Debug)]
pub struct Shadow {
    /// The shadow policy's name in the config.
    pub policy: String,
    /// The configured shadow policy.
    pub decider: Decider,
    compared: AtomicU64,
    disagreements: AtomicU64,
    /// Disagreements by the active verdict's class.
    by_class: [AtomicU64; 7],
}

/// What a shadow has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ShadowReport {
    /// The route's topic pattern.
    pub topic: String,
    /// The active policy.
    pub active: String,
    /// The shadow policy.
    pub shadow: String,
    /// Decisions compared.
    pub compared: u64,
    /// Decisions where action or class differed.
    pub disagreements: u64,
    /// Disagreements by the active verdict's class (kebab-case names; zero counts omitted).
    pub by_class: std::collections::BTreeMap<String, u64>,
}

/// Two verdicts agree when they take the same action kind with the same class; delays may
/// differ (jitter, ladders) without counting as a disagreement.
fn agree(a: &Decision, b: &Decision) -> bool {
    std::mem::discriminant::<Action>(&a.verdict.action) == std::mem::discriminant(&b.verdict.action)
        && a.verdict.class == b.verdict.class
}

impl Shadow {
    pub(crate) fn new(policy: String, decider: Decider) -> Self {
        Shadow {
            policy,
            decider,
            compared: AtomicU64::new(0),
            disagreements: AtomicU64::new(0),
            by_class: Default::default(),
        }
    }

    /// Decide in the shadow and compare with the active decision.
    pub(crate) fn observe(&self, topic: &str, failure: &Failure, active: &Decision) {
        let shadow = self.decider.decide(failure);
        self.compared.fetch_add(1, Ordering::Relaxed);
        if agree(active, &shadow) {
            return;
        }
        self.disagreements.fetch_add(1, Ordering::Relaxed);
        self.by_class[class_index(active.verdict.class)].fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            topic,
            active = ?active.verdict,
            shadow = ?shadow.verdict,
            shadow_policy = %self.policy,
            "shadow policy disagrees"
        );
    }

    /// The counters so far.
    pub fn report(&self, topic: &str, active: &str) -> ShadowReport {
        let by_class = CLASSES
            .iter()
            .zip(&self.by_class)
            .filter_map(|(class, n)| {
                let n = n.load(Ordering::Relaxed);
                (n > 0).then(|| (class_name(*class).to_string(), n))
            })
            .collect();
        ShadowReport {
            topic: topic.to_string(),
            active: active.to_string(),
            shadow: self.policy.clone(),
            compared: self.compared.load(Ordering::Relaxed),
            disagreements: self.disagreements.load(Ordering::Relaxed),
            by_class,
        }
    }
}
