//! Traces of what the gateway does with each message, made with the tracer
//! `verdict-telemetry` starts from `[telemetry]`.
//!
//! One delivery attempt is one span tree, in the trace the message was created in (the
//! producer's `traceparent`, read from the publish API's, NATS's, RabbitMQ's or Kafka's
//! headers) and linked to that creation context, as the messaging conventions ask of a
//! consumer's "process" span:
//!
//! ```text
//! process orders            CONSUMER  attempt, route, policy, verdict, outcome
//! ├── POST                  CLIENT    the push; its context goes to the consumer as `traceparent`
//! ├── send orders.DLQ       PRODUCER  the dead letter (its context kept in the envelope)
//! └── settle                INTERNAL  delivered / retry-scheduled / dead-lettered / ...
//! ```
//!
//! A replay starts a new trace ([`ReplayTrace`]), linked to the creation context and to the
//! dead letter's span, and the replayed message carries it on. A message without a trace
//! context gets a new trace per attempt. No span carries a payload; every string from
//! outside (topic, id, DLQ, URL) is one bounded line, credentials removed.

mod delivery_trace;
mod replay_trace;
mod start;

pub(crate) use delivery_trace::DeliveryTrace;
pub use replay_trace::{ReplayTrace, with_traceparent};
pub use start::{StartError, settings, start};
pub use verdict_telemetry::{Telemetry, Tracing};

/// The longest text an attribute made from outside input carries.
const MAX_ATTRIBUTE_BYTES: usize = 256;

/// `text` from outside as an attribute value: one line, bounded.
fn bounded(text: &str) -> String {
    verdict_runtime::text::one_line(text, MAX_ATTRIBUTE_BYTES)
}
