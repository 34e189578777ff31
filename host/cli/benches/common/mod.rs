//! What the benches share: guests built from source, once per target dir.

#![allow(dead_code)] // each bench uses its own subset

use std::path::PathBuf;

mod timing;

#[allow(unused_imports)] // each bench uses its own subset
pub use timing::{ns, percentiles};

/// Build the guest crate at `crate_path` (relative to the workspace root) in release and
/// return its component. Shared with tests/build.rs's output dir, so each guest is compiled
/// once per target dir.
pub fn component(crate_path: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The 0.1 fixture rebuilds `rules` with other SDK features; a cdylib's file name has no
    // hash, so it gets a target directory of its own (as in the test build).
    let guests = if crate_path.ends_with("rules-v0-1") {
        "../verdict-guests-v0-1"
    } else {
        "../verdict-guests"
    };
    let options = verdict_componentize::BuildOptions {
        target_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(guests)),
        release: true,
        quiet: true,
    };
    verdict_componentize::build_crate(&root.join(crate_path), &options)
        .unwrap_or_else(|e| panic!("{crate_path} builds: {e}"))
        .component
}
