//! A search page checked in two parts: the response around the listings, and each listing; a
//! listing a mapping program built, field by field against its own key's checks.
//!
//! Why: a listing schema names some 45 keys. jsonschema checks a listing by going through its
//! members and finding each key among those names (a hash, a compare, the merged `allOf`'s
//! bookkeeping: ~200 instructions a member, a seventh of a proxied search). The keys of a
//! built record are its program's ([`Shape`]), the same for a whole page: here each key's checks
//! are found once a page, and each record's fields go straight to them. Where a key's checks
//! are only a type, a list of words or whole-number bounds, a text or a whole number is settled
//! without the validator at all ([`Simple`]: a call to it costs ~75 instructions before it checks
//! anything).
//!
//! Only a listing schema of the plain kind is taken apart ([`ByKey::of`]): an object whose
//! members are checked one at a time (`properties`, `required`, `allOf`, `$ref`, other keys
//! allowed). Any other listing schema is used whole, as is the whole schema for listings held as
//! JSON. The verdict is the whole response schema's either way (the tests compare them).

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::{Registry, Validator};
use serde_json::{Value, json};

use super::page::{Node, Page};
use crate::protocol::vehicle::{Field, MAX_KEYS, Record, SearchPage, Shape, Vehicle};

/// Where the listing schema sits in the search response schema.
const LISTINGS: &str = "/properties/data/properties/vehicles/items";

/// The search response schema in two parts.
pub(super) struct SearchPages {
    /// The response schema with the listing schema set aside (`true`).
    around: Validator<Page>,
    /// The listing schema whole.
    listing: Validator<Page>,
    /// The listing schema by key, when it is of the plain kind.
    by_key: Option<ByKey>,
}

/// How the parts are compiled: the gateway's schema options and registry.
pub(super) type Compile<'a> = &'a dyn Fn(&Value) -> Result<Validator<Page>, String>;

impl SearchPages {
    /// `response` is the search response schema's text at `uri`; `files` every schema file
    /// by URI (for the `$ref`s a listing schema follows).
    pub(super) fn new(
        uri: &str,
        response: &Value,
        files: &HashMap<String, Value>,
        compile: Compile<'_>,
    ) -> Result<SearchPages, String> {
        let mut around = response.clone();
        let set_aside = around
            .pointer_mut(LISTINGS)
            .ok_or_else(|| format!("no listing schema at `{LISTINGS}`"))?;
        *set_aside = Value::Bool(true);
        // A name of its own beside the file's, so that its relative `$ref`s resolve as theirs
        // do and it is not taken for the file the registry holds.
        let around_uri = format!("{uri}.around-listings");
        around["$id"] = Value::String(around_uri);
        let listing_uri = format!("{uri}#{LISTINGS}");
        Ok(SearchPages {
            around: compile(&around)?,
            listing: compile(&json!({ "$ref": listing_uri }))?,
            by_key: ByKey::of(uri, LISTINGS, files, compile)?,
        })
    }

    /// Whether the response holding `page` is valid. Listings checked where they were made
    /// ([`SearchPage::listings_checked`]) are not checked again: only what is around them.
    pub(super) fn is_valid(&self, page: &SearchPage) -> bool {
        if page.are_listings_checked() {
            return self.around.is_valid(Node::Reply(page));
        }
        self.is_valid_with(page, self.by_key.as_ref())
    }

    /// [`SearchPages::is_valid`], with the listings a program built checked `by_key` or, for
    /// `None`, by the listing schema whole.
    pub(super) fn is_valid_with(&self, page: &SearchPage, by_key: Option<&ByKey>) -> bool {
        if !self.around.is_valid(Node::Reply(page)) {
            return false;
        }
        let mut plan = None;
        page.vehicles()
            .iter()
            .all(|vehicle| self.listing_is_valid(vehicle, by_key, &mut plan))
    }

    /// Keeps the listings of `vehicles` the listing schema accepts, in order; gives how many
    /// it dropped and the first dropped one's failures (locations and keywords, never values).
    pub(super) fn retain_valid(
        &self,
        vehicles: &mut Vec<Vehicle>,
        checked: impl Fn(&Vehicle) -> bool,
    ) -> (usize, Vec<String>) {
        let mut plan = None;
        let valid: Vec<bool> = vehicles
            .iter()
            .map(|vehicle| {
                !checked(vehicle) || self.listing_is_valid(vehicle, self.by_key.as_ref(), &mut plan)
            })
            .collect();
        let dropped = valid.iter().filter(|v| !**v).count();
        if dropped == 0 {
            return (0, Vec::new());
        }
        let why = valid
            .iter()
            .position(|v| !*v)
            .and_then(|at| vehicles.get(at))
            .map(|vehicle| self.problems(vehicle))
            .unwrap_or_default();
        let mut keep = valid.into_iter();
        vehicles.retain(|_| keep.next().unwrap_or(true));
        (dropped, why)
    }

    /// Whether the listing schema accepts one listing of a page: a record a program built
    /// checked `by_key` or, for `None`, by the listing schema whole; a listing held as JSON by
    /// the listing schema whole. `plan` keeps the checks found for the last record's shape, for
    /// the next record of that shape (a page's records mostly share one): the caller starts it
    /// at `None` and passes it along the page.
    #[inline]
    fn listing_is_valid<'a>(
        &'a self,
        vehicle: &'a Vehicle,
        by_key: Option<&'a ByKey>,
        plan: &mut Option<Plan<'a>>,
    ) -> bool {
        match (vehicle, by_key) {
            (Vehicle::Record(record), Some(by_key)) => {
                let plan = match plan {
                    Some(plan) if Arc::ptr_eq(plan.shape, record.shape()) => plan,
                    slot => slot.insert(by_key.plan(record.shape())),
                };
                plan.is_valid(record)
            }
            (Vehicle::Record(record), None) => self.listing.is_valid(Node::Record(record)),
            (Vehicle::Json(value), _) => self.listing.is_valid(Node::Value(value)),
        }
    }

    /// Whether the listing schema accepts one listing held as JSON (a feed's, as mapped); its
    /// failures (`location (keyword)`, never a value) when not.
    pub(super) fn check_json(&self, value: &Value) -> Result<(), Vec<String>> {
        if self.listing.is_valid(Node::Value(value)) {
            return Ok(());
        }
        Err(self
            .listing
            .iter_errors(Node::Value(value))
            .map(|e| format!("{} ({})", e.instance_path(), e.kind().keyword()))
            .collect())
    }

    /// What the listing schema finds wrong with one listing: `location (keyword)` each.
    fn problems(&self, vehicle: &Vehicle) -> Vec<String> {
        let value = vehicle.clone().into_value();
        self.listing
            .iter_errors(Node::Value(&value))
            .map(|e| format!("{} ({})", e.instance_path(), e.kind().keyword()))
            .collect()
    }

    /// The listing schema by key, when it was taken apart.
    #[cfg(test)]
    pub(super) fn by_key(&self) -> Option<&ByKey> {
        self.by_key.as_ref()
    }
}

/// A listing schema by key.
pub(super) struct ByKey {
    /// Each key's checks (every subschema the schema applies to that key's value, together).
    checks: HashMap<Box<str>, Check, foldhash::fast::RandomState>,
    required: Box<[Box<str>]>,
}

/// What a listing schema asks of one key's value.
struct Check {
    validator: Validator<Page>,
    /// What the key's subschemas say of a text or a whole number, when each of them is of the
    /// kind [`Simple::read`] knows.
    simple: Option<Simple>,
}

impl Check {
    fn is_valid(&self, value: &Field, body: &str) -> bool {
        self.simple
            .as_ref()
            .and_then(|simple| simple.verdict(value, body))
            .unwrap_or_else(|| self.validator.is_valid(Node::of_field(value, body)))
    }
}

/// Subschemas of only `type`, `enum` (of strings) and whole-number bounds, all of them holding,
/// as what they say of the values programs make most: a text and a whole number.
#[derive(Debug, PartialEq)]
struct Simple {
    /// A text may pass (`type` names `string`, or there is no `type`).
    text: bool,
    /// A whole number may pass (`type` names `integer` or `number`, or there is no `type`).
    whole: bool,
    /// The texts `enum` allows (every `enum` holding: the words they share). A number is none.
    words: Option<Box<[Box<str>]>>,
    /// The whole numbers the bounds allow, inclusive (an exclusive bound moved by one); they say
    /// nothing of a text.
    min: i64,
    max: i64,
}

impl Simple {
    /// What nothing restricts.
    const ANY: Simple = Simple {
        text: true,
        whole: true,
        words: None,
        min: i64::MIN,
        max: i64::MAX,
    };

    /// What `schema` says, as a restriction of `self` (both must hold); `None` when it holds a
    /// keyword besides these (annotations aside), or one of these in a form not settled here.
    fn read(mut self, schema: &Value) -> Option<Simple> {
        for (keyword, value) in schema.as_object()? {
            match keyword.as_str() {
                "type" => {
                    let names: Vec<&str> = match value {
                        Value::String(name) => vec![name],
                        Value::Array(names) => {
                            names.iter().map(Value::as_str).collect::<Option<_>>()?
                        }
                        _ => return None,
                    };
                    self.text &= names.contains(&"string");
                    self.whole &= names.contains(&"integer") || names.contains(&"number");
                }
                "enum" => {
                    let words = value.as_array()?.iter().map(Value::as_str);
                    let words: Vec<&str> = words.collect::<Option<_>>()?;
                    let shared = match &self.words {
                        None => words.iter().map(|w| Box::from(*w)).collect(),
                        Some(held) => held
                            .iter()
                            .filter(|w| words.contains(&&***w))
                            .cloned()
                            .collect(),
                    };
                    self.words = Some(shared);
                }
                "minimum" => self.min = self.min.max(value.as_i64()?),
                "maximum" => self.max = self.max.min(value.as_i64()?),
                "exclusiveMinimum" => self.min = self.min.max(value.as_i64()?.checked_add(1)?),
                "exclusiveMaximum" => self.max = self.max.min(value.as_i64()?.checked_sub(1)?),
                k if ANNOTATIONS.contains(&k) && k != "$defs" => {}
                _ => return None,
            }
        }
        Some(self)
    }

    /// Whether `value` passes; `None` for a value other than a text or a whole number, which
    /// the validator settles.
    #[inline]
    fn verdict(&self, value: &Field, body: &str) -> Option<bool> {
        match value {
            Field::Text(text) => Some(
                self.text
                    && self.words.as_ref().is_none_or(|words| {
                        let text = text.as_str(body);
                        words.iter().any(|w| **w == *text)
                    }),
            ),
            Field::Num(n) => {
                let n = n.as_i64()?;
                Some(self.whole && self.words.is_none() && (self.min..=self.max).contains(&n))
            }
            Field::List(_) | Field::Json(_) => None,
        }
    }
}

/// What a plain listing schema says, read from its text.
#[derive(Default)]
struct Parts {
    /// Each key with the subschemas applied to its value: where each is (a URI) and its text.
    properties: Vec<(String, Vec<(String, Value)>)>,
    required: Vec<String>,
}

impl ByKey {
    /// The schema at `pointer` of the file at `uri` by key; `None` when it is not of the plain
    /// kind. An error when a key's checks do not compile.
    fn of(
        uri: &str,
        pointer: &str,
        files: &HashMap<String, Value>,
        compile: Compile<'_>,
    ) -> Result<Option<ByKey>, String> {
        let mut parts = Parts::default();
        if read_plain(uri, pointer, files, &mut parts, 0).is_none() {
            return Ok(None);
        }
        let mut checks =
            HashMap::with_capacity_and_hasher(parts.properties.len(), Default::default());
        for (key, subschemas) in parts.properties {
            let simple = subschemas
                .iter()
                .try_fold(Simple::ANY, |simple, (_, schema)| simple.read(schema));
            // A subschema that names nothing is compiled as it stands: through a `$ref` each
            // value would pay for the reference too.
            let parts: Vec<Value> = subschemas
                .into_iter()
                .map(|(uri, schema)| {
                    if names_nothing(&schema) {
                        schema
                    } else {
                        json!({ "$ref": uri })
                    }
                })
                .collect();
            let schema = match <[Value; 1]>::try_from(parts) {
                Ok([one]) => one,
                Err(parts) => json!({ "allOf": parts }),
            };
            let check = Check {
                validator: compile(&schema)?,
                simple,
            };
            checks.insert(key.into_boxed_str(), check);
        }
        Ok(Some(ByKey {
            checks,
            required: parts.required.into_iter().map(Into::into).collect(),
        }))
    }

    /// The checks of each key of `shape`, found once for the records of that shape.
    fn plan<'a>(&'a self, shape: &'a Arc<Shape>) -> Plan<'a> {
        let mut checks = [None; MAX_KEYS];
        for (slot, key) in checks.iter_mut().zip(shape.keys()) {
            *slot = self.checks.get(key);
        }
        let mut required = 0;
        let mut lacks_required = false;
        for name in &self.required {
            match shape.keys().position(|k| k == &**name) {
                Some(at) => required |= 1 << at,
                None => lacks_required = true,
            }
        }
        Plan {
            shape,
            checks,
            required,
            lacks_required,
        }
    }
}

/// The checks for the records of one shape.
struct Plan<'a> {
    shape: &'a Arc<Shape>,
    /// By the shape's key positions.
    checks: [Option<&'a Check>; MAX_KEYS],
    /// The required keys' positions, one bit each.
    required: u64,
    /// A required key the shape has not: every record fails.
    lacks_required: bool,
}

impl Plan<'_> {
    fn is_valid(&self, record: &Record) -> bool {
        if self.lacks_required || record.blank() & self.required != 0 {
            return false;
        }
        let mut members = record.members();
        while let Some((at, value)) = members.next_slot() {
            if let Some(check) = self.checks[at]
                && !check.is_valid(value, record.body())
            {
                return false;
            }
        }
        true
    }
}

/// Keywords that check nothing.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "$defs",
    "title",
    "description",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Reads the schema at `pointer` of the file at `uri` into `parts`; `None` when it says
/// anything but which keys are required and what each key's value must be.
fn read_plain(
    uri: &str,
    pointer: &str,
    files: &HashMap<String, Value>,
    parts: &mut Parts,
    depth: u32,
) -> Option<()> {
    if depth > 16 {
        return None;
    }
    let schema = files.get(uri)?.pointer(pointer)?;
    let schema = match schema {
        Value::Bool(true) => return Some(()),
        Value::Object(schema) => schema,
        _ => return None,
    };
    for (keyword, value) in schema {
        match keyword.as_str() {
            k if ANNOTATIONS.contains(&k) => {}
            // A file's own name; anywhere else it would move the base of its `$ref`s.
            "$id" if pointer.is_empty() && value.as_str() == Some(uri) => {}
            "type" if value == "object" || *value == json!(["object"]) => {}
            "additionalProperties" if *value == Value::Bool(true) => {}
            "properties" => {
                for key in value.as_object()?.keys() {
                    // Keys a URI fragment holds as they are (no escaping to get wrong).
                    if key.is_empty()
                        || !key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        return None;
                    }
                    let at = format!("{uri}#{pointer}/properties/{key}");
                    let schema = (at, value[key].clone());
                    match parts.properties.iter_mut().find(|(k, _)| k == key) {
                        Some((_, subschemas)) => subschemas.push(schema),
                        None => parts.properties.push((key.clone(), vec![schema])),
                    }
                }
            }
            "required" => {
                for name in value.as_array()? {
                    let name = name.as_str()?;
                    if !parts.required.iter().any(|r| r == name) {
                        parts.required.push(name.to_owned());
                    }
                }
            }
            "allOf" => {
                for i in 0..value.as_array()?.len() {
                    read_plain(
                        uri,
                        &format!("{pointer}/allOf/{i}"),
                        files,
                        parts,
                        depth + 1,
                    )?;
                }
            }
            "$ref" => {
                let (file, fragment) = value
                    .as_str()?
                    .split_once('#')
                    .unwrap_or((value.as_str()?, ""));
                if !(fragment.is_empty() || fragment.starts_with('/')) {
                    return None;
                }
                let target = match file {
                    "" => uri.to_owned(),
                    f if f.contains(':') => f.to_owned(),
                    f => format!("{}{f}", &uri[..=uri.rfind('/')?]),
                };
                read_plain(&target, fragment, files, parts, depth + 1)?;
            }
            _ => return None,
        }
    }
    Some(())
}

/// Whether `schema` holds no keyword that names or points at a schema (`$ref`, `$id`, ...):
/// it means the same wherever it is compiled.
fn names_nothing(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.iter().all(|(k, v)| {
            !matches!(
                k.as_str(),
                "$ref"
                    | "$dynamicRef"
                    | "$recursiveRef"
                    | "$id"
                    | "$anchor"
                    | "$dynamicAnchor"
                    | "$recursiveAnchor"
            ) && names_nothing(v)
        }),
        Value::Array(items) => items.iter().all(names_nothing),
        _ => true,
    }
}

/// The registry and options the gateway compiles its schemas with, for [`SearchPages::new`].
pub(super) fn compiler(
    registry: &Registry<'_>,
) -> impl Fn(&Value) -> Result<Validator<Page>, String> {
    move |schema: &Value| {
        jsonschema::options_for::<Page>()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .with_registry(registry)
            .build(schema)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const URI: &str = "https://aap-gateway.invalid/schemas/t.json";

    /// Each key with where its subschemas are, and the required keys.
    type Read = (Vec<(String, Vec<String>)>, Vec<String>);

    /// What [`read_plain`] reads of `schema` (with `other.json` beside it), or `None`.
    fn parts(schema: Value) -> Option<Read> {
        let other = json!({
            "$id": "https://aap-gateway.invalid/schemas/other.json",
            "type": "object",
            "properties": { "a": { "type": "string" } },
            "$defs": { "b": { "properties": { "b": true }, "required": ["b"] } }
        });
        let files = HashMap::from([
            (URI.to_owned(), schema),
            (
                "https://aap-gateway.invalid/schemas/other.json".to_owned(),
                other,
            ),
        ]);
        let mut parts = Parts::default();
        read_plain(URI, "", &files, &mut parts, 0)?;
        let properties = parts.properties.into_iter();
        let uris = |subschemas: Vec<(String, Value)>| subschemas.into_iter().map(|s| s.0).collect();
        Some((
            properties.map(|(k, s)| (k, uris(s))).collect(),
            parts.required,
        ))
    }

    #[test]
    fn the_search_listing_schema_is_taken_apart_by_key() {
        let schemas = crate::schema::loaded();
        let by_key = schemas.search_pages.by_key().expect("taken apart");
        assert_eq!(&*by_key.required, [Box::from("status")]);
        for key in [
            "vin",
            "year",
            "condition",
            "status",
            "price",
            "photos",
            "updated_at",
        ] {
            assert!(by_key.checks.contains_key(key), "{key}");
        }
        assert!(!by_key.checks.contains_key("x_dealer_code"));
    }

    #[test]
    fn a_key_named_in_several_branches_gets_each_branchs_checks_and_refs_are_followed() {
        let (properties, required) = parts(json!({
            "$id": URI,
            "title": "t",
            "allOf": [
                { "$ref": "other.json" },
                { "$ref": "other.json#/$defs/b" },
                { "properties": { "a": { "minLength": 2 } }, "required": ["a", "b"] }
            ],
            "additionalProperties": true
        }))
        .expect("plain");
        let other = "https://aap-gateway.invalid/schemas/other.json";
        assert_eq!(
            properties,
            [
                (
                    "a".to_owned(),
                    vec![
                        format!("{other}#/properties/a"),
                        format!("{URI}#/allOf/2/properties/a"),
                    ]
                ),
                (
                    "b".to_owned(),
                    vec![format!("{other}#/$defs/b/properties/b")]
                ),
            ]
        );
        assert_eq!(required, ["b", "a"]);
    }

    #[test]
    fn a_schema_that_checks_more_than_each_member_is_used_whole() {
        let whole = [
            json!({ "additionalProperties": false }),
            json!({ "additionalProperties": { "type": "string" } }),
            json!({ "patternProperties": { "^x_": { "type": "string" } } }),
            json!({ "unevaluatedProperties": false }),
            json!({ "minProperties": 1 }),
            json!({ "propertyNames": { "maxLength": 3 } }),
            json!({ "dependentRequired": { "a": ["b"] } }),
            json!({ "type": ["object", "null"] }),
            json!({ "if": { "required": ["a"] }, "then": { "required": ["b"] } }),
            json!({ "anyOf": [{ "required": ["a"] }, { "required": ["b"] }] }),
            json!({ "allOf": [{ "not": { "required": ["a"] } }] }),
            json!({ "allOf": [{ "$id": "elsewhere.json", "properties": { "a": true } }] }),
            json!({ "$ref": "#anchor" }),
            json!({ "$ref": "missing.json" }),
            json!({ "properties": { "a b": { "type": "string" } } }),
            json!({ "properties": { "a~1": { "type": "string" } } }),
            json!({ "required": "a" }),
            json!(false),
        ];
        for schema in whole {
            assert_eq!(parts(schema.clone()), None, "{schema}");
        }
        assert!(parts(json!(true)).is_some());
        assert!(parts(json!({ "type": "object", "$comment": "c" })).is_some());
    }

    #[test]
    fn the_listing_keys_of_plain_kinds_are_settled_without_the_validator() {
        let schemas = crate::schema::loaded();
        let by_key = schemas.search_pages.by_key().expect("taken apart");
        let simple = |key: &str| by_key.checks[key].simple.as_ref();
        let text = Simple {
            whole: false,
            ..Simple::ANY
        };
        assert_eq!(simple("make"), Some(&text));
        assert_eq!(simple("rooftop"), Some(&text));
        let year = Simple {
            text: false,
            min: 1900,
            max: 2100,
            ..Simple::ANY
        };
        assert_eq!(simple("year"), Some(&year));
        let words = ["available", "intransit", "pending"].map(Box::from);
        assert_eq!(
            simple("status").and_then(|s| s.words.as_deref()),
            Some(&words[..])
        );
        // A pattern, a format, a reference: the validator's.
        for key in ["vin", "updated_at", "photos", "condition"] {
            assert_eq!(simple(key), None, "{key}");
        }
    }

    #[test]
    fn keywords_beyond_the_simple_ones_leave_a_key_to_the_validator() {
        for schema in [
            json!({ "type": "string", "minLength": 1 }),
            json!({ "type": "string", "format": "uri" }),
            json!({ "enum": ["a", 1] }),
            json!({ "minimum": 0.5 }),
            json!({ "exclusiveMinimum": i64::MAX }),
            json!({ "exclusiveMaximum": i64::MIN }),
            json!({ "type": "string", "$defs": { "x": false } }),
            json!({ "const": "a" }),
            json!(true),
        ] {
            assert_eq!(Simple::ANY.read(&schema), None, "{schema}");
        }
        assert_eq!(
            Simple::ANY.read(&json!({ "description": "d" })),
            Some(Simple::ANY)
        );
    }

    /// Schemas of the simple keywords, and of their near misses, in any combination.
    fn simple_schema() -> impl Strategy<Value = Value> {
        let names = prop::sample::subsequence(
            vec!["string", "integer", "number", "null", "boolean", "array"],
            1..4,
        );
        let kind = prop_oneof![
            Just(None),
            prop::sample::select(vec!["string", "integer", "number", "null"])
                .prop_map(|n| Some(json!(n))),
            names.prop_map(|n| Some(json!(n))),
        ];
        let words = prop::sample::subsequence(vec!["", "a", "new", "used", "available"], 1..4);
        let bound = prop_oneof![
            3 => Just(None),
            4 => (-3i64..3).prop_map(|n| Some(json!(n))),
            1 => prop::sample::select(vec![json!(i64::MIN), json!(i64::MAX), json!(0.5)])
                .prop_map(Some),
        ];
        let bounds = [bound.clone(), bound.clone(), bound.clone(), bound];
        (kind, prop::option::weighted(0.75, words), bounds).prop_map(|(kind, words, bounds)| {
            let mut schema = serde_json::Map::new();
            schema.insert("description".into(), json!("d"));
            if let Some(kind) = kind {
                schema.insert("type".into(), kind);
            }
            if let Some(words) = words {
                schema.insert("enum".into(), json!(words));
            }
            let names = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
            for (name, bound) in names.into_iter().zip(bounds) {
                if let Some(bound) = bound {
                    schema.insert(name.into(), bound);
                }
            }
            Value::Object(schema)
        })
    }

    /// The values a record's field holds: texts, numbers (whole, past `i64`, fractional, whole
    /// as floats), lists, other JSON.
    fn field() -> impl Strategy<Value = Field> {
        use crate::protocol::vehicle::Text;
        prop_oneof![
            prop::sample::select(vec!["", "a", "new", "b", "available"])
                .prop_map(|t| Field::Text(Text::Owned(t.to_owned()))),
            (-4i64..4).prop_map(|n| Field::Num(n.into())),
            prop::sample::select(vec![
                json!(i64::MIN),
                json!(i64::MAX),
                json!(u64::MAX),
                json!(2.0),
                json!(-0.5),
            ])
            .prop_map(|n| match n {
                Value::Number(n) => Field::Num(n),
                _ => unreachable!(),
            }),
            Just(Field::List(Box::new([Text::Owned("a".to_owned())]))),
            Just(Field::Json(Box::new(json!(null)))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// A key's simple checks settle a value only as the validator would.
        #[test]
        fn what_the_simple_checks_settle_the_validator_says_too(
            schemas in proptest::collection::vec(simple_schema(), 1..4),
            value in field(),
        ) {
            // A key's subschemas, together (as a key named in several `allOf` branches gets).
            let schema = json!({ "allOf": schemas });
            // Compiled as the gateway compiles a key's checks.
            static REGISTRY: std::sync::LazyLock<Registry<'static>> =
                std::sync::LazyLock::new(|| Registry::new().prepare().expect("registry"));
            let validator = compiler(&REGISTRY)(&schema).expect("compiles");
            let expected = validator.is_valid(Node::of_field(&value, ""));
            let simple = schemas.iter().try_fold(Simple::ANY, |simple, s| simple.read(s));
            let check = Check { validator, simple };
            prop_assert_eq!(check.is_valid(&value, ""), expected, "{} {:?}", schema, value);
            // And a text or a whole number is settled without the validator.
            if let Some(simple) = &check.simple {
                let plain = matches!(&value, Field::Text(_))
                    || matches!(&value, Field::Num(n) if n.is_i64());
                prop_assert_eq!(simple.verdict(&value, "").is_some(), plain);
            }
        }
    }
}
