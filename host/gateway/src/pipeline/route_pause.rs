//! A route stopped by a `pause` verdict: a dependency down for every message of the route,
//! so instead of deferring each message (a decision and a write apiece) the route takes no
//! new message until the pause ends, then lets exactly one probe delivery through, whose
//! outcome decides between resuming and pausing again.
//!
//! Every source takes a route's delivery slot through [`RoutePause::admit`] (or
//! [`RoutePause::try_admit`] where a claim loop must not wait), so a pause holds on all of
//! them alike: the store claims nothing for the route, NATS fetches nothing, and what a
//! broker pushed ahead waits unacknowledged, its consumer never called. Deliveries already
//! in flight finish; their verdicts apply as usual.
//!
//! Guarantee: a pause spends no attempt - the paused message counts one deferral, as a
//! delay does, so the guardrails' deferral bounds end a pause that never lifts (no poison
//! loop) - and it loses nothing: a probe whose delivery never happens (the route went away,
//! the gateway stopped) gives its turn back, so the route cannot stay stuck waiting for an
//! outcome that will not come.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Where a route stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Taking messages.
    Open,
    /// Taking none until `until`.
    Paused { until: Instant },
    /// The pause is over: one probe delivery (`taken` once it is out) decides. `round`
    /// tells a probe of this round from a late one of an earlier round.
    Probing { round: u64, taken: bool },
}

/// Why a delivery may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The route is paused until then.
    Until(Instant),
    /// The probe is out; its outcome decides.
    Probe,
}

/// One route's pause, shared by every source that delivers for it (kept across reloads
/// that keep the route, like its retry budget's window).
#[derive(Debug)]
pub(crate) struct RoutePause {
    /// The route's pattern, for logs.
    route: String,
    state: Mutex<Inner>,
    changed: Notify,
    /// `verdict_route_paused{topic}`: 1 while paused or probing.
    paused: Gauge,
    /// `verdict_route_pauses{topic}`: pauses begun (a probe answered `pause` begins one).
    pauses: Counter,
}

#[derive(Debug)]
struct Inner {
    state: State,
    rounds: u64,
}

/// Leave to start one delivery of the route. A probe's leave gives its turn back if it is
/// dropped before an outcome was [observed](RoutePause::observed).
#[derive(Debug)]
pub(crate) struct Admission {
    probe: Option<(Arc<RoutePause>, u64)>,
}

impl Admission {
    /// Whether this delivery is the probe that ends a pause.
    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.probe.is_some()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some((pause, round)) = self.probe.take() {
            pause.probe_gone(round);
        }
    }
}

impl RoutePause {
    pub(crate) fn new(route: &str, paused: Gauge, pauses: Counter) -> RoutePause {
        paused.set(0);
        RoutePause {
            route: route.to_string(),
            state: Mutex::new(Inner {
                state: State::Open,
                rounds: 0,
            }),
            changed: Notify::new(),
            paused,
            pauses,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leave to deliver now, or why not: a paused route admits nothing until its pause
    /// ends, then one probe.
    pub(crate) fn try_admit(self: &Arc<Self>) -> Result<Admission, Wait> {
        self.try_admit_at(Instant::now())
    }

    fn try_admit_at(self: &Arc<Self>, now: Instant) -> Result<Admission, Wait> {
        let mut inner = self.inner();
        match inner.state {
            State::Open => Ok(Admission { probe: None }),
            State::Paused { until } if now < until => Err(Wait::Until(until)),
            State::Paused { .. } | State::Probing { taken: false, .. } => {
                let round = match inner.state {
                    State::Probing { round, .. } => round,
                    _ => {
                        inner.rounds += 1;
                        inner.rounds
                    }
                };
                inner.state = State::Probing { round, taken: true };
                Ok(Admission {
                    probe: Some((self.clone(), round)),
                })
            }
            State::Probing { taken: true, .. } => Err(Wait::Probe),
        }
    }

    /// Leave to deliver, waiting for it while the route is paused or its probe is out.
    pub(crate) async fn admit(self: &Arc<Self>) -> Admission {
        loop {
            // Registered before the state is read: a change in between still wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.try_admit() {
                Ok(admission) => return admission,
                Err(Wait::Until(until)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until.into()) => {}
                        () = changed => {}
                    }
                }
                Err(Wait::Probe) => changed.await,
            }
        }
    }

    /// Whether the route takes messages freely (not paused, no probe pending).
    pub(crate) fn is_open(&self) -> bool {
        self.inner().state == State::Open
    }

    /// When the pause ends and whether its probe is out, if the route is paused: for the
    /// admin API and the console.
    pub(crate) fn status(&self) -> Option<PauseStatus> {
        match self.inner().state {
            State::Open => None,
            State::Paused { until } => Some(PauseStatus {
                left: until.saturating_duration_since(Instant::now()),
                probing: false,
            }),
            State::Probing { taken, .. } => Some(PauseStatus {
                left: Duration::ZERO,
                probing: taken,
            }),
        }
    }

    /// A `pause(ms)` verdict: the route stops for `ms` from now (a pause already running
    /// that ends later is kept).
    pub(crate) fn pause(&self, ms: u64) {
        let until = Instant::now()
            .checked_add(Duration::from_millis(ms))
            .unwrap_or_else(far_future);
        let mut inner = self.inner();
        let was = inner.state;
        match was {
            State::Paused { until: current } if current >= until => return,
            _ => inner.state = State::Paused { until },
        }
        drop(inner);
        match was {
            State::Open => {
                self.pauses.inc();
                tracing::warn!(
                    route = %self.route,
                    pause_ms = ms,
                    "the route's policy paused it: no message is delivered until the pause \
                     ends, then one probe delivery decides whether it resumes"
                );
            }
            State::Probing { .. } => {
                self.pauses.inc();
                tracing::info!(route = %self.route, pause_ms = ms, "the probe was answered with a pause: the route stays paused");
            }
            State::Paused { .. } => {}
        }
        self.paused.set(1);
        self.changed.notify_waiters();
    }

    /// A delivery's outcome other than a pause (delivered, or any other verdict): once the
    /// pause is over, the first such outcome resumes the route. One that arrives while the
    /// route is still paused (a delivery that was in flight when it began) changes nothing.
    pub(crate) fn observed(&self) {
        let mut inner = self.inner();
        if !matches!(inner.state, State::Probing { .. }) {
            return;
        }
        inner.state = State::Open;
        drop(inner);
        tracing::info!(route = %self.route, "the probe after a pause was not answered with a pause: the route resumes");
        self.paused.set(0);
        self.changed.notify_waiters();
    }

    /// A probe dropped without an outcome: the next delivery may probe instead.
    fn probe_gone(&self, round: u64) {
        let mut inner = self.inner();
        if inner.state == (State::Probing { round, taken: true }) {
            inner.state = State::Probing {
                round,
                taken: false,
            };
            drop(inner);
            self.changed.notify_waiters();
        }
    }
}

/// A paused route as the admin API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseStatus {
    /// Until the pause ends (zero once the route waits for its probe).
    pub left: Duration,
    /// Whether the probe delivery is out.
    pub probing: bool,
}

/// Later than any pause: the guardrails cap a pause at `max_delay_ms`, so this is only
/// reached by a clock near its end.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3_600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> Arc<RoutePause> {
        Arc::new(RoutePause::new(
            "orders",
            Gauge::default(),
            Counter::default(),
        ))
    }

    #[test]
    fn an_open_route_admits_everything() {
        let r = route();
        let a = r.try_admit().expect("open");
        let b = r.try_admit().expect("open");
        assert!(!a.is_probe() && !b.is_probe());
        assert!(r.is_open());
        assert_eq!(r.status(), None);
    }

    #[test]
    fn a_pause_admits_nothing_then_one_probe_whose_outcome_decides() {
        let r = route();
        r.pause(60_000);
        assert_eq!(r.paused.get(), 1);
        assert_eq!(r.pauses.get(), 1);
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        // The pause is over (seen from a minute on): one probe, then nothing until it ends.
        let later = Instant::now() + Duration::from_secs(61);
        let probe = r.try_admit_at(later).expect("the probe");
        assert!(probe.is_probe());
        assert_eq!(r.try_admit_at(later).unwrap_err(), Wait::Probe);
        assert_eq!(
            r.status(),
            Some(PauseStatus {
                left: Duration::ZERO,
                probing: true
            })
        );
        // The probe delivered: open again.
        r.observed();
        drop(probe);
        assert!(r.is_open());
        assert_eq!(r.paused.get(), 0);
        assert!(!r.try_admit().expect("open").is_probe());
    }

    #[test]
    fn a_probe_answered_pause_pauses_again() {
        let r = route();
        r.pause(60_000);
        let later = Instant::now() + Duration::from_secs(61);
        let probe = r.try_admit_at(later).expect("the probe");
        r.pause(60_000);
        drop(probe);
        assert_eq!(r.pauses.get(), 2, "a new pause begins");
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        assert_eq!(r.paused.get(), 1);
    }

    #[test]
    fn a_probe_that_never_delivers_gives_its_turn_back() {
        let r = route();
        r.pause(60_000);
        let later = Instant::now() + Duration::from_secs(61);
        drop(r.try_admit_at(later).expect("the probe"));
        let next = r.try_admit_at(later).expect("another probe");
        assert!(next.is_probe());
    }

    #[test]
    fn a_late_probe_of_an_earlier_round_changes_nothing() {
        let r = route();
        r.pause(60_000);
        let later = Instant::now() + Duration::from_secs(61);
        let first = r.try_admit_at(later).expect("the probe");
        // Its outcome resumed the route and a new pause began and ended before the first
        // probe's leave was dropped.
        r.observed();
        r.pause(1);
        let second = r.try_admit_at(later).expect("the next round's probe");
        drop(first);
        assert_eq!(r.try_admit_at(later).unwrap_err(), Wait::Probe);
        drop(second);
    }

    #[test]
    fn an_outcome_during_the_pause_changes_nothing_and_a_longer_pause_wins() {
        let r = route();
        r.pause(60_000);
        r.observed();
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        r.pause(1);
        let left = r.status().expect("paused").left;
        assert!(
            left > Duration::from_secs(50),
            "the longer pause kept: {left:?}"
        );
        assert_eq!(r.pauses.get(), 1, "extending is not a new pause");
    }

    #[tokio::test]
    async fn admit_waits_for_the_probe_to_end() {
        let r = route();
        r.pause(20);
        let probe = r.admit().await;
        assert!(
            probe.is_probe(),
            "the first leave after a pause is the probe"
        );
        let waiting = {
            let r = r.clone();
            tokio::spawn(async move { r.admit().await.is_probe() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "nothing starts while the probe is out"
        );
        r.observed();
        drop(probe);
        assert!(!waiting.await.expect("admitted"), "an ordinary leave");
    }
}
