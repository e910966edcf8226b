//! Upstream JSON straight into jaq's [`Val`], sharing the reply's buffer.
//!
//! Why: jaq's own `Deserialize` copies every string (key or value) into a fresh `String` and
//! then boxes it; a 20-record DMS page is ~800 strings, and each later clone of one of them (a
//! field read by a mapping) promotes the copy to a shared buffer with yet another allocation.
//! Here a string without escapes becomes a slice of the body the upstream client already holds
//! (`Bytes::slice_ref`: a reference count, no copy); only strings with escapes are copied.
//!
//! The value built is the one jaq's `Deserialize` builds for the same text: same numbers
//! (`i64`/`u64` as integers, the rest as floats), same objects (a repeated key keeps its first
//! position and its last value), same errors from `serde_json` (including its nesting limit).

use std::cell::Cell;
use std::fmt;

use bytes::Bytes;
use jaq_json::{Map, Num, Rc, Val};
use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};

/// Parses `body` (a whole JSON text) into a [`Val`] whose strings share `body`.
pub(super) fn parse(body: &Bytes) -> Result<Val, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let sizes = Default::default();
    let val = BodySeed {
        body,
        sizes: &sizes,
        depth: 0,
    }
    .deserialize(&mut de)?;
    de.end()?; // trailing characters are an error, as in `serde_json::from_slice`
    Ok(val)
}

/// Objects nested deeper than this share the last size hint.
const SIZED_DEPTHS: usize = 8;

/// A seed that builds values whose unescaped strings are slices of the body.
#[derive(Clone, Copy)]
struct BodySeed<'b> {
    body: &'b Bytes,
    /// The size of the last object seen at each depth: the records of a list are alike, so
    /// the next one's map is allocated once at its size instead of growing four times.
    sizes: &'b [Cell<usize>; SIZED_DEPTHS],
    depth: usize,
}

impl BodySeed<'_> {
    fn nested(self) -> Self {
        BodySeed {
            depth: self.depth + 1,
            ..self
        }
    }

    /// A slice of the body when `s` lies in it (always, for `visit_borrowed_str`), else a copy.
    fn string(self, s: &str) -> Val {
        let body = self.body.as_ref().as_ptr_range();
        let range = s.as_bytes().as_ptr_range();
        if body.start <= range.start && range.end <= body.end {
            Val::utf8_str(self.body.slice_ref(s.as_bytes()))
        } else {
            Val::utf8_str(Bytes::copy_from_slice(s.as_bytes()))
        }
    }
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = Val;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Val, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = Val;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Val, E> {
        Ok(Val::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Val, E> {
        Ok(Val::Num(Num::from_integral(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Val, E> {
        Ok(Val::Num(Num::from_integral(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Val, E> {
        Ok(Val::Num(Num::Float(v)))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Val, E> {
        Ok(self.string(v))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Val, E> {
        Ok(self.string(v))
    }

    fn visit_string<E>(self, v: String) -> Result<Val, E> {
        Ok(Val::utf8_str(v.into_bytes()))
    }

    fn visit_unit<E>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }

    fn visit_none<E>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        let inner = self.nested();
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Val::Arr(Rc::new(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Val, A::Error> {
        let size = &self.sizes[self.depth.min(SIZED_DEPTHS - 1)];
        let mut map = Map::with_capacity_and_hasher(size.get(), Default::default());
        let inner = self.nested();
        while let Some(key) = entries.next_key_seed(inner)? {
            let value = entries.next_value_seed(inner)?;
            map.insert(key, value); // a repeated key: first position, last value
        }
        size.set(map.len());
        Ok(Val::obj(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What jaq's own `Deserialize` gives for the same text: the reference.
    fn jaq(text: &str) -> Result<Val, serde_json::Error> {
        serde_json::from_str(text)
    }

    fn shared(text: &str) -> Result<Val, serde_json::Error> {
        parse(&Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn values_are_those_jaq_builds_for_the_same_text() {
        for text in [
            r#"{"Items":[{"VIN":"1HGCM82633A004352","Price":"$24,990","Miles":12345,"Sold":false}],"TotalCount":137}"#,
            r#"{"a":1,"b":-2,"c":1.5,"d":18446744073709551615,"e":-9223372036854775808,"f":2.5e-3,"g":null}"#,
            r#"{"esc":"line\nbreak \"quoted\" \u00e9 \ud83d\ude97","plain":"Café ünïcödé","":""}"#,
            r#"{"k":1,"j":2,"k":3}"#,
            r#"[[],{},[[{"x":[1,"2",null,true]}]],"",0.0,-0.0]"#,
            r#"  "just a string"  "#,
        ] {
            let (want, got) = (
                jaq(text).expect("jaq parses"),
                shared(text).expect("parses"),
            );
            // `Val`'s equality ignores key order: compare the texts jaq prints too.
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), want.to_string(), "{text}");
        }
    }

    #[test]
    fn bad_text_is_refused_as_serde_json_refuses_it() {
        for text in [
            "",
            "{",
            r#"{"a": }"#,
            "[1] x",
            "[1,]",
            "1e400",
            &"[".repeat(200),
        ] {
            let want = jaq(text).expect_err("jaq refuses").to_string();
            let got = shared(text).expect_err("refused").to_string();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn unescaped_strings_share_the_body_and_escaped_ones_are_copied() {
        let body = Bytes::from_static(br#"{"plain":"abc","escaped":"a\tb"}"#);
        let Val::Obj(map) = parse(&body).expect("parses") else {
            panic!("an object");
        };
        let inside = |v: &Val| match v {
            Val::TStr(b) => body.as_ptr_range().contains(&b.as_ptr()),
            _ => panic!("a string"),
        };
        let (plain, escaped) = (
            map.get_index(0).expect("one"),
            map.get_index(1).expect("two"),
        );
        assert!(
            inside(plain.0) && inside(plain.1),
            "key and value are slices of the body"
        );
        assert!(inside(escaped.0), "the key has no escape");
        assert!(
            !inside(escaped.1),
            "an escaped value is decoded into its own buffer"
        );
        assert_eq!(escaped.1, &Val::from("a\tb".to_owned()));
    }
}
