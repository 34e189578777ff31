//! # verdict-sdk: write retry and dead-letter policies in Rust
//!
//! A Verdict policy looks at one failed delivery and answers with a [`Verdict`]: retry after
//! a delay, delay without spending an attempt, pause the whole route, dead-letter, or
//! discard, with a [`Class`], a
//! reason, an alert [`Severity`] and labels. The host compiles it to a sandboxed WebAssembly
//! component and calls it for every failure on the topics routed to it.
//!
//! You write one type that implements [`Policy`] and export it with [`export_policy!`].
//! Everything except that export glue is plain Rust, so the logic is unit-tested natively
//! with `cargo test`, no Wasm involved; `verdict build <crate-dir>` then produces the
//! component.
//!
//! ## A complete policy
//!
//! ```
//! use serde::Deserialize;
//! use verdict_sdk::{export_policy, Backoff, Class, Failure, Jitter, Policy, Verdict};
//!
//! /// Per-topic config: `{"max_attempts": 5}`.
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! pub struct Config {
//!     max_attempts: u32,
//! }
//!
//! impl Default for Config {
//!     fn default() -> Self {
//!         Config { max_attempts: 5 }
//!     }
//! }
//!
//! pub struct Orders {
//!     max_attempts: u32,
//!     backoff: Backoff,
//! }
//!
//! impl Policy for Orders {
//!     type Config = Config;
//!
//!     fn new(config: Config) -> Result<Self, String> {
//!         if config.max_attempts == 0 {
//!             return Err("max_attempts must be at least 1".into());
//!         }
//!         let backoff = Backoff::Exponential { base_ms: 200, cap_ms: 30_000, jitter: Jitter::Full };
//!         Ok(Orders { max_attempts: config.max_attempts, backoff })
//!     }
//!
//!     fn decide(&self, f: &Failure) -> Verdict {
//!         // Payload, schema, format and auth errors never heal: dead-letter them at once
//!         // (the admission gate checks that these kinds are never retried).
//!         if let Some(dead) = f.never_retry() {
//!             return dead;
//!         }
//!         if f.attempt() >= self.max_attempts {
//!             return Verdict::dead_letter(Class::Exhausted)
//!                 .because(format!("{} failed {} times", f.kind(), f.attempt()));
//!         }
//!         let backoff = self.backoff.delay_ms(f.attempt(), f.jitter_seed());
//!         // Honour the consumer's Retry-After when it asks for longer (up to a minute).
//!         Verdict::retry_after(backoff.max(f.retry_after_ms().unwrap_or(0).min(60_000)))
//!     }
//! }
//!
//! export_policy!(Orders);
//!
//! // Native unit tests exercise the same code the component runs:
//! let policy: Orders = verdict_sdk::instantiate(r#"{"max_attempts": 3}"#).unwrap();
//! assert_eq!(policy.decide(&Failure::new("json.parse")).class, Class::Poison);
//! assert_eq!(policy.decide(&Failure::new("auth.denied")).class, Class::Permanent);
//! assert_eq!(policy.decide(&Failure::new("db.timeout").with_attempt(3)).class, Class::Exhausted);
//! let v = policy.decide(&Failure::new("db.timeout").with_attempt(1).with_retry_after_ms(9_000));
//! assert_eq!(v.delay_ms(), Some(9_000));
//!
//! // A bad config is refused with the field's name:
//! let err = verdict_sdk::instantiate::<Orders>(r#"{"max_atempts": 3}"#).err().unwrap();
//! assert!(err.contains("max_atempts"));
//! ```
//!
//! ## What a policy can and cannot do
//!
//! A policy sees the failure and nothing else: no files, network, clock or randomness. The
//! clock ([`Failure::now_ms`]) and a jitter seed ([`Failure::jitter_seed`]) come with the
//! failure, so the same input always gives the same verdict. Large parts of the failure
//! (payload, headers, history, ids) are fetched from the host on first use, so reading only
//! the kind and attempt costs nothing extra.
//!
//! The host applies guardrails to every verdict (attempt ceiling, delay cap, bounded
//! deferrals), and a policy that traps, panics, loops or exhausts its memory gets the
//! topic's fallback verdict instead, with the cause recorded.

// The generated bindings and the export macro name this crate by its absolute path, which
// must also resolve inside the crate itself.
extern crate self as verdict_sdk;

mod config;
mod failure;
mod log;
mod policy;

#[cfg(target_arch = "wasm32")]
mod export;

pub use config::{from_json_slice, parse_config};
pub use failure::{Failure, Header, TopicStats};
pub use log::{Level, info, log, warn};
pub use policy::{Policy, instantiate};
pub use verdict_types::{
    Action, AttemptRecord, Backoff, Class, Jitter, NEVER_RETRY_KINDS, Severity, Verdict,
    first_match, kind_matches,
};

/// Implementation details of [`export_policy!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    #[cfg(target_arch = "wasm32")]
    pub use crate::export::*;
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;
}

/// Export a [`Policy`] as the component's `verdict:policy/decider` implementation.
///
/// Use it once, at the root of the policy crate. The policy's name, version and description
/// come from the crate's `Cargo.toml`. On targets other than wasm32 it expands to nothing,
/// so the same crate builds and unit-tests natively.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        mod __verdict_export {
            use super::*;
            use $crate::__private as glue;

            ::std::thread_local! {
                static POLICY: ::std::cell::RefCell<::std::option::Option<$policy>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }

            struct Export;

            impl glue::Guest for Export {
                fn init(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                    let policy = glue::init::<$policy>(&config)?;
                    POLICY.with_borrow_mut(|slot| *slot = ::std::option::Option::Some(policy));
                    ::std::result::Result::Ok(())
                }

                fn describe() -> glue::WitInfo {
                    glue::describe(
                        ::std::env!("CARGO_PKG_NAME"),
                        ::std::env!("CARGO_PKG_VERSION"),
                        ::std::env!("CARGO_PKG_DESCRIPTION"),
                    )
                }

                $crate::__verdict_decide!($policy);
            }

            glue::bindings::export!(Export with_types_in $crate::__private::bindings);
        }
    };
}
