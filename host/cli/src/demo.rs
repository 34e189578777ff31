//! A demonstration consumer: an HTTP endpoint that fails some messages on purpose, by
//! message id, so the gateway's retries and dead letters can be watched (README's first
//! command) and tested. `verdict-demo-consumer` serves it.
//!
//! | path | what |
//! |---|---|
//! | `POST /` | a delivery: 200, 503 (transient) or 422 `schema.unknown-version` (permanent) |
//! | `GET /stats` | deliveries, accepted, duplicates (ids accepted more than once), ordered (deliveries the order check read), overtaken |
//! | `POST /down`, `POST /up` | answer every delivery with 503 until `up` |
//!
//! With an [`OrderCheck`] it also checks key ordering as the deliveries arrive: a producer
//! numbers each key's messages 0, 1, 2... in a header, and a delivery whose predecessor in
//! its key was not yet finished - accepted, or refused for good - has overtaken it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

/// How the consumer treats one message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 at once.
    Ok,
    /// 503 for this many deliveries, then 200.
    FailsFirst(u32),
    /// 422 with `schema.unknown-version`, always.
    Permanent,
    /// 200 after this many milliseconds (a slow consumer).
    Slow(u64),
}

/// Decide a behaviour from the id's hash: `permanent_pct`% permanent, `transient_pct`%
/// failing 1 to 3 times first, the rest fine. The same id always behaves the same.
pub fn by_percent(
    transient_pct: u32,
    permanent_pct: u32,
) -> impl Fn(&str) -> Behaviour + Send + Sync {
    move |id: &str| {
        let h = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let bucket = u32::try_from(h % 100).unwrap_or(0);
        if bucket < permanent_pct {
            Behaviour::Permanent
        } else if bucket < permanent_pct + transient_pct {
            Behaviour::FailsFirst(1 + u32::try_from((h >> 8) % 3).unwrap_or(0))
        } else {
            Behaviour::Ok
        }
    }
}

/// Where a delivery says which key it belongs to and where it stands among that key's
/// messages in publish order (0, 1, 2...): two header names, matched without regard to
/// case.
#[derive(Debug, Clone)]
pub struct OrderCheck {
    /// The header holding a message's key.
    pub key_header: String,
    /// The header holding the message's number among its key's messages.
    pub sequence_header: String,
}

/// The most overtaking deliveries [`Seen::overtakes`] keeps (the count goes on).
const OVERTAKES_KEPT: usize = 20;

/// What the consumer has seen.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Seen {
    /// Deliveries per message id.
    pub deliveries: HashMap<String, u32>,
    /// 2xx answers per message id (more than one: a duplicate delivery).
    pub accepted: HashMap<String, u32>,
    /// With an [`OrderCheck`]: per key, the number of its first message not yet finished.
    pub next_by_key: HashMap<String, u64>,
    /// With an [`OrderCheck`]: deliveries that carried a key and a number, so were checked
    /// (a check that read none would find nothing overtaken).
    pub ordered: u32,
    /// With an [`OrderCheck`]: deliveries that came before their key's previous message was
    /// finished.
    pub overtaken: u32,
    /// The first few of them, as `key #n before #m`.
    pub overtakes: Vec<String>,
}

impl Seen {
    /// Ids accepted more than once, and how many extra times in all.
    pub fn duplicates(&self) -> u32 {
        self.accepted.values().map(|n| n.saturating_sub(1)).sum()
    }
}

type Rule = Arc<dyn Fn(&str) -> Behaviour + Send + Sync>;

/// When an id was last delivered, and the shortest time between two of its deliveries.
type Timing = (Instant, Option<Duration>);

/// The consumer's state; clone to share.
#[derive(Clone)]
pub struct DemoConsumer {
    seen: Arc<Mutex<Seen>>,
    /// Per id: when it was last delivered, and the shortest time between two of its
    /// deliveries (a retry that came before its delay shows here).
    timing: Arc<Mutex<HashMap<String, Timing>>>,
    down: Arc<AtomicBool>,
    rule: Rule,
    order: Option<Arc<OrderCheck>>,
}

impl DemoConsumer {
    /// A consumer treating each id by `rule`.
    pub fn new(rule: impl Fn(&str) -> Behaviour + Send + Sync + 'static) -> Self {
        DemoConsumer {
            seen: Arc::default(),
            timing: Arc::default(),
            down: Arc::default(),
            rule: Arc::new(rule),
            order: None,
        }
    }

    /// Check key ordering on every delivery as `order` says (see [`OrderCheck`]).
    pub fn with_order_check(mut self, order: OrderCheck) -> Self {
        self.order = Some(Arc::new(order));
        self
    }

    /// Answer every delivery with 503 (`true`) or normally again (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// A copy of what it has seen.
    pub fn seen(&self) -> Seen {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The shortest time between two deliveries of one id, and the id: the earliest any
    /// retry came.
    pub fn shortest_redelivery_gap(&self) -> Option<(String, Duration)> {
        self.timing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(|(id, (_, gap))| Some((id.clone(), (*gap)?)))
            .min_by_key(|(_, gap)| *gap)
    }

    /// The HTTP routes.
    pub fn router(&self) -> Router {
        let (a, b, c, d) = (self.clone(), self.clone(), self.clone(), self.clone());
        Router::new()
            .route(
                "/",
                post(move |headers: HeaderMap| async move {
                    let (response, wait) = a.answer(&headers);
                    if let Some(ms) = wait {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    response
                }),
            )
            .route(
                "/stats",
                get(move || async move {
                    let seen = b.seen();
                    axum::Json(serde_json::json!({
                        "deliveries": seen.deliveries.values().sum::<u32>(),
                        "accepted": seen.accepted.len(),
                        "duplicates": seen.duplicates(),
                        "ordered": seen.ordered,
                        "overtaken": seen.overtaken,
                        "overtakes": seen.overtakes,
                    }))
                }),
            )
            .route(
                "/down",
                post(move || async move {
                    c.set_down(true);
                    "down\n"
                }),
            )
            .route(
                "/up",
                post(move || async move {
                    d.set_down(false);
                    "up\n"
                }),
            )
    }

    /// The answer, and how long to wait before giving it.
    fn answer(&self, headers: &HeaderMap) -> (Response, Option<u64>) {
        let id = headers
            .get("x-verdict-message-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        {
            let now = Instant::now();
            let mut timing = self.timing.lock().unwrap_or_else(PoisonError::into_inner);
            timing
                .entry(id.clone())
                .and_modify(|(last, gap)| {
                    let since = now - *last;
                    *gap = Some(gap.map_or(since, |g| g.min(since)));
                    *last = now;
                })
                .or_insert((now, None));
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let n = {
            let n = seen.deliveries.entry(id.clone()).or_default();
            *n += 1;
            *n
        };
        let place = self.order.as_deref().and_then(|o| place_of(o, headers));
        if let Some((key, n)) = &place {
            seen.ordered += 1;
            let next = seen.next_by_key.get(key).copied().unwrap_or(0);
            if *n > next {
                seen.overtaken += 1;
                if seen.overtakes.len() < OVERTAKES_KEPT {
                    // The key is a producer's header: one bounded line in `/stats`.
                    let key = verdict_runtime::text::one_line(key, 128);
                    seen.overtakes.push(format!("{key} #{n} before #{next}"));
                }
            }
        }
        if self.down.load(Ordering::Relaxed) {
            let down = (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance");
            return (down.into_response(), None);
        }
        let rule = (self.rule)(&id);
        // Accepted or refused for good, a message is finished: its key's next may come.
        let finishes = match rule {
            Behaviour::FailsFirst(k) => n > k,
            _ => true,
        };
        if let (true, Some((key, n))) = (finishes, place) {
            let next = seen.next_by_key.entry(key).or_default();
            *next = (*next).max(n + 1);
        }
        let wait = match rule {
            Behaviour::Slow(ms) => Some(ms),
            _ => None,
        };
        let response = match rule {
            Behaviour::FailsFirst(k) if n <= k => {
                (StatusCode::SERVICE_UNAVAILABLE, "warming up").into_response()
            }
            Behaviour::Permanent => (
                StatusCode::UNPROCESSABLE_ENTITY,
                [("content-type", "application/json")],
                r#"{"error": {"kind": "schema.unknown-version", "message": "schema v9 is unknown"}}"#,
            )
                .into_response(),
            _ => {
                *seen.accepted.entry(id).or_default() += 1;
                StatusCode::OK.into_response()
            }
        };
        (response, wait)
    }
}

/// A delivery's key and number by `order`'s headers; `None` when either is missing or the
/// number is not one.
fn place_of(order: &OrderCheck, headers: &HeaderMap) -> Option<(String, u64)> {
    let key = headers.get(order.key_header.as_str())?.to_str().ok()?;
    let n = headers
        .get(order.sequence_header.as_str())?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some((key.to_string(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(consumer: &DemoConsumer, id: &str, key: &str, n: u64) -> StatusCode {
        let mut headers = HeaderMap::new();
        headers.insert("x-verdict-message-id", id.parse().unwrap());
        headers.insert("order-id", key.parse().unwrap());
        headers.insert("order-seq", n.to_string().parse().unwrap());
        consumer.answer(&headers).0.status()
    }

    #[test]
    fn a_delivery_before_its_keys_previous_message_finished_is_counted() {
        let consumer = DemoConsumer::new(|id: &str| match id {
            "a0" => Behaviour::FailsFirst(1),
            "a1" => Behaviour::Permanent,
            _ => Behaviour::Ok,
        })
        .with_order_check(OrderCheck {
            key_header: "Order-Id".into(),
            sequence_header: "Order-Seq".into(),
        });
        // a0 fails once; b0 of another key is not held back by it.
        assert_eq!(
            delivery(&consumer, "a0", "a", 0),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(delivery(&consumer, "b0", "b", 0), StatusCode::OK);
        assert_eq!(consumer.seen().overtaken, 0);
        // a1 before a0 was accepted: overtaken.
        delivery(&consumer, "a1", "a", 1);
        assert_eq!(consumer.seen().overtaken, 1);
        // a0 accepted (and again: a duplicate, not an overtake), a1 refused for good
        // finishes it, so a2 may come.
        assert_eq!(delivery(&consumer, "a0", "a", 0), StatusCode::OK);
        assert_eq!(delivery(&consumer, "a0", "a", 0), StatusCode::OK);
        assert_eq!(
            delivery(&consumer, "a1", "a", 1),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(delivery(&consumer, "a2", "a", 2), StatusCode::OK);
        let seen = consumer.seen();
        assert_eq!((seen.overtaken, seen.duplicates()), (1, 1));
        assert_eq!(seen.overtakes, ["a #1 before #0"]);
        // Every one of the seven deliveries carried its key and number.
        assert_eq!(seen.ordered, 7);
        // One without them is delivered, not checked.
        consumer.answer(&HeaderMap::new());
        assert_eq!(consumer.seen().ordered, 7);
    }
}
