//! The admin listener: liveness and readiness for orchestrators, Prometheus metrics. Kept off
//! the public port so probes and scrapes never compete with (or leak to) buyer traffic.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use super::{Running, plain};

/// Probes and scrapes send their request head at once; a peer that does not is cut off.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts admin connections until the task is aborted (after the drain).
pub async fn serve(listener: TcpListener, state: Arc<Running>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let accepted = listener.accept().await;
        let Some((stream, _)) = super::accepted_or_log(accepted).await else {
            continue;
        };
        let state = Arc::clone(&state);
        let service = hyper::service::service_fn(move |req| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(route(&state, &req)) }
        });
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

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
        "/readyz" => readiness(state),
        "/metrics" => metrics(&state.app.load()),
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Ready once the configuration is loaded, the listeners are bound and every feed's first load
/// has ended — so the first search of a feed dealer does not wait for its whole inventory; not
/// while draining. (Only at start: a feed a reload adds never takes the pod out of service.) A feed whose first load failed does not hold the other dealers back: the
/// reply names it (`feeds_without_copy`), and it is counted and logged as it retries.
fn readiness(state: &Running) -> Response<Full<Bytes>> {
    if !state.ready.load(Ordering::SeqCst) {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    let app = state.app.load();
    let feeds = || {
        app.dealers
            .iter()
            .flat_map(|d| d.feeds().iter().map(move |f| (d, f)))
    };
    if !state.warmed.load(Ordering::Acquire) {
        if let Some((dealer, feed)) = feeds().find(|(_, f)| !f.attempted()) {
            let message = format!(
                "loading the inventory feed of dealer `{}` ({})",
                dealer.id(),
                feed.file
            );
            return plain(StatusCode::SERVICE_UNAVAILABLE, &message);
        }
        state.warmed.store(true, Ordering::Release);
    }
    let missing: Vec<&str> = feeds()
        .filter(|(_, f)| !f.loaded())
        .map(|(d, _)| d.id())
        .collect();
    // Loaded, but listing nothing: the dealer answers every search with no vehicle.
    let empty: Vec<serde_json::Value> = feeds()
        .filter_map(|(d, f)| {
            let cause = f.nothing_listable()?;
            Some(serde_json::json!({ "dealer": d.id(), "feed": f.file, "cause": cause }))
        })
        .collect();
    if missing.is_empty() && empty.is_empty() {
        return plain(StatusCode::OK, "ready");
    }
    let mut body = serde_json::json!({ "status": "ready" });
    if !missing.is_empty() {
        body["feeds_without_copy"] = serde_json::json!(missing);
    }
    if !empty.is_empty() {
        body["feeds_listing_nothing"] = serde_json::json!(empty);
    }
    let mut response = plain(StatusCode::OK, "ready");
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    response
}

/// The process's metrics, with the gauges read at scrape time (feed cache ages) brought up to
/// date from the serving configuration first.
fn metrics(app: &crate::app::App) -> Response<Full<Bytes>> {
    for dealer in &app.dealers {
        let oldest = dealer.feeds().iter().filter_map(|f| f.age()).max();
        app.metrics.feed_age(&dealer.label, oldest);
        let listable = (dealer.feeds().iter())
            .filter_map(|f| f.listable())
            .reduce(|a, b| a + b);
        app.metrics.feed_listable(&dealer.label, listable);
    }
    app.metrics
        .in_flight(app.limits.in_flight(app.settings.limits.max_concurrency));
    let mut response = Response::new(Full::new(Bytes::from(app.metrics.encode())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::telemetry::metrics::CONTENT_TYPE),
    );
    response
}
