//! Each native helper on the awkward values legacy systems send.

use serde_json::json;

use super::tests::{check, eval, eval_with, run_err};
use super::*;

#[test]
fn dollars() {
    check(
        "dollars",
        &[
            (json!("$24,990"), json!(24990)),
            (json!("24990.00"), json!(24990)),
            (json!("$24,990.60"), json!(24991)),
            (json!("$24,990.50"), json!(24991)),
            (json!("$24,990.49"), json!(24990)),
            (json!(" $ 1,200 "), json!(1200)),
            (json!("USD 1,200"), json!(1200)),
            (json!("1200 usd"), json!(1200)),
            (json!("-$5.50"), json!(-6)),
            (json!("$-5"), json!(-5)),
            (json!(".99"), json!(1)),
            (json!("$9,223,372,036,854,775,807"), json!(i64::MAX)),
            (json!("$9,223,372,036,854,775,808"), Value::Null),
            (json!("9223372036854775807.5"), Value::Null),
            (json!("0,001"), json!(1)),
            (json!(24990), json!(24990)),
            (json!(24990.5), json!(24991)),
            (json!(24990.4), json!(24990)),
            (json!(""), Value::Null),
            (json!("Call for price"), Value::Null),
            (json!("$"), Value::Null),
            (Value::Null, Value::Null),
            (json!(true), Value::Null),
            (json!([1]), Value::Null),
            (json!({"a": 1}), Value::Null),
        ],
    );
}

#[test]
fn miles() {
    check(
        "miles",
        &[
            (json!("12,345 mi"), json!(12345)),
            (json!("12345"), json!(12345)),
            (json!("12,345 miles"), json!(12345)),
            (json!("12,345 Mi."), json!(12345)),
            (json!("1 mile"), json!(1)),
            (json!("12345mi"), json!(12345)),
            (json!("12,345.6"), json!(12346)),
            (json!(12345), json!(12345)),
            (json!(12345.4), json!(12345)),
            (json!("0"), json!(0)),
            (json!(""), Value::Null),
            (json!("   "), Value::Null),
            (json!("unknown"), Value::Null),
            (json!("-5 mi"), Value::Null),
            (json!(-5), Value::Null),
            (Value::Null, Value::Null),
        ],
    );
}

#[test]
fn int() {
    check(
        "int",
        &[
            (json!("2022"), json!(2022)),
            (json!(" 2022 "), json!(2022)),
            (json!("28"), json!(28)),
            (json!("-3"), json!(-3)),
            (json!("1,234"), json!(1234)),
            (json!("1,234,567"), json!(1234567)),
            (json!("-1,234"), json!(-1234)),
            (json!("2.9"), json!(2)),
            (json!(2022), json!(2022)),
            (json!(2.5), json!(2)),
            (json!(-2.5), json!(-2)),
            (json!(""), Value::Null),
            (json!("abc"), Value::Null),
            (json!("99999999999999999999"), Value::Null),
            (json!("9223372036854775807"), json!(9223372036854775807i64)),
            (json!("9,223,372,036,854,775,808"), Value::Null),
            (json!("007"), json!(7)),
            (Value::Null, Value::Null),
            (json!(false), Value::Null),
        ],
    );
    // Results are real integers in jq too.
    assert_eq!(eval(r#""2022" | int | . + 1"#, Value::Null), json!(2023));
}

#[test]
fn num() {
    check(
        "num",
        &[
            (json!("239"), json!(239)),
            (json!("61.5"), json!(61.5)),
            (json!("239.00"), json!(239)),
            (json!(" 1,234.5 "), json!(1234.5)),
            (json!("1,234,567.25"), json!(1234567.25)),
            (json!("1,234.00"), json!(1234)),
            (json!("-0.25"), json!(-0.25)),
            (json!(".5"), json!(0.5)),
            (json!(61.5), json!(61.5)),
            (json!(7), json!(7)),
            (json!(""), Value::Null),
            (json!("  "), Value::Null),
            (json!("n/a"), Value::Null),
            (json!("."), Value::Null),
            (Value::Null, Value::Null),
        ],
    );
}

#[test]
fn nonempty() {
    check(
        "nonempty",
        &[
            (json!(" EX-L "), json!("EX-L")),
            (json!("EX"), json!("EX")),
            (json!(""), Value::Null),
            (json!(" \t\n"), Value::Null),
            (json!(0), json!(0)),
            (json!(false), json!(false)),
            (Value::Null, Value::Null),
            (json!([]), json!([])),
        ],
    );
}

#[test]
fn split_list() {
    check(
        r#"split_list("|")"#,
        &[
            (json!("A|B| C |"), json!(["A", "B", "C"])),
            (json!("A"), json!(["A"])),
            (json!("|"), json!([])),
            (json!(""), json!([])),
            (Value::Null, json!([])),
            (json!([" A ", "", null, "B"]), json!(["A", "B"])),
            (json!(5), json!([5])),
        ],
    );
    check(
        r#"split_list("•")"#,
        &[(
            json!("Sunroof•Heated Seats • Navigation"),
            json!(["Sunroof", "Heated Seats", "Navigation"]),
        )],
    );
    check(
        r#"split_list("|")"#,
        &[(json!("Café|Crème brûlée|"), json!(["Café", "Crème brûlée"]))],
    );
    check(
        r#"split_list(", ")"#,
        &[(
            json!("Sunroof, Heated Seats"),
            json!(["Sunroof", "Heated Seats"]),
        )],
    );
    assert!(run_err(r#"split_list("")"#, json!("a,b")).contains("separator"));
}

#[test]
fn legacy_date() {
    check(
        "legacy_date",
        &[
            (json!("03/15/2026"), json!("2026-03-15")),
            (json!("3/5/2026"), json!("2026-03-05")),
            (json!("2026-03-15"), json!("2026-03-15")),
            (json!("2026-03-15 10:00:00"), json!("2026-03-15")),
            (json!("2026-03-15T10:00:00Z"), json!("2026-03-15")),
            (json!("3/15/2026 10:00 AM"), json!("2026-03-15")),
            (json!(" 2026-03-15 "), json!("2026-03-15")),
            (json!("02/30/2026"), Value::Null),
            (json!("2026-13-01"), Value::Null),
            (json!("3/15/26"), Value::Null),
            (json!("15.03.2026"), Value::Null),
            (json!("2026-03-15garbage"), Value::Null),
            (json!("2026-3-15"), Value::Null),
            (json!("March 15, 2026"), Value::Null),
            (json!(""), Value::Null),
            (json!(20260315), Value::Null),
            (Value::Null, Value::Null),
        ],
    );
}

#[test]
fn every_timestamp_jiff_reads_passes_the_offset_precheck() {
    let stamps = [
        "2026-11-30T14:05:00Z",
        "2026-11-30t14:05:00z",
        "2026-11-30T14:05:00-05:00",
        "2026-11-30T14:05:00+0530",
        "2026-11-30T14:05:00.123456789+05:30",
        "2026-11-30 14:05Z",
        "20261130T140500Z",
        "20261130T1405-05",
        "+002026-11-30T14:05:00Z",
        "2026-11-30T14:05:00\u{2212}05:00",
        "2026-11-30T14:05:00-05:00[America/New_York]",
    ];
    for s in stamps {
        if s.parse::<jiff::Timestamp>().is_ok() {
            assert!(may_have_offset(s), "{s}");
        }
    }
    assert!("2026-11-30T14:05:00Z".parse::<jiff::Timestamp>().is_ok());
    assert!(!may_have_offset("2026-11-30 14:05:00"));
    assert!(!may_have_offset("11/30/2026 2:05 PM"));
}

/// The hand-written `legacy_datetime` output is `strtime`'s, over zones with odd offsets
/// (half hours, quarter hours, historic offsets with seconds), DST edges, every fraction width
/// and the years a legacy text can spell.
#[test]
fn local_rfc3339_writes_what_strtime_writes() {
    let zones = [
        "America/Los_Angeles",
        "America/New_York",
        "Asia/Kolkata",
        "Asia/Kathmandu",
        "Australia/Lord_Howe",
        "America/St_Johns",
        "Pacific/Chatham",
        "Africa/Monrovia",
        "Europe/Amsterdam",
        "UTC",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut checked = 0;
    for name in zones {
        let zone = zone_named(name).expect(name);
        for case in 0..400 {
            let year = match case % 4 {
                0 => 1 + next(9999) as i16,
                1 => 1800 + next(150) as i16,
                _ => 1990 + next(50) as i16,
            };
            let nanos = match case % 5 {
                0 => 0,
                1 => 500_000_000,
                2 => 120_000,
                3 => 1,
                _ => next(1_000_000_000) as i32,
            };
            let dt = jiff::civil::date(year, 1 + next(12) as i8, 1 + next(28) as i8).at(
                next(24) as i8,
                next(60) as i8,
                next(60) as i8,
                nanos,
            );
            let zoned = dt.to_zoned(zone.clone());
            let want = zoned
                .as_ref()
                .ok()
                .and_then(|zoned| jiff::fmt::strtime::format(LOCAL_RFC3339, zoned).ok());
            assert_eq!(in_zone(dt, zone.clone()), want, "{dt} in {name}");
            let Ok(zoned) = zoned else {
                continue;
            };
            assert_eq!(local_rfc3339(&zoned), want, "{dt} in {name}");
            checked += 1;
        }
    }
    assert!(checked > 3900, "{checked}");
    // Wall clocks a zone skips or passes twice are settled as `to_zoned` settles them.
    for (name, at) in [
        ("America/Los_Angeles", "2026-03-08T02:30:00"),
        ("America/Los_Angeles", "2026-11-01T01:30:00"),
        ("Europe/Amsterdam", "2026-03-29T02:15:00.5"),
        ("Europe/Amsterdam", "2026-10-25T02:45:00"),
        ("Australia/Lord_Howe", "2026-10-04T02:15:00"),
        ("Australia/Lord_Howe", "2026-04-05T01:45:00"),
        ("UTC", "9999-12-31T23:59:59"),
        ("Pacific/Chatham", "9999-12-31T23:59:59"),
        ("Asia/Kolkata", "0001-01-01T00:00:00"),
    ] {
        let zone = zone_named(name).expect(name);
        let dt: jiff::civil::DateTime = at.parse().expect(at);
        let want = dt
            .to_zoned(zone.clone())
            .ok()
            .and_then(|zoned| jiff::fmt::strtime::format(LOCAL_RFC3339, &zoned).ok());
        assert_eq!(in_zone(dt, zone), want, "{dt} in {name}");
    }
    assert_eq!(
        in_zone(
            "2026-03-08T02:30:00".parse().expect("wall clock"),
            zone_named("America/Los_Angeles").expect("zone")
        )
        .as_deref(),
        Some("2026-03-08T03:30:00-07:00")
    );
    // An offset with seconds: Amsterdam kept +00:19:32 until 1937.
    let zoned = jiff::civil::date(1920, 6, 1)
        .at(12, 0, 0, 0)
        .to_zoned(zone_named("Europe/Amsterdam").expect("zone"))
        .expect("zoned");
    assert_eq!(
        local_rfc3339(&zoned).as_deref(),
        Some("1920-06-01T12:00:00+01:19:32")
    );
}

#[test]
fn legacy_datetime() {
    check(
        r#"legacy_datetime("America/Los_Angeles")"#,
        &[
            (
                json!("2026-11-30 14:05:00"),
                json!("2026-11-30T14:05:00-08:00"),
            ),
            (
                json!("2026-11-30T14:05:00"),
                json!("2026-11-30T14:05:00-08:00"),
            ),
            (
                json!("2026-11-30T14:05"),
                json!("2026-11-30T14:05:00-08:00"),
            ),
            (
                json!("11/30/2026 2:05 PM"),
                json!("2026-11-30T14:05:00-08:00"),
            ),
            (
                json!("11/30/2026 2:05:00 pm"),
                json!("2026-11-30T14:05:00-08:00"),
            ),
            (
                json!("11/30/2026 12:30 AM"),
                json!("2026-11-30T00:30:00-08:00"),
            ),
            (
                json!("11/30/2026 12:30 PM"),
                json!("2026-11-30T12:30:00-08:00"),
            ),
            // Summer time.
            (
                json!("2026-07-01 14:05:00"),
                json!("2026-07-01T14:05:00-07:00"),
            ),
            (json!("7/1/2026 09:00"), json!("2026-07-01T09:00:00-07:00")),
            (
                json!("2026-07-01 14:05:00.250"),
                json!("2026-07-01T14:05:00.25-07:00"),
            ),
            // 2026-03-08 02:30 does not exist in Los Angeles: moved forward.
            (
                json!("2026-03-08 02:30:00"),
                json!("2026-03-08T03:30:00-07:00"),
            ),
            // 2026-11-01 01:30 happens twice: the earlier one.
            (
                json!("2026-11-01 01:30:00"),
                json!("2026-11-01T01:30:00-07:00"),
            ),
            // Already with an offset: unchanged.
            (
                json!("2026-11-30T14:05:00-05:00"),
                json!("2026-11-30T14:05:00-05:00"),
            ),
            (json!("2026-11-30T22:05:00Z"), json!("2026-11-30T22:05:00Z")),
            (json!("2026-11-30"), Value::Null),
            (json!("11/30/2026 13:05 PM"), Value::Null),
            (json!("2026-11-30 25:00"), Value::Null),
            (json!("tomorrow at noon"), Value::Null),
            (json!(""), Value::Null),
            (json!(1764540300), Value::Null),
            (Value::Null, Value::Null),
        ],
    );
    assert_eq!(
        eval(
            r#"legacy_datetime("Europe/Paris")"#,
            json!("2026-07-01 14:05")
        ),
        json!("2026-07-01T14:05:00+02:00")
    );
    let dealer = JqVars {
        dealer: JqValue::from_json(&json!({"timezone": "UTC"})),
        ..JqVars::default()
    };
    assert_eq!(
        eval_with(
            "legacy_datetime($dealer.timezone)",
            json!("2026-07-01 14:05"),
            &dealer
        ),
        json!("2026-07-01T14:05:00+00:00")
    );
    assert!(
        run_err(r#"legacy_datetime("America/Los_Angles")"#, json!("x"))
            .contains("unknown time zone")
    );
    assert!(run_err("legacy_datetime(null)", json!("x")).contains("time zone must be"));
    // The zone cache keys by name: a second zone on the same thread is its own.
    assert_eq!(
        eval(
            r#"legacy_datetime("Asia/Tokyo")"#,
            json!("2026-07-01 14:05")
        ),
        json!("2026-07-01T14:05:00+09:00")
    );
    // Minimal containers have no /usr/share/zoneinfo; the gateway carries its own.
    assert!(
        jiff::tz::TimeZoneDatabase::bundled()
            .get("America/Los_Angeles")
            .is_ok()
    );
}

#[test]
fn compact() {
    check(
        "compact",
        &[
            (
                json!({"a": 1, "b": null, "c": "", "d": [], "e": {"f": null}, "g": [null, 1], "h": 0, "i": false}),
                json!({"a": 1, "e": {}, "g": [null, 1], "h": 0, "i": false}),
            ),
            (
                json!({"vehicles": [{"vin": "X", "trim": null}], "total": 1}),
                json!({"vehicles": [{"vin": "X"}], "total": 1}),
            ),
            (json!([{"a": null}, "", null]), json!([{}, "", null])),
            (json!("x"), json!("x")),
            (Value::Null, Value::Null),
        ],
    );
    // Values are immutable: compacting a shared object or array leaves the original alone.
    assert_eq!(
        eval(
            "[compact, ., (.x | compact), .x]",
            json!({"a": null, "x": [{"b": null, "c": 1}]})
        ),
        json!([
            {"x": [{"c": 1}]},
            {"a": null, "x": [{"b": null, "c": 1}]},
            [{"c": 1}],
            [{"b": null, "c": 1}]
        ])
    );
    // Key order is kept.
    let out = eval("compact", json!({"z": 1, "a": null, "m": 2}));
    let keys: Vec<_> = out
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["z", "m"]);
}

#[test]
fn lookup() {
    let vars = JqVars {
        tables: JqValue::from_json(&json!({
            "condition_in": {"Certified Pre-Owned": "cpo", "New": "new", "1": "one"}
        })),
        ..JqVars::default()
    };
    let program = "lookup($tables.condition_in)";
    assert_eq!(
        eval_with(program, json!("Certified Pre-Owned"), &vars),
        json!("cpo")
    );
    assert_eq!(eval_with(program, json!(" New "), &vars), json!("new"));
    assert_eq!(eval_with(program, json!(1), &vars), json!("one"));
    assert_eq!(eval_with(program, json!("Used"), &vars), Value::Null);
    assert_eq!(eval_with(program, Value::Null, &vars), Value::Null);
    let typo = Jq::compile("lookup($tables.conditon_in)").unwrap_or_else(|e| panic!("{e}"));
    let err = typo
        .run_one(&JqValue::from_json(&json!("New")), &vars)
        .err()
        .map(|e| e.0)
        .unwrap_or_default();
    assert!(err.contains("the table is null"), "{err}");
}

proptest::proptest! {
    /// The quick answer for printable ends is `str::trim`'s, whatever the text.
    #[test]
    fn trim_str_is_str_trim(s in "[ \\t\\n\\x0b\\x0c\\r\\x00-\\x7f\u{85}\u{a0}\u{2003}\u{3000}é€a-z]{0,12}") {
        proptest::prop_assert_eq!(trim_str(&s), s.trim());
    }
}

/// `int` of a text of digits and commas, as the helper's documentation says it: digits, or
/// groups of three after a first group of one to three, separated by `,`.
/// `None`: not such a text; `Some(None)`: one past `i64`.
fn int_oracle(s: &str) -> Option<Option<i64>> {
    let groups: Vec<&str> = s.split(',').collect();
    let digits = |g: &str| g.bytes().all(|b| b.is_ascii_digit());
    let valid = match groups.as_slice() {
        [one] => !one.is_empty() && digits(one),
        [first, rest @ ..] => {
            (1..=3).contains(&first.len())
                && digits(first)
                && rest.iter().all(|g| g.len() == 3 && digits(g))
        }
        [] => false,
    };
    valid.then(|| groups.concat().parse().ok())
}

proptest::proptest! {
    #[test]
    fn int_of_digits_and_commas_is_the_oracles(
        s in proptest::prop_oneof!["[0-9,]{0,24}", ",?[0-9]{0,4}(,[0-9]{2,4}){0,6},?"],
    ) {
        let got = int_str(&s, None).ok();
        let want = match int_oracle(&s) {
            Some(n) => Some(n.map_or(Val::Null, int_val)),
            // Digits it cannot read are an error; no digits, no value.
            None if s.bytes().any(|b| b.is_ascii_digit()) => None,
            None => Some(Val::Null),
        };
        proptest::prop_assert_eq!(got, want, "{:?}", s);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
    /// Prices, mileages and years written plainly are read in one pass to what the full parse
    /// reads from them; every other text is left to that parse.
    #[test]
    fn plain_amounts_read_as_the_full_parse_reads_them(
        s in proptest::prop_oneof![
            "[$]?[0-9]{1,3}(,[0-9]{3}){0,7}",
            "[$]?[0-9]{1,21}",
            "[$]?,?[0-9]{0,5}(,[0-9]{2,4}){0,3},?",
            "[-+$ ,.0-9]{0,12}",
            "(USD|usd)?[ $]{0,2}[-+]?[0-9,]{0,8}([.][0-9]{0,3})?[ ]?(USD|mi|miles)?",
        ],
    ) {
        if let Some(n) = plain_integer(s.strip_prefix('$').unwrap_or(&s).as_bytes()) {
            proptest::prop_assert_eq!(Some(int_val(n)), parse_dollars_in_full(&s, None), "{:?}", s);
        }
        if let Some(n) = plain_integer(s.as_bytes()) {
            proptest::prop_assert_eq!(Some(int_val(n)), miles_str_in_full(&s, None), "{:?}", s);
            proptest::prop_assert_eq!(Some(int_val(n)), int_str_in_full(&s, None), "{:?}", s);
            proptest::prop_assert_eq!(Some(Some(n)), int_oracle(&s), "{:?}", s);
        }
        // The fast path and the full one answer alike, errors included.
        proptest::prop_assert_eq!(
            parse_dollars(&s, None).ok(),
            integer_slow("dollars", &s, parse_dollars_in_full(&s, None)),
            "{:?}", s
        );
        proptest::prop_assert_eq!(
            miles_str(&s, None).ok(),
            integer_slow("miles", &s, miles_str_in_full(&s, None)),
            "{:?}", s
        );
    }
}

proptest::proptest! {
    /// A date written by hand is what its `Display` writes, for every year a legacy text spells.
    #[test]
    fn write_date_is_dates_display(year in 0i16..=9999, month in 1i8..=12, day in 1i8..=31) {
        if let Ok(date) = Date::new(year, month, day) {
            proptest::prop_assert_eq!(write_date(date), date.to_string());
        }
    }

    /// The digits at the start of a text, between `min` and `max` of them, as `str::parse`
    /// reads them.
    #[test]
    fn take_digits_reads_what_parse_reads(
        s in "[0-9]{0,6}[-/: a]{0,2}[0-9]{0,3}",
        (min, max) in proptest::prop_oneof![proptest::strategy::Just((1, 2)), proptest::strategy::Just((2, 2)), proptest::strategy::Just((4, 4))],
    ) {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        let want = (min..=max)
            .contains(&n)
            .then(|| (s[..n].parse::<i16>().expect("digits"), &s[n..]));
        proptest::prop_assert_eq!(take_digits(&s, min, max), want);
    }
}

/// [`integer_read`] of a full parse without a format, as an `Option` to compare.
fn integer_slow(helper: &str, s: &str, read: Option<Val>) -> Option<Val> {
    integer_read(helper, s, None, read).ok()
}

/// Each program on each input fails with an error that says `says`.
fn refuses(cases: &[(&str, Value, &str)]) {
    for (program, input, says) in cases {
        let err = run_err(program, input.clone());
        assert!(err.contains(says), "{program} on {input}: {err}");
    }
}

#[test]
fn numbers_with_digits_the_us_way_cannot_read_are_refused() {
    refuses(&[
        (
            "dollars",
            json!("45.999,00"),
            r#"name it: dollars("1.234,56")"#,
        ),
        ("dollars", json!("24,99"), r#"dollars("1234,5")"#),
        ("dollars", json!("-$-5"), "cannot read"),
        ("dollars", json!("1e5"), "cannot read"),
        ("miles", json!("1.234 hrs"), "miles"),
        ("miles", json!("12 345"), r#"miles("1 234")"#),
        ("int", json!("12,34"), "cannot read"),
        ("int", json!(",123"), "cannot read"),
        ("int", json!("1234,567"), "cannot read"),
        ("int", json!("1,234,"), "cannot read"),
        ("int", json!("20 22"), "cannot read"),
        ("num", json!("1.2.3"), "cannot read"),
        ("num", json!("61,5"), r#"num("1234,5")"#),
    ]);
}

#[test]
fn a_dot_before_three_digits_is_refused_for_integer_quantities() {
    refuses(&[
        (
            "miles",
            json!("12.345"),
            r#"could be 12.345 or 12345; if `.` groups thousands, name the format: miles("1.234")"#,
        ),
        (
            r#"miles("1,234.5")"#,
            json!("12.345"),
            "three decimals in a whole quantity",
        ),
        (
            r#"dollars("1.234,56")"#,
            json!("12,499"),
            "could be 12.499 or 12499",
        ),
        (r#"int("1234,5")"#, json!("12,499"), "could be"),
        ("miles", json!("12.345 mi"), "could be"),
        ("dollars", json!("$1.999"), "could be 1.999 or 1999"),
        ("int", json!("1.234"), "could be"),
    ]);
    // Not ambiguous: a lone zero before the dot, other than three digits after it, the
    // separator a format names for thousands, and `num`, a decimal quantity.
    assert_eq!(eval("miles", json!("0.125")), json!(0));
    assert_eq!(eval("miles", json!("12.3456")), json!(12));
    assert_eq!(eval("dollars", json!("24990.00")), json!(24990));
    assert_eq!(eval("dollars", json!("12,499")), json!(12499));
    assert_eq!(eval(r#"miles("1.234")"#, json!("12.345")), json!(12345));
    assert_eq!(eval("num", json!("12.345")), json!(12.345));
}

#[test]
fn a_named_format_reads_exactly_that_format() {
    let cases = [
        (r#"dollars("1.234,56")"#, json!("45.999,00"), json!(45999)),
        (r#"dollars("1.234,56")"#, json!("€ 45.999,50"), Value::Null),
        (r#"dollars("1.234,56")"#, json!("$45.999,50"), json!(46000)),
        (r#"dollars("1.234,56")"#, json!("45999"), json!(45999)),
        (
            r#"dollars("1.234,56")"#,
            json!("Preis auf Anfrage"),
            Value::Null,
        ),
        (r#"miles("1.234")"#, json!("12.345"), json!(12345)),
        (r#"miles("1.234")"#, json!("1.234.567 mi"), json!(1234567)),
        (r#"miles("1 234")"#, json!("12 345 miles"), json!(12345)),
        (r#"miles("1 234")"#, json!("12\u{a0}345"), json!(12345)),
        (r#"int("1'234")"#, json!("1'234'567"), json!(1234567)),
        (r#"num("1234,5")"#, json!("61,5"), json!(61.5)),
        (r#"num("1.234,5")"#, json!("1.234,25"), json!(1234.25)),
        (r#"num("1,234.5")"#, json!("1,234.25"), json!(1234.25)),
        (r#"int("1234")"#, json!("2022"), json!(2022)),
        (r#"dollars("1.234,56")"#, json!(24990.5), json!(24991)),
    ];
    for (program, input, want) in cases {
        if want.is_null() && input.as_str().is_some_and(|s| s.contains('€')) {
            // A currency the helper does not know: digits it cannot read.
            let err = run_err(program, input.clone());
            assert!(
                err.contains("is not a number written as the format names"),
                "{err}"
            );
            continue;
        }
        assert_eq!(eval(program, input.clone()), want, "{program} on {input}");
    }
    refuses(&[
        (
            r#"dollars("1.234,56")"#,
            json!("45,999.00"),
            "not a number written as the format",
        ),
        (
            r#"miles("1.234")"#,
            json!("12,345"),
            "not a number written as the format",
        ),
        (
            r#"miles("1.234")"#,
            json!("12.34"),
            "not a number written as the format",
        ),
        (
            r#"num("1234,5")"#,
            json!("1.234,5"),
            "not a number written as the format",
        ),
    ]);
}

#[test]
fn a_format_that_is_no_example_number_is_an_error() {
    for (format, says) in [
        ("12-34", "neither a digit nor a separator"),
        (",123", "separator without digits"),
        ("1,,234", "separator without digits"),
        ("1234,", "start and end with a digit"),
        ("1,23,456.7", "in threes"),
        ("1.234.5", "in threes"),
        ("1234.567,8", "in threes"),
    ] {
        let err = run_err(&format!("dollars({format:?})"), json!("1"));
        assert!(err.contains(says), "{format}: {err}");
        assert!(err.starts_with("dollars: number format"), "{format}: {err}");
    }
    let err = run_err("miles(5)", json!("1"));
    assert!(
        err.contains("the format must be an example string"),
        "{err}"
    );
    assert_eq!(
        NumberFormat::by_example("1.234,56"),
        NumberFormat::by_example("12.345.678,9")
    );
}

/// `n` (and `cents`, two digits, when given) written with `thousands` between groups of three
/// and `decimal` before the fraction.
fn written(n: u64, cents: Option<u8>, thousands: Option<char>, decimal: char) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.extend(thousands);
        }
        out.push(c);
    }
    if let Some(c) = cents {
        out.push(decimal);
        out.push_str(&format!("{c:02}"));
    }
    out
}

fn formats() -> impl proptest::strategy::Strategy<Value = (Option<char>, char)> {
    proptest::sample::select(vec![
        (None, '.'),
        (None, ','),
        (Some(','), '.'),
        (Some('.'), ','),
        (Some(' '), ','),
        (Some(' '), '.'),
        (Some('\''), '.'),
        (Some('\u{202f}'), ','),
    ])
}

proptest::proptest! {
    /// A number written in a format is read back as that number by each helper given the
    /// format by example.
    #[test]
    fn a_number_in_a_named_format_reads_back_the_same(
        n in 0u64..10_000_000_000_000,
        cents in proptest::option::of(0u8..100),
        (thousands, decimal) in formats(),
    ) {
        let example = written(1234, Some(56), thousands, decimal);
        let text = written(n, cents, thousands, decimal);
        let format = NumberFormat::by_example(&example).ok();
        proptest::prop_assert!(format.is_some(), "{:?}", example);
        let exact = match cents {
            Some(c) => format!("{n}.{c:02}").parse::<f64>().ok().map(Val::from).unwrap_or(Val::Null),
            None => int_val(n as i64),
        };
        let exact = if cents == Some(0) { int_val(n as i64) } else { exact };
        let rounded = int_val(n as i64 + i64::from(cents.is_some_and(|c| c >= 50)));
        proptest::prop_assert_eq!(num_str(&text, format).ok(), Some(exact), "{:?}", text);
        proptest::prop_assert_eq!(parse_dollars(&text, format).ok(), Some(rounded.clone()), "{:?}", text);
        proptest::prop_assert_eq!(miles_str(&format!("{text} mi"), format).ok(), Some(rounded), "{:?}", text);
        proptest::prop_assert_eq!(int_str(&text, format).ok(), Some(int_val(n as i64)), "{:?}", text);
    }

    /// Without a format, a number written any of those ways is read as that very number or
    /// refused: never read as another. (A decimal comma before exactly three digits, `12,345`,
    /// is the US default's thousands and is left out: the documented default reads it so.)
    #[test]
    fn without_a_format_a_number_is_read_exactly_or_refused(
        n in 0u64..10_000_000_000_000,
        cents in proptest::option::of(0u8..100),
        (thousands, decimal) in formats(),
    ) {
        let text = written(n, cents, thousands, decimal);
        let rounded = int_val(n as i64 + i64::from(cents.is_some_and(|c| c >= 50)));
        for got in [parse_dollars(&text, None), miles_str(&text, None)].into_iter().flatten() {
            proptest::prop_assert_eq!(&got, &rounded, "{:?}", text);
        }
        if let Ok(got) = int_str(&text, None) {
            proptest::prop_assert_eq!(got, int_val(n as i64), "{:?}", text);
        }
    }
}
