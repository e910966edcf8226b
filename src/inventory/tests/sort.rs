//! Sort orders, ties and the pre-sorted orders.

use super::*;

#[test]
fn orders_sorted_on_two_threads_are_the_orders_sorted_on_one() {
    // Ties, missing values, negative and fractional prices, odd instants, repeated stocks.
    let listings = || {
        (0..300)
            .map(|i: i64| {
                let mut v = car(&format!("S{}", i % 37), json!({ "vin": format!("V{i}") }));
                if i % 3 != 0 {
                    v["price"] = json!((i * 7919 % 101) as f64 - 50.5);
                }
                if i % 5 != 0 {
                    v["make"] = json!(["Kia", "kia", "Ford", " BMW"][(i % 4) as usize]);
                    v["updated_at"] = json!(format!("2026-0{}-1{}T10:00:00Z", 1 + i % 9, i % 10));
                }
                v["year"] = json!(2000 + i % 7);
                Listing::new(v)
            })
            .collect::<Vec<_>>()
    };
    let build = |threads| {
        let mut builder = InventoryBuilder::new();
        for Listing { vehicle, keys } in listings() {
            builder.push_keys(keys, Stored::Shared(vehicle));
        }
        builder.finish_on(threads)
    };
    let (one, two) = (build(1), build(2));
    assert_eq!(one.sorted.len(), SortField::ALL.len() * 2);
    assert_eq!(one.sorted, two.sorted);
    assert_eq!(one.default_order, two.default_order);
}

#[test]
fn missing_values_sort_last_in_both_orders() {
    for field in SortField::ALL {
        let value = |v: i64| -> Value {
            match field {
                SortField::Make | SortField::Model => json!(format!("m{v}")),
                SortField::UpdatedAt => json!(format!("2026-01-0{v}T00:00:00Z")),
                _ => json!(v),
            }
        };
        let with = |stock: &str, v: Option<i64>| {
            let mut vehicle = json!({ "status": "available", "vin": format!("VIN{stock}") });
            if field == SortField::Stock {
                if let Some(v) = v {
                    vehicle["stock"] = json!(format!("{v}{stock}"));
                }
            } else {
                vehicle["stock"] = json!(stock);
                if let Some(v) = v {
                    vehicle[field.name()] = value(v);
                }
            }
            vehicle
        };
        let inv = inventory(vec![
            with("a", None),
            with("b", Some(2)),
            with("c", Some(1)),
            with("d", None),
            with("e", Some(3)),
        ]);
        let order = |order: &str| -> Vec<String> {
            let page = inv.search_json(&json!({ "type": "inventory.search.request",
                "sort": { "field": field.name(), "order": order } }));
            page.vehicles
                .iter()
                .map(|v| v["vin"].as_str().unwrap_or("-").to_owned())
                .collect()
        };
        assert_eq!(
            order("asc"),
            ["VINc", "VINb", "VINe", "VINa", "VINd"],
            "{}",
            field.name()
        );
        assert_eq!(
            order("desc"),
            ["VINe", "VINb", "VINc", "VINa", "VINd"],
            "{}",
            field.name()
        );
    }
}

#[test]
fn price_sort_uses_the_authoritative_price_only() {
    let inv = inventory(vec![
        car("cheap-list", json!({ "list_price": 1000, "msrp": 1200 })),
        car("p2", json!({ "price": 20000, "list_price": 30000 })),
        car("p1", json!({ "price": 10000 })),
    ]);
    assert_eq!(
        sorted_stocks(&inv, "price", "asc"),
        ["p1", "p2", "cheap-list"]
    );
    assert_eq!(
        sorted_stocks(&inv, "price", "desc"),
        ["p2", "p1", "cheap-list"]
    );
    assert_eq!(
        sorted_stocks(&inv, "list_price", "asc"),
        ["cheap-list", "p2", "p1"]
    );
    assert_eq!(
        sorted_stocks(&inv, "msrp", "desc"),
        ["cheap-list", "p1", "p2"]
    );
}

#[test]
fn strings_sort_case_insensitively() {
    let inv = inventory(vec![
        car("1", json!({ "make": "toyota", "model": "rav4" })),
        car("2", json!({ "make": "BMW", "model": "X5" })),
        car("3", json!({ "make": "Audi", "model": "a4" })),
        car("4", json!({ "make": " chevrolet", "model": "Bolt" })),
    ]);
    assert_eq!(sorted_stocks(&inv, "make", "asc"), ["3", "2", "4", "1"]);
    assert_eq!(sorted_stocks(&inv, "make", "desc"), ["1", "4", "2", "3"]);
    assert_eq!(sorted_stocks(&inv, "model", "asc"), ["3", "4", "1", "2"]);
    let inv = inventory(vec![
        car("b2", json!({})),
        car("A1", json!({})),
        car("a3", json!({})),
        car("B1", json!({})),
    ]);
    assert_eq!(
        sorted_stocks(&inv, "stock", "asc"),
        ["A1", "a3", "B1", "b2"]
    );
    assert_eq!(
        sorted_stocks(&inv, "stock", "desc"),
        ["b2", "B1", "a3", "A1"]
    );
}

#[test]
fn updated_at_sorts_as_an_instant_not_as_a_string() {
    let inv = inventory(vec![
        // 08:00Z
        car(
            "paris",
            json!({ "updated_at": "2026-04-30T10:00:00+02:00" }),
        ),
        // 09:00Z
        car("utc", json!({ "updated_at": "2026-04-30T09:00:00Z" })),
        // 09:30Z
        car("sf", json!({ "updated_at": "2026-04-30T02:30:00-07:00" })),
        // 09:00:00.5Z
        car("frac", json!({ "updated_at": "2026-04-30T09:00:00.5Z" })),
        car("garbage", json!({ "updated_at": "yesterday" })),
    ]);
    assert_eq!(
        sorted_stocks(&inv, "updated_at", "asc"),
        ["paris", "utc", "frac", "sf", "garbage"]
    );
    assert_eq!(
        sorted_stocks(&inv, "updated_at", "desc"),
        ["sf", "frac", "utc", "paris", "garbage"]
    );
}

#[test]
fn ties_break_by_stock_then_vin_ascending_in_both_orders() {
    let v = |stock: Option<&str>, vin: Option<&str>, price: i64| {
        let mut v = json!({ "status": "available", "price": price });
        if let Some(stock) = stock {
            v["stock"] = json!(stock);
        }
        if let Some(vin) = vin {
            v["vin"] = json!(vin);
        }
        v
    };
    let inv = inventory(vec![
        v(None, Some("VIN-B"), 1),
        v(Some("S2"), Some("VIN-A"), 1),
        v(Some("S1"), Some("VIN-Z"), 1),
        v(Some("S1"), Some("VIN-C"), 1),
        v(None, Some("VIN-A"), 1),
        v(None, None, 1),
        v(Some("S0"), None, 2),
    ]);
    let key = |page: &Page| -> Vec<String> {
        page.vehicles
            .iter()
            .map(|v| {
                format!(
                    "{}/{}",
                    v["stock"].as_str().unwrap_or("-"),
                    v["vin"].as_str().unwrap_or("-")
                )
            })
            .collect()
    };
    let tied = [
        "S1/VIN-C", "S1/VIN-Z", "S2/VIN-A", "-/VIN-A", "-/VIN-B", "-/-",
    ];
    for order in ["asc", "desc"] {
        let page = inv.search_json(&json!({ "type": "inventory.search.request",
            "sort": { "field": "price", "order": order } }));
        let keys = key(&page);
        let (ties, rest) = if order == "asc" {
            (&keys[..6], &keys[6..])
        } else {
            (&keys[1..], &keys[..1])
        };
        assert_eq!(ties, tied, "{order}");
        assert_eq!(rest, ["S0/-"], "{order}");
    }
    // Default order (no sort): the tie-break alone.
    let page = inv.search_json(&json!({ "type": "inventory.search.request" }));
    assert_eq!(
        key(&page),
        [
            "S0/-", "S1/VIN-C", "S1/VIN-Z", "S2/VIN-A", "-/VIN-A", "-/VIN-B", "-/-"
        ]
    );
}

#[test]
fn pages_of_a_sorted_search_are_stable_and_disjoint() {
    let inv = inventory(
        (0..57)
            .map(|i| {
                car(
                    &format!("S{}", 57 - i),
                    json!({ "price": (i % 4) * 1000, "year": 2020 + i % 3 }),
                )
            })
            .collect(),
    );
    for sort in [
        json!({ "field": "price", "order": "desc" }),
        json!({ "field": "year", "order": "asc" }),
    ] {
        let all: Vec<String> = {
            let page = inv.search_json(&json!({ "type": "inventory.search.request", "sort": sort,
                                           "pagination": { "limit": 100 } }));
            stocks(&page).into_iter().map(String::from).collect()
        };
        let paged: Vec<String> = (0..6)
            .flat_map(|p| {
                let page = inv
                    .search_json(&json!({ "type": "inventory.search.request", "sort": sort,
                    "pagination": { "skip": p * 10, "limit": 10 } }));
                stocks(&page)
                    .into_iter()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(all.len(), 57);
        assert_eq!(paged, all, "{sort}");
    }
}
