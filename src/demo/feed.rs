//! The feed-only legacy system simulator: the Honda car and motorcycle dealer's inventory
//! ([`inventory::honda_powersports`]) dumped as one CSV document, the way many dealer systems
//! only export a nightly feed and offer no search API at all.
//!
//! It is what the gateway's `mode: feed` mappings are tested against: fetch the whole document,
//! cache it, filter/sort/page in the gateway. The file is messy on purpose, as real feeds are.
//!
//! ## `GET /feeds/inventory.csv` (also `HEAD`)
//!
//! Needs HTTP Basic auth `demo-feed:feed-secret`, else 401 (`WWW-Authenticate: Basic`,
//! plain-text body). Answers 200 `text/csv; charset=utf-8`:
//!
//! - a UTF-8 BOM, then a header row and one row per unit, CRLF line ends, RFC 4180 quoting
//!   (a field is quoted only when it holds `,`, `"` or a line break — so every money value and
//!   every mileage over 999 is quoted);
//! - **Sold units are included** with `Status` `Sold`: the consumer must drop them;
//! - the 30 columns, in order ([`COLUMNS`]):
//!
//! | Column | Example | Notes |
//! |---|---|---|
//! | `VIN` | `2HGFE2F56TH464132` | |
//! | `Stock #` | `SJN10001` | `SJM…` for motorcycles |
//! | `Year` | `2026` | |
//! | `Make`, `Model`, `Trim` | `Honda`, `CR-V`, `Sport-L Hybrid` | Model and Trim sometimes carry a trailing space |
//! | `Vehicle Type` | `Car` \| `Motorcycle` | |
//! | `Condition` | `New` \| `Used` \| `Certified` | not the DMS's vocabulary |
//! | `Status` | `In Stock` \| `In Transit` \| `Pending Sale` \| `Sold` | |
//! | `Price` | `"$32,990"` | blank = call for price |
//! | `MSRP` | `"$33,100"` | blank for used units |
//! | `Mileage` | `0`, `5`, `"12,345"` | no unit |
//! | `Body` | `SUV`, `Sedan`, `Cruiser` … | |
//! | `Transmission`, `Drivetrain`, `Engine` | `CVT`, `AWD`, `2.0L I4 Hybrid` | |
//! | `CC` | `1833` | motorcycles only, else blank |
//! | `Fuel` | `Gasoline` \| `Hybrid` \| `Electric` | |
//! | `EV Range` | `296` | miles, EVs only, else blank |
//! | `Ext Color`, `Int Color` | `Crystal Black Pearl`, `Black` | Ext Color sometimes has a trailing space; Int Color may be blank |
//! | `City MPG`, `Hwy MPG` | `40`, `34` | blank for EVs and motorcycles |
//! | `Features` | `Bluetooth; Apple CarPlay; Heated Seats` | `"; "`-separated, may be blank |
//! | `Photo URLs` | `https://…_01.jpg\|https://…_02.jpg` | `\|`-separated, may be blank |
//! | `Lot` | `Demo Honda San Jose` | |
//! | `Date In Stock` | `3/5/2026` | M/D/YYYY, no zero padding; blank while in transit |
//! | `Last Modified` | `2026-11-30 14:05:00` | local time, no zone |
//! | `Cost`, `Book Value` | `"$21,500"`, `"$23,000"` | confidential: never for buyers |
//!
//! Other paths → 404 `Not Found` (text); other methods → 405. Misbehaviour: `fail` → 500 with
//! an HTML error page; `garbage` → 200 `text/csv` that is not UTF-8 and has an unterminated
//! quote; `huge` → 200, a valid feed of about 8 MiB (rows repeated). Controls: see [`sim`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{HeaderValue, WWW_AUTHENTICATE};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::inventory::{self, Condition, Status, Vehicle, VehicleType};
use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse};

/// The feed's path.
pub const FEED_PATH: &str = "/feeds/inventory.csv";
/// Basic-auth user name.
pub const USERNAME: &str = "demo-feed";
/// Basic-auth password.
pub const PASSWORD: &str = "feed-secret";
/// `base64("demo-feed:feed-secret")`.
const CREDENTIALS_B64: &str = "ZGVtby1mZWVkOmZlZWQtc2VjcmV0";
const CONTENT_TYPE: &str = "text/csv; charset=utf-8";
const BOM: &str = "\u{FEFF}";

/// The header row, in order.
pub const COLUMNS: [&str; 30] = [
    "VIN",
    "Stock #",
    "Year",
    "Make",
    "Model",
    "Trim",
    "Vehicle Type",
    "Condition",
    "Status",
    "Price",
    "MSRP",
    "Mileage",
    "Body",
    "Transmission",
    "Drivetrain",
    "Engine",
    "CC",
    "Fuel",
    "EV Range",
    "Ext Color",
    "Int Color",
    "City MPG",
    "Hwy MPG",
    "Features",
    "Photo URLs",
    "Lot",
    "Date In Stock",
    "Last Modified",
    "Cost",
    "Book Value",
];

/// Binds `127.0.0.1:0` and serves the feed of the Honda dealer's inventory.
pub async fn start_feed() -> std::io::Result<SimHandle> {
    serve_feed(sim::bind_loopback().await?)
}

/// Serves the feed of the Honda dealer's inventory on `listener` (keep it on loopback).
pub fn serve_feed(listener: TcpListener) -> std::io::Result<SimHandle> {
    sim::serve(
        listener,
        Arc::new(Feed::new(inventory::honda_powersports())),
    )
}

/// The feed's `Condition` vocabulary.
pub fn condition_label(c: Condition) -> &'static str {
    match c {
        Condition::New => "New",
        Condition::PreOwned => "Used",
        Condition::Certified => "Certified",
    }
}

/// The feed's row for `v`; `row` (its position) decides the deterministic trailing spaces.
pub fn row(v: &Vehicle, row: usize) -> [String; 30] {
    let pad = |s: &str, every: usize, at: usize| {
        if row % every == at {
            format!("{s} ")
        } else {
            s.to_owned()
        }
    };
    let opt = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
    [
        v.vin.clone(),
        v.stock_number.clone(),
        v.year.to_string(),
        v.make.to_owned(),
        pad(v.model, 13, 6),
        pad(v.trim, 7, 3),
        v.vehicle_type.legacy().to_owned(),
        condition_label(v.condition).to_owned(),
        v.status.legacy().to_owned(),
        v.internet_price.map(inventory::money).unwrap_or_default(),
        v.msrp.map(inventory::money).unwrap_or_default(),
        inventory::thousands(v.odometer),
        v.body_style.to_owned(),
        v.transmission.to_owned(),
        v.drivetrain.to_owned(),
        v.engine.to_owned(),
        opt(v.displacement_cc),
        v.fuel_type.to_owned(),
        opt(v.electric_range),
        pad(v.ext_color, 5, 1),
        v.int_color.to_owned(),
        opt(v.city_mpg),
        opt(v.hwy_mpg),
        v.features.join("; "),
        v.photos.join("|"),
        v.location.to_owned(),
        v.date_in_stock
            .map(|d| format!("{}/{}/{}", u8::from(d.month()), d.day(), d.year()))
            .unwrap_or_default(),
        inventory::iso_local(v.last_updated),
        inventory::money(v.dealer_cost),
        inventory::money(v.book_value),
    ]
}

/// Appends one CSV line (RFC 4180 quoting, CRLF).
fn push_line<S: AsRef<str>>(out: &mut String, fields: &[S]) {
    for (i, field) in fields.iter().enumerate() {
        let field = field.as_ref();
        if i > 0 {
            out.push(',');
        }
        if field.contains([',', '"', '\r', '\n']) {
            out.push('"');
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(field);
        }
    }
    out.push_str("\r\n");
}

/// The whole feed document for `vehicles`: BOM, header, one row each.
pub fn csv_document(vehicles: &[Vehicle]) -> String {
    let mut out = String::with_capacity(vehicles.len() * 700 + 512);
    out.push_str(BOM);
    push_line(&mut out, &COLUMNS);
    for (i, v) in vehicles.iter().enumerate() {
        push_line(&mut out, &row(v, i));
    }
    out
}

/// The feed system over any inventory.
pub struct Feed {
    vehicles: Vec<Vehicle>,
    document: Bytes,
    unknown_vin: String,
    huge: OnceLock<Bytes>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("vehicles", &self.vehicles.len())
            .finish_non_exhaustive()
    }
}

impl Feed {
    pub fn new(vehicles: Vec<Vehicle>) -> Feed {
        Feed {
            document: Bytes::from(csv_document(&vehicles)),
            unknown_vin: inventory::unknown_vin(&vehicles),
            vehicles,
            huge: OnceLock::new(),
        }
    }

    pub fn vehicles(&self) -> &[Vehicle] {
        &self.vehicles
    }

    fn authorized(req: &SimRequest) -> bool {
        req.header("authorization")
            .and_then(|h| h.trim().split_once(' '))
            .is_some_and(|(scheme, credentials)| {
                scheme.eq_ignore_ascii_case("basic") && credentials.trim() == CREDENTIALS_B64
            })
    }
}

impl SimApp for Feed {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        if req.path != FEED_PATH {
            return sim::text(StatusCode::NOT_FOUND, "Not Found");
        }
        if !Feed::authorized(req) {
            let mut response = sim::text(StatusCode::UNAUTHORIZED, "401 - Unauthorized");
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"Inventory Feed\""),
            );
            return response;
        }
        if req.method != Method::GET && req.method != Method::HEAD {
            return sim::text(StatusCode::METHOD_NOT_ALLOWED, "405 - Method Not Allowed");
        }
        let mut response = sim::bytes_response(StatusCode::OK, CONTENT_TYPE, self.document.clone());
        response.headers_mut().insert(
            http::header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment; filename=\"inventory.csv\""),
        );
        response
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
        let mut by_model: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
        let mut by_condition: BTreeMap<&str, usize> = BTreeMap::new();
        for v in self.vehicles.iter().filter(|v| v.status != Status::Sold) {
            *by_make.entry(v.make).or_default() += 1;
            *by_model.entry(v.model).or_default() += 1;
            *by_type.entry(v.vehicle_type.legacy()).or_default() += 1;
            *by_condition
                .entry(condition_label(v.condition))
                .or_default() += 1;
        }
        json!({
            "system": "csv-feed",
            "path": FEED_PATH,
            "username": USERNAME,
            "password": PASSWORD,
            "columns": COLUMNS,
            "total_rows": self.vehicles.len(),
            "unsold_rows": self.vehicles.iter().filter(|v| v.status != Status::Sold).count(),
            "sold_vins": vins(&|v| v.status == Status::Sold),
            "in_transit_vins": vins(&|v| v.status == Status::InTransit),
            "pending_vins": vins(&|v| v.status == Status::PendingSale),
            "unpriced_vins": vins(&|v| v.internet_price.is_none()),
            "ev_vins": vins(&|v| v.fuel_type == "Electric"),
            "motorcycle_vins": vins(&|v| v.vehicle_type == VehicleType::Motorcycle),
            "unknown_vin": self.unknown_vin,
            "counts_by_make": by_make,
            "counts_by_model": by_model,
            "counts_by_vehicle_type": by_type,
            "counts_by_condition": by_condition,
        })
    }

    fn fail(&self) -> SimResponse {
        sim::bytes_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/html; charset=utf-8",
            Bytes::from_static(
                b"<html><head><title>500 - Internal server error.</title></head><body>\
                  <h1>Server Error</h1><h2>500 - Internal server error.</h2>\
                  <p>There is a problem with the resource you are looking for, and it cannot \
                  be displayed.</p></body></html>",
            ),
        )
    }

    fn garbage(&self) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            CONTENT_TYPE,
            Bytes::from_static(
                b"\xff\xfeV\x00I\x00N\x00,\"Stock #\r\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xc3\x28,\"\xa0\xa1",
            ),
        )
    }

    fn huge(&self) -> SimResponse {
        let body = self.huge.get_or_init(|| {
            let mut out = String::with_capacity(sim::HUGE_BYTES + 64 * 1024);
            out.push_str(BOM);
            push_line(&mut out, &COLUMNS);
            let mut i = 0;
            while out.len() < sim::HUGE_BYTES && !self.vehicles.is_empty() {
                push_line(&mut out, &row(&self.vehicles[i % self.vehicles.len()], i));
                i += 1;
            }
            Bytes::from(out)
        });
        sim::bytes_response(StatusCode::OK, CONTENT_TYPE, body.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::demo::sim::Mode;

    fn parse(body: &[u8]) -> Result<(Vec<String>, Vec<csv::StringRecord>), csv::Error> {
        let body = body.strip_prefix(BOM.as_bytes()).unwrap_or(body);
        let mut reader = csv::ReaderBuilder::new().from_reader(body);
        let header = reader.headers()?.iter().map(str::to_owned).collect();
        let rows = reader.records().collect::<Result<Vec<_>, _>>()?;
        Ok((header, rows))
    }

    async fn fetch(sim: &SimHandle) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}{FEED_PATH}", sim.base_url()))
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send")
    }

    #[tokio::test]
    async fn basic_auth_required() {
        let sim = start_feed().await.expect("start");
        let url = format!("{}{FEED_PATH}", sim.base_url());
        let client = reqwest::Client::new();
        for auth in [None, Some("wrong"), Some("")] {
            let mut req = client.get(&url);
            if let Some(password) = auth {
                req = req.basic_auth(USERNAME, Some(password));
            }
            let r = req.send().await.expect("send");
            assert_eq!(r.status(), 401);
            assert!(r.headers().contains_key("www-authenticate"));
        }
        assert_eq!(
            fetch(&sim).await.status(),
            200,
            "reqwest's encoding matches ours"
        );
        let r = client
            .get(format!("{}/feeds/other.csv", sim.base_url()))
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 404);
        let r = client
            .head(&url)
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
    }

    #[tokio::test]
    async fn the_document() {
        let sim = start_feed().await.expect("start");
        let r = fetch(&sim).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], CONTENT_TYPE);
        let body = r.bytes().await.expect("body");
        assert!(body.starts_with(BOM.as_bytes()));
        let text = std::str::from_utf8(&body).expect("utf-8");
        assert!(text.contains("\r\n"));
        assert!(text.contains(",\"$"), "money is quoted");

        let (header, rows) = parse(&body).expect("valid CSV");
        assert_eq!(header, COLUMNS);
        let units = inventory::honda_powersports();
        assert!(rows.len() >= 200);
        assert_eq!(rows.len(), units.len());
        assert!(rows.iter().all(|r| r.len() == COLUMNS.len()));

        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).expect(name);
        let vins: HashSet<&str> = rows.iter().map(|r| &r[col("VIN")]).collect();
        assert_eq!(vins.len(), rows.len());
        assert!(vins.iter().all(|v| inventory::is_valid_vin(v)));
        assert!(
            rows.iter().any(|r| &r[col("Status")] == "Sold"),
            "sold rows stay in the feed"
        );
        assert!(rows.iter().any(|r| r[col("Trim")].ends_with(' ')));
        assert!(rows.iter().any(|r| r[col("Ext Color")].ends_with(' ')));
        assert!(rows.iter().any(|r| r[col("Price")].is_empty()));
        assert!(rows.iter().any(|r| r[col("Features")].contains("; ")));
        assert!(rows.iter().any(|r| r[col("Photo URLs")].contains('|')));
        assert!(
            rows.iter()
                .any(|r| &r[col("Vehicle Type")] == "Motorcycle" && !r[col("CC")].is_empty())
        );
        let conditions: HashSet<&str> = rows.iter().map(|r| &r[col("Condition")]).collect();
        assert_eq!(conditions, HashSet::from(["New", "Used", "Certified"]));

        for (r, v) in rows.iter().zip(&units) {
            assert_eq!(&r[col("VIN")], v.vin);
            let price = r[col("Price")].trim_start_matches('$').replace(',', "");
            assert_eq!(price.parse::<u32>().ok(), v.internet_price);
            let miles = r[col("Mileage")].replace(',', "");
            assert_eq!(miles.parse::<u32>().ok(), Some(v.odometer));
            assert!(r[col("Cost")].starts_with('$') && r[col("Book Value")].starts_with('$'));
            assert_eq!(
                r[col("Date In Stock")].is_empty(),
                v.status == Status::InTransit
            );
        }

        let f = sim.fixtures();
        assert_eq!(f["total_rows"], rows.len());
        assert!(!f["sold_vins"].as_array().expect("sold").is_empty());
        assert!(!vins.contains(f["unknown_vin"].as_str().expect("unknown")));
        assert_eq!(f["columns"], json!(COLUMNS));
    }

    #[test]
    fn quoting() {
        let mut out = String::new();
        push_line(&mut out, &["a", "b,c", "say \"hi\"", "", "x "]);
        assert_eq!(out, "a,\"b,c\",\"say \"\"hi\"\"\",,x \r\n");
    }

    #[tokio::test]
    async fn misbehaviour() {
        let sim = start_feed().await.expect("start");

        sim.set_mode(Mode::Fail, 0);
        let r = fetch(&sim).await;
        assert_eq!(r.status(), 500);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .expect("ct")
                .starts_with("text/html")
        );

        sim.set_mode(Mode::Garbage, 0);
        let r = fetch(&sim).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], CONTENT_TYPE);
        assert!(parse(&r.bytes().await.expect("body")).is_err());

        sim.set_mode(Mode::Huge, 0);
        let body = fetch(&sim).await.bytes().await.expect("body");
        assert!(body.len() >= sim::HUGE_BYTES);
        let (header, rows) = parse(&body).expect("valid CSV");
        assert_eq!(header, COLUMNS);
        assert!(rows.len() > 1000);

        sim.set_mode(Mode::Slow, 150);
        let started = std::time::Instant::now();
        assert_eq!(fetch(&sim).await.status(), 200);
        assert!(started.elapsed() >= std::time::Duration::from_millis(150));

        sim.set_mode(Mode::Hang, 0);
        let r = reqwest::Client::new()
            .get(format!("{}{FEED_PATH}", sim.base_url()))
            .timeout(std::time::Duration::from_millis(200))
            .send()
            .await;
        assert!(r.expect_err("hangs").is_timeout());

        let received = sim.received();
        assert_eq!(received.len(), 5);
        assert!(
            received[0]["headers"]["authorization"]
                .as_str()
                .is_some_and(|a| a.starts_with("Basic "))
        );
    }
}
