//! One instantiated policy: a store, its bindings and the call discipline (deadline, fuel,
//! fault classification) every call goes through.

use std::sync::Arc;

use verdict_types::Verdict;
use wasmtime::{Store, Trap};

use crate::bindings::HostState;
use crate::wasi::CallInputs;
use crate::wit::types as wit;
use crate::wit::{PolicyBindings, PolicyBindingsPre, v0_1};
use crate::{Failure, Fault, Limits, Policy};

/// The most failures one `decide-batch` call carries (the contract promises policies this
/// bound).
pub(crate) const MAX_BATCH: usize = 64;

/// A component linked against the contract it speaks, ready to instantiate.
pub(crate) enum Pre {
    V0_2(PolicyBindingsPre<HostState>),
    V0_1(v0_1::PolicyBindingsPre<HostState>),
}

/// An instance's exports, in the contract it speaks.
enum Bindings {
    V0_2(PolicyBindings),
    V0_1(v0_1::PolicyBindings),
}

pub(crate) struct Instance {
    store: Store<HostState>,
    bindings: Bindings,
    uses: u32,
    /// The last batch's records, kept for the next one: refilled in place, each record's
    /// `kind` reuses its string's buffer, so a batch allocates nothing per failure here.
    batch_records: Vec<wit::Failure>,
    /// Linear memory right after instantiation: what the policy starts with (a few pages
    /// for a Rust policy, megabytes for an embedded interpreter). Growth is measured from it.
    baseline_bytes: usize,
}

/// The budget of one call.
#[derive(Clone, Copy)]
struct Budget {
    timeout_ms: u64,
    fuel: Option<u64>,
}

impl Budget {
    /// `init` and `describe`: the longer deadline, and unmetered fuel when metering is on
    /// (the deadline bounds them; fuel budgets are for `decide`).
    fn setup(limits: &Limits) -> Self {
        Budget {
            timeout_ms: limits.init_timeout_ms,
            fuel: limits.fuel_per_decision.map(|_| u64::MAX),
        }
    }

    fn decide(limits: &Limits) -> Self {
        Budget {
            timeout_ms: limits.decide_timeout_ms,
            fuel: limits.fuel_per_decision,
        }
    }

    /// A batch: one deadline (a batch of rules decisions takes microseconds, far below any
    /// deadline, and a looping policy should not get a deadline per failure to burn), and
    /// each failure's fuel, pooled (a batch whose whole use passes one failure's budget
    /// is decided again one by one, so no failure got more than it would alone: see
    /// `over_budget`).
    fn batch(limits: &Limits, failures: usize) -> Self {
        let failures = u64::try_from(failures).unwrap_or(u64::MAX);
        Budget {
            timeout_ms: limits.decide_timeout_ms,
            fuel: limits
                .fuel_per_decision
                .map(|fuel| fuel.saturating_mul(failures)),
        }
    }
}

/// How many more times an instantiation refused by a passing host condition is tried.
const BUSY_RETRIES: u32 = 4;

/// Whether `error` is the host's `EBUSY`: on a module's first instantiation Wasmtime
/// writes its memory image into a memfd and seals it, and Linux refuses the seal with
/// `EBUSY` while a page of it is still referenced elsewhere for a moment (a busy machine's
/// page cache). Nothing is cached from the failure, so the same instantiation tried again
/// succeeds - where a guest's trap or a limit would fail the same way every time.
fn is_busy(error: &wasmtime::Error) -> bool {
    const EBUSY: i32 = 16;
    error
        .root_cause()
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::raw_os_error)
        == Some(EBUSY)
}

impl Instance {
    /// Instantiate `policy` in a fresh store; a passing `EBUSY` from the host (see
    /// [`is_busy`]) is tried again, in a fresh store, after 20, 40, 80 and 160 ms.
    pub(crate) fn new(policy: &Policy) -> Result<Self, Fault> {
        let mut retries = 0;
        loop {
            match Self::instantiate(policy) {
                Ok(instance) => return Ok(instance),
                Err((error, _)) if retries < BUSY_RETRIES && is_busy(&error) => {
                    retries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10 << retries));
                }
                Err((_, fault)) => return Err(fault),
            }
        }
    }

    /// One instantiation; a failure comes back with the fault it is.
    fn instantiate(policy: &Policy) -> Result<Self, (wasmtime::Error, Fault)> {
        let limits = policy.host().limits();
        let state = HostState::new(
            Arc::from(policy.provenance().name.as_str()),
            limits.memory_cap_bytes,
            limits.max_core_instances,
        );
        let mut store = Store::new(policy.host().engine(), state);
        store.limiter(|state| &mut state.limiter);
        // What one call from the guest may make the host allocate (strings and lists lifted
        // into host values): no more than the guest may hold itself, instead of wasmtime's
        // 128 MiB default, so a policy capped at 16 MiB cannot make each call cost 128.
        store.set_hostcall_fuel(limits.memory_cap_bytes);
        let budget = Budget::setup(limits);
        arm(&mut store, limits, budget, &[], CallInputs::default());
        let bindings = match policy.pre() {
            Pre::V0_2(pre) => pre.instantiate(&mut store).map(Bindings::V0_2),
            Pre::V0_1(pre) => pre.instantiate(&mut store).map(Bindings::V0_1),
        };
        match bindings {
            Ok(bindings) => Ok(Instance {
                baseline_bytes: store.data().limiter.peak_bytes,
                store,
                bindings,
                uses: 0,
                batch_records: Vec::new(),
            }),
            Err(e) => {
                let message = classify(&e, &store, budget).to_string();
                Err((e, Fault::Instantiate { message }))
            }
        }
    }

    /// Call `init(config)`; the outer error is a fault, the inner one the policy's refusal.
    pub(crate) fn init(
        &mut self,
        limits: &Limits,
        config: &str,
    ) -> Result<Result<(), String>, Fault> {
        let budget = Budget::setup(limits);
        arm(&mut self.store, limits, budget, &[], CallInputs::default());
        let result = match &self.bindings {
            Bindings::V0_2(b) => b
                .verdict_policy_decider()
                .call_init(&mut self.store, config),
            Bindings::V0_1(b) => b
                .verdict_policy_decider()
                .call_init(&mut self.store, config),
        };
        self.store.data_mut().end_call();
        result.map_err(|e| classify(&e, &self.store, budget))
    }

    /// Call `describe`.
    pub(crate) fn describe(&mut self, limits: &Limits) -> Result<wit::Info, Fault> {
        let budget = Budget::setup(limits);
        arm(&mut self.store, limits, budget, &[], CallInputs::default());
        let result = match &self.bindings {
            Bindings::V0_2(b) => b.verdict_policy_decider().call_describe(&mut self.store),
            Bindings::V0_1(b) => b
                .verdict_policy_decider()
                .call_describe(&mut self.store)
                .map(|i| wit::Info {
                    name: i.name,
                    version: i.version,
                    description: i.description,
                }),
        };
        self.store.data_mut().end_call();
        result.map_err(|e| classify(&e, &self.store, budget))
    }

    /// Call `decide(failure)`.
    pub(crate) fn decide(&mut self, limits: &Limits, failure: &Failure) -> Result<Verdict, Fault> {
        self.uses += 1;
        let budget = Budget::decide(limits);
        let inputs = CallInputs {
            now_ms: failure.record.now_ms,
            seed: failure.record.jitter_seed,
        };
        arm(
            &mut self.store,
            limits,
            budget,
            std::slice::from_ref(failure),
            inputs,
        );
        let result = match &self.bindings {
            Bindings::V0_2(b) => b
                .verdict_policy_decider()
                .call_decide(&mut self.store, &failure.record)
                .map(Verdict::from),
            Bindings::V0_1(b) => b
                .verdict_policy_decider()
                .call_decide(&mut self.store, &failure.record_v0_1())
                .map(Verdict::from),
        };
        let result = result.map_err(|e| classify(&e, &self.store, budget));
        self.store.data_mut().end_call();
        result
    }

    /// Call `decide-batch(failures)`: one verdict per failure, in order, or the fault that
    /// stopped the whole call. At most [`MAX_BATCH`] failures; a 0.1 component, which has no
    /// `decide-batch`, is asked once per failure.
    pub(crate) fn decide_batch(
        &mut self,
        limits: &Limits,
        failures: &[Failure],
    ) -> Result<Vec<Verdict>, Fault> {
        let Bindings::V0_2(bindings) = &self.bindings else {
            return failures.iter().map(|f| self.decide(limits, f)).collect();
        };
        debug_assert!(
            failures.len() <= MAX_BATCH,
            "batches are cut by the decider"
        );
        self.uses += u32::try_from(failures.len()).unwrap_or(u32::MAX);
        let budget = Budget::batch(limits, failures.len());
        // WASI's clock and generator serve the batch from its first failure: a policy that
        // reads them instead of the failure's own clock and seed is not deterministic per
        // failure anyway, and the SDKs never do.
        let inputs = failures
            .first()
            .map(|f| CallInputs {
                now_ms: f.record.now_ms,
                seed: f.record.jitter_seed,
            })
            .unwrap_or_default();
        arm(&mut self.store, limits, budget, failures, inputs);
        refill(&mut self.batch_records, failures);
        let result = bindings
            .verdict_policy_decider()
            .call_decide_batch(&mut self.store, &self.batch_records);
        let result = match result {
            // The batch's fuel is pooled: past one failure's budget in all, some failure
            // may have used more than it would have been given alone. Then the batch counts
            // as faulted and the decider asks again one failure at a time - a batch never
            // answers what the failures alone would not.
            Ok(_) if over_budget(&self.store, limits, budget) => Err(Fault::OutOfFuel {
                fuel: limits.fuel_per_decision.unwrap_or(0),
            }),
            Ok(verdicts) if verdicts.len() == failures.len() => {
                Ok(verdicts.into_iter().map(Verdict::from).collect())
            }
            Ok(verdicts) => Err(Fault::Trap {
                message: format!(
                    "decide-batch answered {} verdicts for {} failures",
                    verdicts.len(),
                    failures.len()
                ),
            }),
            Err(e) => Err(classify(&e, &self.store, budget)),
        };
        self.store.data_mut().end_call();
        result
    }

    /// Whether this instance may serve another decision: not worn out, and its memory not
    /// grown by more than `instance_recycle_bytes` since it was instantiated.
    pub(crate) fn reusable(&self, limits: &Limits) -> bool {
        let grown = self
            .store
            .data()
            .limiter
            .peak_bytes
            .saturating_sub(self.baseline_bytes);
        self.uses < limits.instance_max_uses && grown <= limits.instance_recycle_bytes
    }
}

/// Make `records` the records of `failures`, reusing what it holds: a record's only
/// allocation, its `kind`, is copied into the buffer already there.
fn refill(records: &mut Vec<wit::Failure>, failures: &[Failure]) {
    records.truncate(failures.len());
    for (i, failure) in failures.iter().enumerate() {
        match records.get_mut(i) {
            Some(record) => copy_record(record, &failure.record),
            None => records.push(failure.record.clone()),
        }
    }
}

/// `*to = from.clone()`, keeping `to`'s string buffer. Spelled field by field, so a field
/// added to the record cannot be forgotten here.
fn copy_record(to: &mut wit::Failure, from: &wit::Failure) {
    let wit::Failure {
        attempt,
        deferrals,
        now_ms,
        deadline_ms,
        error,
        jitter_seed,
        stats,
    } = from;
    to.attempt = *attempt;
    to.deferrals = *deferrals;
    to.now_ms = *now_ms;
    to.deadline_ms = *deadline_ms;
    to.error.kind.clone_from(&error.kind);
    to.error.retry_after_ms = error.retry_after_ms;
    to.error.rejected = error.rejected;
    to.jitter_seed = *jitter_seed;
    to.stats = *stats;
}

/// Whether a batch used, in all, more fuel than one decision may (`budget` is the batch's
/// pooled fuel): only below that is every failure known to have kept to its own budget.
fn over_budget(store: &Store<HostState>, limits: &Limits, budget: Budget) -> bool {
    let (Some(per_decision), Some(pooled)) = (limits.fuel_per_decision, budget.fuel) else {
        return false;
    };
    store
        .get_fuel()
        .is_ok_and(|left| pooled.saturating_sub(left) > per_decision)
}

fn arm(
    store: &mut Store<HostState>,
    limits: &Limits,
    budget: Budget,
    failures: &[Failure],
    inputs: CallInputs,
) {
    store.set_epoch_deadline(limits.ticks(budget.timeout_ms));
    if let Some(fuel) = budget.fuel {
        // Only fails when metering is off, which `fuel` being set rules out.
        let _ = store.set_fuel(fuel);
    }
    store.data_mut().limiter.refused = None;
    store
        .data_mut()
        .begin_call(failures.iter().map(|f| f.details.clone()), inputs);
}

/// Turn a Wasmtime error into the fault operators read.
fn classify(error: &wasmtime::Error, store: &Store<HostState>, budget: Budget) -> Fault {
    let state = store.data();
    if let Some(requested_bytes) = state.limiter.refused {
        return Fault::MemoryCap {
            cap_bytes: state.limiter.cap_bytes(),
            requested_bytes,
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Fault::Timeout {
            limit_ms: budget.timeout_ms,
        },
        Some(Trap::OutOfFuel) => Fault::OutOfFuel {
            fuel: budget.fuel.unwrap_or(0),
        },
        _ if state.last_panic.is_some() => Fault::Panic {
            message: state.last_panic.clone().unwrap_or_default(),
        },
        Some(trap) => Fault::Trap {
            message: trap.to_string(),
        },
        // A host function's own error (a WASI stub refusing a capability, say): its message
        // is the cause; the Wasm backtrace wrapped around it is for debuggers, not for
        // logs, metrics and envelopes.
        None => Fault::Trap {
            message: crate::text::one_line(
                &error.root_cause().to_string(),
                crate::text::MAX_MESSAGE_BYTES,
            ),
        },
    }
}

impl From<wit::Verdict> for Verdict {
    fn from(v: wit::Verdict) -> Self {
        use verdict_types::{Action, Class, Severity};
        Verdict {
            action: match v.action {
                wit::Action::Retry(ms) => Action::Retry(ms),
                wit::Action::Delay(ms) => Action::Delay(ms),
                wit::Action::Pause(ms) => Action::Pause(ms),
                wit::Action::DeadLetter => Action::DeadLetter,
                wit::Action::Discard => Action::Discard,
            },
            class: match v.class {
                wit::Class::Transient => Class::Transient,
                wit::Class::Permanent => Class::Permanent,
                wit::Class::Poison => Class::Poison,
                wit::Class::Exhausted => Class::Exhausted,
                wit::Class::Expired => Class::Expired,
                wit::Class::Rejected => Class::Rejected,
                wit::Class::Unknown => Class::Unknown,
            },
            reason: v.reason.unwrap_or_default(),
            alert: match v.alert {
                wit::Severity::None => Severity::None,
                wit::Severity::Info => Severity::Info,
                wit::Severity::Warning => Severity::Warning,
                wit::Severity::Critical => Severity::Critical,
            },
            labels: v.labels.into_iter().map(|l| (l.key, l.value)).collect(),
        }
    }
}

impl From<v0_1::types::Verdict> for Verdict {
    fn from(v: v0_1::types::Verdict) -> Self {
        use v0_1::types as old;
        use verdict_types::{Action, Class, Severity};
        Verdict {
            action: match v.action {
                old::Action::Retry(ms) => Action::Retry(ms),
                old::Action::Delay(ms) => Action::Delay(ms),
                old::Action::DeadLetter => Action::DeadLetter,
                old::Action::Discard => Action::Discard,
            },
            class: match v.class {
                old::Class::Transient => Class::Transient,
                old::Class::Permanent => Class::Permanent,
                old::Class::Poison => Class::Poison,
                old::Class::Exhausted => Class::Exhausted,
                old::Class::Expired => Class::Expired,
                old::Class::Rejected => Class::Rejected,
                old::Class::Unknown => Class::Unknown,
            },
            reason: v.reason,
            alert: match v.alert {
                old::Severity::None => Severity::None,
                old::Severity::Info => Severity::Info,
                old::Severity::Warning => Severity::Warning,
                old::Severity::Critical => Severity::Critical,
            },
            labels: v.labels.into_iter().map(|l| (l.key, l.value)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_busy;

    /// As the memfd crate reports a refused seal: its own error, the OS error its source.
    #[derive(Debug)]
    struct AddSeals(std::io::Error);

    impl std::fmt::Display for AddSeals {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot add seals to the memfd")
        }
    }

    impl std::error::Error for AddSeals {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn only_the_hosts_ebusy_is_tried_again() {
        let seal = |errno| wasmtime::Error::new(AddSeals(std::io::Error::from_raw_os_error(errno)));
        assert!(is_busy(&seal(16)));
        assert!(!is_busy(&seal(12)), "out of memory does not pass by itself");
        assert!(!is_busy(&wasmtime::Error::new(
            wasmtime::Trap::UnreachableCodeReached
        )));
    }
}
