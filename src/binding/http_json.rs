//! The A2A HTTP+JSON (REST) binding (docs/protocol.md §HTTP+JSON binding; A2A §11), off unless
//! `bindings.http_json.enabled`: `POST {base}/message:send` with a `SendMessageRequest` body,
//! answered `200 {"message": …}`, or a non-2xx `google.rpc.Status` body whose `details[]` are
//! exactly the JSON-RPC binding's `error.data` entries.
//!
//! Functionally equivalent to JSON-RPC (A2A §5.1): the same checks in the same order (media
//! type, JSON, `A2A-Version`, the route standing in for the method, `A2A-Extensions`, the
//! message), the same pipeline, the same `WireError`; only the framing and the HTTP status
//! differ. `{base}` is the JSON-RPC endpoint's path, so the card's two interfaces share a URL.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap};
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

use super::{encode, headers, respond, wire_error};
use crate::app::{App, Dealer};
use crate::error::AapError;
use crate::protocol::Caller;
use crate::telemetry::request::RequestLog;

/// Media types a request body may have; the reply uses the caller's.
const JSON: &str = "application/json";
const A2A_JSON: &str = "application/a2a+json";

/// What a path below `{base}/` names (A2A §11.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    SendMessage,
    ListTasks,
    /// A route this agent answers with an A2A error.
    Refused(Refused),
}

/// Routes of A2A features an AAP agent does not offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    SendStreamingMessage,
    GetTask,
    CancelTask,
    SubscribeToTask,
    /// `tasks/{id}/pushNotificationConfigs` (create, list).
    PushConfigs,
    /// `tasks/{id}/pushNotificationConfigs/{configId}` (get, delete).
    PushConfig,
    ExtendedAgentCard,
}

impl Route {
    /// The route for `path` (what follows `{base}/`), or `None` for no A2A route.
    pub fn of(path: &str) -> Option<Route> {
        let segments: Vec<&str> = path.split('/').collect();
        let refused = match segments.as_slice() {
            ["message:send"] => return Some(Route::SendMessage),
            ["tasks"] => return Some(Route::ListTasks),
            ["message:stream"] => Refused::SendStreamingMessage,
            ["extendedAgentCard"] => Refused::ExtendedAgentCard,
            ["tasks", id, "pushNotificationConfigs"] if valid_id(id) => Refused::PushConfigs,
            ["tasks", id, "pushNotificationConfigs", config]
                if valid_id(id) && valid_id(config) =>
            {
                Refused::PushConfig
            }
            ["tasks", task] => match task.rsplit_once(':') {
                None if valid_id(task) => Refused::GetTask,
                Some((id, "cancel")) if valid_id(id) => Refused::CancelTask,
                Some((id, "subscribe")) if valid_id(id) => Refused::SubscribeToTask,
                _ => return None,
            },
            _ => return None,
        };
        Some(Route::Refused(refused))
    }

    /// The HTTP methods the route answers, for `Allow`.
    pub fn allow(self) -> &'static str {
        match self {
            Route::SendMessage
            | Route::Refused(
                Refused::SendStreamingMessage | Refused::CancelTask | Refused::SubscribeToTask,
            ) => "POST",
            Route::ListTasks | Route::Refused(Refused::GetTask | Refused::ExtendedAgentCard) => {
                "GET"
            }
            Route::Refused(Refused::PushConfigs) => "GET, POST",
            Route::Refused(Refused::PushConfig) => "GET, DELETE",
        }
    }

    /// Whether `method` is one the route answers; the router sends 405 with `Allow` otherwise.
    pub fn allows(self, method: &Method) -> bool {
        self.allow().split(", ").any(|m| m == method.as_str())
    }
}

impl Refused {
    /// The same error as the JSON-RPC method this route stands for.
    fn error(self) -> AapError {
        let unsupported = |operation: &str| AapError::UnsupportedOperation {
            operation: operation.to_owned(),
        };
        match self {
            Refused::GetTask | Refused::CancelTask => AapError::TaskNotFound,
            Refused::PushConfigs | Refused::PushConfig => AapError::PushNotificationNotSupported,
            Refused::SendStreamingMessage => unsupported("SendStreamingMessage"),
            Refused::SubscribeToTask => unsupported("SubscribeToTask"),
            Refused::ExtendedAgentCard => unsupported("GetExtendedAgentCard"),
        }
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && !id.contains(':')
}

/// Serves one HTTP+JSON request for `route` (its method already checked with
/// [`Route::allows`]); `body` is the read body of a `message:send`, empty otherwise.
pub async fn serve(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    route: Route,
    request: &http::request::Parts,
    body: &[u8],
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let (headers, query) = (&request.headers, request.uri.query());
    let mut activated = false;
    let outcome = match route {
        Route::SendMessage => send(app, dealer, caller, headers, body, &mut activated, log).await,
        // Like every JSON-RPC method, these check A2A-Version first.
        Route::ListTasks => headers::check_version(headers).map(|()| encode(&list_tasks(query))),
        Route::Refused(refused) => headers::check_version(headers).and(Err(refused.error())),
    };
    let media_type = reply_media_type(headers);
    let extension = activated.then_some(dealer.extension_uri());
    match outcome {
        Ok(body) => respond(StatusCode::OK, body, media_type, extension),
        Err(error) => error_response(dealer, &error, media_type, extension, log),
    }
}

/// The reply to a request refused before its body was read.
pub fn refusal(
    dealer: &Dealer,
    headers: &HeaderMap,
    error: &AapError,
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    // AAP's error payload: echo the extension if the request activated it, as every reply does.
    let extension = headers::activated(dealer, headers).then_some(dealer.extension_uri());
    error_response(dealer, error, reply_media_type(headers), extension, log)
}

/// An error as a `google.rpc.Status` body with its HTTP status; notes its outcome in `log`.
fn error_response(
    dealer: &Dealer,
    error: &AapError,
    media_type: &'static str,
    extension: Option<&str>,
    log: &mut RequestLog,
) -> Response<Full<Bytes>> {
    let wire = super::report(error, dealer);
    log.outcome = wire.reason;
    let status = json!({
        "error": {
            "code": wire.http_status.as_u16(),
            "status": wire_error::status_name(wire.http_status),
            "message": wire.message,
            "details": wire.details,
        }
    });
    let mut response = respond(wire.http_status, encode(&status), media_type, extension);
    headers::error_headers(response.headers_mut(), wire.http_status, wire.retry_after);
    response
}

/// `message:send`, in the JSON-RPC binding's order of checks (docs/protocol.md §Order of checks).
async fn send(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
    activated: &mut bool,
    log: &mut RequestLog,
) -> Result<Vec<u8>, AapError> {
    headers::check_media_type(headers, &[JSON, A2A_JSON])?;
    let request: Value = serde_json::from_slice(body).map_err(|e| AapError::Parse {
        detail: e.to_string(),
    })?;
    if !request.is_object() {
        return Err(AapError::InvalidRequest {
            detail: "the body must be a SendMessageRequest object".to_owned(),
        });
    }
    headers::check_version(headers)?;
    *activated = headers::activated(dealer, headers);
    if !*activated {
        return Err(headers::extension_required(dealer));
    }
    let response = super::send_message(app, dealer, caller, request, log).await?;
    Ok(tracing::debug_span!("encode").in_scope(|| {
        let mut body = Vec::with_capacity(super::REPLY_CAPACITY);
        response.write_json(&mut body);
        body
    }))
}

/// `ListTasks`: this agent never creates tasks (docs/protocol.md §Other A2A methods).
fn list_tasks(query: Option<&str>) -> Value {
    let page_size = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "pageSize")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(50);
    json!({ "tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0 })
}

/// `application/a2a+json` for callers that sent it, else `application/json`.
fn reply_media_type(headers: &HeaderMap) -> &'static str {
    let sent = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    if sent.is_some_and(|m| m.eq_ignore_ascii_case(A2A_JSON)) {
        A2A_JSON
    } else {
        JSON
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(r: Refused) -> Option<Route> {
        Some(Route::Refused(r))
    }

    #[test]
    fn every_a2a_rest_route_is_recognised() {
        let cases = [
            ("message:send", Some(Route::SendMessage)),
            ("tasks", Some(Route::ListTasks)),
            ("message:stream", refused(Refused::SendStreamingMessage)),
            ("tasks/t-1", refused(Refused::GetTask)),
            ("tasks/t-1:cancel", refused(Refused::CancelTask)),
            ("tasks/t-1:subscribe", refused(Refused::SubscribeToTask)),
            (
                "tasks/t-1/pushNotificationConfigs",
                refused(Refused::PushConfigs),
            ),
            (
                "tasks/t-1/pushNotificationConfigs/c-9",
                refused(Refused::PushConfig),
            ),
            ("extendedAgentCard", refused(Refused::ExtendedAgentCard)),
            ("message:sendx", None),
            ("message", None),
            ("tasks/", None),
            ("tasks/t-1:delete", None),
            ("tasks/t-1/other", None),
            ("", None),
        ];
        for (path, expected) in cases {
            assert_eq!(Route::of(path), expected, "{path}");
        }
    }
}
