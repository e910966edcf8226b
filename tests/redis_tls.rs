//! Redis over TLS (`rediss://`): accepted where the settings are loaded, verified against the
//! trust store when used, and a failure of either kind is an ordinary backend failure
//! (`on_backend_error` decides), never a crash or a hang.
//!
//! The servers are real: `redis-server` with a TLS listener next to its plain port, and a
//! throwaway CA made with `openssl` (see `common::redis`); the gateway under test is the real
//! binary (`aap-gateway demo`), because the CA it trusts comes from its environment
//! (`SSL_CERT_FILE`), which a test must not change for its own process.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aap_gateway::redis_backend::{BackendError, RedisBackend};
use aap_gateway::settings::{self, LimitBackend};
use common::process::DemoProcess;
use common::redis::RedisServer;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(2);

fn demo_config() -> std::path::PathBuf {
    common::repo_path("config/demo.yaml")
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (format!("AAP_GATEWAY__{k}"), (*v).to_owned()))
        .collect()
}

#[test]
fn a_rediss_url_is_accepted_at_load_and_builds_both_stores() {
    let url = "rediss://:s3cr3t@redis.internal:6380/0";
    let loaded = settings::load_with_env(
        &demo_config(),
        env(&[
            ("RATE_LIMIT__BACKEND", "redis"),
            ("RATE_LIMIT__REDIS_URL", url),
            ("IDEMPOTENCY__BACKEND", "redis"),
        ]),
    )
    .expect("a rediss:// URL loads");
    let shared = LimitBackend::Redis {
        url: url.to_owned(),
    };
    assert_eq!(loaded.rate_limit.backend, shared);
    assert_eq!(loaded.idempotency.backend, shared);
    // Building the app makes both backends (no connection yet): it used to refuse TLS here.
    let listen = loaded.listen;
    let app = aap_gateway::app::App::build(loaded, listen).expect("the app builds");
    let shown = format!("{:?}", app.settings.rate_limit.backend);
    assert!(
        shown.contains("rediss://***@redis.internal") && !shown.contains("s3cr3t"),
        "{shown}"
    );
}

#[test]
fn an_unverified_or_foreign_redis_url_is_a_located_problem_at_load() {
    let problems = settings::load_with_env(
        &demo_config(),
        env(&[
            ("RATE_LIMIT__BACKEND", "redis"),
            ("RATE_LIMIT__REDIS_URL", "rediss://:pw@redis:6380/#insecure"),
            ("IDEMPOTENCY__BACKEND", "redis"),
            ("IDEMPOTENCY__REDIS_URL", "memcached://cache:11211"),
        ]),
    )
    .unwrap_err();
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0]
            .starts_with("env AAP_GATEWAY__IDEMPOTENCY__REDIS_URL: redis url scheme `memcached`"),
        "{lines:#?}"
    );
    assert!(
        lines[1].starts_with("env AAP_GATEWAY__RATE_LIMIT__REDIS_URL: rediss:// with #insecure"),
        "{lines:#?}"
    );
    assert!(lines.iter().all(|l| !l.contains("pw@")), "{lines:#?}");
}

/// A `rediss://` URL pointing at a plain-text Redis port: the handshake fails, and the caller
/// gets an `Unavailable` backend error in time (what `on_backend_error` then handles).
#[tokio::test(flavor = "multi_thread")]
async fn tls_against_a_plain_port_fails_as_unavailable_in_time() {
    let Some(plain) = RedisServer::start() else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{}/", plain.port());
    let backend = RedisBackend::new(&url, TIMEOUT, "t:").expect("valid url");
    let started = Instant::now();
    let error = backend
        .gcra("k", Duration::from_millis(100), 1)
        .await
        .expect_err("no TLS on that port");
    assert!(
        started.elapsed() < TIMEOUT + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            error,
            BackendError::Unavailable(_) | BackendError::Timeout(_)
        ),
        "{error}"
    );
}

/// The real binary with its rate limits on Redis over TLS: with the test CA trusted
/// (`SSL_CERT_FILE`), a call's bucket is written through the TLS port; trusting another CA only, the server's
/// certificate is refused, nothing is written, and the calls still answer (local fallback,
/// counted).
#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_keeps_its_limits_in_redis_over_verified_tls() {
    let Some((server, tls)) = RedisServer::start_tls() else {
        return;
    };
    let ca = tls.ca_file.display().to_string();
    let other_ca = tls.other_ca_file.display().to_string();
    let mut plain = server.connect().await;

    for trusted in [true, false] {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut plain)
            .await
            .expect("FLUSHALL");
        let vars = [
            ("AAP_GATEWAY__RATE_LIMIT__BACKEND", "redis"),
            ("AAP_GATEWAY__RATE_LIMIT__REDIS_URL", tls.url.as_str()),
            ("AAP_GATEWAY__RATE_LIMIT__REDIS_TIMEOUT", "2s"),
            // The trust store: the server's CA, or only an unrelated one.
            ("SSL_CERT_FILE", if trusted { &ca } else { &other_ca }),
        ];
        let demo = DemoProcess::start(&vars).await;
        let gateway = demo.endpoints["gateway"].as_str().expect("gateway address");
        let client = reqwest::Client::new();
        let reply: serde_json::Value = client
            .post(format!("{gateway}/a2a"))
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("a2a-extensions", common::EXT)
            .body(common::send_message(json!({ "type": "dealer.information.request" })).to_string())
            .send()
            .await
            .expect("the call is answered")
            .json()
            .await
            .expect("JSON");
        assert!(reply.get("result").is_some(), "trusted={trusted}: {reply}");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("aapgw:rl:*")
            .query_async(&mut plain)
            .await
            .expect("KEYS");
        let scrape = client
            .get(format!(
                "{}/metrics",
                demo.endpoints["admin"].as_str().expect("admin address")
            ))
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("body");
        let fallbacks = scrape
            .lines()
            .find_map(|l| {
                l.strip_prefix("aap_gateway_redis_fallbacks_total{store=\"rate_limit\"}")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0);
        if trusted {
            assert_eq!(
                keys,
                ["aapgw:rl:demo_toyota:dealer.information:ip:127.0.0.1"],
                "the bucket is in Redis; gateway log:\n{}",
                demo.log_text()
            );
            assert!(fallbacks == 0.0, "{scrape}");
        } else {
            assert!(
                keys.is_empty(),
                "an untrusted server gets nothing: {keys:?}"
            );
            assert!(fallbacks >= 1.0, "the fallback is counted: {scrape}");
        }
    }
}
