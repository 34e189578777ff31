//! Per-call timing shared by the benches (and the peer bench in `peers/extism`, which
//! includes this file: it builds outside this crate).

#![allow(dead_code)] // each includer uses its own subset

use std::time::{Duration, Instant};

/// Median and 99th percentile of per-call time, over batches of `per_batch` calls.
pub fn percentiles(per_batch: u32, batches: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..batches)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_batch {
                f();
            }
            start.elapsed() / per_batch
        })
        .collect();
    samples.sort();
    (samples[batches / 2], samples[batches * 99 / 100])
}

/// A duration in whole nanoseconds, for summaries.
pub fn ns(d: Duration) -> String {
    format!("{} ns", d.as_nanos())
}
