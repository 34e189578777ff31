//! The DLQ tools on NATS JetStream. Reads are read-only: they never create a stream (a DLQ
//! stream that does not exist yet holds no dead letters) and scan the stream in order
//! through one ephemeral ordered consumer, a bounded stretch per page, instead of asking for
//! each sequence number. A dead letter's `seq` is its stream sequence, which is also the
//! cursor. A replay publishes the original back to its subject (with a PubAck) before it
//! deletes the dead letter; a discard deletes it; both are audited.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::{self, Message};
use futures_util::StreamExt as _;

use crate::dlq::Rt;
use crate::dlq::{
    CanaryProgress, DeadLetters, DlqError, DlqPage, PAGE_SIZE, StatsTally, entry_from_headers,
    matches, position_after,
};
use crate::envelope::Original;
use crate::model::AuditRecord;
use crate::model::REPLAY_HEADER;
use crate::model::letter_headers;
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use crate::telemetry::ReplayTrace;
use verdict_registry::{GatewayConfig, NatsConfig};

use super::NAME;

/// Dead letters one page looks at, at most, whatever the filter: a filter that matches
/// little answers with a short page and a cursor rather than scanning the whole stream.
const SCAN_PER_PAGE: usize = 10_000;

/// How long a scan waits for the next message before it takes the stream as read (the last
/// sequence can be a deleted one, which never arrives).
const SCAN_IDLE: Duration = Duration::from_secs(2);

/// The DLQ stream of a gateway's `[nats]` section.
pub struct NatsDeadLetters {
    js: jetstream::Context,
    config: NatsConfig,
    gateway: String,
    runtime: Rt,
}

impl std::fmt::Debug for NatsDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsDeadLetters")
            .field("dlq_stream", &self.config.dlq_stream)
            .finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> DlqError {
    DlqError::broker(NAME, e)
}

/// How a scan ended.
#[derive(Debug, Default)]
struct Scanned {
    /// The last stream sequence looked at (0: none).
    last: u64,
    /// Messages remain after it.
    more: bool,
}

impl NatsDeadLetters {
    /// Connect as `config` says, on a runtime of its own (for the command line).
    pub fn connect(config: &GatewayConfig) -> Result<NatsDeadLetters, DlqError> {
        Self::connect_on(Rt::own().map_err(err)?, config)
    }

    /// Connect as `config` says, running on `handle` (a gateway's runtime); call it, and
    /// the operations, from a thread that may block.
    pub fn connect_with(
        handle: tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<NatsDeadLetters, DlqError> {
        Self::connect_on(Rt::Shared(handle), config)
    }

    fn connect_on(runtime: Rt, config: &GatewayConfig) -> Result<NatsDeadLetters, DlqError> {
        let nats = config.nats.clone();
        // The JetStream context spawns a task: build it on the runtime.
        let js = runtime
            .block_on(async {
                let name = format!("verdict {} dlq tools", config.gateway.instance);
                let options = super::access::options(&nats, name).await?;
                super::access::connect_with(&nats, options)
                    .await
                    .map(jetstream::new)
            })
            .map_err(|e| err(e.to_string()))?;
        Ok(NatsDeadLetters {
            js,
            config: nats,
            gateway: config.gateway.instance.clone(),
            runtime,
        })
    }

    /// The stream `name`, or none when it does not exist (yet).
    async fn stream(&self, name: &str) -> Result<Option<jetstream::stream::Stream>, DlqError> {
        match self.js.get_stream(name).await {
            Ok(stream) => Ok(Some(stream)),
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(None)
                }
                _ => Err(err(format!("stream `{name}`: {e}"))),
            },
        }
    }

    /// Hand the messages of `stream` (on `subject`, empty for all) from sequence `from` on to
    /// `visit`, in order, until it breaks, `max` were seen or the stream has no more.
    async fn scan(
        &self,
        stream: &str,
        subject: &str,
        from: u64,
        max: usize,
        mut visit: impl FnMut(&Message, u64) -> Result<ControlFlow<()>, DlqError>,
    ) -> Result<Scanned, DlqError> {
        let mut scanned = Scanned::default();
        let Some(mut stream) = self.stream(stream).await? else {
            return Ok(scanned);
        };
        let state = stream.info().await.map_err(err)?.state.clone();
        let from = from.max(state.first_sequence).max(1);
        if state.messages == 0 || from > state.last_sequence || max == 0 {
            return Ok(scanned);
        }
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from,
                },
                filter_subject: subject.to_string(),
                ..Default::default()
            })
            .await
            .map_err(err)?;
        let mut messages = consumer.messages().await.map_err(err)?;
        let mut seen = 0;
        while let Ok(next) = tokio::time::timeout(SCAN_IDLE, messages.next()).await {
            let Some(message) = next else { break };
            let message = message.map_err(err)?;
            let info = message.info().map_err(err)?;
            let (seq, pending) = (info.stream_sequence, info.pending);
            scanned.last = seq;
            scanned.more = pending > 0;
            seen += 1;
            if visit(&message, seq)?.is_break() || pending == 0 || seen >= max {
                break;
            }
        }
        Ok(scanned)
    }

    fn entry(&self, m: &Message, seq: u64) -> Result<DlqEntry, DlqError> {
        let prefix = format!("{}.", self.config.dlq_subject_prefix);
        let dlq = m.subject.strip_prefix(&prefix).unwrap_or(&m.subject);
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        entry_from_headers(seq, dlq.to_string(), header_of(m), &m.payload).map_err(err)
    }

    async fn audit(&self, event: &str, e: &DlqEntry, detail: &str) -> Result<(), DlqError> {
        let record = AuditRecord::new(event, &e.message_id, &e.topic, crate::clock::now_ms())
            .kind(&e.kind)
            .detail(detail)
            .gateway(&self.gateway);
        let subject = format!("{}.{event}", self.config.audit_subject_prefix);
        let body = serde_json::to_vec(&record).map_err(err)?;
        self.js
            .publish(subject, body.into())
            .await
            .map_err(err)?
            .await
            .map_err(|x| err(format!("the audit stream did not confirm a record: {x}")))?;
        Ok(())
    }

    async fn replay_one(
        &self,
        stream: &jetstream::stream::Stream,
        e: &DlqEntry,
        note: &str,
        token: &str,
        trace: &ReplayTrace,
    ) -> Result<bool, DlqError> {
        let seq = u64::try_from(e.seq).unwrap_or(0);
        if stream.get_raw_message(seq).await.is_err() {
            return Ok(false);
        }
        let original = &e.envelope.original;
        let traceparent = trace.replay(&e.topic, &e.envelope);
        let headers = replay_headers(original, &e.message_id, token, traceparent.as_deref());
        let payload = original.payload_bytes();
        self.js
            .publish_with_headers(e.topic.clone(), headers, payload.into())
            .await
            .map_err(err)?
            .await
            .map_err(|x| err(format!("replaying {} to {}: {x}", e.message_id, e.topic)))?;
        stream.delete_message(seq).await.map_err(err)?;
        self.audit("replayed", e, note).await?;
        Ok(true)
    }

    /// The DLQ stream, which a change needs to exist.
    async fn dlq_stream(&self) -> Result<jetstream::stream::Stream, DlqError> {
        self.stream(&self.config.dlq_stream)
            .await?
            .ok_or_else(|| err(format!("no stream `{}`", self.config.dlq_stream)))
    }
}

/// A header of `m` as text (empty when absent).
fn header_of(m: &Message) -> impl Fn(&str) -> String + '_ {
    |name: &str| {
        m.headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.to_string())
            .unwrap_or_default()
    }
}

impl DeadLetters for NatsDeadLetters {
    fn page(&self, filter: &DlqFilter, now_ms: u64) -> Result<DlqPage, DlqError> {
        let after = position_after(filter, NAME)?;
        let limit = filter.limit.unwrap_or(PAGE_SIZE);
        let mut entries = Vec::new();
        if limit == 0 {
            return Ok(DlqPage::default());
        }
        let scanned = self.runtime.block_on(self.scan(
            &self.config.dlq_stream,
            "",
            after.saturating_add(1),
            SCAN_PER_PAGE,
            |m, seq| {
                let entry = self.entry(m, seq)?;
                if matches(filter, &entry, now_ms) {
                    entries.push(entry);
                }
                Ok(if entries.len() >= limit {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            },
        ))?;
        // The next page starts after the last message this one looked at, whether it
        // filled up or ran out of its scanning budget.
        Ok(DlqPage {
            entries,
            next: scanned.more.then(|| scanned.last.to_string()),
        })
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        use letter_headers::{AT_MS, TOPIC};
        let prefix = format!("{}.", self.config.dlq_subject_prefix);
        let mut tally = StatsTally::default();
        self.runtime.block_on(
            self.scan(&self.config.dlq_stream, "", 1, usize::MAX, |m, _| {
                let header = header_of(m);
                let dlq = m.subject.strip_prefix(&prefix).unwrap_or(&m.subject);
                tally.add(dlq, &header(TOPIC), 1, header(AT_MS).parse().unwrap_or(0));
                Ok(ControlFlow::Continue(()))
            }),
        )?;
        Ok(tally.finish())
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
        trace: &ReplayTrace,
    ) -> Result<Vec<String>, DlqError> {
        self.runtime.block_on(async {
            let stream = self.dlq_stream().await?;
            let mut ids = Vec::new();
            for e in entries {
                if self.replay_one(&stream, e, note, token, trace).await? {
                    ids.push(e.message_id.clone());
                }
            }
            Ok(ids)
        })
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        self.runtime.block_on(async {
            let stream = self.dlq_stream().await?;
            let mut n = 0;
            for e in entries {
                let seq = u64::try_from(e.seq).unwrap_or(0);
                if stream.delete_message(seq).await.unwrap_or(false) {
                    self.audit("dlq-discarded", e, reason).await?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError> {
        let wanted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let mut delivered = BTreeSet::new();
        let subject = format!("{}.replay-delivered", self.config.audit_subject_prefix);
        self.runtime.block_on(self.scan(
            &self.config.audit_stream,
            &subject,
            1,
            usize::MAX,
            |m, _| {
                // Anything on the subject that is not a record is no arrival.
                if let Ok(r) = serde_json::from_slice::<AuditRecord>(&m.payload)
                    && r.is_replay_delivered(token)
                    && wanted.contains(r.message_id.as_str())
                {
                    delivered.insert(r.message_id);
                }
                Ok(ControlFlow::Continue(()))
            },
        ))?;
        // Failed: one of them is dead-lettered again (its envelope carries the token).
        let mut failed = false;
        self.runtime.block_on(self.scan(
            &self.config.dlq_stream,
            "",
            1,
            usize::MAX,
            |m, seq| {
                let header = header_of(m);
                if wanted.contains(header(letter_headers::MESSAGE_ID).as_str()) {
                    let e = self.entry(m, seq)?;
                    failed |= e
                        .envelope
                        .original
                        .headers
                        .get(REPLAY_HEADER)
                        .map(String::as_str)
                        == Some(token);
                }
                Ok(if failed {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            },
        ))?;
        Ok(CanaryProgress {
            delivered: delivered.len(),
            failed,
        })
    }
}

/// The headers a replay of the dead letter whose envelope's `original` is `original` carries:
/// the message's own, its id (`message_id`) and the replay's `token`. A dead letter is
/// whatever the DLQ stream holds - anyone who may publish there may have written it - so a
/// header NATS cannot carry is left out and the id and content type are made one line,
/// rather than panicking in the client (its `insert` asserts).
pub(crate) fn replay_headers(
    original: &Original,
    message_id: &str,
    token: &str,
    traceparent: Option<&str>,
) -> HeaderMap {
    use std::str::FromStr;
    let mut headers = HeaderMap::new();
    let own = match traceparent {
        Some(traceparent) => crate::telemetry::with_traceparent(&original.headers, traceparent),
        None => original.headers.clone(),
    };
    for (k, v) in &own {
        let name = async_nats::HeaderName::from_str(k);
        let value = async_nats::HeaderValue::from_str(v);
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.insert(name, value);
        }
    }
    let line = |text: &str| verdict_runtime::text::one_line(text, 1_024);
    headers.insert("verdict-message-id", line(message_id).as_str());
    headers.insert(REPLAY_HEADER, line(token).as_str());
    if let Some(ct) = &original.content_type {
        headers.insert("content-type", line(ct).as_str());
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_dead_letter_replays_without_a_panic() {
        // Headers NATS cannot carry (a name with a space or a colon, a value with CR/LF),
        // as a dead letter published into the DLQ stream by someone else may hold: before,
        // `HeaderMap::insert` asserted and the replay panicked.
        let original: Original = serde_json::from_value(serde_json::json!({
            "topic": "t", "id": "m-1",
            "headers": {"bad name": "v", "a:b": "v", "ok": "a\r\nb", "tenant": "eu"},
            "contentType": "text/plain\r\nx: 1",
        }))
        .unwrap();
        let headers = replay_headers(&original, "m-1\r\n", "tok", None);
        assert_eq!(headers.get("tenant").map(|v| v.as_str()), Some("eu"));
        assert!(headers.get("ok").is_none());
        // tenant, the id, the token, the content type: nothing else.
        assert_eq!(headers.len(), 4);
        assert_eq!(
            headers.get("verdict-message-id").map(|v| v.as_str()),
            Some("m-1  ")
        );
        assert_eq!(
            headers.get("content-type").map(|v| v.as_str()),
            Some("text/plain  x: 1")
        );
        assert_eq!(headers.get(REPLAY_HEADER).map(|v| v.as_str()), Some("tok"));
    }
}
