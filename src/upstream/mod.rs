//! Upstream: the client stack between the runtime (`engine`) and a dealer's legacy system.
//! Owns connections, timeouts, retries, breakers, auth and the SOAP and SMTP framing; uses only
//! `formats`, `settings` and `telemetry`, and knows nothing of AAP (it speaks [`UpstreamError`]).
//!
//! ```text
//!  upstream::build(name, FileUpstream) ──▶ Endpoint::Http(Upstream) | Endpoint::Smtp(Mailer)
//!
//!  engine::proxy ──── UpstreamRequest ──▶ Upstream::call              (kind: rest)
//!    soap::request ── envelope + headers ─▶   (same call)               (kind: soap)
//!                                            breaker ─ open? fail fast (CircuitOpen)
//!                                            auth    ─ static header / OAuth2 token (cached)
//!                                            pace    ─ wait ≤ timeouts.queue for the
//!                                                      upstream's pace (else Paced)
//!                                            slot    ─ wait ≤ timeouts.queue (full: Busy)
//!                                            attempt ─ under timeouts.request:
//!                                                      send → body ≤ limit
//!                                            retry   ─ idempotent only, backoff + budget
//!                                          ◀── UpstreamResponse (any status) | UpstreamError
//!                                              soap::decode_reply ─▶ Body as JSON | Fault
//!
//!  engine::feed ──── UpstreamRequest ──▶ Upstream::call → file_source::read  (kind: file)
//!                                          a local file as a 200 / 304 reply, off the workers
//!  engine::feed ──── UpstreamRequest ──▶ Upstream::call → sftp_source::Client (kind: sftp)
//!                                          pinned host key, slot, a remote file as a 200 /
//!                                          304 reply, streamed under timeouts.request
//!
//!  engine::lead ── OutgoingMail ──▶ Mailer::send                            (kind: smtp)
//!                                breaker, slot, lettre pool, under timeouts.request, no retry
//!                              ◀── MailReceipt (250 after DATA) | UpstreamError
//! ```
//!
//! The systems behind the gateway are fragile: decades-old DMS and CRM servers sized for a
//! handful of dealership users, not for AI agents that fan out. Every limit here exists to keep
//! the gateway from hurting them, and from being hurt by them:
//!
//! - `timeouts.connect` / `timeouts.request`: a hung server must not hold a buyer's call (and a
//!   gateway task) for ever; the request timeout covers the headers and the whole body, so it
//!   bounds one attempt end to end once it is sent.
//! - `max_concurrency`: legacy servers fall over under parallel load; excess calls queue in the
//!   gateway, not on the server, for at most `timeouts.queue`. A full queue is the gateway's
//!   own overload, so it never counts against the upstream's circuit breaker.
//! - `max_requests_per_second` and the upstream's own limits (`Retry-After` on 429/503,
//!   `X-RateLimit-Remaining`/`-Reset`): calls are spaced in the order they ask, a call whose
//!   turn is further than `timeouts.queue` away is refused with the wait as its hint, so a
//!   burst of buyers never reaches the server as a burst (`pace`).
//! - `retries` with a budget: a retry can rescue a transient failure, but under sustained
//!   failure unbudgeted retries multiply the load just when the server can least take it. Only
//!   idempotent calls are retried: a lead must not be delivered twice.
//! - `circuit_breaker`: a server that keeps failing gets a rest instead of every call waiting for
//!   its timeout; one trial call per cool-down finds out when it is back.
//! - `max_response_bytes`: a runaway query or a broken server must not make the gateway buffer
//!   gigabytes (checked on `Content-Length`, while streaming, and after gzip decompression).
//!
//! Logging: one `debug` event per attempt (upstream, method, path without the query string,
//! attempt, status or error, elapsed; for mail: upstream, outcome, elapsed) and a `warn` when the
//! breaker opens or closes. Header values, bodies, recipients and subjects are never logged.
//!
//! Trace propagation: the caller adds `traceparent` (and any other per-call header) to
//! [`UpstreamRequest::headers`]; per-call headers replace static `headers` of the same name.

mod auth;
mod breaker;
mod client;
pub mod config;
mod file_source;
mod http_client;
mod pace;
mod retry;
mod sftp_source;
pub mod smtp;
pub mod soap;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

pub use breaker::BreakerState;
pub use client::{BodyStream, HttpClients, Upstream, Verdict};
pub use config::{
    EndpointSettings, FileCircuitBreaker, FileClientAuth, FilePasswordType, FileRetries, FileSftp,
    FileSmtp, FileSoap, FileSoapVersion, FileStartTls, FileTimeouts, FileTls, FileUpstream,
    FileUpstreamAuth, FileUpstreamKind, OAuth2Settings, Secret, SmtpCredentials, SmtpSettings,
    SmtpTls, UpstreamAuth, UpstreamConfigProblem, UpstreamSettings,
};
pub use pace::{retry_after, stated_window};
pub use smtp::{MailPart, MailReceipt, Mailer, OutgoingMail};
pub use soap::{SoapFault, SoapReply, SoapSettings, SoapVersion, WsSecurity};

/// A built upstream of any kind: what the mapping loader keeps per `upstreams.yaml` entry.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// `kind: rest` and `kind: soap` (see [`Upstream::soap`]); `kind: file` and `kind: sftp`,
    /// which only a feed reads.
    Http(Upstream),
    /// `kind: smtp`.
    Smtp(Mailer),
}

/// Validates one `upstreams.yaml` entry of any kind and builds it. Every problem is reported at
/// once, located by a JSON Pointer relative to the entry.
pub fn build(name: &str, file: FileUpstream) -> Result<Endpoint, Vec<UpstreamConfigProblem>> {
    build_sharing(name, file, &HttpClients::default())
}

/// [`build`], an HTTP upstream taking its client from `clients` (see [`HttpClients`]).
pub fn build_sharing(
    name: &str,
    file: FileUpstream,
    clients: &HttpClients,
) -> Result<Endpoint, Vec<UpstreamConfigProblem>> {
    match file.validate_endpoint()? {
        EndpointSettings::Http(settings) => {
            Upstream::from_settings_sharing(name, settings, clients).map(Endpoint::Http)
        }
        EndpointSettings::Smtp(settings) => {
            Mailer::from_settings(name, settings).map(Endpoint::Smtp)
        }
    }
}

impl Endpoint {
    /// The upstream's name (its key in `upstreams.yaml`).
    pub fn name(&self) -> &str {
        match self {
            Endpoint::Http(upstream) => upstream.name(),
            Endpoint::Smtp(mailer) => mailer.name(),
        }
    }
}

/// One call to an upstream, fully rendered by the mapping.
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    pub method: Method,
    /// Path and query, already percent-encoded, starting with `/` (appended to the base URL's
    /// path) or `?` (a query on the base URL itself), or empty (the base URL itself, as for most
    /// SOAP endpoints).
    pub path_and_query: String,
    /// Per-call headers (content type, `traceparent` …); they replace static headers of the
    /// same name. Authentication headers are added by the client.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<Bytes>,
    /// Safe to send twice. `GET` and `HEAD` are always treated as idempotent.
    pub idempotent: bool,
}

impl UpstreamRequest {
    /// A `GET` of `path_and_query`, no body.
    pub fn get(path_and_query: impl Into<String>) -> UpstreamRequest {
        UpstreamRequest::new(Method::GET, path_and_query)
    }

    /// A call without headers or body, not marked idempotent.
    pub fn new(method: Method, path_and_query: impl Into<String>) -> UpstreamRequest {
        UpstreamRequest {
            method,
            path_and_query: path_and_query.into(),
            headers: Vec::new(),
            body: None,
            idempotent: false,
        }
    }
}

/// The upstream's reply, whatever its status.
#[derive(Debug)]
pub struct UpstreamResponse {
    pub status: StatusCode,
    /// Reply headers (`Content-Encoding`/`Content-Length` removed when the body was
    /// decompressed).
    pub headers: HeaderMap,
    /// The whole body, decompressed, at most `max_response_bytes`.
    pub body: Bytes,
    /// Time spent in [`Upstream::call`], retries and waits included.
    pub elapsed: Duration,
    /// A 5xx reply's judgement, left to the caller: dropped, it counts as an upstream failure
    /// (circuit breaker, error metric); [`Verdict::answered`] counts it as an answer.
    pub verdict: Option<Verdict>,
    /// The OAuth2 token the request carried, by generation (for [`Upstream::token_refused`]).
    pub token_generation: Option<u64>,
}

/// Why a call produced no usable reply.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// An attempt (headers and body, once it held a slot) exceeded `timeouts.request`.
    #[error("no complete reply within {}", humantime::format_duration(*after))]
    Timeout { after: Duration },
    /// No connection: refused, unreachable, DNS failure, or `timeouts.connect` exceeded.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The circuit breaker is open: the upstream failed repeatedly and is resting for about
    /// `retry_after` more.
    #[error("circuit breaker open (retry after {})", humantime::format_duration(*retry_after))]
    CircuitOpen { retry_after: Duration },
    /// Every `max_concurrency` slot stayed taken for `timeouts.queue`: the gateway's own queue
    /// is full, nothing was sent (not an upstream failure).
    #[error("no free concurrency slot within {}", humantime::format_duration(*waited))]
    Busy { waited: Duration },
    /// The upstream's pace (`max_requests_per_second`, or the limits it stated itself:
    /// `Retry-After`, `X-RateLimit-*`) would start this call only `retry_after` from now, past
    /// `timeouts.queue`: refused before anything was sent (not an upstream failure).
    #[error("paced: the upstream takes the next call in {}", humantime::format_duration(*retry_after))]
    Paced { retry_after: Duration },
    /// The reply body exceeded `max_response_bytes`.
    #[error("reply larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// Malformed HTTP, a TLS failure, a broken connection mid-reply, a corrupt gzip stream.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Authentication could not be obtained (OAuth2 token fetch failed) or was refused (SMTP
    /// `AUTH`).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The mail server refused the message: a 4xx (transient) or 5xx (permanent) reply. `reply`
    /// holds the codes only (e.g. `451 4.3.0`), never the server's text.
    #[error("mail refused ({}): {reply}", if *permanent { "permanent" } else { "transient" })]
    Rejected { reply: String, permanent: bool },
    /// An SFTP server showed a host key that is not pinned (`sftp.host_key`): refused before
    /// the login, nothing read.
    #[error("host key refused: {0}")]
    HostKey(String),
    /// The caller built an invalid request (a bug in a mapping, not an upstream failure).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl UpstreamError {
    /// The failure's `kind`, as metrics and traces name it (docs/operations.md §Metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Connect(_) => "connect",
            UpstreamError::CircuitOpen { .. } => "circuit_open",
            UpstreamError::Busy { .. } => "queue_full",
            UpstreamError::Paced { .. } => "paced",
            UpstreamError::TooLarge { .. } => "too_large",
            UpstreamError::Protocol(_) | UpstreamError::InvalidRequest(_) => "invalid_response",
            UpstreamError::Auth(_) => "auth",
            UpstreamError::HostKey(_) => "host_key",
            UpstreamError::Rejected { .. } => "rejected",
        }
    }
}

/// An error and its causes, `outer: inner: root`, repeated messages skipped.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let message = e.to_string();
        if !out.ends_with(&message) {
            out.push_str(": ");
            out.push_str(&message);
        }
        source = e.source();
    }
    out
}
