//! The legacy REST DMS simulator: the Toyota group's inventory ([`inventory::toyota_group`])
//! behind the kind of JSON API dealer management systems expose — PascalCase records, strings
//! for everything, page-based paging, an API key header.
//!
//! It is what `aap-gateway demo` and the tests put behind the `inventory.search` and
//! `inventory.vehicle` mappings in proxy mode (the gateway translates every call into one of
//! these). The record shape is documented in [`inventory`]; the `/_sim/` controls in [`sim`].
//!
//! Every `/api/` call needs `X-Api-Key: demo-dms-key`, else 401
//! `{"ErrorCode": "UNAUTHORIZED", "Message": "Missing or invalid API key"}`.
//!
//! ## `GET /api/v2/vehicles` — search
//!
//! Answers `{"TotalCount": N, "Page": p, "PageSize": s, "Items": [record, …]}` (200,
//! `application/json`). Query parameters (names case-insensitive; empty values ignored; a
//! repeated parameter counts as one comma-separated list; unknown ones ignored):
//!
//! | Parameter | Meaning |
//! |---|---|
//! | `make`, `model`, `trim`, `location`, `vin`, `stock` | comma-separated lists, exact match, case-insensitive, OR within a list |
//! | `type` | list of `New`, `Pre-Owned`, `Certified Pre-Owned` (case-insensitive; anything else → 400) |
//! | `status` | list of `In Stock`, `In Transit`, `Pending Sale`, `Sold`, or `all`; default: everything except `Sold` |
//! | `minYear`, `maxYear` | inclusive bounds on `ModelYear` |
//! | `minPrice`, `maxPrice` | inclusive bounds on `InternetPrice`; unpriced ("Call for price") units never match either |
//! | `maxMiles` | inclusive upper bound on `Odometer` |
//! | `q` | free text: every whitespace-separated word must occur in "Make Model Trim" (case-insensitive) |
//! | `sortBy` | `price` (InternetPrice), `year`, `mileage`, `make`, `model`, `stock`, `updated` (LastUpdated); default `stock` |
//! | `sortDir` | `asc` (default) or `desc`. Unpriced units sort last in both directions; strings compare case-insensitively; ties break by stock number then VIN |
//! | `page` | 1-based, default 1; past the end → empty `Items` (TotalCount unchanged) |
//! | `pageSize` | default 25; above 100 is clamped to 100 (and `PageSize` says so) |
//!
//! Numbers may be written `2020`, `2020.0`, or for prices `$24,990`. A malformed number, a
//! `page`/`pageSize` below 1, or an unknown `type`/`status`/`sortBy`/`sortDir` → 400
//! `{"ErrorCode": "INVALID_PARAMETER", "Message": "…"}`.
//!
//! ## `GET /api/v2/vehicles/{VIN}` and `GET /api/v2/vehicles/by-stock/{StockNumber}`
//!
//! 200 with the bare record — Sold units included: the DMS still knows them — or 404
//! `{"ErrorCode": "NOT_FOUND", "Message": "Vehicle not found"}`. Case-insensitive.
//!
//! Other paths → 404 `{"ErrorCode": "NOT_FOUND", "Message": "Resource not found"}`; other
//! methods on these paths → 405 `{"ErrorCode": "METHOD_NOT_ALLOWED", …}`.
//!
//! Misbehaviour: `fail` → 500 `{"ErrorCode": "INTERNAL_ERROR", "Message": "ORA-00060: …"}`;
//! `garbage` → 200 `application/json` that is truncated and not UTF-8; `huge` → 200, a valid
//! search reply of about 8 MiB (records repeated).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::inventory::{self, Condition, Status, Vehicle};
use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse};

/// The header carrying the API key.
pub const API_KEY_HEADER: &str = "X-Api-Key";
/// The only API key the DMS accepts.
pub const API_KEY: &str = "demo-dms-key";
/// The search path.
pub const SEARCH_PATH: &str = "/api/v2/vehicles";
/// `pageSize` when none is given.
pub const DEFAULT_PAGE_SIZE: usize = 25;
/// Larger `pageSize` values are clamped to this.
pub const MAX_PAGE_SIZE: usize = 100;

/// Binds `127.0.0.1:0` and serves the DMS over the Toyota group's inventory.
pub async fn start_dms() -> std::io::Result<SimHandle> {
    sim::start(Arc::new(Dms::new(inventory::toyota_group()))).await
}

/// The DMS over any inventory.
pub struct Dms {
    vehicles: Vec<Vehicle>,
    unknown_vin: String,
    huge: OnceLock<Bytes>,
}

impl std::fmt::Debug for Dms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dms")
            .field("vehicles", &self.vehicles.len())
            .finish_non_exhaustive()
    }
}

impl Dms {
    pub fn new(vehicles: Vec<Vehicle>) -> Dms {
        let unknown_vin = inventory::unknown_vin(&vehicles);
        Dms {
            vehicles,
            unknown_vin,
            huge: OnceLock::new(),
        }
    }

    pub fn vehicles(&self) -> &[Vehicle] {
        &self.vehicles
    }

    fn search(&self, req: &SimRequest) -> SimResponse {
        let search = match Search::parse(req) {
            Ok(search) => search,
            Err(message) => {
                return error(StatusCode::BAD_REQUEST, "INVALID_PARAMETER", &message);
            }
        };
        let mut matches: Vec<&Vehicle> =
            self.vehicles.iter().filter(|v| search.matches(v)).collect();
        matches.sort_by(|a, b| search.compare(a, b));
        let items: Vec<Value> = matches
            .iter()
            .skip((search.page - 1).saturating_mul(search.page_size))
            .take(search.page_size)
            .map(|v| v.legacy_json())
            .collect();
        sim::json_response(
            StatusCode::OK,
            &json!({
                "TotalCount": matches.len(),
                "Page": search.page,
                "PageSize": search.page_size,
                "Items": items,
            }),
        )
    }

    fn one(&self, found: Option<&Vehicle>) -> SimResponse {
        match found {
            Some(v) => sim::json_response(StatusCode::OK, &v.legacy_json()),
            None => error(StatusCode::NOT_FOUND, "NOT_FOUND", "Vehicle not found"),
        }
    }

    fn huge_body(&self) -> Bytes {
        self.huge
            .get_or_init(|| {
                let records: Vec<String> = self
                    .vehicles
                    .iter()
                    .map(|v| v.legacy_json().to_string())
                    .collect();
                let mut items = String::with_capacity(sim::HUGE_BYTES + 64 * 1024);
                let mut count = 0usize;
                for record in records.iter().cycle() {
                    if items.len() >= sim::HUGE_BYTES || records.is_empty() {
                        break;
                    }
                    if count > 0 {
                        items.push(',');
                    }
                    items.push_str(record);
                    count += 1;
                }
                Bytes::from(format!(
                    "{{\"TotalCount\":{count},\"Page\":1,\"PageSize\":{count},\"Items\":[{items}]}}"
                ))
            })
            .clone()
    }
}

impl SimApp for Dms {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        let segments = req.segments();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let ["api", "v2", "vehicles", rest @ ..] = segments.as_slice() else {
            return error(StatusCode::NOT_FOUND, "NOT_FOUND", "Resource not found");
        };
        if req.header(API_KEY_HEADER) != Some(API_KEY) {
            return error(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "Missing or invalid API key",
            );
        }
        let known = matches!(rest, [] | [_] | ["by-stock", _]);
        if !known {
            return error(StatusCode::NOT_FOUND, "NOT_FOUND", "Resource not found");
        }
        if req.method != Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "Only GET is supported",
            );
        }
        match rest {
            ["by-stock", stock] => self.one(
                self.vehicles
                    .iter()
                    .find(|v| v.stock_number.eq_ignore_ascii_case(stock)),
            ),
            [vin] => self.one(
                self.vehicles
                    .iter()
                    .find(|v| v.vin.eq_ignore_ascii_case(vin)),
            ),
            _ => self.search(req),
        }
    }

    fn fixtures(&self) -> Value {
        let vins = |pred: &dyn Fn(&Vehicle) -> bool| -> Vec<&str> {
            self.vehicles
                .iter()
                .filter(|v| pred(v))
                .map(|v| v.vin.as_str())
                .collect()
        };
        let mut by_make: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_make_all: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_location: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &self.vehicles {
            *by_make_all.entry(v.make).or_default() += 1;
            if v.status != Status::Sold {
                *by_make.entry(v.make).or_default() += 1;
                *by_type.entry(v.condition.legacy()).or_default() += 1;
                *by_location.entry(v.location).or_default() += 1;
            }
        }
        let sample = self
            .vehicles
            .iter()
            .find(|v| v.status == Status::InStock && v.internet_price.is_some())
            .map(|v| json!({ "vin": v.vin, "stock": v.stock_number }));
        json!({
            "system": "rest-dms",
            "api_key_header": API_KEY_HEADER,
            "api_key": API_KEY,
            "search_path": SEARCH_PATH,
            "total": self.vehicles.len(),
            "searchable_total": self.vehicles.iter().filter(|v| v.status != Status::Sold).count(),
            "sold_vins": vins(&|v| v.status == Status::Sold),
            "in_transit_vins": vins(&|v| v.status == Status::InTransit),
            "pending_vins": vins(&|v| v.status == Status::PendingSale),
            "unpriced_vins": vins(&|v| v.internet_price.is_none()),
            "ev_vins": vins(&|v| v.fuel_type == "Electric"),
            "unknown_vin": self.unknown_vin,
            "unknown_stock": "ZZ99999",
            "in_stock_sample": sample,
            "counts_by_make": by_make,
            "counts_by_make_all": by_make_all,
            "counts_by_type": by_type,
            "counts_by_location": by_location,
        })
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "ORA-00060: deadlock detected while waiting for resource",
        )
    }

    fn garbage(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            "application/json; charset=utf-8",
            Bytes::from_static(
                b"{\"TotalCount\": 234, \"Items\": [{\"VIN\": \"\xff\xfe\x00\x1b<html>",
            ),
        )
    }

    fn huge(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            "application/json; charset=utf-8",
            self.huge_body(),
        )
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> SimResponse {
    sim::json_response(status, &json!({ "ErrorCode": code, "Message": message }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortKey {
    Price,
    Year,
    Mileage,
    Make,
    Model,
    Stock,
    Updated,
}

/// A parsed search.
#[derive(Debug)]
struct Search {
    makes: Option<Vec<String>>,
    models: Option<Vec<String>>,
    trims: Option<Vec<String>>,
    locations: Option<Vec<String>>,
    vins: Option<Vec<String>>,
    stocks: Option<Vec<String>>,
    types: Option<Vec<Condition>>,
    statuses: Vec<Status>,
    min_year: Option<f64>,
    max_year: Option<f64>,
    min_price: Option<f64>,
    max_price: Option<f64>,
    max_miles: Option<f64>,
    words: Vec<String>,
    sort: SortKey,
    desc: bool,
    page: usize,
    page_size: usize,
}

impl Search {
    fn parse(req: &SimRequest) -> Result<Search, String> {
        let list = |name: &str| {
            req.param(name).map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            })
        };
        let number = |name: &str| -> Result<Option<f64>, String> {
            req.param(name)
                .map(|v| parse_number(&v).ok_or(format!("Invalid value for {name}: {v}")))
                .transpose()
        };
        let types = list("type")
            .map(|values| {
                values
                    .iter()
                    .map(|t| {
                        [Condition::New, Condition::PreOwned, Condition::Certified]
                            .into_iter()
                            .find(|c| c.legacy().eq_ignore_ascii_case(t))
                            .ok_or(format!("Invalid value for type: {t}"))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let statuses = match list("status") {
            None => vec![Status::InStock, Status::InTransit, Status::PendingSale],
            Some(values) if values.iter().any(|s| s == "all") => Status::ALL.to_vec(),
            Some(values) => values
                .iter()
                .map(|s| {
                    Status::ALL
                        .into_iter()
                        .find(|st| st.legacy().eq_ignore_ascii_case(s))
                        .ok_or(format!("Invalid value for status: {s}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let sort = match req.param("sortBy").map(|s| s.to_lowercase()).as_deref() {
            None | Some("stock") => SortKey::Stock,
            Some("price") => SortKey::Price,
            Some("year") => SortKey::Year,
            Some("mileage") => SortKey::Mileage,
            Some("make") => SortKey::Make,
            Some("model") => SortKey::Model,
            Some("updated") => SortKey::Updated,
            Some(other) => return Err(format!("Invalid value for sortBy: {other}")),
        };
        let desc = match req.param("sortDir").map(|s| s.to_lowercase()).as_deref() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(other) => return Err(format!("Invalid value for sortDir: {other}")),
        };
        let page = count(number("page")?, 1, "page")?;
        let page_size = count(number("pageSize")?, DEFAULT_PAGE_SIZE, "pageSize")?;
        Ok(Search {
            makes: list("make"),
            models: list("model"),
            trims: list("trim"),
            locations: list("location"),
            vins: list("vin"),
            stocks: list("stock"),
            types,
            statuses,
            min_year: number("minYear")?,
            max_year: number("maxYear")?,
            min_price: number("minPrice")?,
            max_price: number("maxPrice")?,
            max_miles: number("maxMiles")?,
            words: req
                .param("q")
                .map(|q| q.split_whitespace().map(str::to_lowercase).collect())
                .unwrap_or_default(),
            sort,
            desc,
            page,
            page_size: page_size.min(MAX_PAGE_SIZE),
        })
    }

    fn matches(&self, v: &Vehicle) -> bool {
        let listed = |list: &Option<Vec<String>>, value: &str| {
            list.as_ref()
                .is_none_or(|l| l.iter().any(|x| x.eq_ignore_ascii_case(value)))
        };
        let price = v.internet_price.map(f64::from);
        let year = f64::from(v.year);
        let text = format!("{} {} {}", v.make, v.model, v.trim).to_lowercase();
        listed(&self.makes, v.make)
            && listed(&self.models, v.model)
            && listed(&self.trims, v.trim)
            && listed(&self.locations, v.location)
            && listed(&self.vins, &v.vin)
            && listed(&self.stocks, &v.stock_number)
            && self.types.as_ref().is_none_or(|t| t.contains(&v.condition))
            && self.statuses.contains(&v.status)
            && self.min_year.is_none_or(|m| year >= m)
            && self.max_year.is_none_or(|m| year <= m)
            && self.min_price.is_none_or(|m| price.is_some_and(|p| p >= m))
            && self.max_price.is_none_or(|m| price.is_some_and(|p| p <= m))
            && self.max_miles.is_none_or(|m| f64::from(v.odometer) <= m)
            && self.words.iter().all(|w| text.contains(w.as_str()))
    }

    fn compare(&self, a: &Vehicle, b: &Vehicle) -> Ordering {
        let dir = |o: Ordering| if self.desc { o.reverse() } else { o };
        let primary = match self.sort {
            SortKey::Price => match (a.internet_price, b.internet_price) {
                (Some(x), Some(y)) => dir(x.cmp(&y)),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
            SortKey::Year => dir(a.year.cmp(&b.year)),
            SortKey::Mileage => dir(a.odometer.cmp(&b.odometer)),
            SortKey::Make => dir(a.make.to_lowercase().cmp(&b.make.to_lowercase())),
            SortKey::Model => dir(a.model.to_lowercase().cmp(&b.model.to_lowercase())),
            SortKey::Stock => dir(a
                .stock_number
                .to_lowercase()
                .cmp(&b.stock_number.to_lowercase())),
            SortKey::Updated => dir(a.last_updated.cmp(&b.last_updated)),
        };
        primary
            .then_with(|| a.stock_number.cmp(&b.stock_number))
            .then_with(|| a.vin.cmp(&b.vin))
    }
}

/// `2020`, `2020.0`, `24990.50`, `$24,990` → a number.
fn parse_number(s: &str) -> Option<f64> {
    let cleaned: String = s
        .trim()
        .chars()
        .filter(|c| !matches!(c, '$' | ','))
        .collect();
    cleaned.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A whole number ≥ 1 for paging, or the default when absent.
fn count(n: Option<f64>, default: usize, name: &str) -> Result<usize, String> {
    match n {
        None => Ok(default),
        Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= 1e9 => Ok(n as usize),
        Some(n) => Err(format!("Invalid value for {name}: {n}")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::sim::Mode;

    struct Client {
        sim: SimHandle,
        http: reqwest::Client,
    }

    impl Client {
        async fn start() -> Client {
            Client {
                sim: start_dms().await.expect("start"),
                http: reqwest::Client::new(),
            }
        }

        async fn get(&self, path_and_query: &str) -> (u16, Value) {
            let r = self
                .http
                .get(format!("{}{path_and_query}", self.sim.base_url()))
                .header(API_KEY_HEADER, API_KEY)
                .send()
                .await
                .expect("send");
            let status = r.status().as_u16();
            (status, r.json().await.expect("json"))
        }

        async fn search(&self, query: &str) -> Value {
            let (status, body) = self.get(&format!("{SEARCH_PATH}?{query}")).await;
            assert_eq!(status, 200, "{query}: {body}");
            body
        }

        /// Every match of `query`, across all pages.
        async fn all(&self, query: &str) -> Vec<Value> {
            let mut out = Vec::new();
            for page in 1.. {
                let body = self
                    .search(&format!("{query}&pageSize=100&page={page}"))
                    .await;
                let items = body["Items"].as_array().expect("items").clone();
                if items.is_empty() {
                    assert_eq!(body["TotalCount"].as_u64(), Some(out.len() as u64));
                    break;
                }
                out.extend(items);
            }
            out
        }
    }

    fn expected(pred: impl Fn(&Vehicle) -> bool) -> usize {
        inventory::toyota_group()
            .iter()
            .filter(|v| v.status != Status::Sold && pred(v))
            .count()
    }

    fn dollars(v: &Value) -> Option<u32> {
        v.as_str()?
            .trim_start_matches('$')
            .replace(',', "")
            .parse()
            .ok()
    }

    #[tokio::test]
    async fn api_key_required() {
        let c = Client::start().await;
        let base = c.sim.base_url();
        for key in [None, Some("wrong")] {
            let mut req = c.http.get(format!("{base}{SEARCH_PATH}"));
            if let Some(key) = key {
                req = req.header(API_KEY_HEADER, key);
            }
            let r = req.send().await.expect("send");
            assert_eq!(r.status(), 401);
            let body: Value = r.json().await.expect("json");
            assert_eq!(body["ErrorCode"], "UNAUTHORIZED");
        }
        let r = c
            .http
            .get(format!("{base}/_sim/fixtures"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
    }

    #[tokio::test]
    async fn default_search_pages_through_everything_but_sold() {
        let c = Client::start().await;
        let first = c.search("").await;
        let unsold = expected(|_| true);
        assert_eq!(first["TotalCount"], unsold);
        assert_eq!(first["Page"], 1);
        assert_eq!(first["PageSize"], DEFAULT_PAGE_SIZE);
        assert_eq!(first["Items"].as_array().expect("items").len(), 25);

        let all = c.all("").await;
        assert_eq!(all.len(), unsold);
        let vins: HashSet<&str> = all.iter().filter_map(|v| v["VIN"].as_str()).collect();
        assert_eq!(vins.len(), unsold, "no duplicates across pages");
        assert!(all.iter().all(|v| v["Status"] != "Sold"));
        let stocks: Vec<&str> = all
            .iter()
            .filter_map(|v| v["StockNumber"].as_str())
            .collect();
        assert!(
            stocks.windows(2).all(|w| w[0] < w[1]),
            "default sort: stock"
        );

        let past = c.search("page=99").await;
        assert_eq!(past["TotalCount"], unsold);
        assert_eq!(past["Items"], json!([]));
        assert_eq!(c.search("pageSize=500").await["PageSize"], 100);
        assert_eq!(
            c.search("pageSize=10.0&page=2").await["Items"]
                .as_array()
                .expect("items")
                .len(),
            10
        );
        for bad in [
            "page=0",
            "page=abc",
            "pageSize=0",
            "pageSize=2.5",
            "minYear=soon",
            "sortBy=color",
            "sortDir=up",
            "type=Used",
            "status=Available",
        ] {
            let (status, body) = c.get(&format!("{SEARCH_PATH}?{bad}")).await;
            assert_eq!(status, 400, "{bad}");
            assert_eq!(body["ErrorCode"], "INVALID_PARAMETER");
        }
    }

    #[tokio::test]
    async fn filters() {
        let c = Client::start().await;
        type Pred = Box<dyn Fn(&Vehicle) -> bool>;
        let cases: Vec<(&str, Pred)> = vec![
            (
                "make=toyota,HONDA",
                Box::new(|v| v.make == "Toyota" || v.make == "Honda"),
            ),
            (
                "make=Ford&make=Subaru",
                Box::new(|v| v.make == "Ford" || v.make == "Subaru"),
            ),
            (
                "model=RAV4&trim=xle",
                Box::new(|v| v.model == "RAV4" && v.trim == "XLE"),
            ),
            (
                "type=Certified%20Pre-Owned",
                Box::new(|v| v.condition == Condition::Certified),
            ),
            (
                "type=new,pre-owned",
                Box::new(|v| v.condition != Condition::Certified),
            ),
            (
                "minYear=2020&maxYear=2024",
                Box::new(|v| (2020..=2024).contains(&v.year)),
            ),
            (
                "minPrice=20000&maxPrice=%2430%2C000",
                Box::new(|v| {
                    v.internet_price
                        .is_some_and(|p| (20_000..=30_000).contains(&p))
                }),
            ),
            ("maxMiles=30000", Box::new(|v| v.odometer <= 30_000)),
            (
                "location=Demo+Toyota+Oakland",
                Box::new(|v| v.location == inventory::TOYOTA_OAKLAND),
            ),
            (
                "q=rav4+hybrid",
                Box::new(|v| v.model == "RAV4" && v.trim.contains("Hybrid")),
            ),
            (
                "q=toyota%20camry&minYear=",
                Box::new(|v| v.model == "Camry"),
            ),
        ];
        for (query, pred) in cases {
            let want = expected(pred);
            assert!(want > 0, "{query} matches something");
            assert_eq!(c.search(query).await["TotalCount"], want, "{query}");
        }
        let sold = inventory::toyota_group()
            .iter()
            .filter(|v| v.status == Status::Sold)
            .count();
        let all = c.all("status=sold").await;
        assert_eq!(all.len(), sold);
        assert!(all.iter().all(|v| v["Status"] == "Sold"));
        assert_eq!(
            c.search("status=all").await["TotalCount"],
            inventory::toyota_group().len()
        );
        assert_eq!(
            c.search("status=In%20Transit,pending%20sale").await["TotalCount"].as_u64(),
            Some(
                inventory::toyota_group()
                    .iter()
                    .filter(|v| matches!(v.status, Status::InTransit | Status::PendingSale))
                    .count() as u64
            )
        );
        // Unpriced units never match a price bound.
        let priced = c.all("minPrice=0").await;
        assert!(
            priced
                .iter()
                .all(|v| v["InternetPrice"] != "Call for price")
        );
        assert_eq!(priced.len(), expected(|v| v.internet_price.is_some()));

        let some = &c.all("").await[7];
        let vin = some["VIN"].as_str().expect("vin");
        let stock = some["StockNumber"].as_str().expect("stock");
        let by_vin = c.search(&format!("vin={}", vin.to_lowercase())).await;
        assert_eq!(by_vin["Items"], json!([some]));
        assert_eq!(
            c.search(&format!("stock={stock}")).await["Items"],
            json!([some])
        );
    }

    #[tokio::test]
    async fn sorting() {
        let c = Client::start().await;
        let prices = |items: &[Value]| -> Vec<Option<u32>> {
            items.iter().map(|v| dollars(&v["InternetPrice"])).collect()
        };
        for dir in ["asc", "desc"] {
            let p = prices(&c.all(&format!("sortBy=price&sortDir={dir}")).await);
            let priced: Vec<u32> = p.iter().map_while(|x| *x).collect();
            assert!(priced.len() < p.len(), "some unpriced");
            assert!(
                p[priced.len()..].iter().all(Option::is_none),
                "unpriced last ({dir})"
            );
            assert!(priced.windows(2).all(|w| if dir == "asc" {
                w[0] <= w[1]
            } else {
                w[0] >= w[1]
            }));
        }
        let years: Vec<u32> = c
            .all("sortBy=year&sortDir=desc")
            .await
            .iter()
            .filter_map(|v| v["ModelYear"].as_str()?.parse().ok())
            .collect();
        assert!(years.windows(2).all(|w| w[0] >= w[1]));
        let miles: Vec<u32> = c
            .all("sortBy=mileage")
            .await
            .iter()
            .filter_map(|v| {
                v["Odometer"]
                    .as_str()?
                    .trim_end_matches(" mi")
                    .replace(',', "")
                    .parse()
                    .ok()
            })
            .collect();
        assert!(miles.windows(2).all(|w| w[0] <= w[1]));
        let makes = c.all("sortBy=MAKE&sortDir=DESC").await;
        assert!(
            makes.windows(2).all(|w| {
                let (a, b) = (
                    w[0]["Make"].as_str().expect("make"),
                    w[1]["Make"].as_str().expect("make"),
                );
                a.to_lowercase() > b.to_lowercase()
                    || (a == b && w[0]["StockNumber"].as_str() < w[1]["StockNumber"].as_str())
            }),
            "desc by make, ties by stock ascending"
        );
        let updated = c.all("sortBy=updated&sortDir=desc").await;
        assert!(
            updated
                .windows(2)
                .all(|w| w[0]["LastUpdated"].as_str() >= w[1]["LastUpdated"].as_str())
        );
        let models = c.all("sortBy=model").await;
        assert!(
            models
                .windows(2)
                .all(|w| w[0]["Model"].as_str().map(str::to_lowercase)
                    <= w[1]["Model"].as_str().map(str::to_lowercase))
        );
    }

    #[tokio::test]
    async fn single_vehicle_lookups() {
        let c = Client::start().await;
        let fixtures: Value = c.sim.fixtures();
        let units = inventory::toyota_group();
        let sold = fixtures["sold_vins"].as_array().expect("sold");
        assert!(!sold.is_empty());
        let sold_vin = sold[0].as_str().expect("vin");
        let (status, body) = c.get(&format!("{SEARCH_PATH}/{sold_vin}")).await;
        assert_eq!(status, 200);
        assert_eq!(body["Status"], "Sold");
        let unit = units.iter().find(|v| v.vin == sold_vin).expect("unit");
        assert_eq!(body, unit.legacy_json());
        assert_eq!(
            c.search(&format!("vin={sold_vin}")).await["TotalCount"],
            0,
            "sold: not searchable by default"
        );

        let (status, body) = c
            .get(&format!(
                "{SEARCH_PATH}/by-stock/{}",
                unit.stock_number.to_lowercase()
            ))
            .await;
        assert_eq!(status, 200);
        assert_eq!(body["VIN"], sold_vin);

        let unknown = fixtures["unknown_vin"].as_str().expect("unknown");
        assert!(inventory::is_valid_vin(unknown));
        for path in [
            format!("{SEARCH_PATH}/{unknown}"),
            format!("{SEARCH_PATH}/by-stock/ZZ99999"),
        ] {
            let (status, body) = c.get(&path).await;
            assert_eq!(status, 404);
            assert_eq!(
                body,
                json!({"ErrorCode": "NOT_FOUND", "Message": "Vehicle not found"})
            );
        }
        let (status, body) = c.get("/api/v2/dealers").await;
        assert_eq!(status, 404);
        assert_eq!(body["ErrorCode"], "NOT_FOUND");
        let r = c
            .http
            .post(format!("{}{SEARCH_PATH}", c.sim.base_url()))
            .header(API_KEY_HEADER, API_KEY)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 405);
    }

    #[tokio::test]
    async fn fixtures_agree_with_the_api() {
        let c = Client::start().await;
        let f = c.sim.fixtures();
        for (key, status) in [
            ("in_transit_vins", "In Transit"),
            ("pending_vins", "Pending Sale"),
        ] {
            let vins = f[key].as_array().expect(key);
            assert!(!vins.is_empty(), "{key}");
            for vin in vins {
                let (code, body) = c
                    .get(&format!("{SEARCH_PATH}/{}", vin.as_str().expect("vin")))
                    .await;
                assert_eq!((code, body["Status"].as_str()), (200, Some(status)));
            }
        }
        for vin in f["unpriced_vins"].as_array().expect("unpriced") {
            let (_, body) = c
                .get(&format!("{SEARCH_PATH}/{}", vin.as_str().expect("vin")))
                .await;
            assert_eq!(body["InternetPrice"], "Call for price");
        }
        assert_eq!(
            c.search("make=Toyota").await["TotalCount"],
            f["counts_by_make"]["Toyota"]
        );
        assert_eq!(c.search("").await["TotalCount"], f["searchable_total"]);
        assert!(f["total"].as_u64() >= Some(220));
        let sample = f["in_stock_sample"]["vin"].as_str().expect("sample");
        assert_eq!(c.get(&format!("{SEARCH_PATH}/{sample}")).await.0, 200);
    }

    #[tokio::test]
    async fn misbehaviour() {
        let c = Client::start().await;
        let url = format!("{}{SEARCH_PATH}", c.sim.base_url());
        let get = || c.http.get(&url).header(API_KEY_HEADER, API_KEY);

        c.sim.set_mode(Mode::Fail, 0);
        let r = get().send().await.expect("send");
        assert_eq!(r.status(), 500);
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["ErrorCode"], "INTERNAL_ERROR");

        c.sim.set_mode(Mode::Garbage, 0);
        let r = get().send().await.expect("send");
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .expect("ct")
                .starts_with("application/json")
        );
        assert!(serde_json::from_slice::<Value>(&r.bytes().await.expect("body")).is_err());

        c.sim.set_mode(Mode::Huge, 0);
        let body = get()
            .send()
            .await
            .expect("send")
            .bytes()
            .await
            .expect("body");
        assert!(body.len() >= sim::HUGE_BYTES);
        let parsed: Value = serde_json::from_slice(&body).expect("valid JSON");
        assert_eq!(
            parsed["TotalCount"].as_u64(),
            Some(parsed["Items"].as_array().expect("items").len() as u64)
        );

        c.sim.set_mode(Mode::Slow, 200);
        let started = std::time::Instant::now();
        assert_eq!(get().send().await.expect("send").status(), 200);
        assert!(started.elapsed() >= Duration::from_millis(200));

        c.sim.set_mode(Mode::Hang, 0);
        let r = get().timeout(Duration::from_millis(200)).send().await;
        assert!(r.expect_err("hangs").is_timeout());

        c.sim.set_mode(Mode::Normal, 0);
        assert_eq!(get().send().await.expect("send").status(), 200);
        let received = c.sim.received();
        assert_eq!(received.len(), 6);
        assert_eq!(received[0]["headers"]["x-api-key"], API_KEY);
        assert_eq!(received[0]["path"], SEARCH_PATH);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number("$24,990"), Some(24_990.0));
        assert_eq!(parse_number(" 2020.0 "), Some(2020.0));
        assert_eq!(parse_number("NaN"), None);
        assert_eq!(parse_number("soon"), None);
        assert_eq!(count(Some(3.0), 1, "page"), Ok(3));
        assert!(count(Some(0.0), 1, "page").is_err());
    }
}
