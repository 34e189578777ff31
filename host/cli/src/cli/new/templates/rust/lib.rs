//! The retry and dead-letter policy for `{{name}}`.
//!
//! `decide` answers every failed delivery: the kinds that never heal go to the dead-letter
//! queue at once, then your rules, then retries with exponential backoff until
//! `max_attempts`. Change the part marked "your rules"; the rest is what the admission gate
//! checks.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Verdict, export_policy};

/// The route's `config = { ... }` in `verdict.toml`. Every field has a default; an unknown
/// field is refused with its name when the policy is loaded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Failed deliveries, this one included, after which a message is dead-lettered as
    /// exhausted.
    pub max_attempts: u32,
    /// The first retry's delay; each retry waits up to twice as long (with full jitter).
    pub base_delay_ms: u64,
    /// The longest a retry waits, a consumer's `Retry-After` included.
    pub max_delay_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_attempts: 5,
            base_delay_ms: 200,
            max_delay_ms: 60_000,
        }
    }
}

/// The policy: its config, checked once when the route is loaded.
pub struct {{Type}} {
    config: Config,
    backoff: Backoff,
}

impl Policy for {{Type}} {
    type Config = Config;

    fn new(config: Config) -> Result<Self, String> {
        if config.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if config.base_delay_ms == 0 || config.base_delay_ms > config.max_delay_ms {
            return Err("base_delay_ms must be at least 1 and at most max_delay_ms".into());
        }
        let backoff = Backoff::Exponential {
            base_ms: config.base_delay_ms,
            cap_ms: config.max_delay_ms,
            jitter: Jitter::Full,
        };
        Ok({{Type}} { config, backoff })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        // Payload, schema, format and auth errors never heal: dead-letter them at once.
        if let Some(dead) = f.never_retry() {
            return dead;
        }
        // The consumer said it can never take this message.
        if f.rejected() {
            return Verdict::dead_letter(Class::Permanent).because("rejected by the consumer");
        }

        // ---- Your rules go here. For example:
        // if f.kind_is("http.429") {
        //     // Rate limited: wait as long as the consumer asks, without spending an attempt.
        //     return Verdict::delay(f.retry_after_ms().unwrap_or(5_000).min(self.config.max_delay_ms));
        // }
        // ---- End of your rules.

        if f.attempt() >= self.config.max_attempts {
            return Verdict::dead_letter(Class::Exhausted)
                .because(format!("{} failed {} times", f.kind(), f.attempt()));
        }
        let backoff = self.backoff.delay_ms(f.attempt(), f.jitter_seed());
        // Wait at least as long as the consumer asked (`Retry-After`), within max_delay_ms.
        let asked = f.retry_after_ms().unwrap_or(0).min(self.config.max_delay_ms);
        Verdict::retry_after(backoff.max(asked))
    }
}

export_policy!({{Type}});

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(config: &str) -> {{Type}} {
        verdict_sdk::instantiate(config).expect("the config is accepted")
    }

    #[test]
    fn kinds_that_never_heal_are_dead_lettered_at_once() {
        let p = policy("{}");
        assert_eq!(p.decide(&Failure::new("json.parse")).class, Class::Poison);
        assert_eq!(p.decide(&Failure::new("auth.denied")).class, Class::Permanent);
    }

    #[test]
    fn transient_failures_are_retried_until_max_attempts() {
        let p = policy(r#"{"max_attempts": 3}"#);
        let first = p.decide(&Failure::new("db.timeout").with_attempt(1));
        assert!(first.delay_ms().is_some_and(|ms| ms <= 60_000), "{first:?}");
        let last = p.decide(&Failure::new("db.timeout").with_attempt(3));
        assert_eq!(last.class, Class::Exhausted);
    }

    #[test]
    fn retry_after_is_honoured_within_max_delay() {
        let p = policy(r#"{"max_delay_ms": 10000}"#);
        let v = p.decide(&Failure::new("http.503").with_retry_after_ms(8_000));
        assert!(v.delay_ms().is_some_and(|ms| ms >= 8_000), "{v:?}");
        let v = p.decide(&Failure::new("http.503").with_retry_after_ms(3_600_000));
        assert_eq!(v.delay_ms(), Some(10_000));
    }

    #[test]
    fn a_bad_config_is_refused_by_name() {
        let e = verdict_sdk::instantiate::<{{Type}}>(r#"{"max_atempts": 3}"#).err().unwrap();
        assert!(e.contains("max_atempts"), "{e}");
        assert!(verdict_sdk::instantiate::<{{Type}}>(r#"{"max_attempts": 0}"#).is_err());
    }
}
