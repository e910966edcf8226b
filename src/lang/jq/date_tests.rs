//! The date and time helpers (`legacy_date`, `legacy_datetime`) on the dates and times legacy
//! systems write.

use serde_json::json;

use super::tests::{check, eval, eval_with, run_err};
use super::*;

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
