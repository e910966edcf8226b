//! [`Upstream`]: one legacy system behind its protective stack, and [`Upstream::call`].
//!
//! A call goes through, in order:
//!
//! 1. the circuit breaker (open → [`UpstreamError::CircuitOpen`] at once, with the rest of the
//!    cool-down as a retry hint);
//! 2. authentication (an OAuth2 token may be fetched, single flight);
//! 3. a wait of at most `timeouts.queue` for one of `max_concurrency` slots (none free →
//!    [`UpstreamError::Busy`]: the gateway's own overload, reported to nobody's breaker);
//! 4. one attempt under `timeouts.request`: send, read the reply's headers and its body up to
//!    `max_response_bytes`;
//! 5. the outcome is reported to the breaker; an idempotent call whose attempt failed with a
//!    connect error, a timeout, 502, 503 or 504 is tried again after a jittered backoff, if
//!    `retries.attempts` and the retry budget allow; a 401 under OAuth2 drops the token and tries
//!    once more with a fresh one.
//!
//! Non-2xx replies are returned as replies: the mapping's error rules decide what they mean.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode};
use tokio::sync::Semaphore;
use tracing::Instrument as _;
use url::Url;

use super::auth::{Auth, Credential};
use super::breaker::{Breaker, BreakerState};
use super::config::{FileUpstream, RESERVED_HEADERS, UpstreamConfigProblem, UpstreamSettings};
use super::http_client::{CallError, ClientSettings, HttpClient, ReplyBody};
use super::pace::{Pacer, retry_after};
use super::retry::{RetryBudget, backoff};
use super::{UpstreamError, UpstreamRequest, UpstreamResponse};

/// The breaker's (and the error metric's) report of a 5xx reply, left to the caller, who knows
/// what the reply means: a SOAP 1.1 fault arrives as HTTP 500 and may mean "no such unit".
/// Dropped unjudged, the reply counts as an upstream failure, as any 5xx did before.
#[derive(Debug)]
pub struct Verdict {
    upstream: Upstream,
    trial: bool,
    settled: bool,
}

impl Verdict {
    /// The reply is an answer (a mapping's error rule recognised it): the upstream works.
    pub fn answered(mut self) {
        self.settled = true;
        self.upstream.inner.breaker.record(self.trial, true);
    }
}

impl Drop for Verdict {
    fn drop(&mut self) {
        if !self.settled {
            self.upstream.inner.breaker.record(self.trial, false);
            if let Some(meter) = self.upstream.inner.meter.get() {
                meter.status_failure();
            }
        }
    }
}

/// Idle pooled connections are closed after this long. Legacy servers often drop idle
/// keep-alive connections after 5–60 s; closing ours first avoids sending on a dead one.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// One upstream system, ready to call. Cheap to clone (shared state: the connection pool, the
/// breaker, the retry budget, the concurrency slots and the token cache).
#[derive(Debug, Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    /// The base URL's path without a trailing `/`; a call's path is appended.
    path_prefix: String,
    base_url: Url,
    settings: UpstreamSettings,
    client: HttpClient,
    slots: Semaphore,
    breaker: Breaker,
    budget: RetryBudget,
    /// `max_requests_per_second` and the upstream's own stated limits.
    pacer: Pacer,
    auth: Auth,
    /// Metrics of this upstream's calls, once the app attaches them.
    meter: std::sync::OnceLock<crate::telemetry::metrics::Meter>,
    /// `kind: sftp`: the SSH client's settings.
    sftp: Option<super::sftp_source::Client>,
}

impl Upstream {
    /// Validates one `upstreams.yaml` entry of an HTTP kind (`rest`, `soap`) and builds its
    /// client (connection pool, TLS roots); `kind: smtp` is a problem here (see
    /// [`super::build`]). Every problem is reported at once, located by a JSON Pointer relative
    /// to the entry.
    pub fn build(name: &str, file: FileUpstream) -> Result<Upstream, Vec<UpstreamConfigProblem>> {
        let settings = file.validate()?;
        Upstream::from_settings(name, settings)
    }

    /// Builds the client for already validated settings.
    pub fn from_settings(
        name: &str,
        settings: UpstreamSettings,
    ) -> Result<Upstream, Vec<UpstreamConfigProblem>> {
        Upstream::from_settings_sharing(name, settings, &HttpClients::default())
    }

    /// [`Upstream::from_settings`], taking its HTTP client from `clients` when one with the same
    /// settings was built already.
    pub fn from_settings_sharing(
        name: &str,
        settings: UpstreamSettings,
        clients: &HttpClients,
    ) -> Result<Upstream, Vec<UpstreamConfigProblem>> {
        if settings.insecure_skip_verify {
            tracing::warn!(
                upstream = name,
                "tls.insecure_skip_verify is on: the upstream's certificate is not checked"
            );
        }
        let client = clients.client(&settings)?;
        let auth = Auth::new(
            name,
            settings.auth.clone(),
            client.clone(),
            settings.request_timeout,
        );
        let base_url = settings.base_url.clone();
        let sftp = (settings.sftp.clone())
            .map(|sftp| super::sftp_source::Client::new(sftp, settings.request_timeout));
        Ok(Upstream {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                path_prefix: base_url.path().trim_end_matches('/').to_owned(),
                base_url,
                slots: Semaphore::new(settings.max_concurrency),
                breaker: Breaker::new(name, settings.breaker_failures, settings.breaker_cool_down),
                budget: RetryBudget::new(settings.budget_percent, settings.budget_min_per_sec),
                pacer: Pacer::new(settings.max_requests_per_second),
                auth,
                client,
                settings,
                meter: std::sync::OnceLock::new(),
                sftp,
            }),
        })
    }
}

/// The HTTP clients (connection pools, TLS roots) of one configuration load, by the settings
/// that shape them. Building a client reads and parses the system's root certificates, which
/// took most of the start-up of a group of 100 dealers and a good share of its memory; dealers
/// whose upstreams have the same client settings share one client instead. Connections are
/// pooled per host inside a client, and every other piece of an upstream (breaker, concurrency
/// slots, retry budget, credentials) stays its own. A client with its own `tls.ca_file` is
/// never shared.
#[derive(Debug, Default)]
pub struct HttpClients {
    built: std::sync::Mutex<std::collections::HashMap<ClientKey, HttpClient>>,
    /// Clients built through this cache, shared or not.
    builds: std::sync::atomic::AtomicUsize,
}

/// What a shared client is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey {
    connect_timeout: Duration,
    max_concurrency: usize,
    insecure_skip_verify: bool,
}

impl HttpClients {
    /// How many clients were built through this cache (for tests and logs).
    pub fn len(&self) -> usize {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// True before the first client.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn build(&self, settings: &UpstreamSettings) -> Result<HttpClient, Vec<UpstreamConfigProblem>> {
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        build_client(settings)
    }

    fn client(
        &self,
        settings: &UpstreamSettings,
    ) -> Result<HttpClient, Vec<UpstreamConfigProblem>> {
        if !settings.ca_certificates.is_empty() {
            return self.build(settings);
        }
        let key = ClientKey {
            connect_timeout: settings.connect_timeout,
            max_concurrency: settings.max_concurrency,
            insecure_skip_verify: settings.insecure_skip_verify,
        };
        let Ok(mut built) = self.built.lock() else {
            return self.build(settings);
        };
        if let Some(client) = built.get(&key) {
            return Ok(client.clone());
        }
        let client = self.build(settings)?;
        built.insert(key, client.clone());
        Ok(client)
    }
}

/// The body of a streamed 2xx reply ([`Upstream::call_streaming`]), read as it arrives.
#[derive(Debug)]
pub struct BodyStream<'a> {
    body: Body,
    upstream: &'a Upstream,
    limit: usize,
    read: usize,
    /// The attempt's `timeouts.request` covers the whole body.
    deadline: tokio::time::Instant,
    /// The concurrency slot the reply holds until it is read.
    _slot: tokio::sync::SemaphorePermit<'a>,
}

/// Where a streamed body comes from.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "the HTTP body is the stream as it always was; the SFTP one is boxed to stay small"
)]
enum Body {
    Http(ReplyBody),
    /// `kind: sftp`: a remote file being read.
    Sftp(Box<super::sftp_source::Body>),
}

impl BodyStream<'_> {
    /// The next piece of the body (decompressed); `None` at its end. Past `max_response_bytes`
    /// or `timeouts.request` it fails, and the body is to be dropped.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        let after = self.upstream.inner.settings.request_timeout;
        let piece = async {
            match &mut self.body {
                Body::Http(body) => body.chunk().await.map_err(|e| self.upstream.classify(&e)),
                Body::Sftp(body) => body.chunk().await,
            }
        };
        let chunk = tokio::time::timeout_at(self.deadline, piece)
            .await
            .map_err(|_| UpstreamError::Timeout { after })??;
        if let Some(chunk) = &chunk {
            self.read += chunk.len();
            if self.read > self.limit {
                return Err(UpstreamError::TooLarge { limit: self.limit });
            }
        }
        Ok(chunk)
    }
}

/// A client for `settings`.
fn build_client(settings: &UpstreamSettings) -> Result<HttpClient, Vec<UpstreamConfigProblem>> {
    HttpClient::new(&ClientSettings {
        connect_timeout: settings.connect_timeout,
        pool_idle_timeout: POOL_IDLE_TIMEOUT,
        max_idle_per_host: settings.max_concurrency,
        insecure_skip_verify: settings.insecure_skip_verify,
        ca_certificates: &settings.ca_certificates,
    })
    .map_err(|message| {
        vec![UpstreamConfigProblem {
            pointer: "/tls".to_owned(),
            message: format!("cannot build the HTTP client: {message}"),
        }]
    })
}

impl Upstream {
    /// The upstream's name (its key in `upstreams.yaml`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The upstream refused the OAuth2 token of a reply that is a success on the wire (a
    /// GraphQL `UNAUTHENTICATED` on HTTP 200; a mapping's `errors` rule says so): forgets it as
    /// a 401 would. `true` when the next call will carry a fresh token, so one more try makes
    /// sense (at most one forced refresh per interval, as for 401s).
    pub fn token_refused(&self, generation: Option<u64>) -> bool {
        self.inner.auth.invalidate_generation(generation)
    }

    /// Whether calls carry an OAuth2 token (`auth.kind: oauth2`).
    pub fn uses_oauth2(&self) -> bool {
        matches!(self.inner.auth, super::auth::Auth::OAuth2(_))
    }

    /// The validated base URL.
    pub fn base_url(&self) -> &Url {
        &self.inner.base_url
    }

    /// The validated settings.
    pub fn settings(&self) -> &UpstreamSettings {
        &self.inner.settings
    }

    /// The circuit breaker's state (`aap_gateway_upstream_breaker_open` shows it).
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state()
    }

    /// Where this upstream's calls are counted, once the app attached it.
    pub fn meter(&self) -> Option<&crate::telemetry::metrics::Meter> {
        self.inner.meter.get()
    }

    /// Calls the upstream. Any HTTP reply is returned (non-2xx included, after retries of
    /// 502/503/504 for idempotent calls); `Err` means no usable reply.
    ///
    /// Cancel-safe: dropping the future releases the concurrency slot and the breaker's trial.
    pub async fn call(&self, req: UpstreamRequest) -> Result<UpstreamResponse, UpstreamError> {
        self.call_metered(req, false)
            .await
            .map(|(response, _)| response)
    }

    /// [`Upstream::call`] for a reply too large to hold whole (an inventory feed): a 2xx
    /// reply comes back as soon as its headers arrive, with an empty `body` and the body to
    /// read from [`BodyStream::chunk`] as it arrives, under the same `timeouts.request`
    /// (counted from the start of the attempt) and `max_response_bytes`. The concurrency slot
    /// is held until the stream is dropped. Any other reply is read whole, as by `call`, and
    /// has no stream. Retries happen only before a 2xx reply's headers: a body that breaks
    /// off fails the call.
    pub async fn call_streaming(
        &self,
        req: UpstreamRequest,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'_>>), UpstreamError> {
        self.call_metered(req, true).await
    }

    async fn call_metered(
        &self,
        mut req: UpstreamRequest,
        stream: bool,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'_>>), UpstreamError> {
        let span = tracing::debug_span!(
            "upstream",
            otel.kind = "client",
            upstream = %self.inner.name,
            http.request.method = %req.method,
            http.response.status_code = tracing::field::Empty,
            error.kind = tracing::field::Empty,
        );
        // The dealer's system continues the trace (W3C `traceparent`) when traces are exported.
        req.headers
            .extend(span.in_scope(crate::telemetry::trace::outgoing));
        let started = Instant::now();
        let result = if self.is_file() {
            self.read_file(req).instrument(span.clone()).await
        } else if let Some(sftp) = &self.inner.sftp {
            // Boxed, type erased: the SSH stack's futures nest deep, and every future that
            // awaits a call (a buyer's request included) would otherwise carry their layout
            // (past the compiler's recursion limit). One allocation per SFTP read is nothing.
            let read: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> =
                Box::pin(self.read_sftp(sftp, req, stream));
            read.instrument(span.clone()).await
        } else {
            self.call_unmetered(req, stream)
                .instrument(span.clone())
                .await
        };
        match &result {
            Ok((reply, _)) => span.record("http.response.status_code", reply.status.as_u16()),
            Err(e) => span.record("error.kind", e.kind()),
        };
        if let Some(meter) = self.inner.meter.get() {
            meter.observe(
                result
                    .as_ref()
                    .map(|(r, _)| r.status.as_u16())
                    .map_err(UpstreamError::kind),
                started.elapsed(),
            );
        }
        result
    }

    /// Attaches the breaker report of a returned 5xx reply to it, for the caller to judge.
    fn with_verdict<'a>(
        outcome: Result<UpstreamResponse, UpstreamError>,
        verdict: Option<Verdict>,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'a>>), UpstreamError> {
        outcome.map(|mut response| {
            response.verdict = verdict;
            (response, None)
        })
    }

    /// Records this upstream's calls in `meter` from now on (set once, by the app).
    pub fn attach_meter(&self, meter: crate::telemetry::metrics::Meter) {
        self.inner.breaker.attach_gauge(meter.breaker_gauge());
        let _ = self.inner.meter.set(meter);
    }

    /// Whether this is a `kind: file` upstream: its calls read local files
    /// (`upstream/file_source.rs`).
    pub fn is_file(&self) -> bool {
        self.inner.base_url.scheme() == "file"
    }

    /// Whether this is a `kind: sftp` upstream: its calls read files over SFTP
    /// (`upstream/sftp_source.rs`).
    pub fn is_sftp(&self) -> bool {
        self.inner.sftp.is_some()
    }

    /// A call to a `kind: file` upstream: the file read off the async workers, within
    /// `timeouts.request` and `max_response_bytes`, answered as a reply (never streamed).
    async fn read_file(
        &self,
        req: UpstreamRequest,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'_>>), UpstreamError> {
        let started = Instant::now();
        let base = (self.inner.base_url.to_file_path()).map_err(|()| {
            UpstreamError::InvalidRequest("base_url names no local directory".to_owned())
        })?;
        let limit = self.inner.settings.max_response_bytes;
        let timeout = self.inner.settings.request_timeout;
        let reading =
            tokio::task::spawn_blocking(move || super::file_source::read(&base, &req, limit));
        let (status, headers, body) = match tokio::time::timeout(timeout, reading).await {
            Err(_) => return Err(UpstreamError::Timeout { after: timeout }),
            Ok(Err(e)) => return Err(UpstreamError::Protocol(format!("reading stopped: {e}"))),
            Ok(Ok(read)) => read?,
        };
        tracing::debug!(upstream = %self.inner.name, status = status.as_u16(), "file read");
        let response = UpstreamResponse {
            status,
            headers,
            body,
            elapsed: started.elapsed(),
            verdict: None,
            token_generation: None,
        };
        Ok((response, None))
    }

    /// A call to a `kind: sftp` upstream (`upstream/sftp_source.rs`): one of `max_concurrency`
    /// slots (waited for at most `timeouts.queue`), then the connection within
    /// `timeouts.connect` and the whole read within `timeouts.request`, at most
    /// `max_response_bytes`; streamed when `stream` asks, else read whole.
    async fn read_sftp<'a>(
        &'a self,
        sftp: &super::sftp_source::Client,
        req: UpstreamRequest,
        stream: bool,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'a>>), UpstreamError> {
        let inner = &*self.inner;
        let started = Instant::now();
        let waited = inner.settings.queue_timeout;
        let slot = match tokio::time::timeout(waited, inner.slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err(UpstreamError::Protocol("upstream closed".to_owned())),
            Err(_) => return Err(UpstreamError::Busy { waited }),
        };
        let after = inner.settings.request_timeout;
        let deadline = tokio::time::Instant::now() + after;
        let limit = inner.settings.max_response_bytes;
        let opening = sftp.open(&inner.name, &req, inner.settings.connect_timeout, limit);
        let (status, headers, body) = tokio::time::timeout_at(deadline, opening)
            .await
            .map_err(|_| UpstreamError::Timeout { after })??;
        tracing::debug!(upstream = %inner.name, status = status.as_u16(), "sftp file opened");
        let mut response = UpstreamResponse {
            status,
            headers,
            body: Bytes::new(),
            elapsed: started.elapsed(),
            verdict: None,
            token_generation: None,
        };
        let Some(body) = body else {
            return Ok((response, None));
        };
        let mut body = BodyStream {
            body: Body::Sftp(Box::new(body)),
            upstream: self,
            limit,
            read: 0,
            deadline,
            _slot: slot,
        };
        if stream {
            return Ok((response, Some(body)));
        }
        let mut whole = BytesMut::new();
        while let Some(chunk) = body.chunk().await? {
            whole.extend_from_slice(&chunk);
        }
        response.body = whole.freeze();
        response.elapsed = started.elapsed();
        Ok((response, None))
    }

    async fn call_unmetered(
        &self,
        req: UpstreamRequest,
        stream: bool,
    ) -> Result<(UpstreamResponse, Option<BodyStream<'_>>), UpstreamError> {
        let inner = &*self.inner;
        let started = Instant::now();
        let url = self.url(&req.path_and_query)?;
        if let Some((name, _)) = req
            .headers
            .iter()
            .find(|(name, _)| RESERVED_HEADERS.contains(&name.as_str()))
        {
            return Err(UpstreamError::InvalidRequest(format!(
                "header `{name}` is set by the client itself"
            )));
        }
        // Only the path is logged: query strings may carry personal data.
        let path = req
            .path_and_query
            .split_once('?')
            .map_or(req.path_and_query.as_str(), |(path, _)| path);
        let retryable = req.idempotent || matches!(req.method, Method::GET | Method::HEAD);
        inner.budget.deposit();

        let mut attempt: u32 = 1;
        let mut reauthenticated = false;
        let mut last: Option<Result<UpstreamResponse, UpstreamError>> = None;
        loop {
            let permit = match inner.breaker.try_acquire() {
                Ok(permit) => permit,
                Err(retry_after) => {
                    tracing::debug!(
                        upstream = %inner.name,
                        method = %req.method,
                        path,
                        attempt,
                        "circuit open; not calling"
                    );
                    return Self::with_verdict(
                        last.unwrap_or(Err(UpstreamError::CircuitOpen { retry_after })),
                        None,
                    );
                }
            };
            let credential = inner.auth.credential().await?;
            // The upstream's pace: a turn within `timeouts.queue`, in the order calls ask, or
            // refused at once (nothing sent, the breaker left alone). A retry after the
            // upstream's `Retry-After` waits here for it.
            match inner.pacer.reserve(inner.settings.queue_timeout) {
                Ok(wait) if wait.is_zero() => {}
                Ok(wait) => tokio::time::sleep(wait).await,
                Err(retry_after) => {
                    tracing::debug!(
                        upstream = %inner.name,
                        method = %req.method,
                        path,
                        attempt,
                        wait_ms = retry_after.as_millis() as u64,
                        "the upstream's pace has no turn within timeouts.queue; not calling"
                    );
                    return Self::with_verdict(
                        last.unwrap_or(Err(UpstreamError::Paced { retry_after })),
                        None,
                    );
                }
            }
            // Waiting for a slot is local queueing, not the upstream's time: it has its own
            // bound, and a full queue leaves the breaker alone (the permit is dropped unused).
            let waited = inner.settings.queue_timeout;
            let slot = match tokio::time::timeout(waited, inner.slots.acquire()).await {
                Ok(Ok(slot)) => slot,
                Ok(Err(_)) => return Err(UpstreamError::Protocol("upstream closed".to_owned())),
                Err(_) => {
                    tracing::debug!(
                        upstream = %inner.name,
                        method = %req.method,
                        path,
                        attempt,
                        "no free concurrency slot; not calling"
                    );
                    return Self::with_verdict(
                        last.unwrap_or(Err(UpstreamError::Busy { waited })),
                        None,
                    );
                }
            };
            let attempt_started = Instant::now();
            // A 5xx try's breaker report, until it is known whether it is retried or returned.
            let mut deferred: Option<Verdict> = None;
            let attempted = self.attempt(&url, &req, credential.as_ref(), stream).await;
            let (outcome, live) = match attempted {
                Ok((status, headers, body, live)) => (
                    Ok(UpstreamResponse {
                        status,
                        headers,
                        body,
                        elapsed: started.elapsed(),
                        verdict: None,
                        token_generation: credential.as_ref().and_then(|c| c.token_generation),
                    }),
                    live,
                ),
                Err(e) => (Err(e), None),
            };
            // A streamed 2xx keeps its slot until its body is read; any other reply frees it
            // for the next caller during any backoff.
            let slot = match live {
                Some(_) => Some(slot),
                None => {
                    drop(slot);
                    None
                }
            };
            let elapsed_ms = attempt_started.elapsed().as_millis() as u64;
            // The upstream's own limits pace the calls that follow; a `Retry-After` on a 429 or
            // 503 also decides whether this one is tried again.
            let stated = match &outcome {
                Ok(response) => {
                    inner.pacer.observe(response.status, &response.headers);
                    matches!(
                        response.status,
                        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
                    )
                    .then(|| retry_after(&response.headers))
                    .flatten()
                }
                Err(_) => None,
            };
            match &outcome {
                Ok(response) => {
                    tracing::debug!(
                        upstream = %inner.name,
                        method = %req.method,
                        path,
                        attempt,
                        status = response.status.as_u16(),
                        elapsed_ms,
                        "upstream attempt"
                    );
                    if response.status.is_server_error() {
                        deferred = Some(Verdict {
                            upstream: self.clone(),
                            trial: permit.defer(),
                            settled: false,
                        });
                    } else {
                        permit.record(true);
                    }
                }
                Err(error) => {
                    tracing::debug!(
                        upstream = %inner.name,
                        method = %req.method,
                        path,
                        attempt,
                        error = %crate::telemetry::Escaped(error),
                        elapsed_ms,
                        "upstream attempt failed"
                    );
                    permit.record(matches!(error, UpstreamError::TooLarge { .. }));
                }
            }

            if let (Some(response), Some(slot)) = (live, slot) {
                // Only a 2xx is streamed, and a 2xx is never retried.
                let after = inner.settings.request_timeout;
                let stream = BodyStream {
                    body: Body::Http(response),
                    upstream: self,
                    limit: inner.settings.max_response_bytes,
                    read: 0,
                    deadline: tokio::time::Instant::from_std(attempt_started) + after,
                    _slot: slot,
                };
                return outcome.map(|response| (response, Some(stream)));
            }
            if let Ok(response) = &outcome
                && response.status == StatusCode::UNAUTHORIZED
                && !reauthenticated
                && inner.auth.invalidate(credential.as_ref())
            {
                // The token was revoked or expired early: a 401 means the request was not
                // processed, so one more try with a fresh token is safe for any method.
                reauthenticated = true;
                last = Some(outcome);
                continue;
            }

            let worth_retrying = match (&outcome, stated) {
                // Told when to come back: only when that is short (`retries.max_backoff`); a
                // longer wait is the caller's, with the upstream's hint.
                (Ok(_), Some(after)) => after <= inner.settings.max_backoff,
                (Ok(response), None) => matches!(
                    response.status,
                    StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                ),
                (Err(error), _) => matches!(
                    error,
                    UpstreamError::Connect(_) | UpstreamError::Timeout { .. }
                ),
            };
            if !(retryable && worth_retrying && attempt < inner.settings.attempts) {
                return Self::with_verdict(outcome, deferred);
            }
            if !inner.budget.try_withdraw() {
                tracing::debug!(upstream = %inner.name, path, "retry budget spent; not retrying");
                return Self::with_verdict(outcome, deferred);
            }
            // Retried: this try's 5xx is a failure (the verdict's drop reports it).
            drop(deferred);
            if stated.is_none() {
                tokio::time::sleep(backoff(
                    attempt,
                    inner.settings.backoff,
                    inner.settings.max_backoff,
                ))
                .await;
            }
            attempt += 1;
            last = Some(outcome);
        }
    }

    /// The full URL of a call: base URL (path as a prefix) + `path_and_query`; an empty one or
    /// one starting with `?` addresses the base URL itself.
    fn url(&self, path_and_query: &str) -> Result<Url, UpstreamError> {
        let invalid = |why: &str| UpstreamError::InvalidRequest(format!("request path {why}"));
        if !matches!(path_and_query.bytes().next(), None | Some(b'/' | b'?')) {
            return Err(invalid("must start with `/` or `?`, or be empty"));
        }
        if path_and_query
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'#' || !b.is_ascii())
        {
            return Err(invalid(
                "must be percent-encoded (no spaces, control characters, `#` or non-ASCII)",
            ));
        }
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        // The base URL's scheme, host and port as parsed at load (parsing them again per call
        // cost more than the rest of the URL); only the path and query are the call's.
        let mut url = self.inner.base_url.clone();
        if !path.is_empty() {
            let mut full = String::with_capacity(self.inner.path_prefix.len() + path.len());
            full.push_str(&self.inner.path_prefix);
            full.push_str(path);
            url.set_path(&full);
        }
        url.set_query(query);
        Ok(url)
    }

    /// One try under `timeouts.request`, its concurrency slot held: send, headers, body.
    #[allow(clippy::type_complexity)]
    async fn attempt(
        &self,
        url: &Url,
        req: &UpstreamRequest,
        credential: Option<&Credential>,
        stream: bool,
    ) -> Result<(StatusCode, HeaderMap, Bytes, Option<ReplyBody>), UpstreamError> {
        let inner = &*self.inner;
        let limit = inner.settings.max_response_bytes;
        let work = async {
            let mut headers = HeaderMap::with_capacity(inner.settings.headers.len() + 4);
            for (name, value) in &inner.settings.headers {
                headers.insert(name.clone(), value.clone());
            }
            // The caller's headers (content type, `traceparent` …) replace static ones.
            for (name, _) in &req.headers {
                headers.remove(name);
            }
            for (name, value) in &req.headers {
                headers.append(name.clone(), value.clone());
            }
            if let Some(credential) = credential {
                headers.insert(credential.name.clone(), credential.value.clone());
            }
            // The URL was built from a parsed base URL and a checked path: it is a valid URI.
            let uri = http::Uri::try_from(url.as_str())
                .map_err(|e| UpstreamError::InvalidRequest(format!("request URL: {e}")))?;
            let reply = inner
                .client
                .send(req.method.clone(), uri, headers, req.body.clone())
                .await
                .map_err(|e| self.classify(&e))?;
            let (parts, mut body) = reply.into_parts();
            let declared = body.exact_len();
            if declared.is_some_and(|len| len > limit as u64) {
                return Err(UpstreamError::TooLarge { limit });
            }
            let status = parts.status;
            if stream && status.is_success() {
                return Ok((status, parts.headers, Bytes::new(), Some(body)));
            }
            // Chunks arrive decompressed, so the limit also holds for gzip bombs. A body that
            // arrives in one piece (most replies) is kept as it is, not copied.
            let first = body.chunk().await.map_err(|e| self.classify(&e))?;
            let Some(first) = first else {
                return Ok((status, parts.headers, Bytes::new(), None));
            };
            if first.len() > limit {
                return Err(UpstreamError::TooLarge { limit });
            }
            let Some(second) = body.chunk().await.map_err(|e| self.classify(&e))? else {
                return Ok((status, parts.headers, first, None));
            };
            // Room for the declared length (never past the limit), else for the two pieces.
            let room = declared.map_or(first.len() + second.len(), |len| len as usize);
            let mut all = BytesMut::with_capacity(room.min(limit));
            all.extend_from_slice(&first);
            let mut next = Some(second);
            while let Some(chunk) = next {
                if all.len() + chunk.len() > limit {
                    return Err(UpstreamError::TooLarge { limit });
                }
                all.extend_from_slice(&chunk);
                next = body.chunk().await.map_err(|e| self.classify(&e))?;
            }
            Ok((status, parts.headers, all.freeze(), None))
        };
        let after = inner.settings.request_timeout;
        tokio::time::timeout(after, work)
            .await
            .unwrap_or(Err(UpstreamError::Timeout { after }))
    }

    /// What a call that got no reply means for the caller (and the breaker). Messages never
    /// carry the URL: its query string may carry personal data and ends up in logs.
    fn classify(&self, error: &CallError) -> UpstreamError {
        if error.is_tls_handshake() {
            return UpstreamError::Protocol(format!("TLS: {error}"));
        }
        match error {
            CallError::ConnectTimeout => UpstreamError::Connect(format!(
                "no connection within {}",
                humantime::format_duration(self.inner.settings.connect_timeout)
            )),
            CallError::Connect(_) => UpstreamError::Connect(error.to_string()),
            CallError::Send(_) | CallError::Body(_) => UpstreamError::Protocol(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(entry: serde_json::Value) -> UpstreamSettings {
        let file: FileUpstream = serde_json::from_value(entry).expect("valid entry");
        file.validate().expect("valid settings")
    }

    #[test]
    fn upstreams_with_the_same_client_settings_share_one_client_and_keep_their_own_state() {
        let clients = HttpClients::default();
        let a = json!({ "kind": "rest", "base_url": "http://127.0.0.1:1" });
        let b = json!({ "kind": "rest", "base_url": "http://127.0.0.1:2", "max_concurrency": 3 });
        let first = Upstream::from_settings_sharing("dms", settings(a.clone()), &clients);
        let second = Upstream::from_settings_sharing("dms", settings(a), &clients);
        assert_eq!(
            clients.len(),
            1,
            "the second dealer's identical upstream built no client"
        );
        let (first, second) = (first.expect("builds"), second.expect("builds"));
        assert!(
            !Arc::ptr_eq(&first.inner, &second.inner),
            "breaker and slots stay per upstream"
        );
        Upstream::from_settings_sharing("crm", settings(b), &clients).expect("builds");
        assert_eq!(clients.len(), 2, "other pool settings, another client");
    }

    /// A call's URL is the base URL's text with the call's path and query appended, parsed:
    /// built from the parsed base instead, it must come out the same for every kind of path.
    #[test]
    fn call_urls_are_the_base_url_with_the_path_and_query_appended() {
        let paths = [
            "",
            "?",
            "?make=Honda&model=CR-V",
            "/",
            "/api/vehicles",
            "/api/vehicles/",
            "/api/vehicles?make=Honda%2CToyota&minYear=&type=new,used",
            "/a/../b/./c?x=1?y=2",
            "/..//evil.example/x",
            "//evil.example/x?y",
            "/@evil.example/x",
            "/a\\b?q=%zz&r='s'",
            "/%41%2f?%41=%2F",
            "/a;b,c=d/e:f?g=h;i",
        ];
        for base in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "https://dms.example/api/v2",
            "https://dms.example/api/v2/",
            "http://[::1]:9000/x%20y/",
        ] {
            let up = Upstream::build(
                "dms",
                serde_json::from_value(json!({ "base_url": base })).expect("entry"),
            )
            .expect("upstream");
            let text = Url::parse(base)
                .expect("base")
                .as_str()
                .trim_end_matches('/')
                .to_owned();
            for path in paths {
                let old = match path.bytes().next() {
                    Some(b'/') => format!("{text}{path}"),
                    _ => format!("{}{path}", up.base_url().as_str()),
                };
                let want = Url::parse(&old).expect("parses");
                let got = up.url(path).expect("a URL");
                assert_eq!(got.as_str(), want.as_str(), "{base} + {path}");
            }
        }
        let up = Upstream::build(
            "dms",
            serde_json::from_value(json!({ "base_url": "http://127.0.0.1:1" })).expect("entry"),
        )
        .expect("upstream");
        for bad in ["api", "/a b", "/a#b", "/a\u{7f}", "/ä"] {
            assert!(up.url(bad).is_err(), "{bad:?}");
        }
    }
}
