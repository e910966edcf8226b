//! Compiling and running mappings' jq: errors, variables, outputs, conversions, and the
//! native helpers against their jq definitions.

use super::*;
use serde_json::json;

pub(super) fn eval_with(program: &str, input: Value, vars: &JqVars) -> Value {
    let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
    jq.run_one(&JqValue::from_json(&input), vars)
        .unwrap_or_else(|e| panic!("{program} on {input}: {e}"))
        .to_json()
}

pub(super) fn eval(program: &str, input: Value) -> Value {
    eval_with(program, input, &JqVars::default())
}

pub(super) fn run_err(program: &str, input: Value) -> String {
    let jq = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
    match jq.run(&JqValue::from_json(&input), &JqVars::default()) {
        Ok(out) => panic!("{program} should fail, gave {} values", out.len()),
        Err(e) => e.0,
    }
}

/// Runs `helper` on each input and compares with the expected output.
pub(super) fn check(helper: &str, cases: &[(Value, Value)]) {
    let jq = Jq::compile(helper).unwrap_or_else(|e| panic!("{helper}: {e}"));
    for (input, expected) in cases {
        let got = jq
            .run_one(&JqValue::from_json(input), &JqVars::default())
            .unwrap_or_else(|e| panic!("{helper} on {input}: {e}"))
            .to_json();
        assert_eq!(&got, expected, "{helper} on {input}");
    }
}

/// Every output (or the error) of `jq` on `input`, variants and key order included.
fn outputs_of(jq: &Jq, input: &JqValue, vars: &JqVars) -> String {
    format!("{:?}", jq.run(input, vars))
}

/// The jq definitions `nonempty` and `lookup` had before they were native.
const HELPERS_IN_JQ: &str = r#"
    def nonempty_jq: if isstring then trim | if . == "" then null end else . end;
    def lookup_jq($table):
      if $table | isobject | not then
        error("lookup: the table is \($table | type), not an object (is its name right?)")
      elif . == null then null
      else $table[if isstring then trim else tostring end] end;
"#;

#[test]
fn json_text_parses_to_the_value_from_json_gives() {
    let texts = [
        "null",
        "true",
        "0",
        "-0",
        "1.0",
        "-1.5e3",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "123456789012345678901234567890",
        r#""é \u00e9 \ud83d\ude97 \n""#,
        "[]",
        "{}",
        r#"{"b": 1, "a": [1, {"c": null}], "b": 2, "": "x"}"#,
        r#"{"Items": [{"VIN": "1HG", "Price": "$24,990", "Odometer": 12345.0}], "TotalCount": 1}"#,
    ];
    for text in texts {
        let parsed: Value = serde_json::from_str(text).expect("JSON");
        let direct = JqValue::from_json_slice(text.as_bytes()).expect("JSON");
        assert_eq!(
            format!("{direct:?}"),
            format!("{:?}", JqValue::from_json(&parsed)),
            "{text}"
        );
    }
    assert!(JqValue::from_json_slice(b"{\"a\": }").is_err());
    assert!(JqValue::from_json_slice(b"[1] x").is_err());
}

#[test]
fn native_helpers_match_their_jq_definitions() {
    let inputs = [
        r#"" EX-L ""#,
        r#""EX""#,
        r#""""#,
        r#"" \t\n""#,
        r#""\u00a0\u2003x\u3000\u0085""#,
        r#""\u200bx\u200b""#,
        // One side trimmed only, by ASCII and by other White_Space (the ASCII fast path).
        r#""x\u000b""#,
        r#""\u000cx""#,
        r#""a""#,
        r#""x\u0085""#,
        r#""\u2003x""#,
        r#"" New ""#,
        r#""Certified Pre-Owned""#,
        r#""1""#,
        "null",
        "0",
        "1",
        "1.5",
        "1.0",
        "-0",
        "nan",
        "false",
        "true",
        "[]",
        "[1]",
        "{}",
        r#"{"a": 1}"#,
        r#"" x " | tobytes"#,
        // Strings that are not valid UTF-8.
        "[32, 255, 32, 97, 32] | tobytes | tostring",
        "[32, 97, 32, 255] | tobytes | tostring",
        "[255, 226, 128, 128] | tobytes | tostring",
        "[226, 128] | tobytes | tostring",
    ];
    let table = r#"{"New": "new", "1": "one", "1.5": "x", "1.0": "y", "-0": "z",
        "true": "t", "false": "f", "[1]": "arr", "{\"a\":1}": "obj", "[]": "e",
        "{}": "o", "EX": "ex", "x": "ex", "null": "n"}"#;
    let tables = [table, "{}", "null", r#""t""#, "[]", "5", "true"];
    let vars = JqVars::default();
    let input = JqValue::null();
    for value in inputs {
        let mut pairs = vec![(
            format!("{value} | nonempty"),
            format!("{HELPERS_IN_JQ} {value} | nonempty_jq"),
        )];
        for table in tables {
            pairs.push((
                format!("{value} | lookup({table})"),
                format!("{HELPERS_IN_JQ} {value} | lookup_jq({table})"),
            ));
        }
        for (native, in_jq) in pairs {
            let compiled = |p: &str| Jq::compile(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            let (native_jq, in_jq_jq) = (compiled(&native), compiled(&in_jq));
            assert_eq!(
                outputs_of(&native_jq, &input, &vars),
                outputs_of(&in_jq_jq, &input, &vars),
                "{native}"
            );
        }
    }
    // A stream of tables is a stream of lookups, as with a `$table` parameter.
    assert_eq!(
        eval(r#""a" | [lookup({a: 1}, {a: 2})]"#, Value::Null),
        json!([1, 2])
    );
}

/// `code` compiled the way jaq's loader reads it, without the object rewrite.
fn as_written(code: &str) -> Jq {
    let filter = compile_as_written(code).unwrap_or_else(|e| panic!("{code}: {e}"));
    Jq {
        inner: Arc::new(Compiled {
            code: code.into(),
            filter,
            plan: None,
            key_path: None,
            reads_request: true,
        }),
    }
}

#[test]
fn object_literals_built_left_to_right_give_the_same_outputs() {
    let programs = [
        "{a: 1, b: 2, c: 3}",
        "{a: 1, b: 2, c: 3} | keys_unsorted",
        "{a: (1, 2), b: (3, 4), c: (5, 6)}",
        "{a: (1, 2), b: (3, 4)}",
        "{a: 1, b: 2, a: 3, c: 4, b: 5}",
        r#"{("x", "y"): 1, z: 2, w: (3, 4), x: 0}"#,
        r#"{a: 1, b: error("boom"), c: 3}"#,
        r#"{a: error("first"), b: error("second"), c: 1}"#,
        r#"{a: (1, error("late")), b: 2, c: (3, 4)}"#,
        r#"[.[] | try {a: 1, b: (1, error("x"), 2), c: .} catch "caught \(.)"]"#,
        "{a: empty, b: 1, c: 2}",
        "[limit(5; {a: range(10), b: (1, 2), c: 3})]",
        "first({a: range(3), b: range(3), c: range(3)})",
        "{(1): 2, a: 1, b: 2}",
        "{a: 1, b: 2, (null): 3}",
        "{a, b, c}",
        r#". as $x | {$x, y: 1, "z": 2, "w\(1)": 3, (@base64 "k"): 4}"#,
        "{a: {b: 1, c: 2, d: 3}, e: [{f: 1, g: 2, h: 3}], i: \"\\({j: 1, k: 2, l: 3})\"}",
        "def f: {a: 1, b: 2, c: 3}; def g($x): {x: $x, y: f, z: 0}; g(1, 2)",
        "reduce range(3) as $i ({}; . + {($i | tostring): $i, a: 1, b: 2})",
        "[foreach range(3) as $i ({}; {n: $i, a: ., b: 2}; {out: ., i: $i, k: 1})]",
        "{a: 1, b: 2} as {a: $a, (\"b\"): $b} | {a: $a, b: $b, c: ($a + $b)}",
        ". as {({a: 1, b: 2, c: 3} | keys_unsorted[0]): $v} | $v",
        "[label $out | {a: (1, 2), b: (if .a == 2 then break $out else 3 end), c: 3}]",
        "label $out | {a: 1, b: break $out, c: 3}",
        "path({a: 1, b: 2, c: 3})",
        "-{a: 1, b: 2, c: 3}",
        "{a: 1, b: 2, c: 3} | .b |= . + 1",
        "{a: 1, b: 2, c: 3} == {c: 3, b: 2, a: 1}",
        "if {a: 1, b: 2, c: 3} then {x: 1, y: 2, z: 3} else 2 end",
        ".[{a: \"a\", b: 2, c: 3} | .a]",
        "[.[1:{a: 1, b: 2, c: 3} | length]]",
        ".zz? // {a: 1, b: 2, c: 3}",
        "{a: $request, b: $tables, c: $dealer, d: $lead}",
        "[{a: .[], b: 1, c: 2}]",
        "{a: 1, b: 2, c: 3} | compact | to_entries",
    ];
    let vars = JqVars {
        request: JqValue::from_json(&json!({"r": 1})),
        tables: JqValue::from_json(&json!({"t": 2})),
        dealer: JqValue::from_json(&json!({"d": 3})),
        lead: JqValue::null(),
    };
    let inputs = [json!({"a": 1, "b": [2], "c": null}), json!([1, 2, 3])];
    for program in programs {
        let rewritten = Jq::compile(program).unwrap_or_else(|e| panic!("{program}: {e}"));
        let plain = as_written(program);
        for input in &inputs {
            let input = JqValue::from_json(input);
            assert_eq!(
                outputs_of(&rewritten, &input, &vars),
                outputs_of(&plain, &input, &vars),
                "{program}"
            );
        }
    }

    let (rewritten, plain) = (Jq::compile(ITEM), as_written(ITEM));
    let rewritten = rewritten.unwrap_or_else(|e| panic!("{e}"));
    for i in 0..3 {
        let record = JqValue::from_json(&dms_record(i));
        assert_eq!(
            outputs_of(&rewritten, &record, &tables()),
            outputs_of(&plain, &record, &tables())
        );
    }
}

#[test]
fn programs_the_rewrite_does_not_take_compile_as_written() {
    assert!(compile_left_assoc(ITEM).is_some());
    assert!(compile_left_assoc("def f: {a: 1, b: 2, c: 3}; f | compact").is_some());
    assert!(compile_left_assoc("frobnicate").is_none());
    // Mentions the name the rewritten program is loaded under.
    assert_eq!(
        eval(
            "def aap_gateway_main: {a: 1, b: 2, c: 3}; aap_gateway_main",
            Value::Null
        ),
        json!({"a": 1, "b": 2, "c": 3})
    );
    // Module directives: not supported, and reported as before.
    let err = Jq::compile(r#"include "x"; {a: 1, b: 2, c: 3}"#).err();
    assert!(err.is_some_and(|e| e.message.contains("module loading not supported")));
}

#[test]
fn case_helpers() {
    check(
        "lower",
        &[
            (json!("HONDA Élan"), json!("honda élan")),
            (json!(5), json!(5)),
        ],
    );
    check(
        "upper",
        &[
            (json!("honda élan"), json!("HONDA ÉLAN")),
            (Value::Null, Value::Null),
        ],
    );
    check(
        "title",
        &[
            (json!("HONDA CIVIC EX-L 4WD"), json!("Honda Civic Ex-L 4WD")),
            (
                json!("  mercedes-benz  c/k "),
                json!("  Mercedes-Benz  C/K "),
            ),
            (json!("F-150"), json!("F-150")),
            (json!(1), json!(1)),
        ],
    );
}

/// The choices an unknown function's message lists.
const HELPERS_LISTED: &str = "besides jq's builtins the gateway's helpers are nonempty/0, lookup/1, dollars/0, dollars/1, miles/0, miles/1, int/0, int/1, num/0, num/1, legacy_date/0, legacy_datetime/1, lower/0, upper/0, title/0, compact/0, split_list/1";

#[test]
fn compile_errors_are_located() {
    let program = "{\n  vin: .VIN,\n  make: (.Make | frobnicate),\n}";
    let err = Jq::compile(program)
        .err()
        .map(|e| (e.line, e.col, e.to_string()));
    assert_eq!(
        err,
        Some((
            3,
            18,
            format!("3:18: undefined function `frobnicate/0`; {HELPERS_LISTED}")
        ))
    );

    let err = Jq::compile("{\n  a: $nope\n}")
        .err()
        .map(|e| (e.line, e.col, e.message));
    assert_eq!(err, Some((2, 6, "undefined variable `$nope`".to_string())));

    // Columns count characters, not bytes.
    let err = Jq::compile(r#""é" | nope(1)"#)
        .err()
        .map(|e| (e.line, e.col));
    assert_eq!(err, Some((1, 7)));

    let err = Jq::compile(".a |\n  if . then 1").err();
    let err = err.map(|e| (e.line, e.message)).unwrap_or_default();
    assert_eq!(err.0, 2);
    assert!(err.1.contains("expected else or end"), "{}", err.1);

    let err = Jq::compile(".a |\n  (.b")
        .err()
        .map(|e| (e.line, e.col, e.message));
    assert_eq!(err, Some((2, 3, "unclosed `(`".to_string())));

    let err = Jq::compile(".a &\n .b")
        .err()
        .map(|e| (e.line, e.col, e.message));
    assert_eq!(err, Some((1, 4, "expected token".to_string())));

    let err = Jq::compile(".a |")
        .err()
        .map(|e| e.message)
        .unwrap_or_default();
    assert_eq!(err, "expected term, found end of program");

    let err = Jq::compile("foo | bar")
        .err()
        .map(|e| e.message)
        .unwrap_or_default();
    assert_eq!(
        err,
        format!("undefined function `foo/0`; {HELPERS_LISTED} (and 1 more error)")
    );

    assert!(Jq::compile(r#"import "x" as x; ."#).is_err());
}

#[test]
fn variables_are_visible() {
    let vars = JqVars {
        request: JqValue::from_json(&json!({"vin": "V1"})),
        tables: JqValue::from_json(&json!({"t": {"a": 1}})),
        dealer: JqValue::from_json(&json!({"name": "Demo Motors"})),
        lead: JqValue::null(),
    };
    assert_eq!(
        eval_with(
            "[$request.vin, $tables.t.a, $dealer.name, .]",
            json!(7),
            &vars
        ),
        json!(["V1", 1, "Demo Motors", 7])
    );
}

#[test]
fn run_counts_outputs() {
    let jq = |p: &str| Jq::compile(p).unwrap_or_else(|e| panic!("{e}"));
    let (input, vars) = (JqValue::null(), JqVars::default());
    let err = |r: Result<JqValue, JqRunError>| r.err().map(|e| e.0).unwrap_or_default();
    assert_eq!(err(jq("empty").run_one(&input, &vars)), "produced no value");
    assert_eq!(
        err(jq("1, 2").run_one(&input, &vars)),
        "produced 2 values, expected one"
    );
    let all = jq("1, 2, 3").run(&input, &vars).map(|v| v.len()).ok();
    assert_eq!(all, Some(3));
    let endless = jq("repeat(1)").run(&input, &vars).err().map(|e| e.0);
    assert_eq!(endless.as_deref(), Some("produced more than 100000 values"));
    assert_eq!(
        jq("limit(3; repeat(1))")
            .run(&input, &vars)
            .map(|v| v.len())
            .ok(),
        Some(3)
    );
}

#[test]
fn run_bool_is_jq_truthiness_of_the_first_output() {
    let b = |p: &str, input: Value| {
        Jq::compile(p)
            .unwrap_or_else(|e| panic!("{e}"))
            .run_bool(&JqValue::from_json(&input), &JqVars::default())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert!(b(
        ".Fault.Code == \"NotFound\"",
        json!({"Fault": {"Code": "NotFound"}})
    ));
    assert!(!b(".Fault.Code == \"NotFound\"", json!({})));
    assert!(b(".x", json!({"x": 0})));
    assert!(!b(".x", json!({"x": null})));
    assert!(!b("empty", Value::Null));
    // Only the first output is computed.
    assert!(b("true, error(\"not reached\")", Value::Null));
}

#[test]
fn runtime_errors_are_messages() {
    assert_eq!(
        run_err("tonumber", Value::Null),
        "cannot use null as string"
    );
    assert!(run_err("tonumber", json!("garbage")).contains("cannot parse"));
    assert!(run_err(".a", json!(5)).contains("cannot index"));
    assert_eq!(run_err(r#"error("boom")"#, Value::Null), "boom");
    assert_eq!(run_err(r#"error({code: 1})"#, Value::Null), r#"{"code":1}"#);
    // `halt` would exit the process through jaq's own helper: it must be a plain error.
    assert!(run_err("halt", Value::Null).contains("halt(0)"));
    assert!(run_err(r#""x" | halt_error"#, Value::Null).contains("halt(5)"));
    assert!(run_err("env", Value::Null).contains("not available"));
}

#[test]
fn json_round_trip() {
    let v = json!({"s": "é", "i": -3, "u": u64::MAX, "f": 1.5, "b": true, "n": null, "a": [1, {"k": []}]});
    assert_eq!(JqValue::from_json(&v).to_json(), v);
    assert_eq!(
        eval(
            "[1.0, 3 / 1, 2.5, 0 / 0, 1e1000, 100000000000000000000]",
            Value::Null
        ),
        json!([1, 3, 2.5, null, null, 1e20])
    );
    assert_eq!(eval("{(1 | tostring): 2}", Value::Null), json!({"1": 2}));
}

fn dms_record(i: usize) -> Value {
    json!({
        "VIN": format!("1HGCY2F57RA{i:06}"),
        "StockNumber": format!("T{i}"),
        "ModelYear": "2022",
        "Make": "Honda",
        "Type": "Certified Pre-Owned",
        "InternetPrice": "$24,990",
        "Odometer": "12,345 mi",
        "Features": "A|B",
        "DealerCost": "$20,000"
    })
}

const ITEM: &str = r#"{vin: .VIN, stock: .StockNumber, year: (.ModelYear|int), make: .Make,
    condition: (.Type|lookup($tables.condition_in)), price: (.InternetPrice|dollars),
    mileage: (.Odometer|miles), features: (.Features|split_list("|")),
    trim: (.Trim|nonempty)} | compact"#;

fn tables() -> JqVars {
    JqVars {
        tables: JqValue::from_json(&json!({"condition_in": {"Certified Pre-Owned": "cpo"}})),
        ..JqVars::default()
    }
}

#[test]
fn realistic_mapping() {
    let out = eval_with(ITEM, dms_record(1), &tables());
    assert_eq!(
        out,
        json!({
            "vin": "1HGCY2F57RA000001",
            "stock": "T1",
            "year": 2022,
            "make": "Honda",
            "condition": "cpo",
            "price": 24990,
            "mileage": 12345,
            "features": ["A", "B"]
        })
    );
    let keys: Vec<_> = out
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "vin",
            "stock",
            "year",
            "make",
            "condition",
            "price",
            "mileage",
            "features"
        ]
    );
}

/// Timing, not an assertion: `cargo test --release lang::jq -- --nocapture timing`.
#[test]
fn timing() {
    let page = json!({"TotalCount": 20, "Items": (0..20).map(dms_record).collect::<Vec<_>>()});
    let vars = tables();
    let started = std::time::Instant::now();
    let (items, item) = (Jq::compile(".Items[]"), Jq::compile(ITEM));
    let compile = started.elapsed() / 2;
    let (Ok(items), Ok(item)) = (items, item) else {
        panic!("compile")
    };

    let started = std::time::Instant::now();
    let page = JqValue::from_json(&page);
    let records = items.run(&page, &vars).unwrap_or_default();
    let convert = started.elapsed();
    assert_eq!(records.len(), 20);

    let started = std::time::Instant::now();
    let mut produced = 0;
    for i in 0..1_000 {
        let out = item.run_one(&records[i % records.len()], &vars);
        produced += usize::from(out.is_ok_and(|v| !v.to_json().is_null()));
    }
    let runs = started.elapsed();
    assert_eq!(produced, 1_000);
    eprintln!(
        "jq timing: compile {compile:?} per program; 20-item page to JqValue + items \
         split: {convert:?}; 1,000 item mappings incl. to_json: {runs:?} ({:?} each)",
        runs / 1_000
    );
}

/// The `.Items` of a reply both ways: as records read off its tape, and as values of the reply
/// decoded whole; as many of each.
fn items_both_ways<'d>(
    doc: &'d Doc,
    decoded: &JqValue,
    vars: &JqVars,
) -> (Vec<DocRecord<'d>>, Vec<JqValue>) {
    let jq = |code: &str| Jq::compile(code).unwrap_or_else(|e| panic!("{code}: {e}"));
    let records = doc
        .records(jq(".Items").key_path().expect("a path"))
        .expect("an array of records");
    let eager = jq(".Items[]").run(decoded, vars).expect("records");
    assert_eq!(records.len(), eager.len());
    (records, eager)
}

/// A reply `{"Items": [records…], "Total": …}` read lazily: every record, through every
/// program, gives on the tape what it gives decoded into values (value or error), and `items`
/// and `total` give what running them on the whole reply gives.
#[test]
fn records_read_off_a_tape_map_as_the_decoded_reply_does() {
    let reply = r#"{"Items": [
        {"VIN": " 1HG ", "Price": "$24,990", "Opt": {"Color": "Red", "Color": "Blue"}, "N": 7},
        {"N": 1.0, "VIN": null, "Opt": "not an object", "Photos": ["a", "b"]},
        {"VIN": "x\ty", "Opt": {"Color": null}, "Photos": [], "k\u0065y": 1},
        {"Opt": [1, 2], "VIN": 5, "VIN": "last wins"},
        {"Price": "45.999,00", "Miles": "12.345", "Hours": "1,234 hrs"},
        {"Price": "12,499", "Miles": "12 345"},
        "a string record",
        17
    ], "Total": 6, "Meta": {"Count": "6"}}"#;
    let body = bytes::Bytes::from_static(reply.as_bytes());
    let doc = Doc::from_json_bytes(&body).expect("parses");
    let decoded = JqValue::from_json_bytes(&body).expect("parses");
    let vars = JqVars {
        dealer: JqValue::from_json(&json!({"id": "d1"})),
        ..JqVars::default()
    };
    let jq = |code: &str| Jq::compile(code).unwrap_or_else(|e| panic!("{code}: {e}"));
    let (records, eager) = items_both_ways(&doc, &decoded, &vars);
    for program in [
        "{vin: (.VIN | nonempty), price: (.Price | dollars), color: .Opt.Color} | compact",
        "{vin: .VIN, first: .Opt[0], n: .N, photos: [.Photos[]?], key: .key, two: [.N]}",
        // Numbers in a named format, and refused ones: the same value or error either way.
        "{p: (.Price | dollars(\"1.234,56\")), m: (.Miles | miles(\"1.234\"))}",
        "{p: (.Price | dollars), m: (.Miles | miles)}",
        "{m: (.Miles | miles(\"1 234\")), h: (.Hours | int)}",
        "{a: .Opt.Color.Deeper, b: (.VIN // \"none\"), c: (.Photos | length)}",
        ".VIN",
        ".",
        "{whole: ., n: (.N + 1)}",
        // Bindings, and an error inside one: a page's records share one environment
        // (`record_runner`), which each record must leave as it found it.
        "{d: $dealer.id, v: (.VIN as $v | [$v, $dealer.id]), \
          n: (.N as $n | if $n == 7 then error(\"seven\") else ($n as $d | $d) end), \
          after: ($dealer.id as $x | .VIN as $dealer | [$x, $dealer])}",
    ] {
        let program = jq(program);
        assert!(
            program.is_native() || !program.code().contains(" as $"),
            "{}",
            program.code()
        );
        let mut runner = program.record_runner(&vars);
        for (record, value) in records.iter().zip(&eager) {
            let on_tape = program.run_one_json_record(record, &vars).map_err(|e| e.0);
            let want = program.run_one_json(value, &vars).map_err(|e| e.0);
            assert_eq!(on_tape, want, "{} on {}", program.code(), value.to_json());
            let page = runner.run(record).map_err(|e| e.0);
            assert_eq!(
                page,
                want,
                "{} on {} in a page",
                program.code(),
                value.to_json()
            );
        }
    }
    for (path, want) in [
        (".Total", json!(6)),
        (".Meta.Count", json!("6")),
        (".None.Deeper", json!(null)),
    ] {
        let got = doc
            .at(jq(path).key_path().expect("a path"))
            .expect("on the tape");
        assert_eq!(got.to_json(), want, "{path}");
    }
    // Paths through something else than objects are left to the program (and its error).
    assert!(
        doc.records(jq(".Total").key_path().expect("path"))
            .is_none()
    );
    assert!(
        doc.at(jq(".Items.Deeper").key_path().expect("path"))
            .is_none()
    );
    assert!(jq(".Items[]").key_path().is_none() && jq(".[\"a\"] | .b").key_path().is_none());
    assert_eq!(doc.value(), &decoded, "the whole reply, made a value");
    let eager_doc = Doc::from_value(decoded.clone());
    assert!(
        eager_doc
            .records(jq(".Items").key_path().expect("path"))
            .is_none()
    );
}

/// Fields that read only literals and the global variables (`status: "available"`,
/// `dealer_id: $dealer.id`) are worked out for a page's first record and copied into the
/// rest, and `lookup` hands on a table's text without copying it: every record of a page, read
/// off its tape, still maps as jaq maps it alone: blank ones dropped, errors on every record
/// that meets them, a table's numbers, objects, blanks and missing keys as they are.
#[test]
fn fields_the_same_for_every_record_and_looked_up_texts_map_as_jaq_maps_them() {
    let reply = r#"{"Items": [
        {"K": "A", "VIN": "v1"}, {"K": " B ", "VIN": "v2"}, {"K": "C"}, {"K": "D"},
        {"K": "E", "VIN": ""}, {"K": "Z"}, {"K": null}, {"K": 5}, {"K": "A"}
    ]}"#;
    let body = bytes::Bytes::from_static(reply.as_bytes());
    let doc = Doc::from_json_bytes(&body).expect("parses");
    let decoded = JqValue::from_json_bytes(&body).expect("parses");
    let vars = JqVars {
        dealer: JqValue::from_json(&json!({"id": "d1", "blank": "", "n": 3})),
        tables: JqValue::from_json(&json!({
            "t": {"A": "alpha", "B": 1, "C": {"x": [1]}, "D": "", "E": null, "5": "five é"}
        })),
        ..JqVars::default()
    };
    let (records, eager) = items_both_ways(&doc, &decoded, &vars);
    for code in [
        "{status: \"available\", d: $dealer.id, blank: $dealer.blank, none: $dealer.missing, \
          n: $dealer.n, e: \"\", z: null, list: [1], t: $tables.t.A, \
          l: (.K | lookup($tables.t)), vin: (.VIN | nonempty)} | compact",
        "{status: \"available\", e: \"\", d: $dealer.id, l: (.K | lookup($tables.t)), \
          ll: [.K | lookup($tables.t)]}",
        "{vin: .VIN, up: (.K | lookup($tables.t) | upper)}",
        "{vin: .VIN, bad: $dealer.id.x}",
        "{vin: .VIN, bad: (.K | lookup($dealer.id))}",
        // A path from a global variable that reads the record is not the same for each.
        "{vin: .VIN, t: $tables.t[.K]}",
    ] {
        let native = Jq::compile(code).unwrap_or_else(|e| panic!("{code}: {e}"));
        assert!(native.is_native(), "{code}");
        let interpreted = Jq::compile_interpreted(code).expect("compiles");
        let mut page = native.record_runner(&vars);
        for (record, value) in records.iter().zip(&eager) {
            let want = interpreted.run_one_json(value, &vars).map_err(|e| e.0);
            assert_eq!(
                page.run(record).map_err(|e| e.0),
                want,
                "{code} on {}",
                value.to_json()
            );
        }
    }
}

/// A compacted record keeps one template per set of blank fields (the first few sets met) and
/// cuts a copy down for the rest: records with every set of blank fields, twice over, in one
/// compiled program, give what jaq gives each.
#[test]
fn compacted_records_with_every_set_of_blank_fields_map_as_jaq_maps_them() {
    let code = "{a: .a, b: (.b | nonempty), c: .c, d: .d, e: (.e | nonempty)} | compact";
    let native = Jq::compile(code).expect("compiles");
    assert!(native.is_native(), "the plan is what this test is about");
    let jaq = Jq::compile_interpreted(code).expect("compiles");
    let vars = JqVars::default();
    let blanks = [json!(null), json!(""), json!("  "), json!([]), json!({})];
    for round in 0..2 {
        for mask in 0..32u32 {
            let mut record = serde_json::Map::new();
            for (bit, key) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
                let value = if mask & (1 << bit) != 0 {
                    blanks[(bit + mask as usize + round) % blanks.len()].clone()
                } else {
                    json!(format!("{key}{mask}"))
                };
                record.insert(key.to_owned(), value);
            }
            let input = JqValue::from_json(&Value::Object(record));
            let got = native.run_one_json(&input, &vars).map_err(|e| e.0);
            let want = jaq.run_one_json(&input, &vars).map_err(|e| e.0);
            assert_eq!(got, want, "round {round}, blank fields {mask:05b}");
        }
    }
}
