//! Conditional refresh end to end (issue 39, part 2): the real gateway in-process, in front of a
//! feed host of the test's own on 127.0.0.1:0 that answers `If-None-Match` and
//! `If-Modified-Since` as HTTP says (`tests/feed_support`).
//!
//! - An export with an `ETag`: refreshes send it back, a `304` keeps the copy (counted
//!   `not_modified`, its age starts again), a new `ETag` brings the new document.
//! - An export with only `Last-Modified`: `If-Modified-Since` is sent, and honoured.
//! - A host that sends neither: the same bytes again (whole JSON, streamed gzip CSV) keep the
//!   copy too; changed bytes replace it.
//! - A failing host: counted `failed`, the copy kept.

mod common;
mod feed_support;

use std::collections::HashMap;

use bytes::Bytes;
use feed_support::{Export, FeedHost, feed, gzip, prices, refreshes, start_on};
use serde_json::json;

/// A boat dealer's CSV: hull numbers, engine hours, prices as "12,499".
fn boats(prices: &[&str]) -> String {
    let mut csv = "HIN,Stock,Year,Make,Model,Price,Hours\n".to_owned();
    for (i, price) in prices.iter().enumerate() {
        csv.push_str(&format!(
            "YAM1234{i}C707,B-{i},2019,Yamaha,242X,\"{price}\",\"{} hrs\"\n",
            300 + i
        ));
    }
    csv
}

fn feed_yaml(path: &str, format: &str, items: Option<&str>) -> String {
    let items = items.map(|i| format!("items: {i}\n")).unwrap_or_default();
    format!(
        r#"upstream: feed
request: {{ method: GET, path: {path} }}
format: {format}
{items}refresh: 1h
max_stale: 2h
item: |
  {{
    vehicle_id: (.HIN | nonempty), stock: (.Stock | nonempty), dealer_id: $dealer.id,
    vehicle_type: "other", year: (.Year | int), make: (.Make | nonempty),
    model: (.Model | nonempty), condition: "used", status: "available",
    price: (.Price | dollars)
  }} | compact
"#
    )
}

fn counts(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn header<'h>(hit: &'h feed_support::Hit, name: &str) -> Option<&'h str> {
    hit.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_etag_makes_refreshes_conditional_and_a_304_keeps_the_copy() {
    const PATH: &str = "/exports/boats.csv.gz";
    let host = FeedHost::start().await;
    host.serve(
        PATH,
        Export {
            body: Bytes::from(gzip(boats(&["12,499", "31,000"]).as_bytes())),
            content_type: "application/gzip",
            etag: Some("\"v1\"".to_owned()),
            ..Export::default()
        },
    );
    let setup = start_on(host, &[("etag", feed_yaml(PATH, "csv", None))]).await;
    assert_eq!(prices(&setup.gw, "etag").await, [12_499, 31_000]);
    let feed = feed(&setup.gw, "etag");
    // The copy's age starts again at each 304.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(feed.age().expect("a copy") >= std::time::Duration::from_millis(300));
    for _ in 0..4 {
        feed.refresh_now().await;
    }
    let hits = setup.host.hits(PATH);
    assert_eq!(hits.len(), 5, "{hits:?}");
    assert_eq!(
        header(&hits[0], "if-none-match"),
        None,
        "the first load is unconditional"
    );
    for hit in &hits[1..] {
        assert_eq!(header(hit, "if-none-match"), Some("\"v1\""), "{hit:?}");
        assert_eq!(hit.status, 304);
    }
    assert!(feed.age().expect("a copy") < std::time::Duration::from_millis(300));
    assert_eq!(
        refreshes(&setup.gw, "etag").await,
        counts(&[("changed", 1), ("not_modified", 4)])
    );
    assert_eq!(prices(&setup.gw, "etag").await, [12_499, 31_000]);

    // A new export, a new tag: fetched whole, mapped, served; the next refresh sends the new tag.
    setup.host.edit(PATH, |export| {
        export.body = Bytes::from(gzip(boats(&["11,999", "31,000", "8,250"]).as_bytes()));
        export.etag = Some("\"v2\"".to_owned());
    });
    feed.refresh_now().await;
    assert_eq!(prices(&setup.gw, "etag").await, [8_250, 11_999, 31_000]);
    feed.refresh_now().await;
    let hits = setup.host.hits(PATH);
    assert_eq!(hits[5].status, 200);
    assert_eq!(header(&hits[6], "if-none-match"), Some("\"v2\""));
    assert_eq!(hits[6].status, 304);
    assert_eq!(
        refreshes(&setup.gw, "etag").await,
        counts(&[("changed", 2), ("not_modified", 5)])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn last_modified_alone_is_sent_back_as_if_modified_since() {
    const PATH: &str = "/exports/boats.json";
    let yaml = feed_yaml(PATH, "json", Some(".units"));
    let host = FeedHost::start().await;
    let units = json!({ "units": [
        { "HIN": "YAM12340C707", "Stock": "B-0", "Year": "2019", "Make": "Yamaha",
          "Model": "242X", "Price": "12,499" }
    ]});
    host.serve(
        PATH,
        Export {
            body: Bytes::from(units.to_string()),
            content_type: "application/json",
            last_modified: Some("Mon, 07 Dec 2026 06:00:00 GMT".to_owned()),
            ..Export::default()
        },
    );
    let setup = start_on(host, &[("dated", yaml)]).await;
    assert_eq!(prices(&setup.gw, "dated").await, [12_499]);
    feed(&setup.gw, "dated").refresh_now().await;
    let hits = setup.host.hits(PATH);
    assert_eq!(
        header(&hits[1], "if-modified-since"),
        Some("Mon, 07 Dec 2026 06:00:00 GMT")
    );
    assert_eq!(header(&hits[1], "if-none-match"), None);
    assert_eq!(hits[1].status, 304);
    assert_eq!(
        refreshes(&setup.gw, "dated").await,
        counts(&[("changed", 1), ("not_modified", 1)])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_bytes_without_validators_keep_the_copy_and_a_failure_is_counted() {
    const JSON: &str = "/exports/plain.json";
    const CSV: &str = "/exports/plain.csv.gz";
    let host = FeedHost::start().await;
    let units = |price: &str| {
        json!({ "units": [
            { "HIN": "YAM12340C707", "Stock": "B-0", "Year": "2019", "Make": "Yamaha",
              "Model": "242X", "Price": price }
        ]})
        .to_string()
    };
    host.serve(
        JSON,
        Export {
            body: Bytes::from(units("12,499")),
            content_type: "application/json",
            ..Export::default()
        },
    );
    host.serve(
        CSV,
        Export {
            body: Bytes::from(gzip(boats(&["9,999"]).as_bytes())),
            content_type: "application/gzip",
            ..Export::default()
        },
    );
    let setup = start_on(
        host,
        &[
            ("whole", feed_yaml(JSON, "json", Some(".units"))),
            ("streamed", feed_yaml(CSV, "csv", None)),
        ],
    )
    .await;
    assert_eq!(prices(&setup.gw, "whole").await, [12_499]);
    assert_eq!(prices(&setup.gw, "streamed").await, [9_999]);
    for dealer in ["whole", "streamed"] {
        feed(&setup.gw, dealer).refresh_now().await;
        feed(&setup.gw, dealer).refresh_now().await;
        assert_eq!(
            refreshes(&setup.gw, dealer).await,
            counts(&[("changed", 1), ("not_modified", 2)]),
            "{dealer}"
        );
    }
    setup
        .host
        .edit(JSON, |export| export.body = Bytes::from(units("12,199")));
    setup.host.edit(CSV, |export| {
        export.body = Bytes::from(gzip(boats(&["9,499"]).as_bytes()))
    });
    for dealer in ["whole", "streamed"] {
        feed(&setup.gw, dealer).refresh_now().await;
    }
    assert_eq!(prices(&setup.gw, "whole").await, [12_199]);
    assert_eq!(prices(&setup.gw, "streamed").await, [9_499]);

    // The host fails: counted, and the copy stays.
    setup.host.edit(JSON, |export| export.fail = Some(503));
    feed(&setup.gw, "whole").refresh_now().await;
    assert_eq!(
        refreshes(&setup.gw, "whole").await,
        counts(&[("changed", 2), ("not_modified", 2), ("failed", 1)])
    );
    assert_eq!(prices(&setup.gw, "whole").await, [12_199]);
}
