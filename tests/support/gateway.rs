//! A gateway (`verdict run` as a library) on an ephemeral loopback port, for tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use verdict_cli::client::AdminClient;
use verdict_gateway::store::Store;
use verdict_registry::Registry;

/// A running gateway; stops when dropped.
pub struct Gateway {
    /// Its registry.
    pub registry: Arc<Registry>,
    /// Its store.
    pub store: Arc<Store>,
    /// A client that sends the token.
    pub admin: AdminClient,
    /// A client that sends no token.
    pub anonymous: AdminClient,
    /// The admin API's base URL.
    pub url: String,
    /// The directory of its config.
    pub dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The runtime it runs on (also usable for helpers such as a test consumer).
    pub runtime: tokio::runtime::Runtime,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Gateway {
    /// Write `config` to `dir/verdict.toml` (and `token` to `dir/token`, for a config with
    /// `token_file = "token"`) and start a gateway on it; `token` is what the `admin` client
    /// sends.
    pub fn start(dir: &Path, config: &str, token: &str) -> Gateway {
        Self::start_on(tokio::runtime::Runtime::new().unwrap(), dir, config, token)
    }

    /// The same on a given runtime (one that already runs a test consumer, say).
    pub fn start_on(
        runtime: tokio::runtime::Runtime,
        dir: &Path,
        config: &str,
        token: &str,
    ) -> Gateway {
        std::fs::write(dir.join("verdict.toml"), config).unwrap();
        // For configs that name `token_file = "token"`.
        std::fs::write(dir.join("token"), token).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = runtime
            .block_on(verdict_gateway::Gateway::start(
                &dir.join("verdict.toml"),
                async {
                    let _ = stopped.await;
                },
            ))
            .expect("the gateway starts");
        let url = format!("http://{}", running.admin);
        let registry = running.registry.clone();
        let store = running.store.clone();
        runtime.spawn(running.wait());
        Gateway {
            registry,
            store,
            admin: AdminClient::new(&url, Some(token.into())),
            anonymous: AdminClient::new(&url, None),
            url,
            dir: dir.to_path_buf(),
            stop: Some(stop),
            runtime,
        }
    }

    /// Wait until `/readyz` says ready (a broker source has connected and set up its
    /// streams or queues); panics with the last answer if it does not within 20 s.
    pub fn wait_ready(&self) {
        let ready = crate::wait_for(std::time::Duration::from_secs(20), || {
            self.anonymous
                .get_text("/readyz")
                .is_ok_and(|t| t == "ready\n")
        });
        assert!(ready, "{:?}", self.anonymous.get_text("/readyz"));
    }

    /// Deliveries this gateway made that the consumer accepted (`/metrics`).
    pub fn delivered(&self) -> u64 {
        let metrics = self.anonymous.get_text("/metrics").unwrap();
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("verdict_deliveries_total{") && l.contains("outcome=\"delivered\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}
