//! Fuzzing the gateway's two untrusted inputs in-process, without sockets in front:
//!
//! - **Request bodies** through the real request handling (`server::routes::route`: dealer
//!   routing, the per-address limit, the body read, the JSON-RPC and HTTP+JSON bindings, the
//!   pipeline, and the demo's dealers with their legacy simulators behind them): valid
//!   `SendMessage` calls of all five skills, mutated at any JSON Pointer of the envelope or the
//!   skill payload (values of every type, huge numbers, long and odd strings, deep nesting),
//!   sometimes corrupted byte-wise, under varied headers. Each answer must keep its binding's
//!   shape: a well-formed JSON-RPC reply (HTTP 200, or 401/403 for keys), a `google.rpc.Status`
//!   or a `SendMessageResponse` on HTTP+JSON, or a plain HTTP refusal (400/404/405/408/413) —
//!   and never an internal error, as the simulators behind are healthy.
//! - **Upstream replies** through every mapping's decoding and extraction
//!   (`mapping::examples::answer` with a canned upstream): the demo's REST DMS (JSON), SOAP DMS
//!   and CRM (XML), CSV feed, and the fixtures' XML, Latin-1 and CP1252 feeds, Lakeside (REST)
//!   and Riverside (SOAP). Bodies are the mappings' own example replies mutated byte-wise
//!   (format tokens inserted, chunks cut or repeated), generated JSON, XML (deep, wide, odd
//!   entities) and CSV, or arbitrary bytes, under any status and content type.
//!
//! No input may panic — anywhere in the process: a panic hook counts panics of spawned tasks and
//! blocking threads too — or take longer than [`DEADLINE`]. The normal suite runs
//! [`SHORT_CASES`] of each; the long run (`#[ignore]`, [`LONG_CASES`] unless `AAP_FUZZ_CASES`
//! says otherwise) is the one docs/operations.md §Hardening figures reports:
//!
//! ```sh
//! cargo test --release --test fuzz -- --ignored --nocapture
//! ```
//!
//! `AAP_FUZZ_SEED=<u64>` replays a run (each run prints its seed and, per outcome, how many
//! inputs ended so and their mean time).

// The whole request path is one future here, nested deeper than rustc's default layout query
// depth allows.
#![recursion_limit = "256"]

mod common;

use std::collections::BTreeMap;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aap_gateway::app::App;
use aap_gateway::engine::proxy::Canned;
use aap_gateway::protocol::Skill;
use aap_gateway::tools::examples;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Map, Number, Value, json};

/// Cases of each kind in the normal suite (seconds).
const SHORT_CASES: u32 = 1_000;
/// Cases of each kind in the long run.
const LONG_CASES: u32 = 1_000_000;
/// Longest any one input may take: everything here is local work or a loopback simulator.
const DEADLINE: Duration = Duration::from_secs(10);

// =============================================================================================
// The harness

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts every panic of the process (then reports it as usual).
fn count_panics() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// How inputs ended: per outcome, how many and how long they took in total.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<String, (u64, Duration)>>);

impl Tally {
    fn add(&self, outcome: String, took: Duration) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = map.entry(outcome).or_default();
        entry.0 += 1;
        entry.1 += took;
    }

    fn report(&self) -> String {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rows: Vec<(&String, &(u64, Duration))> = map.iter().collect();
        rows.sort_by_key(|row| std::cmp::Reverse(row.1.0));
        rows.iter()
            .map(|(k, (n, took))| {
                let mean = took.as_secs_f64() * 1e6 / *n as f64;
                format!("  {n:>9}  {mean:>8.0} µs  {k}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The number of cases: `AAP_FUZZ_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("AAP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// Runs `test` on `cases` values of `strategy` (shrinking a failure to a small input), checks
/// that nothing panicked anywhere, and prints the figures.
fn fuzz<S: Strategy>(
    what: &str,
    cases: u32,
    strategy: S,
    tally: &Tally,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    count_panics();
    // The panic count is the process's: one fuzz run at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seed: u64 = std::env::var("AAP_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let panics_before = PANICS.load(Ordering::SeqCst);
    let started = Instant::now();
    let result = runner.run(&strategy, test);
    let elapsed = started.elapsed();
    eprintln!(
        "fuzz {what}: {cases} inputs in {:.1} s ({:.0}/s), seed {seed}; outcomes:\n{}",
        elapsed.as_secs_f64(),
        f64::from(cases) / elapsed.as_secs_f64(),
        tally.report()
    );
    if let Err(error) = result {
        let text = error.to_string();
        let cut: String = text.chars().take(4_000).collect();
        panic!("fuzz {what} (AAP_FUZZ_SEED={seed}): {cut}");
    }
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics_before,
        "fuzz {what} (AAP_FUZZ_SEED={seed}): a task panicked somewhere in the process"
    );
}

// =============================================================================================
// Values

/// Strings that steer values into the decoders' and validators' branches.
const WORDS: &[&str] = &[
    "2.0",
    "SendMessage",
    "ListTasks",
    "ROLE_USER",
    "ROLE_AGENT",
    "dealer.information.request",
    "inventory.search.request",
    "inventory.facets.request",
    "inventory.vehicle.request",
    "lead.submit.request",
    "application/json",
    "*/*",
    "application/vnd.autoagent.inventory-search-request+json",
    "application/vnd.autoagent.lead-submit-request+json",
    "new",
    "used",
    "cpo",
    "good",
    "price",
    "year",
    "mileage",
    "asc",
    "desc",
    "email",
    "phone",
    "sms",
    "lead_submission",
    "test_drive",
    "Toyota",
    "Honda",
    "Camry",
    "2026-04-30T10:16:00Z",
    "2026-04-30T10:16:00+25:00",
    "9999-12-31T23:59:59Z",
    "+14155550123",
    "a@b.c",
    "4T1DAACKXRU176220",
    "",
    " ",
    "\u{0}",
    "\u{feff}",
    "\u{202e}",
    "𝔸𝔸𝔸",
    "<script>",
    "]]>",
    "{{ 7*7 }}",
    "${FEED_URL}",
    "../../etc/passwd",
    "%00",
    "\r\nX-Injected: 1",
];

/// Keys of the envelope and of AAP payloads.
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
    "contextId",
    "taskId",
    "configuration",
    "acceptedOutputModes",
    "type",
    "filters",
    "make",
    "model",
    "condition",
    "year_min",
    "year_max",
    "price_min",
    "price_max",
    "mileage_max",
    "body",
    "fuel",
    "vehicle_type",
    "zip",
    "radius",
    "sort",
    "field",
    "order",
    "pagination",
    "skip",
    "limit",
    "query",
    "vin",
    "stock",
    "vehicle_id",
    "customer",
    "first_name",
    "email",
    "phone",
    "consent",
    "granted_at",
    "expires_at",
    "allowed_channels",
    "consent_text",
    "scope",
    "source_agent",
    "name",
    "vehicle_of_interest",
    "trade_in",
    "appointment",
    "appointment_type",
    "appointment_at",
    "idempotency_key",
    "privacy",
];

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        (-3i64..3000).prop_map(|n| json!(n)),
        proptest::sample::select(
            &[
                u64::MAX as f64,
                1e300,
                -1e300,
                0.5,
                -0.0,
                1e-300,
                9.007_199_254_740_993e15
            ][..]
        )
        .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
}

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(str::to_owned),
        3 => ".{0,24}",
        1 => (proptest::sample::select(&["a", "é", "\u{0}", "𝔸", "\"", "\\", " "][..]), 0usize..9000)
            .prop_map(|(c, n)| c.repeat(n)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => string(),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let tree = leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    });
    prop_oneof![
        8 => tree,
        // Deeper than serde_json's recursion limit, or just under it.
        1 => (0usize..300, any::<bool>()).prop_map(|(depth, objects)| {
            (0..depth).fold(json!(1), |v, _| if objects { json!({ "a": v }) } else { json!([v]) })
        }),
        // Wide.
        1 => (0usize..3000).prop_map(|n| Value::Array(vec![json!("x"); n])),
    ]
}

// =============================================================================================
// Request bodies through the real request handling

/// A VIN of the demo's Honda feed and Toyota DMS, so detail and leads find real units.
fn demo_vins() -> &'static [String] {
    static VINS: OnceLock<Vec<String>> = OnceLock::new();
    VINS.get_or_init(|| {
        let toyota = aap_sim::inventory::toyota_group();
        let honda = aap_sim::inventory::honda_powersports();
        toyota
            .iter()
            .take(3)
            .chain(honda.iter().take(3))
            .map(|v| v.vin.clone())
            .collect()
    })
}

/// A valid payload of each skill (the lead keyed, so most mutated copies replay or conflict
/// instead of each reaching the CRM).
fn seed_payload(skill: usize, vin: &str) -> Value {
    match skill {
        0 => json!({ "type": "dealer.information.request" }),
        1 => json!({
            "type": "inventory.search.request",
            "query": "AWD",
            "filters": { "make": ["Toyota", "Honda"], "condition": ["new", "used"],
                         "year_min": 2018, "price_max": 60000 },
            "sort": { "field": "price", "order": "asc" },
            "pagination": { "skip": 0, "limit": 5 }
        }),
        2 => json!({ "type": "inventory.facets.request", "filters": { "condition": ["used"] } }),
        3 => json!({ "type": "inventory.vehicle.request", "vin": vin }),
        _ => json!({
            "type": "lead.submit.request",
            "customer": { "first_name": "Anna", "last_name": "Lee", "email": "anna@example.com",
                          "phone": "+14155550123",
                          "address": { "city": "San José", "zip": "94110" } },
            "consent": { "granted_at": "2026-04-30T10:16:00Z", "allowed_channels": ["email", "phone"],
                         "consent_text": "I agree to be contacted about this vehicle.",
                         "scope": ["lead_submission"] },
            "source_agent": { "name": "fuzz-agent" },
            "message": "Is it still available?",
            "idempotency_key": "fuzz-lead-1"
        }),
    }
}

fn envelope(data: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": "fuzz-1",
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "contextId": "c-1",
                "parts": [ { "text": "hi" }, { "data": data } ]
            },
            "configuration": { "acceptedOutputModes": ["*/*"] }
        }
    })
}

/// One edit of a JSON document, at a position chosen among the document's own pointers when it
/// is applied (so every field of every seed can be hit).
#[derive(Debug, Clone)]
enum Edit {
    Replace(Index, Value),
    Remove(Index),
    Insert(Index, String, Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        5 => (any::<Index>(), any_json()).prop_map(|(i, v)| Edit::Replace(i, v)),
        2 => any::<Index>().prop_map(Edit::Remove),
        2 => (any::<Index>(), key(), any_json()).prop_map(|(i, k, v)| Edit::Insert(i, k, v)),
    ]
}

fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let child = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                pointers(v, child, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn apply(doc: &mut Value, edit: &Edit) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let pick = |i: &Index| all[i.index(all.len())].clone();
    match edit {
        Edit::Replace(i, v) => {
            if let Some(slot) = doc.pointer_mut(&pick(i)) {
                *slot = v.clone();
            }
        }
        Edit::Remove(i) => {
            let at = pick(i);
            let Some((parent, last)) = at.rsplit_once('/') else {
                *doc = Value::Null;
                return;
            };
            match doc.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(items)) => {
                    if let Some(n) = last.parse::<usize>().ok().filter(|n| *n < items.len()) {
                        items.remove(n);
                    }
                }
                _ => {}
            }
        }
        Edit::Insert(i, k, v) => match doc.pointer_mut(&pick(i)) {
            Some(Value::Object(map)) => {
                map.insert(k.clone(), v.clone());
            }
            Some(Value::Array(items)) => items.push(v.clone()),
            _ => {}
        },
    }
}

/// Bytes overwritten (position, value), and where the body is cut, if it is.
type Corruption = (Vec<(Index, u8)>, Option<Index>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    JsonRpc,
    HttpJson,
}

#[derive(Debug, Clone)]
struct RequestCase {
    binding: Binding,
    honda: bool,
    skill: usize,
    vin: Index,
    payload_edits: Vec<Edit>,
    envelope_edits: Vec<Edit>,
    /// Byte flips and a cut of the serialized body.
    corruption: Option<Corruption>,
    headers: Vec<(&'static str, &'static str)>,
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    let optional =
        |values: &'static [&'static str]| proptest::option::of(proptest::sample::select(values));
    let varied = (
        optional(&[
            "application/json",
            "application/json; charset=utf-8",
            "application/a2a+json",
            "APPLICATION/JSON",
            "text/plain",
            "application/json; charset=latin1",
        ]),
        optional(&["1.0", "1.0.1", "", "0.3", "1.0, 1.0", "2.0"]),
        optional(&[
            common::EXT,
            "urn:other",
            "",
            "urn:other, https://draft.autoagentprotocol.invalid/extensions/aap/latest",
        ]),
        optional(&[
            "Bearer nope",
            "Basic Zm9vOmJhcg==",
            "Bearer ",
            "bearer  x  y",
        ]),
    )
        .prop_map(|(ct, version, extensions, auth)| {
            let mut out = Vec::new();
            if let Some(v) = ct {
                out.push(("content-type", v));
            }
            if let Some(v) = version {
                out.push(("a2a-version", v));
            }
            if let Some(v) = extensions {
                out.push(("a2a-extensions", v));
            }
            if let Some(v) = auth {
                out.push(("authorization", v));
            }
            out
        });
    prop_oneof![9 => Just(common::standard_headers()), 1 => varied]
}

fn request_case() -> impl Strategy<Value = RequestCase> {
    (
        prop_oneof![3 => Just(Binding::JsonRpc), 1 => Just(Binding::HttpJson)],
        prop_oneof![2 => Just(true), 1 => Just(false)],
        0usize..5,
        any::<Index>(),
        proptest::collection::vec(edit(), 0..4),
        prop_oneof![
            6 => Just(Vec::new()),
            1 => proptest::collection::vec(edit(), 1..3),
        ],
        prop_oneof![
            12 => Just(None),
            1 => (
                proptest::collection::vec((any::<Index>(), any::<u8>()), 0..4),
                proptest::option::of(any::<Index>())
            )
                .prop_map(Some),
        ],
        headers(),
    )
        .prop_map(
            |(binding, honda, skill, vin, payload_edits, envelope_edits, corruption, headers)| {
                RequestCase {
                    binding,
                    honda,
                    skill,
                    vin,
                    payload_edits,
                    envelope_edits,
                    corruption,
                    headers,
                }
            },
        )
}

impl RequestCase {
    fn path(&self) -> &'static str {
        match (self.honda, self.binding) {
            (false, Binding::JsonRpc) => "/a2a",
            (true, Binding::JsonRpc) => "/dealers/demo-honda/a2a",
            (false, Binding::HttpJson) => "/a2a/message:send",
            (true, Binding::HttpJson) => "/dealers/demo-honda/a2a/message:send",
        }
    }

    fn body(&self) -> Vec<u8> {
        let vins = demo_vins();
        let mut payload = seed_payload(self.skill, &vins[self.vin.index(vins.len())]);
        for e in &self.payload_edits {
            apply(&mut payload, e);
        }
        let mut doc = envelope(payload);
        for e in &self.envelope_edits {
            apply(&mut doc, e);
        }
        if self.binding == Binding::HttpJson {
            doc = doc.get("params").cloned().unwrap_or(doc);
        }
        let mut body = doc.to_string().into_bytes();
        if let Some((flips, cut)) = &self.corruption
            && !body.is_empty()
        {
            for (at, byte) in flips {
                let i = at.index(body.len());
                body[i] = *byte;
            }
            if let Some(cut) = cut {
                body.truncate(cut.index(body.len() + 1));
            }
        }
        body
    }
}

struct Front {
    runtime: tokio::runtime::Runtime,
    app: Arc<App>,
    _gateway: common::Gateway,
    _simulators: aap_sim::Simulators,
}

/// The demo (both dealers, the HTTP+JSON binding on) with its simulators, rate limits off (a
/// fuzzer is one client flooding), on a runtime that outlives the cases.
fn front() -> &'static Front {
    static FRONT: OnceLock<Front> = OnceLock::new();
    FRONT.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (gateway, simulators) = runtime.block_on(common::demo_with_simulators_unlimited());
        let app = Arc::clone(&gateway.app);
        Front {
            runtime,
            app,
            _gateway: gateway,
            _simulators: simulators,
        }
    })
}

/// Sends one case through `route` and checks the answer's shape; returns its outcome label.
fn handle(case: &RequestCase) -> Result<String, TestCaseError> {
    let front = front();
    let body = case.body();
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(case.path())
        .header("host", "127.0.0.1");
    for (name, value) in &case.headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| TestCaseError::fail(format!("building the request: {e}")))?;
    let app = Arc::clone(&front.app);
    let (status, text) = front
        .runtime
        .block_on(async move {
            tokio::time::timeout(DEADLINE, async {
                let response = aap_gateway::server::routes::route(&app, request).await;
                let status = response.status();
                let bytes = response
                    .into_body()
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                (status, bytes)
            })
            .await
        })
        .map_err(|_| TestCaseError::fail(format!("no answer within {DEADLINE:?}")))?;
    let text = String::from_utf8(text.to_vec())
        .map_err(|_| TestCaseError::fail("a reply body that is not UTF-8"))?;
    let status = status.as_u16();
    let skill = ["info", "search", "facets", "vehicle", "lead"][case.skill];
    let dealer = if case.honda { "honda" } else { "toyota" };
    let label = |outcome: String| format!("{dealer} {skill}: {outcome}");
    if matches!(status, 400 | 404 | 405 | 408 | 413) {
        return Ok(label(format!("{:?} HTTP {status}", case.binding)));
    }
    let body: Value = serde_json::from_str(&text)
        .map_err(|e| TestCaseError::fail(format!("HTTP {status}, body not JSON ({e}): {text}")))?;
    match case.binding {
        Binding::JsonRpc => {
            prop_assert!(
                matches!(status, 200 | 401 | 403),
                "JSON-RPC answered HTTP {}: {}",
                status,
                text
            );
            // The simulators are healthy: whatever a request holds, it is refused or answered,
            // never an internal failure of the gateway.
            prop_assert!(
                !text.contains("INTERNAL_ERROR"),
                "an internal error: {}",
                text
            );
            common::jsonrpc::check_reply(&body, &text).map(label)
        }
        Binding::HttpJson => check_http_json(status, &body, &text).map(label),
    }
}

/// An HTTP+JSON reply: a `SendMessageResponse` (`message`) with 200, or a `google.rpc.Status`
/// (`error.code` equal to the HTTP status, `status`, `message`).
fn check_http_json(status: u16, body: &Value, text: &str) -> Result<String, TestCaseError> {
    prop_assert!(status != 500, "an internal error: {}", text);
    if status == 200 {
        prop_assert!(
            body.get("message").is_some(),
            "200 without message: {}",
            text
        );
        return Ok("HttpJson 200".to_owned());
    }
    let error = &body["error"];
    prop_assert_eq!(&error["code"], &json!(status), "{}", text);
    prop_assert!(error["status"].is_string(), "{}", text);
    prop_assert!(error["message"].is_string(), "{}", text);
    Ok(format!(
        "HttpJson {status} {}",
        error["status"].as_str().unwrap_or_default()
    ))
}

fn request_fuzz(cases: u32) {
    let tally = Tally::default();
    fuzz("request bodies", cases, request_case(), &tally, |case| {
        let started = Instant::now();
        let outcome = handle(&case)?;
        tally.add(outcome, started.elapsed());
        Ok(())
    });
}

#[test]
fn request_bodies_never_panic_hang_or_break_the_bindings_shape() {
    request_fuzz(cases(SHORT_CASES));
}

#[test]
#[ignore = "long run: cargo test --release --test fuzz -- --ignored --nocapture"]
fn a_million_request_bodies_never_panic_hang_or_break_the_bindings_shape() {
    request_fuzz(cases(LONG_CASES));
}

// =============================================================================================
// Upstream replies through every mapping's decoding and extraction

/// One handler to feed: a dealer's skill, a valid request for it, and example replies to
/// mutate.
struct Target {
    dealer: usize,
    skill: Skill,
    label: String,
    request: Value,
    seeds: Vec<Seed>,
}

#[derive(Debug, Clone)]
struct Seed {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

struct Back {
    runtime: tokio::runtime::Runtime,
    app: App,
    targets: Vec<Target>,
    _dir: tempfile::TempDir,
}

/// Every mapping folder with an upstream: the demo's and the fixtures'.
const FOLDERS: &[(&str, &str)] = &[
    ("demo_toyota", "mappings/demo-toyota"),
    ("demo_honda", "mappings/demo-honda"),
    ("xml_feed", "tests/fixtures/mappings/xml-feed"),
    ("latin1_feed", "tests/fixtures/mappings/latin1-feed"),
    ("cp1252_feed", "tests/fixtures/mappings/cp1252-csv-feed"),
    ("lakeside", "tests/fixtures/mappings/lakeside"),
    ("riverside", "tests/fixtures/mappings/riverside"),
];

/// Generic replies of each format, for handlers whose folder has no example reply (and as
/// foreign-format input for all).
fn generic_seeds() -> Vec<Seed> {
    let seed = |ct: &str, body: &str| Seed {
        status: 200,
        content_type: Some(ct.to_owned()),
        body: body.as_bytes().to_vec(),
    };
    vec![
        seed(
            "application/json",
            r#"{"TotalCount":2,"Items":[{"VIN":"4T1DAACKXRU176220","Make":"Toyota","Model":"Camry","ModelYear":"2024","InternetPrice":"$23,990","Status":"In Stock","Type":"New"},{"VIN":"5YFB4MDE0RP999999","Make":"Toyota","Odometer":"1,200 mi"}]}"#,
        ),
        seed(
            "text/xml; charset=utf-8",
            r#"<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><Response><Vehicle><VIN>4T1DAACKXRU176220</VIN><Make>Toyota</Make><Price>23990</Price></Vehicle></Response></soap:Body></soap:Envelope>"#,
        ),
        seed(
            "text/csv; charset=utf-8",
            "VIN,Stock #,Year,Make,Model,Condition,Status,Price\n1HGCY2F57RA000001,H1,2024,Honda,Civic,New,In Stock,\"$24,990\"\n",
        ),
    ]
}

/// A valid request of `skill` for handlers without an example.
fn default_request(skill: Skill) -> Value {
    match skill {
        Skill::LeadSubmit => seed_payload(4, "1HGCY2F57RA000001"),
        Skill::InventoryVehicle => seed_payload(3, "1HGCY2F57RA000001"),
        Skill::InventorySearch => seed_payload(1, ""),
        Skill::InventoryFacets => seed_payload(2, ""),
        Skill::DealerInformation => seed_payload(0, ""),
    }
}

fn back() -> &'static Back {
    static BACK: OnceLock<Back> = OnceLock::new();
    BACK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut yaml = String::from("dealers:\n");
        for (id, folder) in FOLDERS {
            yaml.push_str(&format!(
                "  - id: {id}\n    path_prefix: /{id}\n    card: {{ name: {id}, description: Fuzzed. }}\n    mappings: {}\n",
                common::repo_path(folder).display()
            ));
        }
        let path = dir.path().join("gateway.yaml");
        std::fs::write(&path, yaml).expect("write config");
        let settings = aap_gateway::settings::load_with_env(&path, Default::default())
            .expect("settings");
        // Nothing is ever called: every reply is canned.
        let vars = |name: &str| {
            matches!(name, "FEED_URL" | "LAKESIDE_URL" | "RIVERSIDE_URL")
                .then(|| "http://127.0.0.1:9".to_owned())
        };
        let listen = settings.listen;
        let app = runtime
            .block_on(async { App::build_with_vars(settings, listen, &vars) })
            .unwrap_or_else(|p| panic!("{p:?}"));
        let mut targets = Vec::new();
        for (index, dealer) in app.dealers.iter().enumerate() {
            let examples = dealer.examples();
            for skill in dealer.skills() {
                let Some(handler) = dealer.handler_for(skill) else { continue };
                if examples::upstream_of(handler).is_none() {
                    continue; // a profile, or a lead delivered by mail: no reply to decode
                }
                let mut seeds: Vec<Seed> = examples
                    .iter()
                    .filter_map(|e| examples::canned(e).ok())
                    .map(|c| Seed {
                        status: c.status.as_u16(),
                        content_type: c
                            .content_type
                            .as_ref()
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned),
                        body: c.body.to_vec(),
                    })
                    .filter(|s| !s.body.is_empty())
                    .collect();
                seeds.extend(generic_seeds());
                let request = examples
                    .iter()
                    .find(|e| e.skill == skill && e.case.expect_error.is_none())
                    .map_or_else(|| default_request(skill), |e| e.case.request.clone());
                targets.push(Target {
                    dealer: index,
                    skill,
                    label: format!("{} {}", dealer.id(), skill.id()),
                    request,
                    seeds,
                });
            }
        }
        assert!(targets.len() >= 12, "{} handlers to fuzz", targets.len());
        Back {
            runtime,
            app,
            targets,
            _dir: dir,
        }
    })
}

/// Bytes that mean something to one of the decoders.
const TOKENS: &[&str] = &[
    "<",
    ">",
    "</",
    "/>",
    "<a>",
    "</a>",
    "<![CDATA[",
    "]]>",
    "<!--",
    "-->",
    "&amp;",
    "&lt;",
    "&#0;",
    "&#x110000;",
    "&#65;",
    "&unknown;",
    "<!DOCTYPE r [<!ENTITY e \"eeeeeeeeee\">]>",
    "<?xml version=\"1.0\" encoding=\"utf-16\"?>",
    "<?xml version=\"1.0\" encoding=\"nonsense\"?>",
    "xmlns:soap=\"urn:x\"",
    "<soap:Fault><faultcode>soap:Client</faultcode><faultstring>x</faultstring></soap:Fault>",
    "\"",
    "\"\"",
    ",",
    ";",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ":",
    "null",
    "true",
    "1e999",
    "-",
    "$",
    "$-1,000.00",
    "9999999999999999999999",
    "NaN",
    "\\u0000",
    "\\ud800",
    "\u{feff}",
    "\u{fffd}",
    "é",
    "𝔸",
];

#[derive(Debug, Clone)]
enum ByteEdit {
    Flip(Index, u8),
    Insert(Index, &'static str),
    InsertRaw(Index, Vec<u8>),
    Delete(Index, usize),
    Repeat(Index, usize, usize),
    Truncate(Index),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Flip(i, b)),
        4 => (any::<Index>(), proptest::sample::select(TOKENS)).prop_map(|(i, t)| ByteEdit::Insert(i, t)),
        1 => (any::<Index>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, b)| ByteEdit::InsertRaw(i, b)),
        2 => (any::<Index>(), 1usize..64).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        1 => (any::<Index>(), 1usize..200, 1usize..400).prop_map(|(i, n, k)| ByteEdit::Repeat(i, n, k)),
        1 => any::<Index>().prop_map(ByteEdit::Truncate),
    ]
}

fn apply_bytes(body: &mut Vec<u8>, edit: &ByteEdit) {
    let at = |i: &Index, len: usize| i.index(len + 1);
    match edit {
        ByteEdit::Flip(i, b) => {
            if !body.is_empty() {
                let n = i.index(body.len());
                body[n] = *b;
            }
        }
        ByteEdit::Insert(i, token) => {
            let n = at(i, body.len());
            body.splice(n..n, token.bytes());
        }
        ByteEdit::InsertRaw(i, bytes) => {
            let n = at(i, body.len());
            body.splice(n..n, bytes.iter().copied());
        }
        ByteEdit::Delete(i, len) => {
            let n = at(i, body.len());
            let end = (n + len).min(body.len());
            body.drain(n..end);
        }
        ByteEdit::Repeat(i, len, times) => {
            let n = at(i, body.len());
            let end = (n + len).min(body.len());
            let chunk = body[n..end].to_vec();
            if chunk.is_empty() {
                return;
            }
            // Bounded: the mapping's max_response_bytes is not what is fuzzed here.
            let times = (*times).min(2_000_000 / chunk.len().max(1));
            for _ in 0..times {
                body.splice(end..end, chunk.iter().copied());
            }
        }
        ByteEdit::Truncate(i) => {
            let n = at(i, body.len());
            body.truncate(n);
        }
    }
}

/// A generated XML document: elements from a vocabulary of the mappings' own names, attributes,
/// text with entities, deep or wide.
#[derive(Debug, Clone)]
enum Xml {
    Text(String),
    Element(&'static str, Vec<(&'static str, String)>, Vec<Xml>),
}

const TAGS: &[&str] = &[
    "soap:Envelope",
    "soap:Body",
    "Envelope",
    "Body",
    "Fault",
    "Inventory",
    "Vehicles",
    "Vehicle",
    "Unit",
    "VIN",
    "Vin",
    "Make",
    "Model",
    "Year",
    "ModelYear",
    "Price",
    "Status",
    "Condition",
    "Photos",
    "Photo",
    "Item",
    "Items",
    "TotalCount",
    "LeadId",
    "Result",
    "x:y",
];

fn xml() -> impl Strategy<Value = Xml> {
    let text = prop_oneof![
        ".{0,12}",
        proptest::sample::select(TOKENS).prop_map(str::to_owned),
        proptest::sample::select(WORDS).prop_map(str::to_owned),
    ];
    text.prop_map(Xml::Text).prop_recursive(6, 64, 8, |inner| {
        (
            proptest::sample::select(TAGS),
            proptest::collection::vec(
                (
                    proptest::sample::select(
                        &["id", "type", "xmlns", "xmlns:soap", "currency"][..],
                    ),
                    ".{0,6}",
                ),
                0..3,
            ),
            proptest::collection::vec(inner, 0..8),
        )
            .prop_map(|(tag, attrs, children)| Xml::Element(tag, attrs, children))
    })
}

fn render_xml(node: &Xml, out: &mut String) {
    match node {
        Xml::Text(t) => out.push_str(t),
        Xml::Element(tag, attrs, children) => {
            out.push('<');
            out.push_str(tag);
            for (k, v) in attrs {
                out.push_str(&format!(" {k}=\"{v}\""));
            }
            out.push('>');
            for c in children {
                render_xml(c, out);
            }
            out.push_str(&format!("</{tag}>"));
        }
    }
}

#[derive(Debug, Clone)]
enum Body {
    /// An example reply of the handler (or a generic one), edited byte-wise.
    Mutated(Index, Vec<ByteEdit>),
    Json(Value),
    /// A generated document, nested `depth` levels deeper.
    Xml(Xml, usize),
    /// A header row from the seed and generated rows.
    Csv(Index, Vec<Vec<String>>),
    Bytes(Vec<u8>),
}

fn csv_field() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(WORDS).prop_map(str::to_owned),
        proptest::sample::select(TOKENS).prop_map(str::to_owned),
        "[ -~]{0,10}",
        proptest::sample::select(
            &[
                "$24,990",
                "\"$1,000\"",
                "12,345 mi",
                "2024",
                "-1",
                "N/A",
                "1/2/2025",
                "2025-13-45"
            ][..]
        )
        .prop_map(str::to_owned),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        10 => (any::<Index>(), proptest::collection::vec(byte_edit(), 0..6))
            .prop_map(|(i, e)| Body::Mutated(i, e)),
        2 => any_json().prop_map(Body::Json),
        2 => (xml(), prop_oneof![6 => Just(0usize), 1 => 0usize..400, 1 => Just(20_000usize)])
            .prop_map(|(x, d)| Body::Xml(x, d)),
        2 => (any::<Index>(), proptest::collection::vec(proptest::collection::vec(csv_field(), 0..14), 0..30))
            .prop_map(|(i, rows)| Body::Csv(i, rows)),
        1 => proptest::collection::vec(any::<u8>(), 0..600).prop_map(Body::Bytes),
    ]
}

#[derive(Debug, Clone)]
struct ReplyCase {
    target: Index,
    status: Option<u16>,
    content_type: Option<Option<&'static str>>,
    body: Body,
}

fn reply_case() -> impl Strategy<Value = ReplyCase> {
    (
        any::<Index>(),
        prop_oneof![
            6 => Just(None),
            1 => proptest::sample::select(&[200u16, 201, 204, 301, 400, 401, 404, 409, 429, 500, 502, 503, 599][..]).prop_map(Some),
        ],
        prop_oneof![
            6 => Just(None),
            1 => proptest::option::of(proptest::sample::select(&[
                "application/json",
                "application/json; charset=utf-16",
                "text/xml; charset=iso-8859-1",
                "application/soap+xml; charset=windows-1252",
                "text/csv; charset=latin1",
                "text/plain; charset=bogus",
                "text/html",
                "application/octet-stream; charset=",
            ][..])).prop_map(Some),
        ],
        body(),
    )
        .prop_map(|(target, status, content_type, body)| ReplyCase {
            target,
            status,
            content_type,
            body,
        })
}

impl ReplyCase {
    fn build(&self, target: &Target) -> (u16, Option<String>, Vec<u8>) {
        let seed = |i: &Index| &target.seeds[i.index(target.seeds.len())];
        let (status, content_type, body) = match &self.body {
            Body::Mutated(i, edits) => {
                let seed = seed(i);
                let mut body = seed.body.clone();
                for e in edits {
                    apply_bytes(&mut body, e);
                }
                (seed.status, seed.content_type.clone(), body)
            }
            Body::Json(v) => (
                200,
                Some("application/json".to_owned()),
                v.to_string().into_bytes(),
            ),
            Body::Xml(x, depth) => {
                let mut inner = String::new();
                render_xml(x, &mut inner);
                let text = format!(
                    "<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>{}{inner}{}</soap:Body></soap:Envelope>",
                    "<a>".repeat(*depth),
                    "</a>".repeat(*depth)
                );
                (
                    200,
                    Some("text/xml; charset=utf-8".to_owned()),
                    text.into_bytes(),
                )
            }
            Body::Csv(i, rows) => {
                let header = seed(i)
                    .body
                    .split(|b| *b == b'\n')
                    .next()
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default();
                let mut body = header;
                for row in rows {
                    body.push(b'\n');
                    body.extend(row.join(",").into_bytes());
                }
                (200, Some("text/csv".to_owned()), body)
            }
            Body::Bytes(b) => (200, None, b.clone()),
        };
        (
            self.status.unwrap_or(status),
            self.content_type
                .map_or(content_type, |ct| ct.map(str::to_owned)),
            body,
        )
    }
}

fn decode(case: &ReplyCase) -> Result<String, TestCaseError> {
    let back = back();
    let target = &back.targets[case.target.index(back.targets.len())];
    let (status, content_type, body) = case.build(target);
    let canned = Canned::new(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        content_type.and_then(|ct| HeaderValue::from_str(&ct).ok()),
        Bytes::from(body),
    );
    let dealer = &back.app.dealers[target.dealer];
    let handler = dealer
        .handler_for(target.skill)
        .ok_or_else(|| TestCaseError::fail("handler gone"))?;
    let answer = back
        .runtime
        .block_on(async {
            tokio::time::timeout(
                DEADLINE,
                examples::answer(handler, &canned, &target.request),
            )
            .await
        })
        .map_err(|_| {
            TestCaseError::fail(format!("{}: no answer within {DEADLINE:?}", target.label))
        })?;
    Ok(match answer {
        Ok(_) => format!("{}: ok", target.label),
        Err(error) => {
            let debug = format!("{error:?}");
            let variant: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
            let outcome = format!("{}: {variant}", target.label);
            if variant == "Internal" {
                // The first of each: an internal error from an upstream's reply is a mapping's
                // (or the gateway's) defect, and the report says which.
                let mut first = FIRST_INTERNAL
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                first
                    .entry(outcome.clone())
                    .or_insert_with(|| debug.chars().take(300).collect());
            }
            outcome
        }
    })
}

/// The first internal error of each handler, for the report.
static FIRST_INTERNAL: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

fn reply_fuzz(cases: u32) {
    let tally = Tally::default();
    let back = back();
    eprintln!(
        "fuzzing {} handlers: {}",
        back.targets.len(),
        back.targets
            .iter()
            .map(|t| format!("{} ({} seeds)", t.label, t.seeds.len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    fuzz("upstream replies", cases, reply_case(), &tally, |case| {
        let started = Instant::now();
        let outcome = decode(&case)?;
        tally.add(outcome, started.elapsed());
        Ok(())
    });
    for (outcome, first) in FIRST_INTERNAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        eprintln!("first {outcome}: {first}");
    }
}

#[test]
fn upstream_replies_never_panic_or_hang_in_any_mapping() {
    reply_fuzz(cases(SHORT_CASES));
}

#[test]
#[ignore = "long run: cargo test --release --test fuzz -- --ignored --nocapture"]
fn a_million_upstream_replies_never_panic_or_hang_in_any_mapping() {
    reply_fuzz(cases(LONG_CASES));
}
