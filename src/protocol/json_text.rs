//! JSON text written straight into a reply's buffer: the same bytes `serde_json` writes (compact,
//! its escapes), for the values a reply is made of.
//!
//! Why: a search reply is ~9 KB of strings, nearly none of which needs an escape. `serde_json`
//! looks each byte up in its escape table; here a whole string is checked at once (a loop the
//! compiler turns into vector compares) and copied, and only a string with something to escape
//! goes through `serde_json`.

use serde::Serialize;

/// Appends `s` as a JSON string.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        write_value(out, s);
    }
}

/// Appends `s`, which holds nothing JSON escapes, as a JSON string: no check, one copy.
///
/// For a span of an upstream's JSON reply as read: the reader decodes a string with an escape
/// into a text of its own, and refuses a control character, so what is left in the reply's
/// strings is written back as it stands.
pub fn write_plain(out: &mut Vec<u8>, s: &str) {
    debug_assert!(needs_no_escape(s.as_bytes()), "{s:?} needs an escape");
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Appends a number as `serde_json` writes it; integers (nearly all of a reply's: prices,
/// mileages, years) without a serializer around them.
pub fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) {
    let mut digits = itoa::Buffer::new();
    if let Some(u) = n.as_u64() {
        out.extend_from_slice(digits.format(u).as_bytes());
    } else if let Some(i) = n.as_i64() {
        out.extend_from_slice(digits.format(i).as_bytes());
    } else {
        write_value(out, n);
    }
}

/// Appends any serializable value as `serde_json` writes it.
pub fn write_value<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing to a `Vec` cannot fail, and the values written here (JSON values, strings,
    // numbers) have no serializer of their own that could.
    let _ = serde_json::to_writer(out, value);
}

/// Whether `bytes` holds nothing JSON escapes: no `"`, no `\`, no control character below
/// U+0020 (`serde_json` escapes exactly these).
pub(crate) fn needs_no_escape(bytes: &[u8]) -> bool {
    // No early exit: without one the loop is vectorised, and a string is short.
    !bytes.iter().fold(false, |seen, &b| {
        seen | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).expect("UTF-8")
    }

    /// Every character below 128 alone, inside text and at either end, and some beyond, is
    /// written as `serde_json` writes it.
    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        let numbers: Vec<serde_json::Number> = [
            serde_json::json!(0),
            serde_json::json!(24_990),
            serde_json::json!(-7),
            serde_json::json!(u64::MAX),
            serde_json::json!(i64::MIN),
            serde_json::json!(2.5),
            serde_json::json!(-0.0),
            serde_json::json!(1e300),
        ]
        .into_iter()
        .map(|v| v.as_number().cloned().expect("a number"))
        .collect();
        for n in &numbers {
            let mut out = Vec::new();
            write_number(&mut out, n);
            assert_eq!(out, serde_json::to_vec(n).unwrap(), "{n}");
        }
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut cases: Vec<String> = (0u8..128)
            .flat_map(|b| {
                let c = char::from(b);
                [
                    c.to_string(),
                    format!("Pre-Owned {c} Civic"),
                    format!("{c}x"),
                    format!("x{c}"),
                ]
            })
            .collect();
        cases.extend(
            [
                "",
                "Ünïcödé ✓ 🚗",
                "\u{7f}\u{80}\u{2028}\u{2029}",
                "https://img.example/inv/1/1.jpg",
                "a \"long\" string with a \\ backslash and a tab\tat the end of many plain words",
            ]
            .map(str::to_owned),
        );
        for s in &cases {
            assert_eq!(written(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }
}
