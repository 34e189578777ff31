//! The dead-letter envelope: the original message and everything an operator needs to
//! understand it, with field names operators of DLQ tooling recognise (`original`, `attempts`,
//! `errors`, `consumerGroup`, `firstFailedAt`).
//!
//! ```json
//! {"original": {"topic": "orders", "id": "m-1", "headers": {}, "payload": {"order": 7}},
//!  "attempts": 5,
//!  "errors": [{"at": "2026-10-13T00:01:00.000Z", "atMs": 1791849660000,
//!              "kind": "http.503", "message": "upstream unavailable"}],
//!  "consumerGroup": "verdict", "firstFailedAt": "...", "lastFailedAt": "...",
//!  "verdict": {"action": "dead-letter", "class": "exhausted", "reason": "...",
//!              "alert": "warning", "labels": {"rule": "transient"}},
//!  "policy": {"name": "rules", "version": "0.1.0", "sha256": "...", "generation": 3,
//!             "fallback": null},
//!  "dlq": "orders.DLQ", "gateway": "gw-1", "deadLetteredAt": "...",
//!  "retryBudget": {"holds": 4, "heldMs": 21500}}
//! ```
//!
//! `retryBudget` is there only when the route's retry budget held the message's retries;
//! `trace` only when the gateway exports traces: `{"creation": "00-...", "deadLetter":
//! "00-..."}`, the `traceparent` the message was created in (also among its headers) and the
//! one of the span that wrote the dead letter, which a replay's trace links to.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use verdict_registry::DlqFormat;
use verdict_runtime::{AttemptRecord, Decision};

/// A dead letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// The message as published.
    pub original: Original,
    /// Attempts made.
    pub attempts: u32,
    /// Every attempt's error, oldest first.
    pub errors: Vec<ErrorEntry>,
    /// The consumer group.
    pub consumer_group: String,
    /// First failure (RFC 3339).
    pub first_failed_at: String,
    /// Last failure (RFC 3339).
    pub last_failed_at: String,
    /// The final verdict.
    pub verdict: VerdictEntry,
    /// Who decided it.
    pub policy: PolicyEntry,
    /// The DLQ it was written to.
    pub dlq: String,
    /// The gateway instance.
    pub gateway: String,
    /// When (RFC 3339).
    pub dead_lettered_at: String,
    /// How often its retries waited for the route's retry budget, as the gateway that
    /// dead-lettered it saw them; absent when they never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<BudgetHolds>,
    /// The trace contexts a replay links to; absent when the gateway exports no traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceEntry>,
}

/// Where a dead letter sits in the traces, as W3C `traceparent` values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEntry {
    /// The context the message was created in (its producer's `traceparent`), when it
    /// carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation: Option<String>,
    /// The span that wrote the dead letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<String>,
}

/// A message's waits for its route's retry budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetHolds {
    /// Times a retry was due and the budget had no room.
    pub holds: u32,
    /// The waits those holds asked for, in all, in milliseconds.
    pub held_ms: u64,
}

/// The original message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Original {
    /// Topic.
    pub topic: String,
    /// Message id.
    pub id: String,
    /// Headers.
    pub headers: BTreeMap<String, String>,
    /// The payload: JSON when it parses as JSON, else text when UTF-8.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub payload: Option<serde_json::Value>,
    /// The payload in base64 when it is neither JSON nor UTF-8.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub payload_base64: Option<String>,
    /// Content type.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub content_type: Option<String>,
    /// Set instead of `payload`/`payloadBase64` when the whole envelope would not fit in
    /// one message of the DLQ's broker: the dead letter is written without the payload
    /// (and says so) rather than not at all, which would deliver the message again and
    /// again.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub payload_omitted: Option<OmittedPayload>,
}

/// What is kept of a payload an envelope could not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OmittedPayload {
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256 (hex), to find it in the producer's records.
    pub sha256: String,
    /// Why it was left out.
    pub reason: String,
}

/// One attempt's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorEntry {
    /// When (RFC 3339).
    pub at: String,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// Error kind.
    pub kind: String,
    /// Error message.
    pub message: String,
}

/// The final verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictEntry {
    /// `dead-letter`.
    pub action: String,
    /// Class.
    pub class: String,
    /// Reason.
    pub reason: String,
    /// Alert severity.
    pub alert: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// Provenance of the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEntry {
    /// Policy name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Component sha256.
    pub sha256: String,
    /// Registry generation.
    pub generation: Option<u64>,
    /// The fault, when the fallback verdict applied.
    pub fallback: Option<String>,
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: u64) -> String {
    // Timestamps may come from outside (a broker's, a producer's); past the year 9999 there
    // is no RFC 3339 form, so they are shown as its last instant (the `atMs` fields keep the
    // number as it was).
    const LAST_MS: u64 = 253_402_300_799_999;
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms.min(LAST_MS)))
        .to_string()
}

/// The original message's fields, for [`Envelope::new`].
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Id.
    pub id: &'a str,
    /// Headers.
    pub headers: &'a BTreeMap<String, String>,
    /// Payload.
    pub payload: &'a [u8],
    /// Content type.
    pub content_type: Option<&'a str>,
}

/// Where and by whom, for [`Envelope::new`].
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The DLQ's name.
    pub dlq: &'a str,
    /// Consumer group.
    pub consumer_group: &'a str,
    /// Gateway instance.
    pub gateway: &'a str,
    /// Now.
    pub now_ms: u64,
}

impl Envelope {
    /// The envelope of `message`, dead-lettered by `decision` after `history` (every failed
    /// attempt, this one last).
    pub fn new(
        message: MessageRef<'_>,
        history: &[AttemptRecord],
        decision: &Decision,
        ctx: Context<'_>,
    ) -> Envelope {
        let (payload, payload_base64) = payload_fields(message.payload);
        let errors: Vec<ErrorEntry> = history
            .iter()
            .map(|a| ErrorEntry {
                at: rfc3339(a.at_ms),
                at_ms: a.at_ms,
                kind: a.kind.clone(),
                message: a.message.clone(),
            })
            .collect();
        let first = history.first().map_or(ctx.now_ms, |a| a.at_ms);
        let last = history.last().map_or(ctx.now_ms, |a| a.at_ms);
        let v = &decision.verdict;
        let name = |value: serde_json::Value| value.as_str().unwrap_or_default().to_string();
        Envelope {
            original: Original {
                topic: message.topic.into(),
                id: message.id.into(),
                headers: message.headers.clone(),
                payload,
                payload_base64,
                content_type: message.content_type.map(String::from),
                payload_omitted: None,
            },
            attempts: u32::try_from(history.len()).unwrap_or(u32::MAX),
            errors,
            consumer_group: ctx.consumer_group.into(),
            first_failed_at: rfc3339(first),
            last_failed_at: rfc3339(last),
            verdict: VerdictEntry {
                action: "dead-letter".into(),
                class: verdict_runtime::class_name(v.class).into(),
                reason: v.reason.clone(),
                alert: name(serde_json::to_value(v.alert).unwrap_or_default()),
                labels: v
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            policy: PolicyEntry {
                name: decision.provenance.name.clone(),
                version: decision.provenance.version.clone(),
                sha256: decision.provenance.sha256.clone(),
                generation: decision.generation,
                fallback: decision.fallback.as_ref().map(ToString::to_string),
            },
            dlq: ctx.dlq.into(),
            gateway: ctx.gateway.into(),
            dead_lettered_at: rfc3339(ctx.now_ms),
            retry_budget: None,
            trace: None,
        }
    }

    /// Encode in `format`.
    pub fn encode(&self, format: DlqFormat) -> Result<Vec<u8>, String> {
        match format {
            DlqFormat::Json => serde_json::to_vec(self).map_err(|e| e.to_string()),
            DlqFormat::Msgpack => rmp_serde::to_vec_named(self).map_err(|e| e.to_string()),
        }
    }
}

/// `envelope` (encoded as `format` says) again without its original payload, which was
/// `payload`: for a broker whose messages cannot hold it. `reason` says why.
pub fn omit_payload(
    format: &str,
    envelope: &[u8],
    payload: &[u8],
    reason: &str,
) -> Result<Vec<u8>, String> {
    use sha2::{Digest, Sha256};
    let mut decoded: Envelope = match format {
        "json" => serde_json::from_slice(envelope).map_err(|e| e.to_string())?,
        "msgpack" => from_msgpack(envelope)?,
        other => return Err(format!("unknown envelope format `{other}`")),
    };
    decoded.original.payload = None;
    decoded.original.payload_base64 = None;
    decoded.original.payload_omitted = Some(OmittedPayload {
        bytes: payload.len() as u64,
        sha256: verdict_runtime::digest::hex(&Sha256::digest(payload)),
        reason: reason.to_string(),
    });
    match format {
        "msgpack" => decoded.encode(DlqFormat::Msgpack),
        _ => decoded.encode(DlqFormat::Json),
    }
}

/// The stored format's name.
pub fn format_name(format: DlqFormat) -> &'static str {
    match format {
        DlqFormat::Json => "json",
        DlqFormat::Msgpack => "msgpack",
    }
}

/// The deepest nesting a MessagePack envelope may have. serde_json reads at most 128 levels,
/// so no envelope the gateway writes comes near it; rmp-serde's own limit (1,024) lets a
/// dead letter put in a broker's DLQ by anyone nest deep enough to overflow a thread's
/// stack (2 MiB: ~700 levels in a debug build), which aborts the whole process.
const MAX_MSGPACK_DEPTH: usize = 160;

/// A MessagePack envelope, nested at most [`MAX_MSGPACK_DEPTH`] deep.
fn from_msgpack(bytes: &[u8]) -> Result<Envelope, String> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(MAX_MSGPACK_DEPTH);
    Envelope::deserialize(&mut de).map_err(|e| e.to_string())
}

/// Decode a stored envelope, whatever its format. Anything that is not an envelope - bytes
/// of neither format, JSON of another shape, a format this gateway does not know - is an
/// error saying what was wrong.
pub fn decode(format: &str, bytes: &[u8]) -> Result<Envelope, String> {
    match format {
        "json" => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        "msgpack" => from_msgpack(bytes),
        other => Err(format!("unknown envelope format `{other}`")),
    }
}

impl Original {
    /// The payload bytes recorded here, for a replay: base64 decoded, text as it was, JSON
    /// serialised again (equal as JSON, not byte for byte; a payload that was a bare JSON
    /// string comes back as its text). A `payloadBase64` that is not base64 replays empty.
    pub fn payload_bytes(&self) -> Vec<u8> {
        if let Some(b64) = &self.payload_base64 {
            return base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default();
        }
        match &self.payload {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::String(text)) => text.clone().into_bytes(),
            Some(other) => serde_json::to_vec(other).unwrap_or_default(),
        }
    }
}

fn payload_fields(bytes: &[u8]) -> (Option<serde_json::Value>, Option<String>) {
    // A payload that is JSON `null` is kept as its text: `"payload": null` reads back as no
    // payload, and its replay would be empty.
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes)
        && !value.is_null()
    {
        return (Some(value), None);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(serde_json::Value::String(text.into())), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_past_the_year_9999_are_formatted_not_panicked_on() {
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn replays_get_the_payload_back() {
        // `null` too (found by `tests/fuzz.rs`: it came back empty).
        for bytes in [
            &br#"{"a":[1,2]}"#[..],
            b"plain text",
            &[0xff, 0x00, 0x9f],
            b"null",
            b" null ",
        ] {
            let (payload, payload_base64) = payload_fields(bytes);
            let original = Original {
                topic: String::new(),
                id: String::new(),
                headers: BTreeMap::new(),
                payload,
                payload_base64,
                content_type: None,
                payload_omitted: None,
            };
            assert_eq!(original.payload_bytes(), bytes);
        }
    }

    #[test]
    fn payloads_are_json_text_or_base64() {
        assert_eq!(
            payload_fields(br#"{"a":1}"#),
            (Some(serde_json::json!({"a": 1})), None)
        );
        assert_eq!(
            payload_fields(b"plain text"),
            (Some(serde_json::Value::String("plain text".into())), None)
        );
        assert_eq!(payload_fields(&[0xff, 0x00]), (None, Some("/wA=".into())));
    }

    #[test]
    fn an_envelope_without_its_payload_keeps_everything_else_and_says_why() {
        let payload = vec![0xffu8; 4_096];
        let envelope = serde_json::json!({
            "original": {"topic": "t", "id": "m-1", "headers": {"a": "b"},
                         "payloadBase64": "////"},
            "attempts": 1, "errors": [], "consumerGroup": "g",
            "firstFailedAt": "x", "lastFailedAt": "x",
            "verdict": {"action": "dead-letter", "class": "poison", "reason": "r",
                        "alert": "warning", "labels": {}},
            "policy": {"name": "rules", "version": "1", "sha256": "s", "generation": 1,
                       "fallback": null},
            "dlq": "t.DLQ", "gateway": "gw", "deadLetteredAt": "x"
        });
        let bytes = serde_json::to_vec(&envelope).unwrap();
        let out = omit_payload("json", &bytes, &payload, "too big").unwrap();
        let out = decode("json", &out).unwrap();
        assert_eq!(out.original.payload_base64, None);
        let omitted = out.original.payload_omitted.unwrap();
        assert_eq!(omitted.bytes, 4_096);
        assert_eq!(omitted.reason, "too big");
        assert_eq!(omitted.sha256.len(), 64);
        assert_eq!(out.policy.name, "rules");
        assert_eq!(out.original.headers["a"], "b");
        let packed: Envelope = serde_json::from_value(envelope).unwrap();
        let packed = packed.encode(DlqFormat::Msgpack).unwrap();
        let out = omit_payload("msgpack", &packed, &payload, "too big").unwrap();
        let omitted = decode("msgpack", &out).unwrap().original.payload_omitted;
        assert_eq!(omitted.map(|o| o.bytes), Some(4_096));
        assert!(omit_payload("yaml", &bytes, &payload, "x").is_err());
    }

    #[test]
    fn a_msgpack_envelope_decodes_to_the_same_envelope_and_json() {
        let envelope = Envelope {
            original: Original {
                topic: "orders".into(),
                id: "m-1".into(),
                headers: BTreeMap::from([("tenant".into(), "eu".into())]),
                payload: Some(serde_json::json!({"order": 1})),
                payload_base64: None,
                content_type: None,
                payload_omitted: None,
            },
            attempts: 2,
            errors: vec![ErrorEntry {
                at: rfc3339(0),
                at_ms: 0,
                kind: "http.503".into(),
                message: "busy".into(),
            }],
            consumer_group: "g".into(),
            first_failed_at: rfc3339(0),
            last_failed_at: rfc3339(0),
            verdict: VerdictEntry {
                action: "dead-letter".into(),
                class: "exhausted".into(),
                reason: "r".into(),
                alert: "warning".into(),
                labels: BTreeMap::new(),
            },
            policy: PolicyEntry {
                name: "rules".into(),
                version: "0.1.0".into(),
                sha256: "ab".into(),
                generation: Some(3),
                fallback: None,
            },
            dlq: "orders.DLQ".into(),
            gateway: "gw".into(),
            dead_lettered_at: rfc3339(0),
            retry_budget: Some(BudgetHolds {
                holds: 3,
                held_ms: 7_500,
            }),
            trace: Some(TraceEntry {
                creation: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
                dead_letter: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01".into()),
            }),
        };
        let json = decode("json", &envelope.encode(DlqFormat::Json).unwrap()).unwrap();
        let msgpack = decode("msgpack", &envelope.encode(DlqFormat::Msgpack).unwrap()).unwrap();
        assert_eq!(json, envelope);
        assert_eq!(msgpack, envelope);
        // The wire form's names are the documented camelCase ones.
        let json = serde_json::to_value(&json).unwrap();
        assert_eq!(json["firstFailedAt"], "1970-01-01T00:00:00.000Z");
        assert_eq!(json["consumerGroup"], "g");
        assert!(decode("yaml", b"").unwrap_err().contains("yaml"));
        assert!(decode("msgpack", b"\xc1").is_err());
        // JSON of another shape is not an envelope, and the error says what is missing.
        let e = decode("json", br#"{"original": {}}"#).unwrap_err();
        assert!(e.contains("missing field"), "{e}");
    }

    #[test]
    fn a_deeply_nested_msgpack_envelope_is_refused_not_a_stack_overflow() {
        // An envelope whose payload is 1,000 nested one-element arrays (0x91 ... 0x01), as
        // anyone who can publish to a DLQ may write one: before, rmp-serde's limit of 1,024
        // let it through and decoding it overflowed the stack (found by `tests/fuzz.rs`).
        let envelope: Envelope = serde_json::from_value(serde_json::json!({
            "original": {"topic": "t", "id": "m-1", "headers": {}, "payload": 0},
            "attempts": 1, "errors": [], "consumerGroup": "g",
            "firstFailedAt": "x", "lastFailedAt": "x",
            "verdict": {"action": "dead-letter", "class": "poison", "reason": "r",
                        "alert": "warning", "labels": {}},
            "policy": {"name": "rules", "version": "1", "sha256": "s", "generation": 1,
                       "fallback": null},
            "dlq": "t.DLQ", "gateway": "gw", "deadLetteredAt": "x"
        }))
        .unwrap();
        let packed = envelope.encode(DlqFormat::Msgpack).unwrap();
        let needle = b"\xa7payload\x00";
        let at = packed
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
            + needle.len()
            - 1;
        let nested = |depth: usize| {
            let mut bytes = packed[..at].to_vec();
            bytes.extend(std::iter::repeat_n(0x91u8, depth));
            bytes.push(0x01);
            bytes.extend_from_slice(&packed[at + 1..]);
            bytes
        };
        let e = decode("msgpack", &nested(1_000)).unwrap_err();
        assert!(e.contains("depth"), "{e}");
        assert!(omit_payload("msgpack", &nested(1_000), b"", "x").is_err());
        // As deep as serde_json reads: still an envelope.
        let envelope = decode("msgpack", &nested(126)).unwrap();
        assert_eq!(envelope.original.payload_bytes().len(), 126 * 2 + 1);
    }
}
