//! Upstream JSON read into a flat tape, made jq values only where a program reads it.
//!
//! Why: a search reads 15–30 fields of each listing, and the listing has more; decoding the whole
//! reply into jaq's values first ([`super::json`]) builds a hashed map per record, a boxed string
//! per key and value, and drops them all again. Here the reply is one `Vec` of small nodes, each
//! string a span of the body, and a mapping's `item` walks it ([`At::get`]): only the values a
//! program reads become jaq values, and only a program outside the plan's paths needs the whole
//! record as a value ([`At::to_val`]).
//!
//! The tape is built by a quick reader ([`scan`]) for the JSON it reads, and by `serde_json` for
//! everything it leaves (same grammar, numbers, escapes, nesting limit and errors as
//! [`super::json::parse`]); [`At::to_val`] gives exactly the value that function builds: a key
//! read twice keeps its first position and its last value, and a lookup finds the last one.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use bytestring::ByteString;
use jaq_json::{Map, Num, Rc, Val};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

mod scan;

/// A JSON text as a flat sequence of nodes; containers are followed by their contents.
pub(crate) struct Tape {
    /// The body, checked to be UTF-8 once: a string on the tape is a slice of it, not checked
    /// again each time it is read.
    body: ByteString,
    nodes: Vec<Node>,
    /// Strings with escapes, decoded.
    owned: Vec<ByteString>,
}

#[derive(Clone, Copy, Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// A string without escapes: `len` bytes of the body at `at`.
    Str {
        at: u32,
        len: u32,
    },
    /// A string with escapes, decoded into `Tape::owned`.
    Owned(u32),
    /// An object key (a string, as above) and the index of its object.
    Key {
        text: Text,
        object: u32,
    },
    /// `len` items; `end` is the index after the last node inside.
    Arr {
        len: u32,
        end: u32,
    },
    /// `len` entries (each a `Key` and its value); `dup` when some key is given twice.
    Obj {
        len: u32,
        end: u32,
        dup: bool,
    },
}

/// Where a key's text is: a span of the body, or a decoded string.
#[derive(Clone, Copy, Debug)]
enum Text {
    Span { at: u32, len: u32 },
    Owned(u32),
}

impl Text {
    /// The bytes, in a body and its decoded strings (of a tape, or of one being built).
    fn in_<'a>(self, body: &'a [u8], owned: &'a [ByteString]) -> &'a [u8] {
        match self {
            Text::Span { at, len } => &body[at as usize..(at + len) as usize],
            Text::Owned(k) => owned[k as usize].as_bytes(),
        }
    }

    /// The text, in a body and its decoded strings; `None` only off a character boundary,
    /// which a span the reader recorded never is.
    fn str_in<'a>(self, body: &'a str, owned: &'a [ByteString]) -> Option<&'a str> {
        match self {
            Text::Span { at, len } => body.get(at as usize..(at + len) as usize),
            Text::Owned(k) => Some(&owned[k as usize]),
        }
    }
}

impl Tape {
    /// Reads `body` (a whole JSON text), or gives `serde_json`'s error for it.
    pub(crate) fn parse(body: &Bytes) -> Result<Tape, serde_json::Error> {
        if u32::try_from(body.len()).is_err() {
            // Spans are 32-bit; bodies are limited far below this anyway.
            return Err(serde::de::Error::custom("body too large"));
        }
        let mut build = Build {
            body,
            nodes: Vec::with_capacity(body.len() / 8),
            owned: Vec::new(),
            key_of: None,
        };
        // A body that is UTF-8 throughout (nearly every one) is checked once here, so that
        // neither the reader nor the tape's readers check a string again. Any other is read as
        // bytes, which gives `serde_json::from_slice`'s error for it: JSON outside strings is
        // ASCII and the reader checks every string, so such a body never reads.
        let text = match ByteString::try_from(body.clone()) {
            Ok(text) => {
                if scan::read(&mut build, &text).is_none() {
                    // Left to `serde_json`: it gives the same tape, or the error.
                    build.nodes.clear();
                    build.owned.clear();
                    let mut de = serde_json::Deserializer::from_str(&text);
                    Seed(&mut build).deserialize(&mut de)?;
                    de.end()?; // trailing characters are an error, as in `from_slice`
                }
                text
            }
            Err(_) => {
                let mut de = serde_json::Deserializer::from_slice(body);
                Seed(&mut build).deserialize(&mut de)?;
                de.end()?;
                return Err(serde::de::Error::custom("invalid UTF-8"));
            }
        };
        Ok(Tape {
            body: text,
            nodes: build.nodes,
            owned: build.owned,
        })
    }

    /// The root value.
    pub(crate) fn root(&self) -> At<'_> {
        At { tape: self, i: 0 }
    }

    fn text(&self, t: Text) -> &[u8] {
        t.in_(self.body.as_bytes(), &self.owned)
    }

    fn text_val(&self, t: Text) -> Val {
        Val::utf8_str(match t {
            Text::Span { at, len } => self.body.as_bytes().slice(at as usize..(at + len) as usize),
            Text::Owned(k) => self.owned[k as usize].as_bytes().clone(),
        })
    }
}

/// A value on a tape.
#[derive(Clone, Copy)]
pub(crate) struct At<'t> {
    tape: &'t Tape,
    i: u32,
}

impl<'t> At<'t> {
    fn node(self) -> Node {
        self.tape.nodes[self.i as usize]
    }

    /// The index after this value and everything inside it.
    fn next(self) -> u32 {
        match self.node() {
            Node::Arr { end, .. } | Node::Obj { end, .. } => end,
            _ => self.i + 1,
        }
    }

    /// Whether this is an object.
    #[cfg(test)]
    fn is_object(self) -> bool {
        matches!(self.node(), Node::Obj { .. })
    }

    /// The reply's text (strings without escapes are slices of it).
    pub(crate) fn body(self) -> &'t ByteString {
        &self.tape.body
    }

    /// The text of a string; `None` for anything else.
    pub(crate) fn as_str(self) -> Option<&'t str> {
        let text = match self.node() {
            Node::Str { at, len } => Text::Span { at, len },
            Node::Owned(k) => Text::Owned(k),
            _ => return None,
        };
        text.str_in(&self.tape.body, &self.tape.owned)
    }

    /// The items of an array; `None` for anything else.
    pub(crate) fn items(self) -> Option<impl Iterator<Item = At<'t>>> {
        let Node::Arr { len, .. } = self.node() else {
            return None;
        };
        let mut i = self.i + 1;
        Some((0..len).map(move |_| {
            let item = At { tape: self.tape, i };
            i = item.next();
            item
        }))
    }

    /// `.[key]` of an object: the value of the last entry with that key, if any; `None` when
    /// this is not an object. `hint` holds where the key was found in the last object asked (as
    /// an offset from the object): the records of a list are alike, so that is nearly always
    /// where it is now, and the walk through the entries is spared.
    pub(crate) fn get(self, key: &[u8], hint: &AtomicUsize) -> Option<Option<At<'t>>> {
        let Node::Obj { end, dup, .. } = self.node() else {
            return None;
        };
        let nodes = &self.tape.nodes;
        let guess = self.i as usize + hint.load(Ordering::Relaxed);
        if !dup
            && guess < end as usize
            && let Node::Key { text, object } = nodes[guess]
            && object == self.i
            && self.tape.text(text) == key
        {
            return Some(Some(At {
                tape: self.tape,
                i: guess as u32 + 1,
            }));
        }
        let mut found = None;
        let mut i = self.i + 1;
        while i < end {
            let Node::Key { text, .. } = nodes[i as usize] else {
                unreachable!("an object's entries start with a key");
            };
            let value = At {
                tape: self.tape,
                i: i + 1,
            };
            if self.tape.text(text) == key {
                hint.store((i - self.i) as usize, Ordering::Relaxed);
                found = Some(value);
                if !dup {
                    break;
                }
            }
            i = value.next();
        }
        Some(found)
    }

    /// The value, as [`super::json::parse`] builds it.
    pub(crate) fn to_val(self) -> Val {
        let tape = self.tape;
        match self.node() {
            Node::Null => Val::Null,
            Node::Bool(b) => Val::Bool(b),
            Node::Int(n) => Val::Num(Num::from_integral(n)),
            Node::UInt(n) => Val::Num(Num::from_integral(n)),
            Node::Float(f) => Val::Num(Num::Float(f)),
            Node::Str { at, len } => tape.text_val(Text::Span { at, len }),
            Node::Owned(k) => tape.text_val(Text::Owned(k)),
            Node::Key { text, .. } => tape.text_val(text),
            Node::Arr { .. } => {
                let items = self.items().into_iter().flatten().map(At::to_val);
                Val::Arr(Rc::new(items.collect()))
            }
            Node::Obj { len, end, .. } => {
                let mut map = Map::with_capacity_and_hasher(len as usize, Default::default());
                let mut i = self.i + 1;
                while i < end {
                    let key = At { tape, i };
                    let value = At { tape, i: i + 1 };
                    map.insert(key.to_val(), value.to_val()); // first position, last value
                    i = value.next();
                }
                Val::obj(map)
            }
        }
    }
}

struct Build<'b> {
    body: &'b Bytes,
    nodes: Vec<Node>,
    owned: Vec<ByteString>,
    /// Set while the next string read is the key of the object at this index.
    key_of: Option<u32>,
}

impl Build<'_> {
    fn push(&mut self, node: Node) -> u32 {
        let at = self.nodes.len() as u32;
        self.nodes.push(node);
        at
    }

    /// A span of the body when `s` lies in it (always, for a borrowed string), else a copy.
    fn text(&mut self, s: &str) -> Text {
        let body = self.body.as_ptr_range();
        let range = s.as_bytes().as_ptr_range();
        if body.start <= range.start && range.end <= body.end {
            Text::Span {
                at: (range.start as usize - body.start as usize) as u32,
                len: s.len() as u32,
            }
        } else {
            self.owned(ByteString::from(s))
        }
    }

    fn owned(&mut self, b: ByteString) -> Text {
        self.owned.push(b);
        Text::Owned(self.owned.len() as u32 - 1)
    }

    fn string(&mut self, text: Text) {
        let node = match (self.key_of.take(), text) {
            (Some(object), text) => Node::Key { text, object },
            (None, Text::Span { at, len }) => Node::Str { at, len },
            (None, Text::Owned(k)) => Node::Owned(k),
        };
        self.push(node);
    }
}

/// Appends one value to the tape.
struct Seed<'a, 'b>(&'a mut Build<'b>);

impl<'de> DeserializeSeed<'de> for Seed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.0.push(Node::Bool(v));
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.0.push(Node::Int(v));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.0.push(Node::UInt(v));
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.0.push(Node::Float(v));
        Ok(())
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        let text = self.0.text(v);
        self.0.string(text);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        let text = self.0.text(v);
        self.0.string(text);
        Ok(())
    }

    fn visit_string<E>(self, v: String) -> Result<(), E> {
        let text = self.0.owned(ByteString::from(v));
        self.0.string(text);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push(Node::Null);
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.push(Node::Null);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let build = self.0;
        let at = build.push(Node::Null);
        let mut len = 0;
        while seq.next_element_seed(Seed(build))?.is_some() {
            len += 1;
        }
        let end = build.nodes.len() as u32;
        build.nodes[at as usize] = Node::Arr { len, end };
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let build = self.0;
        let at = build.push(Node::Null);
        let mut len = 0u32;
        let mut seen = KeySet::default();
        let mut dup = false;
        loop {
            build.key_of = Some(at);
            let more = entries.next_key_seed(Seed(build))?;
            build.key_of = None;
            if more.is_none() {
                break;
            }
            let key_at = build.nodes.len() as u32 - 1;
            if !dup {
                let Node::Key { text, .. } = build.nodes[key_at as usize] else {
                    unreachable!("a key was just read");
                };
                if seen.insert(build.text_of(text)) {
                    dup = build.repeats_a_key(at, key_at);
                }
            }
            entries.next_value_seed(Seed(build))?;
            len += 1;
        }
        let end = build.nodes.len() as u32;
        build.nodes[at as usize] = Node::Obj { len, end, dup };
        Ok(())
    }
}

impl Build<'_> {
    fn text_of(&self, t: Text) -> &[u8] {
        t.in_(self.body, &self.owned)
    }

    /// Whether the key at `key` (of the object at `object`, still being read) is one of the
    /// object's earlier keys.
    fn repeats_a_key(&self, object: u32, key: u32) -> bool {
        let text = |i: u32| match self.nodes[i as usize] {
            Node::Key { text, .. } => self.text_of(text),
            _ => unreachable!("an object's entries start with a key"),
        };
        let wanted = text(key);
        let mut i = object + 1;
        while i < key {
            if text(i) == wanted {
                return true;
            }
            // The earlier values are complete: their containers know where they end.
            i = match self.nodes[i as usize + 1] {
                Node::Arr { end, .. } | Node::Obj { end, .. } => end,
                _ => i + 2,
            };
        }
        false
    }
}

/// The keys of an object being read, as one bit each of 256 (from a key's length and first and
/// last bytes): a key whose bit is already set may be a repeat and is compared with the earlier
/// keys; any other is not one. The records of a legacy reply have 30–60 keys, which in 64 bits
/// sent every third key to that comparison.
#[derive(Default)]
struct KeySet([u64; 4]);

impl KeySet {
    /// Sets the key's bit; whether it was set already.
    fn insert(&mut self, key: &[u8]) -> bool {
        let (first, last) = (
            key.first().copied().unwrap_or(0),
            key.last().copied().unwrap_or(0),
        );
        let mix = key.len() * 31 + usize::from(first) * 7 + usize::from(last);
        let (word, bit) = ((mix / 64) % 4, 1u64 << (mix % 64));
        let was = self.0[word] & bit != 0;
        self.0[word] |= bit;
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tape(text: &str) -> Tape {
        Tape::parse(&Bytes::copy_from_slice(text.as_bytes())).expect("parses")
    }

    /// The reference: the value `json::parse` builds.
    fn reference(text: &str) -> Result<Val, serde_json::Error> {
        super::super::json::parse(&Bytes::copy_from_slice(text.as_bytes()))
    }

    const TEXTS: &[&str] = &[
        r#"{"Items":[{"VIN":"1HGCM82633A004352","Price":"$24,990","Miles":12345,"Sold":false}],"TotalCount":137}"#,
        r#"{"a":1,"b":-2,"c":1.5,"d":18446744073709551615,"e":-9223372036854775808,"f":2.5e-3,"g":null,"h":-0,"i":-0.0}"#,
        r#"{"esc":"line\nbreak \"quoted\" \u00e9 \ud83d\ude97","plain":"Café ünïcödé","":"","k\u0065y":"escaped key"}"#,
        r#"{"k":1,"j":2,"k":3}"#,
        r#"{"k":{"k":1},"kk":[{"k":2},{"k":3,"k":4}],"k":5}"#,
        r#"[[],{},[[{"x":[1,"2",null,true]}]],"",0.0,-0.0]"#,
        r#"  "just a string"  "#,
        "17",
    ];

    #[test]
    fn values_are_those_the_eager_reader_builds() {
        for text in TEXTS {
            let want = reference(text).expect("reference parses");
            let got = tape(text).root().to_val();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), want.to_string(), "{text}");
        }
    }

    #[test]
    fn bad_text_gets_the_eager_readers_error() {
        let long = [b'['; 200];
        let texts: [&[u8]; 10] = [
            b"",
            b"{",
            br#"{"a": }"#,
            b"[1] x",
            b"[1,]",
            b"1e400",
            &long,
            b"{\"a\": \"caf\xe9\"}", // Latin-1, not UTF-8
            b"[\"\xff\"",
            b"{\"a\": \"tab\tin a string\"}",
        ];
        for text in texts {
            let body = Bytes::copy_from_slice(text);
            let want = super::super::json::parse(&body)
                .expect_err("refused")
                .to_string();
            let got = Tape::parse(&body).err().expect("refused").to_string();
            assert_eq!(got, want, "{}", String::from_utf8_lossy(text));
        }
    }

    /// `.[key]` on every object of `text`, by the tape and by the value, for each key present.
    #[test]
    fn a_lookup_finds_what_indexing_the_value_finds_hinted_or_not() {
        for text in TEXTS {
            let t = tape(text);
            for i in 0..t.nodes.len() {
                let at = At {
                    tape: &t,
                    i: i as u32,
                };
                if !at.is_object() {
                    continue;
                }
                let val = at.to_val();
                let Val::Obj(map) = &val else { unreachable!() };
                // A stale hint (pointing at another key, a nested key, past the end) and a
                // fresh one must give the same answer.
                for stale in [0, 1, 3, 5, 1000] {
                    for (k, v) in map.iter() {
                        let Val::TStr(key) = k else { unreachable!() };
                        let hint = AtomicUsize::new(stale);
                        let got = at.get(key, &hint).expect("an object").map(At::to_val);
                        assert_eq!(got.as_ref(), Some(v), "{text}: .{k} (hint {stale})");
                        let again = at.get(key, &hint).expect("an object").map(At::to_val);
                        assert_eq!(again.as_ref(), Some(v), "{text}: .{k} hinted");
                    }
                    let hint = AtomicUsize::new(stale);
                    assert!(at.get(b"missing", &hint).expect("object").is_none());
                }
            }
        }
    }

    #[test]
    fn only_objects_are_looked_up_and_only_arrays_have_items() {
        let t = tape(r#"[1,{"a":[2,3]},"s"]"#);
        let hint = AtomicUsize::new(0);
        assert!(t.root().get(b"a", &hint).is_none());
        let items: Vec<At<'_>> = t.root().items().expect("an array").collect();
        assert_eq!(items.len(), 3);
        assert!(items[0].items().is_none() && items[2].get(b"a", &hint).is_none());
        let inner = items[1].get(b"a", &hint).expect("object").expect("found");
        let got: Vec<Val> = inner.items().expect("array").map(At::to_val).collect();
        assert_eq!(got, vec![Val::from(2isize), Val::from(3isize)]);
    }

    #[test]
    fn many_keys_with_colliding_bits_are_not_taken_for_repeats() {
        // 200 distinct keys: their bits collide often; none is a repeat.
        let body: Vec<String> = (0..200).map(|n| format!("\"k{n}\":{n}")).collect();
        let text = format!("{{{}}}", body.join(","));
        let t = tape(&text);
        assert!(matches!(t.nodes[0], Node::Obj { dup: false, .. }));
        let t = tape(&format!("{{{},\"k7\":\"again\"}}", body.join(",")));
        assert!(matches!(t.nodes[0], Node::Obj { dup: true, .. }));
        let hint = AtomicUsize::new(0);
        let found = t.root().get(b"k7", &hint).expect("object").expect("found");
        assert_eq!(found.to_val(), Val::from("again".to_owned()));
    }
}
