//! A PostgreSQL store written before the per-state indexes: migrating replaces the indexes
//! over every row's state with one per state, built from the rows already there, and the
//! statements rewritten for them (counts, next due, claims, topic pruning) still find every
//! row.

#![cfg(feature = "postgres")]

use verdict_store::Store;
use verdict_store::postgres::MIGRATIONS;

mod support;

use support::postgres::TestDatabase;

/// The `messages` table's indexes, by name.
fn indexes(db: &TestDatabase) -> Vec<String> {
    db.client()
        .query(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'messages' ORDER BY indexname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn a_version_2_store_gets_per_state_indexes_and_still_finds_every_row() {
    let db = TestDatabase::new("indexes");
    let mut client = db.client();
    client
        .batch_execute(
            "CREATE TABLE verdict_schema (version INTEGER PRIMARY KEY,
                                          applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
             INSERT INTO verdict_schema (version) VALUES (1), (2);",
        )
        .unwrap();
    for script in &MIGRATIONS[..2] {
        for sql in *script {
            client.batch_execute(sql).unwrap();
        }
    }
    client
        .batch_execute(
            "INSERT INTO topics VALUES ('orders');
             INSERT INTO messages (id, topic, headers, payload, state, next_at_ms,
                                   lease_until_ms, published_at_ms, updated_at_ms)
             VALUES ('ready', 'orders', '{}', '', 'ready', 50, NULL, 0, 0),
                    ('retry', 'orders', '{}', '', 'scheduled', 40, NULL, 0, 0),
                    ('held', 'orders', '{}', '', 'leased', 0, 30, 0, 0),
                    ('done', 'orders', '{}', '', 'delivered', 0, NULL, 0, 0);",
        )
        .unwrap();
    assert!(indexes(&db).contains(&"messages_topic_due".to_string()));

    let store = Store::connect(&db.url(), std::path::Path::new(".")).unwrap();
    assert_eq!(store.migrate().unwrap(), Some(MIGRATIONS.len() as u32));
    assert_eq!(
        indexes(&db),
        [
            "messages_id_key",
            "messages_keyed",
            "messages_leased",
            "messages_pkey",
            "messages_settled",
            "messages_waiting"
        ]
    );
    let counts = store.counts().unwrap();
    assert_eq!(
        (
            counts.ready,
            counts.scheduled,
            counts.leased,
            counts.delivered
        ),
        (1, 1, 1, 1)
    );
    // The lease expires first, then the retry falls due, then the ready message.
    assert_eq!(store.next_due_ms().unwrap(), Some(30));
    let claimed = store
        .claim(100, &[(vec!["orders".into()], 10)], 60_000)
        .unwrap();
    let mut ids: Vec<&str> = claimed.iter().map(|c| c.delivery.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["held", "ready", "retry"]);
    // All three are leased now, until 60,100: nothing else is due before.
    assert_eq!(store.next_due_ms().unwrap(), Some(60_100));
    assert_eq!(store.prune_topics().unwrap(), 0, "orders still has work");
}
