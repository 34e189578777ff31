//! A demonstration consumer: an HTTP endpoint that fails some messages on purpose, by
//! message id, so the gateway's retries and dead letters can be watched (README's first
//! command) and tested. `verdict-demo-consumer` serves it.
//!
//! | path | what |
//! |---|---|
//! | `POST /` | a delivery: 200, 503 (transient) or 422 `schema.unknown-version` (permanent) |
//! | `GET /stats` | deliveries, accepted, duplicates (ids accepted more than once) |
//! | `POST /down`, `POST /up` | answer every delivery with 503 until `up` |

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

/// What the consumer has seen.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Seen {
    /// Deliveries per message id.
    pub deliveries: HashMap<String, u32>,
    /// 2xx answers per message id (more than one: a duplicate delivery).
    pub accepted: HashMap<String, u32>,
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
}

impl DemoConsumer {
    /// A consumer treating each id by `rule`.
    pub fn new(rule: impl Fn(&str) -> Behaviour + Send + Sync + 'static) -> Self {
        DemoConsumer {
            seen: Arc::default(),
            timing: Arc::default(),
            down: Arc::default(),
            rule: Arc::new(rule),
        }
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
        if self.down.load(Ordering::Relaxed) {
            let down = (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance");
            return (down.into_response(), None);
        }
        let rule = (self.rule)(&id);
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
