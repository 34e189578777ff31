//! Broker restarts: the NATS server and the RabbitMQ node this machine runs (or a `--tls`
//! run's own TLS-only NATS server), stopped and started again while a run is publishing and
//! the gateway is delivering.
//!
//! Both are graceful stops (SIGTERM for NATS, `rabbitmqctl stop_app` for RabbitMQ): a
//! broker's own durability on a crash is the broker's guarantee to test, not Verdict's. What
//! the gateway must survive is every connection, consumer and unconfirmed publish dying at
//! once, and the broker coming back with the same streams and queues.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::sources::{Source, SourceName};

/// Stop the broker of `source`, keep it down for `down`, start it again and wait until it
/// takes connections.
pub fn restart(source: &Source, down: Duration) -> Result<()> {
    match source.name {
        SourceName::Embedded => Ok(()),
        // The run's own database: its connections cut, twice `down` apart (the gateways'
        // reconnections meet the second), the server itself left alone.
        SourceName::Postgres | SourceName::Mysql => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(source.cut_store_connections())?;
            std::thread::sleep(down);
            runtime.block_on(source.cut_store_connections())?;
            Ok(())
        }
        SourceName::Nats => match source.tls_nats() {
            Some(server) => {
                server
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .restart(down)?;
                // JetStream recovers its streams after the port opens.
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            }
            None => restart_nats(down),
        },
        SourceName::Rabbitmq => restart_rabbitmq(down),
    }
}

/// Whether something listens on loopback `port`.
pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    )
    .is_ok()
}

fn wait_port(port: u16, open: bool, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    while port_open(port) != open {
        if Instant::now() > deadline {
            bail!(
                "port {port} did not {} within {limit:?}",
                if open { "open" } else { "close" }
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The running `nats-server` listening on 4222: its pid and command line.
fn nats_process() -> Result<(u32, Vec<String>)> {
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_nats = args.first().is_some_and(|a| {
            PathBuf::from(a)
                .file_name()
                .is_some_and(|n| n == "nats-server")
        });
        if is_nats && args.windows(2).any(|w| w[0] == "-p" && w[1] == "4222") {
            return Ok((pid, args));
        }
    }
    bail!("no nats-server with `-p 4222` runs here (.ci/run starts one)")
}

fn restart_nats(down: Duration) -> Result<()> {
    let (pid, args) = nats_process()?;
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -TERM {pid} (nats-server) failed: {status}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            bail!("nats-server {pid} did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(down);
    // In a session of its own, so it outlives this process as the original did.
    Command::new("setsid")
        .arg("-f")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("starting {}", args.join(" ")))?;
    wait_port(4222, true, Duration::from_secs(60))?;
    // JetStream recovers its streams after the port opens: give it the moment it needs.
    std::thread::sleep(Duration::from_millis(500));
    Ok(())
}

fn rabbitmqctl(arg: &str) -> Result<()> {
    let out = Command::new("rabbitmqctl")
        .arg(arg)
        .output()
        .with_context(|| format!("rabbitmqctl {arg}"))?;
    if !out.status.success() {
        bail!(
            "rabbitmqctl {arg} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn restart_rabbitmq(down: Duration) -> Result<()> {
    rabbitmqctl("stop_app")?;
    wait_port(5672, false, Duration::from_secs(30))?;
    std::thread::sleep(down);
    rabbitmqctl("start_app")?;
    wait_port(5672, true, Duration::from_secs(120))
}
