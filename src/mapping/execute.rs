//! The mapping engine for proxy-mode skills: render the upstream call, send it, apply the error
//! rules, decode the reply, extract AAP data with jq.
//!
//! List skills (`inventory.search`) are paged by the engine. The upstream's own pages, order and
//! total are used only when they are exactly AAP's answer: the mapping declares that the
//! upstream lists only units a buyer may see (`supports.listing: listable`) and translates every
//! filter and the sort of the request as AAP means them (`supports`). Otherwise the engine
//! completes the search itself: it fetches every listing matching the filters the upstream
//! does take (at most `scan_limit` records), then filters, sorts and pages them with AAP
//! semantics (`search`). Paging decisions always count upstream records, never the listable
//! ones. Derived facets use the same scan; scans are reused for `scan_cache`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use minijinja::value::Value as TplValue;
use serde_json::{Map, Value, json};

use super::decode::{Declared, Format};
use super::extract::{Jq, JqValue, JqVars};
use super::request::{PageRef, Rendered, RequestSpec, plan};
use super::search::{self, Inventory, Listing};
use crate::error::{AapCode, AapError};
use crate::protocol::Skill;
use crate::upstream::soap::{self, SoapFault};
use crate::upstream::{Upstream, UpstreamRequest, UpstreamResponse};
use tracing::debug_span;

/// Values every template and jq program of one mapping file sees besides the request.
#[derive(Debug, Clone)]
pub struct Shared {
    pub tables_tpl: TplValue,
    pub tables_jq: JqValue,
    pub dealer_tpl: TplValue,
    pub dealer_jq: JqValue,
}

/// How a reply becomes AAP data.
#[derive(Debug)]
pub enum ResponseSpec {
    List {
        items: Jq,
        total: Option<Jq>,
        item: Jq,
    },
    Object {
        jq: Jq,
    },
}

/// `when: { status, fault, jq }` → an AAP error, or a reply.
#[derive(Debug)]
pub struct ErrorRule {
    pub status: Option<StatusMatch>,
    /// SOAP fault code or subcode (local name).
    pub fault: Option<String>,
    pub jq: Option<Jq>,
    pub outcome: RuleOutcome,
}

/// What a matching error rule makes of the upstream's answer.
#[derive(Debug)]
pub enum RuleOutcome {
    /// An AAP error.
    Error { code: AapCode, message: String },
    /// A success in meaning: mapped by the skill's `response` as if it were a 2xx.
    Response,
    /// List skills: no listings.
    Empty,
    /// Single-object skills: mapped by the rule's own program.
    Jq(Jq),
}

impl RuleOutcome {
    /// Whether the answer shows a working upstream (for the circuit breaker and the
    /// upstream-error metric): everything but "the dealer's system is in trouble".
    fn is_answer(&self) -> bool {
        !matches!(
            self,
            RuleOutcome::Error {
                code: AapCode::InternalError | AapCode::RateLimited,
                ..
            }
        )
    }
}

#[derive(Debug, Clone)]
pub enum StatusMatch {
    Codes(Vec<u16>),
    /// `4xx` → 4.
    Class(u16),
}

impl StatusMatch {
    fn matches(&self, status: StatusCode) -> bool {
        match self {
            StatusMatch::Codes(codes) => codes.contains(&status.as_u16()),
            StatusMatch::Class(c) => status.as_u16() / 100 == *c,
        }
    }
}

/// What the upstream does exactly as AAP means it (`request.supports`; nothing when absent).
#[derive(Debug, Clone, Default)]
pub struct Supports {
    /// Filter keys the templates translate → whether the upstream takes one value per call.
    pub filters: HashMap<String, Values>,
    /// Sort fields the templates translate → where the upstream puts units without a value.
    pub sort: HashMap<String, Missing>,
    /// The separator the templates join list values with; a value containing it cannot be
    /// sent as one value, so such a request is completed in the gateway.
    pub list_separator: Option<String>,
}

/// How many values of a list filter the upstream takes in one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Values {
    #[default]
    Many,
    One,
}

/// Where an upstream sorts units without a value for the sort field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Missing {
    /// Last in both orders (AAP's rule).
    #[default]
    Last,
    /// First in both orders.
    First,
    /// As the smallest value: first ascending, last descending.
    Low,
    /// As the largest value: last ascending, first descending.
    High,
}

impl Missing {
    /// Whether units without a value come last in this order, as AAP wants.
    fn last_when(self, descending: bool) -> bool {
        match self {
            Missing::Last => true,
            Missing::First => false,
            Missing::Low => descending,
            Missing::High => !descending,
        }
    }
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

/// Listings fetched to complete searches in the gateway, kept for `ttl` per set of upstream
/// filters (a buyer paging through results, facets after a search).
#[derive(Debug, Default)]
pub struct ScanCache {
    ttl: Duration,
    entries: Mutex<Vec<(String, Instant, Arc<Inventory>)>>,
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

    fn get(&self, key: &str) -> Option<Arc<Inventory>> {
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

    fn put(&self, key: String, inventory: &Arc<Inventory>) {
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

/// One upstream page of a list skill.
struct Fetched {
    /// The records mapped to AAP vehicles, whatever their status.
    vehicles: Vec<Arc<Value>>,
    /// Records in the upstream's page (mapped or not): what paging decisions count.
    records: usize,
    /// The upstream's total, when the mapping reads one.
    total: Option<usize>,
}

/// What a call produced: the reply to map, or a rule's verdict on it.
enum Called<'a> {
    Body(JqValue),
    Rule(&'a RuleOutcome, JqValue),
}

/// Where calls go: the real upstream, or a canned reply (examples, `test-mappings`).
#[derive(Debug, Clone, Copy)]
pub enum Transport<'a> {
    Live(&'a Upstream),
    Canned(&'a Canned),
}

/// A canned upstream for offline example runs: answers every call with `reply` and records the
/// rendered calls.
#[derive(Debug)]
pub struct Canned {
    pub status: StatusCode,
    /// The reply's `Content-Type` (its `charset=` counts as a live reply's does).
    pub content_type: Option<http::HeaderValue>,
    pub body: Bytes,
    pub seen: Mutex<Vec<Rendered>>,
    /// Upstream records the list mapping's `items` found in the replies, mapped or not.
    pub records: std::sync::atomic::AtomicUsize,
}

impl Canned {
    /// An upstream that answers every call with `status`, `content_type` and `body`.
    pub fn new(status: StatusCode, content_type: Option<http::HeaderValue>, body: Bytes) -> Canned {
        Canned {
            status,
            content_type,
            body,
            seen: Mutex::new(Vec::new()),
            records: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

/// A compiled proxy-mode skill.
#[derive(Debug)]
pub struct Mapped {
    pub skill: Skill,
    /// The mapping file, for logs.
    pub file: String,
    pub upstream: Arc<Upstream>,
    pub request: RequestSpec,
    pub format: Format,
    /// The mapping's `charset:` for reply bodies, if it names one.
    pub charset: Option<&'static encoding_rs::Encoding>,
    pub response: ResponseSpec,
    pub errors: Vec<ErrorRule>,
    pub shared: Shared,
    pub supports: Supports,
    /// Every record the upstream lists is one a buyer may see: the mapping declares
    /// `listing: listable`, or its item program gives every record the same listable status.
    pub listable_only: bool,
    pub scan_limit: usize,
    pub scan_cache: ScanCache,
}

impl Mapped {
    /// Answers a validated call against the live upstream.
    pub async fn execute(&self, request: &Value) -> Result<Value, AapError> {
        self.execute_with(Transport::Live(&self.upstream), request)
            .await
    }

    /// Answers a validated call through `transport`.
    pub async fn execute_with(
        &self,
        transport: Transport<'_>,
        request: &Value,
    ) -> Result<Value, AapError> {
        match (&self.response, self.skill) {
            (ResponseSpec::List { .. }, _) => self.search(transport, request).await,
            (ResponseSpec::Object { jq }, skill) => {
                let data = self.object(transport, request, jq).await?;
                if skill == Skill::InventoryVehicle {
                    check_listable(&data)?;
                }
                Ok(data)
            }
        }
    }

    /// `lead.submit`: delivers the lead (`lead` = the gateway's facts, `mapping::lead`) and maps
    /// the acknowledgement to reply data.
    pub async fn execute_lead(
        &self,
        transport: Transport<'_>,
        request: &Value,
        lead: &Value,
    ) -> Result<Value, AapError> {
        let ResponseSpec::Object { jq } = &self.response else {
            return Err(AapError::Internal(format!(
                "{}: lead.submit takes one `jq` program",
                self.file
            )));
        };
        self.object_with(transport, request, jq, Some(lead)).await
    }

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

    fn vars(&self, request: &Value, lead: Option<&Value>) -> JqVars {
        JqVars {
            request: JqValue::from_json(request),
            tables: self.shared.tables_jq.clone(),
            dealer: self.shared.dealer_jq.clone(),
            lead: lead.map_or_else(JqValue::null, JqValue::from_json),
        }
    }

    fn template_values(&self, request: &Value, lead: Option<&Value>) -> TplValue {
        minijinja::context! {
            request => TplValue::from(minijinja::value::Serde(request)),
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
            lead => lead.map_or(TplValue::UNDEFINED, |l| TplValue::from(minijinja::value::Serde(l))),
        }
    }

    async fn object(
        &self,
        transport: Transport<'_>,
        request: &Value,
        jq: &Jq,
    ) -> Result<Value, AapError> {
        self.object_with(transport, request, jq, None).await
    }

    async fn object_with(
        &self,
        transport: Transport<'_>,
        request: &Value,
        jq: &Jq,
        lead: Option<&Value>,
    ) -> Result<Value, AapError> {
        let rendered = debug_span!("render").in_scope(|| {
            let values = self.template_values(request, lead);
            self.request.render(&values, None)
        });
        let rendered = rendered.map_err(|e| self.render_error(e))?;
        let vars = self.vars(request, lead);
        let (program, doc) = match self.call(transport, rendered, &vars).await? {
            Called::Body(doc) | Called::Rule(RuleOutcome::Response, doc) => (jq, doc),
            Called::Rule(RuleOutcome::Jq(own), doc) => (own, doc),
            Called::Rule(other, _) => {
                return Err(AapError::Internal(format!(
                    "{}: error rule outcome {other:?} on a single-object skill",
                    self.file
                )));
            }
        };
        let out = debug_span!("extract").in_scope(|| program.run_one_json(&doc, &vars));
        out.map_err(|e| self.extract_error(e.to_string()))
    }

    /// `inventory.search`: straight through the upstream when its pages are exactly AAP's
    /// answer, else completed in the gateway.
    async fn search(&self, transport: Transport<'_>, request: &Value) -> Result<Value, AapError> {
        let (skip, limit) = window(request);
        if !self.direct(request) {
            let inventory = self.scan(transport, request).await?;
            let page = inventory.search(request);
            return Ok(page_json(page.total, page.skip, page.limit, page.vehicles));
        }
        let max = self
            .request
            .pagination
            .as_ref()
            .map_or(u64::MAX, |p| p.max_size());
        let (pages, start) = plan(skip as u64, limit as u64, max);
        let values = self.template_values(request, None);
        let vars = self.vars(request, None);
        let mut listings: Vec<Arc<Value>> = Vec::new();
        let mut total = None;
        for page in pages {
            let fetched = self.fetch_page(transport, &values, &vars, page).await?;
            total = total.or(fetched.total);
            let exhausted = (fetched.records as u64) < page.size;
            for vehicle in fetched.vehicles {
                if is_listable(&vehicle) {
                    listings.push(vehicle);
                } else {
                    // The declaration is wrong: this page and the total count a unit AAP
                    // never shows. It is still dropped; the operator must fix `supports`.
                    self.event("unlisted_in_listable_page", 1);
                    let status = vehicle.get("status").and_then(Value::as_str);
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
        let vehicles: Vec<Arc<Value>> = listings.into_iter().skip(start).take(limit).collect();
        let total = total.unwrap_or(skip.saturating_add(vehicles.len()));
        Ok(page_json(total, skip, limit, vehicles))
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
        let sort_ok = match request.pointer("/sort/field").and_then(Value::as_str) {
            None => true,
            Some(field) => supports.sort.get(field).is_some_and(|missing| {
                let descending =
                    request.pointer("/sort/order").and_then(Value::as_str) == Some("desc");
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
        let values = self.template_values(&narrowed, None);
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
            let fetched = self.fetch_page(transport, &values, &vars, page).await?;
            records += fetched.records;
            listings.extend(fetched.vehicles.into_iter().map(Listing::from_arc));
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

    /// Counts `count` mapping events on the dealer's upstream metrics.
    fn event(&self, event: &'static str, count: usize) {
        if let Some(meter) = self.upstream.meter() {
            meter.mapping_event(event, count as u64);
        }
    }

    /// One upstream page: every record mapped (a record the item mapping fails on is skipped
    /// and counted), the number of records, and the reported total.
    async fn fetch_page(
        &self,
        transport: Transport<'_>,
        values: &TplValue,
        vars: &JqVars,
        page: PageRef,
    ) -> Result<Fetched, AapError> {
        let ResponseSpec::List { items, total, item } = &self.response else {
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
        let records = items
            .run(&doc, vars)
            .map_err(|e| self.extract_error(e.to_string()))?;
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(records.len(), std::sync::atomic::Ordering::Relaxed);
        }
        let mut vehicles = Vec::with_capacity(records.len());
        let mut failed = None;
        let mut skipped = 0usize;
        for record in &records {
            match item.run_one_json(record, vars) {
                Ok(vehicle) => vehicles.push(Arc::new(vehicle)),
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
                let t = jq
                    .run_one(&doc, vars)
                    .map_err(|e| self.extract_error(e.to_string()))?;
                let t = t.to_json();
                Some(as_count(&t).ok_or_else(|| {
                    self.extract_error(format!("`total` gave {t}, not a whole number"))
                })?)
            }
            None => None,
        };
        Ok(Fetched {
            vehicles,
            records: records.len(),
            total,
        })
    }

    /// Sends one call, applies the error rules, decodes the body. An answer an error rule
    /// recognises (a domain error, or a reply) tells the breaker the upstream works.
    async fn call(
        &self,
        transport: Transport<'_>,
        rendered: Rendered,
        vars: &JqVars,
    ) -> Result<Called<'_>, AapError> {
        let soap = self.upstream.soap().is_some();
        // Reads are safe to retry, SOAP reads included; a lead is never sent twice by the client.
        let idempotent = matches!(rendered.method, http::Method::GET | http::Method::HEAD)
            || (soap && self.skill != Skill::LeadSubmit);
        let mut response = send(transport, &self.upstream, rendered, idempotent).await?;
        let (doc, fault) = self.decode(&response);
        for (index, rule) in self.errors.iter().enumerate() {
            let status_ok = rule
                .status
                .as_ref()
                .is_none_or(|s| s.matches(response.status));
            let fault_ok = match (&rule.fault, &fault) {
                (None, _) => true,
                (Some(want), Some(f)) => {
                    f.code == *want || f.subcode.as_deref() == Some(want.as_str())
                }
                (Some(_), None) => false,
            };
            if !(status_ok && fault_ok) {
                continue;
            }
            let jq_ok = match (&rule.jq, &doc) {
                (None, _) => true,
                // A predicate that fails is a defect of the mapping, not "no match": silently
                // skipping the rule would answer the buyer as if the rule did not exist.
                (Some(jq), Ok(doc)) => jq.run_bool(doc, vars).map_err(|e| {
                    if let Some(verdict) = response.verdict.take() {
                        verdict.answered();
                    }
                    AapError::Internal(format!(
                        "mapping error: `errors[{index}].when.jq` of {} failed: {e}",
                        self.file
                    ))
                })?,
                (Some(_), Err(_)) => false,
            };
            if !jq_ok {
                continue;
            }
            if rule.outcome.is_answer()
                && let Some(verdict) = response.verdict.take()
            {
                verdict.answered();
            }
            return match &rule.outcome {
                RuleOutcome::Error { code, message } => Err(AapError::Domain {
                    code: *code,
                    message: message.clone(),
                    details: None,
                }),
                RuleOutcome::Empty => Ok(Called::Rule(&rule.outcome, JqValue::null())),
                outcome => match doc {
                    Ok(doc) => Ok(Called::Rule(outcome, doc)),
                    Err(e) => Err(AapError::InvalidUpstreamResponse {
                        upstream: self.upstream.name().to_owned(),
                        cause: format!("{e} ({})", self.file),
                    }),
                },
            };
        }
        let upstream = self.upstream.name().to_owned();
        if let Some(fault) = fault {
            // Fault texts may quote what was sent, and a lead is personal data.
            let reason = if self.skill == Skill::LeadSubmit {
                String::new()
            } else {
                format!(": {}", fault.reason.chars().take(200).collect::<String>())
            };
            let cause = format!(
                "SOAP fault {}{} not handled by an error rule ({}){reason}",
                fault.code,
                fault
                    .subcode
                    .as_deref()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                self.file
            );
            // The caller's fault (`Client` in SOAP 1.1, `Sender` in 1.2) comes back for the
            // same call: not worth a buyer's retry. The server's may pass.
            return Err(match fault.code.as_str() {
                "Server" | "Receiver" => AapError::UpstreamUnavailable { upstream, cause },
                "Client" | "Sender" => AapError::UpstreamRefused { upstream, cause },
                _ => AapError::InvalidUpstreamResponse { upstream, cause },
            });
        }
        if !response.status.is_success() {
            let cause = format!(
                "HTTP {} not handled by an error rule ({})",
                response.status, self.file
            );
            // A 4xx refuses the request itself (the same call meets it again), except a timeout
            // (408) or a quota (429); 5xx and anything odd may pass.
            let status = response.status;
            return Err(
                if status.is_client_error()
                    && status != StatusCode::REQUEST_TIMEOUT
                    && status != StatusCode::TOO_MANY_REQUESTS
                {
                    AapError::UpstreamRefused { upstream, cause }
                } else if status.is_server_error() || status.is_client_error() {
                    AapError::UpstreamUnavailable { upstream, cause }
                } else {
                    AapError::InvalidUpstreamResponse { upstream, cause }
                },
            );
        }
        doc.map(Called::Body)
            .map_err(|e| AapError::InvalidUpstreamResponse {
                upstream,
                cause: format!("{e} ({})", self.file),
            })
    }

    /// The reply body for jq, and the SOAP fault it carries. A SOAP fault is seen by jq
    /// predicates as `{"Fault": {"code", "subcode", "reason", "detail"}}`.
    fn decode(&self, response: &UpstreamResponse) -> (Result<JqValue, String>, Option<SoapFault>) {
        let body = &response.body;
        let declared = Declared::reply(self.charset, &response.headers);
        if self.upstream.soap().is_none() {
            return (self.format.decode_jq(body, declared), None);
        }
        let empty = HashSet::new();
        let list_elements = match &self.format {
            Format::Xml { list_elements } => list_elements,
            Format::Json | Format::Csv => &empty,
        };
        match soap::decode_reply(body, declared, list_elements) {
            Ok(reply) => match reply.fault {
                Some(fault) => {
                    let doc = json!({ "Fault": {
                        "code": fault.code, "subcode": fault.subcode,
                        "reason": fault.reason, "detail": fault.detail,
                    }});
                    (Ok(JqValue::from_json(&doc)), Some(fault))
                }
                None => (Ok(JqValue::from_json(&reply.body)), None),
            },
            Err(e) => (Err(e), None),
        }
    }

    fn render_error(&self, message: String) -> AapError {
        if message.starts_with(super::template::UNSENDABLE) {
            // A buyer's value the dealer system cannot be asked about: no unit has such an
            // identifier, and a search value like that is malformed for this dealer.
            return match self.skill {
                Skill::InventoryVehicle => AapError::domain(
                    AapCode::VehicleNotFound,
                    "No vehicle matches that identifier.",
                ),
                _ => AapError::Validation {
                    code: AapCode::SchemaValidationFailed,
                    violations: vec![crate::error::Violation {
                        instance_location: String::new(),
                        keyword: "format".to_owned(),
                        error: "a value cannot be passed to the dealer's system".to_owned(),
                    }],
                },
            };
        }
        AapError::Internal(format!(
            "{}: cannot render the upstream request: {message}",
            self.file
        ))
    }

    fn extract_error(&self, message: String) -> AapError {
        // jq messages quote the values they failed on; a CRM's answer about a lead may hold
        // the customer's data, which never goes to the logs.
        let message = if self.skill == Skill::LeadSubmit {
            "a jq program failed on the CRM's reply (details withheld: they may quote personal \
             data; reproduce with test-mappings)"
                .to_owned()
        } else {
            message
        };
        AapError::InvalidUpstreamResponse {
            upstream: self.upstream.name().to_owned(),
            cause: format!("{}: {message}", self.file),
        }
    }
}

/// Sends a rendered call through `transport`: as is, or as a SOAP operation when the upstream
/// speaks SOAP (the rendered body being the envelope's Body content).
pub async fn send(
    transport: Transport<'_>,
    upstream: &Upstream,
    rendered: Rendered,
    idempotent: bool,
) -> Result<UpstreamResponse, AapError> {
    match transport {
        Transport::Live(live) => {
            let req = match live.soap() {
                Some(settings) => {
                    let mut req = soap::request(
                        settings,
                        rendered.path_and_query,
                        rendered.action.as_deref(),
                        rendered.body.as_deref().unwrap_or_default(),
                        idempotent,
                    )
                    .map_err(|e| e.into_aap(upstream.name()))?;
                    // The mapping's own headers replace the SOAP layer's of the same name.
                    req.headers
                        .retain(|(name, _)| !rendered.headers.iter().any(|(n, _)| n == name));
                    req.headers.extend(rendered.headers);
                    req
                }
                None => UpstreamRequest {
                    method: rendered.method,
                    path_and_query: rendered.path_and_query,
                    headers: rendered.headers,
                    body: rendered.body.map(Bytes::from),
                    idempotent,
                },
            };
            live.call(req)
                .await
                .map_err(|e| e.into_aap(upstream.name()))
        }
        Transport::Canned(canned) => {
            if let Ok(mut seen) = canned.seen.lock() {
                seen.push(rendered);
            }
            let mut headers = http::HeaderMap::new();
            if let Some(content_type) = &canned.content_type {
                headers.insert(http::header::CONTENT_TYPE, content_type.clone());
            }
            Ok(UpstreamResponse {
                status: canned.status,
                headers,
                body: canned.body.clone(),
                elapsed: Instant::now().elapsed(),
                verdict: None,
            })
        }
    }
}

/// `skip` and the effective `limit` of a search request: default 20, at most 100 (docs/protocol.md
/// §Pagination and totals).
pub fn window(request: &Value) -> (usize, usize) {
    let number = |p: &str| {
        request
            .pointer(p)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    };
    let skip = number("/pagination/skip").unwrap_or(0);
    let limit = number("/pagination/limit")
        .unwrap_or(search::DEFAULT_LIMIT)
        .clamp(1, search::MAX_LIMIT);
    (skip, limit)
}

/// Whether a buyer may see this vehicle: its `status` (docs/protocol.md §Listing status).
pub fn is_listable(vehicle: &Value) -> bool {
    vehicle
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| search::SERVABLE_STATUSES.contains(&s))
}

/// `inventory.vehicle` must not answer a unit that left stock (docs/protocol.md §Listing status).
pub fn check_listable(vehicle: &Value) -> Result<(), AapError> {
    if is_listable(vehicle) {
        Ok(())
    } else {
        Err(AapError::domain(
            AapCode::VehicleUnavailable,
            "This vehicle is no longer available.",
        ))
    }
}

/// The `data` of an `inventory.search.response`.
pub fn page_json(total: usize, skip: usize, limit: usize, vehicles: Vec<Arc<Value>>) -> Value {
    let mut data = Map::with_capacity(4);
    data.insert("total".into(), json!(total));
    data.insert("skip".into(), json!(skip));
    data.insert("limit".into(), json!(limit));
    data.insert(
        "vehicles".into(),
        Value::Array(vehicles.into_iter().map(Arc::unwrap_or_clone).collect()),
    );
    Value::Object(data)
}

fn as_count(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}
