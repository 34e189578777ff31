//! The store's DLQs over time: depth and ingress sampled every [`SAMPLE_EVERY`] into a ring
//! of the last [`KEPT_SAMPLES`], so the console can draw the last hour instead of one number.
//! In memory: a restart starts the history again.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use crate::store::DlqStats;

/// How often the gateway samples its store's DLQs.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples kept: an hour at [`SAMPLE_EVERY`].
pub const KEPT_SAMPLES: usize = 360;

/// One sample, summed over the store's DLQs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DlqSample {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// Dead letters waiting.
    pub depth: u64,
    /// Dead letters written since the previous sample (0 for the first).
    pub ingress: u64,
}

/// The ring of samples.
#[derive(Debug, Default)]
pub struct DlqHistory {
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    samples: VecDeque<DlqSample>,
    /// The store's cumulative ingress at the last sample: what the next one subtracts.
    last_total: Option<u64>,
}

impl DlqHistory {
    /// Record the store's `stats` at `at_ms`. Ingress is counted from the rows the store
    /// keeps, which retention prunes: a total that went down counts as no ingress rather
    /// than a negative one.
    pub fn record(&self, at_ms: u64, stats: &[DlqStats]) {
        let depth = stats.iter().map(|s| s.depth).sum();
        let total: u64 = stats.iter().map(|s| s.ingress).sum();
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let ingress = ring
            .last_total
            .map_or(0, |before| total.saturating_sub(before));
        ring.last_total = Some(total);
        ring.samples.push_back(DlqSample {
            at_ms,
            depth,
            ingress,
        });
        while ring.samples.len() > KEPT_SAMPLES {
            ring.samples.pop_front();
        }
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<DlqSample> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(depth: u64, ingress: u64) -> Vec<DlqStats> {
        vec![DlqStats {
            dlq: "orders.DLQ".into(),
            topic: "orders".into(),
            depth,
            oldest_at_ms: 0,
            ingress,
        }]
    }

    #[test]
    fn ingress_is_the_difference_never_negative_and_the_ring_is_bounded() {
        let h = DlqHistory::default();
        h.record(0, &stats(5, 5));
        h.record(10, &stats(8, 9));
        // Retention pruned old rows: the total fell.
        h.record(20, &stats(8, 2));
        h.record(30, &stats(9, 3));
        let got: Vec<(u64, u64)> = h.samples().iter().map(|s| (s.depth, s.ingress)).collect();
        assert_eq!(got, [(5, 0), (8, 4), (8, 0), (9, 1)]);
        for i in 0..(KEPT_SAMPLES as u64 + 10) {
            h.record(100 + i, &stats(i, i));
        }
        let samples = h.samples();
        assert_eq!(samples.len(), KEPT_SAMPLES);
        assert_eq!(samples.last().unwrap().at_ms, 100 + KEPT_SAMPLES as u64 + 9);
    }
}
