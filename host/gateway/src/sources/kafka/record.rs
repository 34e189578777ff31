//! A Kafka record as the gateway reads it, and the records it writes for it: a retry copy
//! carrying the signed attempt history (`x-verdict-*` headers, replaced at every hop - the
//! headers of a record that goes round a hundred times are no longer than after one) and
//! the dead-letter record.
//!
//! A record's id is its producer's (the `[kafka] id_header` header, `message-id` by
//! default), or else where it was first read - `<topic>/<partition>@<offset>` - so a
//! record read again after a crash or a rebalance keeps its id (a consumer deduplicating by
//! it drops the duplicate); its retry copies carry it in `x-verdict-message-id`. A
//! producer's own `x-verdict-*` headers are never trusted nor passed on.

use std::collections::BTreeMap;

use rdkafka::Message as _;
use rdkafka::message::{Header, Headers as _, OwnedHeaders, OwnedMessage};

use super::dlt_headers::{Cause, Origin, TimestampType, dlt_headers};
use crate::model::{AttemptRecord, DeadLetter, Delivery};
use crate::sources::signed_history::{
    ATTEMPT, DEFERRALS, FIRST_FAILED, HISTORY, HistoryCheck, HistoryKey, KEY_ID, PREFIX, PUBLISHED,
    SIGNATURE, SignedHistory,
};

/// The header a retry copy names its route's topic in (signed).
pub(crate) const TOPIC: &str = "x-verdict-topic";
/// The header a retry copy carries the record's id in (signed).
pub(crate) const MESSAGE_ID: &str = "x-verdict-message-id";
/// The header a retry copy says when it is due in (ms since the epoch). Not signed: a forged
/// one only changes when a retry comes, never how many there are.
pub(crate) const DUE_AT: &str = "x-verdict-due-at-ms";
/// The header a retry copy names where its record was first read in (`topic/partition@offset`),
/// for the dead letter's `kafka_dlt-original-*` headers. Not signed: it names, it decides
/// nothing.
pub(crate) const ORIGIN: &str = "x-verdict-origin";
/// The header the dead-letter record carries the envelope in.
pub(crate) const ENVELOPE: &str = "verdict-envelope";
/// The header a producer names a payload's content type in.
const CONTENT_TYPE: &str = "content-type";

/// The id of a record first read at `topic`/`partition`/`offset`.
pub(crate) fn record_id(topic: &str, partition: i32, offset: i64) -> String {
    format!("{topic}/{partition}@{offset}")
}

/// A record read from a route's topic or a retry topic, ready for the pipeline.
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    /// The delivery it stands for (its topic: the route's, also for a retry copy).
    pub(crate) delivery: Delivery,
    /// How its history headers were read.
    pub(crate) check: HistoryCheck,
    /// Where the record was first read (for a copy, where its first delivery was).
    pub(crate) origin: (String, i32, i64),
    /// Where it was read: the topic (a retry topic for a copy), partition, offset.
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    /// Its timestamp, when it had one.
    pub(crate) timestamp: Option<(i64, TimestampType)>,
    /// Its key.
    pub(crate) key: Option<Vec<u8>>,
    /// Its producer's headers, byte for byte (binary ones too), without any `x-verdict-*`.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

/// When a retry copy is due (ms since the epoch), from its due header alone: what the
/// consumer's loop needs before it hands a copy to a task, which reads the rest. `None`:
/// due now. (Reading headers can panic in the client on a header name that is not UTF-8;
/// the caller guards.)
pub(crate) fn due_at_ms(message: &OwnedMessage) -> Option<u64> {
    let header = message.headers()?.iter().find(|h| h.key == DUE_AT)?;
    std::str::from_utf8(header.value?).ok()?.trim().parse().ok()
}

/// The longest producer id taken as a record's id.
const MAX_ID_BYTES: usize = 255;

/// `message` as the gateway reads it at `now_ms` (`id_header` naming its producer's id);
/// `from_retry_topic` when it was read from
/// a retry topic, whose copies name their route's topic (a copy that names none, or one
/// whose signature does not hold, is delivered for the retry topic itself - which no route
/// takes - and so goes nowhere but back to an operator).
pub(crate) fn read(
    message: &OwnedMessage,
    id_header: &str,
    from_retry_topic: bool,
    now_ms: u64,
    key: &HistoryKey,
) -> Incoming {
    let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
    let timestamp = match message.timestamp() {
        rdkafka::Timestamp::CreateTime(ms) if ms >= 0 => Some((ms, TimestampType::CreateTime)),
        rdkafka::Timestamp::LogAppendTime(ms) if ms >= 0 => {
            Some((ms, TimestampType::LogAppendTime))
        }
        _ => None,
    };
    let mut delivery = Delivery {
        id: record_id(topic, partition, offset),
        topic: topic.to_string(),
        payload: message.payload().map(<[u8]>::to_vec).unwrap_or_default(),
        published_at_ms: timestamp.map_or(now_ms, |(ms, _)| u64::try_from(ms).unwrap_or(0)),
        source: super::NAME,
        ..Delivery::default()
    };
    let mut own: BTreeMap<&str, String> = BTreeMap::new();
    let mut headers = Vec::new();
    if let Some(all) = message.headers() {
        for h in all.iter() {
            let value = h.value.unwrap_or_default();
            if h.key.starts_with(PREFIX) {
                if let Ok(text) = std::str::from_utf8(value) {
                    own.insert(h.key, text.to_string());
                }
                continue;
            }
            if h.key == id_header
                && let Ok(id) = std::str::from_utf8(value)
                && !id.is_empty()
                && id.len() <= MAX_ID_BYTES
                && !id.chars().any(char::is_control)
            {
                delivery.id = id.to_string();
            }
            headers.push((h.key.to_string(), value.to_vec()));
            // The consumer gets headers as text: a binary one stays in the copies and the
            // dead letter, not in the push.
            if let Ok(text) = std::str::from_utf8(value) {
                if h.key.eq_ignore_ascii_case(CONTENT_TYPE) {
                    delivery.content_type = Some(text.to_string());
                }
                delivery.headers.insert(h.key.to_string(), text.to_string());
            }
        }
    }
    let number = |name: &str| own.get(name).and_then(|v| v.trim().parse::<u64>().ok());
    let mut check = HistoryCheck::Unsigned;
    if from_retry_topic && let (Some(route_topic), Some(id)) = (own.get(TOPIC), own.get(MESSAGE_ID))
    {
        let signed = SignedHistory {
            queue: route_topic.clone(),
            id: id.clone(),
            attempt: number(ATTEMPT).unwrap_or(0),
            deferrals: number(DEFERRALS).unwrap_or(0),
            first_failed: number(FIRST_FAILED),
            published: number(PUBLISHED).unwrap_or(0),
            history: own.get(HISTORY).cloned().unwrap_or_default(),
        };
        let mut copy = delivery.clone();
        copy.topic = route_topic.clone();
        copy.id = id.clone();
        check = signed.read_into(
            own.get(SIGNATURE).map(String::as_str),
            own.get(KEY_ID).cloned(),
            own.contains_key(PUBLISHED),
            key,
            &mut copy,
        );
        if check != HistoryCheck::Unsigned {
            delivery = copy;
        }
    }
    let origin = own
        .get(ORIGIN)
        .filter(|_| check != HistoryCheck::Unsigned)
        .and_then(|o| parse_origin(o))
        .unwrap_or_else(|| (topic.to_string(), partition, offset));
    Incoming {
        delivery,
        check,
        origin,
        topic: topic.to_string(),
        partition,
        offset,
        timestamp,
        key: message.key().map(<[u8]>::to_vec),
        headers,
    }
}

/// The headers of the copy that carries `incoming` to its next attempt, due at
/// `due_at_ms`: the producer's headers, then the signed history (with `failed` added, see
/// [`SignedHistory::next`]), the route's topic, the id and the due time.
pub(crate) fn retry_headers(
    incoming: &Incoming,
    failed: Option<(&AttemptRecord, bool)>,
    due_at_ms: u64,
    key: &HistoryKey,
) -> OwnedHeaders {
    let signed = SignedHistory::next(&incoming.delivery, failed);
    let signature = key.sign(&signed);
    let mut out = OwnedHeaders::new_with_capacity(incoming.headers.len() + 10);
    for (name, value) in &incoming.headers {
        out = out.insert(Header {
            key: name,
            value: Some(value),
        });
    }
    let text = |out: OwnedHeaders, name: &str, value: &str| {
        out.insert(Header {
            key: name,
            value: Some(value),
        })
    };
    out = text(out, TOPIC, &signed.queue);
    out = text(out, MESSAGE_ID, &signed.id);
    let (topic, partition, offset) = &incoming.origin;
    out = text(out, ORIGIN, &record_id(topic, *partition, *offset));
    out = text(out, ATTEMPT, &signed.attempt.to_string());
    out = text(out, DEFERRALS, &signed.deferrals.to_string());
    if let Some(at) = signed.first_failed {
        out = text(out, FIRST_FAILED, &at.to_string());
    }
    out = text(out, PUBLISHED, &signed.published.to_string());
    out = text(out, HISTORY, &signed.history);
    out = text(out, SIGNATURE, &signature);
    out = text(out, KEY_ID, &key.id());
    text(out, DUE_AT, &due_at_ms.to_string())
}

/// The headers of `incoming`'s dead-letter record: its producer's headers, the letter's
/// index headers (`verdict-topic`, `verdict-class`, ...), the envelope, and Spring Kafka's
/// `kafka_dlt-*` headers naming where it was first read (`consumer_group` its group).
pub(crate) fn dead_letter_headers(
    incoming: &Incoming,
    failed: &AttemptRecord,
    letter: &DeadLetter,
    consumer_group: &str,
) -> OwnedHeaders {
    let (topic, partition, offset) = &incoming.origin;
    let origin = Origin {
        topic,
        partition: *partition,
        offset: *offset,
        timestamp: incoming.timestamp,
        consumer_group,
    };
    let cause = Cause {
        class: &letter.class,
        reason: &letter.reason,
        last_failure: Some((&failed.kind, &failed.message)),
    };
    let mut all = incoming.headers.clone();
    for (name, value) in letter.headers(&incoming.delivery, failed) {
        all.push((name.to_string(), value.into_bytes()));
    }
    all.push((ENVELOPE.to_string(), letter.envelope.clone()));
    let mut out = OwnedHeaders::new_with_capacity(all.len() + 9);
    for (name, value) in dlt_headers(&all, &origin, &cause) {
        out = out.insert(Header {
            key: &name,
            value: Some(&value),
        });
    }
    out
}

/// The topic, partition and offset an origin header names, when it is one: a Kafka topic
/// name, a partition and an offset that are not negative.
fn parse_origin(text: &str) -> Option<(String, i32, i64)> {
    let (rest, offset) = text.rsplit_once('@')?;
    let (topic, partition) = rest.rsplit_once('/')?;
    verdict_registry::config::topic_name(topic).ok()?;
    let (partition, offset): (i32, i64) = (partition.parse().ok()?, offset.parse().ok()?);
    (partition >= 0 && offset >= 0).then(|| (topic.to_string(), partition, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::Timestamp;

    fn record(topic: &str, offset: i64, headers: OwnedHeaders) -> OwnedMessage {
        OwnedMessage::new(
            Some(b"{\"n\":1}".to_vec()),
            Some(b"key-1".to_vec()),
            topic.to_string(),
            Timestamp::CreateTime(1_700_000_000_000),
            2,
            offset,
            Some(headers),
        )
    }

    fn failure(at_ms: u64) -> AttemptRecord {
        AttemptRecord {
            at_ms,
            kind: "http.503".into(),
            message: "busy".into(),
        }
    }

    fn producer_headers() -> OwnedHeaders {
        OwnedHeaders::new()
            .insert(Header {
                key: "tenant",
                value: Some("eu"),
            })
            .insert(Header {
                key: "trace-bin",
                value: Some(&[0xff_u8, 0x00, 0x01][..]),
            })
            .insert(Header {
                key: ATTEMPT,
                value: Some("0"),
            })
    }

    fn key() -> HistoryKey {
        HistoryKey::new(b"the group's key".to_vec())
    }

    /// Copies `headers` into a record read from `topic` at `offset`.
    fn reread(topic: &str, offset: i64, headers: OwnedHeaders) -> Incoming {
        read(
            &record(topic, offset, headers),
            "message-id",
            true,
            5_000,
            &key(),
        )
    }

    #[test]
    fn a_first_delivery_is_named_by_where_it_was_read_and_keeps_binary_headers() {
        let first = read(
            &record("orders", 41, producer_headers()),
            "message-id",
            false,
            5_000,
            &key(),
        );
        assert_eq!(first.delivery.id, "orders/2@41");
        assert_eq!(first.delivery.topic, "orders");
        assert_eq!(first.delivery.published_at_ms, 1_700_000_000_000);
        assert_eq!(first.delivery.attempts_spent, 0);
        assert_eq!(first.check, HistoryCheck::Unsigned);
        assert_eq!(
            first.delivery.headers.keys().collect::<Vec<_>>(),
            ["tenant"],
            "the binary header is not pushed as text; the producer's x-verdict-* never"
        );
        assert_eq!(
            first.headers.len(),
            2,
            "both of the producer's own headers kept"
        );
        assert_eq!(first.headers[1].1, [0xff, 0x00, 0x01]);
    }

    #[test]
    fn a_producers_id_header_names_the_record_when_it_is_clean() {
        let with = |value: &[u8]| {
            let headers = OwnedHeaders::new().insert(Header {
                key: "message-id",
                value: Some(value),
            });
            read(
                &record("orders", 9, headers),
                "message-id",
                false,
                0,
                &key(),
            )
            .delivery
            .id
        };
        assert_eq!(with(b"order-17"), "order-17");
        assert_eq!(with(b""), "orders/2@9");
        assert_eq!(with(b"bad\nid"), "orders/2@9");
        assert_eq!(with(&[0xff, 0xfe]), "orders/2@9");
        assert_eq!(with("x".repeat(256).as_bytes()), "orders/2@9");
    }

    #[test]
    fn a_retry_copy_carries_its_history_replaced_not_appended() {
        let first = read(
            &record("orders", 41, producer_headers()),
            "message-id",
            false,
            5_000,
            &key(),
        );
        let headers = retry_headers(&first, Some((&failure(6_000), true)), 9_000, &key());
        let copy = reread("verdict.retry.3000", 0, headers);
        assert_eq!(copy.check, HistoryCheck::Verified);
        assert_eq!(
            copy.delivery.topic, "orders",
            "delivered for its route's topic"
        );
        assert_eq!(copy.delivery.id, "orders/2@41");
        assert_eq!(copy.delivery.attempts_spent, 1);
        assert_eq!(copy.delivery.published_at_ms, 1_700_000_000_000);
        let written = record(
            "verdict.retry.3000",
            0,
            retry_headers(&first, None, 9_000, &key()),
        );
        assert_eq!(due_at_ms(&written), Some(9_000));
        assert_eq!(due_at_ms(&record("orders", 41, producer_headers())), None);
        assert_eq!(copy.headers, first.headers, "the producer's headers travel");
        // A hundred more hops: the history is bounded and each header is there once.
        let mut at = copy;
        for n in 0..120 {
            let headers = retry_headers(&at, Some((&failure(10_000 + n), true)), 0, &key());
            at = reread("verdict.retry.50", n as i64, headers);
        }
        assert_eq!(at.delivery.attempts_spent, 121);
        assert_eq!(
            at.delivery.history.len(),
            crate::sources::signed_history::MAX_HISTORY
        );
        let again = retry_headers(&at, None, 0, &key());
        assert_eq!(again.iter().filter(|h| h.key == ATTEMPT).count(), 1);
        assert_eq!(again.count(), at.headers.len() + 11);
        assert_eq!(
            at.origin,
            ("orders".to_string(), 2, 41),
            "where it was first read"
        );
    }

    #[test]
    fn a_forged_or_moved_copy_counts_nothing_and_goes_to_no_route() {
        let first = read(
            &record("orders", 41, producer_headers()),
            "message-id",
            false,
            5_000,
            &key(),
        );
        let signed = retry_headers(&first, Some((&failure(6_000), true)), 0, &key());
        // The same headers with the attempt lowered: the signature no longer holds.
        let mut forged = OwnedHeaders::new();
        for h in signed.iter() {
            let value = if h.key == ATTEMPT {
                &b"0"[..]
            } else {
                h.value.unwrap_or_default()
            };
            forged = forged.insert(Header {
                key: h.key,
                value: Some(value),
            });
        }
        let copy = reread("verdict.retry.50", 3, forged);
        assert_eq!(copy.check, HistoryCheck::Unsigned);
        assert_eq!(
            copy.delivery.topic, "verdict.retry.50",
            "an untrusted copy is no route's message"
        );
        assert_eq!(copy.delivery.attempts_spent, 0);
        // Headers a producer wrote on a route topic are not read as a copy's at all.
        let on_route = read(
            &record("orders", 1, signed),
            "message-id",
            false,
            5_000,
            &key(),
        );
        assert_eq!(on_route.check, HistoryCheck::Unsigned);
        assert_eq!(on_route.delivery.attempts_spent, 0);
    }

    #[test]
    fn an_origin_header_is_taken_only_when_it_is_one() {
        assert_eq!(parse_origin("orders/2@41"), Some(("orders".into(), 2, 41)));
        assert_eq!(parse_origin("a/b/3@4"), None, "a topic name has no slash");
        for bad in [
            "orders/-1@4",
            "orders/1@-4",
            "orders@4",
            "/1@4",
            "orders/1@x",
        ] {
            assert_eq!(parse_origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_dead_letter_names_where_the_record_was_first_read() {
        let first = read(
            &record("orders", 41, producer_headers()),
            "message-id",
            false,
            5_000,
            &key(),
        );
        let headers = retry_headers(&first, Some((&failure(6_000), true)), 0, &key());
        let copy = reread("verdict.retry.50", 7, headers);
        let letter = DeadLetter {
            dlq: "orders.DLT".into(),
            class: "exhausted".into(),
            reason: "3 attempts".into(),
            format: "json",
            envelope: b"{\"envelope\":true}".to_vec(),
        };
        let out = dead_letter_headers(&copy, &failure(7_000), &letter, "verdict");
        let value = |name: &str| {
            out.iter()
                .filter(|h| h.key == name)
                .last()
                .and_then(|h| h.value)
                .map(<[u8]>::to_vec)
        };
        assert_eq!(
            value(super::super::dlt_headers::ORIGINAL_TOPIC).unwrap(),
            b"orders"
        );
        assert_eq!(
            value(super::super::dlt_headers::ORIGINAL_OFFSET).unwrap(),
            41_i64.to_be_bytes()
        );
        assert_eq!(
            value(super::super::dlt_headers::ORIGINAL_PARTITION).unwrap(),
            2_i32.to_be_bytes()
        );
        assert_eq!(value(ENVELOPE).unwrap(), letter.envelope);
        assert_eq!(value("verdict-class").unwrap(), b"exhausted");
        assert_eq!(value("tenant").unwrap(), b"eu");
        assert!(out.iter().all(|h| !h.key.starts_with(PREFIX)));
    }
}
