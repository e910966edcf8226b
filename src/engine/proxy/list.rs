//! List skills (`inventory.search`): straight through the upstream when its pages are exactly
//! AAP's answer, else completed in the gateway from a scan; derived facets from the same scan.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::engine::request::{PageRef, plan};
use crate::error::AapError;
use crate::inventory::{Inventory, Listing};
use crate::lang::jq::JqVars;
use crate::lang::template::{Lazy, Scope};
use crate::protocol::Data;
use crate::protocol::vehicle::{SearchPage, Vehicle};
use tracing::debug_span;

use super::call::Called;
use super::page::{as_count, is_listable_status, page_data, window};
use super::spec::{ProxyMapping, ResponseSpec, RuleOutcome, Values};
use super::transport::Transport;

/// One upstream page of a list skill.
struct Fetched {
    /// The records mapped to AAP vehicles, whatever their status.
    vehicles: Vec<Vehicle>,
    /// Records in the upstream's page (mapped or not): what paging decisions count.
    records: usize,
    /// The upstream's total, when the mapping reads one.
    total: Option<usize>,
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
        let everything = json!({ "type": "inventory.search.request" });
        self.scan(Transport::Live(&self.upstream), &everything)
            .await
    }

    /// Derived facets of `inventory.facets` (`derive: search`): scan, then aggregate.
    pub async fn facets(
        &self,
        transport: Transport<'_>,
        request: &Value,
    ) -> Result<Value, AapError> {
        let filters = request.get("filters");
        let query = json!({ "type": "inventory.search.request", "filters": filters });
        let inventory = self.scan(transport, &query).await?;
        Ok(inventory.facets(filters))
    }

    /// `inventory.search`: straight through the upstream when its pages are exactly AAP's
    /// answer, else completed in the gateway.
    pub(super) async fn search(
        &self,
        transport: Transport<'_>,
        request: &Value,
    ) -> Result<Data, AapError> {
        let (skip, limit) = window(request);
        if !self.direct(request) {
            let inventory = self.scan(transport, request).await?;
            return Ok(page_data(inventory.search(request)));
        }
        let max = self
            .request
            .pagination
            .as_ref()
            .map_or(u64::MAX, |p| p.max_size());
        let (pages, start) = plan(skip as u64, limit as u64, max);
        let build = || self.template_values(request, None);
        let context = Lazy::new(&build);
        let values = Scope::request(request, &self.shared.tables_tpl, &context);
        let vars = self.vars(request, None);
        let mut listings: Vec<Vehicle> = Vec::new();
        let mut total = None;
        for page in pages {
            let fetched = self.fetch_page(transport, values, &vars, page).await?;
            total = total.or(fetched.total);
            let exhausted = (fetched.records as u64) < page.size;
            for vehicle in fetched.vehicles {
                let status = vehicle.status();
                if is_listable_status(status) {
                    listings.push(vehicle);
                } else {
                    // The declaration is wrong: this page and the total count a unit AAP
                    // never shows. It is still dropped; the operator must fix `supports`.
                    self.event("unlisted_in_listable_page", 1);
                    tracing::warn!(
                        mapping = %self.file,
                        status = status.unwrap_or("(none)"),
                        "the upstream listed a unit a buyer may not see although the mapping \
                         declares `supports.listing: listable`; pages and totals may be off"
                    );
                }
            }
            if exhausted {
                break;
            }
        }
        let vehicles: Vec<Vehicle> = listings.into_iter().skip(start).take(limit).collect();
        let total = total.unwrap_or(skip.saturating_add(vehicles.len()));
        Ok(Data::Search(SearchPage::new(total, skip, limit, vehicles)))
    }

    /// Whether the upstream's own pages, order and total answer `request` exactly.
    fn direct(&self, request: &Value) -> bool {
        self.listable_only && self.translatable(request)
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
    /// AAP's meaning.
    fn translatable(&self, request: &Value) -> bool {
        let supports = &self.supports;
        let filters = request.get("filters").and_then(Value::as_object);
        let filters_ok = filters.is_none_or(|f| f.iter().all(|(k, v)| self.sendable(k, v)));
        let sort = request.get("sort");
        let sort_key = |key: &str| sort.and_then(|s| s.get(key)).and_then(Value::as_str);
        let sort_ok = match sort_key("field") {
            None => true,
            Some(field) => supports.sort.get(field).is_some_and(|missing| {
                let descending = sort_key("order") == Some("desc");
                missing.last_when(descending)
                    || range_filters(field)
                        .iter()
                        .any(|k| filters.is_some_and(|f| f.contains_key(*k)))
            }),
        };
        filters_ok && sort_ok
    }

    /// Every listing matching the filters the upstream takes (at most `scan_limit` records),
    /// searchable with AAP semantics; reused for `scan_cache`.
    async fn scan(
        &self,
        transport: Transport<'_>,
        request: &Value,
    ) -> Result<Arc<Inventory>, AapError> {
        let mut narrowed = json!({ "type": "inventory.search.request" });
        if let Some(filters) = request.get("filters").and_then(Value::as_object) {
            let sent: Map<String, Value> = filters
                .iter()
                .filter(|(k, v)| self.sendable(k, v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            narrowed["filters"] = Value::Object(sent);
        }
        // Canned transports (examples) always run, so that what they record is every call.
        let key = narrowed.to_string();
        let live = matches!(transport, Transport::Live(_));
        if live && let Some(inventory) = self.scan_cache.get(&key) {
            return Ok(inventory);
        }
        let build = || self.template_values(&narrowed, None);
        let context = Lazy::new(&build);
        let values = Scope::request(&narrowed, &self.shared.tables_tpl, &context);
        let vars = self.vars(&narrowed, None);
        let size = self
            .request
            .pagination
            .as_ref()
            .map_or(self.scan_limit as u64, |p| p.max_size());
        let mut listings = Vec::new();
        let mut records = 0usize;
        let mut index = 0;
        loop {
            let page = PageRef { index, size };
            let fetched = self.fetch_page(transport, values, &vars, page).await?;
            records += fetched.records;
            listings.extend(
                fetched
                    .vehicles
                    .into_iter()
                    .map(|v| Listing::from_arc(v.into_arc())),
            );
            let exhausted = self.request.pagination.is_none()
                || (fetched.records as u64) < size
                || fetched.total.is_some_and(|t| records >= t);
            if exhausted {
                break;
            }
            if records >= self.scan_limit {
                self.event("scan_limit_reached", 1);
                tracing::warn!(
                    mapping = %self.file,
                    scan_limit = self.scan_limit,
                    "a search the gateway completes needs more upstream listings than \
                     `scan_limit`; it is refused rather than answered from part of the stock"
                );
                return Err(AapError::Internal(format!(
                    "{}: the search needs more than scan_limit ({}) upstream listings; raise \
                     `scan_limit` or declare more of what the upstream does in `supports`",
                    self.file, self.scan_limit
                )));
            }
            index += 1;
        }
        let inventory = Arc::new(Inventory::new(listings));
        if live {
            self.scan_cache.put(key, &inventory);
        }
        Ok(inventory)
    }

    /// One upstream page: every record mapped (a record the item mapping fails on is skipped
    /// and counted), the number of records, and the reported total.
    async fn fetch_page(
        &self,
        transport: Transport<'_>,
        values: Scope<'_>,
        vars: &JqVars,
        page: PageRef,
    ) -> Result<Fetched, AapError> {
        let ResponseSpec::List {
            items,
            total,
            item,
            records: path,
        } = &self.response
        else {
            return Err(AapError::Internal(format!(
                "{}: not a list mapping",
                self.file
            )));
        };
        let paged = self.request.pagination.as_ref().map(|_| page);
        let rendered = debug_span!("render")
            .in_scope(|| self.request.render(values, paged))
            .map_err(|e| self.render_error(e))?;
        let doc = match self.call(transport, rendered, vars).await? {
            Called::Body(doc) | Called::Rule(RuleOutcome::Response, doc) => doc,
            Called::Rule(RuleOutcome::Empty, _) => {
                return Ok(Fetched {
                    vehicles: Vec::new(),
                    records: 0,
                    total: Some(0),
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
        let mut skipped = 0usize;
        for vehicle in mapped {
            match vehicle {
                Ok(vehicle) => vehicles.push(vehicle),
                Err(e) => {
                    skipped += 1;
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(error) = failed {
            if vehicles.is_empty() {
                // Not one bad record: the mapping does not fit the upstream's records.
                return Err(self.extract_error(error.to_string()));
            }
            self.event("record_skipped", skipped);
            tracing::warn!(
                mapping = %self.file,
                skipped,
                error = %crate::telemetry::Escaped(&error),
                "upstream records the item mapping could not map were skipped"
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
        Ok(Fetched {
            vehicles,
            records: count,
            total,
        })
    }
}
