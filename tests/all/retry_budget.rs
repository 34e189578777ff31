//! The retry budget in a real gateway: two routes on one consumer that answers 503 to
//! everything, one with a budget and one without. The budgeted route's retries reach the
//! consumer no faster than the budget allows, the held ones spend no attempt and end in the
//! DLQ with their holds in the envelope; the other route is not slowed by its neighbour's
//! budget.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_gateway::store::DlqFilter;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

/// Retry 5xx every 50 ms, three deliveries in all.
const RETRY_FAST: &str = r#"{ max_attempts = 3, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*"], retry = { strategy = "fixed", delay_ms = 50 } },
] }"#;

const MESSAGES: u32 = 20;
/// The budget: no share of first attempts, 10 retries a second over a 2 s window - at
/// most 20 retries in any two seconds.
const WINDOW_S: u64 = 2;
const PER_WINDOW: u64 = 20;

fn config(consumer_url: &str) -> TestConfig {
    let route = |topic: &str| {
        Route::new(topic, "rules")
            .config(RETRY_FAST)
            .consumer(consumer_url)
            .set("consumer.concurrency", 8)
    };
    TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(route("orders").merge(&format!(
            "settings = {{ guardrails = {{ retry_budget = {{ percent = 0, window_s = {WINDOW_S}, min_per_s = 10 }} }} }}"
        )))
        .route(route("other"))
}

fn publish(gw: &Gateway, topic: &str, prefix: &str) {
    let batch: Vec<Value> = (0..MESSAGES)
        .map(|i| json!({"id": format!("{prefix}-{i}"), "payload": {"n": i}}))
        .collect();
    let _: Value = gw
        .admin
        .post(&format!("/v1/topics/{topic}/messages"), &batch)
        .expect("publish");
}

/// Deliveries the consumer saw of ids starting with `prefix`.
fn deliveries(consumer: &Consumer, prefix: &str) -> u64 {
    consumer
        .snapshot()
        .0
        .iter()
        .filter(|(id, _)| id.starts_with(prefix))
        .map(|(_, n)| u64::from(*n))
        .sum()
}

/// Watches a budgeted route's retries reach the consumer: every 50 ms, the deliveries of
/// ids starting with `prefix` past the first `messages`.
pub(crate) struct RetryWatch {
    started: Instant,
    samples: Arc<Mutex<Vec<(Duration, u64)>>>,
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl RetryWatch {
    pub(crate) fn start(consumer: Arc<Consumer>, prefix: &'static str, messages: u32) -> Self {
        let started = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, done) = (samples.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let retries = deliveries(&consumer, prefix).saturating_sub(u64::from(messages));
                    samples.lock().unwrap().push((started.elapsed(), retries));
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        RetryWatch {
            started,
            samples,
            done,
            thread,
        }
    }

    /// Stop watching and check the budget held: the window slides a tenth at a time, so any
    /// span of nine tenths of it holds at most one window's retries - by time t, one
    /// window's worth for each such span begun (the gateway's clock started after ours).
    pub(crate) fn check(self, per_window: u64, window_s: u64) {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let samples = self.samples.lock().unwrap();
        for (at, retries) in samples.iter() {
            let windows = (at.as_millis() as u64) / (window_s * 900) + 1;
            assert!(
                *retries <= per_window * windows,
                "{retries} retries by {at:?}: over the budget"
            );
        }
        let last = samples.last().map_or(0, |s| s.1);
        assert!(last > 0, "retries were seen ({:?})", self.started.elapsed());
    }
}

#[test]
fn a_route_over_its_retry_budget_holds_retries_and_its_neighbour_does_not_wait() {
    let dir = scratch_dir("retry-budget");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Arc::new(Consumer::start(&runtime, |_| {
        Behaviour::FailsFirst(u32::MAX)
    }));
    let gw = config(&consumer.url()).start_on(runtime, &dir, "budget-token");

    let started = Instant::now();
    let watch = RetryWatch::start(consumer.clone(), "b-", MESSAGES);
    publish(&gw, "orders", "b");
    publish(&gw, "other", "f");

    // The route without a budget is done while the other is still held back.
    let mut other_done_at = None;
    assert!(
        wait_for(Duration::from_secs(60), || {
            let dead = |topic: &str| {
                gw.store
                    .dlq_list(
                        &DlqFilter {
                            topic: Some(topic.into()),
                            ..DlqFilter::default()
                        },
                        u64::MAX,
                    )
                    .unwrap()
                    .len()
            };
            if other_done_at.is_none() && dead("other") == MESSAGES as usize {
                other_done_at = Some(started.elapsed());
            }
            dead("orders") == MESSAGES as usize && other_done_at.is_some()
        }),
        "every message dead-lettered: {:?}",
        gw.store.counts().unwrap()
    );
    let orders_done_at = started.elapsed();
    watch.check(PER_WINDOW, WINDOW_S);
    // 40 retries at 20 per 2 s take two windows at least; the free route needs none.
    let other_done_at = other_done_at.unwrap();
    assert!(
        orders_done_at > other_done_at,
        "orders {orders_done_at:?}, other {other_done_at:?}"
    );

    // Nothing spent by a hold, nothing delivered twice: three deliveries each, exactly.
    let (seen, _) = consumer.snapshot();
    for prefix in ["b", "f"] {
        for i in 0..MESSAGES {
            assert_eq!(seen[&format!("{prefix}-{i}")], 3, "{prefix}-{i}");
        }
    }
    let letters = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    let mut held_letters = 0;
    for letter in &letters {
        let e = serde_json::to_value(&letter.envelope).unwrap();
        assert_eq!(e["attempts"], 3, "{e}");
        assert_eq!(e["verdict"]["class"], "exhausted", "{e}");
        match letter.topic.as_str() {
            "orders" => {
                if let Some(holds) = e.get("retryBudget") {
                    assert!(holds["holds"].as_u64().unwrap() >= 1, "{e}");
                    assert!(holds["heldMs"].as_u64().unwrap() >= 250, "{e}");
                    held_letters += 1;
                }
            }
            _ => assert!(e.get("retryBudget").is_none(), "{e}"),
        }
    }
    assert!(held_letters > 0, "some letters show their holds");

    let metrics = gw.anonymous.get_text("/metrics").unwrap();
    let held = |topic: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "verdict_retry_budget_held_total{{topic=\"{topic}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(held("orders") >= held_letters, "{metrics}");
    assert_eq!(held("other"), 0, "{metrics}");
}
