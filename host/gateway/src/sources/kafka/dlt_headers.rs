//! The headers of a dead-letter record, written the way Spring Kafka's
//! `DeadLetterPublishingRecoverer` writes them, so that Spring applications, Kafka UI and
//! every tool built for Spring's dead-letter topics read Verdict's as their own.
//!
//! | header | value |
//! |---|---|
//! | `kafka_dlt-original-topic` | the topic, UTF-8 |
//! | `kafka_dlt-original-partition` | 4-byte big-endian int |
//! | `kafka_dlt-original-offset` | 8-byte big-endian long |
//! | `kafka_dlt-original-timestamp` | 8-byte big-endian long, epoch ms (left out when the record had none) |
//! | `kafka_dlt-original-timestamp-type` | `CreateTime` or `LogAppendTime`, UTF-8 |
//! | `kafka_dlt-original-consumer-group` | the consumer group, UTF-8 |
//! | `kafka_dlt-exception-fqcn` | `verdict.<class>`: the verdict's class (`permanent`, `exhausted`, ...) |
//! | `kafka_dlt-exception-cause-fqcn` | the last failure's kind (`schema.unknown-version`) |
//! | `kafka_dlt-exception-message` | the verdict's reason, then `; ` and the last failure's message |
//!
//! As Spring does, a record dead-lettered a second time (replayed, failed again) keeps the
//! `original-*` headers it had and gets the new ones after them - a reader takes the last
//! of each name - while the `exception-*` headers are replaced.

use verdict_runtime::text::one_line;

/// The longest exception header written, in bytes: a reason or a consumer's message is
/// outside text, bounded before it reaches a header.
pub(crate) const MAX_EXCEPTION_BYTES: usize = 1_024;

/// Header names.
pub(crate) const ORIGINAL_TOPIC: &str = "kafka_dlt-original-topic";
pub(crate) const ORIGINAL_PARTITION: &str = "kafka_dlt-original-partition";
pub(crate) const ORIGINAL_OFFSET: &str = "kafka_dlt-original-offset";
pub(crate) const ORIGINAL_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
pub(crate) const ORIGINAL_TIMESTAMP_TYPE: &str = "kafka_dlt-original-timestamp-type";
pub(crate) const ORIGINAL_CONSUMER_GROUP: &str = "kafka_dlt-original-consumer-group";
pub(crate) const EXCEPTION_FQCN: &str = "kafka_dlt-exception-fqcn";
pub(crate) const EXCEPTION_CAUSE_FQCN: &str = "kafka_dlt-exception-cause-fqcn";
pub(crate) const EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";
const EXCEPTION_PREFIX: &str = "kafka_dlt-exception-";

/// How a record's timestamp was set, by Kafka's names for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record.
    LogAppendTime,
}

impl TimestampType {
    fn name(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

/// Where the dead-lettered record was read.
#[derive(Debug, Clone)]
pub(crate) struct Origin<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    /// The record's timestamp and its type, when it had one.
    pub(crate) timestamp: Option<(i64, TimestampType)>,
    pub(crate) consumer_group: &'a str,
}

/// Why it was dead-lettered.
#[derive(Debug, Clone)]
pub(crate) struct Cause<'a> {
    /// The verdict's class.
    pub(crate) class: &'a str,
    /// The verdict's reason.
    pub(crate) reason: &'a str,
    /// The last failure's kind and message, when there was a failure (a message the
    /// gateway dead-lettered itself may have none).
    pub(crate) last_failure: Option<(&'a str, &'a str)>,
}

/// The dead-letter record's headers: the record's own `headers` (earlier `exception-*`
/// headers left out, earlier `original-*` kept), then the `original-*` headers of `origin`
/// and the `exception-*` headers of `cause`.
pub(crate) fn dlt_headers(
    headers: &[(String, Vec<u8>)],
    origin: &Origin<'_>,
    cause: &Cause<'_>,
) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = headers
        .iter()
        .filter(|(name, _)| !name.starts_with(EXCEPTION_PREFIX))
        .cloned()
        .collect();
    let mut add = |name: &str, value: Vec<u8>| out.push((name.to_string(), value));
    add(ORIGINAL_TOPIC, origin.topic.as_bytes().to_vec());
    add(ORIGINAL_PARTITION, origin.partition.to_be_bytes().to_vec());
    add(ORIGINAL_OFFSET, origin.offset.to_be_bytes().to_vec());
    if let Some((at_ms, kind)) = origin.timestamp {
        add(ORIGINAL_TIMESTAMP, at_ms.to_be_bytes().to_vec());
        add(ORIGINAL_TIMESTAMP_TYPE, kind.name().as_bytes().to_vec());
    }
    add(
        ORIGINAL_CONSUMER_GROUP,
        origin.consumer_group.as_bytes().to_vec(),
    );
    let bounded = |text: &str| one_line(text, MAX_EXCEPTION_BYTES).into_bytes();
    add(EXCEPTION_FQCN, bounded(&format!("verdict.{}", cause.class)));
    let mut message = cause.reason.to_string();
    if let Some((kind, failure)) = cause.last_failure {
        add(EXCEPTION_CAUSE_FQCN, bounded(kind));
        if !failure.is_empty() && failure != cause.reason {
            message = if message.is_empty() {
                failure.to_string()
            } else {
                format!("{message}; {failure}")
            };
        }
    }
    add(EXCEPTION_MESSAGE, bounded(&message));
    out
}

/// The value of the last header named `name`, as Spring's readers take it.
#[cfg(test)]
pub(crate) fn last<'h>(headers: &'h [(String, Vec<u8>)], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin<'static> {
        Origin {
            topic: "orders",
            partition: 3,
            offset: 0x0102_0304_0506,
            timestamp: Some((1_700_000_000_123, TimestampType::CreateTime)),
            consumer_group: "verdict",
        }
    }

    fn cause() -> Cause<'static> {
        Cause {
            class: "permanent",
            reason: "unknown schema version",
            last_failure: Some(("schema.unknown-version", "version 9 is not known")),
        }
    }

    #[test]
    fn numbers_are_big_endian_as_java_writes_them() {
        let h = dlt_headers(&[], &origin(), &cause());
        assert_eq!(last(&h, ORIGINAL_TOPIC), Some(&b"orders"[..]));
        assert_eq!(last(&h, ORIGINAL_PARTITION), Some(&[0, 0, 0, 3][..]));
        assert_eq!(
            last(&h, ORIGINAL_OFFSET),
            Some(&[0, 0, 1, 2, 3, 4, 5, 6][..])
        );
        assert_eq!(
            last(&h, ORIGINAL_TIMESTAMP),
            Some(&1_700_000_000_123_i64.to_be_bytes()[..])
        );
        assert_eq!(last(&h, ORIGINAL_TIMESTAMP_TYPE), Some(&b"CreateTime"[..]));
        assert_eq!(last(&h, ORIGINAL_CONSUMER_GROUP), Some(&b"verdict"[..]));
        assert_eq!(last(&h, EXCEPTION_FQCN), Some(&b"verdict.permanent"[..]));
        assert_eq!(
            last(&h, EXCEPTION_CAUSE_FQCN),
            Some(&b"schema.unknown-version"[..])
        );
        assert_eq!(
            last(&h, EXCEPTION_MESSAGE),
            Some(&b"unknown schema version; version 9 is not known"[..])
        );
    }

    #[test]
    fn a_second_dead_lettering_appends_origins_and_replaces_exceptions() {
        let producer = vec![("trace".to_string(), b"abc".to_vec())];
        let first = dlt_headers(&producer, &origin(), &cause());
        let again = Origin {
            topic: "orders.replay",
            partition: 0,
            offset: 7,
            timestamp: None,
            consumer_group: "verdict",
        };
        let second = dlt_headers(&first, &again, &cause());
        let count = |name: &str| second.iter().filter(|(n, _)| n == name).count();
        assert_eq!(count("trace"), 1, "the producer's headers stay");
        assert_eq!(count(ORIGINAL_TOPIC), 2, "origins accumulate");
        assert_eq!(last(&second, ORIGINAL_TOPIC), Some(&b"orders.replay"[..]));
        assert_eq!(count(EXCEPTION_FQCN), 1, "exceptions are replaced");
        assert_eq!(count(EXCEPTION_MESSAGE), 1);
        assert_eq!(
            last(&second, ORIGINAL_TIMESTAMP),
            Some(&1_700_000_000_123_i64.to_be_bytes()[..]),
            "no timestamp this time: the last one is still the first's"
        );
    }

    #[test]
    fn outside_text_is_one_bounded_line() {
        let long = format!("line one\nline two\u{1b}[31m{}", "x".repeat(5_000));
        let hostile = Cause {
            class: "permanent\r\nx-injected: 1",
            reason: &long,
            last_failure: Some(("kind\n", &long)),
        };
        let h = dlt_headers(&[], &origin(), &hostile);
        for name in [EXCEPTION_FQCN, EXCEPTION_CAUSE_FQCN, EXCEPTION_MESSAGE] {
            let value = std::str::from_utf8(last(&h, name).unwrap()).unwrap();
            assert!(
                value.len() <= MAX_EXCEPTION_BYTES,
                "{name}: {}",
                value.len()
            );
            assert!(!value.chars().any(char::is_control), "{name}: {value:?}");
        }
    }
}
