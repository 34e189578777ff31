//! Failures of one topic decided together, without waiting for any.
//!
//! A policy on contract 0.2 answers a batch of failures in one call into its sandbox; the
//! gateway's deliveries, though, finish one at a time. The combiner batches what is already
//! there and never holds a failure back to fill a batch: the first failure of a topic to ask
//! *leads* - it decides at once, alone. Failures of that topic that ask while the leader is
//! deciding queue up (their tasks await, their worker threads go on with other deliveries),
//! and the leader decides everything queued in its next round, up to [`MAX_BATCH`] at a
//! time. When nothing is queued the leader leaves; after [`MAX_ROUNDS`] rounds it hands the
//! lead to the oldest waiting failure, so no delivery's own settlement waits behind an
//! endless stream of others.
//!
//! Nothing is lost or left hanging: a waiter whose task is dropped is skipped (or, if it
//! had just been handed the lead, passes it on), and a leader that unwinds answers every
//! failure it had taken with the default answer (for the pipeline: "route gone, try later",
//! which releases the message with no attempt spent) and passes the lead on.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Failures decided in one call at most (the runtime's own chunk size for contract 0.2).
pub(crate) const MAX_BATCH: usize = 64;

/// Rounds one leader decides before handing the lead on.
pub(crate) const MAX_ROUNDS: usize = 4;

/// The waiting seats of each key that has a leader, oldest first.
type Queues<I, O> = HashMap<String, VecDeque<Arc<Seat<I, O>>>>;

/// Combines the decisions asked for on each key (a topic) into batches.
pub(crate) struct Combiner<I, O> {
    /// Per key with a leader: the failures waiting for its next round, oldest first. A key
    /// is present exactly while some caller leads it.
    keys: Mutex<Queues<I, O>>,
    max_batch: usize,
    max_rounds: usize,
}

/// One waiting caller's place: its item until a leader takes it, then its answer.
struct Seat<I, O> {
    state: Mutex<State<I, O>>,
    ready: Notify,
}

enum State<I, O> {
    /// Queued for a leader's round.
    Waiting(I),
    /// In a batch being decided.
    Taken,
    /// Decided.
    Answered(O),
    /// Handed the lead, with its own item to decide first.
    Lead(I),
    /// Nobody waits for it any more (answered and read, or the caller gave up).
    Gone,
}

impl<I, O> Seat<I, O> {
    fn lock(&self) -> MutexGuard<'_, State<I, O>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer(&self, answer: O) {
        *self.lock() = State::Answered(answer);
        // `notify_one` keeps a permit when the waiter is not polling yet: never missed.
        self.ready.notify_one();
    }
}

/// What a waiting caller gets: its answer, or the lead (with its item back).
enum Turn<I, O> {
    Answer(O),
    Lead(I),
}

impl<I, O: Default> Default for Combiner<I, O> {
    fn default() -> Self {
        Combiner::with_limits(MAX_BATCH, MAX_ROUNDS)
    }
}

impl<I, O: Default> Combiner<I, O> {
    /// A combiner deciding at most `max_batch` items per call and `max_rounds` rounds per
    /// leader (both at least 1).
    pub(crate) fn with_limits(max_batch: usize, max_rounds: usize) -> Self {
        Combiner {
            keys: Mutex::new(HashMap::new()),
            max_batch: max_batch.max(1),
            max_rounds: max_rounds.max(1),
        }
    }

    fn keys(&self) -> MutexGuard<'_, Queues<I, O>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer for `item`, decided by `decide` - in a batch with other items of `key` if
    /// some are waiting, alone at once if none is. `decide` answers a batch in order; a
    /// missing answer is `O::default()`.
    pub(crate) async fn decide(&self, key: &str, item: I, decide: impl FnMut(&[I]) -> Vec<O>) -> O {
        let queued = {
            let mut keys = self.keys();
            match keys.get_mut(key) {
                None => {
                    keys.insert(key.to_owned(), VecDeque::new());
                    Err(item)
                }
                Some(queue) => {
                    let seat = Arc::new(Seat {
                        state: Mutex::new(State::Waiting(item)),
                        ready: Notify::new(),
                    });
                    queue.push_back(Arc::clone(&seat));
                    Ok(seat)
                }
            }
        };
        let item = match queued {
            // Nobody leads this key: lead, at once.
            Err(item) => item,
            Ok(seat) => match (Waiter {
                combiner: self,
                key,
                seat,
            })
            .turn()
            .await
            {
                Turn::Answer(answer) => return answer,
                Turn::Lead(item) => item,
            },
        };
        self.lead(key, item, decide)
    }

    /// Decide `own` and then what queued behind it, round after round, until nothing is
    /// waiting or the rounds are spent. Runs without an await: a leader is never cancelled
    /// half-way.
    fn lead(&self, key: &str, own: I, mut decide: impl FnMut(&[I]) -> Vec<O>) -> O {
        let mut leading = Leading {
            combiner: self,
            key,
            seats: Vec::new(),
            left: false,
        };
        let mut items = vec![own];
        let mut own_answer = O::default();
        for round in 0..self.max_rounds {
            if !self.take_waiting(key, &mut items, &mut leading.seats, round > 0) {
                leading.left = true;
                return own_answer;
            }
            let mut answers = decide(&items).into_iter();
            if round == 0 {
                own_answer = answers.next().unwrap_or_default();
            }
            for seat in leading.seats.drain(..) {
                seat.answer(answers.next().unwrap_or_default());
            }
            items.clear();
        }
        // The rounds are spent: `leading`'s drop hands the lead to a waiting item, if any.
        own_answer
    }

    /// Move up to a batch of `key`'s waiting items into `items` (their seats into `seats`).
    /// With nothing waiting and `leave_if_none`, the key is given up - under the same lock a
    /// newcomer checks, so none queues behind a leader that left - and `false` is returned.
    fn take_waiting(
        &self,
        key: &str,
        items: &mut Vec<I>,
        seats: &mut Vec<Arc<Seat<I, O>>>,
        leave_if_none: bool,
    ) -> bool {
        let mut keys = self.keys();
        let Some(queue) = keys.get_mut(key) else {
            // Only a leader removes its key; it cannot be gone. Decide what we hold.
            return !items.is_empty();
        };
        while items.len() < self.max_batch {
            let Some(seat) = queue.pop_front() else { break };
            let mut state = seat.lock();
            if let State::Waiting(item) = std::mem::replace(&mut *state, State::Taken) {
                items.push(item);
                drop(state);
                seats.push(seat);
            } else {
                // Its caller gave up: nothing to decide.
                *state = State::Gone;
            }
        }
        if items.is_empty() && leave_if_none {
            keys.remove(key);
            return false;
        }
        true
    }

    /// Give `key`'s lead to its oldest waiting item, or give the key up if none waits.
    fn hand_off(&self, key: &str) {
        let mut keys = self.keys();
        let Some(queue) = keys.get_mut(key) else {
            return;
        };
        while let Some(seat) = queue.pop_front() {
            let mut state = seat.lock();
            if let State::Waiting(item) = std::mem::replace(&mut *state, State::Gone) {
                *state = State::Lead(item);
                drop(state);
                seat.ready.notify_one();
                return;
            }
        }
        keys.remove(key);
    }

    /// Keys with a leader now (tests: every lead ends).
    #[cfg(test)]
    fn leading(&self) -> usize {
        self.keys().len()
    }
}

/// A leader's round in progress. Dropped on the way out - normally or by unwinding - it
/// answers what it took and did not answer, and passes the lead on unless it already left.
struct Leading<'a, I, O: Default> {
    combiner: &'a Combiner<I, O>,
    key: &'a str,
    seats: Vec<Arc<Seat<I, O>>>,
    left: bool,
}

impl<I, O: Default> Drop for Leading<'_, I, O> {
    fn drop(&mut self) {
        for seat in self.seats.drain(..) {
            seat.answer(O::default());
        }
        if !self.left {
            self.combiner.hand_off(self.key);
        }
    }
}

/// A caller waiting for its turn. Dropped before it got one - its task cancelled - it
/// leaves its seat, passing the lead on if it had just been handed it.
struct Waiter<'a, I, O: Default> {
    combiner: &'a Combiner<I, O>,
    key: &'a str,
    seat: Arc<Seat<I, O>>,
}

impl<I, O: Default> Waiter<'_, I, O> {
    async fn turn(&self) -> Turn<I, O> {
        loop {
            self.seat.ready.notified().await;
            let mut state = self.seat.lock();
            match std::mem::replace(&mut *state, State::Gone) {
                State::Answered(answer) => return Turn::Answer(answer),
                State::Lead(item) => return Turn::Lead(item),
                other => *state = other,
            }
        }
    }
}

impl<I, O: Default> Drop for Waiter<'_, I, O> {
    fn drop(&mut self) {
        // Taken out under the seat's lock alone, the hand-off below under the keys' lock
        // alone: the two locks are never held in the other order than the leader's.
        let state = std::mem::replace(&mut *self.seat.lock(), State::Gone);
        if matches!(state, State::Lead(_)) {
            self.combiner.hand_off(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    fn double(items: &[u32]) -> Vec<u32> {
        items.iter().map(|i| i * 2).collect()
    }

    #[tokio::test]
    async fn a_lone_failure_is_decided_at_once_and_the_key_released() {
        let combiner = Combiner::<u32, u32>::default();
        assert_eq!(combiner.decide("t", 21, double).await, 42);
        assert_eq!(combiner.leading(), 0);
    }

    /// The leader's first call blocks until the test has queued failures behind it; they
    /// are then decided in one batch, each getting its own answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_queued_behind_a_decision_are_decided_together() {
        let combiner = Arc::new(Combiner::<u32, u32>::default());
        let (go, wait) = mpsc::channel::<()>();
        let calls = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let leader = {
            let (combiner, calls) = (Arc::clone(&combiner), Arc::clone(&calls));
            std::thread::spawn(move || {
                futures_util::FutureExt::now_or_never(combiner.decide("t", 0, |items| {
                    if items == [0] {
                        wait.recv().unwrap();
                    }
                    calls.lock().unwrap().push(items.to_vec());
                    double(items)
                }))
                .expect("a leader never awaits")
            })
        };
        while combiner.leading() == 0 {
            std::thread::yield_now();
        }
        let waiters: Vec<_> = (1..=5)
            .map(|i| {
                let combiner = Arc::clone(&combiner);
                tokio::spawn(async move { combiner.decide("t", i, double).await })
            })
            .collect();
        while combiner.keys().get("t").map_or(0, VecDeque::len) < 5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        go.send(()).unwrap();
        assert_eq!(leader.join().unwrap(), 0);
        for (i, waiter) in (1..).zip(waiters) {
            assert_eq!(waiter.await.unwrap(), i * 2);
        }
        // The waiters queued in whatever order their tasks ran; all in one batch.
        let mut calls = calls.lock().unwrap().clone();
        calls[1].sort_unstable();
        assert_eq!(calls, vec![vec![0], vec![1, 2, 3, 4, 5]]);
        assert_eq!(combiner.leading(), 0);
    }

    /// White-box: seats queued by hand behind a leader that is "deciding" (the key held).
    fn queue(combiner: &Combiner<u32, u32>, key: &str, items: &[u32]) -> Vec<Arc<Seat<u32, u32>>> {
        let mut keys = combiner.keys();
        let queue = keys.entry(key.to_owned()).or_default();
        items
            .iter()
            .map(|&i| {
                let seat = Arc::new(Seat {
                    state: Mutex::new(State::Waiting(i)),
                    ready: Notify::new(),
                });
                queue.push_back(Arc::clone(&seat));
                seat
            })
            .collect()
    }

    fn answered(seat: &Seat<u32, u32>) -> Option<u32> {
        match &*seat.lock() {
            State::Answered(answer) => Some(*answer),
            _ => None,
        }
    }

    #[test]
    fn a_leader_decides_in_bounded_batches_and_hands_the_lead_on_after_its_rounds() {
        let combiner = Combiner::<u32, u32>::with_limits(2, 2);
        let seats = queue(&combiner, "t", &[1, 2, 3, 4, 5]);
        let mut calls = Vec::new();
        let own = combiner.lead("t", 0, |items| {
            calls.push(items.to_vec());
            double(items)
        });
        assert_eq!(own, 0);
        // Round one: its own and one waiting (batches of 2); round two: two more.
        assert_eq!(calls, vec![vec![0, 1], vec![2, 3]]);
        let answers: Vec<_> = seats.iter().map(|s| answered(s)).collect();
        assert_eq!(answers, vec![Some(2), Some(4), Some(6), None, None]);
        // The oldest waiting one leads now; the youngest still waits.
        assert!(matches!(&*seats[3].lock(), State::Lead(4)));
        assert!(matches!(&*seats[4].lock(), State::Waiting(5)));
        assert_eq!(combiner.leading(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_is_skipped_and_a_dropped_lead_passes_on() {
        let combiner = Combiner::<u32, u32>::with_limits(8, 1);
        let seats = queue(&combiner, "t", &[1, 2, 3]);
        // The first waiter's task is cancelled before any round.
        drop(Waiter {
            combiner: &combiner,
            key: "t",
            seat: Arc::clone(&seats[0]),
        });
        combiner.hand_off("t");
        // Seat 1 was gone: the lead went to seat 2, whose task is then dropped unpolled.
        assert!(matches!(&*seats[1].lock(), State::Lead(2)));
        drop(Waiter {
            combiner: &combiner,
            key: "t",
            seat: Arc::clone(&seats[1]),
        });
        assert!(matches!(&*seats[2].lock(), State::Lead(3)));
        // Seat 3 takes its turn: it leads, decides its own, and the key is released.
        let waiter = Waiter {
            combiner: &combiner,
            key: "t",
            seat: Arc::clone(&seats[2]),
        };
        let Turn::Lead(item) = waiter.turn().await else {
            panic!("seat 3 was handed the lead");
        };
        drop(waiter);
        assert_eq!(combiner.lead("t", item, double), 6);
        assert_eq!(combiner.leading(), 0);
    }

    #[test]
    fn a_leader_that_panics_answers_what_it_took_and_passes_the_lead_on() {
        let combiner = Combiner::<u32, u32>::with_limits(2, 4);
        let seats = queue(&combiner, "t", &[1, 2, 3]);
        let calls = AtomicUsize::new(0);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            combiner.lead("t", 0, |_| {
                calls.fetch_add(1, Ordering::Relaxed);
                panic!("a bug in the deciding closure");
            })
        }));
        assert!(unwound.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        // Seat 1 was in the batch: answered with the default (the pipeline's "try later").
        assert_eq!(answered(&seats[0]), Some(0));
        // Seat 2 leads now; seat 3 waits for it.
        assert!(matches!(&*seats[1].lock(), State::Lead(2)));
        assert!(matches!(&*seats[2].lock(), State::Waiting(3)));
    }

    #[test]
    fn a_short_answer_defaults_the_missing_ones() {
        let combiner = Combiner::<u32, u32>::with_limits(8, 1);
        let seats = queue(&combiner, "t", &[1, 2]);
        let own = combiner.lead("t", 0, |_| vec![7]);
        assert_eq!(own, 7);
        assert_eq!(answered(&seats[0]), Some(0));
        assert_eq!(answered(&seats[1]), Some(0));
    }

    #[test]
    fn keys_are_led_independently() {
        let combiner = Combiner::<u32, u32>::with_limits(8, 2);
        let other = queue(&combiner, "other", &[9]);
        let seats = queue(&combiner, "t", &[1]);
        assert_eq!(combiner.lead("t", 0, double), 0);
        assert_eq!(answered(&seats[0]), Some(2));
        assert!(matches!(&*other[0].lock(), State::Waiting(9)));
        assert_eq!(combiner.leading(), 1);
    }
}
