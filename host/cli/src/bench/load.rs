//! The load generator: the consumer the messages go to and the producer that publishes
//! them, on a runtime of their own whose threads are named [`THREADS`], so their CPU can be
//! told apart from the gateway's.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::demo::{DemoConsumer, by_percent};
use verdict_gateway::admin::tls::TlsListener;
use verdict_gateway::sources::AbortOnDrop;

/// The name of every load-generator thread.
pub(crate) const THREADS: &str = "verdict-load";

/// A runtime for the consumer and the producer.
pub(crate) struct Load {
    runtime: tokio::runtime::Runtime,
}

/// A demo consumer served on the load runtime until dropped.
pub(crate) struct Consumer {
    /// Where it listens.
    pub(crate) url: String,
    /// What it has seen.
    pub(crate) demo: DemoConsumer,
    _server: AbortOnDrop,
}

impl Load {
    pub(crate) fn new() -> Result<Load> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name(THREADS)
            // Exited threads' CPU could no longer be told apart from the gateway's.
            .thread_keep_alive(Duration::from_secs(24 * 3600))
            .enable_all()
            .build()
            .context("starting the load generator's runtime")?;
        Ok(Load { runtime })
    }

    /// The runtime's handle, to spawn producers on.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// A fresh consumer failing `transient_pct`% of message ids 1 to 3 times and
    /// `permanent_pct`% always (by id, so every target sees the same failures); over HTTPS
    /// with `tls`.
    pub(crate) async fn consumer(
        &self,
        transient_pct: u32,
        permanent_pct: u32,
        tls: Option<Arc<verdict_tls::rustls::ServerConfig>>,
    ) -> Result<Consumer> {
        let demo = DemoConsumer::new(by_percent(transient_pct, permanent_pct));
        let router = demo.router();
        let listener = self
            .runtime
            .spawn(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .await?
            .context("binding the bench consumer to 127.0.0.1")?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}/", listener.local_addr()?);
        let server = self.runtime.spawn(async move {
            let served = match tls {
                Some(tls) => match TlsListener::new(listener, tls) {
                    Ok(listener) => axum::serve(listener, router).await,
                    Err(e) => Err(e),
                },
                None => axum::serve(listener, router).await,
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "the bench consumer stopped");
            }
        });
        Ok(Consumer {
            url,
            demo,
            _server: AbortOnDrop(server),
        })
    }

    /// A stand-in for an OTLP collector on the load runtime (its CPU counted apart, as a
    /// collector elsewhere would be): it takes every OTLP/HTTP export, counts its bytes and
    /// answers at once. Served until dropped; its base URL.
    pub(crate) async fn collector(&self) -> Result<Collector> {
        let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = received.clone();
        let router = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                counted.fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
                async { axum::http::StatusCode::OK }
            }),
        );
        let listener = self
            .runtime
            .spawn(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .await?
            .context("binding the bench's OTLP collector to 127.0.0.1")?;
        let url = format!("http://{}", listener.local_addr()?);
        let server = self.runtime.spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "the bench's OTLP collector stopped");
            }
        });
        Ok(Collector {
            url,
            received,
            _server: AbortOnDrop(server),
        })
    }
}

/// The OTLP collector stand-in ([`Load::collector`]).
pub(crate) struct Collector {
    /// Its base URL.
    pub(crate) url: String,
    /// Bytes of spans it received.
    pub(crate) received: Arc<std::sync::atomic::AtomicU64>,
    _server: AbortOnDrop,
}
