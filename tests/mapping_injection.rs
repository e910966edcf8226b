//! No request value can change the structure of an upstream call.
//!
//! The real Demo Toyota mapping folder is loaded as the gateway loads it; its `inventory.search`
//! and `inventory.vehicle` requests are rendered (through the engine's canned transport, which
//! records the exact call instead of sending it) with arbitrary strings — `/`, `?`, `&`, `=`,
//! `#`, `%`, `+`, CR, LF, NUL, dot segments, unicode — in every free-text request field. Then:
//!
//! - the path is exactly `/api/v2/vehicles` (search), or the declared identifier path with the
//!   value as exactly one segment that decodes back to it (vehicle); a URL parser (the one the
//!   upstream client uses) leaves the path as rendered — no dot-segment removal;
//! - the query's parameter names are the mapping's declared names (plus the paging ones), each
//!   at most once, and each value percent-decodes back to exactly the value the template
//!   produced from the request (lists joined with `,`);
//! - headers are exactly the declared ones, without CR or LF;
//! - in a SOAP body (the demo's vehicle lookup over the DMS's SOAP service) the identifier stays
//!   the text of its one element: the body parses, and nothing but the value changed.
//!
//! The REST vehicle lookup is the demo's former `inventory.vehicle.yaml`, kept as a fixture
//! (`tests/fixtures/mappings/rest-inventory.vehicle.yaml`). A live test sends the same kind of
//! values through the running gateway to the DMS simulators and checks what they received.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, LazyLock};

use aap_gateway::engine::Handler;
use aap_gateway::engine::proxy::{Canned, ProxyMapping, Transport};
use aap_gateway::engine::request::Rendered;
use aap_gateway::mapping::{LoadCache, LoadContext, load_folder};
use aap_gateway::protocol::Skill;
use aap_gateway::schema::Schemas;
use bytes::Bytes;
use http::StatusCode;
use proptest::prelude::*;
use serde_json::{Value, json};

const SEARCH_PATH: &str = "/api/v2/vehicles";
/// Paging parameters the engine adds (`pagination: { page: page, size: pageSize }`).
const PAGING: [&str; 2] = ["page", "pageSize"];

struct Loaded {
    search: Arc<ProxyMapping>,
    /// The REST lookup (fixture).
    vehicle: Arc<ProxyMapping>,
    /// The SOAP lookup (the demo's).
    soap_vehicle: Arc<ProxyMapping>,
}

static LOADED: LazyLock<Loaded> = LazyLock::new(|| {
    let schemas = Schemas::load().expect("schemas");
    let metrics = aap_gateway::telemetry::metrics::Metrics::new();
    let ctx = LoadContext {
        schemas: &schemas,
        vars: &|_| None,
        dealer_id: "demo_toyota",
        dealer_name: "Demo Toyota",
        metrics: &metrics,
        previous: None,
        cache: &LoadCache::default(),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("mappings/demo-toyota");
    let load = |dir: &Path| {
        load_folder(dir, &ctx).unwrap_or_else(|p| panic!("demo-toyota does not load: {p:?}"))
    };
    let proxy = |mappings: &mut aap_gateway::mapping::DealerMappings, skill: Skill| match mappings
        .handlers
        .remove(&skill)
    {
        Some(Handler::Proxy(mapped)) => mapped,
        other => panic!("{skill:?} is not a proxy mapping: {other:?}"),
    };
    let mut demo = load(&dir);
    // The same folder with the REST vehicle lookup.
    let copy = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(&dir).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
        }
    }
    std::fs::copy(
        root.join("tests/fixtures/mappings/rest-inventory.vehicle.yaml"),
        copy.path().join("inventory.vehicle.yaml"),
    )
    .expect("copy fixture");
    let mut rest = load(copy.path());
    Loaded {
        search: proxy(&mut demo, Skill::InventorySearch),
        vehicle: proxy(&mut rest, Skill::InventoryVehicle),
        soap_vehicle: proxy(&mut demo, Skill::InventoryVehicle),
    }
});

/// What XML 1.0 can carry of `text` (the escaper drops the rest).
fn xml_carried(text: &str) -> String {
    text.chars()
        .filter(|c| (*c as u32) >= 0x20 || matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// The text of every element of an XML fragment, in order: (local name, text).
fn xml_elements(fragment: &str) -> Option<Vec<(String, String)>> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(fragment);
    let mut out: Vec<(String, String)> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                open.push(out.len());
                out.push((name, String::new()));
            }
            Event::End(_) => {
                open.pop()?;
            }
            Event::Text(t) => {
                let raw = t.decode().ok()?;
                let text = quick_xml::escape::unescape(&raw).ok()?;
                out.get_mut(*open.last()?)?.1.push_str(&text);
            }
            Event::GeneralRef(r) => {
                let name = String::from_utf8_lossy(&r).into_owned();
                let c = match name.as_str() {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    "apos" => '\'',
                    _ => return None,
                };
                out.get_mut(*open.last()?)?.1.push(c);
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Empty(e) => {
                out.push((
                    String::from_utf8_lossy(e.local_name().as_ref()).into_owned(),
                    String::new(),
                ));
            }
            _ => return None,
        }
    }
    open.is_empty().then_some(out)
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
});

/// Runs `request` through `mapped` with a canned upstream; returns every call it rendered.
fn rendered(
    mapped: &ProxyMapping,
    status: StatusCode,
    body: &'static str,
    request: &Value,
) -> Vec<Rendered> {
    let canned = Canned::new(status, None, Bytes::from_static(body.as_bytes()));
    // The outcome does not matter here (a 404 is VEHICLE_NOT_FOUND); the calls do.
    let _ = RUNTIME.block_on(mapped.execute_with(Transport::Canned(&canned), request));
    canned.seen.into_inner().expect("seen")
}

/// `%XX` escapes decoded; `None` when the text is not strictly percent-encoded (a reserved or
/// non-ASCII character left raw, a broken escape) or not UTF-8.
fn strict_decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = encoded.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// The query of a rendered call as (name, decoded value) pairs, checking the encoding.
fn query_pairs(call: &Rendered) -> Vec<(String, String)> {
    let Some((_, query)) = call.path_and_query.split_once('?') else {
        return Vec::new();
    };
    query
        .split('&')
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("parameter without `=`: {pair:?} in {call:?}"));
            let name = strict_decode(name)
                .unwrap_or_else(|| panic!("badly encoded name {name:?} in {call:?}"));
            let value = strict_decode(value)
                .unwrap_or_else(|| panic!("badly encoded value {value:?} in {call:?}"));
            (name, value)
        })
        .collect()
}

/// The path as the upstream client's URL parser sees it must be the path as rendered.
fn assert_path_survives_url_parsing(call: &Rendered) {
    let path = call.path();
    let url = reqwest::Url::parse(&format!("http://127.0.0.1:7001{}", call.path_and_query))
        .unwrap_or_else(|e| panic!("{call:?} is no URL: {e}"));
    assert_eq!(
        url.path(),
        path,
        "the URL parser rewrites the rendered path (dot segments?): {call:?}"
    );
    assert_eq!(url.fragment(), None, "{call:?}");
}

fn assert_headers_declared(mapped: &ProxyMapping, call: &Rendered) {
    let declared: BTreeSet<&str> = mapped.request.headers.iter().map(|h| h.as_str()).collect();
    let mut seen = BTreeSet::new();
    for (name, value) in &call.headers {
        assert!(
            declared.contains(name.as_str()),
            "undeclared header {name} in {call:?}"
        );
        assert!(
            seen.insert(name.as_str()),
            "header {name} twice in {call:?}"
        );
        assert!(
            !value
                .as_bytes()
                .iter()
                .any(|b| matches!(b, b'\r' | b'\n' | 0)),
            "header {name} carries a line break: {call:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies

/// Strings built to break URLs: reserved characters, escapes, dot segments, line breaks, NUL,
/// non-ASCII; plus any string at all.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::string::string_regex(
            "([/?&=#%+;:@,. \\r\\n\\t\\x00]|\\.\\.|\\.\\./|%2[eEfF]|%0[aAdD]|é|€|\u{1F697}|[a-zA-Z0-9]){0,12}"
        )
        .expect("regex"),
        1 => Just(".".to_owned()),
        1 => Just("..".to_owned()),
        1 => Just("../..".to_owned()),
        1 => Just("%2e%2e".to_owned()),
        2 => any::<String>(),
    ]
}

fn nasty_list() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(nasty(), 0..3)
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 192,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn search_values_never_change_path_parameters_or_headers(
        make in nasty_list(),
        model in nasty_list(),
        trim in nasty_list(),
        rooftops in nasty_list(),
        query in nasty(),
        stock in nasty(),
        vin in nasty(),
        skip in 0u64..300,
        limit in 1u64..150,
    ) {
        let mapped = &LOADED.search;
        let request = json!({
            "type": "inventory.search.request",
            "filters": {
                "make": make, "model": model, "trim": trim, "rooftops": rooftops,
                "query": query, "stock": stock, "vin": vin,
            },
            "pagination": { "skip": skip, "limit": limit },
        });
        let calls = rendered(mapped, StatusCode::OK, r#"{"TotalCount": 0, "Items": []}"#, &request);
        prop_assert!(!calls.is_empty());
        let declared: BTreeSet<&str> = mapped.request.query.iter().map(|(name, _)| name.as_str()).collect();
        // A list value holding the DMS's separator cannot be sent as one value: that filter
        // is applied in the gateway instead and its parameter is left out.
        let join = |l: &[String]| {
            if l.iter().any(|v| v.contains(',')) { String::new() } else { l.join(",") }
        };
        let mut expected: BTreeMap<&str, String> = BTreeMap::new();
        for (name, value) in [
            ("make", join(&make)),
            ("model", join(&model)),
            ("trim", join(&trim)),
            ("location", join(&rooftops)),
            ("q", query.clone()),
            ("vin", vin.clone()),
        ] {
            prop_assert!(declared.contains(name), "the mapping no longer declares `{}`", name);
            if !value.is_empty() {
                expected.insert(name, value);
            }
        }
        // `stock` is matched exactly by AAP but not by this DMS: never sent upstream.
        prop_assert!(!declared.contains("stock"));
        for call in &calls {
            prop_assert_eq!(call.method.as_str(), "GET");
            prop_assert!(call.body.is_none());
            prop_assert_eq!(call.path(), SEARCH_PATH, "{:?}", call);
            assert_path_survives_url_parsing(call);
            assert_headers_declared(mapped, call);
            let pairs = query_pairs(call);
            let mut names = BTreeSet::new();
            for (name, value) in &pairs {
                prop_assert!(
                    declared.contains(name.as_str()) || PAGING.contains(&name.as_str()),
                    "undeclared parameter {:?} in {:?}", name, call
                );
                prop_assert!(names.insert(name.as_str()), "parameter {:?} twice in {:?}", name, call);
                if let Some(want) = expected.get(name.as_str()) {
                    prop_assert_eq!(value, want, "parameter {} in {:?}", name, call);
                }
            }
            for (name, want) in &expected {
                prop_assert!(
                    names.contains(name),
                    "parameter {} (= {:?}) missing from {:?}", name, want, call
                );
            }
            prop_assert!(!names.contains("stock"), "stock sent upstream: {:?}", call);
            for name in PAGING {
                prop_assert!(names.contains(name), "paging parameter {} missing", name);
            }
        }
    }

    #[test]
    fn vehicle_identifiers_are_exactly_one_path_segment(
        vin in nasty(),
        stock in nasty(),
        vehicle_id in nasty(),
        which in 0u8..4,
    ) {
        let mapped = &LOADED.vehicle;
        let mut request = json!({ "type": "inventory.vehicle.request" });
        // Any combination of identifiers, as the schema allows several.
        if which & 1 == 0 { request["vin"] = json!(vin); }
        if which & 2 == 0 { request["stock"] = json!(stock); }
        request["vehicle_id"] = json!(vehicle_id);
        let calls = rendered(
            mapped,
            StatusCode::NOT_FOUND,
            r#"{"ErrorCode": "NOT_FOUND", "Message": "Vehicle not found"}"#,
            &request,
        );
        // The most specific non-empty identifier wins (the mapping's `if`/`elif`).
        let field = |name: &str| request.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
        let (prefix, value) = match (field("vin"), field("stock")) {
            (Some(v), _) => ("/api/v2/vehicles/", v.to_owned()),
            (None, Some(s)) => ("/api/v2/vehicles/by-stock/", s.to_owned()),
            (None, None) => ("/api/v2/vehicles/by-stock/", vehicle_id.clone()),
        };
        if calls.is_empty() {
            // Refusing to call at all is right for a value that cannot be one path segment,
            // and for an empty one (`/by-stock/` would name the collection).
            prop_assert!(
                matches!(value.as_str(), "." | ".." | ""),
                "no upstream call was rendered for {}", request
            );
            return Ok(());
        }
        prop_assert!(!value.is_empty(), "an empty identifier was sent: {:?}", calls);
        prop_assert_eq!(calls.len(), 1);
        let call = &calls[0];
        prop_assert_eq!(call.method.as_str(), "GET");
        prop_assert!(!call.path_and_query.contains('?'), "a query appeared: {:?}", call);
        assert_headers_declared(mapped, call);
        let path = call.path();
        let segment = path.strip_prefix(prefix);
        prop_assert!(segment.is_some(), "{:?} does not start with {}", call, prefix);
        let segment = segment.unwrap_or_default();
        prop_assert!(!segment.contains('/'), "more than one segment: {:?}", call);
        prop_assert_eq!(strict_decode(segment), Some(value.clone()), "{:?}", call);
        prop_assert!(
            !matches!(value.as_str(), "." | ".."),
            "the identifier {:?} is a dot segment: the path {} would be normalised to another resource",
            value,
            path
        );
        assert_path_survives_url_parsing(call);
    }

    #[test]
    fn soap_vehicle_identifiers_stay_the_text_of_their_element(
        vin in nasty(),
        stock in nasty(),
        which in 0u8..3,
    ) {
        let mapped = &LOADED.soap_vehicle;
        let mut request = json!({ "type": "inventory.vehicle.request" });
        if which == 0 { request["vin"] = json!(vin); }
        if which == 1 { request["stock"] = json!(stock); }
        if which == 2 { request["vehicle_id"] = json!(stock); }
        let calls = rendered(mapped, StatusCode::BAD_REQUEST, "", &request);
        prop_assert_eq!(calls.len(), 1);
        let call = &calls[0];
        prop_assert_eq!(call.method.as_str(), "POST");
        prop_assert_eq!(call.path_and_query.as_str(), "");
        prop_assert_eq!(call.action.as_deref(), Some("urn:demo-dms:inventory/GetVehicle"));
        let body = call.body.as_deref().unwrap_or_default();
        let elements = xml_elements(body);
        prop_assert!(elements.is_some(), "the body is not well-formed: {:?}", body);
        let elements = elements.unwrap_or_default();
        let (name, value) = match which {
            0 if !vin.is_empty() => ("Vin", vin.clone()),
            0 => ("StockNumber", String::new()),
            _ => ("StockNumber", stock.clone()),
        };
        prop_assert_eq!(elements.len(), 2, "{:?}", elements);
        prop_assert_eq!(elements[0].0.as_str(), "GetVehicle");
        prop_assert_eq!(elements[1].0.as_str(), name);
        prop_assert_eq!(elements[1].1.clone(), xml_carried(&value), "{:?}", body);
    }
}

// ---------------------------------------------------------------------------------------------
// Live: what the DMS simulator actually receives

/// Values that survive the AAP request schema (free-text fields) but try to break the call.
const LIVE_VALUES: [&str; 10] = [
    "a/b",
    "?sortBy=price",
    "&page=99&pageSize=1",
    "x=y",
    "#top",
    "100%",
    "+plus+",
    "é € 🚗",
    "..",
    ".",
];

#[tokio::test(flavor = "multi_thread")]
async fn live_calls_keep_their_path_and_parameters() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    let mut vars = common::simulator_vars(&sims);
    // Demo Honda is not used here: its feed points nowhere (no load cost).
    vars.insert("FEED_URL".into(), "http://127.0.0.1:9".into());
    let gw = common::DemoCopy::new().start(vars).await;
    let mut failures = Vec::new();
    for value in LIVE_VALUES {
        sims.dms.clear_received();
        let reply = gw
            .send(
                "/a2a",
                json!({ "type": "inventory.search.request",
                        "filters": { "make": [value], "model": [value], "query": value },
                        "pagination": { "skip": 0, "limit": 5 } }),
            )
            .await;
        assert!(
            reply.body.get("result").is_some(),
            "{value:?}: {}",
            reply.text
        );
        for call in sims.dms.received() {
            let query = call["query"].as_object().expect("query");
            let names: BTreeSet<&str> = query.keys().map(String::as_str).collect();
            // `status` is the mapping's own constant (only units a buyer may see).
            let want: BTreeSet<&str> = ["make", "model", "q", "status", "page", "pageSize"].into();
            if call["path"] != SEARCH_PATH || names != want {
                failures.push(format!("search {value:?}: DMS got {call}"));
                continue;
            }
            for name in ["make", "model", "q"] {
                if query[name] != value {
                    failures.push(format!(
                        "search {value:?}: {name} arrived as {}",
                        query[name]
                    ));
                }
            }
            if query["page"] != "1" || query["pageSize"] != "5" {
                failures.push(format!("search {value:?}: paging altered: {call}"));
            }
        }
        // inventory.vehicle by stock, over SOAP: one call to the service, the value the text
        // of the StockNumber element of a well-formed envelope.
        sims.soap_dms.clear_received();
        let reply = gw
            .send(
                "/a2a",
                json!({ "type": "inventory.vehicle.request", "stock": value }),
            )
            .await;
        let received = sims.soap_dms.received();
        let carried = |call: &Value| {
            call["path"] == "/dms/VehicleService.svc"
                && call["body"]
                    .as_str()
                    .and_then(xml_elements)
                    .is_some_and(|els| {
                        els.iter()
                            .any(|(name, text)| name == "StockNumber" && text == value)
                    })
        };
        if !matches!(received.as_slice(), [call] if carried(call)) {
            failures.push(format!(
                "vehicle stock {value:?}: the SOAP DMS got {received:?}"
            ));
        }
        if reply.body.get("error").is_none() || reply.aap_code() != "VEHICLE_NOT_FOUND" {
            failures.push(format!(
                "vehicle stock {value:?}: expected VEHICLE_NOT_FOUND, got {}",
                &reply.text[..reply.text.len().min(300)]
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
