//! OpenTelemetry traces through the real binary: an in-test OTLP/HTTP receiver gets the request
//! span — the root of a trace of the gateway's own, linked to the caller's `traceparent` — with
//! its stage spans and attributes, and the legacy DMS sees the gateway's trace continued in its
//! own `traceparent`, without the caller's `tracestate`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

mod common;

use common::process::DemoProcess;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const EXT: &str = "https://draft.autoagentprotocol.invalid/extensions/aap/latest";

/// An OTLP/HTTP collector on a free port: keeps every export request it is sent.
async fn receiver() -> (String, Arc<Mutex<Vec<Bytes>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&bodies);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = Arc::clone(&kept);
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let kept = Arc::clone(&kept);
                async move {
                    assert_eq!(req.uri().path(), "/v1/traces");
                    let body = req.into_body().collect().await?.to_bytes();
                    kept.lock().expect("lock").push(body);
                    let mut reply = hyper::Response::new(Full::new(Bytes::new()));
                    reply.headers_mut().insert(
                        "content-type",
                        http::HeaderValue::from_static("application/x-protobuf"),
                    );
                    Ok::<_, hyper::Error>(reply)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (format!("http://{addr}"), bodies)
}

fn spans(bodies: &[Bytes]) -> Vec<Span> {
    bodies
        .iter()
        .filter_map(|b| ExportTraceServiceRequest::decode(b.as_ref()).ok())
        .flat_map(|r| r.resource_spans)
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                Any::StringValue(s) => s.clone(),
                Any::IntValue(i) => i.to_string(),
                Any::BoolValue(b) => b.to_string(),
                Any::DoubleValue(d) => d.to_string(),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_is_traced_stage_by_stage_and_the_trace_reaches_the_dms() {
    let (collector, bodies) = receiver().await;
    let demo = DemoProcess::start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("RUST_LOG", "warn"),
    ])
    .await;
    let endpoints = &demo.endpoints;
    let gateway = endpoints["gateway"].as_str().expect("gateway");
    let dms = endpoints["simulators"]["dms"].as_str().expect("dms");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");

    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": { "message": { "messageId": "m-1", "role": "ROLE_USER", "parts": [
            { "data": { "type": "inventory.search.request", "filters": { "make": ["Toyota"] }, "pagination": { "limit": 2 } } }
        ] } }
    });
    let reply: Value = client
        .post(format!("{gateway}/a2a"))
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header("a2a-extensions", EXT)
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .header("tracestate", "buyer=internal-routing-hint")
        .body(body.to_string())
        .send()
        .await
        .expect("call")
        .json()
        .await
        .expect("json");
    assert!(reply.get("result").is_some(), "{reply}");

    // The DMS got the gateway's trace (not the caller's), and nothing of the caller's state.
    let received: Value = client
        .get(format!("{dms}/_sim/received"))
        .send()
        .await
        .expect("received")
        .json()
        .await
        .expect("json");
    let call = received
        .as_array()
        .and_then(|calls| calls.iter().rev().find(|c| c["path"] == "/api/v2/vehicles"))
        .unwrap_or_else(|| panic!("no search call at the DMS: {received}"));
    let traceparent = call["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent at the DMS: {received}"))
        .to_owned();
    assert!(
        call["headers"].get("tracestate").is_none(),
        "the caller's tracestate reached the DMS: {call}"
    );
    assert!(!received.to_string().contains("internal-routing-hint"));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts[1].len(), 32, "{traceparent}");
    assert_ne!(
        parts[1], TRACE,
        "a trace of the gateway's own: {traceparent}"
    );
    assert_ne!(
        parts[2], PARENT,
        "the gateway's own span is the DMS call's parent"
    );
    let gateway_trace = parts[1].to_owned();

    // The spans arrive (batched every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(15);
    let spans = loop {
        let all = spans(&bodies.lock().expect("lock"));
        let ours: Vec<Span> = all
            .into_iter()
            .filter(|s| hex(&s.trace_id) == gateway_trace)
            .collect();
        if ours.iter().any(|s| s.name == "aap.request") && ours.iter().any(|s| s.name == "encode") {
            break ours;
        }
        assert!(Instant::now() < deadline, "no request span exported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(demo);

    let root = spans
        .iter()
        .find(|s| s.name == "aap.request")
        .expect("root");
    assert!(root.parent_span_id.is_empty(), "a root span");
    let links: Vec<(String, String)> = root
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(
        links,
        [(TRACE.to_owned(), PARENT.to_owned())],
        "linked to the caller's span"
    );
    let attrs = attributes(root);
    for (key, value) in [
        ("dealer", "demo_toyota"),
        ("skill", "inventory.search"),
        ("binding", "jsonrpc"),
        ("outcome", "ok"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(
            attrs.get(key).map(String::as_str),
            Some(value),
            "{key}: {attrs:?}"
        );
    }
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for stage in [
        "decode",
        "auth",
        "rate_limit",
        "validate_request",
        "render",
        "upstream",
        "extract",
        "validate_response",
        "encode",
    ] {
        assert!(names.contains(&stage), "no `{stage}` span in {names:?}");
    }
    let upstream = spans
        .iter()
        .find(|s| s.name == "upstream")
        .expect("upstream");
    let attrs = attributes(upstream);
    assert_eq!(attrs.get("upstream").map(String::as_str), Some("dms"));
    assert_eq!(
        attrs.get("http.response.status_code").map(String::as_str),
        Some("200")
    );
    assert_eq!(
        hex(&upstream.span_id),
        parts[2],
        "the DMS call's parent is this span"
    );
    // Every stage hangs off the request span (directly or through another stage).
    let ids: Vec<String> = spans.iter().map(|s| hex(&s.span_id)).collect();
    for s in spans.iter().filter(|s| s.name != "aap.request") {
        assert!(
            ids.contains(&hex(&s.parent_span_id)),
            "{} is orphaned",
            s.name
        );
    }
}
