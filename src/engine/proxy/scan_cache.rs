//! Listings fetched to complete searches in the gateway, kept for `scan_cache`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::error::AapError;
use crate::inventory::Inventory;

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

    /// Whether this scan holds every unit a scan of `narrower` holds: each of its filters is
    /// one of `narrower`'s, with the same value (no filter at all: every unit). Filtered in the
    /// gateway with AAP's semantics — which every search and facets call answered from a scan
    /// is, whatever the upstream filtered — it gives exactly what `narrower`'s scan gives.
    pub(super) fn covers(&self, narrower: &ScanKey) -> bool {
        self.filters
            .iter()
            .all(|(name, value)| narrower.filters.get(name) == Some(value))
    }

    /// What the templates see as `request` (and jq as `$request`) on a scan's calls: a search
    /// with these filters and nothing else; paging reaches them as `page`.
    pub(super) fn template_request(&self) -> Value {
        json!({ "type": "inventory.search.request", "filters": self.filters })
    }
}

/// Listings fetched to complete searches in the gateway, kept for `ttl` per set of upstream
/// filters (a buyer paging through results, facets after a search), and the scans under way.
///
/// - **Single flight**: a scan asked for while an identical one (same [`ScanKey`]) is being
///   read waits for that walk's outcome instead of walking the upstream again, whether or not
///   the cache keeps it (`scan_cache: 0s` included).
/// - **Stale while revalidate**: past `ttl`, a scan is *due*; for `stale` more it still
///   answers while one refresh reads it again in the background. Past `ttl + stale` it is
///   gone: the caller waits for a fresh walk (or joins the one under way). `stale` is 0 by
///   default: no answer comes from listings older than `ttl`.
/// - **Wider copies**: without a fresh copy of its own, a scan is answered by a fresh copy of a
///   wider one ([`ScanKey::covers`]; every search filters its scan in the gateway). A due wider
///   copy, or a wider walk still under way, does not answer it.
#[derive(Debug, Default)]
pub struct ScanCache {
    ttl: Duration,
    stale: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: Vec<(ScanKey, Instant, Arc<Inventory>)>,
    /// Scans being read, and where their outcome will be told.
    walks: Vec<(ScanKey, u64, watch::Receiver<Option<Outcome>>)>,
    /// The id of the next walk.
    next: u64,
}

/// A scan's outcome, as every caller sharing it answers.
pub(super) type Outcome = Result<Arc<Inventory>, AapError>;

/// Distinct scans kept per mapping; the oldest goes first.
const SCAN_CACHE_ENTRIES: usize = 32;

/// What a caller asking for a scan is to do ([`ScanCache::lookup`]).
pub(super) enum Lookup {
    /// A copy within `scan_cache`.
    Fresh(Arc<Inventory>),
    /// No copy of this scan, but a fresh one of a wider scan ([`ScanKey::covers`]): it answers,
    /// filtered in the gateway.
    Wider(Arc<Inventory>),
    /// A due copy within `scan_stale`: answer it; with a [`Walk`], start the one refresh.
    Stale(Arc<Inventory>, Option<Walk>),
    /// The same scan is being read: wait for its outcome.
    Follow(watch::Receiver<Option<Outcome>>),
    /// Read it, then tell the others ([`Walk::finish`]).
    Lead(Walk),
}

/// The one walk of a scan under way. Finished, it tells its followers the outcome and keeps a
/// whole scan for `scan_cache`; dropped unfinished (the caller went away), its followers are
/// told nothing and look again, one of them walking instead.
#[derive(Debug)]
pub(super) struct Walk {
    cache: Arc<ScanCache>,
    key: ScanKey,
    id: u64,
    tell: Option<watch::Sender<Option<Outcome>>>,
}

impl Walk {
    pub(super) fn key(&self) -> &ScanKey {
        &self.key
    }

    /// Keeps a whole scan and tells the followers.
    pub(super) fn finish(mut self, outcome: &Outcome) {
        let mut state = self.cache.lock();
        if let Ok(inventory) = outcome {
            self.cache.keep(&mut state, self.key.clone(), inventory);
        }
        state.walks.retain(|(_, id, _)| *id != self.id);
        drop(state);
        if let Some(tell) = self.tell.take() {
            tell.send_replace(Some(outcome.clone()));
        }
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        if self.tell.is_some() {
            // Unfinished: its followers see the sender go and look again.
            self.cache.lock().walks.retain(|(_, id, _)| *id != self.id);
        }
    }
}

impl ScanCache {
    /// Keeps scans for `ttl`, and a due one for `stale` more while it is read again.
    pub fn new(ttl: Duration, stale: Duration) -> ScanCache {
        ScanCache {
            ttl,
            stale,
            state: Mutex::new(State::default()),
        }
    }

    /// How long a scan is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What a caller asking for the scan of `key` is to do.
    pub(super) fn lookup(self: &Arc<Self>, key: &ScanKey) -> Lookup {
        let mut state = self.lock();
        let keep = self.ttl + self.stale;
        if !self.ttl.is_zero() {
            state.entries.retain(|(_, at, _)| at.elapsed() < keep);
        }
        let walking = state
            .walks
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, rx)| rx.clone());
        let found = state
            .entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, at, inventory)| (at.elapsed(), Arc::clone(inventory)));
        if let (Some((age, inventory)), _) = (&found, &walking)
            && *age < self.ttl
        {
            return Lookup::Fresh(Arc::clone(inventory));
        }
        // A fresh wider copy answers before a due copy of this one, and instead of a walk.
        if let Some((_, _, inventory)) = state
            .entries
            .iter()
            .rev()
            .find(|(k, at, _)| k != key && k.covers(key) && at.elapsed() < self.ttl)
        {
            return Lookup::Wider(Arc::clone(inventory));
        }
        match (found, walking) {
            (Some((_, inventory)), Some(_)) => Lookup::Stale(inventory, None),
            (Some((_, inventory)), None) => {
                Lookup::Stale(inventory, Some(self.start(&mut state, key)))
            }
            (None, Some(rx)) => Lookup::Follow(rx),
            (None, None) => Lookup::Lead(self.start(&mut state, key)),
        }
    }

    fn start(self: &Arc<Self>, state: &mut State, key: &ScanKey) -> Walk {
        let (tell, rx) = watch::channel(None);
        let id = state.next;
        state.next += 1;
        state.walks.push((key.clone(), id, rx));
        Walk {
            cache: Arc::clone(self),
            key: key.clone(),
            id,
            tell: Some(tell),
        }
    }

    fn keep(&self, state: &mut State, key: ScanKey, inventory: &Arc<Inventory>) {
        if self.ttl.is_zero() {
            return;
        }
        let keep = self.ttl + self.stale;
        state
            .entries
            .retain(|(k, at, _)| *k != key && at.elapsed() < keep);
        if state.entries.len() >= SCAN_CACHE_ENTRIES {
            state.entries.remove(0);
        }
        state
            .entries
            .push((key, Instant::now(), Arc::clone(inventory)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(make: &str) -> ScanKey {
        let mut filters = Map::new();
        filters.insert("make".to_owned(), json!([make]));
        ScanKey { filters }
    }

    fn inventory() -> Arc<Inventory> {
        Arc::new(Inventory::new(Vec::new()))
    }

    #[tokio::test]
    async fn a_scan_is_fresh_then_due_with_one_refresh_then_gone() {
        let cache = Arc::new(ScanCache::new(
            Duration::from_millis(60),
            Duration::from_millis(120),
        ));
        let Lookup::Lead(walk) = cache.lookup(&key("kia")) else {
            panic!("nothing kept: the caller walks");
        };
        assert!(
            matches!(cache.lookup(&key("kia")), Lookup::Follow(_)),
            "the same scan at once follows the walk"
        );
        assert!(
            matches!(cache.lookup(&key("ram")), Lookup::Lead(_)),
            "another scan walks on its own"
        );
        walk.finish(&Ok(inventory()));
        assert!(matches!(cache.lookup(&key("kia")), Lookup::Fresh(_)));
        tokio::time::sleep(Duration::from_millis(80)).await;
        let Lookup::Stale(_, Some(refresh)) = cache.lookup(&key("kia")) else {
            panic!("due: the copy answers and the first caller refreshes");
        };
        assert!(
            matches!(cache.lookup(&key("kia")), Lookup::Stale(_, None)),
            "one refresh at a time"
        );
        // A refresh that fails keeps the copy answering within the bound.
        refresh.finish(&Err(AapError::Internal("refused".to_owned())));
        assert!(matches!(
            cache.lookup(&key("kia")),
            Lookup::Stale(_, Some(_))
        ));
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(
            matches!(cache.lookup(&key("kia")), Lookup::Lead(_)),
            "past scan_cache + scan_stale the copy is gone: the caller waits for a walk"
        );
    }

    fn keyed(filters: Value) -> ScanKey {
        let Value::Object(filters) = filters else {
            panic!("filters are an object");
        };
        ScanKey { filters }
    }

    #[test]
    fn a_scan_covers_another_when_each_of_its_filters_is_the_others() {
        let every = ScanKey::everything();
        let kia = key("kia");
        let kia_2020 = keyed(json!({ "make": ["kia"], "year_min": 2020 }));
        assert!(every.covers(&kia) && every.covers(&kia_2020) && every.covers(&every));
        assert!(kia.covers(&kia_2020), "fewer filters: a wider scan");
        assert!(!kia_2020.covers(&kia), "more filters: a narrower one");
        assert!(!kia.covers(&every));
        assert!(!kia.covers(&key("ram")), "another value is another scan");
        assert!(
            !kia.covers(&keyed(json!({ "make": ["kia", "ram"] }))),
            "values are compared whole, never as sets"
        );
    }

    #[tokio::test]
    async fn a_fresh_wider_scan_answers_a_narrower_one_until_it_is_due() {
        let cache = Arc::new(ScanCache::new(
            Duration::from_millis(60),
            Duration::from_secs(60),
        ));
        // One make kept: it answers that make with another filter, never a wider scan.
        let Lookup::Lead(ram) = cache.lookup(&key("ram")) else {
            panic!("walks");
        };
        ram.finish(&Ok(inventory()));
        assert!(matches!(
            cache.lookup(&keyed(json!({ "make": ["ram"], "price_max": 1 }))),
            Lookup::Wider(_)
        ));
        for wider in [
            ScanKey::everything(),
            keyed(json!({ "year_min": 2020 })),
            key("kia"),
        ] {
            assert!(
                matches!(cache.lookup(&wider), Lookup::Lead(_)),
                "a narrower copy never answers {wider:?}"
            );
        }
        // Every unit: a walk under way is not followed (only a whole scan answers), a kept one
        // answers every make.
        let Lookup::Lead(walk) = cache.lookup(&ScanKey::everything()) else {
            panic!("walks");
        };
        assert!(matches!(cache.lookup(&key("kia")), Lookup::Lead(_)));
        walk.finish(&Ok(inventory()));
        assert!(matches!(cache.lookup(&key("kia")), Lookup::Wider(_)));
        // Due: a wider copy answers no other scan (only its own, within `scan_stale`).
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert!(matches!(cache.lookup(&key("kia")), Lookup::Lead(_)));
        assert!(matches!(
            cache.lookup(&ScanKey::everything()),
            Lookup::Stale(_, Some(_))
        ));
    }

    #[test]
    fn a_walk_whose_caller_went_away_lets_a_follower_walk() {
        let cache = Arc::new(ScanCache::new(Duration::ZERO, Duration::ZERO));
        let Lookup::Lead(walk) = cache.lookup(&key("kia")) else {
            panic!("walks");
        };
        let Lookup::Follow(told) = cache.lookup(&key("kia")) else {
            panic!("follows");
        };
        drop(walk);
        assert!(
            told.has_changed().is_err(),
            "the follower is told the walk is gone"
        );
        let Lookup::Lead(walk) = cache.lookup(&key("kia")) else {
            panic!("the follower walks instead");
        };
        walk.finish(&Ok(inventory()));
        assert!(
            matches!(cache.lookup(&key("kia")), Lookup::Lead(_)),
            "scan_cache: 0s keeps nothing"
        );
    }
}
