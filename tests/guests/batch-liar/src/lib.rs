//! A policy that lies in `decide-batch` or abuses `details` handles, written against the raw
//! `verdict:policy@0.2.0` bindings because the SDK's glue always answers one verdict per
//! failure and makes one handle. Its config (the whole string) picks the lie:
//!
//! - `short`: one verdict fewer than the failures it was given;
//! - `long`: one verdict more;
//! - `past-the-end`: asks `details` (a handle made in `init`, outside any call) for every
//!   on-demand fact of a position past the batch and reports the sizes it got back as each
//!   verdict's reason;
//! - `hoard-handles`: makes a `details` handle per failure and never drops one;
//! - `churn-handles`: makes a `details` handle per failure and drops it at once.
//!
//! In every mode `init` first asks its handle about position 0 - no call is in progress -
//! and refuses the config unless every answer is empty.
//!
//! `decide` always retries after 1 s with the reason `alone`, and an honest batch answer
//! says `batch`: a test tells from the reason which of the two the host applied.

#![allow(missing_docs)]

use std::cell::RefCell;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "policy",
});

use exports::verdict::policy::decider::{Failure, Guest, Info, Verdict};
use verdict::policy::host::Details;
use verdict::policy::types::{Action, Class, Severity};

thread_local! {
    static MODE: RefCell<String> = const { RefCell::new(String::new()) };
    static DETAILS: RefCell<Option<Details>> = const { RefCell::new(None) };
}

fn verdict(reason: &str) -> Verdict {
    Verdict {
        action: Action::Retry(1_000),
        class: Class::Transient,
        reason: Some(reason.to_string()),
        alert: Severity::None,
        labels: Vec::new(),
    }
}

/// What [`past_the_end`] reports when every answer is empty.
const EMPTY: &str = "texts=0 payload=0 payload-size=0 headers=0 history=0 published=None \
                     content-type=None extension=None";

/// The sizes of everything `details` answers for a position no failure holds.
fn past_the_end(details: &Details, position: u32) -> String {
    let texts = [
        details.topic(position),
        details.message_id(position),
        details.consumer_group(position),
        details.error_message(position),
    ]
    .iter()
    .map(String::len)
    .sum::<usize>();
    format!(
        "texts={texts} payload={} payload-size={} headers={} history={} published={:?} content-type={:?} extension={:?}",
        details.payload(position).len(),
        details.payload_size(position),
        details.headers(position).len(),
        details.history(position).len(),
        details.published_at_ms(position),
        details.content_type(position),
        details.extension(position, "source"),
    )
}

/// What the handle modes do for each failure they decide: make a `details` handle and keep
/// it forever (`hoard-handles`) or drop it at once (`churn-handles`).
fn handle_per_failure(mode: &str) {
    match mode {
        "hoard-handles" => std::mem::forget(Details::new()),
        "churn-handles" => drop(Details::new()),
        _ => {}
    }
}

struct BatchLiar;

impl Guest for BatchLiar {
    fn init(config: String) -> Result<(), String> {
        match config.as_str() {
            "short" | "long" | "past-the-end" | "hoard-handles" | "churn-handles" => {
                let details = Details::new();
                let outside = past_the_end(&details, 0);
                if outside != EMPTY {
                    return Err(format!("details outside a call answered: {outside}"));
                }
                MODE.with(|m| *m.borrow_mut() = config);
                DETAILS.with(|d| *d.borrow_mut() = Some(details));
                Ok(())
            }
            other => Err(format!(
                "config: expected `short`, `long`, `past-the-end`, `hoard-handles` or \
                 `churn-handles`, got `{other}`"
            )),
        }
    }

    fn describe() -> Info {
        Info {
            name: "batch-liar".into(),
            version: "0.1.0".into(),
            description: "answers decide-batch wrongly, as its config says".into(),
        }
    }

    fn decide(_failure: Failure) -> Verdict {
        MODE.with(|m| handle_per_failure(&m.borrow()));
        verdict("alone")
    }

    fn decide_batch(failures: Vec<Failure>) -> Vec<Verdict> {
        let n = failures.len();
        let mode = MODE.with(|m| m.borrow().clone());
        match mode.as_str() {
            "short" => (1..n).map(|_| verdict("batch")).collect(),
            "long" => (0..=n).map(|_| verdict("batch")).collect(),
            "hoard-handles" | "churn-handles" => (0..n)
                .map(|_| {
                    handle_per_failure(&mode);
                    verdict("batch")
                })
                .collect(),
            _ => {
                let position = u32::try_from(n).unwrap_or(u32::MAX).saturating_add(3);
                DETAILS.with(|d| {
                    let held = d.borrow();
                    let details = held.as_ref().expect("made in init");
                    (0..n)
                        .map(|_| verdict(&past_the_end(details, position)))
                        .collect()
                })
            }
        }
    }
}

export!(BatchLiar);
