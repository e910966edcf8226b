//! Compressed exports end to end (issue 39, part 1): the real gateway in-process, in front of a
//! feed host of the test's own on 127.0.0.1:0 serving files as vendors' buckets do.
//!
//! - A nested-JSON export served as `inventory.json.gz`, `Content-Type: application/gzip`, no
//!   `Content-Encoding` (it never loaded: "body is not JSON"), next to the same bytes sent with
//!   `Content-Encoding: gzip` (decoded by the HTTP client, as before).
//! - A zip archive of two files, the units a Windows-1252 CSV in `export/`, read by the member
//!   the mapping names; a one-file archive read without naming it; a two-file archive without
//!   `unpack.member` refused with the members listed.
//! - Decompression bombs (ratio, size) refused with the file and the cap named, while the copy
//!   loaded before keeps serving.
//!
//! The data is written unlike `sim/`'s: RV and marine units, prices as "12,499" strings, engine
//! hours instead of miles, options nested in groups, a unit without identifiers, Latin-1 text.

mod common;
mod feed_support;

use aap_gateway::engine::proxy::Transport;
use bytes::Bytes;
use common::Gateway;
use feed_support::{Export, FeedHost, feed, gzip, search, start_on, zip};
use serde_json::{Value, json};

/// A marine and RV dealer's nested export: four units, one of them sold, one without
/// identifiers (skipped), a boat with a hull number instead of a VIN, prices as strings with
/// thousands separators, engine hours instead of miles.
const NESTED_JSON: &str = r#"{
  "export": {
    "generated": "2026-12-01T06:00:00Z",
    "units": [
      { "ids": { "vin": "4UZAB2DT5PCNA0001", "stock": "RV-101" },
        "spec": { "year": "2021", "make": "Winnebago", "model": "View 24D", "type": "Motorhome",
                  "engine_hours": "1,250 hrs" },
        "pricing": { "asking": "112,499", "currency": "USD" },
        "options": [ { "group": "Power", "items": ["Solar 200W", "Onan generator"] },
                     { "group": "Comfort", "items": ["Heated tanks"] } ],
        "state": "ON LOT" },
      { "ids": { "hin": "YAM12345C707", "stock": "M-7" },
        "spec": { "year": "2019", "make": "Yamaha", "model": "242X E-Series", "type": "Boat",
                  "engine_hours": "310" },
        "pricing": { "asking": "12,499" },
        "options": [],
        "state": "ON LOT" },
      { "spec": { "year": "twenty-twenty", "make": "Unknown" }, "state": "ON LOT" },
      { "ids": { "vin": "4UZAB2DT5PCNA0003", "stock": "RV-103" },
        "spec": { "year": "2018", "make": "Jayco", "model": "Redhawk 26XD", "type": "Motorhome",
                  "engine_hours": "2,010 hrs" },
        "pricing": { "asking": "64,900" },
        "state": "SOLD" }
    ]
  }
}"#;

const NESTED_FEED_YAML: &str = r#"upstream: feed
request: { method: GET, path: /exports/inventory.json.gz }
format: json
items: .export.units
tables:
  type_in: { Motorhome: rv, Boat: other }
  state_in: { ON LOT: available, SOLD: sold }
item: |
  {
    vin: (.ids.vin | nonempty),
    vehicle_id: (.ids.vin // .ids.hin | nonempty),
    stock: (.ids.stock | nonempty),
    dealer_id: $dealer.id,
    vehicle_type: (.spec.type | lookup($tables.type_in)),
    year: (.spec.year | int),
    make: (.spec.make | nonempty),
    model: (.spec.model | nonempty),
    condition: "used",
    status: (.state | lookup($tables.state_in)),
    price: (.pricing.asking | dollars),
    features: [(.options // [])[] | .items[]],
    other_attributes: { engine_hours: (.spec.engine_hours | split(" ")[0] | dollars) }
  } | if .vehicle_id == null then error("a unit without a VIN or HIN") else compact end
"#;

/// Units of a Canadian dealer's DMS export, Windows-1252 (é = 0xE9), semicolons inside quoted
/// fields.
fn units_csv() -> Vec<u8> {
    let text = "VIN,Stock,Year,Make,Model,Price,Status,Couleur\r\n\
        2T3P1RFV8MC000001,Q-1,2021,Toyota,RAV4,\"31,200\",En stock,Bleu \u{e9}lectrique\r\n\
        2T3P1RFV8MC000002,Q-2,2020,Toyota,RAV4,\"28,950\",En stock,\"Gris; m\u{e9}tal\"\r\n\
        2T3P1RFV8MC000003,Q-3,2019,Toyota,Corolla,\"17,400\",Vendu,Noir\r\n";
    let (bytes, _, lossy) = encoding_rs::WINDOWS_1252.encode(text);
    assert!(!lossy);
    bytes.into_owned()
}

const UNITS_FEED_YAML: &str = r#"upstream: feed
request: { method: GET, path: /exports/inventory.zip }
format: csv
charset: windows-1252
unpack: { member: export/units.csv }
tables:
  status_in: { En stock: available, Vendu: sold }
item: |
  {
    vin: (.VIN | nonempty), stock: (.Stock | nonempty), dealer_id: $dealer.id,
    year: (.Year | int), make: (.Make | nonempty), model: (.Model | nonempty),
    condition: "used", status: (.Status | lookup($tables.status_in)),
    price: (.Price | dollars), exterior_color: (.Couleur | nonempty)
  } | compact
"#;

/// A plain CSV export of `rows` units (for the bomb cases: what loads first).
fn plain_csv(rows: usize) -> String {
    let mut csv = "VIN,Stock,Year,Make,Model,Price,Status,Couleur\n".to_owned();
    for i in 0..rows {
        csv.push_str(&format!(
            "1HGCM8263{i:08},S{i},2022,Honda,Accord,\"{},{:03}\",En stock,Rouge\n",
            20 + i % 9,
            i % 1000
        ));
    }
    csv
}

/// What fetching the dealer's feed now gives: the vehicles it maps, or the error, as text.
async fn fetch(gw: &Gateway, dealer: &str) -> Result<usize, String> {
    let feed = feed(gw, dealer);
    feed.fetch(Transport::Live(&feed.upstream))
        .await
        .map(|snapshot| snapshot.len())
        .map_err(|e| e.to_string())
}

fn vins(page: &Value) -> Vec<&str> {
    field(page, "vin")
}

fn stocks(page: &Value) -> Vec<&str> {
    field(page, "stock")
}

fn field<'p>(page: &'p Value, name: &str) -> Vec<&'p str> {
    page["vehicles"]
        .as_array()
        .map(|v| v.iter().filter_map(|v| v[name].as_str()).collect())
        .unwrap_or_default()
}

// =============================================================================================
// gzip

#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_json_export_served_as_application_gzip_loads_like_a_content_encoded_one() {
    let encoded_yaml = NESTED_FEED_YAML.replace("inventory.json.gz", "inventory.json");
    let setup = start_on(
        FeedHost::start().await,
        &[
            ("bucket", NESTED_FEED_YAML.to_owned()),
            ("encoded", encoded_yaml),
        ],
    )
    .await;
    let packed = Bytes::from(gzip(NESTED_JSON.as_bytes()));
    setup.host.serve(
        "/exports/inventory.json.gz",
        Export {
            body: packed.clone(),
            content_type: "application/gzip",
            ..Export::default()
        },
    );
    setup.host.serve(
        "/exports/inventory.json",
        Export {
            body: packed,
            content_type: "application/json",
            content_encoding: Some("gzip"),
            ..Export::default()
        },
    );
    for dealer in ["bucket", "encoded"] {
        assert_eq!(
            fetch(&setup.gw, dealer).await,
            Ok(3),
            "{dealer}: 3 mapped, 1 skipped"
        );
        let page = search(
            &setup.gw,
            dealer,
            json!({ "sort": { "field": "price", "order": "asc" } }),
        )
        .await;
        // The sold unit is not listed; the unit without identifiers is skipped.
        assert_eq!(stocks(&page), ["M-7", "RV-101"], "{dealer}: {page}");
        assert_eq!(page["vehicles"][0]["vehicle_id"], "YAM12345C707", "{page}");
        let rv = &page["vehicles"][1];
        assert_eq!(rv["price"], 112_499, "{dealer}: {rv}");
        assert_eq!(rv["other_attributes"]["engine_hours"], 1250, "{rv}");
        assert_eq!(
            rv["features"],
            json!(["Solar 200W", "Onan generator", "Heated tanks"])
        );
        assert_eq!(page["vehicles"][0]["price"], 12_499, "{page}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_csv_export_is_unpacked_as_it_streams() {
    // A CSV feed without `items` is read row by row as it arrives: the gzip file too.
    let yaml = UNITS_FEED_YAML
        .replace("inventory.zip", "units.csv.gz")
        .replace("unpack: { member: export/units.csv }\n", "");
    let setup = start_on(FeedHost::start().await, &[("rows", yaml)]).await;
    setup.host.serve(
        "/exports/units.csv.gz",
        Export {
            body: Bytes::from(gzip(&units_csv())),
            content_type: "application/octet-stream",
            ..Export::default()
        },
    );
    let page = search(&setup.gw, "rows", json!({})).await;
    assert_eq!(page["total"], 2, "{page}");
    let colors: Vec<&str> = page["vehicles"]
        .as_array()
        .expect("vehicles")
        .iter()
        .filter_map(|v| v["exterior_color"].as_str())
        .collect();
    assert_eq!(colors, ["Bleu électrique", "Gris; métal"], "{page}");
}

// =============================================================================================
// zip

#[tokio::test(flavor = "multi_thread")]
async fn a_zip_export_is_read_by_the_member_the_mapping_names() {
    let only_yaml = UNITS_FEED_YAML
        .replace("inventory.zip", "single.zip")
        .replace("unpack: { member: export/units.csv }\n", "");
    let unnamed_yaml = UNITS_FEED_YAML.replace("unpack: { member: export/units.csv }\n", "");
    let setup = start_on(
        FeedHost::start().await,
        &[
            ("named", UNITS_FEED_YAML.to_owned()),
            ("only", only_yaml),
            ("unnamed", unnamed_yaml),
        ],
    )
    .await;
    let photos = b"Stock;URL\nQ-1;https://cdn.example.com/q1.jpg\n";
    // An archive tool's order: the photos first, the units second.
    let archive = zip(&[
        ("export/", b""),
        ("export/photos.csv", photos),
        ("export/units.csv", &units_csv()),
    ]);
    setup.host.serve(
        "/exports/inventory.zip",
        Export {
            body: Bytes::from(archive),
            content_type: "application/zip",
            ..Export::default()
        },
    );
    setup.host.serve(
        "/exports/single.zip",
        Export {
            body: Bytes::from(zip(&[("Units Export 2026-12-01.csv", &units_csv())])),
            content_type: "application/octet-stream",
            ..Export::default()
        },
    );
    for dealer in ["named", "only"] {
        let page = search(
            &setup.gw,
            dealer,
            json!({ "sort": { "field": "price", "order": "desc" } }),
        )
        .await;
        assert_eq!(
            vins(&page),
            ["2T3P1RFV8MC000001", "2T3P1RFV8MC000002"],
            "{dealer}: {page}"
        );
        assert_eq!(page["vehicles"][0]["price"], 31_200, "{page}");
    }
    let error = fetch(&setup.gw, "unnamed").await.expect_err("two files");
    assert!(
        error.contains(
            "the zip archive holds 2 files (`export/photos.csv`, `export/units.csv`); name the \
             one to read in `unpack.member`"
        ),
        "{error}"
    );
    // The cause stays in the log: the buyer gets a retryable internal error.
    let reply = setup
        .gw
        .send(
            "/dealers/unnamed/a2a",
            json!({ "type": "inventory.search.request" }),
        )
        .await;
    assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
    assert!(!reply.text.contains("unpack"), "{}", reply.text);

    // A member the archive lacks is named, with what it holds.
    setup.host.edit("/exports/inventory.zip", |export| {
        export.body = Bytes::from(zip(&[("units.csv", &units_csv())]));
    });
    let error = fetch(&setup.gw, "named").await.expect_err("no such member");
    assert!(
        error.contains(
            "the zip archive has no member `export/units.csv` (`unpack.member`); it holds \
             `units.csv`"
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_labelled_zip_that_is_not_one_is_refused() {
    let setup = start_on(
        FeedHost::start().await,
        &[("labelled", UNITS_FEED_YAML.to_owned())],
    )
    .await;
    setup.host.serve(
        "/exports/inventory.zip",
        Export {
            body: Bytes::from(units_csv()),
            content_type: "application/zip",
            ..Export::default()
        },
    );
    let error = fetch(&setup.gw, "labelled").await.expect_err("not a zip");
    assert!(
        error.contains("the Content-Type says zip but the body is not a zip archive"),
        "{error}"
    );
}

// =============================================================================================
// Bombs

#[tokio::test(flavor = "multi_thread")]
async fn decompression_bombs_are_refused_and_the_previous_copy_keeps_serving() {
    let gzip_yaml = UNITS_FEED_YAML
        .replace("inventory.zip", "units.csv.gz")
        .replace("charset: windows-1252\n", "")
        .replace(
            "unpack: { member: export/units.csv }",
            "unpack: { max_bytes: 1000000000 }",
        );
    let zip_yaml = UNITS_FEED_YAML
        .replace("charset: windows-1252\n", "")
        .replace(
            "unpack: { member: export/units.csv }",
            "unpack: { member: export/units.csv, max_bytes: 1000000000 }",
        );
    let small_yaml = gzip_yaml
        .replace("max_bytes: 1000000000", "max_bytes: 2000000")
        .replace("units.csv.gz", "big.csv.gz");
    let setup = start_on(
        FeedHost::start().await,
        &[
            ("gz", gzip_yaml),
            ("zipped", zip_yaml),
            ("small", small_yaml),
        ],
    )
    .await;
    let first = plain_csv(40);
    setup.host.serve(
        "/exports/units.csv.gz",
        Export {
            body: Bytes::from(gzip(first.as_bytes())),
            content_type: "application/gzip",
            ..Export::default()
        },
    );
    setup.host.serve(
        "/exports/inventory.zip",
        Export {
            body: Bytes::from(zip(&[("export/units.csv", first.as_bytes())])),
            content_type: "application/zip",
            ..Export::default()
        },
    );
    for dealer in ["gz", "zipped"] {
        let page = search(&setup.gw, dealer, json!({})).await;
        assert_eq!(page["total"], 40, "{dealer}: {page}");
    }

    // 16 MiB of one repeated row packs about a thousand times: the ratio cap (100) trips a
    // couple of MB out, far below the size cap.
    let row = "1HGCM826300000000,S0,2022,Honda,Accord,\"20,000\",En stock,Rouge\n";
    let mut bomb = plain_csv(1);
    while bomb.len() < 16 << 20 {
        bomb.push_str(row);
    }
    let packed_bomb = gzip(bomb.as_bytes());
    assert!(
        packed_bomb.len() * 300 < bomb.len(),
        "{}",
        packed_bomb.len()
    );
    setup.host.edit("/exports/units.csv.gz", |export| {
        export.body = Bytes::from(packed_bomb.clone());
    });
    setup.host.edit("/exports/inventory.zip", |export| {
        export.body = Bytes::from(zip(&[("export/units.csv", bomb.as_bytes())]));
    });
    for (dealer, what) in [
        ("gz", "the gzip file"),
        ("zipped", "zip member `export/units.csv`"),
    ] {
        let error = fetch(&setup.gw, dealer).await.expect_err("a bomb");
        assert!(
            error.contains(&format!(
                "{what} unpacks to more than 100 times its packed size"
            )) && error.contains("`unpack.max_ratio`): refused as a decompression bomb")
                && error.contains(&format!("{dealer}/feed.yaml")),
            "{error}"
        );
        // The refresh fails; the copy loaded before is still served.
        feed(&setup.gw, dealer).refresh_now().await;
        let page = search(&setup.gw, dealer, json!({})).await;
        assert_eq!(page["total"], 40, "{dealer}: {page}");
    }

    // A document of an honest ratio past `max_bytes` (2 MB here): refused by size.
    let big = plain_csv(40_000);
    assert!(big.len() > 2_000_000);
    let packed = gzip(big.as_bytes());
    assert!(packed.len() * 100 > big.len(), "an honest ratio");
    setup.host.serve(
        "/exports/big.csv.gz",
        Export {
            body: Bytes::from(packed),
            content_type: "application/gzip",
            ..Export::default()
        },
    );
    let error = fetch(&setup.gw, "small").await.expect_err("too big");
    assert!(
        error.contains("the gzip file unpacks to more than 2000000 bytes (`unpack.max_bytes`)"),
        "{error}"
    );
}
