//! A deliberately misbehaving policy for the host-contract tests. Its config picks the
//! misbehaviour, so one component covers every runtime edge case:
//!
//! `{"mode": "loop"}` spins forever in `decide`; `"oom"` allocates until memory runs out;
//! `"panic"` panics; `"recurse"` recurses without end; `"huge-reason"` returns a 4 MiB
//! reason; `"many-labels"` returns 10 000 labels; `"past-the-cap"` asks for a retry in
//! `u64::MAX` ms; `"reject-init"` refuses its config; `"trap-in-init"` panics in `init`;
//! `"ok"` retries after 1 s; `"echo"` retries and returns every on-demand fact as labels;
//! `"huge-panic"` panics with a 2 MiB message spread over many lines; `"loop-in-init"` spins
//! forever in `init`.

use std::hint::black_box;

use serde::Deserialize;
use verdict_sdk::{Class, Failure, Policy, Verdict, export_policy};

/// Which misbehaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Behave.
    Ok,
    /// Endless loop in `decide`.
    Loop,
    /// Allocate without end.
    Oom,
    /// Panic in `decide`.
    Panic,
    /// Unbounded recursion.
    Recurse,
    /// A gigantic reason.
    HugeReason,
    /// A gigantic label list.
    ManyLabels,
    /// A delay past any cap.
    PastTheCap,
    /// `init` refuses the config.
    RejectInit,
    /// `init` panics.
    TrapInInit,
    /// Behave, and echo every on-demand fact the host offers as labels (tests the getters).
    Echo,
    /// Panic with a gigantic, many-line message.
    HugePanic,
    /// Endless loop in `init`.
    LoopInInit,
}

/// Config: `{"mode": "..."}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The misbehaviour.
    pub mode: Mode,
}

/// The policy.
pub struct Hostile(Mode);

fn recurse(n: u64) -> u64 {
    if black_box(n) == 0 {
        0
    } else {
        black_box(recurse(n + 1)) + 1
    }
}

impl Policy for Hostile {
    type Config = Config;

    fn new(c: Config) -> Result<Self, String> {
        match c.mode {
            Mode::RejectInit => Err("config.mode: reject-init refuses every config".into()),
            Mode::TrapInInit => panic!("trap-in-init panics during init"),
            Mode::LoopInInit => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            mode => Ok(Hostile(mode)),
        }
    }

    fn decide(&self, f: &Failure) -> Verdict {
        match self.0 {
            Mode::Loop => {
                let mut i = 0u64;
                loop {
                    i = black_box(i.wrapping_add(1));
                }
            }
            Mode::Oom => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(black_box(vec![1u8; 1 << 20]));
                }
            }
            Mode::Panic => panic!("hostile policy panics on {}", f.kind()),
            Mode::HugePanic => panic!("{}", "line\r\n".repeat(2 << 20 >> 3)),
            Mode::Recurse => Verdict::retry_after(recurse(1)),
            Mode::HugeReason => Verdict::dead_letter(Class::Poison).because("x".repeat(4 << 20)),
            Mode::ManyLabels => (0..10_000).fold(Verdict::dead_letter(Class::Poison), |v, i| {
                v.label(format!("k{i}"), "v")
            }),
            Mode::PastTheCap => Verdict::retry_after(u64::MAX),
            Mode::Echo => Verdict::retry_after(1_000)
                .label("topic", f.topic())
                .label("message-id", f.message_id())
                .label("consumer-group", f.consumer_group())
                .label("error-message", f.error_message())
                .label("content-type", f.content_type().unwrap_or("-"))
                .label("published-at-ms", format!("{:?}", f.published_at_ms()))
                .label("payload-size", f.payload_size().to_string())
                .label("payload", String::from_utf8_lossy(f.payload()))
                .label("header", f.header("X-Trace").unwrap_or("-"))
                .label(
                    "history",
                    f.history()
                        .iter()
                        .map(|a| a.kind.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                )
                .label("age-ms", f.age_ms().to_string())
                .label("deadline-ms", format!("{:?}", f.deadline_ms()))
                .label("ext-source", f.extension("source").unwrap_or_default())
                .label("ext-route", f.extension("route").unwrap_or_default())
                .label("ext-gateway", f.extension("gateway").unwrap_or_default())
                .label("ext-unknown", format!("{:?}", f.extension("no-such-key"))),
            Mode::Ok | Mode::RejectInit | Mode::TrapInInit | Mode::LoopInInit => {
                Verdict::retry_after(1_000).because("ok")
            }
        }
    }
}

export_policy!(Hostile);
