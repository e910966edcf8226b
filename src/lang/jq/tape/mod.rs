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
    /// Each object's keys (their node indices) side by side, in order (`Node::Obj::keys`).
    keys: Vec<u32>,
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
    /// An object key (a string, as above).
    Key(Text),
    /// `len` items; `end` is the index after the last node inside.
    Arr {
        len: u32,
        end: u32,
    },
    /// `len` entries (each a `Key` and its value); their keys' indices are at `keys` in
    /// `Tape::keys`; `dup` when some key is given twice.
    Obj {
        len: u32,
        end: u32,
        keys: u32,
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
        let mut build = Build::new(body);
        // A body that is UTF-8 throughout (nearly every one) is checked once here, so that
        // neither the reader nor the tape's readers check a string again. Any other is read as
        // bytes, which gives `serde_json::from_slice`'s error for it: JSON outside strings is
        // ASCII and the reader checks every string, so such a body never reads.
        let text = match ByteString::try_from(body.clone()) {
            Ok(text) => {
                if scan::read(&mut build, &text).is_none() {
                    // Left to `serde_json`: it gives the same tape, or the error.
                    build = Build::new(body);
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
            keys: build.keys,
        })
    }

    /// The root value.
    pub(crate) fn root(&self) -> At<'_> {
        At { tape: self, i: 0 }
    }

    /// The text of the key at node `k`.
    fn key_text(&self, k: u32) -> &[u8] {
        key_text(&self.nodes, self.body.as_bytes(), &self.owned, k)
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
    /// this is not an object. `hint` holds which entry (by position) had the key in the last
    /// object asked: the records of a list are alike, so that is nearly always where it is now,
    /// and the search through the keys is spared. (A position among the entries, not among the
    /// nodes: a record's lists of features or photos differ in length, and move the nodes of
    /// every entry after them.)
    pub(crate) fn get(self, key: &[u8], hint: &AtomicUsize) -> Option<Option<At<'t>>> {
        let Node::Obj { len, keys, dup, .. } = self.node() else {
            return None;
        };
        let tape = self.tape;
        let keys = &tape.keys[keys as usize..(keys + len) as usize];
        let found = |k: u32| {
            Some(Some(At {
                tape,
                i: k + 1, // the value follows its key
            }))
        };
        if !dup
            && let Some(&k) = keys.get(hint.load(Ordering::Relaxed))
            && same(tape.key_text(k), key)
        {
            return found(k);
        }
        // From the end: of a key given twice, the last entry counts.
        match keys.iter().rposition(|&k| same(tape.key_text(k), key)) {
            Some(entry) => {
                hint.store(entry, Ordering::Relaxed);
                found(keys[entry])
            }
            None => Some(None),
        }
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
            Node::Key(text) => tape.text_val(text),
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
    keys: Vec<u32>,
    /// The keys of the objects still being read, innermost last (see [`Object`]), each with
    /// its hash ([`key_hash`]).
    open_keys: Vec<(u32, u32)>,
    /// Set while the next string read is a key.
    in_key: bool,
}

/// An object being read: its node, where its keys start in `Build::open_keys`, and which keys
/// it has so far. Its keys move to `Build::keys` when it ends, side by side.
struct Object {
    at: u32,
    open_keys: usize,
    seen: KeySet,
    dup: bool,
    len: u32,
}

impl Build<'_> {
    fn open_object(&mut self) -> Object {
        Object {
            at: self.push(Node::Null),
            open_keys: self.open_keys.len(),
            seen: KeySet::default(),
            dup: false,
            len: 0,
        }
    }

    /// Adds the key just read (the last node) to `object`.
    fn add_key(&mut self, object: &mut Object) {
        let hash = key_hash(self.key_text(self.nodes.len() as u32 - 1));
        self.add_hashed_key(object, hash);
    }

    /// [`Build::add_key`] for a key whose [`key_hash`] the reader has at hand.
    fn add_hashed_key(&mut self, object: &mut Object, hash: u32) {
        let key = self.nodes.len() as u32 - 1;
        if !object.dup && object.seen.insert(hash) {
            // Maybe a repeat: compared with the earlier keys of the same hash.
            let text = self.key_text(key);
            let earlier = &self.open_keys[object.open_keys..];
            object.dup = earlier
                .iter()
                .any(|&(k, h)| h == hash && self.key_text(k) == text);
        }
        self.open_keys.push((key, hash));
        object.len += 1;
    }

    fn close_object(&mut self, object: Object) {
        let keys = self.keys.len() as u32;
        let open = self.open_keys.drain(object.open_keys..);
        self.keys.extend(open.map(|(k, _)| k));
        self.nodes[object.at as usize] = Node::Obj {
            len: object.len,
            end: self.nodes.len() as u32,
            keys,
            dup: object.dup,
        };
    }

    fn key_text(&self, k: u32) -> &[u8] {
        key_text(&self.nodes, self.body, &self.owned, k)
    }
}

/// The text of the key at node `k` (of a tape, or of one being built).
fn key_text<'a>(nodes: &[Node], body: &'a [u8], owned: &'a [ByteString], k: u32) -> &'a [u8] {
    match nodes[k as usize] {
        Node::Key(text) => text.in_(body, owned),
        _ => unreachable!("an object's keys are keys"),
    }
}

impl<'b> Build<'b> {
    /// An empty tape for `body`.
    fn new(body: &'b Bytes) -> Build<'b> {
        Build {
            body,
            nodes: Vec::with_capacity(body.len() / 8),
            owned: Vec::new(),
            keys: Vec::new(),
            open_keys: Vec::new(),
            in_key: false,
        }
    }

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
        let node = match (std::mem::take(&mut self.in_key), text) {
            (true, text) => Node::Key(text),
            (false, Text::Span { at, len }) => Node::Str { at, len },
            (false, Text::Owned(k)) => Node::Owned(k),
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
        let mut object = build.open_object();
        loop {
            build.in_key = true;
            let more = entries.next_key_seed(Seed(build))?;
            build.in_key = false;
            if more.is_none() {
                break;
            }
            build.add_key(&mut object);
            entries.next_value_seed(Seed(build))?;
        }
        build.close_object(object);
        Ok(())
    }
}

/// `a == b` for the short keys of legacy records (most under 16 bytes), in two or four loads of
/// each instead of a call to `memcmp`: a search page compares a key per field it reads.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
        s[at..at + N].try_into().expect("N bytes")
    }
    let len = a.len();
    if len != b.len() {
        return false;
    }
    match len {
        0 => true,
        1..4 => a[0] == b[0] && a[len / 2] == b[len / 2] && a[len - 1] == b[len - 1],
        4..8 => {
            word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, len - 4) == word::<4>(b, len - 4)
        }
        8..=16 => {
            word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, len - 8) == word::<8>(b, len - 8)
        }
        _ => a == b,
    }
}

/// A hash of a key's length and first, second, second-to-last and last bytes.
fn key_hash(key: &[u8]) -> u32 {
    let at = |i: usize| u64::from(key.get(i).copied().unwrap_or(0));
    let len = key.len();
    let mix = len as u64
        ^ (at(0) << 8)
        ^ (at(1) << 16)
        ^ (at(len.wrapping_sub(2)) << 24)
        ^ (at(len.wrapping_sub(1)) << 32);
    (mix.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// The keys of an object being read, as one bit each of 256 (by [`key_hash`]): a key whose bit
/// is already set may be a repeat, and is compared with the earlier keys of the same hash; any
/// other is not one.
#[derive(Default)]
struct KeySet([u64; 4]);

impl KeySet {
    /// Sets the hash's bit; whether it was set already.
    fn insert(&mut self, hash: u32) -> bool {
        let h = (hash >> 24) as usize;
        let (word, bit) = (h / 64, 1u64 << (h % 64));
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
    fn keys_are_the_same_only_when_every_byte_is() {
        for len in 0..40 {
            let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same(&key, &key.clone()), "{len}");
            for at in 0..len {
                let mut other = key.clone();
                other[at] = b'#';
                assert!(!same(&key, &other), "{len} bytes, byte {at} differs");
            }
            assert!(!same(&key, &key[..len.saturating_sub(1)]) || len == 0);
        }
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
