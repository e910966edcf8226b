//! The mapping engine against dealer systems that are not the demo's, with the quirks real ones
//! have. ProxyMapping from the docs alone (`tests/fixtures/mappings/lakeside/`, `…/riverside/`):
//!
//! - **Lakeside Auto**, a REST stock API: lists SOLD and ON_HOLD units in its pages and counts
//!   them in its total; takes one make and one body per call, matched exactly against its
//!   upper-case vocabulary; prices in cents, odometers in km, photos pipe-separated; sorts
//!   unpriced units first on ascending price; 1-based pages of at most 25. Its CRM de-duplicates
//!   on an external reference and answers a resent lead with 409 and the id it already has, and
//!   refuses a body that is not JSON.
//! - **Riverside Motors**, a SOAP 1.1 service: searches page in the request body
//!   (`<StartIndex>`/`<MaxRows>`, at most 10 rows); an unknown unit is a Client fault, which
//!   SOAP 1.1 sends with HTTP 500.
//!
//! Every answer is compared with an oracle written here from AAP's search rules
//! (docs/protocol.md §Search semantics) over the stand-ins' own data — not with what the engine
//! happens to do — for every `supports` declaration that is true of the upstream.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};

use common::Gateway;
use common::http_server::{Answer, HttpServer, Seen};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Value, json};

// =============================================================================================
// Lakeside's stock

#[derive(Debug, Clone)]
struct Unit {
    stock: String,
    vin: String,
    year: u32,
    /// Upper case, as Lakeside stores it.
    make: &'static str,
    model: &'static str,
    /// Upper case.
    body: &'static str,
    /// `NEW`, `USED`, `CPO`.
    cond: &'static str,
    /// `AVAILABLE`, `IN_TRANSIT`, `PENDING`, `SOLD`, `ON_HOLD`.
    status: &'static str,
    price_cents: Option<u64>,
    km: u64,
}

const LINEUP: [(&str, &str, &str); 11] = [
    ("TOYOTA", "RAV4", "SUV"),
    ("TOYOTA", "Camry", "SEDAN"),
    ("TOYOTA", "Tacoma", "PICKUP"),
    ("HONDA", "CR-V", "SUV"),
    ("HONDA", "Civic", "SEDAN"),
    ("HONDA", "Fit", "HATCHBACK"),
    ("FORD", "Escape", "SUV"),
    ("FORD", "F-150", "PICKUP"),
    ("FORD", "Focus", "HATCHBACK"),
    ("KIA", "Sorento", "SUV"),
    ("KIA", "Forte", "SEDAN"),
];

/// 130 units; about one in nine sold or held, one in twelve unpriced, many equal prices.
fn lakeside_units() -> Vec<Unit> {
    let mut x: u64 = 0x5eed_1a4e;
    (0..130u64)
        .map(|i| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = x >> 33;
            let (make, model, body) = LINEUP[(r % 11) as usize];
            let status = match i {
                _ if i % 11 == 3 => "SOLD",
                _ if i % 17 == 5 => "ON_HOLD",
                _ if i % 13 == 7 => "IN_TRANSIT",
                _ if i % 19 == 2 => "PENDING",
                _ => "AVAILABLE",
            };
            Unit {
                stock: format!("L{}", 1001 + i),
                vin: format!("LKS{i:014}"),
                year: 2015 + ((r >> 8) % 11) as u32,
                make,
                model,
                body,
                cond: ["NEW", "USED", "CPO"][((r >> 12) % 3) as usize],
                status,
                price_cents: (i % 12 != 0).then(|| (8_000 + ((r >> 16) % 60) * 500) * 100),
                km: (r >> 20) % 150_000,
            }
        })
        .collect()
}

impl Unit {
    fn listable(&self) -> bool {
        matches!(self.status, "AVAILABLE" | "IN_TRANSIT" | "PENDING")
    }

    fn price(&self) -> Option<u64> {
        self.price_cents.map(|c| c / 100)
    }

    fn condition(&self) -> &'static str {
        match self.cond {
            "NEW" => "new",
            "USED" => "used",
            _ => "cpo",
        }
    }

    /// The record as Lakeside's API sends it.
    fn record(&self) -> Value {
        json!({
            "vin": self.vin, "stock_no": self.stock, "model_year": self.year.to_string(),
            "make": self.make, "model": self.model, "body": self.body, "cond": self.cond,
            "status": self.status, "price_cents": self.price_cents, "odometer_km": self.km,
            "photos": format!("https://img.lakeside.example/{0}a.jpg|https://img.lakeside.example/{0}b.jpg", self.stock),
        })
    }
}

static UNITS: LazyLock<Vec<Unit>> = LazyLock::new(lakeside_units);

/// What Lakeside saw and holds: stock queries, and its CRM (external reference → lead id).
#[derive(Default)]
struct Crm {
    queries: Vec<Vec<(String, String)>>,
    leads: BTreeMap<String, String>,
    bodies: Vec<Value>,
}

fn lakeside(seen: Seen, crm: &Mutex<Crm>) -> Answer {
    let json =
        |status: u16, body: Value| (status, "application/json", body.to_string().into_bytes());
    let units = &*UNITS;
    if seen.path == "/v2/stock" {
        crm.lock().expect("crm").queries.push(seen.query.clone());
        let make = seen.param("make");
        let body = seen.param("body");
        let max = seen
            .param("max_price_cents")
            .map(|m| m.parse::<u64>().expect("cents"));
        let mut hits: Vec<&Unit> = units
            .iter()
            .filter(|u| make.is_none_or(|m| u.make == m)) // exact, one value
            .filter(|u| body.is_none_or(|b| u.body == b))
            .filter(|u| max.is_none_or(|m| u.price_cents.is_some_and(|p| p <= m)))
            .filter(|u| seen.param("status") != Some("FORSALE") || u.listable())
            .collect();
        match seen.param("sort") {
            // Unpriced first ascending (None < Some), last descending; ties by stock.
            Some("price") => hits.sort_by(|a, b| {
                a.price_cents
                    .cmp(&b.price_cents)
                    .then(a.stock.cmp(&b.stock))
            }),
            Some("-price") => hits.sort_by(|a, b| {
                b.price_cents
                    .cmp(&a.price_cents)
                    .then(a.stock.cmp(&b.stock))
            }),
            Some(other) => return json(400, json!({ "error": format!("bad sort {other}") })),
            None => {}
        }
        let page: usize = seen.param("page").map_or(1, |p| p.parse().expect("page"));
        let per_page: usize = seen
            .param("per_page")
            .map_or(25, |p| p.parse().expect("per_page"));
        let per_page = per_page.min(25);
        let records: Vec<Value> = hits
            .iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .map(|u| u.record())
            .collect();
        return json(200, json!({ "total_count": hits.len(), "units": records }));
    }
    if let Some(id) = seen.path.strip_prefix("/v2/stock/") {
        return match units.iter().find(|u| u.stock == id || u.vin == id) {
            Some(u) => json(200, u.record()),
            None => json(404, json!({ "error": "not found" })),
        };
    }
    if seen.path == "/v2/leads" {
        let Ok(lead) = serde_json::from_slice::<Value>(&seen.body) else {
            return json(400, json!({ "error": "body is not JSON" }));
        };
        let mut crm = crm.lock().expect("crm");
        crm.bodies.push(lead.clone());
        let Some(reference) = lead["external_ref"].as_str() else {
            return json(400, json!({ "error": "external_ref is required" }));
        };
        if let Some(id) = crm.leads.get(reference) {
            return json(409, json!({ "error": "duplicate", "lead_id": id }));
        }
        let id = format!("LK-{}", crm.leads.len() + 1);
        crm.leads.insert(reference.to_owned(), id.clone());
        return json(201, json!({ "lead_id": id }));
    }
    json(404, json!({ "error": "no route" }))
}

// =============================================================================================
// The oracle: AAP search over the same units

#[derive(Debug, Clone, Default)]
struct Search {
    makes: Vec<String>,
    bodies: Vec<String>,
    conditions: Vec<&'static str>,
    price_max: Option<u64>,
    /// `Some(descending)` sorts by price.
    price_sort: Option<bool>,
    skip: usize,
    limit: Option<usize>,
}

impl Search {
    fn request(&self) -> Value {
        let mut filters = serde_json::Map::new();
        if !self.makes.is_empty() {
            filters.insert("make".into(), json!(self.makes));
        }
        if !self.bodies.is_empty() {
            filters.insert("body".into(), json!(self.bodies));
        }
        if !self.conditions.is_empty() {
            filters.insert("condition".into(), json!(self.conditions));
        }
        if let Some(max) = self.price_max {
            filters.insert("price_max".into(), json!(max));
        }
        let mut request = json!({ "type": "inventory.search.request", "filters": filters,
            "pagination": { "skip": self.skip } });
        if let Some(limit) = self.limit {
            request["pagination"]["limit"] = json!(limit);
        }
        if let Some(descending) = self.price_sort {
            request["sort"] =
                json!({ "field": "price", "order": if descending { "desc" } else { "asc" } });
        }
        request
    }

    /// `(total, stock numbers of the page)` by AAP's rules.
    fn oracle(&self, units: &[Unit]) -> (usize, Vec<String>) {
        let same = |a: &str, b: &str| a.trim().eq_ignore_ascii_case(b.trim());
        let mut hits: Vec<&Unit> = units
            .iter()
            .filter(|u| u.listable())
            .filter(|u| self.makes.is_empty() || self.makes.iter().any(|m| same(m, u.make)))
            .filter(|u| self.bodies.is_empty() || self.bodies.iter().any(|b| same(b, u.body)))
            .filter(|u| self.conditions.is_empty() || self.conditions.contains(&u.condition()))
            .filter(|u| {
                self.price_max
                    .is_none_or(|m| u.price().is_some_and(|p| p <= m))
            })
            .collect();
        // Ties (and no sort): stock, then VIN, ascending.
        hits.sort_by(|a, b| {
            a.stock
                .to_lowercase()
                .cmp(&b.stock.to_lowercase())
                .then(a.vin.cmp(&b.vin))
        });
        if let Some(descending) = self.price_sort {
            // Stable: equal prices keep the tie order; unpriced last in both orders.
            hits.sort_by(|a, b| match (a.price(), b.price()) {
                (Some(x), Some(y)) if descending => y.cmp(&x),
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            });
        }
        let limit = self.limit.unwrap_or(20).clamp(1, 100);
        let page = hits
            .iter()
            .skip(self.skip)
            .take(limit)
            .map(|u| u.stock.clone())
            .collect();
        (hits.len(), page)
    }
}

// =============================================================================================
// Gateways on the fixture folders, and `supports` declarations that are all true of Lakeside

/// How the search mapping declares what Lakeside does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    /// As shipped: one value per make/body, price_max, price sort with unpriced low.
    Shipped,
    /// Nothing at all translated: every search completed in the gateway.
    Nothing,
    /// As shipped, plus `status=FORSALE`, which keeps sold and held units out: `listing:
    /// listable`, so translated searches use Lakeside's own pages and total.
    Listable,
}

const DECLARED: [Declared; 3] = [Declared::Shipped, Declared::Nothing, Declared::Listable];

impl Declared {
    /// The dealer id (and path prefix) of the gateway's dealer with this declaration.
    fn id(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    common::repo_path(&format!("tests/fixtures/mappings/{name}"))
}

/// A copy of the Lakeside folder with its search file declaring `declared`.
fn lakeside_folder(declared: Declared, to: &Path) {
    common::copy_dir(&fixture("lakeside"), to);
    let path = to.join("inventory.search.yaml");
    let text = std::fs::read_to_string(&path).expect("read");
    let text = match declared {
        Declared::Shipped => text,
        Declared::Nothing => {
            let start = text.find("  supports:").expect("supports");
            let end = text.find("response:").expect("response");
            format!(
                "{}  supports: {{ filters: [] }}\n{}",
                &text[..start],
                &text[end..]
            )
        }
        Declared::Listable => text
            .replace("    sort: \"{%", "    status: FORSALE\n    sort: \"{%")
            .replace("  supports:\n", "  supports:\n    listing: listable\n"),
    };
    std::fs::write(&path, text).expect("write");
}

/// A gateway on `dealers`, their `${var}` pointed at `url`.
async fn start(dealers: &[(&str, &Path)], var: &str, url: String) -> Gateway {
    let dir = tempfile::tempdir().expect("temp");
    let path = common::write_gateway_yaml(dir.path(), dealers);
    let vars = [(var.to_owned(), url)].into();
    common::start_file_with_vars(&path, Some(dir), vars).await
}

struct Lakeside {
    gw: Gateway,
    server: HttpServer,
    crm: Arc<Mutex<Crm>>,
    _folders: tempfile::TempDir,
}

async fn start_lakeside() -> Lakeside {
    let crm = Arc::new(Mutex::new(Crm::default()));
    let server = HttpServer::start({
        let crm = Arc::clone(&crm);
        move |seen| lakeside(seen, &crm)
    })
    .await;
    let folders = tempfile::tempdir().expect("temp");
    let mut dealers = Vec::new();
    for declared in DECLARED {
        let dir = folders.path().join(declared.id());
        lakeside_folder(declared, &dir);
        dealers.push((declared.id(), dir));
    }
    let refs: Vec<(&str, &Path)> = dealers
        .iter()
        .map(|(id, d)| (id.as_str(), d.as_path()))
        .collect();
    let gw = start(&refs, "LAKESIDE_URL", server.url()).await;
    Lakeside {
        gw,
        server,
        crm,
        _folders: folders,
    }
}

static LAKESIDE: LazyLock<Lakeside> = LazyLock::new(|| common::RUNTIME.block_on(start_lakeside()));

/// Runs a test body against Lakeside (started first, outside the runtime).
fn with_lakeside(body: impl std::future::Future<Output = ()>) {
    common::run_with(&LAKESIDE, body);
}

fn a2a(declared: Declared) -> String {
    format!("/dealers/{}/a2a", declared.id())
}

/// The non-zero `makes` facet of facets data: make → count.
fn make_counts(facets: &Value) -> BTreeMap<String, u64> {
    facets["makes"]
        .as_array()
        .expect("makes")
        .iter()
        .map(|f| {
            let make = f["value"].as_str().expect("value").to_owned();
            (make, f["count"].as_u64().expect("count"))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The reply data of a successful call, checked against the AAP schema.
fn data(reply: &common::Reply) -> Value {
    let payload = &reply.body["result"]["message"]["parts"][0]["data"];
    assert!(payload.is_object(), "not a success: {}", reply.text);
    common::schema::assert_reply_valid(payload);
    payload["data"].clone()
}

async fn search(declared: Declared, search: &Search) -> (usize, Vec<String>) {
    let reply = LAKESIDE.gw.send(&a2a(declared), search.request()).await;
    common::total_and_stocks(&data(&reply))
}

fn check_search(declared: Declared, s: &Search) -> Result<(), TestCaseError> {
    let got = common::run_with(&LAKESIDE, search(declared, s));
    let want = s.oracle(&UNITS);
    prop_assert_eq!(got, want, "{:?} {}", declared, s.request());
    Ok(())
}

// =============================================================================================
// Lakeside: searches, facets, detail

#[test]
fn unlisted_units_never_shift_pages_or_totals() {
    // The cases of the report: one condition, no filter, a deep skip, several makes.
    let cases = [
        Search {
            conditions: vec!["cpo"],
            limit: Some(100),
            ..Search::default()
        },
        Search::default(),
        Search {
            skip: 100,
            limit: Some(10),
            ..Search::default()
        },
        Search {
            makes: vec!["toyota".into(), "Honda".into()],
            limit: Some(50),
            ..Search::default()
        },
        Search {
            bodies: vec![" suv ".into()],
            price_sort: Some(false),
            skip: 3,
            limit: Some(7),
            ..Search::default()
        },
    ];
    for declared in DECLARED {
        for case in &cases {
            check_search(declared, case).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // The stock holds sold and held units; the answers above never count them.
    assert!(UNITS.iter().filter(|u| !u.listable()).count() >= 10);
}

fn any_search() -> impl Strategy<Value = Search> {
    let makes =
        proptest::sample::subsequence(vec!["TOYOTA", "honda", " Ford ", "kia", "Lexus"], 0..=2);
    let bodies = proptest::sample::subsequence(vec!["SUV", "sedan", "Pickup"], 0..=2);
    let conditions = proptest::sample::subsequence(vec!["new", "used", "cpo"], 0..=2);
    (
        makes,
        bodies,
        conditions,
        proptest::option::of(9_000u64..40_000),
        proptest::option::of(any::<bool>()),
        0usize..140,
        proptest::option::of(1usize..60),
    )
        .prop_map(
            |(makes, bodies, conditions, price_max, price_sort, skip, limit)| Search {
                makes: makes.into_iter().map(str::to_owned).collect(),
                bodies: bodies.into_iter().map(str::to_owned).collect(),
                conditions,
                price_max,
                price_sort,
                skip,
                limit,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// For any search, every true `supports` declaration gives the oracle's answer.
    #[test]
    fn any_search_is_exact_under_every_true_declaration(s in any_search()) {
        for declared in DECLARED {
            check_search(declared, &s)?;
        }
    }
}

#[test]
fn a_single_value_is_sent_and_several_are_completed_in_the_gateway() {
    with_lakeside(async {
        // Hatchbacks: no other test of this suite asks for them, so their calls are these.
        let one = Search {
            makes: vec!["kia".into()],
            bodies: vec!["hatchback".into()],
            ..Search::default()
        };
        let two = Search {
            makes: vec!["kia".into(), "ford".into()],
            bodies: vec!["Hatchback".into()],
            ..Search::default()
        };
        for s in [&one, &two] {
            let got = search(Declared::Listable, s).await;
            assert_eq!(got, s.oracle(&UNITS), "{}", s.request());
        }
        let crm = LAKESIDE.crm.lock().expect("crm");
        let hatchbacks: Vec<&Vec<(String, String)>> = crm
            .queries
            .iter()
            .filter(|q| q.iter().any(|(k, v)| k == "body" && v == "HATCHBACK"))
            .collect();
        let make =
            |q: &Vec<(String, String)>| q.iter().find(|(k, _)| k == "make").map(|(_, v)| v.clone());
        // One make: sent, upper-cased. Two: never joined; the gateway filters them.
        assert!(
            hatchbacks.iter().any(|q| make(q).as_deref() == Some("KIA")),
            "{hatchbacks:?}"
        );
        assert!(
            hatchbacks.iter().any(|q| make(q).is_none()),
            "{hatchbacks:?}"
        );
        assert!(
            hatchbacks
                .iter()
                .all(|q| make(q).is_none_or(|m| !m.contains(','))),
            "{hatchbacks:?}"
        );
    });
}

#[test]
fn derived_facets_count_listable_units_only() {
    with_lakeside(async {
        for declared in DECLARED {
            let reply = LAKESIDE
                .gw
                .send(&a2a(declared), json!({ "type": "inventory.facets.request", "filters": { "condition": ["used"] } }))
                .await;
            let facets = data(&reply);
            let mut want: BTreeMap<String, u64> = BTreeMap::new();
            for u in UNITS
                .iter()
                .filter(|u| u.listable() && u.condition() == "used")
            {
                *want.entry(u.make.to_lowercase()).or_default() += 1;
            }
            let got: BTreeMap<String, u64> = make_counts(&facets)
                .into_iter()
                .map(|(make, n)| (make.to_lowercase(), n))
                .collect();
            assert_eq!(got, want, "{declared:?}");
        }
    });
}

#[test]
fn detail_maps_units_and_refuses_sold_and_empty_identifiers() {
    with_lakeside(async {
        let path = a2a(Declared::Shipped);
        let unit = UNITS
            .iter()
            .find(|u| u.listable() && u.price_cents.is_some())
            .expect("unit");
        let reply = LAKESIDE
            .gw
            .send(
                &path,
                json!({ "type": "inventory.vehicle.request", "vin": unit.vin }),
            )
            .await;
        let v = data(&reply);
        assert_eq!(v["stock"], unit.stock);
        assert_eq!(
            v["make"].as_str().map(str::to_lowercase),
            Some(unit.make.to_lowercase())
        );
        assert_eq!(v["price"], json!(unit.price()));
        assert_eq!(
            v["mileage"],
            json!((unit.km as f64 / 1.609344).round() as u64)
        );
        assert_eq!(v["photos"].as_array().map(Vec::len), Some(2));

        let sold = UNITS.iter().find(|u| u.status == "SOLD").expect("sold");
        let reply = LAKESIDE
            .gw
            .send(
                &path,
                json!({ "type": "inventory.vehicle.request", "stock": sold.stock }),
            )
            .await;
        assert_eq!(reply.aap_code(), "VEHICLE_UNAVAILABLE", "{}", reply.text);

        // An empty stock number would render `/v2/stock/`, Lakeside's collection: never sent.
        let reply = LAKESIDE
            .gw
            .send(
                &path,
                json!({ "type": "inventory.vehicle.request", "stock": "" }),
            )
            .await;
        assert_eq!(reply.aap_code(), "VEHICLE_NOT_FOUND", "{}", reply.text);
    });
}

#[test]
fn a_scan_past_scan_limit_is_refused_not_answered_from_part_of_the_stock() {
    with_lakeside(async {
        let folders = tempfile::tempdir().expect("temp");
        let dir = folders.path().join("small");
        lakeside_folder(Declared::Shipped, &dir);
        let file = dir.join("inventory.search.yaml");
        let text = std::fs::read_to_string(&file).expect("read");
        std::fs::write(&file, format!("{text}scan_limit: 60\n")).expect("write");
        let gw = start(&[("small", &dir)], "LAKESIDE_URL", LAKESIDE.server.url()).await;
        // 130 records to scan: refused, and counted.
        let reply = gw
            .send("/dealers/small/a2a", Search::default().request())
            .await;
        assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
        let metrics = gw.metrics().await;
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("aap_gateway_mapping_events_total")
                    && l.contains("event=\"scan_limit_reached\"")),
            "{metrics}"
        );
        // One make narrows the scan below the limit: answered exactly.
        let s = Search {
            makes: vec!["kia".into()],
            limit: Some(100),
            ..Search::default()
        };
        let reply = gw.send("/dealers/small/a2a", s.request()).await;
        let d = data(&reply);
        assert_eq!(d["total"].as_u64(), Some(s.oracle(&UNITS).0 as u64));
    });
}

// =============================================================================================
// Lakeside: leads

fn lead(key: &str, email: &str, message: Option<&str>) -> Value {
    let mut lead = json!({
        "type": "lead.submit.request",
        "customer": { "first_name": "Ana", "last_name": "Ruiz", "email": email },
        "consent": { "granted_at": "2026-11-30T10:00:00Z", "allowed_channels": ["email"],
                     "consent_text": "I agree to share my contact info with Lakeside Auto.", "scope": ["lead_submission"] },
        "vehicle_of_interest": { "vin": UNITS.iter().find(|u| u.listable()).expect("unit").vin },
        "source_agent": { "name": "quirky-test" },
        "idempotency_key": key,
    });
    if let Some(m) = message {
        lead["message"] = json!(m);
    }
    lead
}

#[test]
fn absent_optional_fields_render_as_json_null_and_the_crm_accepts_the_lead() {
    with_lakeside(async {
        let reply = LAKESIDE
            .gw
            .send(
                &a2a(Declared::Shipped),
                lead("lk-null-1", "ana.null@example.com", None),
            )
            .await;
        let d = data(&reply);
        assert_eq!(d["status"], "received", "{}", reply.text);
        let crm = LAKESIDE.crm.lock().expect("crm");
        let body = crm
            .bodies
            .iter()
            .rev()
            .find(|b| b["email"] == "ana.null@example.com")
            .expect("body");
        assert_eq!(body["comments"], Value::Null);
        assert_eq!(body["phone"], Value::Null);
    });
}

#[test]
fn a_lead_resent_after_a_restart_is_received_with_the_crms_existing_id() {
    with_lakeside(async {
        let first = LAKESIDE
            .gw
            .send(
                &a2a(Declared::Shipped),
                lead("lk-restart-1", "ana@example.com", Some("Still there?")),
            )
            .await;
        let first = data(&first);
        assert_eq!(first["status"], "received");
        let id = first["lead_id"].as_str().expect("lead id").to_owned();
        // Another gateway on the same configuration: no idempotency memory of the first.
        let folders = tempfile::tempdir().expect("temp");
        let dir = folders.path().join("shipped");
        lakeside_folder(Declared::Shipped, &dir);
        let restarted = start(&[("shipped", &dir)], "LAKESIDE_URL", LAKESIDE.server.url()).await;
        let again = restarted
            .send(
                &a2a(Declared::Shipped),
                lead("lk-restart-1", "ana@example.com", Some("Still there?")),
            )
            .await;
        let again = data(&again);
        assert_eq!(again["status"], "received", "{again}");
        assert_eq!(again["lead_id"], id.as_str());
        let crm = LAKESIDE.crm.lock().expect("crm");
        assert_eq!(crm.leads.values().filter(|v| **v == id).count(), 1);
    });
}

// =============================================================================================
// Riverside: SOAP 1.1, paging in the body, faults for unknown units

#[derive(Debug, Clone)]
struct RiverUnit {
    stock: String,
    vin: String,
    make: &'static str,
    price: Option<u64>,
}

static RIVER: LazyLock<Vec<RiverUnit>> = LazyLock::new(|| {
    let makes = [
        "Buick",
        "GMC",
        "Chevrolet",
        "Cadillac",
        "Chevrolet",
        "Buick",
        "GMC",
        "Chevrolet",
        "Buick",
    ];
    (0..72u64)
        .map(|i| RiverUnit {
            stock: format!("R{:03}", i + 1),
            vin: format!("RVS{i:014}"),
            make: makes[(i % 9) as usize],
            price: (i % 10 != 4).then_some(18_000 + (i * 37 % 50) * 250),
        })
        .collect()
});

fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

fn riverside(seen: Seen, calls: &Mutex<Vec<String>>) -> Answer {
    let xml = String::from_utf8_lossy(&seen.body).into_owned();
    calls.lock().expect("calls").push(xml.clone());
    let envelope = |inner: String| {
        format!(
            "<?xml version=\"1.0\"?><soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>{inner}</soap:Body></soap:Envelope>"
        )
        .into_bytes()
    };
    let unit_xml = |u: &RiverUnit| {
        format!(
            "<Unit><Vin>{}</Vin><StockNo>{}</StockNo><Year>2021</Year><Make>{}</Make><Model>X</Model><Cond>U</Cond><Price>{}</Price></Unit>",
            u.vin,
            u.stock,
            u.make,
            u.price.map_or("Call".to_owned(), |p| format!("${p}")),
        )
    };
    let action = seen
        .headers
        .get("soapaction")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if action.contains("SearchInventory") {
        let make = element(&xml, "Make");
        let start: usize = element(&xml, "StartIndex")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let rows: usize = element(&xml, "MaxRows")
            .and_then(|s| s.parse().ok())
            .unwrap_or(10)
            .min(10);
        let hits: Vec<&RiverUnit> = RIVER
            .iter()
            .filter(|u| make.is_none_or(|m| u.make.eq_ignore_ascii_case(m)))
            .collect();
        let units: String = hits
            .iter()
            .skip(start)
            .take(rows)
            .map(|u| unit_xml(u))
            .collect();
        let inner = format!(
            "<SearchInventoryResponse xmlns=\"urn:riverside:inventory\"><Total>{}</Total><Units>{units}</Units></SearchInventoryResponse>",
            hits.len()
        );
        return (200, "text/xml; charset=utf-8", envelope(inner));
    }
    if action.contains("GetUnit") {
        let vin = element(&xml, "Vin").unwrap_or_default();
        return match RIVER.iter().find(|u| u.vin == vin) {
            Some(u) => (200, "text/xml", envelope(format!("<GetUnitResponse xmlns=\"urn:riverside:inventory\">{}</GetUnitResponse>", unit_xml(u)))),
            None => (
                500,
                "text/xml",
                envelope("<soap:Fault><faultcode>soap:Client</faultcode><faultstring>No such unit</faultstring></soap:Fault>".to_owned()),
            ),
        };
    }
    (500, "text/xml", envelope("<soap:Fault><faultcode>soap:Server</faultcode><faultstring>unknown action</faultstring></soap:Fault>".to_owned()))
}

struct Riverside {
    gw: Gateway,
    calls: Arc<Mutex<Vec<String>>>,
    _server: HttpServer,
}

static RIVERSIDE: LazyLock<Riverside> = LazyLock::new(|| {
    common::RUNTIME.block_on(async {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let server = HttpServer::start({
            let calls = Arc::clone(&calls);
            move |seen| riverside(seen, &calls)
        })
        .await;
        let riverside = fixture("riverside");
        let gw = start(&[("riverside", &riverside)], "RIVERSIDE_URL", server.url()).await;
        Riverside {
            gw,
            calls,
            _server: server,
        }
    })
});

const RIVER_A2A: &str = "/dealers/riverside/a2a";

/// Runs a test body against Riverside (started first, outside the runtime).
fn with_riverside(body: impl std::future::Future<Output = ()>) {
    common::run_with(&RIVERSIDE, body);
}

#[test]
fn soap_searches_page_in_the_body_and_are_exact() {
    with_riverside(async {
        for (makes, skip, limit) in [
            (vec![], 0, 20),
            (vec!["buick"], 5, 7),
            (vec!["GMC"], 0, 100),
            (vec!["buick", "gmc"], 3, 30),
            (vec![], 65, 10),
        ] {
            let request = json!({ "type": "inventory.search.request",
                "filters": { "make": makes }, "pagination": { "skip": skip, "limit": limit } });
            let reply = RIVERSIDE.gw.send(RIVER_A2A, request.clone()).await;
            let d = data(&reply);
            let hits: Vec<&RiverUnit> = RIVER
                .iter()
                .filter(|u| {
                    makes.is_empty() || makes.iter().any(|m| m.eq_ignore_ascii_case(u.make))
                })
                .collect();
            let want: Vec<&str> = hits
                .iter()
                .skip(skip)
                .take(limit)
                .map(|u| u.stock.as_str())
                .collect();
            let got: Vec<&str> = d["vehicles"]
                .as_array()
                .expect("vehicles")
                .iter()
                .map(|v| v["stock"].as_str().expect("stock"))
                .collect();
            assert_eq!(d["total"].as_u64(), Some(hits.len() as u64), "{request}");
            assert_eq!(got, want, "{request}");
        }
        // Every call carried its page in the body, never more than 10 rows.
        let calls = RIVERSIDE.calls.lock().expect("calls");
        assert!(
            calls
                .iter()
                .filter(|c| c.contains("SearchInventory"))
                .all(|c| {
                    element(c, "MaxRows")
                        .and_then(|r| r.parse::<u32>().ok())
                        .is_some_and(|r| r <= 10)
                        && element(c, "StartIndex").is_some()
                })
        );
    });
}

#[test]
fn soap_derived_facets_count_every_unit() {
    with_riverside(async {
        let reply = RIVERSIDE.gw.send(RIVER_A2A, json!({ "type": "inventory.facets.request", "filters": { "make": ["Buick", "gmc"] } })).await;
        let d = data(&reply);
        let count = |make: &str| RIVER.iter().filter(|u| u.make == make).count() as u64;
        let makes = make_counts(&d);
        assert_eq!(
            makes,
            BTreeMap::from([
                ("Buick".to_owned(), count("Buick")),
                ("GMC".to_owned(), count("GMC"))
            ])
        );
    });
}

#[test]
fn unknown_units_answer_not_found_without_opening_the_breaker() {
    with_riverside(async {
        // Five failures open Riverside's breaker; a fault the mapping handles is not one.
        for i in 0..8 {
            let reply = RIVERSIDE.gw.send(RIVER_A2A, json!({ "type": "inventory.vehicle.request", "vin": format!("1HGCM82633A{i:06}") })).await;
            assert_eq!(reply.aap_code(), "VEHICLE_NOT_FOUND", "{}", reply.text);
        }
        let known = &RIVER[3];
        let reply = RIVERSIDE
            .gw
            .send(
                RIVER_A2A,
                json!({ "type": "inventory.vehicle.request", "vin": known.vin }),
            )
            .await;
        assert_eq!(data(&reply)["stock"], known.stock.as_str());
        let gw = &RIVERSIDE.gw;
        let metrics = gw.metrics().await;
        assert!(
            !metrics
                .lines()
                .any(|l| l.starts_with("aap_gateway_upstream_errors_total")
                    && l.contains("dealer=\"riverside\"")),
            "handled faults counted as upstream errors:\n{metrics}"
        );
    });
}

#[test]
fn soap_paging_in_the_query_is_refused_at_load() {
    let folders = tempfile::tempdir().expect("temp");
    let dir = folders.path().join("riverside");
    common::copy_dir(&fixture("riverside"), &dir);
    let file = dir.join("inventory.search.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    std::fs::write(
        &file,
        text.replace(
            "pagination: { style: offset, max_size: 10 }",
            "pagination: { style: offset, offset: start, limit: rows, max_size: 10 }",
        ),
    )
    .expect("write");
    let path = common::write_gateway_yaml(folders.path(), &[("riverside", &dir)]);
    let (code, text) = common::run_cli(
        &["check"],
        &path,
        &[("RIVERSIDE_URL", "http://127.0.0.1:9")],
    );
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("inventory.search.yaml:")
            && text.contains("a SOAP service reads the envelope"),
        "{text}"
    );
}
