//! The legacy date and time helpers (`legacy_date`, `legacy_datetime`): the dates and wall-clock
//! times legacy systems write (`2026-05-01`, `5/1/2026 2:30 PM`), read in the rooftop's zone and
//! written as RFC 3339, for jaq and for native plans alike.

use super::*;

/// Leading ASCII digits (between `min` and `max` of them) as a number, and the rest.
pub(super) fn take_digits(s: &str, min: usize, max: usize) -> Option<(i16, &str)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n < min || n > max {
        return None;
    }
    let (digits, rest) = s.split_at_checked(n)?;
    // At most four digits (every caller's `max`): no overflow, and no `str::parse` per field.
    debug_assert!(max <= 4);
    let value = digits
        .bytes()
        .fold(0i16, |n, d| n * 10 + i16::from(d - b'0'));
    Some((value, rest))
}

/// `YYYY-MM-DD` or `M/D/YYYY` at the start of `s`, and the rest.
pub(super) fn date_prefix(s: &str) -> Option<(Date, &str)> {
    let iso = || {
        let (year, rest) = take_digits(s, 4, 4)?;
        let (month, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('-')?, 2, 2)?;
        Some((year, month, day, rest))
    };
    let us = || {
        let (month, rest) = take_digits(s, 1, 2)?;
        let (day, rest) = take_digits(rest.strip_prefix('/')?, 1, 2)?;
        let (year, rest) = take_digits(rest.strip_prefix('/')?, 4, 4)?;
        Some((year, month, day, rest))
    };
    let (year, month, day, rest) = iso().or_else(us)?;
    let date = Date::new(year, i8::try_from(month).ok()?, i8::try_from(day).ok()?).ok()?;
    Some((date, rest))
}

/// `H:MM[:SS[.fff]] [AM|PM]`, the whole of `s`.
pub(super) fn time_of_day(s: &str) -> Option<Time> {
    let (hour, rest) = take_digits(s, 1, 2)?;
    let (minute, mut rest) = take_digits(rest.strip_prefix(':')?, 2, 2)?;
    let (mut second, mut nanos) = (0, 0);
    if let Some(after) = rest.strip_prefix(':') {
        (second, rest) = take_digits(after, 2, 2)?;
        if let Some(after) = rest.strip_prefix('.') {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            let (frac, after) = after.split_at_checked(n)?;
            if frac.is_empty() || frac.len() > 9 {
                return None;
            }
            nanos = frac.parse::<i32>().ok()? * 10_i32.pow(9 - frac.len() as u32);
            rest = after;
        }
    }
    let rest = rest.trim();
    let am_pm = ["am", "a.m.", "pm", "p.m."]
        .iter()
        .position(|m| rest.eq_ignore_ascii_case(m));
    let hour = match am_pm {
        None if rest.is_empty() => hour,
        None => return None,
        Some(_) if !(1..=12).contains(&hour) => return None,
        Some(i) => hour % 12 + if i >= 2 { 12 } else { 0 },
    };
    let part = |n: i16| i8::try_from(n).ok();
    Time::new(part(hour)?, part(minute)?, part(second)?, nanos).ok()
}

pub(super) fn legacy_date(v: &Val) -> Val {
    as_str(v)
        .and_then(legacy_date_str)
        .map_or_else(|| Val::Null, Val::from)
}

/// `legacy_date` of a string; `None` is `null`.
pub(super) fn legacy_date_str(s: &str) -> Option<String> {
    let (date, rest) = date_prefix(trim_str(s))?;
    let time_follows = rest
        .strip_prefix(['T', 't', ' '])
        .is_some_and(|t| t.trim_start().starts_with(|c: char| c.is_ascii_digit()));
    (rest.is_empty() || time_follows).then(|| write_date(date))
}

/// `date` as `YYYY-MM-DD`, what its `Display` writes for the years [`date_prefix`] reads
/// (0000–9999), without the formatting machinery.
pub(super) fn write_date(date: Date) -> String {
    let mut out = String::with_capacity(10);
    let part = |n: i8| n.unsigned_abs().into();
    write_digits(&mut out, date.year().unsigned_abs().into(), 4);
    out.push('-');
    write_digits(&mut out, part(date.month()), 2);
    out.push('-');
    write_digits(&mut out, part(date.day()), 2);
    out
}

/// The last `width` decimal digits of `n`, zeros first.
fn write_digits(out: &mut String, n: u32, width: u32) {
    for place in (0..width).rev() {
        out.push(char::from(b'0' + (n / 10_u32.pow(place) % 10) as u8));
    }
}

/// The zone of that IANA name. A mapping names one zone for all its records: each thread keeps
/// the last one it looked up rather than asking the database per record.
pub(super) fn zone_named(name: &str) -> Option<jiff::tz::TimeZone> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Box<str>, jiff::tz::TimeZone)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((n, zone)) = last.as_ref()
            && **n == *name
        {
            return Some(zone.clone());
        }
        let zone = jiff::tz::db().get(name).ok()?;
        *last = Some((name.into(), zone.clone()));
        Some(zone)
    })
}

/// Whether `s` could be a timestamp with an offset: one needs `Z` or a sign (`+`, `-`, or
/// the non-ASCII `−`) after its date. Wall-clock times skip the (failing) timestamp parse.
pub(super) fn may_have_offset(s: &str) -> bool {
    s.bytes()
        .skip(10)
        .any(|b| matches!(b, b'Z' | b'z' | b'+' | b'-') || !b.is_ascii())
}

pub(super) fn legacy_datetime(v: Val, tz: Val) -> jaq_core::ValR<Val> {
    Ok(legacy_datetime_str(as_str(&v), &tz)?.map_or_else(|| Val::Null, Val::from))
}

/// `legacy_datetime` of `s` (`None`: not a string); `Ok(None)` is `null`. The zone is checked
/// first, whatever `s` is.
pub(super) fn legacy_datetime_str(
    s: Option<&str>,
    tz: &Val,
) -> Result<Option<String>, jaq_core::Error<Val>> {
    let name = as_str(tz).ok_or_else(|| {
        jaq_core::Error::str(format_args!(
            "legacy_datetime: the time zone must be a name such as \"America/Los_Angeles\", not {tz}"
        ))
    })?;
    let zone = zone_named(name).ok_or_else(|| {
        jaq_core::Error::str(format_args!("legacy_datetime: unknown time zone {tz}"))
    })?;
    let Some(s) = s.map(trim_str) else {
        return Ok(None);
    };
    if may_have_offset(s) && !s.contains('[') && s.parse::<jiff::Timestamp>().is_ok() {
        return Ok(Some(s.to_string()));
    }
    let wall_clock = date_prefix(s).and_then(|(date, rest)| {
        let rest = rest.strip_prefix(['T', 't', ' '])?.trim_start();
        Some(DateTime::from_parts(date, time_of_day(rest)?))
    });
    Ok(wall_clock.and_then(|dt| in_zone(dt, zone)))
}

/// A wall-clock time in `zone`, as `LOCAL_RFC3339` writes it (what `legacy_datetime` gives).
/// A time the zone passes once — all but an hour or two a year — is written with the zone's
/// offset straight away; one in a gap or a fold, and the far years, take `Zoned`'s way, which
/// settles it as `to_zoned` does ("compatible") but clones the zone and computes the instant and
/// then the wall clock back from it.
pub(super) fn in_zone(dt: DateTime, zone: jiff::tz::TimeZone) -> Option<String> {
    if (1..=9998).contains(&dt.year())
        && let jiff::tz::AmbiguousOffset::Unambiguous { offset } =
            zone.to_ambiguous_timestamp(dt).offset()
    {
        return write_rfc3339(dt, offset);
    }
    dt.to_zoned(zone)
        .ok()
        .and_then(|zoned| local_rfc3339(&zoned))
}

/// The format `legacy_datetime` writes, as jiff's `strtime` writes it.
pub(super) const LOCAL_RFC3339: &str = "%Y-%m-%dT%H:%M:%S%.f%:z";

/// `zoned` as `LOCAL_RFC3339` says: its wall clock, fractional seconds without trailing zeros
/// (none when zero), and its offset as `±HH:MM` (`±HH:MM:SS` for the odd historic offset).
/// Written by hand because `strtime` interprets its format per call, half the cost of the
/// helper; years outside 0–9999 (which no legacy text spells) go through `strtime` itself.
pub(super) fn local_rfc3339(zoned: &jiff::Zoned) -> Option<String> {
    if !(0..=9999).contains(&zoned.year()) {
        return jiff::fmt::strtime::format(LOCAL_RFC3339, zoned).ok();
    }
    write_rfc3339(zoned.datetime(), zoned.offset())
}

/// [`local_rfc3339`] of a wall clock and its offset, for years 0–9999.
fn write_rfc3339(dt: DateTime, offset: jiff::tz::Offset) -> Option<String> {
    let year = dt.year();
    if !(0..=9999).contains(&year) {
        return None;
    }
    let part = |n: i8| n.unsigned_abs().into();
    let mut out = String::with_capacity(35);
    write_digits(&mut out, year.unsigned_abs().into(), 4);
    out.push('-');
    write_digits(&mut out, part(dt.month()), 2);
    out.push('-');
    write_digits(&mut out, part(dt.day()), 2);
    out.push('T');
    write_digits(&mut out, part(dt.hour()), 2);
    out.push(':');
    write_digits(&mut out, part(dt.minute()), 2);
    out.push(':');
    write_digits(&mut out, part(dt.second()), 2);
    let mut nanos = dt.subsec_nanosecond().unsigned_abs();
    if nanos != 0 {
        let mut width = 9;
        while nanos.is_multiple_of(10) {
            nanos /= 10;
            width -= 1;
        }
        out.push('.');
        write_digits(&mut out, nanos, width);
    }
    let offset = offset.seconds();
    out.push(if offset < 0 { '-' } else { '+' });
    let offset = offset.unsigned_abs();
    write_digits(&mut out, offset / 3600, 2);
    out.push(':');
    write_digits(&mut out, offset / 60 % 60, 2);
    if !offset.is_multiple_of(60) {
        out.push(':');
        write_digits(&mut out, offset % 60, 2);
    }
    Some(out)
}
