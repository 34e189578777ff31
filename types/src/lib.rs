//! # verdict-types: what a policy and its host agree on
//!
//! The values both sides of the `verdict:policy` contract speak, in one place so they cannot
//! drift: a policy's [`Verdict`] ([`Action`], [`Class`], [`Severity`]), the [`Backoff`]
//! strategies both a policy and the host's fallback compute delays with, the error-kind
//! patterns rules match ([`kind_matches`]), and the deterministic generator and
//! [`jitter_seed`] that make a jittered delay the same wherever it is computed.
//!
//! Policy authors get these through `verdict-sdk`; the host through `verdict-runtime`.
//!
//! ```
//! use verdict_types::{Backoff, Class, Jitter, Verdict, jitter_seed};
//!
//! let backoff = Backoff::Exponential { base_ms: 200, cap_ms: 30_000, jitter: Jitter::Full };
//! let seed = jitter_seed("order-17", 2);
//! let verdict = Verdict::retry_after(backoff.delay_ms(2, seed)).because("db.timeout");
//! assert!(verdict.delay_ms().unwrap() <= 400);
//! assert_eq!(verdict.class, Class::Transient);
//! ```

#![forbid(unsafe_code)]

mod attempt;
mod backoff;
mod jitter;
mod kinds;
mod rng;
mod verdict;

pub use attempt::AttemptRecord;
pub use backoff::{Backoff, Jitter};
pub use jitter::jitter_seed;
pub use kinds::{NEVER_RETRY_KINDS, first_match, kind_matches, never_retry};
pub use rng::SplitMix64;
pub use verdict::{Action, Class, Severity, Verdict};
