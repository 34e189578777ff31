//! The harness itself: it catches a broken policy through vectors and properties, its
//! reports are well-formed, and invalid vector input is named precisely.

use std::path::PathBuf;

use verdict_registry::conformance::{
    PropertyOptions, Report, Suite, check_properties, metered_limits, run_suites,
};
use verdict_runtime::{Host, TopicSettings};
use verdict_tests::{fixtures, load};

/// `rules` deliberately broken: it retries `json.parse` like a timeout (and is otherwise
/// careful: other format and auth errors still go to the DLQ).
const BROKEN_RULES: &str = r#"{"rules": [
    {"match": ["json.*"], "retry": {"strategy": "fixed", "delay_ms": 100}},
    {"match": ["schema.*", "format.*"], "dead_letter": "poison"},
    {"match": ["auth.*"], "dead_letter": "permanent"}]}"#;

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("verdict-vectors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn report_for(config: Option<&str>, files: &[&str], properties: bool) -> Report {
    let host = Host::new(&metered_limits(10_000_000)).unwrap();
    let policy = load(&host, fixtures::RULES);
    let suites: Vec<Suite> = files
        .iter()
        .map(|f| Suite::load_with_config(&fixtures::rules_vectors(f), config).unwrap())
        .collect();
    let settings = TopicSettings::default();
    let results = run_suites(&policy, &suites);
    let props = if properties {
        check_properties(
            &policy,
            config.unwrap_or("{}"),
            &settings,
            &PropertyOptions::default(),
        )
        .unwrap()
    } else {
        vec![]
    };
    Report::new((**policy.provenance()).clone(), results, props)
}

#[test]
fn broken_rules_fails_its_vectors_with_a_readable_diff() {
    let report = report_for(Some(BROKEN_RULES), &["limits.json"], false);
    assert!(report.failed > 0);
    let text = report.human();
    assert!(
        text.contains("FAIL json.parse is poison under both"),
        "{text}"
    );
    assert!(
        text.contains("action: expected dead-letter, got retry"),
        "{text}"
    );
    assert!(
        text.contains("class: expected poison, got transient"),
        "{text}"
    );
}

#[test]
fn broken_rules_fails_the_property_check_with_a_shrunk_input() {
    let report = report_for(Some(BROKEN_RULES), &[], true);
    let prop = report
        .properties
        .iter()
        .find(|p| p.name.starts_with("never-retry kinds"))
        .unwrap();
    assert!(!prop.passed);
    let c = prop.counterexample.as_ref().unwrap();
    // Shrunk: attempt 1, seed 0, no stats, no Retry-After, no payload; only the kind matters.
    let input: serde_json::Value = serde_json::from_str(&c.failure).unwrap();
    assert_eq!(
        input,
        serde_json::json!({"attempt": 1, "jitter-seed": 0, "error": {"kind": input["error"]["kind"]}}),
        "{}",
        c.failure
    );
    assert_eq!(input["error"]["kind"], "json.parse");
    // The healthy policy passes the same properties.
    assert_eq!(report_for(None, &[], true).failed, 0);
}

#[test]
fn junit_output_is_well_formed_and_counts_failures() {
    let report = report_for(Some(BROKEN_RULES), &["limits.json", "classes.json"], true);
    let xml = report.junit();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(
        root.attribute("failures"),
        Some(report.failed.to_string().as_str())
    );
    let cases = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .count();
    assert_eq!(cases, report.passed + report.failed);
    let failures = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .count();
    assert_eq!(failures, report.failed);
    assert_eq!(
        doc.descendants()
            .filter(|n| n.has_tag_name("testsuite"))
            .count(),
        3
    );
}

#[test]
fn json_output_has_the_documented_stable_shape() {
    let report = report_for(Some(BROKEN_RULES), &["limits.json"], false);
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["format"], 1);
    assert_eq!(v["policy"]["name"], "rules");
    let case = &v["suites"][0]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["passed"] == false)
        .unwrap()
        .clone();
    for key in ["name", "passed", "mismatches", "decision"] {
        assert!(case.get(key).is_some(), "case lacks {key}: {case}");
    }
    let m = &case["mismatches"][0];
    assert!(
        m["field"].is_string() && m["expected"].is_string() && m["got"].is_string(),
        "{m}"
    );
    // limits.json: 5 + 3 + 2 expanded cases.
    assert_eq!(
        v["passed"].as_u64().unwrap() + v["failed"].as_u64().unwrap(),
        10
    );
}

#[test]
fn invalid_vector_files_name_file_case_and_field() {
    let cases = [
        (
            r#"{"suite": "s", "cases": [{"name": "a", "failure": {"error": {"kind": "x"}}, "expect": {"clas": "poison"}}]}"#,
            "case `a`",
            "cases[0].expect.clas",
        ),
        (
            r#"{"suite": "s", "cases": [{"name": "a", "failure": {"error": {"kind": "x"}}, "expect": {"action": "requeue"}}]}"#,
            "case `a`",
            "cases[0].expect.action",
        ),
        (
            r#"{"suite": "s", "cases": [{"name": "b", "failure": {"attempt": "two", "error": {"kind": "x"}}}]}"#,
            "case `b`",
            "cases[0].failure",
        ),
        (
            r#"{"suite": "s", "cases": [{"name": "c", "failure": {"error": {"kind": "x"}}, "each": [{"atempt": 2}]}]}"#,
            "case `c`",
            "cases[0].each[0].failure",
        ),
        (r#"{"suite": "s", "cases": [{"nme": "d"}]}"#, "", "cases[0]"),
        (
            r#"{"suite": "s", "cases": [{"name": "e", "failure": {"error": {"kind": "x"}}}, {"name": "e", "failure": {"error": {"kind": "x"}}}]}"#,
            "case `e`",
            "cases[1].name",
        ),
        ("not json", "", "(file)"),
    ];
    for (i, (text, case, field)) in cases.into_iter().enumerate() {
        let path = scratch(&format!("bad-{i}.json"), text);
        let err = Suite::load(&path).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with(&path.display().to_string()), "{msg}");
        assert!(msg.contains(case), "case {i}: {msg}");
        assert!(
            err.field.starts_with(field) || (field == "(file)" && !err.field.is_empty()),
            "case {i}: field {:?} in {msg}",
            err.field
        );
    }
}

#[test]
fn a_new_policy_author_writes_a_vector_file_and_runs_it() {
    // What the book's "Test your policy against vectors" section shows, end to end.
    let path = scratch(
        "author.json",
        r#"{"suite": "my first vectors", "config": {"max_attempts": 2},
            "cases": [{"name": "retry then DLQ", "failure": {"error": {"kind": "http.503"}},
                       "each": [{"attempt": 1, "expect": {"action": "retry"}},
                                {"attempt": 2, "expect": {"action": "dead-letter", "class": "exhausted"}}]}]}"#,
    );
    let host = verdict_tests::host();
    let policy = load(&host, fixtures::RULES);
    let suite = Suite::load(&path).unwrap();
    assert_eq!(suite.cases.len(), 2);
    assert_eq!(suite.cases[1].name, "retry then DLQ [attempt=2]");
    let results = run_suites(&policy, &[suite]);
    assert!(results[0].cases.iter().all(|c| c.passed), "{results:?}");
}

#[test]
fn monotone_is_checked_when_declared() {
    let host = Host::new(&metered_limits(10_000_000)).unwrap();
    let options = PropertyOptions {
        monotone: true,
        ..PropertyOptions::default()
    };
    let name = "delays never go backwards (declared monotone)";
    let run = |path: &str, config: &str| {
        let results = check_properties(
            &load(&host, path),
            config,
            &TopicSettings::default(),
            &options,
        )
        .unwrap();
        results.into_iter().find(|p| p.name == name).unwrap()
    };
    // RocketMQ's ladder is monotone; rules' full jitter is not, and the harness shows where.
    assert!(run(fixtures::ROCKETMQ, "{}").passed);
    let jittered = run(fixtures::RULES, "{}");
    assert!(!jittered.passed);
    assert!(
        jittered
            .counterexample
            .unwrap()
            .message
            .contains("less than attempt")
    );
}

#[test]
fn suite_settings_apply_and_missing_clamps_are_reported() {
    let path = scratch(
        "clamps.json",
        r#"{"suite": "clamps", "settings": {"guardrails": {"max_delay_ms": 100}},
            "cases": [{"name": "capped", "failure": {"attempt": 1, "error": {"kind": "biz.x"}},
                       "expect": {"delay_ms": 100, "clamps": ["delay-capped"]}},
                      {"name": "not capped", "failure": {"attempt": 1, "error": {"kind": "json.parse"}},
                       "expect": {"clamps": ["delay-capped"]}}]}"#,
    );
    let host = verdict_tests::host();
    let results = run_suites(
        &load(&host, fixtures::RULES),
        &[Suite::load(&path).unwrap()],
    );
    let cases = &results[0].cases;
    assert!(cases[0].passed, "{:?}", cases[0].mismatches);
    assert!(!cases[1].passed);
    assert_eq!(cases[1].mismatches[0].field, "clamps.delay-capped");
}
