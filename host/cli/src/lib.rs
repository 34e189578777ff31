//! # verdict-cli: the `verdict` command and its tools
//!
//! The thin top of Verdict: every `verdict` command as a function ([`cli`]), the blocking
//! client of the admin API ([`client`]) that `verdict policy ...` and scripts use,
//! `verdict bench` ([`bench`]) and the demo consumer ([`demo`]) of the quickstart. The
//! layers it drives are crates of their own, each usable alone:
//!
//! - `verdict-runtime`: load policy components and decide (Wasmtime only; embeddable);
//! - `verdict-registry`: the config, routing, generations, admission, hot reload and the
//!   conformance harness;
//! - `verdict-gateway`: the store, the sources, the delivery pipeline, the DLQ tools and
//!   the admin server (`Gateway::start`).
//!
//! ```no_run
//! use verdict_cli::client::AdminClient;
//!
//! let admin = AdminClient::new("http://127.0.0.1:7070", None);
//! let status: serde_json::Value = admin.get("/v1/status")?;
//! println!("generation {}", status["generation"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod client;
pub mod demo;
pub mod tls_peers;
