//! The bound on settlements that fail: a message whose settlement cannot be applied is given
//! back to its source a few times, then dead-lettered by the gateway itself, and released at a
//! bounded rate when even that fails.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How many times in a row applying a settlement to one message may fail (the message
/// given back to the broker each time) before the gateway dead-letters it itself.
pub const MAX_SETTLE_FAILURES: u32 = 3;

/// How long a message waits before its next delivery after `failures` failed settlements
/// in a row: at once (the broker's own redelivery) below [`MAX_SETTLE_FAILURES`]; past it,
/// when even the gateway's own dead letter could not be written (the DLQ itself refuses),
/// 5 s doubling to 5 minutes - the message stays on the source, released at a bounded rate
/// and counted (`verdict_settlement_faults_total{reason="released"}`) until the DLQ takes
/// it.
pub(crate) fn release_delay(failures: u32) -> Duration {
    match failures.checked_sub(MAX_SETTLE_FAILURES) {
        None => Duration::ZERO,
        Some(past) => Duration::from_secs((5_u64 << past.min(6)).min(300)),
    }
}

/// Failed settlements per message, in this process: the bound that keeps a message that
/// no settlement can be applied to from being redelivered without end. Kept in memory and
/// bounded (forgotten wholesale past 100,000 entries): after a restart a message gets
/// [`MAX_SETTLE_FAILURES`] more tries, never unbounded ones.
#[derive(Debug, Clone, Default)]
pub(crate) struct SettleFailures(Arc<Failures>);

#[derive(Debug, Default)]
struct Failures {
    counts: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// Keys tracked now: a settled delivery checks this, not the lock, in the usual case
    /// of no failures at all.
    tracked: std::sync::atomic::AtomicUsize,
}

impl SettleFailures {
    const MAX_TRACKED: usize = 100_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.0
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether any message has failed to settle lately (then a settled one may need
    /// [`SettleFailures::settled`]).
    pub(crate) fn any(&self) -> bool {
        self.0.tracked.load(Ordering::Relaxed) > 0
    }

    /// One more failure for `key`: how many in a row now.
    pub(crate) fn failed(&self, key: &str) -> u32 {
        let mut map = self.lock();
        if map.len() >= Self::MAX_TRACKED && !map.contains_key(key) {
            map.clear();
        }
        let n = map.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        let n = *n;
        self.0.tracked.store(map.len(), Ordering::Relaxed);
        n
    }

    /// `key` settled: its count starts over.
    pub(crate) fn settled(&self, key: &str) {
        if !self.any() {
            return;
        }
        let mut map = self.lock();
        map.remove(key);
        self.0.tracked.store(map.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settlement_failures_are_released_at_once_then_at_a_bounded_rate() {
        let waits: Vec<u64> = (1..=12).map(|n| release_delay(n).as_secs()).collect();
        assert_eq!(waits, [0, 0, 5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
        let failures = SettleFailures::default();
        assert_eq!((failures.failed("a"), failures.failed("a")), (1, 2));
        assert_eq!(failures.failed("b"), 1);
        failures.settled("a");
        assert_eq!(failures.failed("a"), 1, "a settled message starts over");
        failures.settled("a");
        failures.settled("b");
        assert!(!failures.any(), "nothing tracked once all settled");
    }
}
