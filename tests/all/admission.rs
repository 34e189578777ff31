//! The admission gate's refusals that need a misbehaving guest, and the on-disk compiled
//! artifact cache (warm restart, corrupt and truncated entries).

use std::path::Path;

use verdict_host::{Class, GatewayConfig, Registry, RegistryError};
use verdict_tests::{at, fixtures, scratch_dir};

/// `rules` on `orders`; with a `mode`, the hostile guest in that mode on `hostile.>`.
fn config(state: &Path, mode: Option<&str>, admission: &str) -> GatewayConfig {
    let hostile_route = mode.map_or_else(String::new, |mode| {
        format!("[[routes]]\ntopic = \"hostile.>\"\npolicy = \"hostile\"\nconfig = {{ mode = \"{mode}\" }}\n")
    });
    let text = format!(
        r#"
[sandbox]
decide_timeout_ms = 1000
[storage]
dir = "{state}"
[admission]
{admission}
[policies.rules]
path = "{rules}"
[policies.hostile]
path = "{hostile}"
[[routes]]
topic = "orders"
policy = "rules"
config = {{ max_attempts = 3 }}
{hostile_route}
"#,
        state = state.display(),
        rules = fixtures::RULES,
        hostile = fixtures::HOSTILE,
    );
    GatewayConfig::parse(&text, "verdict.toml").unwrap()
}

#[test]
fn a_policy_that_traps_in_init_is_refused_and_the_old_one_keeps_deciding() {
    let state = scratch_dir("admission-init");
    let r = Registry::new(&config(&state, None, ""), Path::new("/")).unwrap();
    let err = r
        .reload(&config(&state, Some("trap-in-init"), ""), Path::new("/"))
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Route { index: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("hostile.>"), "{err}");
    assert_eq!(r.current().number, 1);
    assert!(r.decide("hostile.x", &at("db.timeout", 1)).is_none());
    assert_eq!(r.status().refused, 1);
}

#[test]
fn a_policy_that_fails_the_property_checks_is_refused_under_the_fuel_ceiling() {
    let state = scratch_dir("admission-properties");
    let admission = "fuel_per_decision = 200_000\nproperty_inputs = 4";
    let r = Registry::new(&config(&state, None, admission), Path::new("/")).unwrap();
    // `loop` accepts its config, then never returns from `decide`: fuel stops it, the
    // "contained" property fails, and the route is refused - however loaded the machine.
    let err = r
        .reload(&config(&state, Some("loop"), admission), Path::new("/"))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, RegistryError::Admission { policy, .. } if policy == "hostile"),
        "{text}"
    );
    assert!(
        text.contains("FAIL contained") && text.contains("fuel"),
        "{text}"
    );
    assert_eq!(r.current().number, 1);

    // With the property checks off, the same route goes live (and its fallback applies).
    let lax = config(
        &state,
        Some("loop"),
        "fuel_per_decision = 200_000\nproperties = false",
    );
    let r = Registry::new(&lax, Path::new("/")).unwrap();
    let d = r.decide("hostile.x", &at("db.timeout", 1)).unwrap();
    assert!(d.fallback.is_some(), "{d:?}");
}

#[test]
fn a_policy_whose_init_never_returns_is_refused_not_admitted_unchecked() {
    let state = scratch_dir("admission-unchecked");
    let admission = "fuel_per_decision = 200_000\nproperty_inputs = 4";
    let r = Registry::new(&config(&state, None, admission), Path::new("/")).unwrap();
    // `init` never returns: no property can run, and the route is refused with the cause.
    let err = r
        .reload(
            &config(&state, Some("loop-in-init"), admission),
            Path::new("/"),
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("hostile") && text.contains("init") && text.contains("timed out"),
        "{text}"
    );
    assert_eq!(r.current().number, 1);
    assert_eq!(r.status().refused, 1);
    assert!(r.decide("hostile.x", &at("db.timeout", 1)).is_none());
    assert!(r.decide("orders", &at("db.timeout", 1)).is_some());
}

#[test]
fn a_warm_restart_compiles_nothing_and_a_damaged_entry_is_rebuilt_not_trusted() {
    let state = scratch_dir("artifacts");
    let cfg = config(&state, None, "");
    let cold = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = cold.cache_stats();
    assert_eq!((stats.compiled, stats.hits, stats.rejected), (2, 0, 0));
    drop(cold);

    let warm = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = warm.cache_stats();
    assert_eq!((stats.compiled, stats.hits, stats.rejected), (0, 2, 0));
    drop(warm);

    // Damage every serving-engine entry: one bit flipped, one truncated.
    let mut entries: Vec<_> = std::fs::read_dir(state.join("artifacts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 2, "{entries:?}");
    for (i, entry) in entries.iter().enumerate() {
        let mut bytes = std::fs::read(entry).unwrap();
        if i % 2 == 0 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
        } else {
            bytes.truncate(bytes.len() / 3);
        }
        std::fs::write(entry, bytes).unwrap();
    }
    let repaired = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = repaired.cache_stats();
    assert_eq!(stats.hits, 0, "{stats:?}");
    assert_eq!((stats.compiled, stats.rejected), (2, 2), "{stats:?}");
    let d = repaired.decide("orders", &at("db.timeout", 3)).unwrap();
    assert_eq!(d.verdict.class, Class::Exhausted);
    drop(repaired);

    // The rebuilt entries are sound again.
    let again = Registry::new(&cfg, Path::new("/")).unwrap();
    assert_eq!(again.cache_stats().hits, 2);
}

/// Artifacts are authenticated with a key of the installation that wrote them: an entry
/// copied (or planted) from another state directory is rejected and recompiled, not loaded.
#[test]
fn an_artifact_from_another_installation_is_recompiled_not_trusted() {
    let here = scratch_dir("artifacts-here");
    let elsewhere = scratch_dir("artifacts-elsewhere");
    drop(Registry::new(&config(&elsewhere, None, ""), Path::new("/")).unwrap());
    let mut copied = 0;
    std::fs::create_dir_all(here.join("artifacts")).unwrap();
    for entry in std::fs::read_dir(elsewhere.join("artifacts")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            std::fs::copy(
                &path,
                here.join("artifacts").join(path.file_name().unwrap()),
            )
            .unwrap();
            copied += 1;
        }
    }
    assert!(copied >= 2, "{copied}");
    let r = Registry::new(&config(&here, None, ""), Path::new("/")).unwrap();
    let stats = r.cache_stats();
    assert_eq!(stats.hits, 0, "{stats:?}");
    assert_eq!((stats.compiled, stats.rejected), (2, 2), "{stats:?}");
    assert_ne!(
        std::fs::read(here.join("artifacts.key")).unwrap(),
        std::fs::read(elsewhere.join("artifacts.key")).unwrap()
    );
}

#[test]
fn operator_changes_survive_a_restart_until_the_file_changes_their_entry() {
    let state = scratch_dir("operator-journal");
    let cfg = config(&state, None, "");
    let r = Registry::new(&cfg, Path::new("/")).unwrap();
    let original = r
        .decide("orders", &at("db.timeout", 1))
        .unwrap()
        .provenance
        .sha256
        .clone();
    let upload = r
        .upload("rules", &verdict_tests::variant(fixtures::RULES, "v2"))
        .unwrap();
    r.activate("rules", &upload.provenance.sha256).unwrap();
    r.set_shadow(
        "orders",
        Some(verdict_host::ShadowConfig {
            policy: "rules".into(),
            config: Some(serde_json::json!({"max_attempts": 2})),
        }),
    )
    .unwrap();
    drop(r);

    // A restart keeps the activated upload and the shadow.
    let r = Registry::new(&cfg, Path::new("/")).unwrap();
    let g = r.current();
    assert_eq!(g.cause, "config file + operator changes");
    let d = r.decide("orders", &at("db.timeout", 1)).unwrap();
    assert_eq!(d.provenance.sha256, upload.provenance.sha256);
    assert_eq!(r.shadow_report().len(), 1);
    drop(r);

    // Once the file's own entry for the policy changes, the file speaks again.
    let mut edited = cfg.clone();
    edited.policies.get_mut("rules").unwrap().vectors =
        vec![fixtures::rules_vectors("limits.json")];
    let r = Registry::new(&edited, Path::new("/")).unwrap();
    let d = r.decide("orders", &at("db.timeout", 1)).unwrap();
    assert_eq!(d.provenance.sha256, original);
    assert_eq!(
        r.shadow_report().len(),
        1,
        "the shadow's route entry did not change"
    );
}
