//! Feed mode: the dealer's whole inventory fetched as one document (JSON, XML or CSV), mapped to
//! AAP vehicles, cached, and searched in the gateway.
//!
//! Freshness: a snapshot younger than `refresh` is served as is; an older one is still served
//! while a background refresh runs; past `max_stale` a request waits for a refresh and fails
//! (`INTERNAL_ERROR`, retryable) if the upstream cannot deliver. A background task also refreshes
//! every `refresh` so buyers rarely wait. One refresh runs at a time.
//!
//! Scale: a dealer group's feed holds tens of thousands of vehicles. A snapshot is built on the
//! feed's own thread ([`FeedThread`]), never on the async workers that serve buyers. A CSV document is read and
//! mapped one row at a time (no document value); each vehicle is kept [packed](Packed) and the
//! search index as columns ([`Inventory`]); a refresh shares every vehicle that did not change
//! with the snapshot it replaces, and the replaced snapshot is freed on the feed's thread too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::decode::{self, Declared, Format};
use super::execute::{Shared, Transport, check_listable, page_json, send};
use super::extract::{Jq, JqValue, JqVars, TextObjects};
use super::packed::Packed;
use super::request::RequestSpec;
use super::search::{Inventory, InventoryBuilder, Prepared, Stored};
use crate::error::{AapCode, AapError};
use crate::protocol::Skill;
use crate::telemetry::Escaped;
use crate::upstream::Upstream;

/// How long a replaced snapshot waits for the searches still reading it, so that it is freed
/// on the feed's thread rather than by the last search, on an async worker.
const RETIRE_WAIT: Duration = Duration::from_secs(2);

/// A compiled `feed.yaml` and its cache.
#[derive(Debug)]
pub struct Feed {
    pub file: String,
    pub upstream: Arc<Upstream>,
    pub request: RequestSpec,
    pub format: Format,
    /// The mapping's `charset:` for the document, if it names one.
    pub charset: Option<&'static encoding_rs::Encoding>,
    pub items: Option<Jq>,
    /// The records are the CSV document's rows (a CSV feed without `items`): they are read and
    /// mapped one at a time instead of through `items` over the whole document.
    pub csv_rows: bool,
    pub item: Jq,
    pub refresh: Duration,
    pub max_stale: Duration,
    pub shared: Shared,
    state: RwLock<Option<Arc<Snapshot>>>,
    refreshing: tokio::sync::Mutex<()>,
    background: AtomicBool,
    /// The first load has ended, with a copy or without: readiness waits for it.
    attempted: AtomicBool,
    /// Where this feed's snapshots are built and freed.
    thread: Arc<FeedThread>,
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
}

/// What building a snapshot took.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildStats {
    /// Size of the fetched document.
    pub bytes: usize,
    /// Records the item mapping could not map (skipped).
    pub skipped: usize,
    /// Vehicles unchanged since the previous copy, shared with it.
    pub reused: usize,
    /// Fetching and building, together.
    pub elapsed: Duration,
}

impl Feed {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        file: String,
        upstream: Arc<Upstream>,
        request: RequestSpec,
        format: Format,
        charset: Option<&'static encoding_rs::Encoding>,
        items: Option<Jq>,
        csv_rows: bool,
        item: Jq,
        refresh: Duration,
        max_stale: Duration,
        shared: Shared,
    ) -> Feed {
        Feed {
            file,
            upstream,
            request,
            format,
            charset,
            items,
            csv_rows,
            item,
            refresh,
            max_stale,
            shared,
            state: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            background: AtomicBool::new(false),
            attempted: AtomicBool::new(false),
            thread: Arc::new(FeedThread::default()),
        }
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.state.read().ok().and_then(|s| s.clone())
    }

    /// Serves `snapshot` from now on and logs it; the copy it replaces is freed off the async
    /// workers.
    fn install(&self, snapshot: Arc<Snapshot>) {
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
            bytes = stats.bytes,
            elapsed_ms = stats.elapsed.as_millis() as u64,
            "{message}"
        );
        if let Some(old) = old {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(retire(old, Arc::clone(&self.thread)))),
                Err(_) => drop(old),
            }
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

    /// Age of the cached copy, if any (for metrics and logs).
    pub fn age(&self) -> Option<Duration> {
        self.current().map(|s| s.fetched_at.elapsed())
    }

    /// A snapshot fresh enough to answer from, refreshing as the freshness rules say.
    pub async fn snapshot(self: &Arc<Self>) -> Result<Arc<Snapshot>, AapError> {
        let current = self.current();
        if let Some(s) = &current {
            let age = s.fetched_at.elapsed();
            if age < self.refresh {
                return Ok(Arc::clone(s));
            }
            if age < self.max_stale {
                self.refresh_in_background();
                return Ok(Arc::clone(s));
            }
        }
        let _one_at_a_time = self.refreshing.lock().await;
        if let Some(s) = self
            .current()
            .filter(|s| s.fetched_at.elapsed() < self.refresh)
        {
            return Ok(s);
        }
        let fetched = self.fetch(Transport::Live(&self.upstream)).await;
        self.attempted.store(true, Ordering::Release);
        match fetched {
            Ok(s) => {
                let s = Arc::new(s);
                self.install(Arc::clone(&s));
                Ok(s)
            }
            Err(e) => match current.filter(|s| s.fetched_at.elapsed() < self.max_stale) {
                Some(s) => Ok(s),
                None => Err(e),
            },
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
        let fetched = self.fetch(Transport::Live(&self.upstream)).await;
        self.attempted.store(true, Ordering::Release);
        match fetched {
            Ok(s) => self.install(Arc::new(s)),
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
            tokio::time::sleep(self.refresh.saturating_sub(age)).await;
        }
        loop {
            self.refresh_now().await;
            tokio::time::sleep(self.refresh).await;
        }
    }

    /// Fetches the document through `transport` and builds a snapshot. Decoding, mapping and
    /// indexing a whole inventory is CPU work of up to seconds: it runs on the feed's thread,
    /// never on the async workers that serve buyers.
    pub async fn fetch(self: &Arc<Self>, transport: Transport<'_>) -> Result<Snapshot, AapError> {
        let started = Instant::now();
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let rendered = self
            .request
            .render(&values, None)
            .map_err(|e| AapError::Internal(format!("{}: {e}", self.file)))?;
        let previous = self.current();
        let mut snapshot = match transport {
            // A CSV feed is read as it arrives: the document is never held whole.
            Transport::Live(upstream) if self.csv_rows && upstream.soap().is_none() => {
                self.fetch_streaming(upstream, rendered, previous).await?
            }
            transport => {
                let response = send(transport, &self.upstream, rendered, true).await?;
                self.check_status(response.status)?;
                let feed = Arc::clone(self);
                self.thread
                    .run(move || {
                        let declared = Declared::reply(feed.charset, &response.headers);
                        feed.build_after(&response.body, declared, previous.as_deref())
                    })
                    .await
                    .map_err(|e| self.building_failed(e))??
            }
        };
        snapshot.stats.elapsed = started.elapsed();
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(snapshot.all.len(), std::sync::atomic::Ordering::Relaxed);
        }
        Ok(snapshot)
    }

    /// Fetches a CSV feed and builds the snapshot from its rows as they arrive: the body goes
    /// from the connection to the mapping thread in pieces (at most [`CHUNKS_IN_FLIGHT`]
    /// waiting), so a refresh never holds the whole document next to the copy it replaces.
    async fn fetch_streaming(
        self: &Arc<Self>,
        upstream: &Upstream,
        rendered: super::request::Rendered,
        previous: Option<Arc<Snapshot>>,
    ) -> Result<Snapshot, AapError> {
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
        self.check_status(response.status)?;
        let (chunks, reader) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let feed = Arc::clone(self);
        let headers = response.headers;
        let build = self.thread.run(move || {
            let declared = Declared::reply(feed.charset, &headers);
            let bad = |cause: String| feed.bad_document(cause);
            let rows = decode::csv_stream(ChunkReader::new(reader), declared).map_err(bad)?;
            feed.build_rows(rows, previous.as_deref())
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
        let mut snapshot = built?;
        snapshot.stats.bytes = bytes;
        Ok(snapshot)
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
        self.build_after(body, declared, None)
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
    ) -> Result<Snapshot, AapError> {
        let bad = |cause: String| self.bad_document(cause);
        if self.csv_rows {
            let text = decode::CsvText::new(body, declared).map_err(bad)?;
            let mut snapshot = self.build_rows(text.rows().map_err(bad)?, previous)?;
            snapshot.stats.bytes = body.len();
            return Ok(snapshot);
        }
        let vars = self.vars();
        let mut building = Building::new(previous, body.len());
        let doc = self.format.decode_jq(body, declared).map_err(bad)?;
        let records = match &self.items {
            Some(items) => items.run(&doc, &vars).map_err(|e| bad(e.to_string()))?,
            None => vec![doc],
        };
        let mut records = records.into_iter();
        let next = || {
            let batch: Vec<JqValue> = records.by_ref().take(BATCH).collect();
            Ok((!batch.is_empty()).then_some(batch))
        };
        let work =
            |batch: Vec<JqValue>| batch.iter().map(|record| self.map(record, &vars)).collect();
        in_order(threads(previous), next, work, |mapped| building.add(mapped)).map_err(bad)?;
        Ok(self.finish(building))
    }

    /// A snapshot of a CSV document's rows, each a record.
    fn build_rows<R: std::io::Read>(
        &self,
        mut rows: decode::CsvRows<R>,
        previous: Option<&Snapshot>,
    ) -> Result<Snapshot, AapError> {
        let vars = self.vars();
        let mut building = Building::new(previous, 0);
        let columns = rows.columns().clone();
        let next = || {
            let mut batch = Vec::with_capacity(BATCH);
            while batch.len() < BATCH {
                let mut record = csv::StringRecord::new();
                if !rows.next_into(&mut record)? {
                    break;
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
                    self.map(&record, &vars)
                })
                .collect()
        };
        in_order(threads(previous), next, work, |mapped| building.add(mapped))
            .map_err(|cause| self.bad_document(cause))?;
        Ok(self.finish(building))
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
    fn finish(&self, building: Building<'_>) -> Snapshot {
        if building.stats.skipped > 0 {
            let skipped = building.stats.skipped;
            tracing::warn!(feed = %self.file, skipped, "feed records the item mapping could not map");
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("record_skipped", skipped as u64);
            }
        }
        building.finish()
    }

    /// What the item mapping makes of one record, ready for the snapshot; `None`: the
    /// mapping failed on it.
    fn map(&self, record: &JqValue, vars: &JqVars) -> Option<Mapped> {
        let vehicle = self.item.run_one_json(record, vars).ok()?;
        let key = |name: &str| vehicle.get(name).and_then(Value::as_str);
        Some(Mapped {
            vin: key("vin").map(str::to_ascii_uppercase),
            stock: key("stock").map(str::to_owned),
            id: key("vehicle_id").map(str::to_owned),
            prepared: Prepared::of(&vehicle),
            packed: Packed::pack(&vehicle),
        })
    }
}

/// Records a mapping thread takes at a time.
const BATCH: usize = 256;

/// Pieces of a streamed feed document waiting for the mapping thread.
const CHUNKS_IN_FLIGHT: usize = 16;

/// Threads to map on: every core for a first load (no buyer is served yet), one for a refresh
/// (the other cores serve the buyers searching the previous copy meanwhile).
fn threads(previous: Option<&Snapshot>) -> usize {
    match previous {
        Some(_) => 1,
        None => std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)),
    }
}

/// A streamed document as `std::io::Read`, for the mapping thread: pieces come from the task
/// reading the connection; `Err` means the connection failed (the task reports why).
struct ChunkReader {
    chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, ()>>,
    current: bytes::Bytes,
}

impl ChunkReader {
    fn new(chunks: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, ()>>) -> ChunkReader {
        ChunkReader {
            chunks,
            current: bytes::Bytes::new(),
        }
    }
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(())) => {
                    return Err(std::io::Error::other("the feed's connection failed"));
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Most threads a first load maps on.
const MAX_THREADS: usize = 4;

/// Maps the batches `next` yields with `work` on `threads` threads (1: on this one) and hands
/// every result to `merge`, in input order. An error from `next` stops everything and is
/// returned. At most two batches per thread are in flight, so memory stays bounded whatever
/// the document's size.
fn in_order<T: Send, O: Send>(
    threads: usize,
    mut next: impl FnMut() -> Result<Option<Vec<T>>, String>,
    work: impl Fn(Vec<T>) -> Vec<O> + Sync,
    mut merge: impl FnMut(O),
) -> Result<(), String> {
    if threads <= 1 {
        while let Some(batch) = next()? {
            work(batch).into_iter().for_each(&mut merge);
        }
        return Ok(());
    }
    let stopped = || "a feed mapping thread stopped".to_owned();
    std::thread::scope(|scope| {
        let work = &work;
        let mut lanes = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (to_worker, inbox) = std::sync::mpsc::sync_channel::<Vec<T>>(2);
            let (outbox, from_worker) = std::sync::mpsc::sync_channel::<Vec<O>>(2);
            std::thread::Builder::new()
                .name("feed-mapping".to_owned())
                .spawn_scoped(scope, move || {
                    for batch in inbox {
                        if outbox.send(work(batch)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| format!("cannot start a feed mapping thread: {e}"))?;
            lanes.push((to_worker, from_worker));
        }
        let (mut sent, mut merged, mut done) = (0usize, 0usize, false);
        loop {
            while !done && sent - merged < 2 * threads {
                match next()? {
                    Some(batch) => {
                        lanes[sent % threads].0.send(batch).map_err(|_| stopped())?;
                        sent += 1;
                    }
                    None => done = true,
                }
            }
            if merged == sent {
                return Ok(());
            }
            let results = lanes[merged % threads].1.recv().map_err(|_| stopped())?;
            merged += 1;
            results.into_iter().for_each(&mut merge);
        }
    })
}

/// One record as the item mapping made it, ready to join the snapshot.
struct Mapped {
    prepared: Prepared,
    packed: Packed,
    /// Upper-cased.
    vin: Option<String>,
    stock: Option<String>,
    id: Option<String>,
}

/// Frees a replaced snapshot once the searches still reading it are done (waiting at most
/// [`RETIRE_WAIT`]), on the feed's thread: a whole inventory's worth of frees would otherwise
/// fall to the last search, on an async worker.
async fn retire(mut old: Arc<Snapshot>, thread: Arc<FeedThread>) {
    let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
    loop {
        match Arc::try_unwrap(old) {
            Ok(snapshot) => {
                thread.free(snapshot);
                return;
            }
            Err(shared) if tokio::time::Instant::now() < deadline => old = shared,
            // Still read after all that: the last reader frees it.
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The one thread that builds a feed's snapshots and frees the copies they replace.
///
/// Why one thread: the allocator (mimalloc) reuses a page once the thread that owns it frees
/// into it. A copy freed on some other, then idle, thread kept its pages committed, and the
/// next refresh, on yet another thread, took fresh memory: refreshes peaked at 1.7× the steady
/// size. Built and freed here, a refresh reuses what the last one freed. Started on first use;
/// ends when the feed is dropped.
#[derive(Debug, Default)]
struct FeedThread {
    jobs: std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl FeedThread {
    /// Runs `job` on the thread (started now if it is not running).
    fn send(&self, job: Job) -> Result<(), String> {
        let mut jobs = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let job = match jobs.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                // The thread ended (a job it ran aborted it): start another.
                Err(std::sync::mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("feed-build".to_owned())
            .spawn(move || rx.into_iter().for_each(|job| job()))
            .map_err(|e| format!("cannot start the feed's thread: {e}"))?;
        tx.send(job)
            .map_err(|_| "the feed's thread stopped".to_owned())?;
        *jobs = Some(tx);
        Ok(())
    }

    /// `work`'s result, computed on the thread; a panic is an error, and the thread lives on.
    /// The work starts now, not when the result is awaited (a streamed build must read while
    /// the connection is pumped).
    fn run<T, W>(&self, work: W) -> impl std::future::Future<Output = Result<T, String>> + use<T, W>
    where
        T: Send + 'static,
        W: FnOnce() -> T + Send + 'static,
    {
        let (done, result) = tokio::sync::oneshot::channel();
        let sent = self.send(Box::new(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = done.send(outcome);
        }));
        async move {
            sent?;
            match result.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(_)) => Err("the build panicked".to_owned()),
                Err(_) => Err("the feed's thread stopped".to_owned()),
            }
        }
    }

    /// Drops `snapshot` on the thread (here, should the thread not start).
    fn free(&self, snapshot: Snapshot) {
        if let Err(e) = self.send(Box::new(move || drop(snapshot))) {
            tracing::debug!(error = %e, "freed a replaced feed copy in place");
        }
    }
}

/// A snapshot being built, one mapped record at a time, in feed order.
struct Building<'a> {
    previous: Option<&'a Snapshot>,
    all: Vec<Packed>,
    inventory: InventoryBuilder,
    by_vin: Lookup,
    by_stock: Lookup,
    by_id: Lookup,
    seen_vins: std::collections::HashSet<String, foldhash::fast::RandomState>,
    stats: BuildStats,
}

impl<'a> Building<'a> {
    fn new(previous: Option<&'a Snapshot>, bytes: usize) -> Building<'a> {
        // A refresh reserves what the copy it replaces needed (see `sized_like`).
        let room = |n: usize| n + n / 32;
        Building {
            previous,
            all: Vec::with_capacity(previous.map_or(0, |p| room(p.all.len()))),
            inventory: previous.map_or_else(InventoryBuilder::new, |p| {
                InventoryBuilder::sized_like(&p.inventory)
            }),
            by_vin: Lookup::sized_like(previous.map(|p| &p.by_vin)),
            by_stock: Lookup::sized_like(previous.map(|p| &p.by_stock)),
            by_id: Lookup::sized_like(previous.map(|p| &p.by_id)),
            seen_vins: std::collections::HashSet::with_capacity_and_hasher(
                previous.map_or(0, Snapshot::len),
                foldhash::fast::RandomState::default(),
            ),
            stats: BuildStats {
                bytes,
                ..BuildStats::default()
            },
        }
    }

    /// Adds what the item mapping made of one record. One broken record must not take the
    /// whole inventory down: it is counted and skipped.
    fn add(&mut self, mapped: Option<Mapped>) {
        let Some(Mapped {
            prepared,
            packed,
            vin,
            stock,
            id,
        }) = mapped
        else {
            self.stats.skipped += 1;
            return;
        };
        // A feed that repeats a unit lists it once (the first row wins).
        if vin.as_ref().is_some_and(|vin| self.seen_vins.contains(vin)) {
            return;
        }
        let Ok(index) = u32::try_from(self.all.len()) else {
            self.stats.skipped += 1;
            return;
        };
        let unchanged = vin.as_deref().and_then(|vin| {
            let previous = self.previous?;
            let kept = previous.all.get(previous.by_vin.get(vin)? as usize)?;
            (kept.as_bytes() == packed.as_bytes()).then(|| kept.clone())
        });
        if unchanged.is_some() {
            self.stats.reused += 1;
        }
        let packed = unchanged.unwrap_or(packed);
        if let Some(vin) = vin {
            self.by_vin.insert(&vin, index);
            self.seen_vins.insert(vin);
        }
        if let Some(stock) = &stock {
            self.by_stock.insert(stock, index);
        }
        if let Some(id) = &id {
            self.by_id.insert(id, index);
        }
        self.inventory
            .push_prepared(prepared, Stored::Packed(packed.clone()));
        self.all.push(packed);
    }

    fn finish(self) -> Snapshot {
        let Building {
            previous,
            all,
            inventory,
            by_vin,
            by_stock,
            by_id,
            stats,
            ..
        } = self;
        // As the mapping (`threads`): a first load sorts on every core, a refresh on one.
        let threads = threads(previous);
        let mut lookups = [by_vin, by_stock, by_id];
        let mut sealed = false;
        let inventory = if threads > 1 {
            std::thread::scope(|scope| {
                let target = &mut lookups;
                let sealing = std::thread::Builder::new()
                    .name("feed-sorting".to_owned())
                    .spawn_scoped(scope, move || target.iter_mut().for_each(Lookup::seal));
                let inventory = inventory.finish_on(threads);
                if let Ok(sealing) = sealing {
                    if let Err(panic) = sealing.join() {
                        std::panic::resume_unwind(panic);
                    }
                    sealed = true;
                }
                inventory
            })
        } else {
            inventory.finish()
        };
        if !sealed {
            lookups.iter_mut().for_each(Lookup::seal);
        }
        let [by_vin, by_stock, by_id] = lookups;
        Snapshot {
            inventory,
            all: all.into_boxed_slice(),
            by_vin,
            by_stock,
            by_id,
            fetched_at: Instant::now(),
            stats,
        }
    }
}

/// Vehicles by one identifier, exact match; a repeated identifier finds the last vehicle that
/// has it. The keys share one buffer (no allocation per vehicle).
#[derive(Debug, Default)]
struct Lookup {
    text: String,
    /// `(start, end, vehicle)`: the key's bytes in `text`; sorted by key, then vehicle, once
    /// sealed.
    entries: Vec<(u32, u32, u32)>,
}

impl Lookup {
    /// An empty lookup with room for about what `like` holds.
    fn sized_like(like: Option<&Lookup>) -> Lookup {
        let room = |n: usize| n + n / 32;
        like.map_or_else(Lookup::default, |like| Lookup {
            text: String::with_capacity(room(like.text.len())),
            entries: Vec::with_capacity(room(like.entries.len())),
        })
    }

    /// Adds a key. (Past 4 GiB of keys one is left out: no feed gets there under
    /// `max_response_bytes`.)
    fn insert(&mut self, key: &str, vehicle: u32) {
        let (Ok(start), Ok(end)) = (
            u32::try_from(self.text.len()),
            u32::try_from(self.text.len() + key.len()),
        ) else {
            return;
        };
        self.text.push_str(key);
        self.entries.push((start, end, vehicle));
    }

    fn key(&self, &(start, end, _): &(u32, u32, u32)) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// Sorts the keys for [`Lookup::get`].
    fn seal(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)).then(a.2.cmp(&b.2)));
        entries.shrink_to_fit();
        self.entries = entries;
        self.text.shrink_to_fit();
    }

    fn get(&self, key: &str) -> Option<u32> {
        let after = self.entries.partition_point(|e| self.key(e) <= key);
        let last = self.entries.get(after.checked_sub(1)?)?;
        (self.key(last) == key).then_some(last.2)
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

    /// Answers a validated call for `skill` from this snapshot.
    pub fn answer(&self, skill: Skill, request: &Value) -> Result<Value, AapError> {
        match skill {
            Skill::InventorySearch => {
                let page = self.inventory.search(request);
                Ok(page_json(page.total, page.skip, page.limit, page.vehicles))
            }
            Skill::InventoryFacets => Ok(self.inventory.facets(request.get("filters"))),
            Skill::InventoryVehicle => {
                let vehicle = self.find(request).ok_or_else(|| {
                    AapError::domain(
                        AapCode::VehicleNotFound,
                        "No vehicle matches that identifier.",
                    )
                })?;
                let vehicle = vehicle.unpack();
                check_listable(&vehicle)?;
                Ok(vehicle)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo Honda feed mapping, loaded as the gateway loads it.
    fn demo_feed() -> Arc<Feed> {
        let schemas = crate::schema::Schemas::load().expect("schemas");
        let metrics = crate::telemetry::metrics::Metrics::new();
        let ctx = super::super::load::LoadContext {
            schemas: &schemas,
            vars: &|_| None,
            dealer_id: "demo_honda",
            dealer_name: "Demo Honda",
            metrics: &metrics,
            previous: None,
            cache: &super::super::load::LoadCache::default(),
        };
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/demo-honda");
        let mut loaded = super::super::load::load_folder(&dir, &ctx).expect("demo-honda loads");
        loaded.feeds.pop().expect("a feed")
    }

    fn example_csv() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/mappings/demo-honda/examples/feed.csv"
        );
        std::fs::read(path).expect("the example feed")
    }

    fn answers(snapshot: &Snapshot) -> Vec<Result<Value, String>> {
        let requests = [
            (
                Skill::InventorySearch,
                serde_json::json!({ "sort": { "field": "price" } }),
            ),
            (Skill::InventoryFacets, serde_json::json!({})),
            (
                Skill::InventoryVehicle,
                serde_json::json!({ "stock": "SJM10002" }),
            ),
            (
                Skill::InventoryVehicle,
                serde_json::json!({ "stock": "SJM10003" }),
            ),
        ];
        requests
            .iter()
            .map(|(skill, request)| snapshot.answer(*skill, request).map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn a_refresh_shares_the_vehicles_that_did_not_change_and_answers_as_a_fresh_load() {
        let feed = demo_feed();
        let body = example_csv();
        let first = feed
            .build(&bytes::Bytes::from(body.clone()), Declared::default())
            .expect("builds");
        assert_eq!((first.len(), first.stats.reused), (3, 0));
        let changed =
            String::from_utf8(body)
                .expect("UTF-8")
                .replacen("\"$24,990\"", "\"$23,990\"", 1);
        let changed = bytes::Bytes::from(changed);
        let refreshed = feed
            .build_after(&changed, Declared::default(), Some(&first))
            .expect("builds");
        assert_eq!(refreshed.stats.reused, 2, "all but the repriced unit");
        let fresh = feed.build(&changed, Declared::default()).expect("builds");
        assert_eq!(answers(&refreshed), answers(&fresh));
        assert_ne!(answers(&refreshed), answers(&first), "the new price shows");
    }

    #[test]
    fn a_document_whose_connection_breaks_off_is_refused_not_taken_for_a_shorter_one() {
        let feed = demo_feed();
        let body = example_csv();
        // The header and the first row arrive, then the connection fails or ends.
        let cut = body
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == b"\r\n")
            .nth(1)
            .map(|(i, _)| i + 2)
            .expect("two lines");
        let build = |then_fails: bool| {
            let (chunks, reader) = tokio::sync::mpsc::channel(cut / 7 + 2);
            for piece in body[..cut].chunks(7) {
                chunks
                    .try_send(Ok(bytes::Bytes::copy_from_slice(piece)))
                    .expect("room");
            }
            if then_fails {
                chunks.try_send(Err(())).expect("room");
            }
            drop(chunks);
            let rows = decode::csv_stream(ChunkReader::new(reader), Declared::default())
                .map_err(|e| feed.bad_document(e))?;
            feed.build_rows(rows, None)
        };
        assert_eq!(build(false).expect("a one-row feed").len(), 1);
        let error = build(true).expect_err("a broken document");
        assert!(error.to_string().contains("connection failed"), "{error}");
    }

    #[test]
    fn records_mapped_on_several_threads_are_merged_in_feed_order() {
        for threads in [1, 2, 3] {
            let mut input = (0..1000u32).collect::<Vec<_>>().into_iter();
            let next = || {
                let batch: Vec<u32> = input.by_ref().take(7).collect();
                Ok((!batch.is_empty()).then_some(batch))
            };
            // Uneven work, so that threads finish out of order.
            let work = |batch: Vec<u32>| {
                if batch[0].is_multiple_of(3) {
                    let spin = (0..200_000u64).fold(0u64, |a, x| a.wrapping_add(x * x));
                    std::hint::black_box(spin);
                }
                batch.into_iter().map(|x| x * 2).collect()
            };
            let mut merged = Vec::new();
            in_order(threads, next, work, |x| merged.push(x)).expect("maps");
            assert_eq!(
                merged,
                (0..1000).map(|x| x * 2).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
    }

    #[test]
    fn an_unreadable_document_stops_the_mapping_threads_with_its_error() {
        for threads in [1, 3] {
            let mut batches = 0;
            let next = || {
                batches += 1;
                if batches > 5 {
                    return Err("CSV row 40 unreadable".to_owned());
                }
                Ok(Some(vec![batches; 8]))
            };
            let mut merged = 0;
            let error = in_order(threads, next, |b: Vec<i32>| b, |_| merged += 1).unwrap_err();
            assert_eq!(error, "CSV row 40 unreadable");
            assert!(merged <= 40);
        }
    }

    #[tokio::test]
    async fn a_panicking_build_is_an_error_and_the_feed_thread_goes_on() {
        let thread = FeedThread::default();
        let failed = thread
            .run(|| -> u32 { panic!("a defect in a build") })
            .await;
        assert_eq!(failed, Err("the build panicked".to_owned()));
        let on = thread.run(|| std::thread::current().name().map(str::to_owned));
        assert_eq!(on.await, Ok(Some("feed-build".to_owned())));
    }

    #[tokio::test]
    async fn feed_thread_work_starts_before_its_result_is_awaited() {
        // A streamed build must read while the caller pumps the connection into it.
        let thread = FeedThread::default();
        let (started, seen) = std::sync::mpsc::channel();
        let pending = thread.run(move || started.send(()).is_ok());
        seen.recv_timeout(Duration::from_secs(10))
            .expect("the work ran before anyone awaited it");
        assert_eq!(pending.await, Ok(true));
    }

    #[test]
    fn a_lookup_finds_exact_keys_and_the_last_vehicle_of_a_repeated_one() {
        let mut lookup = Lookup::default();
        for (key, vehicle) in [("B2", 0), ("A1", 1), ("B2", 2), ("", 3), ("A10", 4)] {
            lookup.insert(key, vehicle);
        }
        lookup.seal();
        assert_eq!(lookup.get("A1"), Some(1));
        assert_eq!(lookup.get("B2"), Some(2));
        assert_eq!(lookup.get("A10"), Some(4));
        assert_eq!(lookup.get(""), Some(3));
        assert_eq!(lookup.get("A"), None);
        assert_eq!(lookup.get("b2"), None);
        assert_eq!(lookup.get("C"), None);
        assert_eq!(Lookup::default().get("A1"), None);
    }
}
