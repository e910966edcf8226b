//! The only wire-aware code: bindings decode HTTP into `Call`s and encode `Reply`s and errors.
//!
//! `jsonrpc` is the AAP binding; `http_json` the optional A2A HTTP+JSON (REST) binding, equal in
//! checks and outcomes; `mcp` the optional Model Context Protocol binding (one tool per skill,
//! errors mapped in `mcp_error` from the same `WireError`). `send_message` is the A2A `SendMessageRequest` shape both carry,
//! `headers` the service parameters both check, `wire_error` the one error mapping. `report` is
//! the one place an error is logged and converted, so an internal cause is logged exactly once
//! and never sent.

pub mod headers;
pub mod http_json;
pub mod jsonrpc;
pub mod mcp;
pub mod mcp_error;
pub mod send_message;
pub mod wire_error;

use serde_json::Value;

use crate::app::{App, Dealer};
use crate::error::AapError;
use crate::pipeline;
use crate::protocol::Caller;
use crate::telemetry::request::RequestLog;
use send_message::SendMessageResponse;
use wire_error::{ErrorStamp, WireError};

/// Runs a decoded `SendMessageRequest` (JSON-RPC `params` or the HTTP+JSON body) through the
/// pipeline, which decodes its message when the call has a concurrency slot.
pub(crate) async fn send_message(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    request: Value,
    log: &mut RequestLog,
) -> Result<SendMessageResponse, AapError> {
    let mut context_id = None;
    let decode = || {
        let call = send_message::decode(request)?;
        context_id.clone_from(&call.context_id);
        Ok(call)
    };
    let reply = pipeline::handle(app, dealer, caller, log, decode).await?;
    Ok(send_message::encode_reply(reply, context_id))
}

/// Converts `error` for the wire, logging the internal cause (once) under its `error_id`.
pub(crate) fn report(error: &AapError, dealer: &Dealer) -> WireError {
    let wire = wire_error::to_wire(error, &ErrorStamp::now());
    if wire_error::is_internal(error) {
        tracing::error!(
            dealer = %dealer.id(),
            error_id = wire.error_id.as_deref().unwrap_or_default(),
            error = %crate::telemetry::Escaped(error),
            "request failed inside the gateway"
        );
    } else {
        tracing::debug!(dealer = %dealer.id(), reason = wire.reason, error = %crate::telemetry::Escaped(error), "request refused");
    }
    wire
}

/// What a reply's buffer starts with: a search page is ~9 KB, and growing a buffer from nothing
/// copies it several times.
pub const REPLY_CAPACITY: usize = 16 * 1024;

/// A reply's body as JSON bytes.
fn encode<T: serde::Serialize>(body: &T) -> Vec<u8> {
    // Serializing plain structs and `Value`s to memory cannot fail.
    serde_json::to_vec(body).unwrap_or_default()
}

/// The HTTP response of either binding: status, media type, and `A2A-Extensions` naming the
/// extension when the call activated it.
fn respond(
    status: http::StatusCode,
    body: Vec<u8>,
    media_type: &'static str,
    extension: Option<&str>,
) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    use http::header::{CONTENT_TYPE, HeaderValue};
    let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(media_type));
    if let Some(uri) = extension.and_then(|u| HeaderValue::from_str(u).ok()) {
        h.insert("a2a-extensions", uri);
    }
    response
}
