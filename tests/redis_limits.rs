//! Rate limits shared by replicas through a real `redis-server` (started on a free port; `.ci/run`
//! installs it): two gateway instances admit no more than one quota in total, and when Redis
//! goes away `on_backend_error` decides — `local` keeps answering under this replica's own
//! limits, `deny` refuses with RATE_LIMITED — and the gateway keeps answering either way, with
//! the outage exported as metrics.

mod common;

use common::redis::RedisServer;
use common::{Gateway, send_message};
use serde_json::json;

async fn replica(redis_url: &str, on_error: &str) -> Gateway {
    common::start_profiles(
        &format!(
            "rate_limit:\n  backend: redis\n  redis_url: {redis_url}\n  redis_timeout: 200ms\n  \
             on_backend_error: {on_error}\n  default: {{ rate: 1/min, burst: 5 }}"
        ),
        &[common::profile_dealer("shared_motors", "Shared Motors", "")],
    )
    .await
}

async fn outcome(gw: &Gateway) -> String {
    let reply = gw
        .rpc(
            "/a2a",
            &send_message(json!({ "type": "dealer.information.request" })),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    if reply.body.get("result").is_some() {
        "ok".to_owned()
    } else {
        reply.aap_code().to_owned()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_sharing_redis_admit_one_quota_in_total() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let a = replica(&redis.url, "local").await;
    let b = replica(&redis.url, "local").await;
    let mut admitted = 0;
    for i in 0..12 {
        let gw = if i % 2 == 0 { &a } else { &b };
        if outcome(gw).await == "ok" {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5, "one burst of 5 across both replicas");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_redis_local_falls_back_and_deny_refuses() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let local = replica(&redis.url, "local").await;
    let deny = replica(&redis.url, "deny").await;
    assert_eq!(outcome(&local).await, "ok");
    assert_eq!(outcome(&deny).await, "ok");
    redis.stop();
    // `local`: this replica's own quota (burst 5) still applies.
    let mut admitted = 0;
    for _ in 0..8 {
        if outcome(&local).await == "ok" {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5, "local limits while Redis is down");
    assert!(local.app.limits.backend_errors() >= 8);
    // The outage is exported: every decision taken without Redis, and the degraded state.
    let scrape = metrics(&local).await;
    assert!(
        series(
            &scrape,
            "aap_gateway_redis_fallbacks_total{store=\"rate_limit\"}"
        ) >= 8.0,
        "{scrape}"
    );
    assert_eq!(
        series(&scrape, "aap_gateway_redis_degraded{store=\"rate_limit\"}"),
        1.0
    );
    // `deny`: refused, but answered (RATE_LIMITED, retryable), never hung.
    let started = std::time::Instant::now();
    assert_eq!(outcome(&deny).await, "RATE_LIMITED");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // Redis back: shared limits again.
    redis.restart();
    let mut back = false;
    for _ in 0..20 {
        if outcome(&deny).await == "ok" {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(back, "the deny replica admits again once Redis is back");
    let scrape = metrics(&deny).await;
    assert_eq!(
        series(&scrape, "aap_gateway_redis_degraded{store=\"rate_limit\"}"),
        0.0,
        "{scrape}"
    );
}

async fn metrics(gw: &Gateway) -> String {
    gw.client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body")
}

/// The value of one series (`name{labels}`), 0 when absent.
fn series(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}
