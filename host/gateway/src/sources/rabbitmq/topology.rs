//! The queues and exchanges the RabbitMQ source uses, and confirmed publishing into them.
//!
//! Delays: per-message TTL only expires at a queue's head, so one queue with mixed delays
//! would hold a 1 s retry behind a 1 h one. Each delay bucket gets its own fanout exchange
//! and queue ([`RabbitmqConfig::bucket_name`]) with `x-message-ttl = ms` and the default
//! exchange as its dead-letter exchange: a copy published there expires after exactly its
//! bucket's TTL, timed by the broker's clock alone, and is routed on.
//! Every message in a bucket waits equally long, so the head always expires first. Buckets
//! are declared on first use, and again after a publish finds one gone (an operator deleted
//! its queue).
//!
//! The hop back must not lose a retry when its route queue is deleted or refusing, and the
//! broker's own dead-lettering into the route queue is at most once for classic queues.
//! So classic buckets (the default) dead-letter into the gateways' due queue
//! ([`RabbitmqConfig::due_queue`], a queue of their own that every gateway consumes), and
//! a gateway moves each retry from there to the queue its `x-verdict-queue` header names
//! with a publisher confirm before acking it ([`super::due`]). Quorum buckets use the
//! broker's at-least-once strategy instead: an expired retry stays in its bucket until the
//! route queue has confirmed it.
//!
//! An operator's hand on the broker closes the publishing channel (a publish to an exchange
//! someone deleted is a channel error): the topology then reports itself broken and the
//! source rebuilds its session - a new channel, everything declared again - with `/readyz`
//! answering 503 meanwhile, instead of failing every settlement on a dead channel.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use crate::model::AuditRecord;
use anyhow::Context as _;
use lapin::options::{
    BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, ExchangeKind};

use verdict_registry::{DelayQueues, RabbitmqConfig};

/// Every queue and exchange name a gateway may create under `delay_prefix` (the buckets
/// of both kinds and of earlier versions, the due queues): what a tool cleaning a prefix
/// away, or counting what waits under it, must look at.
pub fn delay_names(delay_prefix: &str) -> Vec<String> {
    let config = RabbitmqConfig {
        delay_prefix: delay_prefix.to_string(),
        ..RabbitmqConfig::default()
    };
    config.delay_names(&super::headers::all_buckets())
}

/// A channel in confirm mode, and what has been declared on it.
#[derive(Clone)]
pub(crate) struct Topology {
    channel: Channel,
    /// Names the buckets and says their kind.
    config: Arc<RabbitmqConfig>,
    declared: Arc<Mutex<HashSet<String>>>,
    /// Set (with the error) once the channel closed under a publish.
    broken: tokio::sync::watch::Sender<Option<String>>,
}

impl Topology {
    /// Put `channel` in confirm mode.
    pub async fn new(channel: Channel, config: &RabbitmqConfig) -> anyhow::Result<Topology> {
        channel
            .confirm_select(Default::default())
            .await
            .context("enabling publisher confirms")?;
        Ok(Topology {
            channel,
            config: Arc::new(config.clone()),
            declared: Arc::new(Mutex::new(HashSet::new())),
            broken: tokio::sync::watch::Sender::new(None),
        })
    }

    /// Resolves once the channel has closed under a publish, with the error that closed it:
    /// the session must be rebuilt.
    pub async fn broken(&self) -> String {
        let mut broken = self.broken.subscribe();
        let error = match broken.wait_for(Option::is_some).await {
            Ok(error) => error.clone(),
            Err(_) => None,
        };
        match error {
            Some(error) => error,
            // The sender lives as long as `self`: never.
            None => std::future::pending().await,
        }
    }

    /// Whether the channel is still open: a publish that failed on a closed channel may
    /// have reached its queue or not (its confirm was lost with the channel).
    pub fn is_open(&self) -> bool {
        self.channel.status().connected()
    }

    fn forget(&self, name: &str) {
        self.declared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// A publish failed: when the channel is gone with it, say the topology is broken.
    fn failed(&self, error: &anyhow::Error) {
        if !self.channel.status().connected() {
            self.broken.send_replace(Some(format!("{error:#}")));
        }
    }

    fn declared(&self, name: &str) -> bool {
        self.declared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    fn mark(&self, name: &str) {
        self.declared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string());
    }

    /// Declare a durable queue (once per connection).
    pub async fn queue(&self, name: &str) -> anyhow::Result<()> {
        if self.declared(name) {
            return Ok(());
        }
        self.channel
            .queue_declare(
                ShortString::from(name),
                QueueDeclareOptions::durable(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring queue `{name}`"))?;
        self.mark(name);
        Ok(())
    }

    /// Declare the delay bucket of `bucket_ms` (once per connection); its exchange's name.
    async fn bucket(&self, bucket_ms: u64) -> anyhow::Result<String> {
        let name = self.config.bucket_name(bucket_ms);
        if self.declared(&name) {
            return Ok(name);
        }
        self.channel
            .exchange_declare(
                ShortString::from(name.as_str()),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring delay exchange `{name}`"))?;
        let mut args = FieldTable::default();
        args.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(i64::try_from(bucket_ms).unwrap_or(i64::MAX)),
        );
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(LongString::from("")),
        );
        let text = |s: &str| AMQPValue::LongString(LongString::from(s));
        match self.config.delay_queues {
            DelayQueues::Quorum => {
                args.insert("x-queue-type".into(), text("quorum"));
                args.insert("x-dead-letter-strategy".into(), text("at-least-once"));
                // The strategy's condition: without it the broker falls back to at most once.
                args.insert("x-overflow".into(), text("reject-publish"));
            }
            DelayQueues::Classic => {
                let due = self.config.due_queue();
                self.queue(&due).await?;
                args.insert("x-dead-letter-routing-key".into(), text(&due));
            }
        }
        self.channel
            .queue_declare(
                ShortString::from(name.as_str()),
                QueueDeclareOptions::durable(),
                args,
            )
            .await
            .with_context(|| format!("declaring delay queue `{name}`"))?;
        self.channel
            .queue_bind(
                ShortString::from(name.as_str()),
                ShortString::from(name.as_str()),
                ShortString::from(""),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("binding delay queue `{name}`"))?;
        self.mark(&name);
        Ok(name)
    }

    /// Publish a copy bound for `queue` after `bucket_ms` (0: at once), confirmed.
    pub async fn later(
        &self,
        queue: &str,
        bucket_ms: u64,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let (exchange, properties) = if bucket_ms == 0 {
            (String::new(), properties)
        } else {
            let exchange = self.bucket(bucket_ms).await?;
            (exchange, super::due::bound_for(properties, queue))
        };
        let published = self.publish(&exchange, queue, payload, properties).await;
        if published.is_err() && !exchange.is_empty() {
            // Declared again on the next use: an operator may have deleted it.
            self.forget(&exchange);
        }
        published
    }

    /// Publish to `queue` through the default exchange, confirmed.
    pub async fn to_queue(
        &self,
        queue: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        self.queue(queue).await?;
        let published = self.publish("", queue, payload, properties).await;
        if published.is_err() {
            self.forget(queue);
        }
        published
    }

    /// Publish to `queue` through the default exchange, confirmed, without declaring it:
    /// a queue that does not exist makes the message unroutable, an error.
    pub async fn to_existing_queue(
        &self,
        queue: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        self.publish("", queue, payload, properties).await
    }

    /// Publish and wait for the broker's confirm; an unroutable message (returned) or a
    /// nack is an error.
    async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let published = self
            .publish_confirmed(exchange, routing_key, payload, properties)
            .await;
        if let Err(e) = &published {
            self.failed(e);
        }
        published
    }

    async fn publish_confirmed(
        &self,
        exchange: &str,
        routing_key: &str,
        payload: &[u8],
        properties: BasicProperties,
    ) -> anyhow::Result<()> {
        let confirm = self
            .channel
            .basic_publish(
                ShortString::from(exchange),
                ShortString::from(routing_key),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                payload,
                properties,
            )
            .await
            .with_context(|| format!("publishing to `{routing_key}`"))?
            .await
            .with_context(|| format!("waiting for the confirm of `{routing_key}`"))?;
        match confirm {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(_)) => {
                anyhow::bail!("the broker could not route a message to `{routing_key}`")
            }
            Confirmation::Nack(_) => {
                anyhow::bail!("the broker refused a message to `{routing_key}`")
            }
            Confirmation::NotRequested => anyhow::bail!("publisher confirms are off"),
        }
    }

    /// An audit record (JSON) to the audit queue, confirmed.
    pub async fn audit(&self, record: &AuditRecord) -> anyhow::Result<()> {
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2);
        let queue = self.config.audit_queue.clone();
        self.to_queue(&queue, &serde_json::to_vec(record)?, properties)
            .await
    }

    /// Messages ready in `queue`, as the broker counts them (a passive declare).
    pub async fn depth(&self, queue: &str) -> anyhow::Result<u64> {
        let q = self
            .channel
            .queue_declare(
                ShortString::from(queue),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("queue `{queue}`"))?;
        Ok(u64::from(q.message_count()))
    }
}
