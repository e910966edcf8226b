//! The Model Context Protocol binding (docs/protocol.md §MCP binding): each dealer's MCP server
//! over Streamable HTTP at `{prefix}{bindings.mcp.path}`, off unless `bindings.mcp.enabled`.
//!
//! One tool per skill the dealer serves ([`tools`]); a `tools/call` runs the same
//! `pipeline::handle` as `SendMessage` does on the A2A bindings (auth, quotas, schemas, consent,
//! idempotency, delivery), so only the framing differs. Errors map in `binding::mcp_error`.
//!
//! The transport, in the order of its checks (MCP 2025-11-25 §Transports, §Lifecycle):
//!
//! 1. `Origin`, when sent, must be one of `bindings.mcp.allowed_origins` → else 403 (DNS
//!    rebinding); methods: `POST`, `DELETE` (ends a session), `GET` → 405 (this server sends no
//!    server-initiated messages, so it offers no SSE stream, as the specification allows).
//! 2. `Content-Type: application/json` → else 415; `Accept`, when sent, must admit
//!    `application/json` → else 406 (every answer is one JSON object, never an SSE stream).
//! 3. One JSON-RPC message (no batches since 2025-06-18) → else `-32700` / `-32600`, HTTP 400.
//! 4. `initialize` opens a session: version negotiated, `Mcp-Session-Id` issued.
//! 5. Anything else needs `Mcp-Session-Id` (400 without, 404 unknown or expired) and, when sent,
//!    an `MCP-Protocol-Version` equal to the session's (400 otherwise).
//! 6. Notifications and responses → 202, no body; `ping`, `tools/list`, `tools/call`; any other
//!    method → `-32601`.
//!
//! Versions negotiated: [`VERSIONS`]. A client asking another gets the newest, per the
//! lifecycle rules, and decides whether to continue.

mod schema;
mod session;
mod tools;

use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Map, Value, json};

use super::mcp_error::{self, McpError};
use super::{REPLY_CAPACITY, encode, headers as a2a_headers};
use crate::app::{App, Dealer};
use crate::error::AapError;
use crate::pipeline;
use crate::protocol::{Caller, Skill, json_text};
use crate::settings::McpSettings;
use crate::telemetry::request::RequestLog;
use session::{Bounds, SESSIONS};

/// MCP revisions this server speaks, newest first: both carry `outputSchema` and
/// `structuredContent`, which the tools need. Older revisions (2025-03-26 and before) lack them.
pub const VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// Outcomes of requests refused by the transport, for logs and metrics.
const ORIGIN_REFUSED: &str = "ORIGIN_REFUSED";
const SESSION_REQUIRED: &str = "SESSION_REQUIRED";
const SESSION_NOT_FOUND: &str = "SESSION_NOT_FOUND";
const PROTOCOL_VERSION: &str = "PROTOCOL_VERSION_NOT_SUPPORTED";

/// The JSON-RPC `id` of a request (a string or a number), `null` when unknown.
type Id = Value;

/// Answers what the request's head alone decides (`Origin`, method); `None` to go on and read
/// the body (of a POST).
pub fn refuse_early(
    settings: &McpSettings,
    request: &http::request::Parts,
    log: &mut RequestLog,
) -> Option<Response<Full<Bytes>>> {
    if let Some(origin) = request.headers.get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .ok()
            .and_then(crate::settings::parse_origin)
            .is_some_and(|o| settings.allowed_origins.contains(&o));
        if !allowed {
            log.outcome = ORIGIN_REFUSED;
            return Some(rpc_error(
                StatusCode::FORBIDDEN,
                &Value::Null,
                -32600,
                "Origin not allowed: this MCP endpoint serves only the origins its operator lists",
                None,
            ));
        }
    }
    match request.method {
        Method::POST | Method::DELETE => None,
        _ => {
            log.outcome = "METHOD_NOT_ALLOWED";
            let mut response = rpc_error(
                StatusCode::METHOD_NOT_ALLOWED,
                &Value::Null,
                -32600,
                "Method not allowed: POST JSON-RPC messages, DELETE to end a session; this server \
                 offers no SSE stream",
                None,
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            Some(response)
        }
    }
}

/// Serves one request that passed [`refuse_early`]; `body` is the read body of a POST.
pub async fn serve(
    app: &App,
    dealer: &Dealer,
    settings: &McpSettings,
    caller: &Caller,
    request: &http::request::Parts,
    body: &[u8],
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let bounds = Bounds {
        max: settings.max_sessions,
        idle: settings.session_idle_timeout,
    };
    let headers = &request.headers;
    if request.method == Method::DELETE {
        return end_session(dealer, headers, log);
    }
    let message = match envelope(headers, body) {
        Ok(message) => message,
        Err(refusal) => return refusal.respond(log),
    };
    let Message::Request { id, method, params } = message else {
        // A notification or a response: nothing to answer. It still needs its session.
        if let Err(refusal) = resume(dealer, headers, &Value::Null, bounds) {
            return refusal.respond(log);
        }
        return empty(StatusCode::ACCEPTED);
    };
    if method == "initialize" {
        return initialize(dealer, &id, params, bounds, log);
    }
    if let Err(refusal) = resume(dealer, headers, &id, bounds) {
        return refusal.respond(log);
    }
    let outcome = match method.as_str() {
        "ping" => Ok(Answer::Result(json!({}))),
        "tools/list" => tools_list(dealer),
        "tools/call" => Ok(tools_call(app, dealer, caller, params, log).await),
        _ => Err(AapError::MethodNotFound { method }),
    };
    let outcome = outcome.map_err(|error| {
        let wire = super::report(&error, dealer);
        log.outcome = wire.reason;
        mcp_error::to_mcp(&error, &wire)
    });
    tracing::debug_span!("encode").in_scope(|| answer(&id, outcome))
}

/// A refusal of the per-address quota, before the body was read: HTTP 429 with a JSON-RPC
/// error carrying the `aap.error` payload and `Retry-After`.
pub fn refusal(dealer: &Dealer, error: &AapError, log: &mut RequestLog) -> Response<Full<Bytes>> {
    let wire = super::report(error, dealer);
    log.outcome = wire.reason;
    let mut response = rpc_error(
        wire.http_status,
        &Value::Null,
        -32000,
        &wire.message,
        mcp_error::aap_payload(&wire).cloned(),
    );
    a2a_headers::error_headers(response.headers_mut(), wire.http_status, wire.retry_after);
    response
}

// === the envelope ===

enum Message {
    Request {
        id: Id,
        method: String,
        params: Option<Value>,
    },
    /// A notification or a response to a server request (this server sends none).
    Other,
}

/// A request the transport refuses, with the HTTP status the specification gives it.
struct Refusal {
    status: StatusCode,
    id: Id,
    code: i64,
    message: String,
    outcome: &'static str,
}

impl Refusal {
    fn new(
        status: StatusCode,
        id: &Id,
        message: impl Into<String>,
        outcome: &'static str,
    ) -> Box<Refusal> {
        Box::new(Refusal {
            status,
            id: id.clone(),
            code: -32600,
            message: message.into(),
            outcome,
        })
    }

    fn respond(self, log: &mut RequestLog) -> Response<Full<Bytes>> {
        log.outcome = self.outcome;
        rpc_error(self.status, &self.id, self.code, &self.message, None)
    }
}

/// Steps 2–3: media types, then one JSON-RPC message.
fn envelope(headers: &HeaderMap, body: &[u8]) -> Result<Message, Box<Refusal>> {
    let null = Value::Null;
    if a2a_headers::check_media_type(headers, &["application/json"]).is_err() {
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &null,
            "Content-Type must be application/json",
            "CONTENT_TYPE_NOT_SUPPORTED",
        ));
    }
    if !accepts_json(headers) {
        return Err(Refusal::new(
            StatusCode::NOT_ACCEPTABLE,
            &null,
            "Accept must admit application/json: every answer is one JSON object",
            "NOT_ACCEPTABLE",
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|_| {
        Box::new(Refusal {
            code: -32700,
            ..*Refusal::new(
                StatusCode::BAD_REQUEST,
                &null,
                "Parse error: the body is not JSON",
                "JSON_PARSE_ERROR",
            )
        })
    })?;
    let Value::Object(mut object) = value else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            &null,
            "Invalid Request: send one JSON-RPC message (batches are not part of MCP since 2025-06-18)",
            "INVALID_REQUEST",
        ));
    };
    let id = match object.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(_) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                &null,
                "Invalid Request: `id` must be a string or a number",
                "INVALID_REQUEST",
            ));
        }
    };
    let invalid = |id: &Option<Value>, why: &str| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            id.as_ref().unwrap_or(&null),
            format!("Invalid Request: {why}"),
            "INVALID_REQUEST",
        )
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(&id, "`jsonrpc` must be \"2.0\""));
    }
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Ok(Message::Request {
            id,
            method,
            params: object.remove("params"),
        }),
        (Some(Value::String(_)), None) => Ok(Message::Other),
        (None, Some(_)) if object.contains_key("result") || object.contains_key("error") => {
            Ok(Message::Other)
        }
        (_, id) => Err(invalid(&id, "`method` must be a string")),
    }
}

/// `Accept` absent, or naming `application/json`, `application/*` or `*/*`.
fn accepts_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::ACCEPT).iter().peekable();
    if values.peek().is_none() {
        return true;
    }
    values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|range| {
            range
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .any(|range| matches!(range.as_str(), "application/json" | "application/*" | "*/*"))
}

// === lifecycle ===

/// `initialize`: the version (the client's when spoken here, else the newest), a new session,
/// and what this server offers: tools only.
fn initialize(
    dealer: &Dealer,
    id: &Id,
    params: Option<Value>,
    bounds: Bounds,
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let requested = params
        .as_ref()
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let Some(requested) = requested else {
        log.outcome = "INVALID_PARAMS";
        return rpc_error(
            StatusCode::OK,
            id,
            mcp_error::INVALID_PARAMS,
            "Invalid params: initialize needs params.protocolVersion",
            None,
        );
    };
    let version = VERSIONS
        .into_iter()
        .find(|v| *v == requested)
        .unwrap_or(VERSIONS[0]);
    let session = SESSIONS.open(dealer.id(), version, Instant::now(), bounds);
    let name = &dealer.settings.card.name;
    let result = json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": {
            "name": "aap-gateway",
            "title": name,
            "version": env!("CARGO_PKG_VERSION"),
        },
        "instructions": format!(
            "{name}'s inventory and sales desk through the Auto Agent Protocol gateway. Search \
             and look up vehicles freely; send a lead only with the buyer's explicit consent. \
             Tool errors carry an AAP error code (e.g. SCHEMA_VALIDATION_FAILED with the \
             failing fields, RATE_LIMITED with a retry hint) and a JSON aap.error payload."
        ),
    });
    let mut response = answer(id, Ok(Answer::Result(result)));
    if let Ok(value) = HeaderValue::from_str(&session) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

/// Step 5: the request's session at this dealer, and its protocol version header.
fn resume(
    dealer: &Dealer,
    headers: &HeaderMap,
    id: &Id,
    bounds: Bounds,
) -> Result<(), Box<Refusal>> {
    let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            id,
            "Bad Request: send the Mcp-Session-Id header that initialize returned",
            SESSION_REQUIRED,
        ));
    };
    let Some(version) = SESSIONS.resume(session, dealer.id(), Instant::now(), bounds) else {
        return Err(Box::new(Refusal {
            code: -32001,
            ..*Refusal::new(
                StatusCode::NOT_FOUND,
                id,
                "Session not found: it ended or expired; send initialize again",
                SESSION_NOT_FOUND,
            )
        }));
    };
    match headers.get(VERSION_HEADER).map(HeaderValue::to_str) {
        None => Ok(()),
        Some(Ok(sent)) if sent == version => Ok(()),
        Some(sent) => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            id,
            format!(
                "Bad Request: MCP-Protocol-Version {} is not this session's {version}",
                sent.unwrap_or("(not text)")
            ),
            PROTOCOL_VERSION,
        )),
    }
}

/// `DELETE`: the client ends its session.
fn end_session(
    dealer: &Dealer,
    headers: &HeaderMap,
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let null = Value::Null;
    let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Refusal::new(
            StatusCode::BAD_REQUEST,
            &null,
            "Bad Request: DELETE needs the Mcp-Session-Id header",
            SESSION_REQUIRED,
        )
        .respond(log);
    };
    if SESSIONS.close(session, dealer.id()) {
        empty(StatusCode::NO_CONTENT)
    } else {
        Refusal::new(
            StatusCode::NOT_FOUND,
            &null,
            "Session not found",
            SESSION_NOT_FOUND,
        )
        .respond(log)
    }
}

// === tools ===

/// What a request's `result` holds.
enum Answer {
    Result(Value),
    /// A `tools/call` result, written straight into the body, and its retry hint.
    Written(Vec<u8>, Option<std::time::Duration>),
    /// A `tools/call` answered with a JSON-RPC error (its own params, authentication).
    Failed(McpError),
}

fn served(dealer: &Dealer) -> Vec<Skill> {
    dealer.skills().collect()
}

fn tools_list(dealer: &Dealer) -> Result<Answer, AapError> {
    let catalogue = tools::CATALOGUE.as_ref().map_err(|e| {
        AapError::Internal(format!("the MCP tool catalogue could not be built: {e}"))
    })?;
    let list = catalogue.list(&served(dealer));
    Ok(Answer::Result(json!({ "tools": list })))
}

/// `tools/call`: the named tool of this dealer through the pipeline. Every outcome of the call
/// itself is a result (`isError` for AAP errors); only a malformed call or authentication is a
/// JSON-RPC error.
async fn tools_call(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    params: Option<Value>,
    log: &mut RequestLog,
) -> Answer {
    let call = match call_params(dealer, params) {
        Ok(call) => call,
        Err(answer) => return *answer,
    };
    let (skill, arguments) = call;
    let decode = || tools::decode(skill, arguments);
    match pipeline::handle(app, dealer, caller, log, decode).await {
        Ok(reply) => {
            let mut body = Vec::with_capacity(REPLY_CAPACITY);
            tools::write_result(&reply, &mut body);
            Answer::Written(body, None)
        }
        Err(error) => {
            let wire = super::report(&error, dealer);
            log.outcome = wire.reason;
            match mcp_error::to_mcp(&error, &wire) {
                McpError::Tool {
                    text,
                    payload,
                    retry_after,
                } => {
                    let result = json!({
                        "content": [
                            { "type": "text", "text": text },
                            { "type": "text", "text": payload.to_string() },
                        ],
                        "isError": true,
                    });
                    Answer::Written(encode(&result), retry_after)
                }
                rpc @ McpError::Rpc { .. } => Answer::Failed(rpc),
            }
        }
    }
}

/// The tool (one this dealer serves) and the arguments of a `tools/call`.
fn call_params(
    dealer: &Dealer,
    params: Option<Value>,
) -> Result<(Skill, Option<Value>), Box<Answer>> {
    let invalid = |field: &str, description: String| {
        Box::new(Answer::Failed(McpError::Rpc {
            code: mcp_error::INVALID_PARAMS,
            message: format!("Invalid params: {field} {description}"),
            data: Some(
                json!({ "fieldViolations": [{ "field": field, "description": description }] }),
            ),
            status: StatusCode::OK,
            retry_after: None,
        }))
    };
    let mut params = match params {
        Some(Value::Object(p)) => p,
        _ => {
            return Err(invalid(
                "params",
                "must be an object with `name`".to_owned(),
            ));
        }
    };
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(invalid("params.name", "must be a tool name".to_owned())),
    };
    let served = served(dealer);
    match tools::skill_of(&name).filter(|s| served.contains(s)) {
        Some(skill) => Ok((skill, params.remove("arguments"))),
        None => {
            let names: Vec<&str> = served.iter().map(|s| tools::tool_name(*s)).collect();
            Err(invalid(
                "params.name",
                format!(
                    "`{name}` is not a tool of this server (tools: {})",
                    names.join(", ")
                ),
            ))
        }
    }
}

// === responses ===

/// The HTTP response of a request: `{"jsonrpc","id","result"}` (200), or its error.
fn answer(id: &Id, outcome: Result<Answer, McpError>) -> Response<Full<Bytes>> {
    let outcome = match outcome {
        Ok(Answer::Failed(error)) | Err(error) => Err(error),
        Ok(answer) => Ok(answer),
    };
    match outcome {
        Ok(answer) => {
            let mut body = Vec::with_capacity(REPLY_CAPACITY);
            body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            json_text::write_value(&mut body, id);
            body.extend_from_slice(b",\"result\":");
            let retry_after = match answer {
                Answer::Result(value) => {
                    json_text::write_value(&mut body, &value);
                    None
                }
                Answer::Written(result, retry_after) => {
                    body.extend_from_slice(&result);
                    retry_after
                }
                Answer::Failed(_) => None,
            };
            body.push(b'}');
            let mut response = respond(StatusCode::OK, body);
            a2a_headers::error_headers(response.headers_mut(), StatusCode::OK, retry_after);
            response
        }
        Err(McpError::Rpc {
            code,
            message,
            data,
            status,
            retry_after,
        }) => {
            let mut response = rpc_error(status, id, code, &message, data);
            a2a_headers::error_headers(response.headers_mut(), status, retry_after);
            response
        }
        Err(McpError::Tool { text, payload, .. }) => {
            // Only tool calls produce tool errors, and they are answered as results above; a
            // tool error elsewhere (a catalogue that failed to build) is an internal error.
            rpc_error(StatusCode::OK, id, -32603, &text, Some(payload))
        }
    }
}

fn rpc_error(
    status: StatusCode,
    id: &Id,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response<Full<Bytes>> {
    let mut error = Map::new();
    error.insert("code".to_owned(), json!(code));
    error.insert("message".to_owned(), json!(message));
    if let Some(data) = data {
        error.insert("data".to_owned(), data);
    }
    respond(
        status,
        encode(&json!({ "jsonrpc": "2.0", "id": id, "error": error })),
    )
}

fn respond(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    super::respond(status, body, "application/json", None)
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}
