//! Sequential paging (docs/mappings.md §Paging): dealer systems that give each page's successor
//! instead of taking a position, served exactly for any AAP `skip`/`limit` by walking them.
//!
//! Three stand-ins written here, over the same 90 units (sold ones among them):
//!
//! - **Summit**, a GraphQL API: one POST endpoint, Relay connections (`first`/`after`,
//!   `pageInfo.endCursor`, `hasNextPage`), `first` silently capped at 40, only units for sale,
//!   sorted as AAP asks; errors come back with HTTP 200 in `errors[]`.
//! - **Brook**, a REST API paging by `Link: <…>; rel="next"` headers with opaque page tokens; it
//!   lists sold units too.
//! - **Crest**, an OData v4 service: `$top` only (`$skip` refused with 400), continuation only
//!   through `@odata.nextLink`, `@odata.count` for the total.
//!
//! Every answer is compared with an oracle over the same data by AAP's rules.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use common::Gateway;
use common::http_server::{Answer, FullAnswer, HttpServer, Seen};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Debug)]
struct Unit {
    stock: String,
    vin: String,
    make: &'static str,
    sold: bool,
    price: Option<u64>,
}

static UNITS: LazyLock<Vec<Unit>> = LazyLock::new(|| {
    (0..90u64)
        .map(|i| Unit {
            stock: format!("S{:04}", 9000 - i * 7),
            vin: format!("3FADP4EJ{:09}", 100_000 + i * 53),
            make: ["Subaru", "Mazda", "Ram", "Jeep"][(i % 4) as usize],
            sold: i % 6 == 1,
            price: (i % 9 != 2).then_some(15_000 + (i * 733) % 9_000 / 1_000 * 1_000),
        })
        .collect()
});

impl Unit {
    fn node(&self) -> Value {
        json!({ "stockNo": self.stock, "vin": self.vin, "make": self.make,
                "state": if self.sold { "SOLD" } else { "STOCK" }, "price": self.price })
    }
}

/// AAP's order: by price (if asked; unpriced last in both orders), ties by stock then VIN.
fn aap_order(units: &mut [&Unit], sort: Option<bool>) {
    units.sort_by(|a, b| {
        let by_stock = a.stock.cmp(&b.stock).then(a.vin.cmp(&b.vin));
        match sort {
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
}

fn matching(make: Option<&str>, for_sale_only: bool) -> Vec<&'static Unit> {
    UNITS
        .iter()
        .filter(|u| make.is_none_or(|m| m.eq_ignore_ascii_case(u.make)))
        .filter(|u| !for_sale_only || !u.sold)
        .collect()
}

fn json_answer(body: &Value) -> Answer {
    (200, "application/json", body.to_string().into_bytes())
}

// --- Summit (GraphQL) ------------------------------------------------------------------------

fn summit(seen: &Seen) -> Answer {
    let request: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
    let vars = &request["variables"];
    let first = vars["first"].as_u64().unwrap_or(10).min(40) as usize;
    let start = match vars["after"].as_str() {
        None => 0,
        Some(cursor) => match cursor.strip_prefix("cur:").and_then(|n| n.parse().ok()) {
            Some(n) => n,
            None => {
                return json_answer(&json!({ "errors": [{ "message": "invalid cursor",
                    "extensions": { "code": "BAD_USER_INPUT" } }] }));
            }
        },
    };
    let mut units = matching(vars["make"].as_str(), true);
    let sort = match vars["sort"].as_str() {
        Some("PRICE_ASC") => Some(false),
        Some("PRICE_DESC") => Some(true),
        _ => None,
    };
    aap_order(&mut units, sort);
    let page: Vec<Value> = units
        .iter()
        .skip(start)
        .take(first)
        .map(|u| json!({ "node": u.node() }))
        .collect();
    let end = start + page.len();
    json_answer(&json!({ "data": { "inventory": {
        "totalCount": units.len(),
        "edges": page,
        "pageInfo": { "endCursor": format!("cur:{end}"), "hasNextPage": end < units.len() },
    } } }))
}

// --- Brook (Link headers) --------------------------------------------------------------------

fn brook(seen: &Seen, addr: &str) -> FullAnswer {
    let size = seen
        .param("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10usize)
        .min(30);
    let start: usize = seen
        .param("page_token")
        .and_then(|t| t.strip_prefix("t").and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    let units = matching(seen.param("make"), false); // stock order as stored: by index
    let page: Vec<Value> = units
        .iter()
        .skip(start)
        .take(size)
        .map(|u| u.node())
        .collect();
    let end = start + page.len();
    let body = json!({ "results": page }).to_string().into_bytes();
    let mut headers = vec![(
        "link".to_owned(),
        format!("<http://{addr}/v1/units?per_page={size}>; rel=\"first\""),
    )];
    if end < units.len() {
        let make = seen
            .param("make")
            .map(|m| format!("&make={m}"))
            .unwrap_or_default();
        headers.push((
            "link".to_owned(),
            format!(
                "<http://{addr}/v1/units?page_token=t{end}&per_page={size}{make}>; rel=\"next\""
            ),
        ));
    }
    (200, "application/json", body, headers)
}

// --- Crest (OData) ---------------------------------------------------------------------------

fn crest(seen: &Seen, addr: &str) -> Answer {
    if seen.param("$skip").is_some() {
        return (
            400,
            "application/json",
            br#"{"error":{"code":"NotSupported"}}"#.to_vec(),
        );
    }
    let top = seen
        .param("$top")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20usize)
        .min(25);
    let start: usize = seen
        .param("$skiptoken")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let units = matching(None, false);
    let page: Vec<Value> = units
        .iter()
        .skip(start)
        .take(top)
        .map(|u| u.node())
        .collect();
    let end = start + page.len();
    let mut body = json!({ "@odata.count": units.len(), "value": page });
    if end < units.len() {
        body["@odata.nextLink"] = json!(format!(
            "http://{addr}/odata/Vehicles?$top={top}&$skiptoken={end}"
        ));
    }
    json_answer(&body)
}

// --- the gateway -----------------------------------------------------------------------------

const ITEM: &str = "    { stock: .stockNo, vin: .vin, make: .make,\n      status: (if .state == \"SOLD\" then \"sold\" else \"available\" end), price: .price } | compact\n";

/// Summit's search mapping, its scans and cursors kept for `scan_cache`.
fn summit_yaml(system: &str, scan_cache: &str, max_size: u32) -> String {
    format!(
        "skill: inventory.search\nupstream: stock\nscan_cache: {scan_cache}\nrequest:\n  method: POST\n  path: /{system}/graphql\n  body_format: json\n  body: |\n    {{\"query\": \"query($first: Int!, $after: String, $make: String, $sort: Sort) {{ inventory(first: $first, after: $after, make: $make, sort: $sort) {{ totalCount edges {{ node {{ stockNo vin make state price }} }} pageInfo {{ endCursor hasNextPage }} }} }}\",\n     \"variables\": {{\"first\": {{{{ page.size }}}}, \"after\": {{{{ page.cursor }}}}, \"make\": {{{{ (request.filters.make[0] | capitalize) if request.filters.make else none }}}},\n       \"sort\": {{{{ ('PRICE_' ~ (request.sort.order | upper)) if request.sort.field == 'price' else none }}}}}}}}\n  pagination:\n    style: cursor\n    next: .data.inventory.pageInfo.endCursor\n    has_more: .data.inventory.pageInfo.hasNextPage\n    max_size: {max_size}\n  supports:\n    listing: listable\n    filters: [{{ name: make, values: one }}]\n    sort: [price]\nresponse:\n  items: .data.inventory.edges\n  total: .data.inventory.totalCount\n  item: |\n    .node |\n{ITEM}errors:\n  - when: {{ jq: '(.errors // []) | length > 0' }}\n    code: INTERNAL_ERROR\n"
    )
}

fn folders() -> Vec<(&'static str, String)> {
    vec![
        ("summit", summit_yaml("summit", "0s", 100)),
        ("summitn", summit_yaml("summitn", "0s", 100)),
        ("summitc", summit_yaml("summitc", "30s", 20)),
        (
            "brook",
            format!(
                "skill: inventory.search\nupstream: stock\nscan_cache: 0s\nrequest:\n  path: /brook/v1/units\n  query:\n    make: \"{{{{ request.filters.make | join(',') | capitalize }}}}\"\n  pagination: {{ style: next_link, link_header: true, size: per_page, max_size: 30 }}\n  supports:\n    filters: [{{ name: make, values: one }}]\nresponse:\n  items: .results\n  item: |\n{ITEM}"
            ),
        ),
        (
            "crest",
            format!(
                "skill: inventory.search\nupstream: stock\nscan_cache: 0s\nrequest:\n  path: /crest/odata/Vehicles\n  pagination: {{ style: next_link, next: '.\"@odata.nextLink\"', size: $top, max_size: 25 }}\nresponse:\n  items: .value\n  total: '.\"@odata.count\"'\n  item: |\n{ITEM}"
            ),
        ),
    ]
}

struct Stands {
    gw: Gateway,
    calls: Arc<AtomicUsize>,
    _server: HttpServer,
}

async fn start() -> Stands {
    let calls = Arc::new(AtomicUsize::new(0));
    let addr = Arc::new(std::sync::OnceLock::<String>::new());
    let server = HttpServer::start_full({
        let (calls, addr) = (Arc::clone(&calls), Arc::clone(&addr));
        move |seen: Seen| {
            let at = addr.get().cloned().unwrap_or_default();
            let (system, rest) = seen
                .path
                .trim_start_matches('/')
                .split_once('/')
                .unwrap_or_default();
            // Counted for the dealers whose test counts calls (the others run in parallel).
            if system == "summitc" || system == "summitn" {
                calls.fetch_add(1, Ordering::Relaxed);
            }
            let seen = Seen {
                path: format!("/{rest}"),
                ..seen
            };
            let plain =
                |(status, content_type, body): Answer| (status, content_type, body, Vec::new());
            match system {
                "summit" | "summitc" | "summitn" => plain(summit(&seen)),
                "brook" => brook(&seen, &format!("{at}/brook")),
                "crest" => plain(crest(&seen, &format!("{at}/crest"))),
                _ => (404, "text/plain", Vec::new(), Vec::new()),
            }
        }
    })
    .await;
    let _ = addr.set(server.addr.to_string());
    let dealers: Vec<common::TestDealer> = folders()
        .into_iter()
        .map(|(id, search)| {
            common::TestDealer::new(
                id,
                vec![
                    (
                        "upstreams.yaml",
                        "stock:\n  kind: rest\n  base_url: ${STANDS_URL}\n  timeouts: { connect: 1s, request: 2s }\n".to_owned(),
                    ),
                    ("inventory.search.yaml", search),
                ],
            )
        })
        .collect();
    let gw = common::start_dealers(&dealers, &[("STANDS_URL", server.url())]).await;
    Stands {
        gw,
        calls,
        _server: server,
    }
}

static STANDS: LazyLock<Stands> = LazyLock::new(|| common::RUNTIME.block_on(start()));

fn run<T>(body: impl std::future::Future<Output = T>) -> T {
    common::run_with(&STANDS, body)
}

#[derive(Debug, Clone)]
struct Search {
    make: Option<&'static str>,
    sort: Option<bool>,
    skip: usize,
    limit: usize,
}

impl Search {
    fn request(&self) -> Value {
        let mut r = json!({ "type": "inventory.search.request",
                            "pagination": { "skip": self.skip, "limit": self.limit } });
        if let Some(make) = self.make {
            r["filters"] = json!({ "make": [make.to_lowercase()] });
        }
        if let Some(desc) = self.sort {
            r["sort"] = json!({ "field": "price", "order": if desc { "desc" } else { "asc" } });
        }
        r
    }

    fn oracle(&self) -> (usize, Vec<String>) {
        let mut units = matching(self.make, true);
        aap_order(&mut units, self.sort);
        let page = units
            .iter()
            .skip(self.skip)
            .take(self.limit)
            .map(|u| u.stock.clone())
            .collect();
        (units.len(), page)
    }
}

async fn search(dealer: &str, s: &Search) -> Result<(usize, Vec<String>), String> {
    let reply = STANDS
        .gw
        .send(&format!("/dealers/{dealer}/a2a"), s.request())
        .await;
    if reply.body.get("error").is_some() {
        return Err(reply.text);
    }
    let payload = reply.payload();
    common::schema::assert_reply_valid(payload);
    Ok(common::total_and_stocks(&payload["data"]))
}

#[test]
fn a_graphql_connection_is_walked_for_any_window_past_its_row_cap() {
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
                sort: Some(false),
                skip: 45,
                limit: 20,
            },
            Search {
                make: Some("Ram"),
                sort: Some(true),
                skip: 3,
                limit: 7,
            },
            Search {
                make: None,
                sort: Some(true),
                skip: 70,
                limit: 30,
            },
            Search {
                make: None,
                sort: None,
                skip: 500,
                limit: 10,
            },
        ] {
            assert_eq!(
                search("summit", &s).await,
                Ok(s.oracle()),
                "{}",
                s.request()
            );
        }
    });
}

#[test]
fn page_three_starts_from_its_cursor_when_the_cache_is_on() {
    run(async {
        let calls = || STANDS.calls.load(Ordering::Relaxed);
        let s = Search {
            make: None,
            sort: Some(true),
            skip: 60,
            limit: 5,
        };
        assert!(s.oracle().0 > 65, "{}", s.oracle().0);
        // Pages of 20 (`max_size: 20`): the first walk reads pages 1 to 4.
        let before = calls();
        assert_eq!(search("summitc", &s).await, Ok(s.oracle()));
        assert_eq!(calls() - before, 4);
        // The next buyer's page starts from its cursor: one call.
        let before = calls();
        assert_eq!(search("summitc", &s).await, Ok(s.oracle()));
        assert_eq!(calls() - before, 1);
        // Without the cache (`scan_cache: 0s`, pages of 40 by Summit's cap) every walk
        // starts from the first page.
        let before = calls();
        assert_eq!(search("summitn", &s).await, Ok(s.oracle()));
        assert_eq!(calls() - before, 2);
        let before = calls();
        assert_eq!(search("summitn", &s).await, Ok(s.oracle()));
        assert_eq!(calls() - before, 2);
    });
}

#[test]
fn link_headers_and_odata_next_links_are_followed_to_the_end() {
    run(async {
        for s in [
            Search {
                make: None,
                sort: None,
                skip: 0,
                limit: 100,
            },
            Search {
                make: Some("Jeep"),
                sort: Some(false),
                skip: 2,
                limit: 9,
            },
            Search {
                make: None,
                sort: Some(true),
                skip: 60,
                limit: 20,
            },
        ] {
            assert_eq!(
                search("brook", &s).await,
                Ok(s.oracle()),
                "brook {}",
                s.request()
            );
            assert_eq!(
                search("crest", &s).await,
                Ok(s.oracle()),
                "crest {}",
                s.request()
            );
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn every_sequentially_paged_answer_is_the_oracles(
        make in prop::option::of(prop::sample::select(vec!["Subaru", "Mazda", "Ram", "Jeep"])),
        sort in prop::option::of(any::<bool>()),
        skip in 0usize..100,
        limit in 1usize..60,
    ) {
        let s = Search { make, sort, skip, limit };
        for dealer in ["summit", "brook", "crest"] {
            prop_assert_eq!(run(search(dealer, &s)), Ok(s.oracle()), "{} {}", dealer, s.request());
        }
    }
}
