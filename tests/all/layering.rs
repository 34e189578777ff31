//! The crates' layers, asked of Cargo: each crate's real dependency tree (normal edges, the
//! way a user of the crate gets it) holds nothing from a layer above it.
//!
//! - `verdict-runtime` is the embeddable layer: a consumer that takes it alone must not
//!   inherit an async runtime, an HTTP stack, a database or a broker client;
//! - `verdict-registry` (the control plane) neither: it reads files and decides;
//! - `verdict-gateway` may use all of those, but not the `verdict` binary's crate.

use std::process::Command;

/// What the runtime and the registry must never depend on, directly or not.
const MACHINERY: [&str; 7] = [
    "tokio",
    "axum",
    "hyper",
    "rusqlite",
    "lapin",
    "async-nats",
    "reqwest",
];

/// The crates in `package`'s dependency tree, itself included.
fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--package", package, "--edges", "normal"])
        .args(["--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let mut crates: Vec<String> = text
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    crates.sort();
    crates.dedup();
    crates
}

fn assert_free_of(package: &str, forbidden: &[&str], must_hold: &str) {
    let crates = tree(package);
    assert!(
        crates.iter().any(|c| c == must_hold),
        "{package}'s tree should hold {must_hold}, so the listing is real: {crates:?}"
    );
    let found: Vec<&&str> = forbidden
        .iter()
        .filter(|f| crates.iter().any(|c| c == **f))
        .collect();
    assert!(
        found.is_empty(),
        "{package} depends on {found:?}, which its layer must not: {crates:?}"
    );
}

#[test]
fn the_runtime_depends_on_no_async_runtime_http_stack_database_or_broker_client() {
    assert_free_of("verdict-runtime", &MACHINERY, "wasmtime");
}

#[test]
fn the_registry_depends_on_no_gateway_machinery() {
    let mut forbidden = MACHINERY.to_vec();
    forbidden.extend(["verdict-gateway", "verdict-cli"]);
    assert_free_of("verdict-registry", &forbidden, "verdict-runtime");
}

#[test]
fn the_gateway_does_not_depend_on_the_cli() {
    assert_free_of("verdict-gateway", &["verdict-cli"], "verdict-registry");
}
