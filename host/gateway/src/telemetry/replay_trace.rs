//! The trace a replay starts.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use verdict_telemetry::propagation;

use std::collections::BTreeMap;

use super::{Tracing, bounded};
use crate::envelope::Envelope;

/// Starts a new trace for each replayed dead letter, linked to the context the message was
/// created in and to the span that dead-lettered it; the replayed message carries the new
/// trace's `traceparent`, so its deliveries continue it. Off (the default): nothing.
#[derive(Debug, Clone, Default)]
pub struct ReplayTrace {
    tracing: Tracing,
}

impl ReplayTrace {
    /// Whether replays start traces.
    pub fn is_on(&self) -> bool {
        self.tracing.tracer().is_some()
    }

    /// Replays traced with `tracing`.
    pub fn new(tracing: Tracing) -> ReplayTrace {
        ReplayTrace { tracing }
    }

    /// The replay of the dead letter `envelope` to `topic` begins: the `traceparent` its
    /// message is to carry, or `None` when telemetry is off.
    pub fn replay(&self, topic: &str, envelope: &Envelope) -> Option<String> {
        let tracer = self.tracing.tracer()?;
        let recorded = envelope.trace.as_ref();
        let creation = recorded
            .and_then(|t| t.creation.as_deref())
            .and_then(propagation::parse_traceparent)
            .or_else(|| propagation::extract(&envelope.original.headers));
        let dead_letter = recorded
            .and_then(|t| t.dead_letter.as_deref())
            .and_then(propagation::parse_traceparent);
        let links: Vec<Link> = [
            creation.map(|c| (c, "creation")),
            dead_letter.map(|c| (c, "dead-letter")),
        ]
        .into_iter()
        .flatten()
        .map(|(context, role)| Link::new(context, vec![KeyValue::new("verdict.link", role)], 0))
        .collect();
        let topic = bounded(topic);
        // No parent: a replay is an operator's act, a trace of its own.
        let span = tracer
            .span_builder(format!("send {topic}"))
            .with_kind(SpanKind::Producer)
            .with_links(links)
            .with_attributes(vec![
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.operation.name", "replay"),
                KeyValue::new("messaging.destination.name", topic),
                KeyValue::new("messaging.message.id", bounded(&envelope.original.id)),
                KeyValue::new("verdict.replay", true),
                KeyValue::new("verdict.dlq", bounded(&envelope.dlq)),
            ])
            .start_with_context(tracer, &Context::new());
        let cx = Context::new().with_span(span);
        let traceparent = propagation::traceparent(cx.span().span_context());
        cx.span().end();
        Some(traceparent)
    }
}

/// `headers` with `traceparent` as the message's trace context: the producer's
/// `traceparent` and `tracestate` (any case) give way to the replay's.
pub fn with_traceparent(
    headers: &BTreeMap<String, String>,
    traceparent: &str,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = headers
        .iter()
        .filter(|(name, _)| {
            !name.eq_ignore_ascii_case(propagation::TRACEPARENT)
                && !name.eq_ignore_ascii_case(propagation::TRACESTATE)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.insert(
        propagation::TRACEPARENT.to_string(),
        traceparent.to_string(),
    );
    out
}
