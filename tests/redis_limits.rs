//! Rate limits shared by replicas through a real `redis-server` (started on a free port; `.ci/run`
//! installs it): two gateway instances admit no more than one quota in total, and when Redis
//! goes away `on_backend_error` decides — `local` keeps answering under this replica's own
//! limits, `deny` refuses with RATE_LIMITED — and the gateway keeps answering either way, with
//! the outage exported as metrics. A dealer's quota (`rate_limit.per_dealer`) is shared the same
//! way by every client on every replica.

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

/// `rate_limit.per_dealer` on Redis: the dealer's quota is one for all clients and all
/// replicas (each client here has its own ample quota), and its refusal says when to retry.
#[tokio::test(flavor = "multi_thread")]
async fn a_dealer_quota_is_shared_by_every_client_and_replica() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let extra = format!(
        "rate_limit:\n  backend: redis\n  redis_url: {}\n  redis_timeout: 2s\n  \
         trusted_proxies: [127.0.0.1/32]\n  default: {{ rate: 100/s, burst: 100 }}\n  \
         per_dealer:\n    dealer.information: {{ rate: 1/min, burst: 4 }}",
        redis.url
    );
    let dealers = [common::profile_dealer("shared_motors", "Shared Motors", "")];
    let a = common::start_profiles(&extra, &dealers).await;
    let b = common::start_profiles(&extra, &dealers).await;
    let mut outcomes = Vec::new();
    for i in 0..8u8 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let client = format!("203.0.113.{i}");
        let mut headers = common::standard_headers();
        headers.push(("x-forwarded-for", client.as_str()));
        let body = send_message(json!({ "type": "dealer.information.request" }));
        let reply = gw
            .post_raw("/a2a", &headers, body.to_string().into_bytes())
            .await;
        if reply.body.get("result").is_some() {
            outcomes.push("ok".to_owned());
        } else {
            assert!(reply.headers.contains_key("retry-after"), "{}", reply.text);
            outcomes.push(reply.aap_code().to_owned());
        }
    }
    assert_eq!(
        outcomes,
        ["ok", "ok", "ok", "ok"]
            .into_iter()
            .chain(["RATE_LIMITED"; 4])
            .collect::<Vec<_>>(),
        "eight clients over two replicas share the dealer's burst of 4"
    );
    let mut conn = redis.connect().await;
    let dealer_bucket: bool = redis::cmd("EXISTS")
        .arg("aapgw:rl:shared_motors:dealer.information:all")
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert!(dealer_bucket, "the dealer's bucket lives in Redis");
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
    let scrape = local.metrics().await;
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
    let scrape = deny.metrics().await;
    assert_eq!(
        series(&scrape, "aap_gateway_redis_degraded{store=\"rate_limit\"}"),
        0.0,
        "{scrape}"
    );
}

/// The value of one series (`name{labels}`), 0 when absent.
fn series(scrape: &str, name: &str) -> f64 {
    common::sample(scrape, name).unwrap_or(0.0)
}
