//! The column-wise [`Inventory`] and its [`InventoryBuilder`]: build, search, facets.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::columns::{Interned, InternedBuilder, StrColumn, room};
use super::facets::{RANGE_FACETS, TERM_FACETS, TermBuilder, TermColumn, TermFacet};
use super::filters::Filters;
use super::keys::{Keys, Listing, NUMS, Num, QUERY_TEXTS, Slot, Text};
use super::page::Page;
use super::sort::{SortField, f64_key, present_first, sort_all};
use crate::inventory::packed::Packed;
use crate::protocol::search::{SearchRequest, Sort};

/// What an [`InventoryBuilder`] reads from one vehicle, computed where the vehicle is (e.g. on
/// another thread), so that the vehicle itself need not travel to the builder.
#[derive(Debug)]
pub struct Prepared(Keys);

impl Prepared {
    pub fn of(vehicle: &Value) -> Prepared {
        Prepared(Keys::of(vehicle))
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
    pub(super) default_order: Box<[u32]>,
    /// Listing indices in each sort order, at `2 * field + descending`.
    pub(super) sorted: Vec<Box<[u32]>>,
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
    /// Per listing: its free text ([`Slot::FreeText`]), what `query` searches beyond the
    /// term columns of [`QUERY_TEXTS`].
    free_text: Interned,
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
    free_text: InternedBuilder,
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
            free_text: InternedBuilder::default(),
        }
    }

    /// A builder for about as many listings as `like` has (the inventory a refresh replaces):
    /// the columns are reserved once, with a little room, instead of grown by doubling, which
    /// would hold up to twice their size while the previous inventory is still in memory.
    pub fn sized_like(like: &Inventory) -> InventoryBuilder {
        let n = room(like.len());
        let column = |c: &StrColumn| StrColumn::sized_like(c, n);
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
            free_text: InternedBuilder::sized_like(&like.free_text, n),
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

    pub(super) fn push_keys(&mut self, k: Keys, stored: Stored) {
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
        self.free_text.push(k.free_text());
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
            free_text,
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
        let sort = |&(field, descending): &(SortField, bool),
                    keyed: &mut Vec<(bool, u128, u32)>|
         -> Box<[u32]> {
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
            keyed.clear();
            keyed.extend((0..n).map(|i| match key(i) {
                Some(k) if descending => (false, !k, tie[i]),
                Some(k) => (false, k, tie[i]),
                None => (true, 0, tie[i]),
            }));
            // `tie` is unique, so the keys are: an unstable sort gives the one order.
            keyed.sort_unstable();
            keyed
                .iter()
                .map(|&(_, _, place)| default_order[place as usize])
                .collect()
        };
        let sorted = sort_all(&orders, threads, &sort);
        vin.shrink_to_fit();
        stock.shrink_to_fit();
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
            free_text: free_text.finish(),
        }
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

    /// Answers a validated AAP `inventory.search.request` (its filters, order and window).
    pub fn search(&self, request: &SearchRequest<'_>) -> Page {
        let (skip, limit) = (request.skip, request.limit);
        let order = self.order(request.sort);
        let filters = Filters::new(request.filters);
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
    /// (empty: all).
    pub fn facets(&self, filters: &Map<String, Value>) -> Value {
        let filters = Filters::new(filters);
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
    fn order(&self, sort: Option<Sort<'_>>) -> &[u32] {
        sort.and_then(|s| {
            let field = SortField::parse(s.field)?;
            self.sorted
                .get(2 * field as usize + usize::from(s.descending))
        })
        .unwrap_or(&self.default_order)
    }

    fn column(&self, facet: impl Fn(TermFacet) -> bool) -> Option<&TermColumn> {
        self.terms.iter().find(|c| facet(c.facet))
    }

    /// The term column of a text field.
    fn text_column(&self, text: Text) -> Option<&TermColumn> {
        self.column(|f| matches!(f, TermFacet::Text(t, _) if t == text))
    }

    /// Which servable listings match, column by column over dense arrays (list filters become
    /// sets of interned ids), reading listing strings only for `vin`, `stock` and `query` and
    /// only for listings still in. Same rules as `Filters::accepts`.
    fn matched(&self, filters: &Filters) -> Vec<bool> {
        let mut matched = vec![true; self.vehicles.len()];
        let mut terms = |column: Option<&TermColumn>, values: &[Box<str>]| match column {
            Some(column) => {
                column.ids.and_into(&mut matched, &column.accepts(values));
            }
            // No column: no listing has a value, so none matches.
            None => matched.fill(false),
        };
        for (text, values) in &filters.text {
            terms(self.text_column(*text), values);
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
        if filters.reads_identity() {
            for (i, m) in matched.iter_mut().enumerate() {
                *m = *m && filters.identity_accepts(self.vin.get(i), self.stock.get(i));
            }
        }
        for term in filters.query() {
            self.keep_containing(&mut matched, term);
        }
        matched
    }

    /// Keeps the listings one of whose `query` texts contains `term`. Each distinct value is
    /// searched once (a term column's groups, the interned free texts), then every listing
    /// still in looks its values' answers up.
    fn keep_containing(&self, matched: &mut [bool], term: &str) {
        let mut any = vec![false; matched.len()];
        self.free_text
            .ids()
            .or_into(&mut any, &self.free_text.containing(term));
        for &text in &QUERY_TEXTS {
            if let Some(column) = self.text_column(text) {
                column.ids.or_into(&mut any, &column.containing(term));
            }
        }
        for (m, a) in matched.iter_mut().zip(any) {
            *m &= a;
        }
    }
}
