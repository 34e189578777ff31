//! Host guardrails: bounds every verdict passes through, whatever the policy says.

use serde::Deserialize;
use verdict_types::{Action, Class, Verdict};

use crate::{Clamp, Failure};

/// Bounds applied to every verdict of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Guardrails {
    /// A retry at or past this attempt becomes a dead-letter (class exhausted).
    pub max_attempts: u32,
    /// Longest retry, delay or pause; longer ones are lowered to it.
    pub max_delay_ms: u64,
    /// Most `delay` and `pause` verdicts one message may receive.
    pub max_deferrals: u32,
    /// A message older than this is not delayed (or paused for) any more.
    pub max_deferral_age_ms: u64,
    /// Longest reason, in bytes.
    pub max_reason_bytes: usize,
    /// Most labels.
    pub max_labels: usize,
    /// Longest label key or value, in bytes.
    pub max_label_bytes: usize,
    /// Retries limited to a share of first attempts over a sliding window; a retry over
    /// budget waits without spending an attempt. Off when absent. Applied where retries
    /// are delivered (the gateway's routes, the simulator), not to a verdict.
    pub retry_budget: Option<crate::RetryBudget>,
}

impl Default for Guardrails {
    fn default() -> Self {
        Guardrails {
            max_attempts: 32,
            max_delay_ms: 6 * 3_600_000,
            max_deferrals: 100,
            max_deferral_age_ms: 24 * 3_600_000,
            max_reason_bytes: 1_024,
            max_labels: 16,
            max_label_bytes: 256,
            retry_budget: None,
        }
    }
}

impl Guardrails {
    /// Apply the bounds to `verdict`, recording each change in `clamps`.
    pub fn apply(
        &self,
        mut verdict: Verdict,
        failure: &Failure,
        clamps: &mut Vec<Clamp>,
    ) -> Verdict {
        self.bound_text(&mut verdict, clamps);
        let terminal = !matches!(verdict.class, Class::Transient | Class::Unknown);
        match verdict.action {
            Action::Retry(_) | Action::Delay(_) | Action::Pause(_) if terminal => {
                clamps.push(Clamp::TerminalClass);
                verdict.action = Action::DeadLetter;
            }
            Action::Retry(_) if failure.attempt() >= self.max_attempts => {
                clamps.push(Clamp::AttemptCeiling {
                    max_attempts: self.max_attempts,
                });
                verdict.action = Action::DeadLetter;
                verdict.class = Class::Exhausted;
            }
            // A pause spends a deferral of the message it was asked about, so the same
            // bounds end a pause that never lifts.
            Action::Delay(_) | Action::Pause(_) if failure.deferrals() >= self.max_deferrals => {
                clamps.push(Clamp::DeferralBound { bound: "count" });
                verdict.action = Action::DeadLetter;
                verdict.class = Class::Exhausted;
            }
            Action::Delay(_) | Action::Pause(_) if failure.age_ms() >= self.max_deferral_age_ms => {
                clamps.push(Clamp::DeferralBound { bound: "age" });
                verdict.action = Action::DeadLetter;
                verdict.class = Class::Exhausted;
            }
            Action::Retry(ms) | Action::Delay(ms) | Action::Pause(ms) if ms > self.max_delay_ms => {
                clamps.push(Clamp::DelayCapped {
                    requested_ms: ms,
                    applied_ms: self.max_delay_ms,
                });
                verdict.action = match verdict.action {
                    Action::Retry(_) => Action::Retry(self.max_delay_ms),
                    Action::Pause(_) => Action::Pause(self.max_delay_ms),
                    _ => Action::Delay(self.max_delay_ms),
                };
            }
            _ => {}
        }
        verdict
    }

    fn bound_text(&self, verdict: &mut Verdict, clamps: &mut Vec<Clamp>) {
        if verdict.reason.len() > self.max_reason_bytes {
            clamps.push(Clamp::ReasonTruncated {
                bytes: verdict.reason.len(),
            });
            crate::text::truncate_utf8(&mut verdict.reason, self.max_reason_bytes);
        }
        let count = verdict.labels.len();
        let too_long = |(k, v): &(String, String)| {
            k.len() > self.max_label_bytes || v.len() > self.max_label_bytes
        };
        if count > self.max_labels || verdict.labels.iter().any(too_long) {
            clamps.push(Clamp::LabelsTruncated { count });
            verdict.labels.truncate(self.max_labels);
            for (k, v) in &mut verdict.labels {
                crate::text::truncate_utf8(k, self.max_label_bytes);
                crate::text::truncate_utf8(v, self.max_label_bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailureSpec;

    fn failure(attempt: u32, deferrals: u32) -> Failure {
        FailureSpec {
            attempt,
            deferrals,
            ..FailureSpec::default()
        }
        .into_failure()
    }

    fn apply(v: Verdict, f: &Failure) -> (Verdict, Vec<Clamp>) {
        let mut clamps = Vec::new();
        let v = Guardrails::default().apply(v, f, &mut clamps);
        (v, clamps)
    }

    #[test]
    fn retry_at_the_ceiling_is_exhausted() {
        let (v, c) = apply(Verdict::retry_after(10), &failure(32, 0));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
        assert_eq!(c, [Clamp::AttemptCeiling { max_attempts: 32 }]);
        let (v, c) = apply(Verdict::retry_after(10), &failure(31, 0));
        assert_eq!(v.action, Action::Retry(10));
        assert!(c.is_empty());
    }

    #[test]
    fn delays_are_capped_and_deferrals_bounded() {
        let (v, c) = apply(Verdict::delay(u64::MAX), &failure(1, 0));
        assert_eq!(v.action, Action::Delay(6 * 3_600_000));
        assert!(matches!(c[..], [Clamp::DelayCapped { .. }]));
        let (v, c) = apply(Verdict::delay(5), &failure(1, 100));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
        assert_eq!(c, [Clamp::DeferralBound { bound: "count" }]);
        let old = FailureSpec {
            now_ms: Some(25 * 3_600_000),
            ..FailureSpec::default()
        }
        .into_failure();
        assert_eq!(
            apply(Verdict::delay(5), &old).1,
            [Clamp::DeferralBound { bound: "age" }]
        );
    }

    #[test]
    fn a_pause_is_bounded_as_a_delay_is() {
        let (v, c) = apply(Verdict::pause(u64::MAX), &failure(1, 0));
        assert_eq!(v.action, Action::Pause(6 * 3_600_000));
        assert!(matches!(c[..], [Clamp::DelayCapped { .. }]));
        // A policy pausing one message forever: its deferrals run out.
        let (v, c) = apply(Verdict::pause(5), &failure(1, 100));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
        assert_eq!(c, [Clamp::DeferralBound { bound: "count" }]);
        let (v, c) = apply(Verdict::pause(5).class(Class::Poison), &failure(1, 0));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Poison));
        assert_eq!(c, [Clamp::TerminalClass]);
        let (v, c) = apply(Verdict::pause(5), &failure(1, 99));
        assert_eq!(v.action, Action::Pause(5));
        assert!(c.is_empty());
    }

    #[test]
    fn terminal_classes_are_never_retried() {
        let (v, c) = apply(Verdict::retry_after(5).class(Class::Poison), &failure(1, 0));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Poison));
        assert_eq!(c, [Clamp::TerminalClass]);
    }

    #[test]
    fn text_is_bounded_on_char_boundaries() {
        let mut v = Verdict::dead_letter(Class::Poison).because("é".repeat(1_000));
        for i in 0..40 {
            v = v.label(format!("k{i}"), "x".repeat(300));
        }
        let (v, c) = apply(v, &failure(1, 0));
        assert!(v.reason.len() <= 1_024 && v.reason.chars().all(|ch| ch == 'é'));
        assert_eq!(v.labels.len(), 16);
        assert!(v.labels.iter().all(|(_, val)| val.len() == 256));
        assert_eq!(
            c,
            [
                Clamp::ReasonTruncated { bytes: 2_000 },
                Clamp::LabelsTruncated { count: 40 }
            ]
        );
    }
}
