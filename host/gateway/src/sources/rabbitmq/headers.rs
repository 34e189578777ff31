//! What travels with a RabbitMQ message between deliveries: the attempt history in
//! `x-verdict-*` headers (a retried message is a new copy, so its history must ride along),
//! and the delay buckets that copy waits in.
//!
//! The history is signed: `x-verdict-signature` is an HMAC-SHA256 of the message id and
//! every history header, keyed by the gateway group's history key. A producer cannot lower
//! a message's attempts or forge its history: headers without a valid signature are not
//! trusted, and never passed on to the consumer.
//!
//! Every gateway consuming the same queues must share one key (`[rabbitmq]
//! history_key_file`). A copy also names the key that signed it (`x-verdict-key-id`, a
//! fingerprint, not the key): one signed by *another* key - a gateway set up with its own -
//! is a misconfiguration the source reports (log, `verdict_history_key_mismatches_total`,
//! `/readyz`), and its attempts are still counted: taken from its headers, never fewer than
//! they say. Counting more attempts than were made can only end a message's retries
//! sooner, so no forged header can make a message loop; resetting them to zero would let
//! two gateways with different keys retry a message forever.

use std::collections::BTreeMap;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

use crate::model::{AttemptRecord, Delivery};

const ATTEMPT: &str = "x-verdict-attempt";
const DEFERRALS: &str = "x-verdict-deferrals";
const FIRST_FAILED: &str = "x-verdict-first-failed-at-ms";
const PUBLISHED: &str = "x-verdict-published-at-ms";
const HISTORY: &str = "x-verdict-history";
const SIGNATURE: &str = "x-verdict-signature";
const KEY_ID: &str = "x-verdict-key-id";

/// The key that signs and checks history headers; every gateway consuming the same queues
/// must have the same one.
#[derive(Clone)]
pub struct HistoryKey(Vec<u8>);

impl std::fmt::Debug for HistoryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryKey(..)")
    }
}

impl HistoryKey {
    /// A key of these bytes.
    pub fn new(bytes: Vec<u8>) -> HistoryKey {
        HistoryKey(bytes)
    }

    fn mac(&self, fields: &Signed) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac as _;
        let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        // Length-prefixed fields: no two field lists sign alike. The queue binds a copy to
        // the queue it was made for; the first failure's presence is signed apart from its
        // value.
        let first_failed = match fields.first_failed {
            Some(at) => [&[1_u8][..], &at.to_be_bytes()].concat(),
            None => vec![0_u8],
        };
        for field in [
            fields.queue.as_bytes(),
            fields.id.as_bytes(),
            &fields.attempt.to_be_bytes(),
            &fields.deferrals.to_be_bytes(),
            &first_failed,
            &fields.published.to_be_bytes(),
            fields.history.as_bytes(),
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        mac
    }

    /// The key's fingerprint, as copies name it: 16 hex digits of a SHA-256 of the key
    /// (it tells keys apart and reveals nothing of them).
    pub fn id(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::new()
            .chain_update(b"verdict history key id\0")
            .chain_update(&self.0)
            .finalize();
        hex(&digest[..8])
    }

    fn sign(&self, fields: &Signed) -> String {
        use hmac::Mac as _;
        hex(&self.mac(fields).finalize().into_bytes())
    }

    fn verify(&self, fields: &Signed, signature: &str) -> bool {
        use hmac::Mac as _;
        let Some(bytes) = unhex(signature) else {
            return false;
        };
        self.mac(fields).verify_slice(&bytes).is_ok()
    }
}

/// What the signature covers.
#[derive(Default)]
struct Signed {
    queue: String,
    id: String,
    attempt: u64,
    deferrals: u64,
    first_failed: Option<u64>,
    published: u64,
    history: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The most history entries a message carries (the oldest are dropped past it): a header
/// table has to fit the broker's frame, and a policy needs the recent attempts.
const MAX_HISTORY: usize = 100;

/// The shortest delay bucket; each next one is 25% longer (rounded up to whole ms).
const FIRST_BUCKET_MS: u64 = 50;
/// The longest delay bucket: a day (the config checks that its queue name is short enough).
pub const MAX_BUCKET_MS: u64 = verdict_registry::config::MAX_DELAY_BUCKET_MS;

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

/// Every delay bucket, shortest first: what a tool cleaning a delay prefix away must look
/// for.
pub fn all_buckets() -> Vec<u64> {
    let mut buckets = Vec::new();
    let mut delay = 1;
    while delay <= MAX_BUCKET_MS {
        let bucket = bucket_ms(delay);
        buckets.push(bucket);
        delay = bucket + 1;
    }
    buckets
}

/// How a consumed copy's history headers were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryCheck {
    /// No signed history: a first delivery (or a producer's own `x-verdict-*` headers,
    /// which count for nothing).
    Unsigned,
    /// Signed with this gateway's key.
    Verified,
    /// Signed with another gateway's key (its id): counted from its headers, unverified.
    ForeignKey(String),
}

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
    let mut signed = Signed {
        queue: queue.to_string(),
        id: delivery.id.clone(),
        ..Signed::default()
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
            n if n.starts_with("x-verdict-") || n.starts_with("x-death") => {}
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
    let check = match (&signature, key_id) {
        (Some(s), _) if key.verify(&signed, s) => HistoryCheck::Verified,
        (Some(_), Some(id)) if id != key.id() => {
            HistoryCheck::ForeignKey(verdict_runtime::text::one_line(&id, 32))
        }
        _ => return (delivery, HistoryCheck::Unsigned),
    };
    delivery.attempts_spent = u32::try_from(signed.attempt).unwrap_or(u32::MAX);
    delivery.deferrals = u32::try_from(signed.deferrals).unwrap_or(u32::MAX);
    delivery.first_failed_at_ms = signed.first_failed;
    if has_published {
        delivery.published_at_ms = signed.published;
    }
    let history: Vec<AttemptRecord> = serde_json::from_str(&signed.history).unwrap_or_default();
    delivery.history = match check {
        HistoryCheck::Verified => history,
        // Unverified text: bounded and made one clean line like any outside string.
        _ => history
            .into_iter()
            .rev()
            .take(MAX_HISTORY)
            .rev()
            .map(|a| AttemptRecord {
                at_ms: a.at_ms,
                kind: verdict_runtime::text::one_line(&a.kind, 128),
                message: verdict_runtime::text::one_line(
                    &a.message,
                    verdict_runtime::text::MAX_MESSAGE_BYTES,
                ),
            })
            .collect(),
    };
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
    let (mut attempt, mut deferrals) = (delivery.attempts_spent, delivery.deferrals);
    let mut first_failed = delivery.first_failed_at_ms;
    let mut history: Vec<AttemptRecord> = delivery.history.clone();
    if let Some((failed, spend_attempt)) = failed {
        if spend_attempt {
            attempt = attempt.saturating_add(1);
        } else {
            deferrals = deferrals.saturating_add(1);
        }
        first_failed.get_or_insert(failed.at_ms);
        history.push(failed.clone());
    }
    if history.len() > MAX_HISTORY {
        history.drain(..history.len() - MAX_HISTORY);
    }
    let signed = Signed {
        queue: delivery.topic.clone(),
        id: delivery.id.clone(),
        attempt: attempt.into(),
        deferrals: deferrals.into(),
        first_failed,
        published: delivery.published_at_ms,
        history: serde_json::to_string(&history).unwrap_or_else(|_| "[]".into()),
    };
    let mut headers = string_table(&delivery.headers);
    // Stored as i64 by AMQP; values past it saturate (and are signed as stored).
    let int = |n: u64| AMQPValue::LongLongInt(i64::try_from(n).unwrap_or(i64::MAX));
    let clamp = |n: u64| u64::try_from(i64::try_from(n).unwrap_or(i64::MAX)).unwrap_or(0);
    let signed = Signed {
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
