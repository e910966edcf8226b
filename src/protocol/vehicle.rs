//! A search page as the gateway builds it: sent and checked without becoming a JSON tree.
//!
//! Why: a proxied search maps each upstream record to a vehicle of 15–30 fields. As a
//! `serde_json` object, each vehicle copied every key, allocated every string and built a hash
//! index, only to be written out once and dropped. Here a vehicle a mapping's `item` built is
//! its values in key order, the keys shared by every vehicle of that mapping ([`Shape`]), and
//! its unchanged texts are spans of the upstream's reply ([`Text::Span`]). The page
//! serialises straight from that (the same bytes as its JSON value), and `schema` validates it
//! through jsonschema's representation traits. Every other vehicle (a feed's, a scan's, one a
//! program outside the native plan built) is a shared JSON value.

use std::sync::{Arc, OnceLock};

use bytestring::ByteString;
use serde_json::{Map, Number, Value};

use super::json_text;

/// The keys of the objects one program builds, in order (at most 64: one bit each for the
/// fields a record leaves out).
pub struct Shape {
    keys: Box<[Box<str>]>,
    /// Each key as the JSON text that introduces its member (`"key":`), written once.
    members: Box<[Box<[u8]>]>,
    /// The object with every key and `null` values: a copy per record keeps the keys' order and
    /// hashes (no hashing of each key for each record).
    template: Map<String, Value>,
    /// The objects without the fields a record leaves out, by which fields they leave out (one
    /// bit each): the first [`MASKS`] sets met, made once. Records of one upstream mostly lack
    /// the same fields; removing them from a full copy rebuilt the map's hash table per record.
    /// Filled without a lock; past [`MASKS`], copies are cut down.
    masked: [OnceLock<(u64, Map<String, Value>)>; MASKS],
}

/// How many sets of left-out fields a [`Shape`] keeps an object for.
const MASKS: usize = 8;

/// The most keys a [`Shape`] holds (one bit each in a `u64`).
pub const MAX_KEYS: usize = 64;

impl Shape {
    /// `None` past [`MAX_KEYS`] keys or when a key repeats.
    pub fn new(keys: Vec<String>) -> Option<Shape> {
        let template: Map<String, Value> = keys.iter().map(|k| (k.clone(), Value::Null)).collect();
        if keys.len() > MAX_KEYS || template.len() != keys.len() {
            return None;
        }
        let members = keys
            .iter()
            .map(|k| {
                let mut member = Vec::with_capacity(k.len() + 3);
                json_text::write_str(&mut member, k);
                member.push(b':');
                member.into_boxed_slice()
            })
            .collect();
        Some(Shape {
            keys: keys.into_iter().map(String::into_boxed_str).collect(),
            members,
            template,
            masked: Default::default(),
        })
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.keys.iter().map(|k| &**k)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// An object with the keys not in `blank`, in order, `null` values.
    fn template(&self, blank: u64) -> Map<String, Value> {
        if blank == 0 {
            return self.template.clone();
        }
        for slot in &self.masked {
            match slot.get() {
                Some((mask, map)) if *mask == blank => return map.clone(),
                Some(_) => continue,
                None => {
                    let map = without(&self.template, blank);
                    // Another thread may fill the slot first; either object is right here.
                    let _ = slot.set((blank, map.clone()));
                    return map;
                }
            }
        }
        without(&self.template, blank)
    }
}

/// `map` without the entries whose bits are set in `blank`.
fn without(map: &Map<String, Value>, blank: u64) -> Map<String, Value> {
    let mut map = map.clone();
    let mut i = 0;
    map.retain(|_, _| {
        let keep = blank & (1 << i) == 0;
        i += 1;
        keep
    });
    map
}

/// A string value: a span of the record's upstream reply, a shared string (a table's value), or
/// text made in the gateway. A span is two numbers, not a `ByteString`: a page holds hundreds
/// of them, and each shared slice cost a reference count taken and given back.
#[derive(Debug, Clone)]
pub enum Text {
    /// `len` bytes at `at` of the [`Record::body`] (on a character boundary at both ends).
    Span {
        at: u32,
        len: u32,
    },
    Shared(ByteString),
    Owned(String),
}

impl Text {
    /// The text, read in `body` when it is a span of it.
    pub fn as_str<'a>(&'a self, body: &'a str) -> &'a str {
        match self {
            Text::Span { at, len } => {
                let at = *at as usize;
                debug_assert!(body.get(at..at + *len as usize).is_some());
                body.get(at..at + *len as usize).unwrap_or_default()
            }
            Text::Shared(s) => s,
            Text::Owned(s) => s,
        }
    }

    /// `text` as a span of `body` when it lies in it, else a copy.
    pub fn in_body(text: &str, body: &str) -> Text {
        let inside = (text.as_ptr() as usize)
            .checked_sub(body.as_ptr() as usize)
            .filter(|at| {
                at.checked_add(text.len())
                    .is_some_and(|end| end <= body.len())
            });
        match inside.map(|at| (u32::try_from(at), u32::try_from(text.len()))) {
            Some((Ok(at), Ok(len))) => Text::Span { at, len },
            _ => Text::Owned(text.to_owned()),
        }
    }

    /// Appends the text as a JSON string. A span is written as it stands: [`Record::body`] is
    /// a JSON reply, and its spans are of its strings as read (see `json_text::write_plain`).
    fn write_json(&self, body: &str, out: &mut Vec<u8>) {
        match self {
            Text::Span { .. } => json_text::write_plain(out, self.as_str(body)),
            Text::Shared(_) | Text::Owned(_) => json_text::write_str(out, self.as_str(body)),
        }
    }

    fn into_string(self, body: &str) -> String {
        match self {
            Text::Span { .. } => self.as_str(body).to_owned(),
            Text::Shared(s) => String::from(&*s),
            Text::Owned(s) => s,
        }
    }
}

/// One value of a [`Record`].
#[derive(Debug, Clone)]
pub enum Field {
    Text(Text),
    /// An array of strings.
    List(Box<[Text]>),
    Num(Number),
    /// Any other value (boxed: rare, and a `Value` is several times the size of the others).
    Json(Box<Value>),
}

impl Field {
    fn into_value(self, body: &str) -> Value {
        match self {
            Field::Text(t) => Value::String(t.into_string(body)),
            Field::List(items) => Value::Array(
                items
                    .into_vec()
                    .into_iter()
                    .map(|t| Value::String(t.into_string(body)))
                    .collect(),
            ),
            Field::Num(n) => Value::Number(n),
            Field::Json(v) => *v,
        }
    }
}

/// An object a program built: the values of its [`Shape`]'s keys, without those in `blank`.
#[derive(Clone)]
pub struct Record {
    shape: Arc<Shape>,
    blank: u64,
    /// What the values' [`Text::Span`]s are spans of: an upstream's JSON reply, the spans
    /// within its strings as read, so holding nothing JSON escapes.
    body: ByteString,
    values: Vec<Field>,
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.members()).finish()
    }
}

impl Record {
    /// `values` holds one value per key of `shape` whose bit is not set in `blank`, in order;
    /// their spans are spans of `body` with nothing JSON escapes (they are written as they
    /// stand).
    pub fn new(shape: Arc<Shape>, blank: u64, body: ByteString, values: Vec<Field>) -> Record {
        debug_assert_eq!(
            values.len(),
            (0..shape.len()).filter(|i| blank & (1 << i) == 0).count()
        );
        Record {
            shape,
            blank,
            body,
            values,
        }
    }

    /// The keys its values are values of (those not left out).
    pub fn shape(&self) -> &Arc<Shape> {
        &self.shape
    }

    /// The keys it leaves out, one bit each by position.
    pub fn blank(&self) -> u64 {
        self.blank
    }

    /// What the values' spans are spans of.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The keys and values, in order.
    pub fn members(&self) -> Members<'_> {
        Members {
            keys: &self.shape.keys,
            at: 0,
            blank: self.blank,
            values: self.values.iter(),
        }
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Field> {
        // The key's position, then its value's among those not left out (fewer by the
        // left-out keys before it): no walk over the members.
        let at = self.shape.keys.iter().position(|k| **k == *key)?;
        let bit = 1u64 << at; // at < MAX_KEYS
        if self.blank & bit != 0 {
            return None;
        }
        let before = (self.blank & (bit - 1)).count_ones() as usize;
        self.values.get(at - before)
    }

    /// The object as JSON (keys in order).
    pub fn into_map(self) -> Map<String, Value> {
        let mut map = self.shape.template(self.blank);
        for (slot, value) in map.values_mut().zip(self.values) {
            *slot = value.into_value(&self.body);
        }
        map
    }
}

/// The members of a [`Record`], in order.
#[derive(Clone)]
pub struct Members<'a> {
    keys: &'a [Box<str>],
    /// The position of the next key to look at.
    at: usize,
    /// The left-out bits from `at` on.
    blank: u64,
    values: std::slice::Iter<'a, Field>,
}

impl<'a> Members<'a> {
    /// The next member's position among the shape's keys, and its value.
    pub fn next_slot(&mut self) -> Option<(usize, &'a Field)> {
        // The left-out keys before the next member, skipped at once.
        let skipped = self.blank.trailing_ones();
        let at = self.at + skipped as usize;
        if at >= self.keys.len() {
            return None;
        }
        self.at = at + 1;
        self.blank = self.blank.checked_shr(skipped + 1).unwrap_or(0);
        Some((at, self.values.next()?))
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a Field);

    fn next(&mut self) -> Option<(&'a str, &'a Field)> {
        let (at, value) = self.next_slot()?;
        Some((&self.keys[at], value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.values.len(), Some(self.values.len()))
    }
}

/// A vehicle of a search page.
#[derive(Debug, Clone)]
pub enum Vehicle {
    Json(Arc<Value>),
    Record(Record),
}

impl Vehicle {
    /// The listing status, when it is a string.
    pub fn status(&self) -> Option<&str> {
        match self {
            Vehicle::Json(v) => v.get("status").and_then(Value::as_str),
            Vehicle::Record(r) => match r.get("status")? {
                Field::Text(t) => Some(t.as_str(r.body())),
                Field::Json(v) => v.as_str(),
                Field::List(_) | Field::Num(_) => None,
            },
        }
    }

    /// The vehicle as JSON.
    pub fn into_value(self) -> Value {
        match self {
            Vehicle::Json(v) => Arc::unwrap_or_clone(v),
            Vehicle::Record(r) => Value::Object(r.into_map()),
        }
    }

    /// The vehicle as a shared JSON value.
    pub fn into_arc(self) -> Arc<Value> {
        match self {
            Vehicle::Json(v) => v,
            Vehicle::Record(r) => Arc::new(Value::Object(r.into_map())),
        }
    }
}

impl From<Value> for Vehicle {
    fn from(v: Value) -> Vehicle {
        Vehicle::Json(Arc::new(v))
    }
}

/// The `data` of an `inventory.search.response`: `{total, skip, limit, vehicles}`.
#[derive(Debug, Clone)]
pub struct SearchPage {
    /// `total`, `skip`, `limit`, as the numbers written.
    counts: [Number; 3],
    vehicles: Vec<Vehicle>,
    /// Every listing was held to the listing schema where it was made (a proxied page as it was
    /// read, a feed's units at load): the response check then checks only the rest.
    listings_checked: bool,
}

/// The member names of a [`SearchPage`], in order.
pub const PAGE_KEYS: [&str; 4] = ["total", "skip", "limit", "vehicles"];

impl SearchPage {
    pub fn new(total: usize, skip: usize, limit: usize, vehicles: Vec<Vehicle>) -> SearchPage {
        SearchPage {
            counts: [total, skip, limit].map(|n| Number::from(n as u64)),
            vehicles,
            listings_checked: false,
        }
    }

    /// The page, its listings already held to the listing schema by whoever made them.
    pub fn listings_checked(mut self) -> SearchPage {
        self.listings_checked = true;
        self
    }

    /// Whether [`SearchPage::listings_checked`] said so.
    pub fn are_listings_checked(&self) -> bool {
        self.listings_checked
    }

    /// `total`, `skip` and `limit`.
    pub fn counts(&self) -> &[Number; 3] {
        &self.counts
    }

    pub fn vehicles(&self) -> &Vec<Vehicle> {
        &self.vehicles
    }

    /// The `inventory.search.response` object `{type, data}` holding the page, as JSON.
    pub fn reply_value(&self) -> Value {
        let mut reply = Map::with_capacity(2);
        let kind = crate::protocol::Skill::InventorySearch.response_type();
        reply.insert("type".to_owned(), Value::String(kind.to_owned()));
        reply.insert("data".to_owned(), self.to_value());
        Value::Object(reply)
    }

    /// The page as JSON.
    pub fn to_value(&self) -> Value {
        let mut data = Map::with_capacity(4);
        for (key, n) in PAGE_KEYS.iter().zip(&self.counts) {
            data.insert((*key).to_owned(), Value::Number(n.clone()));
        }
        data.insert(
            PAGE_KEYS[3].to_owned(),
            Value::Array(
                self.vehicles
                    .iter()
                    .cloned()
                    .map(Vehicle::into_value)
                    .collect(),
            ),
        );
        Value::Object(data)
    }
}

impl Field {
    fn write_json(&self, body: &str, out: &mut Vec<u8>) {
        match self {
            Field::Text(t) => t.write_json(body, out),
            Field::List(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write_json(body, out);
                }
                out.push(b']');
            }
            Field::Num(n) => json_text::write_number(out, n),
            Field::Json(v) => json_text::write_value(out, &**v),
        }
    }
}

impl Record {
    /// Appends the object's JSON text to `out`, as `serde_json` writes its [`Record::into_map`].
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut members = self.members();
        let mut first = true;
        while let Some((at, value)) = members.next_slot() {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&self.shape.members[at]);
            value.write_json(&self.body, out);
        }
        out.push(b'}');
    }
}

impl Vehicle {
    /// Appends the vehicle's JSON text to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Vehicle::Json(v) => json_text::write_value(out, &**v),
            Vehicle::Record(r) => r.write_json(out),
        }
    }
}

impl SearchPage {
    /// Appends the page's JSON text to `out`: the text `serde_json` writes for
    /// [`SearchPage::to_value`], without building that value.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (key, n) in PAGE_KEYS.iter().zip(&self.counts) {
            json_text::write_str(out, key);
            out.push(b':');
            json_text::write_number(out, n);
            out.push(b',');
        }
        json_text::write_str(out, PAGE_KEYS[3]);
        out.extend_from_slice(b":[");
        for (i, vehicle) in self.vehicles.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            vehicle.write_json(out);
        }
        out.extend_from_slice(b"]}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shape(keys: &[&str]) -> Arc<Shape> {
        Arc::new(Shape::new(keys.iter().map(|k| (*k).to_owned()).collect()).expect("shape"))
    }

    #[test]
    fn a_record_is_written_as_its_json_value_is() {
        let body = ByteString::from("{\"VIN\":\"1HGCM82633A004352\",\"Make\":\"Honda\"}");
        let vin = &body[8..25];
        let shape = shape(&["vin", "make", "trim", "photos", "year", "note \"q\""]);
        let cases = [
            (
                0b000000,
                vec![
                    Field::Text(Text::in_body(vin, &body)),
                    Field::Text(Text::in_body("Honda", &body)),
                    Field::Json(Box::new(Value::Null)),
                    Field::List(
                        vec![
                            Text::Owned("a".into()),
                            Text::in_body(vin, &body),
                            Text::Shared("used".into()),
                        ]
                        .into(),
                    ),
                    Field::Num(2021.into()),
                    Field::Text(Text::Owned("ü \u{1} \"x\"".into())),
                ],
            ),
            (
                0b001100,
                vec![
                    Field::Text(Text::Owned(String::new())),
                    Field::List(Box::new([])),
                    Field::Num(Number::from_f64(2.5).unwrap()),
                    Field::Json(Box::new(json!({"a": [1, "b"]}))),
                ],
            ),
            (0b111111, vec![]),
        ];
        for (blank, values) in cases {
            let record = Record::new(Arc::clone(&shape), blank, body.clone(), values);
            let value = Value::Object(record.clone().into_map());
            // A key's value is found where its member is, and a left-out key has none.
            for key in shape.keys().chain(["absent"]) {
                let member = record.members().find(|(k, _)| *k == key).map(|(_, v)| v);
                assert_eq!(
                    format!("{:?}", record.get(key)),
                    format!("{member:?}"),
                    "{key} of {blank:#b}"
                );
            }
            let mut written = Vec::new();
            record.write_json(&mut written);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&value).unwrap()
            );
            let page = SearchPage::new(
                7,
                2,
                20,
                vec![Vehicle::Record(record), json!({"x": 1}).into()],
            );
            let mut written = Vec::new();
            page.write_json(&mut written);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&page.to_value()).unwrap()
            );
        }
    }

    #[test]
    fn only_text_inside_the_body_is_a_span_of_it() {
        let body = ByteString::from("abcdéf");
        let inside = Text::in_body(&body[1..4], &body);
        assert!(matches!(inside, Text::Span { at: 1, len: 3 }));
        assert_eq!(inside.as_str(&body), "bcd");
        let to_the_end = Text::in_body(&body[3..], &body);
        assert_eq!(to_the_end.as_str(&body), "déf");
        let elsewhere = String::from("bcd");
        assert!(matches!(Text::in_body(&elsewhere, &body), Text::Owned(s) if s == "bcd"));
        // Text right after the body, and text that starts inside it and runs past its end.
        let longer = ByteString::from("abcdefgh");
        let prefix = longer.slice_ref(&longer[..4]);
        assert!(matches!(Text::in_body(&longer[4..6], &prefix), Text::Owned(s) if s == "ef"));
        assert!(matches!(Text::in_body(&longer[2..6], &prefix), Text::Owned(s) if s == "cdef"));
        assert!(matches!(
            Text::in_body(&longer[..0], &prefix),
            Text::Span { at: 0, len: 0 }
        ));
    }

    #[test]
    fn members_skip_the_left_out_keys() {
        let record = Record::new(
            shape(&["a", "b", "c", "status"]),
            0b0101,
            ByteString::new(),
            vec![
                Field::Num(1.into()),
                Field::Text(Text::Owned("sold".into())),
            ],
        );
        let keys: Vec<&str> = record.members().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "status"]);
        assert_eq!(Vehicle::Record(record).status(), Some("sold"));
        assert!(Shape::new(vec!["a".into(), "a".into()]).is_none());
        assert!(Shape::new((0..65).map(|i| i.to_string()).collect()).is_none());
    }

    /// Every set of left-out keys, for shapes of a few keys and of the most a shape holds: the
    /// members are the other keys, in order, each with its value.
    #[test]
    fn members_are_the_keys_not_left_out_for_any_blank_set() {
        let masks = |n: usize| -> Vec<u64> {
            if n <= 7 {
                (0..1u64 << n).collect()
            } else {
                let ones = u64::MAX >> (64 - n);
                vec![
                    0,
                    ones,
                    ones - 1,
                    ones >> 1,
                    0x5555_5555_5555_5555 & ones,
                    1 << (n - 1),
                ]
            }
        };
        for n in [1, 3, 7, 64] {
            let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            let shape = Arc::new(Shape::new(keys.clone()).expect("shape"));
            for blank in masks(n) {
                let kept: Vec<(&str, u64)> = (0..n)
                    .filter(|i| blank & (1 << i) == 0)
                    .map(|i| (keys[i].as_str(), i as u64))
                    .collect();
                let values = kept.iter().map(|(_, i)| Field::Num((*i).into())).collect();
                let record = Record::new(Arc::clone(&shape), blank, ByteString::new(), values);
                let members: Vec<(&str, u64)> = record
                    .members()
                    .map(|(k, v)| match v {
                        Field::Num(i) => (k, i.as_u64().expect("index")),
                        _ => unreachable!("numbers only"),
                    })
                    .collect();
                assert_eq!(members, kept, "{n} keys, blank {blank:#b}");
            }
        }
    }
}
