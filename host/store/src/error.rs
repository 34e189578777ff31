//! Why a store call failed, whatever the backend.

use std::path::PathBuf;

/// A database driver's error, kept as the source of the [`StoreError`] it caused: the
/// message quotes it for people, the source keeps it for code (its SQL state, its kind).
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The SQLite file could not be opened or set up.
    #[error("{path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// A SQLite statement failed.
    #[error("store: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The shared database could not be reached or set up.
    #[error("store {target}: {message}")]
    Connect {
        /// The database, as `postgres://host:port/name` (never with its password).
        target: String,
        /// Why, as the database or driver said it.
        message: String,
        /// The driver's error, when it was one (downcast it to the driver's type to read
        /// its code).
        #[source]
        cause: Option<Cause>,
    },
    /// A statement on the shared database failed (the connection may be gone: the next
    /// call reconnects).
    #[error("store: {message}")]
    Database {
        /// What the database or driver said.
        message: String,
        /// The driver's error, when it was one.
        #[source]
        cause: Option<Cause>,
    },
    /// The database asked for the transaction to be run again (a deadlock victim); the
    /// store does so a few times before passing this on as [`StoreError::Database`].
    #[error("store: {message}")]
    Retry {
        /// What the database said.
        message: String,
        /// The driver's error.
        #[source]
        cause: Option<Cause>,
    },
    /// The connection broke under a statement (the server ended the session, the network
    /// cut it): the store reconnects and runs the call once more - safe whether or not the
    /// first run committed, since every settlement is fenced by its lease and every
    /// message id is unique - before passing it on.
    #[error("store: {message}")]
    Disconnected {
        /// What the driver said.
        message: String,
        /// The driver's error.
        #[source]
        cause: Option<Cause>,
    },
    /// The store URL names no backend this build has, or is malformed.
    #[error("[gateway] store: {0}")]
    Url(String),
    /// A stored value could not be decoded.
    #[error("store: {0}")]
    Corrupt(String),
    /// A listing's `after` cursor is not one this store hands out.
    #[error("after: {0}")]
    Cursor(String),
    /// A settlement for a lease that is no longer the message's: another delivery took the
    /// message over (this one outlived its lease), so its outcome is not applied.
    #[error("store: message {seq} is no longer held by lease {lease}; its outcome is not applied")]
    Fenced {
        /// The message.
        seq: i64,
        /// The lease the settlement was for.
        lease: i64,
    },
}

impl StoreError {
    /// Whether the database could not be reached (refused, or the session ended under the
    /// call and a new one failed too) - a state that passes, unlike a statement the
    /// database refused.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Connect { .. } | StoreError::Disconnected { .. }
        )
    }

    /// A statement's failure that no driver error stands behind.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn database(message: impl Into<String>) -> StoreError {
        StoreError::Database {
            message: message.into(),
            cause: None,
        }
    }
}

/// What a PostgreSQL error says to an operator: the server's message and detail (the
/// driver's own `Display` says only "db error"), or the driver's error with its causes.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("postgres: {}: {detail}", db.message()),
            None => format!("postgres: {}", db.message()),
        },
        None => {
            let mut m = format!("postgres: {e}");
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                m.push_str(&format!(": {s}"));
                source = s.source();
            }
            m
        }
    }
}

#[cfg(feature = "postgres")]
impl From<postgres::Error> for StoreError {
    /// The driver's `Display` says only "db error"; the server's message and detail are
    /// what an operator needs.
    fn from(e: postgres::Error) -> Self {
        let message = postgres_message(&e);
        // Deadlock victim, serialization failure: the transaction is to be run again.
        let retry = e.code().is_some_and(|c| {
            *c == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                || *c == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
        });
        // The session ended under the call: the server's shutdown or an administrator's
        // `pg_terminate_backend`, or a connection the client found closed.
        let gone = e.is_closed()
            || e.code().is_some_and(|c| {
                *c == postgres::error::SqlState::ADMIN_SHUTDOWN
                    || *c == postgres::error::SqlState::CRASH_SHUTDOWN
            });
        let cause = Some(Box::new(e) as Cause);
        if retry {
            StoreError::Retry { message, cause }
        } else if gone {
            StoreError::Disconnected { message, cause }
        } else {
            StoreError::Database { message, cause }
        }
    }
}
