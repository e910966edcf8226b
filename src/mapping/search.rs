//! Feed-mode inventory: AAP `inventory.search` and `inventory.facets` answered in the gateway.
//!
//! Some dealer systems can only dump their whole inventory as a feed. In `mode: feed` the
//! mapping fetches it, turns every record into an AAP `Vehicle` and adds each to an
//! [`InventoryBuilder`], which builds one immutable [`Inventory`] per refresh; every search and
//! facets call then runs here, in memory, without I/O. Proxy-mode skills complete searches
//! through [`Inventory::new`] over [`Listing`]s. [`matches`] reads the same rules one vehicle
//! at a time: the reference the column-wise search is tested against (here and in
//! `tests/skills.rs`), not a path requests take.
//!
//! # Cost model
//!
//! For each vehicle the builder computes what a search reads (trimmed lower-case text, parsed
//! numbers, the effective `vehicle_type`, the `updated_at` instant, the free-text haystack, all
//! strings in one buffer), drops listings that may never be served, and files the rest into
//! columns at once: term values interned into per-field id columns, numbers into dense columns,
//! VIN / stock / haystack into one string buffer per column. No per-listing key survives the
//! build. [`InventoryBuilder::finish`] pre-sorts once for every sort field and order (19 `u32`
//! index lists, sorted on integer keys after one tie-break ranking). A search then tests the
//! filters column by column into one match bitmap (list filters are id look-ups, ranges two
//! float comparisons; listing strings are read only for `vin`, `stock` and `query`), counts it,
//! and walks the pre-sorted list only until the page is full: no sorting, no per-listing
//! allocation. Vehicles are kept shared (`Arc<Value>`, proxy pages) or packed (feeds, see
//! [`Packed`]) and unpacked only for the page. Facets count the same bitmap over the id columns.
//!
//! # Semantics (docs/protocol.md §Search semantics)
//!
//! - **Servable listings**: only `status` exactly `available`, `intransit` or `pending`; anything
//!   else (missing, `null`, `sold`, `Available`) is never returned, counted nor faceted.
//! - **Filters**: AND across keys, OR within a list. Text filters (`make`, `model`, `trim`,
//!   `transmission`, `fuel`, `driveline`, `body`, `exterior_color`, `interior_color`,
//!   `charge_port`, `rooftops`→`rooftop`) compare trimmed and lower-cased, whole value (no
//!   substring). `condition` and `vehicle_type` are exact enum values; a listing without
//!   `vehicle_type` is a `car`. `vin` is exact but case-insensitive, `stock` is byte-exact.
//! - **Ranges** are inclusive and need the field: a listing lacking it (e.g. no `mileage` under
//!   `mileage_max`) does not match. Prices are `price` only (docs/protocol.md §Pricing and fees):
//!   `list_price`/`msrp` never stand in, so unpriced listings never match `price_min`/`price_max`.
//! - **`dc_fast_charge`**: `true` keeps listings whose `dc_fast_charge` is `true`; `false` keeps
//!   every other listing (`false` or absent — "no known DC fast charge").
//! - **`query`**: every whitespace-separated term must occur (case-insensitive substring) in
//!   year, make, model, trim, body, exterior_color, fuel, features and description. Terms never
//!   span two fields. A blank query is no constraint.
//! - Decisions where AAP is silent: an **empty filter list** (`"make": []`) is no constraint,
//!   like an absent key; a **blank text value** on a listing (`"trim": "  "`) counts as absent; a
//!   value of the wrong JSON type on a listing counts as absent (e.g. a string `price`); an
//!   unparseable `updated_at` counts as absent; filter values of the wrong type are ignored
//!   (requests are schema-validated before they get here).
//! - **Pagination**: `skip` defaults to 0 and is echoed; `limit` defaults to [`DEFAULT_LIMIT`]
//!   and is clamped to 1..=[`MAX_LIMIT`]; the page echoes the effective limit. Skipping past
//!   the end gives no vehicles and the full `total`.
//! - **Sorting**: listings lacking the sort value come last in both orders; strings compare
//!   trimmed and lower-cased; `updated_at` compares as an instant; ties break by `stock`
//!   (case-insensitive) then `vin`, both ascending with missing last, then by feed position, so
//!   the order is total and pages are stable. **Default order** (no `sort`): the same
//!   tie-break, i.e. `stock` ascending, then `vin`, then feed position.
//! - **Facets**: term values group case-insensitively (text fields; the enum fields and years
//!   group exactly) and show the most common trimmed spelling in the whole servable inventory
//!   (ties: the smallest in byte order), so a value reads the same whatever the filters. Each
//!   array is sorted by count descending, then value ascending. A term facet key is emitted
//!   whenever the servable inventory has any value for it (an empty array under filters that
//!   exclude them all, so the key set does not depend on the filter); a range facet
//!   only when a matching listing has the field. `vehicle_types` counts a missing type as `car`
//!   and `dc_fast_charge` counts a missing flag as `"false"` (emitted only when some listing
//!   carries the flag), both mirroring the filters: each facet count equals the `total` of a
//!   search adding that value as a filter. `price_range` covers priced listings only.

use std::cmp::Ordering;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::packed::Packed;

/// The interning maps of a build see every listing's values: a fast hash (seeded per process).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Page size when the request gives none (docs/protocol.md §Pagination and totals).
pub const DEFAULT_LIMIT: usize = 20;
/// Hard cap on the page size; larger requested limits are clamped and the effective one echoed.
pub const MAX_LIMIT: usize = 100;
/// The only `status` values a listing may have to be returned or counted (docs/protocol.md
/// §Listing status).
pub const SERVABLE_STATUSES: [&str; 3] = ["available", "intransit", "pending"];

/// Free-text fields compared trimmed and lower-cased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    Make,
    Model,
    Trim,
    Transmission,
    Fuel,
    Driveline,
    Body,
    ExteriorColor,
    InteriorColor,
    ChargePort,
    Rooftop,
}

const TEXTS: usize = 11;

impl Text {
    const ALL: [Text; TEXTS] = [
        Text::Make,
        Text::Model,
        Text::Trim,
        Text::Transmission,
        Text::Fuel,
        Text::Driveline,
        Text::Body,
        Text::ExteriorColor,
        Text::InteriorColor,
        Text::ChargePort,
        Text::Rooftop,
    ];

    /// The `Vehicle` property.
    fn field(self) -> &'static str {
        match self {
            Text::Make => "make",
            Text::Model => "model",
            Text::Trim => "trim",
            Text::Transmission => "transmission",
            Text::Fuel => "fuel",
            Text::Driveline => "driveline",
            Text::Body => "body",
            Text::ExteriorColor => "exterior_color",
            Text::InteriorColor => "interior_color",
            Text::ChargePort => "charge_port",
            Text::Rooftop => "rooftop",
        }
    }

    /// The `filters` key.
    fn filter(self) -> &'static str {
        match self {
            Text::Rooftop => "rooftops",
            other => other.field(),
        }
    }
}

/// Numeric fields used by range filters, sorting and range facets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Year,
    Price,
    ListPrice,
    Msrp,
    Mileage,
    DisplacementCc,
    ElectricRangeMi,
}

const NUMS: usize = 7;

impl Num {
    const ALL: [Num; NUMS] = [
        Num::Year,
        Num::Price,
        Num::ListPrice,
        Num::Msrp,
        Num::Mileage,
        Num::DisplacementCc,
        Num::ElectricRangeMi,
    ];

    fn field(self) -> &'static str {
        match self {
            Num::Year => "year",
            Num::Price => "price",
            Num::ListPrice => "list_price",
            Num::Msrp => "msrp",
            Num::Mileage => "mileage",
            Num::DisplacementCc => "displacement_cc",
            Num::ElectricRangeMi => "electric_range_mi",
        }
    }
}

/// Range filters: the field and its inclusive lower / upper bound keys.
const RANGE_FILTERS: [(Num, Option<&str>, Option<&str>); 5] = [
    (Num::Year, Some("year_min"), Some("year_max")),
    (Num::Price, Some("price_min"), Some("price_max")),
    (Num::Mileage, None, Some("mileage_max")),
    (
        Num::ElectricRangeMi,
        Some("electric_range_mi_min"),
        Some("electric_range_mi_max"),
    ),
    (
        Num::DisplacementCc,
        Some("displacement_cc_min"),
        Some("displacement_cc_max"),
    ),
];

/// Range facets, in the order of docs/protocol.md §Facets.
const RANGE_FACETS: [(Num, &str); 5] = [
    (Num::Price, "price_range"),
    (Num::Mileage, "mileage_range"),
    (Num::Year, "year_range"),
    (Num::DisplacementCc, "displacement_cc_range"),
    (Num::ElectricRangeMi, "electric_range_mi_range"),
];

/// Everything a search reads from one vehicle, computed once.
#[derive(Debug, Clone)]
struct Keys {
    servable: bool,
    num: [Option<f64>; NUMS],
    dc_fast_charge: Option<bool>,
    /// Unix nanoseconds.
    updated_at: Option<i128>,
    /// The listing's strings, one after the other (one allocation per listing): see [`Slot`].
    strs: String,
    spans: [Option<(u32, u32)>; SLOTS],
}

/// Where [`Keys`] keeps each string: the text fields trimmed and lower-cased at
/// `0..TEXTS`, their trimmed spellings (what facets show) at `TEXTS..2 * TEXTS`, then these.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// As given.
    Condition = 2 * TEXTS as isize,
    /// As given; `car` when absent.
    VehicleType,
    /// Trimmed, upper-cased; absent when blank.
    Vin,
    /// As given.
    Stock,
    /// Trimmed, lower-cased, for sorting; absent when blank.
    StockKey,
    /// Lower-cased `query` haystack, one field per line.
    Haystack,
    /// As given.
    Status,
}

const SLOTS: usize = Slot::Status as usize + 1;

impl Keys {
    fn of(vehicle: &Value) -> Keys {
        let str_of = |key: &str| vehicle.get(key).and_then(Value::as_str);
        let status = str_of("status");
        let mut keys = Keys {
            servable: status.is_some_and(|s| SERVABLE_STATUSES.contains(&s)),
            num: Num::ALL.map(|n| vehicle.get(n.field()).and_then(Value::as_f64)),
            dc_fast_charge: vehicle.get("dc_fast_charge").and_then(Value::as_bool),
            updated_at: str_of("updated_at")
                .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
                .map(OffsetDateTime::unix_timestamp_nanos),
            strs: String::with_capacity(256),
            spans: [None; SLOTS],
        };
        for t in Text::ALL {
            if let Some(s) = str_of(t.field()) {
                keys.put(t as usize, s.trim(), Case::Lower);
                keys.put(TEXTS + t as usize, s.trim(), Case::AsIs);
            }
        }
        let mut put = |slot: Slot, s: Option<&str>, case: Case| {
            if let Some(s) = s {
                keys.put(slot as usize, s, case);
            }
        };
        put(Slot::Condition, str_of("condition"), Case::AsIs);
        put(
            Slot::VehicleType,
            Some(str_of("vehicle_type").unwrap_or("car")),
            Case::AsIs,
        );
        put(Slot::Vin, str_of("vin").map(str::trim), Case::Upper);
        put(Slot::Stock, str_of("stock"), Case::AsIs);
        put(Slot::StockKey, str_of("stock").map(str::trim), Case::Lower);
        put(Slot::Status, status, Case::AsIs);
        keys.put_haystack(vehicle);
        // Blank text keys count as absent (a blank stock is still a stock, exactly as given).
        for slot in (0..TEXTS).chain([Slot::Vin as usize, Slot::StockKey as usize]) {
            if keys.spans[slot].is_some_and(|(start, end)| start == end) {
                keys.spans[slot] = None;
            }
        }
        keys
    }

    /// Appends `s` in `case` as the string of `slot`. (Past 4 GiB of one listing's strings one
    /// is left out: no vehicle gets there under `max_response_bytes`.)
    fn put(&mut self, slot: usize, s: &str, case: Case) {
        let Ok(start) = u32::try_from(self.strs.len()) else {
            return;
        };
        match case {
            Case::AsIs => self.strs.push_str(s),
            Case::Lower if s.is_ascii() => {
                self.strs.push_str(s);
                if let Some(tail) = self.strs.get_mut(start as usize..) {
                    tail.make_ascii_lowercase();
                }
            }
            Case::Upper if s.is_ascii() => {
                self.strs.push_str(s);
                if let Some(tail) = self.strs.get_mut(start as usize..) {
                    tail.make_ascii_uppercase();
                }
            }
            Case::Lower => self.strs.push_str(&s.to_lowercase()),
            Case::Upper => self.strs.push_str(&s.to_uppercase()),
        }
        match (u32::try_from(self.strs.len()), self.spans.get_mut(slot)) {
            (Ok(end), Some(span)) => *span = Some((start, end)),
            _ => self.strs.truncate(start as usize),
        }
    }

    /// The text `query` terms are looked for in, lower-cased, one field per line so that a
    /// term (which never contains whitespace) cannot match across two fields.
    fn put_haystack(&mut self, vehicle: &Value) {
        let mut text = String::new();
        let mut push = |part: &str| {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(part);
        };
        if let Some(Value::Number(year)) = vehicle.get("year") {
            push(&year.to_string());
        }
        for key in ["make", "model", "trim", "body", "exterior_color", "fuel"] {
            if let Some(s) = vehicle.get(key).and_then(Value::as_str) {
                push(s);
            }
        }
        if let Some(features) = vehicle.get("features").and_then(Value::as_array) {
            features
                .iter()
                .filter_map(Value::as_str)
                .for_each(&mut push);
        }
        if let Some(s) = vehicle.get("description").and_then(Value::as_str) {
            push(s);
        }
        // Lower-cased as a whole: `str::to_lowercase` reads context (a final sigma).
        self.put(Slot::Haystack as usize, &text, Case::Lower);
    }

    fn str(&self, slot: usize) -> Option<&str> {
        let (start, end) = (*self.spans.get(slot)?)?;
        self.strs.get(start as usize..end as usize)
    }

    fn text(&self, field: Text) -> Option<&str> {
        self.str(field as usize)
    }

    /// The trimmed text of a text field, if it is a string (even a blank one).
    fn spelling(&self, field: Text) -> Option<&str> {
        self.str(TEXTS + field as usize)
    }

    fn slot(&self, slot: Slot) -> Option<&str> {
        self.str(slot as usize)
    }

    fn vehicle_type(&self) -> &str {
        self.slot(Slot::VehicleType).unwrap_or("car")
    }

    fn haystack(&self) -> &str {
        self.slot(Slot::Haystack).unwrap_or("")
    }

    fn num(&self, field: Num) -> Option<f64> {
        self.num[field as usize]
    }
}

/// How [`Keys::put`] writes a string.
#[derive(Debug, Clone, Copy)]
enum Case {
    AsIs,
    Lower,
    Upper,
}

/// `Some(n)` for a non-negative integral JSON number (`20` and `20.0` alike).
fn whole(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
            .map(|f| f as u64)
    })
}

/// One vehicle of the cached feed with its pre-computed search keys.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The AAP `Vehicle`, shared with every page that returns it.
    pub vehicle: Arc<Value>,
    keys: Keys,
}

impl Listing {
    /// Pre-processes one AAP `Vehicle` (as produced by the feed mapping).
    pub fn new(vehicle: Value) -> Listing {
        Listing::from_arc(Arc::new(vehicle))
    }

    /// Like [`Listing::new`] for a vehicle already shared.
    pub fn from_arc(vehicle: Arc<Value>) -> Listing {
        let keys = Keys::of(&vehicle);
        Listing { vehicle, keys }
    }

    /// Whether the listing's `status` lets it be returned at all (docs/protocol.md §Listing
    /// status).
    pub fn is_servable(&self) -> bool {
        self.keys.servable
    }
}

/// A compiled `filters` object (docs/protocol.md §Filters), reusable across many vehicles.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    text: Vec<(Text, Box<[Box<str>]>)>,
    condition: Option<Box<[Box<str>]>>,
    vehicle_type: Option<Box<[Box<str>]>>,
    ranges: Vec<(Num, Option<f64>, Option<f64>)>,
    dc_fast_charge: Option<bool>,
    vin: Option<Box<str>>,
    stock: Option<Box<str>>,
    query: Box<[Box<str>]>,
}

/// The string items of a non-empty list filter; `None` (no constraint) when absent or empty.
fn list<'a>(filters: &'a Value, key: &str) -> Option<impl Iterator<Item = &'a str>> {
    let items = filters.get(key)?.as_array()?;
    (!items.is_empty()).then(|| items.iter().filter_map(Value::as_str))
}

impl Filters {
    /// Compiles an AAP `filters` object; a value that is not an object means no constraint.
    pub fn new(filters: &Value) -> Filters {
        let text = Text::ALL
            .iter()
            .filter_map(|&t| {
                let values = list(filters, t.filter())?;
                Some((t, values.map(|v| v.trim().to_lowercase().into()).collect()))
            })
            .collect();
        let exact = |key: &str| list(filters, key).map(|values| values.map(Box::from).collect());
        let bound = |key: Option<&str>| key.and_then(|k| filters.get(k)).and_then(Value::as_f64);
        let ranges = RANGE_FILTERS
            .iter()
            .filter_map(|&(num, min, max)| {
                let (min, max) = (bound(min), bound(max));
                (min.is_some() || max.is_some()).then_some((num, min, max))
            })
            .collect();
        let str_of = |key: &str| filters.get(key).and_then(Value::as_str);
        Filters {
            text,
            condition: exact("condition"),
            vehicle_type: exact("vehicle_type"),
            ranges,
            dc_fast_charge: filters.get("dc_fast_charge").and_then(Value::as_bool),
            vin: str_of("vin").map(|v| v.trim().to_uppercase().into()),
            stock: str_of("stock").map(Box::from),
            query: str_of("query")
                .map(|q| q.to_lowercase().split_whitespace().map(Box::from).collect())
                .unwrap_or_default(),
        }
    }

    /// True when the filters constrain nothing.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.condition.is_none()
            && self.vehicle_type.is_none()
            && self.ranges.is_empty()
            && self.dc_fast_charge.is_none()
            && self.vin.is_none()
            && self.stock.is_none()
            && self.query.is_empty()
    }

    /// Whether `vehicle` may be served (its `status`) and satisfies every filter.
    pub fn matches(&self, vehicle: &Value) -> bool {
        self.accepts(&Keys::of(vehicle))
    }

    /// Every rule against one vehicle's keys (the reference reading; `Inventory::matched` is the
    /// column-wise one).
    fn accepts(&self, k: &Keys) -> bool {
        k.servable
            && any_exact(self.condition.as_deref(), k.slot(Slot::Condition))
            && any_exact(self.vehicle_type.as_deref(), Some(k.vehicle_type()))
            && self
                .text
                .iter()
                .all(|(field, values)| any_exact(Some(values), k.text(*field)))
            && self
                .ranges
                .iter()
                .all(|&(num, min, max)| k.num(num).is_some_and(|x| in_range(x, min, max)))
            && self.dc_fast_charge_accepts(k.dc_fast_charge)
            && self.identity_and_query_accept(k)
    }

    fn dc_fast_charge_accepts(&self, value: Option<bool>) -> bool {
        match self.dc_fast_charge {
            None => true,
            Some(true) => value == Some(true),
            Some(false) => value != Some(true),
        }
    }

    /// Whether `vin`, `stock` or `query` is set (the rules that read strings of the listing).
    fn reads_strings(&self) -> bool {
        self.vin.is_some() || self.stock.is_some() || !self.query.is_empty()
    }

    fn identity_and_query_accept(&self, k: &Keys) -> bool {
        self.identity_and_query_accept_strs(k.slot(Slot::Vin), k.slot(Slot::Stock), k.haystack())
    }

    /// The `vin`, `stock` and `query` rules on a listing's trimmed upper-case VIN, stock as
    /// given and `query` haystack.
    fn identity_and_query_accept_strs(
        &self,
        vin: Option<&str>,
        stock: Option<&str>,
        haystack: &str,
    ) -> bool {
        let one = |filter: &Option<Box<str>>, value: Option<&str>| {
            filter.as_deref().is_none_or(|f| value == Some(f))
        };
        one(&self.vin, vin)
            && one(&self.stock, stock)
            && self.query.iter().all(|term| haystack.contains(&**term))
    }
}

/// Inclusive bounds, each optional.
fn in_range(x: f64, min: Option<f64>, max: Option<f64>) -> bool {
    min.is_none_or(|min| x >= min) && max.is_none_or(|max| x <= max)
}

/// True when `allowed` is no constraint or holds `value`.
fn any_exact(allowed: Option<&[Box<str>]>, value: Option<&str>) -> bool {
    allowed.is_none_or(|list| value.is_some_and(|v| list.iter().any(|a| **a == *v)))
}

/// Whether one vehicle may be served and matches an AAP `filters` object, rule by rule: the
/// reference reading tests hold [`Inventory::search`] to. Compile a [`Filters`] once instead
/// when checking many vehicles.
pub fn matches(filters: &Value, vehicle: &Value) -> bool {
    Filters::new(filters).matches(vehicle)
}

/// `sort.field` values (docs/protocol.md §Sorting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortField {
    Price,
    ListPrice,
    Msrp,
    Mileage,
    Year,
    Make,
    Model,
    Stock,
    UpdatedAt,
}

/// Every sort field AAP defines (docs/protocol.md §Sorting).
pub fn sort_fields() -> impl Iterator<Item = &'static str> {
    SortField::ALL.into_iter().map(SortField::name)
}

impl SortField {
    const ALL: [SortField; 9] = [
        SortField::Price,
        SortField::ListPrice,
        SortField::Msrp,
        SortField::Mileage,
        SortField::Year,
        SortField::Make,
        SortField::Model,
        SortField::Stock,
        SortField::UpdatedAt,
    ];

    fn parse(name: &str) -> Option<SortField> {
        SortField::ALL.into_iter().find(|f| f.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            SortField::Price => "price",
            SortField::ListPrice => "list_price",
            SortField::Msrp => "msrp",
            SortField::Mileage => "mileage",
            SortField::Year => "year",
            SortField::Make => "make",
            SortField::Model => "model",
            SortField::Stock => "stock",
            SortField::UpdatedAt => "updated_at",
        }
    }
}

/// Present values before missing ones whatever the order; present values in `descending` or
/// ascending order.
fn present_first<T>(
    a: Option<T>,
    b: Option<T>,
    descending: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) if descending => cmp(&b, &a),
        (Some(a), Some(b)) => cmp(&a, &b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Term facets, in the order of docs/protocol.md §Facets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TermFacet {
    Text(Text, &'static str),
    Years,
    Conditions,
    DcFastCharge,
    VehicleTypes,
    Statuses,
}

const TERM_FACETS: [TermFacet; 16] = [
    TermFacet::Text(Text::Make, "makes"),
    TermFacet::Text(Text::Model, "models"),
    TermFacet::Text(Text::Trim, "trims"),
    TermFacet::Years,
    TermFacet::Conditions,
    TermFacet::Text(Text::Transmission, "transmissions"),
    TermFacet::Text(Text::Fuel, "fuels"),
    TermFacet::DcFastCharge,
    TermFacet::Text(Text::ChargePort, "charge_ports"),
    TermFacet::Text(Text::Driveline, "drivelines"),
    TermFacet::Text(Text::Body, "bodies"),
    TermFacet::VehicleTypes,
    TermFacet::Text(Text::ExteriorColor, "exterior_colors"),
    TermFacet::Text(Text::InteriorColor, "interior_colors"),
    TermFacet::Text(Text::Rooftop, "rooftops"),
    TermFacet::Statuses,
];

/// How a listing's facet value groups: integers exactly, strings by their key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum GroupKey {
    Int(i64),
    Str(Box<str>),
}

/// A [`GroupKey`] borrowed from a listing's keys.
#[derive(Debug, Clone, Copy)]
enum GroupRef<'a> {
    Int(i64),
    Str(&'a str),
}

impl TermFacet {
    fn key(self) -> &'static str {
        match self {
            TermFacet::Text(_, key) => key,
            TermFacet::Years => "years",
            TermFacet::Conditions => "conditions",
            TermFacet::DcFastCharge => "dc_fast_charge",
            TermFacet::VehicleTypes => "vehicle_types",
            TermFacet::Statuses => "statuses",
        }
    }

    /// The listing's group and its spelling (`None`: shown as the group key itself).
    fn entry(self, k: &Keys) -> Option<(GroupRef<'_>, Option<&str>)> {
        let exact = |s| (GroupRef::Str(s), None);
        match self {
            TermFacet::Text(text, _) => Some((GroupRef::Str(k.text(text)?), k.spelling(text))),
            TermFacet::Years => k
                .num(Num::Year)
                .filter(|y| y.fract() == 0.0 && y.abs() < 1e15)
                .map(|y| (GroupRef::Int(y as i64), None)),
            TermFacet::Conditions => k.slot(Slot::Condition).map(exact),
            TermFacet::DcFastCharge => Some(exact(if k.dc_fast_charge == Some(true) {
                "true"
            } else {
                "false"
            })),
            TermFacet::VehicleTypes => Some(exact(k.vehicle_type())),
            TermFacet::Statuses => k.slot(Slot::Status).map(exact),
        }
    }
}

/// What an [`InventoryBuilder`] reads from one vehicle, computed where the vehicle is (e.g. on
/// another thread), so that the vehicle itself need not travel to the builder.
#[derive(Debug)]
pub struct Prepared(Keys);

impl Prepared {
    pub fn of(vehicle: &Value) -> Prepared {
        Prepared(Keys::of(vehicle))
    }
}

/// One interned facet value.
#[derive(Debug, Clone)]
struct Group {
    value: Value,
    /// Position in value-ascending order.
    rank: u32,
}

/// A listing without a value in a term column while the column is being built.
const NO_GROUP: u32 = u32::MAX;

/// A term column while listings are added one by one: each listing's group, interned.
#[derive(Debug)]
struct TermBuilder {
    facet: TermFacet,
    ids: Vec<u32>,
    keys: Vec<GroupKey>,
    strs: HashMap<Box<str>, u32>,
    ints: HashMap<i64, u32>,
    /// Per group: how often each trimmed spelling occurs.
    spellings: Vec<HashMap<Box<str>, usize>>,
    /// Some listing carries `dc_fast_charge` (the facet is emitted only then).
    flagged: bool,
}

impl TermBuilder {
    fn new(facet: TermFacet) -> TermBuilder {
        TermBuilder {
            facet,
            ids: Vec::new(),
            keys: Vec::new(),
            strs: HashMap::default(),
            ints: HashMap::default(),
            spellings: Vec::new(),
            flagged: false,
        }
    }

    fn push(&mut self, k: &Keys) {
        self.flagged |= k.dc_fast_charge.is_some();
        let id = self
            .facet
            .entry(k)
            .and_then(|(key, spelling)| self.intern(key, spelling));
        self.ids.push(id.unwrap_or(NO_GROUP));
    }

    /// The group's id (new groups are added), its spelling counted; `None` past `u32` groups.
    fn intern(&mut self, key: GroupRef<'_>, spelling: Option<&str>) -> Option<u32> {
        let known = match key {
            GroupRef::Str(s) => self.strs.get(s),
            GroupRef::Int(i) => self.ints.get(&i),
        };
        let id = match known {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.keys.len())
                    .ok()
                    .filter(|&id| id < NO_GROUP)?;
                match key {
                    GroupRef::Str(s) => {
                        self.strs.insert(s.into(), id);
                        self.keys.push(GroupKey::Str(s.into()));
                    }
                    GroupRef::Int(i) => {
                        self.ints.insert(i, id);
                        self.keys.push(GroupKey::Int(i));
                    }
                }
                self.spellings.push(HashMap::default());
                id
            }
        };
        if let (Some(spelling), Some(counts)) = (spelling, self.spellings.get_mut(id as usize)) {
            match counts.get_mut(spelling) {
                Some(count) => *count += 1,
                None => {
                    counts.insert(spelling.into(), 1);
                }
            }
        }
        Some(id)
    }

    fn finish(self) -> TermColumn {
        let TermBuilder {
            facet,
            ids,
            keys,
            strs,
            spellings,
            flagged,
            ..
        } = self;
        let values: Vec<Value> = keys
            .iter()
            .zip(&spellings)
            .map(|(key, counts)| {
                let most_common = counts
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                    .map(|(spelling, _)| &**spelling);
                match (key, most_common) {
                    (_, Some(spelling)) => Value::from(spelling),
                    (GroupKey::Int(i), None) => Value::from(*i),
                    (GroupKey::Str(s), None) => Value::from(&**s),
                }
            })
            .collect();
        let mut by_value: Vec<usize> = (0..keys.len()).collect();
        by_value.sort_by(|&a, &b| {
            keys[a]
                .cmp(&keys[b])
                .then_with(|| values[a].as_str().cmp(&values[b].as_str()))
        });
        let mut ranks = vec![0; keys.len()];
        for (rank, &id) in by_value.iter().enumerate() {
            ranks[id] = rank as u32;
        }
        // Below `NO_GROUP`: `intern` never hands out more ids.
        let absent = keys.len() as u32;
        let emitted = match facet {
            TermFacet::DcFastCharge => flagged,
            _ => !keys.is_empty(),
        };
        TermColumn {
            facet,
            ids: ids
                .into_iter()
                .map(|id| if id == NO_GROUP { absent } else { id })
                .collect(),
            groups: values
                .into_iter()
                .zip(ranks)
                .map(|(value, rank)| Group { value, rank })
                .collect(),
            index: strs,
            emitted,
        }
    }
}

/// A term facet over the whole inventory: each listing's group, and the groups.
#[derive(Debug, Clone)]
struct TermColumn {
    facet: TermFacet,
    /// Per listing: index into `groups`, or `groups.len()` when the listing has no value (so
    /// that filtering and counting index flat arrays without branching).
    ids: Box<[u32]>,
    groups: Box<[Group]>,
    /// String group key → index into `groups`, to compile filters into ids.
    index: HashMap<Box<str>, u32>,
    /// Whether the key is emitted at all.
    emitted: bool,
}

impl TermColumn {
    /// Per id (the "no value" slot included): whether a list filter of `values` accepts it.
    fn accepts(&self, values: &[Box<str>]) -> Box<[bool]> {
        let mut accepts = vec![false; self.groups.len() + 1];
        for value in values {
            if let Some(slot) = self
                .index
                .get(&**value)
                .and_then(|&id| accepts.get_mut(id as usize))
            {
                *slot = true;
            }
        }
        accepts.into_boxed_slice()
    }

    /// The value-ascending rank of listing `i`'s group (`None`: no value).
    fn rank(&self, i: usize) -> Option<u32> {
        let id = *self.ids.get(i)?;
        self.groups.get(id as usize).map(|g| g.rank)
    }

    /// `[{value, count}]` over the `matched` listings, count desc then value asc.
    fn counts(&self, matched: &[bool]) -> Value {
        // One slot per group plus the "no value" one, which is never emitted; four interleaved
        // counter sets so that runs of one value do not serialize on a single counter.
        let slots = self.groups.len() + 1;
        let mut lanes = vec![0usize; 4 * slots];
        let ids = self.ids.chunks_exact(4).zip(matched.chunks_exact(4));
        for (ids, matched) in ids {
            for (lane, (&id, &m)) in ids.iter().zip(matched).enumerate() {
                if let Some(count) = lanes.get_mut(lane * slots + id as usize) {
                    *count += usize::from(m);
                }
            }
        }
        let rest = self.ids.len() - self.ids.len() % 4;
        for (&id, &m) in self.ids.iter().zip(matched).skip(rest) {
            if let Some(count) = lanes.get_mut(id as usize) {
                *count += usize::from(m);
            }
        }
        let counts =
            (0..slots).map(|id| (0..4).map(|lane| lanes[lane * slots + id]).sum::<usize>());
        let mut entries: Vec<(&Group, usize)> = self
            .groups
            .iter()
            .zip(counts)
            .filter(|&(_, count)| count > 0)
            .collect();
        entries.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.rank.cmp(&b.0.rank)));
        entries
            .into_iter()
            .map(|(group, count)| {
                let mut entry = Map::new();
                entry.insert("value".into(), group.value.clone());
                entry.insert("count".into(), count.into());
                Value::Object(entry)
            })
            .collect()
    }
}

/// One optional string per listing, all in one buffer (no allocation per listing).
#[derive(Debug, Clone, Default)]
struct StrColumn {
    text: String,
    /// Per listing: the byte range in `text`; [`StrColumn::ABSENT`] for none.
    spans: Vec<(u32, u32)>,
}

impl StrColumn {
    const ABSENT: (u32, u32) = (u32::MAX, u32::MAX);

    /// Adds the next listing's string. (Past 4 GiB of text a string counts as absent: no feed
    /// gets there under `max_response_bytes`.)
    fn push(&mut self, s: Option<&str>) {
        let span = s.and_then(|s| {
            let start = u32::try_from(self.text.len()).ok()?;
            let end = u32::try_from(self.text.len() + s.len())
                .ok()
                .filter(|&end| end < u32::MAX)?;
            self.text.push_str(s);
            Some((start, end))
        });
        self.spans.push(span.unwrap_or(Self::ABSENT));
    }

    fn get(&self, i: usize) -> Option<&str> {
        let &(start, end) = self.spans.get(i)?;
        if (start, end) == Self::ABSENT {
            return None;
        }
        self.text.get(start as usize..end as usize)
    }

    fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.spans.shrink_to_fit();
    }
}

/// How the inventory holds a vehicle: as parsed (the pages of a proxied upstream, shared with
/// the page that fetched them) or packed (a feed's whole stock: a fraction of the memory).
#[derive(Debug, Clone)]
pub enum Stored {
    Shared(Arc<Value>),
    Packed(Packed),
}

impl Stored {
    /// The vehicle, for a page.
    pub fn vehicle(&self) -> Arc<Value> {
        match self {
            Stored::Shared(v) => Arc::clone(v),
            Stored::Packed(p) => Arc::new(p.unpack()),
        }
    }
}

/// A JSON number, integral when the value is.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

/// One page of search results (the AAP `inventory.search.response` `data` without facets).
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// Matching listings across all pages.
    pub total: usize,
    /// Echo of the requested skip.
    pub skip: usize,
    /// The effective limit (after default and clamp).
    pub limit: usize,
    /// The page, in the requested order.
    pub vehicles: Vec<Arc<Value>>,
}

/// The cached feed, built once per refresh and then only read.
///
/// Everything is a column over the servable listings (feed order): the vehicles themselves,
/// the interned term ids, the numbers, the strings the `vin`, `stock` and `query` filters read,
/// and the pre-sorted orders; no per-listing allocation besides the vehicle.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// Servable vehicles, in feed order; every index below points into it.
    vehicles: Box<[Stored]>,
    /// Listings dropped for their status.
    excluded: usize,
    /// Listing indices in the default order.
    default_order: Box<[u32]>,
    /// Listing indices in each sort order, at `2 * field + descending`.
    sorted: Vec<Box<[u32]>>,
    /// Term facets in the order of docs/protocol.md §Facets; also the interned columns text and
    /// enum filters test.
    terms: Vec<TermColumn>,
    /// Numeric columns, by [`Num`]; NaN (which JSON cannot carry) marks a missing value, so
    /// that a range test is two branch-free comparisons.
    nums: Vec<Box<[f64]>>,
    /// 0 absent, 1 false, 2 true.
    dc_fast_charge: Box<[u8]>,
    /// Trimmed, upper-cased VINs (`vin` filter).
    vin: StrColumn,
    /// Stock numbers as given (`stock` filter).
    stock: StrColumn,
    /// `query` haystacks.
    haystack: StrColumn,
}

/// Builds an [`Inventory`] one vehicle at a time, so that a feed's vehicles never have to be
/// held as parsed values all at once.
#[derive(Debug)]
pub struct InventoryBuilder {
    vehicles: Vec<Stored>,
    excluded: usize,
    terms: Vec<TermBuilder>,
    nums: [Vec<f64>; NUMS],
    dc_fast_charge: Vec<u8>,
    updated_at: Vec<Option<i128>>,
    vin: StrColumn,
    stock: StrColumn,
    stock_key: StrColumn,
    haystack: StrColumn,
}

impl Default for InventoryBuilder {
    fn default() -> Self {
        InventoryBuilder::new()
    }
}

impl InventoryBuilder {
    pub fn new() -> InventoryBuilder {
        InventoryBuilder {
            vehicles: Vec::new(),
            excluded: 0,
            terms: TERM_FACETS.iter().map(|&f| TermBuilder::new(f)).collect(),
            nums: Default::default(),
            dc_fast_charge: Vec::new(),
            updated_at: Vec::new(),
            vin: StrColumn::default(),
            stock: StrColumn::default(),
            stock_key: StrColumn::default(),
            haystack: StrColumn::default(),
        }
    }

    /// A builder for about as many listings as `like` has (the inventory a refresh replaces):
    /// the columns are reserved once, with a little room, instead of grown by doubling, which
    /// would hold up to twice their size while the previous inventory is still in memory.
    pub fn sized_like(like: &Inventory) -> InventoryBuilder {
        let room = |n: usize| n + n / 32;
        let n = room(like.len());
        let column = |c: &StrColumn| StrColumn {
            text: String::with_capacity(room(c.text.len())),
            spans: Vec::with_capacity(n),
        };
        let mut terms: Vec<TermBuilder> =
            TERM_FACETS.iter().map(|&f| TermBuilder::new(f)).collect();
        for term in &mut terms {
            term.ids.reserve_exact(n);
        }
        InventoryBuilder {
            vehicles: Vec::with_capacity(n),
            excluded: 0,
            terms,
            nums: std::array::from_fn(|_| Vec::with_capacity(n)),
            dc_fast_charge: Vec::with_capacity(n),
            updated_at: Vec::with_capacity(n),
            vin: column(&like.vin),
            stock: column(&like.stock),
            stock_key: column(&like.stock),
            haystack: column(&like.haystack),
        }
    }

    /// Adds `vehicle` (kept as `stored`); a listing whose status may not be served is dropped.
    pub fn push(&mut self, vehicle: &Value, stored: Stored) {
        self.push_keys(Keys::of(vehicle), stored);
    }

    /// [`InventoryBuilder::push`] of a vehicle [prepared](Prepared) elsewhere.
    pub fn push_prepared(&mut self, prepared: Prepared, stored: Stored) {
        self.push_keys(prepared.0, stored);
    }

    fn push_keys(&mut self, k: Keys, stored: Stored) {
        // Listing indices are `u32`s.
        if !k.servable || self.vehicles.len() >= u32::MAX as usize {
            self.excluded += 1;
            return;
        }
        for term in &mut self.terms {
            term.push(&k);
        }
        for (column, num) in self.nums.iter_mut().zip(k.num) {
            column.push(num.unwrap_or(f64::NAN));
        }
        self.dc_fast_charge
            .push(k.dc_fast_charge.map_or(0, |dc| 1 + u8::from(dc)));
        self.updated_at.push(k.updated_at);
        self.vin.push(k.slot(Slot::Vin));
        self.stock.push(k.slot(Slot::Stock));
        self.stock_key.push(k.slot(Slot::StockKey));
        self.haystack.push(Some(k.haystack()));
        self.vehicles.push(stored);
    }

    /// Number of servable listings added so far.
    pub fn len(&self) -> usize {
        self.vehicles.len()
    }

    /// True when no servable listing was added.
    pub fn is_empty(&self) -> bool {
        self.vehicles.is_empty()
    }

    /// Sorts and freezes the columns.
    pub fn finish(self) -> Inventory {
        self.finish_on(1)
    }

    /// [`InventoryBuilder::finish`], sorting the orders on up to `threads` threads (a first
    /// feed load, while no buyer waits for a core).
    pub fn finish_on(self, threads: usize) -> Inventory {
        let InventoryBuilder {
            vehicles,
            excluded,
            terms,
            nums,
            dc_fast_charge,
            updated_at,
            mut vin,
            mut stock,
            stock_key,
            mut haystack,
        } = self;
        let n = vehicles.len();
        let terms: Vec<TermColumn> = terms.into_iter().map(TermBuilder::finish).collect();
        let nums: Vec<Box<[f64]>> = nums.into_iter().map(Vec::into_boxed_slice).collect();

        // Tie-break (and default order): `stock`, then `vin`, ascending, missing last, then
        // feed position. `tie[i]` is listing i's place in that order, so that every sort below
        // compares two integers instead of strings, and the order is total.
        let mut by_stock: Vec<u32> = (0..n as u32).collect();
        by_stock.sort_by(|&a, &b| {
            present_first(
                stock_key.get(a as usize),
                stock_key.get(b as usize),
                false,
                Ord::cmp,
            )
        });
        let mut stock_rank = vec![0u32; n];
        let mut rank = 0;
        for pair in by_stock.windows(2) {
            if stock_key.get(pair[0] as usize) != stock_key.get(pair[1] as usize) {
                rank += 1;
            }
            stock_rank[pair[1] as usize] = rank;
        }
        drop(by_stock);
        let mut default_order: Vec<u32> = (0..n as u32).collect();
        default_order.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            stock_rank[a]
                .cmp(&stock_rank[b])
                .then_with(|| present_first(vin.get(a), vin.get(b), false, Ord::cmp))
        });
        let mut tie = vec![0u32; n];
        for (place, &i) in default_order.iter().enumerate() {
            tie[i as usize] = place as u32;
        }

        let text_rank = |text: Text| {
            terms
                .iter()
                .find(|c| matches!(c.facet, TermFacet::Text(t, _) if t == text))
        };
        let orders: Vec<(SortField, bool)> = SortField::ALL
            .iter()
            .flat_map(|&field| [false, true].map(|descending| (field, descending)))
            .collect();
        let sort = |&(field, descending): &(SortField, bool)| -> Box<[u32]> {
            // Per listing: its value as an unsigned key in ascending order, if it has one.
            let key = |i: usize| -> Option<u128> {
                let num = |num: Num| {
                    nums.get(num as usize)
                        .and_then(|c| c.get(i))
                        .filter(|x| !x.is_nan())
                        .map(|&x| u128::from(f64_key(x)))
                };
                let text = |t: Text| text_rank(t).and_then(|c| c.rank(i)).map(u128::from);
                match field {
                    SortField::Price => num(Num::Price),
                    SortField::ListPrice => num(Num::ListPrice),
                    SortField::Msrp => num(Num::Msrp),
                    SortField::Mileage => num(Num::Mileage),
                    SortField::Year => num(Num::Year),
                    SortField::Make => text(Text::Make),
                    SortField::Model => text(Text::Model),
                    SortField::Stock => stock_key.get(i).map(|_| u128::from(stock_rank[i])),
                    SortField::UpdatedAt => updated_at[i].map(|t| (t as u128) ^ (1 << 127)),
                }
            };
            // Present values first in both orders, then the tie-break.
            let mut keyed: Vec<(bool, u128, u32)> = (0..n)
                .map(|i| match key(i) {
                    Some(k) if descending => (false, !k, tie[i]),
                    Some(k) => (false, k, tie[i]),
                    None => (true, 0, tie[i]),
                })
                .collect();
            // `tie` is unique, so the keys are: an unstable sort gives the one order.
            keyed.sort_unstable();
            keyed
                .into_iter()
                .map(|(_, _, place)| default_order[place as usize])
                .collect()
        };
        let sorted = sort_all(&orders, threads, &sort);
        vin.shrink_to_fit();
        stock.shrink_to_fit();
        haystack.shrink_to_fit();
        Inventory {
            vehicles: vehicles.into_boxed_slice(),
            excluded,
            default_order: default_order.into_boxed_slice(),
            sorted,
            terms,
            nums,
            dc_fast_charge: dc_fast_charge.into_boxed_slice(),
            vin,
            stock,
            haystack,
        }
    }
}

/// `sort` of every order, in order; the second half on a thread of its own when `threads` > 1
/// (and the system gives one).
fn sort_all<O: Sync, T: Send>(
    orders: &[O],
    threads: usize,
    sort: &(impl Fn(&O) -> T + Sync),
) -> Vec<T> {
    if threads > 1 && orders.len() > 1 {
        let (first, second) = orders.split_at(orders.len() / 2);
        let parallel = std::thread::scope(|scope| {
            let helper = std::thread::Builder::new()
                .name("feed-sorting".to_owned())
                .spawn_scoped(scope, || second.iter().map(sort).collect::<Vec<T>>())
                .ok()?;
            let mut all: Vec<T> = first.iter().map(sort).collect();
            all.extend(helper.join().ok()?);
            Some(all)
        });
        if let Some(all) = parallel {
            return all;
        }
    }
    orders.iter().map(sort).collect()
}

/// `x` as an unsigned integer in the order of `f64::total_cmp`.
fn f64_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

impl Inventory {
    /// Builds the searchable inventory; listings whose status may not be served are dropped.
    pub fn new(listings: Vec<Listing>) -> Inventory {
        let mut builder = InventoryBuilder::new();
        for Listing { vehicle, keys } in listings {
            builder.push_keys(keys, Stored::Shared(vehicle));
        }
        builder.finish()
    }

    /// Number of servable listings.
    pub fn len(&self) -> usize {
        self.vehicles.len()
    }

    /// True when no listing can be served.
    pub fn is_empty(&self) -> bool {
        self.vehicles.is_empty()
    }

    /// Number of listings dropped because of their `status` (logged with each feed load).
    pub fn excluded(&self) -> usize {
        self.excluded
    }

    /// Answers a validated AAP `inventory.search.request` object (`filters`, `pagination`,
    /// `sort`; `type` and `privacy` are not read).
    pub fn search(&self, request: &Value) -> Page {
        let pagination = |key: &str| {
            request
                .get("pagination")
                .and_then(|p| p.get(key))
                .and_then(whole)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let skip = pagination("skip").unwrap_or(0);
        let limit = pagination("limit")
            .unwrap_or(DEFAULT_LIMIT)
            .clamp(1, MAX_LIMIT);
        let order = self.order(request.get("sort"));
        let filters = request.get("filters").map(Filters::new).unwrap_or_default();
        let vehicle = |&i: &u32| self.vehicles.get(i as usize).map(Stored::vehicle);
        if filters.is_empty() {
            return Page {
                total: order.len(),
                skip,
                limit,
                vehicles: order
                    .iter()
                    .skip(skip)
                    .take(limit)
                    .filter_map(vehicle)
                    .collect(),
            };
        }
        // Pass 1, column-wise: which listings match, and how many.
        let matched = self.matched(&filters);
        let total = matched.iter().filter(|&&m| m).count();
        // Pass 2, in the requested order: only as far as the page reaches.
        let vehicles = if skip >= total {
            Vec::new()
        } else {
            order
                .iter()
                .filter(|&&i| matched.get(i as usize).copied().unwrap_or(false))
                .skip(skip)
                .take(limit)
                .filter_map(vehicle)
                .collect()
        };
        Page {
            total,
            skip,
            limit,
            vehicles,
        }
    }

    /// AAP `Facets` (docs/protocol.md §Facets) over the servable listings matching `filters`
    /// (`None`: all).
    pub fn facets(&self, filters: Option<&Value>) -> Value {
        let filters = filters.map(Filters::new).unwrap_or_default();
        let matched = self.matched(&filters);
        let mut facets = Map::new();
        for column in self.terms.iter().filter(|c| c.emitted) {
            facets.insert(column.facet.key().into(), column.counts(&matched));
        }
        for (num, key) in RANGE_FACETS {
            let Some(column) = self.nums.get(num as usize) else {
                continue;
            };
            let values = column
                .iter()
                .zip(&matched)
                .filter(|&(x, &m)| m && !x.is_nan())
                .map(|(&x, _)| x);
            let range = values.fold(None, |range: Option<(f64, f64)>, x| {
                Some(range.map_or((x, x), |(min, max)| (min.min(x), max.max(x))))
            });
            if let Some((min, max)) = range {
                let mut range = Map::new();
                range.insert("min".into(), number(min));
                range.insert("max".into(), number(max));
                facets.insert(key.into(), Value::Object(range));
            }
        }
        Value::Object(facets)
    }

    /// The pre-sorted index list for a request's `sort` (absent or unknown: default order).
    fn order(&self, sort: Option<&Value>) -> &[u32] {
        let field = sort
            .and_then(|s| s.get("field"))
            .and_then(Value::as_str)
            .and_then(SortField::parse);
        let descending = sort.and_then(|s| s.get("order")).and_then(Value::as_str) == Some("desc");
        field
            .and_then(|f| self.sorted.get(2 * f as usize + usize::from(descending)))
            .unwrap_or(&self.default_order)
    }

    fn column(&self, facet: impl Fn(TermFacet) -> bool) -> Option<&TermColumn> {
        self.terms.iter().find(|c| facet(c.facet))
    }

    /// Which servable listings match, column by column over dense arrays (list filters become
    /// sets of interned ids), reading listing strings only for `vin`, `stock` and `query` and
    /// only for listings still in. Same rules as `Filters::accepts`.
    fn matched(&self, filters: &Filters) -> Vec<bool> {
        let mut matched = vec![true; self.vehicles.len()];
        let mut terms = |column: Option<&TermColumn>, values: &[Box<str>]| match column {
            Some(column) => {
                let accepts = column.accepts(values);
                for (m, &id) in matched.iter_mut().zip(column.ids.iter()) {
                    *m &= accepts.get(id as usize).copied().unwrap_or(false);
                }
            }
            // No column: no listing has a value, so none matches.
            None => matched.fill(false),
        };
        for (text, values) in &filters.text {
            let column = self.column(|f| matches!(f, TermFacet::Text(t, _) if t == *text));
            terms(column, values);
        }
        if let Some(values) = &filters.condition {
            terms(self.column(|f| f == TermFacet::Conditions), values);
        }
        if let Some(values) = &filters.vehicle_type {
            terms(self.column(|f| f == TermFacet::VehicleTypes), values);
        }
        for &(num, min, max) in &filters.ranges {
            let (min, max) = (
                min.unwrap_or(f64::NEG_INFINITY),
                max.unwrap_or(f64::INFINITY),
            );
            match self.nums.get(num as usize) {
                Some(column) => {
                    for (m, &x) in matched.iter_mut().zip(column.iter()) {
                        // A missing value is NaN and fails both comparisons.
                        *m &= (x >= min) & (x <= max);
                    }
                }
                None => matched.fill(false),
            }
        }
        if let Some(want) = filters.dc_fast_charge {
            for (m, &dc) in matched.iter_mut().zip(self.dc_fast_charge.iter()) {
                *m &= (dc == 2) == want;
            }
        }
        if filters.reads_strings() {
            for (i, m) in matched.iter_mut().enumerate() {
                *m = *m
                    && filters.identity_and_query_accept_strs(
                        self.vin.get(i),
                        self.stock.get(i),
                        self.haystack.get(i).unwrap_or(""),
                    );
            }
        }
        matched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A servable listing with a stock number, plus `extra` fields.
    fn car(stock: &str, extra: Value) -> Value {
        let mut v = json!({ "stock": stock, "status": "available" });
        if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
            obj.extend(extra);
        }
        v
    }

    fn inventory(vehicles: Vec<Value>) -> Inventory {
        Inventory::new(vehicles.into_iter().map(Listing::new).collect())
    }

    fn stocks(page: &Page) -> Vec<&str> {
        page.vehicles
            .iter()
            .map(|v| v["stock"].as_str().unwrap_or("-"))
            .collect()
    }

    /// Stocks of every match, in order (limit 100).
    fn search_stocks(inv: &Inventory, filters: Value) -> Vec<String> {
        let page = inv.search(
            &json!({ "type": "inventory.search.request", "filters": filters,
                                       "pagination": { "limit": 100 } }),
        );
        stocks(&page).into_iter().map(String::from).collect()
    }

    fn sorted_stocks(inv: &Inventory, field: &str, order: &str) -> Vec<String> {
        let page = inv.search(&json!({ "type": "inventory.search.request",
                                       "sort": { "field": field, "order": order } }));
        stocks(&page).into_iter().map(String::from).collect()
    }

    #[test]
    fn orders_sorted_on_two_threads_are_the_orders_sorted_on_one() {
        // Ties, missing values, negative and fractional prices, odd instants, repeated stocks.
        let listings = || {
            (0..300)
                .map(|i: i64| {
                    let mut v = car(&format!("S{}", i % 37), json!({ "vin": format!("V{i}") }));
                    if i % 3 != 0 {
                        v["price"] = json!((i * 7919 % 101) as f64 - 50.5);
                    }
                    if i % 5 != 0 {
                        v["make"] = json!(["Kia", "kia", "Ford", " BMW"][(i % 4) as usize]);
                        v["updated_at"] =
                            json!(format!("2026-0{}-1{}T10:00:00Z", 1 + i % 9, i % 10));
                    }
                    v["year"] = json!(2000 + i % 7);
                    Listing::new(v)
                })
                .collect::<Vec<_>>()
        };
        let build = |threads| {
            let mut builder = InventoryBuilder::new();
            for Listing { vehicle, keys } in listings() {
                builder.push_keys(keys, Stored::Shared(vehicle));
            }
            builder.finish_on(threads)
        };
        let (one, two) = (build(1), build(2));
        assert_eq!(one.sorted.len(), SortField::ALL.len() * 2);
        assert_eq!(one.sorted, two.sorted);
        assert_eq!(one.default_order, two.default_order);
    }

    #[test]
    fn only_available_intransit_and_pending_listings_are_returned_or_counted() {
        let inv = inventory(vec![
            json!({ "stock": "A", "status": "available" }),
            json!({ "stock": "B", "status": "intransit" }),
            json!({ "stock": "C", "status": "pending" }),
            json!({ "stock": "D", "status": "sold" }),
            json!({ "stock": "E" }),
            json!({ "stock": "F", "status": null }),
            json!({ "stock": "G", "status": "Available" }),
            json!({ "stock": "H", "status": "wholesale" }),
        ]);
        assert_eq!(inv.len(), 3);
        assert_eq!(inv.excluded(), 5);
        let page = inv.search(&json!({ "type": "inventory.search.request" }));
        assert_eq!(page.total, 3);
        assert_eq!(stocks(&page), ["A", "B", "C"]);
        let facets = inv.facets(None);
        assert_eq!(
            facets["statuses"],
            json!([{ "value": "available", "count": 1 }, { "value": "intransit", "count": 1 },
                   { "value": "pending", "count": 1 }])
        );
        assert!(!matches(
            &json!({}),
            &json!({ "stock": "D", "status": "sold" })
        ));
        assert!(!matches(&json!({}), &json!({ "stock": "E" })));
        assert!(matches(
            &json!({}),
            &json!({ "stock": "A", "status": "pending" })
        ));
    }

    #[test]
    fn filters_and_across_keys_and_or_within_a_list() {
        let inv = inventory(vec![
            car(
                "1",
                json!({ "make": "Honda", "condition": "used", "year": 2021 }),
            ),
            car(
                "2",
                json!({ "make": "Toyota", "condition": "cpo", "year": 2022 }),
            ),
            car(
                "3",
                json!({ "make": "Ford", "condition": "used", "year": 2023 }),
            ),
            car(
                "4",
                json!({ "make": "Honda", "condition": "new", "year": 2024 }),
            ),
        ]);
        let cases = [
            (json!({ "make": ["Honda", "Toyota"] }), vec!["1", "2", "4"]),
            (
                json!({ "make": ["Honda", "Toyota"], "condition": ["used", "cpo"] }),
                vec!["1", "2"],
            ),
            (
                json!({ "make": ["Honda"], "condition": ["used"], "year_min": 2022 }),
                vec![],
            ),
            (
                json!({ "condition": ["used"], "year_min": 2022 }),
                vec!["3"],
            ),
            (json!({}), vec!["1", "2", "3", "4"]),
        ];
        for (filters, expected) in cases {
            assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
        }
    }

    #[test]
    fn text_filters_ignore_case_and_surrounding_whitespace_but_match_whole_values() {
        let inv = inventory(vec![
            car("1", json!({ "make": "HONDA", "model": " Civic " })),
            car("2", json!({ "make": "Honda", "model": "Civic Type R" })),
            car("3", json!({ "make": "honda ", "model": "civic" })),
        ]);
        let cases = [
            (json!({ "make": [" honda"] }), vec!["1", "2", "3"]),
            (json!({ "model": ["CIVIC"] }), vec!["1", "3"]),
            (json!({ "model": ["civ"] }), vec![]),
            (json!({ "model": ["civic type r"] }), vec!["2"]),
        ];
        for (filters, expected) in cases {
            assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
        }
    }

    #[test]
    fn each_text_filter_reads_its_own_field() {
        for field in Text::ALL {
            let inv = inventory(vec![
                car("has", json!({ field.field(): "Value X" })),
                car("other", json!({ field.field(): "Value Y" })),
                car("lacks", json!({})),
                car("null", json!({ field.field(): null })),
                car("blank", json!({ field.field(): "   " })),
            ]);
            let filters = json!({ field.filter(): ["value x"] });
            assert_eq!(search_stocks(&inv, filters), ["has"], "{}", field.filter());
            let filters = json!({ field.filter(): ["value x", "VALUE Y"] });
            assert_eq!(
                search_stocks(&inv, filters),
                ["has", "other"],
                "{}",
                field.filter()
            );
        }
    }

    #[test]
    fn rooftops_filter_matches_the_listing_rooftop_and_never_a_null_one() {
        let inv = inventory(vec![
            car("sf", json!({ "rooftop": "Demo Toyota San Francisco" })),
            car("oak", json!({ "rooftop": "Demo Toyota Oakland" })),
            car("single", json!({ "rooftop": null })),
        ]);
        let filters = json!({ "rooftops": ["demo toyota san francisco"] });
        assert_eq!(search_stocks(&inv, filters), ["sf"]);
    }

    #[test]
    fn condition_and_vehicle_type_are_exact_and_a_missing_type_is_a_car() {
        let inv = inventory(vec![
            car("car", json!({ "vehicle_type": "car", "condition": "new" })),
            car("untyped", json!({ "condition": "used" })),
            car(
                "moto",
                json!({ "vehicle_type": "motorcycle", "condition": "cpo" }),
            ),
            car("rv", json!({ "vehicle_type": "rv" })),
        ]);
        let cases = [
            (json!({ "vehicle_type": ["car"] }), vec!["car", "untyped"]),
            (
                json!({ "vehicle_type": ["motorcycle", "rv"] }),
                vec!["moto", "rv"],
            ),
            (json!({ "vehicle_type": ["trailer"] }), vec![]),
            (
                json!({ "condition": ["used", "cpo"] }),
                vec!["moto", "untyped"],
            ),
            (
                json!({ "condition": ["new"], "vehicle_type": ["car"] }),
                vec!["car"],
            ),
        ];
        for (filters, expected) in cases {
            assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
        }
    }

    #[test]
    fn vin_matches_exactly_ignoring_case_and_stock_matches_exactly() {
        let inv = inventory(vec![
            car("T123", json!({ "vin": "1HGCY2F57RA000001" })),
            car("t123", json!({ "vin": "1hgcy2f57ra000002" })),
            car("T1234", json!({})),
        ]);
        let cases = [
            (json!({ "vin": "1HGCY2F57RA000001" }), vec!["T123"]),
            (json!({ "vin": "1HGCY2F57RA000002" }), vec!["t123"]),
            (json!({ "vin": "1HGCY2F57RA00000" }), vec![]),
            (json!({ "stock": "T123" }), vec!["T123"]),
            (json!({ "stock": "t123" }), vec!["t123"]),
            (json!({ "stock": "T12" }), vec![]),
        ];
        for (filters, expected) in cases {
            assert_eq!(search_stocks(&inv, filters.clone()), expected, "{filters}");
        }
    }

    #[test]
    fn range_filters_are_inclusive() {
        let inv = inventory(vec![car(
            "x",
            json!({ "year": 2020, "price": 25000, "mileage": 30000,
                    "electric_range_mi": 250.5, "displacement_cc": 1998 }),
        )]);
        let cases = [
            (json!({ "year_min": 2020, "year_max": 2020 }), true),
            (json!({ "year_min": 2020.0 }), true),
            (json!({ "year_min": 2021 }), false),
            (json!({ "year_max": 2019 }), false),
            (json!({ "price_min": 25000, "price_max": 25000 }), true),
            (json!({ "price_min": 25001 }), false),
            (json!({ "price_max": 24999 }), false),
            (json!({ "mileage_max": 30000 }), true),
            (json!({ "mileage_max": 29999 }), false),
            (json!({ "electric_range_mi_min": 250 }), true),
            (json!({ "electric_range_mi_max": 250 }), false),
            (json!({ "electric_range_mi_min": 251 }), false),
            (
                json!({ "displacement_cc_min": 1998, "displacement_cc_max": 1998 }),
                true,
            ),
            (json!({ "displacement_cc_max": 1997 }), false),
            (json!({ "displacement_cc_min": 1999 }), false),
            (json!({ "price_min": 30000, "price_max": 20000 }), false),
        ];
        for (filters, expected) in cases {
            assert_eq!(
                !search_stocks(&inv, filters.clone()).is_empty(),
                expected,
                "{filters}"
            );
        }
    }

    #[test]
    fn unpriced_vehicles_never_match_a_price_filter() {
        let inv = inventory(vec![
            car("priced", json!({ "price": 20000 })),
            car("list-only", json!({ "list_price": 20000, "msrp": 21000 })),
            car("string-price", json!({ "price": "20000" })),
        ]);
        for filters in [
            json!({ "price_min": 0 }),
            json!({ "price_max": 1_000_000 }),
            json!({ "price_min": 0, "price_max": 1_000_000 }),
        ] {
            assert_eq!(
                search_stocks(&inv, filters.clone()),
                ["priced"],
                "{filters}"
            );
        }
    }

    #[test]
    fn a_listing_lacking_the_field_of_a_range_filter_does_not_match_it() {
        let inv = inventory(vec![car("bare", json!({}))]);
        for key in [
            "year_min",
            "year_max",
            "price_min",
            "price_max",
            "mileage_max",
            "electric_range_mi_min",
            "electric_range_mi_max",
            "displacement_cc_min",
            "displacement_cc_max",
        ] {
            let bound = if key.starts_with("year") { 2000 } else { 0 };
            let filters = json!({ key: bound });
            assert!(search_stocks(&inv, filters).is_empty(), "{key}");
            let filters = json!({ key: if key.starts_with("year") { 2100 } else { 1_000_000 } });
            assert!(search_stocks(&inv, filters).is_empty(), "{key}");
        }
    }

    #[test]
    fn dc_fast_charge_true_keeps_fast_chargers_and_false_keeps_every_other_unit() {
        let inv = inventory(vec![
            car("dc", json!({ "dc_fast_charge": true })),
            car("ac-only", json!({ "dc_fast_charge": false })),
            car("unknown", json!({})),
        ]);
        assert_eq!(
            search_stocks(&inv, json!({ "dc_fast_charge": true })),
            ["dc"]
        );
        assert_eq!(
            search_stocks(&inv, json!({ "dc_fast_charge": false })),
            ["ac-only", "unknown"]
        );
    }

    #[test]
    fn query_needs_every_term_somewhere_in_the_descriptive_fields() {
        let inv = inventory(vec![
            car(
                "civic",
                json!({ "year": 2022, "make": "Honda", "model": "Civic", "trim": "EX",
                        "body": "Sedan", "exterior_color": "Aegean Blue", "fuel": "gas",
                        "features": ["Sunroof", "Apple CarPlay"],
                        "description": "One owner, LEATHER seats.",
                        "notes": "secret-note", "engine": "1.5L turbo" }),
            ),
            car(
                "rav4",
                json!({ "year": 2021, "make": "Toyota", "model": "RAV4 Hybrid" }),
            ),
        ]);
        let cases = [
            ("honda civic", vec!["civic"]),
            ("  CIVIC   2022 ", vec!["civic"]),
            ("sunroof carplay", vec!["civic"]),
            ("leather", vec!["civic"]),
            ("blue sedan ex gas", vec!["civic"]),
            ("hyb", vec!["rav4"]),
            ("202", vec!["civic", "rav4"]),
            ("honda rav4", vec![]),
            ("secret-note", vec![]),
            ("turbo", vec![]),
            ("civic", vec!["civic"]),
            ("hondacivic", vec![]),
            ("", vec!["civic", "rav4"]),
            ("   ", vec!["civic", "rav4"]),
        ];
        for (query, expected) in cases {
            assert_eq!(
                search_stocks(&inv, json!({ "query": query })),
                expected,
                "{query:?}"
            );
        }
    }

    #[test]
    fn an_empty_filter_list_is_no_constraint() {
        let inv = inventory(vec![
            car("1", json!({ "make": "Honda" })),
            car("2", json!({})),
        ]);
        let filters = json!({ "make": [], "condition": [], "vehicle_type": [], "rooftops": [] });
        assert_eq!(search_stocks(&inv, filters), ["1", "2"]);
        // A blank value is a value, and no listing has a blank make.
        assert!(search_stocks(&inv, json!({ "make": [" "] })).is_empty());
    }

    #[test]
    fn pagination_defaults_clamps_and_echoes() {
        let inv = inventory(
            (0..150)
                .map(|i| car(&format!("S{i:03}"), json!({})))
                .collect(),
        );
        let search = |pagination: Value| {
            inv.search(&json!({ "type": "inventory.search.request", "pagination": pagination }))
        };
        // (pagination, echoed skip, effective limit, page length, first stock)
        let cases = [
            (json!(null), 0, 20, 20, Some("S000")),
            (json!({}), 0, 20, 20, Some("S000")),
            (json!({ "skip": 40 }), 40, 20, 20, Some("S040")),
            (json!({ "limit": 5, "skip": 3 }), 3, 5, 5, Some("S003")),
            (json!({ "limit": 20.0 }), 0, 20, 20, Some("S000")),
            (json!({ "limit": 100 }), 0, 100, 100, Some("S000")),
            (json!({ "limit": 1000 }), 0, 100, 100, Some("S000")),
            // Below the schema's minimum of 1: raised to 1, like the proxy path.
            (json!({ "limit": 0 }), 0, 1, 1, Some("S000")),
            (
                json!({ "limit": 101, "skip": 100 }),
                100,
                100,
                50,
                Some("S100"),
            ),
            (json!({ "skip": 149 }), 149, 20, 1, Some("S149")),
            (json!({ "skip": 150 }), 150, 20, 0, None),
            (json!({ "skip": 10_000 }), 10_000, 20, 0, None),
        ];
        for (pagination, skip, limit, len, first) in cases {
            let page = search(pagination.clone());
            assert_eq!(page.total, 150, "{pagination}");
            assert_eq!((page.skip, page.limit), (skip, limit), "{pagination}");
            assert_eq!(page.vehicles.len(), len, "{pagination}");
            assert_eq!(stocks(&page).first().copied(), first, "{pagination}");
        }
        // Same with a filter (the non-fast path).
        let page = inv.search(&json!({ "type": "inventory.search.request",
            "filters": { "query": "", "condition": [], "stock": "S149" },
            "pagination": { "skip": 1 } }));
        assert_eq!((page.total, page.skip, page.vehicles.len()), (1, 1, 0));
    }

    #[test]
    fn missing_values_sort_last_in_both_orders() {
        for field in SortField::ALL {
            let value = |v: i64| -> Value {
                match field {
                    SortField::Make | SortField::Model => json!(format!("m{v}")),
                    SortField::UpdatedAt => json!(format!("2026-01-0{v}T00:00:00Z")),
                    _ => json!(v),
                }
            };
            let with = |stock: &str, v: Option<i64>| {
                let mut vehicle = json!({ "status": "available", "vin": format!("VIN{stock}") });
                if field == SortField::Stock {
                    if let Some(v) = v {
                        vehicle["stock"] = json!(format!("{v}{stock}"));
                    }
                } else {
                    vehicle["stock"] = json!(stock);
                    if let Some(v) = v {
                        vehicle[field.name()] = value(v);
                    }
                }
                vehicle
            };
            let inv = inventory(vec![
                with("a", None),
                with("b", Some(2)),
                with("c", Some(1)),
                with("d", None),
                with("e", Some(3)),
            ]);
            let order = |order: &str| -> Vec<String> {
                let page = inv.search(&json!({ "type": "inventory.search.request",
                    "sort": { "field": field.name(), "order": order } }));
                page.vehicles
                    .iter()
                    .map(|v| v["vin"].as_str().unwrap_or("-").to_owned())
                    .collect()
            };
            assert_eq!(
                order("asc"),
                ["VINc", "VINb", "VINe", "VINa", "VINd"],
                "{}",
                field.name()
            );
            assert_eq!(
                order("desc"),
                ["VINe", "VINb", "VINc", "VINa", "VINd"],
                "{}",
                field.name()
            );
        }
    }

    #[test]
    fn price_sort_uses_the_authoritative_price_only() {
        let inv = inventory(vec![
            car("cheap-list", json!({ "list_price": 1000, "msrp": 1200 })),
            car("p2", json!({ "price": 20000, "list_price": 30000 })),
            car("p1", json!({ "price": 10000 })),
        ]);
        assert_eq!(
            sorted_stocks(&inv, "price", "asc"),
            ["p1", "p2", "cheap-list"]
        );
        assert_eq!(
            sorted_stocks(&inv, "price", "desc"),
            ["p2", "p1", "cheap-list"]
        );
        assert_eq!(
            sorted_stocks(&inv, "list_price", "asc"),
            ["cheap-list", "p2", "p1"]
        );
        assert_eq!(
            sorted_stocks(&inv, "msrp", "desc"),
            ["cheap-list", "p1", "p2"]
        );
    }

    #[test]
    fn strings_sort_case_insensitively() {
        let inv = inventory(vec![
            car("1", json!({ "make": "toyota", "model": "rav4" })),
            car("2", json!({ "make": "BMW", "model": "X5" })),
            car("3", json!({ "make": "Audi", "model": "a4" })),
            car("4", json!({ "make": " chevrolet", "model": "Bolt" })),
        ]);
        assert_eq!(sorted_stocks(&inv, "make", "asc"), ["3", "2", "4", "1"]);
        assert_eq!(sorted_stocks(&inv, "make", "desc"), ["1", "4", "2", "3"]);
        assert_eq!(sorted_stocks(&inv, "model", "asc"), ["3", "4", "1", "2"]);
        let inv = inventory(vec![
            car("b2", json!({})),
            car("A1", json!({})),
            car("a3", json!({})),
            car("B1", json!({})),
        ]);
        assert_eq!(
            sorted_stocks(&inv, "stock", "asc"),
            ["A1", "a3", "B1", "b2"]
        );
        assert_eq!(
            sorted_stocks(&inv, "stock", "desc"),
            ["b2", "B1", "a3", "A1"]
        );
    }

    #[test]
    fn updated_at_sorts_as_an_instant_not_as_a_string() {
        let inv = inventory(vec![
            // 08:00Z
            car(
                "paris",
                json!({ "updated_at": "2026-04-30T10:00:00+02:00" }),
            ),
            // 09:00Z
            car("utc", json!({ "updated_at": "2026-04-30T09:00:00Z" })),
            // 09:30Z
            car("sf", json!({ "updated_at": "2026-04-30T02:30:00-07:00" })),
            // 09:00:00.5Z
            car("frac", json!({ "updated_at": "2026-04-30T09:00:00.5Z" })),
            car("garbage", json!({ "updated_at": "yesterday" })),
        ]);
        assert_eq!(
            sorted_stocks(&inv, "updated_at", "asc"),
            ["paris", "utc", "frac", "sf", "garbage"]
        );
        assert_eq!(
            sorted_stocks(&inv, "updated_at", "desc"),
            ["sf", "frac", "utc", "paris", "garbage"]
        );
    }

    #[test]
    fn ties_break_by_stock_then_vin_ascending_in_both_orders() {
        let v = |stock: Option<&str>, vin: Option<&str>, price: i64| {
            let mut v = json!({ "status": "available", "price": price });
            if let Some(stock) = stock {
                v["stock"] = json!(stock);
            }
            if let Some(vin) = vin {
                v["vin"] = json!(vin);
            }
            v
        };
        let inv = inventory(vec![
            v(None, Some("VIN-B"), 1),
            v(Some("S2"), Some("VIN-A"), 1),
            v(Some("S1"), Some("VIN-Z"), 1),
            v(Some("S1"), Some("VIN-C"), 1),
            v(None, Some("VIN-A"), 1),
            v(None, None, 1),
            v(Some("S0"), None, 2),
        ]);
        let key = |page: &Page| -> Vec<String> {
            page.vehicles
                .iter()
                .map(|v| {
                    format!(
                        "{}/{}",
                        v["stock"].as_str().unwrap_or("-"),
                        v["vin"].as_str().unwrap_or("-")
                    )
                })
                .collect()
        };
        let tied = [
            "S1/VIN-C", "S1/VIN-Z", "S2/VIN-A", "-/VIN-A", "-/VIN-B", "-/-",
        ];
        for order in ["asc", "desc"] {
            let page = inv.search(&json!({ "type": "inventory.search.request",
                "sort": { "field": "price", "order": order } }));
            let keys = key(&page);
            let (ties, rest) = if order == "asc" {
                (&keys[..6], &keys[6..])
            } else {
                (&keys[1..], &keys[..1])
            };
            assert_eq!(ties, tied, "{order}");
            assert_eq!(rest, ["S0/-"], "{order}");
        }
        // Default order (no sort): the tie-break alone.
        let page = inv.search(&json!({ "type": "inventory.search.request" }));
        assert_eq!(
            key(&page),
            [
                "S0/-", "S1/VIN-C", "S1/VIN-Z", "S2/VIN-A", "-/VIN-A", "-/VIN-B", "-/-"
            ]
        );
    }

    #[test]
    fn pages_of_a_sorted_search_are_stable_and_disjoint() {
        let inv = inventory(
            (0..57)
                .map(|i| {
                    car(
                        &format!("S{}", 57 - i),
                        json!({ "price": (i % 4) * 1000, "year": 2020 + i % 3 }),
                    )
                })
                .collect(),
        );
        for sort in [
            json!({ "field": "price", "order": "desc" }),
            json!({ "field": "year", "order": "asc" }),
        ] {
            let all: Vec<String> = {
                let page = inv.search(&json!({ "type": "inventory.search.request", "sort": sort,
                                               "pagination": { "limit": 100 } }));
                stocks(&page).into_iter().map(String::from).collect()
            };
            let paged: Vec<String> = (0..6)
                .flat_map(|p| {
                    let page = inv
                        .search(&json!({ "type": "inventory.search.request", "sort": sort,
                        "pagination": { "skip": p * 10, "limit": 10 } }));
                    stocks(&page)
                        .into_iter()
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(all.len(), 57);
            assert_eq!(paged, all, "{sort}");
        }
    }

    #[test]
    fn term_facets_group_case_insensitively_and_sort_by_count_then_value() {
        let inv = inventory(vec![
            car("1", json!({ "make": "Honda", "year": 2022 })),
            car("2", json!({ "make": "HONDA", "year": 2022 })),
            car("3", json!({ "make": "Honda ", "year": 2021 })),
            car("4", json!({ "make": "Toyota", "year": 2021 })),
            car("5", json!({ "make": "toyota", "year": 2020 })),
            car("6", json!({ "make": "BMW", "year": 2020 })),
            car("7", json!({ "make": "audi", "year": 2020.0 })),
            car("8", json!({ "make": "Audi" })),
        ]);
        let facets = inv.facets(None);
        assert_eq!(
            facets["makes"],
            json!([
                { "value": "Honda", "count": 3 },
                { "value": "Audi", "count": 2 },
                { "value": "Toyota", "count": 2 },
                { "value": "BMW", "count": 1 },
            ])
        );
        assert_eq!(
            facets["years"],
            json!([
                { "value": 2020, "count": 3 },
                { "value": 2021, "count": 2 },
                { "value": 2022, "count": 2 },
            ])
        );
        // Display spellings come from the whole inventory, whatever the filter.
        let facets = inv.facets(Some(&json!({ "stock": "2" })));
        assert_eq!(facets["makes"], json!([{ "value": "Honda", "count": 1 }]));
    }

    #[test]
    fn facets_use_the_aap_value_forms() {
        let inv = inventory(vec![
            car(
                "1",
                json!({ "dc_fast_charge": true, "vehicle_type": "motorcycle" }),
            ),
            car("2", json!({ "dc_fast_charge": false })),
            car("3", json!({})),
            car("4", json!({ "condition": "used", "status": "pending" })),
        ]);
        let facets = inv.facets(None);
        assert_eq!(
            facets["dc_fast_charge"],
            json!([{ "value": "false", "count": 3 }, { "value": "true", "count": 1 }])
        );
        assert_eq!(
            facets["vehicle_types"],
            json!([{ "value": "car", "count": 3 }, { "value": "motorcycle", "count": 1 }])
        );
        assert_eq!(
            facets["conditions"],
            json!([{ "value": "used", "count": 1 }])
        );
        assert_eq!(
            facets["statuses"],
            json!([{ "value": "available", "count": 3 }, { "value": "pending", "count": 1 }])
        );
        // No listing carries the flag: no dc_fast_charge facet at all.
        let facets = inventory(vec![car("1", json!({}))]).facets(None);
        assert_eq!(facets.get("dc_fast_charge"), None);
    }

    #[test]
    fn range_facets_cover_only_listings_with_the_field() {
        let inv = inventory(vec![
            car(
                "1",
                json!({ "price": 30000, "list_price": 5000, "year": 2019, "mileage": 12 }),
            ),
            car(
                "2",
                json!({ "price": 10000, "year": 2024, "electric_range_mi": 250.5 }),
            ),
            car(
                "3",
                json!({ "list_price": 1000, "year": 2015, "electric_range_mi": 100 }),
            ),
            json!({ "stock": "sold", "status": "sold", "price": 1, "displacement_cc": 600 }),
        ]);
        let facets = inv.facets(None);
        assert_eq!(facets["price_range"], json!({ "min": 10000, "max": 30000 }));
        assert_eq!(facets["year_range"], json!({ "min": 2015, "max": 2024 }));
        assert_eq!(facets["mileage_range"], json!({ "min": 12, "max": 12 }));
        assert_eq!(
            facets["electric_range_mi_range"],
            json!({ "min": 100, "max": 250.5 })
        );
        assert_eq!(facets.get("displacement_cc_range"), None);
        // Filtered down to an unpriced listing: no price_range.
        let facets = inv.facets(Some(&json!({ "stock": "3" })));
        assert_eq!(facets.get("price_range"), None);
        assert_eq!(facets.get("mileage_range"), None);
        assert_eq!(facets["year_range"], json!({ "min": 2015, "max": 2015 }));
    }

    #[test]
    fn facets_follow_the_filters_and_keep_the_term_key_set() {
        let inv = inventory(vec![
            car("1", json!({ "make": "Honda", "trim": "EX", "price": 100 })),
            car("2", json!({ "make": "Toyota", "price": 200 })),
            car("3", json!({ "make": "Toyota", "body": "suv" })),
        ]);
        let all = inv.facets(None);
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(
            keys(&all),
            [
                "makes",
                "trims",
                "bodies",
                "vehicle_types",
                "statuses",
                "price_range"
            ]
        );
        let toyota = inv.facets(Some(&json!({ "make": ["toyota"] })));
        assert_eq!(toyota["makes"], json!([{ "value": "Toyota", "count": 2 }]));
        assert_eq!(toyota["trims"], json!([]));
        assert_eq!(toyota["price_range"], json!({ "min": 200, "max": 200 }));
        let none = inv.facets(Some(&json!({ "make": ["Ford"] })));
        assert_eq!(
            keys(&none),
            ["makes", "trims", "bodies", "vehicle_types", "statuses"]
        );
        assert_eq!(none["statuses"], json!([]));
        // An empty inventory has no facets at all.
        assert_eq!(inventory(vec![]).facets(None), json!({}));
    }

    #[test]
    fn total_equals_the_sum_of_counts_of_a_facet_every_listing_has() {
        let inv = inventory(vec![
            car(
                "1",
                json!({ "make": "Honda", "condition": "used", "dc_fast_charge": true }),
            ),
            json!({ "stock": "2", "status": "intransit", "make": "Honda", "vehicle_type": "rv" }),
            json!({ "stock": "3", "status": "pending", "make": "Kia" }),
            json!({ "stock": "4", "status": "sold", "make": "Honda" }),
        ]);
        let sum = |facet: &Value| -> u64 {
            facet
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["count"].as_u64())
                .sum()
        };
        for filters in [
            json!({}),
            json!({ "make": ["honda"] }),
            json!({ "make": ["Ford"] }),
        ] {
            let page =
                inv.search(&json!({ "type": "inventory.search.request", "filters": filters }));
            let facets = inv.facets(Some(&filters));
            for key in ["statuses", "vehicle_types", "dc_fast_charge", "makes"] {
                assert_eq!(sum(&facets[key]), page.total as u64, "{key} {filters}");
            }
        }
    }

    #[test]
    fn matches_applies_the_same_semantics_to_a_single_vehicle() {
        let vehicle = json!({ "status": "available", "make": "Honda ", "price": 20000,
                              "year": 2022, "vin": "1HGCY2F57RA000001" });
        let cases = [
            (json!({}), true),
            (
                json!({ "make": ["HONDA"], "price_max": 20000, "year_min": 2022 }),
                true,
            ),
            (
                json!({ "vin": "1HGCY2F57RA000001", "vehicle_type": ["car"] }),
                true,
            ),
            (json!({ "make": ["Toyota"] }), false),
            (json!({ "mileage_max": 100 }), false),
            (
                json!({ "dc_fast_charge": false, "query": "honda 2022" }),
                true,
            ),
        ];
        for (filters, expected) in cases {
            assert_eq!(matches(&filters, &vehicle), expected, "{filters}");
        }
        let filters = Filters::new(&json!({ "make": ["honda"] }));
        assert!(!filters.is_empty());
        assert!(Filters::new(&json!({ "make": [], "query": " " })).is_empty());
        let sold = json!({ "status": "sold", "make": "Honda" });
        assert!(!filters.matches(&sold));
    }

    #[test]
    fn page_serializes_as_search_response_data() {
        let inv = inventory(vec![car("1", json!({ "price": 1 }))]);
        let page = inv.search(&json!({ "type": "inventory.search.request" }));
        let data = serde_json::to_value(&page).unwrap();
        assert_eq!(
            data,
            json!({ "total": 1, "skip": 0, "limit": 20,
                    "vehicles": [{ "stock": "1", "status": "available", "price": 1 }] })
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn opt<T: std::fmt::Debug + Clone>(
            s: impl Strategy<Value = T>,
        ) -> impl Strategy<Value = Option<T>> {
            prop_oneof![1 => Just(None), 3 => s.prop_map(Some)]
        }

        /// Maybe one of `values`.
        fn pick(values: &[&'static str]) -> impl Strategy<Value = Option<Value>> {
            opt(prop::sample::select(values.to_vec()).prop_map(Value::from))
        }

        /// Maybe a list of `min..max` of `values`.
        fn picks(values: &[&'static str], min: usize) -> impl Strategy<Value = Option<Value>> {
            let one = prop::sample::select(values.to_vec());
            opt(prop::collection::vec(one, min..3).prop_map(Value::from))
        }

        /// Maybe `step` times an integer below `n`.
        fn scaled(n: i64, step: i64) -> impl Strategy<Value = Option<Value>> {
            opt((0..n).prop_map(move |x| Value::from(x * step)))
        }

        /// An object of the fields that are present.
        fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
            let present = fields
                .into_iter()
                .filter_map(|(k, v)| Some((k.to_owned(), v?)));
            Value::Object(present.collect())
        }

        prop_compose! {
            fn vehicle()(
                stock in pick(&["A1", "a1", "B2", "c3", "D4", "e5"]),
                vin in pick(&["1HGCY2F57RA000001", "1HGCY2F57RA000002", "5YJ3E1EA7KF000003"]),
                status in pick(&["available", "intransit", "pending", "sold", "Available"]),
                make in pick(&["Honda", "HONDA", " honda", "Toyota", "Ford", ""]),
                condition in pick(&["new", "used", "cpo"]),
                vehicle_type in pick(&["car", "motorcycle", "rv"]),
                year in opt((2015i64..2026).prop_map(Value::from)),
                price in scaled(50, 1000),
                list_price in scaled(50, 1000),
                mileage in scaled(5, 10_000),
                erange in opt(prop_oneof![
                    (0i64..400).prop_map(Value::from),
                    (0.0f64..400.0).prop_map(Value::from),
                ]),
                dc in opt(any::<bool>().prop_map(Value::from)),
                updated in pick(&[
                    "2026-04-30T10:00:00+02:00",
                    "2026-04-30T09:00:00Z",
                    "2026-04-30T02:30:00-07:00",
                    "not a date",
                ]),
                body in pick(&["suv", "SUV", "sedan"]),
            ) -> Value {
                object(vec![
                    ("stock", stock), ("vin", vin), ("status", status), ("make", make),
                    ("condition", condition), ("vehicle_type", vehicle_type), ("year", year),
                    ("price", price), ("list_price", list_price), ("mileage", mileage),
                    ("electric_range_mi", erange), ("dc_fast_charge", dc),
                    ("updated_at", updated), ("body", body),
                ])
            }
        }

        prop_compose! {
            fn filters()(
                make in picks(&["honda", "Toyota ", "FORD", "Kia"], 0),
                condition in picks(&["new", "used", "cpo"], 1),
                vehicle_type in picks(&["car", "motorcycle", "trailer"], 1),
                year_min in opt((2015i64..2026).prop_map(Value::from)),
                price_max in scaled(50, 1000),
                price_min in scaled(50, 1000),
                mileage_max in scaled(5, 10_000),
                erange_min in scaled(400, 1),
                dc in opt(any::<bool>().prop_map(Value::from)),
                body in picks(&["suv", "Sedan"], 1),
                query in pick(&["honda", "suv 2020", "toy", ""]),
            ) -> Value {
                object(vec![
                    ("make", make), ("condition", condition), ("vehicle_type", vehicle_type),
                    ("year_min", year_min), ("price_max", price_max), ("price_min", price_min),
                    ("mileage_max", mileage_max), ("electric_range_mi_min", erange_min),
                    ("dc_fast_charge", dc), ("body", body), ("query", query),
                ])
            }
        }

        /// An independent, naive reading of the filter rules.
        fn oracle(filters: &Value, v: &Value) -> bool {
            let norm = |s: &str| s.trim().to_lowercase();
            let text = |key: &str| {
                v.get(key)
                    .and_then(Value::as_str)
                    .map(norm)
                    .filter(|s| !s.is_empty())
            };
            let list = |key: &str| {
                filters
                    .get(key)
                    .and_then(Value::as_array)
                    .filter(|a| !a.is_empty())
            };
            let num = |key: &str| v.get(key).and_then(Value::as_f64);
            let bound = |key: &str| filters.get(key).and_then(Value::as_f64);
            let servable = matches!(
                v.get("status").and_then(Value::as_str),
                Some("available" | "intransit" | "pending")
            );
            let text_ok = |fkey: &str, vkey: &str| {
                list(fkey).is_none_or(|l| {
                    text(vkey)
                        .is_some_and(|t| l.iter().any(|x| x.as_str().map(norm) == Some(t.clone())))
                })
            };
            let exact_ok = |key: &str, value: Option<&str>| {
                list(key)
                    .is_none_or(|l| value.is_some_and(|t| l.iter().any(|x| x.as_str() == Some(t))))
            };
            let min_ok = |fkey: &str, vkey: &str| {
                bound(fkey).is_none_or(|b| num(vkey).is_some_and(|x| x >= b))
            };
            let max_ok = |fkey: &str, vkey: &str| {
                bound(fkey).is_none_or(|b| num(vkey).is_some_and(|x| x <= b))
            };
            let dc = v.get("dc_fast_charge").and_then(Value::as_bool) == Some(true);
            let hay: Vec<String> = [
                "make",
                "model",
                "trim",
                "body",
                "exterior_color",
                "fuel",
                "description",
            ]
            .iter()
            .filter_map(|k| v.get(*k).and_then(Value::as_str).map(str::to_lowercase))
            .chain(v.get("year").map(|y| y.to_string()))
            .collect();
            let query_ok = filters
                .get("query")
                .and_then(Value::as_str)
                .is_none_or(|q| {
                    q.split_whitespace()
                        .all(|term| hay.iter().any(|h| h.contains(&term.to_lowercase())))
                });
            servable
                && text_ok("make", "make")
                && text_ok("body", "body")
                && exact_ok("condition", v.get("condition").and_then(Value::as_str))
                && exact_ok(
                    "vehicle_type",
                    Some(
                        v.get("vehicle_type")
                            .and_then(Value::as_str)
                            .unwrap_or("car"),
                    ),
                )
                && min_ok("year_min", "year")
                && min_ok("price_min", "price")
                && max_ok("price_max", "price")
                && max_ok("mileage_max", "mileage")
                && min_ok("electric_range_mi_min", "electric_range_mi")
                && filters
                    .get("dc_fast_charge")
                    .and_then(Value::as_bool)
                    .is_none_or(|want| want == dc)
                && query_ok
        }

        /// The sort value as docs/protocol.md §Sorting reads it: `None` = missing.
        fn sort_value(field: &str, v: &Value) -> Option<(f64, String)> {
            match field {
                "make" | "model" | "stock" => v
                    .get(field)
                    .and_then(Value::as_str)
                    .map(|s| s.trim().to_lowercase())
                    .filter(|s| !s.is_empty())
                    .map(|s| (0.0, s)),
                "updated_at" => v
                    .get(field)
                    .and_then(Value::as_str)
                    .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
                    .map(|t| (t.unix_timestamp() as f64, String::new())),
                _ => v
                    .get(field)
                    .and_then(Value::as_f64)
                    .map(|x| (x, String::new())),
            }
        }

        const SORT_FIELDS: [&str; 8] = [
            "price",
            "list_price",
            "msrp",
            "mileage",
            "year",
            "make",
            "stock",
            "updated_at",
        ];

        proptest! {
            #[test]
            fn search_returns_exactly_the_matching_listings_in_order(
                vehicles in prop::collection::vec(vehicle(), 0..40),
                filters in filters(),
                field in prop::sample::select(SORT_FIELDS.to_vec()),
                descending in any::<bool>(),
                skip in 0usize..45,
                limit in 1usize..150,
            ) {
                check_search(&vehicles, &filters, field, descending, skip, limit)?;
            }
        }

        /// Every returned vehicle matches (by `matches` and by the oracle), `total` is the number
        /// of matching listings, the order is the requested one, pages are windows of the full
        /// result, and facets agree with search totals.
        fn check_search(
            vehicles: &[Value],
            filters: &Value,
            field: &str,
            descending: bool,
            skip: usize,
            limit: usize,
        ) -> Result<(), TestCaseError> {
            let filters = filters.clone();
            let inv = Inventory::new(vehicles.iter().cloned().map(Listing::new).collect());
            let order = if descending { "desc" } else { "asc" };
            let sort = json!({ "field": field, "order": order });
            let expected = vehicles.iter().filter(|v| oracle(&filters, v)).count();

            let all = inv.search(
                &json!({ "type": "inventory.search.request", "filters": filters,
                "sort": sort, "pagination": { "limit": 100 } }),
            );
            prop_assert_eq!(all.total, expected);
            prop_assert_eq!(all.vehicles.len(), expected);
            for v in &all.vehicles {
                prop_assert!(matches(&filters, v));
                prop_assert!(oracle(&filters, v));
            }
            // Sort order: present before missing, then monotone in the requested direction.
            for pair in all.vehicles.windows(2) {
                let (a, b) = (sort_value(field, &pair[0]), sort_value(field, &pair[1]));
                match (a, b) {
                    (None, Some(_)) => prop_assert!(false, "missing before present"),
                    (Some(a), Some(b)) => {
                        let ord = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
                        let in_order = if descending {
                            ord != Ordering::Less
                        } else {
                            ord != Ordering::Greater
                        };
                        prop_assert!(in_order, "{:?} then {:?}", a, b);
                    }
                    _ => {}
                }
            }

            let page = inv.search(
                &json!({ "type": "inventory.search.request", "filters": filters,
                "sort": sort, "pagination": { "skip": skip, "limit": limit } }),
            );
            let effective = limit.min(MAX_LIMIT);
            prop_assert_eq!(
                (page.total, page.skip, page.limit),
                (expected, skip, effective)
            );
            let window: Vec<_> = all
                .vehicles
                .iter()
                .skip(skip)
                .take(effective)
                .cloned()
                .collect();
            prop_assert_eq!(page.vehicles, window);

            // Facets: the statuses and vehicle types partition the matches, and each value's
            // count is the total of a search narrowed to it.
            let facets = inv.facets(Some(&filters));
            let sum = |key: &str| -> u64 {
                facets
                    .get(key)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["count"].as_u64())
                    .sum()
            };
            prop_assert_eq!(sum("statuses"), expected as u64);
            prop_assert_eq!(sum("vehicle_types"), expected as u64);
            for facet in [
                "makes",
                "bodies",
                "conditions",
                "vehicle_types",
                "dc_fast_charge",
                "years",
            ] {
                for entry in facets
                    .get(facet)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let value = &entry["value"];
                    let mut narrowed = filters.clone();
                    match facet {
                        "makes" => narrowed["make"] = json!([value]),
                        "bodies" => narrowed["body"] = json!([value]),
                        "conditions" => narrowed["condition"] = json!([value]),
                        "vehicle_types" => narrowed["vehicle_type"] = json!([value]),
                        "dc_fast_charge" => narrowed["dc_fast_charge"] = json!(value == "true"),
                        _ => {
                            narrowed["year_min"] = value.clone();
                            narrowed["year_max"] = value.clone();
                        }
                    }
                    let n = inv
                        .search(&json!({ "type": "inventory.search.request", "filters": narrowed }))
                        .total;
                    prop_assert_eq!(
                        Some(n as u64),
                        entry["count"].as_u64(),
                        "{} {}",
                        facet,
                        entry
                    );
                }
            }
            if let Some(price) = facets.get("price_range") {
                for v in all
                    .vehicles
                    .iter()
                    .filter_map(|v| v.get("price").and_then(Value::as_f64))
                {
                    prop_assert!(price["min"].as_f64().is_some_and(|m| m <= v));
                    prop_assert!(price["max"].as_f64().is_some_and(|m| m >= v));
                }
            } else {
                prop_assert!(all.vehicles.iter().all(|v| v.get("price").is_none()));
            }
            Ok(())
        }
    }
}
