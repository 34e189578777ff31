//! `verdict dlq ...` and `verdict publish`: arguments, and progress on stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use verdict_cli::cli;
use verdict_gateway::dlq::ReplayOptions;
use verdict_gateway::store::{DlqFilter, PayloadView};
use verdict_registry::SourceKind;

/// Which dead letters.
#[derive(clap::Args, Debug, Clone)]
pub struct FilterArgs {
    /// One dead letter, by its number (from `list`): how a parked one is replayed.
    #[arg(long)]
    seq: Option<i64>,
    /// The dead letters of one group (its id, from `verdict dlq groups`).
    #[arg(long)]
    group: Option<String>,
    /// Source topic.
    #[arg(long)]
    topic: Option<String>,
    /// DLQ name.
    #[arg(long)]
    dlq: Option<String>,
    /// Verdict class (`poison`, `exhausted`, ...).
    #[arg(long)]
    class: Option<String>,
    /// Last error kind.
    #[arg(long)]
    kind: Option<String>,
    /// Only dead letters older than this (`30s`, `10m`, `2h`).
    #[arg(long, value_parser = humantime::parse_duration)]
    older_than: Option<Duration>,
    /// At most this many, oldest first.
    #[arg(long)]
    limit: Option<usize>,
}

impl FilterArgs {
    fn filter(&self) -> DlqFilter {
        DlqFilter {
            seq: self.seq,
            group: self.group.clone(),
            topic: self.topic.clone(),
            dlq: self.dlq.clone(),
            class: self.class.clone(),
            kind: self.kind.clone(),
            min_age_ms: self
                .older_than
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            limit: self.limit,
            ..DlqFilter::default()
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum DlqArgs {
    /// Dead letters, oldest first, a page at a time: at most `--limit` (1,000 by default)
    /// and `--max-bytes` of them as JSON; the command that lists the next page is printed
    /// after it. Payloads past 64 KiB are shown as their size and digest (`dlq show` has
    /// them whole) unless `--payloads full`.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Start after this cursor (printed after the page before).
        #[arg(long)]
        after: Option<String>,
        /// The bytes of letters (as JSON) a page holds at most (one letter always).
        #[arg(long, default_value_t = verdict_gateway::dlq::PAGE_BYTES)]
        max_bytes: usize,
        /// `summary` (payloads past 64 KiB as their size and digest) or `full`.
        #[arg(long, default_value = "summary", value_parser = ["summary", "full"])]
        payloads: String,
    },
    /// One dead letter's envelope.
    Show {
        /// Its number (from `list`).
        seq: i64,
    },
    /// Depth and oldest entry per DLQ.
    Stats,
    /// Dead letters grouped by cause (topic, class, kind, reason with ids and numbers
    /// normalised), largest group first; act on one with `--group ID`.
    Groups {
        #[command(flatten)]
        filter: FilterArgs,
        /// The store's and every broker's a route uses, folded together (each broker is
        /// connected to; one that cannot be reached is an error naming it).
        #[arg(long)]
        all_sources: bool,
    },
    /// Put dead letters back for delivery, attempts reset (audited). Parked ones (back
    /// `park_after_repeats` times) are left out unless named with `--seq`.
    Replay {
        #[command(flatten)]
        filter: FilterArgs,
        /// Show what the current policy would decide for each; move nothing.
        #[arg(long)]
        dry_run: bool,
        /// At most this many per second.
        #[arg(long)]
        rate: Option<f64>,
        /// Replay this many first; go on only once they are all delivered.
        #[arg(long)]
        canary: Option<usize>,
        /// How long to wait for the canary.
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        canary_timeout: Duration,
        /// Why (for the audit log).
        #[arg(long, default_value = "replayed by an operator")]
        note: String,
    },
    /// Discard dead letters for good (audited; a reason is required).
    Discard {
        #[command(flatten)]
        filter: FilterArgs,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Write envelopes as JSON lines (to stdout, or a file).
    Export {
        #[command(flatten)]
        filter: FilterArgs,
        /// The file (default: stdout).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// Run one `verdict dlq` command; returns what to print on stdout.
pub fn run(
    config: &Path,
    source: SourceKind,
    as_json: bool,
    command: DlqArgs,
) -> anyhow::Result<String> {
    Ok(match command {
        DlqArgs::List {
            filter,
            after,
            max_bytes,
            payloads,
        } => {
            let filter = DlqFilter {
                after,
                payloads: Some(if payloads == "full" {
                    PayloadView::Full
                } else {
                    PayloadView::Summary
                }),
                ..filter.filter()
            };
            cli::dlq::list(config, source, &filter, max_bytes, as_json)?
        }
        DlqArgs::Show { seq } => cli::dlq::show(config, source, seq)?,
        DlqArgs::Stats => cli::dlq::stats(config, source, as_json)?,
        DlqArgs::Groups {
            filter,
            all_sources,
        } => cli::dlq::groups(config, source, all_sources, &filter.filter(), as_json)?,
        DlqArgs::Replay {
            filter,
            dry_run,
            rate,
            canary,
            canary_timeout,
            note,
        } => {
            let options = ReplayOptions {
                dry_run,
                rate_per_s: rate,
                canary,
                canary_timeout,
                note,
                ..ReplayOptions::default()
            };
            let report =
                cli::dlq::replay(config, source, &filter.filter(), &options, |done, total| {
                    eprint!("\rreplayed {done}/{total}");
                    let _ = std::io::stderr().flush();
                })?;
            if report.replayed > 0 {
                eprintln!();
            }
            if as_json || dry_run {
                serde_json::to_string_pretty(&report)? + "\n"
            } else {
                let mut text = format!(
                    "replayed {} of {} dead letter(s)\n",
                    report.replayed, report.matched
                );
                if let Some(c) = &report.canary {
                    text += &format!(
                        "canary: {} of {} delivered{}\n",
                        c.delivered,
                        c.size,
                        if c.passed {
                            ""
                        } else {
                            "; stopped, the rest stays in the DLQ"
                        }
                    );
                }
                text
            }
        }
        DlqArgs::Discard { filter, reason } => {
            let n = cli::dlq::discard(config, source, &filter.filter(), &reason)?;
            format!("discarded {n} dead letter(s)\n")
        }
        DlqArgs::Export { filter, output } => {
            let n = match output {
                Some(path) => {
                    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
                    let n = cli::dlq::export(config, source, &filter.filter(), &mut file)?;
                    file.flush()?;
                    eprintln!("exported {n} envelope(s) to {}", path.display());
                    return Ok(String::new());
                }
                None => {
                    let stdout = std::io::stdout();
                    cli::dlq::export(config, source, &filter.filter(), &mut stdout.lock())?
                }
            };
            eprintln!("exported {n} envelope(s)");
            String::new()
        }
    })
}
