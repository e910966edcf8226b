//! What a search reads from one vehicle, computed once: the field enums, [`Keys`] and [`Listing`].

use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The only `status` values a listing may have to be returned or counted (docs/protocol.md
/// §Listing status).
pub const SERVABLE_STATUSES: [&str; 3] = ["available", "intransit", "pending"];

/// Free-text fields compared trimmed and lower-cased.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Text {
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

pub(super) const TEXTS: usize = 11;

impl Text {
    pub(super) const ALL: [Text; TEXTS] = [
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
    pub(super) fn field(self) -> &'static str {
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
    pub(super) fn filter(self) -> &'static str {
        match self {
            Text::Rooftop => "rooftops",
            other => other.field(),
        }
    }
}

/// The text fields a `query` term is looked for in, besides a listing's [free
/// text](Slot::FreeText). A term never holds white space, so it is in a field exactly when it
/// is in the field's trimmed, lower-cased key: these fields are searched through their
/// interned groups instead of per listing.
pub(super) const QUERY_TEXTS: [Text; 6] = [
    Text::Make,
    Text::Model,
    Text::Trim,
    Text::Body,
    Text::ExteriorColor,
    Text::Fuel,
];

/// Numeric fields used by range filters, sorting and range facets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Num {
    Year,
    Price,
    ListPrice,
    Msrp,
    Mileage,
    DisplacementCc,
    ElectricRangeMi,
}

pub(super) const NUMS: usize = 7;

impl Num {
    pub(super) const ALL: [Num; NUMS] = [
        Num::Year,
        Num::Price,
        Num::ListPrice,
        Num::Msrp,
        Num::Mileage,
        Num::DisplacementCc,
        Num::ElectricRangeMi,
    ];

    pub(super) fn field(self) -> &'static str {
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

/// Everything a search reads from one vehicle, computed once.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) servable: bool,
    pub(super) num: [Option<f64>; NUMS],
    pub(super) dc_fast_charge: Option<bool>,
    /// Unix nanoseconds.
    pub(super) updated_at: Option<i128>,
    /// The listing's strings, one after the other (one allocation per listing): see [`Slot`].
    strs: String,
    spans: [Option<(u32, u32)>; SLOTS],
}

/// Where [`Keys`] keeps each string: the text fields trimmed and lower-cased at
/// `0..TEXTS`, their trimmed spellings (what facets show) at `TEXTS..2 * TEXTS`, then these.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot {
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
    /// What `query` terms are looked for in beyond [`QUERY_TEXTS`]: the year, the features
    /// and the description, lower-cased, one per line.
    FreeText,
    /// As given.
    Status,
}

const SLOTS: usize = Slot::Status as usize + 1;

impl Keys {
    pub(super) fn of(vehicle: &Value) -> Keys {
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
        keys.put_free_text(vehicle);
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

    /// The [free text](Slot::FreeText), one field per line so that a term (which never holds
    /// white space) cannot match across two fields.
    fn put_free_text(&mut self, vehicle: &Value) {
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
        self.put(Slot::FreeText as usize, &text, Case::Lower);
    }

    fn str(&self, slot: usize) -> Option<&str> {
        let (start, end) = (*self.spans.get(slot)?)?;
        self.strs.get(start as usize..end as usize)
    }

    pub(super) fn text(&self, field: Text) -> Option<&str> {
        self.str(field as usize)
    }

    /// The trimmed text of a text field, if it is a string (even a blank one).
    pub(super) fn spelling(&self, field: Text) -> Option<&str> {
        self.str(TEXTS + field as usize)
    }

    pub(super) fn slot(&self, slot: Slot) -> Option<&str> {
        self.str(slot as usize)
    }

    pub(super) fn vehicle_type(&self) -> &str {
        self.slot(Slot::VehicleType).unwrap_or("car")
    }

    pub(super) fn free_text(&self) -> &str {
        self.slot(Slot::FreeText).unwrap_or("")
    }

    /// Whether `term` (lower-cased, without white space) is in one of the texts `query`
    /// searches.
    pub(super) fn has_query_term(&self, term: &str) -> bool {
        self.free_text().contains(term)
            || QUERY_TEXTS
                .iter()
                .any(|&t| self.text(t).is_some_and(|s| s.contains(term)))
    }

    pub(super) fn num(&self, field: Num) -> Option<f64> {
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

/// One vehicle of the cached feed with its pre-computed search keys.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The AAP `Vehicle`, shared with every page that returns it.
    pub vehicle: Arc<Value>,
    pub(super) keys: Keys,
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
