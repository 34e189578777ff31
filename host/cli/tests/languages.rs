//! Python and JavaScript policies through the `verdict` binary: `verdict build` on a
//! Python project, `verdict inspect` naming each WASI import and its deterministic stub,
//! `verdict decide` giving the same verdict twice, and a missing toolchain named with how
//! to install it; a project built from a relative path in another directory.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use common::{build, text, verdict};

/// `verdict build tests/guests/wasi-probe-py`, once per run, where `tests/build.rs` builds it
/// (so an unchanged probe is not rebuilt).
fn probe() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| build("tests/guests/wasi-probe-py", "wasi_probe.component.wasm"))
}

#[test]
fn inspect_names_each_wasi_import_and_its_deterministic_stub() {
    let out = verdict(&["inspect", probe()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "wasi-probe");
    let wasi = v["wasi"].as_array().expect("a wasi list");
    let imports: Vec<&str> = wasi.iter().map(|w| w["import"].as_str().unwrap()).collect();
    for expected in [
        "wasi:clocks/wall-clock@",
        "wasi:random/random@",
        "wasi:cli/stdout@",
    ] {
        assert!(
            imports.iter().any(|i| i.starts_with(expected)),
            "{imports:?}"
        );
    }
    assert!(
        wasi.iter().all(|w| w["linked_as"] == "deterministic stub"),
        "{wasi:?}"
    );
    let grants = |name: &str| {
        wasi.iter()
            .find(|w| w["import"].as_str().unwrap().starts_with(name))
            .map(|w| w["grants"].as_str().unwrap().to_string())
            .unwrap_or_default()
    };
    assert!(grants("wasi:clocks/wall-clock@").contains("now-ms"));
    assert!(grants("wasi:random/random@").contains("jitter seed"));
    // Every WASI import is listed, and nothing but WASI imports.
    let all = v["imports"].as_array().unwrap();
    let wasi_imports = all
        .iter()
        .filter(|i| i.as_str().unwrap().starts_with("wasi:"))
        .count();
    assert_eq!(wasi_imports, wasi.len());
}

#[test]
fn the_same_failure_gets_the_same_verdict_with_the_failures_clock() {
    let failure = r#"{"attempt": 1, "now-ms": 1800000000000, "jitter-seed": 99, "error": {"kind": "probe.report"}}"#;
    let decide = || {
        let out = verdict(
            &["decide", "--policy", probe(), "--failure", "-"],
            Some(failure),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["verdict"]["reason"].as_str().unwrap().to_string()
    };
    let first = decide();
    assert_eq!(first, decide(), "two processes, one failure: one verdict");
    assert!(first.contains("wall=18000000000000000"), "{first}");
    assert!(first.contains("env=0"), "{first}");
}

#[test]
fn a_missing_componentize_py_is_named_with_how_to_install_it() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lang-missing-tool");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("pyproject.toml"),
        "[project]\nname = \"orders\"\n[tool.verdict]\nmodule = \"orders\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("orders.py"), "Decider = None\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["build", dir.to_str().unwrap()])
        .env("VERDICT_COMPONENTIZE_PY", "/nonexistent/componentize-py")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("/nonexistent/componentize-py not found")
            && err.contains("pip install componentize-py==0.25.1"),
        "{err}"
    );
}

/// `verdict build` takes a project's path as any path is taken - relative to where it runs -
/// for both interpreted languages, run from a directory outside the project, into a
/// relative `--target-dir`: a real build by each toolchain (the output is new).
#[test]
fn python_and_javascript_projects_build_from_a_relative_path_elsewhere() {
    let cwd = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lang-relative");
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    // From `cwd` up to `/`, then down to the project: relative, and through no symlink.
    let up = "../".repeat(cwd.components().count() - 1);
    for (project, language) in [
        ("policies/rules-py", "python"),
        ("policies/rules-js", "javascript"),
    ] {
        let relative = format!(
            "{up}{}",
            root.join(project)
                .display()
                .to_string()
                .trim_start_matches('/')
        );
        let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
            .args(["build", "--target-dir", "out", &relative])
            .current_dir(&cwd)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "verdict build {relative} in {}: {}",
            cwd.display(),
            text(&out.stderr)
        );
        let component = text(&out.stdout).trim().to_string();
        assert!(
            Path::new(&component).starts_with(cwd.join("out").join(language))
                && component.ends_with(".component.wasm")
                && Path::new(&component).is_file(),
            "{project}: {component}"
        );
    }
}
