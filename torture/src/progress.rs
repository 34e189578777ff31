//! A progress line on stderr for long runs: rewritten in place at a terminal, a line every
//! 10 s otherwise (a CI log), and faults on lines of their own.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

/// The progress of one run.
pub struct Progress {
    on: bool,
    tty: bool,
    name: &'static str,
    last: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    pub fn new(on: bool, name: &'static str) -> Progress {
        Progress {
            on,
            tty: std::io::stderr().is_terminal(),
            name,
            last: std::cell::Cell::new(None),
        }
    }

    pub fn show(&self, what: &str) {
        if !self.on {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[2K[{}] {what}", self.name);
        } else if self
            .last
            .get()
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            eprintln!("[{}] {what}", self.name);
            self.last.set(Some(Instant::now()));
        }
    }

    /// A line of its own (a fault struck), kept on screen.
    pub fn note(&self, what: &str) {
        if self.on {
            if self.tty {
                eprint!("\r\x1b[2K");
            }
            eprintln!("[{}] {what}", self.name);
        }
    }

    pub fn done(&self) {
        if self.on && self.tty {
            eprintln!();
        }
    }
}
