//! The in-memory inventory: AAP `inventory.search` and `inventory.facets` answered in the
//! gateway. Owns the index and AAP's search rules (filter, sort, page, facets); uses only
//! `protocol` (the vehicles it holds).
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
//! numbers, the effective `vehicle_type`, the `updated_at` instant, the free text `query` reads
//! beyond the term fields, all strings in one buffer), drops listings that may never be served,
//! and files the rest into columns at once: term values interned into per-field id columns,
//! numbers into dense columns, VIN and stock into one string buffer per column, the free texts
//! interned (listings with the same features share them). No per-listing key survives the
//! build. [`InventoryBuilder::finish`] pre-sorts once for every sort field and order (19 `u32`
//! index lists, sorted on integer keys after one tie-break ranking). A search then tests the
//! filters column by column into one match bitmap (list filters are id look-ups, ranges two
//! float comparisons; a `query` term is looked for once per distinct value, in the term groups
//! and the interned free texts; listing strings are read only for `vin` and `stock`), counts it,
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
//!
//! [`Packed`]: crate::inventory::packed::Packed

mod columns;
mod facets;
mod filters;
mod index;
mod keys;
pub mod packed;
mod page;
mod sort;

pub use self::filters::{Filters, matches};
pub use self::index::{Inventory, InventoryBuilder, Prepared, Stored};
pub use self::keys::{Listing, SERVABLE_STATUSES};
pub use self::page::{DEFAULT_LIMIT, MAX_LIMIT, Page};
pub use self::sort::sort_fields;

#[cfg(test)]
mod tests;
