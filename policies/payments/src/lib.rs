//! `payments`: a hand-written business policy, the SDK's showcase. It reads the payload:
//!
//! - payload that does not parse, or an unknown `schema_version` -> dead-letter, poison;
//! - a negative amount -> dead-letter, permanent, critical alert (money is wrong upstream);
//! - `card.declined` -> dead-letter, permanent (retrying a declined card is pointless and
//!   can trip fraud checks);
//! - gateway 5xx or a timeout -> exponential backoff with full jitter, up to `max_attempts`;
//! - anything else -> dead-letter, class unknown, for a human to look at.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Severity, Verdict, export_policy};

/// Per-topic configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Schema versions this consumer understands.
    pub schema_versions: Vec<u32>,
    /// Deliveries before a transient failure is dead-lettered.
    pub max_attempts: u32,
    /// First retry delay in ms.
    pub base_ms: u64,
    /// Longest retry delay in ms.
    pub cap_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            schema_versions: vec![1, 2],
            max_attempts: 5,
            base_ms: 500,
            cap_ms: 30_000,
        }
    }
}

/// The part of a payment message the policy reads.
#[derive(Debug, Deserialize)]
struct Payment {
    schema_version: u32,
    amount: f64,
    #[serde(default)]
    currency: Option<String>,
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Payments {
    schema_versions: Vec<u32>,
    max_attempts: u32,
    backoff: Backoff,
}

impl Policy for Payments {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        if c.schema_versions.is_empty() {
            return Err("config.schema_versions: name at least one supported version".into());
        }
        if c.max_attempts == 0 {
            return Err("config.max_attempts: must be at least 1".into());
        }
        let backoff = Backoff::Exponential {
            base_ms: c.base_ms,
            cap_ms: c.cap_ms,
            jitter: Jitter::Full,
        };
        backoff.validate().map_err(|e| format!("config: {e}"))?;
        Ok(Payments {
            schema_versions: c.schema_versions,
            max_attempts: c.max_attempts,
            backoff,
        })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        let payment = match f.payload_json::<Payment>() {
            Ok(p) => p,
            Err(e) => {
                return Verdict::dead_letter(Class::Poison)
                    .because(format!("payload is not a payment: {e}"));
            }
        };
        if !self.schema_versions.contains(&payment.schema_version) {
            return Verdict::dead_letter(Class::Poison)
                .because(format!("unknown schema_version {}", payment.schema_version))
                .label("schema_version", payment.schema_version.to_string());
        }
        if payment.amount < 0.0 {
            return Verdict::dead_letter(Class::Permanent)
                .because(format!("negative amount {}", payment.amount))
                .alert(Severity::Critical)
                .label("currency", payment.currency.unwrap_or_default());
        }
        if f.kind_is("card.declined") {
            return Verdict::dead_letter(Class::Permanent).because("card declined");
        }
        if f.kind_is("gateway.5*") || f.kind_is("http.5*") || f.kind_is("*.timeout") {
            if f.attempt() >= self.max_attempts {
                return Verdict::dead_letter(Class::Exhausted)
                    .because(format!(
                        "payment gateway still failing after {} attempts",
                        f.attempt()
                    ))
                    .alert(Severity::Warning);
            }
            return Verdict::retry_after(self.backoff.delay_ms(f.attempt(), f.jitter_seed()))
                .because(format!("{} is transient", f.kind()));
        }
        Verdict::dead_letter(Class::Unknown)
            .because(format!("no payment rule for {}", f.kind()))
            .alert(Severity::Info)
    }
}

export_policy!(Payments);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_sdk::{Action, instantiate};

    fn pay(kind: &str, payload: &str) -> Failure {
        Failure::new(kind)
            .with_payload(payload.as_bytes().to_vec())
            .with_jitter_seed(3)
    }

    #[test]
    fn payload_rules() {
        let p: Payments = instantiate("{}").unwrap();
        let ok = r#"{"schema_version": 2, "amount": 10.5}"#;
        assert_eq!(
            p.decide(&pay("gateway.502", "not json")).class,
            Class::Poison
        );
        assert_eq!(
            p.decide(&pay("gateway.502", r#"{"schema_version": 9, "amount": 1}"#))
                .class,
            Class::Poison
        );
        let v = p.decide(&pay(
            "gateway.502",
            r#"{"schema_version": 1, "amount": -5, "currency": "EUR"}"#,
        ));
        assert_eq!((v.class, v.alert), (Class::Permanent, Severity::Critical));
        assert_eq!(p.decide(&pay("card.declined", ok)).class, Class::Permanent);
        let v = p.decide(&pay("gateway.502", ok));
        assert!(matches!(v.action, Action::Retry(d) if d <= 500), "{v:?}");
        assert_eq!(
            p.decide(&pay("payments.timeout", ok).with_attempt(5)).class,
            Class::Exhausted
        );
        assert_eq!(p.decide(&pay("ledger.mismatch", ok)).class, Class::Unknown);
    }

    #[test]
    fn config_is_checked() {
        assert!(
            instantiate::<Payments>(r#"{"schema_versions": []}"#)
                .unwrap_err()
                .contains("schema_versions")
        );
        assert!(
            instantiate::<Payments>(r#"{"base_ms": 10, "cap_ms": 1}"#)
                .unwrap_err()
                .contains("cap_ms")
        );
    }
}
