//! The one thing every source does: consume until shutdown.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::health::Readiness;
use crate::pipeline::Pipeline;

/// A place failed deliveries come from: the embedded store
/// ([`EmbeddedSource`](super::embedded::EmbeddedSource)), NATS JetStream
/// ([`NatsSource`](super::nats::NatsSource)) or RabbitMQ
/// ([`RabbitmqSource`](super::rabbitmq::RabbitmqSource)).
///
/// A source takes each message of its routes, asks the [`Pipeline`] to deliver it and
/// applies the settlement it returns, writing the new state before it lets go of the old
/// one. What it must keep (the delivery invariants): nothing lost, no duplicate without a
/// fault, attempts counted from the gateway's own records, a route's slots its own, and no
/// message left unsettled at shutdown that the source could not hand back.
pub trait Source: Send + 'static {
    /// The source's name in metrics, log lines and `/readyz`.
    fn name(&self) -> &'static str;

    /// Whether its broker connection is up, for `/readyz`; `None` for a source that has no
    /// connection to lose (the embedded store).
    fn readiness(&self) -> Option<Readiness>;

    /// Consume until `shutdown` turns true - a lost connection is rebuilt inside, so this
    /// does not end early - then give deliveries in flight up to `grace` to settle.
    fn run(
        self: Box<Self>,
        pipeline: Arc<Pipeline>,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
    ) -> BoxFuture<'static, ()>;
}
