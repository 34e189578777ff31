//! Retry delays: fixed, exponential with a cap, random in a range, a stepped ladder and
//! immediate, with full, equal and decorrelated jitter.
//!
//! Every delay is a pure function of the attempt and the failure's jitter seed, so the same
//! failure always gets the same delay: decisions can be replayed and tested exactly.
//!
//! ```
//! use verdict_types::{Backoff, Jitter};
//!
//! let b = Backoff::Exponential { base_ms: 100, cap_ms: 1_000, jitter: Jitter::None };
//! let delays: Vec<u64> = (1..=5).map(|a| b.delay_ms(a, 0)).collect();
//! assert_eq!(delays, [100, 200, 400, 800, 1_000]);
//! ```

use serde::{Deserialize, Serialize};

use crate::SplitMix64;

/// How to spread delays so that many messages failing together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// Exactly the computed delay.
    #[default]
    None,
    /// Uniform in `[0, delay]`: the least work overall (AWS architecture blog).
    Full,
    /// `delay / 2` plus uniform in `[0, delay / 2]`: never much shorter than planned.
    Equal,
    /// `min(cap, uniform(base, previous * 3))`, walked from the first attempt (exponential
    /// only; elsewhere it acts as full jitter).
    Decorrelated,
}

/// A retry delay strategy. In a policy's JSON config it is written with a `strategy` tag:
/// `{"strategy": "exponential", "base_ms": 100, "cap_ms": 60000, "jitter": "full"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case", deny_unknown_fields)]
pub enum Backoff {
    /// Retry at once (pair it with the host's retry budget).
    Immediate,
    /// The same delay every time.
    Fixed {
        /// The delay in milliseconds.
        delay_ms: u64,
        /// Jitter applied to the delay.
        #[serde(default)]
        jitter: Jitter,
    },
    /// `base * 2^(attempt - 1)`, capped.
    Exponential {
        /// Delay after the first failure, in milliseconds.
        base_ms: u64,
        /// Largest delay, in milliseconds.
        cap_ms: u64,
        /// Jitter applied to the delay.
        #[serde(default)]
        jitter: Jitter,
    },
    /// Uniformly random in `[min_ms, max_ms]` (e.g. for deadlocks).
    Random {
        /// Shortest delay, in milliseconds.
        min_ms: u64,
        /// Longest delay, in milliseconds.
        max_ms: u64,
    },
    /// A stepped ladder: attempt N waits `steps_ms[N - 1]`, the last step repeating.
    Ladder {
        /// The steps, in milliseconds.
        steps_ms: Vec<u64>,
        /// Jitter applied to the step.
        #[serde(default)]
        jitter: Jitter,
    },
}

impl Backoff {
    /// Check the parameters; the error names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Backoff::Exponential {
                base_ms, cap_ms, ..
            } if *base_ms == 0 => Err(format!("base_ms must be at least 1 (cap_ms is {cap_ms})")),
            Backoff::Exponential {
                base_ms, cap_ms, ..
            } if cap_ms < base_ms => Err(format!(
                "cap_ms ({cap_ms}) must not be below base_ms ({base_ms})"
            )),
            Backoff::Random { min_ms, max_ms } if min_ms > max_ms => Err(format!(
                "min_ms ({min_ms}) must not be above max_ms ({max_ms})"
            )),
            Backoff::Ladder { steps_ms, .. } if steps_ms.is_empty() => {
                Err("steps_ms must name at least one step".to_string())
            }
            _ => Ok(()),
        }
    }

    /// True when, for a fixed seed, delays never shrink as attempts grow (no jitter and a
    /// non-decreasing ladder). Property checks hold such strategies to it.
    pub fn is_monotone(&self) -> bool {
        match self {
            Backoff::Immediate => true,
            Backoff::Fixed { jitter, .. } | Backoff::Exponential { jitter, .. } => {
                *jitter == Jitter::None
            }
            Backoff::Random { min_ms, max_ms } => min_ms == max_ms,
            Backoff::Ladder { steps_ms, jitter } => {
                *jitter == Jitter::None && steps_ms.windows(2).all(|w| w[0] <= w[1])
            }
        }
    }

    /// The largest delay this strategy can produce.
    pub fn max_delay_ms(&self) -> u64 {
        match self {
            Backoff::Immediate => 0,
            Backoff::Fixed { delay_ms, .. } => *delay_ms,
            Backoff::Exponential { cap_ms, .. } => *cap_ms,
            Backoff::Random { max_ms, .. } => *max_ms,
            Backoff::Ladder { steps_ms, .. } => steps_ms.iter().copied().max().unwrap_or(0),
        }
    }

    /// The delay before the next delivery after failed attempt `attempt` (1-based).
    pub fn delay_ms(&self, attempt: u32, seed: u64) -> u64 {
        let attempt = attempt.max(1);
        let mut rng = SplitMix64::new(seed);
        match self {
            Backoff::Immediate => 0,
            Backoff::Fixed { delay_ms, jitter } => apply(*jitter, *delay_ms, &mut rng),
            Backoff::Exponential {
                base_ms,
                cap_ms,
                jitter: Jitter::Decorrelated,
            } => {
                let (base, cap) = (*base_ms, (*cap_ms).max(*base_ms));
                let mut delay = base;
                for _ in 0..attempt {
                    delay = rng.between(base, delay.saturating_mul(3)).min(cap);
                }
                delay
            }
            Backoff::Exponential {
                base_ms,
                cap_ms,
                jitter,
            } => {
                let shift = (attempt - 1).min(63);
                let raw = base_ms.saturating_mul(1u64 << shift).min(*cap_ms);
                apply(*jitter, raw, &mut rng)
            }
            Backoff::Random { min_ms, max_ms } => rng.between(*min_ms, (*max_ms).max(*min_ms)),
            Backoff::Ladder { steps_ms, jitter } => {
                let index = (attempt as usize - 1).min(steps_ms.len().saturating_sub(1));
                apply(*jitter, steps_ms.get(index).copied().unwrap_or(0), &mut rng)
            }
        }
    }
}

fn apply(jitter: Jitter, delay: u64, rng: &mut SplitMix64) -> u64 {
    match jitter {
        Jitter::None => delay,
        Jitter::Full | Jitter::Decorrelated => rng.between(0, delay),
        Jitter::Equal => delay / 2 + rng.between(0, delay - delay / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_and_caps_without_overflow() {
        let b = Backoff::Exponential {
            base_ms: 1_000,
            cap_ms: 60_000,
            jitter: Jitter::None,
        };
        let got: Vec<u64> = (1..=8).map(|a| b.delay_ms(a, 7)).collect();
        assert_eq!(
            got,
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
        assert_eq!(b.delay_ms(u32::MAX, 7), 60_000);
        assert!(b.is_monotone());
    }

    #[test]
    fn jitter_stays_in_bounds_and_is_deterministic() {
        for seed in 0..2_000u64 {
            let full = Backoff::Exponential {
                base_ms: 100,
                cap_ms: 10_000,
                jitter: Jitter::Full,
            };
            let d = full.delay_ms(4, seed);
            assert!(d <= 800, "full jitter {d} > 800");
            assert_eq!(d, full.delay_ms(4, seed));

            let equal = Backoff::Fixed {
                delay_ms: 1_000,
                jitter: Jitter::Equal,
            };
            let d = equal.delay_ms(1, seed);
            assert!((500..=1_000).contains(&d), "equal jitter {d}");

            let deco = Backoff::Exponential {
                base_ms: 100,
                cap_ms: 5_000,
                jitter: Jitter::Decorrelated,
            };
            let d = deco.delay_ms(6, seed);
            assert!((100..=5_000).contains(&d), "decorrelated {d}");

            let random = Backoff::Random {
                min_ms: 100,
                max_ms: 1_000,
            };
            assert!((100..=1_000).contains(&random.delay_ms(2, seed)));
        }
    }

    #[test]
    fn full_jitter_spreads_across_the_range() {
        let b = Backoff::Fixed {
            delay_ms: 1_000,
            jitter: Jitter::Full,
        };
        let (mut low, mut high) = (0, 0);
        for seed in 0..1_000 {
            let d = b.delay_ms(1, seed);
            low += usize::from(d < 250);
            high += usize::from(d > 750);
        }
        assert!(low > 150 && high > 150, "low {low} high {high}: not spread");
    }

    #[test]
    fn a_ladder_repeats_its_last_step() {
        let l = Backoff::Ladder {
            steps_ms: vec![1_000, 5_000, 7_200_000],
            jitter: Jitter::None,
        };
        assert_eq!(l.delay_ms(1, 0), 1_000);
        assert_eq!(l.delay_ms(3, 0), 7_200_000);
        assert_eq!(l.delay_ms(40, 0), 7_200_000);
        assert!(l.is_monotone());
        assert_eq!(l.max_delay_ms(), 7_200_000);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = Backoff::Exponential {
            base_ms: 500,
            cap_ms: 100,
            jitter: Jitter::None,
        };
        assert!(bad.validate().unwrap_err().contains("cap_ms"));
        assert!(
            Backoff::Random {
                min_ms: 5,
                max_ms: 1
            }
            .validate()
            .unwrap_err()
            .contains("min_ms")
        );
        let empty = Backoff::Ladder {
            steps_ms: vec![],
            jitter: Jitter::None,
        };
        assert!(empty.validate().unwrap_err().contains("steps_ms"));
    }

    #[test]
    fn config_syntax_round_trips() {
        let b: Backoff = serde_json::from_str(
            r#"{"strategy":"exponential","base_ms":100,"cap_ms":900,"jitter":"full"}"#,
        )
        .unwrap();
        assert_eq!(
            b,
            Backoff::Exponential {
                base_ms: 100,
                cap_ms: 900,
                jitter: Jitter::Full
            }
        );
        let err = serde_json::from_str::<Backoff>(r#"{"strategy":"exponential","base":100}"#)
            .unwrap_err();
        assert!(err.to_string().contains("base"), "{err}");
    }
}
