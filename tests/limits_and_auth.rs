//! Rate limits and API keys through the real gateway: `RATE_LIMITED` in the protocol's own shape
//! (JSON-RPC -32000, HTTP 200, `Retry-After`, `retryable`, `details.retry_after_ms`), separate
//! quotas per skill and per client, forwarded addresses believed only from trusted proxies and
//! only in the header they write (IPv6 per /64),
//! and authentication: 401 with `WWW-Authenticate`, 403 for a key not allowed at the dealer,
//! keys per skill (leads behind keys, search public), the card declaring its security only
//! where keys are required, cards and health public.

mod common;

use common::{EXT, Gateway, Reply, send_message, standard_headers};
use serde_json::{Value, json};

/// Two profile-only dealers (`dealer.information`), `limit_motors` at `/` and `other_motors`
/// at `/other`, under `extra` top-level settings.
async fn gateway(extra: &str) -> Gateway {
    common::start_profiles(
        extra,
        &[
            common::profile_dealer("limit_motors", "Limit Motors", ""),
            common::profile_dealer("other_motors", "Other Motors", "path_prefix: /other"),
        ],
    )
    .await
}

fn info() -> Value {
    json!({ "type": "dealer.information.request" })
}

async fn call(gw: &Gateway, path: &str, extra: &[(&str, &str)]) -> Reply {
    let mut headers = standard_headers();
    headers.extend_from_slice(extra);
    gw.post_raw(
        path,
        &headers,
        send_message(info()).to_string().into_bytes(),
    )
    .await
}

fn ok(reply: &Reply) -> bool {
    reply.body.get("result").is_some()
}

// ---------------------------------------------------------------------------------------------
// Rate limits

#[tokio::test]
async fn a_spent_quota_is_rate_limited_in_the_protocols_shape() {
    let gw = gateway("rate_limit:\n  default: { rate: 1/min, burst: 3 }").await;
    for i in 0..3 {
        assert!(
            ok(&call(&gw, "/a2a", &[]).await),
            "call {i} is within the burst"
        );
    }
    let reply = call(&gw, "/a2a", &[]).await;
    assert_eq!(reply.status, 200, "a JSON-RPC error is HTTP 200");
    assert_eq!(reply.error_code(), -32000, "{}", reply.text);
    assert_eq!(reply.aap_code(), "RATE_LIMITED");
    let error = reply.aap_error();
    assert_eq!(error["retryable"], true);
    let ms = error["details"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    // One call per minute, the burst just spent: the next one in ~60 s.
    assert!((59_000..=60_000).contains(&ms), "retry_after_ms {ms}");
    let retry_after: u64 = reply.headers["retry-after"]
        .to_str()
        .expect("header")
        .parse()
        .expect("seconds");
    assert_eq!(retry_after, 60);
    assert_eq!(reply.error_info()["reason"], "RATE_LIMITED");
    // The extension stays activated on the refusal.
    assert_eq!(reply.headers["a2a-extensions"], EXT);
}

/// `bindings.jsonrpc.rate_limited_status: 429`: the same JSON-RPC body, now with the HTTP status
/// proxies understand; a value other than 200 or 429 is refused where it is written.
#[tokio::test]
async fn rate_limited_status_429_makes_throttling_visible_to_http() {
    let gw = gateway(
        "bindings:\n  jsonrpc: { rate_limited_status: 429 }\nrate_limit:\n  default: { rate: 1/min, burst: 1 }",
    )
    .await;
    let first = call(&gw, "/a2a", &[]).await;
    assert!(ok(&first), "{}", first.text);
    assert_eq!(first.status, 200, "successes stay 200");
    let reply = call(&gw, "/a2a", &[]).await;
    assert_eq!(reply.status, 429, "{}", reply.text);
    assert_eq!(reply.error_code(), -32000, "{}", reply.text);
    assert_eq!(reply.aap_code(), "RATE_LIMITED");
    assert_eq!(reply.aap_error()["retryable"], true);
    assert_eq!(reply.headers["retry-after"], "60");
    assert_eq!(reply.headers["a2a-extensions"], EXT);
    // Other errors keep HTTP 200.
    let other = gw
        .send("/other/a2a", json!({ "type": "inventory.search.request" }))
        .await;
    assert_eq!(other.aap_code(), "UNSUPPORTED_SKILL");
    assert_eq!(other.status, 200);

    common::assert_settings_problems(
        "bindings:\n  jsonrpc:\n    rate_limited_status: 503\ndealers: []\n",
        &[(3, "`503` is not one of 200, 429")],
    );
}

#[tokio::test]
async fn skills_and_dealers_have_their_own_buckets() {
    let gw = gateway(
        "rate_limit:\n  default: { rate: 1/min, burst: 1 }\n  skills:\n    inventory.search: { rate: 1/min, burst: 5 }",
    )
    .await;
    assert!(ok(&call(&gw, "/a2a", &[]).await));
    assert_eq!(call(&gw, "/a2a", &[]).await.aap_code(), "RATE_LIMITED");
    // The other dealer is another bucket.
    assert!(ok(&call(&gw, "/other/a2a", &[]).await));
    // inventory.search is not served here: UNSUPPORTED_SKILL comes before the limit
    // (docs/protocol.md §Order of checks).
    let reply = gw
        .send("/a2a", json!({ "type": "inventory.search.request" }))
        .await;
    assert_eq!(reply.aap_code(), "UNSUPPORTED_SKILL");
}

#[tokio::test]
async fn forwarded_addresses_count_only_from_trusted_proxies() {
    // The test client connects from 127.0.0.1.
    let untrusted = gateway("rate_limit:\n  default: { rate: 1/min, burst: 1 }").await;
    assert!(ok(&call(
        &untrusted,
        "/a2a",
        &[("x-forwarded-for", "203.0.113.1")]
    )
    .await));
    // A forged header from an untrusted peer changes nothing: the same client.
    let reply = call(&untrusted, "/a2a", &[("x-forwarded-for", "203.0.113.2")]).await;
    assert_eq!(reply.aap_code(), "RATE_LIMITED");

    let trusted = gateway(
        "rate_limit:\n  default: { rate: 1/min, burst: 1 }\n  trusted_proxies: [127.0.0.1/32]",
    )
    .await;
    assert!(ok(&call(
        &trusted,
        "/a2a",
        &[("x-forwarded-for", "203.0.113.1")]
    )
    .await));
    // Through our proxy, each forwarded client has its own bucket...
    assert!(ok(&call(
        &trusted,
        "/a2a",
        &[("x-forwarded-for", "203.0.113.2")]
    )
    .await));
    // ...and a client cannot escape by prepending a forged hop.
    let reply = call(
        &trusted,
        "/a2a",
        &[("x-forwarded-for", "198.51.100.99, 203.0.113.2")],
    )
    .await;
    assert_eq!(reply.aap_code(), "RATE_LIMITED");
}

#[tokio::test]
async fn only_the_header_the_proxy_writes_names_the_client() {
    let limits =
        "rate_limit:\n  default: { rate: 1/min, burst: 1 }\n  trusted_proxies: [127.0.0.1/32]";
    // The proxy writes X-Forwarded-For (the default): a client-written `Forwarded` is ignored.
    let xff = gateway(limits).await;
    let via = |forged: &'static str| [("x-forwarded-for", "203.0.113.5"), ("forwarded", forged)];
    assert!(ok(&call(&xff, "/a2a", &via("for=198.51.100.1")).await));
    let reply = call(&xff, "/a2a", &via("for=198.51.100.2")).await;
    assert_eq!(reply.aap_code(), "RATE_LIMITED", "still 203.0.113.5");

    // A proxy that writes `Forwarded`: now X-Forwarded-For is the one ignored.
    let forwarded = gateway(&format!("{limits}\n  client_ip_header: forwarded")).await;
    let via = |forged: &'static str| {
        [
            ("forwarded", "for=203.0.113.5"),
            ("x-forwarded-for", forged),
        ]
    };
    assert!(ok(&call(&forwarded, "/a2a", &via("198.51.100.1")).await));
    let reply = call(&forwarded, "/a2a", &via("198.51.100.2")).await;
    assert_eq!(reply.aap_code(), "RATE_LIMITED", "still 203.0.113.5");

    // IPv6 clients count per /64: another address in the same /64 is the same client.
    let v6 = gateway(limits).await;
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    assert!(ok(&call(&v6, "/a2a", &from("2001:db8:1:2::1")).await));
    let reply = call(&v6, "/a2a", &from("2001:db8:1:2:ffff::9")).await;
    assert_eq!(reply.aap_code(), "RATE_LIMITED", "same /64");
    assert!(
        ok(&call(&v6, "/a2a", &from("2001:db8:1:3::1")).await),
        "another /64"
    );
}

/// The demo's default quota (100/s, burst 200) admits a burst of 150 at once, and it is a real
/// quota: calls faster than the refill are refused with the quota's RATE_LIMITED (not the load
/// shedding's), with the gateway's bucket, not the test, deciding.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_quotas_are_generous_but_real() {
    let gw = std::sync::Arc::new(common::demo().await);
    let started = std::time::Instant::now();
    let mut admitted = 0usize;
    let mut refusal = None;
    // Batches of 16 at once outrun the refill of 100/s on any machine that runs the suite.
    while refusal.is_none() && admitted < 5_000 {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let gw = std::sync::Arc::clone(&gw);
            batch.spawn(async move { gw.send("/a2a", info()).await });
        }
        for reply in batch.join_all().await {
            if ok(&reply) {
                admitted += 1;
            } else {
                refusal.get_or_insert(reply);
            }
        }
        if admitted < 150 {
            assert!(
                refusal.is_none(),
                "refused within the burst of 150: {refusal:?}"
            );
        }
    }
    let refusal = refusal.unwrap_or_else(|| panic!("{admitted} calls and none refused"));
    assert_eq!(refusal.aap_code(), "RATE_LIMITED", "{}", refusal.text);
    assert!(
        refusal.aap_error()["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Rate limit exceeded")),
        "a quota refusal, not load shedding: {}",
        refusal.text
    );
    // At most the burst plus what refilled meanwhile (and the batch in flight).
    let refilled = (started.elapsed().as_secs_f64() * 100.0).ceil() as usize;
    assert!(
        admitted <= 200 + refilled + 16,
        "{admitted} admitted, {refilled} refilled"
    );
}

/// Many clients together cannot push more leads into one dealer than `rate_limit.per_dealer`
/// allows: the fourth client of a dealer whose lead burst is 3 is refused in the protocol's
/// shape, with the dealer bucket's wait, though its own quota is untouched; another dealer and
/// another skill are not held back. (The leads are valid but their consent is dated in the
/// future: `INVALID_CONSENT` shows a lead was admitted past the limits, and no CRM is needed.
/// Leads the schema refuses are not charged to the dealer: tests/leads.rs.)
#[tokio::test(flavor = "multi_thread")]
async fn a_dealers_lead_quota_holds_across_clients() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    let copy = common::DemoCopy::new();
    copy.edit(
        "config/demo.yaml",
        "rate_limit:\n",
        "rate_limit:\n  trusted_proxies: [127.0.0.1/32]\n  per_dealer:\n    lead.submit: { rate: 1/min, burst: 3 }\n",
    );
    let gw = copy.start(common::simulator_vars(&sims)).await;
    async fn lead(gw: &Gateway, path: &str, client: &str) -> Reply {
        let mut headers = standard_headers();
        headers.push(("x-forwarded-for", client));
        let body = send_message(json!({
            "type": "lead.submit.request",
            "customer": { "first_name": "Ana", "last_name": "Ruiz", "email": "ana@example.com" },
            "consent": {
                "granted_at": "2099-01-01T00:00:00Z",
                "allowed_channels": ["email"],
                "consent_text": "I agree.",
                "scope": ["lead_submission"]
            },
            "source_agent": { "name": "quota-test" }
        }));
        gw.post_raw(path, &headers, body.to_string().into_bytes())
            .await
    }
    for client in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
        let reply = lead(&gw, "/a2a", client).await;
        assert_eq!(
            reply.aap_code(),
            "INVALID_CONSENT",
            "{client}: {}",
            reply.text
        );
    }
    let refused = lead(&gw, "/a2a", "203.0.113.4").await;
    assert_eq!(refused.status, 200, "{}", refused.text);
    assert_eq!(refused.aap_code(), "RATE_LIMITED", "{}", refused.text);
    let ms = refused.aap_error()["details"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    // One lead a minute for the dealer, its burst spent: the next in ~60 s.
    assert!(
        (59_000..=60_000).contains(&ms),
        "the dealer bucket's wait: {ms}"
    );
    assert_eq!(refused.headers["retry-after"], "60");
    // Demo Honda's leads have their own bucket; Demo Toyota's search is not a lead.
    let honda = lead(&gw, "/dealers/demo-honda/a2a", "203.0.113.4").await;
    assert_eq!(honda.aap_code(), "INVALID_CONSENT", "{}", honda.text);
    let mut headers = standard_headers();
    headers.push(("x-forwarded-for", "203.0.113.4"));
    let search = gw
        .post_raw(
            "/a2a",
            &headers,
            send_message(
                json!({ "type": "inventory.search.request", "pagination": { "limit": 1 } }),
            )
            .to_string()
            .into_bytes(),
        )
        .await;
    assert!(ok(&search), "{}", search.text);
}

#[test]
fn the_dealer_lead_quota_defaults_to_generous_and_never_below_a_clients() {
    let load = |rate_limit: &str| {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("gateway.yaml");
        let yaml = format!(
            "{rate_limit}\ndealers:{}",
            common::profile_dealer("quiet_motors", "Quiet Motors", "")
        );
        std::fs::write(&path, yaml).expect("write");
        aap_gateway::settings::load_with_env(&path, std::collections::HashMap::new())
            .expect("settings")
            .rate_limit
            .per_dealer
    };
    let lead = aap_gateway::protocol::Skill::LeadSubmit;
    let quota = |count, secs, burst| aap_gateway::settings::Quota {
        count,
        period: std::time::Duration::from_secs(secs),
        burst,
    };
    // Unset, with the shipped kind of lead quota: 600 an hour, burst 60.
    let shipped = load("rate_limit:\n  skills:\n    lead.submit: { rate: 10/min, burst: 3 }");
    assert_eq!(shipped[&lead], quota(600, 3600, 60));
    // Raised to what one client may send.
    let generous = load("rate_limit:\n  skills:\n    lead.submit: { rate: 5/s, burst: 100 }");
    assert_eq!(generous[&lead], quota(5, 1, 100));
    // Written: as written, for any skill.
    let written = load(
        "rate_limit:\n  per_dealer:\n    lead.submit: { rate: 100/h, burst: 10 }\n    inventory.search: { rate: 50/s, burst: 100 }",
    );
    assert_eq!(written[&lead], quota(100, 3600, 10));
    assert_eq!(
        written[&aap_gateway::protocol::Skill::InventorySearch],
        quota(50, 1, 100)
    );
    common::assert_settings_problems(
        "rate_limit:\n  per_dealer:\n    lead.submitt: { rate: 1/h, burst: 1 }\n    lead.submit: { rate: lots, burst: 1 }\ndealers:\n  - id: d\n    card: { name: D, description: D. }\n",
        &[
            (3, "`lead.submitt` is not an AAP skill"),
            (4, "`lots` is not a rate like 10/s"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Authentication

fn keys_config() -> String {
    format!(
        "auth:\n  mode: api_key\n  keys:\n    - id: partner\n      sha256: {}\n    - id: limit-only\n      sha256: {}\n      dealers: [limit_motors]\n      quota: {{ rate: 1/min, burst: 2 }}\n",
        common::sha256_hex("partner-secret-key"),
        common::sha256_hex("limit-only-key"),
    )
}

#[tokio::test]
async fn a_missing_or_unknown_key_is_401_with_a_challenge() {
    let gw = gateway(&keys_config()).await;
    for headers in [
        vec![],
        vec![("x-api-key", "not-a-key")],
        vec![("authorization", "Bearer nope")],
    ] {
        let reply = call(&gw, "/a2a", &headers).await;
        assert_eq!(reply.status, 401, "{headers:?}: {}", reply.text);
        assert_eq!(
            reply.headers["www-authenticate"],
            "Bearer realm=\"aap-gateway\""
        );
        // Still a JSON-RPC error body.
        assert_eq!(reply.body["jsonrpc"], "2.0");
        assert_eq!(reply.body["id"], "req-1");
        assert_eq!(reply.error_code(), -32000);
        assert_eq!(reply.error_info()["reason"], "UNAUTHENTICATED");
        assert!(!reply.text.contains("not-a-key"), "the key is never echoed");
    }
}

#[tokio::test]
async fn a_valid_key_works_as_bearer_or_x_api_key() {
    let gw = gateway(&keys_config()).await;
    assert!(ok(&call(
        &gw,
        "/a2a",
        &[("authorization", "Bearer partner-secret-key")]
    )
    .await));
    assert!(ok(&call(
        &gw,
        "/other/a2a",
        &[("x-api-key", "partner-secret-key")]
    )
    .await));
}

#[tokio::test]
async fn a_key_outside_its_dealers_is_403() {
    let gw = gateway(&keys_config()).await;
    assert!(ok(
        &call(&gw, "/a2a", &[("x-api-key", "limit-only-key")]).await
    ));
    let reply = call(&gw, "/other/a2a", &[("x-api-key", "limit-only-key")]).await;
    assert_eq!(reply.status, 403, "{}", reply.text);
    assert_eq!(reply.error_info()["reason"], "PERMISSION_DENIED");
}

#[tokio::test]
async fn a_key_carries_its_own_quota_and_is_the_client() {
    let gw = gateway(&keys_config()).await;
    let key = [("x-api-key", "limit-only-key")];
    assert!(ok(&call(&gw, "/a2a", &key).await));
    assert!(ok(&call(&gw, "/a2a", &key).await));
    assert_eq!(call(&gw, "/a2a", &key).await.aap_code(), "RATE_LIMITED");
    // Another key from the same address is another client with the default quota.
    assert!(ok(&call(
        &gw,
        "/a2a",
        &[("x-api-key", "partner-secret-key")]
    )
    .await));
}

#[tokio::test]
async fn the_card_declares_security_only_when_keys_are_required() {
    let open = gateway("").await;
    let card = open.card("/.well-known/agent-card.json").await;
    assert!(card.get("securitySchemes").is_none());
    assert!(card.get("securityRequirements").is_none());

    let closed = gateway(&keys_config()).await;
    // The card and the health probes stay public.
    let response = closed
        .client()
        .get(closed.url("/.well-known/agent-card.json"))
        .send()
        .await
        .expect("card");
    assert_eq!(response.status(), 200);
    let card: Value = response.json().await.expect("json");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"],
        json!({ "location": "header", "name": "X-API-Key",
                "description": "The same API key, in the X-API-Key header." })
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{ "schemes": { "bearer": { "list": [] } } }, { "schemes": { "apiKey": { "list": [] } } }])
    );
    let health = closed
        .client()
        .get(closed.admin_url("/healthz"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200);
}

/// The demo (search on Toyota's REST DMS) with `auth` appended: keys for leads only.
async fn leads_need_a_key() -> (Gateway, aap_sim::Simulators) {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    let copy = common::DemoCopy::new();
    copy.append(
        "config/demo.yaml",
        &format!(
            "auth:\n  mode: none\n  skills:\n    lead.submit: api_key\n  keys:\n    - id: partner\n      sha256: {}\n",
            common::sha256_hex("partner-secret-key")
        ),
    );
    let gw = copy.start(common::simulator_vars(&sims)).await;
    (gw, sims)
}

async fn skill_call(gw: &Gateway, data: Value, extra: &[(&str, &str)]) -> Reply {
    let mut headers = standard_headers();
    headers.extend_from_slice(extra);
    gw.post_raw(
        "/a2a",
        &headers,
        send_message(data).to_string().into_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn leads_can_need_a_key_while_search_stays_public() {
    let (gw, _sims) = leads_need_a_key().await;
    let search = json!({ "type": "inventory.search.request", "pagination": { "limit": 1 } });
    // An incomplete lead: past authentication it fails the schema, which shows the key worked.
    let lead = json!({ "type": "lead.submit.request" });

    let anonymous_search = skill_call(&gw, search.clone(), &[]).await;
    assert!(ok(&anonymous_search), "{}", anonymous_search.text);
    let anonymous_lead = skill_call(&gw, lead.clone(), &[]).await;
    assert_eq!(anonymous_lead.status, 401, "{}", anonymous_lead.text);
    assert_eq!(anonymous_lead.error_info()["reason"], "UNAUTHENTICATED");

    let key = [("authorization", "Bearer partner-secret-key")];
    let keyed_lead = skill_call(&gw, lead, &key).await;
    assert_eq!(keyed_lead.status, 200, "{}", keyed_lead.text);
    assert_eq!(keyed_lead.aap_code(), "SCHEMA_VALIDATION_FAILED");
    // A key sent to a public skill is checked too: a wrong one is reported, not ignored.
    let keyed_search = skill_call(&gw, search.clone(), &key).await;
    assert!(ok(&keyed_search), "{}", keyed_search.text);
    let wrong_key = skill_call(&gw, search, &[("x-api-key", "not-a-key")]).await;
    assert_eq!(wrong_key.status, 401, "{}", wrong_key.text);

    // The card: both schemes, no agent-wide requirement (anonymous access is allowed), and
    // the requirement on lead.submit alone.
    let card = gw.card("/.well-known/agent-card.json").await;
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    assert!(card.get("securityRequirements").is_none(), "{card}");
    let requirements: Vec<(&str, &Value)> = card["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap_or_default(),
                &s["securityRequirements"],
            )
        })
        .collect();
    for (id, required) in requirements {
        if id == "lead.submit" {
            assert_eq!(
                required,
                &json!([{ "schemes": { "bearer": { "list": [] } } }, { "schemes": { "apiKey": { "list": [] } } }]),
                "{id}"
            );
        } else {
            assert!(required.is_null(), "{id} is public: {required}");
        }
    }
}

#[test]
fn bad_per_skill_auth_is_located() {
    let dealer = "dealers:\n  - id: d\n    card: { name: D, description: D. }\n";
    common::assert_settings_problems(
        &format!(
            "auth:\n  mode: none\n  skills:\n    lead.submit: keys\n    lead.teleport: api_key\n{dealer}"
        ),
        &[
            (4, "`keys` is not one of none, api_key"),
            (5, "`lead.teleport` is not an AAP skill"),
        ],
    );
    // A skill that needs a key needs keys.
    common::assert_settings_problems(
        &format!("auth:\n  skills:\n    lead.submit: api_key\n{dealer}"),
        &[(1, "need at least one key (`keys` or `keys_file`)")],
    );
}

#[test]
fn bad_limit_and_auth_settings_are_located() {
    common::assert_settings_problems(
        "rate_limit:\n  backend: memcached\n  default: { rate: often, burst: 0 }\n  trusted_proxies: [not-an-ip]\n  skills:\n    inventory.teleport: { rate: 1/s, burst: 1 }\nauth:\n  mode: api_key\n  keys:\n    - id: x\n      sha256: abc\n      dealers: [nobody]\ndealers:\n  - id: d\n    card: { name: D, description: D. }\n",
        &[
            (2, "`memcached` is not a backend; expected memory or redis"),
            (3, "`often` is not a rate like 10/s, 600/min or 5/10s"),
            (4, "`not-an-ip` is not an address or CIDR like 10.0.0.0/8"),
            (
                6,
                "`inventory.teleport` is not an AAP skill; use one of dealer.information, \
                 inventory.facets, inventory.search, inventory.vehicle, lead.submit",
            ),
            (11, "must be the 64 hex digits of the key's SHA-256"),
        ],
    );
}

/// Settings are printed (`{:?}`) in diagnostics; the Redis URL's password never is.
#[test]
fn printed_settings_hide_the_redis_password() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gateway.yaml");
    let yaml = format!(
        "rate_limit:\n  backend: redis\nidempotency:\n  backend: redis\ndealers:{}",
        common::profile_dealer("quiet_motors", "Quiet Motors", "")
    );
    std::fs::write(&path, yaml).expect("write");
    let env = std::collections::HashMap::from([(
        "AAP_GATEWAY__RATE_LIMIT__REDIS_URL".to_owned(),
        "redis://gw:s3cr3t-pw@cache.internal:6380/2".to_owned(),
    )]);
    let settings = aap_gateway::settings::load_with_env(&path, env).expect("settings");
    let printed = format!("{settings:?}");
    assert!(!printed.contains("s3cr3t-pw"), "{printed}");
    assert_eq!(
        printed.matches("redis://***@cache.internal:6380/2").count(),
        2,
        "both stores, redacted: {printed}"
    );
    // The settings themselves keep the real URL.
    assert!(matches!(
        &settings.rate_limit.backend,
        aap_gateway::settings::LimitBackend::Redis { url } if url.contains("s3cr3t-pw")
    ));
}
