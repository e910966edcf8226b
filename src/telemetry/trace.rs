//! OpenTelemetry plumbing: the OTLP exporter, and W3C trace context in from callers and out to
//! dealer systems.
//!
//! The request span starts a trace of the gateway's own and keeps the caller's `traceparent` as
//! a span link: the caller is outside the trust boundary, so its context (sampling flag,
//! `tracestate` entries) neither steers the gateway's trace nor travels on to dealer systems,
//! and the two traces can still be joined. Each upstream call carries the gateway's current span
//! as its `traceparent` (without a `tracestate`: the gateway sets none), so the dealer's systems
//! continue the gateway's trace. Without an exporter there is no OpenTelemetry context and
//! nothing is extracted or injected.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// How long one export may take: a slow collector must not hold spans (memory) for long.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The tracer provider exporting to `url` (the full `/v1/traces` URL) in batches.
pub fn provider(url: &str, service: &str) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("OTLP exporter for {url}: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build())
}

/// Links `span` (a new root) to the caller's W3C trace context in `headers`, if any. Call it
/// before anything reads the span's context: a started span takes no more links.
pub fn link_caller(span: &tracing::Span, headers: &HeaderMap) {
    let caller = TraceContextPropagator::new().extract(&Headers(headers));
    let context = caller.span().span_context().clone();
    if context.is_valid() {
        span.add_link(context);
    }
}

/// The trace id of `span` (hex), when it is exported.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let id = cx.span().span_context().trace_id();
    (id != opentelemetry::trace::TraceId::INVALID).then(|| id.to_string())
}

/// `traceparent` (and `tracestate`) for a call made inside the current span, when exported.
pub fn outgoing() -> Vec<(HeaderName, HeaderValue)> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut out = Outgoing(Vec::with_capacity(2));
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    out.0
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct Outgoing(Vec<(HeaderName, HeaderValue)>);

impl Injector for Outgoing {
    fn set(&mut self, key: &str, value: String) {
        // The gateway's own trace carries no state: no empty `tracestate` header either.
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.push((name, value));
        }
    }
}
