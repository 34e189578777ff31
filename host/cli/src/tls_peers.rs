//! Peers that speak TLS, made for one run: a throwaway CA, server certificates it signed
//! for 127.0.0.1, and a `nats-server` that takes TLS connections only. `verdict bench`'s TLS
//! targets and the torture harness's `--tls` runs use them, so each differs from its plain
//! twin only in the hops it encrypts - and the gateway verifies every certificate as it would
//! in production (a plaintext peer, or one the CA did not sign, fails every delivery).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use verdict_tls::test_pki::{Leaf, Pki};

/// A CA of the run's own and the server certificates it signed; its files are removed when
/// dropped.
pub struct Certificates {
    pki: Pki,
    consumer: Leaf,
    nats: Leaf,
}

impl Certificates {
    /// A fresh CA named `name` (its files under the system temp directory).
    pub fn new(name: &str) -> Certificates {
        let pki = Pki::new(name);
        let consumer = pki.server("consumer", &["127.0.0.1", "localhost"]);
        let nats = pki.server("nats", &["127.0.0.1", "localhost"]);
        Certificates {
            pki,
            consumer,
            nats,
        }
    }

    /// The CA certificate: the `ca_file` the gateway's TLS settings name.
    pub fn ca_file(&self) -> &Path {
        self.pki.ca_file()
    }

    /// A consumer's server side (no client certificate asked for).
    pub fn consumer(&self) -> Result<Arc<verdict_tls::rustls::ServerConfig>> {
        verdict_tls::server_config("consumer", &self.consumer.cert, &self.consumer.key, None)
            .context("the consumer's TLS settings")
    }

    /// The gateway config's `tls = { ... }` table trusting this CA.
    pub fn table(&self) -> String {
        format!(
            "tls = {{ ca_file = {} }}",
            toml::Value::String(self.ca_file().display().to_string())
        )
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.pki.dir());
    }
}

/// A `nats-server` with JetStream that takes TLS connections only, on a free loopback port,
/// its store in a directory of its own; stopped and removed when dropped.
pub struct TlsNats {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl TlsNats {
    /// Start one (Debian's `nats-server` on PATH) with its files under `dir`, serving the
    /// certificate `certificates` made for NATS, and wait until it listens.
    pub fn start(dir: &Path, certificates: &Certificates) -> Result<TlsNats> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for the TLS nats-server")?
            .port();
        let quoted = |p: &Path| serde_json::Value::String(p.display().to_string()).to_string();
        let config = format!(
            "listen: \"127.0.0.1:{port}\"\n\
             jetstream {{ store_dir: {store} }}\n\
             tls {{ cert_file: {cert}, key_file: {key}, timeout: 2 }}\n",
            store = quoted(&dir.join("js")),
            cert = quoted(&certificates.nats.cert),
            key = quoted(&certificates.nats.key),
        );
        std::fs::write(dir.join("nats.conf"), config)?;
        let mut server = TlsNats {
            child: None,
            port,
            dir: dir.to_path_buf(),
        };
        server.spawn()?;
        Ok(server)
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.port)
    }

    /// Stop it gracefully (SIGTERM), keep it down for `down`, start it again on the same
    /// port and store, and wait until it listens.
    pub fn restart(&mut self, down: Duration) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("the TLS nats-server {pid} did not stop within 30 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(down);
        self.spawn()
    }

    fn spawn(&mut self) -> Result<()> {
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(self.dir.join("nats.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting `nats-server` with TLS (is it on PATH?)")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        while std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300)).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("the TLS nats-server exited at start ({status})");
            }
            if Instant::now() > deadline {
                bail!("the TLS nats-server did not listen on {address} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for TlsNats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
