//! The embedded source: messages published through the admin API into the SQLite store,
//! claimed with a lease, and each settlement one store transaction.
//!
//! Retries never block other messages: a scheduled message is simply not due, and the loop
//! keeps claiming what is. Deliveries run concurrently up to `[gateway] max_in_flight`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};

use super::Settlement;
use crate::pipeline::{Pipeline, now_ms};
use crate::store::Claimed;
use crate::store::{Store, StoreError};

/// The source's name in metrics.
pub const NAME: &str = "embedded";

/// Deliver the store's due messages until `shutdown` turns true; then stop claiming and wait
/// (up to `grace`) for deliveries in flight. A delivery still running after that keeps its
/// lease and is delivered again after a restart.
pub async fn run(pipeline: Arc<Pipeline>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
    let settings = pipeline.settings().clone();
    let store = pipeline.store().clone();
    let max = settings.max_in_flight.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let poll = Duration::from_millis(settings.poll_ms.max(1));
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
            let store = store.clone();
            let lease = settings.lease_ms;
            tokio::task::spawn_blocking(move || store.claim(now_ms(), free, lease)).await
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
                () = pipeline.woken().notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        for message in claimed {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let (pipeline, store) = (pipeline.clone(), store.clone());
            tokio::spawn(async move {
                let received = Instant::now();
                let settlement = pipeline.process(&message.delivery).await;
                let handled = settlement.handled();
                let applied =
                    tokio::task::spawn_blocking(move || apply(&store, &message, &settlement)).await;
                match applied {
                    Ok(Ok(())) => pipeline
                        .metrics()
                        .handled(NAME, handled, received.elapsed()),
                    Ok(Err(e)) => tracing::error!(
                        error = %e,
                        "recording a delivery's outcome failed; the message keeps its lease \
                         and is delivered again"
                    ),
                    Err(e) => tracing::error!(error = %e, "the settle task failed"),
                }
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

/// One settlement, one transaction.
fn apply(store: &Store, message: &Claimed, settlement: &Settlement) -> Result<(), StoreError> {
    let now = now_ms();
    match settlement {
        Settlement::Delivered => store.delivered(message.seq, now),
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => store.schedule(message.seq, failed, failed.at_ms + delay_ms, *spend_attempt),
        Settlement::DeadLetter { failed, letter } => store.dead_letter(message.seq, failed, letter),
        Settlement::Discard { failed, reason } => store.discard(message.seq, failed, reason),
        Settlement::Release { delay_ms } => store.release(message.seq, now + delay_ms),
    }
}
