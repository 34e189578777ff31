//! The policy's answer: an action, a class, a reason, an alert and labels.

use serde::{Deserialize, Serialize};

/// What to do with the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "type", content = "ms")]
pub enum Action {
    /// Redeliver after this many milliseconds (0 means now); spends one attempt.
    Retry(u64),
    /// Redeliver after this many milliseconds without spending an attempt (rate limits, an
    /// open circuit, a downstream known to be down). The host bounds how often and how long.
    Delay(u64),
    /// Stop the whole route for this many milliseconds: what failed this message fails
    /// every message of the route (a dependency down for all), so the route stops taking
    /// messages instead of deferring each one. Deliveries in flight finish; this message
    /// is redelivered after the pause without spending an attempt (it counts as a
    /// deferral, as a delay does, so the host's deferral bounds end a pause that never
    /// lifts); when the pause ends one probe delivery decides between resuming and
    /// pausing again. Contract 0.2 and later.
    Pause(u64),
    /// Move the message to its dead-letter queue with its whole history.
    DeadLetter,
    /// Drop the message; the host keeps an audit record with the reason.
    Discard,
}

impl Action {
    /// Every action's name, as [`Action::name`] gives it.
    pub const NAMES: [&'static str; 5] = ["retry", "delay", "pause", "dead-letter", "discard"];

    /// The action's name in metrics, reports and JSON (`retry`, `delay`, `pause`,
    /// `dead-letter`, `discard`).
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }

    /// The action's position in [`Action::NAMES`]: an index into per-action counters.
    pub fn index(&self) -> usize {
        match self {
            Action::Retry(_) => 0,
            Action::Delay(_) => 1,
            Action::Pause(_) => 2,
            Action::DeadLetter => 3,
            Action::Discard => 4,
        }
    }
}

/// Why the message failed, in the vocabulary shared by alerts, metrics and envelopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Will probably succeed later: timeouts, 503, rate limits, deadlocks.
    Transient,
    /// Will never succeed: a validation or business rule failure, a missing entity, auth.
    Permanent,
    /// The message itself is broken: does not parse, unknown schema version.
    Poison,
    /// A transient failure that kept failing past its attempt limit.
    Exhausted,
    /// The message outlived its TTL or business deadline.
    Expired,
    /// The consumer explicitly asked for the message to be dead-lettered.
    Rejected,
    /// The policy cannot tell.
    Unknown,
}

/// How loudly operators should hear about a verdict.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// No alert.
    #[default]
    None,
    /// Worth a look.
    Info,
    /// Someone should look today.
    Warning,
    /// Someone should look now.
    Critical,
}

/// A policy's verdict on one failed delivery.
///
/// Build one with a constructor for the action and refine it with the chainable setters:
///
/// ```
/// use verdict_types::{Class, Severity, Verdict};
///
/// let v = Verdict::dead_letter(Class::Permanent)
///     .because("amount is negative")
///     .alert(Severity::Critical)
///     .label("rule", "negative-amount");
/// assert_eq!(v.labels, vec![("rule".to_string(), "negative-amount".to_string())]);
/// let json = serde_json::to_value(&v).unwrap();
/// assert_eq!(json["labels"], serde_json::json!([{"key": "rule", "value": "negative-amount"}]));
/// assert_eq!(json["action"], serde_json::json!({"type": "dead-letter"}));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// What to do.
    pub action: Action,
    /// Why the message failed.
    pub class: Class,
    /// A short explanation for humans.
    pub reason: String,
    /// How loudly to alert.
    pub alert: Severity,
    /// Context for the dead-letter envelope and logs, in order. In JSON a list of
    /// `{"key": ..., "value": ...}` objects.
    #[serde(with = "labels_json")]
    pub labels: Vec<(String, String)>,
}

/// Labels as `[{"key": "rule", "value": "transient"}]`: readable, order kept, duplicates
/// allowed (a map would lose both).
mod labels_json {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Label<S> {
        key: S,
        value: S,
    }

    pub(super) fn serialize<S: Serializer>(
        labels: &[(String, String)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(labels.iter().map(|(key, value)| Label { key, value }))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        let labels = Vec::<Label<String>>::deserialize(d)?;
        Ok(labels.into_iter().map(|l| (l.key, l.value)).collect())
    }
}

impl Verdict {
    fn new(action: Action, class: Class) -> Self {
        Verdict {
            action,
            class,
            reason: String::new(),
            alert: Severity::None,
            labels: Vec::new(),
        }
    }

    /// Retry after `ms` milliseconds, spending one attempt. Class: transient.
    pub fn retry_after(ms: u64) -> Self {
        Self::new(Action::Retry(ms), Class::Transient)
    }

    /// Retry at once, spending one attempt. Class: transient.
    pub fn retry_now() -> Self {
        Self::retry_after(0)
    }

    /// Redeliver after `ms` milliseconds without spending an attempt. Class: transient.
    pub fn delay(ms: u64) -> Self {
        Self::new(Action::Delay(ms), Class::Transient)
    }

    /// Pause the whole route for `ms` milliseconds (see [`Action::Pause`]); this message is
    /// redelivered after it without spending an attempt. Class: transient.
    pub fn pause(ms: u64) -> Self {
        Self::new(Action::Pause(ms), Class::Transient)
    }

    /// Dead-letter the message with the given class.
    pub fn dead_letter(class: Class) -> Self {
        Self::new(Action::DeadLetter, class)
    }

    /// Drop the message (the host audits it). Give a reason with [`Verdict::because`].
    pub fn discard(class: Class) -> Self {
        Self::new(Action::Discard, class)
    }

    /// Set the reason operators read.
    #[must_use]
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// Set the alert severity.
    #[must_use]
    pub fn alert(mut self, severity: Severity) -> Self {
        self.alert = severity;
        self
    }

    /// Override the class.
    #[must_use]
    pub fn class(mut self, class: Class) -> Self {
        self.class = class;
        self
    }

    /// Add a key/value label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }

    /// When the message is delivered again (a retry, a delay or a pause), `None` for the
    /// terminal actions.
    pub fn delay_ms(&self) -> Option<u64> {
        match self.action {
            Action::Retry(ms) | Action::Delay(ms) | Action::Pause(ms) => Some(ms),
            Action::DeadLetter | Action::Discard => None,
        }
    }
}
