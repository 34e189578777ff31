//! This test's corner of the NATS server on loopback (127.0.0.1:4222, JetStream): streams,
//! a history bucket and durable consumers under one prefix, removed at the end.

use std::time::Duration;

use verdict_tests::gateway::TestConfig;

/// This test's corner of the NATS server on loopback: its stream, DLQ and audit streams,
/// history bucket and durable consumers, removed at the end.
pub struct Nats {
    /// The prefix of every name.
    pub prefix: String,
    /// JetStream, for what a test asks beyond these helpers.
    pub js: async_nats::jetstream::Context,
    /// The runtime the client runs on.
    pub runtime: tokio::runtime::Runtime,
}

impl Nats {
    /// This test's corner, named after `name`; whatever a crashed run left is removed.
    pub fn new(name: &str) -> Nats {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let js = runtime
            .block_on(async {
                async_nats::connect("nats://127.0.0.1:4222")
                    .await
                    .map(async_nats::jetstream::new)
            })
            .expect("NATS with JetStream on 127.0.0.1:4222 (.ci/run starts it)");
        let nats = Nats {
            prefix: format!("rl{}{name}", std::process::id()),
            js,
            runtime,
        };
        nats.clean();
        nats
    }

    /// `config` for a gateway on this corner: its `[gateway]` names and the `[nats]` section.
    pub fn configure(&self, config: TestConfig) -> TestConfig {
        self.configure_at(config, "nats://127.0.0.1:4222")
    }

    /// The same, connecting to `url`.
    pub fn configure_at(&self, config: TestConfig, url: &str) -> TestConfig {
        let p = &self.prefix;
        config
            .set("gateway.instance", "gw-reload")
            .set("gateway.consumer_group", p.as_str())
            .set("nats.url", url)
            .set("nats.stream", p.as_str())
            .set("nats.dlq_stream", format!("{p}_DLQ"))
            .set("nats.dlq_subject_prefix", format!("{p}dlq"))
            .set("nats.audit_stream", format!("{p}_AUDIT"))
            .set("nats.audit_subject_prefix", format!("{p}audit"))
            .set("nats.history_bucket", format!("{p}-history"))
            .set("nats.ack_wait_ms", 5000)
    }

    pub fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// Publish `ids` to `topic`, each confirmed by the stream.
    pub fn publish(&self, topic: &str, ids: &[String]) {
        let subject = self.subject(topic);
        self.runtime.block_on(async {
            for id in ids {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", id.as_str());
                self.js
                    .publish_with_headers(subject.clone(), headers, b"{}".to_vec().into())
                    .await
                    .expect("publish")
                    .await
                    .unwrap_or_else(|e| panic!("no stream confirmed {id} on {subject}: {e}"));
            }
        });
    }

    /// (error kind, original id) of every dead letter.
    pub fn dead_letters(&self) -> Vec<(String, String)> {
        self.runtime.block_on(async {
            let Ok(mut stream) = self.js.get_stream(format!("{}_DLQ", self.prefix)).await else {
                return Vec::new();
            };
            let state = stream.info().await.unwrap().state.clone();
            let mut out = Vec::new();
            for seq in state.first_sequence..=state.last_sequence {
                if let Ok(m) = stream.get_raw_message(seq).await {
                    let kind = m
                        .headers
                        .get("verdict-kind")
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    let e: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                    out.push((kind, e["original"]["id"].as_str().unwrap().to_string()));
                }
            }
            out.sort();
            out
        })
    }

    /// (durable name, pending, ack pending) of each of the gateway's consumers.
    pub fn consumers(&self) -> Vec<(String, u64, usize)> {
        use futures_util::TryStreamExt as _;
        // A listing made while the gateway deletes a consumer can come back malformed:
        // ask again.
        for _ in 0..10 {
            let listed = self.runtime.block_on(async {
                let Ok(stream) = self.js.get_stream(&self.prefix).await else {
                    return Ok(Vec::new());
                };
                stream.consumers().try_collect::<Vec<_>>().await
            });
            match listed {
                Ok(infos) => {
                    return infos
                        .into_iter()
                        .map(|i| (i.name, i.num_pending, i.num_ack_pending))
                        .collect();
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        panic!("the stream's consumers could not be listed")
    }

    /// The description the gateway wrote on the durable consumer of `route` (its lives).
    pub fn description_of(&self, topic: &str) -> Option<String> {
        let name =
            verdict_gateway::sources::nats::route_durable(&self.prefix, &self.subject(topic));
        self.runtime.block_on(async {
            let stream = self.js.get_stream(&self.prefix).await.ok()?;
            let info = stream.consumer_info(&name).await.ok()?;
            info.config.description.clone()
        })
    }

    /// Write `description` on the durable consumer of `route`, nothing else changed: what a
    /// gateway that stopped part-way through a change would have left there.
    pub fn set_description_of(&self, topic: &str, description: &str) {
        let name =
            verdict_gateway::sources::nats::route_durable(&self.prefix, &self.subject(topic));
        self.runtime.block_on(async {
            let stream = self.js.get_stream(&self.prefix).await.unwrap();
            let mut config = stream.consumer_info(&name).await.unwrap().config.clone();
            config.description = Some(description.to_string());
            stream.create_consumer(config).await.unwrap();
        });
    }

    /// Whether the durable consumer of `route` exists.
    pub fn has_consumer_of(&self, topic: &str) -> bool {
        let name =
            verdict_gateway::sources::nats::route_durable(&self.prefix, &self.subject(topic));
        self.consumers().iter().any(|(n, _, _)| *n == name)
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

impl Drop for Nats {
    fn drop(&mut self) {
        self.clean();
    }
}
