//! Recent delivery statistics per topic, for the failure's `stats` (circuit-breaking
//! policies read them): fixed one-minute windows and the current run of failures.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use verdict_runtime::StatsSpec;

const WINDOW_MS: u64 = 60_000;

#[derive(Debug, Default)]
struct Window {
    started_ms: u64,
    deliveries: u32,
    failures: u32,
    consecutive_failures: u32,
}

/// Per-topic counters over fixed windows (the stats a policy sees are `StatsSpec`).
#[derive(Debug, Default)]
pub(crate) struct TopicWindows {
    topics: Mutex<HashMap<String, Window>>,
}

impl TopicWindows {
    /// Count one delivery of `topic` and return the stats including it.
    pub(crate) fn record(&self, topic: &str, now_ms: u64, failed: bool) -> StatsSpec {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        // Look up before inserting: a topic's name is allocated once, not per delivery.
        if let Some(window) = topics.get_mut(topic) {
            return window.record(now_ms, failed);
        }
        topics
            .entry(topic.to_string())
            .or_default()
            .record(now_ms, failed)
    }
}

impl Window {
    fn record(&mut self, now_ms: u64, failed: bool) -> StatsSpec {
        if now_ms.saturating_sub(self.started_ms) >= WINDOW_MS {
            self.started_ms = now_ms;
            self.deliveries = 0;
            self.failures = 0;
        }
        self.deliveries += 1;
        if failed {
            self.failures += 1;
            self.consecutive_failures += 1;
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
