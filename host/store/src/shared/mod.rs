//! One algorithm for the stores several gateways share (PostgreSQL, MariaDB/MySQL).
//!
//! What the two databases do alike is written here once, over a [`Dialect`] that holds each
//! statement's SQL and opens sessions: the connection kept per caller and made again when
//! it breaks, the transaction a deadlock victim runs again, the schema migrations, the
//! settlement of a batch under its leases, the dead-letter operations and retention.
//! Publishing and claiming stay with each dialect, where PostgreSQL does better with what
//! MariaDB lacks (`UPDATE ... RETURNING` in one claim statement, `UNNEST` batches,
//! `NOTIFY`); so does any step a dialect can take faster ([`Dialect::deliver_only`]).

use std::sync::MutexGuard;

mod dlq;
mod migrate;
mod retention;
pub(crate) mod session;
mod settle;
mod statements;

pub(crate) use session::{Arg, Row, Session};
pub(crate) use statements::Statements;

use crate::db_clock::DbClock;
use crate::model::Settlement;
use crate::pool::Pool;
use crate::{StateCounts, StoreError};

/// How often a transaction the server picked as a deadlock victim is run again before its
/// error is returned.
const RETRIES: usize = 3;

/// What the shared algorithm needs of one database: its SQL and its sessions.
pub(crate) trait Dialect: Send + Sync + Sized + 'static {
    /// A live connection.
    type Conn: Send;

    /// Every statement of the shared algorithm, in this database's SQL.
    const SQL: &'static Statements;

    /// Open a connection (the caller maps a failure to [`StoreError::Connect`]).
    fn connect(&self) -> Result<Self::Conn, StoreError>;

    /// Whether `conn` can still be used (a driver that knows its socket closed says no).
    fn usable(conn: &Self::Conn) -> bool;

    /// Whether `conn` is kept after a call on it failed with `error` (a driver that rolls
    /// back its own half transactions keeps it; another keeps it only when the database
    /// was not involved, such as a stored value that does not decode).
    fn keeps_after_error(conn: &Self::Conn, error: &StoreError) -> bool;

    /// Run `f` on `conn` outside a transaction.
    fn session<T>(
        conn: &mut Self::Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;

    /// Run `f` in a transaction on `conn`: committed when `f` succeeds, rolled back when it
    /// fails.
    fn transaction<T, E: From<StoreError>>(
        conn: &mut Self::Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, E>,
    ) -> Result<T, E>;

    /// Run the migrations `f` applies while no other process migrates this database: in one
    /// transaction where schema changes are transactional, statement by statement under a
    /// named lock where they are not.
    fn migrating<T>(
        conn: &mut Self::Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;

    /// A batch of deliveries only (the usual batch: every consumer said yes), settled the
    /// dialect's fastest way; `None` to settle it like any other batch.
    fn deliver_only(
        _conn: &mut Self::Conn,
        _batch: &[(i64, i64, &Settlement)],
        _now_ms: u64,
    ) -> Option<Result<Vec<Result<(), StoreError>>, StoreError>> {
        None
    }
}

/// A shared store on one database: sessions made on first use and again after they
/// break, and the database's clock.
pub(crate) struct Shared<D: Dialect> {
    /// The database: its address, credentials and TLS.
    pub(crate) dialect: D,
    /// `host:port/database`, for logs and errors: never the password.
    pub(crate) target: String,
    conns: Pool<D::Conn>,
    /// The database's clock: every instant this store compares comes from it.
    clock: DbClock,
}

impl<D: Dialect> Shared<D> {
    pub(crate) fn new(dialect: D, target: String) -> Shared<D> {
        Shared {
            dialect,
            target,
            conns: Pool::new(),
            clock: DbClock::default(),
        }
    }

    /// Now by the database server's clock (see [`DbClock`]).
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The connections this store holds, let go of (for a driver that must close them
    /// elsewhere than where the store is dropped).
    #[cfg(feature = "postgres")]
    pub(crate) fn drain(&self) -> Vec<D::Conn> {
        self.conns.drain()
    }

    /// Run `f` on a connection, connecting first when there is none. A deadlock victim runs
    /// `f` again (its transaction was rolled back whole); a session that ended under the
    /// call is made again and `f` runs once more; a connection found broken is dropped, so
    /// the next call connects anew.
    pub(crate) fn with<T>(
        &self,
        mut f: impl FnMut(&mut D::Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conns.get();
        let mut tries = 0;
        let mut reconnected = false;
        loop {
            let conn = match self.connected(&mut guard) {
                Ok(conn) => conn,
                Err(StoreError::Disconnected { .. }) if !reconnected => {
                    *guard = None;
                    reconnected = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match f(conn) {
                Err(StoreError::Retry { .. }) if tries < RETRIES => tries += 1,
                Err(StoreError::Retry { message, cause }) => {
                    return Err(StoreError::Database { message, cause });
                }
                Err(StoreError::Disconnected { .. }) if !reconnected => {
                    *guard = None;
                    reconnected = true;
                }
                // Still gone: the caller decides (a settlement waits for the database
                // while its lease holds).
                Err(e @ StoreError::Disconnected { .. }) => {
                    *guard = None;
                    return Err(e);
                }
                Err(e) => {
                    if !D::keeps_after_error(conn, &e) {
                        *guard = None;
                    }
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }

    /// The held connection, made when there is none or it broke, with the clock read anew
    /// when its last reading is stale.
    fn connected<'g>(
        &self,
        guard: &'g mut MutexGuard<'_, Option<D::Conn>>,
    ) -> Result<&'g mut D::Conn, StoreError> {
        if guard.as_ref().is_none_or(|c| !D::usable(c)) {
            **guard = Some(self.dialect.connect()?);
        }
        let conn = guard.as_mut().expect("connected above");
        if self.clock.stale() {
            let read = self.clock.read(|| {
                D::session(conn, |s| {
                    s.query_opt(D::SQL.clock, &[])?
                        .map_or(Ok(0), |row| row.int(0))
                })
            });
            if let Err(e) = read {
                if !D::usable(conn) || !D::keeps_after_error(conn, &e) {
                    **guard = None;
                }
                return Err(e);
            }
        }
        Ok(guard.as_mut().expect("connected above"))
    }

    /// Run `f` in a transaction of its own (see [`Shared::with`]).
    pub(crate) fn transaction<T>(
        &self,
        mut f: impl FnMut(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with(|conn| D::transaction(conn, &mut f))
    }

    /// Run `f` outside a transaction (see [`Shared::with`]).
    pub(crate) fn read<T>(
        &self,
        mut f: impl FnMut(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with(|conn| D::session(conn, &mut f))
    }

    /// Messages by state. Counted, not kept in counters: a counter row every settlement
    /// updates would serialise the gateways sharing the database.
    pub(crate) fn counts(&self) -> Result<StateCounts, StoreError> {
        self.read(|s| {
            let mut counts = StateCounts::default();
            for row in s.query(D::SQL.counts, &[])? {
                counts.set(&row.text(0)?, row.int(1)?.max(0) as u64)?;
            }
            Ok(counts)
        })
    }

    /// Per topic with parked keys, how many (see [`Statements::parked_keys`]).
    pub(crate) fn parked_keys(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|s| {
            s.query(D::SQL.parked_keys, &[])?
                .iter()
                .map(|row| Ok((row.text(0)?, row.int(1)?.max(0) as u64)))
                .collect()
        })
    }

    /// Audit events with this name.
    pub(crate) fn audit_count(&self, event: &str) -> Result<u64, StoreError> {
        self.read(|s| {
            let row = s.query_opt(D::SQL.audit_count, &[Arg::Text(event)])?;
            Ok(row.map_or(Ok(0), |r| r.int(0))?.max(0) as u64)
        })
    }
}

/// Write an audit record in `s`.
pub(crate) fn audit<D: Dialect>(
    s: &mut dyn Session,
    at_ms: u64,
    message_id: &str,
    topic: &str,
    event: &str,
    detail: &str,
) -> Result<(), StoreError> {
    s.execute(
        D::SQL.audit,
        &[
            Arg::Int(crate::clamp_ms(at_ms)),
            Arg::Text(message_id),
            Arg::Text(topic),
            Arg::Text(event),
            Arg::Text(detail),
        ],
    )?;
    Ok(())
}

/// The public operations a shared store answers with the shared algorithm, written once
/// for every dialect's store type (whose `shared` field is a [`Shared`]).
macro_rules! shared_operations {
    () => {
        /// Apply each `(seq, lease, settlement)` in one transaction (see
        /// [`crate::Store::settle`]).
        pub fn settle(
            &self,
            batch: &[(i64, i64, &$crate::model::Settlement)],
            now_ms: u64,
        ) -> Result<Vec<Result<(), $crate::StoreError>>, $crate::StoreError> {
            self.shared.settle(batch, now_ms)
        }

        /// Dead letters matching `filter`, oldest first (by failure time, then `seq`).
        pub fn dlq_list(
            &self,
            filter: &$crate::DlqFilter,
            now_ms: u64,
        ) -> Result<Vec<$crate::DlqEntry>, $crate::StoreError> {
            self.shared.dlq_list(filter, now_ms)
        }

        /// The dead letter `seq`, if it is still in a DLQ.
        pub fn dlq_entry(&self, seq: i64) -> Result<Option<$crate::DlqEntry>, $crate::StoreError> {
            self.shared.dlq_entry(seq)
        }

        /// Depth, oldest entry and ingress of every DLQ (per source topic).
        pub fn dlq_stats(&self) -> Result<Vec<$crate::DlqStats>, $crate::StoreError> {
            self.shared.dlq_stats()
        }

        /// Put dead letters back as ready messages with their attempts reset.
        pub fn dlq_replay(
            &self,
            items: &[(i64, Option<&$crate::Repair>)],
            now_ms: u64,
            note: &str,
            event: &str,
        ) -> Result<Vec<String>, $crate::StoreError> {
            self.shared.dlq_replay(items, now_ms, note, event)
        }

        /// Discard dead letters for good, each audited with `reason`.
        pub fn dlq_discard(
            &self,
            seqs: &[i64],
            now_ms: u64,
            reason: &str,
        ) -> Result<u64, $crate::StoreError> {
            self.shared.dlq_discard(seqs, now_ms, reason)
        }

        /// Delete what is older than `before_ms` and no longer needed, `batch` rows of
        /// each kind per transaction, until a pass finds nothing.
        pub fn prune(
            &self,
            before_ms: u64,
            batch: usize,
        ) -> Result<$crate::Pruned, $crate::StoreError> {
            self.shared.prune(before_ms, batch)
        }

        /// Now by the database server's clock: what every gateway sharing this database
        /// compares leases, due times and retention with.
        pub fn now_ms(&self) -> u64 {
            self.shared.now_ms()
        }

        /// `host:port/database`, for logs and errors: never the password.
        pub fn target(&self) -> &str {
            &self.shared.target
        }

        /// The schema version the database is at (0 before the first migration).
        pub fn schema_version(&self) -> Result<u32, $crate::StoreError> {
            self.shared.schema_version()
        }

        /// Messages by state, counted.
        pub fn counts(&self) -> Result<$crate::StateCounts, $crate::StoreError> {
            self.shared.counts()
        }

        /// Per topic, how many keys a retry of their oldest message holds back.
        pub fn parked_keys(&self) -> Result<Vec<(String, u64)>, $crate::StoreError> {
            self.shared.parked_keys()
        }

        /// Audit events with this name.
        pub fn audit_count(&self, event: &str) -> Result<u64, $crate::StoreError> {
            self.shared.audit_count(event)
        }
    };
}
pub(crate) use shared_operations;
