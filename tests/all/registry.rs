//! The registry through its library API: routing from a gateway config, the admission gate,
//! rollback, and reloads under concurrent decisions.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use verdict_registry::{GatewayConfig, Registry, RegistryError};
use verdict_runtime::{Action, Class};
use verdict_tests::{at, fixtures};

/// payments retries 5, everything else 3; `rules` must pass its `limits` vectors.
fn config(rules_path: &str, payments_attempts: u32) -> GatewayConfig {
    let text = format!(
        r#"
        [sandbox]
        decide_timeout_ms = 1000
        [storage]
        dir = "{state}"
        [policies.rules]
        path = "{rules_path}"
        vectors = ["{vectors}"]
        [[routes]]
        topic = "payments.>"
        policy = "rules"
        config = {{ max_attempts = {payments_attempts} }}
        [[routes]]
        topic = ">"
        policy = "rules"
        config = {{ max_attempts = 3 }}
        "#,
        vectors = fixtures::rules_vectors("limits.json").display(),
        state = state_dir().display(),
    );
    GatewayConfig::parse(&text, "verdict.toml").unwrap()
}

/// One state directory (uploads, artifact cache) for this test process.
fn state_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| verdict_tests::scratch_dir("registry-state"))
}

fn registry() -> Registry {
    Registry::new(&config(fixtures::RULES, 5), Path::new("/")).unwrap()
}

#[test]
fn topics_route_to_their_config_and_decisions_name_the_generation() {
    let r = registry();
    let payments = r.decide("payments.captured", &at("db.timeout", 3)).unwrap();
    assert!(matches!(payments.verdict.action, Action::Retry(_)));
    let other = r
        .decide("notifications.email", &at("db.timeout", 3))
        .unwrap();
    assert_eq!(
        (other.verdict.action, other.verdict.class),
        (Action::DeadLetter, Class::Exhausted)
    );
    assert_eq!((payments.generation, other.generation), (Some(1), Some(1)));
    assert_eq!(
        r.current().route("payments.eu.captured").unwrap().topic,
        "payments.>"
    );
}

#[test]
fn a_refused_reload_keeps_the_active_generation() {
    let r = registry();
    let dir = std::env::temp_dir().join(format!("verdict-registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("wrong-version.wasm");
    std::fs::write(
        &wrong,
        wat::parse_file(fixtures::file("wrong-version.wat")).unwrap(),
    )
    .unwrap();

    // Fails its vectors: rocketmq's component under the name `rules`.
    let err = r
        .reload(&config(fixtures::ROCKETMQ, 5), Path::new("/"))
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Admission { policy, .. } if policy == "rules"),
        "{err}"
    );
    // Wrong contract version.
    let err = r
        .reload(&config(wrong.to_str().unwrap(), 5), Path::new("/"))
        .unwrap_err();
    assert!(
        err.to_string().contains("verdict:policy/decider@0.3.0"),
        "{err}"
    );
    // sha256 pin mismatch.
    let mut pinned = config(fixtures::RULES, 5);
    pinned.policies.get_mut("rules").unwrap().sha256 = Some("0".repeat(64));
    assert!(matches!(
        r.reload(&pinned, Path::new("/")),
        Err(RegistryError::Pin { .. })
    ));
    // A route config the policy refuses.
    let mut refused = config(fixtures::RULES, 5);
    refused.routes[0].config = Some(serde_json::json!({"max_attempts": 0}));
    let err = r.reload(&refused, Path::new("/")).unwrap_err();
    assert!(
        err.to_string().contains("routes[0]") && err.to_string().contains("config.max_attempts"),
        "{err}"
    );

    assert_eq!(r.current().number, 1);
    let d = r.decide("payments.captured", &at("db.timeout", 4)).unwrap();
    assert!(matches!(d.verdict.action, Action::Retry(_)) && d.generation == Some(1));
}

#[test]
fn rollback_restores_the_previous_generation() {
    let r = registry();
    assert!(matches!(r.rollback(), Err(RegistryError::NoHistory)));
    assert_eq!(
        r.reload(&config(fixtures::RULES, 3), Path::new("/"))
            .unwrap(),
        2
    );
    let d = r.decide("payments.captured", &at("db.timeout", 3)).unwrap();
    assert_eq!((d.verdict.class, d.generation), (Class::Exhausted, Some(2)));
    assert_eq!(r.rollback().unwrap(), 1);
    let d = r.decide("payments.captured", &at("db.timeout", 3)).unwrap();
    assert_eq!((d.verdict.class, d.generation), (Class::Transient, Some(1)));
}

/// Under concurrent decision load, 1,000 hot reloads alternating two
/// versions of a policy (different bytes, different config): no decision fails, and each
/// names one of the two versions - with that version's config, never a mix.
#[test]
fn a_thousand_reloads_between_two_versions_under_load_lose_nothing() {
    let dir = verdict_tests::scratch_dir("thousand-reloads");
    let v2 = dir.join("rules-v2.wasm");
    std::fs::write(&v2, verdict_tests::variant(fixtures::RULES, "v2")).unwrap();
    let (v1, v2) = (config(fixtures::RULES, 5), config(v2.to_str().unwrap(), 3));
    let r = Registry::new(&v1, Path::new("/")).unwrap();
    let sha_v1 = r
        .decide("payments.x", &at("db.timeout", 1))
        .unwrap()
        .provenance
        .sha256
        .clone();
    r.reload(&v2, Path::new("/")).unwrap();
    let sha_v2 = r
        .decide("payments.x", &at("db.timeout", 1))
        .unwrap()
        .provenance
        .sha256
        .clone();
    assert_ne!(sha_v1, sha_v2);

    let stop = AtomicBool::new(false);
    let decided = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let d = r
                        .decide("payments.captured", &at("db.timeout", 4))
                        .expect("route exists");
                    assert!(d.fallback.is_none(), "{d:?}");
                    // v1 allows 5 attempts (attempt 4 retries), v2 allows 3 (it dead-letters).
                    let want = if d.provenance.sha256 == sha_v1 {
                        Class::Transient
                    } else {
                        assert_eq!(d.provenance.sha256, sha_v2, "{d:?}");
                        Class::Exhausted
                    };
                    assert_eq!(d.verdict.class, want, "{d:?}");
                    decided.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for i in 0..1_000 {
            let next = if i % 2 == 0 { &v1 } else { &v2 };
            r.reload(next, Path::new("/")).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(r.current().number, 1_002);
    assert_eq!(r.status().reloads, 1_001);
    assert!(decided.load(Ordering::Relaxed) > 0);
    // Both versions stayed compiled once: reloads reuse them by digest.
    assert_eq!(r.cache_stats().compiled + r.cache_stats().hits, 2);
}

#[test]
fn shadow_counts_exactly_the_disagreements_between_5_and_3_attempts() {
    let mut cfg = config(fixtures::RULES, 5);
    cfg.routes[0].shadow = Some(verdict_registry::ShadowConfig {
        policy: "rules".into(),
        config: Some(serde_json::json!({"max_attempts": 3})),
    });
    let r = Registry::new(&cfg, Path::new("/")).unwrap();
    // Per message, attempts 1-5 of a db.timeout: 1-2 both retry, 3-4 the active (5) retries
    // while the shadow (3) dead-letters, 5 both dead-letter. So 2 disagreements a message,
    // both with the active class transient.
    for message in 0..10 {
        for attempt in 1..=5 {
            let f = verdict_tests::failure(serde_json::json!({
                "message-id": format!("m-{message}"), "attempt": attempt, "error": {"kind": "db.timeout"}
            }));
            let d = r.decide("payments.captured", &f).unwrap();
            // The active verdict applies, never the shadow's.
            let want = if attempt < 5 {
                Class::Transient
            } else {
                Class::Exhausted
            };
            assert_eq!(d.verdict.class, want);
        }
        // Topics on routes without a shadow are not compared.
        r.decide("notifications.email", &at("db.timeout", 1))
            .unwrap();
    }
    let report = r.shadow_report();
    assert_eq!(report.len(), 1);
    let s = &report[0];
    assert_eq!(
        (s.topic.as_str(), s.active.as_str(), s.shadow.as_str()),
        ("payments.>", "rules", "rules")
    );
    assert_eq!((s.compared, s.disagreements), (50, 20));
    assert_eq!(
        s.by_class,
        [("transient".to_string(), 20)].into_iter().collect()
    );
}

#[test]
fn rollback_of_one_topic_leaves_the_others() {
    let r = registry();
    // Generation 2 changes both routes: payments 3 attempts, the default 2.
    let mut changed = config(fixtures::RULES, 3);
    changed.routes[1].config = Some(serde_json::json!({"max_attempts": 2}));
    assert_eq!(r.reload(&changed, Path::new("/")).unwrap(), 2);
    assert!(matches!(
        r.rollback_topic("orders.>"),
        Err(RegistryError::NoSuchRoute { .. })
    ));
    // Roll back payments only: it is 5 attempts again, the default keeps its new 2.
    assert_eq!(r.rollback_topic("payments.>").unwrap(), 3);
    let payments = r.decide("payments.captured", &at("db.timeout", 3)).unwrap();
    assert_eq!(
        (payments.verdict.class, payments.generation),
        (Class::Transient, Some(3))
    );
    let other = r
        .decide("notifications.email", &at("db.timeout", 2))
        .unwrap();
    assert_eq!(other.verdict.class, Class::Exhausted);
    // And a whole rollback returns to generation 2 (payments 3, default 2).
    assert_eq!(r.rollback().unwrap(), 2);
    let payments_class = || {
        r.decide("payments.captured", &at("db.timeout", 3))
            .unwrap()
            .verdict
            .class
    };
    assert_eq!(payments_class(), Class::Exhausted);
    // As documented (and said by `verdict policy rollback --topic`), a one-route rollback
    // lasts until the next change of any route: then the file speaks again.
    r.rollback_topic("payments.>").unwrap();
    assert_eq!(payments_class(), Class::Transient);
    let mut unrelated = changed.clone();
    unrelated.routes[1].config = Some(serde_json::json!({"max_attempts": 4}));
    r.reload(&unrelated, Path::new("/")).unwrap();
    assert_eq!(payments_class(), Class::Exhausted);
}

/// A route replaced by a reload keeps no warm instances while it waits in the history for a
/// rollback: the pool's slots belong to the routes that serve.
#[test]
fn retired_routes_release_their_warm_instances() {
    let r = registry();
    r.decide("payments.captured", &at("db.timeout", 1)).unwrap();
    let first = r.current();
    let payments = first
        .routes
        .iter()
        .find(|route| route.topic == "payments.>")
        .unwrap()
        .clone();
    assert!(payments.decider.warm() >= 1);
    r.reload(&config(fixtures::RULES, 3), Path::new("/"))
        .unwrap();
    assert!(!std::sync::Arc::ptr_eq(
        &payments,
        r.current()
            .routes
            .iter()
            .find(|route| route.topic == "payments.>")
            .unwrap()
    ));
    assert_eq!(payments.decider.warm(), 0);
    // A rollback to it decides again, on a fresh instance.
    r.rollback().unwrap();
    assert!(
        r.decide("payments.captured", &at("db.timeout", 1))
            .is_some()
    );
}

#[test]
fn a_reload_reuses_an_unchanged_component_and_compiles_a_changed_one() {
    let r = registry();
    let first = r.current();
    r.reload(&config(fixtures::RULES, 3), Path::new("/"))
        .unwrap();
    let second = r.current();
    assert!(std::sync::Arc::ptr_eq(
        first.routes[0].decider.policy(),
        second.routes[0].decider.policy()
    ));
    // Different bytes under the same name: compiled anew (and refused here by its vectors).
    assert!(
        r.reload(&config(fixtures::ROCKETMQ, 3), Path::new("/"))
            .is_err()
    );
    assert_eq!(r.current().number, 2);
}

/// Poll `status` until `done` holds (file events are asynchronous), at most 20 s.
fn eventually(
    watcher: &verdict_registry::ConfigWatcher,
    done: impl Fn(&verdict_registry::ReloadStatus) -> bool,
) -> verdict_registry::ReloadStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let status = watcher.status();
        if done(&status) || std::time::Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_watcher_reloads_on_change_and_keeps_the_old_generation_on_a_bad_one() {
    let dir = std::env::temp_dir().join(format!("verdict-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixtures::RULES, dir.join("rules.wasm")).unwrap();
    let write = |attempts: u32| {
        let text = format!(
            "[sandbox]\ndecide_timeout_ms = 1000\n[policies.rules]\npath = \"rules.wasm\"\nvectors = [\"{}\"]\n\
             [[routes]]\ntopic = \">\"\npolicy = \"rules\"\nconfig = {{ max_attempts = {attempts} }}\n",
            fixtures::rules_vectors("limits.json").display()
        );
        std::fs::write(dir.join("verdict.toml"), text).unwrap();
    };
    write(5);
    let path = dir.join("verdict.toml");
    let r = std::sync::Arc::new(Registry::new(&GatewayConfig::load(&path).unwrap(), &dir).unwrap());
    let watcher = verdict_registry::ConfigWatcher::start(
        r.clone(),
        &path,
        std::time::Duration::from_millis(200),
    )
    .unwrap();

    write(3);
    let status = eventually(&watcher, |s| s.reloads >= 1);
    assert!(status.reloads >= 1 && status.generation >= 2, "{status:?}");
    assert_eq!(
        r.decide("orders", &at("db.timeout", 3))
            .unwrap()
            .verdict
            .class,
        Class::Exhausted
    );

    std::fs::write(&path, "[[routes]\n").unwrap();
    let status = eventually(&watcher, |s| s.refused >= 1);
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("verdict.toml"),
        "{status:?}"
    );
    assert_eq!(r.current().number, status.generation);

    // A component that fails its vectors is refused too. (One edit may arrive as more than
    // one debounced burst, so wait on what happened, not on exact counts. Writing back the
    // text of the active generation would change no route, so write a new one.)
    write(4);
    let before = eventually(&watcher, |s| s.reloads >= 2);
    assert!(before.reloads >= 2, "{before:?}");
    std::fs::copy(fixtures::ROCKETMQ, dir.join("rules.wasm")).unwrap();
    let status = eventually(&watcher, |s| {
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("failed admission"))
    });
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("failed admission"),
        "{status:?}"
    );
    assert_eq!(
        r.decide("orders", &at("db.timeout", 4))
            .unwrap()
            .verdict
            .class,
        Class::Exhausted
    );
}

#[test]
fn a_route_naming_an_undefined_policy_is_refused_not_dropped() {
    let r = registry();
    let mut cfg = config(fixtures::RULES, 5);
    cfg.routes[1].policy = "missing".into();
    let err = r.reload(&cfg, Path::new("/")).unwrap_err();
    assert!(
        matches!(&err, RegistryError::UnknownPolicy { index: 1, policy } if policy == "missing"),
        "{err}"
    );
    cfg.routes[1].policy = "rules".into();
    cfg.routes[1].shadow = Some(verdict_registry::ShadowConfig {
        policy: "candidate".into(),
        config: None,
    });
    assert!(matches!(
        r.reload(&cfg, Path::new("/")),
        Err(RegistryError::UnknownPolicy { .. })
    ));
    assert_eq!(r.current().number, 1);
}
