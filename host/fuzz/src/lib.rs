//! # verdict-fuzz: what every crate's fuzz targets share
//!
//! The fuzz and property targets of Verdict live beside the crates they test (each crate's
//! `tests/fuzz.rs`, or its `fuzz` test module for what is not public API); this crate holds
//! what they share: the budget, and the generators of hostile input - any bytes, text with
//! CR/LF/NUL and the largest code point, mutations of valid documents, and documents valid
//! but for one field of the wrong type (a [`Kind`] describes a document's shape).
//!
//! Each target feeds arbitrary and structure-aware input, one input per case, and checks
//! properties of the answer, not only that there was one. Cases per target:
//! `VERDICT_FUZZ_CASES` (default 256, a few seconds per target in a debug build). A long
//! run, by hand:
//!
//! ```text
//! VERDICT_FUZZ_CASES=1000000 cargo test --release -p verdict-registry --test fuzz
//! VERDICT_FUZZ_CASES=1000000 cargo test --release -p verdict-gateway --lib fuzz
//! ```
//!
//! Failures are not persisted (nothing is written into the source tree); a failing case is
//! shrunk and printed, and is reproduced by turning it into a unit test.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// The budget.

/// Cases per target: `VERDICT_FUZZ_CASES`, default 256.
pub fn cases() -> u32 {
    std::env::var("VERDICT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(256)
}

/// Every target's config: the budget, no failure files, bounded shrinking.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 4_096,
        ..ProptestConfig::default()
    }
}

/// The budget for a target whose cases compile code (a tenth, at least 16).
pub fn config_tenth() -> ProptestConfig {
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
pub const NASTY: &[char] = &[
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

/// A character from [`NASTY`] mostly, any character sometimes.
pub fn nasty_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range(' ', '~'),
        3 => prop::sample::select(NASTY),
        1 => any::<char>(),
    ]
}

/// Up to `max` hostile characters.
pub fn short_string(max: usize) -> BoxedStrategy<String> {
    prop::collection::vec(nasty_char(), 0..=max)
        .prop_map(String::from_iter)
        .boxed()
}

/// Up to `max` hostile characters or, one time in 16, one character repeated up to 70,000
/// times (past every bound the host has: 128, 255, 512, 64 KiB).
pub fn nasty_string(max: usize) -> BoxedStrategy<String> {
    prop_oneof![
        15 => short_string(max),
        1 => (nasty_char(), 0..70_000usize).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
    ]
    .boxed()
}

/// Any bytes: short, or (one time in 16) up to 70 KB.
pub fn any_bytes() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        15 => prop::collection::vec(any::<u8>(), 0..256),
        1 => prop::collection::vec(any::<u8>(), 0..70_000),
    ]
    .boxed()
}

/// One edit of a valid document.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Delete up to this many bytes at the index.
    Delete(Index, u8),
    /// Insert these bytes at the index.
    Insert(Index, Vec<u8>),
    /// Replace the byte at the index with this one.
    Replace(Index, u8),
    /// Repeat the byte at the index this many times.
    Duplicate(Index, u16),
    /// Cut the document at the index.
    Truncate(Index),
}

/// One to five edits, inserting tokens from `dictionary`, random bytes or hostile text.
pub fn edits(dictionary: &'static [&'static str]) -> impl Strategy<Value = Vec<Edit>> {
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
pub fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
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
pub fn mutated_text(
    seeds: Vec<String>,
    dictionary: &'static [&'static str],
) -> impl Strategy<Value = String> {
    (prop::sample::select(seeds), edits(dictionary))
        .prop_map(|(seed, e)| String::from_utf8_lossy(&mutate(seed.as_bytes(), &e)).into_owned())
}

/// Tokens a JSON mutation inserts: structure, numbers past every integer type, escapes.
pub const JSON_TOKENS: &[&str] = &[
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

/// Tokens a TOML mutation inserts: headers, keys, dates, integers past `i64`.
pub const TOML_TOKENS: &[&str] = &[
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

/// A JSON scalar: null, a boolean, a number at the edges of its types, hostile text.
pub fn json_leaf() -> BoxedStrategy<Value> {
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
pub fn json_value() -> BoxedStrategy<Value> {
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
pub enum Kind {
    /// Any string.
    Str,
    /// A string, usually one of these (the parser takes any string).
    OneOf(&'static [&'static str]),
    /// One of these strings (the parser takes only these: an enum, an address).
    Enum(&'static [&'static str]),
    /// Valid as this shape, but checked after the document is read: never descended into.
    Opaque(&'static Kind),
    /// An integer that fits a `u16`.
    U16,
    /// An integer that fits a `u32`.
    U32,
    /// An integer that fits a `u64`.
    U64,
    /// An integer that fits an `i64`.
    I64,
    /// A number.
    F64,
    /// A boolean.
    Bool,
    /// An object of strings.
    StrMap,
    /// A list of strings.
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

/// A small number mostly, any `u64` sometimes, `u64::MAX` now and then.
pub fn small_or_any_u64() -> BoxedStrategy<u64> {
    prop_oneof![
        4 => 0..100_000u64,
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
    .boxed()
}

/// A valid value of `kind`.
pub fn valid(kind: Kind) -> BoxedStrategy<Value> {
    valid_as(kind, false)
}

/// A valid value of `kind` with every field present and every list non-empty: a base for
/// a field of the wrong type that leaves nothing else to complain about.
pub fn valid_full(kind: Kind) -> BoxedStrategy<Value> {
    valid_as(kind, true)
}

/// A valid value of `kind`; with `full`, every field present and every list non-empty.
pub fn valid_as(kind: Kind, full: bool) -> BoxedStrategy<Value> {
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
pub fn wrong(kind: Kind) -> BoxedStrategy<Value> {
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
pub enum Step {
    /// The object's field of this name.
    Key(&'static str),
    /// The first element of a list.
    First,
}

/// Every field of `kind` that can hold a value of the wrong type, with its shape.
pub fn paths(kind: Kind, prefix: &[Step], out: &mut Vec<(Vec<Step>, Kind)>) {
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
pub fn path_text(path: &[Step]) -> String {
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
pub fn put(doc: &mut Value, path: &[Step], value: Value) {
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
pub fn one_wrong_field(schema: Kind) -> BoxedStrategy<(Value, String)> {
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
pub fn unknown_field(schema: Kind) -> BoxedStrategy<Value> {
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
pub enum Expect {
    /// Nothing in particular (arbitrary or mutated input).
    Anything,
    /// An error naming this field.
    WrongField(String),
    /// An error about an unknown field.
    UnknownField,
}

/// One line, no control characters.
pub fn is_one_line(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

// ---------------------------------------------------------------------------------------
// The failure JSON's shape (what `verdict decide`, `POST /v1/decide` and vector files take),
// and JSON documents for any shape.

/// A failure's `error` object.
pub const ERROR_SPEC: &[(&str, Kind, bool)] = &[
    (
        "kind",
        Kind::OneOf(&["db.timeout", "http.503", "schema.bad\r\nx: 1", ""]),
        true,
    ),
    ("message", Kind::Str, false),
    ("retry-after-ms", Kind::U64, false),
    ("rejected", Kind::Bool, false),
];
/// One entry of a failure's `history`.
pub const ATTEMPT_SPEC: &[(&str, Kind, bool)] = &[
    ("at-ms", Kind::U64, true),
    ("kind", Kind::Str, true),
    ("message", Kind::Str, false),
];
/// A failure, as policies are asked about it.
pub const FAILURE_SPEC: Kind = Kind::Obj(&[
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

/// JSON text for a target: arbitrary, a mutated seed, a valid document, or one with a
/// field of the wrong type or an unknown field.
pub fn json_document(schema: Kind, seeds: Vec<String>) -> BoxedStrategy<(String, Expect)> {
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

// ---------------------------------------------------------------------------------------
// Names a generated Verdict document uses.

/// Policy names a generated document refers to.
pub const POLICY_NAMES: &[&str] = &["rules", "other"];
/// The sources a route may name.
pub const SOURCES: &[&str] = &["embedded", "nats", "rabbitmq"];
/// Pins: valid, too short, mixed case.
pub const SHA256: &[&str] = &[
    "0000000000000000000000000000000000000000000000000000000000000000",
    "abc",
    "ABCDEFabcdef0123456789ABCDEFabcdef0123456789ABCDEFabcdef01234567",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_comes_from_the_environment() {
        assert!(cases() >= 1);
        assert!(config().failure_persistence.is_none());
        assert!(config_tenth().cases >= 16);
    }
}
