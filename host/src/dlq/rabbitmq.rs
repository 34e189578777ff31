//! The DLQ tools on RabbitMQ. A queue has no random access, so the DLQ queues are
//! *browsed*: every message is fetched unacknowledged on a channel of its own, the ones an
//! operation applies to are acted on and acked, and closing the channel puts the rest back
//! in order. A dead letter's `seq` is its position in that browse; replay and discard find
//! their entries again by message id and failure time.

use std::collections::BTreeSet;

use lapin::options::BasicGetOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::backend::{
    CanaryProgress, DeadLetters, DlqError, REPLAY_HEADER, back_again, entry_from_headers, select,
    stats_of,
};
use crate::sources::SourceKind;
use crate::sources::rabbitmq::topology::Topology;
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use crate::{GatewayConfig, RabbitmqConfig};

const NAME: &str = "rabbitmq";

fn err(e: impl std::fmt::Display) -> DlqError {
    DlqError::broker(NAME, e)
}

/// The DLQ queues of a gateway's RabbitMQ routes.
pub struct RabbitDeadLetters {
    conn: Connection,
    topology: Topology,
    config: RabbitmqConfig,
    dlqs: Vec<String>,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for RabbitDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitDeadLetters")
            .field("dlqs", &self.dlqs)
            .finish_non_exhaustive()
    }
}

/// One browsed message.
struct Browsed {
    delivery: lapin::message::Delivery,
    entry: DlqEntry,
}

impl RabbitDeadLetters {
    /// Connect as `config` says; the DLQs are those of its RabbitMQ routes.
    pub fn connect(config: &GatewayConfig) -> Result<RabbitDeadLetters, DlqError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(err)?;
        let mut dlqs: Vec<String> = config
            .routes
            .iter()
            .filter(|r| r.source == SourceKind::Rabbitmq)
            .map(|r| {
                config
                    .gateway
                    .dlq_naming
                    .dlq_for(&r.topic, &config.gateway.global_dlq)
            })
            .collect();
        dlqs.dedup();
        let (conn, topology) = runtime.block_on(async {
            let conn = Connection::connect(&config.rabbitmq.url, ConnectionProperties::default())
                .await
                .map_err(err)?;
            let channel = conn.create_channel().await.map_err(err)?;
            let topology = Topology::new(channel, &config.rabbitmq)
                .await
                .map_err(|e| err(format!("{e:#}")))?;
            for dlq in &dlqs {
                topology
                    .queue(dlq)
                    .await
                    .map_err(|e| err(format!("{e:#}")))?;
            }
            Ok::<_, DlqError>((conn, topology))
        })?;
        Ok(RabbitDeadLetters {
            conn,
            topology,
            config: config.rabbitmq.clone(),
            dlqs,
            runtime,
        })
    }

    /// Fetch every message of `queue` unacknowledged on `channel`.
    async fn fetch(
        channel: &Channel,
        queue: &str,
    ) -> Result<Vec<lapin::message::Delivery>, DlqError> {
        let mut out = Vec::new();
        while let Some(m) = channel
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: false })
            .await
            .map_err(err)?
        {
            out.push(m.delivery);
        }
        Ok(out)
    }

    /// Browse every DLQ: (channel holding them, messages with their entries).
    async fn browse(&self) -> Result<(Channel, Vec<Browsed>), DlqError> {
        let channel = self.conn.create_channel().await.map_err(err)?;
        let mut out = Vec::new();
        for dlq in &self.dlqs {
            for delivery in Self::fetch(&channel, dlq).await? {
                let seq = i64::try_from(out.len() + 1).unwrap_or(i64::MAX);
                let entry = entry_of(dlq, seq, &delivery)?;
                out.push(Browsed { delivery, entry });
            }
        }
        Ok((channel, out))
    }

    /// Put back whatever is still unacknowledged on `channel`.
    async fn release(channel: Channel) {
        let _ = channel.close(200, ShortString::from("browsed")).await;
    }

    fn all(&self) -> Result<Vec<DlqEntry>, DlqError> {
        self.runtime.block_on(async {
            let (channel, browsed) = self.browse().await?;
            Self::release(channel).await;
            Ok(browsed.into_iter().map(|b| b.entry).collect())
        })
    }

    /// Browse, and for the messages `entries` name run `act`, then ack them.
    fn each<F>(&self, entries: &[DlqEntry], mut act: F) -> Result<Vec<String>, DlqError>
    where
        F: AsyncFnMut(&Browsed) -> Result<(), DlqError>,
    {
        let keys: BTreeSet<(String, u64)> = entries
            .iter()
            .map(|e| (e.message_id.clone(), e.created_at_ms))
            .collect();
        self.runtime.block_on(async {
            let (channel, browsed) = self.browse().await?;
            let mut done = Vec::new();
            let mut result = Ok(());
            for b in &browsed {
                let key = (b.entry.message_id.clone(), b.entry.created_at_ms);
                if !keys.contains(&key) {
                    continue;
                }
                if let Err(e) = act(b).await {
                    result = Err(e);
                    break;
                }
                if let Err(e) = b.delivery.ack(Default::default()).await {
                    result = Err(err(e));
                    break;
                }
                done.push(b.entry.message_id.clone());
            }
            Self::release(channel).await;
            result.map(|()| done)
        })
    }

    async fn audit(&self, event: &str, e: &DlqEntry, detail: &str) -> Result<(), DlqError> {
        let record = serde_json::json!({
            "event": event,
            "atMs": crate::pipeline::now_ms(),
            "messageId": e.message_id,
            "topic": e.topic,
            "kind": e.kind,
            "detail": detail,
        });
        self.topology
            .audit(&record)
            .await
            .map_err(|x| err(format!("{x:#}")))
    }
}

fn entry_of(dlq: &str, seq: i64, d: &lapin::message::Delivery) -> Result<DlqEntry, DlqError> {
    let headers = d.properties.headers().clone().unwrap_or_default();
    let header = |name: &str| -> String {
        match headers.inner().get(name) {
            Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            Some(AMQPValue::ShortString(s)) => s.as_str().to_string(),
            _ => String::new(),
        }
    };
    entry_from_headers(seq, dlq.to_string(), header, &d.data).map_err(err)
}

impl DeadLetters for RabbitDeadLetters {
    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError> {
        Ok(select(self.all()?, filter, now_ms))
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        Ok(stats_of(&self.all()?))
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
    ) -> Result<Vec<String>, DlqError> {
        self.each(entries, async |b: &Browsed| {
            let e = &b.entry;
            let original = &e.envelope["original"];
            let mut headers = FieldTable::default();
            if let Some(map) = original["headers"].as_object() {
                for (k, v) in map {
                    if let Some(v) = v.as_str() {
                        headers.insert(
                            ShortString::from(k.as_str()),
                            AMQPValue::LongString(LongString::from(v)),
                        );
                    }
                }
            }
            headers.insert(
                ShortString::from(REPLAY_HEADER),
                AMQPValue::LongString(LongString::from(token)),
            );
            let mut properties = BasicProperties::default()
                .with_message_id(ShortString::from(e.message_id.as_str()))
                .with_headers(headers)
                .with_delivery_mode(2);
            if let Some(ct) = original["contentType"].as_str() {
                properties = properties.with_content_type(ShortString::from(ct));
            }
            let payload = crate::envelope::payload_bytes(original);
            self.topology
                .to_queue(&e.topic, &payload, properties)
                .await
                .map_err(|x| err(format!("{x:#}")))?;
            self.audit("replayed", e, note).await
        })
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        let done = self.each(entries, async |b: &Browsed| {
            self.audit("dlq-discarded", &b.entry, reason).await
        })?;
        Ok(done.len() as u64)
    }

    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError> {
        let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let delivered = self.runtime.block_on(async {
            let channel = self.conn.create_channel().await.map_err(err)?;
            let records = Self::fetch(&channel, &self.config.audit_queue).await;
            Self::release(channel).await;
            let mut delivered = BTreeSet::new();
            for m in records? {
                let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap_or_default();
                if r["event"] == "replay-delivered"
                    && r["detail"] == token
                    && let Some(id) = r["messageId"].as_str().filter(|id| wanted.contains(id))
                {
                    delivered.insert(id.to_string());
                }
            }
            Ok::<_, DlqError>(delivered.len())
        })?;
        let failed = back_again(&self.all()?, ids, token);
        Ok(CanaryProgress { delivered, failed })
    }
}
