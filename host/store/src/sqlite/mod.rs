//! The embedded store: one SQLite file in WAL mode holding ready messages, in-flight leases,
//! scheduled retries with their per-attempt history, the dead-letter queues and an audit log.
//!
//! Every state change of a message is one transaction, so a crash at any instant leaves each
//! message ready, leased (delivered again once the lease expires, or at restart), scheduled,
//! delivered, dead-lettered or discarded - never gone. `synchronous = FULL`: a change is on
//! disk before the call returns, which is when a delivery counts as acknowledged.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;

mod dlq;
mod messages;
mod retention;
mod settle;

use super::{StateCounts, StoreError};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL,
    headers TEXT NOT NULL,
    payload BLOB NOT NULL,
    content_type TEXT,
    state TEXT NOT NULL CHECK (state IN
        ('ready', 'scheduled', 'leased', 'delivered', 'dead', 'discarded')),
    attempt INTEGER NOT NULL DEFAULT 0,
    deferrals INTEGER NOT NULL DEFAULT 0,
    deliveries INTEGER NOT NULL DEFAULT 0,
    next_at_ms INTEGER NOT NULL,
    lease_until_ms INTEGER,
    lease INTEGER NOT NULL DEFAULT 0,
    published_at_ms INTEGER NOT NULL,
    first_failed_at_ms INTEGER,
    updated_at_ms INTEGER NOT NULL,
    dead_letterings INTEGER NOT NULL DEFAULT 0,
    key TEXT
);
CREATE TABLE IF NOT EXISTS topics (topic TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS attempts (
    message_seq INTEGER NOT NULL REFERENCES messages (seq),
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_message ON attempts (message_seq);
CREATE TABLE IF NOT EXISTS dlq (
    seq INTEGER PRIMARY KEY,
    message_seq INTEGER NOT NULL REFERENCES messages (seq),
    message_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    dlq TEXT NOT NULL,
    class TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    format TEXT NOT NULL,
    envelope BLOB NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('dead', 'replayed', 'discarded')),
    repeats INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dlq_state ON dlq (state, dlq);
CREATE INDEX IF NOT EXISTS dlq_message ON dlq (message_seq);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    message_id TEXT,
    topic TEXT,
    event TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at_ms);
CREATE TABLE IF NOT EXISTS state_counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS messages_count_insert AFTER INSERT ON messages BEGIN
    INSERT INTO state_counts (state, n) VALUES (NEW.state, 1)
        ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS messages_count_update AFTER UPDATE OF state ON messages
    WHEN OLD.state <> NEW.state BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO state_counts (state, n) VALUES (NEW.state, 1)
        ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS messages_count_delete AFTER DELETE ON messages BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
END;
";

/// The indexes a message's state is read through, each holding only the rows in the states
/// it names, so a state change touches the one or two indexes of the states it leaves and
/// enters - not every index that has `state` in it. SQLite uses a partial index only for a
/// query whose `WHERE` names the same states: `=` alternatives match `state = 'ready'`, and
/// an `IN` list matches only the same list, so the statements that read them say their
/// states exactly this way (`store_reads_use_the_state_indexes` checks their plans).
const STATE_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS messages_waiting ON messages (topic, state, next_at_ms)
    WHERE state = 'ready' OR state = 'scheduled';
CREATE INDEX IF NOT EXISTS messages_leased ON messages (topic, lease_until_ms)
    WHERE state = 'leased';
CREATE INDEX IF NOT EXISTS messages_settled ON messages (updated_at_ms)
    WHERE state IN ('delivered', 'discarded');
CREATE INDEX IF NOT EXISTS messages_keyed ON messages (topic, key, state, seq)
    WHERE key IS NOT NULL;
";

/// The indexes of every state that [`STATE_INDEXES`] replaced.
const WHOLE_STATE_INDEXES: [&str; 4] = [
    "messages_due",
    "messages_lease",
    "messages_topic_due",
    "messages_done",
];

/// The store. Cheap to share behind an `Arc`; calls are serialised on one connection (SQLite
/// has one writer anyway), so call it from blocking threads, not async tasks. Write
/// transactions begin `IMMEDIATE`: another process (`verdict dlq replay` beside a running
/// gateway) then waits on the busy timeout instead of failing a read-then-write upgrade.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl SqliteStore {
    /// Open (creating when missing) the store at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                open_err(rusqlite::Error::InvalidPath(
                    format!("{}: {e}", dir.display()).into(),
                ))
            })?;
        }
        let conn = Connection::open(path).map_err(open_err)?;
        // Message payloads live here: readable by the gateway's user only (SQLite gives its
        // -wal and -shm files the same mode).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
                |e| {
                    open_err(rusqlite::Error::InvalidPath(
                        format!("{}: {e}", path.display()).into(),
                    ))
                },
            )?;
        }
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        migrate(&conn).map_err(open_err)?;
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        conn.execute_batch(STATE_INDEXES).map_err(open_err)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Messages by state: counters the store keeps as states change (triggers in the same
    /// transactions), so reading them costs the same with ten messages or ten million.
    pub fn counts(&self) -> Result<StateCounts, StoreError> {
        let conn = self.conn();
        let mut counts = StateCounts::default();
        let mut stmt = conn.prepare_cached("SELECT state, n FROM state_counts")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?;
        for row in rows {
            let (state, n) = row?;
            counts.set(&state, n)?;
        }
        Ok(counts)
    }

    /// Audit events with this name (`lease-expired`, `replayed`, ...).
    pub fn audit_count(&self, event: &str) -> Result<u64, StoreError> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*) FROM audit WHERE event = ?1",
            [event],
            |r| r.get(0),
        )?)
    }

    /// Run `change` in one `IMMEDIATE` transaction, committed when it succeeds.
    fn write<T>(
        &self,
        change: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let value = change(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Bring a store written by an earlier version up to [`SCHEMA`]: the lease fence column, the
/// topic list the per-route claim reads, the state counters (counted once, here), the
/// kept repeat counts (counted once from the DLQ rows still there), and the per-state
/// indexes in place of the whole-table ones (built from the rows there, in the same
/// transaction that drops the old ones).
fn migrate(conn: &Connection) -> Result<(), rusqlite::Error> {
    let has_messages: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'messages'",
        [],
        |r| r.get(0),
    )?;
    if !has_messages {
        return Ok(());
    }
    let has_lease: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('messages') WHERE name = 'lease'",
        [],
        |r| r.get(0),
    )?;
    if !has_lease {
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             ALTER TABLE messages ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;
             CREATE TABLE IF NOT EXISTS topics (topic TEXT PRIMARY KEY) WITHOUT ROWID;
             INSERT OR IGNORE INTO topics SELECT DISTINCT topic FROM messages;
             COMMIT;",
        )?;
    }
    let has_counts: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'state_counts'",
        [],
        |r| r.get(0),
    )?;
    if !has_counts {
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             CREATE TABLE state_counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL)
                 WITHOUT ROWID;
             INSERT INTO state_counts SELECT state, COUNT(*) FROM messages GROUP BY state;
             COMMIT;",
        )?;
    }
    let has_repeats: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('dlq') WHERE name = 'repeats'",
        [],
        |r| r.get(0),
    )?;
    if !has_repeats {
        conn.execute_batch(REPEATS_KEPT)?;
    }
    let has_key: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('messages') WHERE name = 'key'",
        [],
        |r| r.get(0),
    )?;
    if !has_key {
        // Messages published before keys existed are unordered.
        conn.execute_batch("ALTER TABLE messages ADD COLUMN key TEXT;")?;
    }
    let whole_state_indexes: bool = conn.query_row(
        &format!(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'index' AND name IN ('{}')",
            WHOLE_STATE_INDEXES.join("', '")
        ),
        [],
        |r| r.get(0),
    )?;
    if whole_state_indexes {
        let drops: String = WHOLE_STATE_INDEXES
            .iter()
            .map(|name| format!("DROP INDEX IF EXISTS {name};\n"))
            .collect();
        conn.execute_batch(&format!("BEGIN IMMEDIATE;\n{drops}{STATE_INDEXES}COMMIT;"))?;
    }
    Ok(())
}

/// The migration to kept repeat counts.
const REPEATS_KEPT: &str = "BEGIN IMMEDIATE;
    ALTER TABLE messages ADD COLUMN dead_letterings INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE dlq ADD COLUMN repeats INTEGER NOT NULL DEFAULT 0;
    UPDATE dlq SET repeats = (SELECT COUNT(*) FROM dlq earlier
        WHERE earlier.message_seq = dlq.message_seq AND earlier.seq < dlq.seq);
    UPDATE messages SET dead_letterings = (SELECT COUNT(*) FROM dlq
        WHERE dlq.message_seq = messages.seq);
    COMMIT;";

fn audit(
    tx: &Connection,
    at_ms: u64,
    message_id: &str,
    topic: &str,
    event: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO audit (at_ms, message_id, topic, event, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(rusqlite::params![at_ms, message_id, topic, event, detail])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store written before repeat counts were kept: opening it counts them once, from
    /// the DLQ rows it still has.
    #[test]
    fn an_earlier_store_gets_its_repeat_counts_counted_once() {
        let dir =
            std::env::temp_dir().join(format!("verdict-sqlite-repeats-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        {
            let conn = Connection::open(&path).unwrap();
            let earlier = SCHEMA
                .replace(",\n    dead_letterings INTEGER NOT NULL DEFAULT 0", "")
                .replace(",\n    repeats INTEGER NOT NULL DEFAULT 0", "");
            assert!(!earlier.contains("repeats") && !earlier.contains("dead_letterings"));
            conn.execute_batch(&earlier).unwrap();
            conn.execute_batch(
                "INSERT INTO messages (seq, id, topic, headers, payload, state, next_at_ms,
                                       published_at_ms, updated_at_ms)
                 VALUES (1, 'm', 't', '{}', x'', 'dead', 0, 0, 0);
                 INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason,
                                  attempts, created_at_ms, format, envelope, state)
                 VALUES (1, 'm', 't', 't.DLQ', 'poison', 'k', 'r', 1, 1, 'json', x'', 'replayed'),
                        (1, 'm', 't', 't.DLQ', 'poison', 'k', 'r', 1, 2, 'json', x'', 'dead');",
            )
            .unwrap();
        }
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let repeats: Vec<i64> = conn
            .prepare("SELECT repeats FROM dlq ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(repeats, [0, 1]);
        let kept: i64 = conn
            .query_row("SELECT dead_letterings FROM messages", [], |r| r.get(0))
            .unwrap();
        assert_eq!(kept, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Each statement that reads messages by state goes through the index of that state: a
    /// partial index is used only when the statement names its states the way the index
    /// does, and a mismatch would not fail - it would read the whole table on every claim.
    #[test]
    fn store_reads_use_the_state_indexes() {
        let dir = std::env::temp_dir().join(format!("verdict-sqlite-plans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = SqliteStore::open(&dir.join("store.db")).unwrap();
        let conn = store.conn();
        let reads: [(&str, &str, &[&str]); 4] = [
            (
                "claim",
                messages::CLAIM_TOPIC,
                &["messages_waiting", "messages_leased", "messages_keyed"],
            ),
            (
                "next due",
                messages::NEXT_DUE,
                &["messages_waiting", "messages_leased", "messages_keyed"],
            ),
            (
                "prune topics",
                messages::PRUNE_TOPICS,
                &["messages_waiting", "messages_leased"],
            ),
            (
                "retention",
                retention::DOOMED_MESSAGES,
                &["messages_settled"],
            ),
        ];
        for (name, sql, indexes) in reads {
            let plan = plan(&conn, sql);
            for index in indexes {
                assert!(
                    plan.iter().any(|step| step.contains(index)),
                    "{name} does not use {index}: {plan:?}"
                );
            }
            assert!(
                !plan.iter().any(|step| step == "SCAN messages"),
                "{name} reads the whole messages table: {plan:?}"
            );
        }
        drop(conn);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store written with an index per state column: opening it replaces them with the
    /// per-state indexes, built from the rows already there.
    #[test]
    fn an_earlier_store_gets_per_state_indexes_in_place_of_the_whole_table_ones() {
        let dir =
            std::env::temp_dir().join(format!("verdict-sqlite-indexes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(
                "CREATE INDEX messages_due ON messages (state, next_at_ms);
                 CREATE INDEX messages_lease ON messages (state, lease_until_ms);
                 CREATE INDEX messages_topic_due ON messages (topic, state, next_at_ms);
                 CREATE INDEX messages_done ON messages (state, updated_at_ms);
                 INSERT INTO topics VALUES ('t');
                 INSERT INTO messages (id, topic, headers, payload, state, next_at_ms,
                                       lease_until_ms, published_at_ms, updated_at_ms)
                 VALUES ('a', 't', '{}', x'', 'ready', 50, NULL, 0, 0),
                        ('b', 't', '{}', x'', 'scheduled', 40, NULL, 0, 0),
                        ('c', 't', '{}', x'', 'leased', 0, 30, 0, 0),
                        ('d', 't', '{}', x'', 'delivered', 0, NULL, 0, 0);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let indexes: Vec<String> = store
            .conn()
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' AND sql IS NOT NULL ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            indexes,
            [
                "messages_keyed",
                "messages_leased",
                "messages_settled",
                "messages_waiting"
            ]
        );
        // The rows already there are in the new indexes: the lease is the earliest.
        assert_eq!(store.next_due_ms().unwrap(), Some(30));
        store
            .conn()
            .execute("UPDATE messages SET state = 'delivered' WHERE id = 'c'", [])
            .unwrap();
        assert_eq!(store.next_due_ms().unwrap(), Some(40));
        assert_eq!(store.prune_topics().unwrap(), 0, "t still has work");
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
