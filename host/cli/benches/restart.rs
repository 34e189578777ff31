//! Cold vs warm start of a gateway's registry: N policies (variants of the four shipped
//! ones, so every component has its own digest), each on its own route, through the whole
//! admission gate. Cold: an empty state directory (compile everything, run every check).
//! Warm: the state a previous start left (compiled artifacts, the admission ledger).
//!
//! `cargo bench -p verdict-cli --bench restart` (N from `VERDICT_BENCH_POLICIES`, default 16)

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use verdict_registry::{GatewayConfig, Registry};

const POLICIES: [&str; 4] = ["rules", "rocketmq", "adaptive", "payments"];

fn components() -> Vec<PathBuf> {
    POLICIES
        .iter()
        .map(|name| common::component(&format!("policies/{name}")))
        .collect()
}

/// The component with a custom section appended: same behaviour, new digest.
fn variant(path: &Path, tag: usize) -> Vec<u8> {
    let mut bytes = std::fs::read(path).expect("component");
    let name = format!("variant-{tag}");
    bytes.push(0);
    bytes.push(u8::try_from(name.len() + 1).expect("short name"));
    bytes.push(u8::try_from(name.len()).expect("short name"));
    bytes.extend_from_slice(name.as_bytes());
    bytes
}

fn write_config(dir: &Path, n: usize) -> GatewayConfig {
    let mut text = String::from("[sandbox]\ndecide_timeout_ms = 1000\n");
    let sources = components();
    for i in 0..n {
        let file = dir.join(format!("p{i}.wasm"));
        std::fs::write(&file, variant(&sources[i % sources.len()], i)).expect("writing");
        text += &format!("[policies.p{i}]\npath = \"p{i}.wasm\"\n");
    }
    for i in 0..n {
        text += &format!("[[routes]]\ntopic = \"t{i}\"\npolicy = \"p{i}\"\n");
    }
    GatewayConfig::parse(&text, "restart.toml").expect("config")
}

fn start(config: &GatewayConfig, dir: &Path) -> Duration {
    let t = Instant::now();
    let registry = Registry::new(config, dir).expect("registry starts");
    let elapsed = t.elapsed();
    assert_eq!(registry.current().routes.len(), config.routes.len());
    elapsed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("VERDICT_BENCH_POLICIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let dir = std::env::temp_dir().join(format!("verdict-bench-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let config = write_config(&dir, n);
    let state = dir.join(&config.storage.dir);
    let runs = 3;
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..runs {
        let _ = std::fs::remove_dir_all(&state);
        cold.push(start(&config, &dir));
        warm.push(start(&config, &dir));
    }
    let (cold, warm) = (median(cold), median(warm));
    println!(
        "registry start, {n} policies ({n} routes, full admission gate), median of {runs}:\n  \
         cold (empty state dir): {:>8.1} ms\n  warm (artifact cache + admission ledger): {:>8.1} ms\n  \
         ratio: {:.1}x faster warm",
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3,
        cold.as_secs_f64() / warm.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
