//! The one place that maps an `AapError` to wire codes, HTTP statuses and error details.
//!
//! Mirrors the A2A error table (A2A §5.4: error → JSON-RPC code → HTTP status) and the AAP code
//! table (docs/protocol.md §AAP error codes), and fills the `error.data` array of docs/protocol.md
//! §Error data array: ErrorInfo first, then BadRequest for validation failures, then the typed
//! `aap.error` payload. Both bindings encode from a `WireError`, so they cannot disagree. Each
//! match is exhaustive (no `_` arm): a new error variant does not compile until it is mapped here.
#![warn(clippy::wildcard_enum_match_arm)]

use std::time::Duration;

use http::StatusCode;
use serde_json::{Map, Value, json};

use crate::error::{AapCode, AapError, Violation};

pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
pub const BAD_REQUEST_TYPE: &str = "type.googleapis.com/google.rpc.BadRequest";
pub const AAP_ERROR_TYPE: &str = "https://autoagentprotocol.org/extensions/aap/error";
pub const A2A_DOMAIN: &str = "a2a-protocol.org";
pub const AAP_DOMAIN: &str = "autoagentprotocol.org";

/// An error ready for either binding.
#[derive(Debug, Clone)]
pub struct WireError {
    pub jsonrpc_code: i64,
    /// Status on the HTTP+JSON binding (JSON-RPC replies are always 200).
    pub http_status: StatusCode,
    /// `error.message`: a sanitized summary, never an internal cause.
    pub message: String,
    /// `error.data` / `details[]`, in order.
    pub details: Vec<Value>,
    /// The ErrorInfo `reason` (A2A reason or AAP code); the `outcome` of logs and metrics.
    pub reason: &'static str,
    /// `error_id` of AAP errors, for log correlation.
    pub error_id: Option<String>,
    /// Sent as `Retry-After` (whole seconds, rounded up).
    pub retry_after: Option<Duration>,
    /// HTTP status of a JSON-RPC reply carrying this error: 200, except for authentication
    /// failures (401 with `WWW-Authenticate`, 403), which clients and proxies must see as such.
    pub rpc_status: StatusCode,
}

/// Per-error values the caller supplies so that this mapping stays a pure function.
#[derive(Debug, Clone)]
pub struct ErrorStamp {
    pub error_id: String,
    /// RFC 3339 UTC timestamp.
    pub created_at: String,
}

impl ErrorStamp {
    pub fn now() -> ErrorStamp {
        ErrorStamp {
            error_id: new_error_id(),
            created_at: rfc3339_now(),
        }
    }
}

pub fn new_error_id() -> String {
    format!("err_{}", uuid::Uuid::now_v7().simple())
}

pub fn rfc3339_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    now.format(&format)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// A2A protocol error without an AAP payload.
fn a2a(code: i64, status: StatusCode, reason: &'static str, message: String) -> WireError {
    a2a_with(code, status, reason, message, None, Vec::new())
}

fn a2a_with(
    code: i64,
    status: StatusCode,
    reason: &'static str,
    message: String,
    metadata: Option<Value>,
    extra: Vec<Value>,
) -> WireError {
    let mut info = Map::new();
    info.insert("@type".into(), json!(ERROR_INFO_TYPE));
    info.insert("reason".into(), json!(reason));
    info.insert("domain".into(), json!(A2A_DOMAIN));
    if let Some(m) = metadata {
        info.insert("metadata".into(), m);
    }
    let mut details = vec![Value::Object(info)];
    details.extend(extra);
    WireError {
        jsonrpc_code: code,
        http_status: status,
        message,
        details,
        reason,
        error_id: None,
        retry_after: None,
        rpc_status: StatusCode::OK,
    }
}

/// JSON-RPC code and HTTP status of each AAP code (docs/protocol.md §AAP error codes).
pub fn aap_code_wire(code: AapCode) -> (i64, StatusCode) {
    match code {
        AapCode::UnsupportedSkill => (-32004, StatusCode::NOT_FOUND),
        AapCode::SchemaValidationFailed
        | AapCode::MissingRequiredField
        | AapCode::InvalidCondition => (-32602, StatusCode::UNPROCESSABLE_ENTITY),
        AapCode::VehicleNotFound => (-32000, StatusCode::NOT_FOUND),
        AapCode::VehicleUnavailable
        | AapCode::AppointmentTimeUnavailable
        | AapCode::IdempotencyConflict => (-32000, StatusCode::CONFLICT),
        AapCode::ContactConsentRequired | AapCode::InvalidConsent => {
            (-32000, StatusCode::FORBIDDEN)
        }
        AapCode::RateLimited => (-32000, StatusCode::TOO_MANY_REQUESTS),
        AapCode::InternalError => (-32603, StatusCode::INTERNAL_SERVER_ERROR),
    }
}

struct AapParts {
    code: AapCode,
    summary: String,
    message: String,
    retryable: bool,
    details: Option<Value>,
    violations: Option<Vec<Violation>>,
    retry_after: Option<Duration>,
}

fn aap(parts: AapParts, stamp: &ErrorStamp) -> WireError {
    let AapParts {
        code,
        summary,
        message,
        retryable,
        details,
        violations,
        retry_after,
    } = parts;
    let (jsonrpc_code, http_status) = aap_code_wire(code);
    let mut data = vec![json!({
        "@type": ERROR_INFO_TYPE,
        "reason": code.as_str(),
        "domain": AAP_DOMAIN,
        "metadata": {
            "code": code.as_str(),
            "error_id": stamp.error_id,
            "retryable": if retryable { "true" } else { "false" },
            "created_at": stamp.created_at,
        }
    })];
    if let Some(v) = &violations {
        let field_violations: Vec<Value> = v
            .iter()
            .map(|v| {
                json!({ "field": v.instance_location, "description": format!("{}: {}", v.keyword, v.error) })
            })
            .collect();
        data.push(json!({ "@type": BAD_REQUEST_TYPE, "fieldViolations": field_violations }));
    }
    let mut payload = Map::new();
    payload.insert("@type".into(), json!(AAP_ERROR_TYPE));
    payload.insert("type".into(), json!("aap.error"));
    payload.insert("error_id".into(), json!(stamp.error_id));
    payload.insert("code".into(), json!(code.as_str()));
    payload.insert("message".into(), json!(message));
    payload.insert("retryable".into(), json!(retryable));
    if let Some(d) = details {
        payload.insert("details".into(), d);
    }
    payload.insert("created_at".into(), json!(stamp.created_at));
    data.push(Value::Object(payload));
    WireError {
        jsonrpc_code,
        http_status,
        message: summary,
        details: data,
        reason: code.as_str(),
        error_id: Some(stamp.error_id.clone()),
        retry_after,
        rpc_status: StatusCode::OK,
    }
}

/// `INTERNAL_ERROR`. `retryable` is false only when the same call would fail the same way
/// (docs/protocol.md §Upstream failures); `retry_after` is the hint of a resting upstream.
fn internal(stamp: &ErrorStamp, retryable: bool, retry_after: Option<Duration>) -> WireError {
    let message = if retryable {
        "The dealer's systems could not answer right now; retry later."
    } else {
        "The dealer's systems could not answer this request."
    }
    .to_owned();
    aap(
        AapParts {
            code: AapCode::InternalError,
            summary: message.clone(),
            message,
            retryable,
            details: retry_after.map(|after| json!({ "retry_after_ms": millis(after) })),
            violations: None,
            retry_after,
        },
        stamp,
    )
}

/// Whole milliseconds of a retry hint, at least 1.
fn millis(after: Duration) -> u64 {
    u64::try_from(after.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The retry hint of a call refused because a dealer system's concurrency queue is full: slots
/// free up within about one upstream round trip.
pub const UPSTREAM_BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Maps an error to its wire form. `stamp` supplies the AAP `error_id` and `created_at`.
pub fn to_wire(error: &AapError, stamp: &ErrorStamp) -> WireError {
    match error {
        AapError::Parse { .. } => a2a(
            -32700,
            StatusCode::BAD_REQUEST,
            "JSON_PARSE_ERROR",
            "Invalid JSON payload".to_owned(),
        ),
        AapError::InvalidRequest { detail } => a2a(
            -32600,
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            format!("Request payload validation error: {detail}"),
        ),
        AapError::MethodNotFound { method } => a2a(
            -32601,
            StatusCode::NOT_FOUND,
            "METHOD_NOT_FOUND",
            format!("Method not found: {method}"),
        ),
        AapError::InvalidParams { violations } => {
            let field_violations: Vec<Value> = violations
                .iter()
                .map(|v| json!({ "field": v.field, "description": v.description }))
                .collect();
            a2a_with(
                -32602,
                StatusCode::BAD_REQUEST,
                "INVALID_PARAMS",
                format!(
                    "Invalid parameters: {}",
                    summarize(violations.iter().map(|v| &v.field))
                ),
                None,
                vec![json!({ "@type": BAD_REQUEST_TYPE, "fieldViolations": field_violations })],
            )
        }
        AapError::TaskNotFound => a2a(
            -32001,
            StatusCode::NOT_FOUND,
            "TASK_NOT_FOUND",
            "Task not found: this agent answers with messages and never creates tasks".to_owned(),
        ),
        AapError::PushNotificationNotSupported => a2a(
            -32003,
            StatusCode::BAD_REQUEST,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "Push notifications are not supported by this agent".to_owned(),
        ),
        AapError::UnsupportedOperation { operation } => a2a(
            -32004,
            StatusCode::BAD_REQUEST,
            "UNSUPPORTED_OPERATION",
            format!("Unsupported operation: {operation} is not offered by this agent"),
        ),
        AapError::ContentTypeNotSupported { detail } => a2a(
            -32005,
            StatusCode::BAD_REQUEST,
            "CONTENT_TYPE_NOT_SUPPORTED",
            format!("Content type not supported: {detail}"),
        ),
        AapError::RequestMediaType { detail } => a2a(
            -32005,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "CONTENT_TYPE_NOT_SUPPORTED",
            format!("Content type not supported: {detail}"),
        ),
        AapError::ExtensionSupportRequired { uri } => a2a_with(
            -32008,
            StatusCode::BAD_REQUEST,
            "EXTENSION_SUPPORT_REQUIRED",
            format!("Activate the supported AAP profile with A2A-Extensions: {uri}"),
            Some(json!({ "extensionUri": uri, "requiredHeader": "A2A-Extensions" })),
            Vec::new(),
        ),
        AapError::VersionNotSupported { requested } => {
            let shown = requested.as_deref().unwrap_or("<absent>");
            a2a_with(
                -32009,
                StatusCode::BAD_REQUEST,
                "VERSION_NOT_SUPPORTED",
                format!("A2A version `{shown}` is not supported; send the header A2A-Version: 1.0"),
                Some(json!({ "requestedVersion": shown, "supportedVersions": "1.0" })),
                Vec::new(),
            )
        }
        AapError::Domain {
            code,
            message,
            details,
        } => aap(
            AapParts {
                code: *code,
                summary: message.clone(),
                message: message.clone(),
                retryable: code.retryable_by_default(),
                details: details.clone(),
                violations: None,
                retry_after: None,
            },
            stamp,
        ),
        AapError::Validation { code, violations } => {
            let errors: Vec<Value> = violations
                .iter()
                .map(|v| {
                    json!({ "instanceLocation": v.instance_location, "keyword": v.keyword, "error": v.error })
                })
                .collect();
            let n = violations.len();
            let noun = if n == 1 { "error" } else { "errors" };
            let (summary, message, details, violations) = match code {
                // Absent consent alone: a business refusal, not a malformed request
                // (docs/protocol.md §Validation failures).
                AapCode::ContactConsentRequired => {
                    let message = "Consent is required to submit a lead: send `consent` with \
                                   scope lead_submission."
                        .to_owned();
                    let details = json!({ "missing": "consent", "expected_scope": "lead_submission", "errors": errors });
                    (message.clone(), message, details, None)
                }
                AapCode::InvalidConsent => (
                    format!("The consent grant is not usable ({n} {noun})"),
                    format!("The consent grant is not usable ({n} {noun}); see details.errors[]."),
                    json!({ "errors": errors }),
                    Some(violations.clone()),
                ),
                AapCode::SchemaValidationFailed
                | AapCode::MissingRequiredField
                | AapCode::InvalidCondition
                | AapCode::UnsupportedSkill
                | AapCode::VehicleNotFound
                | AapCode::VehicleUnavailable
                | AapCode::AppointmentTimeUnavailable
                | AapCode::IdempotencyConflict
                | AapCode::RateLimited
                | AapCode::InternalError => (
                    format!("Invalid params: {n} validation {noun}"),
                    format!("Request failed validation with {n} {noun}; see details.errors[]."),
                    json!({ "errors": errors }),
                    Some(violations.clone()),
                ),
            };
            aap(
                AapParts {
                    code: *code,
                    summary,
                    message,
                    retryable: false,
                    details: Some(details),
                    violations,
                    retry_after: None,
                },
                stamp,
            )
        }
        AapError::RateLimited { retry_after } => rate_limited(
            *retry_after,
            "Rate limit exceeded",
            StatusCode::TOO_MANY_REQUESTS,
            stamp,
        ),
        // Shedding: the same RATE_LIMITED error, but 503 where HTTP statuses are visible, so
        // proxies and clients tell "the gateway is full" from "you are over your quota".
        AapError::Overloaded { retry_after } => rate_limited(
            *retry_after,
            "The gateway is at capacity",
            StatusCode::SERVICE_UNAVAILABLE,
            stamp,
        ),
        // A2A defines no authentication error; the reply keeps the A2A shape (ErrorInfo, no
        // `aap.error`) with the HTTP status clients and proxies understand.
        AapError::Unauthenticated { invalid } => {
            let mut wire = a2a(
                -32000,
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                if *invalid {
                    "The API key is not valid for this agent.".to_owned()
                } else {
                    "This agent requires an API key: send Authorization: Bearer <key> or X-API-Key."
                        .to_owned()
                },
            );
            wire.rpc_status = StatusCode::UNAUTHORIZED;
            wire
        }
        AapError::PermissionDenied { .. } => {
            let mut wire = a2a(
                -32000,
                StatusCode::FORBIDDEN,
                "PERMISSION_DENIED",
                "This API key may not call this dealer's agent.".to_owned(),
            );
            wire.rpc_status = StatusCode::FORBIDDEN;
            wire
        }
        // A full queue in front of a dealer system is the gateway's own overload.
        AapError::UpstreamBusy { .. } => rate_limited(
            UPSTREAM_BUSY_RETRY_AFTER,
            "The dealer's systems are busy",
            StatusCode::SERVICE_UNAVAILABLE,
            stamp,
        ),
        // The dealer's system said how long to wait (or its pace did): that is the hint.
        AapError::UpstreamRateLimited { retry_after, .. } => rate_limited(
            *retry_after,
            "The dealer's systems asked to slow down",
            StatusCode::SERVICE_UNAVAILABLE,
            stamp,
        ),
        AapError::UpstreamResting { retry_after, .. } => internal(stamp, true, Some(*retry_after)),
        AapError::UpstreamRefused { .. } | AapError::InvalidReply { .. } => {
            internal(stamp, false, None)
        }
        AapError::Incomplete { cause, .. } => internal(stamp, cause.retryable(), None),
        AapError::UpstreamTimeout { .. }
        | AapError::UpstreamUnavailable { .. }
        | AapError::InvalidUpstreamResponse { .. }
        | AapError::Internal(_) => internal(stamp, true, None),
        AapError::LeadInProgress { retry_after } => lead_pending(
            stamp,
            *retry_after,
            "in_progress",
            "This lead is still being delivered to the dealer; retry with the same \
             idempotency_key to get its outcome. It will not be delivered twice.",
        ),
        AapError::LeadHeld { retry_after, .. } => lead_pending(
            stamp,
            *retry_after,
            "held",
            "The dealer's systems may have received this lead but did not confirm it; it is \
             held for the dealer to reconcile. Retry with the same idempotency_key later; do \
             not resubmit it under a new key.",
        ),
    }
}

/// `INTERNAL_ERROR`, retryable with a hint, for a lead whose delivery is not over (`state`:
/// `in_progress` or `held`): the buyer is told to come back with the same key, not why.
fn lead_pending(
    stamp: &ErrorStamp,
    retry_after: Duration,
    state: &str,
    message: &str,
) -> WireError {
    aap(
        AapParts {
            code: AapCode::InternalError,
            summary: message.to_owned(),
            message: message.to_owned(),
            retryable: true,
            details: Some(json!({ "retry_after_ms": millis(retry_after), "lead": state })),
            violations: None,
            retry_after: Some(retry_after),
        },
        stamp,
    )
}

/// `RATE_LIMITED` with its retry hint, sent with `status` on the HTTP+JSON binding.
fn rate_limited(
    retry_after: Duration,
    why: &str,
    status: StatusCode,
    stamp: &ErrorStamp,
) -> WireError {
    let ms = millis(retry_after);
    let message = format!("{why}; retry after {ms} ms.");
    let mut wire = aap(
        AapParts {
            code: AapCode::RateLimited,
            summary: message.clone(),
            message,
            retryable: true,
            details: Some(json!({ "retry_after_ms": ms })),
            violations: None,
            retry_after: Some(retry_after),
        },
        stamp,
    );
    wire.http_status = status;
    wire
}

/// The `google.rpc.Code` name of an HTTP status, for the `status` of a `google.rpc.Status`
/// body (the canonical HTTP mapping of google.rpc.Code).
pub fn status_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 415 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

fn summarize<'a>(fields: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = fields.map(String::as_str).collect();
    names.join(", ")
}

/// Whether the error hides an internal cause that must be logged (and never sent). A full
/// upstream queue is overload, like shedding: counted (`upstream_errors_total{kind="queue_full"}`),
/// not logged as an error per call.
pub fn is_internal(error: &AapError) -> bool {
    matches!(
        error,
        AapError::UpstreamTimeout { .. }
            | AapError::UpstreamUnavailable { .. }
            | AapError::UpstreamResting { .. }
            | AapError::UpstreamRefused { .. }
            | AapError::InvalidUpstreamResponse { .. }
            | AapError::InvalidReply { .. }
            | AapError::Incomplete { .. }
            | AapError::Internal(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FieldViolation;

    /// One error of every kind (a new variant must be added here: `aap_code` is exhaustive).
    fn every_error() -> Vec<AapError> {
        let s = || "x".to_owned();
        let d = Duration::from_secs(1);
        let violation = || Violation {
            instance_location: "/a".to_owned(),
            keyword: "type".to_owned(),
            error: "must be string".to_owned(),
        };
        let mut all = vec![
            AapError::Parse { detail: s() },
            AapError::InvalidRequest { detail: s() },
            AapError::MethodNotFound { method: s() },
            AapError::InvalidParams {
                violations: vec![FieldViolation {
                    field: s(),
                    description: s(),
                }],
            },
            AapError::TaskNotFound,
            AapError::PushNotificationNotSupported,
            AapError::UnsupportedOperation { operation: s() },
            AapError::ContentTypeNotSupported { detail: s() },
            AapError::RequestMediaType { detail: s() },
            AapError::ExtensionSupportRequired { uri: s() },
            AapError::VersionNotSupported { requested: None },
            AapError::RateLimited { retry_after: d },
            AapError::Overloaded { retry_after: d },
            AapError::Unauthenticated { invalid: true },
            AapError::PermissionDenied { key: s() },
            AapError::UpstreamTimeout {
                upstream: s(),
                after: d,
            },
            AapError::UpstreamUnavailable {
                upstream: s(),
                cause: s(),
            },
            AapError::UpstreamResting {
                upstream: s(),
                retry_after: d,
            },
            AapError::UpstreamBusy {
                upstream: s(),
                waited: d,
            },
            AapError::UpstreamRefused {
                upstream: s(),
                cause: s(),
            },
            AapError::InvalidUpstreamResponse {
                upstream: s(),
                cause: s(),
            },
            AapError::InvalidReply {
                skill: s(),
                mapping: s(),
                violations: vec![violation()],
            },
            AapError::Incomplete {
                mapping: s(),
                cause: crate::error::Incomplete::Unreachable {
                    reported: 2,
                    fetched: 1,
                },
            },
            AapError::Incomplete {
                mapping: s(),
                cause: crate::error::Incomplete::Repeated { page: 1 },
            },
            AapError::Internal(s()),
            AapError::LeadInProgress { retry_after: d },
            AapError::LeadHeld {
                reference: s(),
                retry_after: d,
            },
        ];
        for code in AapCode::ALL {
            all.push(AapError::domain(code, "m"));
            all.push(AapError::Validation {
                code,
                violations: vec![violation()],
            });
        }
        all
    }

    #[test]
    fn the_code_on_the_wire_is_the_errors_aap_code() {
        let stamp = ErrorStamp::now();
        for error in every_error() {
            let wire = to_wire(&error, &stamp);
            match error.aap_code() {
                Some(code) => {
                    assert_eq!(wire.reason, code.as_str(), "{error:?}");
                    assert!(wire.error_id.is_some(), "an AAP error has an id: {error:?}");
                }
                None => assert!(wire.error_id.is_none(), "{error:?} keeps A2A's shape"),
            }
        }
    }
}
