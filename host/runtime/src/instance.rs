//! One instantiated policy: a store, its bindings and the call discipline (deadline, fuel,
//! fault classification) every call goes through.

use std::sync::Arc;

use verdict_types::Verdict;
use wasmtime::{Store, Trap};

use crate::bindings::HostState;
use crate::wasi::CallInputs;
use crate::wit::PolicyBindings;
use crate::wit::types as wit;
use crate::{Failure, Fault, Limits, Policy};

pub(crate) struct Instance {
    store: Store<HostState>,
    bindings: PolicyBindings,
    uses: u32,
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
}

impl Instance {
    /// Instantiate `policy` in a fresh store.
    pub(crate) fn new(policy: &Policy) -> Result<Self, Fault> {
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
        arm(&mut store, limits, budget, None, CallInputs::default());
        match policy.pre().instantiate(&mut store) {
            Ok(bindings) => Ok(Instance {
                baseline_bytes: store.data().limiter.peak_bytes,
                store,
                bindings,
                uses: 0,
            }),
            Err(e) => Err(Fault::Instantiate {
                message: classify(e, &store, budget).to_string(),
            }),
        }
    }

    /// Call `init(config)`; the outer error is a fault, the inner one the policy's refusal.
    pub(crate) fn init(
        &mut self,
        limits: &Limits,
        config: &str,
    ) -> Result<Result<(), String>, Fault> {
        let budget = Budget::setup(limits);
        arm(&mut self.store, limits, budget, None, CallInputs::default());
        let result = self
            .bindings
            .verdict_policy_decider()
            .call_init(&mut self.store, config);
        self.store.data_mut().end_call();
        result.map_err(|e| classify(e, &self.store, budget))
    }

    /// Call `describe`.
    pub(crate) fn describe(&mut self, limits: &Limits) -> Result<wit::Info, Fault> {
        let budget = Budget::setup(limits);
        arm(&mut self.store, limits, budget, None, CallInputs::default());
        let result = self
            .bindings
            .verdict_policy_decider()
            .call_describe(&mut self.store);
        self.store.data_mut().end_call();
        result.map_err(|e| classify(e, &self.store, budget))
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
            Some(failure.details.clone()),
            inputs,
        );
        let result = self
            .bindings
            .verdict_policy_decider()
            .call_decide(&mut self.store, &failure.record);
        let result = result
            .map(Verdict::from)
            .map_err(|e| classify(e, &self.store, budget));
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

fn arm(
    store: &mut Store<HostState>,
    limits: &Limits,
    budget: Budget,
    current: Option<Arc<crate::failure::Details>>,
    inputs: CallInputs,
) {
    store.set_epoch_deadline(limits.ticks(budget.timeout_ms));
    if let Some(fuel) = budget.fuel {
        // Only fails when metering is off, which `fuel` being set rules out.
        let _ = store.set_fuel(fuel);
    }
    store.data_mut().limiter.refused = None;
    store.data_mut().begin_call(current, inputs);
}

/// Turn a Wasmtime error into the fault operators read.
fn classify(error: wasmtime::Error, store: &Store<HostState>, budget: Budget) -> Fault {
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
            reason: v.reason,
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
