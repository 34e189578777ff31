//! A topic's recent delivery statistics, as a policy sees them in a failure's `stats`:
//! fixed one-minute windows and the current run of failures. The gateway keeps one per
//! topic; the simulator one per simulated topic, so a circuit-breaking policy meets the
//! same numbers in both.

use crate::StatsSpec;

/// How long one window lasts.
pub const STATS_WINDOW_MS: u64 = 60_000;

/// One topic's counters over the current window.
#[derive(Debug, Default, Clone)]
pub struct StatsWindow {
    started_ms: u64,
    deliveries: u32,
    failures: u32,
    consecutive_failures: u32,
}

impl StatsWindow {
    /// Count one delivery at `now_ms` and return the stats including it.
    pub fn record(&mut self, now_ms: u64, failed: bool) -> StatsSpec {
        if now_ms.saturating_sub(self.started_ms) >= STATS_WINDOW_MS {
            self.started_ms = now_ms;
            self.deliveries = 0;
            self.failures = 0;
        }
        self.deliveries = self.deliveries.saturating_add(1);
        if failed {
            self.failures = self.failures.saturating_add(1);
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        } else {
            self.consecutive_failures = 0;
        }
        StatsSpec {
            window_ms: now_ms.saturating_sub(self.started_ms).max(1),
            deliveries: self.deliveries,
            failures: self.failures,
            consecutive_failures: self.consecutive_failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_restarts_each_minute_but_a_run_of_failures_carries_over() {
        let mut w = StatsWindow::default();
        w.record(1_000, true);
        let s = w.record(2_000, true);
        assert_eq!(
            (s.deliveries, s.failures, s.consecutive_failures),
            (2, 2, 2)
        );
        let s = w.record(61_000, true);
        assert_eq!(
            (s.deliveries, s.failures, s.consecutive_failures),
            (1, 1, 3)
        );
        let s = w.record(61_500, false);
        assert_eq!((s.window_ms, s.consecutive_failures), (500, 0));
    }
}
