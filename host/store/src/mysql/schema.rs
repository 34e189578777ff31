//! The MariaDB/MySQL schema, as numbered migrations applied in order at connect (or by
//! `verdict store migrate`): the SQLite store's tables with the same names and meanings,
//! in InnoDB, and the operators' views. DDL is not transactional here; each migration is
//! recorded once it has run, under a named lock so that two gateways never run one twice,
//! and a migration cut off part-way runs again whole, passing over what it had made (each
//! statement makes one object, and its "already exists" answer means it ran). So every
//! statement must be one that makes an object - a data change must be safe to repeat.

/// The schema as numbered migrations: migration `n` is `MIGRATIONS[n - 1]`, one statement
/// per element, each making one object (or a data change safe to repeat). What
/// [`MysqlStore::migrate`](super::MysqlStore::migrate) applies, for an operator who reviews
/// or runs it by hand. Append, never edit.
pub const MIGRATIONS: &[&[&str]] = &[V1, V2, V3];

const V1: &[&str] = &[
    "CREATE TABLE messages (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        id VARCHAR(256) NOT NULL,
        topic VARCHAR(512) NOT NULL,
        headers LONGTEXT NOT NULL,
        payload LONGBLOB NOT NULL,
        content_type VARCHAR(512),
        state VARCHAR(16) NOT NULL CHECK (state IN
            ('ready', 'scheduled', 'leased', 'delivered', 'dead', 'discarded')),
        attempt BIGINT NOT NULL DEFAULT 0,
        deferrals BIGINT NOT NULL DEFAULT 0,
        deliveries BIGINT NOT NULL DEFAULT 0,
        next_at_ms BIGINT NOT NULL,
        lease_until_ms BIGINT,
        lease BIGINT NOT NULL DEFAULT 0,
        published_at_ms BIGINT NOT NULL,
        first_failed_at_ms BIGINT,
        updated_at_ms BIGINT NOT NULL,
        UNIQUE KEY messages_id (id),
        KEY messages_topic_due (topic, state, next_at_ms),
        KEY messages_due (state, next_at_ms),
        KEY messages_lease (state, lease_until_ms),
        KEY messages_pending_topics (state, topic),
        KEY messages_done (state, updated_at_ms)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE attempts (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        message_seq BIGINT NOT NULL,
        at_ms BIGINT NOT NULL,
        kind VARCHAR(512) NOT NULL,
        message TEXT NOT NULL,
        KEY attempts_message (message_seq),
        FOREIGN KEY (message_seq) REFERENCES messages (seq)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE dlq (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        message_seq BIGINT NOT NULL,
        message_id VARCHAR(256) NOT NULL,
        topic VARCHAR(512) NOT NULL,
        -- A topic (at most 512) and the DLQ naming's prefix or suffix.
        dlq VARCHAR(600) NOT NULL,
        class VARCHAR(64) NOT NULL,
        kind VARCHAR(512) NOT NULL,
        reason TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        format VARCHAR(16) NOT NULL,
        envelope LONGBLOB NOT NULL,
        state VARCHAR(16) NOT NULL CHECK (state IN ('dead', 'replayed', 'discarded')),
        KEY dlq_state (state, dlq),
        KEY dlq_message (message_seq),
        FOREIGN KEY (message_seq) REFERENCES messages (seq)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE audit (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        message_id VARCHAR(256),
        topic VARCHAR(512),
        event VARCHAR(64) NOT NULL,
        detail TEXT NOT NULL,
        KEY audit_at (at_ms),
        KEY audit_event (event)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE VIEW pending AS
        SELECT seq, id, topic, state, attempt, next_at_ms, lease_until_ms,
               FROM_UNIXTIME(next_at_ms / 1000) AS next_at
        FROM messages WHERE state IN ('ready', 'scheduled', 'leased')",
    "CREATE VIEW scheduled AS
        SELECT seq, id, topic, attempt, deferrals, FROM_UNIXTIME(next_at_ms / 1000) AS next_at,
               (SELECT kind FROM attempts a WHERE a.message_seq = m.seq
                ORDER BY a.seq DESC LIMIT 1) AS last_error
        FROM messages m WHERE state = 'scheduled'",
    "CREATE VIEW dead AS
        SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
               FROM_UNIXTIME(created_at_ms / 1000) AS dead_lettered_at
        FROM dlq WHERE state = 'dead'",
];

/// Repeat counts kept with the message (`dead_letterings`) and written into each DLQ row
/// (`repeats`), counted once here from the rows still there: retention pruning old DLQ rows
/// no longer unparks a letter.
const V2: &[&str] = &[
    "ALTER TABLE messages ADD COLUMN dead_letterings BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE dlq ADD COLUMN repeats BIGINT NOT NULL DEFAULT 0",
    "UPDATE dlq d JOIN (SELECT a.seq, COUNT(b.seq) AS n FROM dlq a
         JOIN dlq b ON b.message_seq = a.message_seq AND b.seq < a.seq GROUP BY a.seq) c
         ON c.seq = d.seq SET d.repeats = c.n",
    "UPDATE messages m JOIN (SELECT message_seq, COUNT(*) AS n FROM dlq GROUP BY message_seq) c
         ON c.message_seq = m.seq SET m.dead_letterings = c.n",
];

/// Key ordering (a route's `ordering = "key"`): a message's key (at most 128 characters -
/// the gateway keeps a longer one as its digest), and the index in which a claim looks up
/// its key's older unfinished messages. The index fits InnoDB's 3,072-byte limit beside the
/// 512-character topic; unkeyed rows are in it too (InnoDB has no partial indexes).
const V3: &[&str] = &[
    "ALTER TABLE messages ADD COLUMN `key` VARCHAR(128)",
    "ALTER TABLE messages ADD KEY messages_keyed (topic, `key`, state, seq)",
];
