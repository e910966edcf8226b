//! The HTTP+JSON binding (`POST {base}/message:send`), one test per row of its HTTP status
//! mapping (docs/protocol.md §HTTP statuses): a `google.rpc.Status` body whose `code` is the HTTP
//! status and whose `details[]` are the JSON-RPC binding's `error.data` entries — ErrorInfo
//! first, BadRequest for validation, then `aap.error`. Parity with JSON-RPC for every case of
//! the protocol and skills suites is checked there (`Gateway::with_parity`).

mod common;

use aap_sim::Simulators;
use aap_sim::inventory::{self, Status};
use aap_sim::sim::Mode;
use common::{EXT, Gateway, Reply, standard_headers};
use serde_json::{Value, json};

const TOYOTA: &str = "/a2a/message:send";
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST: &str = "type.googleapis.com/google.rpc.BadRequest";
const AAP_ERROR: &str = "https://autoagentprotocol.org/extensions/aap/error";

/// A `SendMessageRequest` carrying `data` as its one DataPart.
fn request(data: Value) -> Value {
    json!({ "message": { "messageId": "msg-1", "role": "ROLE_USER", "parts": [ { "data": data } ] } })
}

async fn post(gw: &Gateway, path: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    gw.post_raw(path, headers, body.to_string().into_bytes())
        .await
}

async fn send(gw: &Gateway, data: Value) -> Reply {
    post(gw, TOYOTA, &standard_headers(), &request(data)).await
}

async fn get(gw: &Gateway, path: &str) -> Reply {
    let resp = gw
        .client()
        .get(gw.url(path))
        .header("a2a-version", "1.0")
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    Reply {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

/// Asserts a `google.rpc.Status` error with `status`, ErrorInfo `reason` first, and returns its
/// `details[]`.
fn assert_status(reply: &Reply, status: u16, reason: &str) -> Vec<Value> {
    assert_eq!(reply.status, status, "{}", reply.text);
    let error = &reply.body["error"];
    assert_eq!(error["code"], status, "{}", reply.text);
    assert!(error["status"].is_string(), "{}", reply.text);
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(reply.body.get("jsonrpc").is_none(), "not JSON-RPC");
    let details = error["details"].as_array().expect("details").clone();
    assert_eq!(details[0]["@type"], ERROR_INFO, "{}", reply.text);
    assert_eq!(details[0]["reason"], reason, "{}", reply.text);
    let content_type = reply.headers["content-type"].to_str().expect("ascii");
    assert_eq!(content_type, "application/json");
    details
}

/// An AAP error: ErrorInfo (domain autoagentprotocol.org), then `aap.error` last; returns it.
fn assert_aap(reply: &Reply, status: u16, code: &str) -> Value {
    let details = assert_status(reply, status, code);
    assert_eq!(details[0]["domain"], "autoagentprotocol.org");
    assert_eq!(details[0]["metadata"]["code"], code);
    let aap = details.last().expect("aap.error").clone();
    assert_eq!(aap["@type"], AAP_ERROR, "{}", reply.text);
    assert_eq!(aap["code"], code);
    aap
}

/// An A2A protocol error: one ErrorInfo (domain a2a-protocol.org), no `aap.error`.
fn assert_a2a(reply: &Reply, status: u16, reason: &str) -> Vec<Value> {
    let details = assert_status(reply, status, reason);
    assert_eq!(details[0]["domain"], "a2a-protocol.org");
    assert!(details.iter().all(|d| d["@type"] != AAP_ERROR));
    details
}

fn good_lead(key: &str) -> Value {
    json!({
        "type": "lead.submit.request",
        "customer": { "first_name": "Anna", "last_name": "Lee", "email": "anna@example.com", "phone": "+14155550123", "preferred_contact": "phone" },
        "consent": { "granted_at": "2026-04-30T10:16:00Z", "allowed_channels": ["email", "phone"], "consent_text": "I agree to share my contact info with Demo Toyota.", "scope": ["lead_submission"] },
        "message": "Is it still available?",
        "source_agent": { "name": "rest-tests" },
        "idempotency_key": key
    })
}

fn in_stock_vin() -> String {
    inventory::toyota_group()
        .into_iter()
        .find(|v| v.status == Status::InStock)
        .expect("an in-stock unit")
        .vin
}

fn sold_vin() -> String {
    inventory::toyota_group()
        .into_iter()
        .find(|v| v.status == Status::Sold)
        .expect("a sold unit")
        .vin
}

async fn demo() -> (Gateway, Simulators) {
    common::demo_with_simulators().await
}

/// Two profile-only dealers (`rest_motors` at `/`, `other_motors` at `/other`) under `extra`
/// top-level settings.
async fn small(extra: &str) -> Gateway {
    common::start_profiles(
        extra,
        &[
            common::profile_dealer("rest_motors", "Rest Motors", ""),
            common::profile_dealer("other_motors", "Other Motors", "path_prefix: /other"),
        ],
    )
    .await
}

const ENABLED: &str = "bindings:\n  http_json: { enabled: true }";

fn info() -> Value {
    json!({ "type": "dealer.information.request" })
}

// ---------------------------------------------------------------------------------------------
// The card, and the binding switched off

#[tokio::test]
async fn the_card_lists_http_json_after_jsonrpc_only_when_enabled() {
    let on = small(ENABLED).await;
    let card = on.card("/.well-known/agent-card.json").await;
    let interfaces = card["supportedInterfaces"].as_array().expect("interfaces");
    let bindings: Vec<&str> = interfaces
        .iter()
        .map(|i| i["protocolBinding"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(bindings, ["JSONRPC", "HTTP+JSON"]);
    assert_eq!(interfaces[1]["url"], interfaces[0]["url"], "one base URL");
    assert_eq!(interfaces[1]["protocolVersion"], "1.0");

    let off = small("").await;
    let card = off.card("/.well-known/agent-card.json").await;
    assert_eq!(
        card["supportedInterfaces"].as_array().map(Vec::len),
        Some(1)
    );
    let reply = post(&off, TOYOTA, &standard_headers(), &request(info())).await;
    assert_eq!(reply.status, 404, "off by default: {}", reply.text);
}

// ---------------------------------------------------------------------------------------------
// 200

#[tokio::test]
async fn a_skill_call_is_200_with_a_send_message_response() {
    let gw = small(ENABLED).await;
    let mut req = request(info());
    req["message"]["contextId"] = json!("ctx-7");
    let reply = post(&gw, TOYOTA, &standard_headers(), &req).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let message = &reply.body["message"];
    assert_eq!(message["role"], "ROLE_AGENT");
    assert_eq!(message["contextId"], "ctx-7");
    assert!(message["messageId"].as_str().is_some_and(|m| m != "msg-1"));
    let part = &message["parts"][0];
    assert_eq!(
        part["mediaType"],
        "application/vnd.autoagent.dealer-information-response+json"
    );
    assert_eq!(part["data"]["type"], "dealer.information.response");
    assert_eq!(part["data"]["data"]["name"], "Rest Motors");
    assert_eq!(reply.headers["a2a-extensions"], EXT);
    assert_eq!(reply.headers["content-type"], "application/json");
}

#[tokio::test]
async fn application_a2a_json_is_accepted_and_answered_in_kind() {
    let gw = small(ENABLED).await;
    let headers = [
        ("content-type", "application/a2a+json; charset=utf-8"),
        ("a2a-version", "1.0"),
        ("a2a-extensions", EXT),
    ];
    let reply = post(&gw, TOYOTA, &headers, &request(info())).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.headers["content-type"], "application/a2a+json");
}

#[tokio::test]
async fn list_tasks_is_200_with_an_empty_list() {
    let gw = small(ENABLED).await;
    let reply = get(&gw, "/a2a/tasks?pageSize=10").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        reply.body,
        json!({ "tasks": [], "nextPageToken": "", "pageSize": 10, "totalSize": 0 })
    );
}

// ---------------------------------------------------------------------------------------------
// AAP codes (docs/protocol.md §AAP error codes)

#[tokio::test]
async fn validation_failures_are_422_with_bad_request_then_aap_error() {
    let (gw, _sims) = demo().await;
    let reply = send(
        &gw,
        json!({ "type": "inventory.search.request", "filters": { "year_min": "new", "condition": ["shiny"] } }),
    )
    .await;
    let aap = assert_aap(&reply, 422, "SCHEMA_VALIDATION_FAILED");
    let details = reply.body["error"]["details"].as_array().expect("details");
    assert_eq!(details.len(), 3, "ErrorInfo, BadRequest, aap.error");
    assert_eq!(details[1]["@type"], BAD_REQUEST);
    let mut fields: Vec<&str> = details[1]["fieldViolations"]
        .as_array()
        .expect("violations")
        .iter()
        .filter_map(|v| v["field"].as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["/filters/condition/0", "/filters/year_min"]);
    assert_eq!(aap["details"]["errors"].as_array().map(Vec::len), Some(2));
    assert_eq!(reply.body["error"]["status"], "INVALID_ARGUMENT");

    let missing = send(&gw, json!({ "type": "inventory.vehicle.request" })).await;
    assert_aap(&missing, 422, "MISSING_REQUIRED_FIELD");
}

#[tokio::test]
async fn an_unsupported_skill_is_404() {
    let gw = small(ENABLED).await;
    let reply = send(&gw, json!({ "type": "inventory.search.request" })).await;
    let aap = assert_aap(&reply, 404, "UNSUPPORTED_SKILL");
    assert_eq!(aap["retryable"], false);
}

#[tokio::test]
async fn an_unknown_vehicle_is_404_and_a_sold_one_409() {
    let (gw, _sims) = demo().await;
    let unknown = inventory::unknown_vin(&inventory::toyota_group());
    let reply = send(
        &gw,
        json!({ "type": "inventory.vehicle.request", "vin": unknown }),
    )
    .await;
    assert_aap(&reply, 404, "VEHICLE_NOT_FOUND");
    assert_eq!(reply.body["error"]["status"], "NOT_FOUND");
    let reply = send(
        &gw,
        json!({ "type": "inventory.vehicle.request", "vin": sold_vin() }),
    )
    .await;
    assert_aap(&reply, 409, "VEHICLE_UNAVAILABLE");
}

#[tokio::test]
async fn missing_and_unusable_consent_are_403() {
    let (gw, sims) = demo().await;
    let mut lead = good_lead("consent-1");
    lead.as_object_mut().expect("object").remove("consent");
    assert_aap(&send(&gw, lead).await, 403, "CONTACT_CONSENT_REQUIRED");
    let mut lead = good_lead("consent-2");
    lead["consent"]["expires_at"] = json!("2026-05-01T00:00:00Z");
    assert_aap(&send(&gw, lead).await, 403, "INVALID_CONSENT");
    assert!(sims.crm.received().is_empty(), "no CRM call");
}

#[tokio::test]
async fn a_reused_key_with_another_payload_is_409_and_a_replay_is_200() {
    let (gw, sims) = demo().await;
    let first = send(&gw, good_lead("rest-key")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = send(&gw, good_lead("rest-key")).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.body["message"]["parts"], first.body["message"]["parts"],
        "the same reply"
    );
    let mut changed = good_lead("rest-key");
    changed["message"] = json!("Actually, the red one.");
    assert_aap(&send(&gw, changed).await, 409, "IDEMPOTENCY_CONFLICT");
    assert_eq!(sims.crm.received().len(), 1, "one CRM call");
}

#[tokio::test]
async fn an_appointment_that_cannot_be_honoured_is_409() {
    let (gw, _sims) = demo().await;
    let mut lead = good_lead("past-appointment");
    lead["vehicle_of_interest"] = json!({ "vin": in_stock_vin() });
    lead["appointment"] =
        json!({ "appointment_type": "test_drive", "appointment_at": "2026-01-05T18:00:00Z" });
    assert_aap(&send(&gw, lead).await, 409, "APPOINTMENT_TIME_UNAVAILABLE");
}

#[tokio::test]
async fn rate_limited_is_429_with_retry_after() {
    let gw = small(&format!(
        "{ENABLED}\nrate_limit:\n  default: {{ rate: 1/min, burst: 1 }}"
    ))
    .await;
    assert_eq!(send(&gw, info()).await.status, 200);
    let reply = send(&gw, info()).await;
    let aap = assert_aap(&reply, 429, "RATE_LIMITED");
    assert_eq!(aap["retryable"], true);
    let ms = aap["details"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    assert!((55_000..=60_000).contains(&ms), "{ms}");
    assert_eq!(reply.headers["retry-after"], "60");
    assert_eq!(reply.body["error"]["status"], "RESOURCE_EXHAUSTED");
}

#[tokio::test]
async fn an_upstream_failure_is_500_and_retryable() {
    let (gw, sims) = demo().await;
    sims.dms.set_mode(Mode::Fail, 0);
    let reply = send(&gw, json!({ "type": "inventory.search.request" })).await;
    let aap = assert_aap(&reply, 500, "INTERNAL_ERROR");
    assert_eq!(aap["retryable"], true);
    assert!(
        !reply.text.contains("dms"),
        "no internal cause: {}",
        reply.text
    );
}

// ---------------------------------------------------------------------------------------------
// Authentication

#[tokio::test]
async fn a_missing_key_is_401_with_a_challenge_and_a_key_for_another_dealer_403() {
    let gw = small(&format!(
        "{ENABLED}\nauth:\n  mode: api_key\n  keys:\n    - id: elsewhere\n      sha256: {}\n      dealers: [other_motors]\n    - id: partner\n      sha256: {}\n",
        common::sha256_hex("elsewhere-key"),
        common::sha256_hex("partner-key"),
    ))
    .await;
    let reply = send(&gw, info()).await;
    assert_a2a_like(&reply, 401, "UNAUTHENTICATED");
    assert_eq!(
        reply.headers["www-authenticate"],
        "Bearer realm=\"aap-gateway\""
    );
    let mut headers = standard_headers();
    headers.push(("x-api-key", "elsewhere-key"));
    let reply = post(&gw, TOYOTA, &headers, &request(info())).await;
    assert_a2a_like(&reply, 403, "PERMISSION_DENIED");
    let mut headers = standard_headers();
    headers.push(("authorization", "Bearer partner-key"));
    assert_eq!(
        post(&gw, TOYOTA, &headers, &request(info())).await.status,
        200
    );
}

/// Authentication errors keep the A2A shape (one ErrorInfo, no `aap.error`).
fn assert_a2a_like(reply: &Reply, status: u16, reason: &str) {
    let details = assert_status(reply, status, reason);
    assert_eq!(details.len(), 1, "{}", reply.text);
}

// ---------------------------------------------------------------------------------------------
// A2A protocol errors (docs/protocol.md §A2A protocol errors)

#[tokio::test]
async fn version_and_extension_problems_are_400() {
    let gw = small(ENABLED).await;
    let body = request(info());
    let reply = post(
        &gw,
        TOYOTA,
        &[
            ("content-type", "application/json"),
            ("a2a-extensions", EXT),
        ],
        &body,
    )
    .await;
    let details = assert_a2a(&reply, 400, "VERSION_NOT_SUPPORTED");
    assert_eq!(details[0]["metadata"]["requestedVersion"], "<absent>");
    let reply = post(
        &gw,
        TOYOTA,
        &[("content-type", "application/json"), ("a2a-version", "1.0")],
        &body,
    )
    .await;
    let details = assert_a2a(&reply, 400, "EXTENSION_SUPPORT_REQUIRED");
    assert_eq!(details[0]["metadata"]["extensionUri"], EXT);
    assert_eq!(details[0]["metadata"]["requiredHeader"], "A2A-Extensions");
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .expect("message")
            .contains(EXT)
    );
}

#[tokio::test]
async fn a_bad_envelope_is_400_invalid_params_with_every_violation() {
    let gw = small(ENABLED).await;
    let body = json!({ "message": { "role": "ROLE_AGENT", "parts": [] } });
    let reply = post(&gw, TOYOTA, &standard_headers(), &body).await;
    let details = assert_a2a(&reply, 400, "INVALID_PARAMS");
    let fields: Vec<&str> = details[1]["fieldViolations"]
        .as_array()
        .expect("violations")
        .iter()
        .filter_map(|v| v["field"].as_str())
        .collect();
    assert_eq!(
        fields,
        ["message.messageId", "message.role", "message.parts"]
    );
}

#[tokio::test]
async fn a_task_id_is_404_task_not_found() {
    let gw = small(ENABLED).await;
    let mut body = request(info());
    body["message"]["taskId"] = json!("task-1");
    let reply = post(&gw, TOYOTA, &standard_headers(), &body).await;
    assert_a2a(&reply, 404, "TASK_NOT_FOUND");
}

#[tokio::test]
async fn body_json_problems_are_400() {
    let gw = small(ENABLED).await;
    let reply = gw
        .post_raw(TOYOTA, &standard_headers(), b"{not json".to_vec())
        .await;
    assert_a2a(&reply, 400, "JSON_PARSE_ERROR");
    let reply = post(&gw, TOYOTA, &standard_headers(), &json!([request(info())])).await;
    assert_a2a(&reply, 400, "INVALID_REQUEST");
}

#[tokio::test]
async fn the_request_media_type_is_415_and_a_part_media_type_400() {
    let gw = small(ENABLED).await;
    let headers = [
        ("content-type", "text/plain"),
        ("a2a-version", "1.0"),
        ("a2a-extensions", EXT),
    ];
    let reply = post(&gw, TOYOTA, &headers, &request(info())).await;
    assert_a2a(&reply, 415, "CONTENT_TYPE_NOT_SUPPORTED");
    let body = json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": [ { "data": info(), "mediaType": "text/csv" } ] } });
    let reply = post(&gw, TOYOTA, &standard_headers(), &body).await;
    assert_a2a(&reply, 400, "CONTENT_TYPE_NOT_SUPPORTED");
}

#[tokio::test]
async fn a2a_routes_an_aap_agent_does_not_offer_answer_their_errors() {
    let gw = small(ENABLED).await;
    let client = gw.client();
    let cases = [
        ("POST", "/a2a/message:stream", 400, "UNSUPPORTED_OPERATION"),
        ("GET", "/a2a/tasks/t-1", 404, "TASK_NOT_FOUND"),
        ("POST", "/a2a/tasks/t-1:cancel", 404, "TASK_NOT_FOUND"),
        (
            "POST",
            "/a2a/tasks/t-1:subscribe",
            400,
            "UNSUPPORTED_OPERATION",
        ),
        (
            "POST",
            "/a2a/tasks/t-1/pushNotificationConfigs",
            400,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GET",
            "/a2a/tasks/t-1/pushNotificationConfigs",
            400,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GET",
            "/a2a/tasks/t-1/pushNotificationConfigs/c-1",
            400,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "DELETE",
            "/a2a/tasks/t-1/pushNotificationConfigs/c-1",
            400,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            "GET",
            "/a2a/extendedAgentCard",
            400,
            "UNSUPPORTED_OPERATION",
        ),
    ];
    for (method, path, status, reason) in cases {
        let resp = client
            .request(method.parse().expect("method"), gw.url(path))
            .header("a2a-version", "1.0")
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .expect("request");
        let code = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let reply = Reply {
            status: code,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        };
        assert_a2a(&reply, status, reason);
    }
    // Like every JSON-RPC method, they check A2A-Version first.
    let resp = client
        .get(gw.url("/a2a/tasks/t-1"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 400);
}

// ---------------------------------------------------------------------------------------------
// HTTP-level refusals

#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let gw = small(ENABLED).await;
    for (method, path, allow) in [
        ("GET", "/a2a/message:send", "POST"),
        ("PUT", "/a2a/message:send", "POST"),
        ("POST", "/a2a/tasks", "GET"),
        (
            "PATCH",
            "/a2a/tasks/t-1/pushNotificationConfigs/c-1",
            "GET, DELETE",
        ),
    ] {
        let resp = gw
            .client()
            .request(method.parse().expect("method"), gw.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
    }
}

#[tokio::test]
async fn an_unknown_route_is_404_and_an_oversized_body_413() {
    let gw = small(ENABLED).await;
    let reply = post(
        &gw,
        "/a2a/message:teleport",
        &standard_headers(),
        &json!({}),
    )
    .await;
    assert_eq!(reply.status, 404);
    let reply = gw
        .post_raw(TOYOTA, &standard_headers(), vec![b' '; 70_000])
        .await;
    assert_eq!(reply.status, 413);
}
