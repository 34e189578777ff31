//! W3C trace context in a message's headers: what a producer put there, read back; what the
//! gateway sends on, written.
//!
//! Headers come from producers, so they are hostile input: names are matched without
//! regard to case, a value longer than the standard allows is ignored rather than parsed,
//! and a malformed `traceparent` means "no context" - never an error on the delivery path.

use std::collections::BTreeMap;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The header carrying the trace and the span a message was created in.
pub const TRACEPARENT: &str = "traceparent";
/// The header carrying vendors' trace state beside it.
pub const TRACESTATE: &str = "tracestate";

/// A `traceparent` is 55 characters in version 00; later versions may add fields, which
/// the standard bounds here.
const MAX_TRACEPARENT_BYTES: usize = 128;
/// The standard's own limit on `tracestate` (32 members of at most 256 characters, of which
/// a receiver keeps at least 512 characters).
const MAX_TRACESTATE_BYTES: usize = 512;

/// The headers, looked up without regard to case and only within the standard's sizes.
struct Headers<'a>(&'a BTreeMap<String, String>);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let limit = if key == TRACEPARENT {
            MAX_TRACEPARENT_BYTES
        } else {
            MAX_TRACESTATE_BYTES
        };
        self.0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
            .map(|(_, value)| value.as_str())
            .filter(|value| value.len() <= limit)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The trace context a message's `headers` carry (the context it was created in), if a
/// valid one.
pub fn extract(headers: &BTreeMap<String, String>) -> Option<SpanContext> {
    if headers.is_empty() {
        return None;
    }
    let cx = TraceContextPropagator::new()
        .extract_with_context(&opentelemetry::Context::new(), &Headers(headers));
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| context.clone())
}

/// `context` as a `traceparent` value (`00-<trace id>-<span id>-<flags>`).
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags() & TraceFlags::SAMPLED
    )
}

/// A `traceparent` value read back (from an envelope): `None` when it is not one.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut headers = BTreeMap::new();
    headers.insert(TRACEPARENT.to_string(), value.to_string());
    extract(&headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_producers_context_is_read_whatever_the_case_of_its_header() {
        let context = extract(&headers(&[
            ("TraceParent", PARENT),
            ("tracestate", "vendor=x"),
        ]))
        .unwrap();
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(context.trace_state().header(), "vendor=x");
        assert_eq!(traceparent(&context), PARENT);
        assert_eq!(
            parse_traceparent(PARENT)
                .map(|c| traceparent(&c))
                .as_deref(),
            Some(PARENT)
        );
    }

    #[test]
    fn hostile_or_missing_contexts_are_no_context() {
        for bad in [
            "",
            "00-00000000000000000000000000000000-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx-injected: 1",
            "\u{0}\u{1}garbage",
        ] {
            assert!(
                extract(&headers(&[("traceparent", bad)])).is_none(),
                "{bad:?}"
            );
        }
        let long = format!("{PARENT}-{}", "a".repeat(200));
        assert!(
            extract(&headers(&[("traceparent", &long)])).is_none(),
            "an oversized value is not parsed"
        );
        let state = "k=".to_string() + &"v".repeat(600);
        let context =
            extract(&headers(&[("traceparent", PARENT), ("tracestate", &state)])).unwrap();
        assert_eq!(
            context.trace_state().header(),
            "",
            "an oversized trace state is dropped, the parent kept"
        );
        assert!(extract(&BTreeMap::new()).is_none());
    }
}
