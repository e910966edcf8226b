//! What a completed search costs the dealer's system (issue 40): a scan of a page-numbered DMS
//! reads its pages at once within the upstream's `max_concurrency`, identical scans share one
//! walk, a due scan is refreshed in the background within `scan_stale`, and the DMS's own
//! limits (`429`/`503` with `Retry-After`, `X-RateLimit-*`, `max_requests_per_second`) are
//! honoured — all without trading exactness: every walk that cannot be whole is still refused.
//!
//! **Keel Street Motors**, a stand-in written here, lists 230 units (sold ones among them, some
//! unpriced, some without a VIN, stock numbers in no order the pages follow) by page number,
//! 50 a page, with the total in `meta.total`. It answers its later pages first (page 1 waits
//! longest), so arrival order is never page order. Each endpoint variant misbehaves in one way a
//! real DMS does. Answers are compared with an oracle over Keel Street's own data; assertions
//! count the DMS's calls and the most it had in flight, never time.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use common::Gateway;
use common::http_server::{HttpServer, Seen, reply};
use serde_json::{Value, json};

// =============================================================================================
// Keel Street's stock

#[derive(Debug, Clone)]
struct Unit {
    stock: String,
    vin: String,
    make: &'static str,
    year: u32,
    price: Option<u64>,
    sold: bool,
}

const MAKES: [&str; 5] = ["Subaru", "Kia", "Volvo", "Mazda", "Ram"];
const UNITS: usize = 230;
const PAGE: usize = 50;

fn units() -> Vec<Unit> {
    (0..UNITS)
        .map(|i| {
            // Stock numbers in an order the DMS's pages (by internal id) do not follow.
            let scrambled = (i * 97 + 13) % 1000;
            let vin = format!("1KS{:014}", 7_000_000 + i * 7919);
            Unit {
                stock: format!("K{scrambled:04}"),
                // Every third unit without a VIN (a trade-in not decoded yet).
                vin: if i % 3 == 0 { String::new() } else { vin },
                make: MAKES[i % MAKES.len()],
                year: 2012 + (i % 13) as u32,
                price: (i % 11 != 4).then_some(9_000 + (i as u64 * 389) % 41_000),
                sold: i % 7 == 2,
            }
        })
        .collect()
}

static STOCK: LazyLock<Vec<Unit>> = LazyLock::new(units);

impl Unit {
    fn json(&self) -> Value {
        json!({
            "StockNumber": self.stock, "Vin": (!self.vin.is_empty()).then_some(&self.vin), "Make": self.make, "ModelYear": self.year,
            "AskingPrice": self.price, "Status": if self.sold { "S" } else { "A" },
        })
    }
}

/// What the DMS's `make` query matches (case-insensitively), in its own (internal id) order.
fn matching(seen: &Seen) -> Vec<&'static Unit> {
    let make = seen.param("make").filter(|m| !m.is_empty());
    STOCK
        .iter()
        .filter(|u| make.is_none_or(|m| m.eq_ignore_ascii_case(u.make)))
        .collect()
}

fn number(seen: &Seen, name: &str, default: usize) -> usize {
    seen.param(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One page of a variant: (records, total reported).
fn keel_page(seen: &Seen) -> (Vec<Value>, usize) {
    let all = matching(seen);
    let size = number(seen, "pageSize", 10).min(PAGE);
    let page = number(seen, "page", 1).max(1);
    let slice = |page: usize| -> Vec<Value> {
        let start = ((page - 1) * size).min(all.len());
        all[start..(start + size).min(all.len())]
            .iter()
            .map(|u| u.json())
            .collect()
    };
    let variant = seen.path.trim_start_matches('/').split('/').next();
    match variant {
        // Page 3 answers page 2's rows again (its position moved under the gateway).
        Some("repeat") if page == 3 => (slice(2), all.len()),
        // Page 2 loses a row (a unit sold between pages): short, and the total says more.
        Some("short") if page == 2 => {
            let mut rows = slice(2);
            rows.pop();
            (rows, all.len())
        }
        // Reports one unit fewer than it lists.
        Some("over") => (slice(page), all.len() - 1),
        _ => (slice(page), all.len()),
    }
}

/// Keel Street with a gate: while it is shut, every call waits (a DMS that stalls).
fn keel_gated(
    gate: Arc<AtomicBool>,
) -> impl Fn(
    Seen,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = http::Response<common::http_server::ChunkBody>> + Send>,
> + Send
+ Sync
+ 'static {
    move |seen| {
        let gate = Arc::clone(&gate);
        Box::pin(async move {
            while !gate.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            keel(seen).await
        })
    }
}

/// Keel Street's answer to one call: later pages first.
async fn keel(seen: Seen) -> http::Response<common::http_server::ChunkBody> {
    let page = number(&seen, "page", 1);
    let pages = UNITS.div_ceil(PAGE);
    tokio::time::sleep(Duration::from_millis(
        15 * pages.saturating_sub(page) as u64 + 10,
    ))
    .await;
    let (rows, total) = keel_page(&seen);
    let mut response = reply(
        200,
        json!({ "data": rows, "meta": { "total": total } }).to_string(),
    );
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

// =============================================================================================
// The mapping, as a new user writes it from docs/mappings.md

fn upstreams(max_concurrency: usize) -> String {
    format!(
        "keel:\n  kind: rest\n  base_url: ${{KEEL_URL}}\n  max_concurrency: {max_concurrency}\n  timeouts: {{ connect: 1s, request: 5s, queue: 5s }}\n"
    )
}

/// A search of variant `endpoint`, which lists sold units too: every search is completed in the
/// gateway from a scan.
fn search_yaml(endpoint: &str, extra: &str) -> String {
    format!(
        r#"skill: inventory.search
upstream: keel
{extra}request:
  path: /{endpoint}/inventory
  query:
    make: "{{{{ request.filters.make | join(',') }}}}"
  pagination: {{ style: page, page: page, size: pageSize, first: 1, max_size: 50 }}
  supports:
    filters: [{{ name: make, values: one }}]
response:
  items: .data
  total: .meta.total
  item: |
    {{
      stock: .StockNumber, vin: .Vin, make: .Make, year: .ModelYear, price: .AskingPrice,
      status: (if .Status == "S" then "sold" else "available" end)
    }} | compact
"#
    )
}

struct Keel {
    gw: Gateway,
    server: HttpServer,
}

/// The gateway with one dealer per (id, search file, max_concurrency), all on one Keel Street.
async fn start_keel(dealers: &[(&str, String, usize)]) -> Keel {
    let server = HttpServer::start_scripted(keel).await;
    start_on(server, dealers).await
}

async fn start_on(server: HttpServer, dealers: &[(&str, String, usize)]) -> Keel {
    let dealers: Vec<(&str, String, String)> = dealers
        .iter()
        .map(|(id, search, width)| (*id, search.clone(), upstreams(*width)))
        .collect();
    start_custom(server, &dealers).await
}

/// The gateway with one dealer per (id, search file, upstreams.yaml).
async fn start_custom(server: HttpServer, dealers: &[(&str, String, String)]) -> Keel {
    let dealers: Vec<common::TestDealer> = dealers
        .iter()
        .map(|(id, search, upstreams)| {
            common::TestDealer::new(
                id,
                vec![
                    ("upstreams.yaml", upstreams.clone()),
                    ("inventory.search.yaml", search.clone()),
                    (
                        "inventory.facets.yaml",
                        "skill: inventory.facets\nderive: search\n".to_owned(),
                    ),
                ],
            )
        })
        .collect();
    let gw = common::start_dealers(&dealers, &[("KEEL_URL", server.url())]).await;
    Keel { gw, server }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

// =============================================================================================
// The oracle: AAP's rules over Keel Street's data

/// A search by price (ascending, units without a price last, ties by stock then VIN).
fn by_price(make: Option<&str>, skip: usize, limit: usize) -> Value {
    let mut filters = json!({});
    if let Some(make) = make {
        filters["make"] = json!([make]);
    }
    json!({
        "type": "inventory.search.request",
        "filters": filters,
        "sort": { "field": "price", "order": "asc" },
        "pagination": { "skip": skip, "limit": limit },
    })
}

fn oracle(make: Option<&str>, skip: usize, limit: usize) -> (usize, Vec<String>) {
    let mut listed: Vec<&Unit> = STOCK
        .iter()
        .filter(|u| !u.sold)
        .filter(|u| make.is_none_or(|m| m.eq_ignore_ascii_case(u.make)))
        .collect();
    listed.sort_by(|a, b| {
        let price = match (a.price, b.price) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        };
        price
            .then_with(|| a.stock.cmp(&b.stock))
            .then_with(|| a.vin.cmp(&b.vin))
    });
    let total = listed.len();
    let stocks = listed
        .into_iter()
        .skip(skip)
        .take(limit)
        .map(|u| u.stock.clone())
        .collect();
    (total, stocks)
}

/// (total, stocks) of an answered page; panics on an error.
fn page_of(reply: &common::Reply) -> (usize, Vec<String>) {
    assert!(reply.body.get("error").is_none(), "refused: {}", reply.text);
    common::total_and_stocks(&reply.payload()["data"])
}

fn event_count(metrics: &str, event: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("aap_gateway_mapping_events_total")
                && l.contains(&format!("event=\"{event}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// =============================================================================================
// 1. Concurrent scans

#[test]
fn a_scan_reads_its_pages_at_once_within_max_concurrency_and_answers_exactly() {
    runtime().block_on(async {
        let keel = start_keel(&[("keel", search_yaml("ok", "scan_cache: 0s\n"), 3)]).await;
        let reply = keel
            .gw
            .send("/dealers/keel/a2a", by_price(None, 40, 30))
            .await;
        assert_eq!(page_of(&reply), oracle(None, 40, 30));
        let pages = UNITS.div_ceil(PAGE);
        assert_eq!(keel.server.requests(), pages, "each page read once");
        let most = keel.server.max_in_flight();
        assert!(
            most > 1,
            "after the first page's total, the other {} pages were read at once (most in flight: {most})",
            pages - 1
        );
        assert!(most <= 3, "never more than max_concurrency (3) in flight: {most}");

        // A narrower scan (one make) is exact too.
        let reply = keel
            .gw
            .send("/dealers/keel/a2a", by_price(Some("kia"), 0, 100))
            .await;
        assert_eq!(page_of(&reply), oracle(Some("kia"), 0, 100));
    });
}

#[test]
fn a_concurrent_scan_that_cannot_be_whole_is_refused_as_a_page_by_page_one_is() {
    runtime().block_on(async {
        let keel = start_keel(&[
            ("repeat", search_yaml("repeat", "scan_cache: 0s\n"), 4),
            ("short", search_yaml("short", "scan_cache: 0s\n"), 4),
            ("over", search_yaml("over", "scan_cache: 0s\n"), 4),
        ])
        .await;
        for (dealer, event) in [
            ("repeat", "incomplete_repeated_record"),
            ("short", "incomplete_unreachable"),
            ("over", "incomplete_overcounted"),
        ] {
            let reply = keel
                .gw
                .send(&format!("/dealers/{dealer}/a2a"), by_price(None, 0, 10))
                .await;
            assert_eq!(
                reply.aap_code(),
                "INTERNAL_ERROR",
                "{dealer}: {}",
                reply.text
            );
            let metrics = keel.gw.metrics().await;
            assert_eq!(
                event_count(&metrics, event),
                1,
                "{dealer}: {event}\n{metrics}"
            );
        }
        assert!(keel.server.max_in_flight() > 1, "the walks were concurrent");
    });
}

#[test]
fn scan_limit_is_refused_from_the_first_pages_total_before_the_rest_is_read() {
    runtime().block_on(async {
        let keel = start_keel(&[(
            "small",
            search_yaml("ok", "scan_cache: 0s\nscan_limit: 120\n"),
            4,
        )])
        .await;
        let reply = keel
            .gw
            .send("/dealers/small/a2a", by_price(None, 0, 10))
            .await;
        assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
        assert_eq!(
            keel.server.requests(),
            1,
            "the total (230) is past scan_limit (120): no further page is asked for"
        );
        let metrics = keel.gw.metrics().await;
        assert_eq!(event_count(&metrics, "scan_limit_reached"), 1, "{metrics}");
        // Within the limit (one make: 46 records) the scan is answered.
        let reply = keel
            .gw
            .send("/dealers/small/a2a", by_price(Some("volvo"), 0, 50))
            .await;
        assert_eq!(page_of(&reply), oracle(Some("volvo"), 0, 50));
    });
}

// =============================================================================================
// 2. Single flight

/// Polls the gateway's metrics until `event` reached `count` (a bounded wait: a gateway that
/// never counts it fails the test instead of hanging).
async fn until_event(gw: &Gateway, event: &str, count: u64) {
    for _ in 0..400 {
        if event_count(&gw.metrics().await, event) >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "`{event}` never reached {count}: {}",
        event_count(&gw.metrics().await, event)
    );
}

#[test]
fn identical_scans_at_once_share_one_upstream_walk() {
    runtime().block_on(async {
        let gate = Arc::new(AtomicBool::new(false));
        let server = HttpServer::start_scripted(keel_gated(Arc::clone(&gate))).await;
        // No cache: only the walk under way is shared.
        let keel = start_on(server, &[("keel", search_yaml("ok", "scan_cache: 0s\n"), 4)]).await;
        let gw = &keel.gw;
        // Six buyers, different windows and sorts of one make: one scan (same upstream filters).
        let windows = [(0, 10), (10, 10), (20, 5), (0, 50), (3, 7), (40, 10)];
        let searches = windows.map(|(skip, limit)| async move {
            let reply = gw
                .send("/dealers/keel/a2a", by_price(Some("subaru"), skip, limit))
                .await;
            assert_eq!(page_of(&reply), oracle(Some("subaru"), skip, limit));
        });
        let facets = async {
            let reply = gw
                .send(
                    "/dealers/keel/a2a",
                    json!({ "type": "inventory.facets.request", "filters": { "make": ["subaru"] } }),
                )
                .await;
            assert!(reply.body.get("error").is_none(), "{}", reply.text);
        };
        let opener = async {
            // Every caller but the first joined the walk before the DMS answers anything.
            until_event(gw, "scan_shared", 6).await;
            gate.store(true, Ordering::SeqCst);
        };
        tokio::join!(futures_util::future::join_all(searches), facets, opener);
        let subaru = STOCK.iter().filter(|u| u.make == "Subaru").count();
        assert_eq!(
            keel.server.requests(),
            subaru.div_ceil(PAGE),
            "seven callers, one walk of the make's pages"
        );
    });
}

// =============================================================================================
// 3. Stale while revalidate

#[test]
fn a_due_scan_answers_from_its_copy_while_one_refresh_reads_it_again() {
    runtime().block_on(async {
        let gate = Arc::new(AtomicBool::new(true));
        let server = HttpServer::start_scripted(keel_gated(Arc::clone(&gate))).await;
        let keel = start_on(
            server,
            &[(
                "keel",
                search_yaml("ok", "scan_cache: 300ms\nscan_stale: 1h\n"),
                4,
            )],
        )
        .await;
        let gw = &keel.gw;
        let pages = UNITS.div_ceil(PAGE);
        let reply = gw.send("/dealers/keel/a2a", by_price(None, 0, 20)).await;
        assert_eq!(page_of(&reply), oracle(None, 0, 20));
        assert_eq!(keel.server.requests(), pages);

        // Due, and the DMS stalls: buyers are answered from the copy, one refresh waits.
        tokio::time::sleep(Duration::from_millis(400)).await;
        gate.store(false, Ordering::SeqCst);
        for (skip, limit) in [(20, 20), (100, 30), (0, 5)] {
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                gw.send("/dealers/keel/a2a", by_price(None, skip, limit)),
            )
            .await
            .expect("a due scan answers from its copy, not after a new walk");
            assert_eq!(page_of(&reply), oracle(None, skip, limit));
        }
        assert_eq!(
            event_count(&gw.metrics().await, "scan_stale_served"),
            3,
            "three answers from the due copy"
        );
        // One refresh only: its first page waits at the gate.
        for _ in 0..200 {
            if keel.server.requests() > pages {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            keel.server.requests(),
            pages + 1,
            "one refresh, not one per buyer"
        );

        // The DMS answers: the refresh completes and is the fresh copy.
        gate.store(true, Ordering::SeqCst);
        for _ in 0..400 {
            if keel.server.requests() == 2 * pages && keel.server.in_flight() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            keel.server.requests(),
            2 * pages,
            "the refresh read every page"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let reply = gw.send("/dealers/keel/a2a", by_price(None, 0, 20)).await;
        assert_eq!(page_of(&reply), oracle(None, 0, 20));
        assert_eq!(
            keel.server.requests(),
            2 * pages,
            "answered from the refreshed copy"
        );
        assert_eq!(event_count(&gw.metrics().await, "scan_stale_served"), 3);
    });
}

// =============================================================================================
// 4. One walk for many searches: a whole scan of a wider query answers narrower ones

/// AAP's `years` facet over Keel Street's listable units of `make`: (year, count), by year.
fn years_oracle(make: &str) -> Vec<(String, u64)> {
    let mut years = std::collections::BTreeMap::<String, u64>::new();
    for unit in STOCK
        .iter()
        .filter(|u| !u.sold && u.make.eq_ignore_ascii_case(make))
    {
        *years.entry(unit.year.to_string()).or_default() += 1;
    }
    years.into_iter().collect()
}

/// The `years` facet of an answered `inventory.facets` call, by year.
fn years_of(reply: &common::Reply) -> Vec<(String, u64)> {
    assert!(reply.body.get("error").is_none(), "refused: {}", reply.text);
    let mut years: Vec<(String, u64)> = reply.payload()["data"]["years"]
        .as_array()
        .expect("years")
        .iter()
        .map(|v| {
            (
                v["value"].to_string().trim_matches('"').to_owned(),
                v["count"].as_u64().expect("count"),
            )
        })
        .collect();
    years.sort();
    years
}

fn facets_of(make: &str) -> Value {
    json!({ "type": "inventory.facets.request", "filters": { "make": [make] } })
}

#[test]
fn a_fresh_scan_of_every_unit_answers_each_makes_searches_without_walking_again() {
    runtime().block_on(async {
        let keel = start_keel(&[(
            "keel",
            search_yaml(
                "ok",
                "scan_cache: 1h
",
            ),
            4,
        )])
        .await;
        let gw = &keel.gw;
        let pages = UNITS.div_ceil(PAGE);
        // Two makes: not sendable (`values: one`), so the scan is of every unit.
        let two = json!({
            "type": "inventory.search.request",
            "filters": { "make": ["volvo", "ram"] },
            "sort": { "field": "price", "order": "asc" },
            "pagination": { "limit": 5 },
        });
        let reply = gw.send("/dealers/keel/a2a", two).await;
        let (total, _) = page_of(&reply);
        let expected = STOCK
            .iter()
            .filter(|u| !u.sold && (u.make == "Volvo" || u.make == "Ram"))
            .count();
        assert_eq!(total, expected);
        assert_eq!(keel.server.requests(), pages);
        // Every make (sent in any case, as buyers do), any window, and facets: from that scan,
        // filtered in the gateway exactly as the DMS would have filtered it.
        for (i, make) in MAKES.iter().enumerate() {
            let asked = if i % 2 == 0 {
                make.to_lowercase()
            } else {
                make.to_uppercase()
            };
            for (skip, limit) in [(0, 7), (9, 30), (40, 20)] {
                let reply = gw
                    .send("/dealers/keel/a2a", by_price(Some(&asked), skip, limit))
                    .await;
                assert_eq!(
                    page_of(&reply),
                    oracle(Some(make), skip, limit),
                    "{asked} {skip}+{limit}"
                );
            }
            let reply = gw.send("/dealers/keel/a2a", facets_of(&asked)).await;
            assert_eq!(years_of(&reply), years_oracle(make), "{asked}");
        }
        assert_eq!(
            keel.server.requests(),
            pages,
            "twenty searches and facets, no DMS call"
        );
        let metrics = gw.metrics().await;
        assert_eq!(event_count(&metrics, "scan_wider_served"), 20, "{metrics}");
    });
}

#[test]
fn a_narrower_scan_never_answers_a_wider_search() {
    runtime().block_on(async {
        let keel = start_keel(&[(
            "keel",
            search_yaml(
                "ok",
                "scan_cache: 1h
",
            ),
            4,
        )])
        .await;
        let gw = &keel.gw;
        let reply = gw
            .send("/dealers/keel/a2a", by_price(Some("kia"), 0, 10))
            .await;
        assert_eq!(page_of(&reply), oracle(Some("kia"), 0, 10));
        let kia = STOCK.iter().filter(|u| u.make == "Kia").count();
        assert_eq!(keel.server.requests(), kia.div_ceil(PAGE));
        // Every unit: the Kia scan holds a fifth of them, so the DMS is walked whole.
        let reply = gw.send("/dealers/keel/a2a", by_price(None, 0, 10)).await;
        assert_eq!(page_of(&reply), oracle(None, 0, 10));
        assert_eq!(
            keel.server.requests(),
            kia.div_ceil(PAGE) + UNITS.div_ceil(PAGE)
        );
        assert_eq!(event_count(&gw.metrics().await, "scan_wider_served"), 0);
    });
}

#[test]
fn scan_query_every_unit_reads_every_unit_once_for_every_search_while_it_is_kept() {
    runtime().block_on(async {
        let keel = start_keel(&[(
            "keel",
            search_yaml(
                "ok",
                "scan_cache: 1h
scan_query: every_unit
",
            ),
            4,
        )])
        .await;
        let gw = &keel.gw;
        let pages = UNITS.div_ceil(PAGE);
        // The first search names one make; the scan sends none.
        let reply = gw
            .send("/dealers/keel/a2a", by_price(Some("mazda"), 3, 9))
            .await;
        assert_eq!(page_of(&reply), oracle(Some("Mazda"), 3, 9));
        let seen = keel.server.seen();
        assert_eq!(seen.len(), pages, "one walk of every unit: {seen:?}");
        assert!(
            seen.iter()
                .all(|s| s.param("make").is_none_or(str::is_empty)),
            "no make sent: {:?}",
            seen.iter().map(|s| &s.path_and_query).collect::<Vec<_>>()
        );
        for make in MAKES {
            let reply = gw
                .send("/dealers/keel/a2a", by_price(Some(make), 0, 60))
                .await;
            assert_eq!(page_of(&reply), oracle(Some(make), 0, 60), "{make}");
            let reply = gw.send("/dealers/keel/a2a", facets_of(make)).await;
            assert_eq!(years_of(&reply), years_oracle(make), "{make}");
        }
        let reply = gw.send("/dealers/keel/a2a", by_price(None, 150, 100)).await;
        assert_eq!(page_of(&reply), oracle(None, 150, 100));
        assert_eq!(
            keel.server.requests(),
            pages,
            "every call from the one scan"
        );
    });
}

#[test]
fn scan_query_every_unit_is_still_refused_loudly_when_the_scan_cannot_be_whole() {
    runtime().block_on(async {
        let keel = start_keel(&[
            (
                "short",
                search_yaml(
                    "short",
                    "scan_cache: 1h
scan_query: every_unit
",
                ),
                4,
            ),
            (
                "small",
                search_yaml(
                    "ok",
                    "scan_cache: 1h
scan_query: every_unit
scan_limit: 120
",
                ),
                4,
            ),
        ])
        .await;
        let gw = &keel.gw;
        let reply = gw
            .send("/dealers/short/a2a", by_price(Some("kia"), 0, 10))
            .await;
        assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
        // Every unit is past scan_limit, though one make would fit: refused, never partial.
        let reply = gw
            .send("/dealers/small/a2a", by_price(Some("volvo"), 0, 10))
            .await;
        assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
        let metrics = gw.metrics().await;
        assert_eq!(
            event_count(&metrics, "incomplete_unreachable"),
            1,
            "{metrics}"
        );
        assert_eq!(event_count(&metrics, "scan_limit_reached"), 1, "{metrics}");
        // Nothing was kept: the next call walks again (and is refused again).
        let before = keel.server.requests();
        let reply = gw
            .send("/dealers/short/a2a", by_price(Some("ram"), 0, 10))
            .await;
        assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
        assert!(keel.server.requests() > before);
    });
}

// =============================================================================================
// 5. The DMS's own limits

/// Keel Street behind a limit of its own: `policy` sees each call (its arrival index and the
/// time since the first call) and says how to answer it: a status instead of the page (`Some`),
/// and headers to add.
type Policy = dyn Fn(usize, Duration) -> (Option<u16>, Vec<(&'static str, String)>) + Send + Sync;

async fn limited(policy: Arc<Policy>) -> HttpServer {
    let first: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    HttpServer::start_scripted(move |seen: Seen| {
        let policy = Arc::clone(&policy);
        let first = Arc::clone(&first);
        async move {
            let since = {
                let mut first = first.lock().expect("lock");
                first.get_or_insert_with(Instant::now).elapsed()
            };
            let (status, headers) = policy(seen.index, since);
            let mut response = match status {
                Some(status) => reply(status, "{}"),
                None => keel(seen).await,
            };
            for (name, value) in headers {
                response
                    .headers_mut()
                    .insert(name, value.parse().expect("header"));
            }
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            response
        }
    })
    .await
}

fn upstream_yaml(extra: &str) -> String {
    format!(
        "keel:\n  kind: rest\n  base_url: ${{KEEL_URL}}\n  max_concurrency: 4\n  timeouts: {{ connect: 1s, request: 5s, queue: 3s }}\n{extra}"
    )
}

#[test]
fn a_short_retry_after_is_waited_for_within_the_calls_budget() {
    runtime().block_on(async {
        // The first call is told to come back in a second; every other is answered.
        let server = limited(Arc::new(|index, _| match index {
            0 => (Some(429), vec![("retry-after", "1".to_owned())]),
            _ => (None, Vec::new()),
        }))
        .await;
        let keel = start_custom(
            server,
            &[(
                "keel",
                search_yaml("ok", "scan_cache: 0s\n"),
                upstream_yaml("  retries: { attempts: 2, max_backoff: 2s }\n"),
            )],
        )
        .await;
        let reply = keel
            .gw
            .send("/dealers/keel/a2a", by_price(Some("ram"), 0, 50))
            .await;
        assert_eq!(page_of(&reply), oracle(Some("ram"), 0, 50));
        let ram = STOCK.iter().filter(|u| u.make == "Ram").count();
        assert_eq!(
            keel.server.requests(),
            ram.div_ceil(PAGE) + 1,
            "the refused first page was asked for once more, nothing else"
        );
    });
}

#[test]
fn a_long_retry_after_is_the_buyers_rate_limited_hint_and_holds_the_following_calls() {
    runtime().block_on(async {
        let server = limited(Arc::new(|_, _| {
            (Some(503), vec![("retry-after", "120".to_owned())])
        }))
        .await;
        let keel = start_custom(
            server,
            &[(
                "keel",
                search_yaml("ok", "scan_cache: 0s\n"),
                upstream_yaml(""),
            )],
        )
        .await;
        for _ in 0..3 {
            let reply = keel
                .gw
                .send("/dealers/keel/a2a", by_price(None, 0, 10))
                .await;
            let error = reply.aap_error();
            assert_eq!(error["code"], "RATE_LIMITED", "{}", reply.text);
            assert_eq!(error["retryable"], true);
            let hint = error["details"]["retry_after_ms"].as_u64().expect("a hint");
            assert!(
                (110_000..=120_000).contains(&hint),
                "the upstream's own hint, less the time gone: {hint}"
            );
        }
        assert_eq!(
            keel.server.requests(),
            1,
            "told to wait two minutes: not retried, and no later buyer's call reaches it"
        );
        let metrics = keel.gw.metrics().await;
        assert_eq!(
            event_count(&metrics, "upstream_rate_limited"),
            1,
            "{metrics}"
        );
    });
}

#[test]
fn a_closed_rate_limit_window_holds_the_scans_next_pages_until_it_resets() {
    runtime().block_on(async {
        let early = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&early);
        // The first answer closes its window for a second; a call inside it is counted.
        let server = limited(Arc::new(move |index, since| {
            if index == 0 {
                let closed = vec![
                    ("x-ratelimit-remaining", "0".to_owned()),
                    ("x-ratelimit-reset", "1".to_owned()),
                ];
                return (None, closed);
            }
            if since < Duration::from_millis(900) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            (None, Vec::new())
        }))
        .await;
        let keel = start_custom(
            server,
            &[(
                "keel",
                search_yaml("window", "scan_cache: 0s\n"),
                upstream_yaml(""),
            )],
        )
        .await;
        let reply = keel
            .gw
            .send("/dealers/keel/a2a", by_price(None, 0, 25))
            .await;
        assert_eq!(page_of(&reply), oracle(None, 0, 25));
        assert_eq!(keel.server.requests(), UNITS.div_ceil(PAGE));
        assert_eq!(
            early.load(Ordering::SeqCst),
            0,
            "no page was asked for while the DMS's window was closed"
        );
    });
}

#[test]
fn a_ceiling_on_requests_per_second_spreads_a_scan_instead_of_a_burst() {
    runtime().block_on(async {
        let arrivals: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&arrivals);
        // A DMS that falls over when two calls start within 150 ms of each other.
        let server = limited(Arc::new(move |_, since| {
            let mut arrivals = seen.lock().expect("lock");
            let crowded = arrivals
                .last()
                .is_some_and(|last| since.saturating_sub(*last) < Duration::from_millis(150));
            arrivals.push(since);
            (crowded.then_some(503), Vec::new())
        }))
        .await;
        let keel = start_custom(
            server,
            &[
                (
                    "keel",
                    search_yaml("ok", "scan_cache: 0s\n"),
                    upstream_yaml("  max_requests_per_second: 5\n  retries: { attempts: 1 }\n"),
                ),
                (
                    "slow",
                    search_yaml("ok", "scan_cache: 0s\n"),
                    upstream_yaml("  max_requests_per_second: 1\n  retries: { attempts: 1 }\n"),
                ),
            ],
        )
        .await;
        let reply = keel
            .gw
            .send("/dealers/keel/a2a", by_price(None, 0, 25))
            .await;
        assert_eq!(page_of(&reply), oracle(None, 0, 25));
        assert_eq!(
            keel.server.requests(),
            UNITS.div_ceil(PAGE),
            "every page once, none refused for crowding"
        );

        // A burst past what the ceiling can serve within timeouts.queue is refused at once,
        // never passed on: at one call a second, the turns within 3 s are 0, 1, 2 and 3 s from
        // now; eight buyers ask for five scans (one page each, one per make).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let gw = &keel.gw;
        let before = keel.server.requests();
        let burst = (0..8).map(|i| async move {
            let make = MAKES[i % MAKES.len()];
            gw.send("/dealers/slow/a2a", by_price(Some(make), i, 5))
                .await
        });
        let replies = futures_util::future::join_all(burst).await;
        let refused = replies
            .iter()
            .filter(|r| r.body.get("error").is_some())
            .inspect(|r| assert_eq!(r.aap_code(), "RATE_LIMITED", "{}", r.text))
            .count();
        assert!(refused > 0, "five calls cannot all start within 3 s at 1/s");
        assert!(refused < 8, "the first ones are served in turn");
        assert_eq!(
            keel.server.requests() - before,
            4,
            "only the calls with a turn were sent"
        );
        let crowded = arrivals
            .lock()
            .expect("lock")
            .windows(2)
            .filter(|w| w[1].saturating_sub(w[0]) < Duration::from_millis(150))
            .count();
        assert_eq!(crowded, 0, "no two calls started within 150 ms");
    });
}
