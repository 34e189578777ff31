//! The alert rules (`host/gateway/alerts/verdict.rules.yml`) against a running gateway: every metric
//! they name is one `/metrics` serves, and `promtool check rules` accepts the file when
//! promtool is installed (`.ci/run` installs Debian's `prometheus` package for it).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir};

fn rules_file() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/gateway/alerts/verdict.rules.yml")
}

/// `verdict_...` names in the rules' expressions, without the suffixes Prometheus adds.
fn metric_names(rules: &str) -> BTreeSet<String> {
    verdict_names(rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")))
}

/// `verdict_...` names in `expressions`, as written (the dashboard's queries use them too).
pub(crate) fn verdict_names<'a>(
    expressions: impl IntoIterator<Item = &'a str>,
) -> BTreeSet<String> {
    expressions
        .into_iter()
        .flat_map(|expr| {
            expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|t| t.starts_with("verdict_"))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_metric_the_alert_rules_name_is_served_and_promtool_accepts_them() {
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let names = metric_names(&rules);
    assert!(
        names.contains("verdict_dlq_depth") && names.len() >= 4,
        "{names:?}"
    );

    let dir = scratch_dir("alerts");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Permanent);
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .set("core", true)
                .set("consumer.url", consumer.url()),
        )
        .start_on(runtime, &dir, "alerts-token");
    let _: serde_json::Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "x", "payload": 1}),
        )
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while gw.store.counts().unwrap().dead == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let metrics = gw.anonymous.get_text("/metrics").unwrap();
    for name in &names {
        assert!(
            metrics.lines().any(|l| l.starts_with(name.as_str())),
            "the rules name `{name}`, which /metrics does not serve:\n{metrics}"
        );
    }
    assert!(
        metrics.contains(
            r#"verdict_dlq_depth{dlq="orders.DLQ",topic="orders",source="embedded",core="true"} 1"#
        ),
        "{metrics}"
    );

    match std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules_file())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("promtool not installed ({e}); checked the metric names only"),
    }
}
