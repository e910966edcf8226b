//! The AAP `filters` object compiled into [`Filters`], and its rules read one vehicle at a time.

use serde_json::{Map, Value};

use super::keys::{Keys, Num, Slot, Text};

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

/// A compiled `filters` object (docs/protocol.md §Filters), reusable across many vehicles.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub(super) text: Vec<(Text, Box<[Box<str>]>)>,
    pub(super) condition: Option<Box<[Box<str>]>>,
    pub(super) vehicle_type: Option<Box<[Box<str>]>>,
    pub(super) ranges: Vec<(Num, Option<f64>, Option<f64>)>,
    pub(super) dc_fast_charge: Option<bool>,
    vin: Option<Box<str>>,
    stock: Option<Box<str>>,
    query: Box<[Box<str>]>,
}

/// The string items of a non-empty list filter; `None` (no constraint) when absent or empty.
fn list<'a>(filters: &'a Map<String, Value>, key: &str) -> Option<impl Iterator<Item = &'a str>> {
    let items = filters.get(key)?.as_array()?;
    (!items.is_empty()).then(|| items.iter().filter_map(Value::as_str))
}

impl Filters {
    /// Compiles an AAP `filters` object.
    pub fn new(filters: &Map<String, Value>) -> Filters {
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

    /// Whether `vin` or `stock` is set (the rules that read a listing's identifiers).
    pub(super) fn reads_identity(&self) -> bool {
        self.vin.is_some() || self.stock.is_some()
    }

    /// The lower-cased `query` terms; a listing matches when each is in one of its texts.
    pub(super) fn query(&self) -> &[Box<str>] {
        &self.query
    }

    fn identity_and_query_accept(&self, k: &Keys) -> bool {
        self.identity_accepts(k.slot(Slot::Vin), k.slot(Slot::Stock))
            && self.query.iter().all(|term| k.has_query_term(term))
    }

    /// The `vin` and `stock` rules on a listing's trimmed upper-case VIN and stock as given.
    pub(super) fn identity_accepts(&self, vin: Option<&str>, stock: Option<&str>) -> bool {
        let one = |filter: &Option<Box<str>>, value: Option<&str>| {
            filter.as_deref().is_none_or(|f| value == Some(f))
        };
        one(&self.vin, vin) && one(&self.stock, stock)
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
///
/// [`Inventory::search`]: super::index::Inventory::search
pub fn matches(filters: &Value, vehicle: &Value) -> bool {
    let none = Map::new();
    Filters::new(filters.as_object().unwrap_or(&none)).matches(vehicle)
}
