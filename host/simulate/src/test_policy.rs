//! A stand-in policy for the crate's unit tests, so they need no component.

use std::sync::Arc;

use verdict_runtime::{Action, Class, Decision, Failure, Provenance, Severity, Verdict};

/// Retries every failure after `delay_ms` until attempt `last`, which is dead-lettered
/// (exhausted).
pub(crate) fn retry_until(last: u32, delay_ms: u64) -> impl Fn(&Failure) -> Decision {
    let provenance = Arc::new(Provenance {
        name: "test".into(),
        version: "0".into(),
        sha256: String::new(),
    });
    move |f| Decision {
        verdict: Verdict {
            action: if f.attempt() < last {
                Action::Retry(delay_ms)
            } else {
                Action::DeadLetter
            },
            class: Class::Exhausted,
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
