//! The record of one request: its id, the caller's trace id, and — once the binding knows them —
//! the skill and the outcome. `finish` writes the request's one log line and its metrics.
//!
//! The log line never holds request content: ids, dealer, skill, binding, outcome, HTTP status
//! and latency only, so no personal data can reach it.
//!
//! Latency runs from the request's arrival on its connection, so time spent waiting for the
//! body counts. Refusals (quota, shedding, auth, malformed or slow requests) are what a flood is
//! made of: their lines are sampled ([`REFUSAL_LINES_PER_SECOND`], the rest summed up in one
//! line), while their metrics stay exact.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use http::HeaderMap;
use http::StatusCode;

use super::metrics::Metrics;
use crate::protocol::SkillRef;

/// The skill label before the request named one (an envelope or header error).
pub const NO_SKILL: &str = "none";

/// Outcomes of requests answered before their body was read (HTTP 408, 413, 400).
pub const BODY_TIMEOUT: &str = "BODY_TIMEOUT";
pub const BODY_TOO_LARGE: &str = "BODY_TOO_LARGE";
pub const BODY_UNREADABLE: &str = "BODY_UNREADABLE";
/// Refused at once: the bodies being received hold the whole budget (503).
pub const BODIES_FULL: &str = "BODIES_FULL";

/// Outcomes whose log lines are sampled: refusals a client can provoke at will.
const REFUSALS: &[&str] = &[
    "RATE_LIMITED",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "JSON_PARSE_ERROR",
    "INVALID_REQUEST",
    BODY_TIMEOUT,
    BODY_TOO_LARGE,
    BODY_UNREADABLE,
    BODIES_FULL,
];

/// Refusal lines written per second at most (process-wide, bursts of as many).
pub const REFUSAL_LINES_PER_SECOND: u32 = 20;

/// Which refusal lines are written, and how many were not since the last one.
struct Sampler {
    lines: governor::DefaultDirectRateLimiter,
    skipped: AtomicU64,
}

static SAMPLER: LazyLock<Sampler> = LazyLock::new(|| Sampler::new(REFUSAL_LINES_PER_SECOND));

impl Sampler {
    fn new(per_second: u32) -> Sampler {
        Sampler {
            lines: governor::RateLimiter::direct(governor::Quota::per_second(
                NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN),
            )),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(skipped so far)` when this refusal gets its line, `None` when it is only counted.
    fn admit(&self) -> Option<u64> {
        if self.lines.check().is_ok() {
            Some(self.skipped.swap(0, Ordering::Relaxed))
        } else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// One request on its way through a binding.
#[derive(Debug)]
pub struct RequestLog {
    started: Instant,
    /// The request's trace span (a child of the caller's trace); the binding runs inside it.
    pub span: tracing::Span,
    /// The caller's `X-Request-Id` when it is a plain token, else a new UUIDv7.
    pub request_id: String,
    /// The trace id of the caller's W3C `traceparent`, when valid.
    pub trace_id: Option<String>,
    pub binding: &'static str,
    /// The AAP skill id, `unknown` for an unknown `data.type`, or [`NO_SKILL`].
    pub skill: &'static str,
    /// `ok`, the AAP code, or the A2A error reason.
    pub outcome: &'static str,
    /// Where a request dropped before it was answered (the client went away) is logged and
    /// counted, as [`ABANDONED`] with status 499.
    abandoned: Option<(Arc<Metrics>, Arc<str>)>,
}

/// The outcome of a request whose client went away before the answer (status 499, as
/// proxies log it). A lead it submitted is still delivered: its retry gets the outcome.
pub const ABANDONED: &str = "ABANDONED";

/// The status logged for an abandoned request.
fn client_closed() -> StatusCode {
    StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
}

impl RequestLog {
    pub fn start(binding: &'static str, dealer: &str, headers: &HeaderMap) -> RequestLog {
        RequestLog::arrived(binding, dealer, headers, Instant::now())
    }

    /// `start` for a request that arrived at `arrived` (its latency counts from then).
    pub fn arrived(
        binding: &'static str,
        dealer: &str,
        headers: &HeaderMap,
        arrived: Instant,
    ) -> RequestLog {
        let request_id = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|id| {
                !id.is_empty()
                    && id.len() <= 64
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            })
            .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned);
        let span = tracing::debug_span!(
            "aap.request",
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            dealer,
            binding,
            skill = tracing::field::Empty,
            outcome = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            request_id = %request_id,
        );
        super::trace::link_caller(&span, headers);
        // The exported trace's id when there is one (the gateway's own; the caller's is a link
        // of its root span), else the caller's.
        let trace_id = super::trace::trace_id(&span).or_else(|| trace_id(headers));
        RequestLog {
            started: arrived,
            span,
            request_id,
            trace_id,
            binding,
            skill: NO_SKILL,
            outcome: "ok",
            abandoned: None,
        }
    }

    /// From now on, dropping this record unfinished (the client went away) writes its line
    /// and metrics as [`ABANDONED`], for `dealer`.
    pub fn count_if_abandoned(&mut self, metrics: &Arc<Metrics>, dealer: &Arc<str>) {
        self.abandoned = Some((Arc::clone(metrics), Arc::clone(dealer)));
    }

    /// Notes the skill the request named.
    pub fn skill(&mut self, skill: &SkillRef) {
        self.skill = match skill {
            SkillRef::Known(s) => s.id(),
            SkillRef::Unknown(_) => "unknown",
        };
    }

    /// Writes the log line and the metrics of the finished request.
    pub fn finish(mut self, metrics: &Metrics, dealer: &Arc<str>, status: StatusCode) {
        self.abandoned = None;
        self.write(metrics, dealer, status);
    }

    fn write(&self, metrics: &Metrics, dealer: &Arc<str>, status: StatusCode) {
        let elapsed = self.started.elapsed();
        self.span.record("skill", self.skill);
        self.span.record("outcome", self.outcome);
        self.span
            .record("http.response.status_code", status.as_u16());
        if status.is_server_error() || self.outcome == "INTERNAL_ERROR" {
            self.span.record("otel.status_code", "ERROR");
        }
        metrics.request(dealer, self.skill, self.binding, self.outcome, elapsed);
        if REFUSALS.contains(&self.outcome) {
            match SAMPLER.admit() {
                None => return,
                Some(0) => {}
                Some(skipped) => tracing::warn!(
                    target: "aap_gateway::request",
                    skipped,
                    "refused requests not logged one by one (counted in metrics)"
                ),
            }
        }
        tracing::info!(
            target: "aap_gateway::request",
            request_id = %self.request_id,
            trace_id = self.trace_id.as_deref().unwrap_or_default(),
            dealer = %dealer,
            skill = self.skill,
            binding = self.binding,
            outcome = self.outcome,
            status = status.as_u16(),
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            "request"
        );
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if let Some((metrics, dealer)) = self.abandoned.take() {
            self.outcome = ABANDONED;
            self.write(&metrics, &dealer, client_closed());
        }
    }
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), unless all zeros.
fn trace_id(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    let mut parts = value.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0');
    valid.then(|| trace.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn the_callers_trace_id_is_taken_from_a_valid_traceparent_only() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let log = RequestLog::start("jsonrpc", "d", &headers(&[("traceparent", ok)]));
        assert_eq!(
            log.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            let log = RequestLog::start("jsonrpc", "d", &headers(&[("traceparent", bad)]));
            assert_eq!(log.trace_id, None, "{bad}");
        }
    }

    #[tokio::test]
    async fn refusal_lines_are_sampled_and_the_skipped_ones_reported_with_the_next() {
        let sampler = Sampler::new(20);
        let written = (0..1000).filter(|_| sampler.admit().is_some()).count();
        assert!(
            (20..=22).contains(&written),
            "{written} lines for 1000 refusals"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let skipped = sampler.admit().expect("a line again after a while");
        assert_eq!(
            skipped as usize,
            1000 - written,
            "every refusal is accounted for"
        );
    }

    #[test]
    fn a_plain_request_id_is_kept_and_anything_else_replaced() {
        let log = RequestLog::start("jsonrpc", "d", &headers(&[("x-request-id", "abc-123.x_y")]));
        assert_eq!(log.request_id, "abc-123.x_y");
        let log = RequestLog::start(
            "jsonrpc",
            "d",
            &headers(&[("x-request-id", "a b\"<script>")]),
        );
        assert_ne!(log.request_id, "a b\"<script>");
        assert_eq!(log.request_id.len(), 36, "a UUID");
    }
}
