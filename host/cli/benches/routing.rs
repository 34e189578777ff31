//! Routing cost: resolving a topic to its route with 1, 100 and 10,000 routes, exact
//! (`t42.orders`) and wildcard (`t42.>`, `t42.*.events`), and a miss that falls to the
//! default route. The router is a hash map for exact topics and a token trie for patterns,
//! so the cost should not grow with the number of routes; the summary prints each size's
//! cost against one route's, measured in this same run.
//!
//! Run: `cargo bench -p verdict-cli --bench routing`.

mod common;

use std::hint::black_box;
use std::time::Duration;

use common::{ns, percentiles};
use criterion::{Criterion, criterion_group};
use verdict_registry::{Router, TopicPattern};

const SIZES: [usize; 3] = [1, 100, 10_000];

/// The kinds of lookup measured: the router's patterns for `n` routes, and a topic to
/// resolve (one in the middle of the set).
struct Shape {
    name: &'static str,
    patterns: fn(usize) -> Vec<String>,
    topic: fn(usize) -> String,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "exact",
        patterns: |n| (0..n).map(|i| format!("t{i}.orders")).collect(),
        topic: |n| format!("t{}.orders", n / 2),
    },
    Shape {
        name: "rest-wildcard",
        patterns: |n| (0..n).map(|i| format!("t{i}.>")).collect(),
        topic: |n| format!("t{}.eu.orders.created", n / 2),
    },
    Shape {
        name: "star-wildcard",
        patterns: |n| (0..n).map(|i| format!("t{i}.*.events")).collect(),
        topic: |n| format!("t{}.eu.events", n / 2),
    },
    Shape {
        name: "miss-to-default",
        patterns: |n| {
            let mut p: Vec<String> = (0..n).map(|i| format!("t{i}.*.events")).collect();
            p.push(">".into());
            p
        },
        topic: |_| "unrouted.topic.with.many.tokens".into(),
    },
];

fn router(patterns: &[String]) -> Router {
    let parsed: Vec<TopicPattern> = patterns
        .iter()
        .map(|p| TopicPattern::parse(p).expect("bench patterns are valid"))
        .collect();
    let default = patterns.iter().position(|p| p == ">");
    Router::new(parsed, default).expect("bench patterns are unambiguous")
}

fn bench(c: &mut Criterion) {
    for shape in &SHAPES {
        let mut group = c.benchmark_group(format!("route/{}", shape.name));
        for n in SIZES {
            let router = router(&(shape.patterns)(n));
            let topic = (shape.topic)(n);
            assert!(router.resolve(&topic).is_some(), "{} {n}", shape.name);
            group.bench_function(n.to_string(), |b| {
                b.iter(|| router.resolve(black_box(&topic)));
            });
        }
        group.finish();
    }
}

fn summary() {
    println!(
        "\nsummary (same run; p50 per lookup over 200 batches of 2,000; ratio = n routes / 1 route):"
    );
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "lookup", "1", "100", "10000", "100/1", "10000/1"
    );
    for shape in &SHAPES {
        let p50: Vec<_> = SIZES
            .iter()
            .map(|&n| {
                let router = router(&(shape.patterns)(n));
                let topic = (shape.topic)(n);
                percentiles(2_000, 200, || {
                    black_box(router.resolve(black_box(&topic)));
                })
                .0
            })
            .collect();
        let ratio = |i: usize| p50[i].as_secs_f64() / p50[0].as_secs_f64().max(1e-12);
        println!(
            "{:<16} {:>10} {:>10} {:>10} {:>7.2}x {:>7.2}x",
            shape.name,
            ns(p50[0]),
            ns(p50[1]),
            ns(p50[2]),
            ratio(1),
            ratio(2)
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
