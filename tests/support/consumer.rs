//! The demo consumer ([`verdict_cli::demo`]) on an ephemeral port, for gateway tests.

use std::collections::HashMap;
use std::net::SocketAddr;

pub use verdict_cli::demo::Behaviour;
use verdict_cli::demo::DemoConsumer;

/// A running consumer.
#[derive(Clone)]
pub struct Consumer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state.
    pub demo: DemoConsumer,
}

impl Consumer {
    /// Start on an ephemeral port on `runtime`, treating each id by `rule`.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        rule: impl Fn(&str) -> Behaviour + Send + Sync + 'static,
    ) -> Consumer {
        let demo = DemoConsumer::new(rule);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binding the consumer");
        let addr = listener.local_addr().unwrap();
        let router = demo.router();
        runtime.spawn(async move { axum::serve(listener, router).await });
        Consumer { addr, demo }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Deliveries and 2xx answers per message id.
    pub fn snapshot(&self) -> (HashMap<String, u32>, HashMap<String, u32>) {
        let seen = self.demo.seen();
        (seen.deliveries, seen.accepted)
    }
}
