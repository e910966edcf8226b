//! Term and range facets.

use super::*;

#[test]
fn term_facets_group_case_insensitively_and_sort_by_count_then_value() {
    let inv = inventory(vec![
        car("1", json!({ "make": "Honda", "year": 2022 })),
        car("2", json!({ "make": "HONDA", "year": 2022 })),
        car("3", json!({ "make": "Honda ", "year": 2021 })),
        car("4", json!({ "make": "Toyota", "year": 2021 })),
        car("5", json!({ "make": "toyota", "year": 2020 })),
        car("6", json!({ "make": "BMW", "year": 2020 })),
        car("7", json!({ "make": "audi", "year": 2020.0 })),
        car("8", json!({ "make": "Audi" })),
    ]);
    let facets = inv.facets_json(None);
    assert_eq!(
        facets["makes"],
        json!([
            { "value": "Honda", "count": 3 },
            { "value": "Audi", "count": 2 },
            { "value": "Toyota", "count": 2 },
            { "value": "BMW", "count": 1 },
        ])
    );
    assert_eq!(
        facets["years"],
        json!([
            { "value": 2020, "count": 3 },
            { "value": 2021, "count": 2 },
            { "value": 2022, "count": 2 },
        ])
    );
    // Display spellings come from the whole inventory, whatever the filter.
    let facets = inv.facets_json(Some(&json!({ "stock": "2" })));
    assert_eq!(facets["makes"], json!([{ "value": "Honda", "count": 1 }]));
}

#[test]
fn facets_use_the_aap_value_forms() {
    let inv = inventory(vec![
        car(
            "1",
            json!({ "dc_fast_charge": true, "vehicle_type": "motorcycle" }),
        ),
        car("2", json!({ "dc_fast_charge": false })),
        car("3", json!({})),
        car("4", json!({ "condition": "used", "status": "pending" })),
    ]);
    let facets = inv.facets_json(None);
    assert_eq!(
        facets["dc_fast_charge"],
        json!([{ "value": "false", "count": 3 }, { "value": "true", "count": 1 }])
    );
    assert_eq!(
        facets["vehicle_types"],
        json!([{ "value": "car", "count": 3 }, { "value": "motorcycle", "count": 1 }])
    );
    assert_eq!(
        facets["conditions"],
        json!([{ "value": "used", "count": 1 }])
    );
    assert_eq!(
        facets["statuses"],
        json!([{ "value": "available", "count": 3 }, { "value": "pending", "count": 1 }])
    );
    // No listing carries the flag: no dc_fast_charge facet at all.
    let facets = inventory(vec![car("1", json!({}))]).facets_json(None);
    assert_eq!(facets.get("dc_fast_charge"), None);
}

#[test]
fn range_facets_cover_only_listings_with_the_field() {
    let inv = inventory(vec![
        car(
            "1",
            json!({ "price": 30000, "list_price": 5000, "year": 2019, "mileage": 12 }),
        ),
        car(
            "2",
            json!({ "price": 10000, "year": 2024, "electric_range_mi": 250.5 }),
        ),
        car(
            "3",
            json!({ "list_price": 1000, "year": 2015, "electric_range_mi": 100 }),
        ),
        json!({ "stock": "sold", "status": "sold", "price": 1, "displacement_cc": 600 }),
    ]);
    let facets = inv.facets_json(None);
    assert_eq!(facets["price_range"], json!({ "min": 10000, "max": 30000 }));
    assert_eq!(facets["year_range"], json!({ "min": 2015, "max": 2024 }));
    assert_eq!(facets["mileage_range"], json!({ "min": 12, "max": 12 }));
    assert_eq!(
        facets["electric_range_mi_range"],
        json!({ "min": 100, "max": 250.5 })
    );
    assert_eq!(facets.get("displacement_cc_range"), None);
    // Filtered down to an unpriced listing: no price_range.
    let facets = inv.facets_json(Some(&json!({ "stock": "3" })));
    assert_eq!(facets.get("price_range"), None);
    assert_eq!(facets.get("mileage_range"), None);
    assert_eq!(facets["year_range"], json!({ "min": 2015, "max": 2015 }));
}

#[test]
fn facets_follow_the_filters_and_keep_the_term_key_set() {
    let inv = inventory(vec![
        car("1", json!({ "make": "Honda", "trim": "EX", "price": 100 })),
        car("2", json!({ "make": "Toyota", "price": 200 })),
        car("3", json!({ "make": "Toyota", "body": "suv" })),
    ]);
    let all = inv.facets_json(None);
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(
        keys(&all),
        [
            "makes",
            "trims",
            "bodies",
            "vehicle_types",
            "statuses",
            "price_range"
        ]
    );
    let toyota = inv.facets_json(Some(&json!({ "make": ["toyota"] })));
    assert_eq!(toyota["makes"], json!([{ "value": "Toyota", "count": 2 }]));
    assert_eq!(toyota["trims"], json!([]));
    assert_eq!(toyota["price_range"], json!({ "min": 200, "max": 200 }));
    let none = inv.facets_json(Some(&json!({ "make": ["Ford"] })));
    assert_eq!(
        keys(&none),
        ["makes", "trims", "bodies", "vehicle_types", "statuses"]
    );
    assert_eq!(none["statuses"], json!([]));
    // An empty inventory has no facets at all.
    assert_eq!(inventory(vec![]).facets_json(None), json!({}));
}

#[test]
fn total_equals_the_sum_of_counts_of_a_facet_every_listing_has() {
    let inv = inventory(vec![
        car(
            "1",
            json!({ "make": "Honda", "condition": "used", "dc_fast_charge": true }),
        ),
        json!({ "stock": "2", "status": "intransit", "make": "Honda", "vehicle_type": "rv" }),
        json!({ "stock": "3", "status": "pending", "make": "Kia" }),
        json!({ "stock": "4", "status": "sold", "make": "Honda" }),
    ]);
    let sum = |facet: &Value| -> u64 {
        facet
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["count"].as_u64())
            .sum()
    };
    for filters in [
        json!({}),
        json!({ "make": ["honda"] }),
        json!({ "make": ["Ford"] }),
    ] {
        let page =
            inv.search_json(&json!({ "type": "inventory.search.request", "filters": filters }));
        let facets = inv.facets_json(Some(&filters));
        for key in ["statuses", "vehicle_types", "dc_fast_charge", "makes"] {
            assert_eq!(sum(&facets[key]), page.total as u64, "{key} {filters}");
        }
    }
}
