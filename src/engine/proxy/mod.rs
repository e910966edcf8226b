//! Proxy mode: render the upstream call, send it, apply the error rules, decode the reply,
//! extract AAP data with jq. Owns a compiled proxy mapping and its scans; uses `engine::request`,
//! `lang`, `inventory`, `formats` and `upstream`.
//!
//! List skills (`inventory.search`) are paged by the engine. The upstream's own pages, order and
//! total are used only when they are exactly AAP's answer: the mapping declares that the
//! upstream lists only units a buyer may see (`supports.listing: listable`) and translates every
//! filter and the sort of the request as AAP means them (`supports`). Otherwise the engine
//! completes the search itself: it fetches every listing matching the filters the upstream
//! does take (at most `scan_limit` records), then filters, sorts and pages them with AAP
//! semantics (`search`). Paging decisions always count upstream records, never the listable
//! ones. Derived facets use the same scan; scans are reused for `scan_cache`, and a fresh scan of a
//! wider query (every unit) answers narrower ones too, filtered in the gateway.
//!
//! The files: `spec` (the compiled mapping), `transport` (live or canned upstream), `call` (one
//! call: render, send, error rules, decode, extract), `list` (searches straight through or
//! completed in the gateway, derived facets), `seen` (the listings a walk has met, to refuse a
//! record that comes back), `scan_cache`, `page` (AAP's window and page).

mod call;
mod list;
mod page;
mod scan_cache;
mod seen;
mod spec;
mod transport;
mod vehicle;

pub use page::{check_listable, is_listable, is_listable_status, page_data};
pub use scan_cache::{CursorCache, ScanCache, ScanKey};
pub use spec::{
    ErrorRule, MappingGlobals, Missing, NextPage, NotProcessed, ProxyMapping, ResponseSpec,
    RuleOutcome, SortSupport, StatusMatch, Supports, Values,
};
pub use transport::{Canned, Transport, send};
pub use vehicle::{IDENTIFIERS, ScannedVehicle};
