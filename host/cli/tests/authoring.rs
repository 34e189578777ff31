//! A policy author's first ten minutes, as the README tells them: `verdict new`, `cargo
//! test`, `verdict build`, `verdict test --properties`, `verdict check` - each must pass on
//! the scaffold as generated, and the README's code must be the scaffold's.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::text;

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A fresh directory for one test, and a target directory kept between runs (linked in as
/// the crate's own `target/`, so paths are the README's and the dependencies compile once
/// per CI cache).
fn workspace(name: &str) -> (PathBuf, PathBuf) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("authoring-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = tmp.join("../verdict-scaffold-target");
    std::fs::create_dir_all(&cache).unwrap();
    (dir, cache)
}

/// Run a command in `dir` with the crate's own target directory (not the test run's).
fn run(dir: &Path, program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

/// A generated JavaScript project's toolchain, from npm's cache when the machine has one.
fn npm_install(project: &Path) {
    ok(
        "npm install",
        &run(
            project,
            "npm",
            &["install", "--prefer-offline", "--no-audit", "--no-fund"],
        ),
    );
}

/// The `lang` code blocks of the book's "Write a policy in Rust" chapter.
fn readme_blocks(lang: &str) -> Vec<String> {
    let chapter = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/policies/rust.md"),
    )
    .expect("reading docs/src/policies/rust.md");
    chapter
        .split(&format!("```{lang}\n"))
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .map(String::from)
        .collect()
}

#[test]
fn a_new_policy_is_tested_built_and_admitted_as_generated() {
    let started = Instant::now();
    let (dir, cache) = workspace("orders");
    let bin = env!("CARGO_BIN_EXE_verdict");
    let made = ok("verdict new", &run(&dir, bin, &["new", "orders"]));
    assert!(
        made.contains("src/lib.rs") && made.contains("vectors/orders.json"),
        "{made}"
    );
    let crate_dir = dir.join("orders");
    std::os::unix::fs::symlink(&cache, crate_dir.join("target")).unwrap();

    let tests = ok(
        "cargo test",
        &run(&crate_dir, "cargo", &["test", "--quiet"]),
    );
    assert!(tests.contains("4 passed"), "{tests}");
    let built = ok("verdict build", &run(&crate_dir, bin, &["build", "."]));
    let component = "target/wasm32-unknown-unknown/release/orders.component.wasm";
    assert!(built.trim().ends_with(component), "{built}");
    let tested = ok(
        "verdict test",
        &run(
            &crate_dir,
            bin,
            &["test", component, "vectors/orders.json", "--properties"],
        ),
    );
    assert!(
        tested.contains("never-retry kinds are not retried"),
        "{tested}"
    );
    assert!(tested.contains(", 0 failed"), "{tested}");
    // The README's vector files for this policy pass against it too.
    for (i, block) in readme_blocks("json").iter().enumerate() {
        let file = format!("readme-{i}.json");
        std::fs::write(crate_dir.join(&file), block).unwrap();
        ok(
            "verdict test (the README's vectors)",
            &run(&crate_dir, bin, &["test", component, &file]),
        );
    }
    let checked = ok(
        "verdict check",
        &run(&crate_dir, bin, &["check", "-c", "verdict.toml"]),
    );
    assert!(checked.contains("\"topic\": \"orders.>\""), "{checked}");
    eprintln!(
        "from `verdict new` to an admitted policy: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `verdict new --lang python|javascript`, then what its README says, as generated: the
/// native tests, `verdict build .`, `verdict test --properties`, `verdict check`. The
/// JavaScript project installs its toolchain first (`npm install`, from npm's cache when
/// the machine has one).
#[test]
fn a_new_python_or_javascript_policy_is_tested_built_and_admitted_as_generated() {
    let bin = env!("CARGO_BIN_EXE_verdict");
    for (lang, tests_cmd, component) in [
        (
            "python",
            ["python3", "-m", "unittest", "discover", "-s", "tests"].as_slice(),
            "target/python/payments_eu.component.wasm",
        ),
        (
            "javascript",
            ["node", "--test", "test/"].as_slice(),
            "target/javascript/payments_eu.component.wasm",
        ),
    ] {
        let started = Instant::now();
        let (dir, _) = workspace(&format!("new-{lang}"));
        ok(
            "verdict new",
            &run(&dir, bin, &["new", "--lang", lang, "payments-eu"]),
        );
        let project = dir.join("payments-eu");
        if lang == "javascript" {
            npm_install(&project);
        }
        let out = run(&project, tests_cmd[0], &tests_cmd[1..]);
        let native = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{lang} native tests: {native}");
        let four = if lang == "python" {
            "Ran 4 tests"
        } else {
            "pass 4"
        };
        assert!(native.contains(four), "{lang}: {native}");
        let built = ok("verdict build", &run(&project, bin, &["build", "."]));
        assert!(built.trim().ends_with(component), "{lang}: {built}");
        let tested = ok(
            "verdict test",
            &run(
                &project,
                bin,
                &[
                    "test",
                    component,
                    "vectors/payments-eu.json",
                    "--properties",
                ],
            ),
        );
        assert!(
            tested.contains("never-retry kinds are not retried") && tested.contains(", 0 failed"),
            "{lang}: {tested}"
        );
        let checked = ok(
            "verdict check",
            &run(&project, bin, &["check", "-c", "verdict.toml"]),
        );
        assert!(
            checked.contains("\"topic\": \"payments-eu.>\"")
                && checked.contains("verdict:policy@0.2"),
            "{lang}: {checked}"
        );
        eprintln!(
            "{lang}: from `verdict new` to an admitted policy: {:.1} s",
            started.elapsed().as_secs_f64()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_readmes_policy_code_is_what_verdict_new_writes() {
    let (dir, _) = workspace("readme");
    ok(
        "verdict new",
        &run(&dir, env!("CARGO_BIN_EXE_verdict"), &["new", "orders"]),
    );
    let lib = std::fs::read_to_string(dir.join("orders/src/lib.rs")).unwrap();
    let rust = readme_blocks("rust");
    assert!(!rust.is_empty(), "no rust block in the section");
    for block in &rust {
        assert!(
            lib.contains(block.as_str()),
            "the README shows code `verdict new` does not write:\n{block}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verdict_new_refuses_bad_names_and_existing_crates_naming_the_fix() {
    let (dir, _) = workspace("refusals");
    let bin = env!("CARGO_BIN_EXE_verdict");
    let bad = run(&dir, bin, &["new", "Orders"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("e.g. `orders`"),
        "{}",
        text(&bad.stderr)
    );
    std::fs::create_dir_all(dir.join("taken/src")).unwrap();
    let taken = run(&dir, bin, &["new", "taken"]);
    assert!(
        text(&taken.stderr).contains("exists and is not empty"),
        "{}",
        text(&taken.stderr)
    );
    // An unknown language is refused before anything is written, naming the ones there are.
    let lang = run(&dir, bin, &["new", "x", "--lang", "go"]);
    assert!(!lang.status.success());
    assert!(
        ["rust", "python", "javascript"]
            .iter()
            .all(|l| text(&lang.stderr).contains(l)),
        "{}",
        text(&lang.stderr)
    );
    assert!(!dir.join("x").exists());
    // The Python and JavaScript SDKs are in no registry: a version is refused, naming
    // --sdk-path.
    for language in ["python", "javascript"] {
        let version = run(
            &dir,
            bin,
            &["new", "y", "--lang", language, "--sdk-version", "0.1"],
        );
        assert!(!version.status.success());
        assert!(
            text(&version.stderr).contains("not published")
                && text(&version.stderr).contains("--sdk-path"),
            "{}",
            text(&version.stderr)
        );
        assert!(!dir.join("y").exists());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh scaffold named `name`, changed by `edit` (file, from, to) the way a newcomer
/// gets it wrong, sharing the dependency cache.
fn broken_scaffold(name: &str, edits: &[(&str, &str, &str)]) -> (PathBuf, PathBuf) {
    let (dir, cache) = workspace(name);
    ok(
        "verdict new",
        &run(&dir, env!("CARGO_BIN_EXE_verdict"), &["new", name]),
    );
    let crate_dir = dir.join(name);
    std::os::unix::fs::symlink(&cache, crate_dir.join("target")).unwrap();
    for (file, from, to) in edits {
        let path = crate_dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no `{from}` to break");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }
    (dir, crate_dir)
}

fn failed(what: &str, out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{what} should fail\nstdout: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

#[test]
fn a_crate_without_a_cdylib_is_told_its_crate_type() {
    let (dir, crate_dir) = broken_scaffold(
        "nocdylib",
        &[("Cargo.toml", "crate-type = [\"cdylib\", \"rlib\"]", "")],
    );
    let bin = env!("CARGO_BIN_EXE_verdict");
    let err = failed("verdict build", &run(&crate_dir, bin, &["build", "."]));
    assert!(err.contains("crate-type = [\"cdylib\", \"rlib\"]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_policy_without_export_policy_is_told_the_macro() {
    let (dir, crate_dir) = broken_scaffold(
        "noexport",
        &[("src/lib.rs", "export_policy!(Noexport);", "")],
    );
    let bin = env!("CARGO_BIN_EXE_verdict");
    // Whichever step notices first - wrapping the module, or loading the component - names
    // the macro that exports the policy.
    let built = run(&crate_dir, bin, &["build", "."]);
    let err = if built.status.success() {
        let component = text(&built.stdout).trim().to_string();
        failed("verdict test", &run(&crate_dir, bin, &["test", &component]))
    } else {
        text(&built.stderr)
    };
    assert!(err.contains("export_policy!"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_config_without_defaults_is_told_how_to_give_them() {
    let (dir, crate_dir) = broken_scaffold(
        "nodefaults",
        &[(
            "src/lib.rs",
            "#[serde(deny_unknown_fields, default)]",
            "#[serde(deny_unknown_fields)]",
        )],
    );
    let bin = env!("CARGO_BIN_EXE_verdict");
    ok("verdict build", &run(&crate_dir, bin, &["build", "."]));
    // The generated route sets `max_attempts` only.
    let err = failed(
        "verdict check",
        &run(&crate_dir, bin, &["check", "-c", "verdict.toml"]),
    );
    assert!(
        err.contains("missing field `base_delay_ms`") && err.contains("impl Default"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `verdict test --watch <project>` for each language: the first round builds and passes;
/// saving a source file that breaks a rule rebuilds and fails, naming the file saved and the
/// case; a vector file saved starts a round too.
#[test]
fn verdict_test_watch_rebuilds_and_retests_on_save_in_every_language() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::Duration;

    let bin = env!("CARGO_BIN_EXE_verdict");
    // Per language: the file to break and how (the never-retry rule turned off, so a
    // payload that does not parse is retried instead of dead-lettered as poison).
    let languages = [
        (
            "rust",
            "src/lib.rs",
            "if let Some(dead) = f.never_retry() {",
            "if let Some(dead) = None::<Verdict> {",
        ),
        (
            "python",
            "watched_policy/__init__.py",
            "if (dead := f.never_retry()) is not None:",
            "if (dead := None) is not None:",
        ),
        (
            "javascript",
            "src/policy.js",
            "const dead = f.neverRetry();",
            "const dead = null;",
        ),
    ];
    // Saved as editors save: a new file renamed over the old one.
    let save = |path: &Path, text: &str| {
        let tmp = path.with_extension("saving");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    };
    for (lang, file, rule, broken) in languages {
        let (dir, cache) = workspace(&format!("watch-{lang}"));
        ok(
            "verdict new",
            &run(&dir, bin, &["new", "--lang", lang, "watched"]),
        );
        let project = dir.join("watched");
        match lang {
            // The crate's dependencies compile once per CI cache (not linked in as
            // `target/`: the watch would then follow the link into the whole cache).
            "rust" => {}
            "javascript" => npm_install(&project),
            _ => {}
        }
        let source = std::fs::read_to_string(project.join(file)).unwrap();
        assert!(
            source.contains(rule),
            "{lang}: {file} has the rule to break"
        );

        let mut watch = Command::new(bin);
        watch
            .args(["test", "--watch", "watched", "watched/vectors/watched.json"])
            .current_dir(&dir)
            .env_remove("CARGO_TARGET_DIR");
        if lang == "rust" {
            watch.env("CARGO_TARGET_DIR", &cache);
        }
        // Killed when the test ends, passed or not: a watch never stops by itself.
        struct Watching(std::process::Child);
        impl Drop for Watching {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut child = Watching(
            watch
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let (lines, rounds) = mpsc::channel();
        let stdout = child.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut round = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let done = line.starts_with("watching ");
                round.push_str(&line);
                round.push('\n');
                if done && lines.send(std::mem::take(&mut round)).is_err() {
                    return;
                }
            }
        });
        let next = |what: &str| {
            rounds
                .recv_timeout(Duration::from_secs(600))
                .unwrap_or_else(|_| panic!("{lang}: no round {what} within 10 minutes"))
        };
        let first = next("at start");
        assert!(first.contains("all passed"), "{lang}: {first}");

        save(&project.join(file), &source.replace(rule, broken));
        let second = next("after the source was saved");
        assert!(
            second.contains(&format!("{file} changed")) && second.contains("FAILED"),
            "{lang}: {second}"
        );
        assert!(
            second.contains("a payload that does not parse is poison"),
            "{lang}: the failing case is named: {second}"
        );

        // A vector file saved: a round too (the component unchanged, so no new build).
        let vectors = project.join("vectors/watched.json");
        let cases = std::fs::read_to_string(&vectors).unwrap();
        save(&vectors, &cases.replace("is poison", "is poison, still"));
        let third = next("after the vectors were saved");
        assert!(
            third.contains("watched.json changed") && third.contains("is poison, still"),
            "{lang}: {third}"
        );
        drop(child);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
