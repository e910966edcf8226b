//! The mapping engine on Demo Toyota's real `inventory.search` mapping (`mappings/demo-toyota`),
//! without network:
//!
//! - `mapping/render_search_request`: a typical filtered AAP search → the DMS call (template
//!   context + path, query, header templates + paging parameters).
//! - `mapping/extract_20_vehicle_page`: a 20-record DMS page → AAP page data (JSON read into a
//!   tape, the records at `items` read off it, `item` per record, listable filter, `total`,
//!   page assembly), as the engine does it.
//! - `mapping/read_20_vehicle_reply`: the first step of that alone (the reply onto its tape).
//! - `mapping/extract_20_vehicle_page_eager`: the same with the reply decoded into jq values
//!   first and `items` run on them (before the tape; the path of replies that are not JSON).
//! - `mapping/extract_20_vehicle_page_jaq`: the same with every program run by jaq
//!   (`Jq::compile_interpreted`), i.e. without native plans: the baseline they are measured
//!   against.
//! - `mapping/search_end_to_end_canned`: both, through `ProxyMapping::execute_with` with a canned
//!   upstream (`Transport::Canned`), i.e. everything the gateway does for one search between
//!   the validated request and the response schema check, except the HTTP call itself.
//!
//! The canned body is the DMS simulator's real answer to the rendered call (started in-process
//! on loopback once, before measuring).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use aap_gateway::engine::Handler;
use aap_gateway::engine::proxy::{
    Canned, ProxyMapping, ResponseSpec, Transport, is_listable, is_listable_status,
};
use aap_gateway::engine::request::PageRef;
use aap_gateway::formats::Declared;
use aap_gateway::lang::jq::{Doc, Jq, JqValue, JqVars};
use aap_gateway::lang::template::{Lazy, Scope};
use aap_gateway::mapping::{LoadContext, load_folder};
use aap_gateway::protocol::Data;
use aap_gateway::protocol::Skill;
use aap_gateway::protocol::vehicle::{SearchPage, Vehicle};
use aap_gateway::schema::Schemas;
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::StatusCode;
use minijinja::value::Value as TplValue;
use serde_json::{Value, json};

const PAGE: usize = 20;

/// A typical buyer-agent search, entirely translatable by the Demo Toyota mapping (one DMS page).
fn search_request() -> Value {
    json!({
        "type": "inventory.search.request",
        "filters": { "make": ["Toyota"], "condition": ["used", "cpo"], "price_max": 30000 },
        "pagination": { "skip": 0, "limit": PAGE },
        "sort": { "field": "price", "order": "asc" }
    })
}

/// Loads `mappings/demo-toyota` as the gateway does and returns its search mapping.
fn search_mapping(dms_url: &str) -> Arc<ProxyMapping> {
    let schemas = Schemas::load().expect("schemas");
    let dms_url = dms_url.to_owned();
    let vars = move |name: &str| match name {
        "DMS_URL" => Some(dms_url.clone()),
        "DMS_API_KEY" => Some(aap_sim::dms::API_KEY.to_owned()),
        _ => None,
    };
    let metrics = aap_gateway::telemetry::metrics::Metrics::new();
    let ctx = LoadContext {
        schemas: &schemas,
        vars: &vars,
        dealer_id: "demo_toyota",
        dealer_name: "Demo Toyota",
        metrics: &metrics,
        previous: None,
        cache: &aap_gateway::mapping::LoadCache::default(),
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/demo-toyota");
    let mut loaded = load_folder(&dir, &ctx).unwrap_or_else(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        panic!("mappings/demo-toyota does not load:\n{}", lines.join("\n"))
    });
    match loaded.handlers.remove(&Skill::InventorySearch) {
        Some(Handler::Proxy(mapped)) => mapped,
        other => panic!("inventory.search is not a proxy mapping: {other:?}"),
    }
}

/// The engine's template context (`ProxyMapping::template_values`, private): the same three values.
fn template_values(mapped: &ProxyMapping, request: &Value) -> TplValue {
    minijinja::context! {
        request => TplValue::from(minijinja::value::Serde(request)),
        tables => mapped.shared.tables_tpl.clone(),
        dealer => mapped.shared.dealer_tpl.clone(),
    }
}

/// The engine's jq variables (`ProxyMapping::vars`, private).
fn jq_vars(mapped: &ProxyMapping, request: &Value) -> JqVars {
    // As `ProxyMapping` builds them: `$request` is a jq value only when a program names it.
    let ResponseSpec::List {
        items, total, item, ..
    } = &mapped.response
    else {
        panic!("not a list mapping");
    };
    let reads_request = [Some(items), total.as_ref(), Some(item)]
        .into_iter()
        .flatten()
        .any(Jq::reads_request);
    JqVars {
        request: if reads_request {
            JqValue::from_json(request)
        } else {
            JqValue::null()
        },
        tables: mapped.shared.tables_jq.clone(),
        dealer: mapped.shared.dealer_jq.clone(),
        lead: JqValue::null(),
    }
}

/// Renders the upstream call of `request` (first page of `PAGE`).
fn render(mapped: &ProxyMapping, request: &Value) -> aap_gateway::engine::request::Rendered {
    let build = || template_values(mapped, request);
    let context = Lazy::new(&build);
    mapped
        .request
        .render(
            Scope::request(request, &mapped.shared.tables_tpl, &context),
            Some(&PageRef::at(0, PAGE as u64)),
        )
        .expect("render")
}

/// The reply side of one page, as `ProxyMapping::fetch_page` + `ProxyMapping::search` do it (private): the
/// reply read into a tape, the records at `items` read off it, `item` per record, listable
/// filter, `total`, page assembly.
fn extract_page(mapped: &ProxyMapping, request: &Value, body: &Bytes) -> SearchPage {
    let ResponseSpec::List {
        total,
        item,
        records: Some(path),
        ..
    } = &mapped.response
    else {
        panic!("not a list mapping whose items are a path");
    };
    let vars = jq_vars(mapped, request);
    let doc = Doc::decode(&mapped.format, body, Declared::default(), true).expect("decode");
    let records = doc.records(path).expect("records on the tape");
    let mut vehicles = Vec::with_capacity(records.len());
    let mut runner = item.record_runner(&vars);
    for record in &records {
        let vehicle = runner.run_vehicle(record).expect("item");
        if is_listable_status(vehicle.status()) {
            vehicles.push(vehicle);
        }
    }
    let total = total.as_ref().map(|jq| {
        let path = jq.key_path().expect("total is a path");
        doc.at(path).expect("total on the tape").to_json()
    });
    page(total, vehicles)
}

/// The page data of the vehicles found, as `ProxyMapping::search` assembles it.
fn page(total: Option<Value>, vehicles: Vec<Vehicle>) -> SearchPage {
    let total = total
        .as_ref()
        .and_then(Value::as_u64)
        .map_or(vehicles.len(), |t| t as usize);
    let vehicles: Vec<Vehicle> = vehicles.into_iter().take(PAGE).collect();
    SearchPage::new(total, 0, PAGE, vehicles)
}

/// [`extract_page_with`] the mapping's own programs.
fn extract_page_eager(mapped: &ProxyMapping, request: &Value, body: &Bytes) -> SearchPage {
    let ResponseSpec::List {
        items, total, item, ..
    } = &mapped.response
    else {
        panic!("not a list mapping");
    };
    extract_page_with(mapped, (items, total.as_ref(), item), request, body)
}

/// The mapping's `items`, `total` and `item` programs.
type Programs<'a> = (&'a Jq, Option<&'a Jq>, &'a Jq);

/// [`extract_page`] with the reply decoded into jq values first and the given programs (the
/// mapping's, or the same in jaq only) run on them.
fn extract_page_with(
    mapped: &ProxyMapping,
    (items, total, item): Programs<'_>,
    request: &Value,
    body: &Bytes,
) -> SearchPage {
    let vars = jq_vars(mapped, request);
    let doc = JqValue::decode(&mapped.format, body, Declared::default()).expect("decode");
    let records = items.run(&doc, &vars).expect("items");
    let mut vehicles = Vec::with_capacity(records.len());
    for record in &records {
        let vehicle = item.run_one_json(record, &vars).expect("item");
        if is_listable(&vehicle) {
            vehicles.push(Vehicle::from(vehicle));
        }
    }
    let total = total.map(|jq| jq.run_one(&doc, &vars).expect("total").to_json());
    page(total, vehicles)
}

/// The DMS simulator's reply to `path_and_query` (with the demo API key).
fn fetch_from_simulator(
    runtime: &tokio::runtime::Runtime,
    base: &str,
    path_and_query: &str,
) -> Bytes {
    let url = format!("{base}{path_and_query}");
    runtime.block_on(async {
        let reply = reqwest::Client::new()
            .get(&url)
            .header(aap_sim::dms::API_KEY_HEADER, aap_sim::dms::API_KEY)
            .send()
            .await
            .expect("DMS simulator call");
        assert_eq!(reply.status(), StatusCode::OK, "GET {url}");
        reply.bytes().await.expect("DMS simulator body")
    })
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dms = runtime
        .block_on(aap_sim::dms::start_dms())
        .expect("DMS simulator");
    let mapped = search_mapping(&dms.base_url());
    let request = search_request();

    // The canned body: what the DMS answers to exactly the call the mapping renders.
    let rendered = render(&mapped, &request);
    assert!(
        rendered.path_and_query.starts_with("/api/v2/vehicles?")
            && rendered.path_and_query.contains("page=1&pageSize=20"),
        "unexpected call: {}",
        rendered.path_and_query
    );
    let body = fetch_from_simulator(&runtime, &dms.base_url(), &rendered.path_and_query);
    let records = serde_json::from_slice::<Value>(&body).expect("DMS JSON")["Items"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(records, PAGE, "the DMS page should hold {PAGE} records");
    runtime.block_on(dms.shutdown());

    // The hand-assembled extraction and the engine must agree before either is measured.
    let canned = Canned::new(StatusCode::OK, None, body.clone());
    let by_engine = runtime
        .block_on(mapped.execute_with(Transport::Canned(&canned), &request))
        .expect("engine search")
        .into_value();
    let by_hand = extract_page(&mapped, &request, &body).to_value();
    assert_eq!(
        by_engine, by_hand,
        "bench extraction differs from the engine"
    );
    assert_eq!(
        extract_page_eager(&mapped, &request, &body).to_value(),
        by_hand,
        "the tape and the eager decoding disagree"
    );
    assert_eq!(
        by_engine["vehicles"].as_array().map_or(0, Vec::len),
        PAGE,
        "the AAP page should hold {PAGE} vehicles"
    );

    let mut group = c.benchmark_group("mapping");
    group.bench_function("render_search_request", |b| {
        b.iter(|| render(&mapped, black_box(&request)))
    });
    group.bench_function("extract_20_vehicle_page", |b| {
        b.iter(|| extract_page(&mapped, black_box(&request), black_box(&body)))
    });
    // The first part of it: the reply read (onto its tape), nothing run on it yet.
    group.bench_function("read_20_vehicle_reply", |b| {
        b.iter(|| {
            Doc::decode(&mapped.format, black_box(&body), Declared::default(), true)
                .expect("decode")
        })
    });
    // What a page costs after extraction, on its way out: the response schema check and the
    // JSON text of the reply (the binding writes the same `Value` inside its envelope).
    let built = Data::Search(extract_page(&mapped, &request, &body));
    let reply = aap_gateway::protocol::Reply::new(Skill::InventorySearch, built, None);
    let schemas = Schemas::load().expect("schemas");
    assert!(
        schemas
            .check_response(Skill::InventorySearch, &reply.payload)
            .is_empty(),
        "the page must pass the response schema"
    );
    group.bench_function("check_20_vehicle_reply", |b| {
        b.iter(|| schemas.check_response(Skill::InventorySearch, black_box(&reply.payload)))
    });
    group.bench_function("serialize_20_vehicle_reply", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(aap_gateway::binding::REPLY_CAPACITY);
            black_box(&reply.payload).write_json(&mut out);
            out
        })
    });
    group.bench_function("extract_20_vehicle_page_eager", |b| {
        b.iter(|| extract_page_eager(&mapped, black_box(&request), black_box(&body)))
    });
    // The same extraction with every program run by jaq, as before native plans.
    let ResponseSpec::List {
        items, total, item, ..
    } = &mapped.response
    else {
        panic!("not a list mapping");
    };
    let interpreted = |jq: &Jq| Jq::compile_interpreted(jq.code()).expect("compiles");
    let (items_jaq, item_jaq) = (interpreted(items), interpreted(item));
    let total_jaq = total.as_ref().map(interpreted);
    let jaq_programs = (&items_jaq, total_jaq.as_ref(), &item_jaq);
    assert_eq!(
        extract_page_with(&mapped, jaq_programs, &request, &body).to_value(),
        by_hand,
        "jaq and the native plans disagree"
    );
    group.bench_function("extract_20_vehicle_page_jaq", |b| {
        b.iter(|| extract_page_with(&mapped, jaq_programs, black_box(&request), black_box(&body)))
    });
    group.bench_function("search_end_to_end_canned", |b| {
        b.iter(|| {
            let out = runtime
                .block_on(mapped.execute_with(Transport::Canned(&canned), black_box(&request)));
            // `Canned` records every rendered call; keep it from growing over the run.
            if let Ok(mut seen) = canned.seen.lock() {
                seen.clear();
            }
            out
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

// The binary runs on mimalloc (see src/main.rs); measure the same allocator here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
