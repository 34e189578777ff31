//! NATS message headers to a delivery, the attempt history, and the deadline headers.

use std::collections::BTreeMap;

use proptest::prelude::*;
use verdict_fuzz::*;

use super::attempt_record;
use crate::model::{DEADLINE_HEADER, Delivery, TTL_HEADER};
use crate::sources::nats::{History, delivery_of};

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
        prop::collection::vec(attempt_record(), 0..6),
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
