//! `[console]`: how long an operator's console login lasts, and what an operator may
//! change in a dead letter before resubmitting it.

use schemars::JsonSchema;
use serde::Deserialize;

/// The seconds a console login lasts without use, unless the config says otherwise.
pub const DEFAULT_SESSION_IDLE_S: u64 = 1_800;

/// The operator console: its logins, and repairs of dead letters (`POST
/// /v1/dlq/{seq}/repair` or the console's form) - editing a payload or headers and
/// resubmitting the message. Repairs are off unless enabled here - a repaired message is
/// delivered as the operator wrote it - and never without the admin token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Allow repairs on every topic.
    pub allow_edit: bool,
    /// Allow repairs on these topics (exact names) even with `allow_edit` off.
    pub allow_edit_topics: Vec<String>,
    /// Seconds a console login lasts without use; the next action after that asks for the
    /// token again. At least 1.
    pub session_idle_s: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            allow_edit: false,
            allow_edit_topics: Vec::new(),
            session_idle_s: DEFAULT_SESSION_IDLE_S,
        }
    }
}

impl ConsoleConfig {
    /// Whether a dead letter of `topic` may be repaired.
    pub fn may_edit(&self, topic: &str) -> bool {
        self.allow_edit || self.allow_edit_topics.iter().any(|t| t == topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_is_off_unless_allowed_everywhere_or_for_the_topic() {
        assert!(!ConsoleConfig::default().may_edit("orders"));
        let some = ConsoleConfig {
            allow_edit_topics: vec!["orders".into()],
            ..ConsoleConfig::default()
        };
        assert!(some.may_edit("orders") && !some.may_edit("orders.eu"));
        let all = ConsoleConfig {
            allow_edit: true,
            ..ConsoleConfig::default()
        };
        assert!(all.may_edit("anything"));
    }
}
