//! Exports in more than one file (issue 39, part 1b): a second file joined to the units by a
//! key — photos by stock number from another member of the same zip archive (a row per photo,
//! `many: true`), options by VIN from a second URL (a row per unit, one VIN written twice) —
//! served by a feed host of the test's own on 127.0.0.1:0 to the real gateway in-process; and
//! `check` locating a join that names neither source.

mod common;
mod feed_support;

use std::collections::BTreeMap;

use bytes::Bytes;
use feed_support::{Export, FeedHost, feed_folder, mapping_events, start_feeds, write_config, zip};
use serde_json::{Value, json};

/// The units: a semicolon export in Windows-1252, header names with spaces and `#`.
const UNITS: &str = "Stock #;VIN;Année;Marque;Modèle;Statut;Prix TTC\r\n\
    RV 101;1FDXE4FS8KDC10001;2019;Fleetwood;Bounder 35K;Disponible;\"129.900,00 €\"\r\n\
    RV 102;1FDXE4FS8KDC10002;2021;Winnebago;View 24D;Disponible;\"98.500,00 €\"\r\n\
    RV 103;1FDXE4FS8KDC10003;2018;Thor;Chateau 22E;Disponible;\"61.250,00 €\"\r\n\
    RV 104;1fdxe4fs8kdc10004;2022;Jayco;Greyhawk 29MV;Disponible;\"112.000,00 €\"\r\n";

/// The photos: a row per photo, in the export's order, not grouped by unit; RV 103 has none,
/// and RV 999 is a unit the units file does not list.
const PHOTOS: &[(&str, &str)] = &[
    ("RV 102", "https://img.example.net/rv102-front.jpg"),
    ("RV 101", "https://img.example.net/rv101-front.jpg"),
    ("RV 999", "https://img.example.net/gone.jpg"),
    ("RV 101", "https://img.example.net/rv101-galley.jpg"),
    ("RV 104", "https://img.example.net/rv104-side.jpg"),
    ("RV 101", "https://img.example.net/rv101-bunks.jpg"),
];

const FEED_YAML: &str = r#"upstream: feed
request: { method: GET, path: /outgoing/stock.zip }
format: csv
charset: windows-1252
unpack: { member: Einheiten.csv }
csv: { delimiter: ";", decimal: comma }
join:
  as: photos
  member: Bilder/Fotos.csv
  key: "Stock #"
  on: '.["Stock #"]'
  many: true
tables:
  statut_in: { Disponible: available, Vendu: sold }
item: |
  {
    vin: (.VIN | nonempty | ascii_upcase), stock: (.["Stock #"] | nonempty), dealer_id: $dealer.id,
    vehicle_type: "rv", condition: "used",
    year: (.["Année"] | int), make: (.Marque | nonempty), model: (.["Modèle"] | nonempty),
    status: (.Statut | lookup($tables.statut_in)),
    price: (.["Prix TTC"] | rtrimstr(" €") | dollars),
    photos: (if .photos then [.photos[] | .["Photo URL"]] else null end)
  } | compact
"#;

fn cp1252(text: &str) -> Vec<u8> {
    let (bytes, _, lossy) = encoding_rs::WINDOWS_1252.encode(text);
    assert!(!lossy);
    bytes.into_owned()
}

fn photos_csv() -> Vec<u8> {
    let mut text = "Stock #;Photo URL;Légende\r\n".to_owned();
    for (n, (stock, url)) in PHOTOS.iter().enumerate() {
        text.push_str(&format!("{stock};{url};Vue n° {n}\r\n"));
    }
    cp1252(&text)
}

/// The oracle: each stock number's photos, in the photos file's order.
fn expected_photos() -> BTreeMap<&'static str, Vec<&'static str>> {
    let mut by_stock: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (stock, url) in PHOTOS {
        by_stock.entry(stock).or_default().push(url);
    }
    by_stock
}

async fn all_units(gw: &common::Gateway) -> Vec<Value> {
    let call = json!({ "type": "inventory.search.request", "sort": { "field": "price", "order": "desc" } });
    let reply = gw.send("/dealers/rv/a2a", call).await;
    assert!(reply.body.get("error").is_none(), "{}", reply.text);
    let page = &reply.payload()["data"];
    page["vehicles"].as_array().expect("vehicles").clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn photos_from_a_second_member_of_the_zip_join_the_units_by_stock_number() {
    let host = FeedHost::start().await;
    host.serve(
        "/outgoing/stock.zip",
        Export {
            body: Bytes::from(zip(&[
                ("Bilder/Fotos.csv", &photos_csv()),
                ("Einheiten.csv", &cp1252(UNITS)),
            ])),
            content_type: "application/octet-stream",
            ..Export::default()
        },
    );
    let gw = start_feeds(&host.url, &[("rv", FEED_YAML)]).await;
    let units = all_units(&gw).await;
    assert_eq!(
        units.len(),
        4,
        "every unit is served, joined or not: {units:?}"
    );
    let expected = expected_photos();
    for unit in &units {
        let stock = unit["stock"].as_str().expect("stock");
        match expected.get(stock) {
            Some(photos) => assert_eq!(unit["photos"], json!(photos), "{stock}: {unit}"),
            // RV 103 has no photo: it keeps its own fields, and gets none.
            None => {
                assert!(unit.get("photos").is_none(), "{stock}: {unit}");
                assert_eq!(unit["make"], "Thor", "{unit}");
                assert_eq!(unit["price"], 61_250, "{unit}");
            }
        }
    }
    assert_eq!(units[0]["stock"], "RV 101", "{units:?}");
    assert_eq!(units[0]["photos"].as_array().map(Vec::len), Some(3));

    // The detail of a unit reads the same joined record.
    let call = json!({ "type": "inventory.vehicle.request", "stock": "RV 104" });
    let reply = gw.send("/dealers/rv/a2a", call).await;
    assert!(reply.body.get("error").is_none(), "{}", reply.text);
    let vehicle = &reply.payload()["data"];
    assert_eq!(
        vehicle["photos"],
        json!(["https://img.example.net/rv104-side.jpg"]),
        "{vehicle}"
    );
}

/// Options by VIN from a second URL of the same host, one row per unit; the options export
/// writes one VIN twice (two option packages that disagree).
const OPTIONS_CSV: &str = "VIN;Options;Gewicht kg\r\n\
    1FDXE4FS8KDC10001;Solar 400W|Generator 5.5kW;8.845\r\n\
    1FDXE4FS8KDC10002;Markise;5.210\r\n\
    1FDXE4FS8KDC10002;Markise|Fahrradträger;5.260\r\n\
    1FDXE4FS8KDC10004;Levelling jacks;6.120\r\n";

#[tokio::test(flavor = "multi_thread")]
async fn options_from_a_second_url_join_by_vin_and_a_key_written_twice_is_counted_not_picked() {
    let host = FeedHost::start().await;
    host.serve(
        "/outgoing/stock.zip",
        Export {
            body: Bytes::from(zip(&[("Einheiten.csv", &cp1252(UNITS))])),
            content_type: "application/zip",
            ..Export::default()
        },
    );
    host.serve(
        "/outgoing/options.csv",
        Export {
            body: Bytes::from(cp1252(OPTIONS_CSV)),
            content_type: "text/csv; charset=windows-1252",
            ..Export::default()
        },
    );
    let yaml = FEED_YAML
        .replace(
            "  member: Bilder/Fotos.csv\n  key: \"Stock #\"\n  on: '.[\"Stock #\"]'\n  many: true\n",
            "  request: { method: GET, path: /outgoing/options.csv }\n  key: VIN\n  on: .VIN | ascii_upcase\n",
        )
        .replace("as: photos", "as: options")
        .replace(
            "photos: (if .photos then [.photos[] | .[\"Photo URL\"]] else null end)",
            "features: (.options.Options // null | if . then split(\"|\") else null end),\n    \
             other_attributes: { weight_kg: (.options[\"Gewicht kg\"] // null | num) }",
        );
    assert!(yaml.contains("/outgoing/options.csv"), "{yaml}");
    let gw = start_feeds(&host.url, &[("rv", &yaml)]).await;
    let units = all_units(&gw).await;
    let by_stock: BTreeMap<&str, &Value> = units
        .iter()
        .map(|u| (u["stock"].as_str().expect("stock"), u))
        .collect();
    assert_eq!(by_stock.len(), 4, "{units:?}");
    assert_eq!(
        by_stock["RV 101"]["features"],
        json!(["Solar 400W", "Generator 5.5kW"])
    );
    assert_eq!(by_stock["RV 101"]["other_attributes"]["weight_kg"], 8845);
    // The VIN the units file writes in lower case is found by the mapping's `on`.
    assert_eq!(by_stock["RV 104"]["features"], json!(["Levelling jacks"]));
    // RV 102's VIN is on two rows: neither is picked, the unit keeps its own fields.
    let twice = by_stock["RV 102"];
    assert!(twice.get("features").is_none(), "{twice}");
    assert_eq!(twice["model"], "View 24D", "{twice}");
    assert_eq!(twice["price"], 98_500, "{twice}");
    // RV 103 has no options row.
    assert!(by_stock["RV 103"].get("features").is_none());
    let metrics = gw.metrics().await;
    assert_eq!(
        mapping_events(&metrics, "rv", "join_key_ambiguous"),
        1,
        "one VIN is ambiguous:\n{metrics}"
    );
    // Both documents were fetched, each once.
    assert_eq!(host.hits("/outgoing/options.csv").len(), 1);
    assert_eq!(host.hits("/outgoing/stock.zip").len(), 1);
}

#[test]
fn check_locates_a_join_with_no_source_and_a_bad_key_program() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("rv");
    let yaml = FEED_YAML
        .replace("  member: Bilder/Fotos.csv\n", "")
        .replace("on: '.[\"Stock #\"]'", "on: '.[\"Stock #\"'");
    feed_folder(&folder, &yaml);
    let config = write_config(dir.path(), &[("rv", &folder)]);
    let (code, all) = common::run_cli(&["check"], &config, &[("FEED_URL", "http://127.0.0.1:9")]);
    assert_eq!(code, 1, "{all}");
    let feed_yaml = folder.join("feed.yaml");
    common::assert_located(&all, &feed_yaml, 7, "needs one of `member`");
    common::assert_located(&all, &feed_yaml, 10, "jq: unclosed `[`");
}
