//! Recent delivery statistics per topic, for the failure's `stats` (circuit-breaking
//! policies read them): a [`StatsWindow`] per topic, for at most [`MAX_TOPICS`] topics - a
//! producer publishing to ever new subjects under a wildcard route must not grow the
//! gateway's memory without bound.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use verdict_runtime::{STATS_WINDOW_MS, StatsSpec, StatsWindow};

/// Topics tracked at most.
pub(crate) const MAX_TOPICS: usize = 10_000;

/// Per-topic counters over fixed windows (the stats a policy sees are `StatsSpec`).
#[derive(Debug, Default)]
pub(crate) struct TopicWindows {
    /// Each topic's window and when it was last delivered (ms).
    topics: Mutex<HashMap<String, (StatsWindow, u64)>>,
    /// How many there are, for `/metrics`.
    tracked: prometheus_client::metrics::gauge::Gauge,
}

impl TopicWindows {
    /// Windows whose number is shown by `tracked`.
    pub(crate) fn new(tracked: prometheus_client::metrics::gauge::Gauge) -> Self {
        TopicWindows {
            topics: Mutex::default(),
            tracked,
        }
    }

    /// Count one delivery of `topic` and return the stats including it.
    pub(crate) fn record(&self, topic: &str, now_ms: u64, failed: bool) -> StatsSpec {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        // Look up before inserting: a topic's name is allocated once, not per delivery.
        if let Some((window, last_ms)) = topics.get_mut(topic) {
            *last_ms = now_ms;
            return window.record(now_ms, failed);
        }
        if topics.len() >= MAX_TOPICS {
            make_room(&mut topics, now_ms);
        }
        let (window, _) = topics
            .entry(topic.to_string())
            .or_insert_with(|| (StatsWindow::default(), now_ms));
        let stats = window.record(now_ms, failed);
        self.tracked
            .set(i64::try_from(topics.len()).unwrap_or(i64::MAX));
        stats
    }

    /// Topics tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Forget topics idle for a window ([`STATS_WINDOW_MS`]: their counts would start over at
/// the next delivery anyway; only a run of consecutive failures is lost) and, when every
/// topic was seen lately, the tenth seen longest ago - so the next thousand new topics find
/// room without another pass, and a busy topic keeps its stats.
fn make_room(topics: &mut HashMap<String, (StatsWindow, u64)>, now_ms: u64) {
    topics.retain(|_, (_, last_ms)| now_ms.saturating_sub(*last_ms) < STATS_WINDOW_MS);
    if topics.len() < MAX_TOPICS {
        return;
    }
    let mut by_age: Vec<(u64, String)> = topics
        .iter()
        .map(|(topic, (_, last_ms))| (*last_ms, topic.clone()))
        .collect();
    by_age.sort_unstable();
    for (_, topic) in by_age.into_iter().take(MAX_TOPICS / 10) {
        topics.remove(&topic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ever_new_topics_never_grow_past_the_bound_and_busy_ones_keep_their_stats() {
        let windows = TopicWindows::default();
        let start = 1_000_000;
        // A busy topic failing, then a hundred thousand new subjects within a second.
        for _ in 0..3 {
            windows.record("orders.busy", start, true);
        }
        for i in 0..100_000u64 {
            windows.record(&format!("orders.{i}"), start + i / 100, false);
            if i % 1_000 == 0 {
                windows.record("orders.busy", start + i / 100, true);
            }
        }
        assert!(windows.len() <= MAX_TOPICS, "{}", windows.len());
        let busy = windows.record("orders.busy", start + 1_000, true);
        assert!(busy.consecutive_failures > 3, "{busy:?}");
        // A minute later, the first new topic that finds the map full drops every idle one.
        let later = start + STATS_WINDOW_MS + 2_000;
        for i in 0..2_000 {
            windows.record(&format!("later.{i}"), later, false);
        }
        assert!(windows.len() <= 2_000, "{}", windows.len());
    }
}
