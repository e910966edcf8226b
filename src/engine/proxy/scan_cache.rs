//! Listings fetched to complete searches in the gateway, kept for `scan_cache`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::inventory::Inventory;
use serde_json::{Map, Value, json};

/// What a scan asks the upstream for: the filters it takes with AAP's meaning. Scans are
/// cached under it (`scan_cache`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScanKey {
    pub(super) filters: Map<String, Value>,
}

impl ScanKey {
    /// No filter: every listing.
    pub(super) fn everything() -> ScanKey {
        ScanKey {
            filters: Map::new(),
        }
    }

    /// What the templates see as `request` (and jq as `$request`) on a scan's calls: a search
    /// with these filters and nothing else; paging reaches them as `page`.
    pub(super) fn template_request(&self) -> Value {
        json!({ "type": "inventory.search.request", "filters": self.filters })
    }
}

/// Listings fetched to complete searches in the gateway, kept for `ttl` per set of upstream
/// filters (a buyer paging through results, facets after a search).
#[derive(Debug, Default)]
pub struct ScanCache {
    ttl: Duration,
    entries: Mutex<Vec<(ScanKey, Instant, Arc<Inventory>)>>,
}

/// Distinct scans kept per mapping; the oldest goes first.
const SCAN_CACHE_ENTRIES: usize = 32;

impl ScanCache {
    pub fn new(ttl: Duration) -> ScanCache {
        ScanCache {
            ttl,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// How long a scan is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(super) fn get(&self, key: &ScanKey) -> Option<Arc<Inventory>> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, at, _)| at.elapsed() < self.ttl);
        entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, inventory)| Arc::clone(inventory))
    }

    pub(super) fn put(&self, key: ScanKey, inventory: &Arc<Inventory>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(k, at, _)| *k != key && at.elapsed() < self.ttl);
        if entries.len() >= SCAN_CACHE_ENTRIES {
            entries.remove(0);
        }
        entries.push((key, Instant::now(), Arc::clone(inventory)));
    }
}

/// Where the pages of one query begin, for sequential paging (cursors, next links): page 3 of
/// a buyer's search starts from page 3's cursor instead of walking pages 1 and 2 again.
#[derive(Debug, Default)]
pub struct CursorCache {
    ttl: Duration,
    #[allow(clippy::type_complexity)]
    entries: Mutex<Vec<(Value, Instant, Vec<(usize, Arc<str>)>)>>,
}

/// Queries whose cursors are kept per mapping; the oldest goes first.
const CURSOR_QUERIES: usize = 64;
/// Pages whose cursors are kept per query.
const CURSOR_PAGES: usize = 64;

impl CursorCache {
    pub fn new(ttl: Duration) -> CursorCache {
        CursorCache {
            ttl,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The known page of `query` starting at the most records before `skip`: (records before
    /// it, its cursor).
    pub(super) fn start(&self, query: &Value, skip: usize) -> Option<(usize, Arc<str>)> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, at, _)| at.elapsed() < self.ttl);
        let (_, _, pages) = entries.iter().find(|(q, _, _)| q == query)?;
        pages
            .iter()
            .filter(|(before, _)| *before <= skip)
            .max_by_key(|(before, _)| *before)
            .cloned()
    }

    /// Remembers that the page of `query` after `before` records starts at `cursor`.
    pub(super) fn put(&self, query: &Value, before: usize, cursor: &Arc<str>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, at, _)| at.elapsed() < self.ttl);
        let at = match entries.iter().position(|(q, _, _)| q == query) {
            Some(at) => at,
            None => {
                if entries.len() >= CURSOR_QUERIES {
                    entries.remove(0);
                }
                entries.push((query.clone(), Instant::now(), Vec::new()));
                entries.len() - 1
            }
        };
        let pages = &mut entries[at].2;
        if !pages.iter().any(|(b, _)| *b == before) && pages.len() < CURSOR_PAGES {
            pages.push((before, Arc::clone(cursor)));
        }
    }
}
