//! The conformance harness: vector suites any policy can be held to, property checks that
//! need no vectors, and reports as text, JSON or JUnit XML. `verdict test` is its CLI; the
//! registry's admission gate calls the same functions.
//!
//! ```no_run
//! use verdict_registry::conformance::{Report, Suite, run_suites};
//! use verdict_runtime::{Host, Limits};
//!
//! let host = Host::new(&Limits::new())?;
//! let policy = host.load_file("rules.component.wasm".as_ref())?;
//! let suite = Suite::load("policies/rules/vectors/error-table.json".as_ref())?;
//! let results = run_suites(&policy, &[suite]);
//! let report = Report::new((**policy.provenance()).clone(), results, vec![]);
//! print!("{}", report.human());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// Limits for conformance runs: fuel bounds the cost deterministically, so the wall-clock
/// deadline only needs to be a generous safety net (a loaded CI machine must not turn a
/// slow scheduler into a failed case).
pub fn metered_limits(fuel_per_decision: u64) -> verdict_runtime::Limits {
    let mut limits = verdict_runtime::Limits::new();
    limits
        .fuel_per_decision(Some(fuel_per_decision))
        .decide_timeout_ms(1_000);
    limits
}

mod properties;
mod report;
mod runner;
mod vectors;

pub use properties::{Counterexample, PropertyOptions, PropertyResult, check_properties};
pub use report::Report;
pub use runner::{CaseResult, Mismatch, SuiteResult, compare, run_suites, totals};
pub use vectors::{
    Case, CaseSpec, DelaySpec, Expect, ExpectedAction, Suite, VectorError, VectorFile,
    vector_schema,
};
