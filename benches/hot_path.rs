//! Hot-path pieces of one JSON-RPC call, measured separately and end to end in-process:
//! envelope decode + header checks, `SendMessageRequest` decode, request schema validation, and
//! the whole binding (decode → checks → validation → skill → reply schema → encode).

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;

use aap_gateway::app::App;
use aap_gateway::binding::{jsonrpc, send_message};
use aap_gateway::protocol::Skill;
use aap_gateway::telemetry::request::RequestLog;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};
use serde_json::json;

const EXT: &str = "https://draft.autoagentprotocol.invalid/extensions/aap/latest";

fn search_request() -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": "req-1", "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "01HZ9F4M7C0X3K5RN8B3WJTW2P", "role": "ROLE_USER",
                "parts": [{
                    "data": {
                        "type": "inventory.search.request",
                        "filters": { "make": ["Honda", "Toyota"], "condition": ["used", "cpo"],
                                     "year_min": 2020.0, "price_max": 30000, "body": ["suv"] },
                        "pagination": { "skip": 0, "limit": 20 },
                        "sort": { "field": "price", "order": "asc" },
                        "privacy": { "anonymous": true }
                    },
                    "mediaType": "application/vnd.autoagent.inventory-search-request+json"
                }]
            },
            "configuration": { "acceptedOutputModes": ["application/vnd.autoagent.inventory-search-response+json"] }
        }
    })
}

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("a2a-version", HeaderValue::from_static("1.0"));
    h.insert("a2a-extensions", HeaderValue::from_static(EXT));
    h
}

fn app() -> App {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    // A quota no benchmark exhausts: the limiter's cost is measured, never its refusals.
    let env = HashMap::from([
        (
            "AAP_GATEWAY__RATE_LIMIT__DEFAULT__RATE".to_owned(),
            "1000000000/s".to_owned(),
        ),
        (
            "AAP_GATEWAY__RATE_LIMIT__DEFAULT__BURST".to_owned(),
            "1000000000".to_owned(),
        ),
    ]);
    let settings = aap_gateway::settings::load_with_env(&config, env).expect("demo config");
    let listen = settings.listen;
    App::build(settings, listen).expect("demo app")
}

fn bench(c: &mut Criterion) {
    let app = app();
    let dealer = app.dealer("demo_toyota").expect("dealer");
    let search = search_request();
    let search_bytes = serde_json::to_vec(&search).expect("json");
    let params = search["params"].clone();

    c.bench_function("send_message_decode/inventory.search", |b| {
        b.iter(|| send_message::decode(black_box(params.clone())))
    });

    let call = send_message::decode(params.clone()).expect("valid call");
    c.bench_function("schema_validate/inventory.search", |b| {
        b.iter(|| {
            app.schemas
                .validate_call(Skill::InventorySearch, black_box(&call))
        })
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let headers = headers();
    let caller = aap_gateway::protocol::Caller {
        ip: std::net::Ipv4Addr::LOCALHOST.into(),
        presented: aap_gateway::auth::Presented::default(),
    };
    let info = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": { "message": { "messageId": "m", "role": "ROLE_USER",
                    "parts": [{ "data": { "type": "dealer.information.request" } }] } }
    }))
    .expect("json");
    c.bench_function("jsonrpc_serve/dealer.information (end to end)", |b| {
        b.iter(|| {
            // Including the request's log line and metrics, as the router finishes it.
            let mut log = RequestLog::start("jsonrpc", dealer.id(), &headers);
            let response = runtime.block_on(jsonrpc::serve(
                &app,
                dealer,
                &caller,
                &headers,
                black_box(&info),
                &mut log,
            ));
            log.finish(&app.metrics, &dealer.label, response.status());
            response
        })
    });
    // inventory.search is not served by the demo's profile-only dealers yet: this measures the
    // full decode → header checks → decode → UNSUPPORTED_SKILL error encode path.
    c.bench_function(
        "jsonrpc_serve/inventory.search (decode+checks+error encode)",
        |b| {
            b.iter(|| {
                // Including the request's log line and metrics, as the router finishes it.
                let mut log = RequestLog::start("jsonrpc", dealer.id(), &headers);
                let response = runtime.block_on(jsonrpc::serve(
                    &app,
                    dealer,
                    &caller,
                    &headers,
                    black_box(&search_bytes),
                    &mut log,
                ));
                log.finish(&app.metrics, &dealer.label, response.status());
                response
            })
        },
    );
}

criterion_group!(benches, bench);

fn bench_reply_schema(c: &mut Criterion) {
    let app = app();
    let profile = app.settings.dealers[0].profile.clone().expect("profile");
    let payload = aap_gateway::protocol::Payload::Json(std::sync::Arc::new(
        json!({ "type": "dealer.information.response", "data": profile }),
    ));
    c.bench_function("schema_check_response/dealer.information", |b| {
        b.iter(|| {
            app.schemas
                .check_response(Skill::DealerInformation, black_box(&payload))
        })
    });
}

criterion_group!(reply, bench_reply_schema);
criterion_main!(benches, reply);
