//! The gateway under test: the real `verdict` binary, run as a child process with its log
//! in the run's directory, killed with SIGKILL and started again as the faults say.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One gateway process (and its config, kept across restarts).
pub struct Gateway {
    bin: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    /// The admin API's base URL.
    pub admin_url: String,
    /// Times it was started.
    pub starts: u32,
    /// Its clock's offset from the machine's (a `faketime` spec such as `+30s`).
    skew: Option<String>,
    port: u16,
}

impl Gateway {
    /// A gateway of `bin` whose config is `dir/verdict.toml`, its admin API on `port`,
    /// run under `faketime -f <skew>` when a skew is given.
    pub fn new(bin: &Path, dir: &Path, port: u16, skew: Option<String>) -> Gateway {
        Gateway {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            child: None,
            admin_url: format!("http://127.0.0.1:{port}"),
            starts: 0,
            skew,
            port,
        }
    }

    /// The admin API's port.
    pub fn admin_port(&self) -> u16 {
        self.port
    }

    /// The config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("verdict.toml")
    }

    /// The log every start appends to.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("gateway.log")
    }

    /// Start it and wait until `/readyz` answers 200 (at most `limit`).
    pub fn start(&mut self, limit: Duration) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("{}", self.log_path().display()))?;
        let mut command = Command::new(&self.bin);
        hermetic(&mut command);
        if let Some(skew) = &self.skew {
            // libfaketime preloaded into the gateway itself: the `faketime` command would
            // run it as a child of its own, which a kill of the command leaves running.
            command
                .env("LD_PRELOAD", libfaketime()?)
                .env("FAKETIME", skew);
        }
        let child = command
            .arg("run")
            .arg("-c")
            .arg(self.config_path())
            // Warnings by default (what an operator sees); `VERDICT_LOG` to see more.
            .env(
                "VERDICT_LOG",
                std::env::var("VERDICT_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        self.starts += 1;
        self.wait_ready(limit)
    }

    /// Wait until `/readyz` answers 200 (at most `limit`): every route's source connected.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(false)
            .build()
            .into();
        loop {
            let ready = agent
                .get(format!("{}/readyz", self.admin_url))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!(
                    "the gateway exited ({status}) before it was ready; see {}",
                    self.log_path().display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the gateway was not ready within {limit:?}; see {}",
                    self.log_path().display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kill -9`, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its resident memory (kB), from `/proc`.
    pub fn rss_kb(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// The possible duplicates the gateway itself counted on the embedded store: the leases
    /// it recovered at each start (`recovered=N`) and each outcome fenced off because its
    /// delivery outlived its lease.
    pub fn counted_redeliveries(&self) -> u64 {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let recovered: u64 = log
            .lines()
            .filter_map(|l| {
                let rest = &l[l.find("recovered=")? + "recovered=".len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse::<u64>().ok()
            })
            .sum();
        let fenced = log.matches("outlived its lease").count() as u64;
        recovered + fenced
    }

    /// Lines of its log that show a panic.
    pub fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked at") || l.contains("RUST_BACKTRACE"))
            .map(|l| verdict_runtime::text::one_line(l, 300))
            .collect()
    }
}

/// libfaketime, to run a gateway on a skewed clock, or an error saying how to get it.
pub fn libfaketime() -> Result<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.is_file());
    match found {
        Some(lib) => Ok(lib),
        None => bail!(
            "--skew preloads libfaketime into the gateways (Debian's package faketime), and \
             no /usr/lib/*/faketime/libfaketime.so.1 is here"
        ),
    }
}

/// Leave out of `command` every `VERDICT_*` variable of the caller's but `VERDICT_LOG`: a
/// run's gateway takes its token, TLS and names from the run's own config, never from the
/// shell the harness was started in (an operator's `VERDICT_ADMIN_TOKEN` would replace the
/// run's token, and every call the harness makes would be refused).
pub fn hermetic(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("VERDICT_") && name != "VERDICT_LOG" {
            command.env_remove(name.as_ref());
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}
