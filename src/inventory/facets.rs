//! Term and range facets: interned term columns (also what list filters test) and their counts.

use serde_json::{Map, Value};

use super::columns::Ids;
use super::keys::{Keys, Num, Slot, Text};

/// The interning maps of a build see every listing's values: a fast hash (seeded per process).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Range facets, in the order of docs/protocol.md §Facets.
pub(super) const RANGE_FACETS: [(Num, &str); 5] = [
    (Num::Price, "price_range"),
    (Num::Mileage, "mileage_range"),
    (Num::Year, "year_range"),
    (Num::DisplacementCc, "displacement_cc_range"),
    (Num::ElectricRangeMi, "electric_range_mi_range"),
];

/// Term facets, in the order of docs/protocol.md §Facets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TermFacet {
    Text(Text, &'static str),
    Years,
    Conditions,
    DcFastCharge,
    VehicleTypes,
    Statuses,
}

pub(super) const TERM_FACETS: [TermFacet; 16] = [
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
    pub(super) fn key(self) -> &'static str {
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
pub(super) struct TermBuilder {
    facet: TermFacet,
    pub(super) ids: Vec<u32>,
    keys: Vec<GroupKey>,
    strs: HashMap<Box<str>, u32>,
    ints: HashMap<i64, u32>,
    /// Per group: how often each trimmed spelling occurs.
    spellings: Vec<HashMap<Box<str>, usize>>,
    /// Some listing carries `dc_fast_charge` (the facet is emitted only then).
    flagged: bool,
}

impl TermBuilder {
    pub(super) fn new(facet: TermFacet) -> TermBuilder {
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

    pub(super) fn push(&mut self, k: &Keys) {
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

    pub(super) fn finish(self) -> TermColumn {
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
            ids: Ids::narrowest(
                ids.into_iter()
                    .map(|id| if id == NO_GROUP { absent } else { id })
                    .collect(),
                absent,
            ),
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
pub(super) struct TermColumn {
    pub(super) facet: TermFacet,
    /// Per listing: index into `groups`, or `groups.len()` when the listing has no value (so
    /// that filtering and counting index flat arrays without branching).
    pub(super) ids: Ids,
    groups: Box<[Group]>,
    /// String group key → index into `groups`, to compile filters into ids.
    index: HashMap<Box<str>, u32>,
    /// Whether the key is emitted at all.
    pub(super) emitted: bool,
}

impl TermColumn {
    /// Per id (the "no value" slot included): whether a list filter of `values` accepts it.
    pub(super) fn accepts(&self, values: &[Box<str>]) -> Box<[bool]> {
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

    /// Per id (the "no value" slot included): whether the group's key (a text column's
    /// trimmed, lower-cased value) contains `term`.
    pub(super) fn containing(&self, term: &str) -> Box<[bool]> {
        let mut hits = vec![false; self.groups.len() + 1];
        for (key, &id) in &self.index {
            if let Some(hit) = hits.get_mut(id as usize) {
                *hit = key.contains(term);
            }
        }
        hits.into_boxed_slice()
    }

    /// The value-ascending rank of listing `i`'s group (`None`: no value).
    pub(super) fn rank(&self, i: usize) -> Option<u32> {
        let id = self.ids.get(i)?;
        self.groups.get(id).map(|g| g.rank)
    }

    /// `[{value, count}]` over the `matched` listings, count desc then value asc.
    pub(super) fn counts(&self, matched: &[bool]) -> Value {
        // One slot per group plus the "no value" one, which is never emitted.
        let counts = self.ids.count(matched, self.groups.len() + 1);
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
