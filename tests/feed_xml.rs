//! A dealer whose inventory comes as an XML feed, end to end: the real gateway in-process on the
//! feed-mode mapping folder `tests/fixtures/mappings/xml-feed/` (`format: xml`), in front of the
//! feed simulator's `GET /feeds/inventory.xml` (`sim/src/feed.rs`).
//!
//! What holds for every reply: it validates against the project's AAP response schemas
//! (`schemas/`, formats checked), and nothing of the export's internal pricing (`DealerCost`, `BookValue`)
//! appears in it — neither the element names nor the amounts.
//!
//! What is checked on top: filters are honoured and complete (an oracle over the simulator's own
//! typed inventory), search totals agree with facet counts, sorting by price, pagination, detail
//! lookups (VIN, stock, record id; unknown and sold units), the cached copy served while the feed
//! fails, the first load failing as a retryable INTERNAL_ERROR, and `check` / `test-mappings` on
//! a configuration using the folder.
//!
//! The read-only tests share one gateway and one set of simulators (see `block_on`).

mod common;

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;
use std::time::Duration;

use aap_sim::Simulators;
use aap_sim::feed::{self as feed_sim, XML_FEED_PATH, XML_FIRST_ID};
use aap_sim::inventory::{self, Condition, Status, Vehicle as Unit, VehicleType};
use aap_sim::sim::Mode;
use common::{Gateway, Reply};
use serde_json::{Value, json};

/// Where the dealer is served (chosen by path prefix).
const A2A: &str = "/dealers/xml-feed/a2a";

fn fixture_dir() -> PathBuf {
    common::repo_path("tests/fixtures/mappings/xml-feed")
}

/// A gateway configuration with one dealer on the mapping folder `mappings` (absolute path).
fn config_yaml(mappings: &Path) -> String {
    format!(
        r#"listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
# The suite walks the whole inventory many times from one client.
rate_limit: {{ enabled: false }}
dealers:
  - id: xml_feed
    path_prefix: /dealers/xml-feed
    card:
      name: XML Feed Motors
      description: Test dealer whose inventory is an XML feed.
      url: https://xml-feed.example.com/a2a
    mappings: {}
    profile:
      name: XML Feed Motors
      rooftops:
        - name: Demo Honda San Jose
          phones: [{{ name: Sales, value: "+14085550100" }}]
          timezone: America/Los_Angeles
"#,
        mappings.display()
    )
}

/// Writes the configuration into a temp dir, pointing at `mappings`.
fn config_dir(mappings: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, config_yaml(mappings)).expect("write config");
    (dir, path)
}

/// Starts the gateway on `mappings`, its `${FEED_URL}` pointed at `sims`' feed.
async fn start_on(mappings: &Path, sims: &Simulators) -> Gateway {
    let (dir, path) = config_dir(mappings);
    common::start_file_with_vars(&path, Some(dir), common::simulator_vars(sims)).await
}

/// A copy of the fixture folder whose `feed.yaml` refreshes every `refresh` (and keeps a stale
/// copy for `max_stale`), for the freshness tests.
fn fixture_copy(refresh: &str, max_stale: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    common::copy_dir(&fixture_dir(), dir.path());
    let feed = dir.path().join("feed.yaml");
    let text = std::fs::read_to_string(&feed).expect("read feed.yaml");
    assert!(text.contains("refresh: 5m\n") && text.contains("max_stale: 1h\n"));
    let text = text
        .replace("refresh: 5m\n", &format!("refresh: {refresh}\n"))
        .replace("max_stale: 1h\n", &format!("max_stale: {max_stale}\n"));
    std::fs::write(&feed, text).expect("write feed.yaml");
    dir
}

// =============================================================================================
// One gateway for the read-only tests

struct Shared {
    gw: Gateway,
    sims: Simulators,
}

static SHARED: LazyLock<Shared> = LazyLock::new(|| {
    common::RUNTIME.block_on(async {
        let sims = Simulators::start().await.expect("simulators");
        let gw = start_on(&fixture_dir(), &sims).await;
        Shared { gw, sims }
    })
});

/// Runs a test body on the shared runtime (the shared gateway is started first).
fn block_on(body: impl std::future::Future<Output = ()>) {
    common::run_with(&SHARED, body);
}

fn gw() -> &'static Gateway {
    &SHARED.gw
}

/// The simulator's typed inventory, in feed order (sold units included).
static UNITS: LazyLock<Vec<Unit>> = LazyLock::new(inventory::honda_powersports);

fn unit(vin: &str) -> (usize, &'static Unit) {
    UNITS
        .iter()
        .enumerate()
        .find(|(_, u)| u.vin == vin)
        .unwrap_or_else(|| panic!("{vin} is not in the feed"))
}

// =============================================================================================
// Universal reply checks

/// Words of the export's internal pricing elements.
const CONFIDENTIAL_WORDS: [&str; 6] = [
    "DealerCost",
    "BookValue",
    "Book Value",
    "Cost",
    "cost",
    "Pricing",
];

/// The feed's confidential amounts.
struct Confidential {
    /// Every dealer cost and book value as the export writes it (`$21,500`).
    money: BTreeSet<String>,
    /// Each unit's dealer cost and book value, by VIN.
    by_vin: HashMap<&'static str, [u64; 2]>,
}

static CONFIDENTIAL: LazyLock<Confidential> = LazyLock::new(|| {
    let mut money = BTreeSet::new();
    let mut by_vin = HashMap::new();
    for u in UNITS.iter() {
        money.insert(inventory::money(u.dealer_cost));
        money.insert(inventory::money(u.book_value));
        by_vin.insert(
            u.vin.as_str(),
            [u64::from(u.dealer_cost), u64::from(u.book_value)],
        );
    }
    Confidential { money, by_vin }
});

fn assert_no_internal_columns(vehicle: &Value) {
    let object = vehicle.as_object().expect("vehicle object");
    let Some(amounts) = vehicle["vin"]
        .as_str()
        .and_then(|vin| CONFIDENTIAL.by_vin.get(vin))
    else {
        panic!("a vehicle without a known VIN: {vehicle}");
    };
    for (key, value) in object {
        // Advertised amounts may coincide with the cost by chance; nothing else may.
        if ["price", "list_price", "msrp"].contains(&key.as_str()) {
            continue;
        }
        if let Some(n) = value.as_u64() {
            assert!(
                !amounts.contains(&n),
                "`{key}` = {n} equals the unit's dealer cost or book value: {vehicle}"
            );
        }
        // Nor as text ("21500", "$21,500"), anywhere inside the value.
        let mut texts = Vec::new();
        strings_in(value, &mut texts);
        for text in texts {
            let digits = text.trim().trim_start_matches('$').replace(',', "");
            if let Ok(n) = digits.parse::<u64>() {
                assert!(
                    !amounts.contains(&n),
                    "`{key}` carries {text:?}, the unit's dealer cost or book value: {vehicle}"
                );
            }
        }
    }
}

fn strings_in<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings_in(v, out)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Asserts a successful reply of `kind`, runs the universal checks, returns the response `data`.
fn ok<'r>(reply: &'r Reply, kind: &str) -> &'r Value {
    let data = reply.answered(kind);
    for word in CONFIDENTIAL_WORDS {
        assert!(
            !reply.text.contains(word),
            "the reply mentions `{word}`: {}",
            reply.text
        );
    }
    // No legacy money string belongs in an AAP reply; none may be a confidential amount.
    if reply.text.contains('$') {
        for money in &CONFIDENTIAL.money {
            assert!(
                !reply.text.contains(money.as_str()),
                "the reply carries a confidential amount {money}: {}",
                reply.text
            );
        }
    }
    match kind {
        "inventory.search.response" => {
            for v in data["vehicles"].as_array().expect("vehicles") {
                assert_no_internal_columns(v);
            }
        }
        "inventory.vehicle.response" => assert_no_internal_columns(data),
        _ => {}
    }
    data
}

/// A retryable `INTERNAL_ERROR` whose cause stays in the log.
fn assert_internal_error(reply: &Reply, context: &str) {
    let leaks = [
        "127.0.0.1",
        "inventory.xml",
        "HTTP 500",
        "Server Error",
        "<html",
    ];
    reply.assert_internal_error(context, &leaks);
}

// =============================================================================================
// Calls

async fn search(gw: &Gateway, request: Value) -> Value {
    let mut data = json!({ "type": "inventory.search.request" });
    common::merge(&mut data, request);
    let reply = gw.send(A2A, data).await;
    ok(&reply, "inventory.search.response").clone()
}

async fn facets(gw: &Gateway, filters: &Value) -> Value {
    let mut data = json!({ "type": "inventory.facets.request" });
    if filters.as_object().is_some_and(|f| !f.is_empty()) {
        data["filters"] = filters.clone();
    }
    let reply = gw.send(A2A, data).await;
    ok(&reply, "inventory.facets.response").clone()
}

async fn vehicle(gw: &Gateway, request: Value) -> Reply {
    let mut data = json!({ "type": "inventory.vehicle.request" });
    common::merge(&mut data, request);
    gw.send(A2A, data).await
}

fn vehicles(page: &Value) -> &Vec<Value> {
    page["vehicles"].as_array().expect("vehicles")
}

fn total(page: &Value) -> usize {
    page["total"].as_u64().expect("total") as usize
}

/// Every match, walked in pages of 100; `(total, vehicles)`.
async fn search_all(gw: &Gateway, filters: &Value, sort: Option<&Value>) -> (usize, Vec<Value>) {
    let mut out = Vec::new();
    let mut first_total = None;
    loop {
        let mut request = json!({
            "filters": filters,
            "pagination": { "skip": out.len(), "limit": 100 },
        });
        if let Some(sort) = sort {
            request["sort"] = sort.clone();
        }
        let page = search(gw, request).await;
        let t = total(&page);
        assert_eq!(
            *first_total.get_or_insert(t),
            t,
            "total moved between pages"
        );
        let got = vehicles(&page).clone();
        let n = got.len();
        out.extend(got);
        if n < 100 || out.len() >= t {
            break;
        }
    }
    let t = first_total.unwrap_or(0);
    assert_eq!(out.len(), t, "{filters}: walked vs total");
    (t, out)
}

fn vins<'v>(list: impl IntoIterator<Item = &'v Value>) -> BTreeSet<String> {
    list.into_iter()
        .map(|v| v["vin"].as_str().expect("vin").to_owned())
        .collect()
}

fn facet_count(facets: &Value, name: &str, value: &str) -> usize {
    facets[name]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["value"].as_str() == Some(value))
        .map_or(0, |f| f["count"].as_u64().expect("count") as usize)
}

fn facet_sum(facets: &Value, name: &str) -> usize {
    facets[name]
        .as_array()
        .unwrap_or_else(|| panic!("no `{name}` facet in {facets}"))
        .iter()
        .map(|f| f["count"].as_u64().expect("count") as usize)
        .sum()
}

// =============================================================================================
// The oracle: the simulator's typed inventory, filtered with AAP semantics

fn condition(c: Condition) -> &'static str {
    match c {
        Condition::New => "new",
        Condition::PreOwned => "used",
        Condition::Certified => "cpo",
    }
}

fn status(s: Status) -> Option<&'static str> {
    match s {
        Status::InStock => Some("available"),
        Status::InTransit => Some("intransit"),
        Status::PendingSale => Some("pending"),
        Status::Sold => None,
    }
}

fn vehicle_type(t: VehicleType) -> &'static str {
    match t {
        VehicleType::Car => "car",
        VehicleType::Motorcycle => "motorcycle",
    }
}

fn fuel(f: &str) -> &'static str {
    match f {
        "Gasoline" => "gas",
        "Hybrid" => "hybrid",
        "Plug-In Hybrid" => "phev",
        "Electric" => "bev",
        other => panic!("fuel {other} not in the mapping's table"),
    }
}

fn strings(filters: &Value, key: &str) -> Option<Vec<String>> {
    filters[key].as_array().map(|a| {
        a.iter()
            .map(|s| s.as_str().expect("string").to_lowercase())
            .collect()
    })
}

/// Whether `u` matches `filters` (the keys the tests use), AAP semantics.
fn oracle(filters: &Value, u: &Unit) -> bool {
    if status(u.status).is_none() {
        return false;
    }
    let any = |key: &str, value: &str| {
        strings(filters, key).is_none_or(|list| list.contains(&value.to_lowercase()))
    };
    let at_most = |key: &str, value: Option<u32>| {
        filters[key]
            .as_u64()
            .is_none_or(|max| value.is_some_and(|v| u64::from(v) <= max))
    };
    let at_least = |key: &str, value: Option<u32>| {
        filters[key]
            .as_u64()
            .is_none_or(|min| value.is_some_and(|v| u64::from(v) >= min))
    };
    any("make", u.make)
        && any("model", u.model)
        && any("condition", condition(u.condition))
        && any("vehicle_type", vehicle_type(u.vehicle_type))
        && any("fuel", fuel(u.fuel_type))
        && at_most("price_max", u.internet_price)
        && at_least("price_min", u.internet_price)
        && at_least("year_min", Some(u32::from(u.year)))
        && at_most("mileage_max", Some(u.odometer))
}

fn expected(filters: &Value) -> BTreeSet<String> {
    UNITS
        .iter()
        .filter(|u| oracle(filters, u))
        .map(|u| u.vin.clone())
        .collect()
}

/// Whether a returned vehicle satisfies `filters` (checked on the reply alone).
fn reply_matches(filters: &Value, v: &Value) -> bool {
    let any = |key: &str, field: &str| {
        strings(filters, key).is_none_or(|list| {
            v[field]
                .as_str()
                .is_some_and(|s| list.contains(&s.to_lowercase()))
        })
    };
    let price = v["price"].as_u64();
    any("make", "make")
        && any("condition", "condition")
        && any("vehicle_type", "vehicle_type")
        && filters["price_max"]
            .as_u64()
            .is_none_or(|max| price.is_some_and(|p| p <= max))
        && filters["price_min"]
            .as_u64()
            .is_none_or(|min| price.is_some_and(|p| p >= min))
}

fn filter_table() -> Vec<Value> {
    vec![
        json!({}),
        json!({ "make": ["Honda"] }),
        json!({ "make": ["honda"] }),
        json!({ "make": ["Toyota"] }),
        json!({ "condition": ["new"] }),
        json!({ "condition": ["used"] }),
        json!({ "condition": ["cpo"] }),
        json!({ "condition": ["used", "cpo"], "price_max": 25000 }),
        json!({ "make": ["Honda"], "condition": ["new"], "price_max": 30000 }),
        json!({ "price_max": 10000 }),
        json!({ "price_max": 0 }),
        json!({ "price_min": 30000, "price_max": 45000 }),
        json!({ "vehicle_type": ["motorcycle"], "price_max": 15000 }),
        json!({ "vehicle_type": ["car"], "condition": ["cpo"], "year_min": 2022 }),
        json!({ "fuel": ["bev", "hybrid"] }),
        json!({ "model": ["Civic", "Rebel 500"], "mileage_max": 20000 }),
    ]
}

// =============================================================================================
// Search

#[test]
fn search_filters_are_honoured_and_complete() {
    block_on(async {
        let gw = gw();
        let mut nonempty = 0;
        for filters in filter_table() {
            let (t, list) = search_all(gw, &filters, None).await;
            for v in &list {
                assert!(
                    reply_matches(&filters, v),
                    "{filters}: returned a vehicle that does not match: {v}"
                );
                assert!(v["status"].is_string(), "status is required: {v}");
            }
            let want = expected(&filters);
            assert_eq!(vins(&list), want, "{filters}: not the oracle's set");
            assert_eq!(t, want.len(), "{filters}");
            if t > 0 {
                nonempty += 1;
            }
        }
        assert!(nonempty >= 12, "the filter table mostly selects something");
    });
}

#[test]
fn search_totals_agree_with_facet_counts() {
    block_on(async {
        let gw = gw();
        let all = facets(gw, &json!({})).await;
        let (everything, _) = search_all(gw, &json!({}), None).await;
        for name in ["makes", "conditions", "vehicle_types", "statuses", "fuels"] {
            assert_eq!(facet_sum(&all, name), everything, "{name}: {all}");
        }
        // One term facet at a time: the search total for that value is the facet's count.
        for (facet, filter) in [
            ("conditions", "condition"),
            ("makes", "make"),
            ("vehicle_types", "vehicle_type"),
            ("fuels", "fuel"),
            ("models", "model"),
        ] {
            let terms = all[facet].as_array().expect("facet").clone();
            assert!(!terms.is_empty(), "{facet}");
            for term in terms {
                let value = term["value"].as_str().expect("value");
                let filters = json!({ filter: [value] });
                let page = search(
                    gw,
                    json!({ "filters": filters, "pagination": { "limit": 1 } }),
                )
                .await;
                assert_eq!(
                    total(&page) as u64,
                    term["count"].as_u64().expect("count"),
                    "{facet} {value}"
                );
                assert_eq!(total(&page), expected(&filters).len(), "{facet} {value}");
            }
        }
        // And with filters: the facets of the filtered subset add up to its search total.
        for filters in filter_table() {
            let page = search(
                gw,
                json!({ "filters": filters, "pagination": { "limit": 1 } }),
            )
            .await;
            let f = facets(gw, &filters).await;
            let t = total(&page);
            if t == 0 {
                continue;
            }
            for name in ["makes", "conditions", "vehicle_types", "statuses"] {
                assert_eq!(facet_sum(&f, name), t, "{filters} {name}: {f}");
            }
            if filters.get("condition").is_some() {
                continue;
            }
            for c in ["new", "used", "cpo"] {
                let mut narrowed = filters.clone();
                common::merge(&mut narrowed, json!({ "condition": [c] }));
                assert_eq!(
                    facet_count(&f, "conditions", c),
                    expected(&narrowed).len(),
                    "{filters} condition {c}"
                );
            }
        }
        // The simulator's own counts.
        let fx = SHARED.sims.feed.fixtures();
        assert_eq!(
            everything as u64,
            fx["unsold_rows"].as_u64().expect("unsold")
        );
        for (make, count) in fx["counts_by_make"].as_object().expect("makes") {
            assert_eq!(
                facet_count(&all, "makes", make) as u64,
                count.as_u64().expect("count"),
                "{make}"
            );
        }
        let price_range = &all["price_range"];
        let prices: Vec<u32> = UNITS
            .iter()
            .filter(|u| status(u.status).is_some())
            .filter_map(|u| u.internet_price)
            .collect();
        assert_eq!(
            price_range["min"],
            prices.iter().min().copied().expect("min")
        );
        assert_eq!(
            price_range["max"],
            prices.iter().max().copied().expect("max")
        );
    });
}

/// AAP order for `price`: priced first, by price in `order`; unpriced last; ties by stock, VIN.
fn price_order(a: &Value, b: &Value, descending: bool) -> Ordering {
    let by_price = match (a["price"].as_u64(), b["price"].as_u64()) {
        (Some(x), Some(y)) if descending => y.cmp(&x),
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_lowercase();
    by_price
        .then_with(|| text(a, "stock").cmp(&text(b, "stock")))
        .then_with(|| text(a, "vin").cmp(&text(b, "vin")))
}

#[test]
fn sorting_by_price_is_right() {
    block_on(async {
        let gw = gw();
        let unpriced = UNITS
            .iter()
            .filter(|u| status(u.status).is_some() && u.internet_price.is_none())
            .count();
        assert!(unpriced > 0, "the feed has call-for-price units");
        for (order, descending) in [("asc", false), ("desc", true)] {
            let sort = json!({ "field": "price", "order": order });
            for filters in [json!({}), json!({ "condition": ["used", "cpo"] })] {
                let (_, list) = search_all(gw, &filters, Some(&sort)).await;
                for pair in list.windows(2) {
                    assert_ne!(
                        price_order(&pair[0], &pair[1], descending),
                        Ordering::Greater,
                        "price {order} {filters}: {} before {}",
                        pair[0],
                        pair[1]
                    );
                }
                let mut sorted = list.clone();
                sorted.sort_by(|a, b| price_order(a, b, descending));
                assert_eq!(sorted, list, "price {order} {filters}");
                // Unpriced units come last in both orders.
                if let Some(first_unpriced) = list.iter().position(|v| v["price"].is_null()) {
                    assert!(list[first_unpriced..].iter().all(|v| v["price"].is_null()));
                }
            }
            let (_, list) = search_all(gw, &json!({}), Some(&sort)).await;
            assert_eq!(
                list.iter().filter(|v| v["price"].is_null()).count(),
                unpriced
            );
            let cheapest = UNITS
                .iter()
                .filter(|u| status(u.status).is_some())
                .filter_map(|u| u.internet_price)
                .min()
                .expect("a price");
            if !descending {
                assert_eq!(list[0]["price"], cheapest);
            }
        }
    });
}

#[test]
fn pagination_echoes_skip_and_limit_and_slices_one_ordering() {
    block_on(async {
        let gw = gw();
        let sort = json!({ "field": "price", "order": "asc" });
        let (t, all) = search_all(gw, &json!({}), Some(&sort)).await;
        assert!(t > 120, "enough units to page through: {t}");
        for (skip, limit) in [(0, 1), (0, 7), (5, 7), (13, 20), (100, 100), (t - 3, 10)] {
            let page = search(
                gw,
                json!({ "sort": sort, "pagination": { "skip": skip, "limit": limit } }),
            )
            .await;
            assert_eq!(page["skip"], skip, "skip {skip} limit {limit}");
            assert_eq!(page["limit"], limit, "skip {skip} limit {limit}");
            assert_eq!(total(&page), t);
            let end = (skip + limit).min(t);
            assert_eq!(
                vehicles(&page),
                &all[skip..end],
                "skip {skip} limit {limit}"
            );
        }
        // Defaults and clamping: limit 20 by default, at most 100; skip past the end is empty.
        let page = search(gw, json!({ "sort": sort })).await;
        assert_eq!(page["skip"], 0);
        assert_eq!(page["limit"], 20);
        assert_eq!(vehicles(&page), &all[..20]);
        let page = search(gw, json!({ "sort": sort, "pagination": { "limit": 1000 } })).await;
        assert_eq!(page["limit"], 100);
        assert_eq!(vehicles(&page).len(), 100);
        let page = search(gw, json!({ "pagination": { "skip": t + 5, "limit": 10 } })).await;
        assert_eq!(page["skip"], t + 5);
        assert_eq!(total(&page), t);
        assert!(vehicles(&page).is_empty());
        // With filters too.
        let filters = json!({ "condition": ["new"] });
        let (_, new_units) = search_all(gw, &filters, Some(&sort)).await;
        let page = search(
            gw,
            json!({ "filters": filters, "sort": sort, "pagination": { "skip": 3, "limit": 4 } }),
        )
        .await;
        assert_eq!(vehicles(&page), &new_units[3..7]);
    });
}

// =============================================================================================
// Detail and the data itself

fn money_field(v: &Value, key: &str) -> Option<u32> {
    v[key].as_u64().map(|n| u32::try_from(n).expect("u32"))
}

/// The listing `v` carries exactly the data of the feed's unit (what the mapping allows).
fn assert_same_as_feed(v: &Value) {
    let vin = v["vin"].as_str().expect("vin");
    let (row, u) = unit(vin);
    let context = format!("{vin} (row {row})");
    assert_eq!(v["stock"], u.stock_number, "{context}");
    assert_eq!(
        v["vehicle_id"],
        (XML_FIRST_ID + row).to_string(),
        "{context}"
    );
    assert_eq!(v["dealer_id"], "xml_feed", "{context}");
    assert_eq!(v["year"], u.year, "{context}");
    assert_eq!(v["make"], u.make, "{context}");
    assert_eq!(
        v["model"], u.model,
        "{context}: trailing spaces are trimmed"
    );
    assert_eq!(v["trim"], u.trim, "{context}");
    assert_eq!(v["vehicle_type"], vehicle_type(u.vehicle_type), "{context}");
    assert_eq!(v["condition"], condition(u.condition), "{context}");
    assert_eq!(
        v["status"],
        status(u.status).expect("listable"),
        "{context}"
    );
    assert_eq!(v["rooftop"], u.location, "{context}");
    assert_eq!(money_field(v, "price"), u.internet_price, "{context}");
    assert_eq!(
        money_field(v, "msrp"),
        u.msrp,
        "{context}: nil MSRP is absent"
    );
    assert_eq!(
        money_field(v, "list_price"),
        Some(u.list_price),
        "{context}"
    );
    assert_eq!(v["mileage"], u.odometer, "{context}");
    assert_eq!(v["body"], u.body_style.to_lowercase(), "{context}");
    assert_eq!(v["driveline"], u.drivetrain.to_lowercase(), "{context}");
    assert_eq!(v["engine"], u.engine, "{context}");
    assert_eq!(
        money_field(v, "displacement_cc"),
        u.displacement_cc,
        "{context}"
    );
    assert_eq!(v["fuel"], fuel(u.fuel_type), "{context}");
    assert_eq!(
        money_field(v, "electric_range_mi"),
        u.electric_range,
        "{context}"
    );
    assert_eq!(v["exterior_color"], u.ext_color, "{context}");
    if u.int_color.is_empty() {
        assert!(v.get("interior_color").is_none(), "{context}");
    } else {
        assert_eq!(v["interior_color"], u.int_color, "{context}");
    }
    assert_eq!(money_field(v, "city_mpg"), u.city_mpg, "{context}");
    assert_eq!(money_field(v, "highway_mpg"), u.hwy_mpg, "{context}");
    if u.features.is_empty() {
        assert!(v.get("features").is_none(), "{context}");
    } else {
        assert_eq!(v["features"], json!(u.features), "{context}");
    }
    if u.photos.is_empty() {
        assert!(v.get("photos").is_none(), "{context}");
    } else {
        assert_eq!(v["photos"], json!(u.photos), "{context}");
    }
    match u.date_in_stock {
        Some(d) => assert_eq!(v["inventory_date"], d.to_string(), "{context}"),
        None => assert!(v.get("inventory_date").is_none(), "{context}"),
    }
    let updated = v["updated_at"].as_str().expect("updated_at");
    assert!(
        updated.starts_with(&inventory::iso_local(u.last_updated).replace(' ', "T")),
        "{context}: {updated}"
    );
    // The dealer's comments reach `description` intact (escaped `&`, `<`, `>`, quotes, CDATA
    // and the dash all decoded, spaces around them kept); blank ones are absent.
    let comments = feed_sim::comments(u);
    match v["description"].as_str() {
        Some(d) => assert_eq!(d, comments.trim(), "{context}"),
        None => assert!(
            row % 11 == 4,
            "{context}: description missing for a unit with comments"
        ),
    }
}

#[test]
fn a_vin_from_search_resolves_in_inventory_vehicle_with_the_same_data() {
    block_on(async {
        let gw = gw();
        let (_, all) = search_all(gw, &json!({}), None).await;
        let mut described = 0;
        for listed in &all {
            assert_same_as_feed(listed);
            if listed.get("description").is_some() {
                described += 1;
            }
            let vin = listed["vin"].as_str().expect("vin");
            let reply = vehicle(gw, json!({ "vin": vin })).await;
            let detail = ok(&reply, "inventory.vehicle.response");
            assert_eq!(detail, listed, "{vin}: detail differs from the listing");
        }
        assert!(described > all.len() / 2);
        // By stock number and by the export's record id as well.
        let some = &all[all.len() / 2];
        for request in [
            json!({ "stock": some["stock"] }),
            json!({ "vehicle_id": some["vehicle_id"] }),
            json!({ "vin": some["vin"], "stock": "NO-SUCH-STOCK" }),
        ] {
            let reply = vehicle(gw, request.clone()).await;
            assert_eq!(ok(&reply, "inventory.vehicle.response"), some, "{request}");
        }
    });
}

#[test]
fn unknown_vin_is_not_found_and_sold_units_are_unavailable() {
    block_on(async {
        let gw = gw();
        let fx = SHARED.sims.feed.fixtures();
        let unknown = fx["unknown_vin"].as_str().expect("unknown vin");
        let reply = vehicle(gw, json!({ "vin": unknown })).await;
        reply.assert_aap_error("VEHICLE_NOT_FOUND");
        let reply = vehicle(gw, json!({ "stock": "SJX99999" })).await;
        reply.assert_aap_error("VEHICLE_NOT_FOUND");

        let sold: Vec<&str> = fx["sold_vins"]
            .as_array()
            .expect("sold")
            .iter()
            .map(|v| v.as_str().expect("vin"))
            .collect();
        assert!(!sold.is_empty());
        let (_, listed) = search_all(gw, &json!({}), None).await;
        // A VIN that misses is not retried as a stock number: that would answer another unit.
        let other_stock = listed[0]["stock"].clone();
        let reply = vehicle(gw, json!({ "vin": unknown, "stock": other_stock })).await;
        reply.assert_aap_error("VEHICLE_NOT_FOUND");
        let listed = vins(&listed);
        for vin in &sold {
            assert!(!listed.contains(*vin), "sold {vin} is listed");
            let reply = vehicle(gw, json!({ "vin": vin })).await;
            reply.assert_aap_error("VEHICLE_UNAVAILABLE");
            let (_, u) = unit(vin);
            let reply = vehicle(gw, json!({ "stock": u.stock_number })).await;
            reply.assert_aap_error("VEHICLE_UNAVAILABLE");
            // A search for it by VIN finds nothing, rather than an error.
            let page = search(gw, json!({ "filters": { "vin": vin } })).await;
            assert_eq!(total(&page), 0);
        }
    });
}

#[test]
fn the_feed_is_fetched_from_the_xml_route_with_its_credentials() {
    block_on(async {
        let gw = gw();
        // Make sure the cache is loaded, then look at what the feed saw.
        let _ = search(gw, json!({ "pagination": { "limit": 1 } })).await;
        let received = SHARED.sims.feed.received();
        assert!(!received.is_empty());
        for r in &received {
            assert_eq!(r["method"], "GET");
            assert_eq!(r["path"], XML_FEED_PATH);
            assert_eq!(r["headers"]["accept"], "application/xml");
            assert!(
                r["headers"]["authorization"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("Basic ")),
                "{r}"
            );
        }
        // Calls are answered from the cache: a burst costs no fetch.
        let before = SHARED.sims.feed.received().len();
        for _ in 0..5 {
            let _ = facets(gw, &json!({ "condition": ["used"] })).await;
        }
        assert_eq!(SHARED.sims.feed.received().len(), before);
    });
}

/// No internal column anywhere: facets of every kind carry no cost either, whatever the filter.
#[test]
fn no_internal_pricing_in_any_facet_or_filtered_reply() {
    block_on(async {
        let gw = gw();
        for filters in filter_table() {
            let f = facets(gw, &filters).await;
            let text = f.to_string();
            for word in CONFIDENTIAL_WORDS {
                assert!(!text.contains(word), "{filters}: facets mention {word}");
            }
            let page = search(
                gw,
                json!({ "filters": filters, "sort": { "field": "price", "order": "desc" }, "pagination": { "limit": 100 } }),
            )
            .await;
            for v in vehicles(&page) {
                for key in v.as_object().expect("vehicle").keys() {
                    assert!(
                        !key.to_lowercase().contains("cost")
                            && !key.to_lowercase().contains("book"),
                        "{key} in {v}"
                    );
                }
            }
        }
    });
}

// =============================================================================================
// Freshness: the cached copy while the feed fails; no copy at all

fn calls(in_stock_vin: &str) -> [(Value, &'static str); 3] {
    [
        (
            json!({ "type": "inventory.search.request", "filters": { "condition": ["used", "cpo"], "price_max": 30000 }, "sort": { "field": "price", "order": "asc" }, "pagination": { "limit": 5 } }),
            "inventory.search.response",
        ),
        (
            json!({ "type": "inventory.facets.request" }),
            "inventory.facets.response",
        ),
        (
            json!({ "type": "inventory.vehicle.request", "vin": in_stock_vin }),
            "inventory.vehicle.response",
        ),
    ]
}

fn in_stock_vin() -> &'static str {
    UNITS
        .iter()
        .find(|u| u.status == Status::InStock)
        .map(|u| u.vin.as_str())
        .expect("an in-stock unit")
}

/// After a good load, a failing feed (HTTP 500 with an HTML page) does not take the dealer down:
/// the cached copy is served, identical, while refreshes are tried and fail.
#[tokio::test(flavor = "multi_thread")]
async fn feed_failing_after_a_good_load_is_served_stale() {
    let sims = Simulators::start().await.expect("simulators");
    let folder = fixture_copy("300ms", "1h");
    let gw = start_on(folder.path(), &sims).await;
    let mut good = Vec::new();
    for (data, kind) in calls(in_stock_vin()) {
        let reply = gw.send(A2A, data).await;
        good.push(ok(&reply, kind).clone());
    }
    sims.feed.set_mode(Mode::Fail, 0);
    let before = sims.feed.received().len();
    // Past `refresh`: the copy is stale; background and on-demand refreshes fail.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for round in 0..3 {
        for ((data, kind), want) in calls(in_stock_vin()).into_iter().zip(&good) {
            let context = format!("stale round {round} {}", data["type"]);
            let reply = gw.send(A2A, data).await;
            assert_eq!(ok(&reply, kind), want, "{context}: not the cached copy");
        }
        tokio::time::sleep(Duration::from_millis(350)).await;
    }
    let received = sims.feed.received();
    assert!(
        received.len() > before,
        "refreshes were attempted while failing"
    );
    assert!(received.iter().all(|r| r["path"] == XML_FEED_PATH));
    // Back to normal: the next refresh replaces the copy and calls keep succeeding.
    sims.feed.set_mode(Mode::Normal, 0);
    tokio::time::sleep(Duration::from_millis(700)).await;
    for ((data, kind), want) in calls(in_stock_vin()).into_iter().zip(&good) {
        let reply = gw.send(A2A, data).await;
        assert_eq!(ok(&reply, kind), want, "after recovery");
    }
}

/// A feed that was never loaded has no copy to fall back on: every feed skill answers
/// INTERNAL_ERROR (retryable, no cause leaked); once the feed answers, the next call loads it.
#[tokio::test(flavor = "multi_thread")]
async fn feed_never_loaded_is_a_retryable_internal_error() {
    let sims = Simulators::start().await.expect("simulators");
    sims.feed.set_mode(Mode::Fail, 0);
    // A 4 MiB cap: the real export is far below it, the `huge` one (over 8 MiB) above.
    let folder = fixture_copy("5m", "1h");
    let upstreams = folder.path().join("upstreams.yaml");
    let text = std::fs::read_to_string(&upstreams).expect("read upstreams.yaml");
    assert!(text.contains("max_response_bytes: 16777216\n"));
    let text = text.replace(
        "max_response_bytes: 16777216\n",
        "max_response_bytes: 4194304\n",
    );
    std::fs::write(&upstreams, text).expect("write upstreams.yaml");
    let gw = start_on(folder.path(), &sims).await;
    for (data, _) in calls(in_stock_vin()) {
        let context = format!("never loaded {}", data["type"]);
        let reply = gw.send(A2A, data).await;
        assert_internal_error(&reply, &context);
    }
    assert!(
        !sims.feed.received().is_empty(),
        "the feed was really called"
    );
    // A broken export (mismatched tags, not UTF-8, cut short), or a well-formed one over the
    // size cap, is no better than a 500 for a first load.
    for mode in [Mode::Garbage, Mode::Huge] {
        sims.feed.set_mode(mode, 0);
        sims.feed.clear_received();
        let (data, _) = calls(in_stock_vin())[0].clone();
        let reply = gw.send(A2A, data).await;
        assert_internal_error(&reply, &format!("{mode:?} first load"));
        assert!(
            sims.feed
                .received()
                .iter()
                .any(|r| r["path"] == XML_FEED_PATH),
            "{mode:?}: the XML route was called"
        );
    }
    sims.feed.set_mode(Mode::Normal, 0);
    for (data, kind) in calls(in_stock_vin()) {
        let reply = gw.send(A2A, data).await;
        ok(&reply, kind);
    }
}

/// The scheduling policy (`/proc/<pid>/task/<tid>/stat`, field 41) of each thread of process
/// `pid` named `name`: 0 normal, 5 idle.
#[cfg(target_os = "linux")]
fn thread_policies(pid: u32, name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // After the name in parentheses, fields start at the third (state); policy is the 41st.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if let Some(policy) = after_name.split_whitespace().nth(41 - 3) {
            out.push(policy.parse().expect("a policy number"));
        }
    }
    out
}

/// Refreshes build at the idle CPU priority (`SCHED_IDLE`), so that buyers' searches never wait
/// for one; `limits.feed_refresh_priority: normal` keeps them at the normal one. The real
/// binary, its feed refreshing every 200 ms; the policy read from the kernel.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn feed_refreshes_run_at_the_configured_cpu_priority() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_IDLE: u32 = 5;
    let sims = Simulators::start().await.expect("simulators");
    let folder = fixture_copy("200ms", "1h");
    for (limits, want) in [
        ("", SCHED_IDLE),
        ("limits: { feed_refresh_priority: normal }\n", SCHED_OTHER),
    ] {
        let (dir, config) = config_dir(folder.path());
        let yaml = std::fs::read_to_string(&config).expect("read config");
        std::fs::write(&config, format!("{yaml}{limits}")).expect("write config");
        let log = dir.path().join("gateway.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(&config)
            .env("FEED_URL", sims.feed.base_url())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the binary starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let policies = loop {
            let refreshed = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("\"feed refreshed\"")
                .count();
            // Past the first refresh (the thread is lowered when it starts one).
            if refreshed >= 2 {
                break thread_policies(child.id(), "feed-build");
            }
            assert!(
                std::time::Instant::now() < deadline && child.try_wait().expect("wait").is_none(),
                "{limits:?}: no refreshes; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        common::process::terminate(&mut child, Duration::from_secs(10)).await;
        assert_eq!(policies, [want], "{limits:?}: the feed's thread");
    }
}

// =============================================================================================
// The command line on a configuration using the folder

fn run_cli(args: &[&str], config: &Path, feed_url: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_aap-gateway"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env_remove("FEED_URL")
        .env_remove("FEED_USER")
        .env_remove("FEED_PASSWORD")
        .env("RUST_LOG", "warn");
    if let Some(url) = feed_url {
        cmd.env("FEED_URL", url);
    }
    let out = cmd.output().expect("run aap-gateway");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_and_test_mappings_pass_on_the_fixture() {
    let (_dir, config) = config_dir(&fixture_dir());
    // No network: any URL will do.
    let url = Some("http://127.0.0.1:9");
    let (code, stdout, stderr) = run_cli(&["check"], &config, url);
    assert_eq!(code, 0, "check failed:\n{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains(": ok"),
        "{stdout}\n{stderr}"
    );

    let (code, stdout, stderr) = run_cli(&["test-mappings"], &config, url);
    assert_eq!(code, 0, "test-mappings failed:\n{stdout}\n{stderr}");
    let summary = stdout.lines().last().unwrap_or_default();
    let passed: usize = summary
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    assert!(passed >= 7, "{stdout}");
    assert!(summary.ends_with("0 failed"), "{stdout}");
    for skill in ["inventory.search", "inventory.vehicle", "inventory.facets"] {
        let (code, stdout, stderr) = run_cli(&["test-mappings", "--skill", skill], &config, url);
        assert_eq!(code, 0, "{skill}:\n{stdout}\n{stderr}");
        assert!(stdout.contains(skill), "{stdout}");
    }

    // Without FEED_URL the folder does not load, and `check` says where.
    let (code, stdout, stderr) = run_cli(&["check"], &config, None);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let all = format!("{stdout}{stderr}");
    let upstreams = fixture_dir().join("upstreams.yaml");
    assert!(
        all.lines()
            .any(|l| l.starts_with(&format!("{}:", upstreams.display())) && l.contains("FEED_URL")),
        "{all}"
    );
}

// =============================================================================================
// XML text around entity references

/// quick-xml reports the text around every entity or character reference as separate events;
/// the decoder trims an element's text once, so `one &amp; two` keeps its spaces.
#[test]
fn xml_text_next_to_an_entity_keeps_its_spaces() {
    use aap_gateway::formats::Format;
    let xml = Format::Xml {
        list_elements: Default::default(),
    };
    for (body, want) in [
        ("<a><c>one &amp; two</c></a>", "one & two"),
        ("<a><c>say &quot;hi&quot; now</c></a>", "say \"hi\" now"),
        ("<a><c>x &#x2013; y</c></a>", "x \u{2013} y"),
        ("<a><c>1 &lt; 2</c></a>", "1 < 2"),
    ] {
        let got = xml.decode(body.as_bytes()).expect("decodes");
        assert_eq!(got, json!({ "a": { "c": want } }), "{body}");
    }
    // End to end: the description is the comment, spaces and all.
    block_on(async {
        let (_, all) = search_all(gw(), &json!({}), None).await;
        for v in all.iter().filter(|v| v.get("description").is_some()) {
            let (_, u) = unit(v["vin"].as_str().expect("vin"));
            assert_eq!(v["description"], feed_sim::comments(u), "{}", v["vin"]);
        }
    });
}
