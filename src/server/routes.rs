//! Routes of the public listener: pick the dealer, then its card, its JSON-RPC endpoint, (when
//! enabled) the HTTP+JSON routes below that endpoint, or (when enabled) its MCP endpoint.
//!
//! Every request is first counted against its client address's quota (`rate_limit.per_ip`)
//! and refused before any other work when over it. Bodies are read under their own short
//! deadline (`limits.body_read_timeout`) before any concurrency slot is taken, within a budget
//! of bytes for all bodies being received together; requests answered early (408, 413, 400,
//! 503, refused) are logged and counted like the others.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;

use super::plain;
use crate::app::{App, Dealer};
use crate::auth::Presented;
use crate::binding;
use crate::binding::http_json;
use crate::error::AapError;
use crate::protocol::Caller;
use crate::telemetry::request::{self, RequestLog};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument as _;

pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// What a request on the public listener asks for, decided from its head alone.
enum Target<'a> {
    Card(&'a Dealer),
    JsonRpc(&'a Dealer),
    HttpJson(&'a Dealer, http_json::Route),
    /// The dealer's MCP endpoint (`bindings.mcp`).
    Mcp(&'a Dealer, &'a crate::settings::McpSettings),
    /// Under a dealer, but no route of it.
    Unknown(&'a Dealer, &'static str),
    NoDealer,
}

impl Target<'_> {
    /// The `binding` label of its logs and metrics.
    fn binding(&self) -> &'static str {
        match self {
            Target::JsonRpc(_) => "jsonrpc",
            Target::HttpJson(..) => "http_json",
            Target::Mcp(..) => "mcp",
            Target::Card(_) => "card",
            Target::Unknown(..) | Target::NoDealer => "other",
        }
    }
}

fn target<'a, B>(app: &'a App, req: &Request<B>) -> Target<'a> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host());
    let Some((dealer, rest)) = crate::router::select(&app.dealers, host, req.uri().path()) else {
        return Target::NoDealer;
    };
    let jsonrpc = app.settings.jsonrpc_path.as_str();
    if rest == CARD_PATH {
        return Target::Card(dealer);
    }
    if rest == jsonrpc || rest.strip_suffix('/') == Some(jsonrpc) {
        return Target::JsonRpc(dealer);
    }
    if let Some(mcp) = &app.settings.mcp
        && (rest == mcp.path || rest.strip_suffix('/') == Some(mcp.path.as_str()))
    {
        return Target::Mcp(dealer, mcp);
    }
    if app.settings.http_json
        && let Some(below) = rest.strip_prefix(jsonrpc).and_then(|r| r.strip_prefix('/'))
    {
        return match http_json::Route::of(below) {
            Some(route) => Target::HttpJson(dealer, route),
            None => Target::Unknown(dealer, "not an A2A HTTP+JSON route"),
        };
    }
    Target::Unknown(dealer, "not found")
}

/// Answers one request of the public listener. Generic over the body so that the whole path
/// — routing, per-address limit, body read, binding, pipeline — runs in-process without a
/// socket too (the fuzz tests feed it millions of bodies); the server passes hyper's body.
pub async fn route<B>(app: &App, req: Request<B>) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let arrived = req
        .extensions()
        .get::<super::Arrival>()
        .map_or_else(Instant::now, |a| a.0);
    let target = target(app, &req);
    // Before any other work: one cheap bucket per client address, whoever it claims to be.
    let caller = caller(app, req.extensions(), req.headers());
    if let Err(error) = app.limits.check_address(caller.ip) {
        return refuse(app, &target, req.headers(), &error, arrived);
    }
    match target {
        Target::NoDealer => plain(
            StatusCode::NOT_FOUND,
            "no dealer agent is served at this address",
        ),
        Target::Unknown(_, message) => plain(StatusCode::NOT_FOUND, message),
        Target::Card(dealer) => match *req.method() {
            Method::GET | Method::HEAD => card(dealer, &req),
            _ => not_allowed("GET, HEAD"),
        },
        Target::JsonRpc(dealer) => {
            if req.method() != Method::POST {
                return not_allowed("POST");
            }
            let (parts, body) = req.into_parts();
            let mut log = RequestLog::arrived("jsonrpc", dealer.id(), &parts.headers, arrived);
            log.count_if_abandoned(&app.metrics, &dealer.label);
            let bytes = match read_body(app, &parts.headers, body).await {
                Ok(bytes) => bytes,
                Err((response, outcome)) => {
                    log.outcome = outcome;
                    return finish(app, &dealer.label, log, response);
                }
            };
            let span = log.span.clone();
            let response =
                binding::jsonrpc::serve(app, dealer, &caller, &parts.headers, &bytes, &mut log)
                    .instrument(span)
                    .await;
            finish(app, &dealer.label, log, response)
        }
        Target::Mcp(dealer, mcp) => {
            let (parts, body) = req.into_parts();
            let mut log = RequestLog::arrived("mcp", dealer.id(), &parts.headers, arrived);
            log.count_if_abandoned(&app.metrics, &dealer.label);
            if let Some(response) = binding::mcp::refuse_early(mcp, &parts, &mut log) {
                return finish(app, &dealer.label, log, response);
            }
            let bytes = if parts.method == Method::POST {
                match read_body(app, &parts.headers, body).await {
                    Ok(bytes) => bytes,
                    Err((response, outcome)) => {
                        log.outcome = outcome;
                        return finish(app, &dealer.label, log, response);
                    }
                }
            } else {
                Bytes::new()
            };
            let span = log.span.clone();
            let response = binding::mcp::serve(app, dealer, mcp, &caller, &parts, &bytes, &mut log)
                .instrument(span)
                .await;
            finish(app, &dealer.label, log, response)
        }
        Target::HttpJson(dealer, route) => {
            if !route.allows(req.method()) {
                return not_allowed(route.allow());
            }
            let (parts, body) = req.into_parts();
            let mut log = RequestLog::arrived("http_json", dealer.id(), &parts.headers, arrived);
            log.count_if_abandoned(&app.metrics, &dealer.label);
            let bytes = if route == http_json::Route::SendMessage {
                match read_body(app, &parts.headers, body).await {
                    Ok(bytes) => bytes,
                    Err((response, outcome)) => {
                        log.outcome = outcome;
                        return finish(app, &dealer.label, log, response);
                    }
                }
            } else {
                Bytes::new()
            };
            let span = log.span.clone();
            let response = http_json::serve(app, dealer, &caller, route, &parts, &bytes, &mut log)
                .instrument(span)
                .await;
            finish(app, &dealer.label, log, response)
        }
    }
}

/// The answer to a request over its address's quota, in the shape its target speaks: a
/// JSON-RPC error (`id` null: the body is never read), an HTTP+JSON status, or a plain 429.
/// Logged (sampled) and counted like any other request.
fn refuse(
    app: &App,
    target: &Target<'_>,
    headers: &http::HeaderMap,
    error: &AapError,
    arrived: Instant,
) -> Response<Full<Bytes>> {
    let dealer = match target {
        Target::Card(d)
        | Target::JsonRpc(d)
        | Target::HttpJson(d, _)
        | Target::Mcp(d, _)
        | Target::Unknown(d, _) => Some(*d),
        Target::NoDealer => None,
    };
    let id = dealer.map_or("none", Dealer::id);
    let mut log = RequestLog::arrived(target.binding(), id, headers, arrived);
    let response = match (target, dealer) {
        (Target::JsonRpc(_), Some(d)) => {
            binding::jsonrpc::refusal(app, d, headers, error, &mut log)
        }
        (Target::HttpJson(..), Some(d)) => http_json::refusal(d, headers, error, &mut log),
        (Target::Mcp(..), Some(d)) => binding::mcp::refusal(d, error, &mut log),
        _ => {
            log.outcome = "RATE_LIMITED";
            let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "too many requests");
            let retry_after = match error {
                AapError::RateLimited { retry_after } => Some(*retry_after),
                _ => None,
            };
            binding::headers::error_headers(
                r.headers_mut(),
                StatusCode::TOO_MANY_REQUESTS,
                retry_after,
            );
            r
        }
    };
    let label = dealer.map_or_else(|| Arc::from("none"), |d| Arc::clone(&d.label));
    finish(app, &label, log, response)
}

/// Logs and counts a request the binding answered, and tells the caller its request id.
fn finish(
    app: &App,
    dealer: &Arc<str>,
    log: RequestLog,
    mut response: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    if let Ok(id) = HeaderValue::from_str(&log.request_id) {
        response.headers_mut().insert("x-request-id", id);
    }
    log.finish(&app.metrics, dealer, response.status());
    response
}

/// Who is calling: the client address (the configured forwarding header believed from trusted
/// proxies only) and the API key presented, if any.
fn caller(app: &App, extensions: &http::Extensions, headers: &http::HeaderMap) -> Caller {
    let peer = extensions
        .get::<super::PeerAddr>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.ip());
    let limits = &app.settings.rate_limit;
    Caller {
        ip: crate::rate_limit::client_ip(
            peer,
            headers,
            &limits.trusted_proxies,
            limits.client_ip_header,
        ),
        // Without keys configured nothing looks at the key presented: it is not hashed.
        presented: if app.auth.is_some() {
            Presented::from_headers(headers)
        } else {
            Presented::default()
        },
    }
}

fn not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// The pre-rendered card with its validators; `304` when the caller's copy is current.
fn card<B>(dealer: &Dealer, req: &Request<B>) -> Response<Full<Bytes>> {
    let card = &dealer.card;
    let fresh = req
        .headers()
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag == card.etag || tag.strip_prefix("W/") == Some(&card.etag));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else if req.method() == Method::HEAD {
        (StatusCode::OK, Bytes::new())
    } else {
        (StatusCode::OK, card.body.clone())
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    if let Ok(v) = HeaderValue::from_str(&card.etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&card.last_modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    response
}

/// Reads the whole body within `limits.max_body_bytes` (413) and `limits.body_read_timeout`
/// (408), or answers early with the outcome to log. No concurrency slot is held meanwhile: a
/// slow sender costs a task and a buffer, never capacity.
async fn read_body<B>(
    app: &App,
    headers: &http::HeaderMap,
    body: B,
) -> Result<Bytes, (Response<Full<Bytes>>, &'static str)>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limit = app.settings.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err((too_large(limit), request::BODY_TOO_LARGE));
    }
    // What this body holds counts against the budget of all bodies being received
    // (`max_concurrency` full bodies); past it the body is refused at once (503), so slow
    // bodies from a few addresses cannot add up to the pod's memory limit.
    let mut held = None;
    if !app.limits.body_bytes(&mut held, 0) {
        return Err((bodies_full(), request::BODIES_FULL));
    }
    let _waiting = app.metrics.waiting();
    let collect = async {
        let mut body = std::pin::pin!(Limited::new(body, limit));
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                if !app.limits.body_bytes(&mut held, data.len()) {
                    return Ok(None);
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Some(buf.freeze()))
    };
    match tokio::time::timeout(app.settings.limits.body_read_timeout, collect).await {
        Ok(Ok(Some(collected))) => Ok(collected),
        Ok(Ok(None)) => Err((bodies_full(), request::BODIES_FULL)),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err((too_large(limit), request::BODY_TOO_LARGE))
        }
        Ok(Err(_)) => Err((
            plain(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            ),
            request::BODY_UNREADABLE,
        )),
        Err(_) => Err((
            plain(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ),
            request::BODY_TIMEOUT,
        )),
    }
}

/// 503 with `Retry-After: 1`: the bodies being received already hold the whole budget.
fn bodies_full() -> Response<Full<Bytes>> {
    let mut response = plain(
        StatusCode::SERVICE_UNAVAILABLE,
        "the gateway is receiving too many request bodies; retry shortly",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn too_large(limit: usize) -> Response<Full<Bytes>> {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than the limit of {limit} bytes"),
    )
}
