use super::*;
use serde_json::json;

fn render(source: &str, context: Context, values: serde_json::Value) -> Result<String, String> {
    let mut t = Templates::new();
    t.add("t", source, context).map_err(|e| e.message)?;
    let full = TplValue::from(minijinja::value::Serde(&values));
    let tables = full.get_attr("tables").ok();
    t.render(
        "t",
        context,
        Scope {
            request: values.get("request"),
            tables: tables.as_ref(),
            context: Ctx::Ready(&full),
        },
    )
}

/// Every template `Direct` takes renders, for every request, what minijinja renders, and
/// those it leaves to minijinja are the values it cannot decide.
mod direct {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value as Json;

    fn scalar() -> impl Strategy<Value = Json> {
        prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(Json::from),
            any::<u64>().prop_map(Json::from),
            (-1e6f64..1e6).prop_map(Json::from),
            Just(json!(25000.0)),
            "new|used|cpo|[a-z]{0,2}".prop_map(Json::from),
            Just(json!(1e300)),
            "[a-zA-Z0-9 ,|&=?/#%\"'\\\n\u{e9}\u{1F697}-]{0,8}".prop_map(Json::from),
        ]
    }

    fn value() -> impl Strategy<Value = Json> {
        scalar().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                prop::collection::btree_map("make|model|year_min|filters|items|_x1", inner, 0..4)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    fn vocabulary() -> impl Strategy<Value = Json> {
        prop_oneof![
            "new|used|cpo|[a-z]{0,2}".prop_map(Json::from),
            Just(Json::Null),
            Just(json!(3))
        ]
    }

    /// Requests shaped like skill requests, so that most paths reach a value.
    fn request() -> impl Strategy<Value = Json> {
        let list = || prop::collection::vec(scalar(), 0..4).prop_map(Json::Array);
        prop_oneof![
            value(),
            (list(), scalar(), list(), value()).prop_map(|(make, year, model, items)| {
                json!({
                    "make": make.clone(),
                    "items": items,
                    "filters": {"make": make, "year_min": year, "model": model},
                })
            }),
            // Vocabularies a table translates, as `lookup` reads them.
            (
                prop::collection::vec(vocabulary(), 0..4),
                prop_oneof![vocabulary(), scalar()],
            )
                .prop_map(|(condition, field)| {
                    json!({"filters": {"condition": condition}, "sort": {"field": field}})
                }),
        ]
    }

    fn template() -> impl Strategy<Value = String> {
        let any_path = prop::collection::vec("make|model|year_min|filters|items|_x1|0", 0..4)
            .prop_map(|keys| {
                std::iter::once("request".to_owned())
                    .chain(keys)
                    .collect::<Vec<_>>()
                    .join(".")
            });
        let path = prop_oneof![
            any_path,
            "request\\.(make|items|sort\\.field|filters\\.(make|model|year_min|condition))"
                .prop_map(|p| p.to_owned()),
        ];
        let filter = prop_oneof![
            Just(String::new()),
            Just("|join(',')".to_owned()),
            Just(" | join(\", \")".to_owned()),
            Just(" | join('')".to_owned()),
            Just(" | join('\u{2022}') ".to_owned()),
            Just(" | join(\"a'b\")".to_owned()),
            Just(" | length".to_owned()),
            Just(" | lookup(tables.out)".to_owned()),
            Just("|lookup( tables.out )".to_owned()),
            Just(" | lookup(tables.nope)".to_owned()),
            Just(" | map('lookup', tables.out) | join(',')".to_owned()),
            Just("|map(\"lookup\",tables.out)|join(\"; \")".to_owned()),
            Just(" | map('lookup', tables.nope) | join(',')".to_owned()),
            Just(" | map('upper') | join(',')".to_owned()),
            Just(" | join(',', attribute='x')".to_owned()),
        ];
        let text = "[a-z/ ]{0,6}(\r?\n)?";
        prop_oneof![
            (path, filter, "[ ]{0,2}", "(\r?\n)?")
                .prop_map(|(p, f, pad, nl)| format!("{{{{{pad}{p}{f}{pad}}}}}{nl}")),
            text.prop_map(|t| t.to_owned()),
            Just("{{ dealer.id }}".to_owned()),
            Just("x{{ request.make }}".to_owned()),
            Just("{{- request.make -}}".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn direct_renders_what_minijinja_renders(
            source in template(),
            request in request(),
            table in prop::collection::btree_map(
                "new|used|cpo|[a-z]{0,2}",
                prop_oneof![scalar(), Just(Json::Null), "[A-Z][a-z]{0,5}".prop_map(Json::from)],
                0..6,
            ),
            context in prop_oneof![Just(Context::Query), Just(Context::Path)],
        ) {
            let mut t = Templates::new();
            prop_assume!(t.add("t", &source, context).is_ok());
            let values = json!({"request": request, "dealer": {"id": "d"}, "tables": {"out": table}});
            let full = TplValue::from(minijinja::value::Serde(&values));
            let tables = full.get_attr("tables").expect("tables");
            let scope = Scope { request: Some(&request), tables: Some(&tables), context: Ctx::Ready(&full) };
            let direct = t.render("t", context, scope);
            let minijinja = t.render("t", context, Scope::context(&full));
            prop_assert_eq!(&direct, &minijinja, "{:?} over {}", source, request);
            let shape = t.direct[context as usize].get("t");
            // The shapes are recognised where they should be (the test is not vacuous).
            if context == Context::Query
                && source.trim_end().starts_with("{{ request.")
                && !source.contains(['-', '0'])
                && !source.contains("length")
                && !source.contains("upper")
                && !source.contains("attribute")
            {
                prop_assert!(shape.is_some(), "{:?} was not recognised", source);
            }
            if !source.contains('{') {
                prop_assert!(matches!(shape, Some(Direct::Text(_))), "{:?}", source);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// The `lookup` shapes, over requests and tables drawn from one small vocabulary
        /// so that most lookups find something (a string, a number, `null`) or nothing.
        #[test]
        fn lookups_render_what_minijinja_renders(
            path in "request\\.(sort\\.field|filters\\.condition|missing)",
            filter in prop_oneof![
                Just(" | lookup(tables.out)"),
                Just(" | lookup(tables.nope)"),
                Just(" | map('lookup', tables.out) | join(',')"),
                Just(" | map('lookup', tables.nope) | join(', ')"),
            ],
            condition in prop::collection::vec(vocabulary(), 0..4),
            field in vocabulary(),
            table in prop::collection::btree_map("new|used|cpo|[a-z]{0,2}", vocabulary(), 0..5),
        ) {
            let source = format!("{{{{ {path}{filter} }}}}");
            let request = json!({"filters": {"condition": condition}, "sort": {"field": field}});
            let mut t = Templates::new();
            t.add("t", &source, Context::Query).expect("compiles");
            prop_assert!(t.direct[Context::Query as usize].contains_key("t"), "{} is a direct shape", source);
            let values = json!({"request": request, "tables": {"out": table}});
            let full = TplValue::from(minijinja::value::Serde(&values));
            let tables = full.get_attr("tables").expect("tables");
            let scope = Scope { request: Some(&request), tables: Some(&tables), context: Ctx::Ready(&full) };
            let direct = t.render("t", Context::Query, scope);
            let minijinja = t.render("t", Context::Query, Scope::context(&full));
            prop_assert_eq!(&direct, &minijinja, "{:?} over {}", source, values);
        }
    }

    #[test]
    fn the_common_values_render_directly() {
        let tables = TplValue::from(minijinja::value::Serde(
            &json!({"out": {"used": "Pre-Owned", "new": "New", "n": 3, "gone": null}}),
        ));
        let direct = |source: &str, request: Json| {
            Direct::of(source, Context::Query)
                .expect("a direct shape")
                .render(Scope {
                    request: Some(&request),
                    tables: Some(&tables),
                    context: Ctx::Ready(&TplValue::UNDEFINED),
                })
        };
        let filters = json!({
            "filters": {"make": ["Honda", "Toyota"], "year_min": 2020, "price_max": 25000.5,
                        "condition": ["new", "used", "cpo", "n", "gone"]},
            "sort": "used", "order": "cpo", "gone": "gone",
        });
        for (source, want) in [
            ("{{ request.filters.make | join(',') }}", "Honda,Toyota"),
            ("{{ request.filters.year_min }}", "2020"),
            ("{{ request.filters.price_max }}", "25000.5"),
            ("{{ request.filters.model | join(',') }}", ""),
            // A table's `null` is minijinja's `none`, which `join` prints as `None`.
            (
                "{{ request.filters.condition | map('lookup', tables.out) | join(',') }}",
                "New,Pre-Owned,,3,None",
            ),
            ("{{ request.sort | lookup(tables.out) }}", "Pre-Owned"),
            ("{{ request.order | lookup(tables.out) }}", ""),
            ("{{ request.gone | lookup(tables.out) }}", ""),
        ] {
            assert_eq!(
                direct(source, filters.clone()).as_deref(),
                Some(want),
                "{source}"
            );
            let mut t = Templates::new();
            t.add("t", source, Context::Query).expect("compiles");
            let full = TplValue::from(minijinja::value::Serde(
                &json!({"request": filters, "tables": tables}),
            ));
            let minijinja = t.render("t", Context::Query, Scope::context(&full));
            assert_eq!(minijinja.as_deref(), Ok(want), "{source} in minijinja");
        }
        // A join of a string (its characters, in minijinja) is minijinja's to decide.
        assert_eq!(
            direct(
                "{{ request.filters | join(',') }}",
                json!({"filters": "ab"})
            ),
            None
        );
        assert!(Direct::of("{{ request.make }}", Context::Path).is_none());
        assert!(Direct::of("{{ request.make | upper }}", Context::Query).is_none());
    }
}

#[test]
fn path_values_are_one_segment() {
    let out = render(
        "/v/{{ request.vin }}",
        Context::Path,
        json!({"request": {"vin": "../admin?x=1#"}}),
    );
    assert_eq!(out.unwrap(), "/v/..%2Fadmin%3Fx%3D1%23");
}

#[test]
fn absent_values_render_empty() {
    let out = render(
        "{{ request.filters.make | join(',') }}",
        Context::Query,
        json!({"request": {}}),
    );
    assert_eq!(out.unwrap(), "");
}

#[test]
fn lookup_maps_vocabularies() {
    let out = render(
        "{{ request.c | map('lookup', tables.out) | join(',') }}",
        Context::Query,
        json!({"request": {"c": ["new", "cpo"]}, "tables": {"out": {"new": "New", "cpo": "Certified"}}}),
    );
    assert_eq!(out.unwrap(), "New,Certified");
}

#[test]
fn json_bodies_serialize_values() {
    let out = render(
        r#"{"name": {{ n }}}"#,
        Context::JsonBody,
        json!({"n": "a\"b</x>"}),
    );
    let parsed: serde_json::Value = serde_json::from_str(&out.unwrap()).unwrap();
    assert_eq!(parsed["name"], "a\"b</x>");
}

#[test]
fn json_bodies_render_absent_values_as_null() {
    let out = render(
        r#"{"vin": {{ request.vin }}, "comments": {{ request.message }}, "n": {{ none }}}"#,
        Context::JsonBody,
        json!({"request": {"vin": "1HG"}, "none": null}),
    )
    .unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed, json!({"vin": "1HG", "comments": null, "n": null}));
}

#[test]
fn xml_bodies_escape_markup() {
    let out = render(
        "<n>{{ n }}</n>",
        Context::XmlBody,
        json!({"n": "<a&b>\"]]>"}),
    );
    assert_eq!(out.unwrap(), "<n>&lt;a&amp;b&gt;&quot;]]&gt;</n>");
}

#[test]
fn header_values_refuse_line_breaks() {
    assert!(render("x{{ v }}", Context::Header, json!({"v": "a\r\nX-Evil: 1"})).is_err());
    assert_eq!(
        render("k-{{ v }}", Context::Header, json!({"v": "abc"})).unwrap(),
        "k-abc"
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let mut t = Templates::new();
    let e = t.add("t", "a\n{{ x | }}", Context::Text).unwrap_err();
    assert_eq!(e.line, Some(2));
}

#[test]
fn runaway_templates_are_stopped() {
    let out = render(
        "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
        Context::Text,
        json!({}),
    );
    assert!(out.is_err());
}

#[test]
fn a_text_body_takes_strings_only_through_an_explicit_filter() {
    let values = json!({"msg": "line1\nFIELD=forged", "n": 3, "b": true});
    let bare = render("MSG={{ msg }}", Context::Text, values.clone()).unwrap_err();
    assert!(bare.contains("needs an explicit filter"), "{bare}");
    assert_eq!(
        render("MSG={{ msg | safe }}", Context::Text, values.clone()).unwrap(),
        "MSG=line1\nFIELD=forged"
    );
    assert_eq!(
        render("MSG={{ msg | tojson }}", Context::Text, values.clone()).unwrap(),
        r#"MSG="line1\nFIELD=forged""#
    );
    assert_eq!(
        render("N={{ n }} B={{ b }}", Context::Text, values).unwrap(),
        "N=3 B=true"
    );
    // Absent values stay empty, as elsewhere outside JSON.
    assert_eq!(
        render("X={{ nope }}", Context::Text, json!({})).unwrap(),
        "X="
    );
}
