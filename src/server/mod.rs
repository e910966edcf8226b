//! Listeners and the one tower stack. `run` accepts connections on the gateway and admin
//! listeners until shutdown, then drains in-flight requests (bounded by `limits.shutdown_grace`).
//!
//! The public listener admits connections through `conn` (caps, deadlines); requests are not
//! queued anywhere: a request takes a concurrency slot only once its body is read, and is shed
//! at once when none is free (`pipeline::handle`). The admin listener runs in a task of its
//! own, so nothing on the public side (a flood, an accept back-off) can delay a probe.

pub mod admin;
pub mod conn;
pub mod reload;
pub mod routes;
mod timer_wake;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;

use crate::app::App;

/// The caller's socket address, set on every request (rate limiting and logs use it).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// When the request's head had arrived, set on every request: latency counts from here.
#[derive(Debug, Clone, Copy)]
pub struct Arrival(pub Instant);

/// Shared state of a running server.
#[derive(Debug)]
pub struct Running {
    /// Cleared when shutdown starts, so `/readyz` turns away new traffic while draining.
    pub ready: AtomicBool,
    /// Set once every feed of the first configuration has had its first load: from then on a
    /// feed that a reload adds loads without taking the whole pod out of service.
    pub warmed: AtomicBool,
    /// The configuration serving new requests. A reload swaps it whole; a request keeps the
    /// `App` it started with until it finishes.
    pub app: ArcSwap<App>,
}

/// Serves `app` on the two listeners until `shutdown` completes, then drains.
pub async fn run(
    app: Arc<App>,
    gateway: TcpListener,
    admin: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    serve(app, gateway, admin, shutdown, None).await;
}

/// `run`, reloading the configuration from `source` on SIGHUP and on file changes.
pub async fn run_reloading(
    app: Arc<App>,
    gateway: TcpListener,
    admin: TcpListener,
    shutdown: impl Future<Output = ()>,
    source: reload::ReloadSource,
) {
    serve(app, gateway, admin, shutdown, Some(source)).await;
}

async fn serve(
    app: Arc<App>,
    gateway: TcpListener,
    admin: TcpListener,
    shutdown: impl Future<Output = ()>,
    reload: Option<reload::ReloadSource>,
) {
    let state = Arc::new(Running {
        ready: AtomicBool::new(true),
        warmed: AtomicBool::new(false),
        app: ArcSwap::from(Arc::clone(&app)),
    });
    // Read once: a reload does not resize the caps or change the deadlines of the listener.
    let connections = app.settings.connections.clone();
    let gate = conn::Gate::new(connections.max);
    let builder = conn::builder(&connections);
    let metrics = Arc::clone(&app.metrics);
    let grace = app.settings.limits.shutdown_grace;
    let background: reload::Background = Arc::new(std::sync::Mutex::new(app.start_background()));
    let reloader = reload.map(|source| {
        tokio::spawn(reload::watch(
            Arc::clone(&state),
            source,
            Arc::clone(&background),
        ))
    });
    drop(app);
    let timer_wake = timer_wake::keep_near();
    // Probes are short and not part of the drain: the admin listener lives until the end.
    let admin_task = tokio::spawn(admin::serve(admin, Arc::clone(&state)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);

    loop {
        tokio::select! {
            accepted = gateway.accept() => {
                let Some((stream, peer)) = accepted_or_log(accepted).await else { continue };
                // Over a cap: dropping the socket closes it before a byte is read.
                let admitted = {
                    let current = state.app.load();
                    let trusted = &current.settings.rate_limit.trusted_proxies;
                    gate.admit(peer.ip(), connections.max_per_ip, trusted, &metrics)
                };
                let Some(admitted) = admitted else { continue };
                let watch = conn::Watch::new(&connections);
                let io = conn::Watched::new(stream, Arc::clone(&watch), Arc::clone(&metrics));
                let state = Arc::clone(&state);
                let service = ServiceBuilder::new()
                    // A panic in any handler becomes a bare 500: no stack trace, no dropped
                    // connection, and the rest of the server keeps going.
                    .layer(CatchPanicLayer::custom(panic_response))
                    .service_fn(move |mut req: Request<Incoming>| {
                        let in_flight = watch.request_started();
                        let app = state.app.load_full();
                        req.extensions_mut().insert(PeerAddr(peer));
                        req.extensions_mut().insert(Arrival(Instant::now()));
                        async move {
                            // Boxed: the layers and hyper move the future they are given,
                            // and a request's whole state machine is kilobytes; moved, it
                            // is a pointer. Made in its box: `Box::pin(future)` makes it
                            // on the stack and copies all of it (8.8 KB) into the box.
                            let future = Box::write(Box::new_uninit(), routes::route(&app, req));
                            let response = Box::into_pin(future).await;
                            drop(in_flight);
                            Ok::<_, Infallible>(response)
                        }
                    });
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service)).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _admitted = admitted;
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    // Stop taking buyer traffic; keep answering probes (`/readyz` now 503) while draining.
    state.ready.store(false, Ordering::SeqCst);
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    drop(gateway);
    tracing::info!(grace = ?grace, "shutting down: draining in-flight requests and lead deliveries");
    // A lead delivery outlives its request: it gets the same grace to end (and its key's lease
    // keeps being renewed meanwhile: background work stops last).
    let deliveries = Arc::clone(&state.app.load().deliveries);
    let drained = async {
        graceful.shutdown().await;
        deliveries.finished().await;
    };
    tokio::select! {
        () = drained => tracing::info!("all connections drained, no lead delivery running"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!(
                lead_deliveries = deliveries.running(),
                "shutdown grace elapsed; closing remaining connections"
            );
        }
    }
    let tasks = std::mem::take(
        &mut *background
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for task in tasks {
        task.abort();
    }
    admin_task.abort();
    timer_wake.abort();
}

/// The accepted connection, or `None` after logging a failed accept and backing off (usually
/// EMFILE: sleeping beats spinning, and only this listener's loop sleeps).
async fn accepted_or_log(
    accepted: std::io::Result<(tokio::net::TcpStream, SocketAddr)>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    match accepted {
        Ok((stream, peer)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, peer))
        }
        Err(e) => {
            tracing::warn!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response<Full<Bytes>> {
    tracing::error!("a request handler panicked");
    plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
}

/// A small JSON body for HTTP-level answers that carry no JSON-RPC envelope:
/// `{"status": "..."}` on success, `{"error": {"code", "message"}}` otherwise.
pub fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let body = if status.is_success() {
        serde_json::json!({ "status": message })
    } else {
        serde_json::json!({ "error": { "code": status.as_u16(), "message": message } })
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}

/// A gateway whose listeners are bound and whose app is built, not yet serving.
#[derive(Debug)]
pub struct Bound {
    pub app: Arc<App>,
    pub gateway: TcpListener,
    pub admin: TcpListener,
    pub gateway_addr: SocketAddr,
    pub admin_addr: SocketAddr,
}

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{} configuration problem(s)", .0.len())]
    Config(Vec<crate::settings::Problem>),
}

/// Binds both listeners (port 0 allowed), then builds the app against the bound addresses so
/// derived card URLs are real. Shared by `main` and the tests.
pub async fn bind(
    settings: crate::settings::Settings,
    listen: SocketAddr,
    admin_listen: SocketAddr,
) -> Result<Bound, StartError> {
    bind_with_vars(settings, listen, admin_listen, &|name: &str| {
        std::env::var(name).ok()
    })
    .await
}

/// `bind`, resolving `${NAME}` in mapping files through `vars` (the demo points them at its
/// simulators).
pub async fn bind_with_vars(
    mut settings: crate::settings::Settings,
    listen: SocketAddr,
    admin_listen: SocketAddr,
    vars: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Bound, StartError> {
    let gateway = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
    let admin = TcpListener::bind(admin_listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: admin_listen,
            source,
        })?;
    let gateway_addr = gateway.local_addr().map_err(|source| StartError::Bind {
        addr: listen,
        source,
    })?;
    let admin_addr = admin.local_addr().map_err(|source| StartError::Bind {
        addr: admin_listen,
        source,
    })?;
    settings.listen = gateway_addr;
    settings.admin_listen = admin_addr;
    let app = App::build_with_vars(settings, gateway_addr, vars).map_err(StartError::Config)?;
    Ok(Bound {
        app: Arc::new(app),
        gateway,
        admin,
        gateway_addr,
        admin_addr,
    })
}
