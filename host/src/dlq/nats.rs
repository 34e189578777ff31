//! The DLQ tools on NATS JetStream: the DLQ stream is read by sequence (a dead letter's
//! `seq` is its stream sequence); a replay publishes the original back to its subject (with
//! a PubAck) before it deletes the dead letter; a discard deletes it; both are audited.

use std::collections::{BTreeMap, BTreeSet};

use async_nats::HeaderMap;
use async_nats::jetstream::message::StreamMessage;

use super::backend::{
    CanaryProgress, DeadLetters, DlqError, REPLAY_HEADER, back_again, entry_from_headers, select,
    stats_of,
};
use crate::sources::Delivery;
use crate::sources::nats::{Broker, connect};
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use crate::{GatewayConfig, NatsConfig};

const NAME: &str = "nats";

/// The DLQ stream of a gateway's `[nats]` section.
pub struct NatsDeadLetters {
    broker: Broker,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for NatsDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsDeadLetters").finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> DlqError {
    DlqError::broker(NAME, e)
}

impl NatsDeadLetters {
    /// Connect as `config` says (creating the streams when missing, as the gateway would).
    pub fn connect(config: &GatewayConfig) -> Result<NatsDeadLetters, DlqError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(err)?;
        let subjects: Vec<String> = config
            .routes
            .iter()
            .filter(|r| r.source == crate::sources::SourceKind::Nats)
            .map(|r| r.topic.clone())
            .collect();
        let broker = runtime
            .block_on(connect(&config.nats, &config.gateway, &subjects, None))
            .map_err(|e| err(format!("{e:#}")))?;
        Ok(NatsDeadLetters { broker, runtime })
    }

    fn nats(&self) -> &NatsConfig {
        self.broker.config()
    }

    /// Every message of `stream` from `from` on.
    async fn read(&self, stream: &str, from: u64) -> Result<Vec<StreamMessage>, DlqError> {
        let js = self.broker.jetstream();
        let mut stream = js.get_stream(stream).await.map_err(err)?;
        let state = stream.info().await.map_err(err)?.state.clone();
        let mut out = Vec::new();
        if state.messages == 0 {
            return Ok(out);
        }
        for seq in state.first_sequence.max(from)..=state.last_sequence {
            // Deleted sequences (replayed, discarded) are gaps.
            if let Ok(m) = stream.get_raw_message(seq).await {
                out.push(m);
            }
        }
        Ok(out)
    }

    fn entry(&self, m: &StreamMessage) -> Result<DlqEntry, DlqError> {
        let prefix = format!("{}.", self.nats().dlq_subject_prefix);
        let dlq = m.subject.strip_prefix(&prefix).unwrap_or(&m.subject);
        let header = |name: &str| {
            m.headers
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_default()
        };
        let seq = i64::try_from(m.sequence).unwrap_or(i64::MAX);
        entry_from_headers(seq, dlq.to_string(), header, &m.payload).map_err(err)
    }

    fn all(&self) -> Result<Vec<DlqEntry>, DlqError> {
        let messages = self
            .runtime
            .block_on(self.read(&self.nats().dlq_stream, 0))?;
        messages.iter().map(|m| self.entry(m)).collect()
    }

    async fn replay_one(&self, e: &DlqEntry, note: &str, token: &str) -> Result<bool, DlqError> {
        let js = self.broker.jetstream();
        let stream = js.get_stream(&self.nats().dlq_stream).await.map_err(err)?;
        let seq = u64::try_from(e.seq).unwrap_or(0);
        if stream.get_raw_message(seq).await.is_err() {
            return Ok(false);
        }
        let original = &e.envelope["original"];
        let mut headers = HeaderMap::new();
        if let Some(map) = original["headers"].as_object() {
            for (k, v) in map {
                if let Some(v) = v.as_str() {
                    headers.insert(k.as_str(), v);
                }
            }
        }
        headers.insert("verdict-message-id", e.message_id.as_str());
        headers.insert(REPLAY_HEADER, token);
        if let Some(ct) = original["contentType"].as_str() {
            headers.insert("content-type", ct);
        }
        let payload = crate::envelope::payload_bytes(original);
        js.publish_with_headers(e.topic.clone(), headers, payload.into())
            .await
            .map_err(err)?
            .await
            .map_err(|x| err(format!("replaying {} to {}: {x}", e.message_id, e.topic)))?;
        stream.delete_message(seq).await.map_err(err)?;
        let audited = Delivery {
            id: e.message_id.clone(),
            topic: e.topic.clone(),
            ..Delivery::default()
        };
        self.broker
            .audit("replayed", &audited, &e.kind, note)
            .await
            .map_err(|x| err(format!("{x:#}")))?;
        Ok(true)
    }
}

impl DeadLetters for NatsDeadLetters {
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
        let mut ids = Vec::new();
        for e in entries {
            if self.runtime.block_on(self.replay_one(e, note, token))? {
                ids.push(e.message_id.clone());
            }
        }
        Ok(ids)
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        self.runtime.block_on(async {
            let js = self.broker.jetstream();
            let stream = js.get_stream(&self.nats().dlq_stream).await.map_err(err)?;
            let mut n = 0;
            for e in entries {
                let seq = u64::try_from(e.seq).unwrap_or(0);
                if stream.delete_message(seq).await.unwrap_or(false) {
                    let audited = Delivery {
                        id: e.message_id.clone(),
                        topic: e.topic.clone(),
                        ..Delivery::default()
                    };
                    self.broker
                        .audit("dlq-discarded", &audited, &e.kind, reason)
                        .await
                        .map_err(|x| err(format!("{x:#}")))?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError> {
        let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let audit = self
            .runtime
            .block_on(self.read(&self.nats().audit_stream, 0))?;
        let delivered_subject = format!("{}.replay-delivered", self.nats().audit_subject_prefix);
        let mut delivered = BTreeMap::new();
        for m in audit
            .iter()
            .filter(|m| m.subject.as_str() == delivered_subject)
        {
            let record: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            if record["detail"] == token
                && let Some(id) = record["messageId"]
                    .as_str()
                    .filter(|id| wanted.contains(id))
            {
                delivered.insert(id.to_string(), ());
            }
        }
        let failed = back_again(&self.all()?, ids, token);
        Ok(CanaryProgress {
            delivered: delivered.len(),
            failed,
        })
    }
}
