//! The PostgreSQL schema, as numbered migrations applied in order at connect (or by
//! `verdict store migrate`). The tables and columns are the SQLite store's, with the same
//! names and meanings as the dead-letter envelope; the views are for operators with `psql`.

/// Migration `n` is `MIGRATIONS[n - 1]` (one script each: schema changes are transactional
/// here, so a script runs whole or not at all); `verdict_schema` records each one applied.
/// Append, never edit: a gateway at version `n` applies only what comes after.
pub const MIGRATIONS: &[&[&str]] = &[&[V1], &[V2], &[V3], &[V4]];

const V1: &str = "
CREATE TABLE messages (
    seq BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL,
    headers TEXT NOT NULL,
    payload BYTEA NOT NULL,
    content_type TEXT,
    state TEXT NOT NULL CHECK (state IN
        ('ready', 'scheduled', 'leased', 'delivered', 'dead', 'discarded')),
    attempt BIGINT NOT NULL DEFAULT 0,
    deferrals BIGINT NOT NULL DEFAULT 0,
    deliveries BIGINT NOT NULL DEFAULT 0,
    next_at_ms BIGINT NOT NULL,
    lease_until_ms BIGINT,
    lease BIGINT NOT NULL DEFAULT 0,
    published_at_ms BIGINT NOT NULL,
    first_failed_at_ms BIGINT,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX messages_topic_due ON messages (topic, state, next_at_ms);
CREATE INDEX messages_due ON messages (state, next_at_ms);
CREATE INDEX messages_lease ON messages (state, lease_until_ms);
CREATE INDEX messages_done ON messages (state, updated_at_ms);
CREATE TABLE topics (topic TEXT PRIMARY KEY);
CREATE TABLE attempts (
    seq BIGSERIAL PRIMARY KEY,
    message_seq BIGINT NOT NULL REFERENCES messages (seq),
    at_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX attempts_message ON attempts (message_seq);
CREATE TABLE dlq (
    seq BIGSERIAL PRIMARY KEY,
    message_seq BIGINT NOT NULL REFERENCES messages (seq),
    message_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    dlq TEXT NOT NULL,
    class TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    format TEXT NOT NULL,
    envelope BYTEA NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('dead', 'replayed', 'discarded'))
);
CREATE INDEX dlq_state ON dlq (state, dlq);
CREATE INDEX dlq_message ON dlq (message_seq);
CREATE TABLE audit (
    seq BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    message_id TEXT,
    topic TEXT,
    event TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX audit_at ON audit (at_ms);
CREATE INDEX audit_event ON audit (event);

-- For operators: what waits, what is scheduled and when, what is dead and why.
CREATE VIEW pending AS
    SELECT seq, id, topic, state, attempt, next_at_ms, lease_until_ms,
           to_timestamp(next_at_ms / 1000.0) AS next_at
    FROM messages WHERE state IN ('ready', 'scheduled', 'leased');
CREATE VIEW scheduled AS
    SELECT seq, id, topic, attempt, deferrals, to_timestamp(next_at_ms / 1000.0) AS next_at,
           (SELECT kind FROM attempts a WHERE a.message_seq = m.seq
            ORDER BY a.seq DESC LIMIT 1) AS last_error
    FROM messages m WHERE state = 'scheduled';
CREATE VIEW dead AS
    SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
           to_timestamp(created_at_ms / 1000.0) AS dead_lettered_at
    FROM dlq WHERE state = 'dead';
";

/// Repeat counts kept with the message (`dead_letterings`) and written into each DLQ row
/// (`repeats`), counted once here from the rows still there: retention pruning old DLQ rows
/// no longer unparks a letter.
const V2: &str = "
ALTER TABLE messages ADD COLUMN dead_letterings BIGINT NOT NULL DEFAULT 0;
ALTER TABLE dlq ADD COLUMN repeats BIGINT NOT NULL DEFAULT 0;
UPDATE dlq d SET repeats = (SELECT COUNT(*) FROM dlq e
    WHERE e.message_seq = d.message_seq AND e.seq < d.seq);
UPDATE messages m SET dead_letterings = c.n
    FROM (SELECT message_seq, COUNT(*) AS n FROM dlq GROUP BY message_seq) c
    WHERE c.message_seq = m.seq;
";

/// Indexes per state in place of indexes over every row's state: a state change is never a
/// HOT update (`state` is indexed), so it wrote an entry into all six of the table's indexes;
/// now a row sits only in the index of its state, and a change writes three (the primary key,
/// `id`, and the index of the state it enters). PostgreSQL uses a partial index only for a
/// statement whose `WHERE` implies the index's predicate with literal states, which every
/// statement of the store's does (the operators' `pending` view, over three states, reads
/// the table). Built from the rows there, in the migration's transaction, with the table
/// locked first: the builds and the drops need stronger locks in turn, and a gateway of the
/// earlier version settling meanwhile would otherwise deadlock with them.
const V3: &str = "
LOCK TABLE messages IN ACCESS EXCLUSIVE MODE;
CREATE INDEX IF NOT EXISTS messages_waiting ON messages (topic, state, next_at_ms)
    WHERE state IN ('ready', 'scheduled');
CREATE INDEX IF NOT EXISTS messages_leased ON messages (topic, lease_until_ms)
    WHERE state = 'leased';
CREATE INDEX IF NOT EXISTS messages_settled ON messages (state, updated_at_ms)
    WHERE state IN ('delivered', 'dead', 'discarded');
DROP INDEX IF EXISTS messages_topic_due;
DROP INDEX IF EXISTS messages_due;
DROP INDEX IF EXISTS messages_lease;
DROP INDEX IF EXISTS messages_done;
";

/// Key ordering (a route's `ordering = "key"`): a message's key, and the index in which a
/// claim looks up its key's older unfinished messages. Rows without a key - every unordered
/// route's - stay out of the index. Adding a column without a default rewrites nothing; the
/// index build reads the table once, holding off writes meanwhile (the `ALTER` first takes
/// the table's strongest lock, so a gateway of the earlier version settling beside it waits
/// instead of deadlocking).
const V4: &str = "
ALTER TABLE messages ADD COLUMN key TEXT;
CREATE INDEX messages_keyed ON messages (topic, key, state, seq) WHERE key IS NOT NULL;
";
