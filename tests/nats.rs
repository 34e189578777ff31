//! A private corner of the NATS server on 127.0.0.1:4222 for one test: its own stream,
//! DLQ and audit streams, history bucket and subjects, all deleted when it is dropped.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;

/// The server the tests use (started by `.ci/run` when down).
pub const URL: &str = "nats://127.0.0.1:4222";

/// One test's names.
pub struct NatsFixture {
    /// Unique prefix of every name (`t<pid>x<n>`).
    pub prefix: String,
    /// The client.
    pub js: jetstream::Context,
    // Its own runtime: the gateway's stops when the gateway is dropped, and the fixture
    // cleans up after that.
    runtime: tokio::runtime::Runtime,
}

impl NatsFixture {
    /// Names unique to `name` in this process.
    pub fn new(name: &str) -> NatsFixture {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let prefix = format!("t{}{name}", std::process::id());
        // The JetStream context spawns a task: build it inside the runtime.
        let js = runtime
            .block_on(async { async_nats::connect(URL).await.map(jetstream::new) })
            .expect("NATS runs on 127.0.0.1:4222 (.ci/run starts it)");
        let fixture = NatsFixture {
            prefix,
            js,
            runtime,
        };
        fixture.clean();
        fixture
    }

    /// The subject (and route topic) `topic` of this test.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// The `[nats]` section of this test's gateways.
    pub fn section(&self) -> String {
        let p = &self.prefix;
        format!(
            r#"[nats]
url = "{URL}"
stream = "{p}"
dlq_stream = "{p}_DLQ"
dlq_subject_prefix = "{p}dlq"
audit_stream = "{p}_AUDIT"
audit_subject_prefix = "{p}audit"
history_bucket = "{p}-history"
ack_wait_ms = 5000
"#
        )
    }

    /// The DLQ subject of dead letters of `topic` (suffix naming).
    pub fn dlq_subject(&self, topic: &str) -> String {
        format!("{}dlq.{}.DLQ", self.prefix, self.subject(topic))
    }

    /// Publish `n` messages `m-<i>` (id in `Nats-Msg-Id`) to `topic`, confirmed.
    pub fn publish(&self, topic: &str, ids: std::ops::Range<u32>) {
        let subject = self.subject(topic);
        self.runtime.block_on(async {
            let mut acks = Vec::new();
            for i in ids {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("m-{i}").as_str());
                headers.insert("tenant", "eu");
                let payload = format!(r#"{{"order": {i}}}"#);
                acks.push(
                    self.js
                        .publish_with_headers(subject.clone(), headers, payload.into())
                        .await
                        .expect("publish"),
                );
            }
            for ack in acks {
                ack.await.expect("PubAck");
            }
        });
    }

    /// Messages in a stream of this test (`""`, `"_DLQ"`, `"_AUDIT"`), oldest first.
    pub fn messages(&self, stream_suffix: &str) -> Vec<jetstream::message::StreamMessage> {
        let name = format!("{}{stream_suffix}", self.prefix);
        self.runtime.block_on(async {
            let Ok(mut stream) = self.js.get_stream(&name).await else {
                return Vec::new();
            };
            let info = stream.info().await.expect("stream info").state.clone();
            let mut out = Vec::new();
            if info.messages == 0 {
                return out;
            }
            for seq in info.first_sequence..=info.last_sequence {
                if let Ok(m) = stream.get_raw_message(seq).await {
                    out.push(m);
                }
            }
            out
        })
    }

    /// The durable consumer's (pending, ack-pending) counts.
    pub fn pending(&self, durable: &str) -> (u64, usize) {
        self.runtime.block_on(async {
            let stream = self.js.get_stream(&self.prefix).await.expect("stream");
            let mut consumer: jetstream::consumer::PullConsumer =
                stream.get_consumer(durable).await.expect("consumer");
            let info = consumer.info().await.expect("consumer info");
            (info.num_pending, info.num_ack_pending)
        })
    }

    /// Wait until `check` holds (at most `limit`).
    pub fn wait_for(&self, limit: Duration, check: impl FnMut() -> bool) -> bool {
        crate::wait_for(limit, check)
    }

    fn clean(&self) {
        let p = self.prefix.clone();
        self.runtime.block_on(async {
            for name in [p.clone(), format!("{p}_DLQ"), format!("{p}_AUDIT")] {
                let _ = self.js.delete_stream(&name).await;
            }
            let _ = self.js.delete_key_value(format!("{p}-history")).await;
        });
    }
}

impl Drop for NatsFixture {
    fn drop(&mut self) {
        self.clean();
    }
}
