//! Fuzz and property targets of the gateway's parsers that face outside input - consumer
//! answers, producer headers, RabbitMQ and NATS message headers, the deadline headers, the
//! NATS attempt history, the admin API's request bodies, replays from broker DLQs - kept
//! beside the code they test, so that what they call needs no public export. Cases per
//! target: `VERDICT_FUZZ_CASES` (see the `verdict-fuzz` crate).

mod admin;
mod delivery;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;

use proptest::prelude::*;
use verdict_fuzz::nasty_string;
use verdict_runtime::AttemptRecord;

/// A failed attempt with hostile text and any time.
#[cfg(any(feature = "nats", feature = "rabbitmq"))]
fn attempt_record() -> BoxedStrategy<AttemptRecord> {
    (any::<u64>(), nasty_string(24), nasty_string(48))
        .prop_map(|(at_ms, kind, message)| AttemptRecord {
            at_ms,
            kind,
            message,
        })
        .boxed()
}
