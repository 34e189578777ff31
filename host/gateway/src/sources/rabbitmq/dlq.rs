//! The DLQ tools on RabbitMQ. A queue has no random access, so the DLQ queues are
//! *browsed*: messages are fetched unacknowledged on a channel of its own, the ones an
//! operation applies to are acted on and acked, and closing the channel puts the rest back
//! in order. A dead letter's `seq` is its position in that browse (across the DLQs in the
//! config's route order), which is also a page's cursor; positions move up when dead letters
//! before them leave.
//!
//! Reads never declare a queue: a DLQ that does not exist holds no dead letters. A page holds
//! the messages before its cursor and at most [`SCAN_PER_PAGE`] more, for as long as the
//! page takes to read, and never more than [`BROWSE_DEPTH_MAX`]; statistics hold one message
//! per DLQ. Replay and discard browse until they have found what they act on.

use std::collections::BTreeSet;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::topology::Topology;
use crate::dlq::Rt;
use crate::dlq::{
    CanaryProgress, DeadLetters, DlqError, DlqPage, PAGE_SIZE, StatsTally, back_again,
    entry_from_headers, matches, position_after,
};
use crate::envelope::Original;
use crate::model::AuditRecord;
use crate::model::REPLAY_HEADER;
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use crate::telemetry::ReplayTrace;
use verdict_registry::SourceKind;
use verdict_registry::{GatewayConfig, RabbitmqConfig};

use super::NAME;

/// Dead letters one page looks at past its cursor, at most, whatever the filter.
pub const SCAN_PER_PAGE: usize = 10_000;

/// How deep into the DLQs a page may start: a deeper page would hold every message before
/// it unacknowledged while it reads. Beyond it, narrow the listing (`dlq`, `topic`), or work
/// from the head (replay or discard what is there first).
pub const BROWSE_DEPTH_MAX: u64 = 50_000;

fn err(e: impl std::fmt::Display) -> DlqError {
    DlqError::broker(NAME, e)
}

/// The DLQ queues of a gateway's RabbitMQ routes.
pub struct RabbitDeadLetters {
    conn: Connection,
    topology: Topology,
    config: RabbitmqConfig,
    dlqs: Vec<String>,
    runtime: Rt,
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
    /// Connect as `config` says, on a runtime of its own (for the command line); the DLQs
    /// are those of its RabbitMQ routes.
    pub fn connect(config: &GatewayConfig) -> Result<RabbitDeadLetters, DlqError> {
        Self::connect_on(Rt::own().map_err(err)?, config)
    }

    /// Connect as `config` says, running on `handle` (a gateway's runtime); call it, and
    /// the operations, from a thread that may block.
    pub fn connect_with(
        handle: tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<RabbitDeadLetters, DlqError> {
        Self::connect_on(Rt::Shared(handle), config)
    }

    fn connect_on(runtime: Rt, config: &GatewayConfig) -> Result<RabbitDeadLetters, DlqError> {
        let mut dlqs: Vec<String> = Vec::new();
        for route in config
            .routes
            .iter()
            .filter(|r| r.source == SourceKind::Rabbitmq)
        {
            let dlq = config
                .gateway
                .dlq_naming
                .dlq_for(&route.topic, &config.gateway.global_dlq);
            if !dlqs.contains(&dlq) {
                dlqs.push(dlq);
            }
        }
        let name = format!("verdict {} dlq tools", config.gateway.instance);
        let (conn, topology) = runtime.block_on(async {
            let properties =
                ConnectionProperties::default().with_connection_name(LongString::from(name));
            let conn = super::access::connect(&config.rabbitmq, properties)
                .await
                .map_err(|e| err(e.to_string()))?;
            let channel = conn.create_channel().await.map_err(err)?;
            let topology = Topology::new(channel, &config.rabbitmq)
                .await
                .map_err(|e| err(format!("{e:#}")))?;
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

    /// Whether the connection still stands (a broker restart closes it for good).
    pub fn is_connected(&self) -> bool {
        self.conn.status().connected()
    }

    /// The messages waiting in `queue`, or none when it does not exist: a passive declare,
    /// on a channel of its own because a refusal closes the channel.
    async fn depth(&self, queue: &str) -> Result<Option<u64>, DlqError> {
        let channel = self.conn.create_channel().await.map_err(err)?;
        let declared = channel
            .queue_declare(
                ShortString::from(queue),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(q) => {
                let _ = channel.close(200, ShortString::from("checked")).await;
                Ok(Some(u64::from(q.message_count())))
            }
            Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if p.get_id() == 404) => {
                Ok(None)
            }
            Err(e) => Err(err(format!("queue `{queue}`: {e}"))),
        }
    }

    /// The DLQs that exist, in route order.
    async fn existing(&self) -> Result<Vec<(String, u64)>, DlqError> {
        let mut out = Vec::new();
        for dlq in &self.dlqs {
            if let Some(depth) = self.depth(dlq).await? {
                out.push((dlq.clone(), depth));
            }
        }
        Ok(out)
    }

    /// One message of `queue`, unacknowledged on `channel`, and how many remain after it.
    async fn get(
        channel: &Channel,
        queue: &str,
    ) -> Result<Option<(lapin::message::Delivery, u64)>, DlqError> {
        let got = channel
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: false })
            .await
            .map_err(err)?;
        Ok(got.map(|m| (m.delivery, u64::from(m.message_count))))
    }

    /// Browse the DLQs on a new channel, handing each message, with its position, to
    /// `visit` until it breaks or the DLQs are read; the channel still holds them.
    async fn browse(
        &self,
        mut visit: impl AsyncFnMut(Browsed) -> Result<std::ops::ControlFlow<()>, DlqError>,
    ) -> Result<Channel, DlqError> {
        let channel = self.conn.create_channel().await.map_err(err)?;
        let mut position = 0i64;
        for (dlq, _) in self.existing().await? {
            while let Some((delivery, _)) = Self::get(&channel, &dlq).await? {
                position += 1;
                let entry = entry_of(&dlq, position, &delivery)?;
                if visit(Browsed { delivery, entry }).await?.is_break() {
                    return Ok(channel);
                }
            }
        }
        Ok(channel)
    }

    /// Put back whatever is still unacknowledged on `channel`.
    async fn release(channel: Channel) {
        let _ = channel.close(200, ShortString::from("browsed")).await;
    }

    /// Every dead letter, read in one browse (released before it returns).
    fn all(&self) -> Result<Vec<DlqEntry>, DlqError> {
        self.runtime.block_on(async {
            let mut out = Vec::new();
            let channel = self
                .browse(async |b: Browsed| {
                    out.push(b.entry);
                    Ok(std::ops::ControlFlow::Continue(()))
                })
                .await?;
            Self::release(channel).await;
            Ok(out)
        })
    }

    /// Browse, and for the messages `entries` name run `act`, then ack them; stops once all
    /// are found.
    fn each<F>(&self, entries: &[DlqEntry], mut act: F) -> Result<Vec<String>, DlqError>
    where
        F: AsyncFnMut(&Browsed) -> Result<(), DlqError>,
    {
        use std::ops::ControlFlow::{Break, Continue};
        let mut keys: BTreeSet<(String, u64)> = entries
            .iter()
            .map(|e| (e.message_id.clone(), e.created_at_ms))
            .collect();
        self.runtime.block_on(async {
            let mut done = Vec::new();
            let mut result = Ok(());
            if keys.is_empty() {
                return Ok(done);
            }
            let channel = self
                .browse(async |b: Browsed| {
                    let key = (b.entry.message_id.clone(), b.entry.created_at_ms);
                    if !keys.remove(&key) {
                        return Ok(Continue(()));
                    }
                    if let Err(e) = act(&b).await {
                        result = Err(e);
                        return Ok(Break(()));
                    }
                    if let Err(e) = b.delivery.ack(Default::default()).await {
                        result = Err(err(e));
                        return Ok(Break(()));
                    }
                    done.push(b.entry.message_id);
                    Ok(if keys.is_empty() {
                        Break(())
                    } else {
                        Continue(())
                    })
                })
                .await?;
            Self::release(channel).await;
            result.map(|()| done)
        })
    }

    async fn audit(&self, event: &str, e: &DlqEntry, detail: &str) -> Result<(), DlqError> {
        let record = AuditRecord::new(event, &e.message_id, &e.topic, crate::clock::now_ms())
            .kind(&e.kind)
            .detail(detail);
        self.topology
            .audit(&record)
            .await
            .map_err(|x| err(format!("{x:#}")))
    }
}

/// A dead letter read from the DLQ queue `dlq` at position `seq`: the letter headers its
/// source wrote and the envelope, decoded. Public so that a harness draining a DLQ reads
/// letters exactly as these tools do.
pub fn entry_of(dlq: &str, seq: i64, d: &lapin::message::Delivery) -> Result<DlqEntry, DlqError> {
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
    fn page(&self, filter: &DlqFilter, now_ms: u64) -> Result<DlqPage, DlqError> {
        use std::ops::ControlFlow::{Break, Continue};
        let after = position_after(filter, NAME)?;
        if after > BROWSE_DEPTH_MAX {
            return Err(err(format!(
                "after: a page cannot start {after} dead letters deep (at most \
                 {BROWSE_DEPTH_MAX}: every one before it would be held while it is read); \
                 narrow the listing with `dlq` or `topic`"
            )));
        }
        let limit = filter.limit.unwrap_or(PAGE_SIZE);
        if limit == 0 {
            return Ok(DlqPage::default());
        }
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let budget = i64::try_from(SCAN_PER_PAGE).unwrap_or(i64::MAX);
        self.runtime.block_on(async {
            let mut entries = Vec::new();
            let mut last = after;
            let mut total = 0u64;
            let existing = self.existing().await?;
            for (_, depth) in &existing {
                total += depth;
            }
            let channel = self
                .browse(async |b: Browsed| {
                    let position = b.entry.seq;
                    if position <= after {
                        return Ok(Continue(()));
                    }
                    last = position;
                    if matches(filter, &b.entry, now_ms) {
                        entries.push(b.entry);
                    }
                    let full = entries.len() >= limit || position - after >= budget;
                    Ok(if full { Break(()) } else { Continue(()) })
                })
                .await?;
            Self::release(channel).await;
            // The depths were read before the browse: a page that stopped short of them
            // says so with a cursor (which may lead to an empty page if letters left).
            let more = u64::try_from(last).unwrap_or(0) < total;
            Ok(DlqPage {
                entries,
                next: more.then(|| last.to_string()),
            })
        })
    }

    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError> {
        // The tools act on what they list: one browse, not one per page.
        let mut entries = self.all()?;
        let after = i64::try_from(position_after(filter, NAME)?).unwrap_or(i64::MAX);
        entries.retain(|e| e.seq > after && matches(filter, e, now_ms));
        entries.sort_by_key(|e| (e.created_at_ms, e.seq));
        if let Some(limit) = filter.limit {
            entries.truncate(limit);
        }
        Ok(entries)
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        // Depth as the broker counts it; the oldest dead letter (and the topic) from the head,
        // the only message held, for a moment.
        self.runtime.block_on(async {
            let mut tally = StatsTally::default();
            for (dlq, depth) in self.existing().await? {
                if depth == 0 {
                    continue;
                }
                let channel = self.conn.create_channel().await.map_err(err)?;
                let head = Self::get(&channel, &dlq).await;
                Self::release(channel).await;
                match head? {
                    Some((delivery, _)) => {
                        let e = entry_of(&dlq, 1, &delivery)?;
                        tally.add(&dlq, &e.topic, depth, e.created_at_ms);
                    }
                    None => continue,
                }
            }
            Ok(tally.finish())
        })
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
        trace: &ReplayTrace,
    ) -> Result<Vec<String>, DlqError> {
        self.each(entries, async |b: &Browsed| {
            let e = &b.entry;
            let original = &e.envelope.original;
            let traceparent = trace.replay(&e.topic, &e.envelope);
            let properties =
                replay_properties(original, &e.message_id, token, traceparent.as_deref());
            let payload = original.payload_bytes();
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
            let Some(_) = self.depth(&self.config.audit_queue).await? else {
                return Ok(0);
            };
            let channel = self.conn.create_channel().await.map_err(err)?;
            let mut delivered = BTreeSet::new();
            let mut result = Ok(());
            loop {
                match Self::get(&channel, &self.config.audit_queue).await {
                    Ok(Some((m, _))) => {
                        // Anything on the audit queue that is not a record is no arrival.
                        if let Ok(r) = serde_json::from_slice::<AuditRecord>(&m.data)
                            && r.is_replay_delivered(token)
                            && wanted.contains(r.message_id.as_str())
                        {
                            delivered.insert(r.message_id);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            Self::release(channel).await;
            result.map(|()| delivered.len())
        })?;
        let failed = back_again(&self.all()?, ids, token);
        Ok(CanaryProgress { delivered, failed })
    }
}

/// The properties a replay of the dead letter whose envelope's `original` is `original`
/// carries: the message's own headers, its id (`message_id`) and the replay's `token`. A dead
/// letter is whatever the DLQ queue holds (anyone who may publish there may have written
/// it), so a header name longer than an AMQP short string (255 bytes) is left out and the id
/// and content type are made one line of at most 255 bytes, rather than panicking in the
/// client.
pub(crate) fn replay_properties(
    original: &Original,
    message_id: &str,
    token: &str,
    traceparent: Option<&str>,
) -> BasicProperties {
    let short = |text: &str| ShortString::from(verdict_runtime::text::one_line(text, 255));
    let mut headers = FieldTable::default();
    let own = match traceparent {
        Some(traceparent) => crate::telemetry::with_traceparent(&original.headers, traceparent),
        None => original.headers.clone(),
    };
    for (k, v) in &own {
        if let Ok(name) = ShortString::try_new(k.as_str()) {
            headers.insert(name, AMQPValue::LongString(LongString::from(v.as_str())));
        }
    }
    headers.insert(
        ShortString::from(REPLAY_HEADER),
        AMQPValue::LongString(LongString::from(token)),
    );
    let mut properties = BasicProperties::default()
        .with_message_id(short(message_id))
        .with_headers(headers)
        .with_delivery_mode(2);
    if let Some(ct) = &original.content_type {
        properties = properties.with_content_type(short(ct));
    }
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_dead_letter_replays_without_a_panic() {
        // A header name, an id and a content type past an AMQP short string (255 bytes), as
        // a dead letter published into the DLQ queue by someone else may hold: before,
        // `ShortString::from` panicked and the replay with it.
        let long = "n".repeat(300);
        let original: Original = serde_json::from_value(serde_json::json!({
            "topic": "t", "id": "m-1",
            "headers": {long.clone(): "v", "tenant": "eu"},
            "contentType": long,
        }))
        .unwrap();
        let properties = replay_properties(&original, &"i".repeat(300), "tok", None);
        let headers = properties.headers().clone().unwrap();
        assert_eq!(headers.inner().len(), 2, "tenant and the replay token");
        assert!(headers.inner().contains_key("tenant"));
        let id = properties.message_id().clone().unwrap();
        assert_eq!(id.as_str().len(), 255);
        let ct = properties.content_type().clone().unwrap();
        assert_eq!(ct.as_str().len(), 255);
    }
}
