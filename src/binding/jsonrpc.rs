//! The JSON-RPC 2.0 binding: HTTP request in, HTTP response out.
//!
//! Checks run in the order of docs/protocol.md §Order of checks; every JSON-RPC reply, success or
//! error, is HTTP 200, because generic A2A clients lose the error code on any other status —
//! except authentication refusals and, when `bindings.jsonrpc.rate_limited_status` is 429,
//! `RATE_LIMITED` (docs/protocol.md §Rate limits).

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use super::{REPLY_CAPACITY, encode, headers, send_message};
use crate::app::{App, Dealer};
use crate::error::{AapCode, AapError};
use crate::protocol::{Caller, json_text};
use crate::telemetry::request::RequestLog;

/// The JSON-RPC `id`: a string or a number; `null` when it could not be read.
type Id = Value;

/// Serves one JSON-RPC request whose body has already been read (size limit enforced).
pub async fn serve(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let mut activated = false;
    let mut status = StatusCode::OK;
    let mut retry_after = None;
    let (id, outcome) = match envelope(dealer, headers, body, &mut activated) {
        Ok(Request::SendMessage { id, params }) => {
            let outcome = send(app, dealer, caller, params, log).await;
            (id, outcome)
        }
        Ok(Request::Answered { id, result }) => (id, Ok(Success::Value(result))),
        Err((id, error)) => (id, Err(error)),
    };
    let encode_span = tracing::debug_span!("encode");
    let _encoding = encode_span.enter();
    let body = match outcome {
        Ok(result) => result.body(&id),
        Err(error) => {
            let (body, wire_status, wire_retry_after) = error_body(app, dealer, &id, &error, log);
            status = wire_status;
            retry_after = wire_retry_after;
            body
        }
    };
    let mut response = respond(body, activated.then_some(dealer.extension_uri()));
    *response.status_mut() = status;
    headers::error_headers(response.headers_mut(), status, retry_after);
    response
}

/// The reply to a request refused before its body was read: a JSON-RPC error whose `id` is
/// null (it was never seen).
pub fn refusal(
    app: &App,
    dealer: &Dealer,
    headers: &HeaderMap,
    error: &AapError,
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let (body, status, retry_after) = error_body(app, dealer, &Value::Null, error, log);
    // The reply carries AAP's error payload: echo the extension if the request activated it,
    // as every other reply does.
    let extension = headers::activated(dealer, headers).then_some(dealer.extension_uri());
    let mut response = respond(body, extension);
    *response.status_mut() = status;
    headers::error_headers(response.headers_mut(), status, retry_after);
    response
}

/// An error's JSON-RPC body, HTTP status and retry hint; notes its outcome in `log`.
fn error_body(
    app: &App,
    dealer: &Dealer,
    id: &Id,
    error: &AapError,
    log: &mut RequestLog,
) -> (Vec<u8>, StatusCode, Option<std::time::Duration>) {
    let wire = super::report(error, dealer);
    // Opt-in: HTTP infrastructure sees throttling; the body stays the JSON-RPC -32000 error.
    let status = if app.settings.jsonrpc_rate_limited_http_status
        && wire.reason == AapCode::RateLimited.as_str()
    {
        wire.http_status
    } else {
        wire.rpc_status
    };
    log.outcome = wire.reason;
    let body = encode(&RpcError {
        jsonrpc: "2.0",
        id,
        error: RpcErrorObject {
            code: wire.jsonrpc_code,
            message: &wire.message,
            data: &wire.details,
        },
    });
    (body, status, wire.retry_after)
}

enum Success {
    Message(send_message::SendMessageResponse),
    Value(Value),
}

impl Success {
    /// The JSON-RPC response `{"jsonrpc":"2.0","id":…,"result":…}`, the result written straight
    /// into the buffer.
    fn body(&self, id: &Id) -> Vec<u8> {
        let mut body = Vec::with_capacity(REPLY_CAPACITY);
        body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        json_text::write_value(&mut body, id);
        body.extend_from_slice(b",\"result\":");
        match self {
            Success::Message(message) => message.write_json(&mut body),
            Success::Value(value) => json_text::write_value(&mut body, value),
        }
        body.push(b'}');
        body
    }
}

#[derive(serde::Serialize)]
struct RpcError<'a> {
    jsonrpc: &'static str,
    id: &'a Id,
    error: RpcErrorObject<'a>,
}

#[derive(serde::Serialize)]
struct RpcErrorObject<'a> {
    code: i64,
    message: &'a str,
    data: &'a [Value],
}

enum Request {
    SendMessage {
        id: Id,
        params: Value,
    },
    /// Methods answered without running a skill (`ListTasks`).
    Answered {
        id: Id,
        result: Value,
    },
}

async fn send(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    params: Value,
    log: &mut RequestLog,
) -> Result<Success, AapError> {
    super::send_message(app, dealer, caller, params, log)
        .await
        .map(Success::Message)
}

/// docs/protocol.md §Order of checks, steps 2–6, up to and including the extension check.
// One value per request, on the way to an error reply: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
fn envelope(
    dealer: &Dealer,
    headers: &HeaderMap,
    body: &[u8],
    activated: &mut bool,
) -> Result<Request, (Id, AapError)> {
    // 2. Media type.
    headers::check_media_type(headers, &["application/json"]).map_err(|e| (Value::Null, e))?;
    // 3. JSON, then a single JSON-RPC request object.
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            AapError::Parse {
                detail: e.to_string(),
            },
        )
    })?;
    let mut object = match value {
        Value::Object(o) => o,
        Value::Array(_) => return Err(invalid(Value::Null, "batch requests are not supported")),
        _ => return Err(invalid(Value::Null, "the request must be a JSON object")),
    };
    let id = match object.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        None => {
            return Err(invalid(
                Value::Null,
                "`id` is required; notifications are not executed",
            ));
        }
        Some(_) => return Err(invalid(Value::Null, "`id` must be a string or a number")),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        _ => return Err(invalid(id, "`method` must be a string")),
    };
    // 4. A2A-Version, for every method.
    headers::check_version(headers).map_err(|e| (id.clone(), e))?;
    // 5. Method dispatch: only SendMessage runs a skill.
    match method.as_str() {
        "SendMessage" => {}
        "SendStreamingMessage" | "SubscribeToTask" | "GetExtendedAgentCard" => {
            return Err((id, AapError::UnsupportedOperation { operation: method }));
        }
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => {
            return Err((id, AapError::PushNotificationNotSupported));
        }
        "GetTask" | "CancelTask" => return Err((id, AapError::TaskNotFound)),
        "ListTasks" => {
            let page_size = object
                .get("params")
                .and_then(|p| p.get("pageSize"))
                .and_then(Value::as_f64)
                .filter(|n| *n >= 0.0 && n.fract() == 0.0)
                .unwrap_or(50.0);
            let result = json!({ "tasks": [], "nextPageToken": "", "pageSize": page_size as u64, "totalSize": 0 });
            return Ok(Request::Answered { id, result });
        }
        _ => return Err((id, AapError::MethodNotFound { method })),
    }
    // 6. The AAP profile must be activated with this dealer's exact extension URI.
    *activated = headers::activated(dealer, headers);
    if !*activated {
        return Err((id, headers::extension_required(dealer)));
    }
    match object.remove("params") {
        Some(params @ Value::Object(_)) => Ok(Request::SendMessage { id, params }),
        _ => Err((
            id,
            AapError::InvalidParams {
                violations: vec![crate::error::FieldViolation {
                    field: "params".to_owned(),
                    description: "must be a SendMessageRequest object".to_owned(),
                }],
            },
        )),
    }
}

fn invalid(id: Id, detail: &str) -> (Id, AapError) {
    (
        id,
        AapError::InvalidRequest {
            detail: detail.to_owned(),
        },
    )
}

/// JSON-RPC answers everything, errors included, with HTTP 200 and `application/json`.
fn respond(body: Vec<u8>, extension: Option<&str>) -> Response<Full<Bytes>> {
    super::respond(StatusCode::OK, body, "application/json", extension)
}
