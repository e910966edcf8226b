//! The admin listener: liveness and readiness for orchestrators. Kept off the public port so
//! probes never compete with (or leak to) buyer traffic.

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
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}
