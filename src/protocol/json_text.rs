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

/// Appends any serializable value as `serde_json` writes it.
pub fn write_value<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing to a `Vec` cannot fail, and the values written here (JSON values, strings,
    // numbers) have no serializer of their own that could.
    let _ = serde_json::to_writer(out, value);
}

/// Whether `bytes` holds nothing JSON escapes: no `"`, no `\`, no control character below
/// U+0020 (`serde_json` escapes exactly these).
fn needs_no_escape(bytes: &[u8]) -> bool {
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
