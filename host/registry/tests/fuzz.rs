//! Fuzz and property targets of the registry's parsers that face outside input: the
//! gateway config, topic patterns and the router, and vector files. Cases per target:
//! `VERDICT_FUZZ_CASES` (see the `verdict-fuzz` crate).

use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};
use verdict_fuzz::*;
use verdict_registry::conformance::Suite;
use verdict_registry::{GatewayConfig, Router, TopicPattern};

// ---------------------------------------------------------------------------------------
// 1. The gateway config (`verdict.toml`).

const LISTEN: &[&str] = &["127.0.0.1:9474", "[::1]:9474", "0.0.0.0:9474", "10.0.0.1:1"];
const URLS: &[&str] = &[
    "http://127.0.0.1:8081/",
    "https://consumer.invalid/a?b=c",
    "http://[::1]:80/",
    "ftp://127.0.0.1/",
    "http://",
    "http://a b/",
];
const TOPICS: &[&str] = &[
    ">",
    "orders",
    "orders.>",
    "a.*.c",
    "*",
    "payments..x",
    "a.>.b",
    "a*",
];
const STREAM_NAMES: &[&str] = &["VERDICT", "VERDICT_DLQ", "a.b", "", "with space"];
const PREFIXES: &[&str] = &["verdict.dlq", "verdict.audit", "orders", ">"];

const GUARDRAILS: &[(&str, Kind, bool)] = &[
    ("max_attempts", Kind::U32, false),
    ("max_delay_ms", Kind::U64, false),
    ("max_deferrals", Kind::U32, false),
    ("max_deferral_age_ms", Kind::U64, false),
    ("max_reason_bytes", Kind::U64, false),
    ("max_labels", Kind::U64, false),
    ("max_label_bytes", Kind::U64, false),
];
const FALLBACK: &[(&str, Kind, bool)] = &[
    ("base_ms", Kind::U64, false),
    ("cap_ms", Kind::U64, false),
    ("max_attempts", Kind::U32, false),
];
const SETTINGS: &[(&str, Kind, bool)] = &[
    ("guardrails", Kind::Obj(GUARDRAILS), false),
    ("fallback", Kind::Obj(FALLBACK), false),
];
const CONSUMER: &[(&str, Kind, bool)] = &[
    ("url", Kind::OneOf(URLS), true),
    ("timeout_ms", Kind::U64, false),
    ("concurrency", Kind::U64, false),
];
const SHADOW: &[(&str, Kind, bool)] = &[
    ("policy", Kind::OneOf(POLICY_NAMES), true),
    ("config", Kind::Any, false),
];
const ROUTE: &[(&str, Kind, bool)] = &[
    ("topic", Kind::OneOf(TOPICS), true),
    ("policy", Kind::OneOf(POLICY_NAMES), true),
    ("config", Kind::Any, false),
    ("settings", Kind::Obj(SETTINGS), false),
    ("core", Kind::Bool, false),
    ("source", Kind::Enum(SOURCES), false),
    ("consumer", Kind::Obj(CONSUMER), false),
    ("shadow", Kind::Obj(SHADOW), false),
];
const POLICY: &[(&str, Kind, bool)] = &[
    ("path", Kind::Str, true),
    ("sha256", Kind::OneOf(SHA256), false),
    ("vectors", Kind::StrList, false),
];
const GATEWAY_CONFIG: Kind = Kind::Obj(&[
    (
        "sandbox",
        Kind::Obj(&[
            ("decide_timeout_ms", Kind::U64, false),
            ("init_timeout_ms", Kind::U64, false),
            ("epoch_tick_ms", Kind::U64, false),
            ("fuel_per_decision", Kind::U64, false),
            ("memory_cap_bytes", Kind::U64, false),
            ("max_wasm_stack_bytes", Kind::U64, false),
            ("pooled_instances", Kind::U32, false),
            ("instance_max_uses", Kind::U32, false),
            ("instance_recycle_bytes", Kind::U64, false),
            ("warm_instances", Kind::U64, false),
            ("max_component_bytes", Kind::U64, false),
            ("max_functions", Kind::U32, false),
            ("max_function_blocks", Kind::U64, false),
            ("max_blocks", Kind::U64, false),
            ("max_core_instances", Kind::U32, false),
        ]),
        false,
    ),
    ("defaults", Kind::Obj(SETTINGS), false),
    (
        "admission",
        Kind::Obj(&[
            ("fuel_per_decision", Kind::U64, false),
            ("properties", Kind::Bool, false),
            ("property_inputs", Kind::U32, false),
            ("never_retry_kinds", Kind::StrList, false),
        ]),
        false,
    ),
    (
        "admin",
        Kind::Obj(&[
            ("listen", Kind::Enum(LISTEN), false),
            ("allow_remote", Kind::Bool, false),
            ("token_env", Kind::Str, false),
            ("token_file", Kind::Str, false),
            ("max_body_bytes", Kind::U64, false),
        ]),
        false,
    ),
    (
        "storage",
        Kind::Obj(&[
            ("dir", Kind::Str, false),
            ("artifact_cache", Kind::Bool, false),
            ("retention_ms", Kind::U64, false),
        ]),
        false,
    ),
    (
        "gateway",
        Kind::Obj(&[
            ("instance", Kind::Str, false),
            ("consumer_group", Kind::Str, false),
            ("database", Kind::Str, false),
            ("lease_ms", Kind::U64, false),
            ("poll_ms", Kind::U64, false),
            ("max_in_flight", Kind::U64, false),
            (
                "dlq_naming",
                Kind::Enum(&["suffix", "prefix", "global"]),
                false,
            ),
            ("global_dlq", Kind::Str, false),
            ("dlq_format", Kind::Enum(&["json", "msgpack"]), false),
        ]),
        false,
    ),
    (
        "nats",
        Kind::Obj(&[
            ("url", Kind::Str, false),
            ("stream", Kind::OneOf(STREAM_NAMES), false),
            ("subjects", Kind::StrList, false),
            ("durable", Kind::Str, false),
            ("ack_wait_ms", Kind::U64, false),
            ("max_ack_pending", Kind::I64, false),
            ("dlq_stream", Kind::OneOf(STREAM_NAMES), false),
            ("dlq_subject_prefix", Kind::OneOf(PREFIXES), false),
            ("audit_stream", Kind::OneOf(STREAM_NAMES), false),
            ("audit_subject_prefix", Kind::OneOf(PREFIXES), false),
            (
                "history_bucket",
                Kind::OneOf(&["verdict-history", "a.b", ""]),
                false,
            ),
            ("history_ttl_ms", Kind::U64, false),
        ]),
        false,
    ),
    (
        "rabbitmq",
        Kind::Obj(&[
            ("url", Kind::Str, false),
            ("prefetch", Kind::U16, false),
            ("delay_prefix", Kind::Str, false),
            ("audit_queue", Kind::Str, false),
            ("history_key_file", Kind::Str, false),
        ]),
        false,
    ),
    (
        "policies",
        Kind::Map(POLICY_NAMES, &Kind::Obj(POLICY)),
        true,
    ),
    ("routes", Kind::List(&Kind::Obj(ROUTE)), false),
]);

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        key.to_string()
    } else {
        toml_string(key)
    }
}

/// A JSON value as a TOML inline value (TOML has no null: a null becomes "" and a null
/// field is left out; integers past i64 are clamped).
fn toml_inline(value: &Value) -> String {
    match value {
        Value::Null => "\"\"".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(_), _) => i64::MAX.to_string(),
            (_, _, Some(f)) if f.is_finite() => {
                let text = format!("{f:?}");
                if text.contains(['.', 'e', 'E']) {
                    text
                } else {
                    format!("{text}.0")
                }
            }
            _ => "0".into(),
        },
        Value::String(s) => toml_string(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_inline).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_inline(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A document as a TOML file: every top-level field as `key = <inline value>`.
fn toml_document(doc: &Value) -> String {
    let mut out = String::new();
    if let Some(map) = doc.as_object() {
        for (k, v) in map.iter().filter(|(_, v)| !v.is_null()) {
            out.push_str(&format!("{} = {}\n", toml_key(k), toml_inline(v)));
        }
    }
    out
}

fn config_seeds() -> Vec<String> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seeds: Vec<String> = ["quickstart.toml", "brokers.toml"]
        .iter()
        .filter_map(|name| std::fs::read_to_string(examples.join(name)).ok())
        .collect();
    seeds.push(
        "[sandbox]\ndecide_timeout_ms = 20\n[policies.rules]\npath = \"rules.wasm\"\n\
         [[routes]]\ntopic = \"payments.>\"\npolicy = \"rules\"\nconfig = { max_attempts = 5 }\n\
         [[routes]]\ntopic = \">\"\npolicy = \"rules\"\nsettings = { guardrails = { max_attempts = 10 } }\n"
            .into(),
    );
    seeds
}

/// A config that is valid but for one section chosen at random: one policy, one to three
/// routes on any source with consumers. Random documents are rarely valid as a whole; this
/// reaches the checks a valid config still has to pass (and what it must not let through).
fn plausible_config() -> BoxedStrategy<Value> {
    let long = |n: usize| "q".repeat(n);
    let route = prop::sample::select(&["embedded", "nats", "rabbitmq"][..]).prop_flat_map(move |source| {
        let topics: Vec<String> = match source {
            "rabbitmq" => vec!["orders".into(), "invoices".into(), long(250), long(255), long(300)],
            "nats" => vec!["orders.>".into(), "orders.eu".into(), "orders.*.x".into()],
            _ => vec![">".into(), "orders".into(), "payments.>".into()],
        };
        (prop::sample::select(topics), 1..2_000u64, 1..64u64).prop_map(move |(topic, timeout_ms, concurrency)| {
            json!({
                "topic": topic, "policy": "rules", "source": source,
                "consumer": {"url": "http://127.0.0.1:8081/", "timeout_ms": timeout_ms, "concurrency": concurrency},
            })
        })
    });
    let Kind::Obj(sections) = GATEWAY_CONFIG else {
        unreachable!()
    };
    let sections: Vec<(&'static str, Kind)> = sections
        .iter()
        .filter(|(name, _, _)| *name != "policies" && *name != "routes")
        .map(|&(name, kind, _)| (name, kind))
        .collect();
    let section =
        prop::sample::select(sections).prop_flat_map(|(name, kind)| (Just(name), valid(kind)));
    (
        prop::collection::vec(route, 1..4),
        prop::option::of(section),
    )
        .prop_map(|(routes, section)| {
            let mut doc = json!({"policies": {"rules": {"path": "rules.wasm"}}, "routes": routes});
            if let Some((name, value)) = section {
                doc[name] = value;
            }
            doc
        })
        .boxed()
}

fn config_input() -> BoxedStrategy<(String, Expect)> {
    let deep = (1..100_000usize, prop::bool::ANY).prop_map(|(n, table)| {
        let (open, close) = if table { ("{a = ", "}") } else { ("[", "]") };
        (
            format!("x = {}1{}\n", open.repeat(n), close.repeat(n)),
            Expect::Anything,
        )
    });
    prop_oneof![
        2 => any::<String>().prop_map(|s| (s, Expect::Anything)),
        1 => any_bytes().prop_map(|b| (String::from_utf8_lossy(&b).into_owned(), Expect::Anything)),
        4 => mutated_text(config_seeds(), TOML_TOKENS).prop_map(|s| (s, Expect::Anything)),
        6 => valid(GATEWAY_CONFIG).prop_map(|doc| (toml_document(&doc), Expect::Anything)),
        6 => plausible_config().prop_map(|doc| (toml_document(&doc), Expect::Anything)),
        4 => one_wrong_field(GATEWAY_CONFIG)
            .prop_map(|(doc, field)| (toml_document(&doc), Expect::WrongField(field))),
        1 => unknown_field(GATEWAY_CONFIG).prop_map(|doc| (toml_document(&doc), Expect::UnknownField)),
        1 => deep,
    ]
    .boxed()
}

/// What every config that parses holds to.
fn check_config(config: &GatewayConfig) -> Result<(), TestCaseError> {
    use verdict_registry::SourceKind;
    for route in &config.routes {
        prop_assert!(config.policies.contains_key(&route.policy));
        if let Some(shadow) = &route.shadow {
            prop_assert!(config.policies.contains_key(&shadow.policy));
        }
        prop_assert!(TopicPattern::parse(&route.topic).is_ok(), "{}", route.topic);
        if route.source != SourceKind::Embedded {
            prop_assert!(route.consumer.is_some());
        }
        if route.source == SourceKind::Rabbitmq {
            prop_assert!(!route.topic.split('.').any(|t| t == "*" || t == ">"));
            // Every name AMQP carries as a short string fits one (255 bytes): a longer one
            // panics in the client when it is declared.
            let dlq = config
                .gateway
                .dlq_naming
                .dlq_for(&route.topic, &config.gateway.global_dlq);
            let bucket = config
                .rabbitmq
                .bucket_name(verdict_registry::config::MAX_DELAY_BUCKET_MS);
            for name in [&route.topic, &dlq, &bucket, &config.rabbitmq.audit_queue] {
                prop_assert!(name.len() <= 255, "a RabbitMQ name of {} bytes", name.len());
            }
        }
        if let Some(consumer) = &route.consumer {
            prop_assert!(
                consumer.url.starts_with("http://") || consumer.url.starts_with("https://")
            );
            prop_assert!(url::Url::parse(&consumer.url).is_ok());
            prop_assert!(consumer.timeout_ms >= 1 && consumer.timeout_ms < config.gateway.lease_ms);
            prop_assert!(consumer.concurrency >= 1);
        }
    }
    prop_assert!(config.admin.allow_remote || config.admin.listen.ip().is_loopback());
    prop_assert!(config.admission.fuel_per_decision >= 1);
    for policy in config.policies.values() {
        if let Some(pin) = &policy.sha256 {
            prop_assert!(pin.len() == 64 && pin.bytes().all(|b| b.is_ascii_hexdigit()));
        }
    }
    // The routes make a router (or are refused as ambiguous), without a panic.
    let patterns: Vec<TopicPattern> = config
        .routes
        .iter()
        .filter_map(|r| TopicPattern::parse(&r.topic).ok())
        .collect();
    let _ = Router::new(patterns, None);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// `GatewayConfig::parse`: never panics; an error names the file and a field (the
    /// field of the wrong type, when there is one); a config that parses holds every rule
    /// the gateway relies on; parsing is deterministic.
    #[test]
    fn gateway_config((text, expect) in config_input()) {
        match GatewayConfig::parse(&text, "verdict.toml") {
            Ok(config) => {
                prop_assert!(!matches!(expect, Expect::WrongField(_) | Expect::UnknownField),
                    "accepted: {text}");
                check_config(&config)?;
                let again = GatewayConfig::parse(&text, "verdict.toml").expect("parses again");
                prop_assert_eq!(format!("{config:?}"), format!("{again:?}"));
            }
            Err(e) => {
                prop_assert!(e.to_string().starts_with("verdict.toml: "), "{e}");
                prop_assert_eq!(&e.file, "verdict.toml");
                // The field is the path to the problem; it is empty only when the problem is a
                // key that is itself empty (`"" = 1`: unknown field ``).
                prop_assert!(!e.message.is_empty(), "{e}");
                prop_assert!(!e.field.is_empty() || e.message.contains("unknown field ``"), "{e}");
                match &expect {
                    Expect::WrongField(field) => {
                        prop_assert!(e.field.starts_with(field.as_str()), "want {field}, got {e}");
                    }
                    Expect::UnknownField => prop_assert!(e.message.contains("unknown field"), "{e}"),
                    Expect::Anything => {}
                }
                prop_assert_eq!(GatewayConfig::parse(&text, "verdict.toml").unwrap_err(), e);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Topic patterns and the router.

fn pattern_token() -> BoxedStrategy<String> {
    prop_oneof![
        6 => prop::sample::select(&["a", "b", "orders", "x", "é"][..]).prop_map(String::from),
        2 => Just("*".to_string()),
        2 => Just(">".to_string()),
        1 => Just(String::new()),
        1 => short_string(4),
    ]
    .boxed()
}

fn pattern_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::collection::vec(pattern_token(), 1..6).prop_map(|t| t.join(".")),
        1 => nasty_string(24),
    ]
    .boxed()
}

/// Whether `text` is a valid pattern, by the rules as documented.
fn pattern_oracle(text: &str) -> bool {
    let tokens: Vec<&str> = text.split('.').collect();
    !text.is_empty()
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && (*t == "*" || (*t == ">" && i + 1 == tokens.len()) || !t.contains(['*', '>']))
        })
}

/// A topic matching `pattern` (wildcards filled with `fill`).
fn instance(pattern: &str, fill: &str) -> String {
    pattern
        .split('.')
        .map(|t| match t {
            "*" => fill.to_string(),
            ">" => format!("{fill}.{fill}"),
            t => t.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Whether `pattern` matches `topic`, by the rules as documented.
fn matches_oracle(pattern: &str, topic: &str) -> bool {
    let (p, t): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), topic.split('.').collect());
    for (i, token) in p.iter().enumerate() {
        match *token {
            ">" => return t.len() > i,
            "*" if i < t.len() => {}
            literal if i < t.len() && t[i] == literal => {}
            _ => return false,
        }
    }
    t.len() == p.len()
}

/// (literal tokens, tokens, not ending in `>`): the documented specificity order.
fn specificity(pattern: &str) -> (usize, usize, bool) {
    let tokens: Vec<&str> = pattern.split('.').collect();
    (
        tokens.iter().filter(|t| **t != "*" && **t != ">").count(),
        tokens.len(),
        tokens.last() != Some(&">"),
    )
}

proptest! {
    #![proptest_config(config())]

    /// `TopicPattern::parse`: accepts exactly the documented patterns; a pattern matches
    /// exactly the documented topics (against an independent matcher); an error is one line
    /// naming the pattern.
    #[test]
    fn topic_patterns(text in pattern_text(), topic in pattern_text(), fill in short_string(6)) {
        match TopicPattern::parse(&text) {
            Ok(pattern) => {
                prop_assert!(pattern_oracle(&text), "accepted {text:?}");
                prop_assert_eq!(pattern.as_str(), text.as_str());
                prop_assert_eq!(pattern.is_exact(), !text.split('.').any(|t| t == "*" || t == ">"));
                prop_assert_eq!(pattern.matches(&topic), matches_oracle(&text, &topic));
                let fill = if fill.is_empty() || fill.contains('.') { "x".to_string() } else { fill };
                prop_assert!(pattern.matches(&instance(&text, &fill)));
                if pattern.is_exact() {
                    prop_assert!(pattern.matches(&text));
                    prop_assert_eq!(pattern.matches(&topic), topic == text);
                }
            }
            Err(e) => {
                prop_assert!(!pattern_oracle(&text), "refused {text:?}: {e}");
                let shown = e.to_string();
                prop_assert!(shown.starts_with("topic pattern `"), "{shown}");
                prop_assert!(shown.contains(&text));
            }
        }
    }

    /// `Router`: a router over any patterns is built or refused as ambiguous, never
    /// panics; `resolve` agrees with an independent linear search (exact, else the most
    /// specific wildcard, else the default).
    #[test]
    fn router(patterns in prop::collection::vec(pattern_text(), 0..8),
              topics in prop::collection::vec(pattern_text(), 1..8),
              default in prop::option::of(0..8usize)) {
        let parsed: Vec<TopicPattern> =
            patterns.iter().filter_map(|p| TopicPattern::parse(p).ok()).collect();
        let texts: Vec<String> = parsed.iter().map(|p| p.as_str().to_string()).collect();
        let Ok(router) = Router::new(parsed, default) else { return Ok(()) };
        for topic in topics.iter().chain(texts.iter()) {
            let want = match texts.iter().position(|p| p == topic && !p.split('.').any(|t| t == "*" || t == ">")) {
                Some(exact) => Some(exact),
                None => texts
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| matches_oracle(p, topic))
                    .max_by_key(|(i, p)| (specificity(p), std::cmp::Reverse(*i)))
                    .map(|(i, _)| i)
                    .or(default),
            };
            prop_assert_eq!(router.resolve(topic), want, "{:?} over {:?}", topic, texts);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. Vector files.

const CASE_SPEC: &[(&str, Kind, bool)] = &[
    ("name", Kind::OneOf(&["a", "b", "a [x=1]"]), true),
    ("description", Kind::Str, false),
    ("config", Kind::Any, false),
    ("failure", Kind::Opaque(&FAILURE_SPEC), true),
    (
        "expect",
        Kind::Obj(&[
            (
                "action",
                Kind::Enum(&["retry", "delay", "pause", "dead-letter", "discard"]),
                false,
            ),
            (
                "class",
                Kind::Enum(&["transient", "poison", "exhausted"]),
                false,
            ),
            ("alert", Kind::Enum(&["none", "warning", "critical"]), false),
            ("reason_contains", Kind::Str, false),
            ("labels", Kind::StrMap, false),
            ("fallback", Kind::Bool, false),
            ("clamps", Kind::StrList, false),
        ]),
        false,
    ),
    (
        // Merged into `failure` and checked with it, after the file is read.
        "each",
        Kind::List(&Kind::Opaque(&Kind::Obj(&[("attempt", Kind::U32, false)]))),
        false,
    ),
];
const VECTOR_FILE: Kind = Kind::Obj(&[
    ("$schema", Kind::Str, false),
    ("suite", Kind::Str, true),
    ("description", Kind::Str, false),
    ("config", Kind::Any, false),
    ("settings", Kind::Obj(SETTINGS), false),
    ("cases", Kind::List(&Kind::Obj(CASE_SPEC)), true),
]);

/// `field` without the `.each[N]` of a parameterised run.
fn without_each(field: &str) -> String {
    let mut out = field.to_string();
    while let Some(at) = out.find(".each[") {
        let end = out[at..].find(']').map_or(out.len(), |e| at + e + 1);
        out.replace_range(at..end, "");
    }
    out
}

fn vector_seeds() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/rules/vectors");
    let mut seeds: Vec<String> = ["limits.json", "classes.json", "error-table.json"]
        .iter()
        .filter_map(|name| std::fs::read_to_string(dir.join(name)).ok())
        .collect();
    seeds.push(
        r#"{"suite": "s", "cases": [{"name": "c", "failure": {"error": {"kind": "x"}}, "each": [{"attempt": 2, "expect": {"action": "retry"}}, {"attempt": 3}]}]}"#.into(),
    );
    seeds
}

proptest! {
    #![proptest_config(config())]

    /// `Suite::parse`: never panics; an error names the file (and the field of the wrong
    /// type); what parses was exactly one JSON document, and expands to one case per `each`
    /// entry (one without), each with a config that is JSON.
    #[test]
    fn vector_files((text, expect) in json_document(VECTOR_FILE, vector_seeds())) {
        let path = Path::new("vectors/fuzz.json");
        match Suite::parse(&text, path, None) {
            Ok(suite) => {
                prop_assert!(!matches!(expect, Expect::WrongField(_) | Expect::UnknownField), "accepted: {text}");
                let doc: Value = serde_json::from_str(&text).expect("exactly one JSON document");
                prop_assert_eq!(suite.file.as_path(), path);
                prop_assert_eq!(Some(suite.name.as_str()), doc["suite"].as_str());
                let want: usize = doc["cases"]
                    .as_array()
                    .expect("cases")
                    .iter()
                    .map(|c| c["each"].as_array().map_or(1, |e| e.len().max(1)))
                    .sum();
                prop_assert_eq!(suite.cases.len(), want);
                for case in &suite.cases {
                    prop_assert!(serde_json::from_str::<Value>(&case.config).is_ok());
                }
            }
            Err(e) => {
                prop_assert_eq!(e.file.as_path(), path);
                prop_assert!(e.to_string().starts_with("vectors/fuzz.json: "), "{e}");
                // The field is the path to the problem; it is empty only when the problem is a
                // key that is itself empty (`"" = 1`: unknown field ``).
                prop_assert!(!e.message.is_empty(), "{e}");
                prop_assert!(!e.field.is_empty() || e.message.contains("unknown field ``"), "{e}");
                match &expect {
                    // A case run once per `each` entry names the run: `cases[0].each[1].expect`.
                    Expect::WrongField(field) => prop_assert!(e.field.starts_with(field.as_str()) || without_each(&e.field).starts_with(field.as_str()), "want {field}, got {e}"),
                    Expect::UnknownField => prop_assert!(e.message.contains("unknown field"), "{e}"),
                    Expect::Anything => {}
                }
            }
        }
    }
}
