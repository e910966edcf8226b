//! Upstream faults end to end: the real gateway in front of the legacy simulators switched into
//! their failure modes. Every fault must answer `INTERNAL_ERROR` (-32603) with an `aap.error`
//! marked `retryable: true`, within the configured timeouts, and the gateway must keep serving:
//! once the simulator behaves again, the same call succeeds.
//!
//! To keep the suite short the gateway runs on a copy of the demo configuration whose upstreams
//! have small timeouts (`connect: 300ms, request: 500ms`) and one attempt; one test keeps the
//! shipped settings (3 s, 2 attempts) to check the bound there too.

mod common;

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::sim::Mode;
use common::{DemoCopy, Gateway, Reply};
use serde_json::{Value, json};

const TOYOTA: &str = "/a2a";
const HONDA: &str = "/dealers/demo-honda/a2a";

/// The short timeouts of the copy: one try of at most 500 ms.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// What a failing call may take at most under the copy's settings (timeout plus slack for a
/// loaded CI machine).
const BOUND: Duration = Duration::from_millis(2500);

fn search() -> Value {
    json!({ "type": "inventory.search.request", "filters": { "make": ["Toyota"] }, "pagination": { "limit": 5 } })
}

fn vehicle(vin: &str) -> Value {
    json!({ "type": "inventory.vehicle.request", "vin": vin })
}

fn facets() -> Value {
    // Narrow, so the derived facets' DMS scan stays small.
    json!({ "type": "inventory.facets.request", "filters": { "make": ["Subaru"] } })
}

/// A loopback port nothing listens on.
async fn dead_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

struct Copy {
    feed_refresh: &'static str,
    feed_max_stale: &'static str,
    dms_url: Option<String>,
    soap_dms_url: Option<String>,
    feed_url: Option<String>,
    /// `circuit_breaker` of every Demo Toyota upstream, when not the shipped one.
    toyota_breaker: Option<&'static str>,
}

impl Default for Copy {
    fn default() -> Self {
        Copy {
            feed_refresh: "5m",
            feed_max_stale: "1h",
            dms_url: None,
            soap_dms_url: None,
            feed_url: None,
            toyota_breaker: None,
        }
    }
}

/// The gateway on a copy of the demo with short upstream timeouts and one attempt.
async fn start(sims: &Simulators, copy: Copy) -> Gateway {
    let files = DemoCopy::new();
    for dealer in ["demo-toyota", "demo-honda"] {
        let upstreams = format!("mappings/{dealer}/upstreams.yaml");
        files.set_key(&upstreams, "timeouts", "{ connect: 300ms, request: 500ms }");
        files.set_key(&upstreams, "retries", "{ attempts: 1, backoff: 50ms }");
    }
    // With a refresh every few hundred milliseconds, failing background refreshes would open the
    // feed's circuit breaker (5 failures, 30 s by default) within a second and hide the
    // behaviour under test; a production refresh (minutes) takes far longer to get there.
    // The demo feed is ~150 KB; 1 MiB makes the simulator's 8 MiB `huge` reply a fault for
    // the feed too (the shipped 16 MiB would accept it).
    files.edit(
        "mappings/demo-honda/upstreams.yaml",
        "  max_response_bytes: 16777216\n",
        "  max_response_bytes: 1048576\n  circuit_breaker: { failures: 1000, cool_down: 1s }\n",
    );
    // Every call must reach the DMS under test: the scan cache would answer derived facets
    // from a scan made before the fault.
    files.append(
        "mappings/demo-toyota/inventory.search.yaml",
        "scan_cache: 0s\n",
    );
    files.set_key(
        "mappings/demo-honda/feed.yaml",
        "refresh",
        copy.feed_refresh,
    );
    files.set_key(
        "mappings/demo-honda/feed.yaml",
        "max_stale",
        copy.feed_max_stale,
    );
    if let Some(breaker) = copy.toyota_breaker {
        files.set_key(
            "mappings/demo-toyota/upstreams.yaml",
            "circuit_breaker",
            breaker,
        );
    }
    let mut vars: HashMap<String, String> = common::simulator_vars(sims);
    if let Some(url) = copy.dms_url {
        vars.insert("DMS_URL".into(), url);
    }
    if let Some(url) = copy.soap_dms_url {
        vars.insert("SOAP_DMS_URL".into(), url);
    }
    if let Some(url) = copy.feed_url {
        vars.insert("FEED_URL".into(), url);
    }
    files.start(vars).await
}

/// The gateway for Demo Toyota tests: the feed points at a dead port so no feed load costs
/// time (Demo Honda is not used there).
async fn start_toyota(sims: &Simulators) -> Gateway {
    let feed_url = format!("http://127.0.0.1:{}", dead_port().await);
    start(
        sims,
        Copy {
            feed_url: Some(feed_url),
            ..Copy::default()
        },
    )
    .await
}

async fn timed(gw: &Gateway, path: &str, data: Value) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = gw.send(path, data).await;
    (reply, started.elapsed())
}

/// INTERNAL_ERROR, -32603, retryable, nothing of the cause exposed; the call's own id.
fn assert_internal_error(reply: &Reply, context: &str) {
    let leaks = [
        "ORA-",
        "127.0.0.1",
        "timed out",
        "dms",
        "feed",
        "<html",
        "DealerCost",
    ];
    reply.assert_internal_error(context, &leaks);
    assert_eq!(reply.body["id"], "req-1", "{context}");
}

fn assert_success(reply: &Reply, kind: &str, context: &str) {
    assert!(
        reply.body.get("error").is_none(),
        "{context}: the gateway did not recover: {}",
        reply.text
    );
    assert_eq!(reply.payload()["type"], kind, "{context}: {}", reply.text);
}

/// Each Demo Toyota skill fails cleanly under `mode`, within `bound`, and succeeds again once
/// the DMS is back to normal.
async fn toyota_fault(mode: Mode, delay_ms: u64, min: Duration) {
    let sims = Simulators::start().await.expect("simulators");
    let gw = start_toyota(&sims).await;
    let vin = sims.dms.fixtures()["in_stock_sample"]["vin"]
        .as_str()
        .expect("sample vin")
        .to_owned();
    let calls = [
        (search(), "inventory.search.response"),
        (vehicle(&vin), "inventory.vehicle.response"),
        (facets(), "inventory.facets.response"),
    ];
    // Healthy first: the failure below is the fault's doing.
    for (data, kind) in &calls {
        let reply = gw.send(TOYOTA, data.clone()).await;
        assert_success(&reply, kind, "before the fault");
    }
    // The DMS in both its interfaces: REST (search, facets) and SOAP (vehicle detail).
    sims.dms.set_mode(mode, delay_ms);
    sims.soap_dms.set_mode(mode, delay_ms);
    let before = (sims.dms.received().len(), sims.soap_dms.received().len());
    for (data, _) in &calls {
        let context = format!("{mode:?} {}", data["type"]);
        let (reply, elapsed) = timed(&gw, TOYOTA, data.clone()).await;
        assert_internal_error(&reply, &context);
        assert!(
            elapsed < BOUND,
            "{context}: answered after {elapsed:?}, beyond the configured timeout"
        );
        assert!(elapsed >= min, "{context}: answered after only {elapsed:?}");
    }
    assert!(
        sims.dms.received().len() > before.0 && sims.soap_dms.received().len() > before.1,
        "{mode:?}: both DMS interfaces were really called"
    );
    sims.dms.set_mode(Mode::Normal, 0);
    sims.soap_dms.set_mode(Mode::Normal, 0);
    for (data, kind) in &calls {
        let reply = gw.send(TOYOTA, data.clone()).await;
        assert_success(&reply, kind, &format!("after {mode:?}"));
    }
    // Static skills never depended on the DMS.
    let reply = gw
        .send(TOYOTA, json!({ "type": "dealer.information.request" }))
        .await;
    assert_success(&reply, "dealer.information.response", "dealer.information");
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_hang_times_out_as_a_retryable_internal_error() {
    toyota_fault(Mode::Hang, 0, REQUEST_TIMEOUT - Duration::from_millis(50)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_slower_than_the_timeout_is_a_retryable_internal_error() {
    toyota_fault(
        Mode::Slow,
        1500,
        REQUEST_TIMEOUT - Duration::from_millis(50),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_http_500_is_a_retryable_internal_error() {
    toyota_fault(Mode::Fail, 0, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_garbage_body_is_a_retryable_internal_error() {
    toyota_fault(Mode::Garbage, 0, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_reply_over_max_response_bytes_is_a_retryable_internal_error() {
    toyota_fault(Mode::Huge, 0, Duration::ZERO).await;
}

/// A slow DMS within the timeout is not a fault.
#[tokio::test(flavor = "multi_thread")]
async fn dms_slow_within_the_timeout_still_answers() {
    let sims = Simulators::start().await.expect("simulators");
    let gw = start_toyota(&sims).await;
    sims.dms.set_mode(Mode::Slow, 150);
    let (reply, elapsed) = timed(&gw, TOYOTA, search()).await;
    assert_success(&reply, "inventory.search.response", "slow 150 ms");
    assert!(elapsed >= Duration::from_millis(150));
}

#[tokio::test(flavor = "multi_thread")]
async fn dms_connection_refused_is_a_retryable_internal_error() {
    let sims = Simulators::start().await.expect("simulators");
    let dead = format!("http://127.0.0.1:{}", dead_port().await);
    let gw = start(
        &sims,
        Copy {
            dms_url: Some(dead.clone()),
            soap_dms_url: Some(dead),
            feed_url: Some(format!("http://127.0.0.1:{}", dead_port().await)),
            ..Copy::default()
        },
    )
    .await;
    for data in [search(), vehicle("4T1BZ1HK8SU999999"), facets()] {
        let context = format!("refused {}", data["type"]);
        let (reply, elapsed) = timed(&gw, TOYOTA, data).await;
        assert_internal_error(&reply, &context);
        assert!(elapsed < BOUND, "{context}: {elapsed:?}");
    }
    // The gateway keeps serving what does not need the DMS.
    let reply = gw
        .send(TOYOTA, json!({ "type": "dealer.information.request" }))
        .await;
    assert_success(&reply, "dealer.information.response", "after refused");
    let reply = gw.send(TOYOTA, search()).await;
    assert_internal_error(&reply, "still refused");
}

/// A DMS that keeps failing gets its rest (the circuit breaker opens), and buyers are told how
/// long: `details.retry_after_ms` of the `INTERNAL_ERROR` and `Retry-After` on both bindings
/// (whole seconds, rounded up), at most the cool-down.
#[tokio::test(flavor = "multi_thread")]
async fn a_resting_dms_gives_buyers_the_rest_of_its_cool_down() {
    let sims = Simulators::start().await.expect("simulators");
    let gw = start(
        &sims,
        Copy {
            feed_url: Some(format!("http://127.0.0.1:{}", dead_port().await)),
            toyota_breaker: Some("{ failures: 2, cool_down: 20s }"),
            ..Copy::default()
        },
    )
    .await;
    sims.dms.set_mode(Mode::Fail, 0);
    for _ in 0..2 {
        let reply = gw.send(TOYOTA, search()).await;
        assert_internal_error(&reply, "failing");
        assert!(reply.aap_error().get("details").is_none(), "{}", reply.text);
        assert!(reply.headers.get("retry-after").is_none());
    }
    let sent = sims.dms.received().len();
    let reply = gw.send(TOYOTA, search()).await;
    assert_internal_error(&reply, "resting");
    assert_eq!(sims.dms.received().len(), sent, "fail fast: nothing sent");
    let ms = reply.aap_error()["details"]["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retry_after_ms: {}", reply.text));
    assert!((19_000..=20_000).contains(&ms), "{ms}");
    assert_eq!(reply.headers["retry-after"], "20", "{:?}", reply.headers);
    // HTTP+JSON: 500 with the same hint.
    let params = common::send_message(search())["params"].to_string();
    let rest = gw
        .post_raw(
            "/a2a/message:send",
            &common::standard_headers(),
            params.into_bytes(),
        )
        .await;
    assert_eq!(rest.status, 500, "{}", rest.text);
    assert_eq!(rest.headers["retry-after"], "20", "{:?}", rest.headers);
    let details = rest.body["error"]["details"].as_array().expect("details");
    let aap = details
        .iter()
        .find(|d| d["type"] == "aap.error")
        .expect("aap.error");
    assert_eq!(aap["retryable"], true);
    assert!(
        aap["details"]["retry_after_ms"]
            .as_u64()
            .is_some_and(|ms| ms <= 20_000)
    );
}

/// The shipped demo settings (request timeout 3 s, 2 attempts): a hanging DMS is answered
/// within both tries plus backoff, well under 8 s.
#[tokio::test(flavor = "multi_thread")]
async fn shipped_demo_timeouts_bound_a_hanging_dms() {
    let (gw, sims) = common::demo_with_simulators().await;
    sims.dms.set_mode(Mode::Hang, 0);
    let (reply, elapsed) = timed(&gw, TOYOTA, search()).await;
    assert_internal_error(&reply, "hang (demo settings)");
    assert!(
        elapsed < Duration::from_secs(8),
        "answered after {elapsed:?}: beyond 2 × 3 s + backoff"
    );
    assert!(
        elapsed >= Duration::from_millis(2900),
        "answered after only {elapsed:?}"
    );
    sims.dms.set_mode(Mode::Normal, 0);
    let reply = gw.send(TOYOTA, search()).await;
    assert_success(
        &reply,
        "inventory.search.response",
        "after hang (demo settings)",
    );
}

// ---------------------------------------------------------------------------------------------
// Feed mode (Demo Honda)

/// The stock number of a Demo Honda unit that is in stock.
static HONDA_IN_STOCK: LazyLock<String> = LazyLock::new(|| {
    aap_sim::inventory::honda_powersports()
        .into_iter()
        .find(|u| u.status == aap_sim::inventory::Status::InStock)
        .map(|u| u.stock_number)
        .expect("an in-stock unit")
});

fn honda_calls() -> [(Value, &'static str); 3] {
    [
        (
            json!({ "type": "inventory.search.request", "filters": { "vehicle_type": ["motorcycle"] }, "pagination": { "limit": 5 } }),
            "inventory.search.response",
        ),
        (
            json!({ "type": "inventory.facets.request" }),
            "inventory.facets.response",
        ),
        (
            json!({ "type": "inventory.vehicle.request", "stock": *HONDA_IN_STOCK }),
            "inventory.vehicle.response",
        ),
    ]
}

/// The feed fails on the very first load: nothing cached, so every feed skill answers
/// INTERNAL_ERROR (retryable); once the feed is back the next call loads it and succeeds.
async fn feed_first_load_fault(mode: Mode, delay_ms: u64) {
    let sims = Simulators::start().await.expect("simulators");
    sims.feed.set_mode(mode, delay_ms);
    let gw = start(&sims, Copy::default()).await;
    for (data, _) in honda_calls() {
        let context = format!("first load {mode:?} {}", data["type"]);
        let (reply, elapsed) = timed(&gw, HONDA, data).await;
        assert_internal_error(&reply, &context);
        assert!(elapsed < BOUND, "{context}: {elapsed:?}");
    }
    assert!(
        !sims.feed.received().is_empty(),
        "the feed was really called"
    );
    // Demo Toyota is unaffected.
    let reply = gw.send(TOYOTA, search()).await;
    assert_success(&reply, "inventory.search.response", "the other dealer");
    sims.feed.set_mode(Mode::Normal, 0);
    for (data, kind) in honda_calls() {
        let reply = gw.send(HONDA, data).await;
        assert_success(&reply, kind, &format!("after first-load {mode:?}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn feed_failing_its_first_load_is_a_retryable_internal_error() {
    feed_first_load_fault(Mode::Fail, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn feed_hanging_on_its_first_load_is_a_retryable_internal_error() {
    feed_first_load_fault(Mode::Hang, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn feed_garbage_on_its_first_load_is_a_retryable_internal_error() {
    feed_first_load_fault(Mode::Garbage, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn feed_over_max_response_bytes_on_its_first_load_is_a_retryable_internal_error() {
    feed_first_load_fault(Mode::Huge, 0).await;
}

/// After a good load, a failing feed does not take the dealer down: the stale copy is served
/// (within `max_stale`) while refreshes fail, whatever the failure.
#[tokio::test(flavor = "multi_thread")]
async fn feed_failing_after_a_good_load_serves_the_stale_copy() {
    let sims = Simulators::start().await.expect("simulators");
    let gw = start(
        &sims,
        Copy {
            feed_refresh: "200ms",
            ..Copy::default()
        },
    )
    .await;
    let mut good = Vec::new();
    for (data, kind) in honda_calls() {
        let reply = gw.send(HONDA, data).await;
        assert_success(&reply, kind, "good load");
        good.push(reply.payload()["data"].clone());
    }
    // (`huge` is covered on a first load; here it would only cost time.)
    for (mode, delay) in [(Mode::Fail, 0), (Mode::Garbage, 0), (Mode::Hang, 0)] {
        sims.feed.set_mode(mode, delay);
        let before = sims.feed.received().len();
        // Past `refresh`: the copy is stale and refreshes (background and on demand) fail.
        tokio::time::sleep(Duration::from_millis(700)).await;
        for ((data, kind), want) in honda_calls().into_iter().zip(&good) {
            let context = format!("stale under {mode:?} {}", data["type"]);
            let (reply, elapsed) = timed(&gw, HONDA, data).await;
            assert_success(&reply, kind, &context);
            assert_eq!(
                &reply.payload()["data"],
                want,
                "{context}: not the cached copy"
            );
            assert!(elapsed < BOUND, "{context}: {elapsed:?}");
        }
        assert!(
            sims.feed.received().len() > before,
            "{mode:?}: refreshes were attempted while stale"
        );
    }
    sims.feed.set_mode(Mode::Normal, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (data, kind) in honda_calls() {
        let reply = gw.send(HONDA, data).await;
        assert_success(&reply, kind, "after recovery");
    }
}

/// Past `max_stale` the stale copy is no longer served: the call waits for a refresh, which
/// fails, so the answer is INTERNAL_ERROR (retryable) — and success again once the feed is back.
#[tokio::test(flavor = "multi_thread")]
async fn feed_past_max_stale_is_a_retryable_internal_error() {
    let sims = Simulators::start().await.expect("simulators");
    let gw = start(
        &sims,
        Copy {
            feed_refresh: "200ms",
            feed_max_stale: "400ms",
            ..Copy::default()
        },
    )
    .await;
    let (data, kind) = honda_calls()[0].clone();
    let reply = gw.send(HONDA, data.clone()).await;
    assert_success(&reply, kind, "good load");
    sims.feed.set_mode(Mode::Fail, 0);
    tokio::time::sleep(Duration::from_millis(900)).await;
    let (reply, elapsed) = timed(&gw, HONDA, data.clone()).await;
    assert_internal_error(&reply, "past max_stale");
    assert!(elapsed < BOUND, "past max_stale: {elapsed:?}");
    sims.feed.set_mode(Mode::Normal, 0);
    let reply = gw.send(HONDA, data).await;
    assert_success(&reply, kind, "after max_stale recovery");
}
