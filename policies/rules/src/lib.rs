//! `rules`: a table-driven retry/dead-letter policy.
//!
//! Error-kind patterns map to an outcome (retry with a backoff strategy and an attempt
//! limit, dead-letter with a class, or discard). The first matching rule wins; kinds no rule
//! matches take `default`. Explicit rejects and expired messages are dead-lettered before
//! any rule is consulted. With an empty config the rules are the standard error-type table (see
//! the README), so `{"max_attempts": 3}` is all a topic needs to retry 3 times.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Severity, Verdict, export_policy};

mod table;

pub use table::default_rules;

/// Per-topic configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Deliveries a message gets before a retrying rule gives up (1-based, this one
    /// included): 5 means retries after attempts 1-4 and dead-letter at 5.
    pub max_attempts: u32,
    /// The rules, first match wins. Omitted: the standard error-type table.
    pub rules: Vec<Rule>,
    /// What kinds no rule matches get (a rule without `match`).
    pub default: Rule,
    /// Wait at least as long as the consumer's `Retry-After` hint.
    pub honor_retry_after: bool,
    /// What happens to a message past its deadline: `dead_letter` (class expired) or
    /// `discard`.
    pub on_expired: OnExpired,
    /// Alert severity for explicit rejects.
    pub reject_alert: Severity,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_attempts: 5,
            rules: default_rules(),
            default: Rule {
                retry: Some(Backoff::Exponential {
                    base_ms: 1_000,
                    cap_ms: 60_000,
                    jitter: Jitter::Full,
                }),
                ..Rule::default()
            },
            honor_retry_after: true,
            on_expired: OnExpired::DeadLetter,
            reject_alert: Severity::Warning,
        }
    }
}

/// What to do with an expired message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExpired {
    /// Dead-letter it, class expired.
    DeadLetter,
    /// Discard it (audited by the host).
    Discard,
}

/// One rule: the kinds it matches and exactly one of `retry`, `dead_letter` or
/// `discard`, with optional refinements. The config's `default` has the same shape without
/// `match`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for logs and the `rule` label; defaults to the first pattern.
    #[serde(default)]
    pub name: Option<String>,
    /// Error-kind globs (`db.*`, `http.5*`, `*.timeout`).
    #[serde(rename = "match", default)]
    pub kinds: Vec<String>,
    /// Retry with this backoff.
    #[serde(default)]
    pub retry: Option<Backoff>,
    /// Overrides the config's `max_attempts` for this rule.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Dead-letter at once with this class.
    #[serde(default)]
    pub dead_letter: Option<Class>,
    /// Discard (audited) when true.
    #[serde(default)]
    pub discard: bool,
    /// Alert severity for this rule's terminal verdicts.
    #[serde(default)]
    pub alert: Option<Severity>,
}

/// What an outcome resolves to once validated.
#[derive(Debug, Clone)]
enum Then {
    Retry { backoff: Backoff, max_attempts: u32 },
    DeadLetter(Class),
    Discard,
}

#[derive(Debug, Clone)]
struct Compiled {
    name: String,
    kinds: Vec<String>,
    then: Then,
    alert: Option<Severity>,
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Rules {
    rules: Vec<Compiled>,
    default: Compiled,
    honor_retry_after: bool,
    on_expired: OnExpired,
    reject_alert: Severity,
}

fn compile(field: &str, o: Rule, max_attempts: u32) -> Result<Compiled, String> {
    let name = o
        .name
        .or_else(|| o.kinds.first().cloned())
        .unwrap_or_else(|| field.to_string());
    let then = match (o.retry, o.dead_letter, o.discard) {
        (Some(backoff), None, false) => {
            backoff
                .validate()
                .map_err(|e| format!("config.{field}.retry: {e}"))?;
            let max_attempts = o.max_attempts.unwrap_or(max_attempts);
            if max_attempts == 0 {
                return Err(format!("config.{field}.max_attempts: must be at least 1"));
            }
            Then::Retry {
                backoff,
                max_attempts,
            }
        }
        (None, Some(class), false) => Then::DeadLetter(class),
        (None, None, true) => Then::Discard,
        _ => {
            return Err(format!(
                "config.{field}: give exactly one of `retry`, `dead_letter` or `discard: true`"
            ));
        }
    };
    Ok(Compiled {
        name,
        kinds: o.kinds,
        then,
        alert: o.alert,
    })
}

impl Policy for Rules {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        if c.max_attempts == 0 {
            return Err("config.max_attempts: must be at least 1".into());
        }
        let mut rules = Vec::with_capacity(c.rules.len());
        for (i, rule) in c.rules.into_iter().enumerate() {
            if rule.kinds.is_empty() {
                return Err(format!(
                    "config.rules[{i}].match: needs at least one kind pattern"
                ));
            }
            rules.push(compile(&format!("rules[{i}]"), rule, c.max_attempts)?);
        }
        if !c.default.kinds.is_empty() {
            return Err(
                "config.default.match: the default applies to every kind; remove `match`".into(),
            );
        }
        let default = compile("default", c.default, c.max_attempts)?;
        Ok(Rules {
            rules,
            default,
            honor_retry_after: c.honor_retry_after,
            on_expired: c.on_expired,
            reject_alert: c.reject_alert,
        })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        if f.rejected() {
            return Verdict::dead_letter(Class::Rejected)
                .because("the consumer rejected the message")
                .alert(self.reject_alert);
        }
        if f.is_expired() {
            let v = match self.on_expired {
                OnExpired::DeadLetter => Verdict::dead_letter(Class::Expired),
                OnExpired::Discard => Verdict::discard(Class::Expired),
            };
            return v.because("the message passed its deadline");
        }
        let rule = self
            .rules
            .iter()
            .find(|r| r.kinds.iter().any(|k| f.kind_is(k)))
            .unwrap_or(&self.default);
        let verdict = match &rule.then {
            Then::Retry { max_attempts, .. } if f.attempt() >= *max_attempts => {
                Verdict::dead_letter(Class::Exhausted)
                    .because(format!(
                        "{} failed {} times (limit {max_attempts})",
                        f.kind(),
                        f.attempt()
                    ))
                    .alert(rule.alert.unwrap_or(Severity::Warning))
            }
            Then::Retry { backoff, .. } => {
                let mut delay = backoff.delay_ms(f.attempt(), f.jitter_seed());
                if self.honor_retry_after {
                    delay = delay.max(f.retry_after_ms().unwrap_or(0));
                }
                Verdict::retry_after(delay).because(format!("{} is transient", f.kind()))
            }
            Then::DeadLetter(class) => Verdict::dead_letter(*class)
                .because(format!("{} is not retryable", f.kind()))
                .alert(rule.alert.unwrap_or(Severity::None)),
            Then::Discard => Verdict::discard(Class::Permanent)
                .because(format!("{} is discarded by rule", f.kind()))
                .alert(rule.alert.unwrap_or(Severity::None)),
        };
        verdict.label("rule", rule.name.as_str())
    }
}

export_policy!(Rules);

#[cfg(test)]
mod tests;
