//! Fuzz and property targets for every parser that faces outside input: the gateway config,
//! topic patterns and the router, failure JSON, vector files, dead-letter envelopes (JSON and
//! MessagePack), consumer answers, producer headers, RabbitMQ and NATS message headers, the
//! deadline headers, the NATS attempt history, and the admin API's request bodies.
//!
//! Each target feeds arbitrary input (any bytes, any string) and structure-aware input
//! (valid documents with one field of the wrong type, mutated valid documents, hostile
//! header values with CR/LF/NUL, invalid UTF-8 and huge lengths), one input per case, and
//! checks properties of the answer, not only that there was one.
//!
//! Cases per target: `VERDICT_FUZZ_CASES` (default 256, a few seconds per target in a debug
//! build). A long run, by hand:
//!
//! ```text
//! VERDICT_FUZZ_CASES=1000000 cargo test --release -p verdict-cli --test fuzz -- --test-threads=2
//! ```
//!
//! Failures are not persisted (nothing is written into the source tree); a failing case is
//! shrunk and printed, and is reproduced by turning it into a unit test.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Value, json};

use verdict_gateway::admin::bodies;
use verdict_gateway::envelope::{
    self, Context, Envelope, ErrorEntry, MessageRef, Original, PolicyEntry, VerdictEntry,
};
use verdict_gateway::model::{DEADLINE_HEADER, DeadLetter, Delivery, TTL_HEADER};
use verdict_gateway::pipeline::{MAX_ERROR_BODY_BYTES, REJECT_HEADER, classify, forwardable};
use verdict_gateway::sources::nats::{History, delivery_of};
use verdict_gateway::sources::rabbitmq::headers::{self as rabbit, HistoryKey};
use verdict_registry::conformance::Suite;
use verdict_registry::{DlqFormat, GatewayConfig, Router, TopicPattern};
use verdict_runtime::text::{MAX_KIND_BYTES, MAX_MESSAGE_BYTES, is_kind};
use verdict_runtime::{
    Action, AttemptRecord, Class, Decision, FailureSpec, Host, Limits, Provenance, Severity,
    Verdict,
};

// ---------------------------------------------------------------------------------------
// The budget.

/// Cases per target: `VERDICT_FUZZ_CASES`, default 256.
fn cases() -> u32 {
    std::env::var("VERDICT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(256)
}

/// Every target's config: the budget, no failure files, bounded shrinking.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 4_096,
        ..ProptestConfig::default()
    }
}

/// The budget for a target whose cases compile code (a tenth, at least 16).
fn config_tenth() -> ProptestConfig {
    ProptestConfig {
        cases: (cases() / 10).max(16),
        ..config()
    }
}

// ---------------------------------------------------------------------------------------
// Shared generators: hostile text, mutations, JSON values, documents with a field of the
// wrong type.

/// Characters that break parsers and headers: CR, LF, NUL and other controls, quotes,
/// separators, wildcards, non-ASCII, the largest code point.
const NASTY: &[char] = &[
    '\r',
    '\n',
    '\0',
    '\t',
    '\u{7}',
    '\u{1b}',
    '\u{7f}',
    '\u{85}',
    '\u{a0}',
    '\u{2028}',
    '\u{feff}',
    '\u{fffd}',
    '\u{10ffff}',
    'é',
    '日',
    '"',
    '\'',
    '\\',
    ':',
    ';',
    '=',
    '.',
    '*',
    '>',
    '{',
    '}',
    '[',
    ']',
    ',',
    '#',
    '$',
    ' ',
    '%',
    '/',
    '+',
    '-',
    '_',
    '@',
];

fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range(' ', '~'),
        3 => prop::sample::select(NASTY),
        1 => any::<char>(),
    ]
}

/// Up to `max` hostile characters.
fn short_string(max: usize) -> BoxedStrategy<String> {
    prop::collection::vec(nasty_char(), 0..=max)
        .prop_map(String::from_iter)
        .boxed()
}

/// Up to `max` hostile characters or, one time in 16, one character repeated up to 70,000
/// times (past every bound the host has: 128, 255, 512, 64 KiB).
fn nasty_string(max: usize) -> BoxedStrategy<String> {
    prop_oneof![
        15 => short_string(max),
        1 => (nasty_char(), 0..70_000usize).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
    .boxed()
}

/// Any bytes: short, or (one time in 16) up to 70 KB.
fn any_bytes() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        15 => prop::collection::vec(any::<u8>(), 0..256),
        1 => prop::collection::vec(any::<u8>(), 0..70_000),
    ]
    .boxed()
}

/// One edit of a valid document.
#[derive(Debug, Clone)]
enum Edit {
    Delete(Index, u8),
    Insert(Index, Vec<u8>),
    Replace(Index, u8),
    Duplicate(Index, u16),
    Truncate(Index),
}

/// One to five edits, inserting tokens from `dictionary`, random bytes or hostile text.
fn edits(dictionary: &'static [&'static str]) -> impl Strategy<Value = Vec<Edit>> {
    let insert = prop_oneof![
        3 => prop::sample::select(dictionary).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 1..8),
        1 => short_string(16).prop_map(String::into_bytes),
    ];
    let edit = prop_oneof![
        (any::<Index>(), 1..16u8).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<Index>(), insert).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<Index>(), 1..512u16).prop_map(|(i, n)| Edit::Duplicate(i, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ];
    prop::collection::vec(edit, 1..6)
}

/// `seed` with `edits` applied, in order.
fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for edit in edits {
        let at = |i: &Index, len: usize| i.index(len + 1);
        match edit {
            Edit::Delete(i, n) => {
                let at = at(i, out.len());
                let end = (at + usize::from(*n)).min(out.len());
                out.drain(at..end);
            }
            Edit::Insert(i, bytes) => {
                let at = at(i, out.len());
                out.splice(at..at, bytes.iter().copied());
            }
            Edit::Replace(i, b) => {
                if !out.is_empty() {
                    let at = i.index(out.len());
                    out[at] = *b;
                }
            }
            Edit::Duplicate(i, n) => {
                let at = at(i, out.len());
                let end = (at + usize::from(*n)).min(out.len());
                let piece = out[at..end].to_vec();
                out.splice(at..at, piece);
            }
            Edit::Truncate(i) => {
                let at = at(i, out.len());
                out.truncate(at);
            }
        }
    }
    out
}

/// A mutation of one of `seeds`, as text (invalid UTF-8 replaced).
fn mutated_text(
    seeds: Vec<String>,
    dictionary: &'static [&'static str],
) -> impl Strategy<Value = String> {
    (prop::sample::select(seeds), edits(dictionary))
        .prop_map(|(seed, e)| String::from_utf8_lossy(&mutate(seed.as_bytes(), &e)).into_owned())
}

const JSON_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "false",
    "-",
    "0",
    "1e999",
    "-1",
    "\\u0000",
    "\\ud800",
    "\\",
    "\"error\"",
    "\"kind\"",
    "18446744073709551616",
    "-9223372036854775809",
    "0.5",
    "[[[[[[[[[[[[",
    "\n",
    "\r\n",
    "\"x\":",
    "{\"a\":1}",
];

const TOML_TOKENS: &[&str] = &[
    "[",
    "]",
    "[[routes]]",
    "[policies.x]",
    "=",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "\n",
    "{",
    "}",
    ",",
    ".",
    "#",
    "\\u0000",
    "\\",
    "topic",
    "policy",
    "source = \"rabbitmq\"",
    "consumer = { url = \"http://127.0.0.1:1/\" }",
    "1e999",
    "-0",
    "nan",
    "inf",
    "9223372036854775808",
    "1979-05-27T07:32:00Z",
    "true",
    "\r\n",
    "\0",
    ">",
    "*",
    "a.b = 1",
];

fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        short_string(24).prop_map(Value::String),
    ]
    .boxed()
}

/// Any JSON value, up to 4 levels deep.
fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(short_string(12), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
        .boxed()
}

/// The shape of a document, for valid values and for values of the wrong type.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Str,
    /// A string, usually one of these (the parser takes any string).
    OneOf(&'static [&'static str]),
    /// One of these strings (the parser takes only these: an enum, an address).
    Enum(&'static [&'static str]),
    /// Valid as this shape, but checked after the document is read: never descended into.
    Opaque(&'static Kind),
    U16,
    U32,
    U64,
    I64,
    F64,
    Bool,
    StrMap,
    StrList,
    /// Any JSON (never of the wrong type).
    Any,
    /// An object with these fields (name, shape, required).
    Obj(&'static [(&'static str, Kind, bool)]),
    /// A list of these.
    List(&'static Kind),
    /// A map from one of these names to these.
    Map(&'static [&'static str], &'static Kind),
}

fn small_or_any_u64() -> BoxedStrategy<u64> {
    prop_oneof![
        4 => 0..100_000u64,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
    .boxed()
}

/// A valid value of `kind`.
fn valid(kind: Kind) -> BoxedStrategy<Value> {
    valid_as(kind, false)
}

/// A valid value of `kind` with every field present and every list non-empty: a base for
/// a field of the wrong type that leaves nothing else to complain about.
fn valid_full(kind: Kind) -> BoxedStrategy<Value> {
    valid_as(kind, true)
}

fn valid_as(kind: Kind, full: bool) -> BoxedStrategy<Value> {
    let valid = move |kind| valid_as(kind, full);
    match kind {
        Kind::Str => nasty_string(24).prop_map(Value::String).boxed(),
        Kind::OneOf(names) => prop_oneof![
            6 => prop::sample::select(names).prop_map(|s| Value::from(s.to_string())),
            1 => short_string(16).prop_map(Value::String),
        ]
        .boxed(),
        Kind::Enum(names) => prop::sample::select(names)
            .prop_map(|s| Value::from(s.to_string()))
            .boxed(),
        Kind::Opaque(inner) => valid(*inner),
        Kind::U16 => any::<u16>().prop_map(Value::from).boxed(),
        Kind::U32 => prop_oneof![0..20u32, any::<u32>()]
            .prop_map(Value::from)
            .boxed(),
        Kind::U64 => small_or_any_u64().prop_map(Value::from).boxed(),
        Kind::I64 => any::<i64>().prop_map(Value::from).boxed(),
        Kind::F64 => prop_oneof![
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(json!(0), Value::Number)),
            prop::sample::select(&[1e-300, 5e-324, -1.0, 0.0, 2.5][..]).prop_map(|f| json!(f)),
            any::<i64>().prop_map(Value::from),
        ]
        .boxed(),
        Kind::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Kind::StrMap => prop::collection::btree_map(
            short_string(12),
            nasty_string(24).prop_map(Value::String),
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed(),
        Kind::StrList => prop::collection::vec(short_string(16).prop_map(Value::String), 0..4)
            .prop_map(Value::Array)
            .boxed(),
        Kind::Any => json_value(),
        Kind::Obj(fields) => {
            let parts: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
                .iter()
                .map(|&(name, kind, required)| {
                    let value = valid(kind);
                    if required || full {
                        value.prop_map(move |v| Some((name.to_string(), v))).boxed()
                    } else {
                        prop::option::of(value)
                            .prop_map(move |v| v.map(|v| (name.to_string(), v)))
                            .boxed()
                    }
                })
                .collect();
            parts
                .prop_map(|entries| Value::Object(entries.into_iter().flatten().collect()))
                .boxed()
        }
        Kind::List(item) => prop::collection::vec(valid(*item), usize::from(full)..4)
            .prop_map(Value::Array)
            .boxed(),
        Kind::Map(names, item) => {
            prop::collection::btree_map(prop::sample::select(names), valid(*item), 0..3)
                .prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                })
                .boxed()
        }
    }
}

/// A value that is not of `kind` (never null: every optional field takes null).
fn wrong(kind: Kind) -> BoxedStrategy<Value> {
    let text = short_string(8).prop_map(Value::String);
    match kind {
        Kind::Str | Kind::OneOf(_) | Kind::Enum(_) => prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
            Just(json!([])),
            Just(json!({"a": 1})),
        ]
        .boxed(),
        Kind::U16 | Kind::U32 | Kind::U64 => prop_oneof![
            text,
            Just(json!(-1)),
            Just(json!(1.5)),
            Just(json!(1e300)),
            Just(json!(true)),
            Just(json!([1])),
            Just(json!({})),
        ]
        .boxed(),
        Kind::I64 => {
            prop_oneof![text, Just(json!(1.5)), Just(json!(false)), Just(json!([]))].boxed()
        }
        Kind::F64 => {
            prop_oneof![text, Just(json!(true)), Just(json!([1])), Just(json!({}))].boxed()
        }
        Kind::Bool => prop_oneof![text, Just(json!(1)), Just(json!([])), Just(json!({}))].boxed(),
        Kind::StrMap => prop_oneof![text, Just(json!([])), Just(json!(7))].boxed(),
        Kind::StrList | Kind::List(_) => prop_oneof![text, Just(json!({})), Just(json!(7))].boxed(),
        // Not `[]`: serde reads a struct from a sequence too (`nats = []` is `[nats]`).
        Kind::Obj(_) | Kind::Opaque(_) => {
            prop_oneof![text, Just(json!(7)), Just(json!(true))].boxed()
        }
        Kind::Map(..) => prop_oneof![text, Just(json!(7)), Just(json!([]))].boxed(),
        Kind::Any => unreachable!("any value is valid"),
    }
}

/// A step of a path into a document.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Key(&'static str),
    /// The first element of a list.
    First,
}

/// Every field of `kind` that can hold a value of the wrong type, with its shape.
fn paths(kind: Kind, prefix: &[Step], out: &mut Vec<(Vec<Step>, Kind)>) {
    match kind {
        Kind::Obj(fields) => {
            for &(name, field, _) in fields {
                let mut path = prefix.to_vec();
                path.push(Step::Key(name));
                if !matches!(field, Kind::Any) {
                    out.push((path.clone(), field));
                }
                paths(field, &path, out);
            }
        }
        Kind::List(item) => {
            let mut path = prefix.to_vec();
            path.push(Step::First);
            if !matches!(item, Kind::Any) {
                out.push((path.clone(), *item));
            }
            paths(*item, &path, out);
        }
        _ => {}
    }
}

/// How serde_path_to_error writes `path` (`routes[0].consumer.url`).
fn path_text(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::First => out.push_str("[0]"),
        }
    }
    out
}

/// Put `value` at `path` in `doc`, making the objects and lists on the way.
fn put(doc: &mut Value, path: &[Step], value: Value) {
    let Some((step, rest)) = path.split_first() else {
        *doc = value;
        return;
    };
    let slot = match step {
        Step::Key(k) => {
            if !doc.is_object() {
                *doc = json!({});
            }
            doc.as_object_mut()
                .expect("an object")
                .entry(k.to_string())
                .or_insert(Value::Null)
        }
        Step::First => {
            if doc.as_array().is_none_or(|a| a.is_empty()) {
                *doc = json!([{}]);
            }
            &mut doc.as_array_mut().expect("a list")[0]
        }
    };
    if rest.is_empty() {
        *slot = value;
    } else {
        if slot.is_null() {
            *slot = json!({});
        }
        put(slot, rest, value);
    }
}

/// A valid document of `schema` with one field set to a value of the wrong type, and the
/// field's path.
fn one_wrong_field(schema: Kind) -> BoxedStrategy<(Value, String)> {
    let mut all = Vec::new();
    paths(schema, &[], &mut all);
    prop::sample::select(all)
        .prop_flat_map(move |(path, kind)| (valid_full(schema), Just(path), wrong(kind)))
        .prop_map(|(mut doc, path, value)| {
            put(&mut doc, &path, value);
            (doc, path_text(&path))
        })
        .boxed()
}

/// A valid document of `schema` with a field no struct has, at the top.
fn unknown_field(schema: Kind) -> BoxedStrategy<Value> {
    (valid(schema), json_leaf())
        .prop_map(|(mut doc, v)| {
            doc.as_object_mut()
                .expect("an object")
                // Not null: TOML has none, and a null field is left out.
                .insert(
                    "zz-no-such-field".into(),
                    if v.is_null() { json!(0) } else { v },
                );
            doc
        })
        .boxed()
}

/// What a document generator expects of the parser.
#[derive(Debug, Clone)]
enum Expect {
    /// Nothing in particular (arbitrary or mutated input).
    Anything,
    /// An error naming this field.
    WrongField(String),
    /// An error about an unknown field.
    UnknownField,
}

/// One line, no control characters.
fn is_one_line(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

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
const POLICY_NAMES: &[&str] = &["rules", "other"];
const SOURCES: &[&str] = &["embedded", "nats", "rabbitmq"];
const SHA256: &[&str] = &[
    "0000000000000000000000000000000000000000000000000000000000000000",
    "abc",
    "ABCDEFabcdef0123456789ABCDEFabcdef0123456789ABCDEFabcdef01234567",
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
            let bucket = config.rabbitmq.bucket_name(rabbit::MAX_BUCKET_MS);
            for name in [&route.topic, &dlq, &bucket, &config.rabbitmq.audit_queue] {
                prop_assert!(name.len() <= 255, "a RabbitMQ name of {} bytes", name.len());
            }
        }
        if let Some(consumer) = &route.consumer {
            prop_assert!(
                consumer.url.starts_with("http://") || consumer.url.starts_with("https://")
            );
            prop_assert!(reqwest::Url::parse(&consumer.url).is_ok());
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
// 3. Failure JSON (`verdict decide`, `POST /v1/decide`, vector files).

const ERROR_SPEC: &[(&str, Kind, bool)] = &[
    (
        "kind",
        Kind::OneOf(&["db.timeout", "http.503", "schema.bad\r\nx: 1", ""]),
        true,
    ),
    ("message", Kind::Str, false),
    ("retry-after-ms", Kind::U64, false),
    ("rejected", Kind::Bool, false),
];
const ATTEMPT_SPEC: &[(&str, Kind, bool)] = &[
    ("at-ms", Kind::U64, true),
    ("kind", Kind::Str, true),
    ("message", Kind::Str, false),
];
const FAILURE_SPEC: Kind = Kind::Obj(&[
    ("topic", Kind::Str, false),
    ("message-id", Kind::Str, false),
    ("consumer-group", Kind::Str, false),
    ("attempt", Kind::U32, false),
    ("deferrals", Kind::U32, false),
    ("first-failed-at-ms", Kind::U64, false),
    ("now-ms", Kind::U64, false),
    ("published-at-ms", Kind::U64, false),
    ("deadline-ms", Kind::U64, false),
    ("error", Kind::Obj(ERROR_SPEC), true),
    ("history", Kind::List(&Kind::Obj(ATTEMPT_SPEC)), false),
    ("headers", Kind::StrMap, false),
    ("payload", Kind::Any, false),
    ("content-type", Kind::Str, false),
    ("jitter-seed", Kind::U64, false),
    (
        "stats",
        Kind::Obj(&[
            ("window-ms", Kind::U64, false),
            ("deliveries", Kind::U32, false),
            ("failures", Kind::U32, false),
            ("consecutive-failures", Kind::U32, false),
        ]),
        false,
    ),
    ("extensions", Kind::StrMap, false),
]);

fn failure_seeds() -> Vec<String> {
    vec![
        r#"{"topic": "payments", "message-id": "m-1", "attempt": 2, "error": {"kind": "db.timeout", "message": "dial tcp: i/o timeout", "retry-after-ms": 500}, "payload": {"amount": 12}, "history": [{"at-ms": 1, "kind": "http.503"}], "headers": {"a": "b"}, "stats": {"window-ms": 60000, "failures": 3}}"#.into(),
        r#"{"error": {"kind": "x"}}"#.into(),
    ]
}

/// JSON text for a target: arbitrary, a mutated seed, a valid document, or one with a
/// field of the wrong type or an unknown field.
fn json_document(schema: Kind, seeds: Vec<String>) -> BoxedStrategy<(String, Expect)> {
    let deep = (1..5_000usize).prop_map(|n| ("[".repeat(n) + &"]".repeat(n), Expect::Anything));
    prop_oneof![
        2 => any::<String>().prop_map(|s| (s, Expect::Anything)),
        1 => any_bytes().prop_map(|b| (String::from_utf8_lossy(&b).into_owned(), Expect::Anything)),
        3 => mutated_text(seeds, JSON_TOKENS).prop_map(|s| (s, Expect::Anything)),
        4 => valid(schema).prop_map(|doc| (doc.to_string(), Expect::Anything)),
        4 => one_wrong_field(schema).prop_map(|(doc, f)| (doc.to_string(), Expect::WrongField(f))),
        1 => unknown_field(schema).prop_map(|doc| (doc.to_string(), Expect::UnknownField)),
        1 => deep,
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// `FailureSpec::from_json`: never panics; an error names the field of the wrong type
    /// (or the unknown field); what parses was one JSON object with an `error.kind`, and
    /// freezes into a failure with the documented defaults (attempt 1, a seed derived from
    /// the id and attempt) whose age never overflows.
    #[test]
    fn failure_json((text, expect) in json_document(FAILURE_SPEC, failure_seeds())) {
        match FailureSpec::from_json(&text) {
            Ok(spec) => {
                prop_assert!(!matches!(expect, Expect::WrongField(_) | Expect::UnknownField), "accepted: {text}");
                let doc: Value = serde_json::from_str(&text).expect("one JSON document");
                prop_assert!(doc["error"]["kind"].is_string());
                let failure = spec.clone().into_failure();
                prop_assert_eq!(failure.attempt(), doc.get("attempt").and_then(Value::as_u64).unwrap_or(1) as u32);
                prop_assert_eq!(failure.kind(), spec.error.kind.as_str());
                let seed = spec.jitter_seed.unwrap_or_else(|| verdict_runtime::jitter_seed(&spec.message_id, spec.attempt));
                prop_assert_eq!(failure.jitter_seed(), seed);
                let _ = failure.age_ms();
            }
            Err(e) => {
                prop_assert!(!e.is_empty());
                match &expect {
                    Expect::WrongField(field) => prop_assert!(e.starts_with(field.as_str()), "want {field}, got {e}"),
                    Expect::UnknownField => prop_assert!(e.contains("unknown field"), "{e}"),
                    Expect::Anything => {}
                }
            }
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
                Kind::Enum(&["retry", "delay", "dead-letter", "discard"]),
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

// ---------------------------------------------------------------------------------------
// 6. Consumer answers: status + headers + body -> failure.

fn http_date(at: SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

fn retry_after_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => (0..100_000u64).prop_map(|n| format!("  {n}\t").into_bytes()),
        1 => Just(b"99999999999999999999999".to_vec()),
        2 => (0..4_102_444_800u64).prop_map(|s| http_date(UNIX_EPOCH + Duration::from_secs(s)).into_bytes()),
        1 => prop::sample::select(&[
            "Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "soon", "-1", "1.5",
            "", "Fri, 31 Dec 9999 23:59:59 GMT", "Sat, 01 Jan 10000 00:00:00 GMT",
        ][..]).prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
    .boxed()
}

fn answer_body() -> BoxedStrategy<Vec<u8>> {
    let kind = prop_oneof![
        3 => Just(Value::from("schema.unknown-version")),
        3 => nasty_string(140).prop_map(Value::String),
        1 => (0..=MAX_KIND_BYTES + 2).prop_map(|n| Value::String("k".repeat(n))),
        1 => json_leaf(),
    ];
    let message = prop_oneof![3 => nasty_string(600).prop_map(Value::String), 1 => json_value()];
    let error = (kind, message, any::<bool>()).prop_map(|(kind, message, nested)| {
        let body = json!({"error": {"kind": kind, "message": message}});
        if nested { body } else { json!({"error": kind}) }
    });
    prop_oneof![
        3 => any_bytes(),
        4 => error.prop_map(|v| v.to_string().into_bytes()),
        1 => (error_strategy_bytes(), edits(JSON_TOKENS)).prop_map(|(b, e)| mutate(&b, &e)),
        1 => (1..MAX_ERROR_BODY_BYTES / 100).prop_map(|n| {
            format!("{{\"error\": {{\"kind\": \"x\", \"message\": \"{}\"}}}}", "m\r\n".repeat(n * 30)).into_bytes()
        }),
    ]
    .boxed()
}

fn error_strategy_bytes() -> BoxedStrategy<Vec<u8>> {
    Just(br#"{"error": {"kind": "schema.bad", "message": "a\r\nb"}}"#.to_vec()).boxed()
}

fn header_pairs() -> BoxedStrategy<Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        3 => prop::sample::select(&["retry-after", REJECT_HEADER, "content-type", "x-other"][..]).prop_map(String::from),
        1 => short_string(12),
    ];
    let value = prop_oneof![
        3 => retry_after_value(),
        2 => nasty_string(600).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    prop::collection::vec((name, value), 0..5).boxed()
}

proptest! {
    #![proptest_config(config())]

    /// `classify`: the failure made of any answer has a kind that is a plain bounded token
    /// (the consumer's when it is one, else `http.<status>`), a message of one line of at
    /// most 512 bytes, `rejected` exactly when the reject header is there, and the
    /// `Retry-After` hint an independent reading gives (seconds, or an HTTP-date; past is 0).
    #[test]
    fn consumer_answer(status in prop_oneof![100..600u16, any::<u16>()],
                       pairs in header_pairs(),
                       body in answer_body(),
                       now_s in 0..4_102_444_800u64) {
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &pairs {
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_bytes(value),
            ) {
                headers.append(n, v);
            }
        }
        let body = &body[..body.len().min(MAX_ERROR_BODY_BYTES)];
        let now = UNIX_EPOCH + Duration::from_secs(now_s);
        let e = classify(status, &headers, body, now);
        prop_assert!(is_kind(&e.kind), "kind {:?}", e.kind);
        prop_assert!(e.message.len() <= MAX_MESSAGE_BYTES, "{} bytes", e.message.len());
        prop_assert!(is_one_line(&e.message), "{:?}", e.message);
        prop_assert_eq!(e.rejected, headers.contains_key(REJECT_HEADER));
        let consumer_kind = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["error"]["kind"].as_str().map(String::from))
            .filter(|k| is_kind(k));
        prop_assert_eq!(&e.kind, &consumer_kind.unwrap_or_else(|| format!("http.{status}")));
        let want = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let v = v.trim();
                match v.parse::<u64>() {
                    Ok(s) => Some(s.saturating_mul(1_000)),
                    Err(_) => httpdate::parse_http_date(v).ok().map(|at| {
                        at.duration_since(now).map_or(0, |d| d.as_millis().min(u128::from(u64::MAX)) as u64)
                    }),
                }
            });
        prop_assert_eq!(e.retry_after_ms, want);
    }

    /// `forwardable`: a producer header that reaches the consumer is a valid header, never
    /// the gateway's own (`x-verdict-*`), never one that addresses or authenticates the
    /// request or is hop-by-hop, and its value holds no CR, LF or NUL.
    #[test]
    fn producer_headers(name in prop_oneof![
                            2 => prop::sample::select(&[
                                "x-verdict-attempt", "X-Verdict-Topic", "Host", "authorization",
                                "Content-Length", "transfer-encoding", "proxy-x", "Cookie", "TE",
                                "tenant", "traceparent", "content-type", "Connection",
                            ][..]).prop_map(String::from),
                            1 => short_string(16),
                        ],
                        value in nasty_string(64)) {
        if forwardable(&name, &value) {
            let lower = name.to_ascii_lowercase();
            prop_assert!(!lower.starts_with("x-verdict-") && !lower.starts_with("proxy-"));
            for never in ["host", "authorization", "cookie", "content-length", "content-type",
                          "transfer-encoding", "connection", "keep-alive", "te", "trailer",
                          "upgrade", "expect"] {
                prop_assert_ne!(lower.as_str(), never);
            }
            prop_assert!(!value.contains(['\r', '\n', '\0']), "{value:?}");
            prop_assert!(reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok());
        }
    }
}

// ---------------------------------------------------------------------------------------
// 7. RabbitMQ message headers: the signed attempt history.

const SIGNED_NAMES: &[&str] = &[
    "x-verdict-attempt",
    "x-verdict-deferrals",
    "x-verdict-first-failed-at-ms",
    "x-verdict-published-at-ms",
    "x-verdict-history",
    "x-verdict-signature",
];

/// A header name a producer might send: a gateway one, RabbitMQ's own, or any (at most
/// 255 bytes: AMQP's short string).
fn amqp_name() -> BoxedStrategy<String> {
    prop_oneof![
        2 => prop::sample::select(SIGNED_NAMES).prop_map(String::from),
        1 => prop::sample::select(&["x-death", "x-death-count", "x-first-death-queue",
                                    "x-last-death-reason", "x-first-death-other", "x-verdict-other",
                                    "X-Verdict-Attempt", "x-message-deadline-ms", "x-message-ttl-ms",
                                    "tenant"][..])
            .prop_map(String::from),
        2 => short_string(24),
    ]
    .prop_map(|s| verdict_runtime::text::one_line(&s, 255))
    .boxed()
}

fn amqp_value() -> BoxedStrategy<AMQPValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<f32>().prop_map(AMQPValue::Float),
        any::<f64>().prop_map(AMQPValue::Double),
        short_string(24).prop_map(|s| AMQPValue::ShortString(ShortString::from(
            verdict_runtime::text::one_line(&s, 60)
        ))),
        any_bytes().prop_map(|b| AMQPValue::LongString(LongString::from(b))),
        nasty_string(64).prop_map(|s| AMQPValue::LongString(LongString::from(s))),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        Just(AMQPValue::Void),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
            prop::collection::vec(inner, 0..4).prop_map(|v| {
                let mut t = FieldTable::default();
                for (i, v) in v.into_iter().enumerate() {
                    t.insert(ShortString::from(format!("k{i}")), v);
                }
                AMQPValue::FieldTable(t)
            }),
        ]
    })
    .boxed()
}

fn attempt_spec() -> BoxedStrategy<AttemptRecord> {
    (any::<u64>(), nasty_string(24), nasty_string(48))
        .prop_map(|(at_ms, kind, message)| AttemptRecord {
            at_ms,
            kind,
            message,
        })
        .boxed()
}

/// A delivery a RabbitMQ source could have made: id, topic and header names fit a short
/// string; no header the source keeps to itself.
fn rabbit_delivery() -> BoxedStrategy<Delivery> {
    // Renamed, not filtered: a filter that rejects two names in five runs out of rejects
    // in a long run.
    let name = amqp_name().prop_map(|n| {
        if kept_back(&n) {
            let mut n = format!("p-{n}");
            while n.len() > 255 {
                n.pop();
            }
            n
        } else {
            n
        }
    });
    (
        amqp_name(),
        amqp_name(),
        prop::collection::btree_map(name, nasty_string(32), 0..4),
        prop::option::of(amqp_name()),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            prop::option::of(any::<u64>()),
        ),
        prop_oneof![
            3 => prop::collection::vec(attempt_spec(), 0..4),
            1 => prop::collection::vec(attempt_spec(), 95..110),
        ],
    )
        .prop_map(
            |(
                id,
                topic,
                headers,
                content_type,
                (attempt, deferrals, published, first_failed),
                history,
            )| Delivery {
                id,
                topic,
                headers,
                content_type,
                attempts_spent: attempt,
                deferrals,
                published_at_ms: published,
                first_failed_at_ms: first_failed,
                history,
                ..Delivery::default()
            },
        )
        .boxed()
}

/// How a copy in flight is tampered with.
#[derive(Debug, Clone)]
enum Tamper {
    Attempt(i64),
    Deferrals(i64),
    FirstFailed(Option<i64>),
    Published(i64),
    History(String),
    Signature(Index, u8),
    SignatureCut(Index),
    NoSignature,
    MessageId(String),
    Queue(String),
}

fn tamper() -> BoxedStrategy<Tamper> {
    prop_oneof![
        any::<i64>().prop_map(Tamper::Attempt),
        any::<i64>().prop_map(Tamper::Deferrals),
        prop::option::of(any::<i64>()).prop_map(Tamper::FirstFailed),
        any::<i64>().prop_map(Tamper::Published),
        nasty_string(64).prop_map(Tamper::History),
        (any::<Index>(), 0..16u8).prop_map(|(i, d)| Tamper::Signature(i, d)),
        any::<Index>().prop_map(Tamper::SignatureCut),
        Just(Tamper::NoSignature),
        amqp_name().prop_map(Tamper::MessageId),
        amqp_name().prop_map(Tamper::Queue),
    ]
    .boxed()
}

#[derive(Debug, Clone)]
enum RabbitCase {
    /// A message as any producer may send it.
    Forged {
        table: Vec<(String, AMQPValue)>,
        id: Option<String>,
        expiration: Option<String>,
        timestamp: Option<u64>,
    },
    /// A genuine copy, read back.
    Genuine {
        delivery: Delivery,
        failed: AttemptRecord,
        spend: bool,
    },
    /// A genuine copy (after a failure), tampered with.
    Tampered {
        delivery: Delivery,
        failed: AttemptRecord,
        tamper: Tamper,
    },
}

fn attempt_record() -> BoxedStrategy<AttemptRecord> {
    (any::<u64>(), nasty_string(24), nasty_string(48))
        .prop_map(|(at_ms, kind, message)| AttemptRecord {
            at_ms,
            kind,
            message,
        })
        .boxed()
}

fn rabbit_case() -> BoxedStrategy<RabbitCase> {
    let expiration = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        Just(" 1000 ".to_string()),
        short_string(12),
    ];
    prop_oneof![
        2 => (prop::collection::vec((amqp_name(), amqp_value()), 0..8),
              prop::option::of(amqp_name()), prop::option::of(expiration), prop::option::of(any::<u64>()))
            .prop_map(|(table, id, expiration, timestamp)| RabbitCase::Forged { table, id, expiration, timestamp }),
        2 => (rabbit_delivery(), attempt_record(), any::<bool>())
            .prop_map(|(delivery, failed, spend)| RabbitCase::Genuine { delivery, failed, spend }),
        2 => (rabbit_delivery(), attempt_record(), tamper())
            .prop_map(|(delivery, failed, tamper)| RabbitCase::Tampered { delivery, failed, tamper }),
    ]
    .boxed()
}

fn key() -> HistoryKey {
    HistoryKey::new(b"the group's history key".to_vec())
}

fn headers_of(p: &BasicProperties) -> FieldTable {
    p.headers().clone().unwrap_or_default()
}

/// Whether a tampering changes what the signature covers (some look like one and are not:
/// the same number again, an absent first failure removed).
fn changes_signed(t: &Tamper, table: &FieldTable, delivery: &Delivery) -> bool {
    let number = |name: &str| match table.inner().get(name) {
        Some(AMQPValue::LongLongInt(n)) => Some(*n),
        _ => None,
    };
    let text = |name: &str| match table.inner().get(name) {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    };
    // The signature reads a negative number as 0.
    let read = |n: i64| u64::try_from(n).unwrap_or(0);
    match t {
        Tamper::Attempt(n) => Some(read(*n)) != number("x-verdict-attempt").map(read),
        Tamper::Deferrals(n) => Some(read(*n)) != number("x-verdict-deferrals").map(read),
        Tamper::FirstFailed(n) => n.map(read) != number("x-verdict-first-failed-at-ms").map(read),
        Tamper::Published(n) => Some(read(*n)) != number("x-verdict-published-at-ms").map(read),
        Tamper::History(h) => Some(h) != text("x-verdict-history").as_ref(),
        Tamper::Signature(..) | Tamper::SignatureCut(_) | Tamper::NoSignature => true,
        Tamper::MessageId(id) => *id != delivery.id,
        Tamper::Queue(q) => *q != delivery.topic,
    }
}

fn apply(t: &Tamper, p: BasicProperties, delivery: &Delivery) -> (BasicProperties, String) {
    let mut table = headers_of(&p);
    let mut queue = delivery.topic.clone();
    let mut p = p;
    match t {
        Tamper::Attempt(n) => {
            table.insert("x-verdict-attempt".into(), AMQPValue::LongLongInt(*n));
        }
        Tamper::Deferrals(n) => {
            table.insert("x-verdict-deferrals".into(), AMQPValue::LongLongInt(*n));
        }
        Tamper::FirstFailed(n) => {
            let mut inner = table.inner().clone();
            match n {
                Some(n) => {
                    inner.insert(
                        "x-verdict-first-failed-at-ms".into(),
                        AMQPValue::LongLongInt(*n),
                    );
                }
                None => {
                    inner.remove("x-verdict-first-failed-at-ms");
                }
            }
            table = FieldTable::from(inner);
        }
        Tamper::Published(n) => {
            table.insert(
                "x-verdict-published-at-ms".into(),
                AMQPValue::LongLongInt(*n),
            );
        }
        Tamper::History(h) => {
            table.insert(
                "x-verdict-history".into(),
                AMQPValue::LongString(LongString::from(h.as_str())),
            );
        }
        Tamper::Signature(i, digit) => {
            if let Some(AMQPValue::LongString(s)) = table.inner().get("x-verdict-signature") {
                let mut sig = String::from_utf8_lossy(s.as_bytes())
                    .into_owned()
                    .into_bytes();
                let at = i.index(sig.len());
                let replacement = b"0123456789abcdef"[usize::from(*digit)];
                sig[at] = if sig[at] == replacement {
                    if replacement == b'0' { b'1' } else { b'0' }
                } else {
                    replacement
                };
                table.insert(
                    "x-verdict-signature".into(),
                    AMQPValue::LongString(LongString::from(sig)),
                );
            }
        }
        Tamper::SignatureCut(i) => {
            if let Some(AMQPValue::LongString(s)) = table.inner().get("x-verdict-signature") {
                let mut sig = s.as_bytes().to_vec();
                sig.truncate(i.index(sig.len()));
                table.insert(
                    "x-verdict-signature".into(),
                    AMQPValue::LongString(LongString::from(sig)),
                );
            }
        }
        Tamper::NoSignature => {
            let mut inner = table.inner().clone();
            inner.remove("x-verdict-signature");
            table = FieldTable::from(inner);
        }
        Tamper::MessageId(id) => p = p.with_message_id(ShortString::from(id.as_str())),
        Tamper::Queue(q) => queue = q.clone(),
    }
    (p.with_headers(table), queue)
}

/// The header names the RabbitMQ source never passes on.
fn kept_back(name: &str) -> bool {
    const RABBITMQ_OWN: [&str; 6] = [
        "x-first-death-exchange",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
    ];
    name.starts_with("x-verdict-") || name.starts_with("x-death") || RABBITMQ_OWN.contains(&name)
}

proptest! {
    #![proptest_config(config())]

    /// `headers::to_delivery`: whatever headers a producer sends, none of the gateway's or
    /// RabbitMQ's own reaches the consumer and the message starts at attempt 0 with no
    /// history (it cannot forge them); a genuine copy gives back exactly the history it was
    /// signed with; a copy whose signed headers, signature, message id or queue were changed
    /// is treated as unsigned.
    #[test]
    fn rabbitmq_headers(case in rabbit_case(), now in any::<u64>()) {
        match case {
            RabbitCase::Forged { table, id, expiration, timestamp } => {
                let mut t = FieldTable::default();
                for (name, value) in table {
                    t.insert(ShortString::from(name), value);
                }
                let mut p = BasicProperties::default().with_headers(t);
                if let Some(id) = id { p = p.with_message_id(ShortString::from(id)); }
                if let Some(e) = &expiration { p = p.with_expiration(ShortString::from(verdict_runtime::text::one_line(e, 255))); }
                if let Some(ts) = timestamp { p = p.with_timestamp(ts); }
                let d = rabbit::to_delivery("orders", &p, b"body", false, now, &key());
                prop_assert_eq!((d.attempts_spent, d.deferrals, d.first_failed_at_ms), (0, 0, None));
                prop_assert!(d.history.is_empty());
                for name in d.headers.keys() {
                    prop_assert!(!kept_back(name), "{name} passed on");
                }
                let _ = d.deadline_ms();
            }
            RabbitCase::Genuine { delivery, failed, spend } => {
                let p = rabbit::next_properties(&delivery, Some((&failed, spend)), &key());
                let d = rabbit::to_delivery(&delivery.topic, &p, b"", false, now, &key());
                let attempt = if spend { delivery.attempts_spent.saturating_add(1) } else { delivery.attempts_spent };
                let deferrals = if spend { delivery.deferrals } else { delivery.deferrals.saturating_add(1) };
                prop_assert_eq!((d.attempts_spent, d.deferrals), (attempt, deferrals));
                let clamp = |n: u64| n.min(i64::MAX as u64);
                prop_assert_eq!(d.first_failed_at_ms, Some(clamp(delivery.first_failed_at_ms.unwrap_or(failed.at_ms))));
                prop_assert_eq!(d.published_at_ms, clamp(delivery.published_at_ms));
                let mut history = delivery.history.clone();
                history.push(failed.clone());
                let keep = history.len().saturating_sub(100);
                prop_assert_eq!(&d.history, &history[keep..].to_vec());
                prop_assert_eq!(&d.headers, &delivery.headers);
                prop_assert_eq!(&d.id, &delivery.id);
                prop_assert_eq!(&d.content_type, &delivery.content_type);
            }
            RabbitCase::Tampered { delivery, failed, tamper } => {
                let p = rabbit::next_properties(&delivery, Some((&failed, true)), &key());
                let changed = changes_signed(&tamper, &headers_of(&p), &delivery);
                let (p, queue) = apply(&tamper, p, &delivery);
                let d = rabbit::to_delivery(&queue, &p, b"", false, now, &key());
                if changed {
                    prop_assert_eq!((d.attempts_spent, d.deferrals, d.first_failed_at_ms), (0, 0, None), "{:?}", tamper);
                    prop_assert!(d.history.is_empty());
                } else {
                    prop_assert_eq!(d.attempts_spent, delivery.attempts_spent.saturating_add(1));
                }
                for name in d.headers.keys() {
                    prop_assert!(!kept_back(name), "{name} passed on");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 8. NATS message headers and the attempt history in the key-value bucket.

fn nats_ttl_value() -> BoxedStrategy<String> {
    prop_oneof![
        2 => any::<u64>().prop_map(|n| n.to_string()),
        2 => prop::sample::select(&[
            "30s", "1h", "1h 30m", "never", "5ns", "1000000000000000000y", "18446744073709551616",
            "-1", " 15 ", "1.5s", "0", "", "2562047788015215h 30m 8s", "99999999999999999999d",
        ][..]).prop_map(String::from),
        1 => (any::<u32>(), prop::sample::select(&["ns", "us", "ms", "s", "m", "h", "d", "w", "M", "y"][..]))
            .prop_map(|(n, u)| format!("{n}{u}")),
        1 => short_string(16),
    ]
    .boxed()
}

fn nats_pairs() -> BoxedStrategy<Vec<(String, String)>> {
    let name = prop_oneof![
        3 => prop::sample::select(&[
            "Nats-Msg-Id", "Nats-TTL", "verdict-message-id", "content-type", "Content-Type",
            "x-message-deadline-ms", "x-message-ttl-ms", "Nats-Expected-Stream", "tenant",
        ][..]).prop_map(String::from),
        1 => short_string(16),
    ];
    let value = prop_oneof![2 => nats_ttl_value(), 2 => nasty_string(32)];
    prop::collection::vec((name, value), 0..8).boxed()
}

/// The headers, as the client would hold them (pairs it could not carry are left out).
fn nats_headers(pairs: &[(String, String)]) -> async_nats::HeaderMap {
    use std::str::FromStr;
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(n), Ok(v)) = (
            async_nats::HeaderName::from_str(name),
            async_nats::HeaderValue::from_str(value),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// A `Nats-TTL` in ms, by the documented rule: whole seconds, else a duration.
fn ttl_oracle(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(s) = value.parse::<u64>() {
        return Some(s.saturating_mul(1_000));
    }
    humantime::parse_duration(value)
        .ok()
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
}

fn history() -> BoxedStrategy<History> {
    (
        any::<u32>(),
        any::<u32>(),
        prop::option::of(any::<u64>()),
        prop::collection::vec(attempt_spec(), 0..6),
        any::<bool>(),
    )
        .prop_map(
            |(attempt, deferrals, first_failed_at_ms, attempts, dead_lettered)| History {
                attempt,
                deferrals,
                first_failed_at_ms,
                attempts,
                dead_lettered,
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(config())]

    /// `nats::delivery_of`: never panics; no `Nats-*` header reaches the consumer; the id is
    /// a replay's `verdict-message-id`, else `Nats-Msg-Id`, else stream-sequence; a
    /// `Nats-TTL` becomes the deadline (saturating) unless the producer gave one; and the
    /// result does not depend on the header map's iteration order.
    #[test]
    fn nats_headers_to_delivery(pairs in nats_pairs(), payload in any_bytes(),
                                seq in any::<u64>(), published in small_or_any_u64()) {
        let headers = nats_headers(&pairs);
        let d = delivery_of("orders.eu", &payload, Some(&headers), "VERDICT", seq, published);
        prop_assert_eq!(&d.payload, &payload);
        prop_assert_eq!(d.topic.as_str(), "orders.eu");
        for name in d.headers.keys() {
            prop_assert!(!name.starts_with("Nats-"), "{name} passed on");
        }
        let first = |name: &str| headers.get(name).map(|v| v.as_str().to_string());
        let id = first("verdict-message-id")
            .or_else(|| first("Nats-Msg-Id"))
            .unwrap_or_else(|| format!("VERDICT-{seq}"));
        prop_assert_eq!(&d.id, &id);
        let producer_deadline = first(DEADLINE_HEADER);
        match (first("Nats-TTL").and_then(|v| ttl_oracle(&v)), producer_deadline) {
            (_, Some(own)) => prop_assert_eq!(d.headers.get(DEADLINE_HEADER), Some(&own)),
            (Some(ttl), None) => prop_assert_eq!(
                d.headers.get(DEADLINE_HEADER),
                Some(&published.saturating_add(ttl).to_string())
            ),
            (None, None) => prop_assert!(!d.headers.contains_key(DEADLINE_HEADER)),
        }
        // The same headers in another map (another iteration order): the same delivery.
        for _ in 0..3 {
            let again = delivery_of("orders.eu", &payload, Some(&nats_headers(&pairs)), "VERDICT", seq, published);
            prop_assert_eq!((&again.id, &again.headers, &again.content_type), (&d.id, &d.headers, &d.content_type));
        }
        let _ = d.deadline_ms();
    }

    /// The NATS attempt history (MessagePack in the shared bucket): any bytes decode or are
    /// refused without a panic; what decodes re-encodes to the same history; any history
    /// round-trips.
    #[test]
    fn nats_history(bytes in prop_oneof![
                        2 => any_bytes(),
                        2 => (history(), edits(JSON_TOKENS)).prop_map(|(h, e)| mutate(&rmp_serde::to_vec_named(&h).expect("encodes"), &e)),
                        1 => (1..1_100usize, any::<bool>()).prop_map(|(depth, map)| {
                            // {"zz": [[[...1]]]}: an unknown field, ignored as deep as it nests.
                            let mut bytes = b"\x81\xa2zz".to_vec();
                            bytes.extend(std::iter::repeat_n(if map { 0x81 } else { 0x91 }, depth).flat_map(|b| {
                                if b == 0x81 { vec![0x81, 0xa1, b'k'] } else { vec![b] }
                            }));
                            bytes.push(0x01);
                            bytes
                        }),
                    ],
                    h in history()) {
        if let Ok(decoded) = History::decode(&bytes) {
            let again = rmp_serde::to_vec_named(&decoded).expect("encodes");
            prop_assert_eq!(History::decode(&again).expect("decodes"), decoded);
        }
        let packed = rmp_serde::to_vec_named(&h).expect("encodes");
        prop_assert_eq!(History::decode(&packed).expect("decodes"), h);
    }

    /// `x-message-deadline-ms` / `x-message-ttl-ms` (any case): the deadline is the first
    /// header's number, else publication + TTL (saturating), else none; garbage is none.
    #[test]
    fn deadline_headers(deadline in prop::option::of(prop_oneof![any::<u64>().prop_map(|n| format!(" {n} ")), nasty_string(24), Just("18446744073709551616".to_string())]),
                        ttl in prop::option::of(prop_oneof![any::<u64>().prop_map(|n| n.to_string()), nasty_string(24), Just("-5".to_string())]),
                        upper in any::<bool>(),
                        published in any::<u64>()) {
        let name = |n: &str| if upper { n.to_ascii_uppercase() } else { n.to_string() };
        let mut headers = BTreeMap::new();
        if let Some(v) = &deadline { headers.insert(name(DEADLINE_HEADER), v.clone()); }
        if let Some(v) = &ttl { headers.insert(name(TTL_HEADER), v.clone()); }
        let d = Delivery { headers, published_at_ms: published, ..Delivery::default() };
        let want = deadline
            .as_deref()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .or_else(|| ttl.as_deref().and_then(|v| v.trim().parse::<u64>().ok()).map(|t| published.saturating_add(t)));
        prop_assert_eq!(d.deadline_ms(), want);
    }
}

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
        let result: Result<(), verdict_gateway::admin::ApiError> = match name {
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
            "publish" => bodies::publish("orders", &body, 1_700_000_000_000).map(|messages| {
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
    #[test]
    fn dlq_replay_headers((original, id) in dlq_original(), token in "[a-z0-9-]{1,24}") {
        let nats = verdict_gateway::sources::nats::replay_headers(&original, &id, &token);
        prop_assert_eq!(nats.get(verdict_gateway::model::REPLAY_HEADER).map(|v| v.as_str().to_string()), Some(token.clone()));
        let shown = nats.get("verdict-message-id").map(|v| v.as_str().to_string()).unwrap_or_default();
        prop_assert!(is_one_line(&shown) && shown.len() <= 1_024);
        let rabbit = verdict_gateway::sources::rabbitmq::replay_properties(&original, &id, &token);
        let table = rabbit.headers().clone().unwrap_or_default();
        for name in original.headers.keys() {
            if name.len() <= 255 && name != verdict_gateway::model::REPLAY_HEADER {
                prop_assert!(table.inner().contains_key(name.as_str()), "{name:?} dropped");
            }
        }
        let id = rabbit.message_id().clone().expect("an id");
        prop_assert!(id.as_str().len() <= 255 && is_one_line(id.as_str()));
        let _ = original.payload_bytes();
    }
}

/// A host for the upload target, made once.
fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host::new(&Limits::new()).expect("a host"))
}

fn component_seeds() -> Vec<Vec<u8>> {
    vec![
        wat::parse_str("(component)").expect("wat"),
        wat::parse_str("(module)").expect("wat"),
        wat::parse_str(r#"(component (core module (func (export "f"))))"#).expect("wat"),
        wat::parse_str(r#"(component (import "verdict:policy/host@0.1.0" (instance)))"#)
            .expect("wat"),
    ]
}

proptest! {
    #![proptest_config(config_tenth())]

    /// `PUT /v1/policies/{name}/component` (`Host::load_bytes`, what an upload runs first):
    /// any bytes, or a mutated small component or module, are refused with an error that
    /// names the upload, never loaded and never a panic.
    #[test]
    fn admin_upload_component(bytes in prop_oneof![
        1 => any_bytes(),
        2 => (prop::sample::select(component_seeds()), edits(&["\0asm", "\r\n", "\x0d\0\x01\0", "\x01\0\0\0", "\x00", "\u{ff}"]))
            .prop_map(|(seed, e)| mutate(&seed, &e)),
        1 => prop::sample::select(component_seeds()),
    ]) {
        match host().load_bytes(&bytes, "upload.wasm") {
            Ok(policy) => prop_assert!(false, "loaded {:?}", policy),
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.contains("upload.wasm"), "{shown}");
            }
        }
    }
}

#[test]
fn the_budget_comes_from_the_environment() {
    assert!(cases() >= 1);
    assert!(config().failure_persistence.is_none());
}
