//! A private corner of the RabbitMQ server on 127.0.0.1:5672 for one test: its own queues,
//! delay buckets and audit queue, all deleted when it is dropped.

use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use verdict_gateway::sources::rabbitmq::topology::delay_names;

/// The server the tests use (started by `.ci/run` when down).
pub const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// One test's names.
pub struct RabbitFixture {
    /// Unique prefix of every name.
    pub prefix: String,
    conn: Connection,
    // Its own runtime: the gateway's stops when the gateway is dropped, and the fixture
    // cleans up after that.
    runtime: tokio::runtime::Runtime,
}

impl RabbitFixture {
    /// Names unique to `name` in this process.
    pub fn new(name: &str) -> RabbitFixture {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let conn = runtime
            .block_on(Connection::connect(URL, ConnectionProperties::default()))
            .expect("RabbitMQ runs on 127.0.0.1:5672 (.ci/run starts it)");
        let fixture = RabbitFixture {
            prefix: format!("t{}.{name}", std::process::id()),
            conn,
            runtime,
        };
        fixture.clean();
        fixture
    }

    /// The queue (and route topic) `topic` of this test.
    pub fn queue(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// The `[rabbitmq]` section of this test's gateways.
    pub fn section(&self) -> String {
        format!(
            "[rabbitmq]\nurl = \"{URL}\"\nprefetch = 32\ndelay_prefix = \"{p}.delay\"\naudit_queue = \"{p}.audit\"\n",
            p = self.prefix
        )
    }

    fn channel(&self) -> Channel {
        self.runtime
            .block_on(self.conn.create_channel())
            .expect("a channel")
    }

    /// Publish `m-<i>` (as `message_id`) to the queue of `topic`, confirmed.
    pub fn publish(&self, topic: &str, ids: std::ops::Range<u32>) {
        let messages = ids
            .map(|i| {
                let mut headers = FieldTable::default();
                headers.insert(
                    "tenant".into(),
                    AMQPValue::LongString(LongString::from("eu")),
                );
                let properties = BasicProperties::default()
                    .with_message_id(ShortString::from(format!("m-{i}")))
                    .with_content_type("application/json".into())
                    .with_headers(headers);
                (properties, format!(r#"{{"order": {i}}}"#).into_bytes())
            })
            .collect();
        self.publish_all(topic, messages);
    }

    /// Publish one message to the queue of `topic` (declared when missing), confirmed.
    pub fn publish_raw(&self, topic: &str, properties: BasicProperties, payload: &[u8]) {
        self.publish_all(topic, vec![(properties, payload.to_vec())]);
    }

    /// Publish `messages` (persistent) to the queue of `topic`, declared when missing, and
    /// wait for every confirm.
    fn publish_all(&self, topic: &str, messages: Vec<(BasicProperties, Vec<u8>)>) {
        let queue = self.queue(topic);
        let channel = self.channel();
        self.runtime.block_on(async {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions::durable(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            let mut confirms = Vec::new();
            for (properties, payload) in messages {
                confirms.push(
                    channel
                        .basic_publish(
                            "".into(),
                            queue.as_str().into(),
                            BasicPublishOptions::default(),
                            &payload,
                            properties.with_delivery_mode(2),
                        )
                        .await
                        .unwrap(),
                );
            }
            futures_util::stream::iter(confirms)
                .for_each(|c| async move {
                    assert!(c.await.unwrap().is_ack());
                })
                .await;
        });
    }

    /// Messages ready in `queue`, as the broker counts them.
    pub fn depth(&self, queue: &str) -> u64 {
        let channel = self.channel();
        self.runtime
            .block_on(channel.queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ))
            .map_or(0, |q| u64::from(q.message_count()))
    }

    /// Whether `queue` exists (a passive declare, on a channel of its own).
    pub fn exists(&self, queue: &str) -> bool {
        let channel = self.channel();
        self.runtime
            .block_on(channel.queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ))
            .is_ok()
    }

    /// Open connections whose client calls itself `name`, as `rabbitmqctl` lists them.
    pub fn connections_named(&self, name: &str) -> usize {
        let out = std::process::Command::new("rabbitmqctl")
            .args(["list_connections", "client_properties"])
            .output()
            .expect("rabbitmqctl runs (the broker tests run as root beside the server)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("\"{name}\"")))
            .count()
    }

    /// Take every message of `queue` (consuming them): (headers, body).
    pub fn take_all(&self, queue: &str) -> Vec<(BasicProperties, Vec<u8>)> {
        let channel = self.channel();
        self.runtime.block_on(async {
            let mut out = Vec::new();
            while let Ok(Some(m)) = channel
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
            {
                out.push((m.delivery.properties.clone(), m.delivery.data.clone()));
            }
            out
        })
    }

    /// Wait until `check` holds (at most `limit`).
    pub fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        crate::wait_for(limit, check)
    }

    fn clean(&self) {
        let mut queues = vec![format!("{}.audit", self.prefix)];
        for topic in ["orders", "other"] {
            queues.push(self.queue(topic));
            queues.push(format!("{}.DLQ", self.queue(topic)));
        }
        let buckets = delay_names(&format!("{}.delay", self.prefix));
        queues.extend(buckets.iter().cloned());
        self.runtime.block_on(async {
            // A failed delete closes its channel: one channel each.
            for q in &queues {
                if let Ok(ch) = self.conn.create_channel().await {
                    let _ = ch
                        .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                        .await;
                }
            }
            for e in &buckets {
                if let Ok(ch) = self.conn.create_channel().await {
                    let _ = ch
                        .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
                        .await;
                }
            }
        });
    }
}

impl Drop for RabbitFixture {
    fn drop(&mut self) {
        self.clean();
    }
}
