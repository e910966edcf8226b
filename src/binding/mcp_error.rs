//! The one place an `AapError` becomes an MCP answer (docs/protocol.md §MCP binding, Errors).
//!
//! MCP splits failures in two: a tool that ran and failed answers a *result* with `isError:
//! true`, which the model sees and can act on (fix an argument, wait, ask the buyer); a request
//! the server could not take answers a JSON-RPC *error*. Every AAP outcome of a tool call — a
//! validation failure with its field list, a consent refusal, `RATE_LIMITED` with its retry
//! hint, `INTERNAL_ERROR` — is the former, carrying the same `aap.error` payload as the A2A
//! bindings (built by `wire_error`, so the bodies cannot drift apart). Envelope problems are the
//! latter; authentication keeps its HTTP status (401 with `WWW-Authenticate`, 403), which MCP
//! clients and proxies act on. Exhaustive (no `_` arm): a new error variant does not compile
//! until it is placed here.
#![warn(clippy::wildcard_enum_match_arm)]

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use super::wire_error::WireError;
use crate::error::AapError;

/// How an error is answered on the MCP binding.
#[derive(Debug, Clone, PartialEq)]
pub enum McpError {
    /// A `CallToolResult` with `isError: true`: a one-line text for the model and the
    /// `aap.error` payload as JSON text.
    Tool {
        text: String,
        payload: Value,
        retry_after: Option<Duration>,
    },
    /// A JSON-RPC error response, sent with `status`.
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
        status: StatusCode,
        retry_after: Option<Duration>,
    },
}

/// JSON-RPC codes of MCP's envelope errors.
pub const INVALID_PARAMS: i64 = -32602;

/// Maps `error`, already converted to `wire` (which carries its `error_id` and payload).
pub fn to_mcp(error: &AapError, wire: &WireError) -> McpError {
    let rpc = |code: i64, status: StatusCode, data: Option<Value>| McpError::Rpc {
        code,
        message: wire.message.clone(),
        data,
        status,
        retry_after: wire.retry_after,
    };
    match error {
        AapError::Parse { .. } => rpc(-32700, StatusCode::BAD_REQUEST, None),
        AapError::InvalidRequest { .. } => rpc(-32600, StatusCode::BAD_REQUEST, None),
        AapError::MethodNotFound { .. } => rpc(-32601, StatusCode::OK, None),
        // A `tools/call` whose own fields (not the tool's arguments) are wrong.
        AapError::InvalidParams { violations } => rpc(
            INVALID_PARAMS,
            StatusCode::OK,
            Some(
                json!({ "fieldViolations": violations.iter().map(|v| json!({"field": v.field, "description": v.description})).collect::<Vec<_>>() }),
            ),
        ),
        // A2A's message and header rules: never raised on this binding, which has no A2A
        // envelope; a request that somehow met one could not be taken.
        AapError::TaskNotFound
        | AapError::PushNotificationNotSupported
        | AapError::UnsupportedOperation { .. }
        | AapError::ContentTypeNotSupported { .. }
        | AapError::RequestMediaType { .. }
        | AapError::ExtensionSupportRequired { .. }
        | AapError::VersionNotSupported { .. } => rpc(-32600, StatusCode::OK, None),
        AapError::Unauthenticated { .. } => rpc(
            -32000,
            StatusCode::UNAUTHORIZED,
            wire.details.first().cloned(),
        ),
        AapError::PermissionDenied { .. } => {
            rpc(-32000, StatusCode::FORBIDDEN, wire.details.first().cloned())
        }
        AapError::Domain { .. }
        | AapError::Validation { .. }
        | AapError::RateLimited { .. }
        | AapError::Overloaded { .. }
        | AapError::UpstreamTimeout { .. }
        | AapError::UpstreamUnavailable { .. }
        | AapError::UpstreamResting { .. }
        | AapError::UpstreamBusy { .. }
        | AapError::UpstreamRateLimited { .. }
        | AapError::UpstreamRefused { .. }
        | AapError::InvalidUpstreamResponse { .. }
        | AapError::InvalidReply { .. }
        | AapError::Incomplete { .. }
        | AapError::Internal(_)
        | AapError::LeadInProgress { .. }
        | AapError::LeadHeld { .. } => tool_error(wire),
    }
}

/// The `aap.error` payload of an AAP error's wire form (its last `error.data` entry).
pub fn aap_payload(wire: &WireError) -> Option<&Value> {
    wire.details
        .iter()
        .rev()
        .find(|d| d.get("type").and_then(Value::as_str) == Some("aap.error"))
}

/// A tool error: `CODE: message`, each failing field with its problem, and the retry hint.
fn tool_error(wire: &WireError) -> McpError {
    let payload = aap_payload(wire).cloned().unwrap_or(Value::Null);
    let message = payload
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or(&wire.message);
    let mut text = format!("{}: {message}", wire.reason);
    let errors = payload
        .pointer("/details/errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let fields: Vec<String> = errors
        .map(|e| {
            let at = e
                .get("instanceLocation")
                .and_then(Value::as_str)
                .unwrap_or("");
            let error = e.get("error").and_then(Value::as_str).unwrap_or("");
            format!("{} {error}", if at.is_empty() { "(root)" } else { at })
        })
        .collect();
    if !fields.is_empty() {
        text.push_str(" Fields: ");
        text.push_str(&fields.join("; "));
        text.push('.');
    }
    if payload.get("retryable") == Some(&Value::Bool(true)) {
        match payload
            .pointer("/details/retry_after_ms")
            .and_then(Value::as_u64)
        {
            Some(ms) => text.push_str(&format!(" Retryable after {ms} ms.")),
            None => text.push_str(" Retryable."),
        }
    }
    McpError::Tool {
        text,
        payload,
        retry_after: wire.retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::wire_error::{ErrorStamp, to_wire};
    use crate::error::{AapCode, FieldViolation, Violation};

    fn map(error: &AapError) -> McpError {
        to_mcp(error, &to_wire(error, &ErrorStamp::now()))
    }

    /// One row per kind of answer: the AAP outcomes are tool errors with the same payload as
    /// the A2A bindings; envelope and authentication problems are JSON-RPC errors.
    #[test]
    fn each_error_is_answered_as_mcp_expects() {
        let d = Duration::from_millis(1500);
        let McpError::Tool {
            text,
            payload,
            retry_after,
        } = map(&AapError::RateLimited { retry_after: d })
        else {
            panic!("RATE_LIMITED is a tool error");
        };
        assert_eq!(payload["code"], "RATE_LIMITED");
        assert_eq!(payload["details"]["retry_after_ms"], 1500);
        assert_eq!(retry_after, Some(d));
        assert!(text.contains("Retryable after 1500 ms"), "{text}");

        let validation = AapError::Validation {
            code: AapCode::SchemaValidationFailed,
            violations: vec![Violation {
                instance_location: "/filters/make".to_owned(),
                keyword: "type".to_owned(),
                error: "must be array".to_owned(),
            }],
        };
        let stamp = ErrorStamp::now();
        let wire = to_wire(&validation, &stamp);
        let McpError::Tool { text, payload, .. } = to_mcp(&validation, &wire) else {
            panic!("validation is a tool error");
        };
        assert_eq!(
            Some(&payload),
            wire.details.last(),
            "the A2A payload, as is"
        );
        assert_eq!(
            payload["details"]["errors"][0]["instanceLocation"],
            "/filters/make"
        );
        assert!(text.starts_with("SCHEMA_VALIDATION_FAILED: "), "{text}");
        assert!(text.contains("/filters/make must be array"), "{text}");

        for (error, code, status) in [
            (AapError::Unauthenticated { invalid: false }, -32000, 401),
            (
                AapError::PermissionDenied {
                    key: "k".to_owned(),
                },
                -32000,
                403,
            ),
            (
                AapError::Parse {
                    detail: "x".to_owned(),
                },
                -32700,
                400,
            ),
            (
                AapError::InvalidRequest {
                    detail: "x".to_owned(),
                },
                -32600,
                400,
            ),
            (
                AapError::MethodNotFound {
                    method: "x".to_owned(),
                },
                -32601,
                200,
            ),
            (
                AapError::InvalidParams {
                    violations: vec![FieldViolation {
                        field: "params.arguments".to_owned(),
                        description: "must be an object".to_owned(),
                    }],
                },
                -32602,
                200,
            ),
        ] {
            match map(&error) {
                McpError::Rpc {
                    code: c, status: s, ..
                } => {
                    assert_eq!((c, s.as_u16()), (code, status), "{error:?}");
                }
                McpError::Tool { .. } => panic!("{error:?} is a JSON-RPC error"),
            }
        }
        for code in AapCode::ALL {
            assert!(
                matches!(map(&AapError::domain(code, "m")), McpError::Tool { .. }),
                "{code}"
            );
        }
        assert!(matches!(
            map(&AapError::Internal("secret cause".to_owned())),
            McpError::Tool { ref text, .. } if !text.contains("secret")
        ));
    }
}
