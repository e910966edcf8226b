//! The upstream client stack against real HTTP servers on 127.0.0.1: the DMS simulator and tiny
//! hyper servers written here for the odd behaviours (chunked and gzip bodies, 503 storms, an
//! OAuth2 token endpoint, concurrency probes, a SOAP endpoint), and the mailer against a tiny
//! SMTP server written here (accepting, refusing with 451/550, or never answering `DATA`).

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aap_gateway::engine::IntoAap as _;
use aap_gateway::error::AapError;
use aap_gateway::upstream::{
    self, BreakerState, Endpoint, FileUpstream, MailPart, Mailer, OutgoingMail, Upstream,
    UpstreamError, UpstreamRequest, soap,
};
use aap_sim::dms::{self, API_KEY, API_KEY_HEADER};
use aap_sim::sim::Mode;
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Response, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[allow(unreachable_pub)]
#[path = "common/logs.rs"]
mod logs;

#[allow(dead_code, unreachable_pub)]
#[path = "common/http_server.rs"]
mod http_server;

use http_server::{ChunkBody, HttpServer as TestServer, Seen, reply};

// ---------------------------------------------------------------------------------------------
// Helpers

/// Builds an upstream from a JSON entry (as in `upstreams.yaml`) with `base_url` filled in.
fn upstream(base_url: &str, mut entry: Value) -> Upstream {
    entry["base_url"] = json!(base_url);
    let file: FileUpstream = serde_json::from_value(entry).expect("valid entry");
    Upstream::build("test", file).expect("valid upstream")
}

fn with_api_key() -> Value {
    json!({ "auth": { "kind": "api_key", "header": API_KEY_HEADER, "value": API_KEY } })
}

fn post(path: &str) -> UpstreamRequest {
    let mut req = UpstreamRequest::new(Method::POST, path);
    req.body = Some(Bytes::from_static(b"{}"));
    req
}

fn gzip(data: &[u8]) -> Bytes {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("gzip");
    Bytes::from(encoder.finish().expect("gzip"))
}

/// A port nothing listens on: bind, read the port, close.
/// `calls` GETs of `/x` sent at once through `up`, each answered 200.
async fn all_ok_at_once(up: &Upstream, calls: usize) {
    let calls: Vec<_> = (0..calls)
        .map(|_| {
            let up = up.clone();
            tokio::spawn(async move { up.call(UpstreamRequest::get("/x")).await })
        })
        .collect();
    for call in calls {
        assert_eq!(
            call.await.expect("join").expect("reply").status,
            StatusCode::OK
        );
    }
}

async fn dead_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

// ---------------------------------------------------------------------------------------------
// Success, URLs, headers

#[tokio::test]
async fn success_against_the_dms_with_the_base_path_as_prefix() {
    let sim = dms::start_dms().await.expect("dms");
    let up = upstream(&format!("{}/api/", sim.base_url()), with_api_key());
    assert_eq!(up.name(), "test");
    let response = up
        .call(UpstreamRequest::get("/v2/vehicles?make=Toyota&pageSize=2"))
        .await
        .expect("reply");
    assert_eq!(response.status, StatusCode::OK);
    let body: Value = serde_json::from_slice(&response.body).expect("json");
    assert!(body["Items"].as_array().is_some_and(|a| !a.is_empty()));
    let received = sim.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["path"], "/api/v2/vehicles");
    assert_eq!(received[0]["raw_query"], "make=Toyota&pageSize=2");
    assert_eq!(received[0]["headers"]["x-api-key"], API_KEY);
    assert!(
        received[0]["headers"]["user-agent"]
            .as_str()
            .is_some_and(|ua| ua.starts_with("aap-gateway/"))
    );
    // What any HTTP client sends unless told otherwise: some legacy servers pick XML without it.
    assert_eq!(received[0]["headers"]["accept"], "*/*");
    assert_eq!(received[0]["headers"]["accept-encoding"], "gzip");
}

#[tokio::test]
async fn static_headers_are_sent_and_per_call_headers_replace_them() {
    let server = TestServer::start_scripted(|_| async { reply(200, "ok") }).await;
    let up = upstream(
        &server.url(),
        json!({ "headers": { "User-Agent": "legacy-friendly/1.0", "X-Dealer": "42" } }),
    );
    let mut req = UpstreamRequest::get("/x");
    req.headers.push((
        HeaderName::from_static("x-dealer"),
        HeaderValue::from_static("7"),
    ));
    req.headers.push((
        HeaderName::from_static("traceparent"),
        HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ));
    up.call(req).await.expect("reply");
    let seen = &server.seen()[0];
    assert_eq!(seen.headers["user-agent"], "legacy-friendly/1.0");
    assert_eq!(seen.headers.get_all("x-dealer").iter().count(), 1);
    assert_eq!(seen.headers["x-dealer"], "7");
    assert!(seen.headers.contains_key("traceparent"));
    assert_eq!(seen.method, Method::GET);
}

#[tokio::test]
async fn auth_headers_arrive() {
    let server = TestServer::start_scripted(|_| async { reply(200, "ok") }).await;
    let cases = [
        (
            json!({ "kind": "api_key", "header": "X-Api-Key", "value": "k-123" }),
            "x-api-key",
            "k-123".to_owned(),
        ),
        (
            json!({ "kind": "basic", "username": "dealer", "password": "p@ss:word" }),
            "authorization",
            // base64("dealer:p@ss:word")
            "Basic ZGVhbGVyOnBAc3M6d29yZA==".to_owned(),
        ),
        (
            json!({ "kind": "bearer", "token": "tok-abc" }),
            "authorization",
            "Bearer tok-abc".to_owned(),
        ),
    ];
    for (i, (auth, header, expected)) in cases.into_iter().enumerate() {
        let up = upstream(&server.url(), json!({ "auth": auth }));
        up.call(UpstreamRequest::get("/x")).await.expect("reply");
        assert_eq!(server.seen()[i].headers[header], expected.as_str());
    }
}

#[tokio::test]
async fn invalid_paths_are_refused_before_any_call() {
    let server = TestServer::start_scripted(|_| async { reply(200, "ok") }).await;
    let up = upstream(&server.url(), json!({}));
    for path in ["x", "/a b", "/a#frag", "/ä", "/a\r\nX: y"] {
        match up.call(UpstreamRequest::get(path)).await {
            Err(UpstreamError::InvalidRequest(_)) => {}
            other => panic!("{path:?}: {other:?}"),
        }
    }
    let mut req = UpstreamRequest::get("/x");
    req.headers
        .push((http::header::CONTENT_LENGTH, HeaderValue::from_static("3")));
    assert!(matches!(
        up.call(req).await,
        Err(UpstreamError::InvalidRequest(_))
    ));
    assert_eq!(server.requests(), 0);
}

// ---------------------------------------------------------------------------------------------
// Connect errors, timeouts, protocol errors

#[tokio::test]
async fn connection_refused_fails_fast_as_connect() {
    let addr = dead_port().await;
    let up = upstream(
        &format!("http://{addr}"),
        json!({ "retries": { "attempts": 1 } }),
    );
    let started = Instant::now();
    let error = up
        .call(UpstreamRequest::get("/x"))
        .await
        .expect_err("refused");
    assert!(matches!(error, UpstreamError::Connect(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    let aap: AapError = error.into_aap("dms");
    assert!(matches!(aap, AapError::UpstreamUnavailable { .. }));
}

#[tokio::test]
async fn a_hanging_upstream_times_out_on_time() {
    let sim = dms::start_dms().await.expect("dms");
    sim.set_mode(Mode::Hang, 0);
    let up = upstream(
        &sim.base_url(),
        json!({ "timeouts": { "request": "300ms" }, "retries": { "attempts": 1 } }),
    );
    let started = Instant::now();
    let error = up
        .call(UpstreamRequest::get("/api/v2/vehicles"))
        .await
        .expect_err("timeout");
    let elapsed = started.elapsed();
    assert!(
        matches!(error, UpstreamError::Timeout { after } if after == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(800), "{elapsed:?}");
    assert!(matches!(
        error.into_aap("dms"),
        AapError::UpstreamTimeout { .. }
    ));
}

/// A server that sends its headers and `first`, then nothing more, and an upstream that
/// gives it 300 ms in all, with no retry.
async fn stalled_after(first: &'static [u8]) -> (TestServer, Upstream) {
    let server = TestServer::start_scripted(move |_| async move {
        Response::new(ChunkBody {
            chunks: VecDeque::from([Bytes::from_static(first)]),
            exact: false,
            stall: true,
        })
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "timeouts": { "request": "300ms" }, "retries": { "attempts": 1 } }),
    );
    (server, up)
}

#[tokio::test]
async fn a_stalled_body_counts_against_the_timeout() {
    // Headers and a first chunk come at once, the rest never: the timeout covers the body too.
    let (_server, up) = stalled_after(b"{\"Items\": [").await;
    let started = Instant::now();
    let error = up
        .call(UpstreamRequest::get("/x"))
        .await
        .expect_err("timeout");
    assert!(matches!(error, UpstreamError::Timeout { .. }), "{error:?}");
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[tokio::test]
async fn a_slow_upstream_times_out_and_idempotent_calls_retry() {
    let sim = dms::start_dms().await.expect("dms");
    sim.set_mode(Mode::Slow, 1_000);
    let up = upstream(
        &sim.base_url(),
        json!({ "timeouts": { "request": "200ms" },
                "retries": { "attempts": 2, "backoff": "1ms" } }),
    );
    let started = Instant::now();
    let error = up
        .call(UpstreamRequest::get("/api/v2/vehicles"))
        .await
        .expect_err("timeout");
    assert!(matches!(error, UpstreamError::Timeout { .. }), "{error:?}");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(sim.received().len(), 2);
}

#[tokio::test]
async fn tls_to_a_plain_http_server_is_a_protocol_error() {
    let server = TestServer::start_scripted(|_| async { reply(200, "ok") }).await;
    let up = upstream(
        &format!("https://{}", server.addr),
        json!({ "retries": { "attempts": 1 } }),
    );
    let error = up.call(UpstreamRequest::get("/x")).await.expect_err("tls");
    assert!(
        matches!(error, UpstreamError::Protocol(ref m) if m.starts_with("TLS")),
        "{error:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Status handling and retries

#[tokio::test]
async fn a_500_is_returned_without_retry() {
    let sim = dms::start_dms().await.expect("dms");
    sim.set_mode(Mode::Fail, 0);
    let up = upstream(
        &sim.base_url(),
        json!({ "retries": { "attempts": 3, "backoff": "1ms" } }),
    );
    let response = up.call(post("/api/v2/leads")).await.expect("reply");
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!response.body.is_empty());
    assert_eq!(sim.received().len(), 1);
    // 500 is not a retryable status, even for a GET.
    let response = up
        .call(UpstreamRequest::get("/api/v2/vehicles"))
        .await
        .expect("reply");
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(sim.received().len(), 2);
}

#[tokio::test]
async fn idempotent_503_is_retried_and_non_idempotent_is_not() {
    let server = TestServer::start_scripted(|_| async { reply(503, "busy") }).await;
    let up = upstream(
        &server.url(),
        json!({ "retries": { "attempts": 3, "backoff": "5ms", "max_backoff": "20ms" },
                "circuit_breaker": { "failures": 100 } }),
    );
    let response = up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.requests(), 3, "three attempts");

    let response = up.call(post("/x")).await.expect("reply");
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.requests(), 4, "POST is tried once");

    let mut marked = post("/x");
    marked.idempotent = true;
    up.call(marked).await.expect("reply");
    assert_eq!(server.requests(), 7, "a POST marked idempotent is retried");
}

#[tokio::test]
async fn a_retry_can_rescue_the_call() {
    let server = TestServer::start_scripted(|seen: Seen| async move {
        if seen.index == 0 {
            reply(502, "bad gateway")
        } else {
            reply(200, "fine")
        }
    })
    .await;
    let up = upstream(&server.url(), json!({ "retries": { "backoff": "1ms" } }));
    let response = up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(&response.body[..], b"fine");
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn connect_errors_are_retried_for_idempotent_calls() {
    let addr = dead_port().await;
    let up = upstream(
        &format!("http://{addr}"),
        json!({ "retries": { "attempts": 3, "backoff": "1ms" } }),
    );
    let started = Instant::now();
    let error = up
        .call(UpstreamRequest::get("/x"))
        .await
        .expect_err("refused");
    assert!(matches!(error, UpstreamError::Connect(_)));
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn the_retry_budget_stops_retries_under_sustained_failure() {
    let server = TestServer::start_scripted(|_| async { reply(503, "down") }).await;
    let up = upstream(
        &server.url(),
        json!({
            "retries": { "attempts": 3, "backoff": "1ms", "max_backoff": "1ms",
                         "budget_percent": 20, "budget_min_per_sec": 0 },
            "circuit_breaker": { "failures": 10000 }
        }),
    );
    for _ in 0..20 {
        let response = up.call(UpstreamRequest::get("/x")).await.expect("reply");
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let requests = server.requests();
    // Unbudgeted: 60. Budgeted: 20 calls + 20 % of them.
    assert!(requests > 20, "some retries happen: {requests}");
    assert!(requests <= 24, "at most 20 % retries: {requests}");
}

// ---------------------------------------------------------------------------------------------
// Circuit breaker

#[tokio::test]
async fn the_breaker_opens_fails_fast_and_half_opens_after_the_cool_down() {
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = TestServer::start_scripted({
        let healthy = Arc::clone(&healthy);
        move |_| {
            let ok = healthy.load(Ordering::SeqCst);
            async move {
                if ok {
                    reply(200, "ok")
                } else {
                    reply(500, "down")
                }
            }
        }
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "circuit_breaker": { "failures": 3, "cool_down": "200ms" } }),
    );
    for _ in 0..3 {
        let response = up.call(post("/x")).await.expect("reply");
        assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(up.breaker_state(), BreakerState::Open);
    let started = Instant::now();
    let error = up.call(post("/x")).await.expect_err("open");
    assert!(
        matches!(error, UpstreamError::CircuitOpen { .. }),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(50));
    assert_eq!(server.requests(), 3, "fail fast: nothing sent");

    // Still failing after the cool-down: the trial fails and the breaker re-opens.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(up.breaker_state(), BreakerState::HalfOpen);
    let response = up.call(post("/x")).await.expect("trial reply");
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(server.requests(), 4);
    // A 5xx reply is reported to the breaker when its caller is done with it unjudged (a
    // mapping may find it is an answer: `Verdict`); dropped here, it is a failure.
    drop(response);
    assert!(matches!(
        up.call(post("/x")).await,
        Err(UpstreamError::CircuitOpen { .. })
    ));

    // Healthy again: the next trial closes it.
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let response = up.call(post("/x")).await.expect("trial reply");
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(up.breaker_state(), BreakerState::Closed);
    up.call(post("/x")).await.expect("closed");
    assert_eq!(server.requests(), 6);
}

#[tokio::test]
async fn timeouts_and_connect_errors_trip_the_breaker() {
    let addr = dead_port().await;
    let up = upstream(
        &format!("http://{addr}"),
        json!({ "retries": { "attempts": 1 }, "circuit_breaker": { "failures": 2 } }),
    );
    for _ in 0..2 {
        assert!(matches!(
            up.call(UpstreamRequest::get("/x")).await,
            Err(UpstreamError::Connect(_))
        ));
    }
    assert!(matches!(
        up.call(UpstreamRequest::get("/x")).await,
        Err(UpstreamError::CircuitOpen { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Response size limit

const MIB: usize = 1024 * 1024;

#[tokio::test]
async fn a_huge_body_with_content_length_is_refused() {
    let sim = dms::start_dms().await.expect("dms");
    sim.set_mode(Mode::Huge, 0);
    let up = upstream(&sim.base_url(), json!({ "max_response_bytes": MIB }));
    let error = up
        .call(UpstreamRequest::get("/api/v2/vehicles"))
        .await
        .expect_err("too large");
    assert!(
        matches!(error, UpstreamError::TooLarge { limit } if limit == MIB),
        "{error:?}"
    );
    assert!(matches!(
        error.into_aap("dms"),
        AapError::InvalidUpstreamResponse { .. }
    ));
}

/// A server answering 2 MiB in chunks without `Content-Length`, and an upstream that takes
/// at most 1 MiB.
async fn twice_too_large() -> (TestServer, Upstream) {
    let server = TestServer::start_scripted(|_| async {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        Response::new(ChunkBody {
            chunks: std::iter::repeat_n(chunk, 32).collect(),
            exact: false,
            stall: false,
        })
    })
    .await;
    let up = upstream(&server.url(), json!({ "max_response_bytes": MIB }));
    (server, up)
}

#[tokio::test]
async fn a_body_that_passes_the_limit_in_its_second_piece_is_refused() {
    // Each piece alone is under `max_response_bytes`, the two together over it.
    let server = TestServer::start_scripted(|_| async {
        Response::new(ChunkBody {
            chunks: VecDeque::from([Bytes::from(vec![b'x'; 600]), Bytes::from(vec![b'y'; 600])]),
            exact: false,
            stall: false,
        })
    })
    .await;
    let up = upstream(&server.url(), json!({ "max_response_bytes": 1024 }));
    let error = up
        .call(UpstreamRequest::get("/x"))
        .await
        .expect_err("too large");
    assert!(
        matches!(error, UpstreamError::TooLarge { limit: 1024 }),
        "{error:?}"
    );
    // And in pieces that fit, the whole body arrives.
    let up = upstream(&server.url(), json!({ "max_response_bytes": 1200 }));
    let reply = up.call(UpstreamRequest::get("/x")).await.expect("fits");
    assert_eq!(reply.body.len(), 1200);
    assert_eq!(&reply.body[595..605], b"xxxxxyyyyy");
}

#[tokio::test]
async fn a_huge_chunked_body_is_refused_while_streaming() {
    let (server, up) = twice_too_large().await;
    let error = up
        .call(UpstreamRequest::get("/x"))
        .await
        .expect_err("too large");
    assert!(matches!(error, UpstreamError::TooLarge { .. }), "{error:?}");
    assert!(server.seen()[0].headers.contains_key("accept-encoding"));
}

#[tokio::test]
async fn gzip_is_decoded_and_the_limit_applies_after_decompression() {
    let small = gzip(br#"{"ok": true}"#);
    let bomb = gzip(&vec![b'0'; 8 * MIB]);
    assert!(bomb.len() < 64 * 1024, "compresses well: {}", bomb.len());
    let server = TestServer::start_scripted(move |seen: Seen| {
        let body = if seen.path_and_query == "/small" {
            small.clone()
        } else {
            bomb.clone()
        };
        async move {
            let mut response = reply(200, body);
            response
                .headers_mut()
                .insert("content-encoding", HeaderValue::from_static("gzip"));
            response
        }
    })
    .await;
    let up = upstream(&server.url(), json!({ "max_response_bytes": MIB }));
    let response = up
        .call(UpstreamRequest::get("/small"))
        .await
        .expect("reply");
    assert_eq!(&response.body[..], br#"{"ok": true}"#);
    let error = up
        .call(UpstreamRequest::get("/bomb"))
        .await
        .expect_err("too large");
    assert!(matches!(error, UpstreamError::TooLarge { .. }), "{error:?}");
}

// ---------------------------------------------------------------------------------------------
// Concurrency cap

#[tokio::test]
async fn at_most_max_concurrency_calls_are_in_flight() {
    let server = TestServer::start_scripted(|_| async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        reply(200, "ok")
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "max_concurrency": 2, "timeouts": { "request": "2s" } }),
    );
    all_ok_at_once(&up, 3).await;
    assert_eq!(server.requests(), 3);
    assert_eq!(server.max_in_flight(), 2);
}

/// A burst above `max_concurrency` queues in the gateway. The wait has its own bound
/// (`timeouts.queue`, here the request timeout by default) and does not eat into the attempt's
/// `timeouts.request`; a call that finds no slot in time is `Busy` — the gateway's overload,
/// answered `RATE_LIMITED` — and never a failure of the healthy upstream: the breaker (one
/// failure opens it here) stays closed.
#[tokio::test]
async fn a_burst_above_max_concurrency_queues_and_never_opens_the_breaker() {
    let server = TestServer::start_scripted(|_| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        reply(200, "ok")
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "max_concurrency": 1, "timeouts": { "request": "500ms" },
                "retries": { "attempts": 1 }, "circuit_breaker": { "failures": 1 } }),
    );
    // The first call holds the slot 300 ms; the second waits 300 ms, then has its full 500 ms
    // (it needs 300); the third cannot have a slot before 600 ms and gives up at 500 ms.
    let (a, b, c) = tokio::join!(
        up.call(UpstreamRequest::get("/a")),
        up.call(UpstreamRequest::get("/b")),
        up.call(UpstreamRequest::get("/c"))
    );
    let results = [&a, &b, &c];
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let busy: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Err(UpstreamError::Busy { waited }) => Some(*waited),
            _ => None,
        })
        .collect();
    assert_eq!((ok, busy.len()), (2, 1), "{a:?} {b:?} {c:?}");
    assert_eq!(busy[0], Duration::from_millis(500));
    assert_eq!(server.requests(), 2, "a busy call sends nothing");
    assert_eq!(server.max_in_flight(), 1);
    assert_eq!(up.breaker_state(), BreakerState::Closed);
    up.call(UpstreamRequest::get("/d"))
        .await
        .expect("still closed");
    let error = UpstreamError::Busy {
        waited: Duration::from_millis(500),
    };
    assert!(matches!(
        error.into_aap("dms"),
        AapError::UpstreamBusy { .. }
    ));
}

/// `timeouts.queue` bounds the wait for a slot on its own.
#[tokio::test]
async fn the_queue_wait_has_its_own_bound() {
    let server = TestServer::start_scripted(|_| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        reply(200, "ok")
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "max_concurrency": 1, "timeouts": { "request": "2s", "queue": "50ms" },
                "retries": { "attempts": 1 } }),
    );
    let started = Instant::now();
    let (a, b) = tokio::join!(up.call(UpstreamRequest::get("/a")), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let result = up.call(UpstreamRequest::get("/b")).await;
        (result, started.elapsed())
    });
    assert_eq!(a.expect("first").status, StatusCode::OK);
    let (b, elapsed) = b;
    assert!(matches!(b, Err(UpstreamError::Busy { .. })), "{b:?}");
    assert!(elapsed < Duration::from_millis(250), "{elapsed:?}");
}

// ---------------------------------------------------------------------------------------------
// OAuth2 client credentials

/// A token endpoint that hands out `tok-1`, `tok-2`, … after a short delay.
async fn token_server(expires_in: u64) -> TestServer {
    TestServer::start_scripted(move |seen: Seen| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let token = format!("tok-{}", seen.index + 1);
        reply(
            200,
            json!({ "access_token": token, "token_type": "Bearer", "expires_in": expires_in })
                .to_string(),
        )
    })
    .await
}

/// An API that accepts only the tokens `accepted` says yes to.
async fn api_server(accepted: fn(&str) -> bool) -> TestServer {
    TestServer::start_scripted(move |seen: Seen| async move {
        let ok = seen
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(accepted);
        if ok {
            reply(200, "ok")
        } else {
            reply(401, "unauthorized")
        }
    })
    .await
}

fn oauth2(token_url: &str, extra: Value) -> Value {
    let mut auth = json!({
        "kind": "oauth2",
        "token_url": token_url,
        "client_id": "gateway",
        "client_secret": "s3cret",
        "scope": "inventory.read",
    });
    if let (Some(auth), Some(extra)) = (auth.as_object_mut(), extra.as_object()) {
        auth.extend(extra.clone());
    }
    json!({ "auth": auth, "max_concurrency": 32 })
}

#[tokio::test]
async fn oauth2_concurrent_calls_share_one_token_fetch() {
    let tokens = token_server(3600).await;
    let api = api_server(|t| t == "tok-1").await;
    let up = upstream(
        &api.url(),
        oauth2(&format!("{}/oauth/token", tokens.url()), json!({})),
    );
    all_ok_at_once(&up, 20).await;
    assert_eq!(tokens.requests(), 1);
    assert_eq!(api.requests(), 20);

    let token_request = &tokens.seen()[0];
    assert_eq!(token_request.method, Method::POST);
    assert_eq!(token_request.path_and_query, "/oauth/token");
    assert_eq!(
        token_request.headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    let form = String::from_utf8_lossy(&token_request.body);
    assert!(form.contains("grant_type=client_credentials"), "{form}");
    assert!(form.contains("scope=inventory.read"), "{form}");
    assert!(
        !form.contains("s3cret"),
        "secret in the Basic header, not the body"
    );
    // base64("gateway:s3cret")
    assert_eq!(
        token_request.headers["authorization"],
        "Basic Z2F0ZXdheTpzM2NyZXQ="
    );
}

#[tokio::test]
async fn oauth2_client_secret_in_the_body_when_asked() {
    let tokens = token_server(3600).await;
    let api = api_server(|_| true).await;
    let up = upstream(
        &api.url(),
        oauth2(
            &tokens.url(),
            json!({ "client_auth": "body", "audience": "dms" }),
        ),
    );
    up.call(UpstreamRequest::get("/x")).await.expect("reply");
    let token_request = &tokens.seen()[0];
    let form = String::from_utf8_lossy(&token_request.body);
    assert!(form.contains("client_id=gateway"), "{form}");
    assert!(form.contains("client_secret=s3cret"), "{form}");
    assert!(form.contains("audience=dms"), "{form}");
    assert!(!token_request.headers.contains_key("authorization"));
}

#[tokio::test]
async fn oauth2_refreshes_before_expiry() {
    // A 1 s token is refreshed 10 % early, at 0.9 s.
    let tokens = token_server(1).await;
    let api = api_server(|_| true).await;
    let up = upstream(&api.url(), oauth2(&tokens.url(), json!({})));
    up.call(UpstreamRequest::get("/x")).await.expect("reply");
    up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(tokens.requests(), 1, "cached");
    tokio::time::sleep(Duration::from_millis(950)).await;
    up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(tokens.requests(), 2, "refreshed");
    assert_eq!(api.seen()[2].headers["authorization"], "Bearer tok-2");
}

#[tokio::test]
async fn oauth2_a_401_invalidates_the_token_and_retries_once() {
    let tokens = token_server(3600).await;
    // tok-1 was revoked upstream; tok-2 works.
    let api = api_server(|t| t == "tok-2").await;
    let up = upstream(&api.url(), oauth2(&tokens.url(), json!({})));
    // Even a non-idempotent call: a 401 means nothing was processed.
    let response = up.call(post("/leads")).await.expect("reply");
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(tokens.requests(), 2);
    assert_eq!(api.requests(), 2);

    // Only once: an API that rejects every token gets its 401 back after one retry.
    let tokens = token_server(3600).await;
    let api = api_server(|_| false).await;
    let up = upstream(&api.url(), oauth2(&tokens.url(), json!({})));
    let response = up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.requests(), 2);
    assert_eq!(tokens.requests(), 2);
    // And not on every call: a second 401 right after does not force another token request.
    let response = up.call(UpstreamRequest::get("/x")).await.expect("reply");
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(api.requests(), 3);
    assert_eq!(tokens.requests(), 2);
}

#[tokio::test]
async fn oauth2_token_failures_are_auth_errors() {
    let tokens =
        TestServer::start_scripted(|_| async { reply(400, r#"{"error":"invalid_client"}"#) }).await;
    let api = api_server(|_| true).await;
    let up = upstream(&api.url(), oauth2(&tokens.url(), json!({})));
    let error = up.call(UpstreamRequest::get("/x")).await.expect_err("auth");
    assert!(
        matches!(error, UpstreamError::Auth(ref m) if m.contains("400")),
        "{error:?}"
    );
    assert_eq!(api.requests(), 0);
    assert!(matches!(
        error.into_aap("dms"),
        AapError::UpstreamUnavailable { .. }
    ));

    let dead = dead_port().await;
    let up = upstream(
        &api.url(),
        oauth2(&format!("http://{dead}/token"), json!({})),
    );
    let error = up.call(UpstreamRequest::get("/x")).await.expect_err("auth");
    assert!(matches!(error, UpstreamError::Auth(_)), "{error:?}");
}

// ---------------------------------------------------------------------------------------------
// Configuration problems reach the caller located

#[tokio::test]
async fn build_reports_problems_with_pointers() {
    let file: FileUpstream = serde_json::from_value(json!({
        "base_url": "http://x/?q=1",
        "timeouts": { "request": "0s" },
        "tls": { "ca_file": "/nonexistent.pem" }
    }))
    .expect("parses");
    let problems = Upstream::build("dms", file).expect_err("invalid");
    let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
    assert_eq!(pointers, ["/base_url", "/timeouts/request", "/tls/ca_file"]);
}

// ---------------------------------------------------------------------------------------------
// Logging

#[tokio::test]
async fn logs_carry_neither_queries_nor_secrets() {
    let server =
        TestServer::start_scripted(|_| async { reply(500, "ORA-00060 secret-body") }).await;
    let up = upstream(
        &server.url(),
        json!({
            "auth": { "kind": "api_key", "header": "X-Api-Key", "value": "key-s3cr3t" },
            "circuit_breaker": { "failures": 1 }
        }),
    );
    let mut req = UpstreamRequest::get("/customers/lookup?email=jane%40example.com");
    req.headers.push((
        HeaderName::from_static("x-customer"),
        HeaderValue::from_static("jane-doe"),
    ));
    let (logs, _capture) = logs::capture();
    up.call(req).await.expect("reply");
    let text = logs.text();
    assert!(text.contains("upstream attempt"), "{text}");
    assert!(text.contains("/customers/lookup"), "{text}");
    assert!(text.contains("status=500"), "{text}");
    assert!(text.contains("circuit breaker opened"), "{text}");
    for secret in ["jane", "example.com", "key-s3cr3t", "secret-body"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

// ---------------------------------------------------------------------------------------------
// SOAP: the envelope travels through the same client

#[tokio::test]
async fn soap_call_posts_the_envelope_to_the_endpoint_and_decodes_the_fault() {
    const FAULT: &str = r#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:Client</faultcode><faultstring>Duplicate lead</faultstring><detail><LeadId>L-7</LeadId></detail></soap:Fault></soap:Body></soap:Envelope>"#;
    let server = TestServer::start_scripted(|_| async { reply(500, FAULT) }).await;
    let up = upstream(
        &format!("{}/crm/LeadService.asmx", server.url()),
        json!({
            "kind": "soap",
            "soap": { "version": "1.1" },
            "auth": { "kind": "ws_security", "username": "demo-crm", "password": "crm-s3cret" },
            "retries": { "attempts": 3 }
        }),
    );
    let settings = up.soap().expect("a SOAP upstream");
    let req = soap::request(
        settings,
        String::new(),
        Some("http://crm.example/SubmitLead"),
        "<SubmitLead xmlns=\"http://crm.example/\"><Name>Jane</Name></SubmitLead>",
        false,
    )
    .expect("valid request");
    let response = up.call(req).await.expect("a reply");
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(server.requests(), 1, "a SOAP operation is not retried");

    let seen = &server.seen()[0];
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path_and_query, "/crm/LeadService.asmx");
    assert_eq!(seen.headers["content-type"], "text/xml; charset=utf-8");
    assert_eq!(
        seen.headers["soapaction"],
        "\"http://crm.example/SubmitLead\""
    );
    let body = String::from_utf8(seen.body.to_vec()).expect("utf-8");
    assert!(
        body.contains("<wsse:Username>demo-crm</wsse:Username>"),
        "{body}"
    );
    assert!(body.contains("#PasswordDigest\">"), "{body}");
    assert!(!body.contains("crm-s3cret"), "digest only");
    assert!(body.ends_with("<Name>Jane</Name></SubmitLead></soap:Body></soap:Envelope>"));

    let reply = soap::decode_reply(&response.body, Default::default(), &Default::default())
        .expect("an envelope");
    let fault = reply.fault.expect("a fault");
    assert_eq!(
        (fault.code.as_str(), fault.reason.as_str()),
        ("Client", "Duplicate lead")
    );
    assert_eq!(fault.detail, json!({"LeadId": "L-7"}));
}

#[tokio::test]
async fn empty_and_query_paths_address_the_base_url() {
    let server = TestServer::start_scripted(|_| async { reply(200, "ok") }).await;
    let endpoint = upstream(
        &format!("{}/dms/VehicleService.svc", server.url()),
        json!({}),
    );
    let with_slash = upstream(&format!("{}/api/", server.url()), json!({}));
    for (up, path, expected) in [
        (&endpoint, "", "/dms/VehicleService.svc"),
        (&endpoint, "?wsdl", "/dms/VehicleService.svc?wsdl"),
        (&endpoint, "/mex", "/dms/VehicleService.svc/mex"),
        (&with_slash, "", "/api/"),
        (&with_slash, "?q=1", "/api/?q=1"),
    ] {
        up.call(UpstreamRequest::get(path)).await.expect("reply");
        let seen = server.seen();
        assert_eq!(
            seen.last().expect("seen").path_and_query,
            expected,
            "{path:?}"
        );
    }
    for bad in ["x", "#frag", "?a b"] {
        assert!(
            matches!(
                endpoint.call(UpstreamRequest::get(bad)).await,
                Err(UpstreamError::InvalidRequest(_))
            ),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn build_returns_the_endpoint_of_each_kind() {
    let entry = |value: Value| serde_json::from_value::<FileUpstream>(value).expect("parses");
    let rest = upstream::build("dms", entry(json!({ "base_url": "http://127.0.0.1:1" })));
    let soap = upstream::build(
        "crm",
        entry(json!({ "kind": "soap", "base_url": "http://127.0.0.1:1/svc" })),
    );
    let smtp_entry = json!({
        "kind": "smtp", "base_url": "smtp://127.0.0.1:1",
        "smtp": { "from": "leads@gateway.example", "to": ["crm@crm.example"] }
    });
    let smtp = upstream::build("crm_mail", entry(smtp_entry.clone()));
    match (rest, soap, smtp) {
        (Ok(Endpoint::Http(rest)), Ok(Endpoint::Http(soap)), Ok(Endpoint::Smtp(mail))) => {
            assert!(rest.soap().is_none());
            assert!(soap.soap().is_some());
            assert_eq!(mail.name(), "crm_mail");
            assert_eq!(mail.breaker_state(), BreakerState::Closed);
        }
        other => panic!("unexpected {other:?}"),
    }
    let problems = Upstream::build("crm_mail", entry(smtp_entry)).expect_err("not HTTP");
    assert_eq!(problems[0].pointer, "/kind");
}

// ---------------------------------------------------------------------------------------------
// SMTP: a tiny server that speaks just enough ESMTP

/// What the test SMTP server answers to the end of `DATA`, per message (0-based).
#[derive(Debug, Clone, Copy)]
enum AfterData {
    Accept,
    Transient451,
    Permanent550,
    NeverAnswer,
    /// 250 after a pause (a server that scans before it queues).
    AcceptAfter(Duration),
}

struct SmtpServer {
    addr: SocketAddr,
    state: Arc<SmtpState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct SmtpState {
    connections: AtomicUsize,
    /// Decoded `AUTH PLAIN` responses: `\0user\0password`.
    auth: Mutex<Vec<String>>,
    envelopes: Mutex<Vec<String>>,
    messages: Mutex<Vec<String>>,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SmtpServer {
    async fn start(after_data: fn(usize) -> AfterData) -> SmtpServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(SmtpState::default());
        let task = tokio::spawn({
            let state = Arc::clone(&state);
            async move {
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((stream, _)) = listener.accept().await {
                    state.connections.fetch_add(1, Ordering::SeqCst);
                    connections.spawn(smtp_session(stream, Arc::clone(&state), after_data));
                }
            }
        });
        SmtpServer { addr, state, task }
    }

    fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    fn messages(&self) -> Vec<String> {
        self.state.messages.lock().expect("lock").clone()
    }
}

/// Writes one reply; `false` once the client is gone.
async fn say(write: &mut tokio::net::tcp::OwnedWriteHalf, text: &str) -> bool {
    write.write_all(text.as_bytes()).await.is_ok()
}

async fn smtp_session(
    stream: TcpStream,
    state: Arc<SmtpState>,
    after_data: fn(usize) -> AfterData,
) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    if !say(&mut write, "220 test.local ESMTP\r\n").await {
        return;
    }
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let command = line.trim_end().to_owned();
        let verb = command
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let answer = match verb.as_str() {
            "EHLO" => "250-test.local\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n".to_owned(),
            "AUTH" => {
                let mut response = command.split_whitespace().nth(2).map(str::to_owned);
                if response.is_none() {
                    say(&mut write, "334 \r\n").await;
                    line.clear();
                    lines.read_line(&mut line).await.unwrap_or(0);
                    response = Some(line.trim_end().to_owned());
                }
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(response.unwrap_or_default())
                    .unwrap_or_default();
                state
                    .auth
                    .lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(&decoded).into_owned());
                "235 2.7.0 Authentication successful\r\n".to_owned()
            }
            "MAIL" | "RCPT" => {
                state.envelopes.lock().expect("lock").push(command.clone());
                "250 2.1.0 Ok\r\n".to_owned()
            }
            "DATA" => {
                say(&mut write, "354 End data with <CR><LF>.<CR><LF>\r\n").await;
                let mut message = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    if line == ".\r\n" {
                        break;
                    }
                    message.push_str(&line);
                }
                let index = {
                    let mut messages = state.messages.lock().expect("lock");
                    messages.push(message);
                    messages.len() - 1
                };
                match after_data(index) {
                    AfterData::Accept => format!("250 2.0.0 Ok: queued as Q{index}\r\n"),
                    AfterData::Transient451 => {
                        "451 4.3.0 Error: queue file write error\r\n".to_owned()
                    }
                    AfterData::Permanent550 => {
                        "550 5.7.1 Rejected as spam from jane.doe@example.com\r\n".to_owned()
                    }
                    AfterData::NeverAnswer => std::future::pending().await,
                    AfterData::AcceptAfter(pause) => {
                        tokio::time::sleep(pause).await;
                        format!("250 2.0.0 Ok: queued as Q{index}\r\n")
                    }
                }
            }
            "NOOP" | "RSET" => "250 2.0.0 Ok\r\n".to_owned(),
            "QUIT" => {
                say(&mut write, "221 2.0.0 Bye\r\n").await;
                return;
            }
            _ => "502 5.5.2 Error: command not recognized\r\n".to_owned(),
        };
        if !say(&mut write, &answer).await {
            return;
        }
    }
}

fn mailer(base_url: &str, extra: Value) -> Mailer {
    let mut entry = json!({
        "kind": "smtp",
        "base_url": base_url,
        "smtp": {
            "from": "Demo Honda Leads <leads@gateway.demo-honda.example>",
            "to": ["leads@crm.demo-honda.example", "backup@crm.demo-honda.example"],
            "starttls": "off",
            "hello_name": "gateway.example"
        },
        "timeouts": { "connect": "1s", "request": "5s" }
    });
    if let (Some(entry), Value::Object(extra)) = (entry.as_object_mut(), extra) {
        entry.extend(extra);
    }
    let file: FileUpstream = serde_json::from_value(entry).expect("valid entry");
    Mailer::build("crm_mail", file).expect("valid mailer")
}

fn lead_mail(reference: &str) -> OutgoingMail {
    OutgoingMail {
        subject: "New lead: 2021 Honda Civic EX (Jane Doe)".to_owned(),
        message_id: format!("{reference}@gateway.demo-honda.example"),
        parts: vec![
            MailPart {
                content_type: "text/plain; charset=utf-8".to_owned(),
                filename: None,
                body: "<?xml version=\"1.0\"?><adf><prospect><customer>Jane Doe</customer>\
                       </prospect></adf>"
                    .to_owned(),
            },
            MailPart {
                content_type: "application/json".to_owned(),
                filename: Some("consent.json".to_owned()),
                body: "{\"contact\": true}".to_owned(),
            },
        ],
    }
}

#[tokio::test]
async fn smtp_send_delivers_one_message_with_its_parts_id_and_credentials() {
    let server = SmtpServer::start(|_| AfterData::Accept).await;
    let mail = mailer(
        &server.url(),
        json!({ "auth": { "kind": "basic", "username": "demo-smtp", "password": "smtp-s3cret" } }),
    );
    let receipt = mail.send(lead_mail("lead-42")).await.expect("accepted");
    assert_eq!(receipt.message_id, "lead-42@gateway.demo-honda.example");
    assert_eq!(receipt.server_reply, "250 2.0.0 Ok: queued as Q0");

    assert_eq!(
        *server.state.auth.lock().expect("lock"),
        ["\0demo-smtp\0smtp-s3cret"]
    );
    assert_eq!(
        *server.state.envelopes.lock().expect("lock"),
        [
            "MAIL FROM:<leads@gateway.demo-honda.example>",
            "RCPT TO:<leads@crm.demo-honda.example>",
            "RCPT TO:<backup@crm.demo-honda.example>",
        ]
    );
    let messages = server.messages();
    assert_eq!(messages.len(), 1, "exactly one message");
    let message = &messages[0];
    for expected in [
        "Message-ID: <lead-42@gateway.demo-honda.example>\r\n",
        "From: \"Demo Honda Leads\" <leads@gateway.demo-honda.example>\r\n",
        "To: leads@crm.demo-honda.example, backup@crm.demo-honda.example\r\n",
        "Subject: New lead: 2021 Honda Civic EX (Jane Doe)\r\n",
        "Content-Type: multipart/mixed;",
        "Content-Type: text/plain; charset=utf-8\r\n",
        "<adf><prospect><customer>Jane Doe</customer>",
        "Content-Disposition: attachment; filename=\"consent.json\"\r\n",
        "Content-Type: application/json\r\n",
        "{\"contact\": true}",
    ] {
        assert!(message.contains(expected), "{expected:?} in\n{message}");
    }
    assert!(!message.contains("Bcc"), "{message}");

    // The connection is pooled: a second lead reuses it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let receipt = mail.send(lead_mail("lead-43")).await.expect("accepted");
    assert_eq!(receipt.server_reply, "250 2.0.0 Ok: queued as Q1");
    assert_eq!(server.connections(), 1);
    assert_eq!(server.messages().len(), 2);
}

#[tokio::test]
async fn smtp_refusals_after_data_are_errors_that_quote_only_codes() {
    let server = SmtpServer::start(|i| {
        if i == 0 {
            AfterData::Transient451
        } else {
            AfterData::Permanent550
        }
    })
    .await;
    let mail = mailer(&server.url(), json!({}));

    let error = mail.send(lead_mail("lead-1")).await.expect_err("451");
    assert!(
        matches!(error, UpstreamError::Rejected { ref reply, permanent: false } if reply == "451 4.3.0"),
        "{error:?}"
    );
    assert!(matches!(
        error.into_aap("crm_mail"),
        AapError::UpstreamUnavailable { .. }
    ));

    let error = mail.send(lead_mail("lead-2")).await.expect_err("550");
    assert!(
        matches!(error, UpstreamError::Rejected { ref reply, permanent: true } if reply == "550 5.7.1"),
        "{error:?}"
    );
    assert!(!error.to_string().contains("jane"), "{error}");
    assert_eq!(
        server.messages().len(),
        2,
        "each lead was sent once, never retried"
    );
}

#[tokio::test]
async fn smtp_the_final_reply_has_its_own_data_timeout_and_a_cut_send_is_unconfirmed() {
    let server = SmtpServer::start(|i| {
        if i == 0 {
            AfterData::NeverAnswer
        } else {
            AfterData::Accept
        }
    })
    .await;
    // `request` (200 ms) bounds the envelope only: the reply to the final dot gets `data`.
    let mail = mailer(
        &server.url(),
        json!({ "timeouts": { "connect": "1s", "request": "200ms", "data": "700ms" } }),
    );
    let started = Instant::now();
    let failure = mail
        .deliver(lead_mail("lead-1"))
        .await
        .expect_err("timeout");
    let elapsed = started.elapsed();
    assert!(
        matches!(failure.error, UpstreamError::Timeout { after } if after == Duration::from_millis(700)),
        "{failure:?}"
    );
    assert!(
        failure.unconfirmed,
        "the message went out: its fate is unknown"
    );
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(1700),
        "{elapsed:?}"
    );

    // The connection left mid-transaction is never reused: the late reply to lead-1 must not
    // be read as the answer for lead-2.
    let receipt = mail.send(lead_mail("lead-2")).await.expect("accepted");
    assert_eq!(receipt.server_reply, "250 2.0.0 Ok: queued as Q1");
    assert_eq!(server.connections(), 2);
}

#[tokio::test]
async fn smtp_a_slow_final_reply_within_the_data_timeout_is_one_accepted_message() {
    let server = SmtpServer::start(|_| AfterData::AcceptAfter(Duration::from_millis(800))).await;
    // Slower than `request` (200 ms), within the default `data` (10 minutes).
    let mail = mailer(
        &server.url(),
        json!({ "timeouts": { "connect": "1s", "request": "200ms" } }),
    );
    let receipt = mail.send(lead_mail("lead-1")).await.expect("accepted");
    assert_eq!(receipt.server_reply, "250 2.0.0 Ok: queued as Q0");
    assert_eq!(server.messages().len(), 1);
}

#[tokio::test]
async fn smtp_a_refusal_before_the_message_is_certain() {
    // A refused port, and a 451 to the final dot: the server has no message either way.
    let dead = dead_port().await;
    let mail = mailer(&format!("smtp://{dead}"), json!({}));
    let failure = mail
        .deliver(lead_mail("lead-1"))
        .await
        .expect_err("refused");
    assert!(
        matches!(failure.error, UpstreamError::Connect(_)),
        "{failure:?}"
    );
    assert!(!failure.unconfirmed);
    let server = SmtpServer::start(|_| AfterData::Transient451).await;
    let mail = mailer(&server.url(), json!({}));
    let failure = mail.deliver(lead_mail("lead-1")).await.expect_err("451");
    assert!(!failure.unconfirmed, "{failure:?}");
}

#[tokio::test]
async fn smtp_a_refused_port_is_connect_and_trips_the_breaker() {
    let dead = dead_port().await;
    let mail = mailer(
        &format!("smtp://{dead}"),
        json!({ "circuit_breaker": { "failures": 1, "cool_down": "60s" } }),
    );
    let started = Instant::now();
    let error = mail.send(lead_mail("lead-1")).await.expect_err("refused");
    assert!(matches!(error, UpstreamError::Connect(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(mail.breaker_state(), BreakerState::Open);
    let error = mail.send(lead_mail("lead-1")).await.expect_err("open");
    assert!(
        matches!(error, UpstreamError::CircuitOpen { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn smtp_invalid_mail_is_refused_before_connecting() {
    let server = SmtpServer::start(|_| AfterData::Accept).await;
    let mail = mailer(&server.url(), json!({}));
    let mut no_parts = lead_mail("lead-1");
    no_parts.parts.clear();
    let mut bad_id = lead_mail("lead-1");
    bad_id.message_id = "<lead-1@x>\r\nBcc: evil@example.com".to_owned();
    let mut bad_type = lead_mail("lead-1");
    bad_type.parts[1].content_type = "not a type".to_owned();
    for outgoing in [no_parts, bad_id, bad_type] {
        let error = mail.send(outgoing).await.expect_err("invalid");
        assert!(
            matches!(error, UpstreamError::InvalidRequest(_)),
            "{error:?}"
        );
    }
    assert_eq!(server.connections(), 0);
    assert_eq!(mail.breaker_state(), BreakerState::Closed);
}

#[tokio::test]
async fn smtp_logs_carry_no_mail_content() {
    let server = SmtpServer::start(|i| {
        if i % 2 == 0 {
            AfterData::Accept
        } else {
            AfterData::Permanent550
        }
    })
    .await;
    let mail = mailer(
        &server.url(),
        json!({ "auth": { "kind": "basic", "username": "demo-smtp", "password": "smtp-s3cret" } }),
    );
    let (logs, _capture) = logs::capture();
    mail.send(lead_mail("lead-1")).await.expect("accepted");
    mail.send(lead_mail("lead-2")).await.expect_err("refused");

    let text = logs.text();
    assert!(text.contains("mail sent"), "{text}");
    assert!(text.contains("crm_mail"), "{text}");
    assert!(text.contains("550 5.7.1"), "{text}");
    for secret in [
        "Jane",
        "jane",
        "Civic",
        "crm.demo-honda.example",
        "consent",
        "smtp-s3cret",
        "lead-1@",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}

/// Reads a streamed body to its end (or its first error).
async fn read_stream(
    stream: &mut aap_gateway::upstream::BodyStream<'_>,
) -> Result<Vec<u8>, UpstreamError> {
    let mut body = Vec::new();
    while let Some(chunk) = stream.chunk().await? {
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[tokio::test]
async fn a_streamed_reply_hands_over_the_body_as_it_arrives_and_holds_its_slot() {
    let server = TestServer::start_scripted(|_| async {
        Response::new(ChunkBody {
            chunks: ["VIN,Price\r\n", "A1,\"$1\"\r\n", "B2,\"$2\"\r\n"]
                .map(|s: &'static str| Bytes::from_static(s.as_bytes()))
                .into(),
            exact: false,
            stall: false,
        })
    })
    .await;
    let up = upstream(&server.url(), json!({ "max_concurrency": 1 }));
    let (response, stream) = up
        .call_streaming(UpstreamRequest::get("/feed.csv"))
        .await
        .expect("reply");
    assert_eq!(response.status, StatusCode::OK);
    assert!(response.body.is_empty(), "the body is the stream's");
    let mut stream = stream.expect("a 2xx streams");
    // The one slot is the stream's until it is dropped.
    let second = up.call(UpstreamRequest::get("/feed.csv"));
    let waited = tokio::time::timeout(Duration::from_millis(200), second).await;
    assert!(waited.is_err(), "a second call waits for the slot");
    let body = read_stream(&mut stream).await.expect("body");
    assert_eq!(body, b"VIN,Price\r\nA1,\"$1\"\r\nB2,\"$2\"\r\n");
    drop(stream);
    up.call(UpstreamRequest::get("/feed.csv"))
        .await
        .expect("the slot is free again");
}

#[tokio::test]
async fn a_streamed_body_is_bounded_by_max_response_bytes_and_the_request_timeout() {
    let (_huge, up) = twice_too_large().await;
    let (_, stream) = up
        .call_streaming(UpstreamRequest::get("/x"))
        .await
        .expect("headers");
    let error = read_stream(&mut stream.expect("streams"))
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::TooLarge { .. }), "{error:?}");

    let (_stalled, up) = stalled_after(b"VIN\r\n").await;
    let started = Instant::now();
    let (_, stream) = up
        .call_streaming(UpstreamRequest::get("/x"))
        .await
        .expect("headers");
    let error = read_stream(&mut stream.expect("streams"))
        .await
        .unwrap_err();
    assert!(matches!(error, UpstreamError::Timeout { .. }), "{error:?}");
    assert!(started.elapsed() < Duration::from_millis(800));
}

#[tokio::test]
async fn a_streamed_call_retries_a_503_and_reads_an_error_reply_whole() {
    let server = TestServer::start_scripted(|seen| async move {
        match seen.index {
            0 => reply(503, "busy"),
            1 => reply(200, "VIN\r\nA1\r\n"),
            _ => reply(404, "no such feed"),
        }
    })
    .await;
    let up = upstream(
        &server.url(),
        json!({ "retries": { "attempts": 2, "backoff": "10ms" } }),
    );
    let (response, stream) = up
        .call_streaming(UpstreamRequest::get("/x"))
        .await
        .expect("reply");
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(
        read_stream(&mut stream.expect("streams"))
            .await
            .expect("body"),
        b"VIN\r\nA1\r\n"
    );
    let (response, stream) = up
        .call_streaming(UpstreamRequest::get("/x"))
        .await
        .expect("reply");
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(response.body, Bytes::from_static(b"no such feed"));
    assert!(stream.is_none(), "only a 2xx streams");
}
