//! The gateway's model of a message on its way: a [`Delivery`] from a source, its failed
//! attempts ([`AttemptRecord`]), the [`Settlement`] the pipeline decides on (with a
//! [`DeadLetter`] when it goes to a DLQ), and what applying it came to ([`Handled`]). Every
//! other module of the gateway speaks these; this one depends on none of them.

mod audit;
mod dead_letter;
mod delivery;
mod settlement;

// One record of a failed attempt everywhere: the runtime's, which policies see too.
pub use audit::AuditRecord;
pub use dead_letter::{DeadLetter, letter_headers};
pub use delivery::{DEADLINE_HEADER, Delivery, REPLAY_HEADER, TTL_HEADER};
pub use settlement::{Handled, Settlement};
pub use verdict_runtime::AttemptRecord;
