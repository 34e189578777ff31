//! What travels with a RabbitMQ message between deliveries: the attempt history in
//! `x-verdict-*` headers (a retried message is a new copy, so its history must ride along),
//! and the delay buckets that copy waits in.

use std::collections::BTreeMap;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::AttemptSpec;
use crate::sources::{AttemptRecord, Delivery};

const ATTEMPT: &str = "x-verdict-attempt";
const DEFERRALS: &str = "x-verdict-deferrals";
const FIRST_FAILED: &str = "x-verdict-first-failed-at-ms";
const PUBLISHED: &str = "x-verdict-published-at-ms";
const HISTORY: &str = "x-verdict-history";

/// The shortest delay bucket; each next one is 25% longer (rounded up to whole ms).
const FIRST_BUCKET_MS: u64 = 50;
/// The longest delay bucket: a day.
pub const MAX_BUCKET_MS: u64 = 24 * 3_600_000;

/// The delay bucket a verdict's delay waits in: the shortest bucket at least as long as the
/// delay (a retry never comes early, and at most 25% late), capped at a day; 0 stays 0
/// (republished at once).
pub fn bucket_ms(delay_ms: u64) -> u64 {
    if delay_ms == 0 {
        return 0;
    }
    let mut bucket = FIRST_BUCKET_MS;
    while bucket < delay_ms && bucket < MAX_BUCKET_MS {
        bucket = bucket + bucket.div_ceil(4);
    }
    bucket.min(MAX_BUCKET_MS)
}

/// The delivery a consumed message stands for: `queue` is its topic; its history comes
/// from the `x-verdict-*` headers, which are not passed on to the consumer (nor RabbitMQ's
/// own `x-death`).
pub fn to_delivery(
    queue: &str,
    properties: &BasicProperties,
    payload: &[u8],
    redelivered: bool,
    now_ms: u64,
) -> Delivery {
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
        ..Delivery::default()
    };
    let Some(headers) = properties.headers() else {
        return delivery;
    };
    for (name, value) in headers.inner() {
        let name = name.as_str();
        match name {
            ATTEMPT => delivery.attempt = number(value).try_into().unwrap_or(u32::MAX),
            DEFERRALS => delivery.deferrals = number(value).try_into().unwrap_or(u32::MAX),
            FIRST_FAILED => delivery.first_failed_at_ms = Some(number(value)),
            PUBLISHED => delivery.published_at_ms = number(value),
            HISTORY => {
                delivery.history = text(value)
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
            }
            "x-death"
            | "x-first-death-exchange"
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
    delivery
}

/// The properties of the copy that carries `delivery` to its next attempt; with `failed`,
/// that failure is added to the history (a retry spends an attempt, a delay a deferral).
pub fn next_properties(
    delivery: &Delivery,
    failed: Option<(&AttemptRecord, bool)>,
) -> BasicProperties {
    let (mut attempt, mut deferrals) = (delivery.attempt, delivery.deferrals);
    let mut first_failed = delivery.first_failed_at_ms;
    let mut history: Vec<AttemptSpec> = delivery.history.clone();
    if let Some((failed, spend_attempt)) = failed {
        if spend_attempt {
            attempt += 1;
        } else {
            deferrals += 1;
        }
        first_failed.get_or_insert(failed.at_ms);
        history.push(failed.into());
    }
    let mut headers = string_table(&delivery.headers);
    let int = |n: u64| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
    headers.insert(ATTEMPT.into(), int(attempt.into()));
    headers.insert(DEFERRALS.into(), int(deferrals.into()));
    headers.insert(PUBLISHED.into(), int(delivery.published_at_ms));
    if let Some(at) = first_failed {
        headers.insert(FIRST_FAILED.into(), int(at));
    }
    let history = serde_json::to_string(&history).unwrap_or_else(|_| "[]".into());
    headers.insert(
        HISTORY.into(),
        AMQPValue::LongString(LongString::from(history)),
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

fn text(value: &AMQPValue) -> Option<String> {
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
    fn buckets_never_come_early_and_at_most_a_quarter_late() {
        assert_eq!(bucket_ms(0), 0);
        assert_eq!(bucket_ms(1), 50);
        let mut d = 1;
        while d < MAX_BUCKET_MS {
            let b = bucket_ms(d);
            assert!(b >= d, "{d} -> {b}");
            assert!(d < 50 || b * 4 <= d * 5 + 4, "{d} -> {b}");
            d = d * 3 / 2 + 7;
        }
        assert_eq!(bucket_ms(10 * MAX_BUCKET_MS), MAX_BUCKET_MS);
        // Few enough queues to declare lazily: about 64 from 50 ms to a day.
        let mut buckets = std::collections::BTreeSet::new();
        for e in 0..40 {
            buckets.insert(bucket_ms(1 << e));
        }
        assert!(buckets.len() < 70, "{}", buckets.len());
    }

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
        let properties = next_properties(&delivery, Some((&failed, true)));
        let next = to_delivery("orders", &properties, b"{}", false, 9_999);
        assert_eq!((next.attempt, next.deferrals), (1, 0));
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
        let properties = next_properties(&delivery, Some((&failed, false)));
        let after = to_delivery("orders", &properties, b"{}", false, 9_999);
        assert_eq!((after.attempt, after.deferrals), (1, 1));
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
        let d = to_delivery("q", &properties, b"", true, 5);
        assert_eq!((d.attempt, d.history.len(), d.published_at_ms), (0, 0, 5));
        assert!(d.headers.is_empty());
        assert!(d.redelivery);
    }
}
