//! Plans against jaq on the same programs and inputs.

use serde_json::{Value, json};

use super::super::{Jq, JqValue, JqVars};

fn vars() -> JqVars {
    JqVars {
        request: JqValue::from_json(&json!({"filters": {"make": ["Toyota"]}, "n": 2})),
        tables: JqValue::from_json(&json!({"t": {"A": "a", "1": "one"}})),
        dealer: JqValue::from_json(&json!({"id": "d1"})),
        lead: JqValue::from_json(&json!({"reference": "L-1"})),
    }
}

/// Runs `program` natively (it must be) and in jaq, demands the same outputs or the same
/// error, and returns them.
fn run(program: &str, input: Value) -> Result<Vec<Value>, String> {
    let native = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(native.is_native(), "{program} should be native");
    let jaq = Jq::compile_interpreted(program).unwrap();
    let input = JqValue::from_json(&input);
    let vars = vars();
    let outputs = |jq: &Jq| {
        jq.run(&input, &vars)
            .map(|out| out.iter().map(JqValue::to_json).collect::<Vec<_>>())
            .map_err(|e| e.0)
    };
    let (got, want) = (outputs(&native), outputs(&jaq));
    assert_eq!(got, want, "{program} on {input:?}: native vs jaq");
    let (b_native, b_jaq) = (native.run_bool(&input, &vars), jaq.run_bool(&input, &vars));
    assert_eq!(
        b_native.map_err(|e| e.0),
        b_jaq.map_err(|e| e.0),
        "run_bool of {program}"
    );
    got
}

fn one(program: &str, input: Value) -> Value {
    match run(program, input) {
        Ok(mut out) if out.len() == 1 => out.remove(0),
        other => panic!("{program}: expected one value, got {other:?}"),
    }
}

fn fails(program: &str, input: Value) -> String {
    run(program, input).expect_err(program)
}

#[test]
fn identity_and_literals() {
    assert_eq!(one(".", json!({"a": 1})), json!({"a": 1}));
    assert_eq!(one("1", json!(null)), json!(1));
    assert_eq!(one("1.5", json!(null)), json!(1.5));
    assert_eq!(one("\"x\\n\\u00e9\"", json!(null)), json!("x\né"));
    assert_eq!(one("null", json!(1)), json!(null));
    assert_eq!(one("[true, false]", json!(1)), json!([true, false]));
}

#[test]
fn paths_index_objects_and_arrays_and_null_propagates() {
    let rec = json!({"a": {"b": [10, 20]}, "k y": 3});
    assert_eq!(one(".a.b", rec.clone()), json!([10, 20]));
    assert_eq!(one(".a.b[1]", rec.clone()), json!(20));
    assert_eq!(one(".a.b[-1]", rec.clone()), json!(20));
    assert_eq!(one(".a.b[5]", rec.clone()), json!(null));
    assert_eq!(one(".[\"k y\"]", rec.clone()), json!(3));
    assert_eq!(one(".missing.deeper", rec.clone()), json!(null));
    assert_eq!(one(".a[\"b\"][0]", rec), json!(10));
}

#[test]
fn indexing_a_scalar_is_an_error_unless_optional() {
    assert_eq!(fails(".a", json!(5)), "cannot index 5 with \"a\"");
    assert!(fails(".a.b", json!({"a": "text"})).contains("cannot index"));
    assert!(fails(".[\"a\"]", json!([1])).contains("cannot index"));
    // jaq looks any key up in an object: a number finds nothing.
    assert_eq!(one(".[0]", json!({"a": 1})), json!(null));
    assert_eq!(run(".a?", json!(5)), Ok(vec![]));
    assert_eq!(run(".a?.b", json!({"a": {"b": 1}})), Ok(vec![json!(1)]));
    assert_eq!(run("[.[]?]", json!(5)), Ok(vec![json!([])]));
}

#[test]
fn iteration_and_comma_stream_in_order() {
    assert_eq!(run(".[]", json!([1, 2])), Ok(vec![json!(1), json!(2)]));
    assert_eq!(
        run(".[]", json!({"a": 1, "b": 2})),
        Ok(vec![json!(1), json!(2)])
    );
    assert_eq!(
        run(".a, .b", json!({"a": 1, "b": 2})),
        Ok(vec![json!(1), json!(2)])
    );
    assert_eq!(
        run(".[].x", json!([{"x": 1}, {"x": 2}])),
        Ok(vec![json!(1), json!(2)])
    );
    assert_eq!(
        fails(".[]", json!(3)),
        "cannot use 3 as iterable (array or object)"
    );
    assert_eq!(
        run("(1, 2) + (10, 20)", json!(null)),
        Ok(vec![json!(11), json!(21), json!(12), json!(22)])
    );
    assert_eq!(run("[.[] | . * 2]", json!([1, 2])), Ok(vec![json!([2, 4])]));
}

#[test]
fn alternative_replaces_null_and_false_but_not_errors() {
    assert_eq!(one(".a // 1", json!({"a": null})), json!(1));
    assert_eq!(one(".a // 1", json!({"a": false})), json!(1));
    assert_eq!(one(".a // 1", json!({"a": 0})), json!(0));
    assert_eq!(one(".a // .b // 3", json!({})), json!(3));
    assert_eq!(
        run("(.[] // 9)", json!([null, 1, false, 2])),
        Ok(vec![json!(1), json!(2)])
    );
    assert_eq!(run("(empty // 9)", json!(null)), Ok(vec![json!(9)]));
    // jaq keeps the errors of the left side (jq would drop them); `?` drops them.
    assert_eq!(fails(".a // 1", json!(5)), "cannot index 5 with \"a\"");
    assert_eq!(run("(.a? // 1)", json!(5)), Ok(vec![json!(1)]));
}

#[test]
fn comparisons_and_logic() {
    assert_eq!(one(".a == \"x\"", json!({"a": "x"})), json!(true));
    assert_eq!(one(".a != 1", json!({"a": 1.0})), json!(false));
    assert_eq!(
        one("[1 < 2, \"a\" < \"b\", null < false, [] < {}]", json!(0)),
        json!([true, true, true, true])
    );
    assert_eq!(one(".a and .b", json!({"a": 1, "b": null})), json!(false));
    assert_eq!(one(".a or .b", json!({"a": null, "b": 0})), json!(true));
    assert_eq!(one("false and error(\"never\")", json!(0)), json!(false));
    assert_eq!(one(".a | not", json!({"a": null})), json!(true));
}

#[test]
fn arithmetic_keeps_jaq_number_formatting() {
    assert_eq!(one(".a + 1", json!({"a": 2})), json!(3));
    assert_eq!(one(".a * 2", json!({"a": 1.25})), json!(2.5));
    assert_eq!(one("1 / 4", json!(0)), json!(0.25));
    assert_eq!(one("7 % 3", json!(0)), json!(1));
    assert_eq!(one("-.a", json!({"a": 3})), json!(-3));
    assert_eq!(one(".a + .b", json!({"a": "x", "b": "y"})), json!("xy"));
    assert_eq!(one(".a + null", json!({"a": [1]})), json!([1]));
    assert_eq!(one("{a: 1} + {b: 2}", json!(0)), json!({"a": 1, "b": 2}));
    assert!(fails(".a + 1", json!({"a": "x"})).contains("cannot"));
    assert!(fails("-.a", json!({"a": "x"})).contains("cannot"));
    // The first error wins.
    assert_eq!(fails("error(\"l\") + error(\"r\")", json!(0)), "l");
}

#[test]
fn if_then_elif_else() {
    let p = "if .a == 1 then \"one\" elif .a == 2 then \"two\" else \"many\" end";
    assert_eq!(one(p, json!({"a": 1})), json!("one"));
    assert_eq!(one(p, json!({"a": 2})), json!("two"));
    assert_eq!(one(p, json!({"a": 3})), json!("many"));
    assert_eq!(
        one("if .a then 1 end", json!({"a": false})),
        json!({"a": false})
    );
    assert_eq!(
        run("if (true, false) then 1 else 2 end", json!(0)),
        Ok(vec![json!(1), json!(2)])
    );
}

#[test]
fn object_literals_keep_key_order_and_last_value() {
    assert_eq!(
        one(
            "{b: .x, a: 1, \"c d\": 2, (.k): 3, $dealer, x}",
            json!({"x": 0, "k": "kk"})
        ),
        json!({"b": 0, "a": 1, "c d": 2, "kk": 3, "dealer": {"id": "d1"}, "x": 0})
    );
    let order = one("{b: 1, a: 2, b: 3}", json!(0));
    assert_eq!(order, json!({"b": 3, "a": 2}));
    let keys: Vec<_> = order.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["b", "a"]);
    assert_eq!(
        fails("{a: 1, b: error(\"x\"), c: error(\"y\")}", json!(0)),
        "x"
    );
    assert_eq!(one("{}", json!(0)), json!({}));
}

#[test]
fn string_interpolation() {
    assert_eq!(
        one("\"\\(.a)-\\(.b)!\"", json!({"a": "x", "b": 2})),
        json!("x-2!")
    );
    assert_eq!(
        one("\"v=\\(.)\"", json!({"a": [1, null]})),
        json!("v={\"a\":[1,null]}")
    );
    assert_eq!(
        one("$lead.reference + \"-appt\"", json!(0)),
        json!("L-1-appt")
    );
}

#[test]
fn variables_and_bindings() {
    assert_eq!(one("$request.filters.make[0]", json!(0)), json!("Toyota"));
    assert_eq!(one("$tables.t[.k]", json!({"k": "A"})), json!("a"));
    assert_eq!(
        one(
            ".a as $x | .b as $y | [$x, $y, .c]",
            json!({"a": 1, "b": 2, "c": 3})
        ),
        json!([1, 2, 3])
    );
    assert_eq!(
        one(".a as $x | (.b as $x | $x) + $x", json!({"a": 1, "b": 10})),
        json!(11)
    );
    assert_eq!(
        run(".[] as $x | $x * 10", json!([1, 2])),
        Ok(vec![json!(10), json!(20)])
    );
}

#[test]
fn local_definitions_are_inlined() {
    assert_eq!(one("def f: .a + 1; f", json!({"a": 1})), json!(2));
    assert_eq!(
        one(
            "def f($k): .[$k]; def g: f(\"b\"); [f(\"a\"), g]",
            json!({"a": 1, "b": 2})
        ),
        json!([1, 2])
    );
    assert_eq!(
        one("def f($x): $x + 1; 5 as $x | f(10) + $x", json!(0)),
        json!(16)
    );
    assert_eq!(one("def type: 7; type", json!(0)), json!(7));
}

#[test]
fn try_and_errors() {
    assert_eq!(run("try error(\"x\")", json!(0)), Ok(vec![]));
    assert_eq!(one("try error(\"x\") catch .", json!(0)), json!("x"));
    assert_eq!(one("try .a catch \"bad\"", json!(3)), json!("bad"));
    assert_eq!(
        run(
            "[.[] | try (if . == 2 then error(\"e\") else . end)]",
            json!([1, 2, 3])
        ),
        Ok(vec![json!([1, 3])])
    );
    assert_eq!(fails("error(\"boom\")", json!(0)), "boom");
    assert_eq!(fails("error({a: 1})", json!(0)), "{\"a\":1}");
    assert_eq!(fails("error", json!("it")), "it");
}

#[test]
fn builtins() {
    assert_eq!(
        one("[.[] | type]", json!([null, true, 1, "s", [], {}])),
        json!(["null", "boolean", "number", "string", "array", "object"])
    );
    assert_eq!(one("map(. + 1)", json!([1, 2])), json!([2, 3]));
    assert_eq!(
        one("map(select(. != null))", json!([1, null, 2])),
        json!([1, 2])
    );
    assert_eq!(
        one("[.[] | tostring]", json!([1, "a", null, [1]])),
        json!(["1", "a", "null", "[1]"])
    );
    assert_eq!(
        one("flatten", json!([1, [2, [3, []]], null])),
        json!([1, 2, 3, null])
    );
    assert_eq!(run("empty", json!(0)), Ok(vec![]));
    assert!(fails("map(.)", json!(1)).contains("as iterable"));
}

#[test]
fn helpers() {
    let rec = json!({"p": "$24,990.60", "m": "12,345 mi", "y": " 2022 ", "n": "  ", "t": "A",
        "f": "A| B ||", "d": "03/15/2026", "u": "2026-11-30 14:05:00", "s": "HONDA CIVIC"});
    assert_eq!(
        one(
            "{p: (.p | dollars), m: (.m | miles), y: (.y | int), z: (.y | num), n: (.n | nonempty), \
             t: (.t | lookup($tables.t)), f: (.f | split_list(\"|\")), d: (.d | legacy_date), \
             u: (.u | legacy_datetime(\"America/Los_Angeles\")), s: (.s | title), l: (.s | lower), \
             U: (.t | upper)} | compact",
            rec
        ),
        json!({"p": 24991, "m": 12345, "y": 2022, "z": 2022, "t": "a", "f": ["A", "B"],
            "d": "2026-03-15", "u": "2026-11-30T14:05:00-08:00", "s": "Honda Civic",
            "l": "honda civic", "U": "A"})
    );
    assert_eq!(
        one(
            "{p: (.p | dollars(\"1.234,56\")), m: (.m | miles(\"1 234\")), y: (.y | int(\"1'234\")), \
             z: (.z | num(\"1234,5\"))}",
            json!({"p": "45.999,50", "m": "12 345 mi", "y": "1'234", "z": "61,5"})
        ),
        json!({"p": 46000, "m": 12345, "y": 1234, "z": 61.5})
    );
    assert!(fails(".p | dollars", json!({"p": "45.999,00"})).contains("dollars(\"1.234,56\")"));
    assert!(fails(".m | miles", json!({"m": "12.345"})).contains("could be"));
    assert!(fails(".m | miles(5)", json!({"m": "1"})).contains("example string"));
    assert!(
        fails(".p | dollars(\"1.234,56\")", json!({"p": "45,999.00"})).contains("format names")
    );
    assert!(fails(".t | lookup($tables.missing)", json!({"t": "A"})).contains("not an object"));
    assert!(
        fails(".u | legacy_datetime(\"Nowhere/Zone\")", json!({"u": "x"}))
            .contains("unknown time zone")
    );
}

#[test]
fn outside_the_subset_runs_in_jaq() {
    for program in [
        ".a = 1",
        ".a |= . + 1",
        "reduce .[] as $x (0; . + $x)",
        "..",
        ".[1:]",
        "@base64",
        "length",
        "def f(g): g; f(.)",
        "def f: f; f",
        "{a: (1, 2)}",
        ". as [$a] | $a",
        "label $out | 1",
    ] {
        let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            !jq.is_native() || program == "def f: f; f",
            "{program} should fall back"
        );
    }
}

proptest::proptest! {
    /// `ascii_downcase`-style fast paths give what `str::to_lowercase` / `to_uppercase` give,
    /// borrowed or not, whatever the text.
    #[test]
    fn lower_and_upper_are_the_standard_librarys(s in "[A-Za-z0-9 _.-]{0,12}|\\PC{0,8}") {
        use std::borrow::Cow;
        use super::text::{lower, upper};
        proptest::prop_assert_eq!(lower(Cow::Borrowed(&s)), s.to_lowercase());
        proptest::prop_assert_eq!(upper(Cow::Owned(s.clone())), s.to_uppercase());
    }
}
