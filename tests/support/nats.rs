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

    /// Whether the stream `name` exists.
    pub fn stream_exists(&self, name: &str) -> bool {
        self.runtime.block_on(self.js.get_stream(name)).is_ok()
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

    /// The (pending, ack-pending) counts of the durable consumers whose names start with
    /// `durable` (the gateway's: one per route), added up.
    pub fn pending(&self, durable: &str) -> (u64, usize) {
        self.consumers(durable)
            .iter()
            .fold((0, 0), |(p, a), (_, pending, acks)| (p + pending, a + acks))
    }

    /// (name, pending, ack-pending) of each durable consumer of this test's stream whose
    /// name starts with `prefix`.
    pub fn consumers(&self, prefix: &str) -> Vec<(String, u64, usize)> {
        use futures_util::TryStreamExt as _;
        self.runtime.block_on(async {
            let stream = self.js.get_stream(&self.prefix).await.expect("stream");
            let infos: Vec<_> = stream
                .consumers()
                .try_collect()
                .await
                .expect("consumer list");
            infos
                .into_iter()
                .filter(|i| i.name.starts_with(prefix))
                .map(|i| (i.name.clone(), i.num_pending, i.num_ack_pending))
                .collect()
        })
    }

    /// Publish one message to `topic` with these headers and payload, confirmed.
    pub fn publish_raw(&self, topic: &str, headers: HeaderMap, payload: Vec<u8>) {
        let subject = self.subject(topic);
        self.runtime.block_on(async {
            self.js
                .publish_with_headers(subject, headers, payload.into())
                .await
                .expect("publish")
                .await
                .expect("PubAck");
        });
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
