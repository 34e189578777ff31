//! The admin API's connections to the brokers' DLQs: one per broker, opened on the first
//! request that needs it and kept for the next, opened again when the broker's section of
//! the config changes or the connection is lost.

use std::sync::{Arc, Mutex, PoisonError};

use crate::dlq::DlqError;
#[cfg(feature = "kafka")]
use crate::sources::kafka::KafkaDeadLetters;
#[cfg(feature = "nats")]
use crate::sources::nats::NatsDeadLetters;
#[cfg(feature = "rabbitmq")]
use crate::sources::rabbitmq::RabbitDeadLetters;
use verdict_registry::GatewayConfig;
#[cfg(feature = "kafka")]
use verdict_registry::KafkaConfig;
#[cfg(feature = "nats")]
use verdict_registry::NatsConfig;
#[cfg(feature = "rabbitmq")]
use verdict_registry::RabbitmqConfig;
use verdict_registry::SourceKind;

/// What a connection depends on: the broker's section, the gateway's name and the routes
/// (which name the DLQs).
type Key<S> = (S, String, Vec<(String, SourceKind)>);

/// A connection, and the config it was opened with.
type Cached<S, T> = Mutex<Option<(Key<S>, Arc<T>)>>;

/// The kept connections.
#[derive(Default)]
pub(crate) struct BrokerConnections {
    #[cfg(feature = "nats")]
    nats: Cached<NatsConfig, NatsDeadLetters>,
    #[cfg(feature = "rabbitmq")]
    rabbitmq: Cached<RabbitmqConfig, RabbitDeadLetters>,
    #[cfg(feature = "kafka")]
    kafka: Cached<KafkaConfig, KafkaDeadLetters>,
}

impl BrokerConnections {
    /// The NATS DLQ connection for `config`; call from a blocking thread.
    #[cfg(feature = "nats")]
    pub(crate) fn nats(
        &self,
        handle: &tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<Arc<NatsDeadLetters>, DlqError> {
        // The NATS client reconnects by itself: only a changed section needs a new one.
        let key = key_of(&config.nats, config);
        kept(
            &self.nats,
            key,
            |_| true,
            || NatsDeadLetters::connect_with(handle.clone(), config),
        )
    }

    /// The RabbitMQ DLQ connection for `config`; call from a blocking thread.
    #[cfg(feature = "rabbitmq")]
    pub(crate) fn rabbitmq(
        &self,
        handle: &tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<Arc<RabbitDeadLetters>, DlqError> {
        let key = key_of(&config.rabbitmq, config);
        kept(&self.rabbitmq, key, RabbitDeadLetters::is_connected, || {
            RabbitDeadLetters::connect_with(handle.clone(), config)
        })
    }

    /// The Kafka DLQ clients for `config`; call from a blocking thread.
    #[cfg(feature = "kafka")]
    pub(crate) fn kafka(
        &self,
        handle: &tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<Arc<KafkaDeadLetters>, DlqError> {
        // librdkafka reconnects by itself: only a changed section needs new clients.
        let key = key_of(&config.kafka, config);
        kept(
            &self.kafka,
            key,
            |_| true,
            || KafkaDeadLetters::connect_with(handle.clone(), config),
        )
    }

    /// Forget the connection to `source`'s broker (after an error), so the next request
    /// opens a new one.
    pub(crate) fn forget(&self, source: SourceKind) {
        match source {
            #[cfg(feature = "nats")]
            SourceKind::Nats => *lock(&self.nats) = None,
            #[cfg(feature = "rabbitmq")]
            SourceKind::Rabbitmq => *lock(&self.rabbitmq) = None,
            #[cfg(feature = "kafka")]
            SourceKind::Kafka => *lock(&self.kafka) = None,
            _ => {}
        }
    }
}

fn key_of<S: Clone>(section: &S, config: &GatewayConfig) -> Key<S> {
    let routes = config
        .routes
        .iter()
        .map(|r| (r.topic.clone(), r.source))
        .collect();
    (section.clone(), config.gateway.instance.clone(), routes)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection in `cache` when it was opened for `key` and is `alive`, else a new one.
/// The lock is held while connecting, so concurrent requests open one connection, not
/// several.
fn kept<S: PartialEq, T>(
    cache: &Cached<S, T>,
    key: Key<S>,
    alive: impl Fn(&T) -> bool,
    open: impl FnOnce() -> Result<T, DlqError>,
) -> Result<Arc<T>, DlqError> {
    let mut cached = lock(cache);
    if let Some((k, c)) = cached.as_ref()
        && *k == key
        && alive(c)
    {
        return Ok(c.clone());
    }
    let connection = Arc::new(open()?);
    *cached = Some((key, connection.clone()));
    Ok(connection)
}
