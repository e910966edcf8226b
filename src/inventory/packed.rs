//! A JSON value packed into one shared byte buffer: how feed snapshots keep their vehicles.
//!
//! A mapped vehicle as a `serde_json::Value` costs several kilobytes (an index map, a heap
//! string per key and per value); a feed of 50,000 vehicles then holds hundreds of megabytes.
//! Packed, the same vehicle is one allocation about the size of its JSON text, and turning it
//! back into a `Value` (for the page that shows it) gives exactly the value that was packed:
//! keys in order, numbers of the same kind (unsigned, negative or float, bit for bit).
//!
//! Encoding, one tag byte per value: `0` null, `1` false, `2` true, `3` unsigned integer
//! (LEB128), `4` negative integer (LEB128 of its two's complement bits), `5` float (8 bytes,
//! little endian), `6` string, `7` array, `8` object; strings are a LEB128 length and UTF-8
//! bytes; arrays a count and the items; objects a count and, per entry, the key as a string
//! then the value.

use std::sync::Arc;

use serde_json::{Map, Number, Value};

/// One packed value. Cheap to clone (shared).
#[derive(Clone, PartialEq, Eq)]
pub struct Packed(Arc<[u8]>);

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({} bytes)", self.0.len())
    }
}

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const UNSIGNED: u8 = 3;
const NEGATIVE: u8 = 4;
const FLOAT: u8 = 5;
const STRING: u8 = 6;
const ARRAY: u8 = 7;
const OBJECT: u8 = 8;

/// Deepest nesting [`Packed::unpack`] follows: a packed value comes from a `Value`, which the
/// JSON parser already bounds far below this.
const MAX_DEPTH: usize = 256;

impl Packed {
    /// Packs `value`.
    pub fn pack(value: &Value) -> Packed {
        Packed::from_packed_bytes(&Packed::encode(value))
    }

    /// The encoding of `value`, not yet shared (to compare with a packed value before making
    /// one).
    pub fn encode(value: &Value) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        Packed::pack_into(value, &mut out);
        out
    }

    /// Appends the encoding of `value` to `out` (a buffer reused across values; see
    /// [`Packed::from_packed_bytes`]).
    pub fn pack_into(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Null => out.push(NULL),
            Value::Bool(false) => out.push(FALSE),
            Value::Bool(true) => out.push(TRUE),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    out.push(UNSIGNED);
                    leb128(u, out);
                } else if let Some(i) = n.as_i64() {
                    out.push(NEGATIVE);
                    leb128(i as u64, out);
                } else {
                    out.push(FLOAT);
                    out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
                }
            }
            Value::String(s) => {
                out.push(STRING);
                string(s, out);
            }
            Value::Array(items) => {
                out.push(ARRAY);
                leb128(items.len() as u64, out);
                for item in items {
                    Packed::pack_into(item, out);
                }
            }
            Value::Object(entries) => {
                out.push(OBJECT);
                leb128(entries.len() as u64, out);
                for (key, value) in entries {
                    string(key, out);
                    Packed::pack_into(value, out);
                }
            }
        }
    }

    /// A packed value from bytes [`Packed::pack_into`] wrote.
    pub fn from_packed_bytes(bytes: &[u8]) -> Packed {
        Packed(Arc::from(bytes))
    }

    /// The encoded bytes (to compare two packed values).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Size of the encoding.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: even `null` takes one byte.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value that was packed. A buffer that is not an encoding (impossible through this
    /// type's constructors) unpacks as `null` rather than failing.
    pub fn unpack(&self) -> Value {
        let mut reader = Reader { rest: &self.0 };
        reader.value(0).unwrap_or(Value::Null)
    }
}

fn leb128(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    leb128(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first)
    }

    fn leb128(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.rest.len() {
            return None;
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(taken)
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.leb128()?).ok()?;
        std::str::from_utf8(self.take(len)?).ok().map(str::to_owned)
    }

    /// A count of items still to read: each takes at least one byte, so a count beyond the
    /// rest of the buffer is no encoding (and must not size an allocation).
    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.leb128()?)
            .ok()
            .filter(|&n| n <= self.rest.len())
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match self.byte()? {
            NULL => Value::Null,
            FALSE => Value::Bool(false),
            TRUE => Value::Bool(true),
            UNSIGNED => Value::Number(self.leb128()?.into()),
            NEGATIVE => Value::Number((self.leb128()? as i64).into()),
            FLOAT => {
                let bytes: [u8; 8] = self.take(8)?.try_into().ok()?;
                Value::Number(Number::from_f64(f64::from_le_bytes(bytes))?)
            }
            STRING => Value::String(self.string()?),
            ARRAY => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            OBJECT => {
                let n = self.count()?;
                let mut entries = Map::with_capacity(n);
                for _ in 0..n {
                    let key = self.string()?;
                    let value = self.value(depth + 1)?;
                    entries.insert(key, value);
                }
                Value::Object(entries)
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_packed_value_unpacks_to_the_same_value_with_keys_in_order() {
        let values = [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(24990),
            json!(u64::MAX),
            json!(-1),
            json!(i64::MIN),
            json!(12.5),
            json!(-0.0),
            json!(1e300),
            json!(0.1 + 0.2),
            json!(""),
            json!("Crystal Black Pearl – “quoted” ✓"),
            json!([]),
            json!({}),
            json!({ "z": 1, "a": [1, "two", { "b": null }], "m": { "y": 2.5, "x": -3 } }),
        ];
        for value in values {
            let packed = Packed::pack(&value);
            let back = packed.unpack();
            assert_eq!(back, value);
            // The same JSON text too: number kinds and key order survive.
            assert_eq!(back.to_string(), value.to_string());
        }
    }

    #[test]
    fn number_kinds_are_kept() {
        let back = Packed::pack(&json!([1, -1, 1.0])).unpack();
        let kinds: Vec<(bool, bool, bool)> = back
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| (n.is_u64(), n.is_i64(), n.is_f64()))
            .collect();
        assert_eq!(
            kinds,
            [
                (true, true, false),
                (false, true, false),
                (false, false, true)
            ]
        );
    }

    #[test]
    fn bytes_that_are_no_encoding_unpack_as_null() {
        for bytes in [
            &b""[..],
            b"\x09",
            b"\x06\x05ab",
            b"\x07\xff\xff\xff\xff\x0f",
            b"\x03\xff",
        ] {
            assert_eq!(Packed::from_packed_bytes(bytes).unpack(), Value::Null);
        }
    }
}
