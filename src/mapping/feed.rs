//! Feed mode: the dealer's whole inventory fetched as one document (JSON, XML or CSV), mapped to
//! AAP vehicles, cached, and searched in the gateway.
//!
//! Freshness: a snapshot younger than `refresh` is served as is; an older one is still served
//! while a background refresh runs; past `max_stale` a request waits for a refresh and fails
//! (`INTERNAL_ERROR`, retryable) if the upstream cannot deliver. A background task also refreshes
//! every `refresh` so buyers rarely wait. One refresh runs at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::decode::{Declared, Format};
use super::execute::{Shared, Transport, check_listable, page_json, send};
use super::extract::{Jq, JqValue, JqVars};
use super::request::RequestSpec;
use super::search::{Inventory, Listing};
use crate::error::{AapCode, AapError};
use crate::protocol::Skill;
use crate::telemetry::Escaped;
use crate::upstream::Upstream;

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
    pub item: Jq,
    pub refresh: Duration,
    pub max_stale: Duration,
    pub shared: Shared,
    state: RwLock<Option<Arc<Snapshot>>>,
    refreshing: tokio::sync::Mutex<()>,
    background: AtomicBool,
    /// The first load has ended, with a copy or without: readiness waits for it.
    attempted: AtomicBool,
}

/// One fetched feed, ready to search.
#[derive(Debug)]
pub struct Snapshot {
    /// Listable vehicles (available, intransit, pending).
    pub inventory: Inventory,
    /// Every mapped record, sold ones included, for detail lookups.
    all: Vec<Arc<Value>>,
    by_vin: HashMap<String, usize>,
    by_stock: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
    pub fetched_at: Instant,
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
            item,
            refresh,
            max_stale,
            shared,
            state: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            background: AtomicBool::new(false),
            attempted: AtomicBool::new(false),
        }
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.state.read().ok().and_then(|s| s.clone())
    }

    fn store(&self, snapshot: Arc<Snapshot>) {
        if let Ok(mut state) = self.state.write() {
            *state = Some(snapshot);
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
                self.store(Arc::clone(&s));
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
            Ok(s) => {
                tracing::debug!(feed = %self.file, vehicles = s.all.len(), "feed refreshed");
                self.store(Arc::new(s));
            }
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
    /// indexing a whole inventory is CPU work of up to seconds: it runs on a blocking thread,
    /// never on the async workers that serve buyers.
    pub async fn fetch(self: &Arc<Self>, transport: Transport<'_>) -> Result<Snapshot, AapError> {
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let rendered = self
            .request
            .render(&values, None)
            .map_err(|e| AapError::Internal(format!("{}: {e}", self.file)))?;
        let response = send(transport, &self.upstream, rendered, true).await?;
        let upstream = self.upstream.name().to_owned();
        if !response.status.is_success() {
            return Err(AapError::UpstreamUnavailable {
                upstream,
                cause: format!("feed answered HTTP {} ({})", response.status, self.file),
            });
        }
        let feed = Arc::clone(self);
        let snapshot = tokio::task::spawn_blocking(move || {
            feed.build(
                &response.body,
                Declared::reply(feed.charset, &response.headers),
            )
        })
        .await
        .map_err(|e| AapError::Internal(format!("{}: building the snapshot: {e}", self.file)))??;
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(snapshot.all.len(), std::sync::atomic::Ordering::Relaxed);
        }
        Ok(snapshot)
    }

    /// Maps a fetched document into a snapshot; `declared` names its charset (the mapping's,
    /// the reply's `Content-Type`).
    pub fn build(&self, body: &bytes::Bytes, declared: Declared<'_>) -> Result<Snapshot, AapError> {
        let bad = |cause: String| AapError::InvalidUpstreamResponse {
            upstream: self.upstream.name().to_owned(),
            cause: format!("{cause} ({})", self.file),
        };
        let doc = self.format.decode_jq(body, declared).map_err(bad)?;
        let vars = JqVars {
            request: JqValue::from_json(&Value::Null),
            tables: self.shared.tables_jq.clone(),
            dealer: self.shared.dealer_jq.clone(),
            lead: JqValue::null(),
        };
        let records = match &self.items {
            Some(items) => items.run(&doc, &vars).map_err(|e| bad(e.to_string()))?,
            None => vec![doc],
        };
        let mut all = Vec::with_capacity(records.len());
        let mut skipped = 0usize;
        let mut seen_vins = std::collections::HashSet::new();
        for record in &records {
            match self.item.run_one(record, &vars) {
                Ok(v) => {
                    let v = v.to_json();
                    // A feed that repeats a unit lists it once (the first row wins).
                    let vin = v
                        .get("vin")
                        .and_then(Value::as_str)
                        .map(str::to_ascii_uppercase);
                    if vin.is_none_or(|vin| seen_vins.insert(vin)) {
                        all.push(Arc::new(v));
                    }
                }
                // One broken row must not take the whole inventory down.
                Err(_) => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(feed = %self.file, skipped, "feed records the item mapping could not map");
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("record_skipped", skipped as u64);
            }
        }
        let mut by_vin = HashMap::new();
        let mut by_stock = HashMap::new();
        let mut by_id = HashMap::new();
        for (i, v) in all.iter().enumerate() {
            let key = |name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
            if let Some(vin) = key("vin") {
                by_vin.insert(vin.to_ascii_uppercase(), i);
            }
            if let Some(stock) = key("stock") {
                by_stock.insert(stock, i);
            }
            if let Some(id) = key("vehicle_id") {
                by_id.insert(id, i);
            }
        }
        let listings = all
            .iter()
            .map(|v| Listing::from_arc(Arc::clone(v)))
            .collect();
        Ok(Snapshot {
            inventory: Inventory::new(listings),
            all,
            by_vin,
            by_stock,
            by_id,
            fetched_at: Instant::now(),
        })
    }
}

impl Snapshot {
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
                check_listable(vehicle)?;
                Ok(vehicle.as_ref().clone())
            }
            Skill::DealerInformation | Skill::LeadSubmit => Err(AapError::Internal(format!(
                "{skill} cannot be answered from an inventory feed"
            ))),
        }
    }

    /// The most specific identifier given decides: VIN, else stock number, else vehicle id. A
    /// VIN that misses is not retried as a stock number: that would answer another unit.
    fn find(&self, request: &Value) -> Option<&Arc<Value>> {
        let field = |name: &str| request.get(name).and_then(Value::as_str);
        let index = if let Some(vin) = field("vin") {
            self.by_vin.get(&vin.to_ascii_uppercase())
        } else if let Some(stock) = field("stock") {
            self.by_stock.get(stock)
        } else {
            field("vehicle_id").and_then(|id| self.by_id.get(id))
        }?;
        self.all.get(*index)
    }
}
