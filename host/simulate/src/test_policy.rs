//! A stand-in policy for the crate's unit tests, so they need no component.

use std::sync::Arc;

use verdict_runtime::{Action, Class, Decision, Failure, Provenance, Severity, Verdict};

/// Retries every failure after `delay_ms` until attempt `last`, which is dead-lettered
/// (exhausted).
pub(crate) fn retry_until(last: u32, delay_ms: u64) -> impl Fn(&Failure) -> Decision {
    let provenance = provenance();
    move |f| {
        let action = if f.attempt() < last {
            Action::Retry(delay_ms)
        } else {
            Action::DeadLetter
        };
        decision(action, &provenance)
    }
}

/// Pauses the route for `pause_ms` once the topic failed `after` times in a row (an open
/// circuit); retries other failures after `delay_ms` until attempt `last`.
pub(crate) fn pause_after(
    after: u32,
    pause_ms: u64,
    last: u32,
    delay_ms: u64,
) -> impl Fn(&Failure) -> Decision {
    let provenance = provenance();
    move |f| {
        let action = if f.consecutive_failures() >= after {
            Action::Pause(pause_ms)
        } else if f.attempt() < last {
            Action::Retry(delay_ms)
        } else {
            Action::DeadLetter
        };
        decision(action, &provenance)
    }
}

fn provenance() -> Arc<Provenance> {
    Arc::new(Provenance {
        name: "test".into(),
        version: "0".into(),
        sha256: String::new(),
    })
}

fn decision(action: Action, provenance: &Arc<Provenance>) -> Decision {
    Decision {
        verdict: Verdict {
            action,
            class: if action == Action::DeadLetter {
                Class::Exhausted
            } else {
                Class::Transient
            },
            reason: String::new(),
            alert: Severity::None,
            labels: Vec::new(),
        },
        provenance: provenance.clone(),
        generation: None,
        fallback: None,
        clamps: Vec::new(),
    }
}
