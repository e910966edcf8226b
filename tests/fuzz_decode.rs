//! Property tests of the JSON-RPC decoding path: decoding never panics, whatever arrives.
//!
//! Arbitrary bytes, arbitrary JSON values and random mutations of a valid `SendMessage` are
//! posted to the real gateway (one instance, started once on a shared runtime). Every request
//! must be answered within a timeout, and the answer must be either an HTTP-level refusal
//! (404/405/413, no JSON-RPC body) or HTTP 200 carrying a well-formed JSON-RPC reply: a result,
//! or an error with an integer code, a message and a `data` array whose entries all carry
//! `@type`, the first being a `google.rpc.ErrorInfo`.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Number, Value, json};

/// Per-request bound: decoding is local work, so anything slower is a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

struct Shared {
    runtime: tokio::runtime::Runtime,
    gateway: common::Gateway,
}

/// One gateway for every case of every property, serving on a multi-thread runtime that outlives
/// the individual `block_on` calls.
fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        // Thousands of cases from one address: the per-address quota would refuse most.
        let gateway = runtime.block_on(common::demo_unlimited());
        Shared { runtime, gateway }
    })
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Shrinking re-runs HTTP calls; keep it bounded.
        max_shrink_iters: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Posts `body` and checks the reply against the invariants above.
fn post_and_check(
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Option<Value>, TestCaseError> {
    let shared = shared();
    let reply = shared
        .runtime
        .block_on(async {
            tokio::time::timeout(
                REQUEST_TIMEOUT,
                shared.gateway.post_raw(path, headers, body),
            )
            .await
        })
        .map_err(|_| TestCaseError::fail("no answer within the timeout"))?;
    match reply.status {
        404 | 405 | 413 => {
            prop_assert!(
                reply.body.get("jsonrpc").is_none(),
                "HTTP-level refusals carry no JSON-RPC body: {}",
                reply.text
            );
            Ok(None)
        }
        200 => {
            common::jsonrpc::check_reply(&reply.body, &reply.text)?;
            Ok(Some(reply.body))
        }
        other => Err(TestCaseError::fail(format!(
            "unexpected HTTP {other}: {}",
            reply.text
        ))),
    }
}

fn standard() -> Vec<(&'static str, &'static str)> {
    common::standard_headers()
}

// === strategies ===

/// Keys that steer values into the decoder's interesting branches.
const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "message",
    "messageId",
    "role",
    "parts",
    "data",
    "text",
    "mediaType",
    "type",
    "contextId",
    "taskId",
    "configuration",
    "acceptedOutputModes",
    "pageSize",
];

const STRINGS: &[&str] = &[
    "2.0",
    "SendMessage",
    "ListTasks",
    "GetTask",
    "ROLE_USER",
    "ROLE_AGENT",
    "dealer.information.request",
    "lead.submit.request",
    "application/json",
    "*/*",
    "application/vnd.autoagent.dealer-information-request+json",
    "application/vnd.autoagent.dealer-information-response+json",
    "application/vnd.autoagent.lead-submit-request+json",
    "",
];

fn finite_f64() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        (-1000i32..1000).prop_map(|n| json!(f64::from(n))),
        Just(json!(9.223_372_036_854_776e18)),
        Just(json!(-0.0)),
        Just(json!(1e300)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        finite_f64(),
        ".{0,12}".prop_map(Value::String),
        proptest::sample::select(STRINGS).prop_map(|s| json!(s)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => "[a-zA-Z_/~]{0,6}",
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid SendMessage for the demo's one served skill.
fn valid_request() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": "req-1",
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "msg-1",
                "role": "ROLE_USER",
                "contextId": "ctx-1",
                "parts": [
                    { "text": "hello" },
                    { "data": { "type": "dealer.information.request" },
                      "mediaType": "application/vnd.autoagent.dealer-information-request+json" }
                ]
            },
            "configuration": {
                "acceptedOutputModes": ["application/vnd.autoagent.dealer-information-response+json"]
            }
        }
    })
}

/// JSON Pointers into `valid_request()` that a mutation may replace or delete.
const TARGETS: &[&str] = &[
    "",
    "/jsonrpc",
    "/id",
    "/method",
    "/params",
    "/params/message",
    "/params/message/messageId",
    "/params/message/role",
    "/params/message/contextId",
    "/params/message/taskId",
    "/params/message/parts",
    "/params/message/parts/0",
    "/params/message/parts/1",
    "/params/message/parts/1/data",
    "/params/message/parts/1/data/type",
    "/params/message/parts/1/data/extra",
    "/params/message/parts/1/mediaType",
    "/params/configuration",
    "/params/configuration/acceptedOutputModes",
    "/params/configuration/acceptedOutputModes/0",
];

#[derive(Debug, Clone)]
enum Mutation {
    Replace(&'static str, Value),
    Remove(&'static str),
    /// Appends a value to the array at the pointer (e.g. a second DataPart).
    Push(&'static str, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let target = proptest::sample::select(TARGETS);
    prop_oneof![
        4 => (target.clone(), any_json()).prop_map(|(t, v)| Mutation::Replace(t, v)),
        2 => target.prop_map(Mutation::Remove),
        1 => (
            proptest::sample::select(&["/params/message/parts", "/params/configuration/acceptedOutputModes"][..]),
            prop_oneof![
                any_json(),
                Just(json!({ "data": { "type": "dealer.information.request" } })),
                Just(json!({ "data": {} , "mediaType": "text/plain" })),
            ],
        )
            .prop_map(|(t, v)| Mutation::Push(t, v)),
    ]
}

fn split(pointer: &str) -> Option<(&str, &str)> {
    pointer.rsplit_once('/')
}

fn apply(request: &mut Value, mutation: &Mutation) {
    match mutation {
        Mutation::Replace("", v) => *request = v.clone(),
        Mutation::Replace(pointer, v) => {
            let Some((parent, last)) = split(pointer) else {
                return;
            };
            match request.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.insert(last.to_owned(), v.clone());
                }
                Some(Value::Array(items)) => {
                    if let Some(slot) = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                        *slot = v.clone();
                    }
                }
                _ => {}
            }
        }
        Mutation::Remove("") => *request = Value::Null,
        Mutation::Remove(pointer) => {
            let Some((parent, last)) = split(pointer) else {
                return;
            };
            match request.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(last);
                }
                Some(Value::Array(items)) => {
                    if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < items.len()) {
                        items.remove(i);
                    }
                }
                _ => {}
            }
        }
        Mutation::Push(pointer, v) => {
            if let Some(Value::Array(items)) = request.pointer_mut(pointer) {
                items.push(v.clone());
            }
        }
    }
}

/// Header sets: the standard ones, and variations of each checked header.
fn headers() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    let content_type = proptest::sample::select(
        &[
            Some("application/json"),
            Some("application/json; charset=utf-8"),
            Some("text/plain"),
            None,
        ][..],
    );
    let version =
        proptest::sample::select(&[Some("1.0"), Some("1.0.1"), Some(""), Some("0.3"), None][..]);
    let extensions =
        proptest::sample::select(&[Some(common::EXT), Some("urn:other"), Some(""), None][..]);
    let varied = (content_type, version, extensions).prop_map(|(ct, v, e)| {
        let mut out = Vec::new();
        if let Some(ct) = ct {
            out.push(("content-type", ct));
        }
        if let Some(v) = v {
            out.push(("a2a-version", v));
        }
        if let Some(e) = e {
            out.push(("a2a-extensions", e));
        }
        out
    });
    // Mostly the standard headers, so mutations reach the message decoder.
    prop_oneof![3 => Just(standard()), 1 => varied]
}

// === properties ===

#[test]
fn the_unmutated_request_succeeds() {
    let body = post_and_check(
        "/a2a",
        &standard(),
        valid_request().to_string().into_bytes(),
    )
    .expect("well-formed reply")
    .expect("JSON-RPC reply");
    assert_eq!(body["result"]["message"]["role"], "ROLE_AGENT", "{body}");
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_bytes_never_panic_or_hang(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        post_and_check("/a2a", &standard(), body)?;
    }

    #[test]
    fn corrupted_valid_requests_never_panic_or_hang(
        cut in 0usize..2000,
        flips in proptest::collection::vec((0usize..2000, any::<u8>()), 0..4),
    ) {
        let mut body = valid_request().to_string().into_bytes();
        for (at, byte) in flips {
            let at = at % body.len();
            body[at] = byte;
        }
        body.truncate(cut.min(body.len()));
        post_and_check("/a2a", &standard(), body)?;
    }

    #[test]
    fn arbitrary_json_values_never_panic_or_hang(value in any_json()) {
        post_and_check("/a2a", &standard(), value.to_string().into_bytes())?;
    }

    #[test]
    fn arbitrary_json_as_send_message_params_never_panics(params in any_json()) {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params });
        let reply = post_and_check("/a2a", &standard(), body.to_string().into_bytes())?
            .expect("a JSON-RPC reply");
        prop_assert_eq!(&reply["id"], &json!(1));
    }

    #[test]
    fn mutated_send_messages_never_panic_or_hang(
        mutations in proptest::collection::vec(mutation(), 1..4),
        headers in headers(),
        path in proptest::sample::select(&["/a2a", "/a2a/", "/dealers/demo-honda/a2a"][..]),
    ) {
        let mut request = valid_request();
        for m in &mutations {
            apply(&mut request, m);
        }
        let reply = post_and_check(path, &headers, request.to_string().into_bytes())?
            .expect("a JSON-RPC reply");
        // The id echo rule: the sent id when it is a string or a number, else null.
        let sent = request.get("id").cloned().unwrap_or(Value::Null);
        let echoed = &reply["id"];
        if request.is_object() && (sent.is_string() || sent.is_number()) {
            prop_assert!(echoed == &sent || echoed.is_null(), "id {} echoed as {}", sent, echoed);
        } else {
            prop_assert!(echoed.is_null(), "id {} echoed as {}", sent, echoed);
        }
    }

    #[test]
    fn arbitrary_parts_never_panic_or_hang(
        parts in proptest::collection::vec(any_json(), 0..4),
        data in any_json(),
        media_type in proptest::option::of(proptest::sample::select(STRINGS)),
    ) {
        let mut request = valid_request();
        let mut all = parts;
        let mut part = json!({ "data": data });
        if let Some(mt) = media_type {
            part["mediaType"] = json!(mt);
        }
        all.push(part);
        request["params"]["message"]["parts"] = Value::Array(all);
        post_and_check("/a2a", &standard(), request.to_string().into_bytes())?
            .expect("a JSON-RPC reply");
    }
}
