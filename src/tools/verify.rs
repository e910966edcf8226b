//! `aap-gateway verify`: a live self-check of a dealer's proxy-mode search mapping. Every
//! `supports` declaration says "the upstream answers this exactly as AAP means it"; a wrong one
//! (a filter the DMS matches case-insensitively, a sort that puts unpriced units first) serves
//! wrong answers silently. So the same spread of AAP searches is answered twice — as the mapping
//! translates them, and by the gateway from one scan of every record the upstream's paging
//! reaches — and every difference is reported with the request that shows it and the
//! declaration to change. The spread probes where upstreams differ from AAP: range boundaries
//! (a `price_max` equal to a unit's price, and a dollar below it), and ties (units with equal
//! sort values, which AAP orders by stock number then VIN).
//!
//! The report says which side it trusts and why: the scan is the exact-or-refused walk of
//! `engine::proxy` (a walk that cannot be whole is refused, and then there is nothing to
//! compare), and what the scan read is accounted for — listings, units excluded by status,
//! records the item mapping skipped, listings the AAP schema refused — so a total that differs
//! is explained rather than blamed on either side.
//!
//! The upstream's limits hold: calls go one at a time through the dealer's own client
//! (concurrency cap, retry budget, circuit breaker), with a pause between searches.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::app::Dealer;
use crate::engine::Handler;
use crate::engine::proxy::ProxyMapping;
use crate::error::AapError;
use crate::inventory::Inventory;
use crate::protocol::{SearchRequest, Skill};
use crate::telemetry::metrics::Metrics;

/// One disagreement between the mapping's answer and the gateway's.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The AAP `inventory.search.request` that shows it.
    pub request: Value,
    pub what: String,
    /// The declaration to change, when one explains it.
    pub fix: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Report {
    /// What the scan read, which the gateway's answers are computed from.
    pub scan: Scan,
    /// The total the mapping answers for a search without filters: the upstream's own count
    /// when such a search goes straight through.
    pub upstream_total: Option<usize>,
    pub searches: usize,
    pub differences: Vec<Difference>,
}

/// What the scan of every record the upstream's paging reaches read, record by record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Listings AAP serves: the gateway's answers are computed over these.
    pub listings: usize,
    /// Units left out for their `status` (sold, …).
    pub excluded: usize,
    /// Records the item mapping failed on (`record_skipped`).
    pub skipped: u64,
    /// Listings the AAP listing schema refused (`listing_invalid`).
    pub refused: u64,
}

impl Scan {
    /// Upstream records read: every one is one of the four.
    pub fn records(&self) -> u64 {
        (self.listings + self.excluded) as u64 + self.skipped + self.refused
    }

    /// Why a count over the upstream's records can exceed the gateway's, in words; empty when
    /// every record read became a listing.
    pub fn left_out(&self) -> String {
        let mut why = Vec::new();
        if self.excluded > 0 {
            why.push(format!(
                "{} excluded for their status (sold, …)",
                self.excluded
            ));
        }
        if self.skipped > 0 {
            why.push(format!("{} the item mapping could not map", self.skipped));
        }
        if self.refused > 0 {
            why.push(format!("{} the AAP listing schema refused", self.refused));
        }
        why.join(", ")
    }
}

/// Runs at most `max` searches, `pause` apart; `progress(done, of)` after each. `metrics` is
/// the process's (the scan's skipped and refused records are read off its counters).
pub async fn verify(
    dealer: &Dealer,
    metrics: &Metrics,
    max: usize,
    pause: Duration,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, String> {
    let mapped = match dealer.handler_for(Skill::InventorySearch) {
        Some(Handler::Proxy(m)) => Arc::clone(m),
        Some(Handler::Feed { .. }) => {
            return Err(format!(
                "dealer `{}` searches its feed in the gateway already: nothing to compare",
                dealer.id()
            ));
        }
        _ => {
            return Err(format!(
                "dealer `{}` has no proxy-mode inventory.search mapping to verify",
                dealer.id()
            ));
        }
    };
    let before = events(metrics, dealer.id());
    let inventory = match mapped.full_scan().await {
        Ok(inventory) => inventory,
        Err(e @ AapError::Incomplete { .. }) => {
            return Err(format!(
                "the scan was refused, so there is no whole inventory to compare with: {e}"
            ));
        }
        Err(e) => return Err(format!("the scan failed: {e}")),
    };
    let after = events(metrics, dealer.id());
    let delta = |event: &str| {
        after.get(event).copied().unwrap_or(0) - before.get(event).copied().unwrap_or(0)
    };
    let scan = Scan {
        listings: inventory.len(),
        excluded: inventory.excluded(),
        skipped: delta("record_skipped"),
        refused: delta("listing_invalid"),
    };
    let everything = all_listings(&inventory);
    let mut requests = spread(&everything, &mapped);
    requests.truncate(max);
    let mut differences = Vec::new();
    let mut upstream_total = None;
    let of = requests.len();
    for (i, request) in requests.into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        let oracle = inventory.search(&SearchRequest::read(&request));
        match mapped.execute(&request).await {
            Ok(answer) => {
                let answer = answer.into_value();
                if request.get("filters").is_none() && upstream_total.is_none() {
                    upstream_total = answer["total"].as_u64().map(|t| t as usize);
                }
                for (what, fix) in compare(&request, &answer, &oracle, &mapped, &scan) {
                    differences.push(Difference {
                        request: request.clone(),
                        what,
                        fix,
                    });
                }
            }
            Err(e) => differences.push(Difference {
                request: request.clone(),
                what: format!("the mapping failed: {e}"),
                fix: None,
            }),
        }
        progress(i + 1, of);
    }
    Ok(Report {
        scan,
        upstream_total,
        searches: of,
        differences,
    })
}

/// This dealer's `aap_gateway_mapping_events_total` counts by event, summed over its
/// upstreams, as the process's metrics read now.
fn events(metrics: &Metrics, dealer: &str) -> BTreeMap<String, u64> {
    let dealer_label = format!("dealer=\"{dealer}\"");
    let mut out = BTreeMap::new();
    for line in metrics.encode().lines() {
        let Some(labels) = line.strip_prefix("aap_gateway_mapping_events_total{") else {
            continue;
        };
        let Some((labels, value)) = labels.rsplit_once("} ") else {
            continue;
        };
        if !labels.split(',').any(|l| l == dealer_label) {
            continue;
        }
        let event = labels
            .split(',')
            .find_map(|l| l.strip_prefix("event=\""))
            .map(|e| e.trim_end_matches('"').to_owned());
        if let (Some(event), Ok(count)) = (event, value.trim().parse::<f64>()) {
            *out.entry(event).or_default() += count as u64;
        }
    }
    out
}

/// Every listing of the scan, in the gateway's default order.
fn all_listings(inventory: &Inventory) -> Vec<Arc<Value>> {
    let mut out = Vec::new();
    loop {
        let request = json!({
            "type": "inventory.search.request",
            "pagination": { "skip": out.len(), "limit": 100 }
        });
        let page = inventory.search(&SearchRequest::read(&request));
        let done = page.vehicles.is_empty() || out.len() + page.vehicles.len() >= page.total;
        out.extend(page.vehicles);
        if done {
            return out;
        }
    }
}

/// The searches: each declared filter with common, case-changed and combined values taken from
/// the inventory itself, each sort field in both orders, and paging edges.
fn spread(listings: &[Arc<Value>], mapped: &ProxyMapping) -> Vec<Value> {
    let search = |extra: Value| {
        let mut r = json!({ "type": "inventory.search.request" });
        if let (Some(obj), Value::Object(more)) = (r.as_object_mut(), extra) {
            obj.extend(more);
        }
        r
    };
    let mut out = vec![search(json!({}))];
    let total = listings.len();
    for (skip, limit) in [(0, 5), (7, 5), (total.saturating_sub(3), 5)] {
        out.push(search(
            json!({ "pagination": { "skip": skip, "limit": limit } }),
        ));
    }
    // Filters the mapping sends first: those are the declarations being checked.
    let mut keys: Vec<&str> = mapped.supports.filters.keys().map(String::as_str).collect();
    keys.sort_unstable();
    for key in keys {
        out.extend(
            filter_cases(key, listings)
                .into_iter()
                .map(|f| search(json!({ "filters": { key: f }, "pagination": { "limit": 100 } }))),
        );
    }
    // Declared sort fields first: those are the declarations being checked.
    let (mut sorts, rest): (Vec<&str>, Vec<&str>) =
        crate::inventory::sort_fields().partition(|f| mapped.supports.sort.contains_key(*f));
    sorts.sort_unstable();
    sorts.extend(rest);
    for field in sorts {
        for order in ["asc", "desc"] {
            out.push(search(json!({
                "sort": { "field": field, "order": order },
                "pagination": { "limit": 20 }
            })));
        }
        // Ties: a page that starts at the first unit sharing its value with another, so that
        // the run of equal values is on it, in the order the upstream breaks the tie.
        if let Some(at) = first_tie(listings, field) {
            out.push(search(json!({
                "sort": { "field": field, "order": "asc" },
                "pagination": { "skip": at, "limit": 20 }
            })));
        }
    }
    out
}

/// Where, in the order ascending by `field`, the first run of two or more units with the same
/// value starts (AAP's position, which the request's `skip` names).
fn first_tie(listings: &[Arc<Value>], field: &str) -> Option<usize> {
    let mut values: Vec<&Value> = listings
        .iter()
        .filter_map(|v| v.get(field).filter(|x| !x.is_null()))
        .collect();
    values.sort_by(|a, b| compare_values(a, b));
    // Units without a value sort last: the run's position is among those with one. (Text is
    // compared as written here; where AAP's order of text differs, the page of 20 that starts
    // here still holds the run unless the text orders differ by more than that.)
    values.windows(2).position(|w| w[0] == w[1])
}

/// JSON numbers by value, strings by text (what a sort field holds).
fn compare_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => a.as_str().cmp(&b.as_str()),
    }
}

/// Values for filter `key`: the most common one, it in lower case, and the two most common;
/// for a range, its boundaries on units' own values.
fn filter_cases(key: &str, listings: &[Arc<Value>]) -> Vec<Value> {
    let field = match key {
        "rooftops" => "rooftop",
        k => k,
    };
    let counts = |field: &str| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for v in listings {
            if let Some(s) = v.get(field).and_then(Value::as_str) {
                *counts.entry(s.to_owned()).or_default() += 1;
            }
        }
        let mut by_count: Vec<(String, usize)> = counts.into_iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        by_count.into_iter().map(|(v, _)| v).collect::<Vec<_>>()
    };
    let numbers = |field: &str| {
        let mut n: Vec<i64> = listings
            .iter()
            .filter_map(|v| v.get(field).and_then(Value::as_i64))
            .collect();
        n.sort_unstable();
        n
    };
    // A unit's own value at the median and at the ends, and one step inside the range past
    // the median: an upstream that compares cents with whole dollars, or `<` for `<=`, differs
    // only at a boundary that a unit sits on.
    let boundaries = |field: &str, upper: bool| -> Vec<Value> {
        let n = numbers(field);
        let (Some(&low), Some(&high)) = (n.first(), n.last()) else {
            return Vec::new();
        };
        let median = n[n.len() / 2];
        let mut out = if upper {
            vec![median, median - 1, low]
        } else {
            vec![median, median + 1, high]
        };
        out.dedup();
        out.into_iter().map(|v| json!(v)).collect()
    };
    match key {
        "vin" | "stock" => {
            let values = counts(field);
            let Some(first) = values.first() else {
                return Vec::new();
            };
            let mut out = vec![json!(first)];
            if first.to_lowercase() != *first {
                out.push(json!(first.to_lowercase()));
            }
            out
        }
        "query" => counts("model")
            .first()
            .map(|m| vec![json!(m), json!(m.to_lowercase())])
            .unwrap_or_default(),
        k if k.ends_with("_min") || k.ends_with("_max") => {
            let base = k.trim_end_matches("_min").trim_end_matches("_max");
            boundaries(base, k.ends_with("_max"))
        }
        "dc_fast_charge" => vec![json!(true), json!(false)],
        _ => {
            let values = counts(field);
            let mut out = Vec::new();
            if let Some(first) = values.first() {
                out.push(json!([first]));
                let lower = first.to_lowercase();
                if lower != *first {
                    out.push(json!([lower]));
                }
            }
            if values.len() >= 2 {
                out.push(json!([values[0], values[1]]));
            }
            out
        }
    }
}

/// What differs between the mapping's `answer` and the gateway's `oracle` page, each with the
/// declaration to change where one explains it. The gateway orders unsorted searches by stock
/// then VIN while an upstream keeps its own order: so order is compared only when sorted —
/// by the sort field's values, and where those agree, by the units themselves unless the
/// mapping declares `ties: own` — and membership only when one page holds every match.
fn compare(
    request: &Value,
    answer: &Value,
    oracle: &crate::inventory::Page,
    mapped: &ProxyMapping,
    scan: &Scan,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let filters: Vec<&str> = request
        .get("filters")
        .and_then(Value::as_object)
        .map(|f| f.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let declared: Vec<&str> = filters
        .iter()
        .copied()
        .filter(|f| mapped.supports.filters.contains_key(*f))
        .collect();
    let total = answer["total"].as_u64().unwrap_or_default() as usize;
    if total != oracle.total {
        let mut what = format!(
            "total: the mapping answers {total}; the gateway, searching the {} listings its \
             scan read, {}",
            scan.listings, oracle.total
        );
        let left_out = scan.left_out();
        if total > oracle.total && !left_out.is_empty() {
            what.push_str(&format!(
                " (the scan also read {left_out}: an upstream total may count those)"
            ));
        }
        let fix = (!declared.is_empty()).then(|| {
            format!(
                "drop {} from `supports.filters`, or make the template send what AAP means",
                names(&declared)
            )
        });
        out.push((what, fix));
    }
    let vehicles: Vec<&Value> = answer["vehicles"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let expected: Vec<&Value> = oracle.vehicles.iter().map(AsRef::as_ref).collect();
    if let Some(field) = request.pointer("/sort/field").and_then(Value::as_str) {
        let keys = |v: &[&Value]| -> Vec<Value> {
            v.iter()
                .map(|x| x.get(field).cloned().unwrap_or(Value::Null))
                .collect()
        };
        let (got, want) = (keys(&vehicles), keys(&expected));
        let support = mapped.supports.sort.get(field);
        if got != want {
            let fix = support.map(|_| {
                format!("drop `{field}` from `supports.sort`, or correct its `missing` rule")
            });
            out.push((
                format!(
                    "order by {field}: the mapping gives {}, the gateway {}",
                    short(&got),
                    short(&want)
                ),
                fix,
            ));
        } else if total == oracle.total && support.is_some_and(|s| s.aap_ties) {
            let (got, want) = (identities(&vehicles), identities(&expected));
            if got != want {
                out.push((
                    format!(
                        "ties on {field}: units with equal {field} come as {}, AAP orders them \
                         (by stock, then VIN) as {}",
                        short_ids(&got),
                        short_ids(&want)
                    ),
                    Some(format!(
                        "declare `{{field: {field}, ties: own}}` in `supports.sort`"
                    )),
                ));
            }
        }
    }
    let skip = request
        .pointer("/pagination/skip")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if skip == 0 && oracle.total <= oracle.limit && total == oracle.total {
        let sorted = |v: &[&Value]| {
            let mut ids = identities(v);
            ids.sort();
            ids
        };
        let got = sorted(&vehicles);
        let want = sorted(&expected);
        if got != want {
            let only = |a: &[String], b: &[String]| -> Vec<String> {
                a.iter().filter(|x| !b.contains(x)).cloned().collect()
            };
            let fix = (!declared.is_empty())
                .then(|| format!("drop {} from `supports.filters`", names(&declared)));
            out.push((
                format!(
                    "listings: only the mapping has {:?}, only the gateway {:?}",
                    only(&got, &want),
                    only(&want, &got)
                ),
                fix,
            ));
        }
    }
    out
}

/// `` `a`, `b` `` for a message.
fn names(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn identities(v: &[&Value]) -> Vec<String> {
    v.iter().map(|x| identity(x)).collect()
}

fn short_ids(ids: &[String]) -> String {
    short(&ids.iter().map(|i| json!(i)).collect::<Vec<_>>())
}

fn identity(v: &Value) -> String {
    ["vin", "stock", "vehicle_id"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or("?")
        .to_owned()
}

fn short(values: &[Value]) -> String {
    let text = Value::Array(values.to_vec()).to_string();
    if text.chars().count() > 160 {
        format!("{}…", text.chars().take(160).collect::<String>())
    } else {
        text
    }
}
