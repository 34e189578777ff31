//! Fuzz and property targets of the dead-letter envelope: any bytes decoded (JSON and
//! MessagePack), envelopes round-tripped, and the letter headers every broker DLQ carries.
//! Cases per target: `VERDICT_FUZZ_CASES` (see the `verdict-fuzz` crate).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};
use verdict_fuzz::*;
use verdict_registry::DlqFormat;
use verdict_runtime::{Action, AttemptRecord, Class, Decision, Provenance, Severity, Verdict};
use verdict_store::envelope::{
    self, Context, Envelope, ErrorEntry, MessageRef, Original, PolicyEntry, VerdictEntry,
};
use verdict_store::model::{DeadLetter, Delivery};

// ---------------------------------------------------------------------------------------
// 5. Dead-letter envelopes (JSON and MessagePack).

fn headers_map() -> BoxedStrategy<BTreeMap<String, String>> {
    prop::collection::btree_map(short_string(12), nasty_string(24), 0..4).boxed()
}

fn envelope() -> BoxedStrategy<Envelope> {
    let original = (
        nasty_string(16),
        nasty_string(16),
        headers_map(),
        prop::option::of(json_value()),
        prop::option::of(short_string(16)),
        prop::option::of(short_string(16)),
    )
        .prop_map(
            |(topic, id, headers, payload, payload_base64, content_type)| {
                // Built from its JSON form: fields added later default as they do when read.
                let mut original = json!({"topic": topic, "id": id, "headers": headers});
                // A null payload is written as `"payload": null` and read back as none.
                if let Some(p) = payload.filter(|p| !p.is_null()) {
                    original["payload"] = p;
                }
                if let Some(b) = payload_base64 {
                    original["payloadBase64"] = Value::String(b);
                }
                if let Some(c) = content_type {
                    original["contentType"] = Value::String(c);
                }
                serde_json::from_value::<Original>(original).expect("an original")
            },
        );
    let error = (
        short_string(12),
        any::<u64>(),
        short_string(12),
        nasty_string(24),
    )
        .prop_map(|(at, at_ms, kind, message)| ErrorEntry {
            at,
            at_ms,
            kind,
            message,
        });
    let verdict = (
        short_string(8),
        short_string(8),
        nasty_string(24),
        short_string(8),
        headers_map(),
    )
        .prop_map(|(action, class, reason, alert, labels)| VerdictEntry {
            action,
            class,
            reason,
            alert,
            labels,
        });
    let policy = (
        short_string(8),
        short_string(8),
        short_string(8),
        prop::option::of(any::<u64>()),
        prop::option::of(nasty_string(16)),
    )
        .prop_map(
            |(name, version, sha256, generation, fallback)| PolicyEntry {
                name,
                version,
                sha256,
                generation,
                fallback,
            },
        );
    (
        original,
        any::<u32>(),
        prop::collection::vec(error, 0..4),
        (short_string(8), short_string(8), short_string(8)),
        verdict,
        policy,
        (short_string(8), short_string(8), short_string(8)),
    )
        .prop_map(
            |(
                original,
                attempts,
                errors,
                (consumer_group, first, last),
                verdict,
                policy,
                (dlq, gateway, at),
            )| Envelope {
                original,
                attempts,
                errors,
                consumer_group,
                first_failed_at: first,
                last_failed_at: last,
                verdict,
                policy,
                dlq,
                gateway,
                dead_lettered_at: at,
                retry_budget: (attempts % 3 == 0).then_some(envelope::BudgetHolds {
                    holds: attempts,
                    held_ms: u64::from(attempts) * 1_000,
                }),
                trace: (attempts % 2 == 0).then(|| envelope::TraceEntry {
                    creation: None,
                    dead_letter: Some(format!("00-{:032x}-{:016x}-01", attempts + 1, attempts + 1)),
                }),
            },
        )
        .boxed()
}

/// Bytes for `envelope::decode`: arbitrary, a mutated encoded envelope, or an envelope
/// whose payload nests deeper than the decoders allow.
fn envelope_bytes() -> BoxedStrategy<(String, Vec<u8>)> {
    let format = prop::sample::select(&["json", "msgpack", "yaml", ""][..]).prop_map(String::from);
    let encoded = (envelope(), any::<bool>(), edits(JSON_TOKENS)).prop_map(|(e, packed, edits)| {
        let format = if packed {
            DlqFormat::Msgpack
        } else {
            DlqFormat::Json
        };
        let bytes = e.encode(format).expect("encodes");
        (
            envelope::format_name(format).to_string(),
            mutate(&bytes, &edits),
        )
    });
    let deep = (envelope(), any::<bool>(), 1..1_100usize).prop_map(|(mut e, packed, depth)| {
        // Built by hand: encoding a deep value recurses as deep as decoding it.
        e.original.payload = Some(json!(0));
        if packed {
            let bytes = e.encode(DlqFormat::Msgpack).expect("encodes");
            let needle = b"\xa7payload\x00";
            let at = bytes
                .windows(needle.len())
                .position(|w| w == needle)
                .expect("a payload")
                + needle.len()
                - 1;
            let mut nested = bytes[..at].to_vec();
            nested.extend(std::iter::repeat_n(0x91u8, depth));
            nested.push(0x01);
            nested.extend_from_slice(&bytes[at + 1..]);
            ("msgpack".to_string(), nested)
        } else {
            let text = serde_json::to_string(&e).expect("encodes");
            let nested = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let text = text.replacen("\"payload\":0", &format!("\"payload\":{nested}"), 1);
            ("json".to_string(), text.into_bytes())
        }
    });
    prop_oneof![
        3 => (format, any_bytes()),
        4 => encoded,
        1 => deep,
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// `envelope::decode`: never panics (nor overflows the stack on deep nesting); an
    /// unknown format is an error naming it; a MessagePack envelope that decodes is an
    /// envelope again and re-encodes to the same JSON; the replay payload of whatever
    /// decodes is computed without a panic.
    #[test]
    fn envelope_decode((format, bytes) in envelope_bytes()) {
        match envelope::decode(&format, &bytes) {
            Ok(decoded) => {
                prop_assert!(format == "json" || format == "msgpack");
                // In its own format: a MessagePack envelope may nest deeper than JSON reads.
                let same = if format == "json" { DlqFormat::Json } else { DlqFormat::Msgpack };
                let again = decoded.encode(same).expect("encodes");
                prop_assert_eq!(&envelope::decode(&format, &again).expect("decodes"), &decoded);
                let _ = decoded.original.payload_bytes();
            }
            Err(e) => {
                prop_assert!(!e.is_empty());
                if format != "json" && format != "msgpack" {
                    prop_assert!(e.contains(&format!("`{format}`")), "{e}");
                }
            }
        }
    }

    /// Envelopes round-trip: any envelope encodes in both formats and both decode to it.
    #[test]
    fn envelope_round_trip(e in envelope()) {
        let json = envelope::decode("json", &e.encode(DlqFormat::Json).expect("json")).expect("decodes");
        let packed = envelope::decode("msgpack", &e.encode(DlqFormat::Msgpack).expect("msgpack")).expect("decodes");
        prop_assert_eq!(&json, &e);
        prop_assert_eq!(&packed, &e);
    }
}

fn decision(reason: String, labels: Vec<(String, String)>, fallback: bool) -> Decision {
    Decision {
        verdict: Verdict {
            action: Action::DeadLetter,
            class: Class::Poison,
            reason,
            alert: Severity::Warning,
            labels,
        },
        provenance: std::sync::Arc::new(Provenance {
            name: "rules".into(),
            version: "0.1.0".into(),
            sha256: "ab".into(),
        }),
        generation: Some(1),
        fallback: fallback.then(|| verdict_runtime::Fault::Panic {
            message: "panic\r\nx-injected: 1".into(),
        }),
        clamps: Vec::new(),
    }
}

/// Payload bytes: arbitrary, text, JSON, or JSON that does not survive a parse (a bare
/// `null`, a string, a huge number).
fn payload_bytes() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        3 => any_bytes(),
        2 => nasty_string(32).prop_map(String::into_bytes),
        2 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::sample::select(&[
            "null", " null ", "\"text\"", "123456789012345678901234567890", "1e400", "-0", "1.0",
            "{\"a\":1,\"a\":2}", "[] ", "\u{feff}{}",
        ][..]).prop_map(|s| s.as_bytes().to_vec()),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// A replay gets the payload back (`Envelope::new` -> encode -> decode ->
    /// `payload_bytes`): byte for byte when it was not JSON, equal as JSON when it was (a
    /// bare JSON string comes back as its text, as documented); and the dead letter's broker
    /// headers are one bounded line whatever the topic, id, kind and reason held.
    #[test]
    fn envelope_payload_and_letter_headers(
        payload in payload_bytes(),
        packed in any::<bool>(),
        topic in nasty_string(32),
        id in nasty_string(32),
        headers in headers_map(),
        kind in nasty_string(16),
        reason in nasty_string(64),
        at_ms in any::<u64>(),
        fallback in any::<bool>(),
    ) {
        let history = [AttemptRecord { at_ms, kind: kind.clone(), message: reason.clone() }];
        let e = Envelope::new(
            MessageRef { topic: &topic, id: &id, headers: &headers, payload: &payload, content_type: None },
            &history,
            &decision(reason.clone(), vec![(kind.clone(), reason.clone())], fallback),
            Context { dlq: "t.DLQ", consumer_group: "g", gateway: "gw", now_ms: at_ms },
        );
        let format = if packed { DlqFormat::Msgpack } else { DlqFormat::Json };
        let bytes = e.encode(format).expect("encodes");
        let decoded = envelope::decode(envelope::format_name(format), &bytes).expect("decodes");
        let back = decoded.original.payload_bytes();
        match serde_json::from_slice::<Value>(&payload) {
            Err(_) => prop_assert_eq!(&back, &payload),
            Ok(Value::String(text)) => prop_assert_eq!(back, text.into_bytes()),
            Ok(parsed) => {
                let again: Value = serde_json::from_slice(&back)
                    .map_err(|x| TestCaseError::fail(format!("replayed {:?} for {:?}: {x}", String::from_utf8_lossy(&back), String::from_utf8_lossy(&payload))))?;
                prop_assert_eq!(again, parsed);
            }
        }
        let letter = DeadLetter {
            dlq: "t.DLQ".into(),
            class: reason.clone(),
            reason: reason.clone(),
            format: "json",
            envelope: bytes,
        };
        let delivery = Delivery { id, topic, ..Delivery::default() };
        let failed = AttemptRecord { at_ms, kind, message: reason };
        for (name, value) in letter.headers(&delivery, &failed) {
            prop_assert!(is_one_line(&value), "{name}: {value:?}");
            prop_assert!(value.len() <= 1_024, "{name}: {} bytes", value.len());
        }
    }
}
