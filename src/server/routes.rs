//! Routes of the public listener: pick the dealer, then its card, its JSON-RPC endpoint, or
//! (when enabled) the HTTP+JSON routes below that endpoint.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;

use super::plain;
use crate::app::{App, Dealer};
use crate::auth::Presented;
use crate::binding;
use crate::binding::http_json;
use crate::protocol::Caller;
use crate::telemetry::request::RequestLog;
use tracing::Instrument as _;

pub const CARD_PATH: &str = "/.well-known/agent-card.json";

pub async fn route(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host());
    let path = req.uri().path().to_owned();
    let Some((dealer, rest)) = crate::router::select(&app.dealers, host, &path) else {
        return plain(
            StatusCode::NOT_FOUND,
            "no dealer agent is served at this address",
        );
    };
    let jsonrpc = app.settings.jsonrpc_path.as_str();
    if rest == CARD_PATH {
        return match *req.method() {
            Method::GET | Method::HEAD => card(dealer, &req),
            _ => not_allowed("GET, HEAD"),
        };
    }
    if rest == jsonrpc || rest.strip_suffix('/') == Some(jsonrpc) {
        if req.method() != Method::POST {
            return not_allowed("POST");
        }
        let (parts, body) = req.into_parts();
        let caller = caller(app, &parts);
        let mut log = RequestLog::start("jsonrpc", dealer.id(), &parts.headers);
        let response = match read_body(app, &parts.headers, body).await {
            Ok(bytes) => {
                let span = log.span.clone();
                binding::jsonrpc::serve(app, dealer, &caller, &parts.headers, &bytes, &mut log)
                    .instrument(span)
                    .await
            }
            Err(response) => return response,
        };
        return finish(app, dealer, log, response);
    }
    if app.settings.http_json
        && let Some(below) = rest.strip_prefix(jsonrpc).and_then(|r| r.strip_prefix('/'))
    {
        let Some(route) = http_json::Route::of(below) else {
            return plain(StatusCode::NOT_FOUND, "not an A2A HTTP+JSON route");
        };
        if !route.allows(req.method()) {
            return not_allowed(route.allow());
        }
        let (parts, body) = req.into_parts();
        let caller = caller(app, &parts);
        let bytes = if route == http_json::Route::SendMessage {
            match read_body(app, &parts.headers, body).await {
                Ok(bytes) => bytes,
                Err(response) => return response,
            }
        } else {
            Bytes::new()
        };
        let mut log = RequestLog::start("http_json", dealer.id(), &parts.headers);
        let span = log.span.clone();
        let response = http_json::serve(app, dealer, &caller, route, &parts, &bytes, &mut log)
            .instrument(span)
            .await;
        return finish(app, dealer, log, response);
    }
    plain(StatusCode::NOT_FOUND, "not found")
}

/// Logs and counts a request the binding answered, and tells the caller its request id.
fn finish(
    app: &App,
    dealer: &Dealer,
    log: RequestLog,
    mut response: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    if let Ok(id) = HeaderValue::from_str(&log.request_id) {
        response.headers_mut().insert("x-request-id", id);
    }
    log.finish(&app.metrics, &dealer.label, response.status());
    response
}

/// Who is calling: the client address (forwarded headers believed from trusted proxies only)
/// and the API key presented, if any.
fn caller(app: &App, parts: &http::request::Parts) -> Caller {
    let peer = parts
        .extensions
        .get::<super::PeerAddr>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.ip());
    Caller {
        ip: crate::rate_limit::client_ip(
            peer,
            &parts.headers,
            &app.settings.rate_limit.trusted_proxies,
        ),
        presented: Presented::from_headers(&parts.headers),
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

/// Reads the whole body within `limits.max_body_bytes` (413) and the request deadline (408).
async fn read_body(
    app: &App,
    headers: &http::HeaderMap,
    body: Incoming,
) -> Result<Bytes, Response<Full<Bytes>>> {
    let limit = app.settings.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(app.settings.limits.request_timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large(limit)),
        Ok(Err(_)) => Err(plain(
            StatusCode::BAD_REQUEST,
            "the request body could not be read",
        )),
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        )),
    }
}

fn too_large(limit: usize) -> Response<Full<Bytes>> {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than the limit of {limit} bytes"),
    )
}
