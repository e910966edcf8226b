//! Listings fetched to complete searches in the gateway, kept for `scan_cache`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::list::ScanKey;
use crate::inventory::Inventory;

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
