//! Legacy numbers are read exactly or not at all (docs/mappings.md §Helpers for legacy formats).
//!
//! **Autohaus Nordkap**, a stand-in written here, lists 40 units over REST the way a German
//! DMS exported to a US gateway does: prices as `"45.999,00"` (thousands dot, decimal comma),
//! odometers as `"12.345 mi"` (thousands dot), a few units priced the US way (`"12,499"`,
//! which its second export path writes), and tractors whose odometer field holds engine hours
//! (`"1.234 Std."`). One dealer maps it naming the formats (`dollars("1.234,56")`,
//! `miles("1.234")`); another maps it as a newcomer would, with the default helpers. The first
//! must serve every unit it can read with exactly Nordkap's numbers; the second must serve only
//! units whose numbers it reads exactly, skipping and counting the rest — never a different
//! number. The oracle is Nordkap's own integers, not its texts.

mod common;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use common::Gateway;
use common::http_server::{Answer, HttpServer, Seen};
use serde_json::{Value, json};

#[derive(Debug, Clone)]
struct Unit {
    stock: String,
    vin: String,
    /// Whole dollars.
    price: u64,
    /// Miles; `None` for a tractor (its field holds hours).
    miles: Option<u64>,
    /// Priced by the US-style export path: `"12,499"`.
    us_price: bool,
}

fn units() -> Vec<Unit> {
    (0..40u64)
        .map(|i| Unit {
            stock: format!("NK-{:03}", 500 + i),
            // 17 characters, none of I, O, Q.
            vin: format!("WVWZZZ3C{:09}", 4_100_000 + i * 53),
            // From 4,999 to well past 100,000: one, two and three thousands groups.
            price: 4_999 + i * i * 97 + i * 1_001,
            // Under a thousand for every fourth unit, else from 1,000 to 141,000.
            miles: (i % 9 != 4).then_some(if i % 4 == 1 {
                i * 23
            } else {
                1_000 + i * 3_217 % 140_000
            }),
            us_price: i % 6 == 1,
        })
        .collect()
}

static UNITS: LazyLock<Vec<Unit>> = LazyLock::new(units);

/// `n` with `sep` between groups of three digits.
fn grouped(n: u64, sep: char) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(sep);
        }
        out.push(c);
    }
    out
}

impl Unit {
    fn price_text(&self) -> String {
        if self.us_price {
            grouped(self.price, ',')
        } else {
            format!("{},00", grouped(self.price, '.'))
        }
    }

    fn odometer_text(&self) -> String {
        match self.miles {
            Some(m) => format!("{} mi", grouped(m, '.')),
            None => format!("{} Std.", grouped(1_000 + self.price % 3_000, '.')),
        }
    }

    fn json(&self) -> Value {
        json!({
            "stockNo": self.stock, "vin": self.vin, "make": "Volkswagen", "yr": 2021,
            "preis": self.price_text(), "km": self.odometer_text(),
        })
    }

    /// Whether the default helpers read both numbers exactly: a US-style price, and an
    /// odometer without a `.` (below 1,000 miles). Every other text is refused.
    fn read_by_default(&self) -> bool {
        self.us_price && self.miles.is_some_and(|m| m < 1_000)
    }

    /// Whether the named formats read it: every unit but a tractor (hours are no miles) and a
    /// US-style price (`"12,499"` has three decimals under `"1.234,56"`: refused, not 12).
    fn read_by_named(&self) -> bool {
        self.miles.is_some() && !self.us_price
    }
}

fn nordkap(_seen: Seen) -> Answer {
    let body = json!({ "units": UNITS.iter().map(Unit::json).collect::<Vec<_>>() });
    (200, "application/json", body.to_string().into_bytes())
}

const UPSTREAMS: &str = "nordkap:
  kind: rest
  base_url: ${NORDKAP_URL}
  timeouts: { connect: 1s, request: 2s }
";

fn search_yaml(price: &str, miles: &str) -> String {
    format!(
        "skill: inventory.search\nupstream: nordkap\nscan_cache: 0s\nrequest:\n  path: /units\nresponse:\n  items: .units\n  item: |\n    {{\n      stock: .stockNo, vin: .vin, make: .make, year: .yr, status: \"available\",\n      price: (.preis | {price}), mileage: (.km | {miles})\n    }} | compact\n"
    )
}

struct Nordkap {
    gw: Gateway,
    _server: HttpServer,
}

async fn start_nordkap() -> Nordkap {
    let server = HttpServer::start(nordkap).await;
    let dealers: Vec<common::TestDealer> = [
        (
            "named",
            search_yaml("dollars(\"1.234,56\")", "miles(\"1.234\")"),
        ),
        ("default", search_yaml("dollars", "miles")),
    ]
    .into_iter()
    .map(|(id, search)| {
        common::TestDealer::new(
            id,
            vec![
                ("upstreams.yaml", UPSTREAMS.to_owned()),
                ("inventory.search.yaml", search),
            ],
        )
    })
    .collect();
    let gw = common::start_dealers(&dealers, &[("NORDKAP_URL", server.url())]).await;
    Nordkap {
        gw,
        _server: server,
    }
}

static NORDKAP: LazyLock<Nordkap> = LazyLock::new(|| common::RUNTIME.block_on(start_nordkap()));

fn run<T>(body: impl std::future::Future<Output = T>) -> T {
    common::run_with(&NORDKAP, body)
}

/// Every listing the dealer serves, by stock: (price, mileage).
async fn served(dealer: &str) -> BTreeMap<String, (Option<u64>, Option<u64>)> {
    let request = json!({ "type": "inventory.search.request", "pagination": { "limit": 100 } });
    let reply = NORDKAP
        .gw
        .send(&format!("/dealers/{dealer}/a2a"), request)
        .await;
    let payload = reply.payload();
    common::schema::assert_reply_valid(payload);
    let data = &payload["data"];
    let vehicles = data["vehicles"].as_array().expect("vehicles");
    assert_eq!(
        data["total"].as_u64(),
        Some(vehicles.len() as u64),
        "{data}"
    );
    vehicles
        .iter()
        .map(|v| {
            (
                v["stock"].as_str().expect("stock").to_owned(),
                (v["price"].as_u64(), v["mileage"].as_u64()),
            )
        })
        .collect()
}

async fn skipped_records() -> u64 {
    let text = NORDKAP.gw.metrics().await;
    text.lines()
        .filter(|l| {
            l.starts_with("aap_gateway_mapping_events_total") && l.contains("record_skipped")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The oracle: the units `read` says a mapping reads, with Nordkap's own numbers.
fn oracle(read: fn(&Unit) -> bool) -> BTreeMap<String, (Option<u64>, Option<u64>)> {
    UNITS
        .iter()
        .filter(|u| read(u))
        .map(|u| (u.stock.clone(), (Some(u.price), u.miles)))
        .collect()
}

/// One test: the `record_skipped` counter is the gateway's, shared by both dealers.
#[test]
fn numbers_are_served_exactly_or_the_unit_is_skipped_and_counted() {
    run(async {
        // Named formats: Nordkap's own numbers for every unit they read.
        let before = skipped_records().await;
        let got = served("named").await;
        let want = oracle(Unit::read_by_named);
        assert!(want.len() >= 25, "the fixture keeps most units readable");
        assert_eq!(got, want);
        let skipped = skipped_records().await - before;
        assert_eq!(skipped, (UNITS.len() - want.len()) as u64);

        // The default helpers: never a different number; every unit refused is counted.
        let before = skipped_records().await;
        let got = served("default").await;
        let want = oracle(Unit::read_by_default);
        assert!(!want.is_empty(), "some units are written the US way");
        assert_eq!(got, want);
        let skipped = skipped_records().await - before;
        assert_eq!(skipped, (UNITS.len() - want.len()) as u64);
    });
}
