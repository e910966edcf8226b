//! The admin listener: liveness and readiness for orchestrators, Prometheus metrics. Kept off
//! the public port so probes and scrapes never compete with (or leak to) buyer traffic.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

use super::{Running, plain};

pub fn route<B>(state: &Running, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET");
        r.headers_mut().insert(
            http::header::ALLOW,
            http::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    match req.uri().path() {
        // Alive as long as the process answers.
        "/healthz" => plain(StatusCode::OK, "ok"),
        // Ready once the configuration is loaded and the listeners are bound; not while draining.
        "/readyz" if state.ready.load(Ordering::SeqCst) => plain(StatusCode::OK, "ready"),
        "/readyz" => plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down"),
        "/metrics" => metrics(&state.app.load()),
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The process's metrics, with the gauges read at scrape time (feed cache ages) brought up to
/// date from the serving configuration first.
fn metrics(app: &crate::app::App) -> Response<Full<Bytes>> {
    for dealer in &app.dealers {
        let oldest = dealer.feeds().iter().filter_map(|f| f.age()).max();
        app.metrics.feed_age(&dealer.label, oldest);
    }
    let mut response = Response::new(Full::new(Bytes::from(app.metrics.encode())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::telemetry::metrics::CONTENT_TYPE),
    );
    response
}
