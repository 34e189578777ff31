//! Recent delivery statistics per topic, for the failure's `stats` (circuit-breaking
//! policies read them): a [`StatsWindow`] per topic.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use verdict_runtime::{StatsSpec, StatsWindow};

/// Per-topic counters over fixed windows (the stats a policy sees are `StatsSpec`).
#[derive(Debug, Default)]
pub(crate) struct TopicWindows {
    topics: Mutex<HashMap<String, StatsWindow>>,
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
