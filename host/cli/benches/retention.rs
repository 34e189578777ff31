//! The embedded store after a million messages: what `/metrics` pays for the message
//! counts (the counters the store keeps, against the `COUNT(*) ... GROUP BY state` scan they
//! replace, in the same run), and the database's size before and after retention prunes
//! the delivered messages - and after a second million, which reuses the pages pruning
//! freed.
//!
//! `cargo bench -p verdict-cli --bench retention` (`VERDICT_BENCH_MESSAGES` to change the
//! million). Run without `RUST_BACKTRACE`.

use std::path::Path;
use std::time::{Duration, Instant};

use verdict_gateway::model::Settlement;
use verdict_gateway::store::{NewMessage, Store};

const BATCH: usize = 10_000;

fn main() {
    let n: usize = std::env::var("VERDICT_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("verdict-bench-retention-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("verdict.db");
    let store = Store::open(&path).unwrap();

    let started = Instant::now();
    through(&store, n, 0, 1_000);
    let first = started.elapsed();
    let (counters, scan) = count_costs(&store, &path);
    let full = size(&path);

    let started = Instant::now();
    let pruned = store.prune(u64::MAX / 2, 1_000).unwrap();
    let pruning = started.elapsed();
    checkpoint(&path);
    let after_prune = size(&path);
    let (counters_after, scan_after) = count_costs(&store, &path);

    through(&store, n, n, 2_000_000_000);
    checkpoint(&path);
    let second = size(&path);

    println!(
        "{n} messages published and delivered in {first:.1?} ({:.0}/s)",
        n as f64 / first.as_secs_f64()
    );
    println!();
    println!("| | message counts (median) | scan it replaces | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| {n} delivered rows | {counters:.1?} | {scan:.1?} | {:.0}x |",
        scan.as_secs_f64() / counters.as_secs_f64()
    );
    println!(
        "| after pruning | {counters_after:.1?} | {scan_after:.1?} | {:.0}x |",
        scan_after.as_secs_f64() / counters_after.as_secs_f64()
    );
    println!();
    println!("| database (file + WAL) | MiB |");
    println!("|---|---|");
    println!("| after {n} messages | {:.1} |", mib(full));
    println!(
        "| after pruning {} messages and {} audit rows in {pruning:.1?} | {:.1} (pages freed for reuse) |",
        pruned.messages,
        pruned.audit,
        mib(after_prune)
    );
    println!(
        "| after {n} more, before their pruning | {:.1} |",
        mib(second)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Publish `n` messages (ids from `first`) at `at_ms` and deliver them all.
fn through(store: &Store, n: usize, first: usize, at_ms: u64) {
    let topics = [(vec!["orders".to_string()], BATCH)];
    let mut done = 0;
    while done < n {
        let count = BATCH.min(n - done);
        let batch: Vec<NewMessage> = (first + done..first + done + count)
            .map(|i| NewMessage {
                id: format!("m-{i}"),
                topic: "orders".into(),
                payload: format!(r#"{{"order": {i}, "note": "a payload of a typical size"}}"#)
                    .into_bytes(),
                ..NewMessage::default()
            })
            .collect();
        store.publish(&batch, at_ms).unwrap();
        let claimed = store.claim(at_ms, &topics, 60_000).unwrap();
        let delivered: Vec<_> = claimed
            .iter()
            .map(|c| (c.seq, c.lease, &Settlement::Delivered))
            .collect();
        store.settle(&delivered, at_ms).unwrap();
        done += count;
    }
}

/// Median cost of the counts `/metrics` reads, and of the scan they replace.
fn count_costs(store: &Store, path: &Path) -> (Duration, Duration) {
    let counters = median(51, || {
        store.counts().unwrap();
    });
    let conn = rusqlite::Connection::open(path).unwrap();
    let scan = median(11, || {
        let mut stmt = conn
            .prepare_cached("SELECT state, COUNT(*) FROM messages GROUP BY state")
            .unwrap();
        let rows: Vec<(String, u64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        std::hint::black_box(rows);
    });
    (counters, scan)
}

fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn checkpoint(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

fn size(path: &Path) -> u64 {
    let wal = path.with_extension("db-wal");
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    len(path) + len(&wal)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
