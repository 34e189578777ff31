//! The gateway's pipeline: claim due messages from the store, deliver each to its route's
//! consumer, and on failure ask the route's policy for a verdict and apply it - each outcome
//! one store transaction, written before the message counts as handled.
//!
//! Retries never block other messages: a scheduled message is simply not due, and the loop
//! keeps claiming what is. Deliveries run concurrently up to `[gateway] max_in_flight`, and
//! per route up to its consumer's `concurrency`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, watch};

use crate::envelope::{Context, Envelope, MessageRef};
use crate::store::{AttemptRecord, Claimed, NewDlqEntry, Store, StoreError};
use crate::{Action, AttemptSpec, Decision, ErrorSpec, FailureSpec, GatewaySection, Registry};

mod delivery;
mod metrics;
mod topic_stats;

pub use crate::clock::now_ms;
pub use delivery::{DeliveryError, REJECT_HEADER};
pub use metrics::PipelineMetrics;
use topic_stats::TopicStats;

/// A message the pipeline could not route is looked at again after this long.
const UNROUTED_RETRY_MS: u64 = 5_000;

/// Delivers the store's messages and applies verdicts.
pub struct Pipeline {
    store: Arc<Store>,
    registry: Arc<Registry>,
    settings: GatewaySection,
    client: reqwest::Client,
    stats: TopicStats,
    metrics: PipelineMetrics,
    wake: Notify,
    routes: Mutex<HashMap<(String, usize), Arc<Semaphore>>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline over `store`, deciding with `registry`.
    pub fn new(
        store: Arc<Store>,
        registry: Arc<Registry>,
        settings: GatewaySection,
    ) -> Result<Pipeline, reqwest::Error> {
        Ok(Pipeline {
            store,
            registry,
            settings,
            client: reqwest::Client::builder().build()?,
            stats: TopicStats::default(),
            metrics: PipelineMetrics::default(),
            wake: Notify::new(),
            routes: Mutex::new(HashMap::new()),
        })
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Delivery counters (registered on `/metrics`).
    pub fn metrics(&self) -> &PipelineMetrics {
        &self.metrics
    }

    /// Look for due messages now (after a publish), instead of at the next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Deliver until `shutdown` turns true; then stop claiming and wait (up to `grace`) for
    /// deliveries in flight. A delivery still running after that keeps its lease and is
    /// delivered again after a restart.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
        let max = self.settings.max_in_flight.max(1);
        let slots = Arc::new(Semaphore::new(max));
        let poll = Duration::from_millis(self.settings.poll_ms.max(1));
        while !*shutdown.borrow() {
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    permit = slots.clone().acquire_owned() => drop(permit),
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let claimed = {
                let this = self.clone();
                let lease = self.settings.lease_ms;
                tokio::task::spawn_blocking(move || this.store.claim(now_ms(), free, lease)).await
            };
            let claimed = match claimed {
                Ok(Ok(claimed)) => claimed,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "claiming messages failed; retrying");
                    tokio::time::sleep(poll).await;
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the claim task failed");
                    continue;
                }
            };
            if claimed.is_empty() {
                tokio::select! {
                    () = tokio::time::sleep(poll) => {}
                    () = self.wake.notified() => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            for message in claimed {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let this = self.clone();
                tokio::spawn(async move {
                    this.handle(message).await;
                    drop(permit);
                });
            }
        }
        let drained = tokio::time::timeout(
            grace,
            slots.acquire_many(u32::try_from(max).unwrap_or(u32::MAX)),
        )
        .await;
        if drained.is_err() {
            tracing::warn!(
                "deliveries still in flight at shutdown keep their lease and are delivered again on restart"
            );
        }
    }

    async fn handle(self: Arc<Self>, message: Claimed) {
        let generation = self.registry.current();
        let route = generation.route(&message.topic);
        let Some((route_topic, consumer)) =
            route.and_then(|r| r.consumer.clone().map(|c| (r.topic.clone(), c)))
        else {
            tracing::warn!(topic = %message.topic, id = %message.id, "no route with a consumer for this topic; holding the message");
            let store = self.store.clone();
            let seq = message.seq;
            let _ = tokio::task::spawn_blocking(move || {
                store.release(seq, now_ms() + UNROUTED_RETRY_MS)
            })
            .await;
            return;
        };
        drop(generation);
        let limit = self.route_slots(&route_topic, consumer.concurrency);
        let Ok(_slot) = limit.acquire_owned().await else {
            return;
        };
        let attempt = message.attempt + 1;
        let started = Instant::now();
        let result = delivery::deliver(&self.client, &consumer, &message, attempt).await;
        self.metrics
            .delivered(&route_topic, result.is_ok(), started.elapsed());
        let this = self.clone();
        let outcome =
            tokio::task::spawn_blocking(move || this.settle(message, result, &route_topic)).await;
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(
                    error = %e,
                    "recording a delivery's outcome failed; the message keeps its lease and is \
                     delivered again"
                );
            }
            Err(e) => tracing::error!(error = %e, "the settle task failed"),
        }
    }

    /// Record the outcome of one delivery: delivered, or the verdict applied.
    fn settle(
        &self,
        message: Claimed,
        result: Result<(), DeliveryError>,
        route_topic: &str,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let stats = self.stats.record(&message.topic, now, result.is_err());
        let error = match result {
            Ok(()) => return self.store.delivered(message.seq, now),
            Err(error) => error,
        };
        let failure = FailureSpec {
            topic: message.topic.clone(),
            message_id: message.id.clone(),
            consumer_group: self.settings.consumer_group.clone(),
            attempt: message.attempt + 1,
            deferrals: message.deferrals,
            first_failed_at_ms: message.first_failed_at_ms.unwrap_or(now),
            now_ms: Some(now),
            published_at_ms: Some(message.published_at_ms),
            deadline_ms: None,
            error: ErrorSpec {
                kind: error.kind.clone(),
                message: error.message.clone(),
                retry_after_ms: error.retry_after_ms,
                rejected: error.rejected,
            },
            history: message.history.clone(),
            headers: message.headers.clone(),
            payload: Some(serde_json::Value::String(
                String::from_utf8_lossy(&message.payload).into_owned(),
            )),
            content_type: message.content_type.clone(),
            jitter_seed: None,
            stats,
            extensions: Default::default(),
        }
        .into_failure();
        let asked = Instant::now();
        let decided = self.registry.decide(&message.topic, &failure);
        let took = asked.elapsed();
        let Some(decision) = decided else {
            // The route went away between delivery and verdict: nothing spent, try later.
            return self.store.release(message.seq, now + UNROUTED_RETRY_MS);
        };
        let record = AttemptRecord {
            at_ms: now,
            kind: error.kind,
            message: error.message,
        };
        self.metrics.decided(route_topic, &decision, took);
        self.metrics.verdict(route_topic, &decision);
        self.apply(&message, &record, &decision, now)
    }

    fn apply(
        &self,
        message: &Claimed,
        record: &AttemptRecord,
        decision: &Decision,
        now: u64,
    ) -> Result<(), StoreError> {
        match decision.verdict.action {
            Action::Retry(ms) => self.store.schedule(message.seq, record, now + ms, true),
            Action::Delay(ms) => self.store.schedule(message.seq, record, now + ms, false),
            Action::Discard => self
                .store
                .discard(message.seq, record, &decision.verdict.reason),
            Action::DeadLetter => {
                let dlq = self
                    .settings
                    .dlq_naming
                    .dlq_for(&message.topic, &self.settings.global_dlq);
                let mut history = message.history.clone();
                history.push(AttemptSpec {
                    at_ms: record.at_ms,
                    kind: record.kind.clone(),
                    message: record.message.clone(),
                });
                let envelope = Envelope::new(
                    MessageRef {
                        topic: &message.topic,
                        id: &message.id,
                        headers: &message.headers,
                        payload: &message.payload,
                        content_type: message.content_type.as_deref(),
                    },
                    &history,
                    decision,
                    Context {
                        dlq: &dlq,
                        consumer_group: &self.settings.consumer_group,
                        gateway: &self.settings.instance,
                        now_ms: now,
                    },
                );
                let format = self.settings.dlq_format;
                let bytes = envelope.encode(format).map_err(StoreError::Corrupt)?;
                self.store.dead_letter(
                    message.seq,
                    record,
                    &NewDlqEntry {
                        dlq: &dlq,
                        class: crate::stats::class_name(decision.verdict.class),
                        reason: &decision.verdict.reason,
                        format: crate::envelope::format_name(format),
                        envelope: &bytes,
                    },
                )
            }
        }
    }

    fn route_slots(&self, route: &str, concurrency: usize) -> Arc<Semaphore> {
        self.routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((route.to_string(), concurrency))
            .or_insert_with(|| Arc::new(Semaphore::new(concurrency.max(1))))
            .clone()
    }
}
