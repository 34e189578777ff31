//! The sources a run drives - the embedded store, PostgreSQL or MariaDB shared by several
//! gateways, NATS, RabbitMQ, Kafka: the section of the gateway's config, the topics it
//! publishes to, how a hostile producer publishes there, and the names it cleans up.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::jetstream;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};

use crate::database::{Database, Server};
use crate::kafka::Kafka;
use crate::letters::Letter;
use crate::plan::{Abilities, Planned};
use verdict_cli::tls_peers::{Certificates, TlsNats};

/// NATS as `.ci/run` starts it.
pub const NATS_URL: &str = "nats://127.0.0.1:4222";
/// RabbitMQ as `.ci/run` starts it.
pub const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Which source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceName {
    /// The embedded store (messages published through the admin API).
    Embedded,
    /// A PostgreSQL store the run's gateways share (published through the admin API).
    Postgres,
    /// A MariaDB store the run's gateways share (published through the admin API).
    Mysql,
    /// NATS JetStream.
    Nats,
    /// RabbitMQ.
    Rabbitmq,
    /// Kafka: a route topic of the run's own, read by one consumer group.
    Kafka,
}

impl SourceName {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceName::Embedded => "embedded",
            SourceName::Postgres => "postgres",
            SourceName::Mysql => "mysql",
            SourceName::Nats => "nats",
            SourceName::Rabbitmq => "rabbitmq",
            SourceName::Kafka => "kafka",
        }
    }

    /// A store's rows hold the messages (the embedded store or a shared SQL one): published
    /// through the admin API, routes with `source = "embedded"`.
    pub fn is_store(self) -> bool {
        matches!(
            self,
            SourceName::Embedded | SourceName::Postgres | SourceName::Mysql
        )
    }

    /// Whether several gateways can share it.
    pub fn is_shared(self) -> bool {
        self != SourceName::Embedded
    }

    /// A broker that keeps every record a producer writes, with no window in which it drops
    /// a repeated id (RabbitMQ, Kafka; NATS drops a repeated `Nats-Msg-Id`, a store a
    /// repeated id): each copy of a message, and each publish sent again, is a message of
    /// its own - and each may be delivered, or dead-lettered, on its own.
    pub fn keeps_every_copy(self) -> bool {
        matches!(self, SourceName::Rabbitmq | SourceName::Kafka)
    }

    /// A route names its queue or topic exactly, with no wildcard (RabbitMQ's queue,
    /// Kafka's topic): one route per source, no narrower one beside it.
    pub fn exact_topic(self) -> bool {
        matches!(self, SourceName::Rabbitmq | SourceName::Kafka)
    }

    /// Whether the broker fault may strike it. Not the embedded store (no broker), nor
    /// Kafka: the broker `.ci/run` starts for it (nisshi) keeps its records in memory, and
    /// a restart would lose every one of them - the broker's loss, which no gateway can
    /// undo, and not what the run checks.
    pub fn broker_fault(self) -> bool {
        !matches!(self, SourceName::Embedded | SourceName::Kafka)
    }

    /// The routes' `source`.
    pub fn route_source(self) -> &'static str {
        if self.is_store() {
            "embedded"
        } else {
            self.as_str()
        }
    }
}

/// A source set up for one run (its names start with `prefix`).
pub struct Source {
    /// Which.
    pub name: SourceName,
    prefix: String,
    nats: Option<jetstream::Context>,
    /// Reconnected after a broker restart.
    rabbit: tokio::sync::Mutex<Option<(Connection, lapin::Channel)>>,
    /// With `--tls`: the TLS-only NATS server of the run's own (on NATS), and the CA that
    /// signed it and the consumer's certificate.
    tls: Option<Tls>,
    /// The database of a shared SQL store.
    database: Option<Database>,
    /// The Kafka broker's clients.
    kafka: Option<Kafka>,
}

/// A `--tls` run's peers.
struct Tls {
    /// Restarted by the broker faults (the machine's server is not asked to speak TLS).
    nats: Option<Mutex<TlsNats>>,
    certificates: Certificates,
}

/// How long a producer keeps trying one message while its broker is down.
const PUBLISH_PATIENCE: Duration = Duration::from_secs(120);

/// What publishing one message came to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Published {
    /// The source took it.
    pub taken: bool,
    /// A publish had to be sent again (its confirm was lost with the connection), so the
    /// broker may hold one copy more than planned.
    pub resent: bool,
    /// When its first publish went out (ms since the epoch): it may reach the consumer
    /// before its confirm does.
    pub at_ms: u64,
}

impl Source {
    /// Connect to the source's broker (none for the embedded store); `prefix` names this
    /// run's streams, subjects and queues. With `tls`, a CA is made for the run and NATS is
    /// a TLS-only `nats-server` of the run's own, its files under `workdir`.
    pub async fn connect(
        name: SourceName,
        prefix: &str,
        tls: bool,
        workdir: &Path,
    ) -> Result<Source> {
        let tls = tls
            .then(|| -> Result<Tls> {
                let certificates = Certificates::new(&format!("torture-{prefix}"));
                let nats = match name {
                    SourceName::Nats => Some(Mutex::new(TlsNats::start(
                        &workdir.join(format!("{prefix}-nats")),
                        &certificates,
                    )?)),
                    _ => None,
                };
                Ok(Tls { nats, certificates })
            })
            .transpose()?;
        let mut source = Source {
            name,
            prefix: prefix.to_string(),
            nats: None,
            rabbit: tokio::sync::Mutex::new(None),
            tls,
            database: None,
            kafka: None,
        };
        match name {
            SourceName::Embedded => {}
            // Created after the clean-up below (which would drop it), afresh either way.
            SourceName::Postgres | SourceName::Mysql => {}
            SourceName::Nats => {
                let url = source.nats_url();
                let mut options = async_nats::ConnectOptions::new();
                if let Some(tls) = &source.tls {
                    options = options
                        .add_root_certificates(tls.certificates.ca_file().to_path_buf())
                        .require_tls(true);
                }
                let client = options
                    .connect(&url)
                    .await
                    .with_context(|| format!("NATS at {url} (.ci/run starts 127.0.0.1:4222)"))?;
                source.nats = Some(jetstream::new(client));
            }
            SourceName::Rabbitmq => {
                *source.rabbit.get_mut() = Some(
                    rabbit_connect()
                        .await
                        .context("RabbitMQ on 127.0.0.1:5672 (.ci/run starts it)")?,
                );
            }
            SourceName::Kafka => {
                source.kafka = Some(Kafka::connect(prefix).await.with_context(|| {
                    format!(
                        "Kafka at {} (.ci/run starts nisshi on {}; VERDICT_TEST_KAFKA names \
                         another)",
                        crate::kafka::bootstrap(),
                        crate::kafka::DEFAULT_BOOTSTRAP
                    )
                })?);
            }
        }
        source.clean().await;
        // The gateway creates its retry, dead-letter and audit topics, never a route's: the
        // producers' to create, before the gateways subscribe. After the clean-up, which
        // would delete it.
        if let Some(kafka) = &source.kafka {
            let (topic, _) = source.topics();
            kafka
                .create_topic(&topic, crate::kafka::ROUTE_PARTITIONS)
                .await
                .with_context(|| format!("the route topic `{topic}`"))?;
        }
        let server = match name {
            SourceName::Postgres => Some(Server::Postgres),
            SourceName::Mysql => Some(Server::Mysql),
            _ => None,
        };
        if let Some(server) = server {
            let db_name = prefix.to_string();
            source.database = Some(
                tokio::task::spawn_blocking(move || Database::create(server, &db_name)).await??,
            );
        }
        Ok(source)
    }

    /// The NATS server the run uses: its own TLS one, or the machine's.
    fn nats_url(&self) -> String {
        match self.tls.as_ref().and_then(|t| t.nats.as_ref()) {
            Some(server) => server.lock().unwrap_or_else(|e| e.into_inner()).url(),
            None => NATS_URL.to_string(),
        }
    }

    /// The TLS-only NATS server of a `--tls` run on NATS (the broker faults restart it).
    pub fn tls_nats(&self) -> Option<&Mutex<TlsNats>> {
        self.tls.as_ref()?.nats.as_ref()
    }

    /// The consumer's TLS side in a `--tls` run.
    pub fn consumer_tls(&self) -> Result<Option<Arc<verdict_tls::rustls::ServerConfig>>> {
        self.tls
            .as_ref()
            .map(|t| t.certificates.consumer())
            .transpose()
    }

    /// `, tls = { ca_file = ... }` for the route's consumer in a `--tls` run.
    pub fn consumer_tls_table(&self) -> String {
        self.tls
            .as_ref()
            .map_or(String::new(), |t| format!(", {}", t.certificates.table()))
    }

    /// The route's topic pattern, and the topics messages are published to: on NATS and
    /// the store, subjects at the edges of a `>` pattern; on RabbitMQ, the queue; on Kafka,
    /// the topic (a Kafka route names one exactly).
    pub fn topics(&self) -> (String, Vec<String>) {
        let p = &self.prefix;
        match self.name {
            SourceName::Rabbitmq | SourceName::Kafka => {
                (format!("{p}.orders"), vec![format!("{p}.orders")])
            }
            _ => (
                format!("{p}.orders.>"),
                vec![
                    format!("{p}.orders.a"),
                    format!("{p}.orders.a.b.c.d.e.f"),
                    format!("{p}.orders.{}", "x".repeat(200)),
                    format!("{p}.orders.-_-"),
                ],
            ),
        }
    }

    /// What a producer can send here.
    pub fn abilities(&self) -> Abilities {
        match self.name {
            SourceName::Embedded | SourceName::Postgres | SourceName::Mysql => Abilities {
                binary: false,
                max_payload: 1 << 20,
                binary_headers: false,
            },
            // The server's default max_payload is 1 MiB, headers included.
            SourceName::Nats => Abilities {
                binary: true,
                max_payload: 1_000_000,
                binary_headers: false,
            },
            SourceName::Rabbitmq => Abilities {
                binary: true,
                max_payload: 1 << 20,
                binary_headers: true,
            },
            // librdkafka's `message.max.bytes` (1,000,000) bounds a whole record - key,
            // headers and framing too: the biggest payload leaves room for a long id twice
            // (key and header) and a big header.
            SourceName::Kafka => Abilities {
                binary: true,
                max_payload: 900_000,
                binary_headers: true,
            },
        }
    }

    /// The gateway config's section for this source.
    pub fn section(&self) -> String {
        let p = &self.prefix;
        match self.name {
            SourceName::Embedded => String::new(),
            // Inside `[gateway]`, where the section goes.
            SourceName::Postgres | SourceName::Mysql => format!(
                "store = \"{}\"\n",
                self.database
                    .as_ref()
                    .map(Database::url)
                    .unwrap_or_default()
            ),
            SourceName::Nats => format!(
                "[nats]\nurl = \"{url}\"\nstream = \"{p}\"\ndlq_stream = \"{p}_DLQ\"\n\
                 dlq_subject_prefix = \"{p}dlq\"\naudit_stream = \"{p}_AUDIT\"\n\
                 audit_subject_prefix = \"{p}audit\"\nhistory_bucket = \"{p}-history\"\n\
                 ack_wait_ms = 3000\n{tls}",
                url = self.nats_url(),
                tls = self
                    .tls
                    .as_ref()
                    .map_or(String::new(), |t| format!("{}\n", t.certificates.table())),
            ),
            SourceName::Rabbitmq => format!(
                "[rabbitmq]\nurl = \"{RABBITMQ_URL}\"\nprefetch = 32\n\
                 delay_prefix = \"{p}.delay\"\naudit_queue = \"{p}.audit\"\n\
                 # One key for every gateway of the run: they share the queues, and a retry\n\
                 # one of them signed must count its attempts at another.\n\
                 history_key_file = \"../history.key\"\n"
            ),
            // The group is the run's; the gateway names the route's DLQ topic
            // `<topic>.DLQ` and creates it and the retry and audit topics (the DLQ tools
            // create the settled one).
            SourceName::Kafka => format!(
                "[kafka]\nbootstrap_servers = [\"{bootstrap}\"]\ngroup_id = \"{p}\"\n\
                 retry_topic_prefix = \"{p}.retry\"\naudit_topic = \"{p}.audit\"\n\
                 dlq_settled_topic = \"{p}.dlq-settled\"\n\
                 # One key for every gateway of the run (the first to start creates it): they\n\
                 # share the group, and a retry copy one of them signed must count its attempts\n\
                 # at another.\n\
                 history_key_file = \"../history.key\"\n",
                bootstrap = self
                    .kafka
                    .as_ref()
                    .map_or_else(crate::kafka::bootstrap, |k| k.bootstrap().to_string()),
            ),
        }
    }

    /// Publish `m` (all its copies); whether the source took it. The embedded store goes
    /// through the admin API at `admin_url`.
    pub async fn publish(
        &self,
        m: &Planned,
        admin: &verdict_cli::client::AdminClient,
    ) -> Result<Published> {
        let mut out = Published {
            at_ms: verdict_gateway::pipeline::now_ms(),
            ..Published::default()
        };
        for _ in 0..m.copies {
            let deadline = tokio::time::Instant::now() + PUBLISH_PATIENCE;
            loop {
                let tried = match self.name {
                    SourceName::Embedded | SourceName::Postgres | SourceName::Mysql => {
                        publish_embedded(m, admin)
                    }
                    SourceName::Nats => self.publish_nats(m).await,
                    SourceName::Rabbitmq => self.publish_rabbit(m).await,
                    SourceName::Kafka => self.publish_kafka(m).await,
                };
                match tried {
                    Ok(taken) => {
                        out.taken |= taken;
                        break;
                    }
                    // A broker restarting, or a store answering 503 while its database
                    // connection is cut: a producer retries, as real ones do.
                    Err(e) if !self.name.is_store() || unavailable(&e) => {
                        if tokio::time::Instant::now() > deadline {
                            return Err(e.context(format!(
                                "the broker took no publish for {PUBLISH_PATIENCE:?}"
                            )));
                        }
                        out.resent = true;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    async fn publish_nats(&self, m: &Planned) -> Result<bool> {
        let js = self.nats.as_ref().expect("connected");
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &m.headers {
            headers.insert(name.as_str(), String::from_utf8_lossy(value).as_ref());
        }
        if let Some(id) = &m.id {
            // A NATS header value cannot hold a line break: that much a producer cannot
            // send, whatever it wants.
            let id: String = id.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            headers.insert("Nats-Msg-Id", id.as_str());
        }
        let ack = js
            .publish_with_headers(m.topic.clone(), headers, m.payload.clone().into())
            .await;
        match ack {
            Ok(ack) => match tokio::time::timeout(Duration::from_secs(10), ack).await {
                Ok(Ok(_)) => Ok(true),
                Ok(Err(e)) => bail!("NATS refused message {}: {e}", m.key),
                Err(_) => bail!("no PubAck for message {} within 10 s", m.key),
            },
            Err(e) => bail!("publishing message {}: {e}", m.key),
        }
    }

    async fn publish_rabbit(&self, m: &Planned) -> Result<bool> {
        // One channel for every publish in flight; the lock only guards (re)connecting.
        let channel = {
            let mut held = self.rabbit.lock().await;
            if held.as_ref().is_none_or(|(c, _)| !c.status().connected()) {
                *held = None;
                *held = Some(rabbit_connect().await?);
            }
            held.as_ref().expect("connected just now").1.clone()
        };
        let mut headers = FieldTable::default();
        for (name, value) in &m.headers {
            headers.insert(
                ShortString::from(name.as_str()),
                AMQPValue::LongString(LongString::from(value.clone())),
            );
        }
        let mut properties = BasicProperties::default()
            .with_headers(headers)
            .with_delivery_mode(2);
        if let Some(id) = &m.id {
            // A short string holds 255 bytes at most.
            let mut id = id.clone();
            while id.len() > 255 {
                id.pop();
            }
            properties = properties.with_message_id(ShortString::from(id));
        }
        let confirm = async {
            channel
                .basic_publish(
                    ShortString::from(""),
                    ShortString::from(m.topic.as_str()),
                    BasicPublishOptions::default(),
                    &m.payload,
                    properties,
                )
                .await?
                .await
        }
        .await;
        match confirm {
            Ok(confirm) => Ok(confirm.is_ack()),
            Err(e) => {
                // The next publish reconnects, unless another already did.
                let mut held = self.rabbit.lock().await;
                if held.as_ref().is_some_and(|(_, c)| c.id() == channel.id()) {
                    *held = None;
                }
                Err(e.into())
            }
        }
    }

    async fn publish_kafka(&self, m: &Planned) -> Result<bool> {
        self.kafka
            .as_ref()
            .context("not connected to Kafka")?
            .publish(m)
            .await
    }

    /// Read every letter of the run's Kafka DLQ topic (`<topic>.DLQ`, the gateway's default
    /// naming), from the start of each partition: a topic is a log, nothing is taken out.
    pub async fn drain_kafka_dlq(&self) -> Result<Vec<Letter>> {
        let dlq = format!("{}.orders.DLQ", self.prefix);
        self.kafka
            .as_ref()
            .context("not connected to Kafka")?
            .letters(&dlq)
            .await
            .with_context(|| format!("reading the DLQ topic `{dlq}`"))
    }

    /// The dead letters in the run's Kafka DLQ topic, as the broker counts them (its
    /// records). The gateway's `verdict_dlq_depth` on Kafka counts only what its own process
    /// wrote: a gateway killed counts from 0 again, and one gateway's misses the others'.
    pub async fn kafka_dlq_depth(&self) -> Result<u64> {
        let dlq = format!("{}.orders.DLQ", self.prefix);
        self.kafka
            .as_ref()
            .context("not connected to Kafka")?
            .depth(&dlq)
            .await
            .with_context(|| format!("counting the DLQ topic `{dlq}`"))
    }

    /// Where Kafka still holds the run's messages for the gateways: the route topic's and
    /// retry topics' records past the group's commit, and with `set_aside` the copies set
    /// aside for an operator. An error when the broker cannot be asked: "nothing held"
    /// would let the run be judged while messages still wait there.
    async fn kafka_held(&self, set_aside: bool) -> Result<Vec<(String, u64)>> {
        let kafka = self.kafka.as_ref().context("not connected to Kafka")?;
        let (route, _) = self.topics();
        let retry_prefix = format!("{}.retry", self.prefix);
        kafka
            .held(&route, &retry_prefix, set_aside)
            .await
            .context("counting what the route and retry topics hold past the group's commit")
    }

    /// Take every letter out of the run's RabbitMQ DLQ (the run is over: nothing reads it
    /// after the judge). A queue can only be browsed by holding what came before unacked,
    /// so the gateway's admin API pages at most 50,000 letters deep; a soak leaves a few
    /// hundred thousand, which a consumer without acknowledgements drains in seconds.
    pub async fn drain_rabbitmq_dlq(&self) -> Result<Vec<Letter>> {
        use futures_util::StreamExt as _;
        use lapin::options::BasicConsumeOptions;

        let queue = format!("{}.orders.DLQ", self.prefix);
        // A connection of its own: the run's may have used up its channel numbers (a soak
        // counts the queues every second for half an hour).
        let (conn, _) = rabbit_connect()
            .await
            .context("connecting to RabbitMQ to read the DLQ")?;
        let conn = &conn;
        let depth = queue_count(conn, &queue)
            .await
            .with_context(|| format!("queue `{queue}`"))? as usize;
        let channel = conn.create_channel().await?;
        let mut consumer = channel
            .basic_consume(
                ShortString::from(queue.as_str()),
                ShortString::from(""),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("consuming `{queue}`"))?;
        let mut letters = Vec::with_capacity(depth);
        while letters.len() < depth {
            let next = tokio::time::timeout(Duration::from_secs(30), consumer.next()).await;
            let delivery = match next {
                Ok(Some(delivery)) => delivery.with_context(|| format!("reading `{queue}`"))?,
                Ok(None) => anyhow::bail!(
                    "`{queue}` held {depth} letters, but its consumer ended after {}",
                    letters.len()
                ),
                Err(_) => anyhow::bail!(
                    "`{queue}` held {depth} letters, but only {} came in 30 s",
                    letters.len()
                ),
            };
            let position = i64::try_from(letters.len()).unwrap_or(i64::MAX);
            let entry = verdict_gateway::sources::rabbitmq::entry_of(&queue, position, &delivery)
                .map_err(|e| anyhow::anyhow!("`{queue}`: a letter: {e}"))?;
            letters.push(Letter {
                created_at_ms: entry.created_at_ms,
                envelope: entry.envelope,
            });
        }
        let _ = channel.close(200, ShortString::from("drained")).await;
        let _ = conn.close(200, ShortString::from("read")).await;
        Ok(letters)
    }

    /// Every queue a RabbitMQ run may leave: the route's queue, its DLQ, the audit queue,
    /// each delay bucket and the due queues.
    fn rabbit_queues(&self) -> Vec<String> {
        let p = &self.prefix;
        let mut queues = vec![
            format!("{p}.orders"),
            format!("{p}.orders.DLQ"),
            format!("{p}.audit"),
        ];
        queues.extend(verdict_gateway::sources::rabbitmq::topology::delay_names(
            &format!("{p}.delay"),
        ));
        queues
    }

    /// Cut every connection to a shared SQL store's database (nothing elsewhere).
    pub async fn cut_store_connections(&self) -> Result<u64> {
        match self.database.clone() {
            Some(db) => tokio::task::spawn_blocking(move || db.cut_connections()).await?,
            None => Ok(0),
        }
    }

    /// Deliveries a shared SQL store recorded as possible duplicates (leases taken over
    /// after they expired); none elsewhere.
    pub async fn store_redeliveries(&self) -> Result<u64> {
        match self.database.clone() {
            Some(db) => tokio::task::spawn_blocking(move || db.counted_redeliveries()).await?,
            None => Ok(0),
        }
    }

    /// Where the broker still holds the run's messages: each NATS consumer's pending and
    /// unacknowledged messages, RabbitMQ's route queue and delay buckets, Kafka's route and
    /// retry topics past the group's commit and the copies set aside (nothing for the
    /// embedded store, whose census the admin API gives: [`crate::admin::store_census`]).
    /// Asked of the broker, never of the gateway.
    pub async fn census(&self) -> Vec<(String, u64)> {
        match self.name {
            SourceName::Embedded | SourceName::Postgres | SourceName::Mysql => Vec::new(),
            SourceName::Rabbitmq => unknown_if_failed(self.still_queued().await),
            SourceName::Nats => self.nats_census().await,
            SourceName::Kafka => unknown_if_failed(self.kafka_held(true).await),
        }
    }

    async fn nats_census(&self) -> Vec<(String, u64)> {
        use futures_util::StreamExt as _;
        let Some(js) = &self.nats else {
            return Vec::new();
        };
        let Ok(stream) = js.get_stream(&self.prefix).await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut consumers = stream.consumers();
        while let Some(Ok(info)) = consumers.next().await {
            let held = info.num_pending + info.num_ack_pending as u64;
            if held > 0 {
                out.push((
                    format!(
                        "consumer {} ({} pending, {} unacknowledged)",
                        info.name, info.num_pending, info.num_ack_pending
                    ),
                    held,
                ));
            }
        }
        out
    }

    /// The messages still waiting for the gateways in the run's route queue and delay
    /// buckets (RabbitMQ), or route and retry topics past the group's commit (Kafka);
    /// nothing elsewhere: a message found there when the run is judged was not lost, only
    /// not terminal yet.
    /// An error when the broker cannot be asked: that is not "nothing queued".
    pub async fn still_queued(&self) -> Result<Vec<(String, u64)>> {
        match self.name {
            SourceName::Rabbitmq => self.rabbit_still_queued().await,
            SourceName::Kafka => self.kafka_held(false).await,
            _ => Ok(Vec::new()),
        }
    }

    async fn rabbit_still_queued(&self) -> Result<Vec<(String, u64)>> {
        // A connection per look, closed after it: a channel per queue per look, once a
        // second through a long soak, used up one connection's channel numbers (2,047).
        let (conn, _) = rabbit_connect()
            .await
            .context("connecting to RabbitMQ to count the run's queues")?;
        let conn = &conn;
        let mut out = Vec::new();
        for q in self.rabbit_queues() {
            if q.ends_with(".DLQ") || q.ends_with(".audit") {
                continue;
            }
            // A bucket the run never used does not exist: nothing waits there.
            if let Ok(n) = queue_count(conn, &q).await
                && n > 0
            {
                out.push((q, u64::from(n)));
            }
        }
        let _ = conn.close(200, ShortString::from("counted")).await;
        Ok(out)
    }

    /// Delete what a run of this prefix leaves on the broker.
    /// This run's names start with it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Delete the RabbitMQ exchange `name` (an operator's hand): the gateway's next publish
    /// there is a channel error.
    pub async fn delete_exchange(&self, name: &str) -> Result<()> {
        let mut held = self.rabbit.lock().await;
        if held.as_ref().is_none_or(|(c, _)| !c.status().connected()) {
            *held = Some(rabbit_connect().await.context("reconnecting to RabbitMQ")?);
        }
        let (conn, _) = held.as_ref().expect("connected above");
        let channel = conn.create_channel().await?;
        channel
            .exchange_delete(ShortString::from(name), Default::default())
            .await
            .with_context(|| format!("deleting exchange `{name}`"))?;
        let _ = channel.close(200, ShortString::from("deleted")).await;
        Ok(())
    }

    pub async fn clean(&self) {
        let p = &self.prefix;
        if let Some(db) = self.database.clone() {
            let _ = tokio::task::spawn_blocking(move || db.drop_database()).await;
        }
        // Every topic of the run, whoever created it, and the gateways' group.
        if let Some(kafka) = &self.kafka {
            kafka.clean().await;
        }
        if let Some(js) = &self.nats {
            for stream in [p.clone(), format!("{p}_DLQ"), format!("{p}_AUDIT")] {
                let _ = js.delete_stream(&stream).await;
            }
            let _ = js.delete_key_value(format!("{p}-history")).await;
        }
        let mut held = self.rabbit.lock().await;
        if held.as_ref().is_some_and(|(c, _)| !c.status().connected()) {
            *held = rabbit_connect().await.ok();
        }
        if let Some((conn, _)) = held.as_ref() {
            let queues = self.rabbit_queues();
            for q in &queues {
                // A failed delete closes its channel: one channel each.
                if let Ok(ch) = conn.create_channel().await {
                    let _ = ch
                        .queue_delete(ShortString::from(q.as_str()), QueueDeleteOptions::default())
                        .await;
                    let _ = ch
                        .exchange_delete(ShortString::from(q.as_str()), Default::default())
                        .await;
                }
            }
        }
    }
}

/// The messages ready in `queue` (a passive declare), on a channel of its own: a queue that
/// does not exist closes the channel that asked.
async fn queue_count(conn: &Connection, queue: &str) -> lapin::Result<u32> {
    use lapin::options::QueueDeclareOptions;
    let channel = conn.create_channel().await?;
    let declared = channel
        .queue_declare(
            ShortString::from(queue),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let _ = channel.close(200, ShortString::from("counted")).await;
    Ok(declared.message_count())
}

async fn rabbit_connect() -> lapin::Result<(Connection, lapin::Channel)> {
    let conn = Connection::connect(RABBITMQ_URL, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok((conn, channel))
}

/// The admin API answered 503: the gateway is up but cannot take the message now.
fn unavailable(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<verdict_cli::client::ClientError>(),
        Some(verdict_cli::client::ClientError::Api { status: 503, .. })
    )
}

fn publish_embedded(m: &Planned, admin: &verdict_cli::client::AdminClient) -> Result<bool> {
    let headers: serde_json::Map<String, serde_json::Value> = m
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned().into()))
        .collect();
    let mut body = serde_json::json!({
        "headers": headers,
        "payload": String::from_utf8_lossy(&m.payload),
        "content_type": "text/plain",
    });
    if let Some(id) = &m.id {
        body["id"] = id.clone().into();
    }
    let path = format!("/v1/topics/{}/messages", m.topic);
    match admin.post::<serde_json::Value>(&path, &body) {
        Ok(_) => Ok(true),
        // The API refuses what it will not store (an id past its bound, say): the
        // message never entered, and the run does not expect it anywhere.
        Err(verdict_cli::client::ClientError::Api {
            status: 400 | 413 | 422,
            ..
        }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A census that could not be taken, said as one line of it: the judge then reports the
/// messages it misses as not terminal with the reason, never as lost on an empty census.
fn unknown_if_failed(census: Result<Vec<(String, u64)>>) -> Vec<(String, u64)> {
    census.unwrap_or_else(|e| vec![(format!("{CENSUS_FAILED}: {e:#}"), 0)])
}

/// How a census that could not be taken begins.
pub const CENSUS_FAILED: &str = "the broker could not be asked";
