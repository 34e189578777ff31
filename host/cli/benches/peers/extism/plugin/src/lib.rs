//! The `rules` policy's own logic (the same crate Verdict loads as a component), exported as
//! an Extism plugin: a MessagePack failure in, a MessagePack verdict out - what a team would
//! write if it picked Extism instead.

use std::cell::RefCell;

use extism_pdk::{FnResult, Msgpack, plugin_fn};
use serde::Deserialize;
use verdict_sdk::{AttemptRecord, Failure, Policy, TopicStats, Verdict};

/// The failure's fields, as the bench host sends them.
#[derive(Deserialize)]
pub struct Input {
    config: String,
    kind: String,
    attempt: u32,
    first_failed_at_ms: u64,
    now_ms: u64,
    jitter_seed: u64,
    topic: String,
    message_id: String,
    message: String,
    history: Vec<(u64, String, String)>,
    headers: Vec<(String, String)>,
    payload: Vec<u8>,
    stats: (u64, u32, u32, u32),
}

thread_local! {
    static POLICY: RefCell<Option<rules::Rules>> = const { RefCell::new(None) };
}

#[plugin_fn]
pub fn decide(Msgpack(input): Msgpack<Input>) -> FnResult<Msgpack<Verdict>> {
    let mut failure = Failure::new(input.kind)
        .with_attempt(input.attempt)
        .with_first_failed_at_ms(input.first_failed_at_ms)
        .with_now_ms(input.now_ms)
        .with_jitter_seed(input.jitter_seed)
        .with_topic(input.topic)
        .with_message_id(input.message_id)
        .with_error_message(input.message)
        .with_history(
            input
                .history
                .into_iter()
                .map(|(at_ms, kind, message)| AttemptRecord {
                    at_ms,
                    kind,
                    message,
                })
                .collect(),
        )
        .with_payload(input.payload)
        .with_stats(TopicStats {
            window_ms: input.stats.0,
            deliveries: input.stats.1,
            failures: input.stats.2,
            consecutive_failures: input.stats.3,
        });
    for (name, value) in input.headers {
        failure = failure.with_header(name, value);
    }
    let verdict = POLICY.with_borrow_mut(|slot| {
        if slot.is_none() {
            *slot = Some(verdict_sdk::instantiate::<rules::Rules>(&input.config)?);
        }
        Ok::<_, String>(slot.as_ref().map(|p| p.decide(&failure)))
    });
    match verdict {
        Ok(Some(v)) => Ok(Msgpack(v)),
        Ok(None) => Err(extism_pdk::Error::msg("no policy").into()),
        Err(e) => Err(extism_pdk::Error::msg(e).into()),
    }
}
