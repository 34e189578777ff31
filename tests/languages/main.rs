//! Python and JavaScript policies held to the Rust one: the `rules` policy ported to both
//! languages must pass every vector file and property check of the Rust `rules`, and give
//! verdicts identical to the Rust component's - action, delay, class, reason, alert and
//! labels - on every vector case and on a seeded sweep of failures under every example
//! config. The components run through the real host, deterministic WASI included.
//!
//! Alone in its binary (`harness = false`, libtest-mimic): the interpreters take seconds to
//! compile, so one host with an artifact cache serves every trial.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::json;
use verdict_registry::conformance::{Suite, metered_limits, run_suites};
use verdict_runtime::{Decider, FailureSpec, Host, Policy, SplitMix64, TopicSettings, Verdict};
use verdict_tests::{conformance, fixtures};

/// Failures in the seeded sweep, per config.
const SWEEP_FAILURES: usize = 400;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One metered host for the whole run, keeping compiled components between runs.
fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("language-artifacts");
        Host::with_artifact_cache(&metered_limits(50_000_000), Some(cache))
            .expect("limits are valid")
    })
}

/// The components loaded so far, by path.
type Loaded = Vec<(&'static str, Arc<Policy>)>;

/// Each component loaded once.
fn policy(component: &'static str) -> Result<Arc<Policy>, Failed> {
    static LOADED: OnceLock<std::sync::Mutex<Loaded>> = OnceLock::new();
    let loaded = LOADED.get_or_init(Default::default);
    let mut loaded = loaded.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = loaded.iter().find(|(c, _)| *c == component) {
        return Ok(p.clone());
    }
    let p = host()
        .load_file(component.as_ref())
        .map_err(|e| format!("loading {component}: {e}"))?;
    loaded.push((component, p.clone()));
    Ok(p)
}

fn vector_files() -> Vec<PathBuf> {
    let dir = root().join("policies/rules/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("policies/rules/vectors")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn vector_file(component: &'static str, file: &Path) -> Result<(), Failed> {
    Ok(conformance::vector_file(&policy(component)?, file)?)
}

fn properties(component: &'static str) -> Result<(), Failed> {
    Ok(conformance::properties(&policy(component)?)?)
}

/// A verdict as text, every field included, for a readable diff.
fn show(v: &Verdict) -> String {
    format!(
        "{:?} class={:?} alert={:?} reason={:?} labels={:?}",
        v.action, v.class, v.alert, v.reason, v.labels
    )
}

/// Every case of every vector file decided by both components: the same verdicts, or the
/// same refusal of the config.
fn identical_on_vectors(component: &'static str) -> Result<(), Failed> {
    let suites: Vec<Suite> = vector_files()
        .iter()
        .map(|f| Suite::load(f).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let rust = run_suites(&policy(fixtures::RULES)?, &suites);
    let other = run_suites(&policy(component)?, &suites);
    let mut diffs = Vec::new();
    let mut compared = 0;
    for (r, o) in rust.iter().zip(&other) {
        for (rc, oc) in r.cases.iter().zip(&o.cases) {
            compared += 1;
            let (rv, ov) = (
                rc.decision.as_ref().map(|d| show(&d.verdict)),
                oc.decision.as_ref().map(|d| show(&d.verdict)),
            );
            if rv != ov {
                diffs.push(format!(
                    "{} / {}:\n  rust  {rv:?}\n  other {ov:?}",
                    r.file, rc.name
                ));
            }
        }
    }
    if compared == 0 {
        return Err("no vector cases compared".into());
    }
    if !diffs.is_empty() {
        return Err(format!(
            "{} of {compared} cases differ:\n{}",
            diffs.len(),
            diffs.join("\n")
        )
        .into());
    }
    Ok(())
}

/// The configs of the sweep: the defaults, the shipped examples, and one that uses every
/// backoff strategy and jitter.
fn sweep_configs() -> Vec<String> {
    let mut configs = vec!["{}".to_string()];
    for example in ["error-table.json", "notifications.json", "payments.json"] {
        let path = root().join("policies/rules/examples").join(example);
        configs.push(std::fs::read_to_string(&path).expect("a rules example config"));
    }
    configs.push(
        json!({
            "max_attempts": 7,
            "honor_retry_after": false,
            "on_expired": "discard",
            "reject_alert": "critical",
            "rules": [
                { "name": "ladder", "match": ["ladder.*"], "retry": { "strategy": "ladder", "steps_ms": [100, 2000, 30000], "jitter": "equal" } },
                { "name": "decorrelated", "match": ["net.*"], "retry": { "strategy": "exponential", "base_ms": 50, "cap_ms": 20000, "jitter": "decorrelated" }, "max_attempts": 4 },
                { "name": "immediate", "match": ["http.429"], "retry": { "strategy": "immediate" } },
                { "name": "fixed", "match": ["biz.?"], "retry": { "strategy": "fixed", "delay_ms": 750, "jitter": "full" } },
                { "name": "drop", "match": ["noise.*"], "discard": true },
                { "name": "dead", "match": ["db.gone"], "dead_letter": "permanent", "alert": "critical" }
            ],
            "default": { "retry": { "strategy": "random", "min_ms": 10, "max_ms": 100000 } }
        })
        .to_string(),
    );
    configs
}

/// A seeded failure: kinds across every rule and glob, attempts past every limit,
/// deadlines on both sides of now, Retry-After hints, rejects.
fn sweep_failure(rng: &mut SplitMix64) -> FailureSpec {
    const KINDS: [&str; 18] = [
        "db.timeout",
        "net.timeout",
        "http.503",
        "http.429",
        "http.401",
        "json.parse",
        "schema.v9",
        "auth.denied",
        "db.deadlock",
        "biz.rule",
        "biz.x",
        "ladder.step",
        "net.reset",
        "noise.debug",
        "db.gone",
        "unknown",
        "format.bad",
        "a.very.deep.kind",
    ];
    let now: u64 = 1_800_000_000_000 + rng.between(0, 1_000_000);
    let mut failure = json!({
        "message-id": format!("m-{}", rng.next_u64()),
        "attempt": rng.between(1, 12),
        "now-ms": now,
        "first-failed-at-ms": now - rng.between(0, 600_000),
        "jitter-seed": rng.next_u64(),
        "error": { "kind": KINDS[rng.between(0, KINDS.len() as u64 - 1) as usize] },
    });
    if rng.between(0, 3) == 0 {
        failure["deadline-ms"] = json!(now - 5_000 + rng.between(0, 10_000));
    }
    if rng.between(0, 3) == 0 {
        failure["error"]["retry-after-ms"] = json!(rng.between(0, 120_000));
    }
    if rng.between(0, 9) == 0 {
        failure["error"]["rejected"] = json!(true);
    }
    FailureSpec::from_json(&failure.to_string()).expect("a valid failure")
}

fn configure(policy: &Arc<Policy>, config: &str) -> Result<Decider, Failed> {
    policy
        .configure(config, TopicSettings::default())
        .map_err(|e| format!("{}: {e}", policy.provenance().name).into())
}

/// A seeded sweep under every config: the same verdict from both, delays included.
fn identical_on_sweep(component: &'static str) -> Result<(), Failed> {
    let (rust, other) = (policy(fixtures::RULES)?, policy(component)?);
    let mut diffs = Vec::new();
    let mut decided = 0;
    for (i, config) in sweep_configs().iter().enumerate() {
        let (r, o) = (configure(&rust, config)?, configure(&other, config)?);
        let mut rng = SplitMix64::new(2026 + i as u64);
        for _ in 0..SWEEP_FAILURES {
            let failure = sweep_failure(&mut rng).into_failure();
            let (rd, od) = (r.decide(&failure), o.decide(&failure));
            decided += 1;
            if let Some(fault) = &od.fallback {
                diffs.push(format!(
                    "config #{i}: the other language faulted: {fault:?}"
                ));
            } else if show(&rd.verdict) != show(&od.verdict) {
                diffs.push(format!(
                    "config #{i}, {failure:?}:\n  rust  {}\n  other {}",
                    show(&rd.verdict),
                    show(&od.verdict)
                ));
            }
            if diffs.len() >= 5 {
                break;
            }
        }
    }
    if !diffs.is_empty() {
        return Err(format!(
            "verdicts differ (first {} of {decided}):\n{}",
            diffs.len(),
            diffs.join("\n")
        )
        .into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let languages: [(&str, Result<&'static str, &'static str>); 2] = [
        ("python", fixtures::RULES_PY),
        ("javascript", fixtures::RULES_JS),
    ];
    let mut trials = Vec::new();
    for (language, component) in languages {
        let component = match component {
            Ok(path) => path,
            Err(why) => {
                trials.push(Trial::test(format!("{language}::built"), move || {
                    Err(format!("the {language} rules component was not built: {why}").into())
                }));
                continue;
            }
        };
        for file in vector_files() {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            trials.push(Trial::test(
                format!("{language}::vectors::{stem}"),
                move || vector_file(component, &file),
            ));
        }
        trials.push(Trial::test(format!("{language}::properties"), move || {
            properties(component)
        }));
        trials.push(Trial::test(
            format!("{language}::identical_to_rust::vectors"),
            move || identical_on_vectors(component),
        ));
        trials.push(Trial::test(
            format!("{language}::identical_to_rust::sweep"),
            move || identical_on_sweep(component),
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}
