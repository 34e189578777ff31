//! The `verdict` binary as a user runs it: build a policy crate, inspect the component,
//! ask it for decisions, and get clear errors for bad input.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{
    default_route, payments_route, rules, rules_config, rules_policy, scratch_with_rules, text,
    vectors, verdict,
};
use verdict_tests::gateway::Route;

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

#[test]
fn inspect_prints_name_version_digest_imports_exports() {
    let v = json(&verdict(&["inspect", rules()], None));
    assert_eq!(v["name"], "rules");
    assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(
        v["exports"],
        serde_json::json!(["verdict:policy/decider@0.2.0"])
    );
    assert_eq!(v["contract"], "verdict:policy@0.2");
    assert_eq!(v["host_contracts"], "0.1.x or 0.2.x");
    assert!(
        v["imports"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i.as_str().unwrap().starts_with("verdict:policy/"))
    );
}

/// The `rules` crate built for the previous contract by the test build.
fn rules_v0_1() -> &'static str {
    verdict_tests::fixtures::RULES_V0_1
}

#[test]
fn inspect_names_a_0_1_component_s_contract_and_check_warns_about_its_route() {
    let v = json(&verdict(&["inspect", rules_v0_1()], None));
    assert_eq!(v["name"], "rules");
    assert_eq!(v["contract"], "verdict:policy@0.1");
    assert_eq!(
        v["exports"],
        serde_json::json!(["verdict:policy/decider@0.1.0"])
    );

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-contracts");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::copy(rules_v0_1(), dir.join("rules-v0-1.wasm")).unwrap();
    let config = dir.join("verdict.toml");
    std::fs::write(
        &config,
        "[policies.rules]\npath = \"rules.wasm\"\n\
         [policies.old]\npath = \"rules-v0-1.wasm\"\n\
         [[routes]]\ntopic = \"orders\"\npolicy = \"rules\"\n\
         [[routes]]\ntopic = \"invoices\"\npolicy = \"old\"\n",
    )
    .unwrap();
    let out = verdict(&["check", "-c", config.to_str().unwrap()], None);
    let summary = json(&out);
    let contracts: Vec<(&str, &str)> = summary["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["topic"].as_str().unwrap(),
                r["contract"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        contracts,
        [
            ("orders", "verdict:policy@0.2"),
            ("invoices", "verdict:policy@0.1")
        ]
    );
    // One warning, for the older route only: it loads, and the operator is told to rebuild.
    let warnings = summary["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let warning = warnings[0].as_str().unwrap();
    assert!(
        warning.contains("`invoices`") && warning.contains("verdict:policy@0.1"),
        "{warning}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning: route `invoices`") && stderr.contains("verdict build"),
        "{stderr}"
    );
    assert!(!stderr.contains("`orders`"), "{stderr}");
}

#[test]
fn decide_from_stdin_and_from_a_file() {
    let failure = r#"{"topic": "payments", "message-id": "m-9", "attempt": 5, "error": {"kind": "db.timeout"}}"#;
    let v = json(&verdict(
        &[
            "decide",
            "--policy",
            rules(),
            "--config",
            r#"{"max_attempts": 5}"#,
            "--failure",
            "-",
        ],
        Some(failure),
    ));
    assert_eq!(v["verdict"]["action"]["type"], "dead-letter");
    assert_eq!(v["verdict"]["class"], "exhausted");
    assert_eq!(v["provenance"]["name"], "rules");

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join("cli-failure.json");
    std::fs::write(&file, failure.replace("\"attempt\": 5", "\"attempt\": 1")).unwrap();
    let config = dir.join("cli-config.json");
    std::fs::write(&config, r#"{"max_attempts": 3}"#).unwrap();
    let v = json(&verdict(
        &[
            "decide",
            "--policy",
            rules(),
            "--config",
            config.to_str().unwrap(),
            "--failure",
            file.to_str().unwrap(),
        ],
        None,
    ));
    assert_eq!(v["verdict"]["action"]["type"], "retry");
    // Same input, same output: the jitter seed derives from message id and attempt.
    let again = json(&verdict(
        &[
            "decide",
            "--policy",
            rules(),
            "--failure",
            file.to_str().unwrap(),
        ],
        None,
    ));
    assert_eq!(v["verdict"]["action"], again["verdict"]["action"]);
}

#[test]
fn bad_input_fails_with_an_error_naming_the_problem() {
    let cases: [(&[&str], Option<&str>, &str); 5] = [
        (
            &["decide", "--policy", rules(), "--failure", "-"],
            Some(r#"{"error": {"kind": "x"}, "atempt": 2}"#),
            "atempt",
        ),
        (
            &["decide", "--policy", rules(), "--failure", "-"],
            Some(r#"{"error": {}}"#),
            "kind",
        ),
        (
            &[
                "decide",
                "--policy",
                rules(),
                "--config",
                r#"{"max_attempts": -1}"#,
                "--failure",
                "-",
            ],
            Some(r#"{"error": {"kind": "x"}}"#),
            "config.max_attempts",
        ),
        (
            &["decide", "--policy", "/nonexistent.wasm", "--failure", "-"],
            Some(r#"{"error": {"kind": "x"}}"#),
            "/nonexistent.wasm",
        ),
        (&["build", "/nonexistent/crate"], None, "/nonexistent/crate"),
    ];
    for (args, stdin, needle) in cases {
        let out = verdict(args, stdin);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = text(&out.stderr);
        assert!(
            err.contains(needle),
            "{args:?}: stderr lacks {needle:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn test_exit_codes_are_0_pass_1_fail_2_invalid_input() {
    let limits = vectors("limits.json");
    let pass = verdict(&["test", rules(), &limits], None);
    assert_eq!(
        pass.status.code(),
        Some(0),
        "{}{}",
        text(&pass.stdout),
        text(&pass.stderr)
    );
    assert!(
        text(&pass.stdout).contains("10 passed, 0 failed"),
        "{}",
        text(&pass.stdout)
    );

    // The same vectors against rules configured to retry json.parse: cases fail.
    let broken =
        r#"{"rules": [{"match": ["json.*"], "retry": {"strategy": "fixed", "delay_ms": 100}}]}"#;
    let fail = verdict(&["test", rules(), &limits, "--config", broken], None);
    assert_eq!(fail.status.code(), Some(1));
    assert!(
        text(&fail.stdout).contains("action: expected dead-letter, got retry"),
        "{}",
        text(&fail.stdout)
    );

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("cli-bad-vectors.json");
    std::fs::write(&bad, r#"{"suite": "s", "cases": [{"name": "x", "failure": {"error": {"kind": "a"}}, "expect": {"class": "poisonous"}}]}"#).unwrap();
    let invalid = verdict(&["test", rules(), bad.to_str().unwrap()], None);
    assert_eq!(invalid.status.code(), Some(2));
    let err = text(&invalid.stderr);
    assert!(
        err.contains("cli-bad-vectors.json")
            && err.contains("case `x`")
            && err.contains("expect.class"),
        "{err}"
    );
    let missing_policy = verdict(&["test", "/nonexistent.wasm", &limits], None);
    assert_eq!(missing_policy.status.code(), Some(2));
}

#[test]
fn test_formats_json_and_junit() {
    let limits = vectors("limits.json");
    let out = verdict(&["test", rules(), &limits, "--format", "json"], None);
    let v = json(&out);
    assert_eq!(
        (
            v["format"].as_u64(),
            v["passed"].as_u64(),
            v["failed"].as_u64()
        ),
        (Some(1), Some(10), Some(0))
    );
    let out = verdict(
        &[
            "test",
            rules(),
            &limits,
            "--format",
            "junit",
            "--properties",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let xml = text(&out.stdout);
    assert!(
        xml.starts_with("<?xml") && xml.contains("<testsuite name=\"properties\""),
        "{xml}"
    );
}

#[test]
fn test_without_vectors_runs_the_property_checks() {
    let out = verdict(&["test", rules()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(
        report.contains("properties") && report.contains("never-retry kinds are not retried"),
        "{report}"
    );
}

#[test]
fn check_says_what_a_routes_retry_budget_adds_to_its_worst_case() {
    let config = rules_policy()
        .route(
            payments_route()
                .set("settings.guardrails.max_deferral_age_ms", 3_600_000)
                .set("settings.guardrails.retry_budget.percent", 20),
        )
        .route(default_route(3))
        .write_toml(&scratch_with_rules("gateway-budget"));
    let v = json(&verdict(&["check", "-c", config.to_str().unwrap()], None));
    let lines = |route: usize| v["routes"][route]["worst_case"].as_array().unwrap().clone();
    let budget = lines(0)
        .last()
        .and_then(|l| l.as_str())
        .unwrap()
        .to_string();
    assert_eq!(
        budget,
        "retry budget 20% of first attempts + 10/s over 10 s: while the route is over it, a \
         retry also waits (no attempt spent), up to 1h after the message first failed"
    );
    assert!(
        !lines(1)
            .iter()
            .any(|l| l.as_str().unwrap().contains("retry budget")),
        "the other route has none: {v}"
    );
}

#[test]
fn check_runs_the_admission_gate_and_route_decides_per_topic() {
    let config = rules_config().write_toml(&scratch_with_rules("gateway-ok"));
    let v = json(&verdict(&["check", "-c", config.to_str().unwrap()], None));
    assert_eq!(v["generation"], 1);
    assert_eq!(v["routes"][0]["topic"], "payments.>");
    assert_eq!(v["routes"][1]["config"]["max_attempts"], 3);
    // The worst a message meets per route: 5 deliveries at most on `payments.>`, 3 on `>`;
    // parse errors dead-lettered at once on both.
    let worst = |route: usize| -> Vec<String> {
        v["routes"][route]["worst_case"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let line = |route: usize, kind: &str| {
        worst(route)
            .into_iter()
            .find(|l| l.split(": ").next().unwrap().split(", ").any(|k| k == kind))
            .unwrap_or_else(|| panic!("no worst case names {kind}: {:?}", worst(route)))
    };
    assert!(
        line(0, "http.503").contains("at most 5 deliveries, dead-lettered (exhausted) within"),
        "{:?}",
        worst(0)
    );
    assert!(
        line(1, "http.503").contains("at most 3 deliveries"),
        "{:?}",
        worst(1)
    );
    assert!(
        line(1, "json.parse").ends_with("at most 1 delivery, dead-lettered (poison) within 0.0 s"),
        "{:?}",
        worst(1)
    );

    let failure = r#"{"attempt": 3, "error": {"kind": "db.timeout"}}"#;
    let args = |topic: &'static str| {
        [
            "route",
            "-c",
            config.to_str().unwrap(),
            "--topic",
            topic,
            "--failure",
            "-",
        ]
        .map(String::from)
    };
    let run = |topic: &'static str| {
        let a = args(topic);
        json(&verdict(
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
            Some(failure),
        ))
    };
    let payments = run("payments.captured");
    assert_eq!(payments["route"], "payments.>");
    assert_eq!(payments["decision"]["verdict"]["action"]["type"], "retry");
    let other = run("notifications.email");
    assert_eq!(other["route"], ">");
    assert_eq!(other["decision"]["verdict"]["class"], "exhausted");
    assert_eq!(other["decision"]["generation"], 1);
}

/// [`common::rules_config`] with `input` - TOML as written by hand, the routes and sections a
/// test means `verdict check` to refuse - between its two routes, in a fresh directory
/// `name`; the config's path.
fn refused_between(name: &str, input: &str) -> PathBuf {
    rules_policy()
        .route(payments_route())
        .merge("", input)
        .route(default_route(3))
        .write_toml(&scratch_with_rules(name))
}

#[test]
fn check_refuses_bad_gateway_configs_naming_the_problem() {
    let ambiguous = refused_between(
        "gateway-ambiguous",
        "[[routes]]\ntopic = \"payments.*\"\npolicy = \"rules\"\n[[routes]]\ntopic = \"*.captured\"\npolicy = \"rules\"\n",
    );
    let out = verdict(&["check", "-c", ambiguous.to_str().unwrap()], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("ambiguous") && text(&out.stderr).contains("payments.captured"),
        "{}",
        text(&out.stderr)
    );

    let typo = refused_between(
        "gateway-typo",
        "[[routes]]\ntopic = \"orders\"\npolicy = \"rulez\"\n",
    );
    let out = verdict(&["check", "-c", typo.to_str().unwrap()], None);
    assert!(
        text(&out.stderr).contains("routes[1].policy") && text(&out.stderr).contains("rulez"),
        "{}",
        text(&out.stderr)
    );

    // A config the policy refuses: the policy's words, said once, naming the route.
    let refused = refused_between(
        "gateway-refused",
        "[[routes]]\ntopic = \"orders\"\npolicy = \"rules\"\nconfig = { max_atempts = 5 }\n",
    );
    let out = verdict(&["check", "-c", refused.to_str().unwrap()], None);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("(`orders`)") && stderr.contains("max_atempts"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("refused its config").count(), 1, "{stderr}");
}

/// Broker settings that can never work are refused by `verdict check` (and so at start),
/// naming the field, instead of a source retrying them forever while `/readyz` says "not
/// connected": a NATS route capturing every subject would swallow the DLQ stream's.
#[test]
fn check_refuses_broker_subjects_that_overlap() {
    let overlapping = refused_between(
        "gateway-overlap",
        "[[routes]]\ntopic = \"events.>\"\nsource = \"nats\"\npolicy = \"rules\"\nconsumer = { url = \"http://127.0.0.1:1/\" }\n[nats]\ndlq_subject_prefix = \"events.dlq\"\n",
    );
    let out = verdict(&["check", "-c", overlapping.to_str().unwrap()], None);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("nats.dlq_subject_prefix") && err.contains("events.>"),
        "{err}"
    );
    let bad_name = refused_between(
        "gateway-stream-name",
        "[[routes]]\ntopic = \"events.>\"\nsource = \"nats\"\npolicy = \"rules\"\nconsumer = { url = \"http://127.0.0.1:1/\" }\n[nats]\nstream = \"my stream\"\n",
    );
    let out = verdict(&["check", "-c", bad_name.to_str().unwrap()], None);
    assert!(
        !out.status.success() && text(&out.stderr).contains("nats.stream"),
        "{}",
        text(&out.stderr)
    );
    // A good one says what `verdict run` would create on the broker, and creates nothing.
    let good = rules_policy()
        .route(payments_route())
        .route(
            Route::new("events.>", "rules")
                .set("source", "nats")
                .set("consumer.url", "http://127.0.0.1:1/"),
        )
        .route(default_route(3))
        .set("nats.url", "nats://127.0.0.1:9")
        .write_toml(&scratch_with_rules("gateway-brokers"));
    let v = json(&verdict(&["check", "-c", good.to_str().unwrap()], None));
    let created: Vec<String> = serde_json::from_value(v["created_when_missing"].clone()).unwrap();
    assert!(
        created
            .iter()
            .any(|c| c.contains("nats stream `VERDICT` with subjects [\"events.>\"]")),
        "{created:?}"
    );
    assert!(
        created
            .iter()
            .any(|c| c.contains("durable consumer `verdict-events_G-")),
        "{created:?}"
    );
}
