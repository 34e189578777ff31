//! The same policy in three languages: `rules` in Rust, its Python port (componentize-py,
//! CPython inside) and its JavaScript port (ComponentizeJS, SpiderMonkey inside), through
//! the same host in the same run. For each: component size, cold load (compile, check,
//! first instance, describe), load from the artifact cache, instantiate (a fresh instance
//! plus `init`), resident memory per warm instance, and a warm instance's decision p50 and
//! p99; then each figure's ratio to Rust's. Then the fair floor: the same ports run by
//! their own interpreters with no Wasm (`benches/native/rules.py` under `python3`,
//! `benches/native/rules.mjs` under `node`, and under `node --jitless`, since the
//! component's SpiderMonkey cannot compile to machine code inside the sandbox), each
//! component's p50 against its interpreter's.
//!
//! Run: `cargo bench -p verdict-cli --bench languages` (componentize-py on PATH and
//! `npm ci` done in `policies/rules-js`; the components are built first, into the
//! benches' target directory).

mod common;

use common::percentiles;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use verdict_runtime::{Decider, Failure, FailureSpec, Host, Limits, TopicSettings};

/// Warm instances made to measure memory per instance.
const WARM: usize = 16;

struct Figures {
    name: &'static str,
    bytes: u64,
    cold_load: Duration,
    cached_load: Duration,
    instantiate: Duration,
    rss_per_instance: u64,
    p50: Duration,
    p99: Duration,
}

fn build(dir: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let options = verdict_componentize::BuildOptions {
        target_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../verdict-guests")),
        release: true,
        quiet: true,
    };
    verdict_componentize::build(&root.join(dir), &options)
        .unwrap_or_else(|e| panic!("{dir} builds: {e}"))
        .component
}

fn failure() -> Failure {
    FailureSpec::from_json(
        &json!({
            "topic": "payments.captured", "message-id": "m-000123", "attempt": 2,
            "now-ms": 61_000, "jitter-seed": 42, "error": {"kind": "db.timeout"}
        })
        .to_string(),
    )
    .expect("a valid failure")
    .into_failure()
}

/// Resident set size of this process, from /proc (0 where it is not available).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn measure(name: &'static str, component: &Path) -> Figures {
    let limits = Limits::new();
    let bytes = std::fs::metadata(component).expect("the component").len();
    let cold_host = Host::new(&limits).expect("valid limits");
    let start = Instant::now();
    cold_host.load_file(component).expect("the component loads");
    let cold_load = start.elapsed();

    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-languages-{name}"));
    let _ = std::fs::remove_dir_all(&cache);
    Host::with_artifact_cache(&limits, Some(cache.clone()))
        .expect("valid limits")
        .load_file(component)
        .expect("the component loads");
    let warm_host = Host::with_artifact_cache(&limits, Some(cache)).expect("valid limits");
    let start = Instant::now();
    let policy = warm_host
        .load_file(component)
        .expect("the component loads from the cache");
    let cached_load = start.elapsed();

    let config = r#"{"max_attempts": 5}"#;
    let mut times: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            policy
                .configure(config, TopicSettings::default())
                .expect("the config is valid");
            start.elapsed()
        })
        .collect();
    times.sort();
    let instantiate = times[times.len() / 2];

    let f = failure();
    let before = rss_bytes();
    let deciders: Vec<Decider> = (0..WARM)
        .map(|_| {
            let d = policy
                .configure(config, TopicSettings::default())
                .expect("valid");
            d.decide(&f);
            d
        })
        .collect();
    let rss_per_instance = rss_bytes().saturating_sub(before) / WARM as u64;

    let decider = &deciders[0];
    for _ in 0..200 {
        decider.decide(&f);
    }
    let (p50, p99) = percentiles(1, 5_000, || {
        std::hint::black_box(decider.decide(&f));
    });
    Figures {
        name,
        bytes,
        cold_load,
        cached_load,
        instantiate,
        rss_per_instance,
        p50,
        p99,
    }
}

/// p50 and p99 of the same decision run natively by `program` on the script in
/// `benches/native/`: what the script prints (`{"p50_ns": .., "p99_ns": ..}`).
fn native(program: &str, args: &[&str]) -> Option<(Duration, Duration)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/native");
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(&dir)
        .output()
        .map_err(|e| eprintln!("{program} {args:?}: {e}"))
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let ns = |key: &str| line[key].as_u64().map(Duration::from_nanos);
    Some((ns("p50_ns")?, ns("p99_ns")?))
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".into()
    } else {
        format!("{:.1}x", a / b)
    }
}

fn main() {
    let figures = [
        measure("rust", &build("policies/rules")),
        measure("python", &build("policies/rules-py")),
        measure("javascript", &build("policies/rules-js")),
    ];
    let rust = &figures[0];
    println!(
        "| language | size | cold load | load from cache | instantiate + init | memory per warm instance | decide p50 | decide p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for f in &figures {
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        let us = |d: Duration| format!("{:.1} us", d.as_secs_f64() * 1e6);
        let x = |a: Duration, b: Duration| ratio(a.as_secs_f64(), b.as_secs_f64());
        println!(
            "| {} | {:.1} MiB ({}) | {} ({}) | {} ({}) | {} ({}) | {:.1} MiB ({}) | {} ({}) | {} ({}) |",
            f.name,
            f.bytes as f64 / 1_048_576.0,
            ratio(f.bytes as f64, rust.bytes as f64),
            ms(f.cold_load),
            x(f.cold_load, rust.cold_load),
            ms(f.cached_load),
            x(f.cached_load, rust.cached_load),
            us(f.instantiate),
            x(f.instantiate, rust.instantiate),
            f.rss_per_instance as f64 / 1_048_576.0,
            ratio(f.rss_per_instance as f64, rust.rss_per_instance as f64),
            us(f.p50),
            x(f.p50, rust.p50),
            us(f.p99),
            x(f.p99, rust.p99),
        );
    }
    println!();
    println!(
        "| port | component p50 / p99 | run natively by | native p50 / p99 | component / native at p50 |"
    );
    println!("|---|---|---|---|---|");
    let us = |d: Duration| format!("{:.1} us", d.as_secs_f64() * 1e6);
    for (f, program, args) in [
        (&figures[1], "python3", ["rules.py"].as_slice()),
        (&figures[2], "node", ["rules.mjs"].as_slice()),
        (&figures[2], "node", ["--jitless", "rules.mjs"].as_slice()),
    ] {
        let by = std::iter::once(program).chain(args[..args.len() - 1].iter().copied());
        let by = by.collect::<Vec<_>>().join(" ");
        match native(program, args) {
            Some((n50, n99)) => println!(
                "| {} | {} / {} | {by} | {} / {} | {} |",
                f.name,
                us(f.p50),
                us(f.p99),
                us(n50),
                us(n99),
                ratio(f.p50.as_secs_f64(), n50.as_secs_f64()),
            ),
            None => println!(
                "| {} | {} / {} | {by} | (did not run) | - |",
                f.name,
                us(f.p50),
                us(f.p99)
            ),
        }
    }
}
