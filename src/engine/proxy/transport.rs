//! Where calls go: the live upstream (as is, or as a SOAP operation), or a canned reply for
//! examples and `test-mappings`.

use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use http::StatusCode;

use crate::engine::IntoAap as _;
use crate::engine::request::Rendered;
use crate::error::AapError;
use crate::upstream::soap;
use crate::upstream::{Upstream, UpstreamRequest, UpstreamResponse};

/// Where calls go: the real upstream, or a canned reply (examples, `test-mappings`).
#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    Live(&'a Upstream),
    Canned(&'a Canned),
}

/// A canned upstream for offline example runs: answers every call with `reply` and records the
/// rendered calls.
#[derive(Debug)]
pub struct Canned {
    pub status: StatusCode,
    /// The reply's `Content-Type` (its `charset=` counts as a live reply's does).
    pub content_type: Option<http::HeaderValue>,
    pub body: Bytes,
    pub seen: Mutex<Vec<Rendered>>,
    /// Upstream records the list mapping's `items` found in the replies, mapped or not.
    pub records: std::sync::atomic::AtomicUsize,
}

impl Canned {
    /// An upstream that answers every call with `status`, `content_type` and `body`.
    pub fn new(status: StatusCode, content_type: Option<http::HeaderValue>, body: Bytes) -> Canned {
        Canned {
            status,
            content_type,
            body,
            seen: Mutex::new(Vec::new()),
            records: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

/// Sends a rendered call through `transport`: as is, or as a SOAP operation when the upstream
/// speaks SOAP (the rendered body being the envelope's Body content).
pub async fn send(
    transport: Transport<'_>,
    upstream: &Upstream,
    rendered: Rendered,
    idempotent: bool,
) -> Result<UpstreamResponse, AapError> {
    match transport {
        Transport::Live(live) => {
            let req = match live.soap() {
                Some(settings) => {
                    let mut req = soap::request(
                        settings,
                        rendered.path_and_query,
                        rendered.action.as_deref(),
                        rendered.body.as_deref().unwrap_or_default(),
                        idempotent,
                    )
                    .map_err(|e| e.into_aap(upstream.name()))?;
                    // The mapping's own headers replace the SOAP layer's of the same name.
                    req.headers
                        .retain(|(name, _)| !rendered.headers.iter().any(|(n, _)| n == name));
                    req.headers.extend(rendered.headers);
                    req
                }
                None => UpstreamRequest {
                    method: rendered.method,
                    path_and_query: rendered.path_and_query,
                    headers: rendered.headers,
                    body: rendered.body.map(Bytes::from),
                    idempotent,
                },
            };
            live.call(req)
                .await
                .map_err(|e| e.into_aap(upstream.name()))
        }
        Transport::Canned(canned) => {
            if let Ok(mut seen) = canned.seen.lock() {
                seen.push(rendered);
            }
            let mut headers = http::HeaderMap::new();
            if let Some(content_type) = &canned.content_type {
                headers.insert(http::header::CONTENT_TYPE, content_type.clone());
            }
            Ok(UpstreamResponse {
                status: canned.status,
                headers,
                body: canned.body.clone(),
                elapsed: Instant::now().elapsed(),
                verdict: None,
                token_generation: None,
            })
        }
    }
}
