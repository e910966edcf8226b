//! Issue 37 item 6: `inventory.vehicle` by an identifier the dealer's detail call cannot take.
//! Quarry's DMS has a detail endpoint by VIN only (`/detail/{vin}`, with the options list the
//! stock listing lacks) and a stock listing paged by 4 that lists sold and held units. A buyer
//! quoting the stock number from the window sticker is answered through the search mapping's
//! scan: the unit's VIN, then the detail call; a unit Quarry lists as sold or held is
//! `VEHICLE_UNAVAILABLE`, one it does not list `VEHICLE_NOT_FOUND` — and a scan that cannot be
//! whole is refused, never read as "not found". A second dealer has no detail call at all
//! (`derive: search`). The oracle is the stand-in's own table.

mod common;

use common::Gateway;
use common::http_server::{HttpServer, Seen};
use serde_json::{Value, json};

/// Quarry's units: (stock, vin, state). Stock numbers as the DMS writes them, a lower-case one
/// and one with a space among them.
const UNITS: &[(&str, &str, &str)] = &[
    ("Q-100", "1FTFW1E50PFA00100", "LOT"),
    ("Q-101", "1FTFW1E50PFA00101", "SOLD"),
    ("q-102", "1FTFW1E50PFA00102", "LOT"),
    ("Q 103", "1FTFW1E50PFA00103", "HOLD"),
    ("Q-104", "1FTFW1E50PFA00104", "LOT"),
    ("Q-105", "1FTFW1E50PFA00105", "LOT"),
    ("Q-106", "1FTFW1E50PFA00106", "SOLD"),
    ("Q-107", "1FTFW1E50PFA00107", "LOT"),
    ("Q-108", "1FTFW1E50PFA00108", "LOT"),
];

fn row(i: usize) -> Value {
    let (stock, vin, state) = UNITS[i];
    json!({ "stk": stock, "vin": vin, "state": state, "yr": 2021 + (i % 3), "mk": "Ford",
            "mdl": "F-150", "px": 30000 + 1000 * i })
}

/// `/stock?offset=&limit=` pages of 4 with the whole count; `lie` claims two units more than
/// it has (a scan that can never be whole). `/detail/{vin}` by VIN only.
fn quarry(seen: Seen, lie: bool) -> (u16, &'static str, Vec<u8>) {
    let json = |v: Value| (200, "application/json", v.to_string().into_bytes());
    if seen.path == "/stock" {
        let offset: usize = seen
            .param("offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or(0);
        let rows: Vec<Value> = (offset..UNITS.len()).take(4).map(row).collect();
        let total = UNITS.len() + if lie { 2 } else { 0 };
        return json(json!({ "count": total, "rows": rows }));
    }
    if let Some(vin) = seen.path.strip_prefix("/detail/") {
        return match UNITS.iter().position(|u| u.1 == vin) {
            Some(i) => {
                let mut detail = row(i);
                detail["options"] = json!(["Tow package", "Bed liner"]);
                json(detail)
            }
            None => (404, "application/json", b"{\"error\":\"no unit\"}".to_vec()),
        };
    }
    (404, "application/json", b"{}".to_vec())
}

const UPSTREAMS: &str =
    "quarry:\n  kind: rest\n  base_url: ${QUARRY_URL}\n  timeouts: { connect: 1s, request: 2s }\n";

const ITEM: &str = r#"{ stock: .stk, vin: .vin, year: .yr, make: .mk, model: .mdl, condition: "used",
      status: ({LOT: "available", SOLD: "sold", HOLD: "held"}[.state]), price: .px }"#;

fn search_yaml() -> String {
    format!(
        "skill: inventory.search\nupstream: quarry\nscan_cache: 0s\nrequest:\n  path: /stock\n  pagination: {{ style: offset, offset: offset, limit: limit, max_size: 4 }}\nresponse:\n  items: .rows\n  total: .count\n  item: |\n    {ITEM}\n"
    )
}

fn vehicle_yaml() -> String {
    format!(
        "skill: inventory.vehicle\nupstream: quarry\ntakes: [vin]\nrequest:\n  path: /detail/{{{{ request.vin }}}}\nresponse:\n  jq: |\n    {ITEM} + {{ features: .options }}\nerrors:\n  - when: {{ status: 404 }}\n    code: VEHICLE_NOT_FOUND\n"
    )
}

struct Quarry {
    gw: Gateway,
    server: HttpServer,
}

async fn start(lie: bool) -> Quarry {
    let server = HttpServer::start(move |seen| quarry(seen, lie)).await;
    let dealers: Vec<common::TestDealer> = [
        ("detail", vehicle_yaml()),
        (
            "listing",
            "skill: inventory.vehicle\nderive: search\n".to_owned(),
        ),
    ]
    .into_iter()
    .map(|(id, vehicle)| {
        common::TestDealer::new(
            id,
            vec![
                ("upstreams.yaml", UPSTREAMS.to_owned()),
                ("inventory.search.yaml", search_yaml()),
                ("inventory.vehicle.yaml", vehicle),
            ],
        )
    })
    .collect();
    let gw = common::start_dealers(&dealers, &[("QUARRY_URL", server.url())]).await;
    Quarry { gw, server }
}

impl Quarry {
    async fn vehicle(&self, dealer: &str, by: Value) -> common::Reply {
        let mut data = json!({ "type": "inventory.vehicle.request" });
        for (k, v) in by.as_object().expect("object") {
            data[k] = v.clone();
        }
        self.gw.send(&format!("/dealers/{dealer}/a2a"), data).await
    }

    fn calls(&self, prefix: &str) -> usize {
        self.server
            .seen()
            .iter()
            .filter(|s| s.path.starts_with(prefix))
            .count()
    }
}

/// What AAP says of each unit, from the stand-in's table: servable or not.
fn oracle(stock: &str) -> Option<&'static str> {
    UNITS.iter().find(|u| u.0 == stock).map(|u| {
        if u.2 == "LOT" {
            "available"
        } else {
            "unavailable"
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stock_number_is_answered_by_the_vin_only_detail_call() {
    let q = start(false).await;
    let reply = q.vehicle("detail", json!({ "stock": "Q-105" })).await;
    let data = &reply.payload()["data"];
    assert_eq!(data["vin"], "1FTFW1E50PFA00105", "{}", reply.text);
    assert_eq!(
        data["features"],
        json!(["Tow package", "Bed liner"]),
        "the detail call's record, not the listing: {}",
        reply.text
    );
    assert_eq!(q.calls("/detail/1FTFW1E50PFA00105"), 1);
    assert_eq!(q.calls("/stock"), 3, "the whole scan: 9 units by 4");

    // By VIN the detail call is asked directly: no scan.
    let before = q.calls("/stock");
    let reply = q
        .vehicle("detail", json!({ "vin": "1FTFW1E50PFA00107" }))
        .await;
    assert_eq!(reply.payload()["data"]["stock"], "Q-107", "{}", reply.text);
    assert_eq!(q.calls("/stock"), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_stock_number_agrees_with_the_dms_table() {
    let q = start(false).await;
    let mut asked: Vec<&str> = UNITS.iter().map(|u| u.0).collect();
    // Not Quarry's: a case variant, a trimmed variant, an unknown one.
    asked.extend(["Q-102", "Q103", "Z-999"]);
    for dealer in ["detail", "listing"] {
        for stock in &asked {
            let reply = q.vehicle(dealer, json!({ "stock": stock })).await;
            match oracle(stock) {
                Some("available") => {
                    assert_eq!(
                        reply.payload()["data"]["stock"],
                        *stock,
                        "{dealer} {stock}: {}",
                        reply.text
                    );
                    assert_eq!(reply.payload()["data"]["status"], "available");
                }
                Some(_) => assert_eq!(
                    reply.aap_code(),
                    "VEHICLE_UNAVAILABLE",
                    "{dealer} {stock}: {}",
                    reply.text
                ),
                None => assert_eq!(
                    reply.aap_code(),
                    "VEHICLE_NOT_FOUND",
                    "{dealer} {stock}: {}",
                    reply.text
                ),
            }
        }
    }
    // The listing-only dealer never calls a detail endpoint.
    let listing_only = q.vehicle("listing", json!({ "stock": "Q-100" })).await;
    assert!(listing_only.payload()["data"].get("features").is_none());
}

/// Quarry's count says 11 while it lists 9: the scan cannot be whole, so an unknown stock
/// number is refused as incomplete — "not found" would be a guess.
#[tokio::test(flavor = "multi_thread")]
async fn a_scan_that_cannot_be_whole_never_answers_not_found() {
    let q = start(true).await;
    let reply = q.vehicle("detail", json!({ "stock": "Z-999" })).await;
    assert_ne!(reply.aap_code(), "VEHICLE_NOT_FOUND", "{}", reply.text);
    assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
    let metrics = q.gw.metrics().await;
    assert!(metrics.contains("incomplete_"), "counted: {metrics}");
}
