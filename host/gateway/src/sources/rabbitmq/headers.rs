//! What travels with a RabbitMQ message between deliveries: the signed attempt history (the
//! `signed_history` module: the same fields on every broker, here as AMQP integers and long
//! strings) and what the message's properties carry (its id, content type, publish time and
//! TTL).

use std::collections::BTreeMap;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::model::{AttemptRecord, Delivery};
pub use crate::sources::delay_buckets::{MAX_BUCKET_MS, all_buckets, bucket_ms};
use crate::sources::signed_history::{
    ATTEMPT, DEFERRALS, FIRST_FAILED, HISTORY, KEY_ID, PREFIX, PUBLISHED, SIGNATURE, SignedHistory,
};
pub use crate::sources::signed_history::{HistoryCheck, HistoryKey};

/// The delivery a consumed message stands for: see [`read_delivery`].
pub fn to_delivery(
    queue: &str,
    properties: &BasicProperties,
    payload: &[u8],
    redelivered: bool,
    now_ms: u64,
    key: &HistoryKey,
) -> Delivery {
    read_delivery(queue, properties, payload, redelivered, now_ms, key).0
}

/// The delivery a consumed message stands for, and how its history was read: `queue` is
/// its topic; its history comes from the `x-verdict-*` headers when `key` signed them;
/// when another key did, its counts are taken as they are (never fewer attempts than it
/// says) and its history bounded; otherwise it starts at attempt 0. No `x-verdict-*`
/// header is passed on to the consumer (nor RabbitMQ's own `x-death`).
pub fn read_delivery(
    queue: &str,
    properties: &BasicProperties,
    payload: &[u8],
    redelivered: bool,
    now_ms: u64,
    key: &HistoryKey,
) -> (Delivery, HistoryCheck) {
    let mut delivery = Delivery {
        id: properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_string())
            .unwrap_or_default(),
        topic: queue.to_string(),
        payload: payload.to_vec(),
        content_type: properties
            .content_type()
            .as_ref()
            .map(|c| c.as_str().to_string()),
        published_at_ms: properties
            .timestamp()
            .map_or(now_ms, |s| s.saturating_mul(1_000)),
        redelivery: redelivered,
        source: super::NAME,
        ..Delivery::default()
    };
    // The message's own TTL (`expiration`, ms as text) is its deadline, for policies; it
    // travels on as a header, since the retry copies carry no expiration.
    if let Some(ttl) = properties
        .expiration()
        .as_ref()
        .and_then(|e| e.as_str().trim().parse::<u64>().ok())
    {
        delivery.headers.insert(
            crate::model::DEADLINE_HEADER.to_string(),
            delivery.published_at_ms.saturating_add(ttl).to_string(),
        );
    }
    let Some(headers) = properties.headers() else {
        return (delivery, HistoryCheck::Unsigned);
    };
    let mut signed = SignedHistory {
        queue: queue.to_string(),
        id: delivery.id.clone(),
        ..SignedHistory::default()
    };
    let (mut signature, mut has_published, mut key_id) = (None, false, None);
    for (name, value) in headers.inner() {
        let name = name.as_str();
        match name {
            ATTEMPT => signed.attempt = number(value),
            DEFERRALS => signed.deferrals = number(value),
            FIRST_FAILED => signed.first_failed = Some(number(value)),
            PUBLISHED => {
                signed.published = number(value);
                has_published = true;
            }
            HISTORY => signed.history = text(value).unwrap_or_default(),
            SIGNATURE => signature = text(value),
            KEY_ID => key_id = text(value),
            n if n.starts_with(PREFIX) || n.starts_with("x-death") => {}
            "x-first-death-exchange"
            | "x-first-death-queue"
            | "x-first-death-reason"
            | "x-last-death-exchange"
            | "x-last-death-queue"
            | "x-last-death-reason" => {}
            _ => {
                if let Some(t) = text(value) {
                    delivery.headers.insert(name.to_string(), t);
                }
            }
        }
    }
    let check = signed.read_into(
        signature.as_deref(),
        key_id,
        has_published,
        key,
        &mut delivery,
    );
    (delivery, check)
}

/// The properties of the copy that carries `delivery` to its next attempt; with `failed`,
/// that failure is added to the history (a retry spends an attempt, a delay a deferral).
/// The history headers are signed with `key`.
pub fn next_properties(
    delivery: &Delivery,
    failed: Option<(&AttemptRecord, bool)>,
    key: &HistoryKey,
) -> BasicProperties {
    let signed = SignedHistory::next(delivery, failed);
    let mut headers = string_table(&delivery.headers);
    // Stored as i64 by AMQP; values past it saturate (and are signed as stored).
    let int = |n: u64| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
    let clamp = |n: u64| u64::try_from(i64::try_from(n).unwrap_or(i64::MAX)).unwrap_or(0);
    let signed = SignedHistory {
        published: clamp(signed.published),
        first_failed: signed.first_failed.map(clamp),
        ..signed
    };
    headers.insert(ATTEMPT.into(), int(signed.attempt));
    headers.insert(DEFERRALS.into(), int(signed.deferrals));
    headers.insert(PUBLISHED.into(), int(signed.published));
    if let Some(at) = signed.first_failed {
        headers.insert(FIRST_FAILED.into(), int(at));
    }
    headers.insert(
        HISTORY.into(),
        AMQPValue::LongString(LongString::from(signed.history.clone())),
    );
    headers.insert(
        SIGNATURE.into(),
        AMQPValue::LongString(LongString::from(key.sign(&signed))),
    );
    headers.insert(
        KEY_ID.into(),
        AMQPValue::LongString(LongString::from(key.id())),
    );
    let mut properties = BasicProperties::default()
        .with_message_id(ShortString::from(delivery.id.as_str()))
        .with_headers(headers)
        .with_delivery_mode(2);
    if let Some(ct) = &delivery.content_type {
        properties = properties.with_content_type(ShortString::from(ct.as_str()));
    }
    properties
}

/// Headers as an AMQP table of long strings.
pub fn string_table(headers: &BTreeMap<String, String>) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(
            ShortString::from(k.as_str()),
            AMQPValue::LongString(LongString::from(v.as_str())),
        );
    }
    table
}

fn number(value: &AMQPValue) -> u64 {
    match value {
        AMQPValue::LongLongInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::LongInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::LongUInt(n) => u64::from(*n),
        AMQPValue::ShortInt(n) => u64::try_from(*n).unwrap_or(0),
        AMQPValue::ShortUInt(n) => u64::from(*n),
        AMQPValue::Timestamp(n) => *n,
        other => text(other).and_then(|t| t.parse().ok()).unwrap_or(0),
    }
}

pub(super) fn text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::Boolean(b) => Some(b.to_string()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::LongInt(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_survives_the_round_trip_through_headers() {
        let mut delivery = Delivery {
            id: "m-1".into(),
            topic: "orders".into(),
            headers: BTreeMap::from([("tenant".into(), "eu".into())]),
            content_type: Some("application/json".into()),
            published_at_ms: 1_000,
            ..Delivery::default()
        };
        let failed = AttemptRecord {
            at_ms: 2_000,
            kind: "http.503".into(),
            message: "busy".into(),
        };
        let key = HistoryKey::new(b"test key".to_vec());
        let properties = next_properties(&delivery, Some((&failed, true)), &key);
        let next = to_delivery("orders", &properties, b"{}", false, 9_999, &key);
        assert_eq!((next.attempts_spent, next.deferrals), (1, 0));
        assert_eq!(next.first_failed_at_ms, Some(2_000));
        assert_eq!(next.published_at_ms, 1_000);
        assert_eq!(next.history.len(), 1);
        assert_eq!(next.history[0].kind, "http.503");
        assert_eq!(
            next.headers, delivery.headers,
            "x-verdict-* stay out of the headers"
        );
        assert_eq!(next.id, "m-1");
        delivery = next;
        let properties = next_properties(&delivery, Some((&failed, false)), &key);
        let after = to_delivery("orders", &properties, b"{}", false, 9_999, &key);
        assert_eq!((after.attempts_spent, after.deferrals), (1, 1));
        assert_eq!(after.history.len(), 2);
        assert_eq!(after.first_failed_at_ms, Some(2_000));
    }

    #[test]
    fn garbage_headers_do_not_break_a_delivery() {
        let mut table = FieldTable::default();
        table.insert(ATTEMPT.into(), AMQPValue::LongString("many".into()));
        table.insert(HISTORY.into(), AMQPValue::LongString("{not json".into()));
        table.insert("x-death".into(), AMQPValue::Boolean(true));
        let properties = BasicProperties::default().with_headers(table);
        let key = HistoryKey::new(b"k".to_vec());
        let d = to_delivery("q", &properties, b"", true, 5, &key);
        assert_eq!(
            (d.attempts_spent, d.history.len(), d.published_at_ms),
            (0, 0, 5)
        );
        assert!(d.headers.is_empty());
        assert!(d.redelivery);
    }

    #[test]
    fn a_producer_cannot_forge_attempts_or_history() {
        let key = HistoryKey::new(b"group key".to_vec());
        let delivery = Delivery {
            id: "m-1".into(),
            topic: "orders".into(),
            ..Delivery::default()
        };
        let failed = AttemptRecord {
            at_ms: 2_000,
            kind: "http.503".into(),
            message: "busy".into(),
        };
        let genuine = next_properties(&delivery, Some((&failed, true)), &key);
        // Unsigned: a producer's own x-verdict-* headers (u32::MAX attempts, a timestamp
        // past the year 9999) count for nothing.
        let mut table = FieldTable::default();
        table.insert(ATTEMPT.into(), AMQPValue::LongLongInt(i64::from(u32::MAX)));
        table.insert(
            HISTORY.into(),
            AMQPValue::LongString(
                r#"[{"at-ms": 18446744073709551615, "kind": "x", "message": "y"}]"#.into(),
            ),
        );
        let forged = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_headers(table.clone());
        let d = to_delivery("orders", &forged, b"", false, 5, &key);
        assert_eq!((d.attempts_spent, d.history.len()), (0, 0));
        assert!(d.headers.is_empty(), "x-verdict-* never reach the consumer");
        // Signed by another gateway's key: a misconfiguration, named, and counted as it
        // says (never fewer attempts), not reset.
        let other = HistoryKey::new(b"another group".to_vec());
        let (d, check) = read_delivery("orders", &genuine, b"", false, 5, &other);
        assert_eq!(check, HistoryCheck::ForeignKey(key.id()));
        assert_eq!((d.attempts_spent, d.history.len()), (1, 1));
        assert_ne!(key.id(), other.id());
        // A forged key id on headers a producer wrote cannot lower anything: at worst its
        // own message is counted as further along.
        let mut claimed = table.clone();
        claimed.insert(SIGNATURE.into(), AMQPValue::LongString("00".into()));
        claimed.insert(
            KEY_ID.into(),
            AMQPValue::LongString("0123456789abcdef".into()),
        );
        let claimed = forged.clone().with_headers(claimed);
        let (d, check) = read_delivery("orders", &claimed, b"", false, 5, &key);
        assert!(matches!(check, HistoryCheck::ForeignKey(_)));
        assert_eq!(d.attempts_spent, u32::MAX);
        assert!(d.history.iter().all(|a| a.kind.len() <= 128));
        // Edited after signing, with this gateway's key id: ignored.
        let mut edited = genuine.headers().clone().unwrap();
        edited.insert(ATTEMPT.into(), AMQPValue::LongLongInt(0));
        let edited = genuine.clone().with_headers(edited);
        let d = to_delivery("orders", &edited, b"", false, 5, &key);
        assert_eq!((d.attempts_spent, d.history.len()), (0, 0));
        // The same headers on another message id do not verify either.
        let moved = genuine.clone().with_message_id("m-2".into());
        assert_eq!(
            to_delivery("orders", &moved, b"", false, 5, &key).attempts_spent,
            0
        );
        // The genuine copy does.
        assert_eq!(
            to_delivery("orders", &genuine, b"", false, 5, &key).attempts_spent,
            1
        );
    }
}
