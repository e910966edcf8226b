//! Issue 38 item 2: a hot reload that changes `idempotency:` while a lead is on its way to a
//! slow CRM neither orphans that delivery nor forgets the replies stored before it. Counted at a
//! CRM stand-in that never de-duplicates: every lead it is sent is a lead it keeps.
//!
//! Memory backend: the stored replies and the delivery in flight carry over to the new store,
//! so a retry replays or joins instead of delivering again. Redis backend, two replicas: the
//! reloaded replica's old keys keep renewing the running delivery's claim, so a retry on the
//! other replica, well past `lock_ttl`, joins it instead of taking it over and sending it again.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::inventory;
use common::http_server::{HttpServer, reply};
use common::process::{in_stock, lead_request, send_leads_as_json};
use common::redis::RedisServer;
use common::{DemoCopy, Gateway, Reply, simulator_vars};
use serde_json::{Value, json};

const HONDA: &str = "/dealers/demo-honda/a2a";

/// How long the CRM stand-in takes for each lead.
const CRM_TAKES: Duration = Duration::from_millis(3500);

/// A CRM taking [`CRM_TAKES`] per lead, keeping every lead it is sent (no de-duplication):
/// answers `{"leadId": "L-<n>"}`, n counting from 0.
async fn slow_crm() -> HttpServer {
    HttpServer::start_scripted(|seen| async move {
        tokio::time::sleep(CRM_TAKES).await;
        reply(
            200,
            json!({ "leadId": format!("L-{}", seen.index) }).to_string(),
        )
    })
    .await
}

/// A copy of the demo whose Demo Honda sends leads as JSON to the CRM at `${INTAKE_URL}`, with
/// `idempotency` (a YAML block) in the gateway's configuration.
fn demo_sending_to(idempotency: &str) -> DemoCopy {
    let files = DemoCopy::new();
    files.append("config/demo.yaml", idempotency);
    send_leads_as_json(
        &files,
        "demo-honda",
        "INTAKE_URL",
        "{ connect: 1s, request: 10s }",
    );
    files
}

fn vars(sims: &Simulators, crm: &HttpServer) -> HashMap<String, String> {
    let mut vars = simulator_vars(sims);
    vars.insert("INTAKE_URL".into(), crm.url());
    vars
}

fn lead(key: &str) -> Value {
    let customer = json!({
        "first_name": "Mirja", "last_name": "Kaltenbrunner",
        "email": "mirja.k@example.net", "phone": "+14155550188",
        "preferred_contact": "email"
    });
    lead_request(
        customer,
        &in_stock(inventory::honda_powersports()),
        "reload-test-agent",
        key,
    )
}

/// The lead id of a `lead.submit` reply; `None` for an error (printed).
fn lead_id(reply: &Reply) -> Option<String> {
    if reply.body.get("error").is_some() {
        eprintln!("error reply: {}", reply.text);
        return None;
    }
    reply.payload()["data"]["lead_id"]
        .as_str()
        .map(str::to_owned)
}

async fn reloads_ok(gw: &Gateway) -> f64 {
    gw.metrics()
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix("aap_gateway_config_reloads_total{result=\"ok\"} ")?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Edits the copy at `root` so that `from` becomes `to` in its configuration, and waits until
/// `gw` reloaded.
async fn reload(gw: &Gateway, root: &std::path::Path, from: &str, to: &str) {
    let path = root.join("config/demo.yaml");
    let text = std::fs::read_to_string(&path).expect("read config");
    assert!(text.contains(from), "{from} in the configuration");
    std::fs::write(&path, text.replace(from, to)).expect("write config");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads_ok(gw).await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the configuration never reloaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the CRM was sent `n` leads.
async fn crm_was_sent(crm: &HttpServer, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while crm.requests() < n {
        assert!(Instant::now() < deadline, "the CRM never got lead {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries `key` until the buyer gets the lead's reply (an "in progress" answer is retried).
async fn settled(gw: &Gateway, key: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = gw.send(HONDA, lead(key)).await;
        if let Some(id) = lead_id(&reply) {
            return id;
        }
        assert!(
            reply.aap_error()["details"]["lead"] == "in_progress" && Instant::now() < deadline,
            "{}",
            reply.text
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_changing_idempotency_keeps_the_memory_stores_replies_and_deliveries() {
    let sims = Simulators::start().await.expect("simulators");
    let crm = slow_crm().await;
    let files = demo_sending_to("idempotency:\n  backend: memory\n  max_entries: 5000\n");
    let root = files.root().to_path_buf();
    let gw = files.start_reloading(vars(&sims, &crm)).await;

    let stored = lead_id(&gw.send(HONDA, lead("stored-before")).await).expect("delivered");
    let running = tokio::spawn({
        let gw_url = gw.url(HONDA);
        let client = gw.client().clone();
        async move {
            common::post_send_message(&client, &gw_url, lead("running-across"))
                .send()
                .await
                .expect("reply")
                .json::<Value>()
                .await
                .expect("json")
        }
    });
    crm_was_sent(&crm, 2).await;
    reload(&gw, &root, "max_entries: 5000", "max_entries: 6000").await;

    // The stored reply is replayed, the running delivery joined: nothing is sent again.
    let replayed = lead_id(&gw.send(HONDA, lead("stored-before")).await);
    assert_eq!(replayed.as_deref(), Some(stored.as_str()));
    let joined = settled(&gw, "running-across").await;
    let first = running.await.expect("first call");
    assert_eq!(
        first["result"]["message"]["parts"][0]["data"]["data"]["lead_id"],
        joined
    );
    assert_eq!(crm.requests(), 2, "each lead reached the CRM once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_changing_idempotency_keeps_renewing_the_claims_of_running_deliveries() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let crm = slow_crm().await;
    let keys = format!(
        "idempotency:\n  backend: redis\n  redis_url: {}\n  lock_ttl: 1s\n  redis_timeout: 150ms\n  on_ambiguous: resend\n  max_entries: 5000\n",
        redis.url
    );
    let reloaded = demo_sending_to(&keys);
    let root = reloaded.root().to_path_buf();
    let gw = reloaded.start_reloading(vars(&sims, &crm)).await;
    let other = demo_sending_to(&keys).start(vars(&sims, &crm)).await;

    let running = tokio::spawn({
        let gw_url = gw.url(HONDA);
        let client = gw.client().clone();
        async move {
            common::post_send_message(&client, &gw_url, lead("running-across"))
                .send()
                .await
                .expect("reply")
                .json::<Value>()
                .await
                .expect("json")
        }
    });
    crm_was_sent(&crm, 1).await;
    reload(&gw, &root, "max_entries: 5000", "max_entries: 6000").await;
    // Twice the lease: a claim nobody renews has run out, and would be taken over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let joined = settled(&other, "running-across").await;
    let first = running.await.expect("first call");
    assert_eq!(
        first["result"]["message"]["parts"][0]["data"]["data"]["lead_id"],
        joined
    );
    assert_eq!(crm.requests(), 1, "the lead reached the CRM once");
}
