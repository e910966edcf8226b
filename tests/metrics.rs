//! `/metrics` on the admin listener: after a known mix of requests the scrape holds exactly
//! those counts, under the names and labels of docs/operations.md §Metrics.

mod common;

use aap_sim::inventory::{self, Status};
use aap_sim::sim::Mode;
use common::{Gateway, standard_headers};
use serde_json::{Value, json};

async fn scrape(gw: &Gateway) -> String {
    let resp = gw
        .client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(resp.status().as_u16(), 200);
    let content_type = resp.headers()["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    resp.text().await.expect("body")
}

use common::sample;

fn requests(dealer: &str, skill: &str, binding: &str, outcome: &str) -> String {
    format!(
        "aap_gateway_requests_total{{dealer=\"{dealer}\",skill=\"{skill}\",binding=\"{binding}\",outcome=\"{outcome}\"}}"
    )
}

fn lead(key: &str, message: &str) -> Value {
    json!({
        "type": "lead.submit.request",
        "customer": { "first_name": "Ann", "last_name": "Lee", "email": "ann@example.com", "preferred_contact": "email" },
        "consent": { "granted_at": "2026-04-30T10:16:00Z", "allowed_channels": ["email"], "consent_text": "I agree.", "scope": ["lead_submission"] },
        "message": message,
        "source_agent": { "name": "metrics-test" },
        "idempotency_key": key
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_known_mix_of_requests_gives_exact_counts() {
    let (gw, sims) = common::demo_with_simulators().await;
    let info = json!({ "type": "dealer.information.request" });
    for _ in 0..3 {
        gw.send("/a2a", info.clone()).await;
    }
    gw.send("/dealers/demo-honda/a2a", info.clone()).await;
    // Served from Demo Honda's cached CSV feed.
    gw.send(
        "/dealers/demo-honda/a2a",
        json!({ "type": "inventory.search.request" }),
    )
    .await;
    gw.send("/a2a", json!({ "type": "inventory.teleport.request" }))
        .await;
    let unknown = inventory::unknown_vin(&inventory::toyota_group());
    for _ in 0..2 {
        gw.send(
            "/a2a",
            json!({ "type": "inventory.vehicle.request", "vin": unknown }),
        )
        .await;
    }
    let vin = inventory::toyota_group()
        .into_iter()
        .find(|v| v.status == Status::InStock)
        .expect("unit")
        .vin;
    gw.send(
        "/a2a",
        json!({ "type": "inventory.vehicle.request", "vin": vin }),
    )
    .await;
    // A lead, its replay, and a conflicting reuse of the key.
    gw.send("/a2a", lead("m-1", "Hello")).await;
    gw.send("/a2a", lead("m-1", "Hello")).await;
    gw.send("/a2a", lead("m-1", "Changed")).await;
    // HTTP+JSON: one success, one without A2A-Version.
    let body = json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": [ { "data": info } ] } });
    gw.post_raw(
        "/a2a/message:send",
        &standard_headers(),
        body.to_string().into_bytes(),
    )
    .await;
    gw.post_raw(
        "/a2a/message:send",
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    // The DMS fails once.
    sims.dms.set_mode(Mode::Fail, 0);
    gw.send("/a2a", json!({ "type": "inventory.search.request" }))
        .await;

    let text = scrape(&gw).await;
    let expect = |series: String, value: f64| {
        assert_eq!(sample(&text, &series), Some(value), "{series}\n{text}");
    };
    // (dealer, skill, binding, outcome) → requests counted.
    let toyota = "demo_toyota";
    for (dealer, skill, binding, outcome, count) in [
        (toyota, "dealer.information", "jsonrpc", "ok", 3.0),
        ("demo_honda", "dealer.information", "jsonrpc", "ok", 1.0),
        (toyota, "unknown", "jsonrpc", "UNSUPPORTED_SKILL", 1.0),
        (
            toyota,
            "inventory.vehicle",
            "jsonrpc",
            "VEHICLE_NOT_FOUND",
            2.0,
        ),
        (toyota, "inventory.vehicle", "jsonrpc", "ok", 1.0),
        (toyota, "lead.submit", "jsonrpc", "ok", 2.0),
        (
            toyota,
            "lead.submit",
            "jsonrpc",
            "IDEMPOTENCY_CONFLICT",
            1.0,
        ),
        (toyota, "dealer.information", "http_json", "ok", 1.0),
        (toyota, "none", "http_json", "VERSION_NOT_SUPPORTED", 1.0),
        (toyota, "inventory.search", "jsonrpc", "INTERNAL_ERROR", 1.0),
    ] {
        expect(requests(dealer, skill, binding, outcome), count);
    }
    expect(
        "aap_gateway_request_duration_seconds_count{dealer=\"demo_toyota\",skill=\"dealer.information\",binding=\"jsonrpc\"}".to_owned(),
        3.0,
    );
    expect(
        "aap_gateway_idempotency_replays_total{dealer=\"demo_toyota\"}".to_owned(),
        1.0,
    );
    expect(
        "aap_gateway_idempotency_conflicts_total{dealer=\"demo_toyota\"}".to_owned(),
        1.0,
    );
    // Vehicle detail comes from the SOAP DMS: three calls answered (the unknown VIN as a 4xx
    // fault), and the REST DMS's failure counted as an error.
    let soap_calls: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("aap_gateway_upstream_duration_seconds_count{dealer=\"demo_toyota\",upstream=\"dms_soap\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(soap_calls, 3.0, "{text}");
    assert!(
        sample(
            &text,
            "aap_gateway_upstream_errors_total{dealer=\"demo_toyota\",upstream=\"dms\",kind=\"status\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    expect(
        "aap_gateway_build_info{version=\"".to_owned() + env!("CARGO_PKG_VERSION") + "\"}",
        1.0,
    );
    // Demo Honda's CSV feed is cached: its age is a gauge.
    assert!(
        sample(
            &text,
            "aap_gateway_feed_cache_age_seconds{dealer=\"demo_honda\"}"
        )
        .is_some(),
        "{text}"
    );
}

#[tokio::test]
async fn rate_limited_calls_are_counted_per_dealer_and_skill() {
    let gw = common::start_profiles(
        "rate_limit:\n  default: { rate: 1/min, burst: 2 }",
        &[common::profile_dealer("tight_motors", "Tight Motors", "")],
    )
    .await;
    for _ in 0..5 {
        gw.send("/a2a", json!({ "type": "dealer.information.request" }))
            .await;
    }
    let text = scrape(&gw).await;
    assert_eq!(
        sample(
            &text,
            "aap_gateway_rate_limited_total{dealer=\"tight_motors\",skill=\"dealer.information\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &requests("tight_motors", "dealer.information", "jsonrpc", "ok")
        ),
        Some(2.0)
    );
}

/// `aap_gateway_upstream_breaker_open` shows each dealer system's breaker: 0 while calls go
/// through, 1 from the failure that opens it until a trial call succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn the_breaker_gauge_follows_a_dealer_system_down_and_back() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    let files = common::DemoCopy::new();
    files.set_key(
        "mappings/demo-toyota/upstreams.yaml",
        "circuit_breaker",
        "{ failures: 2, cool_down: 300ms }",
    );
    let gw = files.start(common::simulator_vars(&sims)).await;
    let series = "aap_gateway_upstream_breaker_open{dealer=\"demo_toyota\",upstream=\"dms\"}";
    let search = json!({ "type": "inventory.search.request", "pagination": { "limit": 2 } });
    assert_eq!(sample(&scrape(&gw).await, series), Some(0.0));

    sims.dms.set_mode(Mode::Fail, 0);
    common::until_the_dms_breaker_opens(&gw, &sims, "/a2a", &search).await;
    assert_eq!(sample(&scrape(&gw).await, series), Some(1.0));

    sims.dms.set_mode(Mode::Normal, 0);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let reply = gw.send("/a2a", search).await;
    assert!(
        reply.body.get("result").is_some(),
        "the trial call succeeds: {}",
        reply.text
    );
    assert_eq!(sample(&scrape(&gw).await, series), Some(0.0));
}
