//! Recent delivery statistics per topic, for the failure's `stats` (circuit-breaking
//! policies read them): fixed one-minute windows and the current run of failures.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::StatsSpec;

const WINDOW_MS: u64 = 60_000;

#[derive(Debug, Default)]
struct Window {
    started_ms: u64,
    deliveries: u32,
    failures: u32,
    consecutive_failures: u32,
}

/// Per-topic counters.
#[derive(Debug, Default)]
pub(crate) struct TopicStats {
    topics: Mutex<HashMap<String, Window>>,
}

impl TopicStats {
    /// Count one delivery of `topic` and return the stats including it.
    pub(crate) fn record(&self, topic: &str, now_ms: u64, failed: bool) -> StatsSpec {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        let w = topics.entry(topic.to_string()).or_default();
        if now_ms.saturating_sub(w.started_ms) >= WINDOW_MS {
            w.started_ms = now_ms;
            w.deliveries = 0;
            w.failures = 0;
        }
        w.deliveries += 1;
        if failed {
            w.failures += 1;
            w.consecutive_failures += 1;
        } else {
            w.consecutive_failures = 0;
        }
        StatsSpec {
            window_ms: now_ms.saturating_sub(w.started_ms).max(1),
            deliveries: w.deliveries,
            failures: w.failures,
            consecutive_failures: w.consecutive_failures,
        }
    }
}
