//! Exact or loud (docs/protocol.md §Exact or refused): when what the gateway fetched cannot be
//! the whole answer, the buyer gets an AAP error, never a partial page dressed as whole.
//!
//! **Harbor Marine & Auto**, a stand-in written here (not `sim/`'s), lists 70 units over REST:
//! sold ones among them, some unpriced, one whose model year is `"0"` (a listing the AAP schema
//! refuses). Each of its endpoints misbehaves as a real system does — it ignores paging and
//! returns its first 25, caps its pages below what is asked, ignores the position it is sent —
//! and each is mapped as a new user would map it from docs/mappings.md. Every answer is compared
//! with an oracle written here from AAP's rules over Harbor's own data; every case the mapping
//! cannot serve whole must be refused, counted, and never answered partial.

mod common;

use std::sync::LazyLock;

use common::Gateway;
use common::http_server::{Answer, HttpServer, Seen};
use proptest::prelude::*;
use serde_json::{Value, json};

// =============================================================================================
// Harbor's stock

#[derive(Debug, Clone)]
struct Unit {
    stock: String,
    vin: String,
    make: &'static str,
    /// As Harbor sends it: a text, `"0"` for one unit.
    year: &'static str,
    /// `FOR_SALE`, `ON_ORDER`, `SOLD`.
    state: &'static str,
    price: Option<u64>,
}

const YEARS: [&str; 8] = [
    "2017", "2018", "2019", "2020", "2021", "2022", "2023", "2024",
];

fn units() -> Vec<Unit> {
    (0..70u64)
        .map(|i| Unit {
            stock: format!("HB-{:03}", 100 + i),
            // 17 characters, none of I, O, Q.
            vin: format!("5XYZU3LB{:09}", 7_310_000 + i * 37),
            make: ["Yamaha", "Ford", "Kia"][(i % 3) as usize],
            year: if i == 33 {
                "0"
            } else {
                YEARS[(i % 8) as usize]
            },
            state: match i % 7 {
                3 => "SOLD",
                5 => "ON_ORDER",
                _ => "FOR_SALE",
            },
            // Eight prices: runs of equal prices, whose order is only the tie-break's.
            price: (i % 11 != 4).then_some(9_000 + (i * 389) % 4_000 / 500 * 500),
        })
        .collect()
}

static UNITS: LazyLock<Vec<Unit>> = LazyLock::new(units);

impl Unit {
    fn json(&self) -> Value {
        json!({
            "stockNo": self.stock, "vin": self.vin, "make": self.make, "yr": self.year,
            "state": self.state, "price": self.price,
        })
    }

    fn listable(&self) -> bool {
        self.state != "SOLD"
    }

    /// Whether AAP's listing schema accepts the listing the mapping builds.
    fn valid(&self) -> bool {
        self.year != "0"
    }
}

/// Harbor's own search: its make filter (exact, as stored), its order (stock, or price with
/// unpriced units last and ties by stock), everything it lists.
fn harbor_matches(seen: &Seen, listable_only: bool) -> Vec<&'static Unit> {
    harbor_search(seen, listable_only, false)
}

/// [`harbor_matches`], with ties broken by Harbor's internal id (newest first) when `own_ties`.
fn harbor_search(seen: &Seen, listable_only: bool, own_ties: bool) -> Vec<&'static Unit> {
    let mut out: Vec<&Unit> = UNITS
        .iter()
        .filter(|u| seen.param("make").is_none_or(|m| m == u.make))
        .filter(|u| !listable_only || u.listable())
        .collect();
    let tie = |a: &Unit, b: &Unit| {
        if own_ties {
            b.stock.cmp(&a.stock)
        } else {
            a.stock.cmp(&b.stock)
        }
    };
    match seen.param("sort") {
        Some(field @ ("price" | "-price")) => {
            let desc = field.starts_with('-');
            out.sort_by(|a, b| match (a.price, b.price) {
                (Some(x), Some(y)) if desc => y.cmp(&x).then(tie(a, b)),
                (Some(x), Some(y)) => x.cmp(&y).then(tie(a, b)),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => tie(a, b),
            });
        }
        _ => out.sort_by(|a, b| a.stock.cmp(&b.stock)),
    }
    out
}

fn reply(units: &[&Unit], count: Option<usize>) -> Answer {
    let mut body = json!({ "units": units.iter().map(|u| u.json()).collect::<Vec<_>>() });
    if let Some(count) = count {
        body["count"] = json!(count);
    }
    (200, "application/json", body.to_string().into_bytes())
}

fn number(seen: &Seen, name: &str, default: usize) -> usize {
    seen.param(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Harbor's endpoints, one per behaviour.
fn harbor(seen: Seen) -> Answer {
    let endpoint = seen.path.trim_start_matches('/').to_owned();
    match endpoint.as_str() {
        // Ignores any paging: its first 25, and how many there are.
        "first25/units" => {
            let all = harbor_matches(&seen, false);
            reply(&all[..all.len().min(25)], Some(all.len()))
        }
        // Everything in one reply, no count.
        "whole/units" => reply(&harbor_matches(&seen, false), None),
        // Offset paging that serves at most 20 rows whatever is asked; no count.
        "capped/units" => {
            let all = harbor_matches(&seen, false);
            let start = number(&seen, "start", 0).min(all.len());
            let rows = number(&seen, "rows", 10).min(20);
            reply(&all[start..(start + rows).min(all.len())], None)
        }
        // Offset paging as asked (at most 50), with the count.
        "offset/units" => {
            let all = harbor_matches(&seen, false);
            let start = number(&seen, "start", 0).min(all.len());
            let rows = number(&seen, "rows", 10).min(50);
            reply(&all[start..(start + rows).min(all.len())], Some(all.len()))
        }
        // Takes the page size but always answers from the start.
        "no-position/units" => {
            let all = harbor_matches(&seen, false);
            let rows = number(&seen, "rows", 10).min(50);
            reply(&all[..rows.min(all.len())], Some(all.len()))
        }
        // Only units a buyer may see, sorted as asked with ties in its own order, offset paging
        // and the count.
        "own-ties/units" => {
            let all = harbor_search(&seen, true, true);
            let start = number(&seen, "start", 0).min(all.len());
            let rows = number(&seen, "rows", 10).min(50);
            reply(&all[start..(start + rows).min(all.len())], Some(all.len()))
        }
        // Only units a buyer may see, sorted as asked; its first 25 and the count.
        "listable/units" => {
            let all = harbor_matches(&seen, true);
            reply(&all[..all.len().min(25)], Some(all.len()))
        }
        _ => (404, "application/json", b"{}".to_vec()),
    }
}

// =============================================================================================
// The mappings, as a new user writes them from docs/mappings.md

const UPSTREAMS: &str = "harbor:
  kind: rest
  base_url: ${HARBOR_URL}
  timeouts: { connect: 1s, request: 2s }
";

const ITEM: &str = r#"    {
      stock: .stockNo, vin: .vin, make: .make, year: (.yr | tonumber),
      status: ({FOR_SALE: "available", ON_ORDER: "intransit", SOLD: "sold"}[.state]),
      price: .price
    } | compact"#;

/// A search mapping on `endpoint` with `request` lines (pagination, supports) and `total`.
fn search_yaml(endpoint: &str, request: &str, total: bool) -> String {
    format!(
        "skill: inventory.search\nupstream: harbor\nscan_cache: 0s\nrequest:\n  path: /{endpoint}/units\n  query:\n    make: \"{{{{ request.filters.make | join(',') | capitalize }}}}\"\n{request}response:\n  items: .units\n{}  item: |\n{ITEM}\n",
        if total { "  total: .count\n" } else { "" }
    )
}

const SUPPORTS_MAKE: &str = "  supports:\n    filters: [{ name: make, values: one }]\n";

/// (dealer, search file).
fn dealers() -> Vec<(&'static str, String)> {
    vec![
        ("first25", search_yaml("first25", SUPPORTS_MAKE, true)),
        ("whole", search_yaml("whole", SUPPORTS_MAKE, false)),
        (
            "capped",
            search_yaml(
                "capped",
                &format!(
                    "  pagination: {{ style: offset, offset: start, limit: rows, max_size: 50 }}\n{SUPPORTS_MAKE}"
                ),
                false,
            ),
        ),
        (
            "offset",
            search_yaml(
                "offset",
                &format!(
                    "  pagination: {{ style: offset, offset: start, limit: rows, max_size: 50 }}\n{SUPPORTS_MAKE}"
                ),
                true,
            ),
        ),
        (
            "noposition",
            search_yaml(
                "no-position",
                &format!(
                    "  pagination: {{ style: offset, offset: start, limit: rows, max_size: 30 }}\n{SUPPORTS_MAKE}"
                ),
                true,
            ),
        ),
        (
            "listable",
            search_yaml(
                "listable",
                "    sort: \"{% if request.sort.field == 'price' %}{{ '-' if request.sort.order == 'desc' }}price{% endif %}\"\n  supports:\n    listing: listable\n    filters: [{ name: make, values: one }]\n    sort: [price]\n",
                true,
            ),
        ),
        (
            "ownties",
            search_yaml(
                "own-ties",
                &format!(
                    "{SORT_QUERY}  pagination: {{ style: offset, offset: start, limit: rows, max_size: 50 }}\n  supports:\n    listing: listable\n    filters: [{{ name: make, values: one }}]\n    sort: [{{ field: price, ties: own }}]\n"
                ),
                true,
            ),
        ),
    ]
}

/// The price sort as Harbor's query takes it.
const SORT_QUERY: &str = "    sort: \"{% if request.sort.field == 'price' %}{{ '-' if request.sort.order == 'desc' }}price{% endif %}\"\n";

struct Harbor {
    gw: Gateway,
    _server: HttpServer,
}

async fn start_harbor() -> Harbor {
    let server = HttpServer::start(harbor).await;
    let dealers: Vec<common::TestDealer> = dealers()
        .into_iter()
        .map(|(id, search)| {
            common::TestDealer::new(
                id,
                vec![
                    ("upstreams.yaml", UPSTREAMS.to_owned()),
                    ("inventory.search.yaml", search),
                    (
                        "inventory.facets.yaml",
                        "skill: inventory.facets\nderive: search\n".to_owned(),
                    ),
                ],
            )
        })
        .collect();
    let gw = common::start_dealers(&dealers, &[("HARBOR_URL", server.url())]).await;
    Harbor {
        gw,
        _server: server,
    }
}

static HARBOR: LazyLock<Harbor> = LazyLock::new(|| common::RUNTIME.block_on(start_harbor()));

fn run<T>(body: impl std::future::Future<Output = T>) -> T {
    common::run_with(&HARBOR, body)
}

// =============================================================================================
// The oracle: AAP's rules over Harbor's data

#[derive(Debug, Clone)]
struct Search {
    make: Option<&'static str>,
    sort: Option<bool>, // price, descending?
    skip: usize,
    limit: usize,
}

impl Search {
    fn request(&self) -> Value {
        let mut r = json!({
            "type": "inventory.search.request",
            "pagination": { "skip": self.skip, "limit": self.limit },
        });
        if let Some(make) = self.make {
            r["filters"] = json!({ "make": [make.to_lowercase()] });
        }
        if let Some(desc) = self.sort {
            r["sort"] = json!({ "field": "price", "order": if desc { "desc" } else { "asc" } });
        }
        r
    }

    /// (total, stock numbers of the page).
    fn oracle(&self) -> (usize, Vec<String>) {
        let mut matches: Vec<&Unit> = UNITS
            .iter()
            .filter(|u| u.listable() && u.valid())
            .filter(|u| self.make.is_none_or(|m| m.eq_ignore_ascii_case(u.make)))
            .collect();
        matches.sort_by(|a, b| {
            let by_stock = a.stock.cmp(&b.stock).then(a.vin.cmp(&b.vin));
            match self.sort {
                None => by_stock,
                Some(desc) => match (a.price, b.price) {
                    (Some(x), Some(y)) if desc => y.cmp(&x).then(by_stock),
                    (Some(x), Some(y)) => x.cmp(&y).then(by_stock),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => by_stock,
                },
            }
        });
        let page = matches
            .iter()
            .skip(self.skip)
            .take(self.limit)
            .map(|u| u.stock.clone())
            .collect();
        (matches.len(), page)
    }
}

enum Answered {
    Page { total: usize, stocks: Vec<String> },
    Refused { code: String, retryable: bool },
}

async fn search(dealer: &str, s: &Search) -> Answered {
    let reply = HARBOR
        .gw
        .send(&format!("/dealers/{dealer}/a2a"), s.request())
        .await;
    if reply.body.get("error").is_some() {
        let error = reply.aap_error();
        return Answered::Refused {
            code: error["code"].as_str().unwrap_or_default().to_owned(),
            retryable: error["retryable"].as_bool().unwrap_or(false),
        };
    }
    let payload = reply.payload();
    common::schema::assert_reply_valid(payload);
    let (total, stocks) = common::total_and_stocks(&payload["data"]);
    Answered::Page { total, stocks }
}

/// How many unit records Harbor holds for `make` (every state): what one of its replies covers.
fn harbor_count(make: Option<&str>, listable_only: bool) -> usize {
    UNITS
        .iter()
        .filter(|u| make.is_none_or(|m| m.eq_ignore_ascii_case(u.make)))
        .filter(|u| !listable_only || u.listable())
        .count()
}

async fn metrics() -> String {
    HARBOR.gw.metrics().await
}

fn assert_refused(answer: &Answered, context: &str) {
    match answer {
        Answered::Refused { code, .. } => assert_eq!(code, "INTERNAL_ERROR", "{context}"),
        Answered::Page { total, stocks } => panic!(
            "{context}: answered a page ({} vehicles, total {total}) that cannot be whole",
            stocks.len()
        ),
    }
}

fn assert_exact(answer: Answered, s: &Search, context: &str) {
    match answer {
        Answered::Page { total, stocks } => {
            assert_eq!((total, stocks), s.oracle(), "{context}: {}", s.request())
        }
        Answered::Refused { code, .. } => panic!("{context}: refused ({code}) {}", s.request()),
    }
}

// =============================================================================================
// The cases

#[test]
fn a_search_completed_from_one_call_is_refused_when_the_upstream_says_it_holds_more() {
    run(async {
        // Every make of Harbor's fits in its 25: exact.
        for make in ["Yamaha", "Ford", "Kia"] {
            assert!(harbor_count(Some(make), false) <= 25);
            let s = Search {
                make: Some(make),
                sort: Some(false),
                skip: 0,
                limit: 100,
            };
            assert_exact(search("first25", &s).await, &s, "one make");
        }
        // All 70: the count says 70, one call gives 25.
        let s = Search {
            make: None,
            sort: Some(false),
            skip: 0,
            limit: 10,
        };
        let answer = search("first25", &s).await;
        assert_refused(&answer, "the whole stock from one capped call");
        if let Answered::Refused { retryable, .. } = answer {
            assert!(
                !retryable,
                "the mapping cannot reach the rest: no retry helps"
            );
        }
        // Derived facets count from the same scan: refused the same way, never 25 of 70.
        let facets = HARBOR
            .gw
            .send(
                "/dealers/first25/a2a",
                json!({ "type": "inventory.facets.request" }),
            )
            .await;
        assert_eq!(facets.aap_code(), "INTERNAL_ERROR", "{}", facets.text);
        assert!(
            metrics().await.contains("event=\"incomplete_unreachable\""),
            "counted"
        );
    });
}

#[test]
fn a_reply_without_paging_and_without_a_count_is_taken_whole() {
    run(async {
        for s in [
            Search {
                make: None,
                sort: None,
                skip: 0,
                limit: 100,
            },
            Search {
                make: None,
                sort: Some(true),
                skip: 25,
                limit: 10,
            },
            Search {
                make: Some("Kia"),
                sort: Some(false),
                skip: 3,
                limit: 5,
            },
            Search {
                make: None,
                sort: None,
                skip: 250,
                limit: 10,
            },
        ] {
            assert_exact(search("whole", &s).await, &s, "whole");
        }
    });
}

#[test]
fn pages_capped_below_max_size_are_refused_not_taken_as_the_end() {
    run(async {
        let s = Search {
            make: None,
            sort: None,
            skip: 0,
            limit: 10,
        };
        assert_refused(
            &search("capped", &s).await,
            "a 20-row page taken for the last",
        );
        assert!(metrics().await.contains("event=\"incomplete_short_page\""));
        // A make whose records fit on the first (short) page is proven whole by the next one.
        let s = Search {
            make: Some("Kia"),
            sort: None,
            skip: 0,
            limit: 100,
        };
        assert!(
            harbor_count(Some("Kia"), false) > 20,
            "Kia needs a second page"
        );
        assert_refused(
            &search("capped", &s).await,
            "Kia, 23 records in pages of 20",
        );
    });
}

#[test]
fn a_position_the_upstream_ignores_is_refused_as_repeated_records() {
    run(async {
        let s = Search {
            make: None,
            sort: None,
            skip: 0,
            limit: 10,
        };
        let answer = search("noposition", &s).await;
        assert_refused(&answer, "page 2 repeats page 1");
        if let Answered::Refused { retryable, .. } = answer {
            assert!(retryable, "records that moved while paging may settle");
        }
        assert!(
            metrics()
                .await
                .contains("event=\"incomplete_repeated_record\"")
        );
    });
}

#[test]
fn a_listing_the_schema_refuses_is_dropped_and_never_counted() {
    run(async {
        // Unit 33 (model year "0") is in Harbor's pages; AAP never sees or counts it.
        let s = Search {
            make: None,
            sort: None,
            skip: 20,
            limit: 30,
        };
        assert_exact(search("offset", &s).await, &s, "offset");
        assert!(metrics().await.contains("event=\"listing_invalid\""));
    });
}

#[test]
fn ties_an_upstream_breaks_its_own_way_are_put_in_aaps_order() {
    run(async {
        // Harbor's pages split runs of equal prices by its internal id; AAP's order is by
        // stock, then VIN. Declared `ties: own`, sorted searches are completed in the gateway.
        for s in [
            Search {
                make: None,
                sort: Some(false),
                skip: 0,
                limit: 20,
            },
            Search {
                make: None,
                sort: Some(true),
                skip: 13,
                limit: 17,
            },
            Search {
                make: Some("Ford"),
                sort: Some(false),
                skip: 4,
                limit: 9,
            },
        ] {
            assert_exact(search("ownties", &s).await, &s, "own ties");
        }
        // Without a sort the upstream's own (stable) order is the dealer's: sent straight
        // through, its total the upstream's.
        let s = Search {
            make: Some("Kia"),
            sort: None,
            skip: 0,
            limit: 5,
        };
        match search("ownties", &s).await {
            Answered::Page { total, stocks } => {
                assert_eq!(total, s.oracle().0);
                assert_eq!(stocks.len(), 5);
            }
            Answered::Refused { code, .. } => panic!("refused: {code}"),
        }
    });
}

#[test]
fn straight_through_searches_honour_skip_and_say_true_totals() {
    run(async {
        // Harbor's listable endpoint answers these itself (sorted, one make): the refused
        // listing is a Yamaha, so these pages and totals are the oracle's.
        for s in [
            Search {
                make: Some("Ford"),
                sort: Some(false),
                skip: 10,
                limit: 10,
            },
            Search {
                make: Some("Kia"),
                sort: Some(true),
                skip: 5,
                limit: 20,
            },
            Search {
                make: Some("Ford"),
                sort: None,
                skip: 3,
                limit: 4,
            },
            // Past every match: no vehicles, the true total.
            Search {
                make: Some("Kia"),
                sort: Some(false),
                skip: 250,
                limit: 10,
            },
        ] {
            assert_exact(search("listable", &s).await, &s, "straight through");
        }
        // Past the upstream's 25 with more reported: refused, never the 25 dressed as whole.
        assert!(harbor_count(None, true) > 25);
        let s = Search {
            make: None,
            sort: Some(false),
            skip: 30,
            limit: 10,
        };
        assert_refused(&search("listable", &s).await, "a window past the reply");
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Over random searches, each endpoint's answer is the oracle's, or refused where its
    /// mapping cannot reach every match — never anything else.
    #[test]
    fn every_answer_is_the_oracles_or_refused(
        make in prop::option::of(prop::sample::select(vec!["Yamaha", "Ford", "Kia"])),
        sort in prop::option::of(any::<bool>()),
        skip in 0usize..80,
        limit in 1usize..40,
    ) {
        let s = Search { make, sort, skip, limit };
        for (dealer, always_whole) in [("whole", true), ("offset", true), ("first25", false), ("listable", false)] {
            match run(search(dealer, &s)) {
                Answered::Page { total, stocks } => {
                    if dealer == "listable" && skip >= total {
                        // Straight through past the end: nothing, and the upstream's total
                        // (which counts the listing the schema refuses when it is a match).
                        prop_assert!(stocks.is_empty());
                        continue;
                    }
                    let (want_total, want) = s.oracle();
                    if dealer == "listable" && total == want_total + 1 {
                        // The upstream's total counts the refused listing: the gateway trusts
                        // it only on pages that do not hold that record.
                        prop_assert_eq!(stocks, want, "{} {}", dealer, s.request());
                        continue;
                    }
                    prop_assert_eq!((total, stocks), (want_total, want), "{} {}", dealer, s.request());
                }
                Answered::Refused { code, .. } => {
                    prop_assert!(!always_whole, "{} refused {}: {}", dealer, code, s.request());
                    prop_assert_eq!(code.as_str(), "INTERNAL_ERROR");
                }
            }
        }
    }
}

#[test]
fn check_refuses_a_pagination_whose_position_never_reaches_the_upstream() {
    let dir = tempfile::tempdir().expect("temp");
    // `check` of dealer `m` with this search mapping: its exit code and what it said.
    let check = |search: String| {
        let files = vec![
            ("upstreams.yaml", UPSTREAMS.to_owned()),
            ("inventory.search.yaml", search),
        ];
        let config = common::write_dealers(dir.path(), &[common::TestDealer::new("m", files)]);
        common::run_cli(&["check"], &config, &[("HARBOR_URL", "http://127.0.0.1:9")])
    };
    // Only the size reaches the upstream: every page would be the first.
    let (code, text) = check(search_yaml(
        "offset",
        "    rows: \"{{ page.size }}\"\n  pagination: { style: offset, max_size: 50 }\n",
        true,
    ));
    assert_ne!(code, 0, "{text}");
    assert!(
        text.contains("inventory.search.yaml:") && text.contains("never reaches the upstream"),
        "{text}"
    );
    // The same file with the position sent passes.
    let (code, text) = check(search_yaml(
        "offset",
        "    rows: \"{{ page.size }}\"\n    start: \"{{ page.offset }}\"\n  pagination: { style: offset, max_size: 50 }\n",
        true,
    ));
    assert_eq!(code, 0, "{text}");
    // How older mappings paged a body: the window the buyer asked for, which a scan's calls
    // never carry. Valid, but `check` says what it will not see.
    let (code, text) = check(search_yaml(
        "offset",
        "    rows: \"{{ page.size }}\"\n    start: \"{{ page.offset }}\"\n    from: \"{{ request.pagination.skip }}\"\n  pagination: { style: offset, max_size: 50 }\n",
        true,
    ));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("inventory.search.yaml:") && text.contains("reads `request.pagination`"),
        "{text}"
    );
}
