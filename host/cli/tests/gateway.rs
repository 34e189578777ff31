//! The gateway as an operator runs it, through the real binaries: `verdict-demo-consumer`,
//! `verdict run`, `verdict publish`, `kill -9` mid-run and a restart, then `verdict dlq`
//! to look, dry-run and replay with a canary once the consumer is fixed.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Proc, accepted, consumer, rules, spawn, text, verdict, wait_until};
use verdict_cli::demo::{Behaviour, by_percent};
use verdict_gateway::store::Store;
use verdict_tests::gateway::{Route, TestConfig};

fn gateway(config: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    )
}

fn write_config(dir: &Path, consumer_url: &str) -> PathBuf {
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    TestConfig::new()
        .set("gateway.lease_ms", 5000)
        .policy("rules", "rules.wasm")
        .route(
            Route::new("orders", "rules")
                .consumer(&format!("{consumer_url}/"))
                .config(verdict_tests::fixtures::RULES_CONFIG),
        )
        .write_toml(dir)
}

#[test]
fn kill_9_mid_run_loses_nothing_and_a_canary_replay_drains_the_dlq() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-kill");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let broken = consumer("127.0.0.1:0", 5);
    let config = write_config(&dir, &broken.url);
    let config_arg = config.to_str().unwrap();
    let batch = dir.join("batch.jsonl");
    let lines: Vec<String> = (0..1_000)
        .map(|i| format!(r#"{{"id": "m-{i}", "payload": {{"order": {i}}}}}"#))
        .collect();
    std::fs::write(&batch, lines.join("\n")).unwrap();
    let rule = by_percent(20, 5);
    let permanent = (0..1_000)
        .filter(|i| rule(&format!("m-{i}")) == Behaviour::Permanent)
        .count() as u64;

    // Publish 1,000, kill -9 the gateway once a fifth are delivered.
    let mut gw = gateway(&config);
    let out = verdict(
        &[
            "publish",
            "--admin",
            &gw.url,
            "--token-file",
            dir.join("token").to_str().unwrap(),
            "--topic",
            "orders",
            "--batch",
            batch.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "published 1000 message(s)\n");
    assert!(wait_until(Duration::from_secs(60), || accepted(&broken) >= 200));
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();

    // A restart finishes the run: count equality against the store.
    let _gw = gateway(&config);
    let store = Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    assert!(wait_until(Duration::from_secs(120), || store
        .counts()
        .unwrap()
        .pending()
        == 0));
    let counts = store.counts().unwrap();
    assert_eq!(counts.total(), 1_000, "{counts:?}");
    assert_eq!(
        (counts.delivered, counts.dead),
        (1_000 - permanent, permanent),
        "{counts:?}"
    );
    let stats: serde_json::Value = ureq::get(&format!("{}/stats", broken.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let recovered = store.audit_count("lease-recovered").unwrap();
    eprintln!(
        "kill -9 mid-run: {} duplicate deliveries, {recovered} leases recovered at restart",
        stats["duplicates"]
    );
    assert!(stats["duplicates"].as_u64().unwrap() <= recovered);

    // Export the DLQ as JSON lines: one envelope per dead letter.
    let exported = verdict(
        &[
            "dlq",
            "export",
            "--kind",
            "schema.unknown-version",
            "-c",
            config_arg,
        ],
        None,
    );
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let lines: Vec<serde_json::Value> = text(&exported.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, permanent);
    assert!(
        lines
            .iter()
            .all(|e| e["errors"][0]["kind"] == "schema.unknown-version")
    );

    // One dead letter, whole; an unknown one is an error naming it.
    let first = verdict(
        &["dlq", "list", "--json", "--limit", "1", "-c", config_arg],
        None,
    );
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let seq = first[0]["seq"].to_string();
    let shown = verdict(&["dlq", "show", &seq, "-c", config_arg], None);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["envelope"], first[0]["envelope"]);
    let missing = verdict(&["dlq", "show", "999999", "-c", config_arg], None);
    assert!(!missing.status.success() && text(&missing.stderr).contains("no dead letter 999999"));

    // A page at a time: the page says how to list the next, which starts after it.
    let page = |extra: &[&str]| {
        let out = verdict(
            &[&["dlq", "list", "--json", "-c", config_arg], extra].concat(),
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let seqs: Vec<i64> = entries.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        let next = text(&out.stderr)
            .split("--after ")
            .nth(1)
            .map(|n| n.trim().to_string());
        (seqs, next)
    };
    let (two, next) = page(&["--limit", "2"]);
    let next = next.expect("a next page");
    let (after, _) = page(&["--limit", "2", "--after", &next]);
    assert_eq!(two.len() + after.len(), 4);
    assert!(two.iter().all(|s| !after.contains(s)), "{two:?} {after:?}");
    // A byte budget below one letter still moves a letter a page.
    let (one, next) = page(&["--max-bytes", "1"]);
    assert_eq!((one.len(), next.is_some()), (1, true));

    // Look at the DLQ; a dry run moves nothing.
    let list = verdict(&["dlq", "list", "-c", config_arg], None);
    assert!(
        text(&list.stdout).contains(&format!("{permanent} dead letter(s)")),
        "{}",
        text(&list.stdout)
    );
    let dry = verdict(&["dlq", "replay", "--dry-run", "-c", config_arg], None);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let report: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(report["replayed"], 0);
    assert_eq!(
        report["dry_run"].as_array().unwrap().len() as u64,
        permanent
    );
    assert_eq!(
        report["dry_run"][0]["decision"]["verdict"]["class"],
        "poison"
    );
    assert_eq!(store.counts().unwrap().dead, permanent);

    // The consumer is fixed (same address, no permanent failures): a canary of 5, then all.
    let listen = broken.url.trim_start_matches("http://").to_string();
    drop(broken);
    let _fixed = consumer(&listen, 0);
    let replay = verdict(&["dlq", "replay", "--canary", "5", "-c", config_arg], None);
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    assert_eq!(
        text(&replay.stdout),
        format!("replayed {permanent} of {permanent} dead letter(s)\ncanary: 5 of 5 delivered\n")
    );
    assert!(wait_until(Duration::from_secs(60), || store
        .counts()
        .unwrap()
        .pending()
        == 0));
    let counts = store.counts().unwrap();
    assert_eq!((counts.delivered, counts.dead), (1_000, 0), "{counts:?}");
    assert_eq!(store.audit_count("replayed").unwrap(), permanent);
    let stats = verdict(&["dlq", "stats", "--json", "-c", config_arg], None);
    assert_eq!(text(&stats.stdout).trim(), "[]");
}

#[test]
fn a_corrupt_config_is_refused_with_the_field_and_nothing_starts() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-corrupt");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_config(&dir, "http://127.0.0.1:9");
    let good = std::fs::read_to_string(&config).unwrap();
    for (broken, names) in [
        (
            good.replace("timeout_ms = 2000", "timeout_ms = 9000"),
            "routes[0].consumer.timeout_ms",
        ),
        (
            good.replace("url = \"http://", "url = \"ftp://"),
            "routes[0].consumer.url",
        ),
        (
            good.replace("[gateway]", "[gateway]\ndlq_naming = \"sideways\""),
            "gateway.dlq_naming",
        ),
        (good.replace("[[routes]]", "[[routes]\n"), "(syntax)"),
    ] {
        std::fs::write(&config, &broken).unwrap();
        let out = verdict(&["run", "-c", config.to_str().unwrap()], None);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(
            err.contains("verdict.toml") && err.contains(names),
            "want `{names}` in: {err}"
        );
    }
    assert!(
        !dir.join(".verdict/verdict.db").exists(),
        "nothing should have started"
    );
}

/// `verdict dlq groups` finds the cause; `verdict jobs` acts on it through the running
/// gateway: a dry run followed to its end, the job listed, a cancel of an ended job refused,
/// an unknown job named.
#[test]
fn dlq_groups_and_jobs_from_the_command_line() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-jobs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let app = consumer("127.0.0.1:0", 5);
    let config = write_config(&dir, &app.url);
    let config_arg = config.to_str().unwrap();
    let gw = gateway(&config);
    let batch = dir.join("batch.jsonl");
    let lines: Vec<String> = (0..200)
        .map(|i| format!(r#"{{"id": "m-{i}", "payload": {{"order": {i}}}}}"#))
        .collect();
    std::fs::write(&batch, lines.join("\n")).unwrap();
    let token = dir.join("token");
    let admin = ["--admin", &gw.url, "--token-file", token.to_str().unwrap()];
    let published = verdict(
        &[
            &[
                "publish",
                "--topic",
                "orders",
                "--batch",
                batch.to_str().unwrap(),
            ],
            &admin[..],
        ]
        .concat(),
        None,
    );
    assert!(published.status.success(), "{}", text(&published.stderr));
    let rule = by_percent(20, 5);
    let permanent = (0..200)
        .filter(|i| rule(&format!("m-{i}")) == Behaviour::Permanent)
        .count() as u64;
    let store = Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    assert!(wait_until(Duration::from_secs(60), || store
        .counts()
        .is_ok_and(|c| c.pending() == 0 && c.dead == permanent)));

    let groups = verdict(&["dlq", "groups", "--json", "-c", config_arg], None);
    assert!(groups.status.success(), "{}", text(&groups.stderr));
    let groups: serde_json::Value = serde_json::from_slice(&groups.stdout).unwrap();
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups:#}");
    assert_eq!(groups[0]["count"].as_u64(), Some(permanent));
    let id = groups[0]["id"].as_str().unwrap();
    // Every source this config's routes use - here the store alone - folds to the same.
    let everywhere = verdict(
        &["dlq", "groups", "--all-sources", "--json", "-c", config_arg],
        None,
    );
    assert!(everywhere.status.success(), "{}", text(&everywhere.stderr));
    let everywhere: serde_json::Value = serde_json::from_slice(&everywhere.stdout).unwrap();
    assert_eq!(everywhere, groups);
    let listed = verdict(
        &["dlq", "list", "--group", id, "--json", "-c", config_arg],
        None,
    );
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len() as u64, permanent);

    let dry = verdict(
        &[&["jobs", "dry-run", "--group", id], &admin[..]].concat(),
        None,
    );
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let table = text(&dry.stdout);
    assert!(
        table.contains("succeeded") && table.contains(&format!("now: dead-letter {permanent}")),
        "{table}"
    );
    assert!(text(&dry.stderr).contains("(100%)"), "progress on stderr");
    let jobs = verdict(&[&["jobs", "list", "--json"], &admin[..]].concat(), None);
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).unwrap();
    assert_eq!(jobs[0]["action"], "dry-run");
    assert_eq!(jobs[0]["filter"]["group"], serde_json::json!(id));
    let job = jobs[0]["id"].as_str().unwrap();
    let cancel = verdict(&[&["jobs", "cancel", job], &admin[..]].concat(), None);
    assert!(!cancel.status.success());
    assert!(
        text(&cancel.stderr).contains("already ended"),
        "{}",
        text(&cancel.stderr)
    );
    let missing = verdict(&[&["jobs", "show", "job-999"], &admin[..]].concat(), None);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("no job `job-999`"),
        "{}",
        text(&missing.stderr)
    );
    let bad = verdict(
        &[&["jobs", "show", "../v1/reload"], &admin[..]].concat(),
        None,
    );
    assert!(
        text(&bad.stderr).contains("is not a job or group id"),
        "{}",
        text(&bad.stderr)
    );
}
