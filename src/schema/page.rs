//! A search reply held as built (`protocol::vehicle`), seen by jsonschema as the JSON
//! `{"type": "inventory.search.response", "data": {total, skip, limit, vehicles}}` it is written
//! as: the same schema and keywords run on it without the JSON tree being made.
//!
//! Only `is_valid` runs on this representation; a reply that fails is made JSON and checked
//! again for its failures (`Schemas::check_response`), so the error paths never see it.

use std::borrow::Cow;
use std::collections::HashSet;

use jsonschema::json::{self, NodeIdentity};
use jsonschema::types::JsonType;
use serde_json::{Map, Number, Value};

use crate::protocol::Skill;
use crate::protocol::vehicle::{Field, Members, PAGE_KEYS, Record, SearchPage, Text, Vehicle};

/// The representation.
pub(super) struct Page;

impl json::Json for Page {
    type Node<'a> = Node<'a>;
    type PreparedKey = String;
    type StringBuffer = ();

    // Objects here are small and ordered; a members pass beats lookups, as for `serde_json`'s.
    const KEYS_PER_LOOKUP: usize = 2;
    const ACYCLIC: bool = true;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>((): &mut (), string: &str, f: impl FnOnce(Node<'_>) -> T) -> T {
        f(Node::Str(string))
    }
}

/// One value of a search reply.
#[derive(Clone, Copy)]
pub(super) enum Node<'a> {
    /// The response object.
    Reply(&'a SearchPage),
    /// Its `data`.
    Page(&'a SearchPage),
    Vehicles(&'a Vec<Vehicle>),
    Record(&'a Record),
    /// The box, not the slice: an empty slice's address is no list's own (see `identity`);
    /// and the record's body its spans are spans of.
    #[allow(clippy::borrowed_box)]
    List(&'a Box<[Text]>, &'a str),
    Str(&'a str),
    Num(&'a Number),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    pub(super) fn of_field(field: &'a Field, body: &'a str) -> Node<'a> {
        match field {
            Field::Text(t) => Node::Str(t.as_str(body)),
            Field::List(items) => Node::List(items, body),
            Field::Num(n) => Node::Num(n),
            Field::Json(v) => Node::Value(v),
        }
    }

    fn of_vehicle(vehicle: &'a Vehicle) -> Node<'a> {
        match vehicle {
            Vehicle::Json(v) => Node::Value(v),
            Vehicle::Record(r) => Node::Record(r),
        }
    }

    fn address<T>(t: &T, tag: u32) -> Option<NodeIdentity> {
        Some(NodeIdentity::tagged(std::ptr::from_ref(t) as usize, tag))
    }
}

impl<'a> json::Node<'a, Page> for Node<'a> {
    type Object = Object<'a>;
    type Array = Array<'a>;
    type Number = &'a Number;

    fn as_object(&self) -> Option<Object<'a>> {
        match *self {
            Node::Reply(p) => Some(Object::Reply(p)),
            Node::Page(p) => Some(Object::Page(p)),
            Node::Record(r) => Some(Object::Record(r)),
            Node::Value(Value::Object(m)) => Some(Object::Map(m)),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<Array<'a>> {
        match *self {
            Node::Vehicles(v) => Some(Array::Vehicles(v)),
            Node::List(l, body) => Some(Array::List(l, body)),
            Node::Value(Value::Array(a)) => Some(Array::Values(a)),
            _ => None,
        }
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        match *self {
            Node::Str(s) => Some(Cow::Borrowed(s)),
            Node::Value(Value::String(s)) => Some(Cow::Borrowed(s)),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<&'a Number> {
        match *self {
            Node::Num(n) | Node::Value(Value::Number(n)) => Some(n),
            _ => None,
        }
    }

    fn as_boolean(&self) -> Option<bool> {
        match *self {
            Node::Value(Value::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Node::Value(Value::Null))
    }

    fn json_type(&self) -> JsonType {
        match *self {
            Node::Reply(_) | Node::Page(_) | Node::Record(_) => JsonType::Object,
            Node::Vehicles(_) | Node::List(..) => JsonType::Array,
            Node::Str(_) => JsonType::String,
            Node::Num(_) => JsonType::Number,
            Node::Value(v) => match v {
                Value::Null => JsonType::Null,
                Value::Bool(_) => JsonType::Boolean,
                Value::Number(_) => JsonType::Number,
                Value::String(_) => JsonType::String,
                Value::Array(_) => JsonType::Array,
                Value::Object(_) => JsonType::Object,
            },
        }
    }

    fn equals_value(&self, expected: &Value) -> bool {
        match *self {
            Node::Str(s) => expected.as_str() == Some(s),
            Node::Value(v) => json::cmp::equal(v, expected),
            _ => json::cmp::equal(&self.to_value(), expected),
        }
    }

    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(match *self {
            Node::Reply(p) => p.reply_value(),
            Node::Page(p) => p.to_value(),
            Node::Vehicles(v) => Value::Array(v.iter().cloned().map(Vehicle::into_value).collect()),
            Node::Record(r) => Value::Object(r.clone().into_map()),
            Node::List(l, body) => Value::Array(
                l.iter()
                    .map(|t| Value::String(t.as_str(body).to_owned()))
                    .collect(),
            ),
            Node::Str(s) => Value::String(s.to_owned()),
            Node::Num(n) => Value::Number(n.clone()),
            Node::Value(v) => return Cow::Borrowed(v),
        })
    }

    fn identity(&self) -> Option<NodeIdentity> {
        // Containers only: a string's address can be another string's (two fields slicing
        // the same text of the upstream's reply).
        match *self {
            Node::Reply(p) => Node::address(p, 1),
            Node::Page(p) => Node::address(p, 2),
            Node::Vehicles(v) => Node::address(v, 3),
            Node::Record(r) => Node::address(r, 4),
            Node::List(l, _) => Node::address(l, 5),
            Node::Value(v) => Node::address(v, 6),
            Node::Str(_) | Node::Num(_) => None,
        }
    }
}

/// An object of a search reply.
pub(super) enum Object<'a> {
    Reply(&'a SearchPage),
    Page(&'a SearchPage),
    Record(&'a Record),
    Map(&'a Map<String, Value>),
}

/// The members of an [`Object`], in order.
pub(super) enum MembersIter<'a> {
    Reply(&'a SearchPage, usize),
    Page(&'a SearchPage, usize),
    Record(Members<'a>, &'a str),
    Map(serde_json::map::Iter<'a>),
}

impl<'a> Iterator for MembersIter<'a> {
    type Item = (&'a str, Node<'a>);

    fn next(&mut self) -> Option<(&'a str, Node<'a>)> {
        match self {
            MembersIter::Reply(page, i) => {
                *i += 1;
                match *i {
                    1 => Some(("type", Node::Str(Skill::InventorySearch.response_type()))),
                    2 => Some(("data", Node::Page(page))),
                    _ => None,
                }
            }
            MembersIter::Page(page, i) => {
                let key = PAGE_KEYS.get(*i)?;
                let node = match page.counts().get(*i) {
                    Some(n) => Node::Num(n),
                    None => Node::Vehicles(page.vehicles()),
                };
                *i += 1;
                Some((key, node))
            }
            MembersIter::Record(members, body) => {
                members.next().map(|(k, v)| (k, Node::of_field(v, body)))
            }
            MembersIter::Map(members) => members.next().map(|(k, v)| (k.as_str(), Node::Value(v))),
        }
    }
}

impl<'a> json::Object<'a, Page> for Object<'a> {
    type Node = Node<'a>;
    type MemberName = &'a str;
    type MembersIter = MembersIter<'a>;

    fn len(&self) -> usize {
        match self {
            Object::Reply(_) => 2,
            Object::Page(_) => PAGE_KEYS.len(),
            Object::Record(r) => r.len(),
            Object::Map(m) => m.len(),
        }
    }

    fn get(&self, key: &String) -> Option<Node<'a>> {
        match self {
            Object::Map(m) => m.get(key).map(Node::Value),
            Object::Record(r) => r.get(key).map(|v| Node::of_field(v, r.body())),
            _ => self.members().find(|(k, _)| k == key).map(|(_, v)| v),
        }
    }

    fn members(&self) -> MembersIter<'a> {
        match *self {
            Object::Reply(p) => MembersIter::Reply(p, 0),
            Object::Page(p) => MembersIter::Page(p, 0),
            Object::Record(r) => MembersIter::Record(r.members(), r.body()),
            Object::Map(m) => MembersIter::Map(m.iter()),
        }
    }
}

/// An array of a search reply.
pub(super) enum Array<'a> {
    Vehicles(&'a [Vehicle]),
    List(&'a [Text], &'a str),
    Values(&'a [Value]),
}

/// The items of an [`Array`].
pub(super) enum Elements<'a> {
    Vehicles(std::slice::Iter<'a, Vehicle>),
    List(std::slice::Iter<'a, Text>, &'a str),
    Values(std::slice::Iter<'a, Value>),
}

impl<'a> Iterator for Elements<'a> {
    type Item = Node<'a>;

    fn next(&mut self) -> Option<Node<'a>> {
        match self {
            Elements::Vehicles(i) => i.next().map(Node::of_vehicle),
            Elements::List(i, body) => i.next().map(|t| Node::Str(t.as_str(body))),
            Elements::Values(i) => i.next().map(Node::Value),
        }
    }
}

impl<'a> json::Array<'a, Page> for Array<'a> {
    type Node = Node<'a>;
    type ElementsIter = Elements<'a>;

    fn len(&self) -> usize {
        match self {
            Array::Vehicles(v) => v.len(),
            Array::List(l, _) => l.len(),
            Array::Values(v) => v.len(),
        }
    }

    fn elements(&self) -> Elements<'a> {
        match *self {
            Array::Vehicles(v) => Elements::Vehicles(v.iter()),
            Array::List(l, body) => Elements::List(l.iter(), body),
            Array::Values(v) => Elements::Values(v.iter()),
        }
    }

    fn is_unique(&self) -> bool {
        match *self {
            Array::List(l, body) => {
                let mut seen = HashSet::with_capacity(l.len());
                l.iter().all(|t| seen.insert(t.as_str(body)))
            }
            Array::Values(v) => json::unique::is_unique(v),
            Array::Vehicles(v) => {
                let values: Vec<Value> = v.iter().cloned().map(Vehicle::into_value).collect();
                json::unique::is_unique(&values)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::protocol::vehicle::Shape;
    use crate::schema::{Schemas, index, loaded as schemas};
    use jsonschema::json::Node as _;

    /// The verdict of the page validator on `page`, and of the JSON validator on its JSON. The
    /// page validator's is the same with its records' fields checked by key and with the listing
    /// schema whole (or the test fails here).
    fn verdicts(schemas: &Schemas, page: &SearchPage) -> (bool, bool) {
        let json = Node::Reply(page).to_value();
        let as_json = schemas.responses[index(Skill::InventorySearch)].is_valid(&json);
        let pages = &schemas.search_pages;
        let by_key = pages
            .by_key()
            .expect("the listing schema taken apart by key");
        let held = pages.is_valid_with(page, Some(by_key));
        assert_eq!(held, pages.is_valid_with(page, None), "by key and whole");
        (held, as_json)
    }

    /// A vehicle as a built record: strings and lists of strings as texts (in turn spans of
    /// the record's body, shared strings and owned ones), numbers as numbers, the rest JSON.
    fn record(vehicle: &Map<String, Value>) -> Option<Vehicle> {
        let shape = Arc::new(Shape::new(vehicle.keys().cloned().collect())?);
        let values: Vec<&Value> = vehicle.values().collect();
        Some(record_of(&shape, 0, &values))
    }

    /// A record of `shape` without the keys in `blank`, holding `values` (one per other key),
    /// as [`record`] makes them.
    fn record_of(shape: &Arc<Shape>, blank: u64, vehicle: &[&Value]) -> Vehicle {
        let mut strings = Vec::new();
        for &value in vehicle {
            match value {
                Value::String(s) => strings.push(s.as_str()),
                Value::Array(items) => strings.extend(items.iter().filter_map(Value::as_str)),
                _ => {}
            }
        }
        let body = bytestring::ByteString::from(strings.concat());
        // The strings in order, each a span of the body, shared or owned in turn.
        let (mut at, mut n) = (0, 0);
        let mut text = |s: &str| {
            // A span holds nothing JSON escapes, as in a record read from a reply.
            let plain = crate::protocol::json_text::needs_no_escape(s.as_bytes());
            let text = match n % 3 {
                0 if plain => Text::in_body(&body[at..at + s.len()], &body),
                0 => Text::Owned(s.to_owned()),
                1 => Text::Shared(s.into()),
                _ => Text::Owned(s.to_owned()),
            };
            at += s.len();
            n += 1;
            text
        };
        let mut values = Vec::new();
        for &value in vehicle {
            values.push(match value {
                Value::String(s) => Field::Text(text(s)),
                Value::Array(items) => {
                    let texts: Vec<Text> = items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(&mut text)
                        .collect();
                    if texts.len() == items.len() {
                        Field::List(texts.into())
                    } else {
                        Field::Json(Box::new(value.clone()))
                    }
                }
                Value::Number(n) => Field::Num(n.clone()),
                other => Field::Json(Box::new(other.clone())),
            });
        }
        Vehicle::Record(Record::new(shape.clone(), blank, body.clone(), values))
    }

    /// A page the gateway could build with the data of a search response, without what a built
    /// page never has (`message`, `facets`).
    fn as_built(instance: &Value) -> Option<SearchPage> {
        let data = instance.get("data")?.as_object()?;
        let object = instance.as_object()?;
        let extra = |keys: &[&str]| object.keys().any(|k| !keys.contains(&k.as_str()));
        if extra(&["type", "data", "message"]) || instance["type"] != "inventory.search.response" {
            return None;
        }
        if data
            .keys()
            .any(|k| !PAGE_KEYS.contains(&k.as_str()) && k != "facets")
        {
            return None;
        }
        let count = |k: &str| usize::try_from(data.get(k)?.as_u64()?).ok();
        let vehicles = data.get("vehicles")?.as_array()?.iter();
        let vehicles = vehicles.map(|v| record(v.as_object()?));
        Some(SearchPage::new(
            count("total")?,
            count("skip")?,
            count("limit")?,
            vehicles.collect::<Option<_>>()?,
        ))
    }

    #[test]
    fn the_corpus_search_responses_get_the_same_verdict_held_as_built() {
        let schemas = schemas();
        let mut seen = [0, 0]; // valid, invalid
        for kind in ["valid", "invalid"] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/corpus")
                .join(kind);
            for entry in std::fs::read_dir(dir).expect("corpus") {
                let text = std::fs::read_to_string(entry.expect("file").path()).expect("read");
                let case: Value = serde_json::from_str(&text).expect("JSON");
                if case["schema"] != "inventory-search-response.schema.json" {
                    continue;
                }
                let Some(page) = as_built(&case["instance"]) else {
                    continue;
                };
                let (held, json) = verdicts(schemas, &page);
                assert_eq!(held, json, "{case}");
                seen[usize::from(!json)] += 1;
            }
        }
        assert!(seen[0] >= 6 && seen[1] >= 4, "{seen:?}");
    }

    /// Values for the fields of a listing, of every kind a record holds: valid ones (`true`)
    /// and ones the schema refuses.
    fn values() -> Vec<(bool, &'static str, Value)> {
        vec![
            (true, "vin", json!("1HGCM82633A004352")),
            (false, "vin", json!("1HGCM82633A00435I")),
            (true, "year", json!(2021)),
            (false, "year", json!(1899)),
            (false, "year", json!("2021")),
            (false, "year", json!(2021.5)),
            (true, "year", json!(1900)),
            (true, "year", json!(2100)),
            (false, "year", json!(2101)),
            (true, "year", json!(2021.0)),
            (true, "mileage", json!(9412)),
            (false, "mileage", json!(-9412)),
            (true, "msrp", json!(u64::MAX)),
            (false, "msrp", json!(i64::MIN)),
            (true, "condition", json!("used")),
            (true, "condition", json!("cpo")),
            (false, "condition", json!("excellent")),
            (false, "condition", json!("bogus")),
            (false, "condition", json!(null)),
            (true, "status", json!("intransit")),
            (false, "status", json!("sold")),
            (false, "status", json!(3)),
            (true, "price", json!(18990)),
            (true, "price", json!(0)),
            (false, "price", json!(-1)),
            (false, "price", json!("18990")),
            (true, "photos", json!(["https://img.example.invalid/1.jpg"])),
            (true, "photos", json!([])),
            (false, "photos", json!(["not a uri"])),
            (false, "photos", json!([1])),
            (true, "updated_at", json!("2024-05-01T14:22:09-04:00")),
            (false, "updated_at", json!("2024-05-01 14:22")),
            (true, "inventory_date", json!("2024-05-01")),
            (false, "inventory_date", json!("05/01/2024")),
            (true, "rooftop", json!("Peachtree Motors")),
            (true, "rooftop", json!(null)),
            (false, "rooftop", json!(5)),
            (true, "dc_fast_charge", json!(true)),
            (false, "dc_fast_charge", json!("yes")),
            (true, "features", json!(["sunroof", "sunroof"])),
            (false, "features", json!(["sunroof", 1])),
            (true, "fees", json!([])),
            (
                false,
                "fees",
                json!([{"name": "Doc", "amount": 100}, {"name": "Doc", "amount": 100}]),
            ),
            (true, "other_attributes", json!({"seats": 5, "tags": ["a"]})),
            (false, "other_attributes", json!({"seats": {"front": 2}})),
            (true, "vehicle_type", json!("car")),
            (false, "vehicle_type", json!("boat")),
            (true, "x_dealer_code", json!({"any": ["thing"]})),
            (true, "make", json!("Toyota")),
            (true, "make", json!("")),
            (false, "make", json!(5)),
            (false, "make", json!(["Toyota"])),
            (false, "make", json!(null)),
        ]
    }

    /// A listing: `status: available`, then up to six valid fields, and now and then one the
    /// schema refuses, so that most pages fail on one field at most.
    fn vehicle() -> impl Strategy<Value = (Map<String, Value>, bool)> {
        let pick = |valid: bool| {
            let values: Vec<_> = values().into_iter().filter(|v| v.0 == valid).collect();
            proptest::sample::select(values).prop_map(|(_, k, v)| (k, v))
        };
        let fields = proptest::collection::vec(pick(true), 0..6);
        let bad = proptest::option::weighted(0.15, pick(false));
        (fields, bad, proptest::bool::weighted(0.95), any::<bool>()).prop_map(
            |(fields, bad, status, as_json)| {
                let mut vehicle = Map::new();
                if status {
                    vehicle.insert("status".into(), json!("available"));
                }
                for (k, v) in fields.into_iter().chain(bad) {
                    vehicle.insert(k.to_owned(), v);
                }
                (vehicle, as_json)
            },
        )
    }

    /// Pages as one program builds them: every record of one shape (the keys of `values`, a
    /// few of them, in any order), each leaving out some keys (`status` too), now and then
    /// holding a value the schema refuses.
    fn one_shape_page() -> impl Strategy<Value = SearchPage> {
        let mut names: Vec<&'static str> = values().iter().map(|v| v.1).collect();
        names.sort_unstable();
        names.dedup();
        proptest::sample::subsequence(names, 1..8)
            .prop_shuffle()
            .prop_flat_map(|keys| {
                let n = keys.len();
                // Per key: left out (0..4), a refused value (4), else a valid one; which one.
                let field = (0u8..40, any::<prop::sample::Index>());
                (
                    Just(keys),
                    proptest::collection::vec(proptest::collection::vec(field, n), 0..4),
                )
            })
            .prop_map(|(keys, records)| {
                let shape = Arc::new(
                    Shape::new(keys.iter().map(|k| (*k).to_owned()).collect()).expect("distinct"),
                );
                let all = values();
                let vehicles = records.iter().map(|fields| {
                    let mut blank = 0;
                    let mut held = Vec::new();
                    for (at, (key, (roll, which))) in keys.iter().zip(fields).enumerate() {
                        if *roll < 4 {
                            blank |= 1 << at;
                            continue;
                        }
                        // The key's values of that kind; of the other where it has none.
                        let of_key = |valid: bool| -> Vec<&Value> {
                            let kind = all.iter().filter(|v| v.1 == *key && v.0 == valid);
                            kind.map(|v| &v.2).collect()
                        };
                        let valid = *roll > 4;
                        let mut pick = of_key(valid);
                        if pick.is_empty() {
                            pick = of_key(!valid);
                        }
                        held.push(pick[which.index(pick.len())]);
                    }
                    record_of(&shape, blank, &held)
                });
                SearchPage::new(3, 0, 20, vehicles.collect())
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The records of a page share their program's keys: checked by key, found once for
        /// the page, they get the verdict of the page's JSON.
        #[test]
        fn records_of_one_shape_get_the_verdict_of_their_json(page in one_shape_page()) {
            let (held, json) = verdicts(schemas(), &page);
            prop_assert_eq!(held, json);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// A page held as built passes the response schema exactly when its JSON does, and is
        /// written as its JSON is.
        #[test]
        fn a_page_held_as_built_gets_the_verdict_and_text_of_its_json(
            vehicles in proptest::collection::vec(vehicle(), 0..3),
            total in 0usize..1000,
        ) {
            let vehicles = vehicles.into_iter().map(|(fields, as_json)| {
                if as_json {
                    Vehicle::from(Value::Object(fields))
                } else {
                    record(&fields).expect("distinct keys")
                }
            });
            let page = SearchPage::new(total, 0, 20, vehicles.collect());
            let (held, json) = verdicts(schemas(), &page);
            prop_assert_eq!(held, json);
            let payload = crate::protocol::Payload::Search(Arc::new(page));
            prop_assert_eq!(payload.to_string(), payload.to_value().to_string());
        }
    }
}
