//! What Verdict shows people, in a real browser: headless Chromium, driven through
//! `chromedriver`. The simulator's HTML report draws its plots. The operator console,
//! against the README's quickstart (the demo consumer, `verdict run -c
//! examples/quickstart.toml`, 200 orders published). An operator opens the console, finds
//! no message content before logging in, logs in with the admin token, finds the permanent
//! failures in one group, runs a dry run, replays the group with a canary once the consumer
//! is fixed, watches the job reach 100%, and sees the DLQ empty. A screenshot of each page
//! is written to `$VERDICT_TEST_OUTPUT/console/` (by default `test-output/console/` in the
//! target directory), where CI keeps them; the report's to `.../simulate/`.
//!
//! Needs `chromium` and `chromedriver` on `PATH` (Debian: `chromium chromium-driver`), or
//! `VERDICT_CHROMIUM` / `VERDICT_CHROMEDRIVER` naming them. Uses the quickstart's ports,
//! 127.0.0.1:8081 and 127.0.0.1:9474.

#[path = "../common/mod.rs"]
mod common;
mod webdriver;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use webdriver::Browser;

const CONSOLE: &str = "http://127.0.0.1:9474";
const TOKEN: &str = "browser-test-admin-token";

/// A process stopped when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, program: &str, args: &[&str]) -> Running {
    Running(
        Command::new(program)
            .args(args)
            .current_dir(dir)
            .env("VERDICT_ADMIN_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program}: {e}")),
    )
}

fn demo_consumer(dir: &Path, args: &[&str]) -> Running {
    let consumer = spawn(dir, env!("CARGO_BIN_EXE_verdict-demo-consumer"), args);
    assert!(
        common::wait_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect("127.0.0.1:8081").is_ok()
        }),
        "the demo consumer did not listen on 127.0.0.1:8081"
    );
    consumer
}

fn api(path: &str) -> Value {
    ureq::get(&format!("{CONSOLE}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .body_mut()
        .read_json()
        .unwrap()
}

fn metric(name: &str) -> u64 {
    let text = ureq::get(&format!("{CONSOLE}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

fn screenshots(what: &str) -> PathBuf {
    let dir = std::env::var_os("VERDICT_TEST_OUTPUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("../test-output"))
        .join(what);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_operator_replays_a_group_from_the_console_in_a_real_browser() {
    let browser = Browser::start();
    let shots = screenshots("console");

    // The quickstart: the demo consumer, the gateway, 200 orders.
    let dir = common::checkout("console-browser");
    let verdict = env!("CARGO_BIN_EXE_verdict");
    let mut consumer = demo_consumer(&dir, &[]);
    let _gateway = spawn(&dir, verdict, &["run", "-c", "examples/quickstart.toml"]);
    assert!(
        common::wait_until(Duration::from_secs(60), || {
            ureq::get(&format!("{CONSOLE}/readyz")).call().is_ok()
        }),
        "the gateway did not get ready on {CONSOLE}"
    );
    let orders: String = (1..=200)
        .map(|i| format!("{{\"id\": \"order-{i}\", \"payload\": {{\"order\": {i}}}}}\n"))
        .collect();
    std::fs::write(dir.join("orders.jsonl"), orders).unwrap();
    let published = Command::new(verdict)
        .args(["publish", "--topic", "orders", "--batch", "orders.jsonl"])
        .current_dir(&dir)
        .env("VERDICT_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(published.status.success(), "{published:?}");
    assert!(
        common::wait_until(Duration::from_secs(60), || {
            metric("verdict_messages{state=\"delivered\"}")
                + metric("verdict_messages{state=\"dead\"}")
                == 200
        }),
        "the 200 orders were not all settled"
    );
    let dead = api("/v1/dlq").as_array().unwrap().len();
    assert!(dead > 0, "the demo consumer refuses 5% for good");

    // Without a login the overview shows routes and charts, no message content.
    browser.open(&format!("{CONSOLE}/"));
    let page = browser.source();
    assert!(page.contains("to see the dead letters by cause"), "{page}");
    assert!(!page.contains("schema.unknown-version"), "{page}");
    assert_eq!(browser.count("a[href^=\"/groups/\"]"), 0, "{page}");

    // The login: the token typed into a password field, never into a URL.
    browser.open(&format!("{CONSOLE}/login"));
    browser.screenshot(&shots.join("login.png"));
    assert_eq!(
        browser.find("input[name=\"token\"]").attribute("type"),
        "password"
    );
    browser.find("input[name=\"token\"]").type_text(TOKEN);
    browser.find("form.login button").click();
    browser.wait_for_url(Duration::from_secs(10), |u| u == format!("{CONSOLE}/"));
    let page = browser.source();
    assert!(
        page.contains("Signed in as <strong>admin</strong>"),
        "{page}"
    );
    assert!(!page.contains(TOKEN), "the token is never in a page");

    // The overview: the permanent failures are one group.
    assert!(page.contains("schema.unknown-version"), "{page}");
    assert_eq!(browser.count("a[href^=\"/groups/\"]"), 1, "{page}");
    browser.screenshot(&shots.join("overview.png"));

    // One letter, as an operator reads it.
    browser.find("a[href^=\"/letters/\"]").click();
    browser.wait_for_url(Duration::from_secs(10), |u| u.contains("/letters/"));
    assert!(browser.source().contains("Attempts"));
    browser.screenshot(&shots.join("letter.png"));

    // The group, with its forms.
    browser.open(&format!("{CONSOLE}/"));
    browser.find("a[href^=\"/groups/\"]").click();
    let group_url = browser.wait_for_url(Duration::from_secs(10), |u| u.contains("/groups/"));
    let page = browser.source();
    assert!(page.contains(&format!("{dead} dead letters")), "{page}");
    browser.screenshot(&shots.join("group.png"));
    assert!(api("/v1/jobs").as_array().unwrap().is_empty());

    // A dry run: what the current policy decides now, moving nothing.
    browser.open(&group_url);
    browser.find("form[action$=\"/dry-run\"] button").click();
    browser.wait_for_url(Duration::from_secs(10), |u| u.contains("/jobs/"));
    let page = browser.wait_for(Duration::from_secs(60), |p| {
        p.contains("id=\"job-state\">succeeded")
    });
    assert!(
        page.contains("What the current policy decides now"),
        "{page}"
    );
    assert_eq!(api("/v1/dlq").as_array().unwrap().len(), dead);
    browser.screenshot(&shots.join("job-dry-run.png"));

    // The consumer is fixed; the group is replayed with a canary and drains.
    drop(consumer);
    consumer = demo_consumer(&dir, &["--transient", "0", "--permanent", "0"]);
    browser.open(&group_url);
    browser
        .find("form[action$=\"/replay\"] input[name=\"canary\"]")
        .type_text("3");
    browser
        .find("form[action$=\"/replay\"] input[name=\"note\"]")
        .type_text("consumer fixed");
    browser.find("form[action$=\"/replay\"] button").click();
    browser.wait_for_url(Duration::from_secs(10), |u| u.contains("/jobs/"));
    let page = browser.wait_for(Duration::from_secs(120), |p| {
        p.contains("id=\"job-state\">succeeded") && p.contains("id=\"job-percent\">100%")
    });
    assert!(page.contains("Canary passed"), "{page}");
    assert!(
        page.contains("consumer fixed (by admin, console)"),
        "{page}"
    );
    browser.screenshot(&shots.join("job-replay.png"));
    assert!(
        common::wait_until(Duration::from_secs(60), || {
            api("/v1/dlq").as_array().unwrap().is_empty()
        }),
        "the DLQ did not empty"
    );
    browser.open(&format!("{CONSOLE}/"));
    let page = browser.source();
    assert!(page.contains("No dead letters in the store."), "{page}");
    browser.screenshot(&shots.join("overview-drained.png"));

    browser.open(&format!("{CONSOLE}/policies"));
    browser.screenshot(&shots.join("policies.png"));
    drop(consumer);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_simulators_html_report_draws_its_plots_in_a_real_browser() {
    let browser = Browser::start();
    let shots = screenshots("simulate");
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../simulate/scenarios/outage-3m.toml");
    let report = shots.join("outage-3m.html");
    let out = common::verdict(
        &[
            "simulate",
            "--policy",
            common::rules(),
            "--config",
            r#"{"max_attempts": 5}"#,
            "--compare",
            r#"{"max_attempts": 3}"#,
            "--scenario",
            scenario.to_str().unwrap(),
            "--html",
            report.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    browser.open(&format!("file://{}", report.display()));
    let page = browser.source();
    assert!(page.contains("Scenario outage-3m"), "{page}");
    assert_eq!(browser.count("svg"), 2, "{page}");
    // Drawn, not only present: each plot has its size and one line per series.
    let (width, height) = browser.find("figure svg").size();
    assert!(width >= 900.0 && height >= 250.0, "{width} x {height}");
    assert!(browser.count("svg polyline") >= 6, "{page}");
    assert!(!page.contains("<script"), "no script in the report");
    browser.screenshot(&shots.join("outage-3m.png"));

    // A retry budget against none: the budgeted run's held retries get a line of their own.
    let budgeted = shots.join("outage-3m-budget.html");
    let out = common::verdict(
        &[
            "simulate",
            "--policy",
            common::rules(),
            "--config",
            r#"{"max_attempts": 5}"#,
            "--compare-settings",
            r#"{"guardrails": {"retry_budget": {"percent": 20}}}"#,
            "--scenario",
            scenario.to_str().unwrap(),
            "--html",
            budgeted.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    browser.open(&format!("file://{}", budgeted.display()));
    let page = browser.source();
    assert!(page.contains("held by the retry budget (b)"), "{page}");
    assert!(page.contains("retry budget 20%"), "{page}");
    // Deliveries (first attempts and retries of both runs), holds (b), backlog (both runs).
    assert_eq!(browser.count("svg"), 3, "{page}");
    assert!(browser.count("svg polyline") >= 7, "{page}");
    browser.screenshot(&shots.join("outage-3m-budget.png"));
}
