//! One delivery attempt's spans: process, push, dead letter, settle.

use std::sync::{Mutex, PoisonError};

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use verdict_runtime::Decision;
use verdict_telemetry::propagation;

use super::{Tracing, bounded};
use crate::envelope::TraceEntry;
use crate::model::Delivery;

/// The spans of one delivery attempt; nothing at all when telemetry is off. The process span
/// ends when the attempt is settled ([`DeliveryTrace::settled`]) or, if it never is (the
/// gateway stopping), when this is dropped.
#[derive(Debug, Default)]
pub(crate) struct DeliveryTrace(Option<Box<Active>>);

#[derive(Debug)]
struct Active {
    tracer: SdkTracer,
    /// The context holding the process span, parent of the others.
    process: Context,
    /// Where the message was created (its producer's `traceparent`).
    creation: Option<SpanContext>,
    /// `messaging.system`: the source.
    system: &'static str,
    /// Whether the sampler kept the process span (and so its children).
    recording: bool,
    dead_letter: Mutex<Option<Context>>,
    settle: Mutex<Option<Context>>,
}

/// The push's span: its context goes to the consumer as `traceparent`.
#[derive(Debug, Default)]
pub(crate) struct PushSpan {
    /// The span, when recorded.
    span: Option<Context>,
    /// What the consumer receives.
    traceparent: Option<String>,
}

impl DeliveryTrace {
    /// No spans.
    pub(crate) fn off() -> DeliveryTrace {
        DeliveryTrace(None)
    }

    /// The process span of `delivery`'s attempt begins: in the trace its headers name, linked
    /// to that context, or a trace of its own when they name none.
    pub(crate) fn begin(
        tracing: &Tracing,
        delivery: &Delivery,
        consumer_group: &str,
    ) -> DeliveryTrace {
        let Some(tracer) = tracing.tracer() else {
            return DeliveryTrace::off();
        };
        let creation = propagation::extract(&delivery.headers);
        let parent = match &creation {
            Some(context) => Context::new().with_remote_span_context(context.clone()),
            None => Context::new(),
        };
        // The sampler decides from the context alone; a span it drops costs no attribute,
        // no name and no child span (the consumer still gets its context, unsampled).
        let mut span = tracer
            .span_builder("process")
            .with_kind(SpanKind::Consumer)
            .with_links(
                creation
                    .iter()
                    .map(|c| Link::with_context(c.clone()))
                    .collect(),
            )
            .start_with_context(tracer, &parent);
        let recording = span.is_recording();
        if recording {
            let topic = bounded(&delivery.topic);
            span.update_name(format!("process {topic}"));
            span.set_attributes([
                KeyValue::new("messaging.system", delivery.source),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.operation.name", "process"),
                KeyValue::new("messaging.destination.name", topic),
                KeyValue::new("messaging.message.id", bounded(&delivery.id)),
                KeyValue::new("messaging.consumer.group.name", bounded(consumer_group)),
                KeyValue::new(
                    "verdict.attempt",
                    i64::from(delivery.attempts_spent.saturating_add(1)),
                ),
            ]);
            if delivery.redelivery {
                span.set_attribute(KeyValue::new("verdict.redelivery", true));
            }
        }
        DeliveryTrace(Some(Box::new(Active {
            tracer: tracer.clone(),
            process: parent.with_span(span),
            creation,
            system: delivery.source,
            recording,
            dead_letter: Mutex::new(None),
            settle: Mutex::new(None),
        })))
    }

    /// The attempt's spans when they are recorded (sampled).
    fn recorded(&self) -> Option<&Active> {
        self.0.as_deref().filter(|active| active.recording)
    }

    /// The route that took the message.
    pub(crate) fn route(&self, route: &str) {
        if let Some(active) = self.recorded() {
            active
                .process
                .span()
                .set_attribute(KeyValue::new("verdict.route", bounded(route)));
        }
    }

    /// The push to `url` (delivery `attempt`, 1-based) begins.
    pub(crate) fn push(&self, url: &str, attempt: u32) -> PushSpan {
        let Some(active) = &self.0 else {
            return PushSpan::default();
        };
        if !active.recording {
            // Unsampled: the consumer continues the trace from the process span's context,
            // which says so.
            return PushSpan {
                span: None,
                traceparent: Some(propagation::traceparent(
                    active.process.span().span_context(),
                )),
            };
        }
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("url.full", bounded(&verdict_runtime::redact::redact(url))),
        ];
        if let Ok(parsed) = reqwest::Url::parse(url) {
            if let Some(host) = parsed.host_str() {
                attributes.push(KeyValue::new("server.address", bounded(host)));
            }
            if let Some(port) = parsed.port_or_known_default() {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
        }
        if attempt > 1 {
            attributes.push(KeyValue::new(
                "http.request.resend_count",
                i64::from(attempt - 1),
            ));
        }
        let span = active
            .tracer
            .span_builder("POST")
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&active.tracer, &active.process);
        let span = active.process.with_span(span);
        PushSpan {
            traceparent: Some(propagation::traceparent(span.span().span_context())),
            span: Some(span),
        }
    }

    /// The policy's decision on the failed attempt.
    pub(crate) fn decided(&self, decision: &Decision) {
        let Some(active) = self.recorded() else {
            return;
        };
        let (action, delay_ms) = (decision.verdict.action.name(), decision.verdict.delay_ms());
        let policy = &decision.provenance;
        let span = active.process.span();
        span.set_attribute(KeyValue::new("verdict.policy.name", bounded(&policy.name)));
        span.set_attribute(KeyValue::new(
            "verdict.policy.version",
            bounded(&policy.version),
        ));
        span.set_attribute(KeyValue::new(
            "verdict.policy.sha256",
            bounded(&policy.sha256),
        ));
        span.set_attribute(KeyValue::new("verdict.action", action));
        span.set_attribute(KeyValue::new(
            "verdict.class",
            verdict_runtime::class_name(decision.verdict.class),
        ));
        if let Some(ms) = delay_ms {
            span.set_attribute(KeyValue::new(
                "verdict.delay_ms",
                i64::try_from(ms).unwrap_or(i64::MAX),
            ));
        }
        if decision.is_fallback() {
            span.set_attribute(KeyValue::new("verdict.fallback", true));
        }
        if !decision.clamps.is_empty() {
            span.set_attribute(KeyValue::new(
                "verdict.clamps",
                i64::try_from(decision.clamps.len()).unwrap_or(i64::MAX),
            ));
        }
    }

    /// The dead letter to `dlq` is being written: its PRODUCER span begins, and what the
    /// envelope keeps of the trace is returned (none when telemetry is off).
    pub(crate) fn dead_letter(&self, dlq: &str) -> Option<TraceEntry> {
        let active = self.0.as_ref()?;
        if !active.recording {
            return Some(TraceEntry {
                creation: active.creation.as_ref().map(propagation::traceparent),
                dead_letter: None,
            });
        }
        let dlq = bounded(dlq);
        let span = active
            .tracer
            .span_builder(format!("send {dlq}"))
            .with_kind(SpanKind::Producer)
            .with_attributes(vec![
                KeyValue::new("messaging.system", active.system),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.operation.name", "send"),
                KeyValue::new("messaging.destination.name", dlq),
            ])
            .start_with_context(&active.tracer, &active.process);
        let context = active.process.with_span(span);
        let entry = TraceEntry {
            creation: active.creation.as_ref().map(propagation::traceparent),
            dead_letter: Some(propagation::traceparent(context.span().span_context())),
        };
        // A second dead letter for the same attempt (the gateway's own, after the policy's
        // could not be settled) replaces the first, which ends now.
        if let Some(earlier) = active
            .dead_letter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(context)
        {
            earlier.span().set_status(Status::error("replaced"));
            earlier.span().end();
        }
        Some(entry)
    }

    /// Settling begins.
    pub(crate) fn settling(&self) {
        if let Some(active) = self.recorded() {
            let span = active
                .tracer
                .span_builder("settle")
                .with_kind(SpanKind::Internal)
                .start_with_context(&active.tracer, &active.process);
            *active.settle.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(active.process.with_span(span));
        }
    }

    /// Settled: `outcome` says how (`delivered`, `retry-scheduled`, `dead-lettered`, ...),
    /// `applied` whether the outcome the policy chose was written, `letter_written` whether
    /// the dead letter (if one) was. Every span of the attempt ends.
    pub(crate) fn settled(&self, outcome: &'static str, applied: bool, letter_written: bool) {
        let Some(active) = &self.0 else {
            return;
        };
        if let Some(settle) = active
            .settle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            settle
                .span()
                .set_attribute(KeyValue::new("verdict.outcome", outcome));
            if !applied {
                settle.span().set_status(Status::error(outcome));
            }
            settle.span().end();
        }
        if let Some(letter) = active
            .dead_letter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            if !letter_written {
                letter.span().set_status(Status::error(outcome));
            }
            letter.span().end();
        }
        let process = active.process.span();
        process.set_attribute(KeyValue::new("verdict.outcome", outcome));
        process.end();
    }
}

impl PushSpan {
    /// The `traceparent` the consumer receives: this push as its parent.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.traceparent.clone()
    }

    /// The push ended: answered with `status` (when an answer came) or failed with `kind`.
    pub(crate) fn finish(self, status: Option<u16>, failed: Option<&str>) {
        let Some(cx) = self.span else {
            return;
        };
        let span = cx.span();
        if let Some(status) = status {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        if let Some(kind) = failed {
            span.set_attribute(KeyValue::new("error.type", bounded(kind)));
            span.set_status(Status::error(bounded(kind)));
        }
        span.end();
    }
}
