//! The runtime is the embeddable layer: a consumer that takes it alone must not inherit an
//! async runtime, an HTTP stack, a database or a broker client. This asks Cargo for the
//! crate's real dependency tree, so a new dependency that drags one in fails here.

use std::process::Command;

/// Crates the runtime must never depend on, directly or through another crate.
const FORBIDDEN: [&str; 7] = [
    "tokio",
    "axum",
    "hyper",
    "rusqlite",
    "lapin",
    "async-nats",
    "reqwest",
];

#[test]
fn the_runtime_depends_on_no_async_runtime_http_stack_database_or_broker_client() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--package",
            "verdict-runtime",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"wasmtime"),
        "the tree should hold wasmtime, so the listing is real:\n{tree}"
    );
    let found: Vec<&&str> = FORBIDDEN.iter().filter(|f| crates.contains(f)).collect();
    assert!(
        found.is_empty(),
        "verdict-runtime depends on {found:?}; it must stay embeddable without them:\n{tree}"
    );
}
