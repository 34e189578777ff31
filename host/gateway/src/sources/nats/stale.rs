//! Boundaries left pending: a gateway removing a route marks the route's consumer
//! `boundary=pending`, reads how far the overlapping consumers were handed messages, and
//! writes the boundary - two writes a few milliseconds apart. A gateway that dies between
//! them leaves the mark behind, and every ownership check on the overlapped subjects then
//! waits for a boundary nobody is writing: the messages are given back, once a second,
//! forever (no attempt spent, nothing lost, nothing delivered either).
//!
//! The checks note how long they have seen each consumer pending (on this gateway's own
//! monotonic clock: the mark carries no time, so no clock of another gateway is trusted).
//! Past [`STALE_AFTER`] the session is restarted, and its start settles the mark as this
//! gateway's config says - a route it consumes keeps its life open, one it does not is
//! closed at a boundary read now and agreed through the history bucket. Either is what a
//! live closer could have met anyway (a fleet part-way through a change), so acting early
//! on a closer that was only slow is safe, merely wasted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a check must have seen a consumer pending before the mark counts as left
/// behind. The two writes it separates take milliseconds; seconds mean a closer stopped.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(10);

/// What this session's checks have seen pending, and since when.
#[derive(Debug, Default)]
pub(crate) struct StaleBoundaries {
    since: Mutex<HashMap<String, Instant>>,
    /// The consumer whose mark went stale, for the session that restarts over it.
    stale: Mutex<Option<String>>,
    found: Notify,
}

impl StaleBoundaries {
    /// A check read the consumer `durable`'s marks: `pending` or not, at `now`.
    pub(crate) fn seen(&self, durable: &str, pending: bool, now: Instant) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        if !pending {
            since.remove(durable);
            return;
        }
        let first = *since.entry(durable.to_string()).or_insert(now);
        if now.duration_since(first) >= STALE_AFTER {
            since.remove(durable);
            *self.stale.lock().unwrap_or_else(|e| e.into_inner()) = Some(durable.to_string());
            self.found.notify_one();
        }
    }

    /// Resolves once a mark has gone stale: the consumer it is on.
    pub(crate) async fn found(&self) -> String {
        loop {
            self.found.notified().await;
            if let Some(durable) = self.stale.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return durable;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_mark_seen_pending_for_the_whole_bound_is_stale_and_one_cleared_in_between_is_not() {
        let stale = StaleBoundaries::default();
        let t0 = Instant::now();
        stale.seen("vip", true, t0);
        stale.seen("vip", true, t0 + STALE_AFTER / 2);
        // Written meanwhile: the clock starts again at the next pending read.
        stale.seen("vip", false, t0 + STALE_AFTER / 2);
        stale.seen("vip", true, t0 + STALE_AFTER);
        stale.seen("other", true, t0 + STALE_AFTER);
        let quiet = tokio::time::timeout(Duration::from_millis(10), stale.found()).await;
        assert!(quiet.is_err(), "nothing stale yet: {quiet:?}");

        stale.seen("vip", true, t0 + STALE_AFTER * 2);
        let found = tokio::time::timeout(Duration::from_millis(10), stale.found()).await;
        assert_eq!(found.as_deref(), Ok("vip"));
        // Reported once: the next report needs the whole bound again.
        stale.seen("vip", true, t0 + STALE_AFTER * 2);
        let again = tokio::time::timeout(Duration::from_millis(10), stale.found()).await;
        assert!(again.is_err(), "{again:?}");
    }
}
