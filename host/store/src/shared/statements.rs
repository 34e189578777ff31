//! The statements of the shared algorithm, one field each: a dialect fills them with its
//! own SQL. Each field's doc says what the statement must take and answer; the arguments
//! are listed in order (`$1, $2, ...` on PostgreSQL, `?` on MariaDB).

/// Every statement the shared algorithm runs, in one database's SQL.
pub(crate) struct Statements {
    /// The `n`th argument's placeholder (from 1), for statements built at run time.
    pub placeholder: fn(usize) -> String,
    /// Now by the server's clock, ms since the epoch: one integer.
    pub clock: &'static str,
    /// `(state, count)` of every state messages are in.
    pub counts: &'static str,
    /// `(topic, keys)` of every topic with parked keys: the distinct keys with an
    /// unfinished keyed message that has failed before (only a key's oldest unfinished
    /// message can have been delivered, so these are the keys a retry holds back - waiting
    /// for it, given back to wait, or in flight).
    pub parked_keys: &'static str,
    /// Takes an event name; answers how many audit records have it.
    pub audit_count: &'static str,
    /// Takes `(at_ms, message_id, topic, event, detail)`; writes an audit record.
    pub audit: &'static str,

    // Migrations.
    /// Answers one row when the schema table exists, none otherwise.
    pub schema_exists: &'static str,
    /// Makes the schema table (`version`, `applied_at`) if it is missing.
    pub schema_table: &'static str,
    /// Answers the highest version applied (0 for none).
    pub schema_version: &'static str,
    /// Takes a version; records it applied.
    pub schema_applied: &'static str,

    // Settling a batch.
    /// Takes the batch's seqs (keys); locks their rows in `seq` order (as every batch and
    /// lease extension locks them, so that two never wait on each other in a cycle) and
    /// answers `(seq, lease, id, topic, attempt)` of those still leased.
    pub lock_batch: &'static str,
    /// Takes `(now_ms, seqs)`; marks the listed leased rows delivered.
    pub delivered: &'static str,
    /// Takes `(state, due_at_ms?, attempts_spent, deferrals_counted,
    /// dead_letterings_counted, deliveries_returned, failed_at_ms?, updated_at_ms?, seq,
    /// lease)`: a [`crate::plan::Plan`] applied to message `seq` while lease `lease` holds
    /// it, and only then (the fence every settlement passes).
    pub settle: &'static str,
    /// Takes `(message_seq, at_ms, kind, message)`; records a failed attempt.
    pub attempt: &'static str,
    /// Where the dialect can: [`Statements::settle`] and [`Statements::attempt`] in one
    /// statement - `settle`'s arguments, then the attempt's `(at_ms, kind, message)` - the
    /// attempt recorded only when the fence held (one row changed). A settlement that
    /// records a failure is most of them; one statement instead of two is one round trip
    /// and one statement's overhead less in the database.
    pub settle_recording: Option<&'static str>,
    /// Takes `(message_seq, message_id, topic, dlq, class, kind, reason, attempts,
    /// created_at_ms, format, envelope, message_seq)`; writes a dead letter whose `repeats`
    /// is the message's dead-letterings before this one (read from the message, whose seq
    /// comes twice for placeholders that are not numbered).
    pub letter: &'static str,

    // Dead-letter queues.
    /// The columns of a dead letter, in the order [`crate::shared::dlq`] reads them, with
    /// `FROM dlq` and no condition: the listing adds its own.
    pub dlq_select: &'static str,
    /// `(dlq, topic, depth, oldest_at_ms, ingress)` of every DLQ and source topic.
    pub dlq_stats: &'static str,
    /// Takes a dead letter's seq; locks it while it is dead and answers `(message_seq,
    /// message_id, topic)`.
    pub dlq_take: &'static str,
    /// Takes `(state, seq)`; moves a dead letter taken above out of its DLQ.
    pub dlq_leave: &'static str,
    /// Takes a message seq; forgets its attempts (a replayed message starts afresh).
    pub forget_attempts: &'static str,
    /// Takes `(now_ms, now_ms, seq)`; makes a message ready now with its counters reset.
    pub ready_again: &'static str,
    /// Takes `(payload?, content_type?, headers?, seq)`; what an operator repaired.
    pub repair: &'static str,
    /// Takes `(now_ms, seq)`; discards a message for good.
    pub discard_message: &'static str,
    /// Run first in a transaction that makes messages ready again, if set (PostgreSQL: the
    /// topic list's lock, held shared, so that no topic is forgotten beside it).
    pub ready_begin: Option<&'static str>,
    /// Takes a topic; lists it among the topics claims look at, if set.
    pub topic_listed: Option<&'static str>,
    /// Run last in a transaction that made messages ready again, if set (PostgreSQL: the
    /// notification that wakes every gateway).
    pub made_ready: Option<&'static str>,

    // Retention.
    /// Takes `(before_ms, batch)`; answers the seqs of replayed or discarded dead letters
    /// older than `before_ms`, locked, skipping rows others hold.
    pub prune_dlq: &'static str,
    /// Takes `(before_ms, batch)`; answers the seqs of delivered or discarded messages
    /// older than `before_ms` that no dead letter refers to, locked, skipping rows others
    /// hold.
    pub prune_messages: &'static str,
    /// Takes seqs; deletes those dead letters.
    pub delete_dlq: &'static str,
    /// Takes message seqs; deletes their attempts.
    pub delete_attempts: &'static str,
    /// Takes seqs; deletes those messages.
    pub delete_messages: &'static str,
    /// Takes `(before_ms, batch)`; deletes up to `batch` audit records older than
    /// `before_ms`.
    pub prune_audit: &'static str,
}
