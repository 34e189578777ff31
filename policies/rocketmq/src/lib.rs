//! `rocketmq`: RocketMQ's retry schedule. Failed messages walk the broker's 18 delay levels
//! (1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h), starting at level 3 (10 s)
//! as RocketMQ does for consumer retries; after 16 retries the message is dead-lettered, as
//! RocketMQ moves it to `%DLQ%<group>`. Poison and permanent kinds (format and auth errors)
//! skip the ladder: unlike RocketMQ, which retries everything, they go to the DLQ at once.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Severity, Verdict, export_policy};

/// RocketMQ's 18 delay levels (`messageDelayLevel`: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m
/// 10m 20m 30m 1h 2h).
pub const LEVELS_MS: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// Per-topic configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Retries before dead-lettering (RocketMQ's `maxReconsumeTimes`, 16 by default).
    pub max_retries: u32,
    /// 1-based delay level of the first retry (3 = 10 s).
    pub start_level: usize,
    /// The delay levels in ms (RocketMQ's `messageDelayLevel`).
    pub levels_ms: Vec<u64>,
    /// Kinds dead-lettered at once, class poison.
    pub poison_kinds: Vec<String>,
    /// Kinds dead-lettered at once, class permanent (retrying cannot fix them).
    pub permanent_kinds: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_retries: 16,
            start_level: 3,
            levels_ms: LEVELS_MS.to_vec(),
            poison_kinds: vec!["json.*".into(), "schema.*".into(), "format.*".into()],
            permanent_kinds: vec!["auth.*".into(), "validation.*".into()],
        }
    }
}

/// The policy.
#[derive(Debug, Clone)]
pub struct RocketMq {
    max_retries: u32,
    ladder: Backoff,
    poison_kinds: Vec<String>,
    permanent_kinds: Vec<String>,
}

impl Policy for RocketMq {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        if c.levels_ms.is_empty() {
            return Err("config.levels_ms: needs at least one level".into());
        }
        if c.start_level == 0 || c.start_level > c.levels_ms.len() {
            return Err(format!(
                "config.start_level: must be between 1 and {}",
                c.levels_ms.len()
            ));
        }
        let steps_ms = c.levels_ms[c.start_level - 1..].to_vec();
        Ok(RocketMq {
            max_retries: c.max_retries,
            ladder: Backoff::Ladder {
                steps_ms,
                jitter: Jitter::None,
            },
            poison_kinds: c.poison_kinds,
            permanent_kinds: c.permanent_kinds,
        })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        if self.poison_kinds.iter().any(|k| f.kind_is(k)) {
            return Verdict::dead_letter(Class::Poison)
                .because(format!("{} cannot succeed on retry", f.kind()));
        }
        if self.permanent_kinds.iter().any(|k| f.kind_is(k)) {
            return Verdict::dead_letter(Class::Permanent)
                .because(format!("{} will not succeed on retry", f.kind()));
        }
        // Attempt N has already used N - 1 retries; RocketMQ dead-letters once the retry
        // count reaches maxReconsumeTimes.
        let retries_used = f.attempt().saturating_sub(1);
        if retries_used >= self.max_retries {
            return Verdict::dead_letter(Class::Exhausted)
                .because(format!(
                    "{} retries used (maxReconsumeTimes {})",
                    retries_used, self.max_retries
                ))
                .alert(Severity::Warning);
        }
        let delay = self.ladder.delay_ms(f.attempt(), f.jitter_seed());
        Verdict::retry_after(delay).because(format!(
            "retry {} of {}",
            retries_used + 1,
            self.max_retries
        ))
    }
}

export_policy!(RocketMq);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_sdk::{Action, instantiate};

    #[test]
    fn walks_the_ladder_from_ten_seconds_and_dead_letters_after_sixteen_retries() {
        let p: RocketMq = instantiate("{}").unwrap();
        let expected = &LEVELS_MS[2..];
        for (i, want) in expected.iter().enumerate() {
            let attempt = i as u32 + 1;
            assert_eq!(
                p.decide(&Failure::new("http.503").with_attempt(attempt))
                    .action,
                Action::Retry(*want),
                "attempt {attempt}"
            );
        }
        let v = p.decide(&Failure::new("http.503").with_attempt(17));
        assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
    }

    #[test]
    fn configurable_retries_and_start() {
        let p: RocketMq = instantiate(r#"{"max_retries": 2, "start_level": 1}"#).unwrap();
        assert_eq!(
            p.decide(&Failure::new("x").with_attempt(1)).action,
            Action::Retry(1_000)
        );
        assert_eq!(
            p.decide(&Failure::new("x").with_attempt(2)).action,
            Action::Retry(5_000)
        );
        assert_eq!(
            p.decide(&Failure::new("x").with_attempt(3)).action,
            Action::DeadLetter
        );
        assert!(
            instantiate::<RocketMq>(r#"{"start_level": 19}"#)
                .unwrap_err()
                .contains("start_level")
        );
    }

    #[test]
    fn poison_skips_the_ladder() {
        let p: RocketMq = instantiate("{}").unwrap();
        assert_eq!(p.decide(&Failure::new("json.parse")).class, Class::Poison);
    }
}
