//! The admin API's request bodies, and what a replay from a broker DLQ sends.

use crate::admin::bodies;
use crate::envelope::Original;
use proptest::prelude::*;
use serde_json::{Value, json};
use verdict_fuzz::*;

// ---------------------------------------------------------------------------------------
// 9. The admin API's request bodies.

const FILTER: &[(&str, Kind, bool)] = &[
    ("topic", Kind::Str, false),
    ("dlq", Kind::Str, false),
    ("class", Kind::Str, false),
    ("kind", Kind::Str, false),
    ("min_age_ms", Kind::U64, false),
    ("limit", Kind::U64, false),
    ("after", Kind::Str, false),
    ("source", Kind::Enum(SOURCES), false),
];
const ENDPOINTS: &[(&str, Kind)] = &[
    (
        "decide",
        Kind::Obj(&[
            ("topic", Kind::Str, true),
            ("failure", Kind::Opaque(&FAILURE_SPEC), true),
        ]),
    ),
    (
        "activate",
        Kind::Obj(&[("sha256", Kind::OneOf(SHA256), true)]),
    ),
    ("rollback", Kind::Obj(&[("topic", Kind::Str, false)])),
    (
        "shadow",
        Kind::Obj(&[
            ("topic", Kind::Str, true),
            ("policy", Kind::OneOf(POLICY_NAMES), false),
            ("config", Kind::Any, false),
        ]),
    ),
    (
        "replay",
        Kind::Obj(&[
            ("filter", Kind::Obj(FILTER), false),
            ("dry_run", Kind::Bool, false),
            ("rate_per_s", Kind::F64, false),
            ("canary", Kind::U64, false),
            ("canary_timeout_ms", Kind::U64, false),
            ("note", Kind::Str, false),
        ]),
    ),
    (
        "discard",
        Kind::Obj(&[
            ("filter", Kind::Obj(FILTER), false),
            ("reason", Kind::Str, true),
        ]),
    ),
    (
        "publish",
        Kind::Obj(&[
            ("id", Kind::Str, false),
            ("headers", Kind::StrMap, false),
            ("payload", Kind::Any, true),
            ("content_type", Kind::Str, false),
        ]),
    ),
];

fn admin_seeds() -> Vec<String> {
    vec![
        r#"{"topic": "orders", "failure": {"attempt": 2, "error": {"kind": "db.timeout"}}}"#.into(),
        r#"{"sha256": "0000000000000000000000000000000000000000000000000000000000000000"}"#.into(),
        r#"{"topic": "orders", "policy": "rules", "config": {"max_attempts": 3}}"#.into(),
        r#"{"filter": {"topic": "orders", "limit": 10, "source": "nats"}, "rate_per_s": 5.0, "canary": 2, "note": "n"}"#.into(),
        r#"{"filter": {"kind": "http.503"}, "reason": "bad data"}"#.into(),
        r#"[{"id": "order-7", "headers": {"tenant": "eu"}, "payload": {"order": 7}}, {"payload": "text"}]"#.into(),
        "".into(),
    ]
}

fn admin_input() -> BoxedStrategy<(usize, Vec<u8>, Expect)> {
    let endpoint = 0..ENDPOINTS.len();
    let rate = prop_oneof![
        Just(json!(1e-300)),
        Just(json!(5e-324)),
        Just(json!(-1.0)),
        Just(json!(0)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ];
    endpoint
        .prop_flat_map(move |i| {
            let schema = ENDPOINTS[i].1;
            let body = prop_oneof![
                2 => any_bytes().prop_map(|b| (b, Expect::Anything)),
                3 => mutated_text(admin_seeds(), JSON_TOKENS).prop_map(|s| (s.into_bytes(), Expect::Anything)),
                4 => valid(schema).prop_map(|d| (d.to_string().into_bytes(), Expect::Anything)),
                1 => prop::collection::vec(valid(schema), 0..4).prop_map(|d| (Value::Array(d).to_string().into_bytes(), Expect::Anything)),
                3 => one_wrong_field(schema).prop_map(|(d, f)| (d.to_string().into_bytes(), Expect::WrongField(f))),
                1 => unknown_field(schema).prop_map(|d| (d.to_string().into_bytes(), Expect::UnknownField)),
                1 => (valid(schema), rate.clone()).prop_map(|(mut d, r)| {
                    d["rate_per_s"] = r;
                    (d.to_string().into_bytes(), Expect::Anything)
                }),
            ];
            (Just(i), body)
        })
        .prop_map(|(i, (body, expect))| (i, body, expect))
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// The admin API's body parsers (`admin::bodies`, what each handler runs before the
    /// registry or the store): never panic; an error is a 400 `bad_request` that says it is
    /// about the request body and names the field of the wrong type (or the unknown field);
    /// what is accepted holds the endpoint's rules (a reason to discard, a shadow config
    /// with its policy, 1 to 10,000 messages with ids of 1 to 256 bytes and a content type,
    /// a replay pause computed without a panic).
    #[test]
    fn admin_request_bodies((endpoint, body, expect) in admin_input()) {
        let name = ENDPOINTS[endpoint].0;
        let result: Result<(), crate::admin::ApiError> = match name {
            "decide" => bodies::decide(&body).map(|(_, spec)| {
                let _ = spec.into_failure();
            }),
            "activate" => bodies::activate(&body).map(drop),
            "rollback" => bodies::rollback(&body).map(drop),
            "shadow" => bodies::shadow(&body).map(drop),
            "replay" => bodies::replay(&body).map(|(_, options)| {
                let _ = options.pause();
            }),
            "discard" => bodies::discard(&body).map(|(_, reason)| {
                assert!(!reason.trim().is_empty(), "a blank reason was accepted");
            }),
            "publish" => bodies::publish("orders", &body, 1_700_000_000_000, Some("key")).map(|messages| {
                assert!((1..=bodies::MAX_BATCH).contains(&messages.len()));
                for m in &messages {
                    assert!((1..=bodies::MAX_ID_BYTES).contains(&m.id.len()), "id of {} bytes", m.id.len());
                    assert_eq!(m.topic, "orders");
                    assert!(m.content_type.is_some());
                }
            }),
            _ => unreachable!(),
        };
        match result {
            Ok(()) => {
                prop_assert!(!matches!(expect, Expect::WrongField(_) | Expect::UnknownField),
                    "{name} accepted {}", String::from_utf8_lossy(&body));
                if !(name == "rollback" && body.iter().all(u8::is_ascii_whitespace)) {
                    prop_assert!(serde_json::from_slice::<Value>(&body).is_ok(), "{name}: not one JSON document");
                }
            }
            Err(e) => {
                prop_assert_eq!(e.status.as_u16(), 400);
                prop_assert_eq!(e.code, "bad_request");
                prop_assert!(e.message.starts_with("request body") || e.message.starts_with("failure"), "{}", e.message);
                match &expect {
                    Expect::WrongField(field) => {
                        // A publish names the message too: `message 0: payload: ...`.
                        prop_assert!(e.message.contains(&format!("{field}: ")), "{name}: want {field}, got {}", e.message);
                    }
                    Expect::UnknownField => prop_assert!(e.message.contains("unknown field"), "{}", e.message),
                    Expect::Anything => {}
                }
            }
        }
    }
}

/// An envelope's `original` as a broker's DLQ may hold it: written by the gateway, or by
/// anyone who may publish there (a letter whose `original` is not of this shape does not
/// decode, and `envelope_decode` covers that).
fn dlq_original() -> BoxedStrategy<(Original, String)> {
    let header_name = prop_oneof![
        2 => short_string(12),
        1 => (1..400usize).prop_map(|n| "h".repeat(n)),
        1 => prop::sample::select(&["bad name", "a:b", "é", "verdict-message-id", "tenant"][..]).prop_map(String::from),
    ];
    let headers = prop::collection::btree_map(header_name, nasty_string(32), 0..5);
    (
        headers,
        prop::option::of(nasty_string(300)),
        nasty_string(300),
        prop::option::of(json_value()),
        prop::option::of(nasty_string(40)),
    )
        .prop_map(|(headers, content_type, id, payload, payload_base64)| {
            let original = Original {
                topic: "t".into(),
                id: id.clone(),
                headers,
                payload,
                payload_base64,
                content_type,
                payload_omitted: None,
            };
            (original, id)
        })
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// A replay from a broker's DLQ (`sources::nats::replay_headers`,
    /// `sources::rabbitmq::replay_properties`): whatever a dead letter's envelope holds, the
    /// replay's headers are built without a panic (the clients assert on what they cannot
    /// carry), keep every header the broker can carry, and carry the token and a one-line id.
    #[cfg(all(feature = "nats", feature = "rabbitmq"))]
    #[test]
    fn dlq_replay_headers((original, id) in dlq_original(), token in "[a-z0-9-]{1,24}") {
        let nats = crate::sources::nats::replay_headers(&original, &id, &token, None);
        prop_assert_eq!(nats.get(crate::model::REPLAY_HEADER).map(|v| v.as_str().to_string()), Some(token.clone()));
        let shown = nats.get("verdict-message-id").map(|v| v.as_str().to_string()).unwrap_or_default();
        prop_assert!(is_one_line(&shown) && shown.len() <= 1_024);
        // A traced replay: the replay's context replaces whatever the letter's headers say.
        let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let rabbit = crate::sources::rabbitmq::replay_properties(&original, &id, &token, Some(traced));
        let table = rabbit.headers().clone().unwrap_or_default();
        prop_assert_eq!(
            table.inner().get("traceparent").map(|v| format!("{v:?}")),
            Some(format!("{:?}", lapin::types::AMQPValue::LongString(traced.into())))
        );
        let tracing = |name: &str| name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate");
        for name in original.headers.keys() {
            if name.len() <= 255 && name != crate::model::REPLAY_HEADER && !tracing(name) {
                prop_assert!(table.inner().contains_key(name.as_str()), "{name:?} dropped");
            }
        }
        let id = rabbit.message_id().clone().expect("an id");
        prop_assert!(id.as_str().len() <= 255 && is_one_line(id.as_str()));
        let _ = original.payload_bytes();
    }
}
