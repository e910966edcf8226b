//! `aap-gateway verify` (the real binary) probes where upstreams part from AAP: range
//! boundaries and ties, not only medians (docs/mappings.md §Checking a search mapping).
//!
//! **Ridgeline Motors**, a stand-in written here, lists 30 units over REST, three at each
//! price, and answers `price_max`, `year_min` and a price sort. Its three endpoints differ only
//! where a median search cannot see: `/exact` does what AAP means; `/banded` rounds `price_max`
//! up to whole hundreds, as a DMS with a search form's price steps does (right at every unit's
//! own price, wrong a dollar below one); `/own-ties`
//! orders equal prices by its internal id, oldest first. Each is mapped with the same
//! declarations; `verify` must pass the first, and name the request and the declaration to
//! change for the others. Two more endpoints check what `verify` says it trusts: `/messy` adds a
//! record the item mapping cannot read and one the AAP schema refuses (the scan accounts for
//! both), and `/first25` ignores paging (the scan is refused, never called full).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::http_server::{Answer, HttpServer, Seen};
use serde_json::json;

struct Unit {
    /// Ridgeline's internal id: the order it took the units in.
    id: u64,
    stock: String,
    vin: String,
    year: u64,
    price: u64,
}

fn units() -> Vec<Unit> {
    (0..30u64)
        .map(|i| Unit {
            id: i,
            // Stock numbers in the reverse of the internal order, so the two tie orders differ.
            stock: format!("RM-{:03}", 900 - i),
            vin: format!("1FTEW1EP{:09}", 5_200_000 + i * 41),
            year: 2015 + i % 8,
            price: 15_000 + (i % 10) * 1_250,
        })
        .collect()
}

fn ridgeline(seen: Seen) -> Answer {
    let endpoint = seen.path.trim_start_matches('/').to_owned();
    let number = |name: &str| {
        seen.param(name)
            .filter(|v| !v.is_empty())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let mut matches: Vec<Unit> = units()
        .into_iter()
        .filter(|u| match number("price_max") {
            Some(max) if endpoint == "banded" => u.price <= max.div_ceil(100) * 100,
            Some(max) => u.price <= max,
            None => true,
        })
        .filter(|u| number("year_min").is_none_or(|min| u.year >= min))
        .collect();
    match seen.param("sort").unwrap_or_default() {
        sort @ ("price" | "-price") => {
            matches.sort_by(|a, b| {
                let by_price = if sort == "price" {
                    a.price.cmp(&b.price)
                } else {
                    b.price.cmp(&a.price)
                };
                let tie = if endpoint == "own-ties" {
                    a.id.cmp(&b.id)
                } else {
                    a.stock.cmp(&b.stock).then_with(|| a.vin.cmp(&b.vin))
                };
                by_price.then(tie)
            });
        }
        _ => matches.sort_by(|a, b| a.stock.cmp(&b.stock)),
    }
    let mut units: Vec<_> = matches
        .iter()
        .map(|u| {
            json!({ "stockNo": u.stock, "vin": u.vin, "make": "Ford", "yr": u.year,
                    "price": u.price })
        })
        .collect();
    if endpoint == "messy" {
        // A price the item mapping cannot read, and a model year the AAP schema refuses: both
        // counted in Ridgeline's total, neither a listing.
        units.push(
            json!({ "stockNo": "RM-001", "vin": "1FTEW1EP000000001", "make": "Ford",
                           "yr": 2020, "price": "45.999,00" }),
        );
        units.push(
            json!({ "stockNo": "RM-002", "vin": "1FTEW1EP000000002", "make": "Ford",
                           "yr": 0, "price": 9_000 }),
        );
    }
    let count = units.len();
    if endpoint == "first25" {
        // Ignores paging: its first 25, and how many there are.
        units.truncate(25);
    }
    let body = json!({ "count": count, "units": units });
    (200, "application/json", body.to_string().into_bytes())
}

const UPSTREAMS: &str = "ridgeline:
  kind: rest
  base_url: ${RIDGELINE_URL}
  timeouts: { connect: 1s, request: 2s }
";

fn search_yaml(endpoint: &str) -> String {
    format!(
        r#"skill: inventory.search
upstream: ridgeline
scan_cache: 0s
request:
  path: /{endpoint}
  query:
    price_max: "{{{{ request.filters.price_max }}}}"
    year_min: "{{{{ request.filters.year_min }}}}"
    sort: "{{% if request.sort.field == 'price' %}}{{{{ '-' if request.sort.order == 'desc' }}}}price{{% endif %}}"
  supports:
    listing: listable
    filters: [price_max, year_min]
    sort: [price]
response:
  items: .units
  total: .count
  item: |
    {{ stock: .stockNo, vin: .vin, make: .make, year: .yr, price: (.price | dollars), status: "available" }}
"#
    )
}

/// A gateway config in `dir` with one dealer per endpoint.
fn config(dir: &Path) -> std::path::PathBuf {
    let mut yaml = String::from(
        "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nrate_limit: { enabled: false }\ndealers:\n",
    );
    for endpoint in ["exact", "banded", "own-ties", "messy", "first25"] {
        let folder = dir.join(endpoint);
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("upstreams.yaml"), UPSTREAMS).expect("upstreams");
        std::fs::write(folder.join("inventory.search.yaml"), search_yaml(endpoint))
            .expect("search");
        yaml.push_str(&format!(
            "  - id: {endpoint}\n    path_prefix: /dealers/{endpoint}\n    card: {{ name: {endpoint}, description: Ridgeline. }}\n    mappings: {}\n",
            folder.display()
        ));
    }
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, yaml).expect("config");
    path
}

fn verify(config: &Path, url: &str, dealer: &str) -> (bool, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["verify", "--config"])
        .arg(config)
        .args([
            "--dealer",
            dealer,
            "--max-searches",
            "100",
            "--pause",
            "1ms",
        ])
        .env("RIDGELINE_URL", url)
        .output()
        .expect("run verify");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.success(), format!("{stdout}{stderr}"))
}

/// The request line and fix line after each `DIFF` line that starts with `what`.
fn diffs<'o>(output: &'o str, what: &str) -> Vec<(&'o str, &'o str)> {
    let lines: Vec<&str> = output.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with(&format!("DIFF  {what}")))
        .map(|(i, _)| {
            (
                lines.get(i + 1).copied().unwrap_or_default(),
                lines.get(i + 2).copied().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_probes_boundaries_and_ties() {
    let server = HttpServer::start(ridgeline).await;
    let dir = tempfile::tempdir().expect("temp");
    let config = config(dir.path());
    let url = server.url();
    let run = |dealer: &str| tokio::task::block_in_place(|| verify(&config, &url, dealer));

    // The true upstream: no difference, and the report says what it trusts.
    let (ok, out) = run("exact");
    assert!(ok, "{out}");
    assert!(out.contains("scan: read 30 upstream records"), "{out}");
    assert!(out.contains("; 30 are listings"), "{out}");
    assert!(
        out.contains("upstream: the mapping answers 30 for a search without filters\n"),
        "{out}"
    );
    assert!(
        out.contains("searches over 30 listings, 0 difference(s)"),
        "{out}"
    );

    // Rounded up to hundreds: only a boundary shows it — a `price_max` a dollar below a unit's
    // price; at the median (a unit's own price) the answers agree.
    let (ok, out) = run("banded");
    assert!(!ok, "{out}");
    let found = diffs(&out, "total:");
    assert!(!found.is_empty(), "{out}");
    let prices: Vec<u64> = units().iter().map(|u| u.price).collect();
    for (request, fix) in &found {
        let request: serde_json::Value =
            serde_json::from_str(request.trim_start().trim_start_matches("request: "))
                .expect("the request as JSON");
        let max = request["filters"]["price_max"].as_u64().expect("price_max");
        assert!(
            prices.contains(&(max + 1)),
            "a dollar below a unit's price: {max}"
        );
        assert_eq!(
            *fix,
            "      fix: drop `price_max` from `supports.filters`, or make the template send what AAP means"
        );
    }
    // Ties do not differ there.
    assert!(diffs(&out, "ties on").is_empty(), "{out}");

    // Equal prices in the upstream's own order: named, with the declaration to change.
    let (ok, out) = run("own-ties");
    assert!(!ok, "{out}");
    let found = diffs(&out, "ties on price:");
    assert!(!found.is_empty(), "{out}");
    for (request, fix) in &found {
        assert!(request.contains(r#""sort":{"field":"price""#), "{out}");
        assert_eq!(
            *fix,
            "      fix: declare `{field: price, ties: own}` in `supports.sort`"
        );
    }
    assert!(diffs(&out, "total:").is_empty(), "{out}");

    // What the scan read besides listings is accounted for. (The searches agree: a page that
    // holds a record the gateway must drop is completed from a scan, never counted.)
    let (ok, out) = run("messy");
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "scan: read 32 upstream records, every one its paging reaches (a walk that could not \
             be whole is refused); 30 are listings, the gateway's answers are computed over \
             them; left out: 1 the item mapping could not map, 1 the AAP listing schema refused\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("searches over 30 listings, 0 difference(s)"),
        "{out}"
    );

    // A scan that cannot be whole is no oracle: refused, and said so.
    let (ok, out) = run("first25");
    assert!(!ok, "{out}");
    assert!(
        out.contains("the scan was refused, so there is no whole inventory to compare with")
            && out.contains("the upstream reports 30 matches and 25 could be fetched"),
        "{out}"
    );
    assert!(!out.contains("difference(s)"), "{out}");
}
