//! Broker restarts: the NATS server and the RabbitMQ node this machine runs (or a `--tls`
//! run's own TLS-only NATS server) - and with `--restart-databases` its PostgreSQL and
//! MariaDB servers - stopped and started again while a run is publishing and the gateway
//! is delivering. Not the Kafka broker: the one `.ci/run` starts keeps its records in
//! memory only.
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
/// takes connections. On a SQL store, `restart_databases` restarts the machine's database
/// server itself; otherwise the run's own connections are cut and the server left alone.
pub fn restart(source: &Source, down: Duration, restart_databases: bool) -> Result<()> {
    match source.name {
        SourceName::Embedded => Ok(()),
        SourceName::Postgres if restart_databases => restart_postgres(down),
        SourceName::Mysql if restart_databases => restart_mariadb(down),
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
        // Never asked (`SourceName::broker_fault`): the Kafka broker `.ci/run` starts keeps
        // its records in memory, and a restart would lose them.
        SourceName::Kafka => bail!(
            "the Kafka broker is never restarted: it keeps its records in memory, and a \
             restart would lose them"
        ),
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

/// The running process whose program is named `program` and whose arguments pass
/// `wanted`: its pid and command line.
fn process(program: &str, wanted: impl Fn(&[String]) -> bool) -> Option<(u32, Vec<String>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
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
        let named = args
            .first()
            .is_some_and(|a| PathBuf::from(a).file_name().is_some_and(|n| n == program));
        if named && wanted(&args) {
            return Some((pid, args));
        }
    }
    None
}

/// Stop process `pid` (`what`) with SIGTERM and wait until it is gone.
fn terminate(pid: u32, what: &str, limit: Duration) -> Result<()> {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()?;
    if !status.success() {
        bail!("kill -TERM {pid} ({what}) failed: {status}");
    }
    let deadline = Instant::now() + limit;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            bail!("{what} {pid} did not stop within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn restart_nats(down: Duration) -> Result<()> {
    let (pid, args) = process("nats-server", |args| {
        args.windows(2).any(|w| w[0] == "-p" && w[1] == "4222")
    })
    .context("no nats-server with `-p 4222` runs here (.ci/run starts one)")?;
    terminate(pid, "nats-server", Duration::from_secs(30))?;
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

/// The machine's PostgreSQL cluster, stopped (`-m fast`: every session ended, as in a
/// restart for maintenance) and started again as `.ci/run` starts it.
fn restart_postgres(down: Duration) -> Result<()> {
    let version = std::fs::read_dir("/etc/postgresql")
        .context("/etc/postgresql: no PostgreSQL cluster here")?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .min()
        .context("/etc/postgresql holds no cluster")?;
    let cluster = |action: &str| -> Result<()> {
        let mut args = vec!["--skip-systemctl-redirect", &version, "main", action];
        if action == "stop" {
            args.extend(["-m", "fast"]);
        }
        let out = Command::new("pg_ctlcluster")
            .args(&args)
            .output()
            .with_context(|| format!("pg_ctlcluster {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "pg_ctlcluster {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    cluster("stop")?;
    wait_port(5432, false, Duration::from_secs(30))?;
    std::thread::sleep(down);
    cluster("start")?;
    wait_port(5432, true, Duration::from_secs(60))
}

/// The machine's MariaDB server, stopped with SIGTERM (a clean shutdown) and started again
/// as `.ci/run` starts it.
fn restart_mariadb(down: Duration) -> Result<()> {
    let (pid, _) =
        process("mariadbd", |_| true).context("no mariadbd runs here (.ci/run starts one)")?;
    terminate(pid, "mariadbd", Duration::from_secs(60))?;
    wait_port(3306, false, Duration::from_secs(30))?;
    std::thread::sleep(down);
    let status = Command::new("start-stop-daemon")
        .args([
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/mariadbd",
        ])
        .status()
        .context("start-stop-daemon --start --exec /usr/sbin/mariadbd")?;
    if !status.success() {
        bail!("starting mariadbd failed: {status}");
    }
    wait_port(3306, true, Duration::from_secs(60))
}
