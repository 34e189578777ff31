//! The shared algorithm's statements in PostgreSQL's SQL.

use crate::shared::Statements;

/// `settle`'s `UPDATE`, a literal so that `settle_recording` can wrap the same text.
macro_rules! settle_update {
    () => {
        "UPDATE messages SET state = $1, lease_until_ms = NULL,
                next_at_ms = COALESCE($2, next_at_ms),
                attempt = LEAST(attempt + $3, 4294967295),
                deferrals = LEAST(deferrals + $4, 4294967295),
                dead_letterings = dead_letterings + $5,
                deliveries = GREATEST(deliveries - $6, 0),
                first_failed_at_ms = COALESCE(first_failed_at_ms, $7),
                updated_at_ms = COALESCE($8, updated_at_ms)
         WHERE seq = $9 AND lease = $10 AND state = 'leased'"
    };
}

/// Every statement of [`crate::shared`] on PostgreSQL.
pub(super) static SQL: Statements = Statements {
    placeholder: |n| format!("${n}"),
    clock: "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
    // Each state counted in its own index (a count over the table would read every row).
    counts: "SELECT state, COUNT(*) FROM messages WHERE state IN ('ready', 'scheduled')
                 GROUP BY state
             UNION ALL SELECT 'leased', COUNT(*) FROM messages WHERE state = 'leased'
             UNION ALL SELECT state, COUNT(*) FROM messages
                 WHERE state IN ('delivered', 'dead', 'discarded') GROUP BY state",
    parked_keys: "SELECT topic, COUNT(DISTINCT key) FROM messages
                  WHERE state IN ('ready', 'scheduled', 'leased') AND key IS NOT NULL
                    AND first_failed_at_ms IS NOT NULL
                  GROUP BY topic ORDER BY topic",
    audit_count: "SELECT COUNT(*) FROM audit WHERE event = $1",
    audit: "INSERT INTO audit (at_ms, message_id, topic, event, detail)
            VALUES ($1, $2, $3, $4, $5)",

    schema_exists: "SELECT 1 WHERE to_regclass('verdict_schema') IS NOT NULL",
    schema_table: "CREATE TABLE IF NOT EXISTS verdict_schema (
                       version INTEGER PRIMARY KEY,
                       applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    schema_version: "SELECT COALESCE(MAX(version), 0)::BIGINT FROM verdict_schema",
    schema_applied: "INSERT INTO verdict_schema (version) VALUES (CAST($1::BIGINT AS INTEGER))",

    lock_batch: "SELECT seq, lease, id, topic, attempt FROM messages
                 WHERE seq = ANY($1) AND state = 'leased' ORDER BY seq FOR UPDATE",
    delivered: "UPDATE messages SET state = 'delivered', lease_until_ms = NULL,
                       updated_at_ms = $1
                WHERE seq = ANY($2) AND state = 'leased'",
    settle: settle_update!(),
    attempt: "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES ($1, $2, $3, $4)",
    settle_recording: Some(concat!(
        "WITH settled AS (",
        settle_update!(),
        " RETURNING seq)
         INSERT INTO attempts (message_seq, at_ms, kind, message)
         SELECT seq, $11, $12, $13 FROM settled"
    )),
    letter: "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason,
                              attempts, created_at_ms, format, envelope, state, repeats)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'dead',
                     (SELECT dead_letterings - 1 FROM messages WHERE seq = $12))",

    dlq_select: "SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
                        created_at_ms, format, envelope",
    dlq_stats: "SELECT dlq, topic, COUNT(*) FILTER (WHERE state = 'dead'),
                       COALESCE(MIN(created_at_ms) FILTER (WHERE state = 'dead'), 0), COUNT(*)
                FROM dlq GROUP BY dlq, topic ORDER BY dlq, topic",
    dlq_take: "SELECT message_seq, message_id, topic FROM dlq
               WHERE seq = $1 AND state = 'dead' FOR UPDATE",
    dlq_leave: "UPDATE dlq SET state = $1 WHERE seq = $2",
    forget_attempts: "DELETE FROM attempts WHERE message_seq = $1",
    ready_again: "UPDATE messages SET state = 'ready', attempt = 0, deferrals = 0,
                         first_failed_at_ms = NULL, next_at_ms = $1, lease_until_ms = NULL,
                         updated_at_ms = $2
                  WHERE seq = $3",
    repair: "UPDATE messages SET payload = COALESCE($1, payload),
                    content_type = COALESCE($2, content_type),
                    headers = COALESCE($3, headers)
             WHERE seq = $4",
    discard_message: "UPDATE messages SET state = 'discarded', updated_at_ms = $1 WHERE seq = $2",
    // The topic list's lock (`super::TOPICS_LOCK`), held shared.
    ready_begin: Some("SELECT pg_advisory_xact_lock_shared(8531350844713694209)"),
    topic_listed: Some("INSERT INTO topics (topic) VALUES ($1) ON CONFLICT (topic) DO NOTHING"),
    made_ready: Some("SELECT pg_notify('verdict_due', '')"),

    prune_dlq: "SELECT seq FROM dlq
                WHERE state IN ('replayed', 'discarded') AND created_at_ms < $1
                LIMIT $2 FOR UPDATE SKIP LOCKED",
    // A key's newest finished message stays while an older one of its key is a dead letter
    // (see the SQLite store's `DOOMED_MESSAGES`).
    prune_messages: "SELECT seq FROM messages
                     WHERE state IN ('delivered', 'discarded') AND updated_at_ms < $1
                       AND NOT EXISTS (SELECT 1 FROM dlq WHERE dlq.message_seq = messages.seq)
      AND (messages.key IS NULL
           OR NOT EXISTS (SELECT 1 FROM messages d WHERE d.topic = messages.topic
                            AND d.key = messages.key AND d.state = 'dead'
                            AND d.seq < messages.seq)
           OR EXISTS (SELECT 1 FROM messages n WHERE n.topic = messages.topic
                        AND n.key = messages.key AND n.state IN ('delivered', 'discarded')
                        AND n.seq > messages.seq))
                     LIMIT $2 FOR UPDATE SKIP LOCKED",
    delete_dlq: "DELETE FROM dlq WHERE seq = ANY($1)",
    delete_attempts: "DELETE FROM attempts WHERE message_seq = ANY($1)",
    delete_messages: "DELETE FROM messages WHERE seq = ANY($1)",
    prune_audit: "DELETE FROM audit WHERE seq IN (
                      SELECT seq FROM audit WHERE at_ms < $1 LIMIT $2)",
};
