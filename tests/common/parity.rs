//! The HTTP+JSON twin of a JSON-RPC `SendMessage`, and the rule that both bindings reach the
//! same outcome (issue 6: "functionally equivalent"; A2A §5.1; docs/protocol.md §HTTP+JSON
//! binding).

use serde_json::Value;

use super::Reply;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST: &str = "type.googleapis.com/google.rpc.BadRequest";
const AAP_ERROR: &str = "https://autoagentprotocol.org/extensions/aap/error";

/// For a well-formed JSON-RPC `SendMessage` posted to a JSON-RPC endpoint: the HTTP+JSON path
/// and body carrying the same request. `None` for anything without an HTTP+JSON equivalent
/// (other methods, broken envelopes, other paths, the REST-only media type).
pub fn rest_twin(path: &str, headers: &[(&str, &str)], body: &[u8]) -> Option<(String, Vec<u8>)> {
    let endpoint = path.strip_suffix('/').unwrap_or(path);
    if !endpoint.ends_with("/a2a") {
        return None;
    }
    if content_type(headers).is_some_and(|c| c.contains("a2a+json")) {
        return None;
    }
    let request: Value = serde_json::from_slice(body).ok()?;
    let ok_id = request
        .get("id")
        .is_some_and(|id| id.is_string() || id.is_number());
    if request.get("jsonrpc")? != "2.0" || !ok_id || request.get("method")? != "SendMessage" {
        return None;
    }
    let params = request.get("params").filter(|p| p.is_object())?;
    Some((
        format!("{endpoint}/message:send"),
        serde_json::to_vec(params).expect("json"),
    ))
}

fn content_type<'h>(headers: &[(&'h str, &'h str)]) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| *v)
}

/// The HTTP status the HTTP+JSON binding must give an error `reason` (docs/protocol.md §HTTP
/// statuses; the request's own media type is 415, a part's 400).
pub fn expected_status(reason: &str, headers: &[(&str, &str)]) -> u16 {
    match reason {
        "UNSUPPORTED_SKILL" | "VEHICLE_NOT_FOUND" | "TASK_NOT_FOUND" | "METHOD_NOT_FOUND" => 404,
        "SCHEMA_VALIDATION_FAILED" | "MISSING_REQUIRED_FIELD" | "INVALID_CONDITION" => 422,
        "VEHICLE_UNAVAILABLE" | "APPOINTMENT_TIME_UNAVAILABLE" | "IDEMPOTENCY_CONFLICT" => 409,
        "CONTACT_CONSENT_REQUIRED" | "INVALID_CONSENT" | "PERMISSION_DENIED" => 403,
        "RATE_LIMITED" => 429,
        "INTERNAL_ERROR" => 500,
        "UNAUTHENTICATED" => 401,
        "CONTENT_TYPE_NOT_SUPPORTED" => {
            let json = content_type(headers).is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
            if json { 400 } else { 415 }
        }
        "JSON_PARSE_ERROR"
        | "INVALID_REQUEST"
        | "INVALID_PARAMS"
        | "UNSUPPORTED_OPERATION"
        | "PUSH_NOTIFICATION_NOT_SUPPORTED"
        | "EXTENSION_SUPPORT_REQUIRED"
        | "VERSION_NOT_SUPPORTED" => 400,
        other => panic!("no HTTP status known for {other}"),
    }
}

fn detail<'v>(details: &'v Value, type_url: &str) -> Option<&'v Value> {
    details.as_array()?.iter().find(|d| d["@type"] == type_url)
}

/// `aap.error` without the per-instance fields (`error_id`, `created_at`) and, for RATE_LIMITED,
/// the remaining wait, which moves between two calls.
fn comparable(aap: &Value) -> Value {
    let mut aap = aap.clone();
    if let Some(o) = aap.as_object_mut() {
        o.remove("error_id");
        o.remove("created_at");
        if o["code"] == "RATE_LIMITED" {
            o.remove("message");
            if let Some(d) = o.get_mut("details").and_then(Value::as_object_mut) {
                d.remove("retry_after_ms");
            }
        }
    }
    aap
}

/// Panics unless the HTTP+JSON reply `rest` reaches the JSON-RPC reply `rpc`'s outcome.
pub fn assert_same_outcome(rpc: &Reply, rest: &Reply, headers: &[(&str, &str)]) {
    let context = || {
        format!(
            "\nJSON-RPC: {}\nHTTP+JSON ({}): {}",
            rpc.text, rest.status, rest.text
        )
    };
    if rpc.body.get("jsonrpc").is_none() {
        // Refused at the HTTP level (no dealer, body too large): the same status.
        assert_eq!(rpc.status, rest.status, "{}", context());
        return;
    }
    let extension = |r: &Reply| r.headers.get("a2a-extensions").cloned();
    assert_eq!(
        extension(rpc),
        extension(rest),
        "A2A-Extensions echo{}",
        context()
    );
    if let Some(result) = rpc.body.get("result") {
        assert_eq!(rest.status, 200, "{}", context());
        let (a, b) = (&result["message"], &rest.body["message"]);
        assert_eq!(a["parts"], b["parts"], "the same skill reply{}", context());
        assert_eq!(b["role"], "ROLE_AGENT", "{}", context());
        assert_ne!(b["messageId"], Value::Null, "{}", context());
        return;
    }
    let (a, b) = (&rpc.body["error"], &rest.body["error"]);
    let reason = a["data"][0]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("JSON-RPC error without an ErrorInfo first{}", context()));
    assert_eq!(b["details"][0]["@type"], ERROR_INFO, "{}", context());
    assert_eq!(b["details"][0]["reason"], reason, "{}", context());
    assert_eq!(
        b["details"][0]["domain"],
        a["data"][0]["domain"],
        "{}",
        context()
    );
    let status = expected_status(reason, headers);
    assert_eq!(rest.status, status, "HTTP status for {reason}{}", context());
    assert_eq!(b["code"], status, "google.rpc.Status code{}", context());
    assert!(b["status"].is_string(), "{}", context());
    let entries = |v: &Value| v.as_array().map_or(0, Vec::len);
    assert_eq!(entries(&a["data"]), entries(&b["details"]), "{}", context());
    assert_eq!(
        detail(&a["data"], BAD_REQUEST),
        detail(&b["details"], BAD_REQUEST),
        "BadRequest{}",
        context()
    );
    match (
        detail(&a["data"], AAP_ERROR),
        detail(&b["details"], AAP_ERROR),
    ) {
        (Some(x), Some(y)) => assert_eq!(comparable(x), comparable(y), "aap.error{}", context()),
        (None, None) => assert_eq!(
            a["data"][0]["metadata"],
            b["details"][0]["metadata"],
            "{}",
            context()
        ),
        _ => panic!("aap.error on one binding only{}", context()),
    }
    let retry_after = |r: &Reply| r.headers.contains_key("retry-after");
    assert_eq!(
        retry_after(rpc),
        retry_after(rest),
        "Retry-After{}",
        context()
    );
}
