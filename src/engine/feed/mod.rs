//! Feed mode: the dealer's whole inventory fetched as one document (JSON, XML or CSV), mapped to
//! AAP vehicles, cached, and searched in the gateway. Owns the snapshot and its refresh thread;
//! uses `engine::proxy` (the fetch), `lang`, `inventory`, `formats` and `upstream`.
//!
//! Freshness: a snapshot younger than `refresh` is served as is; an older one is still served
//! while a background refresh runs; past `max_stale` a request waits for a refresh and fails
//! (`INTERNAL_ERROR`, retryable) if the upstream cannot deliver. A background task also refreshes
//! every `refresh` (± a tenth, so that a group's feeds loaded together do not refresh together)
//! so buyers rarely wait. One refresh runs at a time per feed, and at most [`refresh_slots`]
//! in the process.
//!
//! Conditional refresh: a refresh sends the last copy's `ETag` (`If-None-Match`) and
//! `Last-Modified` (`If-Modified-Since`); a `304`, or a body whose SHA-256 is the last copy's,
//! keeps the copy (its age starts again) without a new one being swapped in. A whole body is
//! hashed before it is mapped, so an unchanged one is never built; a streamed CSV document is
//! hashed as it is read, so an unchanged one is found at its end and the copy built meanwhile is
//! dropped.
//!
//! Scale: a dealer group's feed holds tens of thousands of vehicles. A snapshot is built on the
//! feed's own thread ([`FeedThread`]), never on the async workers that serve buyers. A CSV document is read and
//! mapped one row at a time (no document value); each vehicle is kept [packed](Packed) and the
//! search index as columns ([`Inventory`]); a refresh shares every vehicle that did not change
//! with the snapshot it replaces, and the replaced snapshot is freed on the feed's thread too.

mod building;
mod chunks;
mod document;
mod fetch;
mod join;
mod parallel;
#[cfg(test)]
mod tests;
mod thread;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use http::HeaderValue;
use sha2::{Digest as _, Sha256};

use serde_json::Value;

use crate::engine::IntoAap as _;
use crate::engine::proxy::{MappingGlobals, Transport, check_listable, page_data, send};
use crate::engine::request::RequestSpec;
use crate::error::{AapCode, AapError};
use crate::formats::{self, CsvDialect, Declared, Format, Unpack};
use crate::inventory::packed::Packed;
use crate::inventory::{Inventory, Prepared};
use crate::lang::jq::{Jq, JqValue, JqVars, TextObjects};
use crate::lang::template::Scope;
use crate::protocol::{Data, SearchRequest, Skill, search};
use crate::schema::Listings;
use crate::settings::RefreshPriority;
use crate::telemetry::Escaped;
use crate::upstream::Upstream;

use self::building::{Building, Lookup, MappedRecord, Unmapped};
use self::chunks::{CHUNKS_IN_FLIGHT, ChunkReader};
use self::join::SideTable;
pub use self::join::{Join, JoinSide, JoinStats};
use self::parallel::{BATCH, in_order, threads};
use self::thread::{FeedThread, retire};

/// A compiled `feed.yaml` and its cache.
#[derive(Debug)]
pub struct Feed {
    pub file: String,
    pub upstream: Arc<Upstream>,
    pub request: RequestSpec,
    pub format: Format,
    /// The mapping's `charset:` for the document, if it names one.
    pub charset: Option<&'static encoding_rs::Encoding>,
    /// How a gzip or zip export is unpacked (the mapping's `unpack:`, with its defaults).
    pub unpack: Unpack,
    /// How a CSV document read row by row is written (the mapping's `csv:`).
    pub csv_dialect: CsvDialect,
    pub items: Option<Jq>,
    /// The records are the CSV document's rows (a CSV feed without `items`): they are read and
    /// mapped one at a time instead of through `items` over the whole document.
    pub csv_rows: bool,
    pub item: Jq,
    /// A second file joined to the units by a key (the mapping's `join:`).
    pub join: Option<Join>,
    pub refresh: Duration,
    pub max_stale: Duration,
    pub shared: MappingGlobals,
    state: RwLock<Option<Arc<Snapshot>>>,
    refreshing: tokio::sync::Mutex<()>,
    background: AtomicBool,
    /// The first load has ended, with a copy or without: readiness waits for it.
    attempted: AtomicBool,
    /// Where this feed's snapshots are built and freed.
    thread: Arc<FeedThread>,
    /// The task handing the copy the last refresh replaced to `thread`, once no search reads it.
    retiring: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Refreshes build at the idle CPU priority (`limits.feed_refresh_priority`; set by the
    /// server when it starts the feed's refresher).
    idle_refreshes: AtomicBool,
    /// What the served copy was made from, for a conditional refresh.
    validators: Mutex<Validators>,
    /// The item mapping's first error in the build under way (taken by `finish`).
    first_skip: Mutex<Option<String>>,
    /// The listing schema: a listable record whose listing it refuses is dropped and counted.
    listings: Listings,
    /// The first refused listing's failures in the build under way (taken by `finish`).
    first_invalid: Mutex<Option<Vec<String>>>,
    /// Why the served copy lists nothing, when it does not ([`Snapshot::why_nothing_listable`]).
    nothing_listable: Mutex<Option<String>>,
    /// When the served copy was last found current: built, or confirmed unchanged.
    confirmed: Mutex<Option<Instant>>,
    /// When the last refresh failed, if the last one did: a search does not start another
    /// before `refresh` has passed since.
    failed_at: Mutex<Option<Instant>>,
}

/// What identifies the document a copy was made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Validators {
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
    /// SHA-256 of the body as fetched (packed, if it came packed).
    digest: Option<[u8; 32]>,
}

impl Validators {
    fn of(headers: &http::HeaderMap, digest: [u8; 32]) -> Validators {
        Validators {
            etag: headers.get(http::header::ETAG).cloned(),
            last_modified: headers.get(http::header::LAST_MODIFIED).cloned(),
            digest: Some(digest),
        }
    }

    /// The conditional request headers they allow.
    fn conditions(&self) -> impl Iterator<Item = (http::HeaderName, HeaderValue)> + '_ {
        let etag = (self.etag.iter()).map(|v| (http::header::IF_NONE_MATCH, v.clone()));
        let since =
            (self.last_modified.iter()).map(|v| (http::header::IF_MODIFIED_SINCE, v.clone()));
        etag.chain(since)
    }
}

/// A joined document fetched on its own (`join.request`).
struct SideDoc {
    body: bytes::Bytes,
    headers: http::HeaderMap,
    digest: [u8; 32],
}

/// The digest of a document, with that of the document joined to it if any.
fn combined(document: [u8; 32], side: Option<[u8; 32]>) -> [u8; 32] {
    match side {
        None => document,
        Some(side) => Sha256::new()
            .chain_update(document)
            .chain_update(side)
            .finalize()
            .into(),
    }
}

/// What a fetch came to.
enum Fetched {
    /// A new copy, and what it was made from.
    Built(Box<Snapshot>, Validators),
    /// The document is the one the served copy was made from (a `304`, or the same bytes).
    Unchanged,
}

/// Most feed fetches (a load or a refresh, with its build) running at once in the process: a
/// group's hundred feeds must not all download and build at the same moment, next to the
/// searches. As many as the cores (2 to 8).
fn refresh_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores.clamp(2, 8))
    })
}

/// `every`, moved by up to a tenth either way at random.
fn jittered(every: Duration) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    // A random fraction in [-0.1, 0.1].
    let fraction = (hasher.finish() % 2001) as f64 / 10_000.0 - 0.1;
    every.mul_f64(1.0 + fraction)
}

/// One fetched feed, ready to search.
#[derive(Debug)]
pub struct Snapshot {
    /// Listable vehicles (available, intransit, pending).
    pub inventory: Inventory,
    /// Every mapped record, sold ones included, for detail lookups.
    all: Box<[Packed]>,
    by_vin: Lookup,
    by_stock: Lookup,
    by_id: Lookup,
    pub fetched_at: Instant,
    /// How this copy came about, for logs.
    pub stats: BuildStats,
    /// The item mapping's error on the first record it could not map.
    first_skip: Option<String>,
}

/// What building a snapshot took.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildStats {
    /// Size of the fetched document.
    pub bytes: usize,
    /// Records the item mapping could not map (skipped).
    pub skipped: usize,
    /// Listable records whose listing AAP's listing schema refuses (dropped, never served).
    pub invalid: usize,
    /// CSV rows with more or fewer fields than the header (skipped, never mapped).
    pub ragged: usize,
    /// Records repeating a VIN listed before (the first one is kept).
    pub repeated: usize,
    /// Vehicles unchanged since the previous copy, shared with it.
    pub reused: usize,
    /// Fetching and building, together.
    pub elapsed: Duration,
    /// How the `join:` went, if the feed has one.
    pub join: Option<JoinStats>,
}

impl Feed {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        file: String,
        upstream: Arc<Upstream>,
        request: RequestSpec,
        format: Format,
        charset: Option<&'static encoding_rs::Encoding>,
        unpack: Unpack,
        csv_dialect: CsvDialect,
        items: Option<Jq>,
        csv_rows: bool,
        item: Jq,
        join: Option<Join>,
        refresh: Duration,
        max_stale: Duration,
        shared: MappingGlobals,
        listings: Listings,
    ) -> Feed {
        Feed {
            file,
            upstream,
            request,
            format,
            charset,
            unpack,
            csv_dialect,
            items,
            csv_rows,
            item,
            join,
            refresh,
            max_stale,
            shared,
            state: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            background: AtomicBool::new(false),
            attempted: AtomicBool::new(false),
            thread: Arc::new(FeedThread::default()),
            retiring: std::sync::Mutex::new(None),
            idle_refreshes: AtomicBool::new(false),
            validators: Mutex::new(Validators::default()),
            first_skip: Mutex::new(None),
            listings,
            first_invalid: Mutex::new(None),
            nothing_listable: Mutex::new(None),
            confirmed: Mutex::new(None),
            failed_at: Mutex::new(None),
        }
    }

    /// The CPU priority this feed's refreshes build at from now on.
    pub fn set_refresh_priority(&self, priority: RefreshPriority) {
        let idle = priority == RefreshPriority::Idle;
        self.idle_refreshes.store(idle, Ordering::Relaxed);
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.state.read().ok().and_then(|s| s.clone())
    }

    /// Serves `snapshot` from now on and logs it; the copy it replaces is freed off the async
    /// workers.
    fn install(&self, snapshot: Arc<Snapshot>, validators: Validators) {
        *self
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = validators;
        self.confirm();
        let stats = snapshot.stats;
        let old = match self.state.write() {
            Ok(mut state) => state.replace(Arc::clone(&snapshot)),
            Err(_) => None,
        };
        let message = if old.is_some() {
            "feed refreshed"
        } else {
            "feed loaded"
        };
        tracing::info!(
            feed = %self.file,
            vehicles = snapshot.all.len(),
            listable = snapshot.inventory.len(),
            excluded = snapshot.inventory.excluded(),
            reused = stats.reused,
            skipped = stats.skipped,
            ragged = stats.ragged,
            bytes = stats.bytes,
            elapsed_ms = stats.elapsed.as_millis() as u64,
            "{message}"
        );
        let why = snapshot.why_nothing_listable();
        if let Some(why) = &why {
            tracing::warn!(feed = %self.file, cause = %why, "feed lists no vehicle");
        }
        *self
            .nothing_listable
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = why;
        if let Some(old) = old {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let retiring = runtime.spawn(retire(old, Arc::clone(&self.thread)));
                    *self
                        .retiring
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(retiring);
                }
                Err(_) => drop(old),
            }
        }
    }

    /// Waits until the copy the last refresh replaced has gone to the feed's thread to be freed
    /// (at most [`thread::RETIRE_WAIT`]), so that the thread frees it before it builds the
    /// next copy, not after. Without the wait, a refresh right after another (back to back, or
    /// a search's background refresh) could queue its build while a search still read the copy
    /// before last, and hold three copies at once until the build ended.
    async fn retired(&self) {
        let retiring = self
            .retiring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(retiring) = retiring {
            // (A retirement that panicked has nothing left to wait for.)
            let _ = retiring.await;
        }
    }

    /// Whether the first load has ended (with or without a copy to serve).
    pub fn attempted(&self) -> bool {
        self.attempted.load(Ordering::Acquire)
    }

    /// Whether a copy is cached.
    pub fn loaded(&self) -> bool {
        self.current().is_some()
    }

    /// Listable vehicles in the served copy (`None`: no copy).
    pub fn listable(&self) -> Option<usize> {
        self.current().map(|s| s.inventory.len())
    }

    /// Why the served copy lists no vehicle, if it lists none (readiness shows it).
    pub fn nothing_listable(&self) -> Option<String> {
        (self.nothing_listable.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Age of the cached copy, if any (for metrics and logs): the time since it was last found
    /// current (built, or confirmed unchanged by a refresh).
    pub fn age(&self) -> Option<Duration> {
        self.current()?;
        let confirmed = *self
            .confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        confirmed.map(|at| at.elapsed())
    }

    /// The served copy is current as of now.
    fn confirm(&self) {
        *self
            .confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// The served copy, if it is younger than `limit`.
    fn younger_than(&self, limit: Duration) -> Option<Arc<Snapshot>> {
        self.current()
            .filter(|_| self.age().is_some_and(|age| age < limit))
    }

    /// A snapshot fresh enough to answer from, refreshing as the freshness rules say.
    pub async fn snapshot(self: &Arc<Self>) -> Result<Arc<Snapshot>, AapError> {
        let current = self.current();
        if let (Some(s), Some(age)) = (&current, self.age()) {
            if age < self.refresh {
                return Ok(Arc::clone(s));
            }
            if age < self.max_stale {
                if self.retry_due() {
                    self.refresh_in_background();
                }
                return Ok(Arc::clone(s));
            }
        }
        let _one_at_a_time = self.refreshing.lock().await;
        if let Some(s) = self.younger_than(self.refresh) {
            return Ok(s);
        }
        match self.refresh_once().await {
            Ok(s) => Ok(s),
            Err(e) => match current.filter(|_| self.younger_than(self.max_stale).is_some()) {
                Some(s) => Ok(s),
                None => Err(e),
            },
        }
    }

    /// One refresh (the caller holds `refreshing`): conditional when a copy is served, within
    /// a process-wide slot; the copy it gives is served from now on, and the outcome counted.
    async fn refresh_once(self: &Arc<Self>) -> Result<Arc<Snapshot>, AapError> {
        let _slot = refresh_slots().acquire().await;
        self.retired().await;
        let known = self.current().map(|_| {
            (self
                .validators
                .lock()
                .unwrap_or_else(PoisonError::into_inner))
            .clone()
        });
        let fetched = self
            .fetch_since(Transport::Live(&self.upstream), known.as_ref())
            .await;
        self.attempted.store(true, Ordering::Release);
        *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fetched.is_err().then(Instant::now);
        let count = |outcome: &'static str| {
            if let Some(meter) = self.upstream.meter() {
                meter.feed_refresh(outcome);
            }
        };
        match fetched {
            Ok(Fetched::Built(s, validators)) => {
                count("changed");
                let s: Arc<Snapshot> = Arc::from(s);
                self.install(Arc::clone(&s), validators);
                Ok(s)
            }
            Ok(Fetched::Unchanged) => match self.current() {
                Some(s) => {
                    count("not_modified");
                    self.confirm();
                    // The same message as a refresh that swapped a copy in (dashboards and
                    // tests watch for it), told apart by `unchanged`.
                    tracing::info!(
                        feed = %self.file,
                        vehicles = s.all.len(),
                        unchanged = true,
                        "feed refreshed"
                    );
                    Ok(s)
                }
                // (Only a served copy's validators are sent.)
                None => Err(AapError::Internal(format!(
                    "{}: the feed answered `unchanged` with no copy to keep",
                    self.file
                ))),
            },
            Err(e) => {
                count("failed");
                Err(e)
            }
        }
    }

    /// Whether a search may start a background refresh of a stale copy: not within `refresh` of
    /// a failed one. Without this pause every search of a dealer whose source fails started the
    /// next attempt as soon as the last one ended — a group of 100 feeds at 200 searches a
    /// second made 265 failed refreshes in 20 s out of its 15 failing feeds, each holding one
    /// of the process's refresh slots the other feeds waited for (`bench/feed_group.sh`). The
    /// feed's own schedule (`keep_fresh`) still tries every `refresh`; past `max_stale` a search
    /// still waits for a refresh of its own.
    fn retry_due(&self) -> bool {
        let failed_at = *self
            .failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        failed_at.is_none_or(|at| at.elapsed() >= self.refresh)
    }

    fn refresh_in_background(self: &Arc<Self>) {
        if self.background.swap(true, Ordering::SeqCst) {
            return;
        }
        let feed = Arc::clone(self);
        tokio::spawn(async move {
            feed.refresh_now().await;
            feed.background.store(false, Ordering::SeqCst);
        });
    }

    /// Fetches and swaps in a new snapshot; keeps the old one on failure.
    pub async fn refresh_now(self: &Arc<Self>) {
        let _one_at_a_time = self.refreshing.lock().await;
        match self.refresh_once().await {
            Ok(_) => {}
            Err(e) if self.current().is_some() => {
                tracing::warn!(feed = %self.file, error = %Escaped(e), "feed refresh failed; serving the previous copy")
            }
            Err(e) => {
                tracing::warn!(feed = %self.file, error = %Escaped(e), "feed load failed; no copy to serve yet")
            }
        }
    }

    /// Keeps the cache warm: refreshes every `refresh` until the task is dropped. A copy taken
    /// over by a reload is refreshed when it is due, not at once.
    pub async fn keep_fresh(self: Arc<Self>) {
        if let Some(age) = self.age() {
            tokio::time::sleep(jittered(self.refresh).saturating_sub(age)).await;
        }
        loop {
            self.refresh_now().await;
            tokio::time::sleep(jittered(self.refresh)).await;
        }
    }
}

impl Snapshot {
    /// Every mapped record, sold ones included.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// True when the feed mapped no record.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Why this copy lists no vehicle to buyers, when it lists none: `0 listable of N records:
    /// <cause>`. `None` when it lists some.
    pub fn why_nothing_listable(&self) -> Option<String> {
        if !self.inventory.is_empty() {
            return None;
        }
        let BuildStats {
            skipped,
            invalid,
            ragged,
            repeated,
            ..
        } = self.stats;
        let vehicles = self.all.len();
        let read = vehicles + skipped + invalid + ragged + repeated;
        if read == 0 {
            return Some(
                "the document holds no record (an empty export, or `items` or `unpack.member` \
                 selects nothing)"
                    .to_owned(),
            );
        }
        let mut causes = Vec::new();
        if skipped > 0 {
            let first = self.first_skip.as_deref().unwrap_or("no message");
            causes.push(format!(
                "the item mapping failed on {skipped} (first: {first})"
            ));
        }
        if invalid > 0 {
            causes.push(format!(
                "{invalid} make listings AAP's listing schema refuses (the log names the fields)"
            ));
        }
        if ragged > 0 {
            causes.push(format!(
                "{ragged} CSV rows have more or fewer fields than the header (check `csv.delimiter` \
                 and `csv.quote`)"
            ));
        }
        let excluded = self.inventory.excluded();
        if excluded > 0 {
            causes.push(format!(
                "{excluded} map to a status AAP does not list (sold, or no `status`)"
            ));
        }
        if repeated > 0 {
            causes.push(format!("{repeated} repeat a VIN listed before"));
        }
        Some(format!(
            "0 listable of {read} records: {}",
            causes.join("; ")
        ))
    }

    /// Answers a validated call for `skill` from this snapshot.
    pub fn answer(&self, skill: Skill, request: &Value) -> Result<Data, AapError> {
        match skill {
            Skill::InventorySearch => Ok(page_data(
                self.inventory.search(&SearchRequest::read(request)),
            )),
            Skill::InventoryFacets => {
                Ok(Data::Json(self.inventory.facets(search::filters(request))))
            }
            Skill::InventoryVehicle => {
                let vehicle = self.find(request).ok_or_else(|| {
                    AapError::domain(
                        AapCode::VehicleNotFound,
                        "No vehicle matches that identifier.",
                    )
                })?;
                let vehicle = vehicle.unpack();
                check_listable(&vehicle)?;
                Ok(Data::Json(vehicle))
            }
            Skill::DealerInformation | Skill::LeadSubmit => Err(AapError::Internal(format!(
                "{skill} cannot be answered from an inventory feed"
            ))),
        }
    }

    /// The most specific identifier given decides: VIN, else stock number, else vehicle id. A
    /// VIN that misses is not retried as a stock number: that would answer another unit.
    fn find(&self, request: &Value) -> Option<&Packed> {
        let field = |name: &str| request.get(name).and_then(Value::as_str);
        let index = if let Some(vin) = field("vin") {
            self.by_vin.get(&vin.to_ascii_uppercase())
        } else if let Some(stock) = field("stock") {
            self.by_stock.get(stock)
        } else {
            field("vehicle_id").and_then(|id| self.by_id.get(id))
        }?;
        self.all.get(index as usize)
    }
}
