//! Tests of the whole search: helpers, paging and the single-vehicle reading; the rest by job.

use std::cmp::Ordering;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::keys::Text;
use super::sort::SortField;
use super::*;

mod facets;
mod filters;
mod properties;
mod sort;

/// The requests of these tests, written as JSON as buyers send them.
trait AsJson {
    fn search_json(&self, request: &Value) -> Page;
    fn facets_json(&self, filters: Option<&Value>) -> Value;
}

impl AsJson for Inventory {
    fn search_json(&self, request: &Value) -> Page {
        self.search(&crate::protocol::SearchRequest::read(request))
    }

    fn facets_json(&self, filters: Option<&Value>) -> Value {
        let none = serde_json::Map::new();
        self.facets(filters.and_then(Value::as_object).unwrap_or(&none))
    }
}

/// A servable listing with a stock number, plus `extra` fields.
fn car(stock: &str, extra: Value) -> Value {
    let mut v = json!({ "stock": stock, "status": "available" });
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

fn inventory(vehicles: Vec<Value>) -> Inventory {
    Inventory::new(vehicles.into_iter().map(Listing::new).collect())
}

fn stocks(page: &Page) -> Vec<&str> {
    page.vehicles
        .iter()
        .map(|v| v["stock"].as_str().unwrap_or("-"))
        .collect()
}

/// Stocks of every match, in order (limit 100).
fn search_stocks(inv: &Inventory, filters: Value) -> Vec<String> {
    let page = inv.search_json(
        &json!({ "type": "inventory.search.request", "filters": filters,
                                   "pagination": { "limit": 100 } }),
    );
    stocks(&page).into_iter().map(String::from).collect()
}

fn sorted_stocks(inv: &Inventory, field: &str, order: &str) -> Vec<String> {
    let page = inv.search_json(&json!({ "type": "inventory.search.request",
                                   "sort": { "field": field, "order": order } }));
    stocks(&page).into_iter().map(String::from).collect()
}

#[test]
fn pagination_defaults_clamps_and_echoes() {
    let inv = inventory(
        (0..150)
            .map(|i| car(&format!("S{i:03}"), json!({})))
            .collect(),
    );
    let search = |pagination: Value| {
        inv.search_json(&json!({ "type": "inventory.search.request", "pagination": pagination }))
    };
    // (pagination, echoed skip, effective limit, page length, first stock)
    let cases = [
        (json!(null), 0, 20, 20, Some("S000")),
        (json!({}), 0, 20, 20, Some("S000")),
        (json!({ "skip": 40 }), 40, 20, 20, Some("S040")),
        (json!({ "limit": 5, "skip": 3 }), 3, 5, 5, Some("S003")),
        (json!({ "limit": 20.0 }), 0, 20, 20, Some("S000")),
        (json!({ "limit": 100 }), 0, 100, 100, Some("S000")),
        (json!({ "limit": 1000 }), 0, 100, 100, Some("S000")),
        // Below the schema's minimum of 1: raised to 1, like the proxy path.
        (json!({ "limit": 0 }), 0, 1, 1, Some("S000")),
        (
            json!({ "limit": 101, "skip": 100 }),
            100,
            100,
            50,
            Some("S100"),
        ),
        (json!({ "skip": 149 }), 149, 20, 1, Some("S149")),
        (json!({ "skip": 150 }), 150, 20, 0, None),
        (json!({ "skip": 10_000 }), 10_000, 20, 0, None),
    ];
    for (pagination, skip, limit, len, first) in cases {
        let page = search(pagination.clone());
        assert_eq!(page.total, 150, "{pagination}");
        assert_eq!((page.skip, page.limit), (skip, limit), "{pagination}");
        assert_eq!(page.vehicles.len(), len, "{pagination}");
        assert_eq!(stocks(&page).first().copied(), first, "{pagination}");
    }
    // Same with a filter (the non-fast path).
    let page = inv.search_json(&json!({ "type": "inventory.search.request",
        "filters": { "query": "", "condition": [], "stock": "S149" },
        "pagination": { "skip": 1 } }));
    assert_eq!((page.total, page.skip, page.vehicles.len()), (1, 1, 0));
}

#[test]
fn matches_applies_the_same_semantics_to_a_single_vehicle() {
    let vehicle = json!({ "status": "available", "make": "Honda ", "price": 20000,
                          "year": 2022, "vin": "1HGCY2F57RA000001" });
    let cases = [
        (json!({}), true),
        (
            json!({ "make": ["HONDA"], "price_max": 20000, "year_min": 2022 }),
            true,
        ),
        (
            json!({ "vin": "1HGCY2F57RA000001", "vehicle_type": ["car"] }),
            true,
        ),
        (json!({ "make": ["Toyota"] }), false),
        (json!({ "mileage_max": 100 }), false),
        (
            json!({ "dc_fast_charge": false, "query": "honda 2022" }),
            true,
        ),
    ];
    for (filters, expected) in cases {
        assert_eq!(matches(&filters, &vehicle), expected, "{filters}");
    }
    let filters = Filters::new(json!({ "make": ["honda"] }).as_object().expect("object"));
    assert!(!filters.is_empty());
    assert!(
        Filters::new(
            json!({ "make": [], "query": " " })
                .as_object()
                .expect("object")
        )
        .is_empty()
    );
    let sold = json!({ "status": "sold", "make": "Honda" });
    assert!(!filters.matches(&sold));
}

#[test]
fn page_serializes_as_search_response_data() {
    let inv = inventory(vec![car("1", json!({ "price": 1 }))]);
    let page = inv.search_json(&json!({ "type": "inventory.search.request" }));
    let data = serde_json::to_value(&page).unwrap();
    assert_eq!(
        data,
        json!({ "total": 1, "skip": 0, "limit": 20,
                "vehicles": [{ "stock": "1", "status": "available", "price": 1 }] })
    );
}
