//! The glue between the component model and [`Policy`]: compiled only for wasm32, used only
//! by [`export_policy!`](crate::export_policy). Authors never touch it.

use crate::failure::{Details, Lazy};
use crate::{AttemptRecord, Failure, Header, Level, Policy, Severity, TopicStats, Verdict};

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

use bindings::verdict::policy::host;
use bindings::verdict::policy::types as wit;

pub use bindings::exports::verdict::policy::decider::Guest;
pub use wit::{Failure as WitFailure, Info as WitInfo, Verdict as WitVerdict};

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
pub fn decide<P: Policy>(policy: Option<&P>, f: WitFailure) -> WitVerdict {
    let Some(policy) = policy else {
        panic!("decide called before a successful init");
    };
    let failure = Failure {
        kind: f.error.kind,
        retry_after_ms: f.error.retry_after_ms,
        rejected: f.error.rejected,
        attempt: f.attempt,
        deferrals: f.deferrals,
        first_failed_at_ms: f.first_failed_at_ms,
        now_ms: f.now_ms,
        deadline_ms: f.deadline_ms,
        jitter_seed: f.jitter_seed,
        stats: TopicStats {
            window_ms: f.stats.window_ms,
            deliveries: f.stats.deliveries,
            failures: f.stats.failures,
            consecutive_failures: f.stats.consecutive_failures,
        },
        details: host_details(),
    };
    lower(policy.decide(&failure))
}

fn host_details() -> Details {
    Details {
        topic: Lazy::host(host::topic),
        message_id: Lazy::host(host::message_id),
        consumer_group: Lazy::host(host::consumer_group),
        error_message: Lazy::host(host::error_message),
        content_type: Lazy::host(host::content_type),
        published_at_ms: Lazy::host(host::published_at_ms),
        payload_size: Lazy::host(host::payload_size),
        headers: Lazy::host(|| {
            host::headers()
                .into_iter()
                .map(|h| Header {
                    name: h.name,
                    value: h.value,
                })
                .collect()
        }),
        payload: Lazy::host(host::payload),
        history: Lazy::host(|| {
            host::history()
                .into_iter()
                .map(|a| AttemptRecord {
                    at_ms: a.at_ms,
                    kind: a.kind,
                    message: a.message,
                })
                .collect()
        }),
        extensions: crate::failure::Extensions::Host(host::extension),
    }
}

fn lower(v: Verdict) -> WitVerdict {
    use crate::{Action, Class};
    WitVerdict {
        action: match v.action {
            Action::Retry(ms) => wit::Action::Retry(ms),
            Action::Delay(ms) => wit::Action::Delay(ms),
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
        reason: v.reason,
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
