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

/// `verdict demo` with `orders` orders on ephemeral ports; the child and its stderr, line by
/// line.
fn start(orders: &str) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([
            "demo",
            "--policy",
            rules(),
            "--orders",
            orders,
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
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (child, seen)
}

/// Wait (at most 30 s) for `child` to exit after Ctrl-C; its status and the rest it said.
fn interrupt(
    child: &mut std::process::Child,
    seen: &mpsc::Receiver<String>,
    said: &mut Vec<String>,
) -> std::process::ExitStatus {
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
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
            panic!("the demo ignored Ctrl-C: {said:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(1)) {
        said.push(line);
    }
    status
}

/// The directory the demo said it made.
fn demo_dir(said: &[String]) -> std::path::PathBuf {
    said.iter()
        .find_map(|l| {
            l.strip_prefix("verdict demo: gateway on the embedded store in ")
                .and_then(|rest| rest.split(';').next())
        })
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("{said:#?}"))
}

#[test]
fn the_demo_settles_every_order_names_each_cause_and_stops_cleanly_on_ctrl_c() {
    let (mut child, seen) = start("60");
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
    let dir = demo_dir(&said);
    assert!(dir.join("admin.token").is_file());

    // Ctrl-C: a clean stop, the directory gone.
    let status = interrupt(&mut child, &seen, &mut said);
    assert!(status.success(), "{status:?}: {said:#?}");
    assert_eq!(
        said.last().map(String::as_str),
        Some("verdict demo: stopped")
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
}

/// Ctrl-C while the orders are still being followed: the demo stops as cleanly - what
/// settled so far summarised, the gateway stopped, the directory removed - not with an
/// error from an admin API that is already going away.
#[test]
fn ctrl_c_while_following_the_orders_summarises_what_settled_and_cleans_up() {
    let (mut child, seen) = start("3000");
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = seen
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("the demo never published: {said:#?}"));
        said.push(line.clone());
        if line.contains("published 3000 orders") {
            break;
        }
    }
    let dir = demo_dir(&said);
    let status = interrupt(&mut child, &seen, &mut said);
    assert!(status.success(), "{status:?}: {said:#?}");
    assert!(
        said.iter().any(|l| l.contains("of 3000 orders:")),
        "a summary of what settled: {said:#?}"
    );
    assert!(!said.iter().any(|l| l.starts_with("error:")), "{said:#?}");
    assert_eq!(
        said.last().map(String::as_str),
        Some("verdict demo: stopped")
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
