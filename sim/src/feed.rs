//! The feed-only legacy system simulator: the Honda car and motorcycle dealer's inventory
//! ([`inventory::honda_powersports`]) dumped as one document — a CSV file and the same units as
//! an XML export — the way many dealer systems only export a nightly feed and offer no search
//! API at all.
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
//! ## `GET /feeds/inventory.xml` (also `HEAD`)
//!
//! The same units, in the same order, as the DMS's XML export: same Basic auth, 200
//! `application/xml; charset=utf-8` ([`xml_document`]). Sold units are included here too. Every
//! element is in the default namespace [`XML_NAMESPACE`]. Text is escaped as .NET's `XmlWriter`
//! does (`&amp;`, `&lt;`, `&gt;`; quotes stay literal), attribute values also get `&quot;` and
//! `&apos;`; characters XML 1.0 cannot carry are dropped. CRLF line ends, two-space indentation.
//!
//! ```xml
//! <?xml version="1.0" encoding="UTF-8"?>
//! <!-- Demo Honda San Jose: DMS inventory export (nightly). Do not edit. -->
//! <Inventory xmlns="urn:demo-honda:dms:inventory-export:2" xmlns:xsi="…" dealer="Demo Honda San Jose" exported="2026-12-02 02:00:00" count="212">
//!   <Vehicle id="40001">
//!     <VIN>2HGFE2F56TH464132</VIN>
//!     <StockNumber>SJN10001</StockNumber>
//!     <ModelYear>2026</ModelYear>
//!     <Make>Honda</Make>
//!     <Model>CR-V</Model>
//!     <Trim>Sport-L Hybrid </Trim>
//!     <VehicleType>Car</VehicleType>
//!     <Condition>New</Condition>
//!     <Status>In Stock</Status>
//!     <Pricing>
//!       <InternetPrice>$32,990</InternetPrice>
//!       <MSRP>$33,100</MSRP>
//!       <ListPrice>$33,100</ListPrice>
//!       <DealerCost>$29,500</DealerCost>
//!       <BookValue>$30,000</BookValue>
//!     </Pricing>
//!     <Odometer unit="mi">5</Odometer>
//!     …
//!   </Vehicle>
//! </Inventory>
//! ```
//!
//! | Element (in `Vehicle`) | Example | Notes |
//! |---|---|---|
//! | `@id` (attribute) | `40001` | the DMS's record id |
//! | `VIN`, `StockNumber` | `2HGFE2F56TH464132`, `SJN10001` | |
//! | `ModelYear` | `2026` | |
//! | `Make`, `Model`, `Trim` | `Honda`, `CR-V`, `Sport-L Hybrid` | Model and Trim sometimes carry a trailing space (as in the CSV) |
//! | `VehicleType` | `Car` \| `Motorcycle` | |
//! | `Condition` | `New` \| `Pre-Owned` \| `Certified Pre-Owned` | the DMS's vocabulary, not the CSV's |
//! | `Status` | `In Stock` \| `In Transit` \| `Pending Sale` \| `Sold` | |
//! | `Pricing/InternetPrice` | `$24,990` \| `Call for price` | |
//! | `Pricing/MSRP` | `$33,100` \| `<MSRP xsi:nil="true"/>` | nil for used units |
//! | `Pricing/ListPrice` | `$25,990` | always set |
//! | `Pricing/DealerCost`, `Pricing/BookValue` | `$21,500`, `$23,000` | confidential: never for buyers |
//! | `Odometer` | `<Odometer unit="mi">12,345</Odometer>` | |
//! | `BodyStyle`, `Transmission`, `Drivetrain`, `Engine` | `SUV`, `CVT`, `AWD`, `2.0L I4 Hybrid` | |
//! | `DisplacementCC` | `1833` \| `<DisplacementCC/>` | motorcycles only |
//! | `FuelType` | `Gasoline` \| `Hybrid` \| `Electric` | |
//! | `ElectricRange` | `<ElectricRange unit="mi">296</ElectricRange>` | EVs only, else absent |
//! | `Colors/Exterior`, `Colors/Interior` | `Crystal Black Pearl`, `Black` | Exterior sometimes has a trailing space; `<Interior/>` when unknown |
//! | `FuelEconomy` | `<FuelEconomy city="40" highway="34"/>` | absent for EVs and motorcycles |
//! | `Features/Feature` | `<Features><Feature>Bluetooth</Feature>…</Features>` | `<Features/>` when none |
//! | `Photos/Photo` | `<Photo seq="1">https://…_01.jpg</Photo>` | in `seq` order; `<Photos/>` when none |
//! | `Comments` | `1-owner &amp; clean history &lt;no accidents reported&gt;` | the dealer's free text ([`comments`]): `&`, `<`, `>`, quotes and a non-ASCII dash; some rows as CDATA, some empty (`<Comments/>`) |
//! | `Location` | `Demo Honda San Jose` | |
//! | `DateInStock` | `03/05/2026` | MM/DD/YYYY; `<DateInStock/>` while in transit |
//! | `LastModified` | `2026-11-30 14:05:00` | local time, no zone |
//!
//! ## Both routes
//!
//! Other paths → 404 `Not Found` (text); other methods → 405. Misbehaviour applies to both
//! routes, each in its own format: `fail` → 500 with an HTML error page (both); `garbage` → 200
//! with the route's content type and a body its decoder refuses — CSV that is not UTF-8 and has an
//! unterminated quote, XML with a mismatched end tag, bytes that are not UTF-8 and no end;
//! `huge` → 200, a valid export of more than 8 MiB (rows repeated: CSV lines or `Vehicle`
//! elements, `count` saying how many). Controls: see [`sim`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{HeaderValue, WWW_AUTHENTICATE};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::inventory::{self, Condition, Status, Vehicle, VehicleType};
use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse};

/// The feed's path.
pub const FEED_PATH: &str = "/feeds/inventory.csv";
/// The XML export's path.
pub const XML_FEED_PATH: &str = "/feeds/inventory.xml";
/// The XML export's default namespace.
pub const XML_NAMESPACE: &str = "urn:demo-honda:dms:inventory-export:2";
/// The XML export's `exported` attribute: the nightly run at 02:00 after [`inventory::AS_OF`].
pub const XML_EXPORTED: &str = "2026-12-02 02:00:00";
/// The XML export's first `Vehicle/@id`; the others follow in row order.
pub const XML_FIRST_ID: usize = 40_001;
/// Basic-auth user name.
pub const USERNAME: &str = "demo-feed";
/// Basic-auth password.
pub const PASSWORD: &str = "feed-secret";
/// `base64("demo-feed:feed-secret")`.
const CREDENTIALS_B64: &str = "ZGVtby1mZWVkOmZlZWQtc2VjcmV0";
const CONTENT_TYPE: &str = "text/csv; charset=utf-8";
const XML_CONTENT_TYPE: &str = "application/xml; charset=utf-8";
const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";
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
    sim::start(Arc::new(Feed::new(inventory::honda_powersports()))).await
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

/// The dealer's free-text comment on `v`, as the XML export carries it (the CSV has none). Legacy
/// comments are typed by people: `&`, `<`, `>`, quotes and a typographic dash, never a price.
pub fn comments(v: &Vehicle) -> String {
    match v.condition {
        Condition::New => format!(
            "Brand-new {} {} {} \u{2013} ask for today's \"e-Price\" & current factory \
             incentives <see dealer for details>.",
            v.year,
            v.model.trim(),
            v.trim.trim()
        ),
        Condition::PreOwned => format!(
            "{} miles & one owner. Clean history <no accidents reported>; sold \"as is\".",
            inventory::thousands(v.odometer)
        ),
        Condition::Certified => {
            "Honda Certified \u{2013} 7-year/100,000-mile powertrain warranty & 182-point \
             inspection <HondaTrue>. Ask about \"special APR\"."
                .to_owned()
        }
    }
}

/// Whether row `row` of the XML export leaves `Comments` empty.
fn comments_blank(row: usize) -> bool {
    row % 11 == 4
}

/// Whether row `row` of the XML export wraps `Comments` in CDATA instead of escaping it.
fn comments_cdata(row: usize) -> bool {
    row % 5 == 2
}

/// `s` without the characters XML 1.0 cannot carry at all (not even as references).
fn xml_chars(s: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    };
    if s.chars().all(allowed) {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(s.chars().filter(|c| allowed(*c)).collect())
    }
}

/// Writes the XML export, one line per element, CRLF line ends.
struct XmlWriter {
    out: String,
}

impl XmlWriter {
    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn attrs(&mut self, attrs: &[(&str, &str)]) {
        for (name, value) in attrs {
            self.out.push(' ');
            self.out.push_str(name);
            self.out.push_str("=\"");
            // Parsers normalise whitespace in attribute values: keep it as references.
            let value = quick_xml::escape::escape(xml_chars(value))
                .replace('\t', "&#9;")
                .replace('\n', "&#10;")
                .replace('\r', "&#13;");
            self.out.push_str(&value);
            self.out.push('"');
        }
    }

    fn open(&mut self, depth: usize, name: &str, attrs: &[(&str, &str)]) {
        self.indent(depth);
        self.out.push('<');
        self.out.push_str(name);
        self.attrs(attrs);
        self.out.push_str(">\r\n");
    }

    fn close(&mut self, depth: usize, name: &str) {
        self.indent(depth);
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push_str(">\r\n");
    }

    /// `<name attrs>text</name>`, or `<name attrs/>` when `text` is empty.
    fn leaf(&mut self, depth: usize, name: &str, attrs: &[(&str, &str)], text: &str) {
        self.indent(depth);
        self.out.push('<');
        self.out.push_str(name);
        self.attrs(attrs);
        if text.is_empty() {
            self.out.push_str("/>\r\n");
            return;
        }
        self.out.push('>');
        // A literal CR would reach the reader as LF (XML end-of-line handling).
        self.out
            .push_str(&quick_xml::escape::partial_escape(xml_chars(text)).replace('\r', "&#13;"));
        self.out.push_str("</");
        self.out.push_str(name);
        self.out.push_str(">\r\n");
    }

    /// `<name><![CDATA[text]]></name>`; a `]]>` inside `text` is split across two sections. (A CR
    /// inside reaches a conforming reader as LF: CDATA has no references.)
    fn cdata_leaf(&mut self, depth: usize, name: &str, text: &str) {
        self.indent(depth);
        self.out.push('<');
        self.out.push_str(name);
        self.out.push_str("><![CDATA[");
        self.out
            .push_str(&xml_chars(text).replace("]]>", "]]]]><![CDATA[>"));
        self.out.push_str("]]></");
        self.out.push_str(name);
        self.out.push_str(">\r\n");
    }

    /// One `<Vehicle>` element; `row` (its position) decides the deterministic quirks.
    fn vehicle(&mut self, v: &Vehicle, row: usize) {
        let pad = |s: &str, every: usize, at: usize| {
            if row % every == at {
                format!("{s} ")
            } else {
                s.to_owned()
            }
        };
        let opt = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
        let id = (XML_FIRST_ID + row).to_string();
        self.open(1, "Vehicle", &[("id", &id)]);
        self.leaf(2, "VIN", &[], &v.vin);
        self.leaf(2, "StockNumber", &[], &v.stock_number);
        self.leaf(2, "ModelYear", &[], &v.year.to_string());
        self.leaf(2, "Make", &[], v.make);
        self.leaf(2, "Model", &[], &pad(v.model, 13, 6));
        self.leaf(2, "Trim", &[], &pad(v.trim, 7, 3));
        self.leaf(2, "VehicleType", &[], v.vehicle_type.legacy());
        self.leaf(2, "Condition", &[], v.condition.legacy());
        self.leaf(2, "Status", &[], v.status.legacy());
        self.open(2, "Pricing", &[]);
        let price = v
            .internet_price
            .map_or_else(|| "Call for price".to_owned(), inventory::money);
        self.leaf(3, "InternetPrice", &[], &price);
        match v.msrp {
            Some(msrp) => self.leaf(3, "MSRP", &[], &inventory::money(msrp)),
            None => self.leaf(3, "MSRP", &[("xsi:nil", "true")], ""),
        }
        self.leaf(3, "ListPrice", &[], &inventory::money(v.list_price));
        self.leaf(3, "DealerCost", &[], &inventory::money(v.dealer_cost));
        self.leaf(3, "BookValue", &[], &inventory::money(v.book_value));
        self.close(2, "Pricing");
        self.leaf(
            2,
            "Odometer",
            &[("unit", "mi")],
            &inventory::thousands(v.odometer),
        );
        self.leaf(2, "BodyStyle", &[], v.body_style);
        self.leaf(2, "Transmission", &[], v.transmission);
        self.leaf(2, "Drivetrain", &[], v.drivetrain);
        self.leaf(2, "Engine", &[], v.engine);
        self.leaf(2, "DisplacementCC", &[], &opt(v.displacement_cc));
        self.leaf(2, "FuelType", &[], v.fuel_type);
        if let Some(range) = v.electric_range {
            self.leaf(2, "ElectricRange", &[("unit", "mi")], &range.to_string());
        }
        self.open(2, "Colors", &[]);
        self.leaf(3, "Exterior", &[], &pad(v.ext_color, 5, 1));
        self.leaf(3, "Interior", &[], v.int_color);
        self.close(2, "Colors");
        if let (Some(city), Some(hwy)) = (v.city_mpg, v.hwy_mpg) {
            let (city, hwy) = (city.to_string(), hwy.to_string());
            self.leaf(2, "FuelEconomy", &[("city", &city), ("highway", &hwy)], "");
        }
        if v.features.is_empty() {
            self.leaf(2, "Features", &[], "");
        } else {
            self.open(2, "Features", &[]);
            for feature in &v.features {
                self.leaf(3, "Feature", &[], feature);
            }
            self.close(2, "Features");
        }
        if v.photos.is_empty() {
            self.leaf(2, "Photos", &[], "");
        } else {
            self.open(2, "Photos", &[]);
            for (i, url) in v.photos.iter().enumerate() {
                self.leaf(3, "Photo", &[("seq", &(i + 1).to_string())], url);
            }
            self.close(2, "Photos");
        }
        if comments_blank(row) {
            self.leaf(2, "Comments", &[], "");
        } else if comments_cdata(row) {
            self.cdata_leaf(2, "Comments", &comments(v));
        } else {
            self.leaf(2, "Comments", &[], &comments(v));
        }
        self.leaf(2, "Location", &[], v.location);
        self.leaf(
            2,
            "DateInStock",
            &[],
            &v.date_in_stock.map(inventory::us_date).unwrap_or_default(),
        );
        self.leaf(
            2,
            "LastModified",
            &[],
            &inventory::iso_local(v.last_updated),
        );
        self.close(1, "Vehicle");
    }
}

/// The whole XML export for `vehicles` (see the module doc for its shape).
pub fn xml_document(vehicles: &[Vehicle]) -> String {
    xml_export(vehicles, vehicles.len())
}

/// An XML export of `rows` `Vehicle` elements, cycling through `vehicles` (the `huge` answer
/// repeats them past [`sim::HUGE_BYTES`]).
fn xml_export(vehicles: &[Vehicle], rows: usize) -> String {
    let mut w = XmlWriter {
        out: String::with_capacity(rows * 2200 + 512),
    };
    w.out
        .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n");
    let dealer = vehicles
        .first()
        .map_or(inventory::HONDA_SAN_JOSE, |v| v.location);
    w.out.push_str(&format!(
        "<!-- {}: DMS inventory export (nightly). Do not edit. -->\r\n",
        xml_chars(dealer).replace("--", "- -")
    ));
    let count = rows.to_string();
    w.open(
        0,
        "Inventory",
        &[
            ("xmlns", XML_NAMESPACE),
            ("xmlns:xsi", XSI),
            ("dealer", dealer),
            ("exported", XML_EXPORTED),
            ("count", &count),
        ],
    );
    for (i, v) in vehicles.iter().cycle().take(rows).enumerate() {
        w.vehicle(v, i);
    }
    w.close(0, "Inventory");
    w.out
}

/// The feed system over any inventory.
pub struct Feed {
    vehicles: Vec<Vehicle>,
    document: Bytes,
    xml: Bytes,
    unknown_vin: String,
    huge: OnceLock<Bytes>,
    huge_xml: OnceLock<Bytes>,
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
            xml: Bytes::from(xml_document(&vehicles)),
            unknown_vin: inventory::unknown_vin(&vehicles),
            vehicles,
            huge: OnceLock::new(),
            huge_xml: OnceLock::new(),
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
        let (content_type, body, disposition) = match req.path.as_str() {
            FEED_PATH => (
                CONTENT_TYPE,
                &self.document,
                "attachment; filename=\"inventory.csv\"",
            ),
            XML_FEED_PATH => (
                XML_CONTENT_TYPE,
                &self.xml,
                "attachment; filename=\"inventory.xml\"",
            ),
            _ => return sim::text(StatusCode::NOT_FOUND, "Not Found"),
        };
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
        let mut response = sim::bytes_response(StatusCode::OK, content_type, body.clone());
        response.headers_mut().insert(
            http::header::CONTENT_DISPOSITION,
            HeaderValue::from_static(disposition),
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
            "xml_path": XML_FEED_PATH,
            "xml_namespace": XML_NAMESPACE,
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

    fn fail(&self, _: &SimRequest) -> SimResponse {
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

    fn garbage(&self, req: &SimRequest) -> SimResponse {
        if req.path == XML_FEED_PATH {
            // A truncated export: an end tag that does not match, bytes that are not UTF-8, and
            // no end to the document.
            return sim::bytes_response(
                StatusCode::OK,
                XML_CONTENT_TYPE,
                Bytes::from_static(
                    b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<Inventory \
                      xmlns=\"urn:demo-honda:dms:inventory-export:2\" count=\"212\">\r\n\
                      <Vehicle><VIN>1HFSC8\xff\xfe</Stock>\r\n<Vehicle><Make>Hon",
                ),
            );
        }
        sim::bytes_response(
            StatusCode::OK,
            CONTENT_TYPE,
            Bytes::from_static(
                b"\xff\xfeV\x00I\x00N\x00,\"Stock #\r\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xc3\x28,\"\xa0\xa1",
            ),
        )
    }

    fn huge(&self, req: &SimRequest) -> SimResponse {
        if req.path == XML_FEED_PATH {
            let body = self.huge_xml.get_or_init(|| {
                // Rows of the normal export's average size, enough of them to pass HUGE_BYTES.
                let per_row = self.xml.len() / self.vehicles.len().max(1) + 1;
                let rows = sim::HUGE_BYTES / per_row + self.vehicles.len() + 1;
                Bytes::from(xml_export(&self.vehicles, rows))
            });
            return sim::bytes_response(StatusCode::OK, XML_CONTENT_TYPE, body.clone());
        }
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
    use crate::sim::Mode;

    fn parse(body: &[u8]) -> Result<(Vec<String>, Vec<csv::StringRecord>), csv::Error> {
        let body = body.strip_prefix(BOM.as_bytes()).unwrap_or(body);
        let mut reader = csv::ReaderBuilder::new().from_reader(body);
        let header = reader.headers()?.iter().map(str::to_owned).collect();
        let rows = reader.records().collect::<Result<Vec<_>, _>>()?;
        Ok((header, rows))
    }

    /// The CSV feed, fetched with the right credentials.
    async fn fetch(sim: &SimHandle) -> reqwest::Response {
        fetch_at(sim, FEED_PATH).await
    }

    async fn fetch_at(sim: &SimHandle, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}{path}", sim.base_url()))
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send")
    }

    /// Requests without credentials, or with wrong ones, get 401 and a challenge.
    async fn assert_refused_without_credentials(sim: &SimHandle, path: &str, wrong: &[&str]) {
        let url = format!("{}{path}", sim.base_url());
        let client = reqwest::Client::new();
        for auth in std::iter::once(None).chain(wrong.iter().map(Some)) {
            let mut req = client.get(&url);
            if let Some(password) = auth {
                req = req.basic_auth(USERNAME, Some(password));
            }
            let r = req.send().await.expect("send");
            assert_eq!(r.status(), 401);
            assert!(r.headers().contains_key("www-authenticate"));
        }
    }

    #[tokio::test]
    async fn basic_auth_required() {
        let sim = start_feed().await.expect("start");
        assert_refused_without_credentials(&sim, FEED_PATH, &["wrong", ""]).await;
        let url = format!("{}{FEED_PATH}", sim.base_url());
        let client = reqwest::Client::new();
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

    /// One `Vehicle` of the XML export, read with quick-xml and no trimming: `(path, value)` in
    /// document order, `path` relative to the `Vehicle` (`Pricing/DealerCost`, `Photos/Photo`),
    /// attributes as `path@name`, one entry per leaf element (its text, references resolved,
    /// CDATA kept as is).
    type XmlVehicle = Vec<(String, String)>;

    fn get<'v>(v: &'v XmlVehicle, path: &str) -> Option<&'v str> {
        v.iter().find(|(p, _)| p == path).map(|(_, t)| t.as_str())
    }

    fn all<'v>(v: &'v XmlVehicle, path: &str) -> Vec<&'v str> {
        v.iter()
            .filter(|(p, _)| p == path)
            .map(|(_, t)| t.as_str())
            .collect()
    }

    /// The export's root attributes and its vehicles; `Err` for anything that is not well-formed.
    fn parse_xml(body: &[u8]) -> Result<(XmlVehicle, Vec<XmlVehicle>), String> {
        use quick_xml::events::Event;
        let mut reader = quick_xml::reader::Reader::from_reader(body);
        reader.config_mut().check_end_names = true;
        let mut buf = Vec::new();
        // (name, had a child element, text so far)
        let mut stack: Vec<(String, bool, String)> = Vec::new();
        let mut root = XmlVehicle::new();
        let mut vehicles = Vec::new();
        let mut current = XmlVehicle::new();
        let path = |stack: &[(String, bool, String)], name: &str| -> String {
            stack
                .iter()
                .skip(2)
                .map(|(n, ..)| n.as_str())
                .chain([name])
                .collect::<Vec<_>>()
                .join("/")
        };
        let attrs = |e: &quick_xml::events::BytesStart<'_>| -> Result<XmlVehicle, String> {
            e.attributes()
                .map(|a| {
                    let a = a.map_err(|e| e.to_string())?;
                    let value = a.unescape_value().map_err(|e| e.to_string())?;
                    Ok((
                        String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                        value.into_owned(),
                    ))
                })
                .collect()
        };
        loop {
            let event = reader
                .read_event_into(&mut buf)
                .map_err(|e| e.to_string())?;
            match event {
                Event::Start(e) | Event::Empty(e) if stack.is_empty() => {
                    root = attrs(&e)?;
                    stack.push((
                        String::from_utf8_lossy(e.name().as_ref()).into_owned(),
                        false,
                        String::new(),
                    ));
                }
                Event::Start(e) => {
                    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                    if let Some(parent) = stack.last_mut() {
                        parent.1 = true;
                    }
                    if stack.len() > 1 {
                        let at = path(&stack, &name);
                        for (k, v) in attrs(&e)? {
                            current.push((format!("{at}@{k}"), v));
                        }
                    } else {
                        current = attrs(&e)?
                            .into_iter()
                            .map(|(k, v)| (format!("@{k}"), v))
                            .collect();
                    }
                    stack.push((name, false, String::new()));
                }
                Event::Empty(e) => {
                    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                    let at = path(&stack, &name);
                    for (k, v) in attrs(&e)? {
                        current.push((format!("{at}@{k}"), v));
                    }
                    current.push((at, String::new()));
                }
                Event::Text(t) => {
                    if let Some(top) = stack.last_mut() {
                        top.2.push_str(&t.decode().map_err(|e| e.to_string())?);
                    }
                }
                Event::GeneralRef(r) => {
                    let name = String::from_utf8_lossy(&r).into_owned();
                    let c = match name.as_str() {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "quot" => '"',
                        "apos" => '\'',
                        _ => r
                            .resolve_char_ref()
                            .map_err(|e| e.to_string())?
                            .ok_or_else(|| format!("unknown entity {name}"))?,
                    };
                    if let Some(top) = stack.last_mut() {
                        top.2.push(c);
                    }
                }
                Event::CData(t) => {
                    if let Some(top) = stack.last_mut() {
                        top.2
                            .push_str(std::str::from_utf8(&t).map_err(|e| e.to_string())?);
                    }
                }
                Event::End(_) => {
                    let (name, had_child, text) = stack.pop().ok_or("unbalanced")?;
                    match stack.len() {
                        0 => {}
                        1 => vehicles.push(std::mem::take(&mut current)),
                        _ if !had_child => current.push((path(&stack, &name), text)),
                        _ => {}
                    }
                }
                Event::Eof => break,
                Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
            }
            buf.clear();
        }
        if !stack.is_empty() {
            return Err("document ends inside an element".to_owned());
        }
        if root.is_empty() {
            return Err("no root element".to_owned());
        }
        Ok((root, vehicles))
    }

    async fn fetch_xml(sim: &SimHandle) -> reqwest::Response {
        fetch_at(sim, XML_FEED_PATH).await
    }

    #[tokio::test]
    async fn xml_route_needs_the_same_auth() {
        let sim = start_feed().await.expect("start");
        assert_refused_without_credentials(&sim, XML_FEED_PATH, &["wrong"]).await;
        let url = format!("{}{XML_FEED_PATH}", sim.base_url());
        let client = reqwest::Client::new();
        let r = fetch_xml(&sim).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-disposition"],
            "attachment; filename=\"inventory.xml\""
        );
        let r = client
            .head(&url)
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], XML_CONTENT_TYPE);
        for path in ["/feeds/inventory.XML", "/feeds/inventory.xml/x", "/feeds/"] {
            let r = client
                .get(format!("{}{path}", sim.base_url()))
                .basic_auth(USERNAME, Some(PASSWORD))
                .send()
                .await
                .expect("send");
            assert_eq!(r.status(), 404, "{path}");
        }
        let r = client
            .post(&url)
            .basic_auth(USERNAME, Some(PASSWORD))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 405);
    }

    #[tokio::test]
    async fn the_xml_document() {
        let sim = start_feed().await.expect("start");
        let r = fetch_xml(&sim).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], XML_CONTENT_TYPE);
        let body = r.bytes().await.expect("body");
        let text = std::str::from_utf8(&body).expect("utf-8");
        assert!(text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n"));
        assert!(text.contains("&amp;") && text.contains("&lt;") && text.contains("&gt;"));
        assert!(text.contains("<![CDATA["));
        assert!(text.contains("xsi:nil=\"true\""));

        let (root, vehicles) = parse_xml(&body).expect("well-formed XML");
        let units = inventory::honda_powersports();
        assert_eq!(vehicles.len(), units.len());
        assert_eq!(get(&root, "xmlns"), Some(XML_NAMESPACE));
        assert_eq!(get(&root, "count"), Some(units.len().to_string().as_str()));
        assert_eq!(get(&root, "dealer"), Some(inventory::HONDA_SAN_JOSE));
        assert_eq!(get(&root, "exported"), Some(XML_EXPORTED));

        let mut conditions = HashSet::new();
        let mut statuses = HashSet::new();
        let mut ids = HashSet::new();
        for (row, (x, v)) in vehicles.iter().zip(&units).enumerate() {
            let context = format!("row {row} ({})", v.vin);
            assert_eq!(get(x, "VIN"), Some(v.vin.as_str()), "{context}");
            assert_eq!(get(x, "StockNumber"), Some(v.stock_number.as_str()));
            assert_eq!(get(x, "ModelYear"), Some(v.year.to_string().as_str()));
            assert_eq!(get(x, "Model").map(str::trim_end), Some(v.model));
            assert_eq!(get(x, "Trim").map(str::trim_end), Some(v.trim));
            assert!(ids.insert(get(x, "@id").expect("id").to_owned()));
            conditions.insert(get(x, "Condition").expect("condition").to_owned());
            statuses.insert(get(x, "Status").expect("status").to_owned());
            assert_eq!(get(x, "Status"), Some(v.status.legacy()));
            let price = get(x, "Pricing/InternetPrice").expect("price");
            match v.internet_price {
                Some(p) => assert_eq!(price, inventory::money(p), "{context}"),
                None => assert_eq!(price, "Call for price", "{context}"),
            }
            match v.msrp {
                Some(m) => assert_eq!(get(x, "Pricing/MSRP"), Some(inventory::money(m).as_str())),
                None => {
                    assert_eq!(get(x, "Pricing/MSRP"), Some(""));
                    assert_eq!(get(x, "Pricing/MSRP@xsi:nil"), Some("true"));
                }
            }
            assert_eq!(
                get(x, "Pricing/DealerCost"),
                Some(inventory::money(v.dealer_cost).as_str())
            );
            assert_eq!(
                get(x, "Pricing/BookValue"),
                Some(inventory::money(v.book_value).as_str())
            );
            assert_eq!(get(x, "Odometer@unit"), Some("mi"));
            assert_eq!(
                get(x, "Odometer").map(|m| m.replace(',', "")),
                Some(v.odometer.to_string())
            );
            assert_eq!(
                get(x, "Colors/Exterior").map(str::trim_end),
                Some(v.ext_color)
            );
            assert_eq!(get(x, "Colors/Interior"), Some(v.int_color));
            assert_eq!(all(x, "Features/Feature"), v.features);
            assert_eq!(all(x, "Photos/Photo"), v.photos);
            let seqs: Vec<String> = (1..=v.photos.len()).map(|i| i.to_string()).collect();
            assert_eq!(all(x, "Photos/Photo@seq"), seqs);
            assert_eq!(
                get(x, "FuelEconomy@city").is_some(),
                v.city_mpg.is_some() && v.hwy_mpg.is_some()
            );
            assert_eq!(
                get(x, "ElectricRange"),
                v.electric_range.map(|r| r.to_string()).as_deref()
            );
            let expected = if comments_blank(row) {
                String::new()
            } else {
                comments(v)
            };
            assert_eq!(get(x, "Comments"), Some(expected.as_str()), "{context}");
            assert_eq!(
                get(x, "DateInStock").expect("date").is_empty(),
                v.status == Status::InTransit
            );
            assert!(get(x, "LastModified") < Some(XML_EXPORTED), "{context}");
            assert_eq!(
                get(x, "LastModified"),
                Some(inventory::iso_local(v.last_updated).as_str())
            );
        }
        assert_eq!(
            conditions,
            HashSet::from(["New", "Pre-Owned", "Certified Pre-Owned"].map(str::to_owned))
        );
        assert_eq!(
            statuses,
            HashSet::from(["In Stock", "In Transit", "Pending Sale", "Sold"].map(str::to_owned))
        );
        assert!(
            vehicles
                .iter()
                .any(|x| get(x, "Trim").is_some_and(|t| t.ends_with(' ')))
        );
        assert!(units.iter().any(|v| v.internet_price.is_none()));
        assert!(
            vehicles
                .iter()
                .any(|x| all(x, "Features/Feature").len() > 1)
        );
        assert!(vehicles.iter().any(|x| get(x, "Features") == Some("")));
        assert!(
            vehicles
                .iter()
                .any(|x| get(x, "DisplacementCC").is_some_and(|c| !c.is_empty()))
        );

        let f = sim.fixtures();
        assert_eq!(f["xml_path"], XML_FEED_PATH);
        assert_eq!(f["total_rows"], vehicles.len());
    }

    #[test]
    fn xml_text_is_escaped_and_round_trips() {
        let hostile = "a<b & \"c\" 'd' ]]> e>f \u{1}\u{2013}\u{1F697}\r\n\tz";
        let clean = "a<b & \"c\" 'd' ]]> e>f \u{2013}\u{1F697}\r\n\tz";
        let mut w = XmlWriter { out: String::new() };
        w.open(0, "Inventory", &[("note", hostile)]);
        w.open(1, "Vehicle", &[("id", "1")]);
        w.leaf(2, "Comments", &[], hostile);
        w.cdata_leaf(2, "Notes", hostile);
        w.leaf(2, "Empty", &[("x", "<&>")], "");
        w.close(1, "Vehicle");
        w.close(0, "Inventory");
        assert!(!w.out.contains('\u{1}'));
        assert!(w.out.contains("\u{1F697}&#13;\n\tz</Comments>"));
        assert!(w.out.contains("\u{1F697}&#13;&#10;&#9;z\""));
        assert!(
            w.out
                .contains("<Comments>a&lt;b &amp; \"c\" 'd' ]]&gt; e&gt;f")
        );
        assert!(
            w.out
                .contains("note=\"a&lt;b &amp; &quot;c&quot; &apos;d&apos;")
        );
        let (root, vehicles) = parse_xml(w.out.as_bytes()).expect("well-formed");
        assert_eq!(get(&root, "note"), Some(clean));
        assert_eq!(get(&vehicles[0], "Comments"), Some(clean));
        assert_eq!(get(&vehicles[0], "Notes"), Some(clean));
        assert_eq!(get(&vehicles[0], "Empty@x"), Some("<&>"));
        assert_eq!(get(&vehicles[0], "Empty"), Some(""));
    }

    #[test]
    fn xml_for_any_inventory_is_well_formed() {
        let toyota = inventory::toyota_group();
        let (root, vehicles) = parse_xml(xml_document(&toyota).as_bytes()).expect("well-formed");
        assert_eq!(vehicles.len(), toyota.len());
        assert_eq!(get(&root, "dealer"), Some(inventory::TOYOTA_SF));
        let (_, none) = parse_xml(xml_document(&[]).as_bytes()).expect("well-formed");
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn xml_route_misbehaves_with_the_controls() {
        let sim = start_feed().await.expect("start");
        sim.set_mode(Mode::Fail, 0);
        let r = fetch_xml(&sim).await;
        assert_eq!(r.status(), 500);
        assert!(
            r.headers()["content-type"]
                .to_str()
                .expect("ct")
                .starts_with("text/html")
        );
        sim.set_mode(Mode::Garbage, 0);
        let r = fetch_xml(&sim).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], XML_CONTENT_TYPE);
        let garbage = r.bytes().await.expect("body");
        assert!(garbage.starts_with(b"<?xml"), "looks like the export");
        assert!(parse_xml(&garbage).is_err());
        sim.set_mode(Mode::Huge, 0);
        let r = fetch_xml(&sim).await;
        assert_eq!(r.headers()["content-type"], XML_CONTENT_TYPE);
        let body = r.bytes().await.expect("body");
        assert!(body.len() >= sim::HUGE_BYTES);
        let (root, vehicles) = parse_xml(&body).expect("well-formed");
        assert!(vehicles.len() > 1000);
        let count = vehicles.len().to_string();
        assert_eq!(get(&root, "count"), Some(count.as_str()));
        sim.set_mode(Mode::Slow, 100);
        let started = std::time::Instant::now();
        assert_eq!(fetch_xml(&sim).await.status(), 200);
        assert!(started.elapsed() >= std::time::Duration::from_millis(100));
        sim.set_mode(Mode::Normal, 0);
        let body = fetch_xml(&sim).await.bytes().await.expect("body");
        assert!(parse_xml(&body).is_ok());

        let received = sim.received();
        assert_eq!(received.len(), 5);
        assert!(
            received
                .iter()
                .all(|r| r["path"] == XML_FEED_PATH && r["method"] == "GET")
        );
        assert!(
            received[0]["headers"]["authorization"]
                .as_str()
                .is_some_and(|a| a.starts_with("Basic "))
        );
        sim.clear_received();
        assert_eq!(
            fetch(&sim).await.status(),
            200,
            "the CSV route is unchanged"
        );
        assert_eq!(sim.received()[0]["path"], FEED_PATH);
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
