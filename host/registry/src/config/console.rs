//! `[console]`: what an operator may change in a dead letter before resubmitting it.

use schemars::JsonSchema;
use serde::Deserialize;

/// Repairs of dead letters (`POST /v1/dlq/{seq}/repair`): editing a payload or headers and
/// resubmitting the message. Off unless enabled here - a repaired message is delivered as
/// the operator wrote it - and never without the admin token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Allow repairs on every topic.
    pub allow_edit: bool,
    /// Allow repairs on these topics (exact names) even with `allow_edit` off.
    pub allow_edit_topics: Vec<String>,
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
            allow_edit: false,
            allow_edit_topics: vec!["orders".into()],
        };
        assert!(some.may_edit("orders") && !some.may_edit("orders.eu"));
        let all = ConsoleConfig {
            allow_edit: true,
            ..ConsoleConfig::default()
        };
        assert!(all.may_edit("anything"));
    }
}
