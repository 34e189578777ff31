//! A route's retry budget: retries limited to a share of first attempts over a sliding
//! window, as Finagle's retry budget and gRPC's retry throttling do, so that an outage does
//! not turn into a retry storm against the dependency that is down.
//!
//! The budget is checked when a retry is about to be delivered, not when the policy
//! decides: a retry over budget waits (a *hold*: no delivery, no attempt spent, no deferral
//! counted) and asks again later. Only a gate in front of the delivery lowers the load the
//! dependency sees; turning a verdict into a longer delay would still deliver every message
//! once per cycle. The gateway applies it per route, the simulator in virtual time, with the
//! same [`RetryBudgetWindow`].
//!
//! A retry that succeeds gives its share back ([`RetryBudgetWindow::refund`]), as a success
//! refills gRPC's token bucket: the budget throttles retries while they fail and steps
//! aside once they succeed, so a recovered dependency drains the held backlog at the
//! consumer's pace instead of the budget's.
//!
//! ```
//! use verdict_runtime::{RetryBudget, RetryBudgetWindow};
//!
//! let budget = RetryBudget { percent: 20, window_s: 10, min_per_s: 1 };
//! let mut window = RetryBudgetWindow::default();
//! for _ in 0..100 {
//!     assert!(window.admit(&budget, 1_000, false, false), "a first attempt always goes");
//! }
//! // 20% of 100 first attempts, plus 1 a second over 10 seconds: 30 retries in the window,
//! // at most 6 (twice a tenth's share) in any one tenth of it; the rest are held.
//! let at_once = (0..100).filter(|_| window.admit(&budget, 1_000, true, false)).count();
//! assert_eq!(at_once, 6);
//! let spread = (0..100)
//!     .filter(|i| window.admit(&budget, 1_000 + i * 100, true, false))
//!     .count();
//! assert_eq!(at_once + spread, 30);
//! // A retry whose message may not wait any longer goes anyway (and is counted).
//! assert!(window.admit(&budget, 10_000, true, true));
//! ```

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Retries limited to a share of first attempts over a sliding window. Off unless a route's
/// (or `[defaults]`') guardrails name one: `guardrails = { retry_budget = { percent = 20 } }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "RetryBudgetFields")]
#[schemars(with = "RetryBudgetFields")]
pub struct RetryBudget {
    /// Retries allowed per 100 first attempts in the window.
    pub percent: u32,
    /// The sliding window, in seconds.
    pub window_s: u32,
    /// Retries allowed each second whatever the first attempts, so that a route with
    /// little traffic still retries (and a held retry always gets its turn).
    pub min_per_s: u32,
}

/// [`RetryBudget`] as written, before its bounds are checked.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct RetryBudgetFields {
    /// Retries allowed per 100 first attempts in the window (0 to 1000; default 20).
    #[schemars(range(max = 1000))]
    percent: u32,
    /// The sliding window, in seconds (1 to 3600; default 10).
    #[schemars(range(min = 1, max = 3600))]
    window_s: u32,
    /// Retries allowed each second whatever the first attempts (1 to 100000; default 10):
    /// at least one, so that a held retry always gets its turn.
    #[schemars(range(min = 1, max = 100000))]
    min_per_s: u32,
}

impl Default for RetryBudgetFields {
    fn default() -> Self {
        let RetryBudget {
            percent,
            window_s,
            min_per_s,
        } = RetryBudget::default();
        RetryBudgetFields {
            percent,
            window_s,
            min_per_s,
        }
    }
}

impl Default for RetryBudget {
    /// Finagle's defaults: 20% over 10 seconds, 10 a second.
    fn default() -> Self {
        RetryBudget {
            percent: 20,
            window_s: 10,
            min_per_s: 10,
        }
    }
}

impl TryFrom<RetryBudgetFields> for RetryBudget {
    type Error = String;

    fn try_from(f: RetryBudgetFields) -> Result<RetryBudget, String> {
        let budget = RetryBudget {
            percent: f.percent,
            window_s: f.window_s,
            min_per_s: f.min_per_s,
        };
        budget.validate()?;
        Ok(budget)
    }
}

/// The longest window: an hour.
pub const MAX_BUDGET_WINDOW_S: u32 = 3_600;

impl RetryBudget {
    /// Check the bounds, naming the field and what it must be.
    pub fn validate(&self) -> Result<(), String> {
        if self.percent > 1_000 {
            return Err(format!(
                "retry_budget.percent is {}; it must be 0 to 1000 (retries per 100 first attempts)",
                self.percent
            ));
        }
        if !(1..=MAX_BUDGET_WINDOW_S).contains(&self.window_s) {
            return Err(format!(
                "retry_budget.window_s is {}; it must be 1 to {MAX_BUDGET_WINDOW_S} (seconds)",
                self.window_s
            ));
        }
        if !(1..=100_000).contains(&self.min_per_s) {
            return Err(format!(
                "retry_budget.min_per_s is {}; it must be 1 to 100000 (at least one, or a held \
                 retry on a quiet route would wait for traffic that may never come)",
                self.min_per_s
            ));
        }
        Ok(())
    }

    /// Retries allowed in a window holding `first_attempts`.
    pub fn allowed(&self, first_attempts: u64) -> u64 {
        u64::from(self.min_per_s) * u64::from(self.window_s)
            + first_attempts.saturating_mul(u64::from(self.percent)) / 100
    }

    /// How long a retry over budget waits before it asks again, given how long its message
    /// has waited since its last failure (`waited_ms`): as long again, so a message held
    /// repeatedly asks less and less often (no state kept: the wait doubles by itself),
    /// between a quarter of the window and three windows; jittered by `draw` to between
    /// half and one and a half times that, so the held retries of one outage do not all come
    /// back in the same instant.
    pub fn hold_ms(&self, waited_ms: u64, draw: u64) -> u64 {
        let window_ms = u64::from(self.window_s) * 1_000;
        let base = waited_ms.clamp((window_ms / 4).max(2), 3 * window_ms);
        base / 2 + draw % base
    }
}

/// One slice's spending.
#[derive(Debug, Clone, Copy)]
struct Slice {
    /// Its number: ms since the epoch / the slice's length.
    at: u64,
    first_attempts: u64,
    retries: u64,
}

/// Slices in a window: the window slides a tenth of itself at a time, so a span shorter
/// than the window by more than a tenth never holds two windows' worth; and no slice admits
/// more than a fifth of the window's retries, so they are spread over it.
const SLICES: u64 = 10;

/// What a route spent against its budget over the window: first attempts and retries per
/// tenth of the window, at most ten tenths of them.
#[derive(Debug, Clone, Default)]
pub struct RetryBudgetWindow {
    slices: VecDeque<Slice>,
    /// The slices' length (a reload that changes the window starts it afresh).
    slice_ms: u64,
    first_attempts: u64,
    retries: u64,
}

impl RetryBudgetWindow {
    /// Whether a delivery at `now_ms` may go now, counting it if so: a first attempt
    /// always goes and earns `percent`/100 of a retry; a retry goes while the window has
    /// room, or when it is `overdue` (its message has waited as long as it may).
    pub fn admit(&mut self, budget: &RetryBudget, now_ms: u64, retry: bool, overdue: bool) -> bool {
        self.slide(budget, now_ms);
        if retry && !overdue {
            let allowed = budget.allowed(self.first_attempts);
            // No slice takes more than twice its share: a window's worth let through in one
            // instant would come back as a burst each time that slice left the window.
            let slice_cap = (2 * allowed).div_ceil(SLICES).max(1);
            let in_slice = self
                .slices
                .back()
                .filter(|s| s.at == now_ms / self.slice_ms)
                .map_or(0, |s| s.retries);
            if self.retries >= allowed || in_slice >= slice_cap {
                return false;
            }
        }
        let slice = self.current(now_ms);
        if retry {
            slice.retries += 1;
            self.retries += 1;
        } else {
            slice.first_attempts += 1;
            self.first_attempts += 1;
        }
        true
    }

    /// A retry admitted at `admitted_ms` succeeded: it gives its share back (if its slice
    /// is still in the window).
    pub fn refund(&mut self, budget: &RetryBudget, admitted_ms: u64, now_ms: u64) {
        self.slide(budget, now_ms);
        let at = admitted_ms / self.slice_ms;
        if let Some(slice) = self.slices.iter_mut().find(|s| s.at == at)
            && slice.retries > 0
        {
            slice.retries -= 1;
            self.retries -= 1;
        }
    }

    /// First attempts and retries in the window ending at `now_ms`.
    pub fn spent(&mut self, budget: &RetryBudget, now_ms: u64) -> (u64, u64) {
        self.slide(budget, now_ms);
        (self.first_attempts, self.retries)
    }

    /// The slice `now_ms` falls in (after [`Self::slide`]).
    fn current(&mut self, now_ms: u64) -> &mut Slice {
        let at = now_ms / self.slice_ms;
        // A clock that steps back counts into the newest slice rather than reordering.
        if self.slices.back().is_none_or(|newest| newest.at < at) {
            self.slices.push_back(Slice {
                at,
                first_attempts: 0,
                retries: 0,
            });
        }
        self.slices
            .back_mut()
            .expect("a slice was pushed if there was none")
    }

    /// Drop the slices that left the window by `now_ms`.
    fn slide(&mut self, budget: &RetryBudget, now_ms: u64) {
        let slice_ms = (u64::from(budget.window_s) * 1_000 / SLICES).max(1);
        if slice_ms != self.slice_ms {
            *self = RetryBudgetWindow {
                slice_ms,
                ..RetryBudgetWindow::default()
            };
        }
        let now = now_ms / slice_ms;
        while let Some(oldest) = self.slices.front()
            && oldest.at.saturating_add(SLICES) <= now
        {
            self.first_attempts -= oldest.first_attempts;
            self.retries -= oldest.retries;
            self.slices.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: RetryBudget = RetryBudget {
        percent: 10,
        window_s: 10,
        min_per_s: 1,
    };

    /// Retries offered every 10 ms from `from_ms` for `span_ms`: how many were admitted.
    fn offer(w: &mut RetryBudgetWindow, budget: &RetryBudget, from_ms: u64, span_ms: u64) -> u64 {
        (from_ms..from_ms + span_ms)
            .step_by(10)
            .filter(|&ms| w.admit(budget, ms, true, false))
            .count() as u64
    }

    #[test]
    fn retries_are_a_share_of_first_attempts_plus_a_floor() {
        let mut w = RetryBudgetWindow::default();
        for _ in 0..200 {
            assert!(w.admit(&BUDGET, 5_000, false, false));
        }
        // 10 (1/s over 10 s) + 10% of 200, spread over the window.
        assert_eq!(offer(&mut w, &BUDGET, 5_000, 10_000), 30);
        assert_eq!(w.spent(&BUDGET, 14_999), (200, 30));
    }

    #[test]
    fn no_tenth_of_the_window_takes_more_than_twice_its_share() {
        let mut w = RetryBudgetWindow::default();
        for _ in 0..1_000 {
            w.admit(&BUDGET, 0, false, false);
        }
        // 110 allowed in the window: at most 22 in one tenth of it.
        let at_once = (0..200)
            .filter(|_| w.admit(&BUDGET, 500, true, false))
            .count();
        assert_eq!(at_once, 22);
        assert_eq!(offer(&mut w, &BUDGET, 1_000, 1_000), 22, "the next tenth");
        assert_eq!(offer(&mut w, &BUDGET, 2_000, 8_000), 110 - 44);
    }

    #[test]
    fn spending_leaves_the_window_as_it_slides() {
        let mut w = RetryBudgetWindow::default();
        for _ in 0..100 {
            w.admit(&BUDGET, 0, false, false);
        }
        assert_eq!(offer(&mut w, &BUDGET, 0, 1_000), 4, "twice a tenth of 20");
        assert_eq!(offer(&mut w, &BUDGET, 1_000, 9_000), 16);
        assert!(
            !w.admit(&BUDGET, 9_999, true, false),
            "still inside the window"
        );
        // Ten seconds on, the first tenth has left - its 100 first attempts and 4 retries:
        // the floor (10) less the 16 retries still in the window leaves no room.
        assert_eq!(w.spent(&BUDGET, 10_000), (0, 16));
        assert_eq!(offer(&mut w, &BUDGET, 10_000, 1_000), 0);
        // Once they have left too, the floor alone.
        assert_eq!(offer(&mut w, &BUDGET, 20_000, 10_000), 10);
    }

    #[test]
    fn a_quiet_route_still_retries_at_the_floor() {
        let mut w = RetryBudgetWindow::default();
        let mut admitted = 0;
        for ms in (0..60_000).step_by(100) {
            admitted += usize::from(w.admit(&BUDGET, ms, true, false));
        }
        // 1 a second, over a minute, taken in bursts of a window's worth.
        assert!((50..=70).contains(&admitted), "{admitted}");
        assert!(
            w.admit(&BUDGET, 60_000, true, true),
            "an overdue retry goes"
        );
    }

    #[test]
    fn a_clock_stepping_back_and_a_changed_window_keep_the_counts_consistent() {
        let mut w = RetryBudgetWindow::default();
        w.admit(&BUDGET, 50_000, false, false);
        w.admit(&BUDGET, 40_000, false, false);
        assert_eq!(w.spent(&BUDGET, 50_000), (2, 0));
        for s in 51..60 {
            w.admit(&BUDGET, s * 1_000, false, false);
        }
        assert_eq!(w.spent(&BUDGET, 59_000), (11, 0));
        let narrow = RetryBudget {
            window_s: 2,
            ..BUDGET
        };
        // Another window starts afresh rather than mixing slices of two lengths.
        assert_eq!(w.spent(&narrow, 59_000), (0, 0));
        w.admit(&narrow, 59_000, false, false);
        assert_eq!(w.spent(&narrow, 60_999), (1, 0));
        assert_eq!(w.spent(&narrow, 61_000), (0, 0));
    }

    #[test]
    fn a_hold_doubles_the_wait_within_bounds() {
        let draws = [0, 1, 2_499, 2_500, 4_999, u64::MAX];
        for draw in draws {
            // Fresh from a failure: a quarter of the window, jittered.
            let ms = BUDGET.hold_ms(0, draw);
            assert!((1_250..3_750).contains(&ms), "{draw} -> {ms}");
            // Waited 8 s already: about as long again.
            let ms = BUDGET.hold_ms(8_000, draw);
            assert!((4_000..12_000).contains(&ms), "{draw} -> {ms}");
            // Never past three windows, however long it waited.
            let ms = BUDGET.hold_ms(u64::MAX, draw);
            assert!((15_000..45_000).contains(&ms), "{draw} -> {ms}");
        }
        let tiny = RetryBudget {
            window_s: 1,
            ..BUDGET
        };
        assert!((125..375).contains(&tiny.hold_ms(0, 12_345)));
    }

    #[test]
    fn a_retry_that_succeeds_gives_its_share_back() {
        let mut w = RetryBudgetWindow::default();
        assert_eq!(offer(&mut w, &BUDGET, 1_000, 9_000), 10, "the floor alone");
        assert!(!w.admit(&BUDGET, 9_500, true, false));
        w.refund(&BUDGET, 1_000, 9_600);
        assert!(w.admit(&BUDGET, 9_700, true, false), "room again");
        // A refund for a slice that has left the window changes nothing.
        let before = w.spent(&BUDGET, 11_000);
        w.refund(&BUDGET, 1_000, 11_000);
        assert_eq!(w.spent(&BUDGET, 11_000), before);
        w.refund(&BUDGET, 11_000, 11_000);
        assert_eq!(w.spent(&BUDGET, 11_000), before, "nothing to give back");
        assert_eq!(w.spent(&BUDGET, 20_000), (0, 0));
    }

    #[test]
    fn bad_bounds_are_refused_naming_the_field() {
        let parse = |s: &str| serde_json::from_str::<RetryBudget>(s);
        assert_eq!(parse("{}").unwrap(), RetryBudget::default());
        assert_eq!(parse(r#"{"percent": 5}"#).unwrap().percent, 5);
        for (text, field) in [
            (r#"{"percent": 1001}"#, "retry_budget.percent"),
            (r#"{"window_s": 0}"#, "retry_budget.window_s"),
            (r#"{"window_s": 3601}"#, "retry_budget.window_s"),
            (r#"{"min_per_s": 0}"#, "retry_budget.min_per_s"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        let e = parse(r#"{"pct": 5}"#).unwrap_err().to_string();
        assert!(e.contains("unknown field `pct`"), "{e}");
        assert!(
            parse(r#"{"percent": -1}"#).is_err(),
            "negative is not a count"
        );
    }
}
