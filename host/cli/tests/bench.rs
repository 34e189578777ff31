//! `verdict bench` as a user runs it: every target settles every message the way the
//! consumer's failures say it must, and bad arguments get clear errors. (The figures
//! themselves are not asserted: they are measurements, not behaviour.)

mod common;

use common::{rules, text, verdict};
use verdict_cli::demo::{Behaviour, by_percent};

const MESSAGES: usize = 300;
const MAX_ATTEMPTS: u64 = 5;

/// What the consumer will do with the bench's ids (`m-0`...), by its rule.
struct Expected {
    ok: u64,
    permanent: u64,
    /// Deliveries when permanent failures are dead-lettered at once (the gateway).
    gateway_deliveries: u64,
    /// Deliveries when they are retried until MaxDeliver (native redelivery).
    native_deliveries: u64,
}

fn expected() -> Expected {
    let rule = by_percent(20, 5);
    let mut e = Expected {
        ok: 0,
        permanent: 0,
        gateway_deliveries: 0,
        native_deliveries: 0,
    };
    for i in 0..MESSAGES {
        match rule(&format!("m-{i}")) {
            Behaviour::Permanent => {
                e.permanent += 1;
                e.gateway_deliveries += 1;
                e.native_deliveries += MAX_ATTEMPTS;
            }
            Behaviour::FailsFirst(k) => {
                e.ok += 1;
                e.gateway_deliveries += u64::from(k) + 1;
                e.native_deliveries += u64::from(k) + 1;
            }
            _ => {
                e.ok += 1;
                e.gateway_deliveries += 1;
                e.native_deliveries += 1;
            }
        }
    }
    e
}

#[test]
fn every_target_settles_every_message_as_the_consumer_dictates() {
    let out = verdict(
        &[
            "bench",
            "--policy",
            rules(),
            "--messages",
            &MESSAGES.to_string(),
            "--targets",
            "embedded,nats,nats-native,postgres-x3,mysql",
            "--json",
            "--no-progress",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = expected();
    assert!(
        e.permanent > 0 && e.ok > e.permanent,
        "the rule gives a mix"
    );
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 5, "{report}");
    for t in targets {
        let name = t["target"].as_str().unwrap();
        assert_eq!(t["messages"], MESSAGES, "{name}");
        assert_eq!(t["delivered"], e.ok, "{name}: {t}");
        assert_eq!(t["duplicates"], 0, "{name}: {t}");
        // Every delivery's settlement was applied once, and timed.
        assert_eq!(t["settled_deliveries"], t["deliveries"], "{name}: {t}");
        assert!(t["messages_per_second"].as_f64().unwrap() > 0.0, "{name}");
        assert!(
            t["settle_p50_us"].as_u64().unwrap() <= t["settle_p99_us"].as_u64().unwrap(),
            "{name}: {t}"
        );
        if name == "nats-native" {
            // No classification: the permanent failures are retried to MaxDeliver and dropped.
            assert_eq!(t["deliveries"], e.native_deliveries, "{t}");
            assert_eq!(t["dead_lettered"], 0, "{t}");
            assert_eq!(t["dropped"], e.permanent, "{t}");
            assert_eq!(t["vs_baseline"], 1.0, "{t}");
            assert_eq!(t["policy_cpu_share"], 0.0, "{t}");
        } else {
            assert_eq!(t["deliveries"], e.gateway_deliveries, "{name}: {t}");
            assert_eq!(t["dead_lettered"], e.permanent, "{name}: {t}");
            assert_eq!(t["dropped"], 0, "{name}: {t}");
            let share = t["policy_cpu_share"].as_f64().unwrap();
            assert!(share > 0.0 && share < 1.0, "{name}: policy share {share}");
            assert!(t["vs_baseline"].as_f64().unwrap() > 0.0, "{name}: {t}");
        }
    }
    assert_eq!(report["median_vs_baseline"]["nats-native"], 1.0);
    assert_eq!(
        targets[1]["broker_cpu_us_per_message"].is_number(),
        targets[2]["broker_cpu_us_per_message"].is_number(),
        "the broker's CPU is read for both NATS targets or neither"
    );
}

/// The TLS twins reach the consumer over HTTPS and NATS over TLS (a CA made for the run,
/// verified by the gateway: a plaintext peer would fail every delivery) and settle every
/// message exactly as their plain twins; the report gives what TLS costs against them.
#[test]
fn the_tls_targets_settle_like_their_plain_twins_and_report_what_tls_costs() {
    let out = verdict(
        &[
            "bench",
            "--policy",
            rules(),
            "--messages",
            &MESSAGES.to_string(),
            "--targets",
            "embedded,embedded-https,nats,nats-tls",
            "--json",
            "--no-progress",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = expected();
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4, "{report}");
    for t in targets {
        let name = t["target"].as_str().unwrap();
        assert_eq!(t["delivered"], e.ok, "{name}: {t}");
        assert_eq!(t["dead_lettered"], e.permanent, "{name}: {t}");
        assert_eq!(t["deliveries"], e.gateway_deliveries, "{name}: {t}");
        assert_eq!(t["duplicates"], 0, "{name}: {t}");
    }
    for name in ["embedded-https", "nats-tls"] {
        let ratio = report["median_tls_vs_plain"][name].as_f64();
        assert!(ratio.is_some_and(|r| r > 0.0), "{name}: {report}");
    }
}

#[test]
fn the_table_names_each_target_and_its_ratio_to_native_redelivery() {
    let out = verdict(
        &[
            "bench",
            "--policy",
            rules(),
            "--messages",
            "40",
            "--targets",
            "nats-native,nats",
            "--rounds",
            "2",
            "--no-progress",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{table}"))
            .to_string()
    };
    // Each round's rows, each ratio against the baseline of its own round.
    for round in 1..=2 {
        assert!(
            row(&format!("nats-native#{round}")).contains("1.00x"),
            "{table}"
        );
        assert!(row(&format!("nats#{round}")).contains('x'), "{table}");
    }
    assert!(
        table.contains("median over 2 rounds, vs nats-native: nats-native 1.00x, nats "),
        "{table}"
    );
    assert!(
        table.starts_with("verdict bench: 40 messages per target"),
        "{table}"
    );
}

#[test]
fn bad_arguments_are_refused_naming_the_flag() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--transient-percent", "90", "--permanent-percent", "20"],
            "--transient-percent (90) + --permanent-percent (20) is more than 100",
        ),
        (&["--messages", "0"], "--messages must be at least 1"),
        (&["--max-attempts", "2"], "--max-attempts 2 is too few"),
        (
            &["--targets", "kafka"],
            "invalid value 'kafka' for '--targets",
        ),
        (&["--rounds", "0"], "--rounds must be at least 1"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["bench", "--policy", rules(), "--no-progress"];
        all.extend_from_slice(args);
        let out = verdict(&all, None);
        assert!(!out.status.success(), "{args:?} was accepted");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let out = verdict(&["bench", "--policy", "/nonexistent/policy.wasm"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(
            "--policy /nonexistent/policy.wasm: neither a component file nor a policy crate directory"
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_unreachable_broker_is_an_error_naming_it_not_a_hang() {
    let out = verdict(
        &[
            "bench",
            "--policy",
            rules(),
            "--targets",
            "nats-native",
            "--nats-url",
            "nats://127.0.0.1:1",
            "--no-progress",
        ],
        None,
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("target nats-native") && stderr.contains("nats://127.0.0.1:1"),
        "{stderr}"
    );
}

#[test]
fn a_target_that_stops_settling_fails_naming_it_instead_of_hanging() {
    // Every transient failure is retried ten minutes later: nothing settles after the first
    // pass, and the stall guard must end the run.
    let config = r#"{"max_attempts": 5, "rules": [
        {"match": ["json.*", "schema.*", "format.*", "auth.*"], "dead_letter": "poison"},
        {"match": ["http.5*"], "retry": {"strategy": "fixed", "delay_ms": 600000}}]}"#;
    for target in ["embedded", "nats"] {
        let out = verdict(
            &[
                "bench",
                "--policy",
                rules(),
                "--policy-config",
                config,
                "--messages",
                "50",
                "--targets",
                target,
                "--stall-timeout-ms",
                "1500",
                "--no-progress",
            ],
            None,
        );
        assert!(!out.status.success(), "{target}: a stalled run succeeded");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("target {target}")) && stderr.contains("stalled:"),
            "{target}: {stderr}"
        );
    }
}
