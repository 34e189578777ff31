//! A policy bound to one topic's config: warm instances, guardrails and the fallback.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use serde::Deserialize;

use crate::instance::{Instance, MAX_BATCH};
use crate::stats::{DecisionCounters, DecisionStats};
use crate::{Contract, Decision, Failure, Fallback, Fault, Guardrails, Policy};

/// What a topic adds to its policy: guardrails and the fallback verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TopicSettings {
    /// Bounds on every verdict.
    pub guardrails: Guardrails,
    /// The verdict when the policy fails.
    pub fallback: Fallback,
}

/// Asks one policy, configured for one topic, for decisions. Thread-safe: concurrent
/// callers each take a warm instance (or make one), so decisions never share a store.
pub struct Decider {
    policy: Arc<Policy>,
    config: Arc<str>,
    settings: TopicSettings,
    /// Warm instances, lock-free: two threads deciding on one route never wait on each
    /// other for the pool.
    idle: ArrayQueue<Instance>,
    counters: DecisionCounters,
    /// What one failure of a batch has taken lately, in nanoseconds (smoothed): batches are
    /// cut to fit half the decision deadline, which a whole batch shares.
    batch_ns_per_failure: AtomicU64,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("policy", &self.policy)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Decider {
    /// Drop the warm instances (a retired generation's route): their pool slots go back to
    /// the routes that serve. A decision on it afterwards - after a rollback - makes a fresh
    /// instance, as a cold start does.
    pub fn release_warm(&self) -> usize {
        let mut released = 0;
        while self.idle.pop().is_some() {
            released += 1;
        }
        released
    }

    /// Warm instances waiting.
    pub fn warm(&self) -> usize {
        self.idle.len()
    }

    pub(crate) fn new(
        policy: Arc<Policy>,
        config: Arc<str>,
        settings: TopicSettings,
        first: Instance,
    ) -> Self {
        let idle = ArrayQueue::new(policy.host().limits().warm_instances.max(1));
        // The instance `init` ran in is the first warm one.
        let _ = idle.push(first);
        Decider {
            policy,
            config,
            settings,
            idle,
            counters: DecisionCounters::default(),
            batch_ns_per_failure: AtomicU64::new(0),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The config the policy was initialised with.
    pub fn config(&self) -> &str {
        &self.config
    }

    /// The topic's guardrails and fallback.
    pub fn settings(&self) -> &TopicSettings {
        &self.settings
    }

    /// Decide on `failure`. Never panics and never hangs: a policy fault yields the
    /// fallback verdict (with the fault recorded), and guardrails bound every verdict.
    pub fn decide(&self, failure: &Failure) -> Decision {
        let _span =
            tracing::trace_span!("decide", policy = %self.policy.provenance().name).entered();
        let answer = self.ask(failure);
        self.finish(failure, answer)
    }

    /// Decide on several failures: each decision is exactly what [`Decider::decide`] gives
    /// that failure alone, in order. A policy on contract 0.2 answers up to 64 failures in
    /// one call (one crossing into the sandbox instead of one per failure) - fewer when its
    /// recent batches show that 64 would not fit half the decision deadline, which a batch
    /// shares; a fault in a batch has its failures decided again one by one, so only the
    /// failure that causes it gets the fallback. Never waits for more failures: callers
    /// hand over what they have.
    pub fn decide_batch(&self, failures: &[Failure]) -> Vec<Decision> {
        if failures.len() < 2 || self.policy.contract() < Contract::V0_2 {
            return failures.iter().map(|f| self.decide(f)).collect();
        }
        let _span = tracing::trace_span!(
            "decide_batch",
            policy = %self.policy.provenance().name,
            failures = failures.len()
        )
        .entered();
        let mut decisions = Vec::with_capacity(failures.len());
        let mut rest = failures;
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(self.batch_size().min(rest.len()));
            rest = after;
            let asked = Instant::now();
            let answer = self.ask_batch(chunk);
            self.batch_took(
                chunk.len(),
                asked.elapsed().as_nanos(),
                answer.as_ref().err(),
            );
            match answer {
                Ok(verdicts) => decisions.extend(
                    chunk
                        .iter()
                        .zip(verdicts)
                        .map(|(failure, verdict)| self.finish(failure, Ok(verdict))),
                ),
                Err(fault) => {
                    tracing::debug!(policy = %self.policy.provenance().name, %fault, failures = chunk.len(), "a batch faulted, deciding its failures one by one");
                    decisions.extend(chunk.iter().map(|f| self.decide(f)));
                }
            }
        }
        decisions
    }

    /// How many failures the next batch takes (see [`batch_size`]).
    fn batch_size(&self) -> usize {
        batch_size(
            self.batch_ns_per_failure.load(Ordering::Relaxed),
            self.policy.host().limits().decide_timeout_ms,
        )
    }

    /// Learn from a batch of `failures` that took `took_ns` (see [`learned`]).
    fn batch_took(&self, failures: usize, took_ns: u128, fault: Option<&Fault>) {
        let timed_out = matches!(fault, Some(Fault::Timeout { .. }));
        let deadline_ms = self.policy.host().limits().decide_timeout_ms;
        // A lost update between two racing batches only skews the estimate a little.
        let old = self.batch_ns_per_failure.load(Ordering::Relaxed);
        let new = learned(old, failures, took_ns, timed_out.then_some(deadline_ms));
        self.batch_ns_per_failure.store(new, Ordering::Relaxed);
    }

    /// The fallback for a fault, the guardrails, the counters: what every answer goes
    /// through on its way to a decision.
    fn finish(&self, failure: &Failure, answer: Result<verdict_types::Verdict, Fault>) -> Decision {
        let (verdict, fallback) = match answer {
            Ok(verdict) => (verdict, None),
            Err(fault) => {
                tracing::warn!(policy = %self.policy.provenance().name, %fault, "policy fault, fallback verdict applies");
                (self.settings.fallback.verdict(failure, &fault), Some(fault))
            }
        };
        let mut clamps = Vec::new();
        let verdict = self
            .settings
            .guardrails
            .apply(verdict, failure, &mut clamps);
        let decision = Decision {
            verdict,
            provenance: self.policy.provenance().clone(),
            generation: None,
            fallback,
            clamps,
        };
        self.counters.record(&decision);
        decision
    }

    /// What this decider has decided so far.
    pub fn stats(&self) -> DecisionStats {
        self.counters.snapshot()
    }

    fn ask(&self, failure: &Failure) -> Result<verdict_types::Verdict, Fault> {
        self.on_instance(|instance, limits| instance.decide(limits, failure))
    }

    fn ask_batch(&self, failures: &[Failure]) -> Result<Vec<verdict_types::Verdict>, Fault> {
        self.on_instance(|instance, limits| instance.decide_batch(limits, failures))
    }

    /// Run `call` on a warm instance (or a fresh one), then give the instance back.
    fn on_instance<T>(
        &self,
        call: impl FnOnce(&mut Instance, &crate::Limits) -> Result<T, Fault>,
    ) -> Result<T, Fault> {
        let limits = self.policy.host().limits();
        let mut instance = match self.idle.pop() {
            Some(instance) => instance,
            None => self.fresh()?,
        };
        let result = call(&mut instance, limits);
        // A faulted instance may hold broken state: drop it. A healthy one goes back warm.
        if result.is_ok() && instance.reusable(limits) && limits.warm_instances > 0 {
            // A full pool drops the extra instance.
            let _ = self.idle.push(instance);
        }
        result
    }

    fn fresh(&self) -> Result<Instance, Fault> {
        let mut instance = Instance::new(&self.policy)?;
        match instance.init(self.policy.host().limits(), &self.config)? {
            Ok(()) => Ok(instance),
            // The same config was accepted when the topic was configured; a policy that now
            // refuses it is misbehaving.
            Err(message) => Err(Fault::Instantiate {
                message: format!("init refused a config it accepted before: {message}"),
            }),
        }
    }
}

/// How many failures a batch takes when one has lately taken `ns_per_failure`: as many as
/// fit half the decision deadline (which a whole batch shares), from 1 to [`MAX_BATCH`].
/// With nothing learned yet (0), the most.
fn batch_size(ns_per_failure: u64, deadline_ms: u64) -> usize {
    let half_deadline_ns = deadline_ms.saturating_mul(500_000);
    usize::try_from(half_deadline_ns / ns_per_failure.max(1))
        .unwrap_or(MAX_BATCH)
        .clamp(1, MAX_BATCH)
}

/// The time per failure learned from `old` and a batch of `failures` that took `took_ns`:
/// a smoothed average (an eighth of the new sample), or - when the batch ran past the
/// deadline of `timed_out_ms` - at least the deadline's share per failure at once, so the
/// next batch is at most half as large.
fn learned(old: u64, failures: usize, took_ns: u128, timed_out_ms: Option<u64>) -> u64 {
    let failures = u128::try_from(failures.max(1)).unwrap_or(u128::MAX);
    let sample = u64::try_from(took_ns / failures).unwrap_or(u64::MAX);
    if let Some(deadline_ms) = timed_out_ms {
        let share = u128::from(deadline_ms) * 1_000_000 / failures;
        return old
            .max(sample)
            .max(u64::try_from(share).unwrap_or(u64::MAX));
    }
    if old == 0 {
        sample
    } else {
        old - old / 8 + sample / 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_fit_half_the_deadline() {
        // Nothing learned: the most.
        assert_eq!(batch_size(0, 10), MAX_BATCH);
        // 1 us a failure: 5 ms hold 5,000, capped.
        assert_eq!(batch_size(1_000, 10), MAX_BATCH);
        // 1 ms a failure: 5 of them in half of 10 ms.
        assert_eq!(batch_size(1_000_000, 10), 5);
        // Slower than half the deadline: one at a time, never zero.
        assert_eq!(batch_size(20_000_000, 10), 1);
    }

    #[test]
    fn a_timeout_halves_the_next_batch_and_the_pace_is_smoothed() {
        // 32 failures timed out at 10 ms: at least 10 ms / 32 each, so the next batch of a
        // 10 ms deadline holds 16.
        let after_timeout = learned(0, 32, 10_000_000, Some(10));
        assert_eq!(after_timeout, 312_500);
        assert_eq!(batch_size(after_timeout, 10), 16);
        // The first sample is taken as it is; later ones move the average by an eighth.
        assert_eq!(learned(0, 4, 4_000, None), 1_000);
        assert_eq!(learned(8_000, 1, 0, None), 7_000);
        assert_eq!(learned(8_000, 2, 32_000, None), 9_000);
    }
}
