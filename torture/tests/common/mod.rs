//! Running `verdict-torture` from a test: its JSON reports, one per run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `verdict-torture args... --json --quiet` with `env` set, its runs' files under a fresh
/// `<temp>/<name>-<pid>`: the work directory and the reports. A run that fails is a test
/// failure showing the harness's stderr (each broken invariant and the replay command).
pub fn torture(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, Vec<serde_json::Value>) {
    let workdir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_verdict-torture"))
        .envs(env.iter().copied())
        .args(args)
        .args(["--json", "--quiet", "--workdir"])
        .arg(&workdir)
        .output()
        .expect("verdict-torture runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON reports");
    let reports = reports.as_array().expect("one report per run").clone();
    (workdir, reports)
}

/// Remove a test's work directory.
pub fn clean(workdir: &Path) {
    let _ = std::fs::remove_dir_all(workdir);
}
