//! `verdict demo`, as a new user runs it: the orders published, each delivered or
//! dead-lettered, the causes and the console's address printed; the console answers with
//! the printed token; Ctrl-C stops it cleanly and removes the directory it made.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::rules;

/// The number after `word` in `line` (`"of 60 orders: 57 delivered"`, `"delivered"` ->
/// 57: the number just before it).
fn count_before(line: &str, word: &str) -> u64 {
    let before = &line[..line
        .find(word)
        .unwrap_or_else(|| panic!("no `{word}` in {line}"))];
    before
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before `{word}` in {line}"))
}

#[test]
fn the_demo_settles_every_order_names_each_cause_and_stops_cleanly_on_ctrl_c() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([
            "demo",
            "--policy",
            rules(),
            "--orders",
            "60",
            "--consumer",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ])
        .env("VERDICT_ADMIN_TOKEN", "a-token-from-the-environment")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let console = loop {
        let line = seen
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("the demo never said where the console is: {said:#?}"));
        said.push(line.clone());
        if let Some(rest) = line.strip_prefix("verdict demo: console: ") {
            break rest.to_string();
        }
    };
    let summary = said
        .iter()
        .find(|l| l.contains("of 60 orders:"))
        .unwrap_or_else(|| panic!("no summary: {said:#?}"));
    let (delivered, dead) = (
        count_before(summary, "delivered"),
        count_before(summary, "dead-lettered"),
    );
    assert_eq!(delivered + dead, 60, "every order settled: {summary}");
    assert!(
        dead > 0,
        "the consumer refuses some orders for good: {summary}"
    );
    assert!(!summary.contains("not settled"), "{summary}");
    // Each dead letter under its cause, and the causes add up.
    let causes: Vec<&String> = said
        .iter()
        .filter(|l| l.trim_start().starts_with("dead-lettered:"))
        .collect();
    assert!(!causes.is_empty(), "{said:#?}");
    let by_cause: u64 = causes.iter().map(|l| count_before(l, " x ")).sum();
    assert_eq!(by_cause, dead, "{causes:#?}");
    assert!(
        causes.iter().all(|l| l.contains("schema.unknown-version")),
        "{causes:#?}"
    );
    // The printed console address and token are the gateway's own, not the environment's.
    let (url, token) = console
        .split_once("/console (token: ")
        .unwrap_or_else(|| panic!("{console}"));
    let token = token.split(')').next().unwrap();
    assert_ne!(token, "a-token-from-the-environment");
    let cookie = common::log_in(url, token);
    assert!(!cookie.is_empty());
    let dir = said
        .iter()
        .find_map(|l| {
            l.strip_prefix("verdict demo: gateway on the embedded store in ")
                .and_then(|rest| rest.split(';').next())
        })
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("{said:#?}"));
    assert!(dir.join("admin.token").is_file());

    // Ctrl-C: a clean stop, the directory gone.
    let interrupted = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo ignored Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(1)) {
        said.push(line);
    }
    assert!(status.success(), "{status:?}: {said:#?}");
    assert_eq!(
        said.last().map(String::as_str),
        Some("verdict demo: stopped")
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
