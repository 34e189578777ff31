//! The store contract: what every backend promises the gateway, run the same on each - the
//! SQLite file, and a PostgreSQL and a MariaDB database of the test's own (each built with
//! its feature). Publish idempotency, claims and
//! their order, lease fencing, each verdict's settlement, retry due times, the DLQ (list,
//! page, replay, discard), retention, a gateway that went away, competing claims, and key
//! ordering (alone and under competing claims).

use std::collections::BTreeSet;
use std::sync::Arc;

use verdict_store::model::{AttemptRecord, DeadLetter, Settlement};
use verdict_store::{DlqFilter, NewMessage, Store, StoreError};

mod support;

/// A backend under test: opens handles on one store (several, for competing gateways) and
/// cleans up when dropped.
trait Backend {
    fn open(&self) -> Store;
}

struct Sqlite(std::path::PathBuf);

impl Backend for Sqlite {
    fn open(&self) -> Store {
        Store::open(&self.0.join("verdict.db")).expect("opening the SQLite store")
    }
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A shared database of the test's own, opened by its URL; dropped (the database with it)
/// when the test ends.
#[cfg(any(feature = "postgres", feature = "mysql"))]
struct Shared {
    url: String,
    _database: Box<dyn std::any::Any>,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl Backend for Shared {
    fn open(&self) -> Store {
        Store::connect(&self.url, std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
    }
}

#[cfg(feature = "mysql")]
fn mariadb(_: &str) -> Shared {
    let database = support::mariadb::TestDatabase::new("contract");
    Shared {
        url: database.url(),
        _database: Box::new(database),
    }
}

fn sqlite(name: &str) -> Sqlite {
    Sqlite(support::scratch_dir(&format!("store-contract-{name}")))
}

#[cfg(feature = "postgres")]
fn postgres(name: &str) -> Shared {
    let database = support::postgres::TestDatabase::new(name);
    Shared {
        url: database.url(),
        _database: Box::new(database),
    }
}

fn message(id: &str, topic: &str) -> NewMessage {
    NewMessage {
        id: id.into(),
        topic: topic.into(),
        headers: [("x-trace".to_string(), format!("t-{id}"))].into(),
        payload: format!("{{\"id\": \"{id}\"}}").into_bytes(),
        content_type: Some("application/json".into()),
        key: None,
    }
}

fn want(topic: &str, n: usize) -> Vec<(Vec<String>, usize)> {
    vec![(vec![topic.to_string()], n)]
}

fn failed(at_ms: u64, kind: &str) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        kind: kind.into(),
        message: format!("{kind} at {at_ms}"),
    }
}

fn envelope(id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "original": {"topic": "orders", "id": id, "headers": {}, "payload": {"id": id}},
        "attempts": 1,
        "errors": [{"at": "1970-01-01T00:00:01.000Z", "atMs": 1000, "kind": "json.invalid", "message": "bad"}],
        "consumerGroup": "verdict", "firstFailedAt": "1970-01-01T00:00:01.000Z",
        "lastFailedAt": "1970-01-01T00:00:01.000Z",
        "verdict": {"action": "dead-letter", "class": "poison", "reason": "does not parse",
                    "alert": "warning", "labels": {}},
        "policy": {"name": "rules", "version": "0.1.0", "sha256": "00", "generation": 1, "fallback": null},
        "dlq": "orders.DLQ", "gateway": "gw", "deadLetteredAt": "1970-01-01T00:00:01.000Z"
    }))
    .unwrap()
}

fn dead_letter(id: &str, at_ms: u64) -> Settlement {
    Settlement::DeadLetter {
        failed: failed(at_ms, "json.invalid"),
        letter: DeadLetter {
            dlq: "orders.DLQ".into(),
            class: "poison".into(),
            reason: "does not parse".into(),
            format: "json",
            envelope: envelope(id),
        },
    }
}

/// Publish `<prefix>0`..`<prefix><n-1>` on `orders` and dead-letter each, the i-th at
/// `100 + i` ms.
fn dead_letters(store: &Store, prefix: &str, n: usize) {
    let msgs: Vec<NewMessage> = (0..n)
        .map(|i| message(&format!("{prefix}{i}"), "orders"))
        .collect();
    store.publish(&msgs, 0).unwrap();
    let claimed = store.claim(10, &want("orders", n), 60_000).unwrap();
    let letters: Vec<Settlement> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| dead_letter(&c.delivery.id, 100 + i as u64))
        .collect();
    let batch: Vec<(i64, i64, &Settlement)> = claimed
        .iter()
        .zip(&letters)
        .map(|(c, s)| (c.seq, c.lease, s))
        .collect();
    assert!(store.settle(&batch, 200).unwrap().iter().all(Result::is_ok));
}

fn settle_one(
    store: &Store,
    seq: i64,
    lease: i64,
    s: &Settlement,
    now: u64,
) -> Result<(), StoreError> {
    store
        .settle(&[(seq, lease, s)], now)
        .expect("the batch commits")
        .remove(0)
}

fn publish_is_idempotent_by_id(b: &dyn Backend) {
    let store = b.open();
    let first = store
        .publish(&[message("a", "orders"), message("b", "orders")], 0)
        .unwrap();
    assert_eq!(first.accepted, ["a", "b"]);
    let again = store
        .publish(&[message("b", "orders"), message("c", "orders")], 5)
        .unwrap();
    assert_eq!(again.accepted, ["c"]);
    assert_eq!(again.duplicates, ["b"]);
    assert_eq!(store.counts().unwrap().ready, 3);
    assert_eq!(store.topics().unwrap(), ["orders"]);
    // A second copy within one batch is a duplicate of the first, as if published one by one.
    let doubled = store
        .publish(&[message("d", "orders"), message("d", "orders")], 6)
        .unwrap();
    assert_eq!(
        (doubled.accepted, doubled.duplicates),
        (vec!["d".to_string()], vec!["d".to_string()])
    );
}

/// A batch that holds a stale lease's settlement beside the current one's, and the same
/// settlement twice, applies each current one once - whether the batch is all deliveries
/// (settled together) or mixed.
fn a_batch_applies_each_current_lease_once(b: &dyn Backend) {
    let store = b.open();
    let ids = ["a", "b", "c", "d", "e", "f"];
    let msgs: Vec<NewMessage> = ids.iter().map(|id| message(id, "orders")).collect();
    store.publish(&msgs, 0).unwrap();
    let old = store.claim(10, &want("orders", 6), 100).unwrap();
    let new = store.claim(200, &want("orders", 6), 60_000).unwrap();
    assert_eq!(new.len(), 6);
    let (o, n) = (
        |i: usize| (old[i].seq, old[i].lease),
        |i: usize| (new[i].seq, new[i].lease),
    );
    let ok = Settlement::Delivered;
    let retry = Settlement::Again {
        failed: failed(300, "http.503"),
        delay_ms: 1_000,
        spend_attempt: true,
    };
    let dead = dead_letter("d", 300);
    let fenced = |r: &Result<(), StoreError>| matches!(r, Err(StoreError::Fenced { .. }));

    let deliveries = [(o(0), &ok), (n(0), &ok), (n(0), &ok), (n(4), &ok)];
    let batch: Vec<(i64, i64, &Settlement)> =
        deliveries.iter().map(|((s, l), x)| (*s, *l, *x)).collect();
    let results = store.settle(&batch, 300).unwrap();
    assert!(
        fenced(&results[0]) && results[1].is_ok() && fenced(&results[2]),
        "{results:?}"
    );
    assert!(results[3].is_ok(), "{results:?}");

    let mixed = [
        (o(1), &dead),
        (n(1), &retry),
        (n(2), &ok),
        (o(2), &ok),
        (n(3), &dead),
        (n(3), &dead),
        (n(5), &ok),
    ];
    let batch: Vec<(i64, i64, &Settlement)> =
        mixed.iter().map(|((s, l), x)| (*s, *l, *x)).collect();
    let results = store.settle(&batch, 300).unwrap();
    let refused: Vec<bool> = results.iter().map(fenced).collect();
    assert_eq!(
        refused,
        [true, false, false, true, false, true, false],
        "{results:?}"
    );
    assert!(
        results.iter().all(|r| r.is_ok() || fenced(r)),
        "{results:?}"
    );

    let states: Vec<String> = ids
        .iter()
        .map(|id| store.state_of(id).unwrap().unwrap())
        .collect();
    assert_eq!(
        states,
        [
            "delivered",
            "scheduled",
            "delivered",
            "dead",
            "delivered",
            "delivered"
        ]
    );
    let letters = store.dlq_list(&DlqFilter::default(), 400).unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0].message_id.as_str(), letters[0].attempts),
        ("d", 1)
    );
}

fn claims_take_due_messages_oldest_first_with_their_headers(b: &dyn Backend) {
    let store = b.open();
    store.publish(&[message("a", "orders")], 0).unwrap();
    store
        .publish(&[message("b", "orders"), message("c", "orders")], 5)
        .unwrap();
    store.publish(&[message("x", "invoices")], 5).unwrap();
    let first = store.claim(10, &want("orders", 2), 1_000).unwrap();
    let ids: Vec<&str> = first.iter().map(|c| c.delivery.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let a = &first[0].delivery;
    assert_eq!(a.headers["x-trace"], "t-a");
    assert_eq!(a.payload, b"{\"id\": \"a\"}");
    assert_eq!(a.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        (a.attempts_spent, a.published_at_ms, a.redelivery),
        (0, 0, false)
    );
    // Only the route's own topics, and only what is not leased.
    let rest = store.claim(20, &want("orders", 10), 1_000).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].delivery.id, "c");
    assert_eq!(store.counts().unwrap().leased, 3);
    assert_eq!(store.counts().unwrap().ready, 1);
}

fn an_expired_lease_is_claimed_again_and_its_holder_is_fenced(b: &dyn Backend) {
    let store = b.open();
    store.publish(&[message("a", "orders")], 0).unwrap();
    let old = store.claim(10, &want("orders", 1), 100).unwrap().remove(0);
    assert!(
        store.claim(50, &want("orders", 1), 100).unwrap().is_empty(),
        "still leased"
    );
    let new = store.claim(200, &want("orders", 1), 100).unwrap().remove(0);
    assert_eq!(new.seq, old.seq);
    assert_ne!(new.lease, old.lease);
    assert!(new.delivery.redelivery);
    assert_eq!(store.audit_count("lease-expired").unwrap(), 1);
    // The first delivery's late outcome is refused and changes nothing.
    let late = settle_one(&store, old.seq, old.lease, &dead_letter("a", 210), 210);
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    assert!(store.dlq_stats().unwrap().is_empty());
    assert_eq!(
        store
            .extend_leases(&[(old.seq, old.lease)], 10_000)
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .extend_leases(&[(new.seq, new.lease)], 10_000)
            .unwrap(),
        1
    );
    settle_one(&store, new.seq, new.lease, &Settlement::Delivered, 220).unwrap();
    assert_eq!(store.state_of("a").unwrap().as_deref(), Some("delivered"));
    // Settled once: a second settlement under the same lease is fenced too.
    let twice = settle_one(&store, new.seq, new.lease, &Settlement::Delivered, 230);
    assert!(matches!(twice, Err(StoreError::Fenced { .. })), "{twice:?}");
}

fn each_verdict_settles_as_documented(b: &dyn Backend) {
    let store = b.open();
    let ids = ["retry", "delay", "dead", "discard", "release", "ok"];
    let msgs: Vec<NewMessage> = ids.iter().map(|id| message(id, "orders")).collect();
    store.publish(&msgs, 0).unwrap();
    let claimed = store.claim(10, &want("orders", 6), 60_000).unwrap();
    assert_eq!(claimed.len(), 6);
    let retry = Settlement::Again {
        failed: failed(100, "http.503"),
        delay_ms: 500,
        spend_attempt: true,
    };
    let delay = Settlement::Again {
        failed: failed(100, "http.429"),
        delay_ms: 300,
        spend_attempt: false,
    };
    let dead = dead_letter("dead", 100);
    let discard = Settlement::Discard {
        failed: failed(100, "stale"),
        reason: "too old".into(),
    };
    let release = Settlement::Release { delay_ms: 50 };
    let outcomes = [
        &retry,
        &delay,
        &dead,
        &discard,
        &release,
        &Settlement::Delivered,
    ];
    let batch: Vec<(i64, i64, &Settlement)> = claimed
        .iter()
        .zip(outcomes)
        .map(|(c, s)| (c.seq, c.lease, s))
        .collect();
    // A settlement for a message that does not exist fails alone; the rest commit.
    let mut with_missing = batch.clone();
    with_missing.insert(2, (i64::MAX - 1, 1, &Settlement::Delivered));
    let results = store.settle(&with_missing, 100).unwrap();
    assert!(matches!(results[2], Err(StoreError::Fenced { .. })));
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        6,
        "{results:?}"
    );
    let state = |id: &str| store.state_of(id).unwrap().unwrap();
    assert_eq!(
        ids.map(state),
        [
            "scheduled",
            "scheduled",
            "dead",
            "discarded",
            "ready",
            "delivered"
        ]
    );
    let counts = store.counts().unwrap();
    assert_eq!(
        (
            counts.scheduled,
            counts.ready,
            counts.dead,
            counts.discarded,
            counts.delivered
        ),
        (2, 1, 1, 1, 1)
    );
    assert_eq!(counts.total(), 6);
    assert_eq!(store.audit_count("dead-lettered").unwrap(), 1);
    assert_eq!(store.audit_count("discarded").unwrap(), 1);
    // Retry and delay fall due at failure time + delay, carrying their history; the retry
    // spent an attempt, the delay did not.
    assert!(
        store
            .claim(399, &want("orders", 10), 1_000)
            .unwrap()
            .iter()
            .all(|c| c.delivery.id == "release")
    );
    let due = store.claim(600, &want("orders", 10), 1_000).unwrap();
    let by_id = |id: &str| {
        due.iter()
            .find(|c| c.delivery.id == id)
            .unwrap()
            .delivery
            .clone()
    };
    let r = by_id("retry");
    assert_eq!(
        (r.attempts_spent, r.deferrals, r.first_failed_at_ms),
        (1, 0, Some(100))
    );
    assert_eq!(r.history, [failed(100, "http.503")]);
    let d = by_id("delay");
    assert_eq!((d.attempts_spent, d.deferrals), (0, 1));
    assert_eq!(d.history, [failed(100, "http.429")]);
}

/// A settlement the database refuses (PostgreSQL takes no NUL byte in text) fails alone:
/// the rest of its batch commits, and the refused message is still leased, to be delivered
/// again - never half settled. The retries of a batch, which PostgreSQL applies in one
/// statement, are refused one at a time all the same.
fn a_settlement_the_database_refuses_fails_alone(b: &dyn Backend) {
    let store = b.open();
    let msgs: Vec<NewMessage> = (0..7)
        .map(|i| message(&format!("n{i}"), "orders"))
        .collect();
    store.publish(&msgs, 0).unwrap();
    let claimed = store.claim(10, &want("orders", 7), 60_000).unwrap();
    // A NUL PostgreSQL refuses; a class longer than MariaDB's column (64) it refuses -
    // each shared database meets one settlement it will not write, beside ones it will.
    let nul = Settlement::Discard {
        failed: failed(20, "stale"),
        reason: "nul \0 inside".into(),
    };
    let long_class = match dead_letter("n2", 20) {
        Settlement::DeadLetter { failed, mut letter } => {
            letter.class = "c".repeat(100);
            Settlement::DeadLetter { failed, letter }
        }
        other => other,
    };
    let retry = |kind: &str| Settlement::Again {
        failed: failed(20, kind),
        delay_ms: 1_000,
        spend_attempt: true,
    };
    let (retry_ok, retry_nul) = (retry("http.503"), retry("http.\0"));
    let outcomes = [
        &Settlement::Delivered,
        &nul,
        &long_class,
        &Settlement::Delivered,
        &retry_ok,
        &retry_nul,
        &retry_ok,
    ];
    let batch: Vec<(i64, i64, &Settlement)> = claimed
        .iter()
        .zip(outcomes)
        .map(|(c, s)| (c.seq, c.lease, s))
        .collect();
    let results = store.settle(&batch, 30).unwrap();
    for i in [0, 3, 4, 6] {
        assert!(results[i].is_ok(), "{i}: {results:?}");
    }
    for (i, written) in [(1, "discarded"), (2, "dead"), (5, "scheduled")] {
        let state = store.state_of(&claimed[i].delivery.id).unwrap().unwrap();
        match &results[i] {
            Ok(()) => assert_eq!(state, written),
            Err(e) => {
                assert_eq!(state, "leased", "refused, and nothing of it written");
                // The driver's own error stays behind the store's, for code that reads it.
                assert!(std::error::Error::source(e).is_some(), "{e:?}");
            }
        }
    }
    let dead = usize::from(results[2].is_ok());
    assert_eq!(
        store.dlq_list(&DlqFilter::default(), 100).unwrap().len(),
        dead,
        "a refused letter leaves no DLQ row"
    );
    let counts = store.counts().unwrap();
    assert_eq!(counts.delivered, 2);
    assert_eq!(counts.scheduled, 2 + u64::from(results[5].is_ok()));
    // The retries written carry their attempt, once each.
    let due = store.claim(2_000, &want("orders", 10), 1_000).unwrap();
    for c in due
        .iter()
        .filter(|c| ["n4", "n6"].contains(&c.delivery.id.as_str()))
    {
        assert_eq!(
            c.delivery.history,
            [failed(20, "http.503")],
            "{}",
            c.delivery.id
        );
        assert_eq!(c.delivery.attempts_spent, 1);
    }
    assert_eq!(
        due.iter()
            .filter(|c| ["n4", "n6"].contains(&c.delivery.id.as_str()))
            .count(),
        2
    );
}

/// The longest topic a shared store's columns take (512 characters), dead-lettered to its
/// suffixed DLQ: a DLQ name longer than its topic must not make the dead letter unwritable
/// (the message would come back forever instead of retiring).
fn the_longest_topic_is_published_and_dead_lettered(b: &dyn Backend) {
    let store = b.open();
    let topic = "t".repeat(512);
    store.publish(&[message("long", &topic)], 0).unwrap();
    let c = store.claim(10, &want(&topic, 1), 60_000).unwrap().remove(0);
    let Settlement::DeadLetter { failed, mut letter } = dead_letter("long", 20) else {
        unreachable!("dead_letter makes a dead letter")
    };
    letter.dlq = format!("{topic}.DLQ");
    let dead = Settlement::DeadLetter { failed, letter };
    settle_one(&store, c.seq, c.lease, &dead, 30).unwrap();
    let stats = store.dlq_stats().unwrap();
    assert_eq!((stats[0].dlq.len(), stats[0].depth), (516, 1));
}

fn the_dlq_lists_pages_replays_and_discards(b: &dyn Backend) {
    let store = b.open();
    dead_letters(&store, "d", 5);
    let stats = store.dlq_stats().unwrap();
    assert_eq!(
        (
            stats.len(),
            stats[0].depth,
            stats[0].oldest_at_ms,
            stats[0].ingress
        ),
        (1, 5, 100, 5)
    );

    // Two pages of two and one of one, in failure order.
    let mut filter = DlqFilter {
        limit: Some(2),
        ..DlqFilter::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = store.dlq_list(&filter, 1_000).unwrap();
        let Some(last) = page.last() else { break };
        filter.after = Some(Store::cursor_of(last));
        seen.extend(page.iter().map(|e| e.message_id.clone()));
    }
    assert_eq!(seen, ["d0", "d1", "d2", "d3", "d4"]);
    let entry = store
        .dlq_list(&DlqFilter::default(), 1_000)
        .unwrap()
        .remove(0);
    assert_eq!(
        (entry.class.as_str(), entry.kind.as_str(), entry.attempts),
        ("poison", "json.invalid", 1)
    );
    assert_eq!(entry.envelope.original.id, "d0");
    assert!(store.dlq_entry(entry.seq).unwrap().is_some());
    let bad = store.dlq_list(
        &DlqFilter {
            after: Some("nope".into()),
            ..DlqFilter::default()
        },
        0,
    );
    assert!(matches!(bad, Err(StoreError::Cursor(_))), "{bad:?}");
    let by_kind = DlqFilter {
        kind: Some("json.invalid".into()),
        min_age_ms: Some(850),
        ..DlqFilter::default()
    };
    assert_eq!(
        store.dlq_list(&by_kind, 951).unwrap().len(),
        2,
        "failed at 100 and 101 only"
    );

    // Replay puts two back with their attempts reset; replaying them again does nothing.
    let all = store.dlq_list(&DlqFilter::default(), 1_000).unwrap();
    let two = [all[0].seq, all[1].seq];
    assert_eq!(store.dlq_replay(&two, 2_000, "test").unwrap(), ["d0", "d1"]);
    assert!(store.dlq_replay(&two, 2_001, "test").unwrap().is_empty());
    assert_eq!(store.audit_count("replayed").unwrap(), 2);
    let back = store.claim(2_000, &want("orders", 10), 1_000).unwrap();
    assert_eq!(back.len(), 2);
    assert!(
        back.iter()
            .all(|c| c.delivery.attempts_spent == 0 && c.delivery.history.is_empty())
    );
    // Discard one for good.
    assert_eq!(
        store.dlq_discard(&[all[2].seq], 3_000, "obsolete").unwrap(),
        1
    );
    assert_eq!(store.state_of("d2").unwrap().as_deref(), Some("discarded"));
    let stats = store.dlq_stats().unwrap();
    assert_eq!((stats[0].depth, stats[0].ingress), (2, 5));
}

/// The filters group actions use: a cut-off, one letter by its key, a repeat ceiling and a
/// group - each the same on every backend. A letter replayed and dead-lettered again
/// counts one repeat.
fn dlq_filters_for_group_actions(b: &dyn Backend) {
    let store = b.open();
    dead_letters(&store, "g", 3);
    let list = |f: DlqFilter| -> Vec<String> {
        store
            .dlq_list(&f, 10_000)
            .unwrap()
            .into_iter()
            .map(|e| e.message_id)
            .collect()
    };
    assert_eq!(
        list(DlqFilter {
            dead_before_ms: Some(102),
            ..DlqFilter::default()
        }),
        ["g0", "g1"]
    );
    let first = store
        .dlq_list(&DlqFilter::default(), 10_000)
        .unwrap()
        .remove(0);
    assert_eq!(first.repeats, 0);
    assert_eq!(
        list(DlqFilter {
            seq: Some(first.seq),
            ..DlqFilter::default()
        }),
        ["g0"]
    );

    // g0 replayed, failing again: one repeat.
    assert_eq!(store.dlq_replay(&[first.seq], 300, "test").unwrap(), ["g0"]);
    let again = store
        .claim(400, &want("orders", 1), 60_000)
        .unwrap()
        .remove(0);
    let letter = dead_letter("g0", 500);
    settle_one(&store, again.seq, again.lease, &letter, 500).unwrap();
    let entries = store.dlq_list(&DlqFilter::default(), 10_000).unwrap();
    let repeats: Vec<(String, u32)> = entries
        .iter()
        .map(|e| (e.message_id.clone(), e.repeats))
        .collect();
    assert_eq!(
        repeats,
        [("g1".into(), 0), ("g2".into(), 0), ("g0".into(), 1)]
    );
    assert_eq!(
        list(DlqFilter {
            max_repeats: Some(0),
            ..DlqFilter::default()
        }),
        ["g1", "g2"]
    );
    // Retention prunes g0's replayed first letter; its repeat count is kept with the
    // message, so the letter stays out of what a bulk replay takes.
    let pruned = store.prune(10_000, 100).unwrap();
    assert_eq!(pruned.dlq, 1, "{pruned:?}");
    let g0 = store
        .dlq_list(&DlqFilter::default(), 10_000)
        .unwrap()
        .into_iter()
        .find(|e| e.message_id == "g0")
        .unwrap();
    assert_eq!(g0.repeats, 1, "a pruned row does not unpark a letter");
    assert_eq!(
        list(DlqFilter {
            max_repeats: Some(0),
            ..DlqFilter::default()
        }),
        ["g1", "g2"]
    );
}

/// A cut-off (what a DLQ job that started at some instant takes) leaves the letters
/// dead-lettered after it, however late the job reads the DLQ - even one from the far
/// future, whose time does not wrap.
fn a_cut_off_leaves_letters_dead_lettered_after_it(b: &dyn Backend) {
    let store = b.open();
    dead_letters(&store, "early", 2);
    store.publish(&[message("late", "orders")], 0).unwrap();
    let c = store
        .claim(10, &want("orders", 1), 60_000)
        .unwrap()
        .remove(0);
    let far = u64::MAX / 4;
    settle_one(&store, c.seq, c.lease, &dead_letter("late", far), far).unwrap();
    let before_start = DlqFilter {
        dead_before_ms: Some(1_000),
        ..DlqFilter::default()
    };
    let taken: Vec<i64> = store
        .dlq_list(&before_start, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(taken.len(), 2);
    assert_eq!(
        store.dlq_discard(&taken, 2_000, "test: cut-off").unwrap(),
        2
    );
    let left: Vec<String> = store
        .dlq_list(&DlqFilter::default(), u64::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    assert_eq!(left, ["late"]);
    assert_eq!(store.audit_count("dlq-discarded").unwrap(), 2);
}

/// A repaired dead letter comes back with the new payload, content type and headers, its
/// attempts reset; the repair is audited; the letter is repaired once.
fn a_repaired_dead_letter_is_delivered_as_edited(b: &dyn Backend) {
    let store = b.open();
    store.publish(&[message("r", "orders")], 0).unwrap();
    let c = store
        .claim(10, &want("orders", 1), 60_000)
        .unwrap()
        .remove(0);
    settle_one(&store, c.seq, c.lease, &dead_letter("r", 100), 100).unwrap();
    let seq = store.dlq_list(&DlqFilter::default(), 1_000).unwrap()[0].seq;
    let repair = verdict_store::Repair {
        payload: Some(b"{\"id\": \"r\", \"fixed\": true}".to_vec()),
        content_type: Some("application/json; v=2".into()),
        headers: Some([("x-fixed".to_string(), "yes".to_string())].into()),
    };
    assert_eq!(
        store
            .dlq_repair(seq, &repair, 200, "by test: payload")
            .unwrap()
            .as_deref(),
        Some("r")
    );
    assert!(
        store
            .dlq_list(&DlqFilter::default(), 1_000)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.audit_count("repaired").unwrap(), 1);
    let again = store
        .claim(300, &want("orders", 1), 60_000)
        .unwrap()
        .remove(0);
    let d = &again.delivery;
    assert_eq!(d.payload, b"{\"id\": \"r\", \"fixed\": true}");
    assert_eq!(d.content_type.as_deref(), Some("application/json; v=2"));
    assert_eq!(
        d.headers,
        [("x-fixed".to_string(), "yes".to_string())].into()
    );
    assert_eq!((d.attempts_spent, d.history.len()), (0, 0));
    assert_eq!(store.dlq_repair(seq, &repair, 400, "again").unwrap(), None);
}

fn a_traced_replay_puts_letters_back_with_their_new_headers_in_one_go(b: &dyn Backend) {
    let store = b.open();
    store
        .publish(&[message("t0", "orders"), message("t1", "orders")], 0)
        .unwrap();
    for c in store.claim(10, &want("orders", 2), 60_000).unwrap() {
        let id = c.delivery.id.clone();
        settle_one(&store, c.seq, c.lease, &dead_letter(&id, 100), 100).unwrap();
    }
    let letters: Vec<(i64, std::collections::BTreeMap<String, String>)> = store
        .dlq_list(&DlqFilter::default(), 1_000)
        .unwrap()
        .iter()
        .map(|e| {
            let traceparent = format!("00-{:032x}-{:016x}-01", e.seq + 1, e.seq + 1);
            (e.seq, [("traceparent".to_string(), traceparent)].into())
        })
        .collect();
    assert_eq!(letters.len(), 2);
    assert_eq!(
        store
            .dlq_replay_with_headers(&letters, 200, "traced")
            .unwrap(),
        ["t0", "t1"]
    );
    assert_eq!(store.audit_count("replayed").unwrap(), 2);
    assert_eq!(store.audit_count("repaired").unwrap(), 0);
    let mut again = store.claim(300, &want("orders", 2), 60_000).unwrap();
    again.sort_by(|a, b| a.delivery.id.cmp(&b.delivery.id));
    for (claimed, (_, headers)) in again.iter().zip(&letters) {
        assert_eq!(&claimed.delivery.headers, headers, "{:?}", claimed.delivery);
        assert_eq!(claimed.delivery.attempts_spent, 0);
    }
    assert!(
        store
            .dlq_replay_with_headers(&letters, 400, "again")
            .unwrap()
            .is_empty(),
        "a letter is replayed once"
    );
}

fn retention_prunes_what_is_settled_and_keeps_what_is_not(b: &dyn Backend) {
    let store = b.open();
    let msgs: Vec<NewMessage> = (0..5)
        .map(|i| message(&format!("r{i}"), "orders"))
        .collect();
    store.publish(&msgs, 0).unwrap();
    let claimed = store.claim(10, &want("orders", 4), 1_000_000).unwrap();
    let dead = dead_letter("r2", 20);
    let discard = Settlement::Discard {
        failed: failed(20, "stale"),
        reason: "old".into(),
    };
    let outcomes = [
        &Settlement::Delivered,
        &discard,
        &dead,
        &Settlement::Delivered,
    ];
    let batch: Vec<(i64, i64, &Settlement)> = claimed
        .iter()
        .zip(outcomes)
        .map(|(c, s)| (c.seq, c.lease, s))
        .collect();
    store.settle(&batch, 20).unwrap();
    assert_eq!(
        store.prune(10, 1).unwrap().total(),
        0,
        "nothing older than 10 ms"
    );
    let pruned = store.prune(10_000, 1).unwrap();
    assert_eq!(
        pruned.messages, 3,
        "two delivered, one discarded: {pruned:?}"
    );
    let counts = store.counts().unwrap();
    assert_eq!(
        (counts.ready, counts.leased, counts.dead, counts.delivered),
        (1, 0, 1, 0)
    );
    // A pruned id may be published again; a kept one is still a duplicate.
    let again = store
        .publish(&[message("r0", "orders"), message("r4", "orders")], 20_000)
        .unwrap();
    assert_eq!(
        (again.accepted.as_slice(), again.duplicates.as_slice()),
        (&["r0".to_string()][..], &["r4".to_string()][..])
    );
    assert_eq!(
        store.prune_topics().unwrap(),
        0,
        "orders has pending messages"
    );
}

fn a_gateway_that_went_away_loses_nothing(b: &dyn Backend) {
    let gone = b.open();
    gone.publish(&[message("a", "orders"), message("b", "orders")], 0)
        .unwrap();
    let held = gone.claim(10, &want("orders", 2), 100).unwrap();
    assert_eq!(held.len(), 2);
    drop(gone);
    // Whoever opens the store next delivers both again: at start (a store only it uses)
    // or once the leases expire (a shared one).
    let next = b.open();
    let recovered = next.recover_leases(20).unwrap();
    let now = if next.is_shared() { 200 } else { 20 };
    let again = next.claim(now, &want("orders", 10), 100).unwrap();
    assert_eq!(again.len(), 2, "recovered {recovered}");
    assert_eq!(next.counts().unwrap().leased, 2);
}

fn competing_claims_never_take_the_same_message(b: &dyn Backend) {
    let first = Arc::new(b.open());
    let msgs: Vec<NewMessage> = (0..300)
        .map(|i| message(&format!("c{i:03}"), "orders"))
        .collect();
    first.publish(&msgs, 0).unwrap();
    let handles: Vec<Arc<Store>> = vec![first.clone(), Arc::new(b.open()), Arc::new(b.open())];
    let threads: Vec<_> = handles
        .into_iter()
        .map(|store| {
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                loop {
                    let got = store.claim(10, &want("orders", 7), 60_000).unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|c| c.delivery.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 300, "every message claimed once");
    assert_eq!(distinct.len(), 300);
}

fn keyed(id: &str, key: &str) -> NewMessage {
    NewMessage {
        key: Some(key.into()),
        ..message(id, "orders")
    }
}

fn ids(claimed: &[verdict_store::Claimed]) -> Vec<String> {
    let mut ids: Vec<String> = claimed.iter().map(|c| c.delivery.id.clone()).collect();
    ids.sort();
    ids
}

fn retry(at_ms: u64, delay_ms: u64) -> Settlement {
    Settlement::Again {
        failed: failed(at_ms, "http.503"),
        delay_ms,
        spend_attempt: true,
    }
}

/// A key's messages are claimed one at a time in publish order, through a retry, a dead
/// letter (which lets the key go on) and its replay (which goes before the key's waiting
/// messages again, once the key's message in flight is done); other keys and unkeyed
/// messages are not held back; the next due time leaves out what is held back.
fn a_key_is_claimed_one_message_at_a_time_in_publish_order(b: &dyn Backend) {
    let store = b.open();
    store
        .publish(
            &[
                keyed("a1", "a"),
                keyed("a2", "a"),
                keyed("b1", "b"),
                message("u1", "orders"),
                message("u2", "orders"),
                keyed("a3", "a"),
            ],
            0,
        )
        .unwrap();
    let orders = want("orders", 10);
    // Each key's oldest, and every unkeyed message.
    let first = store.claim(1_000, &orders, 60_000).unwrap();
    assert_eq!(ids(&first), ["a1", "b1", "u1", "u2"]);
    // `a1` fails and waits for a retry at 1,510: `a2` stays back, though due, and the next
    // due time is that retry (not `a2`'s, nor the leases').
    let a1 = first.iter().find(|c| c.delivery.id == "a1").unwrap();
    settle_one(&store, a1.seq, a1.lease, &retry(1_010, 500), 1_010).unwrap();
    for c in first.iter().filter(|c| c.delivery.id != "a1") {
        settle_one(&store, c.seq, c.lease, &Settlement::Delivered, 1_020).unwrap();
    }
    assert!(store.claim(1_100, &orders, 60_000).unwrap().is_empty());
    assert_eq!(store.next_due_ms().unwrap(), Some(1_510));
    // The retry comes first, alone.
    let retried = store.claim(1_600, &orders, 60_000).unwrap();
    assert_eq!(ids(&retried), ["a1"]);
    assert!(store.claim(1_600, &orders, 60_000).unwrap().is_empty());
    // Dead-lettered, it lets its key go on: `a2` next, `a3` still behind it.
    let a1 = &retried[0];
    settle_one(&store, a1.seq, a1.lease, &dead_letter("a1", 1_700), 1_700).unwrap();
    let next = store.claim(1_800, &orders, 60_000).unwrap();
    assert_eq!(ids(&next), ["a2"]);
    // Replayed while `a2` is in flight, `a1` is the key's oldest again - and waits: one
    // message of a key in flight at a time, whatever their order.
    let letters = store.dlq_list(&DlqFilter::default(), 1_850).unwrap();
    assert_eq!(
        store.dlq_replay(&[letters[0].seq], 1_850, "test").unwrap(),
        ["a1"]
    );
    assert!(store.claim(1_860, &orders, 60_000).unwrap().is_empty());
    let a2 = &next[0];
    settle_one(&store, a2.seq, a2.lease, &Settlement::Delivered, 1_900).unwrap();
    // Then `a1` goes before `a3`, which waits.
    let replayed = store.claim(2_100, &orders, 60_000).unwrap();
    assert_eq!(ids(&replayed), ["a1"]);
    let a1 = &replayed[0];
    settle_one(&store, a1.seq, a1.lease, &Settlement::Delivered, 2_200).unwrap();
    assert_eq!(ids(&store.claim(2_300, &orders, 60_000).unwrap()), ["a3"]);
}

/// A keyed message whose key's previous message is a dead letter says so when claimed (a
/// route that dead-letters a whole key sends it after that letter); one after a delivered
/// message, an unkeyed one, or a key's oldest does not.
fn a_keys_message_after_a_dead_letter_is_marked(b: &dyn Backend) {
    let store = b.open();
    store
        .publish(
            &[
                keyed("a1", "a"),
                keyed("a2", "a"),
                keyed("a3", "a"),
                keyed("b1", "b"),
                message("u1", "orders"),
            ],
            0,
        )
        .unwrap();
    let orders = want("orders", 10);
    let marked = |claimed: &[verdict_store::Claimed]| -> Vec<(String, bool)> {
        let mut marks: Vec<(String, bool)> = claimed
            .iter()
            .map(|c| (c.delivery.id.clone(), c.delivery.after_dead_letter))
            .collect();
        marks.sort();
        marks
    };
    let first = store.claim(100, &orders, 60_000).unwrap();
    let none = |ids: &[&str]| -> Vec<(String, bool)> {
        ids.iter().map(|id| (id.to_string(), false)).collect()
    };
    assert_eq!(marked(&first), none(&["a1", "b1", "u1"]));
    for c in &first {
        let s = if c.delivery.id == "a1" {
            dead_letter("a1", 110)
        } else {
            Settlement::Delivered
        };
        settle_one(&store, c.seq, c.lease, &s, 110).unwrap();
    }
    // After `a1`'s dead letter: `a2` is marked; dead-lettered too, `a3` after it.
    let a2 = store.claim(200, &orders, 60_000).unwrap();
    assert_eq!(marked(&a2), [("a2".to_string(), true)]);
    settle_one(&store, a2[0].seq, a2[0].lease, &dead_letter("a2", 210), 210).unwrap();
    let a3 = store.claim(300, &orders, 60_000).unwrap();
    assert_eq!(marked(&a3), [("a3".to_string(), true)]);
    // Delivered (a route that lets the key go on), `a3` clears the mark for what follows.
    settle_one(&store, a3[0].seq, a3[0].lease, &Settlement::Delivered, 310).unwrap();
    store.publish(&[keyed("a4", "a")], 400).unwrap();
    let a4 = store.claim(400, &orders, 60_000).unwrap();
    assert_eq!(marked(&a4), none(&["a4"]));
    settle_one(&store, a4[0].seq, a4[0].lease, &Settlement::Delivered, 410).unwrap();
    // Replayed, `a1` is its key's oldest: nothing before it.
    let letters = store.dlq_list(&DlqFilter::default(), 500).unwrap();
    let a1 = letters.iter().find(|l| l.message_id == "a1").unwrap();
    store.dlq_replay(&[a1.seq], 500, "test").unwrap();
    assert_eq!(
        marked(&store.claim(500, &orders, 60_000).unwrap()),
        none(&["a1"])
    );
}

/// Keys parked behind a retry are counted per topic, and a claim of retries only takes the
/// retries due and no message delivered for the first time (what a route at its
/// `max_parked_keys` claims).
fn parked_keys_are_counted_and_a_retries_only_claim_takes_no_fresh_message(b: &dyn Backend) {
    let store = b.open();
    store
        .publish(
            &[
                keyed("a1", "a"),
                keyed("a2", "a"),
                keyed("b1", "b"),
                keyed("c1", "c"),
                message("u1", "orders"),
            ],
            0,
        )
        .unwrap();
    let orders = want("orders", 10);
    assert!(store.parked_keys().unwrap().is_empty());
    let first = store.claim(100, &orders, 60_000).unwrap();
    assert_eq!(ids(&first), ["a1", "b1", "c1", "u1"]);
    for c in &first {
        let s = match c.delivery.id.as_str() {
            "a1" | "b1" => retry(110, 100),
            _ => Settlement::Delivered,
        };
        settle_one(&store, c.seq, c.lease, &s, 110).unwrap();
    }
    assert_eq!(store.parked_keys().unwrap(), [("orders".to_string(), 2)]);
    store
        .publish(&[keyed("d1", "d"), message("u2", "orders")], 150)
        .unwrap();
    // Before the retries fall due a retries-only claim takes nothing, fresh messages waiting
    // or not; after, only the retries.
    assert!(
        store
            .claim_retries(150, &orders, 60_000)
            .unwrap()
            .is_empty()
    );
    let retries = store.claim_retries(300, &orders, 60_000).unwrap();
    assert_eq!(ids(&retries), ["a1", "b1"]);
    assert!(retries.iter().all(|c| c.delivery.attempts_spent == 1));
    // In flight again, their keys are still parked.
    assert_eq!(store.parked_keys().unwrap(), [("orders".to_string(), 2)]);
    // `a1` delivered clears its key; `b1` given back to wait (a retry budget's hold, say)
    // is still a retry, which a retries-only claim takes.
    for c in &retries {
        let s = match c.delivery.id.as_str() {
            "a1" => Settlement::Delivered,
            _ => Settlement::Release { delay_ms: 0 },
        };
        settle_one(&store, c.seq, c.lease, &s, 310).unwrap();
    }
    assert_eq!(store.parked_keys().unwrap(), [("orders".to_string(), 1)]);
    let b1 = store.claim_retries(320, &orders, 60_000).unwrap();
    assert_eq!(ids(&b1), ["b1"]);
    settle_one(&store, b1[0].seq, b1[0].lease, &Settlement::Delivered, 330).unwrap();
    assert!(store.parked_keys().unwrap().is_empty());
    // The fresh messages are claimed as ever, `a2` now that `a1` is done.
    assert_eq!(
        ids(&store.claim(340, &orders, 60_000).unwrap()),
        ["a2", "d1", "u2"]
    );
}

/// Retention keeps what tells a key's next message that the key went on after a dead
/// letter: the key's newest delivered message stays while an older one of the key is a
/// dead letter (without it the next message would read as following that letter), and
/// goes once a newer one of the key is finished.
fn retention_keeps_what_says_a_key_went_on_after_its_dead_letter(b: &dyn Backend) {
    let store = b.open();
    store
        .publish(&[keyed("a1", "a"), keyed("a2", "a"), keyed("a3", "a")], 0)
        .unwrap();
    let orders = want("orders", 10);
    let settle_next = |now: u64, s: &Settlement| -> (String, bool) {
        let c = store.claim(now, &orders, 60_000).unwrap().remove(0);
        settle_one(&store, c.seq, c.lease, s, now).unwrap();
        (c.delivery.id, c.delivery.after_dead_letter)
    };
    assert_eq!(
        settle_next(10, &dead_letter("a1", 10)),
        ("a1".into(), false)
    );
    // Delivered after the letter (the route lets keys go on): `a2` is the key's newest
    // finished message, and stays through retention.
    assert_eq!(settle_next(20, &Settlement::Delivered), ("a2".into(), true));
    store.prune(10_000, 100).unwrap();
    assert_eq!(store.state_of("a2").unwrap().as_deref(), Some("delivered"));
    assert_eq!(
        settle_next(10_010, &Settlement::Delivered),
        ("a3".into(), false)
    );
    // Now `a3` says it; `a2` may go.
    store.prune(20_000, 100).unwrap();
    assert_eq!(store.state_of("a2").unwrap(), None);
    assert_eq!(store.state_of("a3").unwrap().as_deref(), Some("delivered"));
}

/// Three handles (three gateways) claim ten keys' messages at once, each holding what it
/// claimed for a moment and failing some: no key is ever held by two claims at once, and
/// each key's messages are claimed in publish order. A lookup that skipped the row another
/// claim holds locked (`SKIP LOCKED` reaching the key lookup) fails this.
fn competing_claims_take_a_key_one_message_at_a_time(b: &dyn Backend) {
    const KEYS: usize = 10;
    const PER_KEY: usize = 12;
    let first = Arc::new(b.open());
    let msgs: Vec<NewMessage> = (0..PER_KEY)
        .flat_map(|n| (0..KEYS).map(move |k| keyed(&format!("k{k}-{n:02}"), &format!("key-{k}"))))
        .collect();
    first.publish(&msgs, 0).unwrap();
    /// Per key: whether a claim holds one of its messages, and the next one due by
    /// publish order.
    type Keys = std::sync::Mutex<Vec<(bool, usize)>>;
    let keys: Arc<Keys> = Arc::new(std::sync::Mutex::new(vec![(false, 0); KEYS]));
    let handles: Vec<Arc<Store>> = vec![first.clone(), Arc::new(b.open()), Arc::new(b.open())];
    let threads: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(t, store)| {
            let keys = keys.clone();
            std::thread::spawn(move || -> Result<usize, String> {
                let mut delivered = 0;
                let mut idle = 0;
                while delivered < KEYS * PER_KEY && idle < 200 {
                    let got = store.claim(10, &want("orders", 4), 60_000).unwrap();
                    if got.is_empty() {
                        idle += 1;
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        continue;
                    }
                    idle = 0;
                    let mut parsed = Vec::new();
                    {
                        let mut keys = keys.lock().unwrap();
                        for c in &got {
                            let (k, n) = c.delivery.id[1..].split_once('-').unwrap();
                            let (k, n): (usize, usize) = (k.parse().unwrap(), n.parse().unwrap());
                            let (held, next) = keys[k];
                            if held || n != next {
                                return Err(format!(
                                    "claim {t} took {} while key {k} was held: {held}, \
                                     next by publish order {next}",
                                    c.delivery.id
                                ));
                            }
                            keys[k].0 = true;
                            parsed.push((k, n));
                        }
                    }
                    // Held a moment, as a delivery would be: a wrong claim beside it shows.
                    std::thread::sleep(std::time::Duration::from_millis(3));
                    for (c, (k, n)) in got.iter().zip(parsed) {
                        // Every third message of a key fails once first.
                        let fails = n % 3 == 0 && c.delivery.attempts_spent == 0;
                        {
                            // Marked before the settlement commits: a claim that saw the
                            // commit reads the mark.
                            let mut keys = keys.lock().unwrap();
                            keys[k] = (false, if fails { n } else { n + 1 });
                        }
                        let s = if fails {
                            retry(10, 0)
                        } else {
                            Settlement::Delivered
                        };
                        settle_one(&store, c.seq, c.lease, &s, 10).unwrap();
                        if !fails {
                            delivered += 1;
                        }
                    }
                    let done = keys
                        .lock()
                        .unwrap()
                        .iter()
                        .all(|(_, next)| *next == PER_KEY);
                    if done {
                        break;
                    }
                }
                Ok(delivered)
            })
        })
        .collect();
    let mut delivered = 0;
    for t in threads {
        delivered += t.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(delivered, KEYS * PER_KEY, "every message delivered once");
    assert_eq!(first.counts().unwrap().delivered, (KEYS * PER_KEY) as u64);
}

/// Each contract test on each backend.
macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod on_sqlite {
            $(#[test] fn $test() { super::$test(&super::sqlite(stringify!($test))); })*
        }
        #[cfg(feature = "postgres")]
        mod on_postgres {
            $(#[test] fn $test() { super::$test(&super::postgres("contract")); })*
        }
        #[cfg(feature = "mysql")]
        mod on_mariadb {
            $(#[test] fn $test() { super::$test(&super::mariadb("contract")); })*
        }
    };
}

contract!(
    publish_is_idempotent_by_id,
    a_batch_applies_each_current_lease_once,
    claims_take_due_messages_oldest_first_with_their_headers,
    an_expired_lease_is_claimed_again_and_its_holder_is_fenced,
    each_verdict_settles_as_documented,
    a_settlement_the_database_refuses_fails_alone,
    the_longest_topic_is_published_and_dead_lettered,
    the_dlq_lists_pages_replays_and_discards,
    dlq_filters_for_group_actions,
    a_cut_off_leaves_letters_dead_lettered_after_it,
    a_repaired_dead_letter_is_delivered_as_edited,
    a_traced_replay_puts_letters_back_with_their_new_headers_in_one_go,
    retention_prunes_what_is_settled_and_keeps_what_is_not,
    a_gateway_that_went_away_loses_nothing,
    competing_claims_never_take_the_same_message,
    a_key_is_claimed_one_message_at_a_time_in_publish_order,
    competing_claims_take_a_key_one_message_at_a_time,
    a_keys_message_after_a_dead_letter_is_marked,
    parked_keys_are_counted_and_a_retries_only_claim_takes_no_fresh_message,
    retention_keeps_what_says_a_key_went_on_after_its_dead_letter,
);
