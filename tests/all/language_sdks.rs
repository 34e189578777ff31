//! The Python and JavaScript SDKs' own tests, and those of the `rules` ports, run natively
//! (CPython's `unittest`, `node --test`) as part of the workspace's test command: the
//! algorithms they hold to the Rust vectors, config errors, accessors and the ported
//! `rules` tests - the JavaScript port's including its built component (the test build's),
//! run through jco against the native code.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `program` in `dir` and returns what it printed; fails the test if it failed.
fn passes(dir: &str, program: &str, args: &[&str]) -> String {
    passes_with(dir, program, args, &[])
}

fn passes_with(dir: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = root().join(dir);
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
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
    text
}

#[test]
fn the_python_sdk_passes_its_tests() {
    let _ = passes(
        "guest-sdk/python",
        "python3",
        &["-m", "unittest", "discover", "-s", "tests"],
    );
}

#[test]
fn the_python_rules_port_passes_its_tests() {
    let _ = passes(
        "policies/rules-py",
        "python3",
        &["-m", "unittest", "discover", "-s", "tests"],
    );
}

#[test]
fn the_javascript_sdk_passes_its_tests() {
    let _ = passes("guest-sdk/js", "node", &["--test", "test/"]);
}

#[test]
fn the_javascript_rules_port_passes_its_tests() {
    let component = verdict_tests::fixtures::RULES_JS.expect("the JavaScript port builds");
    let text = passes_with(
        "policies/rules-js",
        "node",
        &["--test", "test/"],
        &[("VERDICT_COMPONENT", component)],
    );
    // The component's tests ran: none skipped for want of a build.
    assert!(text.contains("skipped 0"), "{text}");
}
