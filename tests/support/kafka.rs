//! A private corner of the Kafka broker on `VERDICT_TEST_KAFKA` (`127.0.0.1:9092`) for one
//! test: its own route topic (two partitions), consumer group, retry topics and audit
//! topic, all deleted when it is dropped.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Header, Headers as _, Message as _, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// The broker the tests use.
pub fn bootstrap() -> String {
    std::env::var("VERDICT_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// Partitions of a test's route topic.
pub const PARTITIONS: i32 = 2;

/// One test's names.
pub struct KafkaFixture {
    /// Unique prefix of every name.
    pub prefix: String,
    /// The broker (`host:port`).
    pub bootstrap: String,
    /// librdkafka settings of the fixture's own clients beyond the broker (TLS, SASL).
    settings: Vec<(String, String)>,
    producer: FutureProducer,
    runtime: tokio::runtime::Runtime,
}

/// A record for [`KafkaFixture::produce_all`].
pub struct Produced {
    /// Its key (which picks its partition).
    pub key: String,
    /// Its value.
    pub payload: Vec<u8>,
    /// Its headers, name and value.
    pub headers: Vec<(String, String)>,
}

impl KafkaFixture {
    /// Names unique to `name` in this process, its route topic `orders` created.
    pub fn new(name: &str) -> KafkaFixture {
        KafkaFixture::on(&bootstrap(), name)
    }

    /// The same on the broker at `bootstrap` (a test's own).
    pub fn on(bootstrap: &str, name: &str) -> KafkaFixture {
        KafkaFixture::on_with(bootstrap, name, &[])
    }

    /// The same with librdkafka `settings` for the fixture's own clients (a broker that
    /// wants TLS: `security.protocol`, `ssl.ca.location`).
    pub fn on_with(bootstrap: &str, name: &str, settings: &[(&str, &str)]) -> KafkaFixture {
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let fixture = KafkaFixture {
            prefix: format!("t{}-{nanos:x}.{name}", std::process::id()),
            bootstrap: bootstrap.to_string(),
            producer: runtime.block_on(async {
                client(bootstrap, &settings)
                    .set("enable.idempotence", "true")
                    .create()
                    .expect("a producer")
            }),
            runtime,
            settings,
        };
        let topic = fixture.topic("orders");
        fixture.runtime.block_on(async {
            let created = admin(bootstrap, &fixture.settings)
                .create_topics(
                    &[NewTopic::new(
                        &topic,
                        PARTITIONS,
                        TopicReplication::Fixed(1),
                    )],
                    &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                )
                .await
                .expect("Kafka runs on VERDICT_TEST_KAFKA or 127.0.0.1:9092 (.ci/run starts it)");
            assert!(created.iter().all(Result::is_ok), "{created:?}");
        });
        fixture
    }

    /// The topic `name` of this test.
    pub fn topic(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    /// The consumer group of this test's gateways.
    pub fn group(&self) -> String {
        format!("{}.group", self.prefix)
    }

    /// The `[kafka]` section of this test's gateways.
    pub fn section(&self) -> String {
        format!(
            "[kafka]\nbootstrap_servers = [\"{}\"]\ngroup_id = \"{}\"\nretry_topic_prefix = \"{p}.retry\"\naudit_topic = \"{p}.audit\"\ndlq_settled_topic = \"{p}.dlq-settled\"\n",
            self.bootstrap,
            self.group(),
            p = self.prefix
        )
    }

    /// Publish `m-<i>` (in the `message-id` header, also the key) to `topic` with a
    /// `tenant: eu` header and `{"order": i}`, each acknowledged.
    pub fn publish(&self, topic: &str, ids: std::ops::Range<u32>) {
        let topic = self.topic(topic);
        self.runtime.block_on(async {
            let sends = ids.map(|i| {
                let id = format!("m-{i}");
                let payload = format!(r#"{{"order": {i}}}"#);
                let headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "message-id",
                        value: Some(&id),
                    })
                    .insert(Header {
                        key: "tenant",
                        value: Some("eu"),
                    })
                    .insert(Header {
                        key: "content-type",
                        value: Some("application/json"),
                    });
                let producer = &self.producer;
                let topic = &topic;
                async move {
                    producer
                        .send(
                            FutureRecord::to(topic)
                                .key(&id)
                                .payload(&payload)
                                .headers(headers),
                            Duration::from_secs(10),
                        )
                        .await
                        .map_err(|(e, _)| e)
                        .expect("the broker acknowledges the record");
                }
            });
            futures_util::future::join_all(sends).await;
        });
    }

    /// Write `records` to `topic` (a full name), all sent at once and each acknowledged:
    /// the idempotent producer keeps their order within each partition.
    pub fn produce_all(&self, topic: &str, records: &[Produced]) {
        self.runtime.block_on(async {
            let sends = records.iter().map(|record| {
                let headers: Vec<(&str, &[u8])> = record
                    .headers
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_bytes()))
                    .collect();
                self.producer.send(
                    FutureRecord::to(topic)
                        .key(&record.key)
                        .payload(&record.payload)
                        .headers(owned_headers(&headers)),
                    Duration::from_secs(10),
                )
            });
            for sent in futures_util::future::join_all(sends).await {
                sent.map_err(|(e, _)| e)
                    .expect("the broker acknowledges the record");
            }
        });
    }

    /// Write one record to `topic` (a full name) with `headers`, acknowledged.
    pub fn produce(&self, topic: &str, key: &str, payload: &[u8], headers: &[(&str, &[u8])]) {
        let owned = owned_headers(headers);
        self.runtime
            .block_on(
                self.producer.send(
                    FutureRecord::to(topic)
                        .key(key)
                        .payload(payload)
                        .headers(owned),
                    Duration::from_secs(10),
                ),
            )
            .map_err(|(e, _)| e)
            .expect("the broker acknowledges the record");
    }

    /// Records in `topic` (every partition), as the broker counts them.
    pub fn depth(&self, topic: &str) -> u64 {
        let consumer = self.reader();
        let partitions = self.partitions(&consumer, topic);
        partitions
            .iter()
            .map(|&p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(5))
                    .map_or(0, |(low, high)| (high - low).max(0) as u64)
            })
            .sum()
    }

    /// Every record of `topic`, read from the start of each partition.
    pub fn records(&self, topic: &str) -> Vec<OwnedMessage> {
        let consumer = self.reader();
        let partitions = self.partitions(&consumer, topic);
        let mut out = Vec::new();
        for p in partitions {
            let Ok((low, high)) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5))
            else {
                continue;
            };
            if high <= low {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, p, Offset::Offset(low))
                .expect("a partition");
            consumer.assign(&tpl).expect("assigned");
            let mut next = low;
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while next < high && std::time::Instant::now() < deadline {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                    next = m.offset() + 1;
                    out.push(m.detach());
                }
            }
        }
        out
    }

    /// Whether the group has committed every record of the route topic `orders`.
    pub fn drained(&self) -> bool {
        let topic = self.topic("orders");
        let consumer: BaseConsumer = client(&self.bootstrap, &self.settings)
            .set("group.id", self.group())
            .create()
            .expect("a consumer of the group");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(&topic, p);
        }
        let Ok(committed) = consumer.committed_offsets(tpl, Duration::from_secs(5)) else {
            return false;
        };
        (0..PARTITIONS).all(|p| {
            let high = consumer
                .fetch_watermarks(&topic, p, Duration::from_secs(5))
                .map_or(-1, |(_, high)| high);
            committed
                .find_partition(&topic, p)
                .is_some_and(|e| e.offset() == Offset::Offset(high) || high == 0)
        })
    }

    /// The value of the last header `name` of `record`.
    pub fn header(record: &OwnedMessage, name: &str) -> Option<Vec<u8>> {
        let headers = record.headers()?;
        headers
            .iter()
            .filter(|h| h.key == name)
            .last()
            .and_then(|h| h.value.map(<[u8]>::to_vec))
    }

    /// Poll `check` every 100 ms until it holds or `limit` passes.
    pub fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        crate::wait_for(limit, check)
    }

    fn reader(&self) -> BaseConsumer {
        client(&self.bootstrap, &self.settings)
            .set("group.id", format!("{}.reader", self.prefix))
            .set("enable.auto.commit", "false")
            .create()
            .expect("a reader")
    }

    fn partitions(&self, consumer: &BaseConsumer, topic: &str) -> Vec<i32> {
        consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|m| {
                m.topics()
                    .first()
                    .map(|t| t.partitions().iter().map(|p| p.id()).collect())
            })
            .unwrap_or_default()
    }
}

/// `headers` (name, value) as a record's.
fn owned_headers(headers: &[(&str, &[u8])]) -> OwnedHeaders {
    let mut owned = OwnedHeaders::new_with_capacity(headers.len());
    for (name, value) in headers {
        owned = owned.insert(Header {
            key: name,
            value: Some(*value),
        });
    }
    owned
}

fn client(bootstrap: &str, settings: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (k, v) in settings {
        config.set(k, v);
    }
    config
}

fn admin(bootstrap: &str, settings: &[(String, String)]) -> AdminClient<DefaultClientContext> {
    client(bootstrap, settings)
        .create()
        .expect("an admin client")
}

impl Drop for KafkaFixture {
    fn drop(&mut self) {
        // Every topic of this test: its route topic, DLQ, audit and retry topics.
        let consumer = self.reader();
        let Ok(metadata) = consumer.fetch_metadata(None, Duration::from_secs(5)) else {
            return;
        };
        let mine: Vec<String> = metadata
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .filter(|n| n.starts_with(&self.prefix))
            .collect();
        let names: Vec<&str> = mine.iter().map(String::as_str).collect();
        if !names.is_empty() {
            let _ = self.runtime.block_on(
                admin(&self.bootstrap, &self.settings).delete_topics(&names, &AdminOptions::new()),
            );
        }
    }
}
