//! A source that yields nothing is loud (issue 37 item 11, for feeds): a feed that loads with 0
//! listable of N records says so — a warning with the cause, the gauge
//! `aap_gateway_feed_listable_vehicles` at 0, and a note in `/readyz` naming the dealer, the
//! feed and the cause; CSV rows with more or fewer fields than the header are counted and
//! skipped (a shifted column would put the price under the mileage); `test-mappings` says when
//! every example record was dropped, and why. Real gateway in-process, a feed host on
//! 127.0.0.1:0.

mod common;
mod feed_support;

use bytes::Bytes;
use common::Gateway;
use feed_support::{
    Export, FeedHost, feed_folder, mapping_events, search, start_feeds, write_config,
};
use serde_json::{Value, json};

const FEED_YAML: &str = r#"upstream: feed
request: { method: GET, path: /lot.csv }
format: csv
refresh: 1h
max_stale: 2h
item: |
  {
    vin: (.VIN | nonempty), stock: (.Stock | nonempty), dealer_id: $dealer.id,
    vehicle_type: "car", year: (.Year | int), make: (.Make | nonempty),
    model: (.Model | nonempty), condition: "used",
    status: (if .Sold == "Y" then "sold" else "available" end),
    price: (.Price | dollars), mileage: (.Miles | miles)
  } | compact
"#;

async fn start(host: &FeedHost, dealers: &[&str]) -> Gateway {
    let feeds: Vec<(&str, String)> = dealers
        .iter()
        .map(|id| (*id, FEED_YAML.replace("/lot.csv", &format!("/{id}.csv"))))
        .collect();
    start_feeds(&host.url, &feeds).await
}

fn csv(body: &str) -> Export {
    Export {
        body: Bytes::from(body.to_owned()),
        content_type: "text/csv",
        ..Export::default()
    }
}

/// `/readyz` once every feed's first load has ended (a loaded machine may still be loading one
/// when the gateway starts listening).
async fn readyz(gw: &Gateway) -> (u16, String) {
    for _ in 0..100 {
        let reply = gw.client().get(gw.admin_url("/readyz")).send().await;
        let reply = reply.expect("readyz");
        let status = reply.status().as_u16();
        let text = reply.text().await.expect("text");
        if !(status == 503 && text.contains("loading the inventory feed")) {
            return (status, text);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("a feed never finished its first load");
}

fn gauge(metrics: &str, dealer: &str) -> Option<i64> {
    let prefix = format!("aap_gateway_feed_listable_vehicles{{dealer=\"{dealer}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The dealer's listings, cheapest first.
async fn cheapest_first(gw: &Gateway, dealer: &str) -> Value {
    let sort = json!({ "sort": { "field": "price", "order": "asc" } });
    search(gw, dealer, sort).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_feed_that_lists_nothing_says_why_in_the_gauge_and_readyz() {
    let host = FeedHost::start().await;
    // Every odometer is in kilometres with the unit glued on, which the `miles` helper
    // refuses: every record is skipped.
    host.serve(
        "/glued_km.csv",
        csv("VIN,Stock,Year,Make,Model,Price,Miles,Sold\n\
             1HGCM82633A004352,U-1,2018,Honda,Accord,\"18,990\",41200km,N\n\
             2T1BURHE0JC043821,U-2,2018,Toyota,Corolla,\"14,250\",38900km,N\n"),
    );
    // Every unit sold.
    host.serve(
        "/soldout.csv",
        csv("VIN,Stock,Year,Make,Model,Price,Miles,Sold\n\
             1FTEW1EP5JFA11111,S-1,2018,Ford,F-150,\"31,499\",\"52,000\",Y\n"),
    );
    // A lot with units: the control.
    host.serve(
        "/stocked.csv",
        csv("VIN,Stock,Year,Make,Model,Price,Miles,Sold\n\
             5YJ3E1EA7KF317000,T-1,2019,Tesla,Model 3,\"29,900\",\"33,100\",N\n"),
    );
    let gw = start(&host, &["glued_km", "soldout", "stocked"]).await;

    let (status, body) = readyz(&gw).await;
    assert_eq!(
        status, 200,
        "a feed that lists nothing does not hold the pod back: {body}"
    );
    let body: Value = serde_json::from_str(&body).expect("readyz JSON");
    let notes = body["feeds_listing_nothing"].as_array().expect("notes");
    let cause = |dealer: &str| {
        notes
            .iter()
            .find(|n| n["dealer"] == dealer)
            .and_then(|n| n["cause"].as_str())
            .map(str::to_owned)
    };
    let glued_km = cause("glued_km").expect("glued_km is named");
    assert!(
        glued_km.starts_with("0 listable of 2 records: the item mapping failed on 2 (first: "),
        "{glued_km}"
    );
    assert!(
        glued_km.contains("41200km"),
        "the helper's message: {glued_km}"
    );
    let soldout = cause("soldout").expect("soldout is named");
    assert_eq!(
        soldout,
        "0 listable of 1 records: 1 map to a status AAP does not list (sold, or no `status`)"
    );
    assert_eq!(cause("stocked"), None, "{notes:?}");

    let metrics = gw.metrics().await;
    assert_eq!(gauge(&metrics, "glued_km"), Some(0), "{metrics}");
    assert_eq!(gauge(&metrics, "soldout"), Some(0));
    assert_eq!(gauge(&metrics, "stocked"), Some(1));
    assert_eq!(mapping_events(&metrics, "glued_km", "record_skipped"), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn csv_rows_longer_or_shorter_than_the_header_are_counted_and_skipped() {
    let host = FeedHost::start().await;
    // Row 3 has an unquoted comma in its model (one field too many: its price would read
    // "XLT"); row 5 lost its last two fields.
    let rows = [
        (
            "1HGCM82633A004352,U-1,2018,Honda,Accord,\"18,990\",\"41,200\",N",
            true,
        ),
        (
            "1FTEW1EP5JFA11111,U-2,2018,Ford,F-150, XLT,\"31,499\",\"52,000\",N",
            false,
        ),
        (
            "2T1BURHE0JC043821,U-3,2018,Toyota,Corolla,\"14,250\",\"38,900\",N",
            true,
        ),
        ("5YJ3E1EA7KF317000,U-4,2019,Tesla,Model 3,\"29,900\"", false),
        (
            "3VWDB7AJ5HM900001,U-5,2017,VW,Jetta,\"9,800\",\"77,000\",N",
            true,
        ),
    ];
    let mut body = "VIN,Stock,Year,Make,Model,Price,Miles,Sold\n".to_owned();
    for (row, _) in rows {
        body.push_str(row);
        body.push('\n');
    }
    host.serve("/ragged.csv", csv(&body));
    let gw = start(&host, &["ragged"]).await;
    let page = cheapest_first(&gw, "ragged").await;
    // The oracle: the stock numbers of the rows as wide as the header.
    let mut expected: Vec<&str> = rows
        .iter()
        .filter(|(_, whole)| *whole)
        .map(|(row, _)| row.split(',').nth(1).expect("stock"))
        .collect();
    expected.sort_unstable();
    let mut listed: Vec<&str> = page["vehicles"]
        .as_array()
        .expect("vehicles")
        .iter()
        .filter_map(|v| v["stock"].as_str())
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, expected, "{page}");
    let metrics = gw.metrics().await;
    assert_eq!(
        mapping_events(&metrics, "ragged", "csv_row_ragged"),
        2,
        "{metrics}"
    );
}

#[test]
fn test_mappings_says_when_every_example_record_was_dropped_and_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("lot");
    feed_folder(&folder, FEED_YAML);
    std::fs::write(
        folder.join("inventory.search.yaml"),
        r#"skill: inventory.search
mode: feed
examples:
  - name: two used cars
    request: { type: inventory.search.request }
    upstream_reply:
      status: 200
      content_type: text/csv
      body: "VIN,Stock,Year,Make,Model,Price,Miles,Sold\n1HGCM82633A004352,U-1,2018,Honda,Accord,18990,41200km,N\n2T1BURHE0JC043821,U-2,2018,Toyota,Corolla,14250,38900km,N\n"
    expect: { total: 2 }
"#,
    )
    .expect("search");
    let config = write_config(dir.path(), &[("lot", &folder)]);
    let (code, stdout) = common::run_cli(
        &["test-mappings"],
        &config,
        &[("FEED_URL", "http://127.0.0.1:9")],
    );
    assert_ne!(code, 0, "{stdout}");
    assert!(
        stdout.contains("FAIL  lot inventory.search — two used cars"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the example's feed lists no vehicle: 0 listable of 2 records: the item mapping failed on 2 (first: "),
        "{stdout}"
    );
}

/// Issue 37 item 5, feeds: a unit whose listing AAP's listing schema refuses (a year of 1700, a
/// VIN too short to be one) is dropped and counted at load, never served, and never fails the
/// pages the good units are on; the others are served whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_the_schema_refuses_is_dropped_not_fatal() {
    let host = FeedHost::start().await;
    host.serve(
        "/odd.csv",
        csv("VIN,Stock,Year,Make,Model,Price,Miles,Sold\n\
             1HGCM82633A004352,U-1,2018,Honda,Accord,\"18,990\",\"41,200\",N\n\
             1FTEW1EP5JFA11111,U-2,1700,Ford,F-150,\"31,499\",\"52,000\",N\n\
             2T1BURHE0JC043821,U-3,2018,Toyota,Corolla,\"14,250\",\"38,900\",N\n\
             5YJ3E1EA7,U-4,2019,Tesla,Model 3,\"29,900\",\"33,100\",N\n\
             3VWDB7AJ5HM900001,U-5,1700,VW,Jetta,\"9,800\",\"77,000\",Y\n"),
    );
    let gw = start(&host, &["odd"]).await;
    let page = cheapest_first(&gw, "odd").await;
    let mut listed: Vec<&str> = page["vehicles"]
        .as_array()
        .expect("vehicles")
        .iter()
        .filter_map(|v| v["stock"].as_str())
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, ["U-1", "U-3"], "{page}");
    assert_eq!(page["total"], 2);
    let metrics = gw.metrics().await;
    // The sold unit is never served whatever it holds: not counted as invalid.
    assert_eq!(
        mapping_events(&metrics, "odd", "listing_invalid"),
        2,
        "{metrics}"
    );
    assert_eq!(mapping_events(&metrics, "odd", "record_skipped"), 0);
}
