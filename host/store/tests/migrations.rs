//! A MariaDB migration cut off part-way - a crash or a lost connection between two of its
//! statements, which MariaDB commits one by one - is finished by the next `migrate`, at
//! every point it can be cut.

#![cfg(feature = "mysql")]

use mysql::prelude::Queryable as _;
use verdict_store::model::{AttemptRecord, DeadLetter, Settlement};
use verdict_store::mysql::MIGRATIONS;
use verdict_store::{DlqFilter, NewMessage, Store};

mod support;

use support::mariadb::TestDatabase;

/// Run `statements` on `db` by hand, as a migration would have before it was cut off.
fn run(db: &TestDatabase, statements: &[&str]) {
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(&db.url()).unwrap()).unwrap();
    for sql in statements {
        conn.query_drop(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// The store on `db` migrates, is at the latest version, and works: a message published,
/// claimed and dead-lettered, with the columns the last migration added.
fn migrates_and_works(db: &TestDatabase, cut: &str) {
    let store = Store::connect(&db.url(), std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("cut {cut}: migrating again failed: {e}"));
    assert_eq!(
        store.migrate().unwrap(),
        Some(MIGRATIONS.len() as u32),
        "cut {cut}"
    );
    let message = NewMessage {
        id: "m".into(),
        topic: "orders".into(),
        payload: b"{}".to_vec(),
        ..NewMessage::default()
    };
    store.publish(&[message], 0).unwrap();
    let c = store
        .claim(10, &[(vec!["orders".into()], 1)], 60_000)
        .unwrap()
        .remove(0);
    let letter = Settlement::DeadLetter {
        failed: AttemptRecord {
            at_ms: 20,
            kind: "json.invalid".into(),
            message: "bad".into(),
        },
        letter: DeadLetter {
            dlq: "orders.DLQ".into(),
            class: "poison".into(),
            reason: "does not parse".into(),
            format: "json",
            envelope: envelope(),
        },
    };
    let results = store.settle(&[(c.seq, c.lease, &letter)], 30).unwrap();
    assert!(results[0].is_ok(), "cut {cut}: {:?}", results[0]);
    let stats = store.dlq_stats().unwrap();
    assert_eq!(stats.len(), 1, "cut {cut}");
    assert_eq!(stats[0].depth, 1, "cut {cut}");
    // `repeats` is the second migration's column.
    let letters = store
        .dlq_list(
            &DlqFilter {
                max_repeats: Some(0),
                ..DlqFilter::default()
            },
            100,
        )
        .unwrap_or_else(|e| panic!("cut {cut}: {e}"));
    assert_eq!(letters.len(), 1, "cut {cut}");
    assert_eq!(letters[0].repeats, 0, "cut {cut}");
}

/// A dead-letter envelope as the gateway writes it.
fn envelope() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "original": {"topic": "orders", "id": "m", "headers": {}, "payload": {}},
        "attempts": 1,
        "errors": [{"at": "1970-01-01T00:00:00.020Z", "atMs": 20, "kind": "json.invalid",
                    "message": "bad"}],
        "consumerGroup": "verdict", "firstFailedAt": "1970-01-01T00:00:00.020Z",
        "lastFailedAt": "1970-01-01T00:00:00.020Z",
        "verdict": {"action": "dead-letter", "class": "poison", "reason": "does not parse",
                    "alert": "warning", "labels": {}},
        "policy": {"name": "rules", "version": "0.1.0", "sha256": "00", "generation": 1,
                   "fallback": null},
        "dlq": "orders.DLQ", "gateway": "gw", "deadLetteredAt": "1970-01-01T00:00:00.020Z"
    }))
    .unwrap()
}

#[test]
fn a_first_migration_cut_off_after_any_statement_is_finished() {
    let first = MIGRATIONS[0];
    for k in 1..first.len() {
        let db = TestDatabase::new("migrate_cut");
        run(&db, &first[..k]);
        migrates_and_works(&db, &format!("after statement {k} of migration 1"));
    }
}

#[test]
fn a_later_migration_cut_off_part_way_is_finished() {
    let db = TestDatabase::new("migrate_cut");
    run(&db, MIGRATIONS[0]);
    // Migration 1 recorded as the store records it, then migration 2 cut after its first
    // statement.
    run(
        &db,
        &[
            "CREATE TABLE verdict_schema (version INT NOT NULL PRIMARY KEY,
                 applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE = InnoDB",
            "INSERT INTO verdict_schema (version) VALUES (1)",
            MIGRATIONS[1][0],
        ],
    );
    migrates_and_works(&db, "after statement 1 of migration 2");
}
