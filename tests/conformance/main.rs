//! Data-driven conformance tests: one named test per vector file of every shipped policy,
//! one per policy for the property checks, and the checked-in schemas (vector files,
//! `verdict.toml`) kept current. `harness = false`
//! with libtest-mimic, so `cargo test` filters and reports these like any other test.
//!
//! `VERDICT_BLESS=1 cargo test -p verdict-tests --test conformance` rewrites the checked-in
//! schema on purpose.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};
use verdict_registry::conformance::{metered_limits, vector_schema};
use verdict_runtime::Host;
use verdict_tests::{conformance, fixtures};

const POLICIES: [(&str, &str); 4] = [
    ("rules", fixtures::RULES),
    ("rocketmq", fixtures::ROCKETMQ),
    ("adaptive", fixtures::ADAPTIVE),
    ("payments", fixtures::PAYMENTS),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn metered_host() -> Host {
    Host::new(&metered_limits(10_000_000)).expect("limits are valid")
}

fn vector_file(component: &'static str, file: PathBuf) -> Result<(), Failed> {
    let policy = metered_host()
        .load_file(component.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(conformance::vector_file(&policy, &file)?)
}

fn properties(component: &'static str) -> Result<(), Failed> {
    let policy = metered_host()
        .load_file(component.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(conformance::properties(&policy)?)
}

fn schema_is_current(relative: &str, schema: serde_json::Value) -> Result<(), Failed> {
    let path = root().join(relative);
    let generated = serde_json::to_string_pretty(&schema).map_err(|e| e.to_string())? + "\n";
    if std::env::var_os("VERDICT_BLESS").is_some() {
        std::fs::write(&path, &generated).map_err(|e| e.to_string())?;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        return Err(format!(
            "{} is stale: run `VERDICT_BLESS=1 cargo test -p verdict-tests --test conformance`",
            path.display()
        )
        .into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![
        Trial::test("schema::vectors_schema_is_current", || {
            schema_is_current("tests/conformance/vectors.schema.json", vector_schema())
        }),
        Trial::test("schema::gateway_config_schema_is_current", || {
            schema_is_current(
                "host/registry/verdict.schema.json",
                verdict_registry::GatewayConfig::schema(),
            )
        }),
    ];
    for (name, component) in POLICIES {
        let dir = root().join("policies").join(name).join("vectors");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        if files.is_empty() {
            trials.push(Trial::test(
                format!("vectors::{name}::present"),
                move || Err(format!("no vector files in {}", dir.display()).into()),
            ));
        }
        for file in files {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            trials.push(Trial::test(format!("vectors::{name}::{stem}"), move || {
                vector_file(component, file)
            }));
        }
        trials.push(Trial::test(format!("properties::{name}"), move || {
            properties(component)
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
