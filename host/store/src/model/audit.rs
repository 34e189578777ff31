//! An audit record: what the gateway did to a message outside a delivery's normal path
//! (discarded on a policy's word, dead-letter replayed or discarded by an operator, a
//! replayed message delivered). The store keeps these as rows; the brokers as JSON messages
//! on an audit stream or queue, in this one shape.

use serde::{Deserialize, Serialize};

/// One audit record, as JSON on a broker's audit stream or queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// What happened: `discarded`, `replayed`, `replay-delivered`, ...
    pub event: String,
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// The message.
    pub message_id: String,
    /// Its topic.
    pub topic: String,
    /// The last error's kind, where there was one.
    #[serde(default)]
    pub kind: String,
    /// The reason given, or the replay's token for `replay-delivered`.
    #[serde(default)]
    pub detail: String,
    /// The gateway instance that wrote it, where the source records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

impl AuditRecord {
    /// A record of `event` for `message_id` on `topic`, now.
    pub fn new(event: &str, message_id: &str, topic: &str, at_ms: u64) -> AuditRecord {
        AuditRecord {
            event: event.to_string(),
            at_ms,
            message_id: message_id.to_string(),
            topic: topic.to_string(),
            kind: String::new(),
            detail: String::new(),
            gateway: None,
        }
    }

    /// The same with the error kind.
    #[must_use]
    pub fn kind(mut self, kind: &str) -> AuditRecord {
        self.kind = kind.to_string();
        self
    }

    /// The same with the detail.
    #[must_use]
    pub fn detail(mut self, detail: &str) -> AuditRecord {
        self.detail = detail.to_string();
        self
    }

    /// The same, written by `gateway`.
    #[must_use]
    pub fn gateway(mut self, gateway: &str) -> AuditRecord {
        self.gateway = Some(gateway.to_string());
        self
    }

    /// Whether this records the arrival of a message replayed with `token`.
    pub fn is_replay_delivered(&self, token: &str) -> bool {
        self.event == "replay-delivered" && self.detail == token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_the_json_the_audit_streams_and_queues_carry() {
        let record = AuditRecord::new("discarded", "m-1", "orders", 1_700)
            .kind("schema.bad")
            .detail("policy: poison");
        assert_eq!(
            serde_json::to_value(&record).unwrap(),
            serde_json::json!({"event": "discarded", "atMs": 1_700, "messageId": "m-1",
                "topic": "orders", "kind": "schema.bad", "detail": "policy: poison"})
        );
        let nats = record.clone().gateway("gw-a");
        assert_eq!(serde_json::to_value(&nats).unwrap()["gateway"], "gw-a");
        // A replay's arrival, as an older gateway wrote it (no kind): read, and recognised
        // only for its own token.
        let arrived: AuditRecord = serde_json::from_str(
            r#"{"event": "replay-delivered", "atMs": 1, "messageId": "m-2", "topic": "t", "detail": "tok"}"#,
        )
        .unwrap();
        assert!(arrived.is_replay_delivered("tok"));
        assert!(!arrived.is_replay_delivered("other"));
        assert!(!record.is_replay_delivered("policy: poison"));
    }
}
