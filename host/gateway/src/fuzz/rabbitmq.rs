//! RabbitMQ message headers: the signed attempt history, tampered with every way.

use proptest::prelude::*;
use proptest::sample::Index;
use verdict_fuzz::*;

use super::attempt_record;
use crate::model::Delivery;
use crate::sources::rabbitmq::headers::{self as rabbit, HistoryKey};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use verdict_runtime::AttemptRecord;

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
            3 => prop::collection::vec(attempt_record(), 0..4),
            1 => prop::collection::vec(attempt_record(), 95..110),
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
