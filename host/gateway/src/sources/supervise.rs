//! How a broker source stays up: a session per connection, rebuilt after a failure on a
//! [`Reconnect`] schedule, and a bounded wait for deliveries in flight at shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use crate::health::Readiness;

/// Run a broker source: `session` connects and consumes until shutdown (`Ok`) or until
/// it fails, and is then rebuilt after a backoff (100 ms doubling to 5 s, back to 100 ms
/// once a session got as far as consuming, which it reports through `ready`). Deliveries
/// hold one of `max_in_flight` slots; at shutdown they get `grace` to finish - what is still
/// unsettled after that the broker redelivers.
pub(crate) async fn supervise<F, Fut>(
    name: &'static str,
    ready: &Readiness,
    max_in_flight: usize,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
    mut session: F,
) where
    F: FnMut(Arc<Semaphore>, watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let max = max_in_flight.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let mut backoff = Reconnect::new();
    let mut stop = shutdown.clone();
    while !*shutdown.borrow() {
        match session(slots.clone(), shutdown.clone()).await {
            Ok(()) => break,
            Err(e) => {
                if ready.is_up() {
                    backoff.reset();
                }
                ready.set(false);
                let wait = backoff.next();
                tracing::warn!(
                    source = name,
                    error = %format!("{e:#}"),
                    retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "broker session failed; reconnecting"
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
    ready.set(false);
    if !drained(&slots, max, grace).await {
        tracing::warn!(
            source = name,
            "deliveries still in flight at shutdown are redelivered by the broker"
        );
    }
}

/// Whether every one of a source's `max` delivery slots came back within `grace`: false
/// when deliveries are still running at shutdown.
pub(crate) async fn drained(slots: &Semaphore, max: usize, grace: Duration) -> bool {
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    tokio::time::timeout(grace, slots.acquire_many(all))
        .await
        .is_ok()
}

/// Reconnect delays: 100 ms doubling to 5 s.
#[derive(Debug)]
pub(crate) struct Reconnect {
    next_ms: u64,
}

impl Reconnect {
    pub(crate) fn new() -> Reconnect {
        Reconnect { next_ms: 100 }
    }

    pub(crate) fn reset(&mut self) {
        self.next_ms = 100;
    }

    pub(crate) fn next(&mut self) -> Duration {
        let d = Duration::from_millis(self.next_ms);
        self.next_ms = (self.next_ms * 2).min(5_000);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_to_five_seconds_and_start_over_once_up() {
        let mut b = Reconnect::new();
        let waits: Vec<u64> = (0..8).map(|_| b.next().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(100));
    }
}
