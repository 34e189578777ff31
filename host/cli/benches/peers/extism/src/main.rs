//! Verdict vs Extism on the same decision logic, side by side in one process.
//!
//! The `rules` policy crate is built twice: as the component Verdict loads, and as an
//! Extism plugin (`plugin/`, MessagePack in and out, extism-pdk) - what a team would most
//! likely write if it picked Extism instead. Both decide the same failure; the same logic
//! called natively is the floor. p50 and p99 per decision over 200 batches. Verdict is
//! measured twice: one decision per call, and per decision of a batch of 32 in one call
//! (contract 0.2's `decide-batch`, as the gateway hands over failures that waited together);
//! Extism has no batch call, so its one-per-call figure is compared with both.
//!
//! ```sh
//! cd host/cli/benches/peers/extism && env -u RUST_BACKTRACE cargo run --release
//! ```
//!
//! Run it with `RUST_BACKTRACE` unset: Extism builds an error backtrace on every call when
//! it is set, which more than doubles its cost and would flatter Verdict.

#[path = "../../../common/timing.rs"]
mod timing;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use extism::{Function, PluginBuilder, UserData, ValType};
use serde::Serialize;
use timing::percentiles;
use verdict_runtime::{FailureSpec, Host, Limits, TopicSettings};

const CONFIG: &str = r#"{"max_attempts": 5}"#;
/// Failures per `decide-batch` call in the batched measurement.
const BATCH: u32 = 32;
const KIND: &str = "db.timeout";
const PAYLOAD: &str = r#"{"schema_version":2,"amount":129.5,"currency":"EUR","order":"o-7781","customer":"c-1203","items":[{"sku":"A-1","qty":2},{"sku":"B-9","qty":1}]}"#;

/// The plugin's input (its `Input`, by field name).
#[derive(Serialize)]
struct Input<'a> {
    config: &'a str,
    kind: &'a str,
    attempt: u32,
    first_failed_at_ms: u64,
    now_ms: u64,
    jitter_seed: u64,
    topic: &'a str,
    message_id: &'a str,
    message: &'a str,
    history: Vec<(u64, &'a str, &'a str)>,
    headers: Vec<(&'a str, &'a str)>,
    #[serde(with = "serde_bytes_compat")]
    payload: &'a [u8],
    stats: (u64, u32, u32, u32),
}

/// MessagePack `bin` for the payload, as `Vec<u8>` deserialises from it.
mod serde_bytes_compat {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(bytes)
    }
}

fn input() -> Input<'static> {
    Input {
        config: CONFIG,
        kind: KIND,
        attempt: 2,
        first_failed_at_ms: 1_000,
        now_ms: 61_000,
        jitter_seed: 42,
        topic: "payments.captured",
        message_id: "m-000123",
        message: "dial tcp 10.0.0.7:5432: i/o timeout",
        history: vec![(1_000, KIND, "dial tcp: i/o timeout")],
        headers: vec![("traceparent", "00-abc-def-01")],
        payload: PAYLOAD.as_bytes(),
        stats: (60_000, 200, 30, 2),
    }
}

fn host_failure() -> verdict_runtime::Failure {
    FailureSpec::from_json(
        &serde_json::json!({
            "topic": "payments.captured", "message-id": "m-000123", "consumer-group": "capture",
            "attempt": 2, "first-failed-at-ms": 1_000, "now-ms": 61_000, "jitter-seed": 42,
            "error": {"kind": KIND, "message": "dial tcp 10.0.0.7:5432: i/o timeout"},
            "history": [{"at-ms": 1_000, "kind": KIND, "message": "dial tcp: i/o timeout"}],
            "headers": {"traceparent": "00-abc-def-01"},
            "payload": PAYLOAD,
            "stats": {"window-ms": 60_000, "deliveries": 200, "failures": 30, "consecutive-failures": 2}
        })
        .to_string(),
    )
    .expect("bench failure is valid")
    .into_failure()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../..")
}

/// The plugin, built for wasm32-unknown-unknown in a target dir of its own.
fn plugin_wasm() -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin");
    let target = root().join("target/peers-plugin");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the Extism plugin builds");
    std::fs::read(target.join("wasm32-unknown-unknown/release/rules_extism_plugin.wasm"))
        .expect("the plugin")
}

/// The SDK's host imports, which the plugin links but never calls (its failure is built
/// natively): Extism must still be given something to link.
fn unused_imports() -> Vec<Function> {
    let ns = "verdict:policy/host@0.2.0";
    let refuse = |name: &str, params: Vec<ValType>, results: Vec<ValType>| {
        let name = name.to_string();
        Function::new(
            name.clone(),
            params,
            results,
            UserData::new(()),
            move |_, _, _, _| Err(extism::Error::msg(format!("{name} is not provided"))),
        )
        .with_namespace(ns)
    };
    // Contract 0.2: `log`, the `details` resource's constructor, its methods (the handle and
    // the failure's position first, then a return area for anything that is not a number)
    // and its drop.
    let mut f = vec![
        refuse("log", vec![ValType::I32; 3], vec![]),
        refuse("[constructor]details", vec![], vec![ValType::I32]),
        refuse("[resource-drop]details", vec![ValType::I32], vec![]),
        refuse(
            "[method]details.payload-size",
            vec![ValType::I32; 2],
            vec![ValType::I32],
        ),
        refuse(
            "[method]details.first-failed-at-ms",
            vec![ValType::I32; 2],
            vec![ValType::I64],
        ),
        refuse("[method]details.extension", vec![ValType::I32; 5], vec![]),
    ];
    for name in [
        "headers",
        "history",
        "message-id",
        "content-type",
        "error-message",
        "consumer-group",
        "published-at-ms",
        "topic",
        "payload",
    ] {
        f.push(refuse(
            &format!("[method]details.{name}"),
            vec![ValType::I32; 3],
            vec![],
        ));
    }
    f
}

fn main() {
    if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
        eprintln!("note: RUST_BACKTRACE is set; Extism's figures include a backtrace per call");
    }
    let options = verdict_componentize::BuildOptions {
        target_dir: Some(root().join("target/verdict-guests")),
        release: true,
        quiet: true,
    };
    let component = verdict_componentize::build_crate(&root().join("policies/rules"), &options)
        .expect("rules builds")
        .component;
    let host = Host::new(&Limits::new()).expect("default limits");
    let decider = host
        .load_file(&component)
        .expect("loads")
        .configure(CONFIG, TopicSettings::default())
        .expect("configures");
    let failure = host_failure();

    let mut plugin = PluginBuilder::new(plugin_wasm())
        .with_wasi(false)
        .with_functions(unused_imports())
        .build()
        .expect("the Extism plugin loads");
    let request = rmp_serde::to_vec_named(&input()).expect("msgpack");
    let mut call = || -> verdict_runtime::Verdict {
        let out: Vec<u8> = plugin.call("decide", request.as_slice()).expect("decide");
        rmp_serde::from_slice(&out).expect("a msgpack verdict")
    };
    // Same logic, same answer.
    let ours = decider.decide(&failure).verdict;
    let theirs = call();
    assert_eq!(ours.action, theirs.action, "both runtimes decide alike");

    let native: rules::Rules = verdict_sdk::instantiate(CONFIG).expect("config");
    let (n50, n99) = {
        use verdict_sdk::Policy as _;
        let nf = verdict_sdk::Failure::new(KIND)
            .with_attempt(2)
            .with_first_failed_at_ms(1_000)
            .with_now_ms(61_000)
            .with_jitter_seed(42)
            .with_payload(PAYLOAD.as_bytes().to_vec());
        percentiles(2_000, 200, || {
            black_box(native.decide(black_box(&nf)));
        })
    };
    let (v50, v99) = percentiles(500, 200, || {
        black_box(decider.decide(black_box(&failure)));
    });
    let batch: Vec<verdict_runtime::Failure> = (0..BATCH).map(|_| failure.clone()).collect();
    let (b50, b99) = percentiles(20, 200, || {
        black_box(decider.decide_batch(black_box(&batch)));
    });
    let (b50, b99) = (b50 / BATCH, b99 / BATCH);
    let (e50, e99) = percentiles(100, 200, || {
        black_box(call());
    });
    let us = |d: Duration| format!("{:.2} µs", d.as_secs_f64() * 1e6);
    println!("\nrules, one decision (same run; p50 / p99 over 200 batches):");
    println!(
        "  native (no sandbox)        {:>10} / {:>10}",
        us(n50),
        us(n99)
    );
    println!(
        "  verdict (component)        {:>10} / {:>10}",
        us(v50),
        us(v99)
    );
    println!(
        "  verdict (batch of {BATCH}, each) {:>10} / {:>10}",
        us(b50),
        us(b99)
    );
    println!(
        "  extism (msgpack plugin)    {:>10} / {:>10}",
        us(e50),
        us(e99)
    );
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "  extism / verdict at p50: {:.1}x one per call, {:.1}x batched   verdict / native: {:.1}x one per call, {:.1}x batched",
        ratio(e50, v50),
        ratio(e50, b50),
        ratio(v50, n50),
        ratio(b50, n50)
    );
}
