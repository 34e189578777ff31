//! The glue between the component model and [`Policy`]: compiled only for wasm32, used only
//! by [`export_policy!`](crate::export_policy). Authors never touch it.

use crate::failure::{Details, Lazy};
use crate::{AttemptRecord, Failure, Header, Level, Policy, Severity, TopicStats, Verdict};

/// The contract this build exports: 0.2 by default, 0.1 with the `contract-v0-1` feature
/// (for components that must load in hosts older than 0.2; the policy's source is the same).
#[cfg(not(feature = "contract-v0-1"))]
#[allow(missing_docs, unused_qualifications, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::verdict_sdk::__private::bindings",
        runtime_path: "::verdict_sdk::__private::wit_bindgen::rt",
    });
}

/// The contract this build exports: 0.1, chosen by the `contract-v0-1` feature.
#[cfg(feature = "contract-v0-1")]
#[allow(missing_docs, unused_qualifications, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/v0.1",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::verdict_sdk::__private::bindings",
        runtime_path: "::verdict_sdk::__private::wit_bindgen::rt",
    });
}

pub use crate::failure::Handle;
use bindings::verdict::policy::host;
use bindings::verdict::policy::types as wit;

pub use bindings::exports::verdict::policy::decider::Guest;
pub use wit::{Failure as WitFailure, Info as WitInfo, Verdict as WitVerdict};

/// The `Guest` implementation [`export_policy!`](crate::export_policy) writes for the
/// contract this build exports; `POLICY` is the thread-local the export module declares.
#[cfg(not(feature = "contract-v0-1"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __verdict_decide {
    ($policy:ty) => {
        fn decide(failure: glue::WitFailure) -> glue::WitVerdict {
            POLICY.with_borrow(|policy| {
                glue::decide::<$policy>(
                    policy.as_ref(),
                    failure,
                    ::std::default::Default::default(),
                )
            })
        }

        fn decide_batch(
            failures: ::std::vec::Vec<glue::WitFailure>,
        ) -> ::std::vec::Vec<glue::WitVerdict> {
            POLICY.with_borrow(|policy| glue::decide_batch::<$policy>(policy.as_ref(), failures))
        }
    };
}

/// The `Guest` implementation for contract 0.1: one failure per call, no handle.
#[cfg(feature = "contract-v0-1")]
#[doc(hidden)]
#[macro_export]
macro_rules! __verdict_decide {
    ($policy:ty) => {
        fn decide(failure: glue::WitFailure) -> glue::WitVerdict {
            POLICY.with_borrow(|policy| {
                glue::decide::<$policy>(
                    policy.as_ref(),
                    failure,
                    ::std::default::Default::default(),
                )
            })
        }
    };
}

pub(crate) fn log(level: Level, message: &str) {
    let level = match level {
        Level::Trace => wit::Level::Trace,
        Level::Debug => wit::Level::Debug,
        Level::Info => wit::Level::Info,
        Level::Warn => wit::Level::Warn,
        Level::Error => wit::Level::Error,
    };
    host::log(level, message);
}

/// `init`: parse the config, build the policy, and route panics to the host's log so a
/// trap comes with its message.
pub fn init<P: Policy>(config: &str) -> Result<P, String> {
    std::panic::set_hook(Box::new(|info| {
        log(Level::Error, &format!("panic: {info}"));
    }));
    crate::instantiate::<P>(config)
}

/// `describe`, from the policy crate's Cargo metadata.
pub fn describe(name: &str, version: &str, description: &str) -> WitInfo {
    WitInfo {
        name: name.into(),
        version: version.into(),
        description: description.into(),
    }
}

/// `decide`: lift the record into a [`Failure`] with lazy host-backed details, decide, and
/// lower the verdict.
pub fn decide<P: Policy>(policy: Option<&P>, f: WitFailure, handle: Handle) -> WitVerdict {
    let Some(policy) = policy else {
        panic!("decide called before a successful init");
    };
    lower(policy.decide(&lift(f, handle)))
}

/// `decide-batch`: each failure decided as if alone, in order.
#[cfg(not(feature = "contract-v0-1"))]
pub fn decide_batch<P: Policy>(policy: Option<&P>, failures: Vec<WitFailure>) -> Vec<WitVerdict> {
    let Some(policy) = policy else {
        panic!("decide-batch called before a successful init");
    };
    failures
        .into_iter()
        .zip(0..)
        .map(|(f, failure)| lower(policy.decide(&lift(f, Handle { failure }))))
        .collect()
}

fn lift(f: WitFailure, handle: Handle) -> Failure {
    let first_failed = first_failed_at_ms(&f, handle);
    Failure {
        kind: f.error.kind,
        retry_after_ms: f.error.retry_after_ms,
        rejected: f.error.rejected,
        attempt: f.attempt,
        deferrals: f.deferrals,
        now_ms: f.now_ms,
        deadline_ms: f.deadline_ms,
        jitter_seed: f.jitter_seed,
        stats: TopicStats {
            window_ms: f.stats.window_ms,
            deliveries: f.stats.deliveries,
            failures: f.stats.failures,
            consecutive_failures: f.stats.consecutive_failures,
        },
        details: host_details(handle, first_failed),
    }
}

/// Contract 0.2: asked of the host on first use (few policies read it).
#[cfg(not(feature = "contract-v0-1"))]
fn first_failed_at_ms(_: &WitFailure, handle: Handle) -> Lazy<u64> {
    Lazy::host(fetch::first_failed_at_ms, handle)
}

/// Contract 0.1: in the record.
#[cfg(feature = "contract-v0-1")]
fn first_failed_at_ms(f: &WitFailure, _: Handle) -> Lazy<u64> {
    Lazy::given(f.first_failed_at_ms)
}

/// Ask the host about the failure `handle` names. Contract 0.2: through the instance's one
/// `details` handle, made the first time a policy reads an on-demand fact and kept (a
/// policy that never reads one never makes it).
#[cfg(not(feature = "contract-v0-1"))]
fn ask<T>(handle: Handle, question: impl FnOnce(&host::Details, u32) -> T) -> T {
    thread_local! {
        static DETAILS: std::cell::OnceCell<host::Details> =
            const { std::cell::OnceCell::new() };
    }
    DETAILS.with(|details| question(details.get_or_init(host::Details::new), handle.failure))
}

#[cfg(not(feature = "contract-v0-1"))]
mod fetch {
    use super::{Handle, ask, host};
    pub(super) fn topic(h: Handle) -> String {
        ask(h, |d, i| d.topic(i))
    }
    pub(super) fn message_id(h: Handle) -> String {
        ask(h, |d, i| d.message_id(i))
    }
    pub(super) fn consumer_group(h: Handle) -> String {
        ask(h, |d, i| d.consumer_group(i))
    }
    pub(super) fn error_message(h: Handle) -> String {
        ask(h, |d, i| d.error_message(i))
    }
    pub(super) fn content_type(h: Handle) -> Option<String> {
        ask(h, |d, i| d.content_type(i))
    }
    pub(super) fn published_at_ms(h: Handle) -> Option<u64> {
        ask(h, |d, i| d.published_at_ms(i))
    }
    pub(super) fn first_failed_at_ms(h: Handle) -> u64 {
        ask(h, |d, i| d.first_failed_at_ms(i))
    }
    pub(super) fn payload_size(h: Handle) -> u32 {
        ask(h, |d, i| d.payload_size(i))
    }
    pub(super) fn headers(h: Handle) -> Vec<host::Header> {
        ask(h, |d, i| d.headers(i))
    }
    pub(super) fn payload(h: Handle) -> Vec<u8> {
        ask(h, |d, i| d.payload(i))
    }
    pub(super) fn history(h: Handle) -> Vec<host::AttemptRecord> {
        ask(h, |d, i| d.history(i))
    }
    pub(super) fn extension(h: Handle, key: &str) -> Option<String> {
        ask(h, |d, i| d.extension(i, key))
    }
}

/// Contract 0.1: the host's functions describe the current failure; the handle is unused.
#[cfg(feature = "contract-v0-1")]
mod fetch {
    use super::{Handle, host};
    pub(super) fn topic(_: Handle) -> String {
        host::topic()
    }
    pub(super) fn message_id(_: Handle) -> String {
        host::message_id()
    }
    pub(super) fn consumer_group(_: Handle) -> String {
        host::consumer_group()
    }
    pub(super) fn error_message(_: Handle) -> String {
        host::error_message()
    }
    pub(super) fn content_type(_: Handle) -> Option<String> {
        host::content_type()
    }
    pub(super) fn published_at_ms(_: Handle) -> Option<u64> {
        host::published_at_ms()
    }
    pub(super) fn payload_size(_: Handle) -> u32 {
        host::payload_size()
    }
    pub(super) fn headers(_: Handle) -> Vec<host::Header> {
        host::headers()
    }
    pub(super) fn payload(_: Handle) -> Vec<u8> {
        host::payload()
    }
    pub(super) fn history(_: Handle) -> Vec<host::AttemptRecord> {
        host::history()
    }
    pub(super) fn extension(_: Handle, key: &str) -> Option<String> {
        host::extension(key)
    }
}

/// The payload straight from the host, not the cached copy: for a test guest that must make
/// the host call itself every time.
pub fn host_payload(f: &Failure) -> Vec<u8> {
    fetch::payload(f.details.handle)
}

/// The history straight from the host, not the cached copy (see [`host_payload`]).
pub fn host_history(f: &Failure) -> impl Sized + use<> {
    fetch::history(f.details.handle)
}

fn host_details(handle: Handle, first_failed_at_ms: Lazy<u64>) -> Details {
    Details {
        handle,
        first_failed_at_ms,
        topic: Lazy::host(fetch::topic, handle),
        message_id: Lazy::host(fetch::message_id, handle),
        consumer_group: Lazy::host(fetch::consumer_group, handle),
        error_message: Lazy::host(fetch::error_message, handle),
        content_type: Lazy::host(fetch::content_type, handle),
        published_at_ms: Lazy::host(fetch::published_at_ms, handle),
        payload_size: Lazy::host(fetch::payload_size, handle),
        headers: Lazy::host(
            |h| {
                fetch::headers(h)
                    .into_iter()
                    .map(|h| Header {
                        name: h.name,
                        value: h.value,
                    })
                    .collect()
            },
            handle,
        ),
        payload: Lazy::host(fetch::payload, handle),
        history: Lazy::host(
            |h| {
                fetch::history(h)
                    .into_iter()
                    .map(|a| AttemptRecord {
                        at_ms: a.at_ms,
                        kind: a.kind,
                        message: a.message,
                    })
                    .collect()
            },
            handle,
        ),
        extensions: crate::failure::Extensions::Host(fetch::extension, handle),
    }
}

fn lower(v: Verdict) -> WitVerdict {
    use crate::{Action, Class};
    WitVerdict {
        action: match v.action {
            Action::Retry(ms) => wit::Action::Retry(ms),
            Action::Delay(ms) => wit::Action::Delay(ms),
            #[cfg(not(feature = "contract-v0-1"))]
            Action::Pause(ms) => wit::Action::Pause(ms),
            // Contract 0.1 has no route pause: the message alone is delayed, which is what
            // a pause asks for it.
            #[cfg(feature = "contract-v0-1")]
            Action::Pause(ms) => wit::Action::Delay(ms),
            Action::DeadLetter => wit::Action::DeadLetter,
            Action::Discard => wit::Action::Discard,
        },
        class: match v.class {
            Class::Transient => wit::Class::Transient,
            Class::Permanent => wit::Class::Permanent,
            Class::Poison => wit::Class::Poison,
            Class::Exhausted => wit::Class::Exhausted,
            Class::Expired => wit::Class::Expired,
            Class::Rejected => wit::Class::Rejected,
            Class::Unknown => wit::Class::Unknown,
        },
        reason: reason(v.reason),
        alert: match v.alert {
            Severity::None => wit::Severity::None,
            Severity::Info => wit::Severity::Info,
            Severity::Warning => wit::Severity::Warning,
            Severity::Critical => wit::Severity::Critical,
        },
        labels: v
            .labels
            .into_iter()
            .map(|(key, value)| wit::Label { key, value })
            .collect(),
    }
}

/// Contract 0.2 lifts a reason only when there is one.
#[cfg(not(feature = "contract-v0-1"))]
fn reason(reason: String) -> Option<String> {
    (!reason.is_empty()).then_some(reason)
}

#[cfg(feature = "contract-v0-1")]
fn reason(reason: String) -> String {
    reason
}
