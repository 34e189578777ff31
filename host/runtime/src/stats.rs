//! Per-decider counters: decisions by action and class, faults, fallbacks and clamps. Plain
//! relaxed atomics, so counting costs a decision one uncontended add; the admin API and
//! `/metrics` read them.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use verdict_types::{Action, Class};

use crate::Decision;

/// Every class, in counter order.
pub const CLASSES: [Class; 7] = [
    Class::Transient,
    Class::Permanent,
    Class::Poison,
    Class::Exhausted,
    Class::Expired,
    Class::Rejected,
    Class::Unknown,
];

/// Every action name, in counter order.
pub(crate) const ACTIONS: [&str; Action::NAMES.len()] = Action::NAMES;

/// The position of `class` in [`CLASSES`]: an index into per-class counters.
pub fn class_index(class: Class) -> usize {
    CLASSES.iter().position(|c| *c == class).unwrap_or(6)
}

/// The name a class has in envelopes, metrics and the admin API (`transient`, `poison`, ...).
pub fn class_name(class: Class) -> &'static str {
    match class {
        Class::Transient => "transient",
        Class::Permanent => "permanent",
        Class::Poison => "poison",
        Class::Exhausted => "exhausted",
        Class::Expired => "expired",
        Class::Rejected => "rejected",
        Class::Unknown => "unknown",
    }
}

/// Counters of one decider.
#[derive(Debug, Default)]
pub(crate) struct DecisionCounters {
    by_verdict: [[AtomicU64; 7]; Action::NAMES.len()],
    fallbacks: AtomicU64,
    clamps: AtomicU64,
}

impl DecisionCounters {
    pub(crate) fn record(&self, decision: &Decision) {
        self.by_verdict[decision.verdict.action.index()][class_index(decision.verdict.class)]
            .fetch_add(1, Ordering::Relaxed);
        if decision.fallback.is_some() {
            self.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if !decision.clamps.is_empty() {
            self.clamps.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> DecisionStats {
        let mut by_verdict = Vec::new();
        let mut decisions = 0;
        for (a, row) in self.by_verdict.iter().enumerate() {
            for (c, n) in row.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                decisions += n;
                if n > 0 {
                    by_verdict.push(VerdictCount {
                        action: ACTIONS[a],
                        class: class_name(CLASSES[c]),
                        count: n,
                    });
                }
            }
        }
        DecisionStats {
            decisions,
            faults: self.fallbacks.load(Ordering::Relaxed),
            clamped: self.clamps.load(Ordering::Relaxed),
            by_verdict,
        }
    }
}

/// What one route's policy has decided so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DecisionStats {
    /// Decisions made.
    pub decisions: u64,
    /// Decisions where the policy faulted (trap, timeout, memory, fuel, bad verdict) and the
    /// fallback verdict applied.
    pub faults: u64,
    /// Decisions a guardrail changed.
    pub clamped: u64,
    /// Decisions by action and class (zero counts omitted).
    pub by_verdict: Vec<VerdictCount>,
}

impl DecisionStats {
    /// Add `other`'s counts to these.
    pub fn add(&mut self, other: &DecisionStats) {
        self.decisions += other.decisions;
        self.faults += other.faults;
        self.clamped += other.clamped;
        for v in &other.by_verdict {
            match self
                .by_verdict
                .iter_mut()
                .find(|w| (w.action, w.class) == (v.action, v.class))
            {
                Some(w) => w.count += v.count,
                None => self.by_verdict.push(v.clone()),
            }
        }
    }
}

/// Decisions with one action and class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerdictCount {
    /// `retry`, `delay`, `dead-letter` or `discard`.
    pub action: &'static str,
    /// The class, kebab-case.
    pub class: &'static str,
    /// How many.
    pub count: u64,
}
