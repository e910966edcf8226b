//! Legacy charsets end to end: the real gateway in-process, in front of a feed host of the
//! test's own on 127.0.0.1:0 (`tests/feed_support`) serving exports byte for byte as dealer
//! systems write them.
//!
//! - `tests/fixtures/mappings/latin1-feed/`: an XML export declared `encoding="ISO-8859-1"`,
//!   served as `application/xml` without a charset; the declaration alone must be enough.
//! - `tests/fixtures/mappings/cp1252-csv-feed/`: an Excel CSV export (Windows-1252), served as
//!   `text/csv` without a charset; the mapping's `charset: windows-1252` says how to read it.
//! - The same CSV folder without `charset:`: nothing declares the charset, the export is not
//!   UTF-8, so the feed never loads and calls answer a retryable `INTERNAL_ERROR`.
//!
//! The bodies served are the fixtures' `examples/` files, which `test-mappings` also runs.

mod common;
mod feed_support;

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use common::Gateway;
use feed_support::{Export, FeedHost, call, search, write_config};
use serde_json::{Value, json};

const LATIN1_XML: &str = "latin1-xml";
const CP1252_CSV: &str = "cp1252-csv";
const UNDECLARED_CSV: &str = "undeclared-csv";

fn fixture(name: &str) -> PathBuf {
    common::repo_path(&format!("tests/fixtures/mappings/{name}"))
}

fn xml_export() -> Vec<u8> {
    std::fs::read(fixture("latin1-feed").join("examples/feed.xml")).expect("read feed.xml")
}

fn csv_export() -> Vec<u8> {
    std::fs::read(fixture("cp1252-csv-feed").join("examples/feed.csv")).expect("read feed.csv")
}

// =============================================================================================
// The feed host

/// Serves the two exports with the content types legacy systems send (no charset).
async fn feed_host() -> FeedHost {
    let host = FeedHost::start().await;
    for (path, content_type, body) in [
        ("/feeds/inventory.xml", "application/xml", xml_export()),
        ("/feeds/inventory.csv", "text/csv", csv_export()),
    ] {
        host.serve(
            path,
            Export {
                body: Bytes::from(body),
                content_type,
                ..Export::default()
            },
        );
    }
    host
}

// =============================================================================================
// The gateway

/// One gateway with three dealers: the two fixture folders, and a copy of the CSV one without
/// its `charset:` line (kept alive in the returned temp dir).
async fn start(feeds: &FeedHost) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let undeclared = dir.path().join("undeclared-csv");
    common::copy_dir(&fixture("cp1252-csv-feed"), &undeclared);
    let feed_yaml = undeclared.join("feed.yaml");
    let text = std::fs::read_to_string(&feed_yaml).expect("read feed.yaml");
    assert!(text.contains("\ncharset: windows-1252\n"), "{text}");
    std::fs::write(&feed_yaml, text.replace("\ncharset: windows-1252\n", "\n"))
        .expect("write feed.yaml");

    let config = write_config(
        dir.path(),
        &[
            (LATIN1_XML, &fixture("latin1-feed")),
            (CP1252_CSV, &fixture("cp1252-csv-feed")),
            (UNDECLARED_CSV, &undeclared),
        ],
    );
    let vars = HashMap::from([("FEED_URL".to_owned(), feeds.url.clone())]);
    common::start_file_with_vars(&config, Some(dir), vars).await
}

async fn vehicle(gw: &Gateway, dealer: &str, request: Value) -> Value {
    call(gw, dealer, "inventory.vehicle", request).await
}

// =============================================================================================
// The cases

/// The exports really are legacy bytes, not UTF-8 (else the cases below prove nothing).
#[test]
fn the_exports_are_not_utf8() {
    for (name, body) in [("feed.xml", xml_export()), ("feed.csv", csv_export())] {
        assert!(std::str::from_utf8(&body).is_err(), "{name} is UTF-8");
        for byte in [0xE9, 0xA9, 0x80, 0x97] {
            assert!(body.contains(&byte), "{name} lacks byte {byte:#04x}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_latin1_xml_export_is_read_by_its_declaration() {
    let feeds = feed_host().await;
    let gw = start(&feeds).await;

    let page = search(
        &gw,
        LATIN1_XML,
        json!({ "filters": { "model": ["mégane"] } }),
    )
    .await;
    assert_eq!(page["total"], 1, "{page}");
    let megane = &page["vehicles"][0];
    assert_eq!(megane["vin"], "VF1RFB00X66000001");
    assert_eq!(megane["model"], "Mégane");
    assert_eq!(megane["trim"], "E-Tech 100% électrique");
    assert_eq!(megane["interior_color"], "Crème");
    assert_eq!(
        megane["features"],
        json!(["Sièges chauffants", "Caméra de recul"])
    );
    // © (0xA9), and Windows-1252's — (0x97) and € (0x80), which true ISO-8859-1 lacks.
    assert_eq!(megane["description"], "Bose© audio — € 1 000 de remise");

    let clio = vehicle(&gw, LATIN1_XML, json!({ "vin": "VF1KW000000000002" })).await;
    assert_eq!(clio["trim"], "Évolution");
    assert_eq!(
        feeds.hits("/feeds/inventory.xml").len(),
        1,
        "fetched once, cached"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_windows_1252_csv_export_is_read_in_the_mapping_charset() {
    let feeds = feed_host().await;
    let gw = start(&feeds).await;

    let megane = vehicle(&gw, CP1252_CSV, json!({ "stock": "C0003" })).await;
    assert_eq!(megane["model"], "Mégane");
    assert_eq!(megane["trim"], "Évolution");
    assert_eq!(megane["interior_color"], "Crème");
    assert_eq!(
        megane["description"],
        "Entretien à jour — garantie 12 mois, € 500 de remise"
    );

    let page = search(
        &gw,
        CP1252_CSV,
        json!({ "filters": { "interior_color": ["noir étoilé"] } }),
    )
    .await;
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["vehicles"][0]["interior_color"], "Noir Étoilé");
    assert_eq!(page["vehicles"][0]["description"], "Jantes 17\" ©");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undeclared_windows_1252_csv_never_loads_and_answers_a_retryable_internal_error() {
    let feeds = feed_host().await;
    let gw = start(&feeds).await;

    let reply = gw
        .send(
            &format!("/dealers/{UNDECLARED_CSV}/a2a"),
            json!({ "type": "inventory.vehicle.request", "stock": "C0003" }),
        )
        .await;
    // The cause (which names the charset to set) stays in the log.
    let leaks = [
        "charset",
        "UTF-8",
        "inventory.csv",
        "127.0.0.1",
        "Entretien",
    ];
    reply.assert_internal_error("an undeclared charset", &leaks);
    assert!(
        !feeds.hits("/feeds/inventory.csv").is_empty(),
        "the export was fetched"
    );
}

// =============================================================================================
// The command line

/// `check` accepts `charset:`, and the folders' examples (the same Latin-1 / Windows-1252 files,
/// canned) pass `test-mappings`.
#[test]
fn check_and_test_mappings_pass_on_the_fixtures() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(
        dir.path(),
        &[
            (LATIN1_XML, &fixture("latin1-feed")),
            (CP1252_CSV, &fixture("cp1252-csv-feed")),
        ],
    );
    // No network: any URL will do.
    let url = [("FEED_URL", "http://127.0.0.1:9")];
    let (code, all) = common::run_cli(&["check"], &config, &url);
    assert_eq!(code, 0, "check failed:\n{all}");
    let (code, all) = common::run_cli(&["test-mappings"], &config, &url);
    assert_eq!(code, 0, "test-mappings failed:\n{all}");
    assert!(all.contains("4 passed, 0 failed"), "{all}");

    // An unknown label is a located load problem.
    let folder = dir.path().join("bad");
    common::copy_dir(&fixture("cp1252-csv-feed"), &folder);
    let feed_yaml = folder.join("feed.yaml");
    let text = std::fs::read_to_string(&feed_yaml).expect("read feed.yaml");
    std::fs::write(
        &feed_yaml,
        text.replace("charset: windows-1252", "charset: cp-1252"),
    )
    .expect("write feed.yaml");
    // And a proxy-mode reply in JSON takes none: JSON is always UTF-8.
    let vehicle_yaml = folder.join("inventory.vehicle.yaml");
    std::fs::write(
        &vehicle_yaml,
        "skill: inventory.vehicle\nupstream: feed\nrequest: { method: GET, path: /vehicle }\n\
         response:\n  jq: .\n  charset: latin1\n",
    )
    .expect("write inventory.vehicle.yaml");
    write_config(dir.path(), &[("bad", &folder)]);
    let (code, all) = common::run_cli(&["check"], &config, &url);
    assert_eq!(code, 1, "{all}");
    let line = text
        .lines()
        .position(|l| l.starts_with("charset:"))
        .expect("charset line")
        + 1;
    common::assert_located(
        &all,
        &feed_yaml,
        line,
        "unknown charset `cp-1252`; expected a label like utf-8, windows-1252",
    );
    common::assert_located(
        &all,
        &vehicle_yaml,
        6,
        "`charset` is for xml and csv bodies; JSON is always UTF-8",
    );
}
