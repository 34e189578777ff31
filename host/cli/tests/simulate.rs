//! `verdict simulate`: the shipped scenarios against the real `rules` component, the same
//! seed giving the same report, `--compare` and `--compare-settings` (a retry budget against
//! none), `--fail-if` as a CI gate, a gateway config's
//! route deciding, and a bad scenario named by file and field.

mod common;

use std::path::{Path, PathBuf};

use common::{rules, text, verdict};
use serde_json::Value;

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../simulate/scenarios")
        .join(format!("{name}.toml"))
        .to_str()
        .unwrap()
        .to_string()
}

/// `verdict simulate ... --json` with the `rules` component: the report.
fn report(scenario: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "simulate",
        "--policy",
        rules(),
        "--scenario",
        scenario,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = verdict(&args, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

const CONFIG: &str = r#"{"max_attempts": 5, "rules": [
    {"match": ["json.*", "schema.*"], "dead_letter": "poison"},
    {"match": ["http.5*", "db.*"], "retry": {"strategy": "exponential", "base_ms": 200, "cap_ms": 5000}}
]}"#;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn the_shipped_scenarios_run_and_account_for_every_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../simulate/scenarios");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "brown-out",
            "ordered-keys",
            "outage-3m",
            "poison-burst",
            "rate-limited"
        ]
    );
    for name in &names {
        let r = report(&scenario(name), &["--config", CONFIG]);
        let ended = n(&r["delivered"]) + n(&r["dead"]) + n(&r["discarded"]) + n(&r["unfinished"]);
        assert_eq!(
            ended,
            n(&r["published"]),
            "{name}: every message accounted for"
        );
        assert_eq!(
            n(&r["first_attempts"]),
            n(&r["published"]),
            "{name}: one first delivery per message"
        );
        assert_eq!(
            r["series"]["retries"]
                .as_array()
                .unwrap()
                .iter()
                .map(n)
                .sum::<u64>(),
            n(&r["retries"]),
            "{name}: the series adds up"
        );
    }

    // What each scenario is there to show.
    let outage = report(&scenario("outage-3m"), &["--config", CONFIG]);
    assert!(n(&outage["dead_by_class"]["poison"]) > 0, "{outage}");
    assert!(outage["drain_s"].is_f64(), "the backlog drains: {outage}");
    assert!(
        n(&outage["peak_retry_rate"]) as f64 > outage["publish_rate"].as_f64().unwrap(),
        "an outage's retries outnumber what is published: {outage}"
    );
    let poison = report(&scenario("poison-burst"), &["--config", CONFIG]);
    assert_eq!(
        poison["dead"], poison["dead_by_class"]["poison"],
        "{poison}"
    );
    assert_eq!(
        n(&poison["retries"]),
        0,
        "poison is never retried: {poison}"
    );
}

#[test]
fn the_same_seed_gives_the_same_report_and_another_seed_another() {
    let a = report(&scenario("outage-3m"), &["--config", CONFIG]);
    let b = report(&scenario("outage-3m"), &["--config", CONFIG]);
    assert_eq!(a, b);
    let c = report(&scenario("outage-3m"), &["--config", CONFIG, "--seed", "8"]);
    assert_ne!(a["series"], c["series"]);
    assert_eq!(c["seed"], 8);
}

#[test]
fn compare_runs_both_configs_on_the_same_scenario() {
    let fewer = CONFIG.replace("\"max_attempts\": 5", "\"max_attempts\": 2");
    let out = verdict(
        &[
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            &scenario("outage-3m"),
            "--config",
            CONFIG,
            "--compare",
            &fewer,
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let both: Value = serde_json::from_slice(&out.stdout).unwrap();
    let exhausted = |r: &Value| n(&r["dead_by_class"]["exhausted"]);
    assert!(
        exhausted(&both["b"]) > exhausted(&both["a"]),
        "2 attempts exhaust more than 5: {both}"
    );
    assert!(
        n(&both["b"]["retries"]) < n(&both["a"]["retries"]),
        "{both}"
    );

    let table = verdict(
        &[
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            &scenario("outage-3m"),
            "--config",
            CONFIG,
            "--compare",
            &fewer,
        ],
        None,
    );
    let table = text(&table.stdout);
    assert!(
        table.contains("\"max_attempts\": 5") && table.contains("\"max_attempts\": 2"),
        "{table}"
    );
    assert!(table.contains("dead-lettered"), "{table}");
}

#[test]
fn compare_settings_shows_what_a_retry_budget_does_and_bad_settings_are_named() {
    let budget =
        r#"{"guardrails": {"retry_budget": {"percent": 10, "window_s": 5, "min_per_s": 5}}}"#;
    let both = report(
        &scenario("outage-3m"),
        &["--config", CONFIG, "--compare-settings", budget],
    );
    let (free, held) = (&both["a"], &both["b"]);
    assert_eq!(n(&free["held"]), 0, "{free}");
    assert!(free["retry_budget"].is_null());
    assert!(n(&held["held"]) > 0, "{held}");
    assert_eq!(held["retry_budget"]["percent"], 10);
    // While the consumer is down (60 s to 240 s), no second has more retries than a whole
    // window allows: 5 s x 5/s + 10% of 5 s of first attempts at 100/s.
    let retries = held["series"]["retries"].as_array().unwrap();
    let peak_down = retries[61..240].iter().map(n).max().unwrap();
    assert!(peak_down <= 25 + 50, "{peak_down} retries in one second");
    let free_peak_down = free["series"]["retries"].as_array().unwrap()[61..240]
        .iter()
        .map(n)
        .max()
        .unwrap();
    assert!(
        free_peak_down > 2 * peak_down,
        "{free_peak_down} vs {peak_down}"
    );
    assert!(n(&held["retries"]) < n(&free["retries"]));
    assert!(
        n(&held["dead_by_class"]["exhausted"]) < n(&free["dead_by_class"]["exhausted"]),
        "a held retry spends no attempt"
    );
    for r in [free, held] {
        assert_eq!(n(&r["unfinished"]), 0, "{r}");
    }

    // The same budget from --settings alone: the table shows it and a held/s column.
    let out = verdict(
        &[
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            &scenario("outage-3m"),
            "--config",
            CONFIG,
            "--settings",
            budget,
        ],
        None,
    );
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(table.contains("retry budget 10%"), "{table}");
    assert!(table.contains("held/s"), "{table}");

    // A bad budget: exit 2, the field and the bound named.
    let out = verdict(
        &[
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            &scenario("outage-3m"),
            "--compare-settings",
            r#"{"guardrails": {"retry_budget": {"min_per_s": 0}}}"#,
        ],
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--compare-settings: guardrails.retry_budget")
            && stderr.contains("min_per_s is 0; it must be 1 to 100000"),
        "{stderr}"
    );
}

#[test]
fn fail_if_gates_a_change_with_exit_code_1_and_names_what_held() {
    let scenario_path = scenario("outage-3m");
    let run = |conditions: &[&str]| {
        let mut args = vec![
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            &scenario_path,
            "--config",
            CONFIG,
        ];
        for c in conditions {
            args.extend_from_slice(&["--fail-if", c]);
        }
        verdict(&args, None)
    };
    let held = run(&[
        "dead > 0",
        "unfinished > 0",
        "peak_retry_rate > 2x publish_rate",
    ]);
    assert_eq!(held.status.code(), Some(1), "{}", text(&held.stderr));
    let stderr = text(&held.stderr);
    assert!(stderr.contains("fail-if held: dead > 0:"), "{stderr}");
    assert!(
        stderr.contains("fail-if held: peak_retry_rate > 2x publish_rate:"),
        "{stderr}"
    );
    assert!(!stderr.contains("unfinished > 0"), "{stderr}");

    let passed = run(&["unfinished > 0", "drain_s > 600"]);
    assert_eq!(passed.status.code(), Some(0), "{}", text(&passed.stderr));

    let bad = run(&["deaths > 0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("`deaths` is not a figure of the report"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn a_gateway_configs_route_decides_and_a_bad_scenario_is_named() {
    let dir = common::checkout("simulate");
    let config = dir.join("examples/quickstart.toml");
    let out = verdict(
        &[
            "simulate",
            "-c",
            config.to_str().unwrap(),
            "--scenario",
            &scenario("poison-burst"),
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["policy"]
            .as_str()
            .unwrap()
            .contains("route `orders` (rules)"),
        "{r}"
    );
    assert!(
        n(&r["dead_by_class"]["poison"]) > 0,
        "the quickstart's rules dead-letter schema errors: {r}"
    );
    assert!(r["retry_budget"].is_null(), "{r}");

    // The route's retry budget gates the simulated retries, as the gateway's would.
    let budgeted = dir.join("examples/budgeted.toml");
    let text_of = std::fs::read_to_string(&config).unwrap();
    assert!(text_of.contains("policy = \"rules\"\n"), "{text_of}");
    std::fs::write(
        &budgeted,
        text_of.replacen(
            "policy = \"rules\"\n",
            "policy = \"rules\"\nsettings = { guardrails = { retry_budget = { percent = 5 } } }\n",
            1,
        ),
    )
    .unwrap();
    let out = verdict(
        &[
            "simulate",
            "-c",
            budgeted.to_str().unwrap(),
            "--scenario",
            &scenario("outage-3m"),
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["retry_budget"]["percent"], 5, "{r}");
    assert!(n(&r["held"]) > 0, "{r}");

    let out = verdict(
        &[
            "simulate",
            "-c",
            config.to_str().unwrap(),
            "--topic",
            "payments",
            "--scenario",
            &scenario("poison-burst"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no route takes topic `payments`"),
        "{}",
        text(&out.stderr)
    );

    let bad: PathBuf = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "duration_s = 60\n[publish]\nphases = [{ from_s = 0, rate_per_s = 10 }]\n\
         [consumer]\ncapacity_per_s = 100\nphases = [{ from_s = 0, answers = [{ kind = \"http.503\", pct = 150 }] }]\n",
    )
    .unwrap();
    let out = verdict(
        &[
            "simulate",
            "--policy",
            rules(),
            "--scenario",
            bad.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.toml: consumer.phases[0].answers[0].pct: 0 to 100, not 150"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
