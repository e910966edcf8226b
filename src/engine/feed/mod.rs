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
use crate::settings::RefreshPriority;
use crate::telemetry::Escaped;
use crate::upstream::Upstream;

use self::building::{Building, Lookup, MappedRecord};
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
    /// Why the served copy lists nothing, when it does not ([`Snapshot::why_nothing_listable`]).
    nothing_listable: Mutex<Option<String>>,
    /// When the served copy was last found current: built, or confirmed unchanged.
    confirmed: Mutex<Option<Instant>>,
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
            nothing_listable: Mutex::new(None),
            confirmed: Mutex::new(None),
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
                self.refresh_in_background();
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

    /// Fetches the document through `transport` and builds a snapshot. Decoding, mapping and
    /// indexing a whole inventory is CPU work of up to seconds: it runs on the feed's thread,
    /// never on the async workers that serve buyers.
    pub async fn fetch(self: &Arc<Self>, transport: Transport<'_>) -> Result<Snapshot, AapError> {
        match self.fetch_since(transport, None).await? {
            Fetched::Built(snapshot, _) => Ok(*snapshot),
            Fetched::Unchanged => Err(AapError::Internal(format!(
                "{}: an unconditional fetch came back unchanged",
                self.file
            ))),
        }
    }

    /// [`Feed::fetch`], conditional on `known` (what the served copy was made from): a `304`
    /// or the same body is [`Fetched::Unchanged`].
    async fn fetch_since(
        self: &Arc<Self>,
        transport: Transport<'_>,
        known: Option<&Validators>,
    ) -> Result<Fetched, AapError> {
        let started = Instant::now();
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let mut rendered = self
            .request
            .render(Scope::context(&values), None)
            .map_err(|e| AapError::Internal(format!("{}: {e}", self.file)))?;
        // (A feed joined to a second document refetches both: a `304` for one would say
        // nothing of the other. The SHA-256 of both still keeps an unchanged copy.)
        if let Some(known) = known.filter(|_| !self.joins_a_request()) {
            // The mapping's own headers win (a vendor that wants no conditions can say so).
            let conditions: Vec<_> = (known.conditions())
                .filter(|(name, _)| !rendered.headers.iter().any(|(n, _)| n == name))
                .collect();
            rendered.headers.extend(conditions);
        }
        let known_digest = known.and_then(|k| k.digest);
        let previous = self.current();
        // A refresh gives way to the searches of the copy it replaces; a first load is what
        // readiness (or a buyer) waits for.
        let idle = previous.is_some() && self.idle_refreshes.load(Ordering::Relaxed);
        // A joined second document is fetched first, whole.
        let side = self.fetch_side(transport).await?;
        let side_digest = side.as_ref().map(|s| s.digest);
        let (mut snapshot, validators) = match transport {
            // A CSV feed is read as it arrives: the document is never held whole.
            Transport::Live(upstream) if self.csv_rows && upstream.soap().is_none() => {
                match self
                    .fetch_streaming(upstream, rendered, previous, idle, known.is_some(), side)
                    .await?
                {
                    None => return Ok(Fetched::Unchanged),
                    Some((snapshot, validators))
                        if validators.digest.is_some() && validators.digest == known_digest =>
                    {
                        // The same bytes: the copy built meanwhile goes, the served one stays.
                        self.thread.free(snapshot);
                        return Ok(Fetched::Unchanged);
                    }
                    Some(built) => built,
                }
            }
            transport => {
                let response = send(transport, &self.upstream, rendered, true).await?;
                if response.status == http::StatusCode::NOT_MODIFIED && known.is_some() {
                    return Ok(Fetched::Unchanged);
                }
                self.check_status(response.status)?;
                let feed = Arc::clone(self);
                let built = self
                    .thread
                    .run(idle, move || {
                        let digest = combined(Sha256::digest(&response.body).into(), side_digest);
                        if Some(digest) == known_digest {
                            return Ok(None);
                        }
                        let declared = Declared::reply(feed.charset, &response.headers);
                        let snapshot = feed.build_after(
                            &response.body,
                            declared,
                            previous.as_deref(),
                            side.as_ref(),
                        )?;
                        Ok(Some((snapshot, Validators::of(&response.headers, digest))))
                    })
                    .await
                    .map_err(|e| self.building_failed(e))??;
                match built {
                    Some(built) => built,
                    None => return Ok(Fetched::Unchanged),
                }
            }
        };
        snapshot.stats.elapsed = started.elapsed();
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(snapshot.all.len(), std::sync::atomic::Ordering::Relaxed);
        }
        Ok(Fetched::Built(Box::new(snapshot), validators))
    }

    /// Fetches a CSV feed and builds the snapshot from its rows as they arrive: the body goes
    /// from the connection to the mapping thread in pieces (at most [`CHUNKS_IN_FLIGHT`]
    /// waiting), so a refresh never holds the whole document next to the copy it replaces.
    /// `None`: the upstream answered `304` to a `conditional` request.
    async fn fetch_streaming(
        self: &Arc<Self>,
        upstream: &Upstream,
        rendered: crate::engine::request::Rendered,
        previous: Option<Arc<Snapshot>>,
        idle: bool,
        conditional: bool,
        side: Option<SideDoc>,
    ) -> Result<Option<(Snapshot, Validators)>, AapError> {
        let request = crate::upstream::UpstreamRequest {
            method: rendered.method,
            path_and_query: rendered.path_and_query,
            headers: rendered.headers,
            body: rendered.body.map(bytes::Bytes::from),
            idempotent: true,
        };
        let (response, stream) = upstream
            .call_streaming(request)
            .await
            .map_err(|e| e.into_aap(upstream.name()))?;
        if response.status == http::StatusCode::NOT_MODIFIED && conditional {
            return Ok(None);
        }
        self.check_status(response.status)?;
        let (chunks, reader) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let feed = Arc::clone(self);
        let headers = response.headers;
        let build = self.thread.run(idle, move || {
            let declared = Declared::reply(feed.charset, &headers);
            let bad = |cause: String| feed.bad_document(cause);
            // A gzip file is unpacked as it arrives; a zip archive is held packed, its member
            // read as a stream (`formats::unpacked`).
            let mut source = ChunkReader::new(reader);
            let previous = previous.as_deref();
            let units = |document: &mut dyn std::io::Read, table: Option<&SideTable>| {
                let rows =
                    formats::csv_stream_with(document, declared, &feed.csv_dialect).map_err(bad)?;
                feed.build_rows(rows, previous, table)
            };
            let snapshot = match &feed.join {
                // The joined member is read first, the units then stream past it.
                Some(
                    join @ Join {
                        side: JoinSide::Member(name),
                        ..
                    },
                ) => formats::unpacked_with_member(
                    &mut source,
                    &feed.unpack,
                    name,
                    |side| {
                        let rows = formats::csv_stream_with(side, declared, &feed.csv_dialect)?;
                        feed.side_table(join, rows)
                    },
                    |table, document| units(document, Some(&table.map_err(bad)?)),
                )
                .map_err(bad)??,
                _ => {
                    let table = (side.as_ref())
                        .map(|side| feed.side_document(side))
                        .transpose()
                        .map_err(bad)?;
                    formats::unpacked(&mut source, declared.content_type, &feed.unpack, |d| {
                        units(d, table.as_ref())
                    })
                    .map_err(bad)??
                }
            };
            let digest = combined(source.digest(), side.map(|s| s.digest));
            Ok::<_, AapError>((snapshot, Validators::of(&headers, digest)))
        });
        let mut bytes = response.body.len();
        let pumped = match stream {
            // A 2xx reply always streams; should it not, its body is all there is.
            None => {
                let _ = chunks.send(Ok(response.body)).await;
                Ok(())
            }
            Some(mut stream) => loop {
                match stream.chunk().await {
                    Ok(Some(chunk)) => {
                        bytes += chunk.len();
                        // Refused: the build stopped (its error is the one to report).
                        if chunks.send(Ok(chunk)).await.is_err() {
                            break Ok(());
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => {
                        let _ = chunks.send(Err(())).await;
                        break Err(e);
                    }
                }
            },
        };
        drop(chunks);
        let built = build.await.map_err(|e| self.building_failed(e))?;
        pumped.map_err(|e| e.into_aap(upstream.name()))?;
        let (mut snapshot, validators) = built?;
        snapshot.stats.bytes = bytes;
        Ok(Some((snapshot, validators)))
    }

    fn check_status(&self, status: http::StatusCode) -> Result<(), AapError> {
        if status.is_success() {
            return Ok(());
        }
        Err(AapError::UpstreamUnavailable {
            upstream: self.upstream.name().to_owned(),
            cause: format!("feed answered HTTP {status} ({})", self.file),
        })
    }

    fn building_failed(&self, e: String) -> AapError {
        AapError::Internal(format!("{}: building the snapshot: {e}", self.file))
    }

    fn bad_document(&self, cause: String) -> AapError {
        AapError::InvalidUpstreamResponse {
            upstream: self.upstream.name().to_owned(),
            cause: format!("{cause} ({})", self.file),
        }
    }

    /// Maps a fetched document into a snapshot; `declared` names its charset (the mapping's,
    /// the reply's `Content-Type`).
    pub fn build(&self, body: &bytes::Bytes, declared: Declared<'_>) -> Result<Snapshot, AapError> {
        self.build_after(body, declared, None, None)
    }

    /// Whether the feed joins a second document of its upstream (`join.request`).
    fn joins_a_request(&self) -> bool {
        matches!(
            &self.join,
            Some(Join {
                side: JoinSide::Request(_),
                ..
            })
        )
    }

    /// Fetches the document `join.request` names, whole (`None`: the feed joins none, or the
    /// transport is an example's canned reply, which stands for the units' document alone).
    async fn fetch_side(&self, transport: Transport<'_>) -> Result<Option<SideDoc>, AapError> {
        let (Some(join), Transport::Live(upstream)) = (&self.join, transport) else {
            return Ok(None);
        };
        let JoinSide::Request(spec) = &join.side else {
            return Ok(None);
        };
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let rendered = spec
            .render(Scope::context(&values), None)
            .map_err(|e| AapError::Internal(format!("{}: join.request: {e}", self.file)))?;
        let response = send(Transport::Live(upstream), &self.upstream, rendered, true).await?;
        if !response.status.is_success() {
            return Err(AapError::UpstreamUnavailable {
                upstream: self.upstream.name().to_owned(),
                cause: format!(
                    "the joined document (`join.request`) answered HTTP {} ({})",
                    response.status, self.file
                ),
            });
        }
        let digest = Sha256::digest(&response.body).into();
        Ok(Some(SideDoc {
            body: response.body,
            headers: response.headers,
            digest,
        }))
    }

    /// The joined file's table, from its CSV rows.
    fn side_table<R: std::io::Read>(
        &self,
        join: &Join,
        rows: formats::CsvRows<R>,
    ) -> Result<SideTable, String> {
        SideTable::read(join, rows).map_err(|e| match &join.side {
            JoinSide::Member(name) => format!("joined member `{name}`: {e}"),
            JoinSide::Request(_) => format!("joined document (`join.request`): {e}"),
        })
    }

    /// The joined file's table from its bytes (unpacked if packed).
    fn side_bytes(
        &self,
        join: &Join,
        body: &[u8],
        declared: Declared<'_>,
    ) -> Result<SideTable, String> {
        let text = formats::CsvText::new(body, declared)?;
        self.side_table(join, text.rows_with(&self.csv_dialect)?)
    }

    /// The table of a joined document fetched on its own (`join.request`).
    fn side_document(&self, side: &SideDoc) -> Result<SideTable, String> {
        let Some(join) = &self.join else {
            return Err("no join".to_owned());
        };
        let declared = Declared::reply(self.charset, &side.headers);
        let unpack = Unpack {
            member: None,
            ..self.unpack.clone()
        };
        let unpacked = formats::unpacked_whole(&side.body, declared.content_type, &unpack)?;
        self.side_bytes(join, unpacked.as_deref().unwrap_or(&side.body), declared)
    }

    /// [`Feed::build`], sharing with `previous` every vehicle that maps to exactly what it
    /// holds under the same VIN. The first load (no `previous`) maps records on every core: no
    /// buyer is served yet. A refresh maps on this one thread, leaving the other cores to the
    /// buyers searching the previous copy meanwhile.
    fn build_after(
        &self,
        body: &bytes::Bytes,
        declared: Declared<'_>,
        previous: Option<&Snapshot>,
        side: Option<&SideDoc>,
    ) -> Result<Snapshot, AapError> {
        let bad = |cause: String| self.bad_document(cause);
        let packed = body.len();
        let (unpacked, table) = match &self.join {
            Some(
                join @ Join {
                    side: JoinSide::Member(name),
                    ..
                },
            ) => {
                let whole = |file: &mut dyn std::io::Read| {
                    let mut out = Vec::new();
                    file.read_to_end(&mut out)
                        .map(|_| out)
                        .map_err(|e| e.to_string())
                };
                let (side, units) = formats::unpacked_with_member(
                    &body[..],
                    &self.unpack,
                    name,
                    whole,
                    |side, units| Ok::<_, String>((side?, whole(units)?)),
                )
                .and_then(|read| read)
                .map_err(bad)?;
                let table = self.side_bytes(join, &side, declared).map_err(bad)?;
                (Some(bytes::Bytes::from(units)), Some(table))
            }
            _ => {
                let unpacked = formats::unpacked_whole(body, declared.content_type, &self.unpack)
                    .map_err(bad)?
                    .map(bytes::Bytes::from);
                let table = (side.map(|side| self.side_document(side)))
                    .transpose()
                    .map_err(bad)?;
                (unpacked, table)
            }
        };
        let table = table.as_ref();
        let body = unpacked.as_ref().unwrap_or(body);
        if self.csv_rows {
            let text = formats::CsvText::new(body, declared).map_err(bad)?;
            let rows = text.rows_with(&self.csv_dialect).map_err(bad)?;
            let mut snapshot = self.build_rows(rows, previous, table)?;
            snapshot.stats.bytes = packed;
            return Ok(snapshot);
        }
        let vars = self.vars();
        let mut building = Building::new(previous, packed);
        let doc = JqValue::decode(&self.format, body, declared).map_err(bad)?;
        let records = match &self.items {
            Some(items) => items.run(&doc, &vars).map_err(|e| bad(e.to_string()))?,
            None => vec![doc],
        };
        let mut records = records.into_iter();
        let next = || {
            let batch: Vec<JqValue> = records.by_ref().take(BATCH).collect();
            Ok((!batch.is_empty()).then_some(batch))
        };
        let work = |batch: Vec<JqValue>| {
            (batch.iter())
                .map(|record| self.map(record, &vars, table))
                .collect()
        };
        in_order(threads(previous), next, work, |mapped| building.add(mapped)).map_err(bad)?;
        Ok(self.finish(building, table))
    }

    /// A snapshot of a CSV document's rows, each a record.
    fn build_rows<R: std::io::Read>(
        &self,
        mut rows: formats::CsvRows<R>,
        previous: Option<&Snapshot>,
        table: Option<&SideTable>,
    ) -> Result<Snapshot, AapError> {
        let vars = self.vars();
        let mut building = Building::new(previous, 0);
        let columns = rows.columns().clone();
        let width = columns.width();
        let mut ragged = 0;
        let next = || {
            let mut batch = Vec::with_capacity(BATCH);
            while batch.len() < BATCH {
                let mut record = csv::StringRecord::new();
                if !rows.next_into(&mut record)? {
                    break;
                }
                // A row with more or fewer fields than the header: its fields cannot be told
                // apart (a shifted column would put the price under the mileage).
                if record.len() != width {
                    ragged += 1;
                    continue;
                }
                batch.push(record);
            }
            Ok((!batch.is_empty()).then_some(batch))
        };
        let objects = TextObjects::new(columns.names());
        let work = |batch: Vec<csv::StringRecord>| {
            batch
                .iter()
                .map(|record| {
                    let row = columns.row(record);
                    let record = objects.build(row.text(), row.entries());
                    self.map(&record, &vars, table)
                })
                .collect()
        };
        in_order(threads(previous), next, work, |mapped| building.add(mapped))
            .map_err(|cause| self.bad_document(cause))?;
        building.stats.ragged = ragged;
        Ok(self.finish(building, table))
    }

    fn vars(&self) -> JqVars {
        JqVars {
            request: JqValue::from_json(&Value::Null),
            tables: self.shared.tables_jq.clone(),
            dealer: self.shared.dealer_jq.clone(),
            lead: JqValue::null(),
        }
    }

    /// The snapshot, once every record is in; skipped records are logged and counted.
    fn finish(&self, mut building: Building<'_>, table: Option<&SideTable>) -> Snapshot {
        if let Some(table) = table {
            let join = table.stats();
            building.stats.join = Some(join);
            tracing::info!(
                feed = %self.file,
                joined = join.joined,
                unmatched = join.unmatched,
                ambiguous = join.ambiguous_units,
                "feed units joined"
            );
            if join.ambiguous_keys > 0 {
                tracing::warn!(
                    feed = %self.file,
                    keys = join.ambiguous_keys,
                    units = join.ambiguous_units,
                    "join keys held by more than one row of the joined file: the units with \
                     them got none of the rows (`join.many: true` lists them all)"
                );
                if let Some(meter) = self.upstream.meter() {
                    meter.mapping_event("join_key_ambiguous", join.ambiguous_keys as u64);
                }
            }
        }
        let first_skip = (self.first_skip.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if building.stats.skipped > 0 {
            let skipped = building.stats.skipped;
            let first = first_skip.as_deref().unwrap_or("");
            tracing::warn!(feed = %self.file, skipped, first, "feed records the item mapping could not map");
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("record_skipped", skipped as u64);
            }
        }
        if building.stats.ragged > 0 {
            let ragged = building.stats.ragged;
            tracing::warn!(
                feed = %self.file,
                ragged,
                "feed CSV rows with more or fewer fields than the header: skipped"
            );
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("csv_row_ragged", ragged as u64);
            }
        }
        let mut snapshot = building.finish();
        snapshot.first_skip = first_skip;
        snapshot
    }

    /// What the item mapping makes of one record, ready for the snapshot; `None`: the
    /// mapping failed on it.
    fn map(
        &self,
        record: &JqValue,
        vars: &JqVars,
        table: Option<&SideTable>,
    ) -> Option<MappedRecord> {
        let joined;
        let record = match (table, &self.join) {
            (Some(table), Some(join)) => {
                joined = table.joined(join, record, vars);
                &joined
            }
            _ => record,
        };
        let vehicle = match self.item.run_one_json(record, vars) {
            Ok(vehicle) => vehicle,
            Err(e) => {
                let mut first = self
                    .first_skip
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if first.is_none() {
                    *first = Some(e.to_string());
                }
                return None;
            }
        };
        let key = |name: &str| vehicle.get(name).and_then(Value::as_str);
        Some(MappedRecord {
            vin: key("vin").map(str::to_ascii_uppercase),
            stock: key("stock").map(str::to_owned),
            id: key("vehicle_id").map(str::to_owned),
            prepared: Prepared::of(&vehicle),
            encoded: Packed::encode(&vehicle),
        })
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
            ragged,
            repeated,
            ..
        } = self.stats;
        let vehicles = self.all.len();
        let read = vehicles + skipped + ragged + repeated;
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
