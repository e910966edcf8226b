//! A small in-process HTTP/1.1 server on a 127.0.0.1 ephemeral port, for stand-ins of dealer
//! systems written in a test: each request (method, path and query, headers, whole body) goes
//! to a plain function that returns status, content type and body. Stopped when dropped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One request as the stand-in sees it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    /// Decoded query parameters, in order.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
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

pub struct HttpServer {
    pub addr: SocketAddr,
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
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let handler = Arc::clone(&handler);
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let handler = Arc::clone(&handler);
                    async move {
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
                        let (status, content_type, body, headers) = handler(Seen {
                            method: parts.method,
                            path: parts.uri.path().to_owned(),
                            query,
                            headers: parts.headers,
                            body,
                        });
                        let mut response = Response::builder()
                            .status(status)
                            .header("content-type", content_type);
                        for (name, value) in headers {
                            response = response.header(name, value);
                        }
                        let response = response
                            .body(Full::new(Bytes::from(body)))
                            .expect("response");
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        HttpServer { addr, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
