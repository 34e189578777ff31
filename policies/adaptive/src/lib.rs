//! `adaptive`: smart retry by the topic's recent success rate. The delay grows as the topic's recent success rate
//! falls (below `slow_below` it is multiplied by `slow_factor`, above `fast_above` divided by
//! `fast_divisor`) and is capped. When the topic's consecutive failures show the downstream
//! is down, the circuit opens: the policy answers `pause`, which stops the whole route for
//! a while (no attempt spent; one probe delivery at the end decides whether it resumes),
//! instead of burning retries against a dead service.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Severity, Verdict, export_policy};

/// Per-topic configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Delay after the first failure at a normal success rate, in ms.
    pub base_ms: u64,
    /// Longest delay, in ms (default 60 s).
    pub cap_ms: u64,
    /// Deliveries before dead-lettering (class exhausted).
    pub max_attempts: u32,
    /// Below this success rate (0-1) the delay is multiplied by `slow_factor`.
    pub slow_below: f64,
    /// Multiplier at a low success rate.
    pub slow_factor: u64,
    /// Above this success rate the delay is divided by `fast_divisor`.
    pub fast_above: f64,
    /// Divisor at a high success rate.
    pub fast_divisor: u64,
    /// Consecutive topic failures that open the circuit.
    pub circuit_after: u32,
    /// How long an open circuit pauses the route, in ms.
    pub circuit_open_ms: u64,
    /// Pauses one message may be answered with (each a deferral of that message); after
    /// that it retries normally, spending attempts, so a long outage ends in the DLQ rather
    /// than in the host's bound.
    pub circuit_max_deferrals: u32,
    /// Kinds dead-lettered at once, class permanent.
    pub permanent_kinds: Vec<String>,
    /// Kinds dead-lettered at once, class poison.
    pub poison_kinds: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            base_ms: 1_000,
            cap_ms: 60_000,
            max_attempts: 5,
            slow_below: 0.3,
            slow_factor: 4,
            fast_above: 0.8,
            fast_divisor: 2,
            circuit_after: 20,
            circuit_open_ms: 30_000,
            circuit_max_deferrals: 10,
            permanent_kinds: vec!["auth.*".into(), "validation.*".into()],
            poison_kinds: vec!["json.*".into(), "schema.*".into()],
        }
    }
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Adaptive {
    c: Config,
}

impl Policy for Adaptive {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        let rate = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("config.{name}: must be between 0 and 1, got {v}"))
            }
        };
        rate("slow_below", c.slow_below)?;
        rate("fast_above", c.fast_above)?;
        if c.slow_below > c.fast_above {
            return Err("config.slow_below: must not be above fast_above".into());
        }
        if c.base_ms == 0 || c.cap_ms < c.base_ms {
            return Err("config.cap_ms: needs base_ms >= 1 and cap_ms >= base_ms".into());
        }
        if c.max_attempts == 0 || c.slow_factor == 0 || c.fast_divisor == 0 {
            return Err(
                "config.max_attempts, slow_factor and fast_divisor must be at least 1".into(),
            );
        }
        Ok(Adaptive { c })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        let c = &self.c;
        if c.poison_kinds.iter().any(|k| f.kind_is(k)) {
            return Verdict::dead_letter(Class::Poison)
                .because(format!("{} cannot succeed on retry", f.kind()));
        }
        if c.permanent_kinds.iter().any(|k| f.kind_is(k)) {
            return Verdict::dead_letter(Class::Permanent)
                .because(format!("{} will not succeed on retry", f.kind()));
        }
        if f.stats().consecutive_failures >= c.circuit_after
            && f.deferrals() < c.circuit_max_deferrals
        {
            return Verdict::pause(c.circuit_open_ms)
                .because(format!(
                    "circuit open: {} failures in a row",
                    f.stats().consecutive_failures
                ))
                .alert(Severity::Warning)
                .label("circuit", "open");
        }
        if f.attempt() >= c.max_attempts {
            return Verdict::dead_letter(Class::Exhausted)
                .because(format!("{} failed {} times", f.kind(), f.attempt()))
                .alert(Severity::Warning);
        }
        let rate = f.stats().success_rate();
        let raw = Backoff::Exponential {
            base_ms: c.base_ms,
            cap_ms: c.cap_ms,
            jitter: Jitter::None,
        }
        .delay_ms(f.attempt(), 0);
        let (scaled, band) = if rate < c.slow_below {
            (raw.saturating_mul(c.slow_factor), "low")
        } else if rate > c.fast_above {
            (raw / c.fast_divisor, "high")
        } else {
            (raw, "medium")
        };
        // Equal jitter keeps the adaptive shape while spreading retries.
        let delay = Backoff::Fixed {
            delay_ms: scaled.min(c.cap_ms),
            jitter: Jitter::Equal,
        }
        .delay_ms(1, f.jitter_seed());
        Verdict::retry_after(delay)
            .because(format!("success rate {:.0}% ({band})", rate * 100.0))
            .label("success_rate", band)
    }
}

export_policy!(Adaptive);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_sdk::{Action, TopicStats, instantiate};

    fn with_rate(deliveries: u32, failures: u32) -> Failure {
        Failure::new("http.503")
            .with_attempt(2)
            .with_jitter_seed(9)
            .with_stats(TopicStats {
                deliveries,
                failures,
                ..TopicStats::default()
            })
    }

    fn delay(v: &Verdict) -> u64 {
        v.delay_ms().unwrap()
    }

    #[test]
    fn delay_grows_as_success_rate_falls_and_is_capped() {
        let p: Adaptive = instantiate("{}").unwrap();
        let high = delay(&p.decide(&with_rate(100, 10))); // 90% -> 1 s
        let medium = delay(&p.decide(&with_rate(100, 50))); // 50% -> 2 s
        let low = delay(&p.decide(&with_rate(100, 90))); // 10% -> 8 s
        assert!((500..=1_000).contains(&high), "{high}");
        assert!((1_000..=2_000).contains(&medium), "{medium}");
        assert!((4_000..=8_000).contains(&low), "{low}");
        let late = p.decide(&with_rate(100, 90).with_attempt(4));
        assert!(delay(&late) <= 60_000);
    }

    #[test]
    fn an_open_circuit_pauses_the_route_without_spending_attempts() {
        let p: Adaptive = instantiate("{}").unwrap();
        let f = Failure::new("http.503").with_stats(TopicStats {
            consecutive_failures: 25,
            ..TopicStats::default()
        });
        let v = p.decide(&f);
        assert_eq!(v.action, Action::Pause(30_000));
    }

    #[test]
    fn an_open_circuit_stops_deferring_after_its_bound() {
        let p: Adaptive = instantiate("{}").unwrap();
        let stats = TopicStats {
            consecutive_failures: 25,
            ..TopicStats::default()
        };
        let f = Failure::new("http.503")
            .with_stats(stats)
            .with_deferrals(10);
        assert!(matches!(p.decide(&f).action, Action::Retry(_)));
        assert_eq!(
            p.decide(&Failure::new("auth.denied")).class,
            Class::Permanent
        );
    }

    #[test]
    fn exhausts_and_refuses_bad_config() {
        let p: Adaptive = instantiate("{}").unwrap();
        assert_eq!(
            p.decide(&Failure::new("http.503").with_attempt(5)).class,
            Class::Exhausted
        );
        assert!(
            instantiate::<Adaptive>(r#"{"slow_below": 1.5}"#)
                .unwrap_err()
                .contains("slow_below")
        );
    }
}
