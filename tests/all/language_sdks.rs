//! The Python and JavaScript SDKs' own tests, and those of the `rules` ports, run natively
//! (CPython's `unittest`, `node --test`) as part of the workspace's test command: the
//! algorithms they hold to the Rust vectors, config errors, accessors and the ported
//! `rules` tests.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn passes(dir: &str, program: &str, args: &[&str]) {
    let dir = root().join(dir);
    let out = Command::new(program)
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("running {program} in {}: {e}", dir.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{program} {args:?} in {}:\n{text}",
        dir.display()
    );
}

#[test]
fn the_python_sdk_passes_its_tests() {
    passes(
        "guest-sdk/python",
        "python3",
        &["-m", "unittest", "discover", "-s", "tests"],
    );
}

#[test]
fn the_python_rules_port_passes_its_tests() {
    passes(
        "policies/rules-py",
        "python3",
        &["-m", "unittest", "discover", "-s", "tests"],
    );
}

#[test]
fn the_javascript_sdk_passes_its_tests() {
    passes("guest-sdk/js", "node", &["--test", "test/"]);
}

#[test]
fn the_javascript_rules_port_passes_its_tests() {
    passes("policies/rules-js", "node", &["--test", "test/"]);
}
