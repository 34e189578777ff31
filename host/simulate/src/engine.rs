//! The simulation: messages published, delivered and failed in virtual time, each failure
//! decided by the caller's decider (the real component behind the host's guardrails), the
//! verdict applied as the gateway applies it.
//!
//! The model, kept small on purpose:
//! - publishing is evenly spaced at each phase's rate;
//! - the consumer takes one delivery per `1 / capacity_per_s` seconds, in due order; what
//!   is due while it is busy waits (the backlog);
//! - an answer arrives `latency_ms` after the delivery starts; a failure is retried by the
//!   consumer itself (`consumer.retries`), then redelivered by the broker
//!   (`broker.redeliveries`), each at once and each a call the dependency sees, before the
//!   policy decides;
//! - `retry(ms)` spends an attempt and is due `ms` later, `delay(ms)` is due `ms` later
//!   without spending one, `dead-letter` and `discard` end the message;
//! - `pause(ms)` is a delay of the message and stops the route: nothing is delivered until
//!   `ms` after the answer; the first delivery after it is the probe (the consumer takes
//!   one delivery at a time), and a probe answered `pause` pauses it again;
//! - with a retry budget in the guardrails, a redelivery the budget has no room for when
//!   the consumer would take it is held (due again after [`RetryBudget::hold_ms`], nothing
//!   spent, the consumer's time not taken), and one that succeeds gives its share back, as
//!   in the gateway;
//! - with `ordering`, each message gets a key (a seeded draw); a message published while an
//!   older one of its key is unfinished waits, undelivered, until that one ends, then is
//!   due at once - a key whose oldest message has failed is parked until that message ends.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use verdict_runtime::{
    Action, AttemptRecord, Decision, ErrorSpec, Failure, FailureSpec, Guardrails, RetryBudget,
    RetryBudgetWindow, StatsSpec, StatsWindow, class_name,
};
use verdict_types::SplitMix64;

use crate::report::{Outcome, Recorder, Report};
use crate::scenario::{Answer, Scenario};

/// Failures of one message kept for its policy to read (the gateway keeps its own; a
/// policy sees the most recent).
const HISTORY: usize = 16;

const US_PER_S: u64 = 1_000_000;

/// One message in flight.
struct Message {
    /// Its number, in publish order (its id is `sim-<serial>`).
    serial: u64,
    published_us: u64,
    /// Fixes its sticky answers and its jitter seed.
    fate: u64,
    attempts_spent: u32,
    deferrals: u32,
    first_failed_ms: Option<u64>,
    deliveries: u32,
    history: Vec<AttemptRecord>,
    /// Its key, on an ordered route.
    key: Option<u64>,
}

/// The keys of an ordered route: per key with an unfinished message, the messages waiting
/// behind it in publish order; the keys parked behind a retry or delay.
#[derive(Default)]
struct Keys {
    waiting: HashMap<u64, VecDeque<usize>>,
    parked: HashSet<u64>,
}

impl Keys {
    /// Whether a message of `key` published now goes (the key was idle) or waits.
    fn publish(&mut self, key: u64, index: usize) -> bool {
        match self.waiting.get_mut(&key) {
            Some(queue) => {
                queue.push_back(index);
                false
            }
            None => {
                self.waiting.insert(key, VecDeque::new());
                true
            }
        }
    }

    /// The message of `key` ended: the next one waiting, if any, goes.
    fn ended(&mut self, key: u64) -> Option<usize> {
        self.parked.remove(&key);
        let queue = self.waiting.get_mut(&key)?;
        let next = queue.pop_front();
        if next.is_none() {
            self.waiting.remove(&key);
        }
        next
    }

    /// Messages still waiting behind their key.
    fn still_waiting(&self) -> u64 {
        self.waiting.values().map(|q| q.len() as u64).sum()
    }
}

/// A message's key among `keys`, from its fate: no draw of its own, so an ordered run
/// fails the same messages as the same scenario unordered.
fn key_of(fate: u64, keys: u64) -> u64 {
    SplitMix64::new(fate).next_u64() % keys
}

/// The run's draws: seeded, so the same seed gives the same run.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform draw in [0, 100).
    fn pct(&mut self) -> f64 {
        unit(self.next()) * 100.0
    }
}

/// `bits` as a uniform number in [0, 1).
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The answer a delivery gets: a failure, or `None` for success.
fn answer<'a>(answers: &'a [Answer], fate: u64, rng: &mut Rng) -> Option<&'a Answer> {
    // Sticky answers hit the same messages on every delivery: drawn from the message's fate.
    let fated = unit(fate) * 100.0;
    let mut at = 0.0;
    for a in answers.iter().filter(|a| a.sticky) {
        at += a.pct;
        if fated < at {
            return Some(a);
        }
    }
    let drawn = rng.pct();
    let mut at = 0.0;
    for a in answers.iter().filter(|a| !a.sticky) {
        at += a.pct;
        if drawn < at {
            return Some(a);
        }
    }
    None
}

/// Run `scenario` with each failure decided by `decide`, and redeliveries gated by the
/// route's retry budget if `guardrails` has one (`decide` applies the rest of them).
pub fn run(
    scenario: &Scenario,
    guardrails: &Guardrails,
    decide: &dyn Fn(&Failure) -> Decision,
) -> Report {
    let mut rng = Rng(SplitMix64::new(scenario.seed));
    let mut messages: Vec<Message> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut serial = 0u64;
    // Due deliveries: (due, order of scheduling, message).
    let mut due: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut recorder = Recorder::new(scenario);
    recorder.retry_budget(guardrails.retry_budget);
    let mut window = StatsWindow::default();
    let mut spent = RetryBudgetWindow::default();
    let slot_us = (US_PER_S as f64 / scenario.consumer.capacity_per_s).max(1.0) as u64;
    let publish_end_us = scenario.duration_s * US_PER_S;
    let end_us = publish_end_us + scenario.max_drain_s * US_PER_S;
    // Kept fractional: a rate's interval in whole microseconds would drift.
    let mut next_publish_us = Some(0f64);
    let mut consumer_free_us = 0u64;
    // A `pause` verdict stops the route until then.
    let mut paused_until_us = 0u64;
    let key_count = scenario.ordering.as_ref().map(|o| o.keys);
    let mut keys = Keys::default();

    loop {
        // The next event: a publish or a due delivery, whichever is first.
        let next_due = due.peek().map(|Reverse((at, _, _))| *at);
        let publish_first = match (next_publish_us, next_due) {
            (Some(p), Some(d)) => p as u64 <= d,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if publish_first {
            let Some(exact) = next_publish_us else { break };
            let at = exact as u64;
            let rate = scenario.rate_at(at / US_PER_S);
            if rate > 0.0 {
                serial += 1;
                let fate = rng.next();
                let message = Message {
                    serial,
                    published_us: at,
                    fate,
                    attempts_spent: 0,
                    deferrals: 0,
                    first_failed_ms: None,
                    deliveries: 0,
                    history: Vec::new(),
                    key: key_count.map(|n| key_of(fate, n)),
                };
                // An ended message's slot is reused: an hour at 1,000/s holds what is in
                // flight, not all 3.6 million.
                let index = match free.pop() {
                    Some(i) => {
                        messages[i] = message;
                        i
                    }
                    None => {
                        messages.push(message);
                        messages.len() - 1
                    }
                };
                recorder.published(at);
                let goes = match messages[index].key {
                    Some(key) => keys.publish(key, index),
                    None => true,
                };
                if goes {
                    due.push(Reverse((at, order, index)));
                    order += 1;
                } else {
                    recorder.held_back();
                }
            }
            next_publish_us = next_publish(scenario, exact, publish_end_us);
            continue;
        }
        let Some(Reverse((at, _, index))) = due.pop() else {
            break;
        };
        // The consumer takes it when it is free and the route is not paused.
        let start = at.max(consumer_free_us).max(paused_until_us);
        if start >= end_us {
            break;
        }
        recorder.advance(start);
        let m = &mut messages[index];
        let first = m.attempts_spent == 0 && m.deferrals == 0;
        if let Some(budget) = &guardrails.retry_budget
            && let Some(hold_ms) = held(budget, &mut spent, m, start, guardrails, &mut rng)
        {
            recorder.held(start);
            due.push(Reverse((start + hold_ms * 1_000, order, index)));
            order += 1;
            continue;
        }
        consumer_free_us = start + slot_us;
        m.deliveries += 1;
        let answers = scenario.answers_at(start / US_PER_S);
        let mut failed = answer(answers, m.fate, &mut rng);
        let mut calls = 1u64;
        // The consumer's own retries, then the broker's redeliveries: each a call.
        let mut extra = 0u32;
        let extra_max = scenario.consumer.retries + scenario.broker.redeliveries;
        while failed.is_some() && extra < extra_max {
            extra += 1;
            calls += 1;
            failed = answer(answers, m.fate, &mut rng);
        }
        recorder.delivered(start, first, calls);
        let latency_ms = failed
            .and_then(|a| a.latency_ms)
            .unwrap_or(scenario.consumer.latency_ms);
        let answered_us = start + latency_ms * 1_000;
        let now_ms = answered_us / 1_000;
        let stats = window.record(now_ms, failed.is_some());
        let Some(answer) = failed else {
            if let Some(budget) = &guardrails.retry_budget
                && !first
            {
                spent.refund(budget, start / 1_000, now_ms);
            }
            recorder.ended(
                m.published_us,
                answered_us,
                m.deliveries,
                Outcome::Delivered,
            );
            m.history = Vec::new();
            free.push(index);
            if let Some(next) = m.key.and_then(|key| keys.ended(key)) {
                due.push(Reverse((answered_us, order, next)));
                order += 1;
            }
            continue;
        };
        let failed_at = *m.first_failed_ms.get_or_insert(now_ms);
        let spec = failure(Attempt {
            topic: &scenario.topic,
            message_id: format!("sim-{}", m.serial),
            attempt: m.attempts_spent.saturating_add(1),
            deferrals: m.deferrals,
            first_failed_ms: failed_at,
            now_ms,
            published_ms: m.published_us / 1_000,
            kind: &answer.kind,
            retry_after_ms: answer.retry_after_ms,
            history: m.history.clone(),
            jitter_seed: m.fate,
            stats,
        });
        let decision = decide(&spec);
        if m.history.len() == HISTORY {
            m.history.remove(0);
        }
        m.history.push(AttemptRecord {
            at_ms: now_ms,
            kind: answer.kind.clone(),
            message: String::new(),
        });
        recorder.decided(&decision);
        let again = |ms: u64| answered_us.saturating_add(ms.saturating_mul(1_000));
        let key = m.key;
        match decision.verdict.action {
            Action::Retry(ms) => {
                m.attempts_spent = m.attempts_spent.saturating_add(1);
                due.push(Reverse((again(ms), order, index)));
                order += 1;
            }
            Action::Delay(ms) => {
                m.deferrals = m.deferrals.saturating_add(1);
                due.push(Reverse((again(ms), order, index)));
                order += 1;
            }
            Action::Pause(ms) => {
                m.deferrals = m.deferrals.saturating_add(1);
                due.push(Reverse((again(ms), order, index)));
                order += 1;
                recorder.paused(answered_us, again(ms).max(paused_until_us));
                paused_until_us = paused_until_us.max(again(ms));
            }
            Action::DeadLetter => {
                let class = class_name(decision.verdict.class);
                recorder.ended(
                    m.published_us,
                    answered_us,
                    m.deliveries,
                    Outcome::Dead(class),
                );
                m.history = Vec::new();
                free.push(index);
            }
            Action::Discard => {
                recorder.ended(
                    m.published_us,
                    answered_us,
                    m.deliveries,
                    Outcome::Discarded,
                );
                m.history = Vec::new();
                free.push(index);
            }
        }
        // An ended message lets its key's next one go; one due again parks its key.
        match (key, decision.verdict.action) {
            (Some(key), Action::DeadLetter | Action::Discard) => {
                if let Some(next) = keys.ended(key) {
                    due.push(Reverse((answered_us, order, next)));
                    order += 1;
                }
            }
            (Some(key), _) => {
                keys.parked.insert(key);
                recorder.parked_keys(keys.parked.len());
            }
            (None, _) => {}
        }
    }
    let unfinished = due.len() as u64 + keys.still_waiting();
    recorder.finish(unfinished)
}

/// How long the budget holds `m`'s delivery at `start` µs (`None`: it goes now), as the
/// gateway decides it: a retry waits while the window has no room, unless its message has
/// been failing for `max_deferral_age_ms` already.
fn held(
    budget: &RetryBudget,
    spent: &mut RetryBudgetWindow,
    m: &Message,
    start: u64,
    guardrails: &Guardrails,
    rng: &mut Rng,
) -> Option<u64> {
    let now_ms = start / 1_000;
    let retry = m.attempts_spent > 0 || m.deferrals > 0;
    let overdue = m
        .first_failed_ms
        .is_some_and(|f| now_ms.saturating_sub(f) >= guardrails.max_deferral_age_ms);
    let last_failed = m.history.last().map_or(0, |r| r.at_ms);
    (!spent.admit(budget, now_ms, retry, overdue))
        .then(|| budget.hold_ms(now_ms.saturating_sub(last_failed), rng.next()))
}

/// What a failed delivery is, as the simulation knows it.
pub(crate) struct Attempt<'a> {
    pub(crate) topic: &'a str,
    pub(crate) message_id: String,
    pub(crate) attempt: u32,
    pub(crate) deferrals: u32,
    pub(crate) first_failed_ms: u64,
    pub(crate) now_ms: u64,
    pub(crate) published_ms: u64,
    pub(crate) kind: &'a str,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) history: Vec<AttemptRecord>,
    pub(crate) jitter_seed: u64,
    pub(crate) stats: StatsSpec,
}

/// The failure a policy decides on, built as the gateway builds it from its own records.
pub(crate) fn failure(a: Attempt<'_>) -> Failure {
    FailureSpec {
        topic: a.topic.to_string(),
        message_id: a.message_id,
        consumer_group: "simulator".into(),
        attempt: a.attempt,
        deferrals: a.deferrals,
        first_failed_at_ms: a.first_failed_ms,
        now_ms: Some(a.now_ms),
        published_at_ms: Some(a.published_ms),
        deadline_ms: None,
        error: ErrorSpec {
            kind: a.kind.to_string(),
            message: format!("simulated {}", a.kind),
            retry_after_ms: a.retry_after_ms,
            rejected: false,
        },
        history: a.history,
        headers: BTreeMap::new(),
        payload: None,
        content_type: None,
        jitter_seed: Some(a.jitter_seed),
        stats: a.stats,
        extensions: BTreeMap::new(),
    }
    .into_failure()
}

/// When the next message is published after one at `at` µs (none once publishing has
/// ended). Times within a phase are its start plus whole intervals, so no rounding
/// accumulates; a phase of rate 0 publishes nothing until the next phase.
fn next_publish(scenario: &Scenario, at: f64, end: u64) -> Option<f64> {
    let phases = &scenario.publish.phases;
    let start_of = |i: usize| start_of_us(&phases[i]);
    let current = phases.iter().rposition(|p| start_of_us(p) <= at)?;
    let following = phases.get(current + 1).map(|_| start_of(current + 1));
    let rate = phases[current].rate_per_s;
    let next = if rate > 0.0 {
        let interval = US_PER_S as f64 / rate;
        let k = ((at - start_of(current)) / interval).round();
        start_of(current) + (k + 1.0) * interval
    } else {
        f64::INFINITY
    };
    // The next phase starts on time, whatever the old interval.
    let next = match following {
        Some(from) if next >= from - 0.5 => from,
        _ => next,
    };
    (next < end as f64).then_some(next)
}

fn start_of_us(p: &crate::scenario::PublishPhase) -> f64 {
    (p.from_s * US_PER_S) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(extra: &str) -> Scenario {
        Scenario::parse(
            &format!(
                "duration_s = 10\n[publish]\nphases = [{{ from_s = 0, rate_per_s = 10 }}]\n\
                 [consumer]\ncapacity_per_s = 1000\n{extra}"
            ),
            "t.toml",
        )
        .unwrap()
    }

    #[test]
    fn sticky_answers_stay_with_their_messages() {
        let answers = [Answer {
            kind: "schema.x".into(),
            pct: 50.0,
            latency_ms: None,
            retry_after_ms: None,
            sticky: true,
        }];
        let mut rng = Rng(SplitMix64::new(3));
        for fate in [0u64, u64::MAX / 3, u64::MAX - 1] {
            let first = answer(&answers, fate, &mut rng).is_some();
            for _ in 0..20 {
                assert_eq!(answer(&answers, fate, &mut rng).is_some(), first);
            }
        }
    }

    #[test]
    fn publishing_follows_the_phases() {
        let s = scenario("");
        let count = |s: &Scenario, end_s: u64| {
            let mut at = Some(0.0);
            let mut n = 0;
            while let Some(t) = at {
                n += u32::from(s.rate_at(t as u64 / US_PER_S) > 0.0);
                at = next_publish(s, t, end_s * US_PER_S);
            }
            n
        };
        assert_eq!(count(&s, 10), 100);
        let odd = Scenario::parse(
            "duration_s = 480\n[publish]\nphases = [{ from_s = 0, rate_per_s = 150 }, \
             { from_s = 100, rate_per_s = 0 }, { from_s = 200, rate_per_s = 3 }]\n\
             [consumer]\ncapacity_per_s = 1000\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            count(&odd, 480),
            150 * 100 + 3 * 280,
            "no drift at a rate that is not a whole interval"
        );
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::test_policy::retry_until;

    fn outage() -> Scenario {
        Scenario::parse(
            "duration_s = 60\nmax_drain_s = 600\n[publish]\n\
             phases = [{ from_s = 0, rate_per_s = 100 }]\n\
             [consumer]\ncapacity_per_s = 5000\n\
             phases = [{ from_s = 5, answers = [{ kind = \"http.503\", pct = 100 }] }, \
             { from_s = 35 }]\n",
            "outage.toml",
        )
        .unwrap()
    }

    #[test]
    fn a_retry_budget_caps_the_retry_load_and_loses_nothing() {
        let budget = RetryBudget {
            percent: 20,
            window_s: 10,
            min_per_s: 5,
        };
        let free = run(&outage(), &Guardrails::default(), &retry_until(20, 200));
        let gated = run(
            &outage(),
            &Guardrails {
                retry_budget: Some(budget),
                ..Guardrails::default()
            },
            &retry_until(20, 200),
        );
        assert_eq!(free.held, 0);
        assert!(gated.held > 0);
        // While the consumer is down, whenever a retry went, the window ending then held at
        // most 20% of its first attempts + 5/s (a window that ends later may hold more: the
        // first attempts that earned its retries can leave before they do; after recovery
        // a retry that succeeds gives its share back).
        let w = budget.window_s as usize;
        let series = &gated.series;
        for end in 0..35 {
            if series.retries[end] == 0 {
                continue;
            }
            let from = (end + 1).saturating_sub(w);
            let retries: u64 = series.retries[from..=end].iter().sum();
            let first: u64 = series.first_attempts[from..=end].iter().sum();
            assert!(
                retries <= budget.allowed(first),
                "window ending at {end} s: {retries} retries for {first} first attempts"
            );
        }
        assert!(
            gated.peak_retry_rate * 4 < free.peak_retry_rate,
            "{} vs {}",
            gated.peak_retry_rate,
            free.peak_retry_rate
        );
        // Held, not spent: fewer messages exhaust their attempts in the outage.
        assert!(gated.dead < free.dead, "{} vs {}", gated.dead, free.dead);
        // Once retries succeed, the budget steps aside: the held backlog drains as its
        // holds end (the longest is three windows and a half again), not at 20%.
        let longest_hold_s = budget.hold_ms(u64::MAX, u64::MAX - 1) as f64 / 1e3;
        let drain = gated.drain_s.unwrap();
        assert!(drain < longest_hold_s + 5.0, "drain {drain} s");
        // Nothing lost: every message ends, delivered or dead-lettered.
        for r in [&free, &gated] {
            assert_eq!(r.unfinished, 0);
            assert_eq!(r.delivered + r.dead + r.discarded, r.published);
        }
        let again = run(
            &outage(),
            &Guardrails {
                retry_budget: Some(budget),
                ..Guardrails::default()
            },
            &retry_until(20, 200),
        );
        assert_eq!(
            (again.held, again.retries, again.dead),
            (gated.held, gated.retries, gated.dead),
            "seeded: the same run twice"
        );
    }

    #[test]
    fn a_held_retry_goes_once_its_message_may_wait_no_longer() {
        let guardrails = Guardrails {
            retry_budget: Some(RetryBudget {
                percent: 0,
                window_s: 60,
                min_per_s: 1,
            }),
            // Failing for two seconds is as long as a message may be held.
            max_deferral_age_ms: 2_000,
            ..Guardrails::default()
        };
        let eager = retry_until(20, 200);
        let r = run(&outage(), &guardrails, &eager);
        let capped = run(
            &outage(),
            &Guardrails {
                max_deferral_age_ms: u64::MAX,
                ..guardrails.clone()
            },
            &retry_until(20, 200),
        );
        assert!(
            r.retries > capped.retries * 2,
            "the age bound lets held retries through: {} vs {}",
            r.retries,
            capped.retries
        );
    }

    /// A flaky dependency (10% of deliveries fail, retried after 1 s). Unordered, a retry
    /// holds nothing back; ordered by key, each retry parks its key and the key's later
    /// messages wait behind it - the fewer the keys, the more wait, and the later messages
    /// end - and nothing is lost either way.
    #[test]
    fn key_ordering_holds_a_keys_later_messages_behind_its_retry_and_loses_nothing() {
        let flaky = |extra: &str| {
            Scenario::parse(
                &format!(
                    "duration_s = 30\nmax_drain_s = 600\n[publish]\n\
                     phases = [{{ from_s = 0, rate_per_s = 100 }}]\n\
                     [consumer]\ncapacity_per_s = 5000\n\
                     phases = [{{ from_s = 0, answers = [{{ kind = \"http.503\", pct = 10 }}] }}]\n\
                     {extra}"
                ),
                "flaky.toml",
            )
            .unwrap()
        };
        let policy = retry_until(20, 1_000);
        let guardrails = Guardrails::default();
        let unordered = run(&flaky(""), &guardrails, &policy);
        let many = run(&flaky("[ordering]\nkeys = 1000"), &guardrails, &policy);
        let few = run(&flaky("[ordering]\nkeys = 20"), &guardrails, &policy);
        for r in [&unordered, &many, &few] {
            assert_eq!((r.unfinished, r.delivered), (0, r.published));
        }
        assert_eq!((unordered.keys, unordered.held_back), (None, 0));
        assert_eq!(few.keys, Some(20));
        assert!(
            few.held_back > many.held_back && many.held_back > 0,
            "{} held back over 20 keys, {} over 1,000",
            few.held_back,
            many.held_back
        );
        assert!(
            (5..=20).contains(&few.peak_parked_keys),
            "{} keys parked at most",
            few.peak_parked_keys
        );
        assert!(
            few.p50_ms > unordered.p50_ms && few.p99_ms > many.p99_ms,
            "p50 {} against {} unordered; p99 {} against {} over 1,000 keys",
            few.p50_ms,
            unordered.p50_ms,
            few.p99_ms,
            many.p99_ms
        );
    }

    #[test]
    fn a_paused_route_calls_nothing_but_its_probes_and_loses_nothing() {
        use crate::test_policy::pause_after;
        let guardrails = Guardrails::default();
        let retrying = run(&outage(), &guardrails, &retry_until(20, 200));
        // The circuit opens after 5 failures in a row: 2 s pauses, one probe after each.
        let pausing = run(&outage(), &guardrails, &pause_after(5, 2_000, 20, 200));
        // The outage runs from 5 s to 35 s: 30 s of it paused, give or take a pause.
        assert!(pausing.pauses >= 10, "{} pauses", pausing.pauses);
        assert!(
            (26.0..=34.0).contains(&pausing.paused_s),
            "paused {} s",
            pausing.paused_s
        );
        // Well inside the outage the consumer sees one probe per pause and nothing else.
        let series = &pausing.series;
        let deliveries: u64 = (10..30)
            .map(|s| series.first_attempts[s] + series.retries[s])
            .sum();
        assert!(
            deliveries <= 11,
            "{deliveries} deliveries in 20 s of pauses"
        );
        assert!(
            pausing.dependency_calls * 3 < retrying.dependency_calls,
            "{} calls against {}",
            pausing.dependency_calls,
            retrying.dependency_calls
        );
        // Paused, not lost or spent: every message ends delivered.
        assert_eq!(pausing.unfinished, 0);
        assert_eq!(pausing.delivered, pausing.published);
        assert_eq!(retrying.pauses, 0);
    }
}
