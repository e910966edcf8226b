//! The one in-process HTTP/1.1 server of the tests, on a 127.0.0.1 ephemeral port, for
//! stand-ins of dealer systems written in a test. Each request (method, path and query, headers,
//! whole body, arrival index) goes to a handler: a plain function answering status, content type
//! and body ([`HttpServer::start`], [`HttpServer::start_full`] with headers of its own), or an
//! async one answering any response, streamed in chunks or stalled mid-body
//! ([`HttpServer::start_scripted`], for the upstream client's timeouts and limits). The server
//! counts requests and the most in flight at once. Stopped when dropped.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One request as the stand-in sees it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    /// The path and the raw query, as sent.
    pub path_and_query: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// 0-based arrival index.
    pub index: usize,
}

impl Seen {
    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the stand-in answers: status, `Content-Type`, body.
pub type Answer = (u16, &'static str, Vec<u8>);

/// An [`Answer`] with more headers.
pub type FullAnswer = (u16, &'static str, Vec<u8>, Vec<(String, String)>);

/// A response body sent as the given chunks; with `exact`, a `Content-Length` is sent, else the
/// body is chunked.
pub struct ChunkBody {
    pub chunks: VecDeque<Bytes>,
    pub exact: bool,
    /// After the chunks, never finish (a server that stalls mid-body).
    pub stall: bool,
}

impl hyper::body::Body for ChunkBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.chunks.pop_front() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None if self.stall => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && !self.stall
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
        } else {
            SizeHint::default()
        }
    }
}

/// A whole response of `status` with `body` (and its `Content-Length`).
pub fn reply(status: u16, body: impl Into<Bytes>) -> Response<ChunkBody> {
    let mut response = Response::new(ChunkBody {
        chunks: VecDeque::from([body.into()]),
        exact: true,
        stall: false,
    });
    *response.status_mut() = StatusCode::from_u16(status).expect("status");
    response
}

type Handler =
    Arc<dyn Fn(Seen) -> Pin<Box<dyn Future<Output = Response<ChunkBody>> + Send>> + Send + Sync>;

#[derive(Default)]
struct ServerState {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

pub struct HttpServer {
    pub addr: SocketAddr,
    state: Arc<ServerState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpServer {
    /// Serves `handler` until dropped.
    pub async fn start(handler: impl Fn(Seen) -> Answer + Send + Sync + 'static) -> HttpServer {
        HttpServer::start_full(move |seen| {
            let (status, content_type, body) = handler(seen);
            (status, content_type, body, Vec::new())
        })
        .await
    }

    /// [`HttpServer::start`] for a handler that sets headers of its own too.
    pub async fn start_full(
        handler: impl Fn(Seen) -> FullAnswer + Send + Sync + 'static,
    ) -> HttpServer {
        let handler = Arc::new(handler);
        HttpServer::start_scripted(move |seen| {
            let (status, content_type, body, headers) = handler(seen);
            let mut response = reply(status, body);
            let h = response.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                content_type.parse().expect("content type"),
            );
            for (name, value) in headers {
                h.append(
                    http::HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                    value.parse().expect("header value"),
                );
            }
            async move { response }
        })
        .await
    }

    /// Serves an async `handler` answering any response (delays, chunks, stalls) until dropped.
    pub async fn start_scripted<F, Fut>(handler: F) -> HttpServer
    where
        F: Fn(Seen) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<ChunkBody>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |seen| Box::pin(handler(seen)));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(ServerState::default());
        let task = tokio::spawn({
            let state = Arc::clone(&state);
            async move {
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    let state = Arc::clone(&state);
                    let handler = Arc::clone(&handler);
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let state = Arc::clone(&state);
                        let handler = Arc::clone(&handler);
                        async move {
                            let seen = Self::seen_of(req, &state).await;
                            let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            state.max_in_flight.fetch_max(now, Ordering::SeqCst);
                            state.seen.lock().expect("lock").push(seen.clone());
                            let response = handler(seen).await;
                            state.in_flight.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(response)
                        }
                    });
                    connections.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        HttpServer { addr, state, task }
    }

    /// The request read whole, numbered in arrival order.
    async fn seen_of(req: Request<Incoming>, state: &ServerState) -> Seen {
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let query = parts
            .uri
            .query()
            .map(|q| {
                reqwest::Url::parse(&format!("http://x/?{q}"))
                    .expect("query")
                    .query_pairs()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Seen {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            path_and_query: parts
                .uri
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default(),
            query,
            headers: parts.headers,
            body,
            index: state.requests.fetch_add(1, Ordering::SeqCst),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests served so far.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests in flight now.
    #[allow(dead_code)]
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests in flight at once so far.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("lock").clone()
    }
}
