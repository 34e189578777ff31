//! Hot reload and parallelism, through the registry a gateway runs:
//!
//! - time from a new component on disk to active: a digest never seen (compile + the whole
//!   admission gate), a digest seen before (the registry reuses what it admitted), and a
//!   fresh start whose artifact cache holds it (what a restart or a second gateway pays);
//! - decisions/s on one thread while the policy is reloaded once a second, against the same
//!   thread without reloads;
//! - decisions/s with one and with two threads deciding (this machine has two cores).
//!
//! Run: `cargo bench -p verdict-cli --bench reload`. Plain timing, not criterion: each
//! figure is one wall-clock measurement of a whole operation, printed with its baseline.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use verdict_registry::Registry;
use verdict_runtime::{Failure, FailureSpec};

/// The `rules` component with a custom section appended: same behaviour, new digest.
fn variant(rules: &[u8], tag: usize) -> Vec<u8> {
    let mut bytes = rules.to_vec();
    let name = format!("variant-{tag}");
    bytes.push(0);
    bytes.push(u8::try_from(name.len() + 1).expect("short name"));
    bytes.push(u8::try_from(name.len()).expect("short name"));
    bytes.extend_from_slice(name.as_bytes());
    bytes
}

const CONFIG: &str = r#"
[sandbox]
decide_timeout_ms = 1000
[policies.rules]
path = "rules.wasm"
[[routes]]
topic = "orders"
policy = "rules"
config = { max_attempts = 5 }
"#;

fn failure() -> Failure {
    FailureSpec::from_json(
        &json!({
            "topic": "orders", "message-id": "m-1", "attempt": 2, "first-failed-at-ms": 1_000,
            "now-ms": 61_000, "jitter-seed": 42,
            "error": {"kind": "db.timeout", "message": "i/o timeout"}
        })
        .to_string(),
    )
    .expect("bench failure")
    .into_failure()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1_000.0)
}

/// Swap `rules.wasm` for `bytes` and reload; the time until the new generation is active.
fn swap(registry: &Registry, dir: &Path, bytes: &[u8]) -> Duration {
    std::fs::write(dir.join("rules.wasm"), bytes).expect("writing the component");
    let t = Instant::now();
    registry
        .reload_file(&dir.join("verdict.toml"))
        .expect("the reload is admitted");
    t.elapsed()
}

/// Decisions made on `threads` threads in `window`.
fn decisions_per_s(registry: &Arc<Registry>, threads: usize, window: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (registry, stop) = (registry.clone(), stop.clone());
            std::thread::spawn(move || {
                let f = failure();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    black_box(registry.decide("orders", black_box(&f)));
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    let total: u64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    total as f64 / window.as_secs_f64()
}

fn main() {
    let rules = std::fs::read(common::component("policies/rules")).expect("rules builds");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-reload");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    std::fs::write(dir.join("verdict.toml"), CONFIG).expect("config");
    std::fs::write(dir.join("rules.wasm"), variant(&rules, 0)).expect("component");
    let config = verdict_registry::GatewayConfig::load(&dir.join("verdict.toml")).expect("config");
    let registry = Arc::new(Registry::new(&config, &dir).expect("registry"));

    // New digests each time: compile + admission.
    let cold: Vec<Duration> = (1..=3)
        .map(|i| swap(&registry, &dir, &variant(&rules, i)))
        .collect();
    // Back to a digest this registry admitted before.
    let seen: Vec<Duration> = (1..=3)
        .map(|i| swap(&registry, &dir, &variant(&rules, i)))
        .collect();
    // A new registry (a restart, another gateway) over the same state dir: the compiled
    // artifact and the passed checks come from disk.
    let cached: Vec<Duration> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let fresh = Registry::new(&config, &dir).expect("restart");
            let took = t.elapsed();
            assert_eq!(fresh.current().routes.len(), 1);
            took
        })
        .collect();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (cold, seen, cached) = (median(cold), median(seen), median(cached));
    println!("\nreload (new component on disk -> active, median of 3):");
    println!("  never seen (compile + admission)  {:>10}", ms(cold));
    println!("  seen before by this registry      {:>10}", ms(seen));
    println!(
        "  fresh start from the artifact cache {:>8}   ({:.0}x faster than cold)",
        ms(cached),
        cold.as_secs_f64() / cached.as_secs_f64().max(1e-9)
    );

    // Decisions/s without reloads, then while reloading once a second.
    let window = Duration::from_secs(3);
    let quiet = decisions_per_s(&registry, 1, window);
    let reloading = Arc::new(AtomicBool::new(true));
    let reloader = {
        let (registry, dir, rules, reloading) = (
            registry.clone(),
            dir.clone(),
            rules.clone(),
            reloading.clone(),
        );
        std::thread::spawn(move || {
            let mut i = 100;
            while reloading.load(Ordering::Relaxed) {
                swap(&registry, &dir, &variant(&rules, i));
                i += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let busy = decisions_per_s(&registry, 1, window);
    reloading.store(false, Ordering::Relaxed);
    reloader.join().expect("reloader");
    println!(
        "\ndecisions/s on one thread (same run, {}s windows):",
        window.as_secs()
    );
    println!("  no reloads                  {quiet:>12.0}");
    println!(
        "  reloading once a second     {busy:>12.0}   ({:.2} of the quiet rate; each reload \
         compiles a new digest on the other core)",
        busy / quiet
    );

    // One thread against two.
    let one = decisions_per_s(&registry, 1, window);
    let two = decisions_per_s(&registry, 2, window);
    println!("\ndecisions/s by threads deciding (same run):");
    println!("  1 thread   {one:>12.0}");
    println!("  2 threads  {two:>12.0}   ({:.2}x)", two / one);
}
