//! What a settlement does to a message's row, decided once for every backend.
//!
//! A [`Settlement`] is the pipeline's word on one delivery; [`plan`] turns it into the row
//! change a store applies under the delivery's lease: the state the message moves to, when
//! it falls due again, which counters move, the failed attempt to record, the dead letter
//! to write and the audit record. Each backend applies a [`Plan`] with one fenced `UPDATE`
//! (its own SQL, the same columns) and the inserts the plan names - so what "retry",
//! "delay", "dead-letter", "discard" and "release" mean is written here and nowhere else.

use crate::clamp_ms;
use crate::model::{AttemptRecord, DeadLetter, Settlement};

/// The most any per-message counter holds (the envelope's attempts are a `u32`).
pub const COUNTER_MAX: i64 = u32::MAX as i64;

/// The change one settlement makes, as the values of the store's fenced `UPDATE` and the
/// rows it inserts beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<'a> {
    /// The message's state after (`delivered`, `scheduled`, `dead`, `discarded`, `ready`).
    pub state: &'static str,
    /// When it falls due again (`next_at_ms`), on the store's clock; `None` leaves it.
    pub due_at_ms: Option<i64>,
    /// Attempts spent (0 or 1): a retry and a dead letter spend one.
    pub attempts_spent: i64,
    /// Deferrals counted (0 or 1): a delay spends no attempt and counts one instead.
    pub deferrals_counted: i64,
    /// Dead-letterings counted (0 or 1): what a replayed letter's next envelope reports.
    pub dead_letterings_counted: i64,
    /// Deliveries handed back (0 or 1): a release was not a delivery the consumer saw.
    pub deliveries_returned: i64,
    /// The first failure's time, kept when one is recorded already.
    pub failed_at_ms: Option<i64>,
    /// `updated_at_ms` after (what retention measures age by); `None` leaves it.
    pub updated_at_ms: Option<i64>,
    /// The failed attempt to add to the message's history.
    pub attempt: Option<&'a AttemptRecord>,
    /// The dead letter to write.
    pub letter: Option<&'a DeadLetter>,
    /// The audit record: its event, its detail and its time.
    pub audit: Option<Audit<'a>>,
}

/// An audit record a plan writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audit<'a> {
    /// The event (`dead-lettered`, `discarded`).
    pub event: &'static str,
    /// Why: the verdict's reason.
    pub detail: &'a str,
    /// When, ms since the epoch.
    pub at_ms: u64,
}

impl Plan<'_> {
    /// The message's attempt count after this plan, from the count `before` it: what a dead
    /// letter records as its `attempts`.
    pub fn attempts_after(&self, before: i64) -> i64 {
        before.saturating_add(self.attempts_spent).min(COUNTER_MAX)
    }
}

/// The row change `settlement` makes when applied at `now_ms` (the store's clock).
///
/// Times a failure carries (`failed.at_ms`) date the failure, the history and the audit;
/// the next due time is measured from `now_ms`, so that a retry is due on the store's
/// clock, not the failing gateway's. Delays saturate instead of wrapping.
pub fn plan(settlement: &Settlement, now_ms: u64) -> Plan<'_> {
    let unchanged = Plan {
        state: "delivered",
        due_at_ms: None,
        attempts_spent: 0,
        deferrals_counted: 0,
        dead_letterings_counted: 0,
        deliveries_returned: 0,
        failed_at_ms: None,
        updated_at_ms: None,
        attempt: None,
        letter: None,
        audit: None,
    };
    let due = |delay_ms: u64| Some(clamp_ms(now_ms.saturating_add(delay_ms)));
    match settlement {
        Settlement::Delivered => Plan {
            updated_at_ms: Some(clamp_ms(now_ms)),
            ..unchanged
        },
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => Plan {
            state: "scheduled",
            due_at_ms: due(*delay_ms),
            attempts_spent: i64::from(*spend_attempt),
            deferrals_counted: i64::from(!*spend_attempt),
            failed_at_ms: Some(clamp_ms(failed.at_ms)),
            updated_at_ms: Some(clamp_ms(failed.at_ms)),
            attempt: Some(failed),
            ..unchanged
        },
        Settlement::DeadLetter { failed, letter } => Plan {
            state: "dead",
            attempts_spent: 1,
            dead_letterings_counted: 1,
            failed_at_ms: Some(clamp_ms(failed.at_ms)),
            updated_at_ms: Some(clamp_ms(failed.at_ms)),
            attempt: Some(failed),
            letter: Some(letter),
            audit: Some(Audit {
                event: "dead-lettered",
                detail: &letter.reason,
                at_ms: failed.at_ms,
            }),
            ..unchanged
        },
        Settlement::Discard { failed, reason } => Plan {
            state: "discarded",
            updated_at_ms: Some(clamp_ms(failed.at_ms)),
            attempt: Some(failed),
            audit: Some(Audit {
                event: "discarded",
                detail: reason,
                at_ms: failed.at_ms,
            }),
            ..unchanged
        },
        Settlement::Release { delay_ms } => Plan {
            state: "ready",
            due_at_ms: due(*delay_ms),
            deliveries_returned: 1,
            ..unchanged
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(at_ms: u64) -> AttemptRecord {
        AttemptRecord {
            at_ms,
            kind: "http.503".into(),
            message: "down".into(),
        }
    }

    fn letter() -> DeadLetter {
        DeadLetter {
            dlq: "orders.DLQ".into(),
            class: "permanent".into(),
            reason: "schema v9 unknown".into(),
            format: "json",
            envelope: b"{}".to_vec(),
        }
    }

    #[test]
    fn a_delivery_only_marks_the_row_delivered_now() {
        let p = plan(&Settlement::Delivered, 5_000);
        assert_eq!(p.state, "delivered");
        assert_eq!(p.updated_at_ms, Some(5_000));
        assert_eq!(
            (p.due_at_ms, p.attempts_spent, p.deferrals_counted),
            (None, 0, 0)
        );
        assert!(p.attempt.is_none() && p.letter.is_none() && p.audit.is_none());
    }

    #[test]
    fn a_retry_spends_an_attempt_and_a_delay_counts_a_deferral_instead() {
        let f = failed(4_000);
        let retry = Settlement::Again {
            failed: f.clone(),
            delay_ms: 250,
            spend_attempt: true,
        };
        let p = plan(&retry, 5_000);
        assert_eq!(p.state, "scheduled");
        // Due on the store's clock, dated by the failure.
        assert_eq!(p.due_at_ms, Some(5_250));
        assert_eq!(
            (p.failed_at_ms, p.updated_at_ms),
            (Some(4_000), Some(4_000))
        );
        assert_eq!((p.attempts_spent, p.deferrals_counted), (1, 0));
        assert_eq!(p.attempt, Some(&f));
        assert!(p.letter.is_none() && p.audit.is_none());
        let delay = Settlement::Again {
            failed: f,
            delay_ms: 250,
            spend_attempt: false,
        };
        let p = plan(&delay, 5_000);
        assert_eq!((p.attempts_spent, p.deferrals_counted), (0, 1));
    }

    #[test]
    fn a_dead_letter_spends_the_last_attempt_and_writes_letter_and_audit() {
        let settlement = Settlement::DeadLetter {
            failed: failed(4_000),
            letter: letter(),
        };
        let p = plan(&settlement, 5_000);
        assert_eq!(p.state, "dead");
        assert_eq!((p.attempts_spent, p.dead_letterings_counted), (1, 1));
        assert_eq!(p.letter.map(|l| l.dlq.as_str()), Some("orders.DLQ"));
        assert_eq!(
            p.audit,
            Some(Audit {
                event: "dead-lettered",
                detail: "schema v9 unknown",
                at_ms: 4_000
            })
        );
        assert_eq!(p.due_at_ms, None, "a dead message is never due");
        // The letter records the attempt it spent, and never more than a u32.
        assert_eq!(p.attempts_after(2), 3);
        assert_eq!(p.attempts_after(COUNTER_MAX), COUNTER_MAX);
        assert_eq!(p.attempts_after(i64::MAX), COUNTER_MAX);
    }

    #[test]
    fn a_discard_records_the_attempt_and_audits_the_reason_but_spends_nothing() {
        let settlement = Settlement::Discard {
            failed: failed(4_000),
            reason: "duplicate order".into(),
        };
        let p = plan(&settlement, 5_000);
        assert_eq!(p.state, "discarded");
        assert_eq!((p.attempts_spent, p.dead_letterings_counted), (0, 0));
        assert!(p.attempt.is_some() && p.letter.is_none());
        assert_eq!(
            p.audit.map(|a| (a.event, a.detail)),
            Some(("discarded", "duplicate order"))
        );
    }

    #[test]
    fn a_release_gives_the_delivery_back_and_touches_nothing_else() {
        let p = plan(&Settlement::Release { delay_ms: 100 }, 5_000);
        assert_eq!(p.state, "ready");
        assert_eq!(p.due_at_ms, Some(5_100));
        assert_eq!(p.deliveries_returned, 1);
        assert_eq!((p.attempts_spent, p.deferrals_counted), (0, 0));
        assert_eq!((p.failed_at_ms, p.updated_at_ms), (None, None));
        assert!(p.attempt.is_none() && p.audit.is_none());
    }

    #[test]
    fn hostile_times_saturate_instead_of_wrapping() {
        let settlement = Settlement::Again {
            failed: failed(u64::MAX),
            delay_ms: u64::MAX,
            spend_attempt: true,
        };
        let p = plan(&settlement, u64::MAX - 1);
        assert_eq!(p.due_at_ms, Some(i64::MAX));
        assert_eq!(p.failed_at_ms, Some(i64::MAX));
        let p = plan(&Settlement::Release { delay_ms: u64::MAX }, 1);
        assert_eq!(p.due_at_ms, Some(i64::MAX));
    }
}
