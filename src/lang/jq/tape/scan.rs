//! The quick way onto a tape: one loop over the bytes of a reply that is UTF-8, for the JSON
//! that legacy systems send (objects, arrays, strings, plain integers).
//!
//! Why: under `serde_json`'s visitor each string, key and value goes through the deserializer's
//! generic machinery (`deserialize_any`, `MapAccess`, a seed per value) and the tape's builder
//! asks where each borrowed string lies in the body; that was a third of a 20-vehicle page's
//! extraction. Here a string is a span found eight bytes at a time and a plain integer is read where it
//! stands.
//!
//! It gives up (`None`) on anything it does not read itself, and the reply is then read by the
//! `serde_json` reader as before, which gives the tape or the error: every text either reads to
//! the tape that reader builds, or is left to it. What it leaves: every error, numbers other
//! than non-negative integers of up to 19 digits (read by `serde_json`'s own number parser, so
//! floats round as before), deep nesting. Strings with escapes are decoded by `serde_json`.

use super::{Build, Node, Text, key_hash};

/// Deeper than this is left to `serde_json` (whose own limit is 128).
const MAX_DEPTH: u32 = 100;

/// Reads `text` (the body `build` holds, checked to be UTF-8) onto `build`'s tape; `None` when
/// it leaves the text to `serde_json` (see the module's comment). A `None` may leave nodes
/// behind: the caller starts again from an empty tape.
pub(super) fn read(build: &mut Build<'_>, text: &str) -> Option<()> {
    let mut scan = Scan {
        s: text.as_bytes(),
        i: 0,
        build,
    };
    scan.value(0)?;
    scan.skip_space();
    (scan.i == scan.s.len()).then_some(())
}

/// Where in `s` the first `"`, `\\` or control character is, and which it is: eight bytes at a
/// time, as `serde_json` looks for the end of a string (most strings of a reply are a few
/// words: a `memchr` call costs more than it saves).
#[inline]
fn stop(s: &[u8]) -> Option<(usize, u8)> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let (words, rest) = s.as_chunks::<8>();
    for (n, word) in words.iter().enumerate() {
        let w = u64::from_le_bytes(*word);
        // The high bit of each byte that is zero in `x`; exact for the lowest such byte,
        // which is the one wanted.
        let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
        let found = zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
        if found != 0 {
            let byte = found.trailing_zeros() / 8;
            return Some((n * 8 + byte as usize, (w >> (byte * 8)) as u8));
        }
    }
    let at = rest
        .iter()
        .position(|b| matches!(b, b'"' | b'\\' | ..0x20))?;
    Some((words.len() * 8 + at, rest[at]))
}

struct Scan<'s, 'a, 'b> {
    s: &'s [u8],
    i: usize,
    build: &'a mut Build<'b>,
}

impl Scan<'_, '_, '_> {
    /// JSON's whitespace (as `serde_json` reads it).
    #[inline]
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.s.get(self.i).copied()
    }

    fn value(&mut self, depth: u32) -> Option<()> {
        let node = match self.peek()? {
            b'"' => match self.string()? {
                Text::Span { at, len } => Node::Str { at, len },
                Text::Owned(k) => Node::Owned(k),
            },
            b'{' => return self.object(depth + 1),
            b'[' => return self.array(depth + 1),
            b't' => self.word(b"true", Node::Bool(true))?,
            b'f' => self.word(b"false", Node::Bool(false))?,
            b'n' => self.word(b"null", Node::Null)?,
            b'0'..=b'9' | b'-' => self.number()?,
            _ => return None,
        };
        self.build.push(node);
        Some(())
    }

    fn word(&mut self, word: &[u8], node: Node) -> Option<Node> {
        let rest = self.s.get(self.i..)?;
        rest.starts_with(word).then(|| {
            self.i += word.len();
            node
        })
    }

    /// A non-negative integer of up to 19 digits (always a `u64`) where it stands; any other
    /// number by `serde_json`'s number parser, which gives the same `u64`, `i64` or `f64` its
    /// deserializer gives (`-0` is a float, an integer past `u64` too).
    fn number(&mut self) -> Option<Node> {
        let start = self.i;
        let digits = self.s[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = start + digits;
        let plain = (1..=19).contains(&digits)
            && !(digits > 1 && self.s[start] == b'0')
            && !matches!(self.s.get(end), Some(b'.' | b'e' | b'E' | b'0'..=b'9'));
        if plain {
            self.i = end;
            let n = self.s[start..end]
                .iter()
                .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            return Some(Node::UInt(n));
        }
        // The number's extent by JSON's grammar, loosely: anything wrong in it is found by the
        // parser, which is given exactly these bytes.
        let len = self.s[start..]
            .iter()
            .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .count();
        let number: serde_json::Number =
            serde_json::from_slice(&self.s[start..start + len]).ok()?;
        self.i = start + len;
        Some(if let Some(n) = number.as_u64() {
            Node::UInt(n)
        } else if let Some(n) = number.as_i64() {
            Node::Int(n)
        } else {
            Node::Float(number.as_f64()?)
        })
    }

    /// A string at the cursor (its opening quote): a span of the body when it has no escapes,
    /// else decoded by `serde_json`.
    #[inline]
    fn string(&mut self) -> Option<Text> {
        let start = self.i + 1;
        let (len, byte) = stop(self.s.get(start..)?)?;
        if byte != b'"' {
            return self.unusual_string(start + len, byte);
        }
        self.i = start + len + 1;
        Some(Text::Span {
            at: start as u32,
            len: len as u32,
        })
    }

    /// [`Scan::string`] from its first escape or control character (`byte`, at `end`): kept
    /// out of the common path, whose loop then needs no registers saved.
    #[cold]
    #[inline(never)]
    fn unusual_string(&mut self, mut end: usize, mut byte: u8) -> Option<Text> {
        let open = self.i;
        while byte != b'"' {
            if byte != b'\\' {
                // A control character: `serde_json` refuses it, and gives the error.
                return None;
            }
            // The escaped byte is skipped: `\"` and `\\` do not end the string.
            let next = end + 2;
            let (at, b) = stop(self.s.get(next..)?)?;
            (end, byte) = (next + at, b);
        }
        self.i = end + 1;
        let decoded: String = serde_json::from_slice(self.s.get(open..=end)?).ok()?;
        Some(self.build.owned(decoded.into()))
    }

    fn array(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1; // `[`
        let at = self.build.push(Node::Null);
        let mut len = 0;
        self.items(b']', |scan| {
            len += 1;
            scan.value(depth)
        })?;
        let end = self.build.nodes.len() as u32;
        self.build.nodes[at as usize] = Node::Arr { len, end };
        Some(())
    }

    fn object(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.i += 1; // `{`
        let mut object = self.build.open_object();
        self.items(b'}', |scan| {
            if scan.peek()? != b'"' {
                return None;
            }
            let text = scan.string()?;
            // (`Text::in_`, spelled out: calling it here kept `string` from being inlined into
            // this loop, 676k → 708k instructions a page.)
            let hash = key_hash(match text {
                Text::Span { at, len } => &scan.s[at as usize..(at + len) as usize],
                Text::Owned(k) => scan.build.owned[k as usize].as_bytes(),
            });
            scan.build.push(Node::Key(text));
            scan.build.add_hashed_key(&mut object, hash);
            if scan.peek()? != b':' {
                return None;
            }
            scan.i += 1;
            scan.value(depth)
        })?;
        self.build.close_object(object);
        Some(())
    }

    /// The items of an array or the entries of an object, its opening bracket just read, each
    /// read by `item`, up to `close`: separated by commas, none after the last.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek()? == close {
            self.i += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;
    use serde::de::DeserializeSeed as _;

    use super::super::{Build, Seed};

    /// What a reader made of a text: its nodes and decoded strings (as text), or that it
    /// failed.
    type Made = Option<(String, Vec<String>)>;

    fn made(build: Build<'_>) -> (String, Vec<String>) {
        let owned = build.owned.iter().map(ToString::to_string).collect();
        (format!("{:?} {:?}", build.nodes, build.keys), owned)
    }

    /// The quick reader's tape, or `None` where it leaves the text to `serde_json`.
    fn quick(text: &str) -> Made {
        let body = Bytes::copy_from_slice(text.as_bytes());
        let mut b = Build::new(&body);
        let text = std::str::from_utf8(&body).expect("UTF-8");
        super::read(&mut b, text).map(|()| made(b))
    }

    /// The `serde_json` reader's tape, or `None` for a text it refuses.
    fn by_serde(text: &str) -> Made {
        let body = Bytes::copy_from_slice(text.as_bytes());
        let mut b = Build::new(&body);
        let text = std::str::from_utf8(&body).expect("UTF-8");
        let mut de = serde_json::Deserializer::from_str(text);
        Seed(&mut b).deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(made(b))
    }

    /// The property: the quick reader builds `serde_json`'s tape or leaves the text, and never
    /// reads a text `serde_json` refuses.
    fn agrees(text: &str) -> Result<bool, String> {
        match (quick(text), by_serde(text)) {
            (Some(q), Some(s)) if q == s => Ok(true),
            (Some(q), s) => Err(format!("{text:?}: quick {q:?}, serde_json {s:?}")),
            (None, _) => Ok(false),
        }
    }

    #[test]
    fn what_legacy_systems_send_is_read_quickly_into_the_same_tape() {
        let texts = [
            r#"{"Items":[{"VIN":"1HGCM82633A004352","Price":"$24,990","Miles":12345,"Sold":false}],"TotalCount":137}"#,
            "{\n  \"a\" : [ 1 , 2 ,\t3 ] ,\r\n  \"b\" : { } , \"c\" : [ ] , \"d\" : null , \"e\" : true\n}\n",
            r#"{"url":"https:\/\/img.example\/1.jpg","esc":"line\nbreak \"q\" \u00e9 \ud83d\ude97 \\","k\u0065y":1}"#,
            r#"{"plain":"Café ünïcödé €","":"","k":1,"j":2,"k":3}"#,
            r#"{"k":{"k":1},"kk":[{"k":2},{"k":3,"k":4}],"k":5}"#,
            r#"[0,9,10,1234567890123456789,18446744073709551615,18446744073709551616,-1,-0,-9223372036854775808,-9223372036854775809,0.5,1e3,1E+3,2.5e-3,-0.0]"#,
            "  \"just a string\"  ",
            "17",
        ];
        for text in texts {
            assert_eq!(agrees(text), Ok(true), "{text}");
        }
    }

    #[test]
    fn what_it_does_not_read_is_left_to_serde_json() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let texts = [
            String::new(),
            " ".to_owned(),
            "{".to_owned(),
            r#"{"a": }"#.to_owned(),
            r#"{"a" 1}"#.to_owned(),
            r#"{a: 1}"#.to_owned(),
            "[1] x".to_owned(),
            "[1,]".to_owned(),
            r#"{"a":1,}"#.to_owned(),
            "[01]".to_owned(),
            "[1.]".to_owned(),
            "[-]".to_owned(),
            "[1e400]".to_owned(),
            "[1.5.3]".to_owned(),
            "[tru]".to_owned(),
            "[nul]".to_owned(),
            "[\"tab\tin a string\"]".to_owned(),
            r#"["bad \x escape"]"#.to_owned(),
            r#"["\ud800 lone surrogate"]"#.to_owned(),
            r#"["unterminated \"#.to_owned(),
            "[\"unterminated".to_owned(),
            deep(101),
            deep(200),
        ];
        for text in &texts {
            assert_eq!(quick(text), None, "{text}");
            assert_eq!(agrees(text), Ok(false), "{text}");
        }
        // Nesting under the quick reader's limit is read; the same over it is not.
        assert_eq!(agrees(&deep(100)), Ok(true));
    }

    /// JSON texts as legacy systems write them: awkward whitespace, escapes, numbers of every
    /// form, repeated keys; some with one byte broken.
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            "-?(0|[1-9][0-9]{0,21})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
            "0[0-9]{1,3}",
            "\"([a-zA-Z0-9 $,|/:.é€]|\\\\[nt\"\\\\/bfr]|\\\\u00[0-9a-f]{2}|\\\\ud83d\\\\ude97){0,12}\"",
        ];
        let text = leaf.prop_recursive(4, 40, 6, |inner| {
            let space = prop::sample::select(vec!["", " ", "\n  ", "\t", "\r\n"]);
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..6), space.clone())
                    .prop_map(|(items, s)| format!("[{s}{}{s}]", items.join(&format!("{s},{s}")))),
                (
                    prop::collection::vec(
                        (
                            prop::sample::select(vec!["a", "VIN", "k\\u0065y", "", "a b"]),
                            inner
                        ),
                        0..6
                    ),
                    space
                )
                    .prop_map(|(entries, s)| {
                        let entries: Vec<String> = entries
                            .iter()
                            .map(|(k, v)| format!("\"{k}\"{s}:{s}{v}"))
                            .collect();
                        format!("{{{s}{}{s}}}", entries.join(","))
                    }),
            ]
        });
        let broken = prop::option::weighted(
            0.3,
            (
                any::<prop::sample::Index>(),
                prop::sample::select(vec!["", ",", "]", "}", "\"", "\\", ":", "0", " ", "\u{1}"]),
            ),
        );
        (text, broken).prop_map(|(mut text, broken)| {
            if let Some((at, with)) = broken {
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                if with.is_empty() {
                    if at < text.len() {
                        let len = text[at..].chars().next().map_or(0, char::len_utf8);
                        text.replace_range(at..at + len, "");
                    }
                } else {
                    text.insert_str(at, with);
                }
            }
            text
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn any_text_reads_to_the_serde_readers_tape_or_is_left_to_it(text in json_text()) {
            agrees(&text).map_err(TestCaseError::fail)?;
        }
    }
}
