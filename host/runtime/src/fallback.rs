//! The verdict a topic gets when its policy fails.

use serde::Deserialize;
use verdict_types::{Backoff, Class, Jitter, Severity, Verdict};

use crate::{Failure, Fault};

/// What happens to a message whose policy trapped, timed out, ran out of memory or could
/// not be instantiated: retry with capped exponential backoff (full jitter) while attempts
/// remain, then dead-letter. Never discard: a broken policy must not lose messages.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Fallback {
    /// Delay after the first failure.
    pub base_ms: u64,
    /// Longest delay.
    pub cap_ms: u64,
    /// Deliveries before dead-lettering (still bounded by the guardrails' ceiling).
    pub max_attempts: u32,
}

impl Default for Fallback {
    fn default() -> Self {
        Fallback {
            base_ms: 1_000,
            cap_ms: 60_000,
            max_attempts: 5,
        }
    }
}

impl Fallback {
    /// The fallback verdict for `failure` after `fault`.
    pub fn verdict(&self, failure: &Failure, fault: &Fault) -> Verdict {
        let v = if failure.attempt() >= self.max_attempts {
            Verdict::dead_letter(Class::Unknown).because(format!(
                "policy fault ({fault}); fallback gave up after {} attempts",
                failure.attempt()
            ))
        } else {
            let backoff = Backoff::Exponential {
                base_ms: self.base_ms,
                cap_ms: self.cap_ms.max(self.base_ms),
                jitter: Jitter::Full,
            };
            Verdict::retry_after(backoff.delay_ms(failure.attempt(), failure.jitter_seed()))
                .class(Class::Unknown)
                .because(format!("policy fault ({fault}); fallback retry"))
        };
        v.alert(Severity::Warning)
            .label("fallback", fault_name(fault))
    }
}

fn fault_name(fault: &Fault) -> &'static str {
    match fault {
        Fault::Timeout { .. } => "timeout",
        Fault::OutOfFuel { .. } => "out-of-fuel",
        Fault::MemoryCap { .. } => "memory-cap",
        Fault::Panic { .. } => "panic",
        Fault::Trap { .. } => "trap",
        Fault::Instantiate { .. } => "instantiate",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailureSpec;
    use verdict_types::Action;

    #[test]
    fn retries_then_dead_letters_never_discards() {
        let fault = Fault::Timeout { limit_ms: 10 };
        let fb = Fallback::default();
        for attempt in 1..=4 {
            let f = FailureSpec {
                attempt,
                ..FailureSpec::default()
            }
            .into_failure();
            let v = fb.verdict(&f, &fault);
            assert!(
                matches!(v.action, Action::Retry(ms) if ms <= 60_000),
                "{v:?}"
            );
            assert!(v.reason.contains("timed out"));
        }
        let f = FailureSpec {
            attempt: 5,
            ..FailureSpec::default()
        }
        .into_failure();
        let v = fb.verdict(&f, &fault);
        assert_eq!(v.action, Action::DeadLetter);
        assert!(v.labels.contains(&("fallback".into(), "timeout".into())));
    }
}
