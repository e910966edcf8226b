//! `aap-gateway verify`: a live self-check of a dealer's proxy-mode search mapping. Every
//! `supports` declaration says "the upstream answers this exactly as AAP means it"; a wrong one
//! (a filter the DMS matches case-insensitively, a sort that puts unpriced units first) serves
//! wrong answers silently. So the same spread of AAP searches is answered twice — as the mapping
//! translates them, and by the gateway from one full scan of the upstream — and every
//! difference is reported with the request that shows it.
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
use crate::inventory::Inventory;
use crate::protocol::{SearchRequest, Skill};

/// One disagreement between the mapping's answer and the gateway's.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The AAP `inventory.search.request` that shows it.
    pub request: Value,
    pub what: String,
}

#[derive(Debug, Clone)]
pub struct Report {
    /// Listings in the full scan.
    pub listings: usize,
    pub searches: usize,
    pub differences: Vec<Difference>,
}

/// Runs at most `max` searches, `pause` apart; `progress(done, of)` after each.
pub async fn verify(
    dealer: &Dealer,
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
    let inventory = mapped
        .full_scan()
        .await
        .map_err(|e| format!("the full scan failed: {e}"))?;
    let everything = all_listings(&inventory);
    let mut requests = spread(&everything, &mapped);
    requests.truncate(max);
    let mut differences = Vec::new();
    let of = requests.len();
    for (i, request) in requests.into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        let oracle = inventory.search(&SearchRequest::read(&request));
        match mapped.execute(&request).await {
            Ok(answer) => {
                let answer = answer.into_value();
                for what in compare(&request, &answer, &oracle) {
                    differences.push(Difference {
                        request: request.clone(),
                        what,
                    });
                }
            }
            Err(e) => differences.push(Difference {
                request: request.clone(),
                what: format!("the mapping failed: {e}"),
            }),
        }
        progress(i + 1, of);
    }
    Ok(Report {
        listings: everything.len(),
        searches: of,
        differences,
    })
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
    sorts.extend(rest);
    for field in sorts {
        for order in ["asc", "desc"] {
            out.push(search(json!({
                "sort": { "field": field, "order": order },
                "pagination": { "limit": 20 }
            })));
        }
    }
    out
}

/// Values for filter `key`: the most common one, it in lower case, and the two most common.
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
    let median = |field: &str| {
        let n = numbers(field);
        n.get(n.len() / 2).copied()
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
            median(base).map(|m| vec![json!(m)]).unwrap_or_default()
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

/// What differs between the mapping's `answer` and the gateway's `oracle` page. The gateway
/// orders unsorted searches by stock then VIN while an upstream keeps its own order, and breaks
/// ties its own way: so order is compared by the sort field's values, and membership only when
/// one page holds every match.
fn compare(request: &Value, answer: &Value, oracle: &crate::inventory::Page) -> Vec<String> {
    let mut out = Vec::new();
    let total = answer["total"].as_u64().unwrap_or_default() as usize;
    if total != oracle.total {
        out.push(format!(
            "total: the mapping answers {total}, the gateway's full scan {}",
            oracle.total
        ));
    }
    let vehicles: Vec<&Value> = answer["vehicles"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if let Some(field) = request.pointer("/sort/field").and_then(Value::as_str) {
        let keys = |v: &[&Value]| -> Vec<Value> {
            v.iter()
                .map(|x| x.get(field).cloned().unwrap_or(Value::Null))
                .collect()
        };
        let expected: Vec<&Value> = oracle.vehicles.iter().map(AsRef::as_ref).collect();
        let (got, want) = (keys(&vehicles), keys(&expected));
        if got != want {
            out.push(format!(
                "order by {field}: the mapping gives {}, the gateway {}",
                short(&got),
                short(&want)
            ));
        }
    }
    let skip = request
        .pointer("/pagination/skip")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if skip == 0 && oracle.total <= oracle.limit && total == oracle.total {
        let ids = |v: &mut dyn Iterator<Item = &Value>| {
            let mut ids: Vec<String> = v.map(identity).collect();
            ids.sort();
            ids
        };
        let got = ids(&mut vehicles.iter().copied());
        let want = ids(&mut oracle.vehicles.iter().map(AsRef::as_ref));
        if got != want {
            let only = |a: &[String], b: &[String]| -> Vec<String> {
                a.iter().filter(|x| !b.contains(x)).cloned().collect()
            };
            out.push(format!(
                "listings: only the mapping has {:?}, only the gateway {:?}",
                only(&got, &want),
                only(&want, &got)
            ));
        }
    }
    out
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
