//! The worst a message can meet on a route: for each kind of failure, one message failing
//! with it on every delivery, explored over many jitter seeds - the most deliveries it
//! takes and the longest it waits before it is dead-lettered or discarded. Kinds the policy
//! treats alike are reported together: "http.500, http.503: at most 5 deliveries,
//! dead-lettered (exhausted) within 31.0 s".

use serde::Serialize;
use verdict_runtime::{Action, AttemptRecord, Decision, Failure, StatsSpec, class_name};

use crate::engine::{Attempt, failure};

/// Kinds a route is probed with: one of each family the shipped policies and the standard
/// error table tell apart.
pub const PROBE_KINDS: &[&str] = &[
    "http.500",
    "http.503",
    "http.429",
    "db.timeout",
    "db.deadlock",
    "net.timeout",
    "transport.reset",
    "json.parse",
    "schema.unknown-version",
    "auth.denied",
    "validation.failed",
    "unknown.error",
];

/// Jitter seeds explored per kind.
pub const PROBE_SEEDS: u64 = 64;

/// Deliveries after which a message that has not ended is reported as never ending.
pub const PROBE_MAX_DELIVERIES: u32 = 1_000;

/// What the kinds in `kinds` can cost one message, at worst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorstCase {
    /// The kinds that meet this (the policy treats them alike).
    pub kinds: Vec<String>,
    /// The most deliveries one message takes (retries and delays included).
    pub deliveries_max: u32,
    /// The longest from its first failure to its end, in milliseconds; `None` when it
    /// never ends within [`PROBE_MAX_DELIVERIES`].
    pub ends_within_ms: Option<u64>,
    /// How it ends: `dead-letter`, `discard`, or `never`.
    pub ends: String,
    /// The verdict's class at the end (`exhausted`, `poison`, ...).
    pub class: String,
}

impl WorstCase {
    /// The case as one line.
    pub fn sentence(&self) -> String {
        let when = match (self.ends.as_str(), self.ends_within_ms) {
            ("never", _) | (_, None) => {
                format!("never ends within {PROBE_MAX_DELIVERIES} deliveries")
            }
            (ends, Some(ms)) => format!(
                "{} ({}) within {:.1} s",
                if ends == "discard" {
                    "discarded"
                } else {
                    "dead-lettered"
                },
                self.class,
                ms as f64 / 1_000.0
            ),
        };
        format!(
            "{}: at most {} deliver{}, {when}",
            self.kinds.join(", "),
            self.deliveries_max,
            if self.deliveries_max == 1 { "y" } else { "ies" }
        )
    }
}

/// The worst cases of `topic` under `decide`, one per way the policy treats the kinds.
pub fn worst_cases(topic: &str, decide: &dyn Fn(&Failure) -> Decision) -> Vec<WorstCase> {
    let mut cases: Vec<WorstCase> = Vec::new();
    for kind in PROBE_KINDS {
        let mut worst: Option<WorstCase> = None;
        for seed in 0..PROBE_SEEDS {
            let one = one_message(topic, kind, seed, decide);
            worst = Some(match worst {
                None => one,
                Some(w) => WorstCase {
                    deliveries_max: w.deliveries_max.max(one.deliveries_max),
                    ends_within_ms: match (w.ends_within_ms, one.ends_within_ms) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    },
                    ends: if one.ends == "never" {
                        one.ends
                    } else {
                        w.ends
                    },
                    ..w
                },
            });
        }
        let Some(worst) = worst else { continue };
        match cases.iter_mut().find(|c| {
            c.deliveries_max == worst.deliveries_max
                && c.ends_within_ms == worst.ends_within_ms
                && c.ends == worst.ends
                && c.class == worst.class
        }) {
            Some(same) => same.kinds.push((*kind).to_string()),
            None => cases.push(worst),
        }
    }
    cases
}

/// One message failing with `kind` on every delivery, under jitter seed `seed`.
fn one_message(
    topic: &str,
    kind: &str,
    seed: u64,
    decide: &dyn Fn(&Failure) -> Decision,
) -> WorstCase {
    let (mut attempts, mut deferrals, mut now_ms) = (0u32, 0u32, 0u64);
    let mut history: Vec<AttemptRecord> = Vec::new();
    for delivery in 1..=PROBE_MAX_DELIVERIES {
        let decision = decide(&failure(Attempt {
            topic,
            message_id: format!("probe-{seed}"),
            attempt: attempts.saturating_add(1),
            deferrals,
            first_failed_ms: 0,
            now_ms,
            published_ms: 0,
            kind,
            retry_after_ms: None,
            history: history.clone(),
            jitter_seed: seed,
            stats: StatsSpec::default(),
        }));
        if history.len() == 16 {
            history.remove(0);
        }
        history.push(AttemptRecord {
            at_ms: now_ms,
            kind: kind.to_string(),
            message: String::new(),
        });
        let ended = |ends: &str| WorstCase {
            kinds: vec![kind.to_string()],
            deliveries_max: delivery,
            ends_within_ms: Some(now_ms),
            ends: ends.into(),
            class: class_name(decision.verdict.class).into(),
        };
        match decision.verdict.action {
            Action::Retry(ms) => {
                attempts = attempts.saturating_add(1);
                now_ms = now_ms.saturating_add(ms);
            }
            // A pause holds the message as a delay does (the route's other messages wait
            // too, which one message's worst case does not see).
            Action::Delay(ms) | Action::Pause(ms) => {
                deferrals = deferrals.saturating_add(1);
                now_ms = now_ms.saturating_add(ms);
            }
            Action::DeadLetter => return ended("dead-letter"),
            Action::Discard => return ended("discard"),
        }
    }
    WorstCase {
        kinds: vec![kind.to_string()],
        deliveries_max: PROBE_MAX_DELIVERIES,
        ends_within_ms: None,
        ends: "never".into(),
        class: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use verdict_runtime::{Class, Provenance, Severity, Verdict};

    /// Poison for `schema.*` at once; everything else retried 1 s then 2 s, dead after 3.
    fn decide(f: &Failure) -> Decision {
        let (action, class) = if f.kind().starts_with("schema.") {
            (Action::DeadLetter, Class::Poison)
        } else if f.attempt() >= 3 {
            (Action::DeadLetter, Class::Exhausted)
        } else {
            (
                Action::Retry(u64::from(f.attempt()) * 1_000),
                Class::Transient,
            )
        };
        Decision {
            verdict: Verdict {
                action,
                class,
                reason: String::new(),
                alert: Severity::None,
                labels: Vec::new(),
            },
            provenance: Arc::new(Provenance {
                name: "t".into(),
                version: "0".into(),
                sha256: String::new(),
            }),
            generation: None,
            fallback: None,
            clamps: Vec::new(),
        }
    }

    #[test]
    fn kinds_treated_alike_are_reported_together_with_their_worst() {
        let cases = worst_cases("orders", &decide);
        assert_eq!(cases.len(), 2, "{cases:?}");
        let retried = cases.iter().find(|c| c.class == "exhausted").unwrap();
        assert_eq!(
            (retried.deliveries_max, retried.ends_within_ms),
            (3, Some(3_000))
        );
        assert!(retried.kinds.contains(&"http.503".to_string()));
        let poison = cases.iter().find(|c| c.class == "poison").unwrap();
        assert_eq!(poison.kinds, ["schema.unknown-version"]);
        assert_eq!(
            retried.sentence().split(": ").nth(1).unwrap(),
            "at most 3 deliveries, dead-lettered (exhausted) within 3.0 s"
        );
        assert_eq!(
            poison.sentence(),
            "schema.unknown-version: at most 1 delivery, dead-lettered (poison) within 0.0 s"
        );
    }
}
