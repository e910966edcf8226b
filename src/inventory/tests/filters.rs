//! Filter rules, through `Inventory::search`.

use super::*;

#[test]
fn only_available_intransit_and_pending_listings_are_returned_or_counted() {
    let inv = inventory(vec![
        json!({ "stock": "A", "status": "available" }),
        json!({ "stock": "B", "status": "intransit" }),
        json!({ "stock": "C", "status": "pending" }),
        json!({ "stock": "D", "status": "sold" }),
        json!({ "stock": "E" }),
        json!({ "stock": "F", "status": null }),
        json!({ "stock": "G", "status": "Available" }),
        json!({ "stock": "H", "status": "wholesale" }),
    ]);
    assert_eq!(inv.len(), 3);
    assert_eq!(inv.excluded(), 5);
    let page = inv.search_json(&json!({ "type": "inventory.search.request" }));
    assert_eq!(page.total, 3);
    assert_eq!(stocks(&page), ["A", "B", "C"]);
    let facets = inv.facets_json(None);
    assert_eq!(
        facets["statuses"],
        json!([{ "value": "available", "count": 1 }, { "value": "intransit", "count": 1 },
               { "value": "pending", "count": 1 }])
    );
    assert!(!matches(
        &json!({}),
        &json!({ "stock": "D", "status": "sold" })
    ));
    assert!(!matches(&json!({}), &json!({ "stock": "E" })));
    assert!(matches(
        &json!({}),
        &json!({ "stock": "A", "status": "pending" })
    ));
}

#[test]
fn filters_and_across_keys_and_or_within_a_list() {
    let inv = inventory(vec![
        car(
            "1",
            json!({ "make": "Honda", "condition": "used", "year": 2021 }),
        ),
        car(
            "2",
            json!({ "make": "Toyota", "condition": "cpo", "year": 2022 }),
        ),
        car(
            "3",
            json!({ "make": "Ford", "condition": "used", "year": 2023 }),
        ),
        car(
            "4",
            json!({ "make": "Honda", "condition": "new", "year": 2024 }),
        ),
    ]);
    let cases = [
        (json!({ "make": ["Honda", "Toyota"] }), vec!["1", "2", "4"]),
        (
            json!({ "make": ["Honda", "Toyota"], "condition": ["used", "cpo"] }),
            vec!["1", "2"],
        ),
        (
            json!({ "make": ["Honda"], "condition": ["used"], "year_min": 2022 }),
            vec![],
        ),
        (
            json!({ "condition": ["used"], "year_min": 2022 }),
            vec!["3"],
        ),
        (json!({}), vec!["1", "2", "3", "4"]),
    ];
    for (filters, expected) in cases {
        assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
    }
}

#[test]
fn text_filters_ignore_case_and_surrounding_whitespace_but_match_whole_values() {
    let inv = inventory(vec![
        car("1", json!({ "make": "HONDA", "model": " Civic " })),
        car("2", json!({ "make": "Honda", "model": "Civic Type R" })),
        car("3", json!({ "make": "honda ", "model": "civic" })),
    ]);
    let cases = [
        (json!({ "make": [" honda"] }), vec!["1", "2", "3"]),
        (json!({ "model": ["CIVIC"] }), vec!["1", "3"]),
        (json!({ "model": ["civ"] }), vec![]),
        (json!({ "model": ["civic type r"] }), vec!["2"]),
    ];
    for (filters, expected) in cases {
        assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
    }
}

#[test]
fn each_text_filter_reads_its_own_field() {
    for field in Text::ALL {
        let inv = inventory(vec![
            car("has", json!({ field.field(): "Value X" })),
            car("other", json!({ field.field(): "Value Y" })),
            car("lacks", json!({})),
            car("null", json!({ field.field(): null })),
            car("blank", json!({ field.field(): "   " })),
        ]);
        let filters = json!({ field.filter(): ["value x"] });
        assert_eq!(search_stocks(&inv, filters), ["has"], "{}", field.filter());
        let filters = json!({ field.filter(): ["value x", "VALUE Y"] });
        assert_eq!(
            search_stocks(&inv, filters),
            ["has", "other"],
            "{}",
            field.filter()
        );
    }
}

#[test]
fn rooftops_filter_matches_the_listing_rooftop_and_never_a_null_one() {
    let inv = inventory(vec![
        car("sf", json!({ "rooftop": "Demo Toyota San Francisco" })),
        car("oak", json!({ "rooftop": "Demo Toyota Oakland" })),
        car("single", json!({ "rooftop": null })),
    ]);
    let filters = json!({ "rooftops": ["demo toyota san francisco"] });
    assert_eq!(search_stocks(&inv, filters), ["sf"]);
}

#[test]
fn condition_and_vehicle_type_are_exact_and_a_missing_type_is_a_car() {
    let inv = inventory(vec![
        car("car", json!({ "vehicle_type": "car", "condition": "new" })),
        car("untyped", json!({ "condition": "used" })),
        car(
            "moto",
            json!({ "vehicle_type": "motorcycle", "condition": "cpo" }),
        ),
        car("rv", json!({ "vehicle_type": "rv" })),
    ]);
    let cases = [
        (json!({ "vehicle_type": ["car"] }), vec!["car", "untyped"]),
        (
            json!({ "vehicle_type": ["motorcycle", "rv"] }),
            vec!["moto", "rv"],
        ),
        (json!({ "vehicle_type": ["trailer"] }), vec![]),
        (
            json!({ "condition": ["used", "cpo"] }),
            vec!["moto", "untyped"],
        ),
        (
            json!({ "condition": ["new"], "vehicle_type": ["car"] }),
            vec!["car"],
        ),
    ];
    for (filters, expected) in cases {
        assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
    }
}

#[test]
fn vin_matches_exactly_ignoring_case_and_stock_matches_exactly() {
    let inv = inventory(vec![
        car("T123", json!({ "vin": "1HGCY2F57RA000001" })),
        car("t123", json!({ "vin": "1hgcy2f57ra000002" })),
        car("T1234", json!({})),
    ]);
    let cases = [
        (json!({ "vin": "1HGCY2F57RA000001" }), vec!["T123"]),
        (json!({ "vin": "1HGCY2F57RA000002" }), vec!["t123"]),
        (json!({ "vin": "1HGCY2F57RA00000" }), vec![]),
        (json!({ "stock": "T123" }), vec!["T123"]),
        (json!({ "stock": "t123" }), vec!["t123"]),
        (json!({ "stock": "T12" }), vec![]),
    ];
    for (filters, expected) in cases {
        assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
    }
}

#[test]
fn range_filters_are_inclusive() {
    let inv = inventory(vec![car(
        "x",
        json!({ "year": 2020, "price": 25000, "mileage": 30000,
                "electric_range_mi": 250.5, "displacement_cc": 1998 }),
    )]);
    let cases = [
        (json!({ "year_min": 2020, "year_max": 2020 }), true),
        (json!({ "year_min": 2020.0 }), true),
        (json!({ "year_min": 2021 }), false),
        (json!({ "year_max": 2019 }), false),
        (json!({ "price_min": 25000, "price_max": 25000 }), true),
        (json!({ "price_min": 25001 }), false),
        (json!({ "price_max": 24999 }), false),
        (json!({ "mileage_max": 30000 }), true),
        (json!({ "mileage_max": 29999 }), false),
        (json!({ "electric_range_mi_min": 250 }), true),
        (json!({ "electric_range_mi_max": 250 }), false),
        (json!({ "electric_range_mi_min": 251 }), false),
        (
            json!({ "displacement_cc_min": 1998, "displacement_cc_max": 1998 }),
            true,
        ),
        (json!({ "displacement_cc_max": 1997 }), false),
        (json!({ "displacement_cc_min": 1999 }), false),
        (json!({ "price_min": 30000, "price_max": 20000 }), false),
    ];
    for (filters, expected) in cases {
        assert_eq!(
            !search_stocks(&inv, filters.clone()).is_empty(),
            expected,
            "{filters}"
        );
    }
}

#[test]
fn unpriced_vehicles_never_match_a_price_filter() {
    let inv = inventory(vec![
        car("priced", json!({ "price": 20000 })),
        car("list-only", json!({ "list_price": 20000, "msrp": 21000 })),
        car("string-price", json!({ "price": "20000" })),
    ]);
    for filters in [
        json!({ "price_min": 0 }),
        json!({ "price_max": 1_000_000 }),
        json!({ "price_min": 0, "price_max": 1_000_000 }),
    ] {
        assert_eq!(
            search_stocks(&inv, filters.clone()),
            ["priced"],
            "{filters}"
        );
    }
}

#[test]
fn a_listing_lacking_the_field_of_a_range_filter_does_not_match_it() {
    let inv = inventory(vec![car("bare", json!({}))]);
    for key in [
        "year_min",
        "year_max",
        "price_min",
        "price_max",
        "mileage_max",
        "electric_range_mi_min",
        "electric_range_mi_max",
        "displacement_cc_min",
        "displacement_cc_max",
    ] {
        let bound = if key.starts_with("year") { 2000 } else { 0 };
        let filters = json!({ key: bound });
        assert!(search_stocks(&inv, filters).is_empty(), "{key}");
        let filters = json!({ key: if key.starts_with("year") { 2100 } else { 1_000_000 } });
        assert!(search_stocks(&inv, filters).is_empty(), "{key}");
    }
}

#[test]
fn dc_fast_charge_true_keeps_fast_chargers_and_false_keeps_every_other_unit() {
    let inv = inventory(vec![
        car("dc", json!({ "dc_fast_charge": true })),
        car("ac-only", json!({ "dc_fast_charge": false })),
        car("unknown", json!({})),
    ]);
    assert_eq!(
        search_stocks(&inv, json!({ "dc_fast_charge": true })),
        ["dc"]
    );
    assert_eq!(
        search_stocks(&inv, json!({ "dc_fast_charge": false })),
        ["ac-only", "unknown"]
    );
}

#[test]
fn query_needs_every_term_somewhere_in_the_descriptive_fields() {
    let inv = inventory(vec![
        car(
            "civic",
            json!({ "year": 2022, "make": "Honda", "model": "Civic", "trim": "EX",
                    "body": "Sedan", "exterior_color": "Aegean Blue", "fuel": "gas",
                    "features": ["Sunroof", "Apple CarPlay"],
                    "description": "One owner, LEATHER seats.",
                    "notes": "secret-note", "engine": "1.5L turbo" }),
        ),
        car(
            "rav4",
            json!({ "year": 2021, "make": "Toyota", "model": "RAV4 Hybrid" }),
        ),
    ]);
    let cases = [
        ("honda civic", vec!["civic"]),
        ("  CIVIC   2022 ", vec!["civic"]),
        ("sunroof carplay", vec!["civic"]),
        ("leather", vec!["civic"]),
        ("blue sedan ex gas", vec!["civic"]),
        ("hyb", vec!["rav4"]),
        ("202", vec!["civic", "rav4"]),
        ("honda rav4", vec![]),
        ("secret-note", vec![]),
        ("turbo", vec![]),
        ("civic", vec!["civic"]),
        ("hondacivic", vec![]),
        ("", vec!["civic", "rav4"]),
        ("   ", vec!["civic", "rav4"]),
    ];
    for (query, expected) in cases {
        assert_eq!(
            search_stocks(&inv, json!({ "query": query })),
            expected,
            "{query:?}"
        );
    }
}

#[test]
fn an_empty_filter_list_is_no_constraint() {
    let inv = inventory(vec![
        car("1", json!({ "make": "Honda" })),
        car("2", json!({})),
    ]);
    let filters = json!({ "make": [], "condition": [], "vehicle_type": [], "rooftops": [] });
    assert_eq!(search_stocks(&inv, filters), ["1", "2"]);
    // A blank value is a value, and no listing has a blank make.
    assert!(search_stocks(&inv, json!({ "make": [" "] })).is_empty());
}
