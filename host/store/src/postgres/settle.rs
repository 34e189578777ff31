//! What PostgreSQL settles faster than the shared algorithm: a batch of deliveries only -
//! the usual batch, every consumer said yes - in one statement, and so one round trip and
//! one transaction of its own, instead of a lock, an update and a commit; and within any
//! other batch, its retries, delays and releases in one statement instead of one each.

use std::collections::HashSet;

use postgres::GenericClient;

use super::Conn;
use super::session::Prepared;
use crate::model::Settlement;
use crate::plan::Plan;
use crate::{StoreError, clamp_ms};

/// Every `(seq, lease)` pair still held, delivered; the pairs it delivered come back. Rows
/// are locked in `seq` order, as every batch and lease extension locks them, so that two
/// never wait on each other in a cycle.
const DELIVERED_ALL: &str = "
WITH held AS (
    SELECT m.seq FROM messages m
    JOIN UNNEST($1::BIGINT[], $2::BIGINT[]) AS s (seq, lease)
      ON m.seq = s.seq AND m.lease = s.lease
    WHERE m.state = 'leased'
    ORDER BY m.seq
    FOR UPDATE OF m)
UPDATE messages m SET state = 'delivered', lease_until_ms = NULL, updated_at_ms = $3
FROM held WHERE m.seq = held.seq
RETURNING m.seq, m.lease";

/// Settle `batch`, whose every settlement is [`Settlement::Delivered`], in one statement.
pub(super) fn deliver_only(
    c: &mut Conn,
    batch: &[(i64, i64, &Settlement)],
    now_ms: u64,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let (seqs, leases): (Vec<i64>, Vec<i64>) = batch.iter().map(|b| (b.0, b.1)).unzip();
    let statement = c.statement(DELIVERED_ALL)?;
    let mut delivered: HashSet<(i64, i64)> = c
        .client
        .query(&statement, &[&seqs, &leases, &clamp_ms(now_ms)])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // Each pair answers once: a settlement that came twice is fenced the second time, as
    // it would be one by one.
    Ok(batch
        .iter()
        .map(|&(seq, lease, _)| {
            if delivered.remove(&(seq, lease)) {
                Ok(())
            } else {
                Err(StoreError::Fenced { seq, lease })
            }
        })
        .collect())
}

/// Plans without a letter or an audit record (retries, delays, releases), one array per
/// column: each applied under its lease as [`super::statements`]' `settle` applies one, the
/// attempt of each row changed recorded beside it, the pairs changed answered. The rows
/// are locked by the batch already.
const PLANS: &str = "
WITH plan AS (
    SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[],
                         $6::BIGINT[], $7::BIGINT[], $8::BIGINT[], $9::BIGINT[], $10::BIGINT[],
                         $11::BIGINT[], $12::TEXT[], $13::TEXT[])
        AS p (seq, lease, state, due_at_ms, attempts_spent, deferrals_counted,
              dead_letterings_counted, deliveries_returned, failed_at_ms, updated_at_ms,
              attempt_at_ms, attempt_kind, attempt_message)),
settled AS (
    UPDATE messages m SET state = p.state, lease_until_ms = NULL,
           next_at_ms = COALESCE(p.due_at_ms, m.next_at_ms),
           attempt = LEAST(m.attempt + p.attempts_spent, 4294967295),
           deferrals = LEAST(m.deferrals + p.deferrals_counted, 4294967295),
           dead_letterings = m.dead_letterings + p.dead_letterings_counted,
           deliveries = GREATEST(m.deliveries - p.deliveries_returned, 0),
           first_failed_at_ms = COALESCE(m.first_failed_at_ms, p.failed_at_ms),
           updated_at_ms = COALESCE(p.updated_at_ms, m.updated_at_ms)
    FROM plan p
    WHERE m.seq = p.seq AND m.lease = p.lease AND m.state = 'leased'
    RETURNING m.seq, m.lease),
recorded AS (
    INSERT INTO attempts (message_seq, at_ms, kind, message)
    SELECT p.seq, p.attempt_at_ms, p.attempt_kind, p.attempt_message
    FROM plan p JOIN settled s ON s.seq = p.seq AND s.lease = p.lease
    WHERE p.attempt_kind IS NOT NULL
    ORDER BY p.seq)
SELECT seq, lease FROM settled";

/// [`PLANS`]'s arguments: a column per field of the plans.
#[derive(Default)]
struct PlanColumns<'a> {
    seqs: Vec<i64>,
    leases: Vec<i64>,
    states: Vec<&'a str>,
    due_at_ms: Vec<Option<i64>>,
    attempts_spent: Vec<i64>,
    deferrals_counted: Vec<i64>,
    dead_letterings_counted: Vec<i64>,
    deliveries_returned: Vec<i64>,
    failed_at_ms: Vec<Option<i64>>,
    updated_at_ms: Vec<Option<i64>>,
    attempt_at_ms: Vec<Option<i64>>,
    attempt_kinds: Vec<Option<&'a str>>,
    attempt_messages: Vec<Option<&'a str>>,
}

/// Apply `plans` (none with a letter or an audit record) in one statement on `client`; the
/// `(seq, lease)` pairs changed.
pub(super) fn apply_plans(
    client: &mut impl GenericClient,
    prepared: &mut Prepared,
    plans: &[(i64, i64, &Plan<'_>)],
) -> Result<Vec<(i64, i64)>, StoreError> {
    let mut c = PlanColumns::default();
    for &(seq, lease, plan) in plans {
        c.seqs.push(seq);
        c.leases.push(lease);
        c.states.push(plan.state);
        c.due_at_ms.push(plan.due_at_ms);
        c.attempts_spent.push(plan.attempts_spent);
        c.deferrals_counted.push(plan.deferrals_counted);
        c.dead_letterings_counted.push(plan.dead_letterings_counted);
        c.deliveries_returned.push(plan.deliveries_returned);
        c.failed_at_ms.push(plan.failed_at_ms);
        c.updated_at_ms.push(plan.updated_at_ms);
        c.attempt_at_ms
            .push(plan.attempt.map(|a| clamp_ms(a.at_ms)));
        c.attempt_kinds.push(plan.attempt.map(|a| a.kind.as_str()));
        c.attempt_messages
            .push(plan.attempt.map(|a| a.message.as_str()));
    }
    let statement = prepared.get(client, PLANS)?;
    Ok(client
        .query(
            &statement,
            &[
                &c.seqs,
                &c.leases,
                &c.states,
                &c.due_at_ms,
                &c.attempts_spent,
                &c.deferrals_counted,
                &c.dead_letterings_counted,
                &c.deliveries_returned,
                &c.failed_at_ms,
                &c.updated_at_ms,
                &c.attempt_at_ms,
                &c.attempt_kinds,
                &c.attempt_messages,
            ],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

#[cfg(test)]
mod tests {
    //! [`PLANS`] on the PostgreSQL server on loopback (`VERDICT_TEST_POSTGRES` overrides
    //! it), in a database of the test's own. Called directly: through the store, a
    //! statement that failed would be hidden by the one-by-one run that follows it.

    use super::*;
    use crate::NewMessage;
    use crate::model::AttemptRecord;
    use crate::plan::plan;
    use crate::postgres::PostgresStore;

    struct Database(String);

    impl Database {
        fn server() -> String {
            std::env::var("VERDICT_TEST_POSTGRES")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string())
        }

        fn admin() -> postgres::Client {
            let url = format!("{}/postgres", Self::server());
            postgres::Client::connect(&url, postgres::NoTls)
                .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e} (is the server up?)"))
        }

        fn new() -> Database {
            let name = format!("verdict_plans_{}", std::process::id());
            Self::admin()
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
            Database(name)
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            let _ = Self::admin()
                .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
        }
    }

    #[test]
    fn retries_delays_and_releases_apply_in_one_statement_under_their_leases() {
        let db = Database::new();
        let store = PostgresStore::connect(&format!("{}/{}", Database::server(), db.0)).unwrap();
        let messages: Vec<NewMessage> = ["retry", "delay", "release", "stale"]
            .iter()
            .map(|id| NewMessage {
                id: id.to_string(),
                topic: "orders".into(),
                headers: Default::default(),
                payload: b"{}".to_vec(),
                content_type: None,
                key: None,
            })
            .collect();
        store.publish(&messages, 0).unwrap();
        let claimed = store
            .claim(10, &[(vec!["orders".to_string()], 4)], 60_000)
            .unwrap();
        let failed = AttemptRecord {
            at_ms: 20,
            kind: "http.503".into(),
            message: "down".into(),
        };
        let settlements = [
            Settlement::Again {
                failed: failed.clone(),
                delay_ms: 100,
                spend_attempt: true,
            },
            Settlement::Again {
                failed: failed.clone(),
                delay_ms: 100,
                spend_attempt: false,
            },
            Settlement::Release { delay_ms: 100 },
            Settlement::Again {
                failed: failed.clone(),
                delay_ms: 100,
                spend_attempt: true,
            },
        ];
        let plans: Vec<Plan<'_>> = settlements.iter().map(|s| plan(s, 30)).collect();
        let by_id = |id: &str| claimed.iter().find(|c| c.delivery.id == id).unwrap();
        let mut batch: Vec<(i64, i64, &Plan<'_>)> = ["retry", "delay", "release"]
            .iter()
            .zip(&plans)
            .map(|(id, p)| (by_id(id).seq, by_id(id).lease, p))
            .collect();
        // A lease the message no longer has: fenced, nothing of it written.
        let stale = by_id("stale");
        batch.push((stale.seq, stale.lease - 1, &plans[3]));
        let mut changed = store
            .with(|c| apply_plans(&mut c.client, &mut c.prepared, &batch))
            .unwrap();
        changed.sort_unstable();
        let mut expected: Vec<(i64, i64)> = batch[..3].iter().map(|b| (b.0, b.1)).collect();
        expected.sort_unstable();
        assert_eq!(changed, expected);
        let state = |id: &str| store.state_of(id).unwrap().unwrap();
        assert_eq!(
            ["retry", "delay", "release", "stale"].map(state),
            ["scheduled", "scheduled", "ready", "leased"]
        );
        // Due 100 ms after the store's now (30); each failure recorded once, the release
        // with no attempt and its delivery given back.
        let again = store
            .claim(130, &[(vec!["orders".to_string()], 4)], 60_000)
            .unwrap();
        let d = |id: &str| &again.iter().find(|c| c.delivery.id == id).unwrap().delivery;
        assert_eq!(again.len(), 3);
        assert_eq!(d("retry").history, std::slice::from_ref(&failed));
        assert_eq!((d("retry").attempts_spent, d("retry").deferrals), (1, 0));
        assert_eq!(d("delay").history, [failed]);
        assert_eq!((d("delay").attempts_spent, d("delay").deferrals), (0, 1));
        assert!(d("release").history.is_empty());
        assert_eq!(d("retry").first_failed_at_ms, Some(20));
        drop(store);
    }
}
