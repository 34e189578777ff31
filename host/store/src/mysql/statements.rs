//! The shared algorithm's statements in MariaDB's (and MySQL's) SQL.

use crate::shared::Statements;

/// Every statement of [`crate::shared`] on MariaDB/MySQL.
pub(super) static SQL: Statements = Statements {
    placeholder: |_| "?".to_string(),
    clock: "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
    counts: "SELECT state, COUNT(*) FROM messages GROUP BY state",
    parked_keys: "SELECT topic, COUNT(DISTINCT `key`) FROM messages
                  WHERE state IN ('ready', 'scheduled', 'leased') AND `key` IS NOT NULL
                    AND first_failed_at_ms IS NOT NULL
                  GROUP BY topic ORDER BY topic",
    audit_count: "SELECT COUNT(*) FROM audit WHERE event = ?",
    audit: "INSERT INTO audit (at_ms, message_id, topic, event, detail) VALUES (?, ?, ?, ?, ?)",

    schema_exists: "SELECT 1 FROM information_schema.tables
                    WHERE table_schema = DATABASE() AND table_name = 'verdict_schema'",
    schema_table: "CREATE TABLE IF NOT EXISTS verdict_schema (
                       version INT NOT NULL PRIMARY KEY,
                       applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE = InnoDB",
    schema_version: "SELECT COALESCE(MAX(version), 0) FROM verdict_schema",
    schema_applied: "INSERT INTO verdict_schema (version) VALUES (?)",

    // Read only the rows still leased: the locks make the read exact, no one else can
    // settle or claim these rows until this transaction ends.
    lock_batch: "SELECT seq, lease, id, topic, attempt FROM messages
                 WHERE seq IN (?) AND state = 'leased' ORDER BY seq FOR UPDATE",
    delivered: "UPDATE messages SET state = 'delivered', lease_until_ms = NULL,
                       updated_at_ms = ?
                WHERE seq IN (?) AND state = 'leased'",
    settle: "UPDATE messages SET state = ?, lease_until_ms = NULL,
                    next_at_ms = COALESCE(?, next_at_ms),
                    attempt = LEAST(attempt + ?, 4294967295),
                    deferrals = LEAST(deferrals + ?, 4294967295),
                    dead_letterings = dead_letterings + ?,
                    deliveries = GREATEST(deliveries - ?, 0),
                    first_failed_at_ms = COALESCE(first_failed_at_ms, ?),
                    updated_at_ms = COALESCE(?, updated_at_ms)
             WHERE seq = ? AND lease = ? AND state = 'leased'",
    attempt: "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES (?, ?, ?, ?)",
    // No data-changing statement in a CTE: the two go one after the other.
    settle_recording: None,
    letter: "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason, attempts,
                              created_at_ms, format, envelope, state, repeats)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'dead',
                     (SELECT dead_letterings - 1 FROM messages WHERE seq = ?))",

    dlq_select: "SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
                        created_at_ms, format, envelope",
    dlq_stats: "SELECT dlq, topic, CAST(COALESCE(SUM(state = 'dead'), 0) AS SIGNED),
                       COALESCE(MIN(CASE WHEN state = 'dead' THEN created_at_ms END), 0),
                       COUNT(*)
                FROM dlq GROUP BY dlq, topic ORDER BY dlq, topic",
    dlq_take: "SELECT message_seq, message_id, topic FROM dlq
               WHERE seq = ? AND state = 'dead' FOR UPDATE",
    dlq_leave: "UPDATE dlq SET state = ? WHERE seq = ?",
    forget_attempts: "DELETE FROM attempts WHERE message_seq = ?",
    ready_again: "UPDATE messages SET state = 'ready', attempt = 0, deferrals = 0,
                         first_failed_at_ms = NULL, next_at_ms = ?, lease_until_ms = NULL,
                         updated_at_ms = ?
                  WHERE seq = ?",
    repair: "UPDATE messages SET payload = COALESCE(?, payload),
                    content_type = COALESCE(?, content_type),
                    headers = COALESCE(?, headers)
             WHERE seq = ?",
    discard_message: "UPDATE messages SET state = 'discarded', updated_at_ms = ? WHERE seq = ?",
    // The topic list is the pending messages' own index: nothing to list or lock, and
    // nothing to notify - an idle gateway's poll finds the replayed messages.
    ready_begin: None,
    topic_listed: None,
    made_ready: None,

    prune_dlq: "SELECT seq FROM dlq
                WHERE state IN ('replayed', 'discarded') AND created_at_ms < ?
                LIMIT ? FOR UPDATE SKIP LOCKED",
    // A key's newest finished message stays while an older one of its key is a dead letter
    // (see the SQLite store's `DOOMED_MESSAGES`).
    prune_messages: "SELECT seq FROM messages
                     WHERE state IN ('delivered', 'discarded') AND updated_at_ms < ?
                       AND NOT EXISTS (SELECT 1 FROM dlq WHERE dlq.message_seq = messages.seq)
      AND (messages.`key` IS NULL
           OR NOT EXISTS (SELECT 1 FROM messages d WHERE d.topic = messages.topic
                            AND d.`key` = messages.`key` AND d.state = 'dead'
                            AND d.seq < messages.seq)
           OR EXISTS (SELECT 1 FROM messages n WHERE n.topic = messages.topic
                        AND n.`key` = messages.`key` AND n.state IN ('delivered', 'discarded')
                        AND n.seq > messages.seq))
                     LIMIT ? FOR UPDATE SKIP LOCKED",
    delete_dlq: "DELETE FROM dlq WHERE seq IN (?)",
    delete_attempts: "DELETE FROM attempts WHERE message_seq IN (?)",
    delete_messages: "DELETE FROM messages WHERE seq IN (?)",
    prune_audit: "DELETE FROM audit WHERE at_ms < ? ORDER BY seq LIMIT ?",
};
