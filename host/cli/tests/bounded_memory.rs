//! What a producer can make a gateway hold. Publishing to ever new subjects under a
//! wildcard route must not grow the gateway without bound: the per-topic delivery statistics
//! policies read are kept for at most 10,000 topics (`verdict_topics_tracked`).

mod common;

use std::time::Duration;

use common::nats::Nats;
use common::wait_until;
use verdict_cli::demo::{Behaviour, DemoConsumer};
use verdict_tests::gateway::{Route, TestConfig};

/// Distinct subjects published: more than the gateway keeps statistics for.
const SUBJECTS: usize = 12_000;

/// The gateway's resident memory (kB), from `/proc`.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn ever_new_subjects_under_a_wildcard_route_keep_statistics_for_at_most_10_000_topics() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = DemoConsumer::new(|_| Behaviour::Ok);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let consumer_url = format!("http://{}/", listener.local_addr().unwrap());
    let router = consumer.router();
    runtime.spawn(async move { axum::serve(listener, router).await });

    let nats = Nats::new("memory");
    let dir = common::scratch_with_rules("bounded-memory");
    let config = nats
        .configure(TestConfig::new().unset("admin.token_file"))
        .policy("rules", "rules.wasm")
        .route(
            Route::new(&nats.subject("ev.>"), "rules")
                .set("source", "nats")
                .consumer(&consumer_url),
        )
        .write_toml(&dir);
    let gw = common::run_logged(&config, &dir.join("gateway.log"));
    // The stream exists once the source is ready, not when the admin API answers.
    common::wait_ready(&gw.url);
    let pid = gw.child.id();
    let delivered = |n: usize| {
        wait_until(Duration::from_secs(120), || {
            common::metric_at(&gw.url, "verdict_deliveries_total{") >= n as u64
        })
    };

    for i in 0..1_000 {
        nats.publish(&format!("ev.s{i}"), &[format!("m{i}")]);
    }
    assert!(delivered(1_000), "the first thousand were not delivered");
    let early_kb = rss_kb(pid);
    for i in 1_000..SUBJECTS {
        nats.publish(&format!("ev.s{i}"), &[format!("m{i}")]);
    }
    assert!(delivered(SUBJECTS), "the {SUBJECTS} were not delivered");
    let late_kb = rss_kb(pid);
    let tracked = common::metric_at(&gw.url, "verdict_topics_tracked ");
    eprintln!(
        "{SUBJECTS} subjects: statistics kept for {tracked} topics; RSS {early_kb} kB after \
         1,000, {late_kb} kB after {SUBJECTS}"
    );
    assert!(
        (9_000..=10_000).contains(&tracked),
        "statistics kept for {tracked} topics"
    );
}
