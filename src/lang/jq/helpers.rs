//! The native legacy-format helpers mappings call (`dollars`, `miles`, `int`, `nonempty`,
//! `lookup`, `compact`, `split_list`, `legacy_date(time)`, …), the same functions for jaq and for
//! native plans.

use super::*;

/// `str::trim`, answered at once for the commonest text (see [`ends_need_no_trim`]): a search
/// page trims each of its 600 values once or more.
#[inline]
pub(super) fn trim_str(s: &str) -> &str {
    if ends_need_no_trim(s.as_bytes()) {
        s
    } else {
        s.trim()
    }
}

/// Whether a text starts and ends with a printable ASCII character, none of them `White_Space`:
/// most values do, and have nothing to trim. (One range check per end; any other text is
/// trimmed the long way, which also gets right what this leaves to it.)
#[inline]
fn ends_need_no_trim(bytes: &[u8]) -> bool {
    let printable = |b: &u8| (0x21..0x7f).contains(b);
    bytes.first().is_some_and(printable) && bytes.last().is_some_and(printable)
}

pub(super) fn as_str(v: &Val) -> Option<&str> {
    match v {
        Val::TStr(b) | Val::BStr(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

pub(super) fn int_val(i: i64) -> Val {
    Val::Num(Num::from_integral(i))
}

/// A finite `f64` rounded by `round`, as an integer value (`null` when out of range).
pub(super) fn float_to_int(f: f64, round: fn(f64) -> f64) -> Val {
    let r = round(f);
    if r.is_finite() && r.abs() <= EXACT_F64_INT {
        int_val(r as i64)
    } else {
        Val::Null
    }
}

/// The value of a text that is only digits, or groups of three digits after a first group of
/// one to three, separated by `,` (`18990`, `18,990`): how nearly every price, mileage and year
/// a legacy system sends is written, read in one pass. `None` for any other text (and past 18
/// digits), which the full parse reads ([`Decimal::parse`]); where this gives a value, that
/// parse gives the same.
#[inline]
pub(super) fn plain_integer(s: &[u8]) -> Option<i64> {
    let (mut value, mut digits) = (0i64, 0u32);
    // Digits since the last `,`; `None` before the first.
    let mut group: Option<u32> = None;
    for &b in s {
        match b {
            b'0'..=b'9' => {
                digits += 1;
                if digits > 18 {
                    return None;
                }
                value = value * 10 + i64::from(b - b'0');
                if let Some(n) = &mut group {
                    *n += 1;
                }
            }
            b',' => match group {
                None if (1..=3).contains(&digits) => group = Some(0),
                Some(3) => group = Some(0),
                _ => return None,
            },
            _ => return None,
        }
    }
    matches!(group, None | Some(3))
        .then_some(value)
        .filter(|_| digits > 0)
}

/// A number written as text: sign, integer digits and fraction digits.
pub(super) struct Decimal<'s> {
    negative: bool,
    /// The integer digits as written, `,` between groups of three where the text had them
    /// (prices mostly do): read in place, not copied without them.
    int: &'s str,
    frac: &'s str,
}

impl Decimal<'_> {
    /// `[+-]digits[.digits]`, with optional `,` separating groups of three integer digits.
    fn parse(s: &str) -> Option<Decimal<'_>> {
        let s = trim_str(s);
        let (negative, s) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        // A byte search: `split_once('.')` costs more than the few bytes it looks through.
        let (int, frac) = match s.bytes().position(|b| b == b'.') {
            Some(dot) => (&s[..dot], &s[dot + 1..]),
            None => (s, ""),
        };
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if !digits(frac) {
            return None;
        }
        // Else `d{1,3}(,ddd)+`: from the end, every fourth byte a `,` and the rest digits.
        let grouped = || {
            let b = int.as_bytes();
            b.len() >= 5
                && b[0] != b','
                && b.iter().rev().enumerate().all(|(at, &c)| match at % 4 {
                    3 => c == b',',
                    _ => c.is_ascii_digit(),
                })
        };
        if !digits(int) && !grouped() {
            return None;
        }
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        Some(Decimal {
            negative,
            int,
            frac,
        })
    }

    /// The integer digits' value; `None` past `i64`.
    fn magnitude(&self) -> Option<i64> {
        self.int
            .bytes()
            .filter(|&b| b != b',')
            .try_fold(0i64, |m, d| {
                m.checked_mul(10)?.checked_add(i64::from(d - b'0'))
            })
    }

    fn signed(&self, magnitude: i64) -> Val {
        int_val(if self.negative { -magnitude } else { magnitude })
    }

    /// Rounded half away from zero.
    fn rounded(&self) -> Val {
        let round_up = self.frac.as_bytes().first().is_some_and(|d| *d >= b'5');
        match self.magnitude() {
            Some(m) => m
                .checked_add(i64::from(round_up))
                .map_or_else(|| Val::Null, |m| self.signed(m)),
            None => Val::Null,
        }
    }

    fn truncated(&self) -> Val {
        self.magnitude()
            .map_or_else(|| Val::Null, |m| self.signed(m))
    }

    /// An integer when the fraction is zero, else a float.
    fn number(&self) -> Val {
        if self.frac.bytes().all(|b| b == b'0')
            && let Some(m) = self.magnitude()
        {
            return self.signed(m);
        }
        let sign = if self.negative { "-" } else { "" };
        let int = if self.int.is_empty() {
            "0".into()
        } else {
            self.int.replace(',', "")
        };
        let frac = if self.frac.is_empty() { "0" } else { self.frac };
        format!("{sign}{int}.{frac}")
            .parse::<f64>()
            .map_or_else(|_| Val::Null, Val::from)
    }
}

pub(super) fn strip_prefix_ci<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

pub(super) fn strip_suffix_ci<'s>(s: &'s str, suffix: &str) -> Option<&'s str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix)
        .then(|| s.get(..cut))
        .flatten()
}

/// How a mapping says its upstream writes numbers, named by an example of one:
/// `dollars("1.234,56")` (thousands dot, decimal comma), `miles("1 234")`, `num("1234,5")`.
/// Without one, a helper reads the US way (`,` thousands, `.` decimal) and refuses what that
/// way cannot read unambiguously (see [`refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NumberFormat {
    /// Between groups of three integer digits; `None`: the texts never group digits.
    thousands: Option<char>,
    /// Before the fraction; `None`: the texts have no fraction.
    decimal: Option<char>,
}

/// The characters an example may separate digits with: `,` `.`, a space (also written as a
/// no-break or narrow no-break space), an apostrophe (Swiss `1'234`).
const SEPARATORS: [char; 6] = [',', '.', ' ', '\'', '\u{a0}', '\u{202f}'];

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\u{a0}' | '\u{202f}')
}

impl NumberFormat {
    /// The format of `example`: a last `,` or `.` that occurs once and is followed by other than
    /// three digits, or that follows another separator, is the decimal one; every other
    /// separator is the thousands one, each followed by three digits.
    pub(super) fn by_example(example: &str) -> Result<NumberFormat, String> {
        let bad = |why: &str| {
            Err(format!(
                "number format {example:?} {why}: write an example number such as \"1.234,56\", \
                 \"1 234\" or \"1234,5\""
            ))
        };
        // The separators in order, each with the digits after it.
        let mut seps: Vec<(char, usize)> = Vec::new();
        let mut first = 0usize;
        for c in example.chars() {
            match c {
                '0'..='9' => match seps.last_mut() {
                    Some((_, n)) => *n += 1,
                    None => first += 1,
                },
                c if SEPARATORS.contains(&c) => {
                    if first == 0 || seps.last().is_some_and(|(_, n)| *n == 0) {
                        return bad("has a separator without digits before it");
                    }
                    seps.push((c, 0));
                }
                _ => return bad("has a character that is neither a digit nor a separator"),
            }
        }
        if first == 0 || seps.last().is_some_and(|(_, n)| *n == 0) {
            return bad("does not start and end with a digit");
        }
        let decimal = match seps.split_last() {
            Some((&(c, n), before))
                if matches!(c, ',' | '.')
                    && !before.iter().any(|(b, _)| *b == c)
                    && (n != 3 || !before.is_empty()) =>
            {
                seps.pop();
                Some(c)
            }
            _ => None,
        };
        let thousands = seps.first().map(|(c, _)| *c);
        if seps.iter().any(|(c, n)| Some(*c) != thousands || *n != 3)
            || first > 3 && thousands.is_some()
        {
            return bad("does not group its digits in threes with one separator");
        }
        if thousands.is_some() && thousands == decimal {
            return bad("uses one separator for both thousands and the decimal");
        }
        Ok(NumberFormat { thousands, decimal })
    }

    /// `s` trimmed and rewritten the US way ([`Decimal::parse`] reads it), `None` when it has a
    /// `,` or `.` this format does not name.
    fn to_us(self, s: &str) -> Option<String> {
        let mut out = String::with_capacity(s.len());
        for c in trim_str(s).chars() {
            if Some(c) == self.thousands || self.thousands.is_some_and(is_space) && is_space(c) {
                out.push(',');
            } else if Some(c) == self.decimal {
                out.push('.');
            } else if matches!(c, ',' | '.') {
                return None;
            } else {
                out.push(c);
            }
        }
        Some(out)
    }
}

/// The [`NumberFormat`] a helper was given, if any.
pub(super) fn text_format(
    helper: &str,
    format: Option<&Val>,
) -> Result<Option<NumberFormat>, jaq_core::Error<Val>> {
    format.map(|f| number_format(helper, f)).transpose()
}

/// The [`NumberFormat`] of a helper's argument (the example is read per call: a few bytes).
fn number_format(helper: &str, example: &Val) -> Result<NumberFormat, jaq_core::Error<Val>> {
    let fail = |why: String| jaq_core::Error::str(format_args!("{helper}: {why}"));
    let text = as_str(example).ok_or_else(|| {
        fail(format!(
            "the format must be an example string such as \"1.234,56\", not {example}"
        ))
    })?;
    NumberFormat::by_example(text).map_err(fail)
}

/// The number in `s` read as `format` says (the US way when `None`), given to `read`; `None`
/// when the text is not a number written that way.
fn with_decimal<R>(
    s: &str,
    format: Option<NumberFormat>,
    read: impl FnOnce(Decimal<'_>) -> R,
) -> Option<R> {
    match format {
        None => Decimal::parse(s).map(read),
        Some(f) => Decimal::parse(&f.to_us(s)?).map(read),
    }
}

/// Whether `s` has a digit: a text without one (`""`, `"Call for price"`) is no value, `null`;
/// one with digits that a helper cannot read is an error ([`refused`]).
fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Whether the number in `s` is one to three digits (not a lone `0`), the `decimal` separator
/// and three digits: `"12.345"` is twelve and a bit the US way and 12,345 where `.` groups
/// thousands (and `"12,499"` the other way round), and a whole quantity — money, miles, a
/// count — is never written to three decimals; so [`integer_read`] refuses it rather than guess.
fn looks_like_a_thousands_group(s: &str, decimal: char) -> bool {
    let core = s.trim_matches(|c: char| !c.is_ascii_digit());
    let Some((int, frac)) = core.split_once(decimal) else {
        return false;
    };
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    (1..=3).contains(&int.len()) && int != "0" && digits(int) && frac.len() == 3 && digits(frac)
}

/// The error for a text a helper cannot read exactly: what it says and what to write instead.
/// (Vehicle values are no personal data; the text is cut to keep the log line short.)
fn refused(
    helper: &str,
    s: &str,
    format: Option<NumberFormat>,
    ambiguous: bool,
) -> jaq_core::Error<Val> {
    let shown: String = trim_str(s).chars().take(40).collect();
    if ambiguous {
        let core = shown.trim_matches(|c: char| !c.is_ascii_digit());
        let (fraction, whole) = (core.replace(',', "."), core.replace([',', '.'], ""));
        return match format {
            None => jaq_core::Error::str(format_args!(
                "{helper}: {shown:?} could be {fraction} or {whole}; if `.` groups thousands, \
                 name the format: {helper}(\"1.234\")"
            )),
            Some(_) => jaq_core::Error::str(format_args!(
                "{helper}: {shown:?} could be {fraction} or {whole} (three decimals in a whole \
                 quantity)"
            )),
        };
    }
    if format.is_some() {
        return jaq_core::Error::str(format_args!(
            "{helper}: {shown:?} is not a number written as the format names"
        ));
    }
    let (comma, dot) = (shown.rfind(','), shown.rfind('.'));
    let example = match (comma, dot) {
        (Some(c), Some(d)) if c > d => "1.234,56",
        (Some(_), None) => "1234,5",
        _ if shown.trim().contains(is_space) => "1 234",
        _ => "1.234,56",
    };
    jaq_core::Error::str(format_args!(
        "{helper}: cannot read {shown:?} as a number written 1,234.5; if that is its format, \
         name it: {helper}(\"{example}\")"
    ))
}

/// `Ok(read)`, or for a text the helper could not read: `null` without digits, else the error.
fn read_or_refuse(
    helper: &str,
    s: &str,
    format: Option<NumberFormat>,
    read: Option<Val>,
) -> jaq_core::ValR<Val> {
    match read {
        Some(v) => Ok(v),
        None if !has_digit(s) => Ok(Val::Null),
        None => Err(refused(helper, s, format, false)),
    }
}

/// A whole quantity's reading, refused when it [`looks_like_a_thousands_group`].
pub(super) fn integer_read(
    helper: &str,
    s: &str,
    format: Option<NumberFormat>,
    read: Option<Val>,
) -> jaq_core::ValR<Val> {
    let decimal = format.map_or(Some('.'), |f| f.decimal);
    if read.is_some() && decimal.is_some_and(|d| looks_like_a_thousands_group(s, d)) {
        return Err(refused(helper, s, format, true));
    }
    read_or_refuse(helper, s, format, read)
}

/// `plain_integer` of `s`, where `format` reads plain digits (and `,` groups) the same way.
#[inline]
fn plain_in(s: &[u8], format: Option<NumberFormat>) -> Option<i64> {
    match format {
        None => plain_integer(s),
        Some(f) if f.thousands == Some(',') || !s.contains(&b',') => plain_integer(s),
        Some(_) => None,
    }
}

/// A whole float rounded by `round`, else the text's reading by `text`; other values `null`.
fn numeric(
    v: &Val,
    round: fn(f64) -> f64,
    text: impl FnOnce(&str) -> jaq_core::ValR<Val>,
) -> jaq_core::ValR<Val> {
    Ok(match v {
        Val::Num(_) if v.is_int() => v.clone(),
        Val::Num(_) => v
            .as_f64()
            .map_or_else(|| Val::Null, |f| float_to_int(f, round)),
        _ => return as_str(v).map_or(Ok(Val::Null), text),
    })
}

/// `dollars` and `dollars($format)`.
pub(super) fn dollars(v: &Val, format: Option<&Val>) -> jaq_core::ValR<Val> {
    let format = text_format("dollars", format)?;
    numeric(v, f64::round, |s| parse_dollars(s, format))
}

/// `dollars` of a string.
pub(super) fn parse_dollars(s: &str, format: Option<NumberFormat>) -> jaq_core::ValR<Val> {
    if let Some(n) = plain_in(s.strip_prefix('$').unwrap_or(s).as_bytes(), format) {
        return Ok(int_val(n));
    }
    integer_read("dollars", s, format, parse_dollars_in_full(s, format))
}

/// [`parse_dollars`] of any text; `None`: not an amount written that way.
pub(super) fn parse_dollars_in_full(s: &str, format: Option<NumberFormat>) -> Option<Val> {
    let mut s = trim_str(s);
    s = trim_str(strip_prefix_ci(s, "USD").unwrap_or(s));
    s = trim_str(strip_suffix_ci(s, "USD").unwrap_or(s));
    let negative = match s.strip_prefix('-') {
        Some(rest) => {
            s = rest.trim_start();
            true
        }
        None => false,
    };
    s = s.strip_prefix('$').unwrap_or(s);
    with_decimal(s, format, |amount| {
        if negative && amount.negative {
            return None;
        }
        let amount = Decimal {
            negative: negative || amount.negative,
            ..amount
        };
        Some(amount.rounded())
    })
    .flatten()
}

/// `miles` and `miles($format)`.
pub(super) fn miles(v: &Val, format: Option<&Val>) -> jaq_core::ValR<Val> {
    let format = text_format("miles", format)?;
    Ok(not_negative(numeric(v, f64::round, |s| {
        miles_str(s, format)
    })?))
}

/// `miles` of a string.
pub(super) fn miles_str(s: &str, format: Option<NumberFormat>) -> jaq_core::ValR<Val> {
    if let Some(n) = plain_in(s.as_bytes(), format) {
        return Ok(int_val(n));
    }
    integer_read("miles", s, format, miles_str_in_full(s, format))
}

/// [`miles_str`] of any text; `None`: not a mileage written that way.
pub(super) fn miles_str_in_full(s: &str, format: Option<NumberFormat>) -> Option<Val> {
    let s = trim_str(s);
    let s = ["miles", "mile", "mi.", "mi"]
        .iter()
        .find_map(|unit| strip_suffix_ci(s, unit))
        .unwrap_or(s);
    with_decimal(s, format, |d| not_negative(d.rounded()))
}

fn not_negative(value: Val) -> Val {
    match value.as_f64() {
        Some(m) if m >= 0.0 => value,
        _ => Val::Null,
    }
}

/// `int` and `int($format)`.
pub(super) fn int(v: &Val, format: Option<&Val>) -> jaq_core::ValR<Val> {
    let format = text_format("int", format)?;
    numeric(v, f64::trunc, |s| int_str(s, format))
}

/// `int` of a string.
pub(super) fn int_str(s: &str, format: Option<NumberFormat>) -> jaq_core::ValR<Val> {
    if let Some(n) = plain_in(s.as_bytes(), format) {
        return Ok(int_val(n));
    }
    integer_read("int", s, format, int_str_in_full(s, format))
}

/// [`int_str`] of any text; `None`: not a number written that way.
pub(super) fn int_str_in_full(s: &str, format: Option<NumberFormat>) -> Option<Val> {
    with_decimal(s, format, |d| d.truncated())
}

/// `num` and `num($format)`.
pub(super) fn num(v: &Val, format: Option<&Val>) -> jaq_core::ValR<Val> {
    let format = text_format("num", format)?;
    match v {
        Val::Num(_) => Ok(v.clone()),
        _ => as_str(v).map_or(Ok(Val::Null), |s| num_str(s, format)),
    }
}

/// `num` of a string: a decimal quantity, so `"12.345"` is read the US way without a format.
pub(super) fn num_str(s: &str, format: Option<NumberFormat>) -> jaq_core::ValR<Val> {
    read_or_refuse("num", s, format, with_decimal(s, format, |d| d.number()))
}

/// jq's `trim`: `White_Space` removed at both ends; bytes that are not UTF-8 stop it.
pub(super) fn trim_white_space(bytes: &[u8]) -> &[u8] {
    if ends_need_no_trim(bytes) {
        return bytes;
    }
    let mut start = 0;
    for chunk in bytes.utf8_chunks() {
        let rest = chunk.valid().trim_start();
        start += chunk.valid().len() - rest.len();
        if !rest.is_empty() || !chunk.invalid().is_empty() {
            break;
        }
    }
    let bytes = bytes.get(start..).unwrap_or_default();
    let end = match bytes.utf8_chunks().last() {
        Some(last) if last.invalid().is_empty() => {
            bytes.len() - (last.valid().len() - last.valid().trim_end().len())
        }
        _ => bytes.len(),
    };
    bytes.get(..end).unwrap_or_default()
}

/// jq's `trim` of a string, as `jaq_std` does it (a byte string is an error).
pub(super) fn trim(v: &Val) -> jaq_core::ValR<Val> {
    Ok(v.as_sub_str(trim_white_space(v.try_as_utf8_bytes()?)))
}

/// `if isstring then trim | if . == "" then null end else . end`.
pub(super) fn nonempty(v: Val) -> jaq_core::ValR<Val> {
    if !matches!(v, Val::TStr(_) | Val::BStr(_)) {
        return Ok(v);
    }
    let trimmed = trim(&v)?;
    Ok(if is_blank(&trimmed) {
        Val::Null
    } else {
        trimmed
    })
}

/// jq's `type`.
pub(super) fn type_name(v: &Val) -> &'static str {
    match v {
        Val::Null => "null",
        Val::Bool(_) => "boolean",
        Val::Num(_) => "number",
        Val::TStr(_) | Val::BStr(_) => "string",
        Val::Arr(_) => "array",
        Val::Obj(_) => "object",
    }
}

/// `if $table | isobject | not then error(…) elif . == null then null
/// else $table[if isstring then trim else tostring end] end`.
pub(super) fn lookup(v: Val, table: Val) -> jaq_core::ValR<Val> {
    if !matches!(table, Val::Obj(_)) {
        return Err(jaq_core::Error::str(format_args!(
            "lookup: the table is {}, not an object (is its name right?)",
            type_name(&table)
        )));
    }
    let key = match v {
        Val::Null => return Ok(Val::Null),
        Val::TStr(_) | Val::BStr(_) => trim(&v)?,
        // `tostring`
        other => other.into_string(),
    };
    jaq_core::ValT::index(table, &key)
}

/// `lookup` of a string (`table` checked as `lookup` does): the entry the trimmed text finds in
/// the table (`None`: `null`), borrowed; a small table is searched in place, without making the
/// text a key value.
pub(super) fn lookup_str<'t>(
    s: &str,
    table: &'t Val,
) -> Result<Option<&'t Val>, jaq_core::Error<Val>> {
    let Val::Obj(entries) = table else {
        return lookup(Val::Null, table.clone()).map(|_| None); // its error
    };
    let key = trim_str(s);
    if entries.len() > 16 {
        return Ok(entries.get(&Val::from(key.to_owned())));
    }
    let found = entries.iter().find(|&(k, _)| match k {
        Val::TStr(text) => **text == key.as_bytes(),
        other => *other == Val::from(key.to_owned()),
    });
    Ok(found.map(|(_, v)| v))
}

/// `null`, `""` and `[]`: what `compact` drops.
pub(super) fn is_blank(v: &Val) -> bool {
    match v {
        Val::Null => true,
        Val::TStr(b) | Val::BStr(b) => b.is_empty(),
        Val::Arr(a) => a.is_empty(),
        _ => false,
    }
}

/// In place when nothing else holds the object or array (as for an object literal just built);
/// otherwise on a copy, as jaq values are immutable.
pub(super) fn compact(v: Val) -> Val {
    match v {
        Val::Obj(mut o) => {
            Rc::make_mut(&mut o).retain(|_, v| {
                *v = compact(std::mem::take(v));
                !is_blank(v)
            });
            Val::Obj(o)
        }
        Val::Arr(mut a) => {
            for v in Rc::make_mut(&mut a) {
                *v = compact(std::mem::take(v));
            }
            Val::Arr(a)
        }
        other => other,
    }
}

pub(super) fn split_list(v: Val, sep: Val) -> jaq_core::ValR<Val> {
    let items: Vec<Val> = match &v {
        Val::Null => Vec::new(),
        Val::Arr(a) => a.iter().cloned().collect(),
        Val::TStr(_) | Val::BStr(_) => {
            let sep = as_str(&sep).filter(|s| !s.is_empty()).ok_or_else(|| {
                jaq_core::Error::str(format_args!(
                    "split_list: the separator must be a non-empty string, not {sep}"
                ))
            })?;
            let (Val::TStr(text) | Val::BStr(text)) = &v else {
                unreachable!("matched a string")
            };
            // The pieces are slices of the string.
            let mut items = Vec::new();
            if let Ok(s) = std::str::from_utf8(text) {
                split_pieces(s, sep, |p| {
                    items.push(Val::utf8_str(text.slice_ref(p.as_bytes())));
                });
            }
            items
        }
        _ => vec![v.clone()],
    };
    let clean = |item: Val| match &item {
        Val::TStr(b) | Val::BStr(b) => match std::str::from_utf8(b) {
            Ok(s) if s.trim().is_empty() => None,
            Ok(s) if s.trim().len() < s.len() => {
                Some(Val::utf8_str(b.slice_ref(s.trim().as_bytes())))
            }
            _ => Some(item),
        },
        _ => (!matches!(item, Val::Null)).then_some(item),
    };
    Ok(items.into_iter().filter_map(clean).collect())
}

/// `split_list`'s pieces of a string, in order: cut at each `sep` (a one-character one, nearly
/// always), trimmed, blank ones dropped. The value version and the
/// plans' text version both cut here.
pub(super) fn split_pieces<'s>(s: &'s str, sep: &str, mut piece: impl FnMut(&'s str)) {
    let mut keep = |p: &'s str| {
        let p = trim_str(p);
        if !p.is_empty() {
            piece(p);
        }
    };
    match sep.as_bytes() {
        // An ASCII separator is cut at as a byte (UTF-8 never holds one inside a character):
        // `split(char)` sets up a search per piece that costs more than the piece.
        &[b] if b.is_ascii() => {
            let mut rest = s;
            while let Some(at) = rest.bytes().position(|c| c == b) {
                keep(&rest[..at]);
                rest = &rest[at + 1..];
            }
            keep(rest);
        }
        _ => s.split(sep).for_each(keep),
    }
}

pub(super) fn map_str(v: Val, f: impl FnOnce(&str) -> String) -> Val {
    match as_str(&v) {
        Some(s) => Val::from(f(s)),
        None => v,
    }
}

pub(super) fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().any(|c| c.is_ascii_digit()) {
            out.push_str(word);
        } else {
            let mut start = true;
            for c in word.chars() {
                if start {
                    out.extend(c.to_uppercase());
                } else {
                    out.extend(c.to_lowercase());
                }
                start = matches!(c, '-' | '/');
            }
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

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
