//! The Kafka broker of a run on Kafka (nisshi, a Kafka-compatible broker, as `.ci/run`
//! starts it, or the one `VERDICT_TEST_KAFKA` names): the route topic created before the
//! gateways start (the gateway creates its retry, dead-letter and audit topics itself, never
//! a route's), records produced as a hostile producer writes them, the DLQ topic and the
//! group's committed offsets read straight from the broker, and the run's topics deleted.
//!
//! The broker's blocking calls (metadata, watermarks, committed offsets, reading a topic)
//! run on a blocking thread each, so the run's runtime keeps serving the producer's
//! publishes and the consumer meanwhile.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message as _, Offset, TopicPartitionList};

use crate::letters::Letter;
use crate::plan::Planned;

/// Where `.ci/run` starts nisshi.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";

/// The header the gateway reads a record's id from (`[kafka] id_header`'s default).
pub const ID_HEADER: &str = "message-id";

/// Partitions of the run's route topic: several, so one gateway's records finish out of
/// order across partitions and several gateways split the topic.
pub const ROUTE_PARTITIONS: i32 = 4;

/// How long the broker has to acknowledge a record (`message.timeout.ms`): then the
/// producer sends it again, as for the other brokers.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one call to the broker (metadata, watermarks, offsets, an admin request) may
/// take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long reading a topic may go without a record while the watermarks say more are
/// there.
const STALL: Duration = Duration::from_secs(30);

/// The broker a run uses: `VERDICT_TEST_KAFKA` (as the Kafka tests read it), else
/// [`DEFAULT_BOOTSTRAP`].
pub fn bootstrap() -> String {
    std::env::var("VERDICT_TEST_KAFKA")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_string())
}

/// The run's clients of the broker.
pub struct Kafka {
    bootstrap: String,
    /// The run's prefix: its topics are `<prefix>.<name>`, the gateways' group `<prefix>`.
    prefix: String,
    producer: FutureProducer,
    admin: AdminClient<DefaultClientContext>,
    readers: Arc<Readers>,
}

/// The clients whose calls block.
struct Readers {
    /// Reads topics (a read assigns it the partition it reads: one read at a time) and
    /// asks for metadata and watermarks. Its own group id, which never commits.
    reader: Mutex<BaseConsumer>,
    /// The gateways' group id, to read its committed offsets: it never subscribes, so it
    /// never joins the group nor moves a partition.
    group: Mutex<BaseConsumer>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "verdict-torture");
    config
}

fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(TIMEOUT))
        .operation_timeout(Some(TIMEOUT))
}

impl Kafka {
    /// Clients of the broker for the run of `prefix`, the broker reached once (so a wrong
    /// address fails here, with its reason, rather than as publishes that never end).
    pub async fn connect(prefix: &str) -> Result<Kafka> {
        let bootstrap = bootstrap();
        // Idempotent: librdkafka's own retries of a publish write it once. A publish the
        // harness sends again (no acknowledgement in time) is another record, as a real
        // producer's would be.
        let producer: FutureProducer = client(&bootstrap)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", ACK_TIMEOUT.as_millis().to_string())
            .create()
            .context("creating the Kafka producer")?;
        let admin: AdminClient<DefaultClientContext> = client(&bootstrap)
            .create()
            .context("creating the Kafka admin client")?;
        let reader: BaseConsumer = client(&bootstrap)
            .set("group.id", format!("{prefix}.torture-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .create()
            .context("creating the Kafka reader")?;
        let group: BaseConsumer = client(&bootstrap)
            .set("group.id", prefix)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .create()
            .context("creating the client that reads the group's offsets")?;
        let kafka = Kafka {
            bootstrap,
            prefix: prefix.to_string(),
            producer,
            admin,
            readers: Arc::new(Readers {
                reader: Mutex::new(reader),
                group: Mutex::new(group),
            }),
        };
        kafka
            .blocking(|r| {
                lock(&r.reader)
                    .fetch_metadata(None, TIMEOUT)
                    .map(drop)
                    .context("reading the cluster's metadata")
            })
            .await?;
        Ok(kafka)
    }

    /// The broker (`host:port`), for the gateways' `bootstrap_servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Run `call` on a blocking thread with the blocking clients.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&Readers) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let readers = Arc::clone(&self.readers);
        tokio::task::spawn_blocking(move || {
            let all: &Readers = &readers;
            call(all)
        })
        .await
        .context("a call to the Kafka broker")?
    }

    /// The names of the run's topics the broker holds (`<prefix>.` and more: another run's
    /// prefix may extend this one's, `tt1s1` and `tt1s10`, never past its dot).
    async fn topics_of_run(&self) -> Result<Vec<String>> {
        let mine = format!("{}.", self.prefix);
        self.blocking(move |r| {
            let metadata = lock(&r.reader)
                .fetch_metadata(None, TIMEOUT)
                .context("listing the topics")?;
            Ok(metadata
                .topics()
                .iter()
                .map(|t| t.name().to_string())
                .filter(|name| name.starts_with(&mine))
                .collect())
        })
        .await
    }

    /// Create `topic` (`partitions`, replication 1), once what a clean-up deleted is gone:
    /// a topic of the same name still being deleted would swallow the new one. One that
    /// already exists is fine.
    pub async fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = self.topics_of_run().await?;
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the run's topics deleted 30 s ago are still there: {}",
                    left.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let created = self
            .admin
            .create_topics(&[new], &admin_options())
            .await
            .with_context(|| format!("creating topic `{topic}`"))?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => bail!("creating topic `{name}`: the broker answered {code}"),
            }
        }
        Ok(())
    }

    /// Produce `m` once - its planned headers byte for byte (binary values too), its id as
    /// its key and in the `message-id` header when it has one - and wait for the broker's
    /// acknowledgement. `Ok(false)`: the broker refused it for good (too big), so it never
    /// entered; an error: no acknowledgement, the caller sends it again.
    pub async fn publish(&self, m: &Planned) -> Result<bool> {
        let mut headers = OwnedHeaders::new_with_capacity(m.headers.len() + 1);
        for (name, value) in &m.headers {
            headers = headers.insert(Header {
                key: name.as_str(),
                value: Some(value.as_slice()),
            });
        }
        // Whatever the id: one Kafka cannot carry as a record's id (more than 255 bytes,
        // control characters) is still sent - the gateway then names the record by where it
        // sits, `<topic>/<partition>@<offset>`, as a producer's bad id deserves.
        if let Some(id) = &m.id {
            headers = headers.insert(Header {
                key: ID_HEADER,
                value: Some(id.as_bytes()),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(m.topic.as_str())
            .payload(m.payload.as_slice())
            .headers(headers);
        if let Some(id) = &m.id {
            record = record.key(id.as_bytes());
        }
        // librdkafka gives up at `message.timeout.ms`; the outer bound only keeps a
        // producer from hanging should its answer never come.
        let sent = tokio::time::timeout(
            ACK_TIMEOUT + Duration::from_secs(5),
            self.producer.send(record, ACK_TIMEOUT),
        )
        .await;
        match sent {
            Ok(Ok(_)) => Ok(true),
            Ok(Err((e, _)))
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) =>
            {
                Ok(false)
            }
            Ok(Err((e, _))) => Err(anyhow!("Kafka did not take message {}: {e}", m.key)),
            Err(_) => Err(anyhow!(
                "no acknowledgement for message {} within {ACK_TIMEOUT:?}",
                m.key
            )),
        }
    }

    /// The records in `topic` (every partition), as the broker counts them; 0 when it does
    /// not exist yet.
    pub async fn depth(&self, topic: &str) -> Result<u64> {
        let topic = topic.to_string();
        self.blocking(move |r| {
            let reader = lock(&r.reader);
            let mut total = 0;
            for partition in partitions(&reader, &topic)? {
                let (low, high) = watermarks(&reader, &topic, partition)?;
                total += span(low, high);
            }
            Ok(total)
        })
        .await
    }

    /// Every dead letter in the DLQ topic `dlq`, read from the start of each partition;
    /// records without the envelope header are no letters of the gateway's and are skipped.
    pub async fn letters(&self, dlq: &str) -> Result<Vec<Letter>> {
        let dlq = dlq.to_string();
        self.blocking(move |r| {
            let reader = lock(&r.reader);
            let mut letters = Vec::new();
            read_all(&reader, &dlq, |record| {
                let position = i64::try_from(letters.len()).unwrap_or(i64::MAX);
                let entry = verdict_gateway::sources::kafka::dlq::entry_of(position, &dlq, &record)
                    .map_err(|e| anyhow!("`{dlq}`: a letter: {e}"))?;
                if let Some(entry) = entry {
                    letters.push(Letter {
                        created_at_ms: entry.created_at_ms,
                        envelope: entry.envelope,
                    });
                }
                Ok(())
            })?;
            Ok(letters)
        })
        .await
    }

    /// Where the broker still holds the run's messages for the gateways: the records of
    /// `route` and of the retry topics (`<retry_prefix>.<bucket ms>`) past the group's
    /// committed offsets, by topic - a record not committed is read again (a retry copy
    /// waiting for its delay, a record in flight, one a killed gateway left). With
    /// `set_aside`, also the records in `<retry_prefix>.invalid`, which no gateway reads:
    /// copies set aside for an operator.
    pub async fn held(
        &self,
        route: &str,
        retry_prefix: &str,
        set_aside: bool,
    ) -> Result<Vec<(String, u64)>> {
        let route = route.to_string();
        let retries = format!("{retry_prefix}.");
        let invalid = format!("{retry_prefix}.invalid");
        self.blocking(move |r| {
            let reader = lock(&r.reader);
            let metadata = reader
                .fetch_metadata(None, TIMEOUT)
                .context("listing the topics")?;
            let mut read_by_group: Vec<(String, i32)> = Vec::new();
            let mut out = Vec::new();
            for t in metadata.topics().iter().filter(|t| t.error().is_none()) {
                let name = t.name();
                let retry = name
                    .strip_prefix(retries.as_str())
                    .is_some_and(|ms| !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()));
                if name == route || retry {
                    read_by_group.extend(t.partitions().iter().map(|p| (name.to_string(), p.id())));
                } else if set_aside && name == invalid {
                    let mut n = 0;
                    for p in t.partitions() {
                        let (low, high) = watermarks(&reader, name, p.id())?;
                        n += span(low, high);
                    }
                    if n > 0 {
                        out.push((format!("{name} (set aside, read by no gateway)"), n));
                    }
                }
            }
            if read_by_group.is_empty() {
                return Ok(out);
            }
            let mut asked = TopicPartitionList::new();
            for (topic, partition) in &read_by_group {
                asked.add_partition(topic, *partition);
            }
            let committed = lock(&r.group)
                .committed_offsets(asked, TIMEOUT)
                .context("reading the group's committed offsets")?;
            let mut by_topic: BTreeMap<String, u64> = BTreeMap::new();
            for (topic, partition) in &read_by_group {
                let (low, high) = watermarks(&reader, topic, *partition)?;
                // No commit yet: the group reads the partition from its start.
                let next = match committed
                    .find_partition(topic, *partition)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(next)) => next.max(low),
                    _ => low,
                };
                let n = span(next, high);
                if n > 0 {
                    *by_topic.entry(topic.clone()).or_default() += n;
                }
            }
            let mut held: Vec<(String, u64)> = by_topic
                .into_iter()
                .map(|(topic, n)| (format!("{topic} (past the group's commit)"), n))
                .collect();
            held.extend(out);
            Ok(held)
        })
        .await
    }

    /// Delete every topic of the run (route, DLQ, retry, audit, settled and set-aside
    /// topics alike) and the gateways' group; what fails is left (a group whose killed
    /// members' sessions have not expired yet cannot be deleted).
    pub async fn clean(&self) {
        if let Ok(mine) = self.topics_of_run().await
            && !mine.is_empty()
        {
            let names: Vec<&str> = mine.iter().map(String::as_str).collect();
            let _ = self.admin.delete_topics(&names, &admin_options()).await;
        }
        let _ = self
            .admin
            .delete_groups(&[self.prefix.as_str()], &admin_options())
            .await;
    }
}

/// Records in `[from, to)`.
fn span(from: i64, to: i64) -> u64 {
    u64::try_from(to.saturating_sub(from)).unwrap_or(0)
}

/// The partitions of `topic`, in order; none when it does not exist.
fn partitions(reader: &BaseConsumer, topic: &str) -> Result<Vec<i32>> {
    let metadata = reader
        .fetch_metadata(Some(topic), TIMEOUT)
        .with_context(|| format!("topic `{topic}`: its metadata"))?;
    let mut out: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The first and one past the last offset of a partition.
fn watermarks(reader: &BaseConsumer, topic: &str, partition: i32) -> Result<(i64, i64)> {
    reader
        .fetch_watermarks(topic, partition, TIMEOUT)
        .with_context(|| format!("topic `{topic}` partition {partition}: its watermarks"))
}

/// Hand `visit` every record of `topic` the broker holds now, partition by partition, each
/// from its first offset up to the high watermark read before it (records written while it
/// reads are left for another look).
fn read_all(
    reader: &BaseConsumer,
    topic: &str,
    mut visit: impl FnMut(OwnedMessage) -> Result<()>,
) -> Result<()> {
    for partition in partitions(reader, topic)? {
        let (low, high) = watermarks(reader, topic, partition)?;
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(low))
            .with_context(|| format!("topic `{topic}` partition {partition}"))?;
        reader
            .assign(&tpl)
            .with_context(|| format!("reading topic `{topic}` partition {partition}"))?;
        let mut next = low;
        let mut progress = Instant::now();
        while next < high {
            match reader.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    // Left over from another read, or read already.
                    if m.topic() != topic || m.partition() != partition || m.offset() < next {
                        continue;
                    }
                    next = m.offset() + 1;
                    progress = Instant::now();
                    if m.offset() < high {
                        visit(m.detach())?;
                    }
                }
                Some(Err(e)) => {
                    let _ = reader.unassign();
                    return Err(anyhow!(e)
                        .context(format!("reading topic `{topic}` partition {partition}")));
                }
                None if progress.elapsed() > STALL => {
                    let _ = reader.unassign();
                    bail!(
                        "topic `{topic}` partition {partition}: no record for {} s at offset \
                         {next}, though the broker says offsets up to {high} are there",
                        STALL.as_secs()
                    );
                }
                None => {}
            }
        }
        let _ = reader.unassign();
    }
    Ok(())
}
