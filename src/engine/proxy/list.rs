//! List skills (`inventory.search`): straight through the upstream when its pages are exactly
//! AAP's answer, else completed in the gateway from a scan; derived facets from the same scan.
//!
//! Exact or loud (docs/protocol.md §Exact or refused): every walk over the upstream's pages
//! checks that what it read can be the whole answer — a record that comes back twice, a
//! reported total that paging cannot reach, a short page followed by more records, more
//! records than the upstream's own total — and refuses the call ([`Incomplete`]) rather than
//! answer part of it. A record the item program cannot map, or whose listing the AAP schema
//! refuses, is dropped and counted; when that happens on a page answered straight through, the
//! search is completed from a scan instead, so that the total never counts it.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tracing::debug_span;

use crate::engine::request::{PageRef, Pagination, plan};
use crate::error::{AapError, Incomplete};
use crate::inventory::{Inventory, Listing};
use crate::lang::jq::JqVars;
use crate::lang::template::{Lazy, Scope};
use crate::protocol::Data;
use crate::protocol::search::SearchRequest;
use crate::protocol::vehicle::{SearchPage, Vehicle};

use super::call::Called;
use super::page::{as_count, is_listable_status, page_data};
use super::scan_cache::{Lookup, ScanKey, Walk as ScanWalk};
use super::seen::Seen;
use super::spec::{NextPage, ProxyMapping, ResponseSpec, RuleOutcome, Values};
use super::transport::Transport;

/// One upstream page of a list skill.
struct Fetched {
    /// The records mapped to AAP vehicles whose listing the schema accepts, whatever their
    /// status.
    vehicles: Vec<Vehicle>,
    /// Records in the upstream's page (mapped or not): what paging decisions count.
    records: usize,
    /// Records dropped: the item program failed on them or the listing schema refused them.
    dropped: usize,
    /// The upstream's total, when the mapping reads one.
    total: Option<usize>,
    /// Sequential paging: the cursor or link of the next page (`None`: this was the last).
    next: Option<Arc<str>>,
}

/// The range filters that no unit without a value for `field` can match: with one of them in
/// the request, where the upstream sorts such units does not matter.
fn range_filters(field: &str) -> &'static [&'static str] {
    match field {
        "price" => &["price_min", "price_max"],
        "year" => &["year_min", "year_max"],
        "mileage" => &["mileage_max"],
        _ => &[],
    }
}

impl ProxyMapping {
    /// Every listing the upstream has (no filter sent; at most `scan_limit` records), for
    /// `aap-gateway verify` to answer searches from with AAP semantics.
    pub async fn full_scan(&self) -> Result<Arc<Inventory>, AapError> {
        self.scan_everything(Transport::Live(&self.upstream)).await
    }

    /// Every listing the upstream has, through `transport`: the exact-or-refused walk (and its
    /// `scan_cache`) that completes searches.
    pub(super) async fn scan_everything(
        &self,
        transport: Transport<'_>,
    ) -> Result<Arc<Inventory>, AapError> {
        self.scan(transport, &ScanKey::everything()).await
    }

    /// Derived facets of `inventory.facets` (`derive: search`): scan, then aggregate.
    pub async fn facets(
        &self,
        transport: Transport<'_>,
        filters: &Map<String, Value>,
    ) -> Result<Value, AapError> {
        let inventory = self.scan(transport, &self.scan_key(filters)).await?;
        Ok(inventory.facets(filters))
    }

    /// `inventory.search`: straight through the upstream when its pages are exactly AAP's
    /// answer, else completed in the gateway.
    pub(super) async fn search(
        &self,
        transport: Transport<'_>,
        request: &SearchRequest<'_>,
    ) -> Result<Data, AapError> {
        if self.direct(request) {
            match self.straight_through(transport, request).await? {
                Some(page) => return Ok(Data::Search(page)),
                // A record it had to drop: its total counts it, a scan does not.
                None => self.event("direct_page_completed_by_scan", 1),
            }
        }
        let inventory = self
            .scan(transport, &self.scan_key(request.filters))
            .await?;
        Ok(page_data(inventory.search(request)))
    }

    /// The upstream's own pages covering the request's window, sliced; `None` when a page held
    /// a record the answer cannot count (unmappable, refused by the listing schema, or not
    /// listable although `supports.listing: listable` says so).
    async fn straight_through(
        &self,
        transport: Transport<'_>,
        request: &SearchRequest<'_>,
    ) -> Result<Option<SearchPage>, AapError> {
        if self
            .request
            .pagination
            .as_ref()
            .is_some_and(Pagination::sequential)
        {
            return self.straight_through_walk(transport, request).await;
        }
        let (skip, limit) = (request.skip, request.limit);
        let build = || self.template_values(request.data, None);
        let context = Lazy::new(&build);
        let values = Scope::request(request.data, &self.shared.tables_tpl, &context);
        let vars = self.vars(request.data, None);
        let mut walk = Walk::sized(limit);
        let mut listings: Vec<Vehicle> = Vec::new();
        // Without paging the one reply is the whole list: the window is sliced from it.
        let (pages, start) = match &self.request.pagination {
            Some(paging) => plan(skip as u64, limit as u64, paging.max_size()),
            None => (vec![PageRef::at(0, 0)], skip),
        };
        for page in pages {
            let Some(read) = walk
                .read_listable(self, transport, values, &vars, &page, &mut listings)
                .await?
            else {
                return Ok(None);
            };
            if read.end {
                break;
            }
        }
        // `direct` answers only mappings that read the upstream's total.
        let total = walk.reported.unwrap_or(walk.records);
        let vehicles: Vec<Vehicle> = listings.into_iter().skip(start).take(limit).collect();
        // Every match in the window must be on the page.
        let expected = limit.min(total.saturating_sub(skip));
        if vehicles.len() < expected {
            return Err(self.incomplete(Incomplete::Unreachable {
                reported: total,
                fetched: walk.records,
            }));
        }
        Ok(Some(
            SearchPage::new(total, skip, limit, vehicles).listings_checked(),
        ))
    }

    /// [`ProxyMapping::straight_through`] for sequential paging: the upstream's pages walked
    /// from the first (or from the furthest known page before `skip`, `cursors`) until the
    /// window is covered.
    async fn straight_through_walk(
        &self,
        transport: Transport<'_>,
        request: &SearchRequest<'_>,
    ) -> Result<Option<SearchPage>, AapError> {
        let (skip, limit) = (request.skip, request.limit);
        let build = || self.template_values(request.data, None);
        let context = Lazy::new(&build);
        let values = Scope::request(request.data, &self.shared.tables_tpl, &context);
        let vars = self.vars(request.data, None);
        let size = self
            .request
            .pagination
            .as_ref()
            .map_or(0, Pagination::max_size);
        // The query without its window: the cursors of its pages are the same for every window.
        let query = json!({ "filters": request.filters, "sort": request.data.get("sort") });
        let live = matches!(transport, Transport::Live(_));
        let (mut before, mut page) = match self.cursors.start(&query, skip).filter(|_| live) {
            Some((before, cursor)) => (
                before,
                PageRef {
                    index: 1,
                    size,
                    cursor: Some(cursor),
                },
            ),
            None => (0, PageRef::at(0, size)),
        };
        let started_at = before;
        let mut walk = Walk::default();
        let mut listings: Vec<Vehicle> = Vec::new();
        loop {
            let Some(read) = walk
                .read_listable(self, transport, values, &vars, &page, &mut listings)
                .await?
            else {
                return Ok(None);
            };
            before += read.records;
            if let Some(next) = &read.next
                && live
            {
                self.cursors.put(&query, before, next);
            }
            if read.end || before >= skip.saturating_add(limit) {
                break;
            }
            page = PageRef {
                index: page.index + 1,
                size,
                cursor: read.next,
            };
        }
        let total = walk.reported.unwrap_or(before);
        let vehicles: Vec<Vehicle> = listings
            .into_iter()
            .skip(skip.saturating_sub(started_at))
            .take(limit)
            .collect();
        let expected = limit.min(total.saturating_sub(skip));
        if vehicles.len() < expected {
            return Err(self.incomplete(Incomplete::Unreachable {
                reported: total,
                fetched: before,
            }));
        }
        Ok(Some(
            SearchPage::new(total, skip, limit, vehicles).listings_checked(),
        ))
    }

    /// Whether the upstream's own pages, order and total answer `request` exactly: it lists
    /// only what a buyer may see, takes every filter and the sort as AAP means them, and says
    /// how many match (without a total, only reading to the end would tell).
    fn direct(&self, request: &SearchRequest<'_>) -> bool {
        let reads_total = matches!(&self.response, ResponseSpec::List { total: Some(_), .. });
        self.listable_only && reads_total && self.translatable(request)
    }

    /// Whether the templates can send filter `key` with `value` to the upstream as is.
    fn sendable(&self, key: &str, value: &Value) -> bool {
        let supports = &self.supports;
        let Some(values) = supports.filters.get(key) else {
            return false;
        };
        let separator = supports.list_separator.as_deref().filter(|s| !s.is_empty());
        match value {
            Value::Array(items) => {
                let splits = separator.is_some_and(|sep| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .any(|s| s.contains(sep))
                });
                !splits && (*values == Values::Many || items.len() <= 1)
            }
            _ => true,
        }
    }

    /// Whether every filter and the sort of `request` are translated by the templates with
    /// AAP's meaning, ties included.
    fn translatable(&self, request: &SearchRequest<'_>) -> bool {
        let filters = request.filters;
        let filters_ok = filters.iter().all(|(k, v)| self.sendable(k, v));
        let sort_ok = match request.sort {
            None => true,
            Some(sort) => self.supports.sort.get(sort.field).is_some_and(|declared| {
                declared.aap_ties
                    && (declared.missing.last_when(sort.descending)
                        || range_filters(sort.field)
                            .iter()
                            .any(|k| filters.contains_key(*k)))
            }),
        };
        filters_ok && sort_ok
    }

    /// The filters of `filters` the upstream takes — none with `scan_query: every_unit`, where
    /// every scan reads every unit and each call is filtered from it in the gateway.
    fn scan_key(&self, filters: &Map<String, Value>) -> ScanKey {
        if self.scan_every_unit {
            return ScanKey::everything();
        }
        ScanKey {
            filters: filters
                .iter()
                .filter(|(k, v)| self.sendable(k, v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// Every listing matching the filters the upstream takes (at most `scan_limit` records),
    /// searchable with AAP semantics: kept for `scan_cache`, a due copy answering for
    /// `scan_stale` more while it is read again in the background, and one walk shared by every
    /// caller asking for the same scan at once ([`ScanCache`](super::ScanCache)).
    async fn scan(
        &self,
        transport: Transport<'_>,
        key: &ScanKey,
    ) -> Result<Arc<Inventory>, AapError> {
        if !matches!(transport, Transport::Live(_)) {
            // Canned transports (examples) always run, so that what they record is every call.
            return self.walk_scan(transport, key).await;
        }
        loop {
            match self.scan_cache.lookup(key) {
                Lookup::Fresh(inventory) => return Ok(inventory),
                Lookup::Wider(inventory) => {
                    self.event("scan_wider_served", 1);
                    return Ok(inventory);
                }
                Lookup::Stale(inventory, None) => {
                    self.event("scan_stale_served", 1);
                    return Ok(inventory);
                }
                Lookup::Stale(inventory, Some(walk)) => match self.refresh_in_background(walk) {
                    Ok(()) => {
                        self.event("scan_stale_served", 1);
                        return Ok(inventory);
                    }
                    // Nowhere to run it: read it now, as a fresh scan.
                    Err(walk) => {
                        let outcome = self.walk_scan(transport, key).await;
                        walk.finish(&outcome);
                        return outcome;
                    }
                },
                Lookup::Follow(mut told) => {
                    self.event("scan_shared", 1);
                    if let Ok(seen) = told.wait_for(Option::is_some).await
                        && let Some(outcome) = seen.as_ref()
                    {
                        return outcome.clone();
                    }
                    // The walk's caller went away before it ended: look again.
                }
                Lookup::Lead(walk) => {
                    let outcome = self.walk_scan(transport, key).await;
                    walk.finish(&outcome);
                    return outcome;
                }
            }
        }
    }

    /// Reads a due scan again on a task of its own, the previous copy answering meanwhile;
    /// `Err` gives the walk back when there is no runtime or no shared mapping to run it on.
    fn refresh_in_background(&self, walk: ScanWalk) -> Result<(), ScanWalk> {
        let (Some(mapping), Ok(runtime)) =
            (self.this.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return Err(walk);
        };
        runtime.spawn(async move {
            let key = walk.key().clone();
            let outcome = mapping
                .walk_scan(Transport::Live(&mapping.upstream), &key)
                .await;
            if let Err(error) = &outcome {
                mapping.event("scan_refresh_failed", 1);
                tracing::warn!(
                    mapping = %mapping.file,
                    error = %crate::telemetry::Escaped(error),
                    "a due scan could not be read again; its copy answers until `scan_stale` \
                     runs out, then searches wait for a fresh scan"
                );
            }
            walk.finish(&outcome);
        });
        Ok(())
    }

    /// Reads every listing matching `key` off the upstream's pages. Offset and page-number
    /// paging: once a page's total says how many pages there are, the rest are read at once,
    /// at most `max_concurrency` in flight, and taken in the upstream's page order whatever
    /// order they arrive in, so every check of the walk holds as when read one by one; a walk
    /// that ends early (a short page, a refusal) drops the calls still in flight. Cursors and
    /// next links are read one after another: each page names the next.
    async fn walk_scan(
        &self,
        transport: Transport<'_>,
        key: &ScanKey,
    ) -> Result<Arc<Inventory>, AapError> {
        let live = matches!(transport, Transport::Live(_));
        let request = key.template_request();
        let build = || self.template_values(&request, None);
        let context = Lazy::new(&build);
        let values = Scope::request(&request, &self.shared.tables_tpl, &context);
        let vars = self.vars(&request, None);
        let size = self.request.pagination.as_ref().map_or(0, |p| p.max_size());
        // Pages at once: a canned reply (examples) is one, read as the walk asks for it.
        let width = match transport {
            Transport::Live(upstream)
                if self
                    .request
                    .pagination
                    .as_ref()
                    .is_some_and(|p| !p.sequential()) =>
            {
                upstream.settings().max_concurrency.max(1)
            }
            _ => 1,
        };
        let mut walk = Walk::default();
        let mut listings = Vec::new();
        let mut page = PageRef::at(0, size);
        loop {
            let ahead = match walk.reported {
                Some(total) if width > 1 => self.pages_left(total, size, page.index)?,
                _ => 1,
            };
            if ahead > 1 {
                let vars = &vars;
                let pages = (page.index..page.index + ahead).map(|index| PageRef::at(index, size));
                let mut arriving = futures_util::StreamExt::buffered(
                    futures_util::stream::iter(pages.map(|page| async move {
                        let fetched = self.fetch_page(transport, values, vars, &page).await;
                        (page, fetched)
                    })),
                    width,
                );
                let mut end = false;
                while let Some((read, fetched)) = futures_util::StreamExt::next(&mut arriving).await
                {
                    if self.took(&mut walk, &mut listings, &read, fetched?)? {
                        end = true;
                        break;
                    }
                }
                if end {
                    break;
                }
                page = PageRef::at(page.index + ahead, size);
                continue;
            }
            let fetched = self.fetch_page(transport, values, &vars, &page).await?;
            let next = fetched.next.clone();
            if self.took(&mut walk, &mut listings, &page, fetched)? {
                break;
            }
            page = PageRef {
                index: page.index + 1,
                size,
                cursor: next,
            };
        }
        // Offline (examples) every call gets the example's one reply: no page can prove anything.
        if let Some((page, got, asked)) = walk.short.filter(|_| live) {
            // Right after the records read, whether the upstream counts its pages by the size
            // asked or by its own cap.
            let next = PageRef::at(1, got as u64);
            let after = self.fetch_page(transport, values, &vars, &next).await?;
            if after.records > 0 {
                return Err(self.incomplete(Incomplete::ShortPage { page, got, asked }));
            }
        }
        if let Some(reported) = walk.reported
            && reported > walk.records
        {
            return Err(self.incomplete(Incomplete::Unreachable {
                reported,
                fetched: walk.records,
            }));
        }
        Ok(Arc::new(Inventory::new(listings)))
    }

    /// How many pages from page `next` on the upstream's `total` says are left (at least
    /// one); a total past `scan_limit` is refused before any of them is asked for.
    fn pages_left(&self, total: usize, size: u64, next: u64) -> Result<u64, AapError> {
        if total > self.scan_limit {
            return Err(self.scan_limit_reached());
        }
        let pages = (total as u64).div_ceil(size.max(1));
        Ok(pages.saturating_sub(next).max(1))
    }

    /// Takes one page of a scan into `walk` and `listings`; whether it was the last. A walk
    /// that goes on past `scan_limit` records is refused.
    fn took(
        &self,
        walk: &mut Walk,
        listings: &mut Vec<Listing>,
        page: &PageRef,
        fetched: Fetched,
    ) -> Result<bool, AapError> {
        let end = self.walked(walk, page, &fetched)?;
        listings.extend(
            fetched
                .vehicles
                .into_iter()
                .map(|v| Listing::from_arc(v.into_arc())),
        );
        if !end && walk.records >= self.scan_limit {
            return Err(self.scan_limit_reached());
        }
        Ok(end)
    }

    /// A scan that would need more than `scan_limit` records: refused, said and counted.
    fn scan_limit_reached(&self) -> AapError {
        tracing::warn!(
            mapping = %self.file,
            scan_limit = self.scan_limit,
            "a search the gateway completes needs more upstream listings than \
             `scan_limit`; it is refused rather than answered from part of the stock"
        );
        self.incomplete(Incomplete::ScanLimit {
            limit: self.scan_limit,
        })
    }

    /// Takes one fetched page into `walk`; whether it was the last. Refuses a walk whose answer
    /// could not be whole: a record seen before, more records than the upstream's total.
    fn walked(&self, walk: &mut Walk, page: &PageRef, fetched: &Fetched) -> Result<bool, AapError> {
        for vehicle in &fetched.vehicles {
            if !walk.seen.first_time(vehicle) {
                return Err(self.incomplete(Incomplete::Repeated {
                    page: page.index + 1,
                }));
            }
        }
        walk.records += fetched.records;
        if fetched.total.is_some() {
            walk.reported = fetched.total;
        }
        if let Some(reported) = walk.reported
            && walk.records > reported
        {
            return Err(self.incomplete(Incomplete::Overcounted {
                reported,
                fetched: walk.records,
            }));
        }
        let Some(paging) = &self.request.pagination else {
            return Ok(true); // one call is the whole list
        };
        if paging.sequential() {
            // A reply without a next cursor or link is the last; a short one is not.
            return Ok(fetched.next.is_none() || fetched.records == 0);
        }
        let short = (fetched.records as u64) < page.size;
        if short && page.index == 0 && fetched.records > 0 && walk.reported.is_none() {
            // Without a total a short first page is taken as the end, which the next one must
            // prove: an upstream that caps its pages below `max_size` serves more. (A short
            // page after full ones is the end: those pages show it serves the size asked.)
            walk.short = Some((page.index + 1, fetched.records, page.size));
        }
        Ok(short || walk.reported.is_some_and(|t| walk.records >= t))
    }

    /// The call refused, counted and said.
    fn incomplete(&self, cause: Incomplete) -> AapError {
        self.event(cause.event(), 1);
        AapError::Incomplete {
            mapping: self.file.clone(),
            cause,
        }
    }

    /// One upstream page: every record mapped and its listing checked (a record the item
    /// mapping fails on, or whose listing the schema refuses, is dropped and counted), the
    /// number of records, and the reported total.
    async fn fetch_page(
        &self,
        transport: Transport<'_>,
        values: Scope<'_>,
        vars: &JqVars,
        page: &PageRef,
    ) -> Result<Fetched, AapError> {
        let ResponseSpec::List {
            items,
            total,
            item,
            records: path,
            next_page,
        } = &self.response
        else {
            return Err(AapError::Internal(format!(
                "{}: not a list mapping",
                self.file
            )));
        };
        let paged = self.request.pagination.as_ref().map(|_| page);
        let mut rendered = debug_span!("render")
            .in_scope(|| self.request.render(values, paged))
            .map_err(|e| self.render_error(e))?;
        if let (Some(Pagination::NextLink { .. }), Some(link)) =
            (&self.request.pagination, &page.cursor)
        {
            rendered = rendered
                .follow(link, self.upstream.base_url())
                .map_err(|e| self.extract_error(e))?;
        }
        let live = matches!(transport, Transport::Live(_));
        let mut link = None;
        let wants_link = live && next_page.as_ref().is_some_and(|n| n.link_header);
        let called = self
            .call_linked(transport, rendered, vars, wants_link.then_some(&mut link))
            .await?;
        let doc = match called {
            Called::Body(doc) | Called::Rule(RuleOutcome::Response, doc) => doc,
            Called::Rule(RuleOutcome::Empty, _) => {
                return Ok(Fetched {
                    vehicles: Vec::new(),
                    records: 0,
                    dropped: 0,
                    total: Some(0),
                    next: None,
                });
            }
            Called::Rule(other, _) => {
                return Err(AapError::Internal(format!(
                    "{}: error rule outcome {other:?} on a list skill",
                    self.file
                )));
            }
        };
        let extracting = debug_span!("extract");
        let _extracting = extracting.enter(); // no await below
        // Records read off the reply's tape when `items` is a path of keys to an array;
        // otherwise (or to report what else it found) `items` runs on the whole reply.
        let lazy = path.as_ref().and_then(|path| doc.records(path));
        let eager = match lazy {
            Some(_) => Vec::new(),
            None => items
                .run(doc.value(), vars)
                .map_err(|e| self.extract_error(e.to_string()))?,
        };
        let count = lazy.as_ref().map_or(eager.len(), Vec::len);
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        }
        let mapped: Box<dyn Iterator<Item = _>> = match &lazy {
            Some(records) => {
                let mut runner = item.record_runner(vars);
                Box::new(records.iter().map(move |record| runner.run_vehicle(record)))
            }
            None => Box::new(
                eager
                    .iter()
                    .map(|record| item.run_one_json(record, vars).map(Vehicle::from)),
            ),
        };
        let mut vehicles = Vec::with_capacity(count);
        let mut failed = None;
        let mut unmapped = 0usize;
        for vehicle in mapped {
            match vehicle {
                Ok(vehicle) => vehicles.push(vehicle),
                Err(e) => {
                    unmapped += 1;
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(error) = failed {
            if vehicles.is_empty() {
                // Not one bad record: the mapping does not fit the upstream's records.
                return Err(self.extract_error(error.to_string()));
            }
            self.event("record_skipped", unmapped);
            tracing::warn!(
                mapping = %self.file,
                skipped = unmapped,
                error = %crate::telemetry::Escaped(&error),
                "upstream records the item mapping could not map were skipped"
            );
        }
        // A unit the upstream lists as sold or held is never served, whatever else it holds:
        // only listable ones answer to the listing schema (the others still count for paging,
        // and tell a vehicle lookup "sold" from "unknown").
        let (refused, why) = self
            .listings
            .retain_valid(&mut vehicles, |v| is_listable_status(v.status()));
        if refused > 0 {
            self.event("listing_invalid", refused);
            tracing::warn!(
                mapping = %self.file,
                dropped = refused,
                failures = %why.join(", "),
                "listings the AAP listing schema refuses were dropped (never counted in a total)"
            );
        }
        let total = match total {
            Some(jq) => {
                let t = match jq.key_path().and_then(|path| doc.at(path)) {
                    Some(t) => t,
                    None => jq
                        .run_one(doc.value(), vars)
                        .map_err(|e| self.extract_error(e.to_string()))?,
                };
                let t = t.to_json();
                Some(as_count(&t).ok_or_else(|| {
                    self.extract_error(format!("`total` gave {t}, not a whole number"))
                })?)
            }
            None => None,
        };
        // Offline (examples) every call gets the one reply: it has no next page.
        let next = match next_page {
            Some(next_page) if live => self.next_position(next_page, &doc, vars, link)?,
            _ => None,
        };
        Ok(Fetched {
            vehicles,
            records: count,
            dropped: unmapped + refused,
            total,
            next,
        })
    }

    /// The cursor or link of the page after the one `doc` holds; `None` on the last page.
    fn next_position(
        &self,
        next_page: &NextPage,
        doc: &crate::lang::jq::Doc,
        vars: &JqVars,
        link: Option<String>,
    ) -> Result<Option<Arc<str>>, AapError> {
        if let Some(has_more) = &next_page.has_more {
            let more = has_more
                .run_one(doc.value(), vars)
                .map_err(|e| self.extract_error(format!("`pagination.has_more`: {e}")))?
                .to_json();
            if matches!(more, Value::Null | Value::Bool(false)) {
                return Ok(None);
            }
        }
        let next = match &next_page.next {
            Some(jq) => match jq
                .run_one(doc.value(), vars)
                .map_err(|e| self.extract_error(format!("`pagination.next`: {e}")))?
                .to_json()
            {
                Value::String(s) => Some(s),
                Value::Number(n) => Some(n.to_string()),
                Value::Null | Value::Bool(false) => None,
                other => {
                    return Err(self.extract_error(format!(
                        "`pagination.next` gave {other}, not a cursor or link"
                    )));
                }
            },
            None => link,
        };
        Ok(next.filter(|s| !s.is_empty()).map(Arc::from))
    }
}

/// What one walk over the upstream's pages has read.
#[derive(Debug, Default)]
struct Walk {
    /// The listings' identities (VIN, else stock number), to find a record that comes back.
    seen: Seen,
    /// Upstream records read, mapped or not.
    records: usize,
    /// The upstream's latest total.
    reported: Option<usize>,
    /// A short first page without a total: (page, records, asked).
    short: Option<(u64, usize, u64)>,
}

/// One page of a search answered straight through, as [`Walk::read_listable`] took it.
struct Read {
    /// Whether it was the last page the walk needs (see [`ProxyMapping::walked`]).
    end: bool,
    /// Records in the upstream's page, mapped or not.
    records: usize,
    /// Sequential paging: the cursor or link of the next page.
    next: Option<Arc<str>>,
}

impl Walk {
    /// A walk expected to read about `records` records (the buyer's window, at most 1,000).
    fn sized(records: usize) -> Self {
        Self {
            seen: Seen::with_capacity(records.min(1_000)),
            ..Self::default()
        }
    }

    /// The step both straight-through walks repeat: fetches `page`, checks it against what the
    /// walk read before ([`ProxyMapping::walked`]) and appends its listings to `listings`.
    /// `None` when the page held a record the upstream's total counts and the answer cannot:
    /// one the mapping dropped (unmappable, refused by the listing schema), or a unit a buyer
    /// may not see although the mapping declares `supports.listing: listable` — the search is
    /// then completed from a scan.
    async fn read_listable(
        &mut self,
        mapping: &ProxyMapping,
        transport: Transport<'_>,
        values: Scope<'_>,
        vars: &JqVars,
        page: &PageRef,
        listings: &mut Vec<Vehicle>,
    ) -> Result<Option<Read>, AapError> {
        let fetched = mapping.fetch_page(transport, values, vars, page).await?;
        if fetched.dropped > 0 {
            return Ok(None);
        }
        let end = mapping.walked(self, page, &fetched)?;
        if let Some(unlisted) = fetched
            .vehicles
            .iter()
            .find(|v| !is_listable_status(v.status()))
        {
            // The declaration is wrong: the upstream's pages and total count a unit AAP never
            // shows.
            mapping.event("unlisted_in_listable_page", 1);
            tracing::warn!(
                mapping = %mapping.file,
                status = unlisted.status().unwrap_or("(none)"),
                "the upstream listed a unit a buyer may not see although the mapping \
                 declares `supports.listing: listable`; the search is completed from \
                 a scan instead"
            );
            return Ok(None);
        }
        listings.extend(fetched.vehicles);
        Ok(Some(Read {
            end,
            records: fetched.records,
            next: fetched.next,
        }))
    }
}
