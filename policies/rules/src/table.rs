//! The rules used when a config names none: the standard error-type table, extended with the
//! HTTP and transport kinds the gateway produces.

use verdict_sdk::{Backoff, Class, Jitter, Severity};

use crate::Rule;

fn rule(name: &str, kinds: &[&str], outcome: Rule) -> Rule {
    Rule {
        name: Some(name.into()),
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        ..outcome
    }
}

fn dead_letter(class: Class, alert: Severity) -> Rule {
    Rule {
        dead_letter: Some(class),
        alert: Some(alert),
        ..Rule::default()
    }
}

fn retry(backoff: Backoff, max_attempts: Option<u32>) -> Rule {
    Rule {
        retry: Some(backoff),
        max_attempts,
        ..Rule::default()
    }
}

/// The standard table: format errors and auth failures are never retried; deadlocks get a
/// random delay and 3 attempts; business exceptions a fixed delay and 2; timeouts and other
/// transient kinds exponential backoff up to the config's `max_attempts` (5 by default).
pub fn default_rules() -> Vec<Rule> {
    vec![
        rule(
            "format",
            &["json.*", "schema.*", "format.*", "decode.*"],
            dead_letter(Class::Poison, Severity::Warning),
        ),
        rule(
            "permanent",
            &[
                "auth.*",
                "validation.*",
                "http.400",
                "http.401",
                "http.403",
                "http.404",
                "http.422",
            ],
            dead_letter(Class::Permanent, Severity::Warning),
        ),
        rule(
            "deadlock",
            &["db.deadlock"],
            retry(
                Backoff::Random {
                    min_ms: 100,
                    max_ms: 1_000,
                },
                Some(3),
            ),
        ),
        rule(
            "business",
            &["biz.*"],
            retry(
                Backoff::Fixed {
                    delay_ms: 1_000,
                    jitter: Jitter::None,
                },
                Some(2),
            ),
        ),
        rule(
            "rate-limited",
            &["http.429", "*.rate_limited"],
            retry(
                Backoff::Exponential {
                    base_ms: 1_000,
                    cap_ms: 60_000,
                    jitter: Jitter::Equal,
                },
                None,
            ),
        ),
        rule(
            "transient",
            &["*.timeout", "http.5*", "transport.*", "db.*", "net.*"],
            retry(
                Backoff::Exponential {
                    base_ms: 500,
                    cap_ms: 60_000,
                    jitter: Jitter::Full,
                },
                None,
            ),
        ),
    ]
}
