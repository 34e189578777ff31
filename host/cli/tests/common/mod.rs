//! Helpers shared by the binary's test files: run `verdict`, build the rules component once,
//! a gateway config on it.

#![allow(dead_code)] // each test file uses its own subset

pub mod kafka;
pub mod nats;

use std::io::Write;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use verdict_tests::gateway::{Route, TestConfig};

pub fn verdict(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("verdict runs");
    let mut pipe = child.stdin.take().expect("stdin is piped");
    pipe.write_all(stdin.unwrap_or("").as_bytes())
        .expect("writing stdin");
    drop(pipe);
    child.wait_with_output().expect("verdict finishes")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `verdict build policies/rules`, once per test run, in a target dir of its own.
pub fn rules() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| build("policies/rules", "rules.component.wasm"))
}

/// `verdict build <project>` (relative to the workspace root) into the guests' target dir,
/// shared with tests/build.rs so an unchanged guest is built once; returns the component's
/// path, checked to end with `component`.
pub fn build(project: &str, component: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../verdict-guests");
    let dir = root.join(project);
    let out = verdict(
        &[
            "build",
            "--target-dir",
            target.to_str().unwrap(),
            dir.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "verdict build {project} failed: {}",
        text(&out.stderr)
    );
    let path = text(&out.stdout).trim().to_string();
    assert!(
        path.ends_with(component) && Path::new(&path).is_file(),
        "{path}"
    );
    path
}

pub fn vectors(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../policies/rules/vectors")
        .join(file)
        .display()
        .to_string()
}

/// A gateway config on the rules component beside it (`rules.wasm`, as
/// [`scratch_with_rules`] puts it there) and its vectors: `payments.>` with 5 attempts, `>`
/// with 3.
pub fn rules_config() -> TestConfig {
    rules_policy()
        .route(payments_route())
        .route(default_route(3))
}

/// [`rules_config`] without its routes.
pub fn rules_policy() -> TestConfig {
    TestConfig::new()
        .policy("rules", "rules.wasm")
        .set("policies.rules.vectors", vec![vectors("limits.json")])
}

/// The route `payments.>` of [`rules_config`]: 5 attempts.
pub fn payments_route() -> Route {
    Route::new("payments.>", "rules").set("config.max_attempts", 5)
}

/// The default route `>` of [`rules_config`], with `max_attempts`.
pub fn default_route(max_attempts: i64) -> Route {
    Route::new(">", "rules").set("config.max_attempts", max_attempts)
}

/// A child process killed when the test ends.
pub struct Proc {
    pub child: Child,
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `program args`, wait for the `http://` (or `https://`) address it prints on
/// stderr.
pub fn spawn(program: &str, args: &[&str]) -> Proc {
    spawn_with_env(program, args, &[])
}

/// [`spawn`] with `env` set.
pub fn spawn_with_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("VERDICT_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("{program} exited before printing its address"))
            .unwrap();
        if let Some(at) = line.find("http://").or_else(|| line.find("https://")) {
            break line[at..]
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches(';')
                .to_string();
        }
    };
    // Its warnings and errors go to the test's output, shown when the test fails.
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("[{name}] {line}");
            }
        }
    });
    Proc { child, url }
}

/// A fresh scratch directory `name` in the test target dir, holding `rules.wasm`.
pub fn scratch_with_rules(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    dir
}

/// `verdict run -c config` with everything it says at `debug` (the compiler's chatter
/// aside) written to `log`; waits for the admin URL it prints there.
pub fn run_logged(config: &Path, log: &Path) -> Proc {
    run_logged_with_env(config, log, &[])
}

/// [`run_logged`] with `env` set.
pub fn run_logged_with_env(config: &Path, log: &Path, env: &[(&str, &str)]) -> Proc {
    let file = std::fs::File::create(log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .env(
            "VERDICT_LOG",
            "debug,wasmtime=warn,wasmtime_internal_cranelift=warn,cranelift_codegen=warn",
        )
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let mut url = String::new();
    let printed = wait_until(Duration::from_secs(60), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("verdict run exited ({status}):\n{text}");
        }
        match text
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
        {
            Some(found) => {
                url = found.trim_end_matches(';').to_string();
                true
            }
            None => false,
        }
    });
    assert!(printed, "no admin URL in {}", log.display());
    Proc { child, url }
}

/// `verdict run -c config` that must stop at start (`what` says why, in a failure), with
/// `env` set: its stderr. One still running after 20 s fails the test (and is killed), so a
/// gateway that retries instead of stopping is caught rather than waited on.
pub fn refused_start(config: &Path, what: &str, env: &[(&str, &str)]) -> String {
    let log = config.with_extension("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "{what}: started anyway:\n{stderr}"
    );
    stderr
}

/// `verdict publish` of `count` messages (`{prefix}-{i}`, payload `{"n": i}`) to `topic`
/// through the admin API at `admin`, with the token in `dir/token`; the batch file is
/// written to `dir`.
pub fn publish_batch(admin: &str, dir: &Path, topic: &str, prefix: &str, count: usize) {
    let batch = dir.join(format!("{prefix}.jsonl"));
    let lines: Vec<String> = (0..count)
        .map(|i| format!(r#"{{"id": "{prefix}-{i}", "payload": {{"n": {i}}}}}"#))
        .collect();
    std::fs::write(&batch, lines.join("\n")).unwrap();
    let out = verdict(
        &[
            "publish",
            "--admin",
            admin,
            "--token-file",
            dir.join("token").to_str().unwrap(),
            "--topic",
            topic,
            "--batch",
            batch.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// What `verdict check -c config --probe` saw of `peer` (`nats`, `gateway.store`, ...);
/// the check must pass.
pub fn probe_of(config: &Path, peer: &str) -> serde_json::Value {
    let out = verdict(&["check", "-c", config.to_str().unwrap(), "--probe"], None);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    summary["probe"]
        .as_array()
        .and_then(|probes| probes.iter().find(|p| p["peer"] == peer))
        .cloned()
        .unwrap_or_else(|| panic!("no probe of {peer}: {summary:#}"))
}

/// Log in to the console at `url` with `token`; the session cookie (`name=value`).
pub fn log_in(url: &str, token: &str) -> String {
    let answer = ureq::post(&format!("{url}/login"))
        .config()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .send_form([("token", token)])
        .unwrap();
    assert_eq!(answer.status().as_u16(), 303, "login with {token}");
    let cookie = answer.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// The sum of the `/metrics` lines at `url` that start with `name` (0 when unreachable).
pub fn metric_at(url: &str, name: &str) -> u64 {
    let text = ureq::get(&format!("{url}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A demo consumer on a free loopback port that accepts every message.
pub fn healthy_consumer() -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict-demo-consumer"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--transient",
            "0",
            "--permanent",
            "0",
        ],
    )
}

pub fn consumer(listen: &str, permanent: u32) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict-demo-consumer"),
        &[
            "--listen",
            listen,
            "--transient",
            "20",
            "--permanent",
            &permanent.to_string(),
        ],
    )
}

/// The demo consumer failing 20% of messages 1-3 times and `permanent`% for good, checking
/// key order: a delivery's key in its `order-id` header, its number within the key in
/// `order-seq` (`overtaken` and `ordered` in `/stats`).
pub fn ordered_consumer(permanent: u32) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict-demo-consumer"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--transient",
            "20",
            "--permanent",
            &permanent.to_string(),
            "--order-header",
            "order-id",
            "--sequence-header",
            "order-seq",
        ],
    )
}

/// Wait (at most a minute) until the gateway whose admin API is at `url` answers `/readyz`
/// with 200: every route's source connected and set up (a NATS stream exists, say).
pub fn wait_ready(url: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    assert!(
        wait_until(Duration::from_secs(60), || agent
            .get(format!("{url}/readyz"))
            .call()
            .is_ok_and(|r| r.status() == 200)),
        "{url} was not ready within a minute"
    );
}

pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

pub fn accepted(consumer: &Proc) -> u64 {
    let stats: serde_json::Value = ureq::get(&format!("{}/stats", consumer.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    stats["accepted"].as_u64().unwrap()
}

/// A directory laid out like the repository root, as far as the README's commands look:
/// the policies and examples, and the `rules` component where `verdict build` puts it with
/// cargo's default target directory (the test run's own target directory may be elsewhere).
pub fn checkout(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let release = dir.join("target/wasm32-unknown-unknown/release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(rules(), release.join("rules.component.wasm")).unwrap();
    std::os::unix::fs::symlink(
        root.join("policies").canonicalize().unwrap(),
        dir.join("policies"),
    )
    .unwrap();
    // Copied, not linked: the example configs name `../target`, which must be this one.
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join("examples").join(path.file_name().unwrap())).unwrap();
    }
    dir
}
