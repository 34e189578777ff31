//! What the benches share: guests built from source, once per target dir.

#![allow(dead_code)] // each bench uses its own subset

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Build the guest crate at `crate_path` (relative to the workspace root) in release and
/// return its component. Shared with tests/build.rs's output dir, so each guest is compiled
/// once per target dir.
pub fn component(crate_path: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let options = verdict_componentize::BuildOptions {
        target_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../verdict-guests")),
        release: true,
        quiet: true,
    };
    verdict_componentize::build_crate(&root.join(crate_path), &options)
        .unwrap_or_else(|e| panic!("{crate_path} builds: {e}"))
        .component
}

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
