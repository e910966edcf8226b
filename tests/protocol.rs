//! Protocol conformance through the real app, in-process, on the demo configuration.
//!
//! One test per row of docs/protocol.md §Order of checks (on the JSON-RPC binding) and §Envelope
//! edges, plus the agent card (§Agent card), the admin listener and graceful shutdown. Every
//! JSON-RPC reply is checked for HTTP 200, `jsonrpc: "2.0"`, the `id` echo rule, and the
//! `error.data` array of §Error data array (ErrorInfo first; `aap.error` only on AAP errors).
//! Every `SendMessage` case also runs through the HTTP+JSON binding and must reach the same
//! outcome there (parity; `common::parity`).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use aap_gateway::protocol::Skill;
use common::{EXT, Gateway, Reply, send_message, standard_headers};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST: &str = "type.googleapis.com/google.rpc.BadRequest";
const AAP_ERROR: &str = "https://autoagentprotocol.org/extensions/aap/error";
const A2A_DOMAIN: &str = "a2a-protocol.org";
const AAP_DOMAIN: &str = "autoagentprotocol.org";
const V13_URI: &str = "https://autoagentprotocol.org/extensions/aap/v1.3";
const DI_REQUEST_MT: &str = "application/vnd.autoagent.dealer-information-request+json";
const DI_RESPONSE_MT: &str = "application/vnd.autoagent.dealer-information-response+json";
const HONDA: &str = "/dealers/demo-honda/a2a";
/// `limits.max_body_bytes` of config/demo.yaml.
const MAX_BODY: usize = 65536;

// === helpers ===

/// The shipped demo, with every `SendMessage` of this suite also run through the HTTP+JSON
/// binding, which must reach the same outcome (`common::parity`).
async fn demo() -> Gateway {
    common::demo().await.with_parity()
}

fn di() -> Value {
    json!({ "type": "dealer.information.request" })
}

/// A `SendMessage` whose `params` is `params`.
fn with_params(params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": "req-1", "method": "SendMessage", "params": params })
}

/// A `SendMessage` with the given message members (over a valid dealer.information message).
fn with_message(members: Value) -> Value {
    let mut body = send_message(di());
    let message = body["params"]["message"]
        .as_object_mut()
        .expect("message object");
    for (k, v) in members.as_object().expect("members object") {
        if v.is_null() {
            message.remove(k);
        } else {
            message.insert(k.clone(), v.clone());
        }
    }
    body
}

/// A `SendMessage` carrying `parts` as the message parts.
fn with_parts(parts: Value) -> Value {
    with_message(json!({ "parts": parts }))
}

/// A valid dealer.information `SendMessage` with `configuration`.
fn with_configuration(configuration: Value) -> Value {
    let mut body = send_message(di());
    body["params"]["configuration"] = configuration;
    body
}

/// A JSON-RPC call of `method` with `params`.
fn call(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": "call-1", "method": method, "params": params })
}

/// The standard AAP headers with `name` replaced by `value` (or removed when `None`).
fn headers_with<'a>(name: &str, value: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers: Vec<(&str, &str)> = standard_headers()
        .into_iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
        .collect();
    if let Some(v) = value {
        let key = match name {
            "content-type" => "content-type",
            "a2a-version" => "a2a-version",
            "a2a-extensions" => "a2a-extensions",
            other => panic!("unexpected header {other}"),
        };
        headers.push((key, v));
    }
    headers
}

async fn post(gw: &Gateway, headers: &[(&str, &str)], body: &Value) -> Reply {
    gw.post_raw("/a2a", headers, body.to_string().into_bytes())
        .await
}

/// Checks what every JSON-RPC reply must be: HTTP 200, JSON, `jsonrpc: "2.0"`, the `id`, and
/// exactly one of `result` / `error`.
fn assert_jsonrpc(reply: &Reply, id: &Value) {
    assert_eq!(
        reply.status, 200,
        "JSON-RPC replies are HTTP 200: {}",
        reply.text
    );
    let content_type = reply.headers["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body = reply
        .body
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {}", reply.text));
    assert_eq!(body.get("jsonrpc"), Some(&json!("2.0")), "{}", reply.text);
    assert_eq!(body.get("id"), Some(id), "id echo: {}", reply.text);
    let members: BTreeSet<&str> = body.keys().map(String::as_str).collect();
    let one_of = members.contains("result") != members.contains("error");
    assert!(one_of, "exactly one of result/error: {}", reply.text);
    assert_eq!(members.len(), 3, "no other members: {}", reply.text);
}

/// Common to every error: code, message string, `data` array of `@type`d entries, ErrorInfo first.
fn assert_error_envelope(reply: &Reply, code: i64, id: &Value) -> Vec<Value> {
    assert_jsonrpc(reply, id);
    let error = &reply.body["error"];
    assert_eq!(error["code"], json!(code), "{}", reply.text);
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "error.message: {}",
        reply.text
    );
    let data = error["data"]
        .as_array()
        .unwrap_or_else(|| panic!("error.data must be an array: {}", reply.text))
        .clone();
    assert!(!data.is_empty(), "{}", reply.text);
    for entry in &data {
        assert!(
            entry["@type"].is_string(),
            "every entry carries @type: {entry}"
        );
    }
    assert_eq!(
        data[0]["@type"], ERROR_INFO,
        "ErrorInfo first: {}",
        reply.text
    );
    data
}

/// An A2A protocol error: ErrorInfo with `domain: a2a-protocol.org` and `reason`, no `aap.error`.
fn assert_a2a_error(reply: &Reply, code: i64, reason: &str, id: &Value) -> Vec<Value> {
    let data = assert_error_envelope(reply, code, id);
    assert_eq!(data[0]["reason"], reason, "{}", reply.text);
    assert_eq!(data[0]["domain"], A2A_DOMAIN, "{}", reply.text);
    if let Some(metadata) = data[0].get("metadata") {
        for (k, v) in metadata.as_object().expect("metadata object") {
            assert!(
                v.is_string(),
                "metadata.{k} must be a string: {}",
                reply.text
            );
        }
    }
    assert!(
        data.iter().all(|d| d["@type"] != AAP_ERROR),
        "A2A errors carry no aap.error: {}",
        reply.text
    );
    data
}

/// `-32602` for the A2A envelope: ErrorInfo, then BadRequest; returns the violated fields.
fn assert_invalid_params(reply: &Reply) -> Vec<String> {
    let data = assert_a2a_error(reply, -32602, "INVALID_PARAMS", &json!("req-1"));
    let bad_request = data
        .iter()
        .find(|d| d["@type"] == BAD_REQUEST)
        .unwrap_or_else(|| panic!("BadRequest detail: {}", reply.text));
    let violations = bad_request["fieldViolations"]
        .as_array()
        .expect("fieldViolations");
    assert!(!violations.is_empty());
    violations
        .iter()
        .map(|v| {
            assert!(
                v["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{v}"
            );
            v["field"].as_str().expect("field").to_owned()
        })
        .collect()
}

fn is_rfc3339(s: &str) -> bool {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
}

/// An AAP error: the full array of docs/protocol.md §Error data array (ErrorInfo, BadRequest for
/// validation codes, `aap.error` last). Returns the `aap.error` payload.
fn assert_aap_error(reply: &Reply, code: i64, aap_code: &str) -> Value {
    let data = assert_error_envelope(reply, code, &json!("req-1"));
    let info = &data[0];
    assert_eq!(info["reason"], aap_code, "{}", reply.text);
    assert_eq!(info["domain"], AAP_DOMAIN, "{}", reply.text);
    let metadata = info["metadata"].as_object().expect("ErrorInfo metadata");
    for (k, v) in metadata {
        assert!(
            v.is_string(),
            "metadata.{k} must be a string: {}",
            reply.text
        );
    }
    let keys: BTreeSet<&str> = metadata.keys().map(String::as_str).collect();
    for key in ["code", "error_id", "retryable", "created_at"] {
        assert!(keys.contains(key), "metadata.{key}: {}", reply.text);
    }
    assert_eq!(metadata["code"], aap_code);
    let payload = data.last().expect("last entry").clone();
    assert_eq!(
        payload["@type"], AAP_ERROR,
        "aap.error is last: {}",
        reply.text
    );
    let members: BTreeSet<&str> = payload
        .as_object()
        .expect("aap.error object")
        .keys()
        .map(String::as_str)
        .collect();
    let allowed: BTreeSet<&str> = [
        "@type",
        "type",
        "error_id",
        "code",
        "message",
        "retryable",
        "details",
        "created_at",
    ]
    .into();
    assert!(
        members.is_subset(&allowed),
        "additionalProperties: false: {members:?}"
    );
    assert_eq!(payload["type"], "aap.error");
    assert_eq!(payload["code"], aap_code);
    assert!(payload["message"].as_str().is_some_and(|m| !m.is_empty()));
    let error_id = payload["error_id"].as_str().expect("error_id");
    assert!(!error_id.is_empty());
    assert_eq!(
        metadata["error_id"], error_id,
        "one error_id in both places"
    );
    let retryable = payload["retryable"]
        .as_bool()
        .expect("retryable is a boolean");
    assert_eq!(metadata["retryable"], retryable.to_string());
    let created_at = payload["created_at"].as_str().expect("created_at");
    assert!(is_rfc3339(created_at), "created_at RFC 3339: {created_at}");
    assert_eq!(metadata["created_at"], created_at);
    let validation = matches!(
        aap_code,
        "SCHEMA_VALIDATION_FAILED" | "MISSING_REQUIRED_FIELD" | "INVALID_CONDITION"
    );
    let bad_request = data.iter().find(|d| d["@type"] == BAD_REQUEST);
    if validation {
        assert_eq!(
            data.len(),
            3,
            "ErrorInfo, BadRequest, aap.error: {}",
            reply.text
        );
        assert_eq!(data[1]["@type"], BAD_REQUEST);
        // One field violation per details.errors[] entry, `"<keyword>: <error>"`.
        let errors = payload["details"]["errors"]
            .as_array()
            .expect("details.errors");
        let violations = data[1]["fieldViolations"]
            .as_array()
            .expect("fieldViolations");
        assert_eq!(errors.len(), violations.len());
        for (e, v) in errors.iter().zip(violations) {
            assert_eq!(v["field"], e["instanceLocation"]);
            let description = format!(
                "{}: {}",
                e["keyword"].as_str().expect("keyword"),
                e["error"].as_str().expect("error")
            );
            assert_eq!(v["description"], description.as_str());
        }
    } else {
        assert!(bad_request.is_none(), "{}", reply.text);
    }
    payload
}

/// `(instanceLocation, keyword)` pairs of a validation error.
fn failures(reply: &Reply) -> BTreeSet<(String, String)> {
    reply.failures().into_iter().collect()
}

fn pair(at: &str, keyword: &str) -> (String, String) {
    (at.to_owned(), keyword.to_owned())
}

/// Checks a success reply per docs/protocol.md §Success reply and returns the agent message.
fn assert_success(reply: &Reply, request: &Value) -> Value {
    assert_jsonrpc(reply, &request["id"]);
    let result = reply.body["result"].as_object().expect("result object");
    assert_eq!(
        result.len(),
        1,
        "result is {{\"message\": ...}}: {}",
        reply.text
    );
    let message = reply.body["result"]["message"].clone();
    let id = message["messageId"].as_str().expect("messageId");
    assert!(!id.is_empty());
    assert_ne!(
        message["messageId"], request["params"]["message"]["messageId"],
        "fresh messageId"
    );
    assert!(
        message["contextId"].as_str().is_some_and(|c| !c.is_empty()),
        "{message}"
    );
    assert_eq!(message["role"], "ROLE_AGENT");
    let parts = message["parts"].as_array().expect("parts");
    assert_eq!(parts.len(), 1, "one DataPart: {message}");
    assert!(parts[0]["data"].is_object());
    message
}

fn extensions_header(reply: &Reply) -> Option<String> {
    reply
        .headers
        .get("a2a-extensions")
        .map(|v| v.to_str().expect("ascii").to_owned())
}

/// A raw HTTP/1.1 exchange: writes `head` (and `body`), reads one response.
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` body.
async fn read_response(stream: &mut TcpStream) -> RawResponse {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.expect("read response");
        assert!(n > 0, "connection closed before a response: {buffer:?}");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line}"));
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header line");
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().expect("content-length"));
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.expect("read body");
        assert!(n > 0, "connection closed inside the body");
        body.extend_from_slice(&chunk[..n]);
    }
    RawResponse {
        status,
        headers,
        body,
    }
}

fn request_head(addr: SocketAddr, path: &str, extra: &[&str]) -> String {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         A2A-Version: 1.0\r\nA2A-Extensions: {EXT}\r\n"
    );
    for line in extra {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head
}

fn assert_plain_http_error(response: &RawResponse, status: u16) {
    assert_eq!(response.status, status);
    let body: Value = serde_json::from_slice(&response.body).expect("JSON body");
    assert!(
        body.get("jsonrpc").is_none(),
        "no JSON-RPC envelope: {body}"
    );
    assert_eq!(body["error"]["code"], json!(status), "{body}");
}

// === docs/protocol.md §Order of checks, step 1: HTTP level ===

#[tokio::test]
async fn get_on_the_jsonrpc_endpoint_is_405_with_allow_post() {
    let gw = demo().await;
    for path in ["/a2a", "/a2a/", HONDA] {
        let resp = gw.client().get(gw.url(path)).send().await.expect("request");
        assert_eq!(resp.status().as_u16(), 405, "{path}");
        assert_eq!(resp.headers()["allow"], "POST", "{path}");
        let body: Value = resp.json().await.expect("JSON body");
        assert!(body.get("jsonrpc").is_none(), "no JSON-RPC body: {body}");
    }
}

#[tokio::test]
async fn put_and_delete_on_the_jsonrpc_endpoint_are_405() {
    let gw = demo().await;
    for method in [
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ] {
        let resp = gw
            .client()
            .request(method.clone(), gw.url("/a2a"))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 405, "{method}");
        assert_eq!(resp.headers()["allow"], "POST");
    }
}

#[tokio::test]
async fn trailing_slash_endpoint_is_served_without_redirect() {
    let gw = demo().await;
    let request = send_message(di());
    for path in ["/a2a/", "/dealers/demo-honda/a2a/"] {
        let reply = gw.rpc(path, &request).await;
        assert_success(&reply, &request);
    }
}

#[tokio::test]
async fn declared_content_length_over_max_body_bytes_is_413() {
    let gw = demo().await;
    for length in [MAX_BODY + 1, 10 * MAX_BODY, 1 << 40] {
        let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
        let head = request_head(gw.addr, "/a2a", &[&format!("Content-Length: {length}")]);
        // Only the head: the gateway refuses on the declared length without reading a byte.
        stream.write_all(head.as_bytes()).await.expect("write");
        let response = read_response(&mut stream).await;
        assert_plain_http_error(&response, 413);
    }
}

#[tokio::test]
async fn chunked_body_over_max_body_bytes_is_413() {
    let gw = demo().await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = request_head(gw.addr, "/a2a", &["Transfer-Encoding: chunked"]);
    stream.write_all(head.as_bytes()).await.expect("write head");
    // One chunk one byte over the limit; the gateway consumes all of it before refusing, so the
    // connection closes cleanly (no unread bytes, no reset).
    let size = MAX_BODY + 1;
    let mut chunk = format!("{size:x}\r\n").into_bytes();
    chunk.extend(std::iter::repeat_n(b' ', size));
    stream.write_all(&chunk).await.expect("write chunk");
    let response = read_response(&mut stream).await;
    assert_plain_http_error(&response, 413);
}

#[tokio::test]
async fn chunked_body_within_max_body_bytes_is_served() {
    let gw = demo().await;
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let head = request_head(gw.addr, "/a2a", &["Transfer-Encoding: chunked"]);
    let body = send_message(di()).to_string();
    let (a, b) = body.split_at(body.len() / 2);
    let mut bytes = head.into_bytes();
    for piece in [a, b] {
        bytes.extend(format!("{:x}\r\n{piece}\r\n", piece.len()).into_bytes());
    }
    bytes.extend(b"0\r\n\r\n");
    stream.write_all(&bytes).await.expect("write");
    let response = read_response(&mut stream).await;
    assert_eq!(response.status, 200);
    let reply: Value = serde_json::from_slice(&response.body).expect("JSON");
    assert_eq!(reply["result"]["message"]["role"], "ROLE_AGENT", "{reply}");
}

#[tokio::test]
async fn body_of_exactly_max_body_bytes_is_accepted() {
    let gw = demo().await;
    let mut body = send_message(di()).to_string().into_bytes();
    body.resize(MAX_BODY, b' '); // trailing whitespace is still one JSON value
    let reply = gw.post_raw("/a2a", &standard_headers(), body).await;
    assert_success(&reply, &send_message(di()));
}

#[tokio::test]
async fn unknown_dealer_is_plain_404_without_jsonrpc() {
    let gw = demo().await;
    for path in ["/nope", "/a2a", "/.well-known/agent-card.json"] {
        let reply = gw
            .post_raw(
                path,
                &[
                    ("host", "other.example"),
                    ("content-type", "application/json"),
                ],
                send_message(di()).to_string().into_bytes(),
            )
            .await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.text);
        assert!(reply.body.is_object(), "plain JSON: {}", reply.text);
        assert!(reply.body.get("jsonrpc").is_none(), "{}", reply.text);
        assert!(reply.body.get("result").is_none(), "{}", reply.text);
        let content_type = reply.headers["content-type"].to_str().expect("ascii");
        assert!(content_type.starts_with("application/json"));
    }
    let resp = gw
        .client()
        .get(gw.url("/.well-known/agent-card.json"))
        .header("host", "other.example")
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 404);
}

#[tokio::test]
async fn unknown_path_of_a_known_dealer_is_plain_404() {
    let gw = demo().await;
    for path in [
        "/nope",
        "/a2a/x",
        "/dealers/demo-honda",
        "/dealers/demo-honda/nope",
        "/a2a//",
    ] {
        let reply = gw
            .post_raw(
                path,
                &standard_headers(),
                send_message(di()).to_string().into_bytes(),
            )
            .await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.text);
        assert!(reply.body.get("jsonrpc").is_none(), "{}", reply.text);
    }
}

#[tokio::test]
async fn host_matching_ignores_port_and_case() {
    let gw = demo().await;
    let request = send_message(di());
    for host in ["LOCALHOST", "localhost:1", "127.0.0.1"] {
        let mut headers = standard_headers();
        headers.push(("host", host));
        let reply = gw
            .post_raw("/a2a", &headers, request.to_string().into_bytes())
            .await;
        assert_success(&reply, &request);
        assert_eq!(reply.payload()["data"]["name"], "Demo Toyota", "{host}");
    }
    // The path-prefix dealer has no host list: any host reaches it.
    let mut headers = standard_headers();
    headers.push(("host", "other.example"));
    let reply = gw
        .post_raw(HONDA, &headers, request.to_string().into_bytes())
        .await;
    assert_success(&reply, &request);
    assert_eq!(reply.payload()["data"]["name"], "Demo Honda");
}

// === step 2: Content-Type ===

#[tokio::test]
async fn content_type_absent_is_content_type_not_supported_with_null_id() {
    let gw = demo().await;
    let reply = post(
        &gw,
        &headers_with("content-type", None),
        &send_message(di()),
    )
    .await;
    assert_a2a_error(&reply, -32005, "CONTENT_TYPE_NOT_SUPPORTED", &Value::Null);
}

#[tokio::test]
async fn content_type_not_json_is_content_type_not_supported_with_null_id() {
    let gw = demo().await;
    for ct in [
        "text/plain",
        "application/a2a+json",
        "application/jsonx",
        "multipart/form-data",
    ] {
        let reply = post(
            &gw,
            &headers_with("content-type", Some(ct)),
            &send_message(di()),
        )
        .await;
        assert_a2a_error(&reply, -32005, "CONTENT_TYPE_NOT_SUPPORTED", &Value::Null);
    }
}

#[tokio::test]
async fn content_type_is_checked_before_the_body_is_parsed() {
    let gw = demo().await;
    let reply = gw
        .post_raw(
            "/a2a",
            &headers_with("content-type", Some("text/plain")),
            b"{not json".to_vec(),
        )
        .await;
    assert_a2a_error(&reply, -32005, "CONTENT_TYPE_NOT_SUPPORTED", &Value::Null);
}

#[tokio::test]
async fn content_type_parameters_are_accepted() {
    let gw = demo().await;
    let request = send_message(di());
    for ct in [
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "Application/JSON",
    ] {
        let reply = post(&gw, &headers_with("content-type", Some(ct)), &request).await;
        assert_success(&reply, &request);
    }
}

// === step 3: JSON, then one JSON-RPC request object ===

#[tokio::test]
async fn invalid_json_is_parse_error_with_null_id() {
    let gw = demo().await;
    for body in [
        &b"{"[..],
        b"",
        b"{\"jsonrpc\": \"2.0\", \"id\": 1,}",
        b"\xff\xfe",
        b"nul",
    ] {
        let reply = gw
            .post_raw("/a2a", &standard_headers(), body.to_vec())
            .await;
        let data = assert_a2a_error(&reply, -32700, "JSON_PARSE_ERROR", &Value::Null);
        assert_eq!(data.len(), 1, "{}", reply.text);
    }
}

#[tokio::test]
async fn batch_array_is_invalid_request_with_null_id() {
    let gw = demo().await;
    for body in [json!([send_message(di())]), json!([])] {
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &Value::Null);
    }
}

#[tokio::test]
async fn non_object_json_is_invalid_request_with_null_id() {
    let gw = demo().await;
    for body in [json!("SendMessage"), json!(42), json!(null), json!(true)] {
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &Value::Null);
    }
}

#[tokio::test]
async fn missing_jsonrpc_is_invalid_request_echoing_the_id() {
    let gw = demo().await;
    let mut body = send_message(di());
    body.as_object_mut().expect("object").remove("jsonrpc");
    let reply = gw.rpc("/a2a", &body).await;
    assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &json!("req-1"));
}

#[tokio::test]
async fn wrong_jsonrpc_version_is_invalid_request_echoing_the_id() {
    let gw = demo().await;
    for version in [json!("1.0"), json!(2.0), json!(null)] {
        let mut body = send_message(di());
        body["jsonrpc"] = version;
        body["id"] = json!(7);
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &json!(7));
    }
}

#[tokio::test]
async fn null_id_is_invalid_request_with_null_id() {
    let gw = demo().await;
    let mut body = send_message(di());
    body["id"] = Value::Null;
    let reply = gw.rpc("/a2a", &body).await;
    assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &Value::Null);
}

#[tokio::test]
async fn missing_id_notification_is_refused_not_executed() {
    let gw = demo().await;
    for method in ["SendMessage", "ListTasks", "GetTask"] {
        let mut body = send_message(di());
        body["method"] = json!(method);
        body.as_object_mut().expect("object").remove("id");
        let reply = gw.rpc("/a2a", &body).await;
        // A reply is sent (an error), never a result: the notification did not run.
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &Value::Null);
    }
}

#[tokio::test]
async fn id_of_bad_type_is_invalid_request_with_null_id() {
    let gw = demo().await;
    for id in [json!({"a": 1}), json!([1]), json!(true), json!(false)] {
        let mut body = send_message(di());
        body["id"] = id;
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &Value::Null);
    }
}

#[tokio::test]
async fn string_and_number_ids_are_echoed_exactly() {
    let gw = demo().await;
    for id in [
        json!("req-1"),
        json!(""),
        json!(0),
        json!(-7),
        json!(12345678901_i64),
        json!(1.5),
    ] {
        let mut request = send_message(di());
        request["id"] = id.clone();
        let reply = gw.rpc("/a2a", &request).await;
        assert_success(&reply, &request);
        assert_eq!(reply.body["id"], id);
    }
}

#[tokio::test]
async fn non_string_method_is_invalid_request_echoing_the_id() {
    let gw = demo().await;
    for method in [
        json!(1),
        json!(null),
        json!(["SendMessage"]),
        json!({"name": "SendMessage"}),
    ] {
        let mut body = send_message(di());
        body["method"] = method;
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &json!("req-1"));
    }
    let mut body = send_message(di());
    body.as_object_mut().expect("object").remove("method");
    let reply = gw.rpc("/a2a", &body).await;
    assert_a2a_error(&reply, -32600, "INVALID_REQUEST", &json!("req-1"));
}

// === step 4: A2A-Version, for every method ===

const ALL_METHODS: [&str; 13] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/send",
    "NoSuchMethod",
];

async fn assert_version_refused(gw: &Gateway, version: Option<&str>, requested: &str) {
    for method in ALL_METHODS {
        let mut body = send_message(di());
        body["method"] = json!(method);
        let reply = post(gw, &headers_with("a2a-version", version), &body).await;
        let data = assert_a2a_error(&reply, -32009, "VERSION_NOT_SUPPORTED", &json!("req-1"));
        let metadata = &data[0]["metadata"];
        assert_eq!(
            metadata["requestedVersion"], requested,
            "{method}: {}",
            reply.text
        );
        assert_eq!(metadata["supportedVersions"], "1.0", "{}", reply.text);
        let message = reply.body["error"]["message"].as_str().expect("message");
        assert!(message.contains("A2A-Version: 1.0"), "{message}");
    }
}

#[tokio::test]
async fn version_header_absent_is_version_not_supported() {
    let gw = demo().await;
    assert_version_refused(&gw, None, "<absent>").await;
}

#[tokio::test]
async fn version_header_empty_is_version_not_supported() {
    let gw = demo().await;
    assert_version_refused(&gw, Some(""), "").await;
}

#[tokio::test]
async fn version_2_0_is_version_not_supported() {
    let gw = demo().await;
    assert_version_refused(&gw, Some("2.0"), "2.0").await;
}

#[tokio::test]
async fn version_0_3_is_version_not_supported() {
    let gw = demo().await;
    assert_version_refused(&gw, Some("0.3"), "0.3").await;
}

#[tokio::test]
async fn version_major_only_is_version_not_supported() {
    let gw = demo().await;
    assert_version_refused(&gw, Some("1"), "1").await;
}

#[tokio::test]
async fn malformed_versions_are_version_not_supported() {
    let gw = demo().await;
    for version in ["1.1", "1.0.", "1.0.x", "1.00", "v1.0", "1.0.1.2", "10.0"] {
        let reply = post(
            &gw,
            &headers_with("a2a-version", Some(version)),
            &send_message(di()),
        )
        .await;
        assert_a2a_error(&reply, -32009, "VERSION_NOT_SUPPORTED", &json!("req-1"));
    }
}

#[tokio::test]
async fn version_with_patch_number_is_accepted_as_1_0() {
    let gw = demo().await;
    let request = send_message(di());
    for version in ["1.0", "1.0.3", "1.0.0", " 1.0 "] {
        let reply = post(&gw, &headers_with("a2a-version", Some(version)), &request).await;
        assert_success(&reply, &request);
    }
}

#[tokio::test]
async fn version_query_parameter_is_no_substitute_for_the_header() {
    let gw = demo().await;
    let reply = gw
        .post_raw(
            "/a2a?A2A-Version=1.0",
            &headers_with("a2a-version", None),
            send_message(di()).to_string().into_bytes(),
        )
        .await;
    assert_a2a_error(&reply, -32009, "VERSION_NOT_SUPPORTED", &json!("req-1"));
}

#[tokio::test]
async fn version_is_checked_before_the_extension() {
    let gw = demo().await;
    let headers = [("content-type", "application/json")];
    let reply = post(&gw, &headers, &send_message(di())).await;
    assert_a2a_error(&reply, -32009, "VERSION_NOT_SUPPORTED", &json!("req-1"));
}

// === step 5: method dispatch ===

#[tokio::test]
async fn streaming_subscribe_and_extended_card_are_unsupported_operation() {
    let gw = demo().await;
    for method in [
        "SendStreamingMessage",
        "SubscribeToTask",
        "GetExtendedAgentCard",
    ] {
        let params = if method == "SendStreamingMessage" {
            send_message(di())["params"].clone()
        } else {
            json!({ "id": "task-1" })
        };
        let reply = gw.rpc("/a2a", &call(method, params)).await;
        assert_a2a_error(&reply, -32004, "UNSUPPORTED_OPERATION", &json!("call-1"));
    }
}

#[tokio::test]
async fn push_notification_config_methods_are_push_notification_not_supported() {
    let gw = demo().await;
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let reply = gw
            .rpc("/a2a", &call(method, json!({ "taskId": "task-1" })))
            .await;
        assert_a2a_error(
            &reply,
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            &json!("call-1"),
        );
    }
}

#[tokio::test]
async fn get_task_and_cancel_task_are_task_not_found() {
    let gw = demo().await;
    for method in ["GetTask", "CancelTask"] {
        let reply = gw
            .rpc("/a2a", &call(method, json!({ "id": "task-1" })))
            .await;
        assert_a2a_error(&reply, -32001, "TASK_NOT_FOUND", &json!("call-1"));
    }
}

#[tokio::test]
async fn list_tasks_is_an_empty_list() {
    let gw = demo().await;
    for (params, size) in [
        (json!({ "pageSize": 10 }), 10),
        (json!({ "pageSize": 10.0 }), 10),
    ] {
        let request = call("ListTasks", params);
        let reply = gw.rpc("/a2a", &request).await;
        assert_jsonrpc(&reply, &json!("call-1"));
        assert_eq!(
            reply.body["result"],
            json!({ "tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0 }),
            "{}",
            reply.text
        );
    }
    // Without a pageSize the reply still has the full shape, with an integer page size.
    let reply = gw.rpc("/a2a", &call("ListTasks", json!({}))).await;
    assert_jsonrpc(&reply, &json!("call-1"));
    let result = reply.body["result"].as_object().expect("result");
    let keys: BTreeSet<&str> = result.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["nextPageToken", "pageSize", "tasks", "totalSize"].into()
    );
    assert_eq!(result["tasks"], json!([]));
    assert_eq!(result["nextPageToken"], "");
    assert_eq!(result["totalSize"], 0);
    assert!(result["pageSize"].is_u64(), "{}", reply.text);
}

#[tokio::test]
async fn unknown_method_is_method_not_found() {
    let gw = demo().await;
    for method in ["NoSuchMethod", "message/send", "sendMessage", ""] {
        let reply = gw.rpc("/a2a", &call(method, json!({}))).await;
        assert_a2a_error(&reply, -32601, "METHOD_NOT_FOUND", &json!("call-1"));
    }
}

#[tokio::test]
async fn out_of_scope_methods_answer_before_the_extension_check() {
    let gw = demo().await;
    let headers = headers_with("a2a-extensions", None);
    let cases = [
        ("GetTask", -32001),
        ("SubscribeToTask", -32004),
        ("GetTaskPushNotificationConfig", -32003),
        ("NoSuchMethod", -32601),
    ];
    for (method, code) in cases {
        let reply = post(&gw, &headers, &call(method, json!({}))).await;
        assert_eq!(reply.error_code(), code, "{method}: {}", reply.text);
    }
    let reply = post(&gw, &headers, &call("ListTasks", json!({}))).await;
    assert!(reply.body["result"].is_object(), "{}", reply.text);
}

// === step 6: A2A-Extensions ===

fn assert_extension_required(reply: &Reply) {
    let data = assert_a2a_error(reply, -32008, "EXTENSION_SUPPORT_REQUIRED", &json!("req-1"));
    let message = reply.body["error"]["message"].as_str().expect("message");
    assert!(message.contains(EXT), "message names the URI: {message}");
    assert!(
        message.contains("A2A-Extensions"),
        "message names the header: {message}"
    );
    let metadata = &data[0]["metadata"];
    assert_eq!(metadata["extensionUri"], EXT, "{}", reply.text);
    assert_eq!(
        metadata["requiredHeader"], "A2A-Extensions",
        "{}",
        reply.text
    );
    assert!(extensions_header(reply).is_none(), "nothing was activated");
}

#[tokio::test]
async fn extensions_header_absent_is_extension_support_required() {
    let gw = demo().await;
    let reply = post(
        &gw,
        &headers_with("a2a-extensions", None),
        &send_message(di()),
    )
    .await;
    assert_extension_required(&reply);
}

#[tokio::test]
async fn extensions_header_empty_is_extension_support_required() {
    let gw = demo().await;
    for value in ["", " ", ",", " , "] {
        let reply = post(
            &gw,
            &headers_with("a2a-extensions", Some(value)),
            &send_message(di()),
        )
        .await;
        assert_extension_required(&reply);
    }
}

#[tokio::test]
async fn other_aap_version_uri_is_extension_support_required() {
    let gw = demo().await;
    let near_misses = [
        V13_URI.to_owned(),
        format!("{EXT}/"),
        EXT.to_uppercase(),
        EXT.trim_end_matches("latest").to_owned(),
        format!("<{EXT}>"),
        format!("\"{EXT}\""),
        format!("{EXT};q=1"),
    ];
    for value in &near_misses {
        let reply = post(
            &gw,
            &headers_with("a2a-extensions", Some(value)),
            &send_message(di()),
        )
        .await;
        assert_extension_required(&reply);
    }
}

#[tokio::test]
async fn extension_uri_among_several_members_is_accepted() {
    let gw = demo().await;
    let request = send_message(di());
    let lists = [
        format!("https://example.com/ext/other,{EXT}"),
        format!("{V13_URI} , {EXT} ,urn:example:x"),
        format!("  {EXT}  "),
    ];
    for value in &lists {
        let reply = post(&gw, &headers_with("a2a-extensions", Some(value)), &request).await;
        assert_success(&reply, &request);
    }
}

#[tokio::test]
async fn extension_uri_split_over_two_header_lines_is_accepted() {
    let gw = demo().await;
    let request = send_message(di());
    let mut headers = headers_with("a2a-extensions", Some("https://example.com/ext/other"));
    headers.push(("a2a-extensions", EXT));
    let reply = post(&gw, &headers, &request).await;
    assert_success(&reply, &request);
    // The other order, via raw HTTP so the two field lines are really separate.
    let body = request.to_string();
    let head = format!(
        "POST /a2a HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n\
         A2A-Extensions: {EXT}\r\nA2A-Extensions: urn:example:other\r\nContent-Length: {}\r\n\r\n",
        gw.addr,
        body.len()
    );
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    stream
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .expect("write");
    let response = read_response(&mut stream).await;
    assert_eq!(response.status, 200);
    let reply: Value = serde_json::from_slice(&response.body).expect("JSON");
    assert!(reply["result"]["message"].is_object(), "{reply}");
    assert_eq!(response.header("a2a-extensions"), Some(EXT));
}

#[tokio::test]
async fn replies_echo_the_activated_extension() {
    let gw = demo().await;
    let mut headers = headers_with("a2a-extensions", Some("urn:example:other"));
    headers.push(("a2a-extensions", EXT));
    // On success...
    let reply = post(&gw, &headers, &send_message(di())).await;
    assert_eq!(
        extensions_header(&reply).as_deref(),
        Some(EXT),
        "{:?}",
        reply.headers
    );
    // ...and on errors raised after activation (AAP and A2A ones).
    let reply = post(
        &gw,
        &headers,
        &send_message(json!({"type": "inventory.compare.request"})),
    )
    .await;
    assert_eq!(reply.aap_code(), "UNSUPPORTED_SKILL");
    assert_eq!(extensions_header(&reply).as_deref(), Some(EXT));
    let reply = post(&gw, &headers, &with_message(json!({"messageId": null}))).await;
    assert_eq!(reply.error_code(), -32602);
    assert_eq!(extensions_header(&reply).as_deref(), Some(EXT));
}

// === steps 6–7: params and the Message envelope ===

#[tokio::test]
async fn params_not_an_object_is_invalid_params() {
    let gw = demo().await;
    for params in [json!([]), json!("message"), json!(1), json!(null)] {
        let reply = gw.rpc("/a2a", &with_params(params)).await;
        let fields = assert_invalid_params(&reply);
        assert_eq!(fields, ["params"], "{}", reply.text);
    }
    let mut body = send_message(di());
    body.as_object_mut().expect("object").remove("params");
    let reply = gw.rpc("/a2a", &body).await;
    assert_eq!(assert_invalid_params(&reply), ["params"]);
}

#[tokio::test]
async fn message_absent_or_not_an_object_is_invalid_params() {
    let gw = demo().await;
    for params in [json!({}), json!({"message": []}), json!({"message": "hi"})] {
        let reply = gw.rpc("/a2a", &with_params(params)).await;
        assert_eq!(assert_invalid_params(&reply), ["message"], "{}", reply.text);
    }
}

#[tokio::test]
async fn message_id_missing_is_invalid_params() {
    let gw = demo().await;
    for id in [Value::Null, json!(""), json!(5)] {
        let members = if id.is_null() {
            json!({ "messageId": null })
        } else {
            json!({ "messageId": id })
        };
        let reply = gw.rpc("/a2a", &with_message(members)).await;
        assert_eq!(assert_invalid_params(&reply), ["message.messageId"]);
    }
}

#[tokio::test]
async fn role_agent_is_invalid_params() {
    let gw = demo().await;
    for role in ["ROLE_AGENT", "user", "ROLE_UNSPECIFIED"] {
        let reply = gw.rpc("/a2a", &with_message(json!({ "role": role }))).await;
        assert_eq!(assert_invalid_params(&reply), ["message.role"], "{role}");
    }
    let reply = gw.rpc("/a2a", &with_message(json!({ "role": null }))).await;
    assert_eq!(assert_invalid_params(&reply), ["message.role"]);
}

#[tokio::test]
async fn parts_empty_is_invalid_params() {
    let gw = demo().await;
    for parts in [json!([]), json!({}), json!("data")] {
        let reply = gw.rpc("/a2a", &with_parts(parts)).await;
        assert_eq!(assert_invalid_params(&reply), ["message.parts"]);
    }
    let reply = gw
        .rpc("/a2a", &with_message(json!({ "parts": null })))
        .await;
    assert_eq!(assert_invalid_params(&reply), ["message.parts"]);
}

#[tokio::test]
async fn two_data_parts_are_invalid_params() {
    let gw = demo().await;
    let reply = gw
        .rpc(
            "/a2a",
            &with_parts(json!([{ "data": di() }, { "data": di() }])),
        )
        .await;
    assert_eq!(assert_invalid_params(&reply), ["message.parts"]);
}

#[tokio::test]
async fn context_id_empty_is_invalid_params() {
    let gw = demo().await;
    for context in [json!(""), json!(7)] {
        let reply = gw
            .rpc("/a2a", &with_message(json!({ "contextId": context })))
            .await;
        assert_eq!(assert_invalid_params(&reply), ["message.contextId"]);
    }
}

#[tokio::test]
async fn context_id_of_257_chars_is_invalid_params() {
    let gw = demo().await;
    let reply = gw
        .rpc(
            "/a2a",
            &with_message(json!({ "contextId": "c".repeat(257) })),
        )
        .await;
    assert_eq!(assert_invalid_params(&reply), ["message.contextId"]);
    // 256 characters (not bytes) is the limit.
    let request = with_message(json!({ "contextId": "é".repeat(256) }));
    let reply = gw.rpc("/a2a", &request).await;
    let message = assert_success(&reply, &request);
    assert_eq!(message["contextId"], "é".repeat(256));
}

#[tokio::test]
async fn several_envelope_violations_are_listed_at_once() {
    let gw = demo().await;
    let body = with_message(json!({
        "messageId": null,
        "role": "ROLE_AGENT",
        "contextId": "",
        "parts": [],
    }));
    let reply = gw.rpc("/a2a", &body).await;
    let fields: BTreeSet<String> = assert_invalid_params(&reply).into_iter().collect();
    let want: BTreeSet<String> = [
        "message.messageId",
        "message.role",
        "message.contextId",
        "message.parts",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(fields, want, "{}", reply.text);
    let body = with_message(json!({
        "role": "ROLE_AGENT",
        "contextId": "c".repeat(300),
        "parts": [{ "data": di() }, { "text": "x" }, { "data": di() }],
    }));
    let reply = gw.rpc("/a2a", &body).await;
    let fields: BTreeSet<String> = assert_invalid_params(&reply).into_iter().collect();
    let want: BTreeSet<String> = ["message.role", "message.contextId", "message.parts"]
        .map(str::to_owned)
        .into();
    assert_eq!(fields, want, "{}", reply.text);
    // Envelope problems win over a taskId.
    let reply = gw
        .rpc(
            "/a2a",
            &with_message(json!({ "role": "ROLE_AGENT", "taskId": "t-1" })),
        )
        .await;
    assert_eq!(assert_invalid_params(&reply), ["message.role"]);
}

#[tokio::test]
async fn task_id_is_task_not_found() {
    let gw = demo().await;
    let reply = gw
        .rpc("/a2a", &with_message(json!({ "taskId": "task-1" })))
        .await;
    assert_a2a_error(&reply, -32001, "TASK_NOT_FOUND", &json!("req-1"));
}

#[tokio::test]
async fn only_a_text_part_is_content_type_not_supported() {
    let gw = demo().await;
    for parts in [
        json!([{ "text": "show me dealer information" }]),
        json!([{ "text": "a" }, { "url": "https://example.com/x", "mediaType": "text/html" }]),
    ] {
        let reply = gw.rpc("/a2a", &with_parts(parts)).await;
        assert_a2a_error(
            &reply,
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            &json!("req-1"),
        );
    }
}

#[tokio::test]
async fn text_parts_beside_the_data_part_are_ignored() {
    let gw = demo().await;
    let request = with_parts(json!([
        { "text": "please ignore me" },
        { "data": di(), "mediaType": DI_REQUEST_MT },
        { "text": "{\"type\": \"lead.submit.request\"}" },
    ]));
    let reply = gw.rpc("/a2a", &request).await;
    assert_success(&reply, &request);
    assert_eq!(reply.payload()["type"], "dealer.information.response");
}

#[tokio::test]
async fn part_media_type_text_plain_is_content_type_not_supported() {
    let gw = demo().await;
    for mt in [
        "text/plain",
        "application/xml",
        "application/vnd.autoagent.unknown-request+json",
    ] {
        let reply = gw
            .rpc(
                "/a2a",
                &with_parts(json!([{ "data": di(), "mediaType": mt }])),
            )
            .await;
        assert_a2a_error(
            &reply,
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            &json!("req-1"),
        );
    }
}

#[tokio::test]
async fn part_media_type_of_another_skill_is_schema_validation_failed_at_type() {
    let gw = demo().await;
    for other in [Skill::LeadSubmit, Skill::InventorySearch] {
        let parts = json!([{ "data": di(), "mediaType": other.request_media_type() }]);
        let reply = gw.rpc("/a2a", &with_parts(parts)).await;
        assert_aap_error(&reply, -32602, "SCHEMA_VALIDATION_FAILED");
        assert_eq!(
            failures(&reply),
            [pair("/type", "const")].into(),
            "{}",
            reply.text
        );
    }
}

#[tokio::test]
async fn part_media_type_application_json_or_absent_is_accepted() {
    let gw = demo().await;
    for part in [
        json!({ "data": di(), "mediaType": "application/json" }),
        json!({ "data": di(), "mediaType": "application/json; charset=utf-8" }),
        json!({ "data": di() }),
        json!({ "data": di(), "mediaType": null }),
        json!({ "data": di(), "mediaType": DI_REQUEST_MT }),
    ] {
        let request = with_parts(json!([part]));
        let reply = gw.rpc("/a2a", &request).await;
        assert_success(&reply, &request);
    }
}

#[tokio::test]
async fn part_media_type_parameters_and_case_are_ignored() {
    let gw = demo().await;
    for mt in [
        format!("{DI_REQUEST_MT}; charset=utf-8"),
        DI_REQUEST_MT.to_uppercase(),
        format!(" {DI_REQUEST_MT} "),
    ] {
        let request = with_parts(json!([{ "data": di(), "mediaType": mt }]));
        let reply = gw.rpc("/a2a", &request).await;
        assert_success(&reply, &request);
    }
    // ...also when naming another skill: still that skill, so still a /type mismatch.
    let mt = format!("{}; charset=utf-8", Skill::LeadSubmit.request_media_type());
    let reply = gw
        .rpc(
            "/a2a",
            &with_parts(json!([{ "data": di(), "mediaType": mt }])),
        )
        .await;
    assert_aap_error(&reply, -32602, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(failures(&reply), [pair("/type", "const")].into());
}

// === step 8: acceptedOutputModes ===

#[tokio::test]
async fn accepted_output_modes_excluding_ours_is_content_type_not_supported() {
    let gw = demo().await;
    for modes in [
        json!(["text/plain"]),
        json!(["application/vnd.autoagent.inventory-search-response+json"]),
        json!(["application/xml", "text/*"]),
    ] {
        let body = with_configuration(json!({ "acceptedOutputModes": modes }));
        let reply = gw.rpc("/a2a", &body).await;
        assert_a2a_error(
            &reply,
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            &json!("req-1"),
        );
    }
}

#[tokio::test]
async fn accepted_output_modes_with_wildcard_json_ours_or_empty_are_accepted() {
    let gw = demo().await;
    for configuration in [
        json!({ "acceptedOutputModes": ["*/*"] }),
        json!({ "acceptedOutputModes": ["application/json"] }),
        json!({ "acceptedOutputModes": [DI_RESPONSE_MT] }),
        json!({ "acceptedOutputModes": ["text/plain", DI_RESPONSE_MT] }),
        json!({ "acceptedOutputModes": [] }),
        json!({ "acceptedOutputModes": null }),
        json!({}),
    ] {
        let request = with_configuration(configuration.clone());
        let reply = gw.rpc("/a2a", &request).await;
        assert_success(&reply, &request);
        assert_eq!(
            reply.body["result"]["message"]["parts"][0]["mediaType"],
            DI_RESPONSE_MT
        );
    }
}

#[tokio::test]
async fn accepted_output_modes_parameters_and_case_are_ignored() {
    let gw = demo().await;
    for mode in [
        format!("{DI_RESPONSE_MT}; q=0.9"),
        DI_RESPONSE_MT.to_uppercase(),
        "APPLICATION/JSON".to_owned(),
    ] {
        let request = with_configuration(json!({ "acceptedOutputModes": [mode] }));
        let reply = gw.rpc("/a2a", &request).await;
        assert_success(&reply, &request);
    }
}

// === step 9: the skill ===

#[tokio::test]
async fn unknown_data_type_is_unsupported_skill() {
    let gw = demo().await;
    for ty in ["vehicle.trade_in.request", "inventory.search", "x.y"] {
        let reply = gw.send("/a2a", json!({ "type": ty })).await;
        let payload = assert_aap_error(&reply, -32004, "UNSUPPORTED_SKILL");
        assert_eq!(payload["retryable"], false);
    }
}

/// A buyer MUST send `acceptedOutputModes` naming the response type it expects; for a skill this
/// gateway does not know, that list cannot be judged, and the informative answer is the skill's.
#[tokio::test]
async fn unknown_data_type_with_its_own_output_mode_is_unsupported_skill() {
    let gw = demo().await;
    let mut body = send_message(json!({ "type": "inventory.compare.request" }));
    body["params"]["configuration"] = json!({
        "acceptedOutputModes": ["application/vnd.autoagent.inventory-compare-response+json"]
    });
    let reply = gw.rpc("/a2a", &body).await;
    assert_aap_error(&reply, -32004, "UNSUPPORTED_SKILL");
    // A known but unserved skill with its own output mode, likewise.
    let gw = profile_only().await;
    let mut body = send_message(json!({ "type": "lead.submit.request" }));
    body["params"]["configuration"] =
        json!({ "acceptedOutputModes": [Skill::LeadSubmit.response_media_type()] });
    let reply = gw.rpc("/a2a", &body).await;
    assert_aap_error(&reply, -32004, "UNSUPPORTED_SKILL");
}

/// A dealer with a profile and no mappings: it serves `dealer.information` only.
async fn profile_only() -> Gateway {
    common::start_yaml(
        r#"
dealers:
  - id: info_only
    card: { name: Info Only Motors, description: Answers dealer.information only. }
    profile:
      name: Info Only Motors
      rooftops:
        - name: Info Only Motors
          phones: [{ name: Sales, value: "+14085550100" }]
          address: { address_line_1: 1 Main St, city: San Jose, state: CA, zip: "95128" }
          timezone: America/Los_Angeles
          capabilities: [sales]
"#,
    )
    .await
}

#[tokio::test]
async fn unconfigured_known_skill_is_unsupported_skill() {
    let gw = profile_only().await;
    let reply = gw
        .send("/a2a", json!({ "type": "dealer.information.request" }))
        .await;
    assert_eq!(
        reply.payload()["type"],
        "dealer.information.response",
        "{}",
        reply.text
    );
    for skill in [
        Skill::InventorySearch,
        Skill::InventoryVehicle,
        Skill::InventoryFacets,
        Skill::LeadSubmit,
    ] {
        let reply = gw
            .send("/a2a", json!({ "type": skill.request_type() }))
            .await;
        let payload = assert_aap_error(&reply, -32004, "UNSUPPORTED_SKILL");
        assert_eq!(payload["retryable"], false, "{}", reply.text);
        assert_eq!(
            payload["details"]["supported_skills"],
            json!(["dealer.information"]),
            "{}",
            reply.text
        );
    }
}

#[tokio::test]
async fn data_without_type_is_missing_required_field_at_type() {
    let gw = demo().await;
    let reply = gw.send("/a2a", json!({})).await;
    assert_aap_error(&reply, -32602, "MISSING_REQUIRED_FIELD");
    assert_eq!(failures(&reply), [pair("/type", "required")].into());
    // Named by its mediaType, the skill's schema reports every failure.
    let parts = json!([{ "data": { "extra": 1 }, "mediaType": DI_REQUEST_MT }]);
    let reply = gw.rpc("/a2a", &with_parts(parts)).await;
    assert_aap_error(&reply, -32602, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(
        failures(&reply),
        [
            pair("/type", "required"),
            pair("/extra", "additionalProperties")
        ]
        .into()
    );
}

#[tokio::test]
async fn data_type_not_a_string_is_schema_validation_failed_at_type() {
    let gw = demo().await;
    let reply = gw.send("/a2a", json!({ "type": 5 })).await;
    assert_aap_error(&reply, -32602, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(failures(&reply), [pair("/type", "type")].into());
}

#[tokio::test]
async fn dealer_information_with_an_extra_key_is_schema_validation_failed_at_that_key() {
    let gw = demo().await;
    let reply = gw
        .send(
            "/a2a",
            json!({ "type": "dealer.information.request", "rooftop": "x", "a/b": 1 }),
        )
        .await;
    let payload = assert_aap_error(&reply, -32602, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(
        failures(&reply),
        [
            pair("/rooftop", "additionalProperties"),
            pair("/a~1b", "additionalProperties")
        ]
        .into()
    );
    assert_eq!(payload["retryable"], false);
    for e in payload["details"]["errors"].as_array().expect("errors") {
        assert!(e["error"].as_str().is_some_and(|s| !s.is_empty()), "{e}");
    }
}

#[tokio::test]
async fn data_not_an_object_is_invalid_params() {
    let gw = demo().await;
    for data in [json!("dealer.information.request"), json!([]), json!(null)] {
        let reply = gw.rpc("/a2a", &with_parts(json!([{ "data": data }]))).await;
        assert_eq!(
            assert_invalid_params(&reply),
            ["message.parts[0].data"],
            "{}",
            reply.text
        );
    }
}

/// The Python A2A SDK sends whole numbers as `20.0`: the binding turns them into integers
/// before any stage reads the payload (a mapping reading `as_i64` would otherwise see nothing),
/// and `20.5` stays a float that the schema rejects.
#[tokio::test]
async fn whole_number_floats_are_integers_before_any_stage_reads_them() {
    use aap_gateway::binding::send_message::decode;
    use aap_gateway::protocol::SkillRef;
    let params = json!({
        "message": {
            "messageId": "m-1", "role": "ROLE_USER",
            "parts": [{ "data": {
                "type": "inventory.search.request",
                "filters": { "year_min": 2020.0, "price_max": 30000.0, "make": ["Honda"] },
                "pagination": { "skip": 0.0, "limit": 20.0 }
            } }]
        }
    });
    let call = decode(params).expect("a valid call");
    assert_eq!(call.skill, SkillRef::Known(Skill::InventorySearch));
    assert_eq!(call.data["pagination"]["limit"].as_i64(), Some(20));
    assert_eq!(call.data["pagination"]["skip"].as_u64(), Some(0));
    assert_eq!(call.data["filters"]["year_min"].as_i64(), Some(2020));
    assert_eq!(
        call.data["pagination"].to_string(),
        r#"{"skip":0,"limit":20}"#,
        "serialized without .0"
    );
    let gw = demo().await;
    assert!(
        gw.app
            .schemas
            .check_request(Skill::InventorySearch, &call.data)
            .is_empty()
    );

    let params = json!({
        "message": { "messageId": "m-1", "role": "ROLE_USER",
            "parts": [{ "data": { "type": "inventory.search.request", "pagination": { "limit": 20.5 } } }] }
    });
    let call = decode(params).expect("decodes");
    assert!(call.data["pagination"]["limit"].as_i64().is_none());
    let violations = gw
        .app
        .schemas
        .check_request(Skill::InventorySearch, &call.data);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!(violations[0].instance_location, "/pagination/limit");
    assert_eq!(violations[0].keyword, "type");
}

// === the success reply (docs/protocol.md §Success reply) ===

#[tokio::test]
async fn reply_has_fresh_message_id_agent_role_and_one_data_part() {
    let gw = demo().await;
    let request = send_message(di());
    let first = gw.rpc("/a2a", &request).await;
    let second = gw.rpc("/a2a", &request).await;
    let a = assert_success(&first, &request);
    let b = assert_success(&second, &request);
    assert_ne!(
        a["messageId"], b["messageId"],
        "a fresh messageId per reply"
    );
    let part = &a["parts"][0];
    assert_eq!(part["mediaType"], DI_RESPONSE_MT);
    assert_eq!(part["data"]["type"], "dealer.information.response");
    let keys: BTreeSet<&str> = a
        .as_object()
        .expect("message")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["contextId", "messageId", "parts", "role"].into());
    // The payload conforms to the response schema.
    let violations = gw.app.schemas.check_response(
        Skill::DealerInformation,
        &aap_gateway::protocol::Payload::Json(std::sync::Arc::new(part["data"].clone())),
    );
    assert!(violations.is_empty(), "{violations:?}");
}

#[tokio::test]
async fn context_id_is_preserved_when_sent() {
    let gw = demo().await;
    let request = with_message(json!({ "contextId": "ctx-buyer-42" }));
    let reply = gw.rpc("/a2a", &request).await;
    let message = assert_success(&reply, &request);
    assert_eq!(message["contextId"], "ctx-buyer-42");
}

#[tokio::test]
async fn context_id_is_generated_when_absent() {
    let gw = demo().await;
    let request = send_message(di());
    assert!(request["params"]["message"].get("contextId").is_none());
    let a = assert_success(&gw.rpc("/a2a", &request).await, &request);
    let b = assert_success(&gw.rpc("/a2a", &request).await, &request);
    assert!(a["contextId"].as_str().is_some_and(|c| !c.is_empty()));
    assert_ne!(
        a["contextId"], b["contextId"],
        "a new interaction each time"
    );
    // A null contextId counts as absent.
    let request = with_message(json!({ "contextId": Value::Null }));
    let reply = gw.rpc("/a2a", &request).await;
    assert_success(&reply, &request);
}

#[tokio::test]
async fn each_dealer_answers_with_its_own_profile() {
    let gw = demo().await;
    let toyota = gw.send("/a2a", di()).await;
    let honda = gw.send(HONDA, di()).await;
    assert_eq!(toyota.payload()["data"]["name"], "Demo Toyota");
    assert_eq!(honda.payload()["data"]["name"], "Demo Honda");
}

// === agent card (docs/protocol.md §Agent card) ===

async fn get_card(gw: &Gateway, path: &str) -> (reqwest::header::HeaderMap, Value) {
    let resp = gw.client().get(gw.url(path)).send().await.expect("request");
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let headers = resp.headers().clone();
    (headers, resp.json().await.expect("card JSON"))
}

const TOYOTA_CARD: &str = "/.well-known/agent-card.json";
const HONDA_CARD: &str = "/dealers/demo-honda/.well-known/agent-card.json";

fn assert_card_shape(card: &Value, url: &str, name: &str) {
    assert_eq!(card["name"], name);
    assert!(card["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert!(card["version"].as_str().is_some_and(|v| !v.is_empty()));
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .expect("supportedInterfaces");
    assert_eq!(
        interfaces[0],
        json!({ "url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }),
        "JSONRPC first, with the URL served"
    );
    if let Some(provider) = card.get("provider") {
        assert!(provider["organization"].is_string() && provider["url"].is_string());
    }
    let capabilities = &card["capabilities"];
    assert_eq!(capabilities["streaming"], false);
    assert_eq!(capabilities["pushNotifications"], false);
    assert_ne!(capabilities["extendedAgentCard"], true);
    let extensions = capabilities["extensions"].as_array().expect("extensions");
    let aap: Vec<&Value> = extensions
        .iter()
        .filter(|e| {
            let uri = e["uri"].as_str().unwrap_or_default();
            uri == EXT || uri.starts_with("https://autoagentprotocol.org/extensions/aap/")
        })
        .collect();
    assert_eq!(aap.len(), 1, "exactly one AAP extension entry");
    let ext = aap[0];
    assert_eq!(ext["uri"], EXT);
    assert_eq!(ext["required"], true);
    let params = &ext["params"];
    let id = params["id"].as_str().expect("params.id");
    assert!(
        uuid::Uuid::parse_str(id).is_ok(),
        "params.id is a UUID: {id}"
    );
    assert_eq!(params["version"], "0.0.0-dev");
    let base = "https://draft.autoagentprotocol.invalid/latest/schemas/";
    assert_eq!(params["schema_base_url"], base);
    // Exactly the skills the demo dealers serve, in card order.
    let served = [
        Skill::DealerInformation,
        Skill::InventoryFacets,
        Skill::InventorySearch,
        Skill::InventoryVehicle,
        Skill::LeadSubmit,
    ];
    let mut schema_urls = serde_json::Map::new();
    for s in served {
        schema_urls.insert(
            s.id().to_owned(),
            json!({
                "request_schema": format!("{base}{}", s.request_schema_file()),
                "response_schema": format!("{base}{}", s.response_schema_file()),
            }),
        );
    }
    assert_eq!(
        params["skills"],
        Value::Object(schema_urls),
        "only served skills"
    );
    let inputs: Vec<&str> = served.iter().map(|s| s.request_media_type()).collect();
    let outputs: Vec<&str> = served.iter().map(|s| s.response_media_type()).collect();
    assert_eq!(card["defaultInputModes"], json!(inputs));
    assert_eq!(card["defaultOutputModes"], json!(outputs));
    let skills = card["skills"].as_array().expect("skills");
    assert_eq!(skills.len(), served.len(), "only served skills: {skills:?}");
    for (skill, s) in skills.iter().zip(served) {
        assert_eq!(skill["id"], s.id());
        assert_eq!(skill["name"], s.name());
        assert!(skill["description"].is_string());
        assert!(skill["tags"].as_array().is_some_and(|t| !t.is_empty()));
        assert_eq!(skill["inputModes"], json!([s.request_media_type()]));
        assert_eq!(skill["outputModes"], json!([s.response_media_type()]));
        assert!(
            skill.get("examples").is_none(),
            "AAP cards carry no examples"
        );
    }
    // Never a bare application/json in the modes.
    for mode in card["defaultInputModes"]
        .as_array()
        .into_iter()
        .chain(card["defaultOutputModes"].as_array())
        .flatten()
    {
        assert!(
            mode.as_str()
                .is_some_and(|m| m.starts_with("application/vnd.autoagent."))
        );
    }
}

#[tokio::test]
async fn agent_card_has_the_exact_spec_shape() {
    let gw = demo().await;
    let (_, toyota) = get_card(&gw, TOYOTA_CARD).await;
    assert_card_shape(&toyota, &format!("http://{}/a2a", gw.addr), "Demo Toyota");
    let (_, honda) = get_card(&gw, HONDA_CARD).await;
    assert_card_shape(&honda, &format!("http://{}{HONDA}", gw.addr), "Demo Honda");
}

#[tokio::test]
async fn agent_card_interface_url_is_the_one_actually_served() {
    let gw = demo().await;
    for card_path in [TOYOTA_CARD, HONDA_CARD] {
        let (_, card) = get_card(&gw, card_path).await;
        let url = card["supportedInterfaces"][0]["url"].as_str().expect("url");
        let request = send_message(di());
        let reply = gw
            .client()
            .post(url)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("a2a-extensions", EXT)
            .body(request.to_string())
            .send()
            .await
            .expect("POST to the advertised URL");
        assert_eq!(reply.status().as_u16(), 200);
        let body: Value = reply.json().await.expect("JSON");
        assert_eq!(
            body["result"]["message"]["parts"][0]["data"]["data"]["name"], card["name"],
            "{url} reaches the dealer of the card"
        );
    }
}

#[tokio::test]
async fn agent_card_has_cache_headers() {
    let gw = demo().await;
    let (headers, _) = get_card(&gw, TOYOTA_CARD).await;
    assert_eq!(headers["cache-control"], "public, max-age=300");
    let etag = headers["etag"].to_str().expect("ascii");
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        "strong: {etag}"
    );
    assert!(!etag.starts_with("W/"));
    let last_modified = headers["last-modified"].to_str().expect("ascii");
    httpdate::parse_http_date(last_modified).expect("Last-Modified is an HTTP date");
    assert!(
        headers["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("application/json")
    );
    // Stable for one configuration.
    let (again, _) = get_card(&gw, TOYOTA_CARD).await;
    assert_eq!(again["etag"], headers["etag"]);
    assert_eq!(again["last-modified"], headers["last-modified"]);
}

#[tokio::test]
async fn agent_card_etag_is_a_hash_of_the_body() {
    let gw = demo().await;
    let resp = gw
        .client()
        .get(gw.url(TOYOTA_CARD))
        .send()
        .await
        .expect("request");
    let etag = resp.headers()["etag"].to_str().expect("ascii").to_owned();
    let body = resp.bytes().await.expect("body");
    use sha2::Digest;
    let digest = sha2::Sha256::digest(&body);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    // A strong tag: exactly the first 128 bits of the body's SHA-256, quoted (an empty or
    // shortened tag would let unrelated cards compare equal).
    assert_eq!(etag, format!("\"{}\"", &hex[..32]), "ETag of the body");
    // Another dealer's card is another body, so another tag.
    let other = gw
        .client()
        .get(gw.url(HONDA_CARD))
        .send()
        .await
        .expect("request");
    assert_eq!(other.status().as_u16(), 200);
    assert_ne!(other.headers()["etag"], etag.as_str());
}

#[tokio::test]
async fn agent_card_if_none_match_is_304() {
    let gw = demo().await;
    let (headers, _) = get_card(&gw, TOYOTA_CARD).await;
    let etag = headers["etag"].to_str().expect("ascii").to_owned();
    for value in [
        etag.clone(),
        format!("\"stale\", {etag}"),
        format!("W/{etag}"),
        "*".to_owned(),
    ] {
        let resp = gw
            .client()
            .get(gw.url(TOYOTA_CARD))
            .header("if-none-match", &value)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 304, "If-None-Match: {value}");
        assert_eq!(resp.headers()["etag"].to_str().expect("ascii"), etag);
        assert!(resp.bytes().await.expect("body").is_empty());
    }
}

#[tokio::test]
async fn agent_card_stale_if_none_match_is_200() {
    let gw = demo().await;
    let resp = gw
        .client()
        .get(gw.url(TOYOTA_CARD))
        .header("if-none-match", "\"0123456789abcdef\"")
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    let card: Value = resp.json().await.expect("card");
    assert_eq!(card["name"], "Demo Toyota");
}

#[tokio::test]
async fn agent_cards_differ_per_dealer() {
    let gw = demo().await;
    let (toyota_headers, toyota) = get_card(&gw, TOYOTA_CARD).await;
    let (honda_headers, honda) = get_card(&gw, HONDA_CARD).await;
    assert_ne!(toyota["name"], honda["name"]);
    assert_ne!(
        toyota["supportedInterfaces"][0]["url"],
        honda["supportedInterfaces"][0]["url"]
    );
    assert_ne!(toyota_headers["etag"], honda_headers["etag"]);
    let id = |card: &Value| card["capabilities"]["extensions"][0]["params"]["id"].clone();
    assert_ne!(id(&toyota), id(&honda), "one revision id per card");
}

#[tokio::test]
async fn agent_card_is_get_only() {
    let gw = demo().await;
    let resp = gw
        .client()
        .post(gw.url(TOYOTA_CARD))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 405);
    let resp = gw
        .client()
        .head(gw.url(TOYOTA_CARD))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().contains_key("etag"));
}

// === admin listener ===

/// `/readyz` until it answers 200 (at most 10 s): its body, and every non-200 body seen before.
async fn ready_body(gw: &common::Gateway) -> (Value, Vec<Value>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut waiting = Vec::new();
    loop {
        let resp = gw
            .client()
            .get(gw.admin_url("/readyz"))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.expect("json body");
        if status == 200 {
            return (body, waiting);
        }
        assert_eq!(status, 503, "{body}");
        waiting.push(body);
        assert!(
            std::time::Instant::now() < deadline,
            "never ready: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn admin_healthz_and_readyz_are_200() {
    let (gw, _sims) = common::demo_with_simulators().await;
    let resp = gw
        .client()
        .get(gw.admin_url("/healthz"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.json::<Value>().await.expect("json"),
        json!({ "status": "ok" })
    );
    let (ready, _) = ready_body(&gw).await;
    assert_eq!(ready, json!({ "status": "ready" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_first_load_of_each_feed() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    // Demo Honda's feed takes a while to answer.
    sims.feed.set_mode(aap_sim::sim::Mode::Slow, 700);
    let gw = common::start_file_with_vars(
        &common::repo_path("config/demo.yaml"),
        None,
        common::simulator_vars(&sims),
    )
    .await;
    let (ready, waiting) = ready_body(&gw).await;
    assert!(!waiting.is_empty(), "ready before the feed was loaded");
    assert!(
        waiting.iter().all(|b| b["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("demo_honda") && m.contains("feed"))),
        "{waiting:?}"
    );
    assert_eq!(ready, json!({ "status": "ready" }));
    // Ready means loaded: the first search is answered from the cache at once.
    let started = std::time::Instant::now();
    let search = json!({ "type": "inventory.search.request", "pagination": { "limit": 1 } });
    let reply = gw.send("/dealers/demo-honda/a2a", search).await;
    assert!(reply.body.get("result").is_some(), "{}", reply.text);
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn readyz_names_a_feed_whose_first_load_failed_without_holding_the_others_back() {
    // No simulators: Demo Honda's feed source does not answer.
    let gw = demo().await;
    let (ready, _) = ready_body(&gw).await;
    assert_eq!(
        ready,
        json!({ "status": "ready", "feeds_without_copy": ["demo_honda"] })
    );
}

#[tokio::test]
async fn admin_unknown_path_is_404() {
    let gw = demo().await;
    for path in ["/nope", "/", "/a2a", "/healthz/x"] {
        let resp = gw
            .client()
            .get(gw.admin_url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
}

#[tokio::test]
async fn admin_endpoints_are_not_on_the_public_listener() {
    let gw = demo().await;
    for path in ["/healthz", "/readyz"] {
        let resp = gw.client().get(gw.url(path)).send().await.expect("request");
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
}

// === graceful shutdown ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_completes_a_request_in_flight() {
    let mut gw = demo().await;
    let addr = gw.addr;
    let body = send_message(di()).to_string();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = request_head(addr, "/a2a", &[&format!("Content-Length: {}", body.len())]);
    stream
        .write_all(format!("{head}{first}").as_bytes())
        .await
        .expect("write first half");
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Stop the gateway while the request body is still arriving.
    let task = gw.task.take().expect("server task");
    drop(gw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !task.is_finished(),
        "the server waits for the request in flight"
    );
    // New connections are no longer accepted.
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");

    stream
        .write_all(rest.as_bytes())
        .await
        .expect("write the rest");
    let response = read_response(&mut stream).await;
    assert_eq!(response.status, 200);
    let reply: Value = serde_json::from_slice(&response.body).expect("JSON");
    assert_eq!(reply["result"]["message"]["role"], "ROLE_AGENT", "{reply}");

    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server finishes draining")
        .expect("server task");
}

#[tokio::test]
async fn graceful_shutdown_ends_the_server_when_idle() {
    let mut gw = demo().await;
    let reply = gw.send("/a2a", di()).await;
    assert_eq!(reply.status, 200);
    let task = gw.task.take().expect("server task");
    drop(gw);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stops")
        .expect("server task");
}
