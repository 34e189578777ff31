//! Running vector suites against a policy.

use std::sync::Arc;

use serde::Serialize;
use verdict_types::Action;

use super::vectors::{Case, Expect, ExpectedAction, Suite};
use verdict_runtime::{Decider, Decision, Policy, TopicSettings};

/// One field that did not match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The field: `action`, `delay_ms`, `class`, `alert`, `reason`, `labels.<key>`,
    /// `fallback` or `config`.
    pub field: String,
    /// What the vector expected.
    pub expected: String,
    /// What the policy gave.
    pub got: String,
}

/// The result of one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// True when every expected field matched.
    pub passed: bool,
    /// The fields that did not.
    pub mismatches: Vec<Mismatch>,
    /// The decision the policy made (absent when the config was refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// The result of one suite (vector file).
#[derive(Debug, Clone, Serialize)]
pub struct SuiteResult {
    /// The vector file.
    pub file: String,
    /// The suite's name.
    pub suite: String,
    /// Each case.
    pub cases: Vec<CaseResult>,
}

/// Deciders made so far, by (config, settings): a run configures each pair once.
type Deciders = Vec<((String, TopicSettings), Result<Decider, String>)>;

/// Run `suites` against `policy`, one decider per distinct (config, settings).
pub fn run_suites(policy: &Arc<Policy>, suites: &[Suite]) -> Vec<SuiteResult> {
    let mut deciders: Deciders = Vec::new();
    suites
        .iter()
        .map(|suite| SuiteResult {
            file: suite.file.display().to_string(),
            suite: suite.name.clone(),
            cases: suite
                .cases
                .iter()
                .map(|case| run_case(policy, case, &suite.settings, &mut deciders))
                .collect(),
        })
        .collect()
}

fn run_case(
    policy: &Arc<Policy>,
    case: &Case,
    settings: &TopicSettings,
    deciders: &mut Deciders,
) -> CaseResult {
    let key = (case.config.clone(), settings.clone());
    let index = match deciders.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            let decider = policy
                .configure(&case.config, settings.clone())
                .map_err(|e| e.to_string());
            deciders.push((key, decider));
            deciders.len() - 1
        }
    };
    match &deciders[index].1 {
        Ok(decider) => {
            let decision = decider.decide(&case.failure.clone().into_failure());
            let mismatches = compare(&case.expect, &decision);
            CaseResult {
                name: case.name.clone(),
                passed: mismatches.is_empty(),
                mismatches,
                decision: Some(decision),
            }
        }
        Err(e) => CaseResult {
            name: case.name.clone(),
            passed: false,
            mismatches: vec![Mismatch {
                field: "config".into(),
                expected: "accepted".into(),
                got: e.clone(),
            }],
            decision: None,
        },
    }
}

fn action_name(action: Action) -> &'static str {
    action.name()
}

fn kebab<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The `clamp` tag a clamp serializes with (`delay-capped`, `attempt-ceiling`, ...).
fn kebab_tag(clamp: &verdict_runtime::Clamp) -> String {
    serde_json::to_value(clamp)
        .ok()
        .and_then(|v| v["clamp"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Compare a decision with its expectation, field by field.
pub fn compare(expect: &Expect, d: &Decision) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut check = |field: &str, ok: bool, expected: String, got: String| {
        if !ok {
            out.push(Mismatch {
                field: field.to_string(),
                expected,
                got,
            });
        }
    };
    let v = &d.verdict;
    if let Some(want) = expect.action {
        let want_name = match want {
            ExpectedAction::Retry => "retry",
            ExpectedAction::Delay => "delay",
            ExpectedAction::Pause => "pause",
            ExpectedAction::DeadLetter => "dead-letter",
            ExpectedAction::Discard => "discard",
        };
        check(
            "action",
            want_name == action_name(v.action),
            want_name.into(),
            action_name(v.action).into(),
        );
    }
    if let Some(spec) = expect.delay_ms {
        let got = v.delay_ms();
        check(
            "delay_ms",
            got.is_some_and(|ms| spec.accepts(ms)),
            spec.to_string(),
            got.map_or("none".into(), |ms| ms.to_string()),
        );
    }
    if let Some(class) = expect.class {
        check("class", class == v.class, kebab(&class), kebab(&v.class));
    }
    if let Some(alert) = expect.alert {
        check("alert", alert == v.alert, kebab(&alert), kebab(&v.alert));
    }
    if let Some(needle) = &expect.reason_contains {
        check(
            "reason",
            v.reason.contains(needle.as_str()),
            format!("contains {needle:?}"),
            format!("{:?}", v.reason),
        );
    }
    for (key, want) in &expect.labels {
        let got = v
            .labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, val)| val.as_str());
        check(
            &format!("labels.{key}"),
            got == Some(want.as_str()),
            want.clone(),
            got.unwrap_or("(absent)").into(),
        );
    }
    let got_clamps: Vec<String> = d.clamps.iter().map(kebab_tag).collect();
    for want in &expect.clamps {
        check(
            &format!("clamps.{want}"),
            got_clamps.contains(want),
            "present".into(),
            format!("{got_clamps:?}"),
        );
    }
    let want_fallback = expect.fallback.unwrap_or(false);
    let got_fallback = d
        .fallback
        .as_ref()
        .map_or("none".to_string(), |f| f.to_string());
    check(
        "fallback",
        want_fallback == d.fallback.is_some(),
        if want_fallback { "a fault" } else { "none" }.into(),
        got_fallback,
    );
    out
}

/// Totals over suites.
pub fn totals(suites: &[SuiteResult]) -> (usize, usize) {
    let all = suites.iter().flat_map(|s| &s.cases);
    let passed = all.clone().filter(|c| c.passed).count();
    (passed, all.count() - passed)
}
