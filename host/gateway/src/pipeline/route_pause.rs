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

/// Leave to start one delivery of the route: an ordinary one while it is open, or the probe
/// of one round after a pause. Only the probe's outcome decides what follows a pause; a
/// probe's leave dropped before its outcome gives its turn back.
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

    fn round(&self) -> Option<u64> {
        self.probe.as_ref().map(|(_, round)| *round)
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some((pause, round)) = self.probe.take() {
            pause.probe_gone(round);
        }
    }
}

/// What a delivery's outcome says about the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered with `pause(ms)`.
    Pause(u64),
    /// Delivered, or answered with any other verdict.
    Other,
}

/// How long a delivery that waited for its slot while the route's probe was out is given
/// back for, when it finds the probe still out (the probe's outcome is usually known
/// within a consumer's answer).
pub(crate) const PROBE_OUT_RELEASE_MS: u64 = 1_000;

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

    /// Whether `admission`, taken before its delivery waited for the source's own slots,
    /// still lets it start now: a pause that began meanwhile stops it too. `Err` is how
    /// long to give the message back for.
    pub(crate) fn still_admits(&self, admission: &Admission) -> Result<(), u64> {
        match (self.inner().state, admission.round()) {
            (State::Open, _) => Ok(()),
            (State::Probing { round, .. }, Some(probe)) if round == probe => Ok(()),
            (State::Paused { until }, _) => Err(until
                .saturating_duration_since(Instant::now())
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX)
                .max(1)),
            (State::Probing { .. }, _) => Err(PROBE_OUT_RELEASE_MS),
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

    /// The outcome of a delivery made under `admission`. While the route is open, a
    /// `pause` begins a pause; while it is paused, a `pause` from a delivery that was in
    /// flight when it began can only lengthen it; once it waits for its probe, only the
    /// probe's outcome counts: `pause` pauses it again, anything else resumes it.
    pub(crate) fn answered(&self, admission: &Admission, outcome: Outcome) {
        let mut inner = self.inner();
        let now = Instant::now();
        let until_after = |ms: u64| {
            now.checked_add(Duration::from_millis(ms))
                .unwrap_or_else(far_future)
        };
        match (inner.state, outcome) {
            (State::Open, Outcome::Pause(ms)) => {
                inner.state = State::Paused {
                    until: until_after(ms),
                };
                self.paused.set(1);
                self.pauses.inc();
                tracing::warn!(
                    route = %self.route,
                    pause_ms = ms,
                    "the route's policy paused it: no message is delivered until the pause \
                     ends, then one probe delivery decides whether it resumes"
                );
            }
            (State::Paused { until }, Outcome::Pause(ms)) => {
                inner.state = State::Paused {
                    until: until.max(until_after(ms)),
                };
            }
            (State::Probing { round, .. }, outcome) if admission.round() == Some(round) => {
                match outcome {
                    Outcome::Pause(ms) => {
                        inner.state = State::Paused {
                            until: until_after(ms),
                        };
                        self.pauses.inc();
                        tracing::info!(route = %self.route, pause_ms = ms, "the probe was answered with a pause: the route stays paused");
                    }
                    Outcome::Other => {
                        inner.state = State::Open;
                        self.paused.set(0);
                        tracing::info!(route = %self.route, "the probe after a pause was not answered with a pause: the route resumes");
                    }
                }
            }
            // Open and answered otherwise; paused and answered otherwise by a delivery
            // that was in flight when the pause began; probing, and this is not the probe.
            _ => return,
        }
        drop(inner);
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

    fn paused(r: &Arc<RoutePause>, ms: u64) {
        let open = r.try_admit().expect("open");
        r.answered(&open, Outcome::Pause(ms));
    }

    fn after_a_minute() -> Instant {
        Instant::now() + Duration::from_secs(61)
    }

    #[test]
    fn an_open_route_admits_everything() {
        let r = route();
        let a = r.try_admit().expect("open");
        let b = r.try_admit().expect("open");
        assert!(!a.is_probe() && !b.is_probe());
        assert!(r.is_open());
        assert_eq!(r.status(), None);
        assert_eq!(r.still_admits(&a), Ok(()));
    }

    #[test]
    fn a_pause_admits_nothing_then_one_probe_whose_outcome_decides() {
        let r = route();
        let before = r.try_admit().expect("open");
        paused(&r, 60_000);
        assert_eq!((r.paused.get(), r.pauses.get()), (1, 1));
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        // Leave taken before the pause does not let a delivery start during it.
        assert!(r.still_admits(&before).unwrap_err() > 50_000);
        // The pause is over (seen from a minute on): one probe, then nothing until it ends.
        let probe = r.try_admit_at(after_a_minute()).expect("the probe");
        assert!(probe.is_probe());
        assert_eq!(r.try_admit_at(after_a_minute()).unwrap_err(), Wait::Probe);
        assert_eq!(r.still_admits(&probe), Ok(()));
        assert_eq!(r.still_admits(&before), Err(PROBE_OUT_RELEASE_MS));
        assert_eq!(
            r.status(),
            Some(PauseStatus {
                left: Duration::ZERO,
                probing: true
            })
        );
        // A delivery from before the pause answers in the meantime: it decides nothing.
        r.answered(&before, Outcome::Other);
        r.answered(&before, Outcome::Pause(60_000));
        assert!(!r.is_open());
        assert_eq!(r.try_admit_at(after_a_minute()).unwrap_err(), Wait::Probe);
        // The probe delivered: open again.
        r.answered(&probe, Outcome::Other);
        drop(probe);
        assert!(r.is_open());
        assert_eq!(r.paused.get(), 0);
        assert!(!r.try_admit().expect("open").is_probe());
    }

    #[test]
    fn a_probe_answered_pause_pauses_again() {
        let r = route();
        paused(&r, 60_000);
        let probe = r.try_admit_at(after_a_minute()).expect("the probe");
        r.answered(&probe, Outcome::Pause(60_000));
        drop(probe);
        assert_eq!(r.pauses.get(), 2, "a new pause begins");
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        assert_eq!(r.paused.get(), 1);
    }

    #[test]
    fn a_probe_that_never_delivers_gives_its_turn_back() {
        let r = route();
        paused(&r, 60_000);
        drop(r.try_admit_at(after_a_minute()).expect("the probe"));
        let next = r.try_admit_at(after_a_minute()).expect("another probe");
        assert!(next.is_probe());
    }

    #[test]
    fn a_late_probe_of_an_earlier_round_changes_nothing() {
        let r = route();
        paused(&r, 60_000);
        let first = r.try_admit_at(after_a_minute()).expect("the probe");
        // Its outcome paused the route again, and that pause ended too, before the first
        // probe's leave was dropped.
        r.answered(&first, Outcome::Pause(1));
        let second = r
            .try_admit_at(after_a_minute())
            .expect("the next round's probe");
        r.answered(&first, Outcome::Other);
        drop(first);
        assert_eq!(r.try_admit_at(after_a_minute()).unwrap_err(), Wait::Probe);
        assert_eq!(r.still_admits(&second), Ok(()));
        drop(second);
    }

    #[test]
    fn an_outcome_during_the_pause_changes_nothing_and_a_longer_pause_wins() {
        let r = route();
        let in_flight = r.try_admit().expect("open");
        paused(&r, 60_000);
        r.answered(&in_flight, Outcome::Other);
        assert!(matches!(r.try_admit(), Err(Wait::Until(_))));
        r.answered(&in_flight, Outcome::Pause(1));
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
        paused(&r, 20);
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
        r.answered(&probe, Outcome::Other);
        drop(probe);
        assert!(!waiting.await.expect("admitted"), "an ordinary leave");
    }
}
