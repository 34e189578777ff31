//! The crates' layers, asked of Cargo: each crate's real dependency tree (normal edges, the
//! way a user of the crate gets it) holds nothing from a layer above it.
//!
//! - `verdict-runtime` is the embeddable layer: a consumer that takes it alone must not
//!   inherit an async runtime, an HTTP stack, a database or a broker client;
//! - `verdict-registry` (the control plane) neither: it reads files and decides;
//! - `verdict-store` holds the databases' drivers and nothing of the network above them: no
//!   HTTP stack, no broker client, nothing of the gateway;
//! - `verdict-telemetry` (traces out) knows the wire to a collector and nothing of the
//!   gateway: no store, no broker client, no control plane, no HTTP server;
//! - `verdict-gateway` may use all of those, but not the `verdict` binary's crate.

use std::process::Command;

/// What the runtime and the registry must never depend on, directly or not.
const MACHINERY: [&str; 9] = [
    "tokio",
    "axum",
    "hyper",
    "rusqlite",
    "lapin",
    "async-nats",
    "reqwest",
    "tonic",
    "opentelemetry_sdk",
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
fn the_store_depends_on_no_http_stack_broker_client_or_layer_above_it() {
    assert_free_of(
        "verdict-store",
        &[
            "axum",
            "hyper",
            "reqwest",
            "lapin",
            "async-nats",
            "verdict-gateway",
            "verdict-cli",
        ],
        "rusqlite",
    );
}

#[test]
fn telemetry_depends_on_nothing_of_the_gateway() {
    assert_free_of(
        "verdict-telemetry",
        &[
            "verdict-registry",
            "verdict-store",
            "verdict-gateway",
            "verdict-cli",
            "rusqlite",
            "lapin",
            "async-nats",
            "axum",
        ],
        "opentelemetry_sdk",
    );
}

#[test]
fn the_gateway_does_not_depend_on_the_cli() {
    assert_free_of("verdict-gateway", &["verdict-cli"], "verdict-registry");
}

/// The top-level modules of `crate_dir/src` and, for each, the others it names as
/// `crate::<module>` (in code or docs: a doc link is a dependency a reader follows too).
fn module_graph(crate_dir: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&src).expect("the crate's src") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or("");
        if name == "lib" || name == "main" {
            continue;
        }
        files.push((name.to_string(), path));
    }
    let modules: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    let mut graph = std::collections::BTreeMap::new();
    for (name, path) in &files {
        let mut text = String::new();
        let mut stack = vec![path.clone()];
        while let Some(p) = stack.pop() {
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else if p.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
        let uses = modules
            .iter()
            .filter(|m| *m != name && text.contains(&format!("crate::{m}")))
            .cloned()
            .collect();
        graph.insert(name.clone(), uses);
    }
    graph
}

/// A cycle in `graph`, if it has one.
fn cycle(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_a_cycle_between_its_top_level_modules() {
    for dir in [
        "host/runtime",
        "host/registry",
        "host/store",
        "host/gateway",
        "host/cli",
    ] {
        let graph = module_graph(dir);
        assert!(graph.len() > 3, "{dir}: too few modules read: {graph:?}");
        if let Some(found) = cycle(&graph) {
            panic!(
                "{dir}: the modules {} name each other in a cycle",
                found.join(" -> ")
            );
        }
    }
}
