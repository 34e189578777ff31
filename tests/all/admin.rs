//! The admin API of a running gateway (`verdict run` as a library), through its router
//! in-process: who may change what, JSON errors for bad input, upload -> activate ->
//! rollback, shadow on and off, `/v1/decide` and `/metrics`.

use serde_json::{Value, json};
use verdict_cli::client::ClientError;
use verdict_gateway::admin::{GenerationView, PolicyView};
use verdict_tests::api::Api;
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, variant};

const TOKEN: &str = "test-token-7c1e";

/// payments.> retries 5, orders 3; no default route. With `token`, changes need it. From
/// a file: the tests reload it.
fn gateway(name: &str, token: Option<&str>) -> Gateway {
    let dir = scratch_dir(&format!("admin-{name}"));
    let vectors = fixtures::rules_vectors("limits.json").display().to_string();
    let mut config = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .set("policies.rules.vectors", vec![vectors])
        .policy("rocketmq", fixtures::ROCKETMQ)
        .route(Route::new("payments.>", "rules").config("{ max_attempts = 5 }"))
        .route(Route::new("orders", "rules").config("{ max_attempts = 3 }"));
    if token.is_none() {
        config = config.unset("admin.token_file");
    }
    Gateway::start(&dir, &config.text(), token.unwrap_or(TOKEN))
}

/// The error's status and code.
fn api_error<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (u16, String, String) {
    match result {
        Err(ClientError::Api {
            status,
            code,
            message,
        }) => (status, code, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn decide(client: &Api, topic: &str, kind: &str, attempt: u32) -> Value {
    client
        .post(
            "/v1/decide",
            &json!({"topic": topic, "failure": {"attempt": attempt, "error": {"kind": kind}}}),
        )
        .expect("a decision")
}

#[test]
fn reads_are_open_and_every_change_needs_the_token() {
    let gw = gateway("auth", Some(TOKEN));
    let policies: Vec<PolicyView> = gw.anonymous.get("/v1/policies").unwrap();
    let rules = policies.iter().find(|p| p.name == "rules").unwrap();
    assert_eq!(rules.routes, ["payments.>", "orders"]);
    assert_eq!(rules.component.as_ref().unwrap().name, "rules");
    assert!(rules.loaded_at_ms.unwrap() > 0);
    // Deciding changes nothing: open.
    assert_eq!(
        decide(&gw.anonymous, "orders", "db.timeout", 1)["generation"],
        1
    );

    let wrong = gw.client(Some("not-the-token"));
    for client in [&gw.anonymous, &wrong] {
        let (status, code, _) = api_error(client.post::<Value>("/v1/rollback", &json!({})));
        assert_eq!((status, code.as_str()), (401, "unauthorized"));
        let (status, _, _) =
            api_error(client.put_bytes::<Value>("/v1/policies/rules/component", b"\0asm"));
        assert_eq!(status, 401);
        let (status, _, _) = api_error(client.post::<Value>("/v1/reload", &json!({})));
        assert_eq!(status, 401);
    }
    // With the token the same request gets through to the registry (nothing to roll back).
    let (status, code, _) = api_error(gw.admin.post::<Value>("/v1/rollback", &json!({})));
    assert_eq!((status, code.as_str()), (409, "no_history"));
    assert_eq!(gw.registry.current().number, 1);
}

#[test]
fn without_a_configured_token_the_api_is_read_only() {
    let gw = gateway("no-token", None);
    let (status, code, message) = api_error(gw.admin.post::<Value>("/v1/reload", &json!({})));
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert!(
        message.contains("the gateway knows no identity"),
        "{message}"
    );
    let _: Value = gw.anonymous.get("/v1/routes").unwrap();
}

#[test]
fn bad_input_gets_a_json_4xx_that_names_the_problem() {
    let gw = gateway("bad-input", Some(TOKEN));
    let cases: Vec<(Result<Value, ClientError>, u16, &str, &str)> = vec![
        (
            gw.admin.post(
                "/v1/decide",
                &json!({"topic": "orders", "failure": {"attempt": "x"}}),
            ),
            400,
            "bad_request",
            "attempt",
        ),
        (
            gw.admin.post("/v1/decide", &json!({"topic": "orders"})),
            400,
            "bad_request",
            "failure",
        ),
        (
            gw.admin.post(
                "/v1/decide",
                &json!({"topic": "inventory", "failure": {"error": {"kind": "x"}}}),
            ),
            404,
            "no_route",
            "inventory",
        ),
        (
            gw.admin.put_bytes("/v1/policies/nope/component", b"\0asm"),
            404,
            "no_such_policy",
            "nope",
        ),
        (
            gw.admin
                .put_bytes("/v1/policies/rules/component", b"not wasm at all"),
            422,
            "load_failed",
            "rules",
        ),
        (
            gw.admin.post(
                "/v1/policies/rules/activate",
                &json!({"sha256": "ab".repeat(32)}),
            ),
            404,
            "not_uploaded",
            "abab",
        ),
        (
            gw.admin
                .post("/v1/policies/rules/activate", &json!({"sha": "x"})),
            400,
            "bad_request",
            "sha",
        ),
        (
            gw.admin
                .post("/v1/shadow", &json!({"topic": "orders", "policy": "ghost"})),
            404,
            "no_such_policy",
            "ghost",
        ),
        (
            gw.admin.post(
                "/v1/shadow",
                &json!({"topic": "nowhere", "policy": "rules"}),
            ),
            404,
            "no_such_route",
            "nowhere",
        ),
        (
            gw.admin.post("/v1/rollback", &json!({"topic": 7})),
            400,
            "bad_request",
            "topic",
        ),
        (
            gw.admin.get("/v1/nothing-here"),
            404,
            "not_found",
            "endpoint",
        ),
    ];
    for (result, want_status, want_code, names) in cases {
        let (status, code, message) = api_error(result);
        assert_eq!(
            (status, code.as_str()),
            (want_status, want_code),
            "{message}"
        );
        assert!(message.contains(names), "`{message}` should name `{names}`");
    }
    // Nothing above changed anything.
    assert_eq!(gw.registry.current().number, 1);
    assert_eq!(gw.registry.status().reloads, 0);
}

#[test]
fn upload_activate_and_rollback_through_the_api() {
    let gw = gateway("activate", Some(TOKEN));
    let original = decide(&gw.admin, "orders", "db.timeout", 1)["provenance"]["sha256"].clone();

    // A component that fails the policy's vectors is staged, but refused on activation.
    let wrong = std::fs::read(fixtures::ROCKETMQ).unwrap();
    let staged: Value = gw
        .admin
        .put_bytes("/v1/policies/rules/component", &wrong)
        .unwrap();
    let sha = staged["provenance"]["sha256"].as_str().unwrap().to_string();
    let (status, code, message) = api_error(
        gw.admin
            .post::<Value>("/v1/policies/rules/activate", &json!({ "sha256": sha })),
    );
    assert_eq!(
        (status, code.as_str()),
        (422, "admission_refused"),
        "{message}"
    );
    assert!(message.contains("failed admission"), "{message}");
    assert_eq!(
        decide(&gw.admin, "orders", "db.timeout", 1)["provenance"]["sha256"],
        original
    );

    // A sound new version goes live for every route of the policy.
    let v2 = variant(fixtures::RULES, "v2");
    let staged: Value = gw
        .admin
        .put_bytes("/v1/policies/rules/component", &v2)
        .unwrap();
    let v2_sha = staged["provenance"]["sha256"].as_str().unwrap().to_string();
    assert_ne!(json!(v2_sha), original);
    let policies: Vec<PolicyView> = gw.admin.get("/v1/policies").unwrap();
    let uploads = &policies.iter().find(|p| p.name == "rules").unwrap().uploads;
    assert!(
        uploads.contains(&v2_sha) && uploads.contains(&sha),
        "{uploads:?}"
    );
    let activated: Value = gw
        .admin
        .post("/v1/policies/rules/activate", &json!({ "sha256": v2_sha }))
        .unwrap();
    let history: Vec<GenerationView> = gw.admin.get("/v1/generations").unwrap();
    assert_eq!(activated["generation"], 2, "{history:#?}");
    for topic in ["orders", "payments.captured"] {
        let d = decide(&gw.admin, topic, "db.timeout", 1);
        assert_eq!(d["provenance"]["sha256"], json!(v2_sha));
        assert_eq!(d["generation"], 2);
    }

    // Roll back one route, then everything.
    let back: Value = gw
        .admin
        .post("/v1/rollback", &json!({"topic": "orders"}))
        .unwrap();
    assert_eq!(back["generation"], 3);
    assert_eq!(
        decide(&gw.admin, "orders", "db.timeout", 1)["provenance"]["sha256"],
        original
    );
    assert_eq!(
        decide(&gw.admin, "payments.x", "db.timeout", 1)["provenance"]["sha256"],
        json!(v2_sha)
    );
    let history: Vec<GenerationView> = gw.admin.get("/v1/generations").unwrap();
    let numbers: Vec<(u64, bool)> = history.iter().map(|g| (g.number, g.active)).collect();
    assert_eq!(numbers, [(1, false), (2, false), (3, true)]);
    assert!(
        history[1].cause.starts_with("activate rules "),
        "{history:?}"
    );
    let all: Value = gw.admin.post("/v1/rollback", &json!({})).unwrap();
    let history: Vec<GenerationView> = gw.admin.get("/v1/generations").unwrap();
    assert_eq!(all["generation"], 2, "{history:#?}");
    assert_eq!(
        decide(&gw.admin, "orders", "db.timeout", 1)["provenance"]["sha256"],
        json!(v2_sha)
    );

    // An upload survives reloads of an unrelated change to the file.
    let config = gw.dir.join("verdict.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("max_attempts = 3", "max_attempts = 4"),
    )
    .unwrap();
    let reloaded: Value = gw.admin.post("/v1/reload", &json!({})).unwrap();
    assert!(reloaded["generation"].as_u64().unwrap() >= 4);
    let d = decide(&gw.admin, "orders", "db.timeout", 3);
    assert_eq!(d["provenance"]["sha256"], json!(v2_sha));
    assert_eq!(d["verdict"]["class"], "transient", "4 attempts now: {d}");
}

#[test]
fn shadow_on_and_off_through_the_api() {
    let gw = gateway("shadow", Some(TOKEN));
    let on: Value = gw
        .admin
        .post(
            "/v1/shadow",
            &json!({"topic": "payments.>", "policy": "rules", "config": {"max_attempts": 3}}),
        )
        .unwrap();
    assert_eq!(on["generation"], 2);
    // Attempts 1..=6 at 5 vs 3: they disagree on attempts 3 and 4 (retry vs dead-letter).
    for attempt in 1..=6 {
        decide(&gw.admin, "payments.captured", "db.timeout", attempt);
    }
    let report: Vec<verdict_registry::ShadowReport> = gw.admin.get("/v1/shadow").unwrap();
    assert_eq!(report.len(), 1);
    assert_eq!((report[0].compared, report[0].disagreements), (6, 2));
    assert_eq!(report[0].by_class.get("transient"), Some(&2));
    let off: Value = gw
        .admin
        .post("/v1/shadow", &json!({"topic": "payments.>"}))
        .unwrap();
    assert_eq!(off["generation"], 3);
    let report: Vec<verdict_registry::ShadowReport> = gw.admin.get("/v1/shadow").unwrap();
    assert!(report.is_empty());
}

#[test]
fn metrics_count_decisions_and_refused_changes() {
    let gw = gateway("metrics", Some(TOKEN));
    for attempt in 1..=4 {
        decide(&gw.admin, "orders", "db.timeout", attempt);
    }
    let staged: Value = gw
        .admin
        .put_bytes(
            "/v1/policies/rules/component",
            &std::fs::read(fixtures::ROCKETMQ).unwrap(),
        )
        .unwrap();
    let _ = gw.admin.post::<Value>(
        "/v1/policies/rules/activate",
        &json!({"sha256": staged["provenance"]["sha256"]}),
    );
    let text = gw.admin.get_text("/metrics").unwrap();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    // 3 attempts allowed: attempts 1 and 2 retry, 3 and 4 dead-letter.
    assert_eq!(
        line(
            r#"verdict_decisions_total{topic="orders",policy="rules",action="retry",class="transient"}"#
        ),
        "2"
    );
    assert_eq!(
        line(
            r#"verdict_decisions_total{topic="orders",policy="rules",action="dead-letter",class="exhausted"}"#
        ),
        "2"
    );
    assert_eq!(
        line(r#"verdict_registry_changes_total{outcome="refused"}"#),
        "1"
    );
    assert_eq!(line("verdict_registry_generation"), "1");
}
