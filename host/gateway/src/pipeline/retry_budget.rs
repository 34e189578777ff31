//! The retry budget in front of a route's consumer: a redelivery the route's budget has no
//! room for is given back untouched to wait (a hold: nothing spent, the consumer not
//! called), and a retry that succeeds gives its share back. The budget itself
//! ([`RetryBudget`], [`RetryBudgetWindow`]) lives in the runtime, shared with the simulator.
//!
//! Guarantees: a hold loses nothing (the source keeps the message, as for a message without
//! a route); a hold never loops forever (a message failing for `max_deferral_age_ms` is let
//! through, and `min_per_s >= 1` lets some through every second); routes are isolated (one
//! window per route).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use verdict_runtime::{RetryBudget, RetryBudgetWindow, SplitMix64};

use crate::envelope::BudgetHolds;
use crate::model::Delivery;

/// One route's spending against its budget, and the draws that jitter its holds.
pub(crate) struct BudgetGate {
    state: Mutex<(RetryBudgetWindow, SplitMix64)>,
}

impl Default for BudgetGate {
    fn default() -> Self {
        BudgetGate {
            state: Mutex::new((
                RetryBudgetWindow::default(),
                SplitMix64::new(crate::clock::now_ms()),
            )),
        }
    }
}

/// What the gate says about one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Deliver it; `retry` says whether a success gives a share back.
    Go { retry: bool },
    /// Hold it this long: over budget.
    Hold { delay_ms: u64 },
}

/// Whether `message` counts as a retry: it failed before (a retry or a delay). A redelivery
/// after a crash, with nothing recorded, is a first attempt still.
pub(crate) fn is_retry(message: &Delivery) -> bool {
    message.attempts_spent > 0 || message.deferrals > 0
}

impl BudgetGate {
    /// Ask for `message`'s delivery at `now_ms` under `budget`; a message failing for
    /// `max_wait_ms` already is not held any longer.
    pub(crate) fn ask(
        &self,
        budget: &RetryBudget,
        message: &Delivery,
        now_ms: u64,
        max_wait_ms: u64,
    ) -> Gate {
        let retry = is_retry(message);
        let overdue = message
            .first_failed_at_ms
            .is_some_and(|f| now_ms.saturating_sub(f) >= max_wait_ms);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (window, draws) = &mut *state;
        if window.admit(budget, now_ms, retry, overdue) {
            return Gate::Go { retry };
        }
        let last_failed = message
            .history
            .last()
            .map(|r| r.at_ms)
            .or(message.first_failed_at_ms)
            .unwrap_or(now_ms);
        Gate::Hold {
            delay_ms: budget.hold_ms(now_ms.saturating_sub(last_failed), draws.next_u64()),
        }
    }

    /// A retry admitted at `admitted_ms` succeeded.
    pub(crate) fn succeeded(&self, budget: &RetryBudget, admitted_ms: u64, now_ms: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.refund(budget, admitted_ms, now_ms);
    }
}

/// How many messages' holds a gateway remembers; past that it forgets them all (an
/// envelope then shows the holds since, never more than there were).
const REMEMBERED: usize = 100_000;

/// The holds of messages still in flight, for their dead-letter envelopes: kept in memory by
/// the gateway that held them, so a message another gateway dead-letters (or one held before
/// a restart) shows fewer holds than it had; the metric counts every one.
#[derive(Default)]
pub(crate) struct HoldLedger {
    held: Mutex<HashMap<(String, String), BudgetHolds>>,
}

impl HoldLedger {
    /// `message` was held for `delay_ms`.
    pub(crate) fn held(&self, message: &Delivery, delay_ms: u64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.len() >= REMEMBERED {
            held.clear();
        }
        let entry = held
            .entry((message.topic.clone(), message.id.clone()))
            .or_default();
        entry.holds = entry.holds.saturating_add(1);
        entry.held_ms = entry.held_ms.saturating_add(delay_ms);
    }

    /// `message` ended (or left for a DLQ): its holds, forgotten here.
    pub(crate) fn take(&self, message: &Delivery) -> Option<BudgetHolds> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_empty() {
            return None;
        }
        held.remove(&(message.topic.clone(), message.id.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_runtime::AttemptRecord;

    const BUDGET: RetryBudget = RetryBudget {
        percent: 0,
        window_s: 10,
        min_per_s: 1,
    };

    fn retry(first_failed_at_ms: u64, last_failed_at_ms: u64) -> Delivery {
        Delivery {
            id: "m".into(),
            topic: "t".into(),
            attempts_spent: 1,
            first_failed_at_ms: Some(first_failed_at_ms),
            history: vec![AttemptRecord {
                at_ms: last_failed_at_ms,
                kind: "http.503".into(),
                message: String::new(),
            }],
            ..Delivery::default()
        }
    }

    #[test]
    fn first_attempts_go_retries_over_budget_are_held_and_overdue_ones_go() {
        let gate = BudgetGate::default();
        let now = 100_000;
        let first = Delivery::default();
        assert_eq!(
            gate.ask(&BUDGET, &first, now, u64::MAX),
            Gate::Go { retry: false }
        );
        let m = retry(now - 1_000, now - 1_000);
        // Ten a window (no share of first attempts), spread over it.
        for i in 0..10 {
            assert_eq!(
                gate.ask(&BUDGET, &m, now + i * 1_000, u64::MAX),
                Gate::Go { retry: true }
            );
        }
        let Gate::Hold { delay_ms } = gate.ask(&BUDGET, &m, now + 9_500, u64::MAX) else {
            panic!("the eleventh retry in the window is over budget");
        };
        // It waited 10.5 s since its failure: about as long again.
        assert!((5_250..15_750).contains(&delay_ms), "{delay_ms}");
        // A success gives a share back.
        gate.succeeded(&BUDGET, now, now + 9_600);
        assert_eq!(
            gate.ask(&BUDGET, &m, now + 9_700, u64::MAX),
            Gate::Go { retry: true }
        );
        // Failing for a minute and allowed to wait 60 s: it goes whatever the budget.
        let old = retry(now - 60_000, now - 1_000);
        assert_eq!(
            gate.ask(&BUDGET, &old, now + 9_800, 60_000),
            Gate::Go { retry: true }
        );
    }

    #[test]
    fn a_message_held_long_already_waits_longer() {
        let gate = BudgetGate::default();
        let now = 500_000;
        let m = retry(now - 20_000, now - 20_000);
        for i in 0..10 {
            assert_eq!(
                gate.ask(&BUDGET, &m, now + i * 1_000, u64::MAX),
                Gate::Go { retry: true }
            );
        }
        let mut holds = 0;
        // Waited 29.9 s since its failure: about as long again.
        while let Gate::Hold { delay_ms } = gate.ask(&BUDGET, &m, now + 9_900, u64::MAX) {
            assert!((14_950..44_850).contains(&delay_ms), "{delay_ms}");
            holds += 1;
            if holds == 20 {
                break;
            }
        }
        assert_eq!(holds, 20, "the window was spent");
    }

    #[test]
    fn the_ledger_counts_holds_until_the_message_ends_and_stays_bounded() {
        let ledger = HoldLedger::default();
        let m = retry(0, 0);
        assert_eq!(ledger.take(&m), None);
        ledger.held(&m, 1_000);
        ledger.held(&m, 2_500);
        assert_eq!(
            ledger.take(&m),
            Some(BudgetHolds {
                holds: 2,
                held_ms: 3_500
            })
        );
        assert_eq!(ledger.take(&m), None, "taken once");
        for i in 0..REMEMBERED + 10 {
            let other = Delivery {
                id: format!("m-{i}"),
                ..m.clone()
            };
            ledger.held(&other, 1);
        }
        assert!(ledger.held.lock().unwrap().len() <= REMEMBERED);
    }
}
