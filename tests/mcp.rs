//! The MCP binding (docs/protocol.md §MCP binding) against the in-process gateway and the
//! simulators: the Streamable HTTP transport (initialize and version negotiation, sessions,
//! headers, Origin), one tool per served skill, every tool through the pipeline (its answers
//! checked against the JSON-RPC binding's for the same request), tool errors with their field
//! list and retry hint, API keys, consent and idempotent leads, metrics and logs.

mod common;

use aap_sim::inventory::{self, Status};
use common::{Gateway, Reply, standard_headers};
use serde_json::{Value, json};

const TOYOTA: &str = "/mcp";
const HONDA: &str = "/dealers/demo-honda/mcp";
const ENABLE: &str = "bindings:\n  mcp:\n    enabled: true\n";

/// A minimal client of the transport: the session and version of one `initialize`.
struct Session<'a> {
    gw: &'a Gateway,
    path: &'static str,
    id: String,
    version: String,
    extra: Vec<(&'static str, String)>,
}

fn headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ]
}

async fn post(gw: &Gateway, path: &str, headers: &[(&str, &str)], body: &Value) -> Reply {
    gw.post_raw(path, headers, body.to_string().into_bytes())
        .await
}

fn initialize_request(version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "tests/mcp.rs", "version": "1"}
    }})
}

impl<'a> Session<'a> {
    async fn open(gw: &'a Gateway, path: &'static str) -> Session<'a> {
        Session::open_with(gw, path, Vec::new()).await
    }

    async fn open_with(
        gw: &'a Gateway,
        path: &'static str,
        extra: Vec<(&'static str, String)>,
    ) -> Session<'a> {
        let reply = post(gw, path, &headers(), &initialize_request("2025-11-25")).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = reply.headers["mcp-session-id"]
            .to_str()
            .expect("ascii")
            .to_owned();
        let version = reply.body["result"]["protocolVersion"]
            .as_str()
            .expect("version")
            .to_owned();
        let session = Session {
            gw,
            path,
            id,
            version,
            extra,
        };
        let initialized = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(initialized.status, 202, "{}", initialized.text);
        assert!(initialized.text.is_empty());
        session
    }

    async fn post(&self, body: &Value) -> Reply {
        let mut h = headers();
        h.push(("mcp-session-id", &self.id));
        h.push(("mcp-protocol-version", &self.version));
        for (k, v) in &self.extra {
            h.push((k, v));
        }
        post(self.gw, self.path, &h, body).await
    }

    async fn request(&self, method: &str, params: Value) -> Reply {
        self.post(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
            .await
    }

    async fn tools(&self) -> Vec<Value> {
        let reply = self.request("tools/list", json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        reply.body["result"]["tools"]
            .as_array()
            .expect("tools")
            .clone()
    }

    /// A `tools/call`; returns the HTTP reply (its `result` or `error`).
    async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }
}

/// The `result` of a successful tool call, after checking its shape.
fn ok(reply: &Reply) -> &Value {
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = &reply.body["result"];
    assert_eq!(result["isError"], false, "{}", reply.text);
    assert_eq!(result["content"][0]["type"], "text");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    &result["structuredContent"]
}

/// The `aap.error` payload of a tool error, after checking its shape: the first text names the
/// code, the second is the payload.
fn tool_error(reply: &Reply, code: &str) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text);
    let result = &reply.body["result"];
    assert_eq!(result["isError"], true, "{}", reply.text);
    assert!(result.get("structuredContent").is_none(), "{}", reply.text);
    let text = result["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with(&format!("{code}: ")), "{text}");
    let payload: Value =
        serde_json::from_str(result["content"][1]["text"].as_str().expect("payload"))
            .expect("json");
    assert_eq!(payload["type"], "aap.error");
    assert_eq!(payload["code"], code, "{payload}");
    assert!(
        payload["error_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("err_"))
    );
    payload
}

/// The JSON-RPC error of a reply with `status`.
fn rpc_error(reply: &Reply, status: u16, code: i64) -> &Value {
    assert_eq!(reply.status, status, "{}", reply.text);
    assert_eq!(reply.body["jsonrpc"], "2.0", "{}", reply.text);
    assert_eq!(reply.body["error"]["code"], code, "{}", reply.text);
    &reply.body["error"]
}

async fn demo() -> (Gateway, aap_sim::Simulators) {
    common::demo_with_simulators_unlimited().await
}

#[tokio::test(flavor = "multi_thread")]
async fn initialize_negotiates_the_version_and_opens_a_session() {
    let (gw, _sims) = demo().await;
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        // Older than structured tool output, or unknown: the newest is offered.
        ("2025-03-26", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let reply = post(&gw, TOYOTA, &headers(), &initialize_request(asked)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let result = &reply.body["result"];
        assert_eq!(result["protocolVersion"], answered, "{asked}");
        assert_eq!(
            result["capabilities"],
            json!({"tools": {"listChanged": false}})
        );
        assert_eq!(result["serverInfo"]["title"], "Demo Toyota");
        let session = reply.headers["mcp-session-id"].to_str().expect("ascii");
        assert!(session.len() >= 32 && session.bytes().all(|b| b.is_ascii_alphanumeric()));
    }
    let honda = post(&gw, HONDA, &headers(), &initialize_request("2025-11-25")).await;
    assert_eq!(honda.body["result"]["serverInfo"]["title"], "Demo Honda");

    let no_version = post(
        &gw,
        TOYOTA,
        &headers(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
    )
    .await;
    rpc_error(&no_version, 200, -32602);
    assert!(no_version.headers.get("mcp-session-id").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_transport_checks_session_version_and_envelope() {
    let (gw, _sims) = demo().await;
    let toyota = Session::open(&gw, TOYOTA).await;
    let honda = Session::open(&gw, HONDA).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    // No session: 400; an unknown one, or another dealer's: 404.
    let reply = post(&gw, TOYOTA, &headers(), &list).await;
    assert_eq!(
        rpc_error(&reply, 400, -32600)["message"]
            .as_str()
            .map(|m| m.contains("Mcp-Session-Id")),
        Some(true)
    );
    let mut h = headers();
    h.push(("mcp-session-id", "0123456789abcdef0123456789abcdef"));
    rpc_error(&post(&gw, TOYOTA, &h, &list).await, 404, -32001);
    let mut h = headers();
    h.push(("mcp-session-id", &honda.id));
    rpc_error(&post(&gw, TOYOTA, &h, &list).await, 404, -32001);

    // A protocol version other than the session's: 400; absent: the session's.
    let mut h = headers();
    h.push(("mcp-session-id", &toyota.id));
    assert_eq!(post(&gw, TOYOTA, &h, &list).await.status, 200);
    h.push(("mcp-protocol-version", "2025-03-26"));
    rpc_error(&post(&gw, TOYOTA, &h, &list).await, 400, -32600);

    // Envelope: media types, JSON, one message.
    let mut h = vec![
        ("content-type", "text/plain"),
        ("mcp-session-id", toyota.id.as_str()),
    ];
    assert_eq!(post(&gw, TOYOTA, &h, &list).await.status, 415);
    h[0] = ("content-type", "application/json");
    h.push(("accept", "text/html"));
    assert_eq!(post(&gw, TOYOTA, &h, &list).await.status, 406);
    let mut h = headers();
    h.push(("mcp-session-id", &toyota.id));
    let garbled = gw.post_raw(TOYOTA, &h, b"{\"jsonrpc\":".to_vec()).await;
    rpc_error(&garbled, 400, -32700);
    rpc_error(&post(&gw, TOYOTA, &h, &json!([list])).await, 400, -32600);
    rpc_error(
        &toyota.request("resources/list", json!({})).await,
        200,
        -32601,
    );
    let ping = toyota.request("ping", json!({})).await;
    assert_eq!(ping.body["result"], json!({}), "{}", ping.text);

    // GET offers no stream; DELETE ends the session, once.
    let get = gw
        .client()
        .get(gw.url(TOYOTA))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("get");
    assert_eq!(get.status(), 405);
    assert_eq!(get.headers()["allow"], "POST, DELETE");
    let delete = |id: String| {
        let request = gw
            .client()
            .delete(gw.url(TOYOTA))
            .header("mcp-session-id", id);
        async move { request.send().await.expect("delete").status().as_u16() }
    };
    assert_eq!(
        delete(honda.id.clone()).await,
        404,
        "not this dealer's session"
    );
    assert_eq!(delete(toyota.id.clone()).await, 204);
    assert_eq!(delete(toyota.id.clone()).await, 404);
    rpc_error(&toyota.post(&list).await, 404, -32001);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_origin_is_refused_before_anything_else() {
    let (gw, _sims) = demo().await;
    let init = initialize_request("2025-11-25");
    let mut h = headers();
    h.push(("origin", "http://attacker.example"));
    let refused = post(&gw, TOYOTA, &h, &init).await;
    rpc_error(&refused, 403, -32600);
    assert!(refused.headers.get("mcp-session-id").is_none());
    // The demo lists the MCP Inspector's origin; a listed origin is compared case-insensitively.
    let mut h = headers();
    h.push(("origin", "http://LOCALHOST:6274"));
    assert_eq!(post(&gw, TOYOTA, &h, &init).await.status, 200);
    // Even the method check comes after the Origin check.
    let get = gw
        .client()
        .get(gw.url(TOYOTA))
        .header("origin", "http://localhost:6274.attacker.example")
        .send()
        .await
        .expect("get");
    assert_eq!(get.status(), 403);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_dealer_lists_one_tool_per_skill_it_serves() {
    let (gw, _sims) = demo().await;
    let names = |tools: &[Value]| -> Vec<String> {
        tools
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect()
    };
    for path in [TOYOTA, HONDA] {
        let tools = Session::open(&gw, path).await.tools().await;
        assert_eq!(
            names(&tools),
            [
                "dealer_information",
                "inventory_facets",
                "inventory_search",
                "inventory_vehicle",
                "lead_submit"
            ],
            "{path}"
        );
        for tool in &tools {
            assert_eq!(tool["inputSchema"]["type"], "object");
            assert_eq!(tool["outputSchema"]["type"], "object");
            assert!(!tool.to_string().contains("$ref"), "self-contained");
        }
        let lead = tools
            .iter()
            .find(|t| t["name"] == "lead_submit")
            .expect("lead");
        assert!(
            lead["description"]
                .as_str()
                .expect("text")
                .contains("explicit consent")
        );
        assert_eq!(
            lead["inputSchema"]["required"],
            json!(["customer", "consent", "source_agent"]),
            "the request's required fields, without `type`"
        );
    }

    // A dealer serving only dealer.information has that tool only; the others are unknown.
    let gw =
        common::start_profiles(ENABLE, &[common::profile_dealer("lone", "Lone Motors", "")]).await;
    let lone = Session::open(&gw, TOYOTA).await;
    assert_eq!(names(&lone.tools().await), ["dealer_information"]);
    let unknown = lone.call("inventory_search", json!({})).await;
    let error = rpc_error(&unknown, 200, -32602);
    assert!(
        error["message"]
            .as_str()
            .expect("text")
            .contains("tools: dealer_information")
    );
    let info = lone.call("dealer_information", json!({})).await;
    assert_eq!(ok(&info)["name"], "Lone Motors");
}

/// Every tool answers what the JSON-RPC binding answers for the same request: the tool's
/// `structuredContent` is the reply's `data`.
#[tokio::test(flavor = "multi_thread")]
async fn every_tool_answers_as_the_a2a_binding_does() {
    let (gw, _sims) = demo().await;
    let vin = inventory::toyota_group()
        .into_iter()
        .find(|u| u.status == Status::InStock)
        .expect("unit")
        .vin;
    let session = Session::open(&gw, TOYOTA).await;
    let cases = [
        ("dealer_information", json!({})),
        (
            "inventory_facets",
            json!({"filters": {"condition": ["used", "cpo"]}}),
        ),
        (
            "inventory_search",
            json!({"filters": {"make": ["toyota"], "price_max": 30000.0}, "sort": {"field": "price", "order": "desc"}, "pagination": {"skip": 2, "limit": 3}}),
        ),
        ("inventory_vehicle", json!({"vin": vin})),
    ];
    for (tool, arguments) in cases {
        let reply = session.call(tool, arguments.clone()).await;
        let structured = ok(&reply).clone();
        let mut data = arguments.clone();
        data["type"] = json!(format!("{}.request", tool.replacen('_', ".", 1)));
        let a2a = gw.send("/a2a", data).await;
        let expected = a2a.payload()["data"].clone();
        assert_eq!(structured, expected, "{tool}");
    }
    let search = session
        .call("inventory_search", json!({"pagination": {"limit": 2}}))
        .await;
    let text = search.body["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    let total = ok(&search)["total"].as_u64().expect("total");
    assert!(
        text.starts_with(&format!("{total} vehicles match")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_are_tool_errors_with_the_field_list() {
    let (gw, _sims) = demo().await;
    let session = Session::open(&gw, HONDA).await;
    let reply = session
        .call(
            "inventory_search",
            json!({"filters": {"make": "Honda", "year_min": 1800, "colour": ["red"]}}),
        )
        .await;
    let payload = tool_error(&reply, "SCHEMA_VALIDATION_FAILED");
    let mut fields: Vec<&str> = payload["details"]["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["instanceLocation"].as_str().expect("location"))
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["/filters/colour", "/filters/make", "/filters/year_min"]
    );
    let text = reply.body["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.contains("/filters/make") && text.contains("/filters/year_min"),
        "{text}"
    );

    let missing = session.call("inventory_vehicle", json!({})).await;
    tool_error(&missing, "MISSING_REQUIRED_FIELD");
    let not_found = session
        .call("inventory_vehicle", json!({"vin": "1HGCM82633A004352"}))
        .await;
    tool_error(&not_found, "VEHICLE_NOT_FOUND");
    // A `type` of another skill is the schema's to judge, not a way into another tool.
    let other = session
        .call("dealer_information", json!({"type": "lead.submit.request"}))
        .await;
    tool_error(&other, "SCHEMA_VALIDATION_FAILED");
    // Arguments that are not an object are the call's own problem: a JSON-RPC error.
    let reply = session
        .request(
            "tools/call",
            json!({"name": "inventory_search", "arguments": [1]}),
        )
        .await;
    rpc_error(&reply, 200, -32602);
    let reply = session
        .request("tools/call", json!({"arguments": {}}))
        .await;
    rpc_error(&reply, 200, -32602);
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_quota_a_call_is_rate_limited_with_a_retry_hint() {
    let (gw, _sims) = common::demo_with_simulators_env(&[
        ("AAP_GATEWAY__RATE_LIMIT__DEFAULT__RATE", "1/min"),
        ("AAP_GATEWAY__RATE_LIMIT__DEFAULT__BURST", "1"),
    ])
    .await;
    let session = Session::open(&gw, TOYOTA).await;
    ok(&session.call("dealer_information", json!({})).await);
    let limited = session.call("dealer_information", json!({})).await;
    let payload = tool_error(&limited, "RATE_LIMITED");
    assert_eq!(payload["retryable"], true);
    let ms = payload["details"]["retry_after_ms"].as_u64().expect("hint");
    assert!(ms > 1000, "about a minute: {ms}");
    let seconds: u64 = limited.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert_eq!(seconds, ms.div_ceil(1000));
    let text = limited.body["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.contains(&format!("Retryable after {ms} ms")), "{text}");
    // Another skill has its own quota.
    ok(&session.call("inventory_facets", json!({})).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_api_keys_a_tool_call_needs_one() {
    let config = format!(
        "{ENABLE}auth:\n  mode: api_key\n  keys:\n    - id: partner\n      sha256: {}\n",
        common::sha256_hex("partner-secret-key")
    );
    let gw = common::start_profiles(
        &config,
        &[common::profile_dealer("keyed", "Keyed Motors", "")],
    )
    .await;
    // The handshake and the tool list are public, like the agent card.
    let anonymous = Session::open(&gw, TOYOTA).await;
    assert_eq!(anonymous.tools().await.len(), 1);
    let refused = anonymous.call("dealer_information", json!({})).await;
    let error = rpc_error(&refused, 401, -32000);
    assert_eq!(
        error["data"]["reason"], "UNAUTHENTICATED",
        "{}",
        refused.text
    );
    assert_eq!(
        refused.headers["www-authenticate"],
        "Bearer realm=\"aap-gateway\""
    );

    let wrong = Session::open_with(
        &gw,
        TOYOTA,
        vec![("authorization", "Bearer guess".to_owned())],
    )
    .await;
    let refused = wrong.call("dealer_information", json!({})).await;
    rpc_error(&refused, 401, -32000);
    assert!(!refused.text.contains("guess"), "the key is never echoed");

    let keyed = Session::open_with(
        &gw,
        TOYOTA,
        vec![("authorization", "Bearer partner-secret-key".to_owned())],
    )
    .await;
    assert_eq!(
        ok(&keyed.call("dealer_information", json!({})).await)["name"],
        "Keyed Motors"
    );
}

fn lead(key: &str, consent: bool) -> Value {
    let mut lead = json!({
        "customer": {
            "first_name": "Zofia",
            "last_name": "Wiśniewska-Oyelaran",
            "email": "zofia.mcp-test@example.org",
            "phone": "+14155550142",
            "preferred_contact": "sms"
        },
        "vehicle_of_interest": {"make": "Honda", "model": "Rebel 500"},
        "message": "Does it come in matte grey? Text me at +14155550142.",
        "source_agent": {"name": "tests/mcp.rs"},
        "idempotency_key": key
    });
    if consent {
        lead["consent"] = json!({
            "granted_at": "2026-03-01T12:00:00Z",
            "allowed_channels": ["sms", "email"],
            "consent_text": "Yes, Demo Honda may text or e-mail me about this bike.",
            "scope": ["lead_submission"]
        });
    }
    lead
}

/// A lead needs consent, is delivered once, and replays by its key; nothing the customer wrote
/// reaches the log, at DEBUG.
#[tokio::test]
async fn a_lead_needs_consent_is_delivered_once_and_never_logged() {
    let (logs, _capture) = common::logs::capture();
    let (gw, sims) = demo().await;
    let session = Session::open(&gw, HONDA).await;

    let refused = session.call("lead_submit", lead("mcp-lead-0", false)).await;
    tool_error(&refused, "CONTACT_CONSENT_REQUIRED");

    let first = session.call("lead_submit", lead("mcp-lead-1", true)).await;
    let received = ok(&first).clone();
    assert_eq!(received["status"], "received", "{}", first.text);
    let mails = sims.smtp.messages().len();
    assert_eq!(mails, 1, "delivered to the CRM intake");
    let replay = session.call("lead_submit", lead("mcp-lead-1", true)).await;
    assert_eq!(ok(&replay)["lead_id"], received["lead_id"]);
    assert_eq!(
        sims.smtp.messages().len(),
        mails,
        "the replay is not delivered again"
    );
    let mut changed = lead("mcp-lead-1", true);
    changed["message"] = json!("Actually, the red one.");
    tool_error(
        &session.call("lead_submit", changed).await,
        "IDEMPOTENCY_CONFLICT",
    );

    let log = logs.text();
    assert!(
        log.contains("binding=\"mcp\"") || log.contains("binding=mcp"),
        "{log}"
    );
    for secret in [
        "Zofia",
        "Wiśniewska",
        "zofia.mcp-test",
        "14155550142",
        "matte grey",
        "Demo Honda may text",
    ] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_calls_are_counted_under_their_binding() {
    let (gw, _sims) = demo().await;
    let session = Session::open(&gw, TOYOTA).await;
    ok(&session.call("inventory_facets", json!({})).await);
    tool_error(
        &session
            .call("inventory_vehicle", json!({"stock": "NO-SUCH-STOCK"}))
            .await,
        "VEHICLE_NOT_FOUND",
    );
    let scrape = gw.metrics().await;
    let line = |skill: &str, outcome: &str| {
        scrape.lines().any(|l| {
            l.starts_with("aap_gateway_requests_total")
                && l.contains("binding=\"mcp\"")
                && l.contains(&format!("skill=\"{skill}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
                && l.contains("dealer=\"demo_toyota\"")
                && l.trim_end().ends_with(" 1")
        })
    };
    assert!(line("inventory.facets", "ok"), "{scrape}");
    assert!(line("inventory.vehicle", "VEHICLE_NOT_FOUND"), "{scrape}");
}

#[test]
fn the_mcp_settings_are_checked_at_load() {
    common::assert_settings_problems(
        "bindings:\n  mcp:\n    enabled: true\n    path: /a2a/mcp\n    allowed_origins: [https://app.example.com/path, \"*\"]\n    max_sessions: 0\n    session_idle_timeout: soon\ndealers:\n  - id: d\n    card: { name: D, description: D. }\n",
        &[
            (4, "is the JSON-RPC path `/a2a` or below it"),
            (5, "`https://app.example.com/path` is not an origin"),
            (5, "`*` is not an origin"),
            (6, "must be between 1 and 1000000"),
            (7, "`soon` is not a duration"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn off_unless_enabled_and_the_a2a_bindings_are_unchanged() {
    let gw =
        common::start_profiles("", &[common::profile_dealer("plain", "Plain Motors", "")]).await;
    let reply = post(&gw, TOYOTA, &headers(), &initialize_request("2025-11-25")).await;
    assert_eq!(reply.status, 404);
    let card = gw.card("/.well-known/agent-card.json").await;
    assert!(!card.to_string().contains("/mcp"), "not on the card");
    let a2a = gw
        .post_raw(
            "/a2a",
            &standard_headers(),
            common::send_message(json!({"type": "dealer.information.request"}))
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_eq!(a2a.status, 200);
}
