//! The four inventory-side skills end to end: the real gateway in-process, in front of the
//! legacy simulators, for both demo dealers — Demo Toyota (proxy mode: every call translated to
//! the REST DMS) and Demo Honda (feed mode: the CSV feed cached and searched in the gateway).
//!
//! What holds for every reply and every dealer:
//! - it validates against the project's AAP response schemas (`schemas/`, formats checked;
//!   `tests/schema_corpus.rs` holds those to the public reference schemas);
//! - no internal column leaks (dealer cost, book value): vehicle keys stay within docs/protocol.md §Vehicles;
//! - filters are honoured (`inventory::matches`) and complete: the returned set is exactly what
//!   an independent oracle over the simulators' own typed inventory selects;
//! - sorting follows docs/protocol.md §Sorting (missing last in both orders, case-insensitive strings, ties by
//!   stock then VIN), and pages of any size and offset are slices of one ordering;
//! - search totals equal the facet counts for the same filters;
//! - a listed vehicle resolves in `inventory.vehicle` with the same data; unknown and sold
//!   units answer `VEHICLE_NOT_FOUND` / `VEHICLE_UNAVAILABLE`;
//! - both modes apply the same rules to the same request (two known disagreements have tests
//!   of their own at the end: a comma inside a text filter value, and the case of `stock`).
//!
//! All tests share one gateway (they only read); see `block_on`.

mod common;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use aap_gateway::inventory::matches as gateway_matches;
use aap_sim::Simulators;
use aap_sim::inventory::{self, Condition, Status, Vehicle as Unit, VehicleType};
use common::{Gateway, Reply};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

// =============================================================================================
// Dealers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dealer {
    /// Proxy mode, chosen by Host (127.0.0.1) at `/a2a`.
    Toyota,
    /// Feed mode, chosen by path prefix.
    Honda,
}

const DEALERS: [Dealer; 2] = [Dealer::Toyota, Dealer::Honda];

impl Dealer {
    fn path(self) -> &'static str {
        match self {
            Dealer::Toyota => "/a2a",
            Dealer::Honda => "/dealers/demo-honda/a2a",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dealer::Toyota => "Demo Toyota",
            Dealer::Honda => "Demo Honda",
        }
    }

    /// The simulator's own typed inventory (sold units included).
    fn units(self) -> &'static [Unit] {
        static TOYOTA: LazyLock<Vec<Unit>> = LazyLock::new(inventory::toyota_group);
        static HONDA: LazyLock<Vec<Unit>> = LazyLock::new(inventory::honda_powersports);
        match self {
            Dealer::Toyota => &TOYOTA,
            Dealer::Honda => &HONDA,
        }
    }

    fn fixtures(self, sims: &Simulators) -> Value {
        match self {
            Dealer::Toyota => sims.dms.fixtures(),
            Dealer::Honda => sims.feed.fixtures(),
        }
    }
}

// =============================================================================================
// One gateway and one pair of simulators for the whole file
//
// These tests only read, so they share a gateway: starting one costs a feed load (every CSV row
// through jq), which would otherwise dominate. The runtime outlives every test. Its rate limiter
// is off: the suite's calls, all from one client, are not what the limit is for.

struct Demo {
    gw: Gateway,
    sims: Simulators,
}

static DEMO: LazyLock<Demo> = LazyLock::new(|| {
    common::RUNTIME.block_on(async {
        let (gw, sims) = common::demo_with_simulators_unlimited().await;
        // Every skill call of this suite also runs through HTTP+JSON, which must agree.
        Demo {
            gw: gw.with_parity(),
            sims,
        }
    })
});

/// Runs a test body on the shared runtime (the shared gateway is started first).
fn block_on(body: impl std::future::Future<Output = ()>) {
    common::run_with(&DEMO, body);
}

fn shared() -> (&'static Gateway, &'static Simulators) {
    (&DEMO.gw, &DEMO.sims)
}

// =============================================================================================
// Universal reply checks

/// Every `Vehicle` property of docs/protocol.md §Vehicles; the demo mappings are allow-lists of these.
const VEHICLE_FIELDS: [&str; 40] = [
    "vehicle_type",
    "vin",
    "year",
    "make",
    "model",
    "trim",
    "condition",
    "status",
    "rooftop",
    "msrp",
    "price",
    "list_price",
    "fees",
    "stock",
    "dealer_id",
    "vehicle_id",
    "mileage",
    "body",
    "transmission",
    "driveline",
    "engine",
    "displacement_cc",
    "fuel",
    "city_mpg",
    "highway_mpg",
    "electric_range_mi",
    "battery_kwh",
    "motor_power_hp",
    "dc_fast_charge",
    "charge_port",
    "exterior_color",
    "interior_color",
    "features",
    "photos",
    "vdp_url",
    "description",
    "notes",
    "other_attributes",
    "inventory_date",
    "updated_at",
];

/// Words of the confidential legacy columns (DMS `DealerCost`/`BookValue`, feed `Cost`/`Book
/// Value`).
const CONFIDENTIAL_WORDS: [&str; 5] = ["DealerCost", "BookValue", "Cost", "Book Value", "cost"];

/// The confidential amounts of every unit of both inventories, by VIN.
static CONFIDENTIAL: LazyLock<HashMap<&'static str, (u32, u32)>> = LazyLock::new(|| {
    DEALERS
        .iter()
        .flat_map(|d| d.units())
        .map(|u| (u.vin.as_str(), (u.dealer_cost, u.book_value)))
        .collect()
});

fn assert_no_internal_columns(vehicle: &Value, text: &str) {
    let object = vehicle.as_object().expect("vehicle object");
    for key in object.keys() {
        assert!(
            VEHICLE_FIELDS.contains(&key.as_str()),
            "vehicle key `{key}` is not an AAP Vehicle field: {vehicle}"
        );
    }
    let Some((cost, book)) = vehicle["vin"]
        .as_str()
        .and_then(|vin| CONFIDENTIAL.get(vin))
    else {
        return;
    };
    // Legacy money strings ("$21,500") have no business in an AAP reply at all; only when one
    // shows up is it worth checking whether it is this unit's cost.
    if text.contains('$') {
        for money in [inventory::money(*cost), inventory::money(*book)] {
            assert!(
                !text.contains(&money),
                "the reply carries a confidential amount {money}"
            );
        }
    }
    for (key, value) in object {
        // Advertised amounts may coincide with the cost by chance; nothing else may.
        if ["price", "list_price", "msrp"].contains(&key.as_str()) {
            continue;
        }
        if let Some(n) = value.as_u64() {
            assert!(
                n != u64::from(*cost) && n != u64::from(*book),
                "`{key}` = {n} equals the unit's dealer cost or book value: {vehicle}"
            );
        }
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
    match kind {
        "inventory.search.response" => {
            for v in data["vehicles"].as_array().expect("vehicles") {
                assert_no_internal_columns(v, &reply.text);
            }
        }
        "inventory.vehicle.response" => assert_no_internal_columns(data, &reply.text),
        _ => {}
    }
    data
}

// =============================================================================================
// Calls
//
// Cost note: in proxy mode every listing the DMS returns goes through the mapping's jq `item`
// program (about 2 ms per listing in a debug build), and a search the DMS cannot express (a
// body/fuel/colour/vehicle_type filter, an msrp/list_price sort) and every derived facets call
// scans the whole matching inventory. The proxy dealer is therefore checked on windows of the
// ordering; the feed dealer (searched in memory) is walked in full.

async fn search(gw: &Gateway, dealer: Dealer, request: Value) -> Value {
    let mut data = json!({ "type": "inventory.search.request" });
    common::merge(&mut data, request);
    let reply = gw.send(dealer.path(), data).await;
    ok(&reply, "inventory.search.response").clone()
}

/// One page for `filters`, `sort` (optional) and the window `skip`/`limit`; checks the echoes.
async fn window(
    gw: &Gateway,
    dealer: Dealer,
    filters: &Value,
    sort: Option<&Value>,
    skip: usize,
    limit: usize,
) -> (usize, Vec<Value>) {
    let mut request = json!({ "filters": filters, "pagination": { "skip": skip, "limit": limit } });
    if let Some(sort) = sort {
        request["sort"] = sort.clone();
    }
    let page = search(gw, dealer, request).await;
    assert_eq!(page["skip"], skip, "{dealer:?} {filters}: skip echo");
    assert_eq!(
        page["limit"],
        limit.min(100),
        "{dealer:?} {filters}: limit echo"
    );
    let got = vehicles(&page).clone();
    assert!(
        got.len() <= limit.min(100),
        "{dealer:?}: page larger than its limit"
    );
    (total(&page), got)
}

async fn facets(gw: &Gateway, dealer: Dealer, filters: &Value) -> Value {
    let reply = gw
        .send(
            dealer.path(),
            json!({ "type": "inventory.facets.request", "filters": filters }),
        )
        .await;
    ok(&reply, "inventory.facets.response").clone()
}

fn vehicles(page: &Value) -> &Vec<Value> {
    page["vehicles"].as_array().expect("vehicles array")
}

fn total(page: &Value) -> usize {
    usize::try_from(page["total"].as_u64().expect("total")).expect("usize")
}

/// Every match of `filters` in `sort` order, by pages of 100; the total must not move.
async fn search_all(
    gw: &Gateway,
    dealer: Dealer,
    filters: &Value,
    sort: Option<&Value>,
) -> (usize, Vec<Value>) {
    let mut out = Vec::new();
    let mut first_total = None;
    loop {
        let (t, got) = window(gw, dealer, filters, sort, out.len(), 100).await;
        assert_eq!(
            *first_total.get_or_insert(t),
            t,
            "{dealer:?}: total moved between pages"
        );
        let n = got.len();
        out.extend(got);
        if n < 100 || out.len() >= t {
            break;
        }
    }
    assert_eq!(
        out.len(),
        first_total.unwrap_or(0),
        "{dealer:?} {filters}: walked vs total"
    );
    (first_total.unwrap_or(0), out)
}

fn key_of(v: &Value) -> String {
    format!(
        "{}|{}",
        v["stock"].as_str().unwrap_or_default(),
        v["vin"].as_str().unwrap_or_default()
    )
}

fn keys(list: &[Value]) -> Vec<String> {
    list.iter().map(key_of).collect()
}

fn vins<'v>(list: impl IntoIterator<Item = &'v Value>) -> BTreeSet<String> {
    list.into_iter()
        .map(|v| {
            v["vin"]
                .as_str()
                .expect("every demo listing has a VIN")
                .to_owned()
        })
        .collect()
}

fn fixture_vins(fx: &Value, key: &str) -> Vec<String> {
    fx[key]
        .as_array()
        .unwrap_or_else(|| panic!("fixtures lack {key}"))
        .iter()
        .map(|v| v.as_str().expect("vin").to_owned())
        .collect()
}

// =============================================================================================
// An independent oracle: AAP filter semantics over the simulators' typed units

fn condition(c: Condition) -> &'static str {
    match c {
        Condition::New => "new",
        Condition::PreOwned => "used",
        Condition::Certified => "cpo",
    }
}

fn fuel(f: &str) -> &str {
    match f {
        "Gasoline" => "gas",
        "Hybrid" => "hybrid",
        "Plug-In Hybrid" => "phev",
        "Electric" => "bev",
        "Diesel" => "diesel",
        other => other,
    }
}

fn norm(s: &str) -> String {
    s.trim().to_lowercase()
}

/// Whether AAP semantics (docs/protocol.md §Filters) select `unit` for `filters`, computed from the
/// typed record, not from the gateway's mapping. Handles the keys the tables below use.
fn oracle(filters: &Value, unit: &Unit) -> bool {
    if unit.status == Status::Sold {
        return false;
    }
    let Some(filters) = filters.as_object() else {
        return true;
    };
    filters.iter().all(|(key, want)| {
        let any = |value: &str| {
            want.as_array()
                .expect("list filter")
                .iter()
                .any(|w| norm(w.as_str().expect("string")) == norm(value))
        };
        let num = || want.as_f64().expect("number filter");
        match key.as_str() {
            "make" => any(unit.make),
            "model" => any(unit.model),
            "trim" => any(unit.trim),
            "condition" => any(condition(unit.condition)),
            "vehicle_type" => any(match unit.vehicle_type {
                VehicleType::Car => "car",
                VehicleType::Motorcycle => "motorcycle",
            }),
            "body" => any(unit.body_style),
            "fuel" => any(fuel(unit.fuel_type)),
            "exterior_color" => any(unit.ext_color),
            "rooftops" => any(unit.location),
            "year_min" => f64::from(unit.year) >= num(),
            "year_max" => f64::from(unit.year) <= num(),
            "price_min" => unit.internet_price.is_some_and(|p| f64::from(p) >= num()),
            "price_max" => unit.internet_price.is_some_and(|p| f64::from(p) <= num()),
            "mileage_max" => f64::from(unit.odometer) <= num(),
            "vin" => unit.vin.eq_ignore_ascii_case(want.as_str().expect("vin")),
            "stock" => unit.stock_number == want.as_str().expect("stock"),
            other => panic!("the oracle does not know filter `{other}`"),
        }
    })
}

// =============================================================================================
// Filter tables (no `query`: its semantics are dealer-defined)

fn filter_table(dealer: Dealer) -> Vec<Value> {
    let common = [
        json!({}),
        json!({ "condition": ["new"] }),
        json!({ "condition": ["used", "cpo"] }),
        json!({ "vehicle_type": ["motorcycle"] }),
        json!({ "year_min": 2020 }),
        json!({ "year_max": 2018 }),
        json!({ "year_min": 2019, "year_max": 2023 }),
        json!({ "price_min": 30000 }),
        json!({ "price_max": 25000 }),
        json!({ "price_min": 20000, "price_max": 30000 }),
        // Unpriced units never match a price filter, even an all-embracing one.
        json!({ "price_min": 0 }),
        json!({ "mileage_max": 10000 }),
        json!({ "mileage_max": 0 }),
        json!({ "fuel": ["bev", "PHEV"] }),
        json!({ "year_min": 2030 }),
    ];
    let specific = match dealer {
        Dealer::Toyota => vec![
            json!({ "make": ["toyota"] }),
            json!({ "make": ["Honda", "Ford"] }),
            json!({ "model": ["RAV4"] }),
            json!({ "model": ["Camry", "corolla"] }),
            json!({ "trim": ["Limited"] }),
            json!({ "rooftops": ["Demo Toyota Oakland"] }),
            json!({ "rooftops": ["demo toyota san francisco", "Demo Toyota Oakland"] }),
            json!({ "make": ["Toyota"], "condition": ["used"], "price_max": 30000, "year_min": 2018 }),
            json!({ "rooftops": ["Demo Toyota San Francisco"], "condition": ["new"], "mileage_max": 5 }),
            json!({ "vin": "4T1DAACKXRU176220" }),
            json!({ "stock": "SFN10011" }),
            json!({ "make": ["Toyota"], "stock": "OKC10130" }),
            // Completed in the gateway (the DMS has no such parameters), narrowed at the DMS by
            // the filters it has.
            json!({ "model": ["RAV4", "Highlander"], "body": ["SUV"], "fuel": ["hybrid"] }),
            json!({ "condition": ["used"], "exterior_color": ["Midnight Black Metallic", "super white"] }),
            json!({ "rooftops": ["Demo Toyota Oakland"], "body": ["sedan", "pickup truck"], "vehicle_type": ["car"] }),
        ],
        Dealer::Honda => vec![
            json!({ "make": ["Honda"] }),
            json!({ "make": ["honda"] }),
            json!({ "make": ["Toyota"] }),
            json!({ "model": ["Civic"] }),
            json!({ "model": ["Rebel 500", "gold wing"] }),
            json!({ "trim": ["Sport"] }),
            json!({ "vehicle_type": ["car"] }),
            json!({ "body": ["cruiser"] }),
            json!({ "body": ["SUV", "sedan"] }),
            json!({ "fuel": ["hybrid"] }),
            json!({ "fuel": ["GAS"] }),
            json!({ "rooftops": ["Demo Honda San Jose"] }),
            json!({ "rooftops": ["Demo Toyota Oakland"] }),
            json!({ "exterior_color": ["Crystal Black Pearl"] }),
            json!({ "exterior_color": ["Lunar Silver Metallic", "Platinum White Pearl"] }),
            json!({ "price_max": 10_000_000 }),
            json!({ "vehicle_type": ["motorcycle"], "condition": ["new"], "price_max": 15000 }),
            json!({ "vehicle_type": ["car"], "body": ["suv"], "fuel": ["hybrid"], "year_min": 2024 }),
            json!({ "model": ["CR-V", "Pilot"], "condition": ["used", "cpo"], "mileage_max": 60000 }),
            json!({ "make": ["Honda"], "exterior_color": ["Crystal Black Pearl"], "price_min": 20000 }),
            json!({ "vin": "2HGFE2F52MH921696" }),
            json!({ "stock": "SJC10122" }),
        ],
    };
    common.into_iter().chain(specific).collect()
}

/// The oracle's selection for `filters`, as VINs.
fn expected(dealer: Dealer, filters: &Value) -> BTreeSet<String> {
    dealer
        .units()
        .iter()
        .filter(|u| oracle(filters, u))
        .map(|u| u.vin.clone())
        .collect()
}

// =============================================================================================
// Sorting

/// A vehicle's sort value for `field`: numbers, case-insensitive text or instants.
#[derive(Debug, PartialEq, PartialOrd)]
enum SortValue {
    Num(f64),
    Text(String),
    Instant(OffsetDateTime),
}

fn sort_value(v: &Value, field: &str) -> Option<SortValue> {
    let value = v.get(field)?;
    match field {
        "updated_at" => OffsetDateTime::parse(value.as_str()?, &Rfc3339)
            .ok()
            .map(SortValue::Instant),
        "make" | "model" | "stock" => {
            let s = value.as_str()?.trim();
            (!s.is_empty()).then(|| SortValue::Text(s.to_lowercase()))
        }
        _ => value.as_f64().map(SortValue::Num),
    }
}

fn present_first(a: Option<SortValue>, b: Option<SortValue>, descending: bool) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => {
            let o = a.partial_cmp(&b).expect("comparable");
            if descending { o.reverse() } else { o }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// docs/protocol.md §Sorting: missing values last in either order, strings case-insensitive, ties by `stock`
/// then `vin` ascending.
fn aap_order(a: &Value, b: &Value, field: &str, descending: bool) -> Ordering {
    present_first(sort_value(a, field), sort_value(b, field), descending)
        .then_with(|| present_first(sort_value(a, "stock"), sort_value(b, "stock"), false))
        .then_with(|| {
            let vin = |v: &Value| v["vin"].as_str().map(|s| SortValue::Text(s.to_owned()));
            present_first(vin(a), vin(b), false)
        })
}

fn assert_sorted(list: &[Value], field: &str, order: &str, context: &str) {
    let descending = order == "desc";
    for (i, pair) in list.windows(2).enumerate() {
        let o = aap_order(&pair[0], &pair[1], field, descending);
        assert_eq!(
            o,
            Ordering::Less,
            "{context}: sort {field} {order} broken at {i}/{}: {} then {}",
            i + 1,
            brief(&pair[0], field),
            brief(&pair[1], field)
        );
    }
}

fn brief(v: &Value, field: &str) -> String {
    format!(
        "{{stock: {}, vin: {}, {field}: {}}}",
        v["stock"], v["vin"], v[field]
    )
}

const SORTS: [&str; 9] = [
    "price",
    "list_price",
    "msrp",
    "mileage",
    "year",
    "make",
    "model",
    "stock",
    "updated_at",
];

// =============================================================================================
// Tests: inventory.search filters

/// Every returned vehicle satisfies `inventory::matches`, and the total and the returned set are
/// exactly what the oracle selects from the simulator's own inventory.
async fn filters_are_honoured(dealer: Dealer) {
    let (gw, _sims) = shared();
    let mut nonempty = 0;
    for filters in filter_table(dealer) {
        let context = format!("{dealer:?} {filters}");
        let want = expected(dealer, &filters);
        let (t, found) = match dealer {
            Dealer::Honda => search_all(gw, dealer, &filters, None).await,
            Dealer::Toyota => window(gw, dealer, &filters, None, 0, 30).await,
        };
        for v in &found {
            assert!(
                gateway_matches(&filters, v),
                "{context}: a returned vehicle does not match: {v}"
            );
        }
        let got = vins(&found);
        assert_eq!(got.len(), found.len(), "{context}: duplicates");
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(
            extra.is_empty(),
            "{context}: not selected by the simulator's data: {extra:?}"
        );
        assert_eq!(
            t,
            want.len(),
            "{context}: total differs from the simulator's own data"
        );
        if found.len() == t {
            assert_eq!(got, want, "{context}");
        }
        nonempty += usize::from(t > 0);
    }
    assert!(
        nonempty >= 20,
        "{dealer:?}: the table should mostly match something"
    );
}

#[test]
fn proxy_search_filters_are_honoured() {
    block_on(proxy_search_filters_are_honoured_body());
}

async fn proxy_search_filters_are_honoured_body() {
    filters_are_honoured(Dealer::Toyota).await;
}

#[test]
fn feed_search_filters_are_honoured() {
    block_on(feed_search_filters_are_honoured_body());
}

async fn feed_search_filters_are_honoured_body() {
    filters_are_honoured(Dealer::Honda).await;
}

#[test]
fn search_totals_agree_with_the_simulators_fixtures_and_a_direct_dms_call() {
    block_on(search_totals_agree_with_the_simulators_fixtures_and_a_direct_dms_call_body());
}

async fn search_totals_agree_with_the_simulators_fixtures_and_a_direct_dms_call_body() {
    let (gw, sims) = shared();
    let count = |dealer: Dealer, filters: Value| async move {
        window(gw, dealer, &filters, None, 0, 1).await.0
    };
    // Demo Toyota: the DMS fixtures and a direct DMS call.
    let fx = Dealer::Toyota.fixtures(sims);
    assert_eq!(
        count(Dealer::Toyota, json!({})).await,
        fx["searchable_total"]
    );
    for (make, n) in fx["counts_by_make"].as_object().expect("counts") {
        assert_eq!(
            &count(Dealer::Toyota, json!({ "make": [make] })).await,
            n,
            "make {make}"
        );
    }
    for (location, n) in fx["counts_by_location"].as_object().expect("counts") {
        let t = count(Dealer::Toyota, json!({ "rooftops": [location] })).await;
        assert_eq!(&t, n, "rooftop {location}");
    }
    for (legacy, aap) in [
        ("New", "new"),
        ("Pre-Owned", "used"),
        ("Certified Pre-Owned", "cpo"),
    ] {
        let t = count(Dealer::Toyota, json!({ "condition": [aap] })).await;
        assert_eq!(t, fx["counts_by_type"][legacy], "condition {aap}");
    }
    let direct: Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .get(format!(
            "{}/api/v2/vehicles?make=Toyota&type=Pre-Owned&maxPrice=30000&minYear=2018&pageSize=1",
            sims.dms.base_url()
        ))
        .header(aap_sim::dms::API_KEY_HEADER, aap_sim::dms::API_KEY)
        .send()
        .await
        .expect("DMS call")
        .json()
        .await
        .expect("DMS JSON");
    let t = count(
        Dealer::Toyota,
        json!({ "make": ["Toyota"], "condition": ["used"], "price_max": 30000, "year_min": 2018 }),
    )
    .await;
    assert_eq!(t, direct["TotalCount"]);

    // Demo Honda: the feed fixtures.
    let fx = Dealer::Honda.fixtures(sims);
    assert_eq!(count(Dealer::Honda, json!({})).await, fx["unsold_rows"]);
    for (model, n) in fx["counts_by_model"].as_object().expect("counts") {
        assert_eq!(
            &count(Dealer::Honda, json!({ "model": [model] })).await,
            n,
            "model {model}"
        );
    }
    for (legacy, aap) in [("Car", "car"), ("Motorcycle", "motorcycle")] {
        let t = count(Dealer::Honda, json!({ "vehicle_type": [aap] })).await;
        assert_eq!(t, fx["counts_by_vehicle_type"][legacy], "type {aap}");
    }
    for (legacy, aap) in [("New", "new"), ("Used", "used"), ("Certified", "cpo")] {
        let t = count(Dealer::Honda, json!({ "condition": [aap] })).await;
        assert_eq!(t, fx["counts_by_condition"][legacy], "condition {aap}");
    }
}

#[test]
fn unpriced_units_are_listed_but_never_match_a_price_filter() {
    block_on(unpriced_units_are_listed_but_never_match_a_price_filter_body());
}

async fn unpriced_units_are_listed_but_never_match_a_price_filter_body() {
    let (gw, sims) = shared();
    for dealer in DEALERS {
        let fx = dealer.fixtures(sims);
        let sold = fixture_vins(&fx, "sold_vins");
        let unpriced: Vec<String> = fixture_vins(&fx, "unpriced_vins")
            .into_iter()
            .filter(|vin| !sold.contains(vin))
            .collect();
        assert!(
            !unpriced.is_empty(),
            "{dealer:?}: fixtures have listable unpriced units"
        );
        for vin in &unpriced {
            let (t, found) = window(gw, dealer, &json!({ "vin": vin }), None, 0, 5).await;
            assert_eq!(t, 1, "{dealer:?}: unpriced {vin} is listed");
            assert!(found[0].get("price").is_none(), "{dealer:?}: {}", found[0]);
            for price in [
                json!({ "price_min": 0 }),
                json!({ "price_max": 100_000_000 }),
            ] {
                let mut filters = price;
                filters["vin"] = json!(vin);
                let (t, _) = window(gw, dealer, &filters, None, 0, 5).await;
                assert_eq!(t, 0, "{dealer:?} {filters}");
            }
        }
        let (all, _) = window(gw, dealer, &json!({}), None, 0, 1).await;
        let (priced, _) = window(gw, dealer, &json!({ "price_min": 0 }), None, 0, 1).await;
        assert_eq!(priced, all - unpriced.len(), "{dealer:?}");
    }
}

// =============================================================================================
// Tests: sorting and pagination

/// Checks the sort rule over the whole ordering (feed) or over its head and tail windows
/// (proxy), and that unpriced units close a price ordering in both directions.
async fn sorting_follows_the_aap_rule(dealer: Dealer) {
    let (gw, sims) = shared();
    let fx = dealer.fixtures(sims);
    let sold = fixture_vins(&fx, "sold_vins");
    let unpriced: BTreeSet<String> = fixture_vins(&fx, "unpriced_vins")
        .into_iter()
        .filter(|vin| !sold.contains(vin))
        .collect();
    let mut cases: Vec<(Value, &str, &str)> = Vec::new();
    for field in SORTS {
        for order in ["asc", "desc"] {
            cases.push((json!({}), field, order));
        }
    }
    for order in ["asc", "desc"] {
        cases.push((json!({ "condition": ["used", "cpo"] }), "price", order));
    }
    cases.push((
        json!({ "condition": ["new"], "body": ["suv", "cruiser"] }),
        "price",
        "asc",
    ));
    if dealer == Dealer::Toyota {
        // Sorts the DMS cannot do scan the whole inventory: one order each is enough there.
        cases.retain(|(_, field, order)| {
            !matches!((*field, *order), ("msrp", "desc") | ("list_price", "asc"))
        });
    }
    for (filters, field, order) in cases {
        let sort = json!({ "field": field, "order": order });
        let context = format!("{dealer:?} {filters}");
        let completed_in_gateway =
            matches!(field, "msrp" | "list_price") || filters.get("body").is_some();
        let windows: Vec<Vec<Value>> = match dealer {
            Dealer::Honda => vec![search_all(gw, dealer, &filters, Some(&sort)).await.1],
            Dealer::Toyota if completed_in_gateway => {
                vec![window(gw, dealer, &filters, Some(&sort), 0, 100).await.1]
            }
            Dealer::Toyota => {
                let (t, head) = window(gw, dealer, &filters, Some(&sort), 0, 25).await;
                let tail_skip = t.saturating_sub(16);
                let (_, tail) = window(gw, dealer, &filters, Some(&sort), tail_skip, 16).await;
                assert_eq!(tail.len(), t - tail_skip, "{context}: the tail window");
                vec![head, tail]
            }
        };
        for w in &windows {
            assert_sorted(w, field, order, &context);
        }
        if field == "price" && filters == json!({}) {
            // The last window ends the ordering: its unpriced units are exactly the listable
            // unpriced units, and nothing priced comes after the first of them.
            let last = windows.last().expect("a window");
            let first = last
                .iter()
                .position(|v| v.get("price").is_none())
                .unwrap_or_else(|| panic!("{context} {order}: no unpriced unit at the end"));
            let tail = &last[first..];
            assert!(
                tail.iter().all(|v| v.get("price").is_none()),
                "{context} {order}: a priced unit after an unpriced one"
            );
            assert_eq!(
                vins(tail),
                unpriced,
                "{context} {order}: the unpriced units close the list"
            );
        }
    }
}

#[test]
fn proxy_sorting_follows_the_aap_rule() {
    block_on(proxy_sorting_follows_the_aap_rule_body());
}

async fn proxy_sorting_follows_the_aap_rule_body() {
    sorting_follows_the_aap_rule(Dealer::Toyota).await;
}

#[test]
fn feed_sorting_follows_the_aap_rule() {
    block_on(feed_sorting_follows_the_aap_rule_body());
}

async fn feed_sorting_follows_the_aap_rule_body() {
    sorting_follows_the_aap_rule(Dealer::Honda).await;
}

/// Walking pages of 7 reproduces the first 49 of one limit-100 call; unaligned windows are
/// slices of it; windows past the end are empty with the full total.
async fn pages_are_slices_of_one_ordering(dealer: Dealer) {
    let (gw, _sims) = shared();
    let mut cases: Vec<(Value, Option<Value>)> = vec![(json!({}), None)];
    for (field, order) in [
        ("price", "asc"),
        ("price", "desc"),
        ("year", "desc"),
        ("mileage", "asc"),
        ("make", "asc"),
        ("updated_at", "desc"),
    ] {
        cases.push((json!({}), Some(json!({ "field": field, "order": order }))));
    }
    // Completed in the gateway for the proxy dealer (the DMS has no body filter).
    let completed = match dealer {
        Dealer::Toyota => {
            json!({ "make": ["Toyota"], "condition": ["used"], "body": ["sedan", "suv", "pickup truck"] })
        }
        Dealer::Honda => json!({ "body": ["suv", "sedan", "cruiser"] }),
    };
    cases.push((
        completed.clone(),
        Some(json!({ "field": "price", "order": "desc" })),
    ));
    if dealer == Dealer::Honda {
        cases.push((completed, Some(json!({ "field": "msrp", "order": "asc" }))));
    }
    const N: usize = 35;
    for (i, (filters, sort)) in cases.into_iter().enumerate() {
        let context = format!("{dealer:?} {filters} sort {sort:?}");
        let sort = sort.as_ref();
        let (t, big) = window(gw, dealer, &filters, sort, 0, 100).await;
        assert_eq!(big.len(), t.min(100), "{context}");
        let want = &big[..N.min(big.len())];
        let mut walked = Vec::new();
        for skip in (0..want.len()).step_by(7) {
            let (page_total, page) = window(gw, dealer, &filters, sort, skip, 7).await;
            assert_eq!(page_total, t, "{context}: total at skip {skip}");
            walked.extend(page);
        }
        walked.truncate(want.len());
        assert_eq!(
            keys(&walked),
            keys(want),
            "{context}: pages of 7 differ from one call"
        );
        assert_eq!(walked, want, "{context}: same units, different data");
        let windows: &[(usize, usize)] = if i < 2 || dealer == Dealer::Honda {
            &[(5, 10), (3, 1), (13, 29), (62, 38), (90, 10)]
        } else {
            &[(5, 10)]
        };
        for &(skip, limit) in windows {
            if skip >= big.len() {
                continue;
            }
            let (page_total, page) = window(gw, dealer, &filters, sort, skip, limit).await;
            assert_eq!(page_total, t, "{context}");
            let to = (skip + limit).min(big.len());
            assert_eq!(
                keys(&page),
                keys(&big[skip..to]),
                "{context}: skip {skip} limit {limit} is not the slice"
            );
        }
        let past_end: &[usize] = if i == 0 || dealer == Dealer::Honda {
            &[t, t + 50]
        } else {
            &[]
        };
        for &skip in past_end {
            let (page_total, page) = window(gw, dealer, &filters, sort, skip, 20).await;
            assert_eq!(page_total, t, "{context}: total past the end");
            assert!(page.is_empty(), "{context}: vehicles past the end");
        }
    }
}

#[test]
fn proxy_pages_are_slices_of_one_ordering() {
    block_on(proxy_pages_are_slices_of_one_ordering_body());
}

async fn proxy_pages_are_slices_of_one_ordering_body() {
    pages_are_slices_of_one_ordering(Dealer::Toyota).await;
}

#[test]
fn feed_pages_are_slices_of_one_ordering() {
    block_on(feed_pages_are_slices_of_one_ordering_body());
}

async fn feed_pages_are_slices_of_one_ordering_body() {
    pages_are_slices_of_one_ordering(Dealer::Honda).await;
}

#[test]
fn limit_defaults_to_20_is_clamped_to_100_and_skip_is_echoed() {
    block_on(limit_defaults_to_20_is_clamped_to_100_and_skip_is_echoed_body());
}

async fn limit_defaults_to_20_is_clamped_to_100_and_skip_is_echoed_body() {
    let (gw, _sims) = shared();
    for dealer in DEALERS {
        let completed =
            json!({ "condition": ["new", "used"], "body": ["sedan", "suv", "cruiser"] });
        for filters in [None, Some(completed)] {
            let context = format!("{dealer:?} {filters:?}");
            let with = |mut r: Value| {
                if let Some(f) = &filters {
                    r["filters"] = f.clone();
                }
                r
            };
            if filters.is_some() && dealer == Dealer::Toyota {
                // Completed in the gateway (a DMS scan per call): the clamp only.
                let request = with(json!({ "pagination": { "skip": 0, "limit": 1000 } }));
                let page = search(gw, dealer, request).await;
                assert_eq!(page["limit"], 100, "{context}");
                assert_eq!(vehicles(&page).len(), total(&page).min(100), "{context}");
                continue;
            }
            let page = search(gw, dealer, with(json!({}))).await;
            assert_eq!(page["skip"], 0, "{context}");
            assert_eq!(page["limit"], 20, "{context}");
            assert_eq!(vehicles(&page).len(), total(&page).min(20), "{context}");
            let page = search(gw, dealer, with(json!({ "pagination": { "skip": 13 } }))).await;
            assert_eq!(page["skip"], 13, "{context}");
            assert_eq!(page["limit"], 20, "{context}");
            assert_eq!(
                vehicles(&page).len(),
                total(&page).saturating_sub(13).min(20),
                "{context}"
            );
            let page = search(gw, dealer, with(json!({ "pagination": { "limit": 3 } }))).await;
            assert_eq!(page["skip"], 0, "{context}");
            assert_eq!(page["limit"], 3, "{context}");
            for limit in [101, 1000] {
                let request = with(json!({ "pagination": { "skip": 0, "limit": limit } }));
                let page = search(gw, dealer, request).await;
                assert_eq!(page["limit"], 100, "{context} limit {limit}");
                assert_eq!(
                    vehicles(&page).len(),
                    total(&page).min(100),
                    "{context} limit {limit}"
                );
                assert!(
                    total(&page) > 100,
                    "{context}: the clamp must be observable"
                );
            }
        }
    }
}

/// A `skip` at the very end of u64 is refused by the schema (`maximum`, docs/protocol.md
/// §Pagination and totals) rather than turned into a page number no dealer system can address
/// (or, unbounded, into an overflow: a panic in a debug build, a wrapped page in a release one).
/// The largest accepted skip is an empty page with the true total, in both modes and on both
/// the direct and the completed proxy path.
#[test]
fn a_skip_at_the_end_of_u64_is_an_empty_page() {
    block_on(a_skip_at_the_end_of_u64_is_an_empty_page_body());
}

async fn a_skip_at_the_end_of_u64_is_an_empty_page_body() {
    let (gw, _sims) = shared();
    let completed = json!({ "body": ["sedan", "suv", "cruiser"] });
    for dealer in DEALERS {
        for filters in [json!({}), completed.clone()] {
            let context = format!("{dealer:?} {filters}");
            let (all, _) = window(gw, dealer, &filters, None, 0, 1).await;
            for limit in [1, 100] {
                let request = json!({ "type": "inventory.search.request", "filters": filters,
                    "pagination": { "skip": 18_446_744_073_709_551_615_u64, "limit": limit } });
                let reply = gw.send(dealer.path(), request).await;
                assert_eq!(reply.error_code(), -32602, "{}", reply.text);
                assert_eq!(
                    reply.aap_code(),
                    "SCHEMA_VALIDATION_FAILED",
                    "{}",
                    reply.text
                );
                assert_eq!(
                    reply.failures(),
                    [("/pagination/skip".to_owned(), "maximum".to_owned())],
                    "{context}"
                );
                let (t, got) = window(gw, dealer, &filters, None, 1_000_000, limit).await;
                assert!(got.is_empty(), "{context}: {got:?}");
                assert_eq!(t, all, "{context}");
            }
        }
    }
}

// =============================================================================================
// Tests: facets

async fn facets_agree_with_search(dealer: Dealer) {
    let (gw, _sims) = shared();
    let table = match dealer {
        Dealer::Honda => filter_table(dealer),
        // Every derived facets call scans the DMS: a representative few.
        Dealer::Toyota => vec![
            json!({}),
            json!({ "condition": ["used", "cpo"] }),
            json!({ "rooftops": ["Demo Toyota Oakland"], "year_min": 2020 }),
            json!({ "price_min": 20000, "price_max": 30000 }),
            json!({ "model": ["RAV4", "Highlander"], "body": ["SUV"], "fuel": ["hybrid"] }),
            json!({ "make": ["Honda", "Ford"], "mileage_max": 80000 }),
            json!({ "year_min": 2030 }),
        ],
    };
    for filters in table {
        let context = format!("{dealer:?} {filters}");
        let (t, _) = window(gw, dealer, &filters, None, 0, 1).await;
        let f = facets(gw, dealer, &filters).await;
        let units: Vec<&Unit> = dealer
            .units()
            .iter()
            .filter(|u| oracle(&filters, u))
            .collect();
        assert_eq!(t, units.len(), "{context}: search total vs simulator data");
        let counts = |key: &str| -> BTreeMap<String, u64> {
            f.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| e["count"].as_u64() != Some(0))
                .map(|e| {
                    let value = match &e["value"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (value, e["count"].as_u64().expect("count"))
                })
                .collect()
        };
        let t64 = u64::try_from(t).expect("u64");
        for key in ["statuses", "conditions", "makes", "vehicle_types"] {
            assert_eq!(
                counts(key).values().sum::<u64>(),
                t64,
                "{context}: sum of {key}: {f}"
            );
        }
        let tally = |label: &dyn Fn(&Unit) -> String| -> BTreeMap<String, u64> {
            let mut out = BTreeMap::new();
            for u in &units {
                *out.entry(label(u)).or_default() += 1;
            }
            out
        };
        let status = |u: &Unit| {
            match u.status {
                Status::InStock => "available",
                Status::InTransit => "intransit",
                Status::PendingSale => "pending",
                Status::Sold => "sold",
            }
            .to_owned()
        };
        assert_eq!(counts("statuses"), tally(&status), "{context}: statuses");
        assert_eq!(
            counts("conditions"),
            tally(&|u: &Unit| condition(u.condition).to_owned()),
            "{context}: conditions"
        );
        // Range facets cover exactly the matching units that have the field.
        let range = |values: Vec<u32>| {
            let min = values.iter().min()?;
            let max = values.iter().max()?;
            Some((f64::from(*min), f64::from(*max)))
        };
        for (facet, want) in [
            (
                "price_range",
                range(units.iter().filter_map(|u| u.internet_price).collect()),
            ),
            (
                "year_range",
                range(units.iter().map(|u| u32::from(u.year)).collect()),
            ),
            (
                "mileage_range",
                range(units.iter().map(|u| u.odometer).collect()),
            ),
        ] {
            let got = f.get(facet).map(|r| {
                (
                    r["min"].as_f64().expect("min"),
                    r["max"].as_f64().expect("max"),
                )
            });
            assert_eq!(got, want, "{context}: {facet}");
        }
    }
}

#[test]
fn proxy_search_totals_equal_facet_counts() {
    block_on(proxy_search_totals_equal_facet_counts_body());
}

async fn proxy_search_totals_equal_facet_counts_body() {
    facets_agree_with_search(Dealer::Toyota).await;
}

#[test]
fn feed_search_totals_equal_facet_counts() {
    block_on(feed_search_totals_equal_facet_counts_body());
}

async fn feed_search_totals_equal_facet_counts_body() {
    facets_agree_with_search(Dealer::Honda).await;
}

// =============================================================================================
// Tests: inventory.vehicle

#[test]
fn listed_vehicles_resolve_by_vin_and_by_stock_with_the_same_data() {
    block_on(listed_vehicles_resolve_by_vin_and_by_stock_with_the_same_data_body());
}

async fn listed_vehicles_resolve_by_vin_and_by_stock_with_the_same_data_body() {
    let (gw, sims) = shared();
    for dealer in DEALERS {
        let fx = dealer.fixtures(sims);
        let (_, all) = search_all(gw, dealer, &json!({}), None).await;
        let statuses: BTreeSet<&str> = all.iter().filter_map(|v| v["status"].as_str()).collect();
        assert_eq!(
            statuses,
            BTreeSet::from(["available", "intransit", "pending"]),
            "{dealer:?}"
        );
        // A spread of units, plus every in-transit and pending one.
        let mut picked: Vec<&Value> = all.iter().step_by(20).collect();
        for key in ["in_transit_vins", "pending_vins"] {
            for vin in fixture_vins(&fx, key) {
                let listed = all
                    .iter()
                    .find(|v| v["vin"] == vin.as_str())
                    .unwrap_or_else(|| panic!("{dealer:?}: {key} {vin} is not listed"));
                picked.push(listed);
            }
        }
        for (i, listed) in picked.into_iter().enumerate() {
            let mut requests =
                vec![json!({ "type": "inventory.vehicle.request", "vin": listed["vin"] })];
            if i % 2 == 0 {
                requests
                    .push(json!({ "type": "inventory.vehicle.request", "stock": listed["stock"] }));
            }
            if i % 5 == 0 {
                requests.push(json!({ "type": "inventory.vehicle.request", "vin": listed["vin"], "stock": listed["stock"] }));
            }
            for request in requests {
                let reply = gw.send(dealer.path(), request.clone()).await;
                let data = ok(&reply, "inventory.vehicle.response");
                assert_eq!(data, listed, "{dealer:?} {request}");
            }
        }
    }
}

#[test]
fn unknown_identifiers_are_not_found_and_sold_units_are_unavailable() {
    block_on(unknown_identifiers_are_not_found_and_sold_units_are_unavailable_body());
}

async fn unknown_identifiers_are_not_found_and_sold_units_are_unavailable_body() {
    let (gw, sims) = shared();
    for dealer in DEALERS {
        let fx = dealer.fixtures(sims);
        let unknown = fx["unknown_vin"].as_str().expect("unknown_vin");
        for request in [
            json!({ "type": "inventory.vehicle.request", "vin": unknown }),
            json!({ "type": "inventory.vehicle.request", "stock": "ZZ99999" }),
            json!({ "type": "inventory.vehicle.request", "vehicle_id": "ZZ99999" }),
        ] {
            let reply = gw.send(dealer.path(), request.clone()).await;
            reply.assert_aap_error("VEHICLE_NOT_FOUND");
            assert_eq!(
                reply.aap_error()["retryable"],
                false,
                "{dealer:?} {request}"
            );
        }
        let sold = fixture_vins(&fx, "sold_vins");
        assert!(!sold.is_empty());
        for vin in &sold {
            let stock = dealer
                .units()
                .iter()
                .find(|u| u.vin == *vin)
                .map(|u| u.stock_number.clone())
                .expect("sold unit in the inventory");
            for request in [
                json!({ "type": "inventory.vehicle.request", "vin": vin }),
                json!({ "type": "inventory.vehicle.request", "stock": stock }),
            ] {
                let reply = gw.send(dealer.path(), request.clone()).await;
                reply.assert_aap_error("VEHICLE_UNAVAILABLE");
                assert_eq!(
                    reply.aap_error()["retryable"],
                    false,
                    "{dealer:?} {request}"
                );
            }
            // Never listed either.
            let (t, _) = window(gw, dealer, &json!({ "vin": vin }), None, 0, 1).await;
            assert_eq!(t, 0, "{dealer:?}: sold {vin} is listed");
        }
    }
}

// =============================================================================================
// Tests: dealer.information

#[test]
fn dealer_information_is_valid_and_names_every_listed_rooftop() {
    block_on(dealer_information_is_valid_and_names_every_listed_rooftop_body());
}

async fn dealer_information_is_valid_and_names_every_listed_rooftop_body() {
    let (gw, _sims) = shared();
    for dealer in DEALERS {
        let reply = gw
            .send(
                dealer.path(),
                json!({ "type": "dealer.information.request" }),
            )
            .await;
        let data = ok(&reply, "dealer.information.response").clone();
        assert_eq!(data["name"], dealer.name());
        let rooftops: BTreeSet<&str> = data["rooftops"]
            .as_array()
            .expect("rooftops")
            .iter()
            .map(|r| r["name"].as_str().expect("rooftop name"))
            .collect();
        assert!(!rooftops.is_empty());
        // Every `Vehicle.rooftop` and rooftop facet value names a rooftop of dealer.information.
        let listed: BTreeSet<String> = dealer
            .units()
            .iter()
            .map(|u| u.location.to_owned())
            .collect();
        let f = facets(gw, dealer, &json!({})).await;
        let faceted: BTreeSet<String> = f["rooftops"]
            .as_array()
            .expect("rooftops facet")
            .iter()
            .map(|r| r["value"].as_str().expect("rooftop value").to_owned())
            .collect();
        assert_eq!(faceted, listed, "{dealer:?}");
        for name in &faceted {
            assert!(
                rooftops.contains(name.as_str()),
                "{dealer:?}: rooftop {name} unknown to dealer.information"
            );
        }
        let (_, head) = window(gw, dealer, &json!({}), None, 0, 50).await;
        for v in &head {
            let r = v["rooftop"].as_str().expect("rooftop");
            assert!(rooftops.contains(r), "{dealer:?}: {r}");
        }
    }
}

// =============================================================================================
// Tests: both modes side by side

/// The same requests against both dealers obey the same rules: filter semantics (`matches`),
/// the sort rule, the simulator data, and facet/total agreement. (The inventories differ, so
/// the two are compared by rule, not by value.)
#[test]
fn both_modes_apply_the_same_semantics_to_the_same_request() {
    block_on(both_modes_apply_the_same_semantics_to_the_same_request_body());
}

async fn both_modes_apply_the_same_semantics_to_the_same_request_body() {
    let (gw, _sims) = shared();
    let requests = [
        json!({ "filters": { "condition": ["used", "cpo"], "price_max": 30000 }, "sort": { "field": "price", "order": "asc" } }),
        json!({ "filters": { "year_min": 2024, "mileage_max": 30000 }, "sort": { "field": "mileage", "order": "desc" } }),
        json!({ "filters": { "condition": ["new"], "fuel": ["hybrid", "bev"], "vehicle_type": ["car"] }, "sort": { "field": "updated_at", "order": "desc" } }),
    ];
    for request in requests {
        let filters = &request["filters"];
        let sort = &request["sort"];
        let field = sort["field"].as_str().expect("field");
        let order = sort["order"].as_str().expect("order");
        for dealer in DEALERS {
            let context = format!("{dealer:?} {request}");
            let (t, list) = match dealer {
                Dealer::Honda => search_all(gw, dealer, filters, Some(sort)).await,
                Dealer::Toyota => window(gw, dealer, filters, Some(sort), 0, 30).await,
            };
            assert_eq!(t, expected(dealer, filters).len(), "{context}");
            assert!(
                list.iter().all(|v| gateway_matches(filters, v)),
                "{context}"
            );
            assert_sorted(&list, field, order, &context);
            let f = facets(gw, dealer, filters).await;
            let statuses: u64 = f["statuses"]
                .as_array()
                .map_or(0, |a| a.iter().filter_map(|e| e["count"].as_u64()).sum());
            assert_eq!(statuses, u64::try_from(t).expect("u64"), "{context}");
        }
    }
}

/// A text filter value is one value: a comma inside it must not become an OR of two values at
/// the upstream. The proxy dealer's DMS splits its list parameters on commas and the mapping
/// joins the AAP list with `,`, so `make: ["Toyota,Honda"]` reaches the DMS as two makes. Feed
/// mode answers with AAP semantics (no listing's make is "Toyota,Honda"); proxy mode must agree.
#[test]
fn a_comma_inside_a_filter_value_is_not_a_list_separator() {
    block_on(a_comma_inside_a_filter_value_is_not_a_list_separator_body());
}

async fn a_comma_inside_a_filter_value_is_not_a_list_separator_body() {
    let (gw, _sims) = shared();
    let mut failures = Vec::new();
    for (dealer, filters) in [
        (Dealer::Toyota, json!({ "make": ["Toyota,Honda"] })),
        (Dealer::Toyota, json!({ "model": ["Camry,RAV4"] })),
        (
            Dealer::Toyota,
            json!({ "rooftops": ["Demo Toyota Oakland,Demo Toyota San Francisco"] }),
        ),
        (Dealer::Honda, json!({ "model": ["Civic,Accord"] })),
    ] {
        let (t, list) = window(gw, dealer, &filters, None, 0, 10).await;
        let wrong = list
            .iter()
            .filter(|v| !gateway_matches(&filters, v))
            .count();
        if t != 0 || wrong != 0 {
            failures.push(format!(
                "{dealer:?} {filters}: total {t}, {wrong} of the first {} returned do not match",
                list.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `filters.stock` is an exact match (`inventory/`: byte-exact; feed mode agrees). The proxy
/// dealer's DMS compares stock numbers case-insensitively, and the gateway passes its answer
/// through unchecked.
#[test]
fn stock_filter_is_exact_in_both_modes() {
    block_on(stock_filter_is_exact_in_both_modes_body());
}

async fn stock_filter_is_exact_in_both_modes_body() {
    let (gw, _sims) = shared();
    let mut outcomes = BTreeMap::new();
    for (dealer, stock) in [(Dealer::Toyota, "sfn10011"), (Dealer::Honda, "sjc10122")] {
        let filters = json!({ "stock": stock });
        let (t, list) = window(gw, dealer, &filters, None, 0, 10).await;
        let wrong = list
            .iter()
            .filter(|v| !gateway_matches(&filters, v))
            .count();
        outcomes.insert(format!("{dealer:?}"), (t, wrong));
    }
    assert_eq!(
        outcomes.get("Toyota"),
        outcomes.get("Honda"),
        "proxy and feed modes disagree on a lower-case stock filter (total, non-matching): \
         {outcomes:?}"
    );
}
