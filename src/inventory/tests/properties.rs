//! Property tests against an independent, naive reading of the rules.

use super::*;
use proptest::prelude::*;

fn opt<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop_oneof![1 => Just(None), 3 => s.prop_map(Some)]
}

/// Maybe one of `values`.
fn pick(values: &[&'static str]) -> impl Strategy<Value = Option<Value>> {
    opt(prop::sample::select(values.to_vec()).prop_map(Value::from))
}

/// Maybe a list of `min..max` of `values`.
fn picks(values: &[&'static str], min: usize) -> impl Strategy<Value = Option<Value>> {
    let one = prop::sample::select(values.to_vec());
    opt(prop::collection::vec(one, min..3).prop_map(Value::from))
}

/// Maybe `step` times an integer below `n`.
fn scaled(n: i64, step: i64) -> impl Strategy<Value = Option<Value>> {
    opt((0..n).prop_map(move |x| Value::from(x * step)))
}

/// An object of the fields that are present.
fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    let present = fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?)));
    Value::Object(present.collect())
}

prop_compose! {
    fn vehicle()(
        stock in pick(&["A1", "a1", "B2", "c3", "D4", "e5"]),
        vin in pick(&["1HGCY2F57RA000001", "1HGCY2F57RA000002", "5YJ3E1EA7KF000003"]),
        status in pick(&["available", "intransit", "pending", "sold", "Available"]),
        make in pick(&["Honda", "HONDA", " honda", "Toyota", "Ford", ""]),
        condition in pick(&["new", "used", "cpo"]),
        vehicle_type in pick(&["car", "motorcycle", "rv"]),
        year in opt(prop_oneof![
            4 => (2015i64..2026).prop_map(Value::from),
            1 => Just(Value::from(2019.5)),
        ]),
        price in scaled(50, 1000),
        list_price in scaled(50, 1000),
        mileage in scaled(5, 10_000),
        erange in opt(prop_oneof![
            (0i64..400).prop_map(Value::from),
            (0.0f64..400.0).prop_map(Value::from),
        ]),
        dc in opt(any::<bool>().prop_map(Value::from)),
        updated in pick(&[
            "2026-04-30T10:00:00+02:00",
            "2026-04-30T09:00:00Z",
            "2026-04-30T02:30:00-07:00",
            "not a date",
        ]),
        body in pick(&["suv", "SUV", "sedan"]),
    ) -> Value {
        object(vec![
            ("stock", stock), ("vin", vin), ("status", status), ("make", make),
            ("condition", condition), ("vehicle_type", vehicle_type), ("year", year),
            ("price", price), ("list_price", list_price), ("mileage", mileage),
            ("electric_range_mi", erange), ("dc_fast_charge", dc),
            ("updated_at", updated), ("body", body),
        ])
    }
}

prop_compose! {
    fn filters()(
        make in picks(&["honda", "Toyota ", "FORD", "Kia"], 0),
        condition in picks(&["new", "used", "cpo"], 1),
        vehicle_type in picks(&["car", "motorcycle", "trailer"], 1),
        year_min in opt((2015i64..2026).prop_map(Value::from)),
        price_max in scaled(50, 1000),
        price_min in scaled(50, 1000),
        mileage_max in scaled(5, 10_000),
        erange_min in scaled(400, 1),
        dc in opt(any::<bool>().prop_map(Value::from)),
        body in picks(&["suv", "Sedan"], 1),
        query in pick(&[
            "honda", "suv 2020", "toy", "", "civic ex", "HYB", "blue", "sunroof carplay",
            "heated", "οδος", "ΟΔΟΣ", "οδοσ", "σοφιας", "τζαμις", "σας", "leather", "2019.5",
            "one owner", "touring 2020",
        ]),
    ) -> Value {
        object(vec![
            ("make", make), ("condition", condition), ("vehicle_type", vehicle_type),
            ("year_min", year_min), ("price_max", price_max), ("price_min", price_min),
            ("mileage_max", mileage_max), ("electric_range_mi_min", erange_min),
            ("dc_fast_charge", dc), ("body", body), ("query", query),
        ])
    }
}

prop_compose! {
    /// A [`vehicle`] with the texts `query` searches: repeated across vehicles, in several
    /// cases and spacings, Greek with a final sigma, blank.
    fn described()(
        base in vehicle(),
        model in pick(&["Civic", " CIVIC ", "RAV4 Hybrid", "Odyssey"]),
        trim in pick(&["EX", "Touring", "  ", "ΟΔΟΣ"]),
        color in pick(&["Aegean Blue", "blue ", "ΣΟΦΙΑΣ Red"]),
        fuel in pick(&["gas", "hybrid"]),
        features in opt(prop::collection::vec(
            prop::sample::select(vec!["Sunroof", "Apple CarPlay", "heated seats", "ΤΖΑΜΙΣ"]),
            0..3,
        ).prop_map(Value::from)),
        description in pick(&["One owner, LEATHER seats.", "Λευκό ΣΑΣ", ""]),
    ) -> Value {
        let mut v = base;
        let extra = object(vec![
            ("model", model), ("trim", trim), ("exterior_color", color), ("fuel", fuel),
            ("features", features), ("description", description),
        ]);
        if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
        v
    }
}

/// An independent, naive reading of the filter rules.
fn oracle(filters: &Value, v: &Value) -> bool {
    let norm = |s: &str| s.trim().to_lowercase();
    let text = |key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .map(norm)
            .filter(|s| !s.is_empty())
    };
    let list = |key: &str| {
        filters
            .get(key)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
    };
    let num = |key: &str| v.get(key).and_then(Value::as_f64);
    let bound = |key: &str| filters.get(key).and_then(Value::as_f64);
    let servable = matches!(
        v.get("status").and_then(Value::as_str),
        Some("available" | "intransit" | "pending")
    );
    let text_ok = |fkey: &str, vkey: &str| {
        list(fkey).is_none_or(|l| {
            text(vkey).is_some_and(|t| l.iter().any(|x| x.as_str().map(norm) == Some(t.clone())))
        })
    };
    let exact_ok = |key: &str, value: Option<&str>| {
        list(key).is_none_or(|l| value.is_some_and(|t| l.iter().any(|x| x.as_str() == Some(t))))
    };
    let min_ok =
        |fkey: &str, vkey: &str| bound(fkey).is_none_or(|b| num(vkey).is_some_and(|x| x >= b));
    let max_ok =
        |fkey: &str, vkey: &str| bound(fkey).is_none_or(|b| num(vkey).is_some_and(|x| x <= b));
    let dc = v.get("dc_fast_charge").and_then(Value::as_bool) == Some(true);
    let hay: Vec<String> = [
        "make",
        "model",
        "trim",
        "body",
        "exterior_color",
        "fuel",
        "description",
    ]
    .iter()
    .filter_map(|k| v.get(*k).and_then(Value::as_str).map(str::to_lowercase))
    .chain(
        v.get("features")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_lowercase),
    )
    .chain(
        v.get("year")
            .filter(|y| y.is_number())
            .map(|y| y.to_string()),
    )
    .collect();
    let query_ok = filters
        .get("query")
        .and_then(Value::as_str)
        .is_none_or(|q| {
            q.split_whitespace()
                .all(|term| hay.iter().any(|h| h.contains(&term.to_lowercase())))
        });
    servable
        && text_ok("make", "make")
        && text_ok("body", "body")
        && exact_ok("condition", v.get("condition").and_then(Value::as_str))
        && exact_ok(
            "vehicle_type",
            Some(
                v.get("vehicle_type")
                    .and_then(Value::as_str)
                    .unwrap_or("car"),
            ),
        )
        && min_ok("year_min", "year")
        && min_ok("price_min", "price")
        && max_ok("price_max", "price")
        && max_ok("mileage_max", "mileage")
        && min_ok("electric_range_mi_min", "electric_range_mi")
        && filters
            .get("dc_fast_charge")
            .and_then(Value::as_bool)
            .is_none_or(|want| want == dc)
        && query_ok
}

/// The sort value as docs/protocol.md §Sorting reads it: `None` = missing.
fn sort_value(field: &str, v: &Value) -> Option<(f64, String)> {
    match field {
        "make" | "model" | "stock" => v
            .get(field)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_lowercase())
            .filter(|s| !s.is_empty())
            .map(|s| (0.0, s)),
        "updated_at" => v
            .get(field)
            .and_then(Value::as_str)
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
            .map(|t| (t.unix_timestamp() as f64, String::new())),
        _ => v
            .get(field)
            .and_then(Value::as_f64)
            .map(|x| (x, String::new())),
    }
}

const SORT_FIELDS: [&str; 8] = [
    "price",
    "list_price",
    "msrp",
    "mileage",
    "year",
    "make",
    "stock",
    "updated_at",
];

proptest! {
    #[test]
    fn search_returns_exactly_the_matching_listings_in_order(
        vehicles in prop::collection::vec(described(), 0..40),
        filters in filters(),
        field in prop::sample::select(SORT_FIELDS.to_vec()),
        descending in any::<bool>(),
        skip in 0usize..45,
        limit in 1usize..150,
    ) {
        check_search(&vehicles, &filters, field, descending, skip, limit)?;
    }

    /// `query` alone, over servable listings, so that most cases match some and miss others.
    #[test]
    fn query_finds_exactly_the_listings_with_every_term(
        vehicles in prop::collection::vec(described(), 0..40),
        terms in prop::collection::vec(prop::sample::select(vec![
            "honda", "2020", "toy", "civic", " ex", "HYB", "blue", "sunroof", "carplay",
            "heated", "οδος", "ΟΔΟΣ", "οδοσ", "σοφιας", "τζαμις", "σας", "leather", "2019.5",
            "owner", "touring", "gas",
        ]), 1..3),
        field in prop::sample::select(SORT_FIELDS.to_vec()),
    ) {
        let servable: Vec<Value> = vehicles
            .into_iter()
            .map(|mut v| {
                v["status"] = json!("available");
                v
            })
            .collect();
        let filters = json!({ "query": terms.join(" ") });
        check_search(&servable, &filters, field, false, 0, 20)?;
    }
}

/// Every returned vehicle matches (by `matches` and by the oracle), `total` is the number
/// of matching listings, the order is the requested one, pages are windows of the full
/// result, and facets agree with search totals.
fn check_search(
    vehicles: &[Value],
    filters: &Value,
    field: &str,
    descending: bool,
    skip: usize,
    limit: usize,
) -> Result<(), TestCaseError> {
    let filters = filters.clone();
    let inv = Inventory::new(vehicles.iter().cloned().map(Listing::new).collect());
    let order = if descending { "desc" } else { "asc" };
    let sort = json!({ "field": field, "order": order });
    let expected = vehicles.iter().filter(|v| oracle(&filters, v)).count();

    let all = inv.search_json(
        &json!({ "type": "inventory.search.request", "filters": filters,
        "sort": sort, "pagination": { "limit": 100 } }),
    );
    prop_assert_eq!(all.total, expected);
    prop_assert_eq!(all.vehicles.len(), expected);
    for v in &all.vehicles {
        prop_assert!(matches(&filters, v));
        prop_assert!(oracle(&filters, v));
    }
    // Sort order: present before missing, then monotone in the requested direction.
    for pair in all.vehicles.windows(2) {
        let (a, b) = (sort_value(field, &pair[0]), sort_value(field, &pair[1]));
        match (a, b) {
            (None, Some(_)) => prop_assert!(false, "missing before present"),
            (Some(a), Some(b)) => {
                let ord = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
                let in_order = if descending {
                    ord != Ordering::Less
                } else {
                    ord != Ordering::Greater
                };
                prop_assert!(in_order, "{:?} then {:?}", a, b);
            }
            _ => {}
        }
    }

    let page = inv.search_json(
        &json!({ "type": "inventory.search.request", "filters": filters,
        "sort": sort, "pagination": { "skip": skip, "limit": limit } }),
    );
    let effective = limit.min(MAX_LIMIT);
    prop_assert_eq!(
        (page.total, page.skip, page.limit),
        (expected, skip, effective)
    );
    let window: Vec<_> = all
        .vehicles
        .iter()
        .skip(skip)
        .take(effective)
        .cloned()
        .collect();
    prop_assert_eq!(page.vehicles, window);

    // Facets: the statuses and vehicle types partition the matches, and each value's
    // count is the total of a search narrowed to it.
    let facets = inv.facets_json(Some(&filters));
    let sum = |key: &str| -> u64 {
        facets
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e["count"].as_u64())
            .sum()
    };
    prop_assert_eq!(sum("statuses"), expected as u64);
    prop_assert_eq!(sum("vehicle_types"), expected as u64);
    for facet in [
        "makes",
        "bodies",
        "conditions",
        "vehicle_types",
        "dc_fast_charge",
        "years",
    ] {
        for entry in facets
            .get(facet)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let value = &entry["value"];
            let mut narrowed = filters.clone();
            match facet {
                "makes" => narrowed["make"] = json!([value]),
                "bodies" => narrowed["body"] = json!([value]),
                "conditions" => narrowed["condition"] = json!([value]),
                "vehicle_types" => narrowed["vehicle_type"] = json!([value]),
                "dc_fast_charge" => narrowed["dc_fast_charge"] = json!(value == "true"),
                _ => {
                    narrowed["year_min"] = value.clone();
                    narrowed["year_max"] = value.clone();
                }
            }
            let n = inv
                .search_json(&json!({ "type": "inventory.search.request", "filters": narrowed }))
                .total;
            prop_assert_eq!(
                Some(n as u64),
                entry["count"].as_u64(),
                "{} {}",
                facet,
                entry
            );
        }
    }
    if let Some(price) = facets.get("price_range") {
        for v in all
            .vehicles
            .iter()
            .filter_map(|v| v.get("price").and_then(Value::as_f64))
        {
            prop_assert!(price["min"].as_f64().is_some_and(|m| m <= v));
            prop_assert!(price["max"].as_f64().is_some_and(|m| m >= v));
        }
    } else {
        prop_assert!(all.vehicles.iter().all(|v| v.get("price").is_none()));
    }
    Ok(())
}
