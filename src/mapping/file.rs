//! `File*`: mapping files exactly as ops teams write them (see docs/mappings.md).
//!
//! A dealer's mapping folder holds `upstreams.yaml` (named upstream systems), optionally
//! `common.yaml` (shared tables and jq definitions) and `feed.yaml` (a whole-inventory feed), and
//! one `<skill>.yaml` per served skill. Unknown keys are refused everywhere.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::{Map, Value};

/// `common.yaml`: shared by every skill file of the folder.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCommon {
    /// Lookup tables available as `tables` (templates) and `$tables` (jq) in every skill file.
    #[serde(default)]
    pub tables: Map<String, Value>,
    /// jq definitions (`def vehicle: {...};`) available to every jq program of the folder.
    #[serde(default)]
    pub jq_defs: Option<String>,
}

/// One `<skill>.yaml`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSkill {
    /// The AAP skill this file serves, e.g. `inventory.search`.
    pub skill: String,
    /// `proxy` (translate every call; the default) or `feed` (answer from `feed.yaml`'s cache).
    #[serde(default)]
    pub mode: FileMode,
    /// Upstream name from `upstreams.yaml` (proxy mode).
    #[serde(default)]
    pub upstream: Option<String>,
    /// The upstream call (proxy mode).
    #[serde(default)]
    pub request: Option<FileRequest>,
    /// How the upstream reply becomes the AAP reply (proxy mode).
    #[serde(default)]
    pub response: Option<FileResponse>,
    /// Ordered rules turning upstream answers into AAP errors; the first match wins.
    #[serde(default)]
    pub errors: Vec<FileErrorRule>,
    /// Lookup tables (merged over `common.yaml`'s).
    #[serde(default)]
    pub tables: Map<String, Value>,
    /// `search`: `inventory.facets` computed from the search mapping's results; an
    /// `inventory.vehicle` found in the search mapping's scan (an upstream with no detail call).
    #[serde(default)]
    pub derive: Option<String>,
    /// Fixed reply `data` (e.g. `dealer.information`), checked against the response schema at load.
    #[serde(default, rename = "static")]
    pub static_data: Option<Value>,
    /// Most upstream listings fetched when the gateway must complete a search itself
    /// (unsupported filter or sort, derived facets).
    #[serde(default = "default_scan_limit")]
    pub scan_limit: usize,
    /// How long the listings of a search completed in the gateway (and of derived facets) are
    /// reused for the same upstream filters, so buyers paging through results or asking for
    /// facets do not rescan a fragile DMS each time. `0s` turns the cache off.
    #[serde(default = "default_scan_cache")]
    pub scan_cache: String,
    /// What a scan asks the upstream for. `filtered` (the default): the buyer's filters the
    /// upstream takes (`request.supports`), one scan per set of them. `every_unit`: none — one
    /// scan of every unit answers every search and facets call while `scan_cache` keeps it,
    /// each filtered in the gateway (a scan of a small make then costs the whole stock's pages).
    #[serde(default)]
    pub scan_query: FileScanQuery,
    /// `inventory.vehicle` only: the identifiers the detail call can be asked by (`vin`,
    /// `stock`, `vehicle_id`). A request by another is found in the search mapping's scan and
    /// answered by the detail call with an identifier of the unit it takes. Unset: all.
    #[serde(default)]
    pub takes: Option<Vec<String>>,
    /// How long past `scan_cache` a kept scan may still answer while one fresh scan is read in
    /// the background (stale while revalidate), so no buyer waits for a whole scan of a slow
    /// DMS. A unit sold on the DMS may be offered for up to `scan_cache` + `scan_stale` (plus
    /// one scan's reading time) after its sale. `0s` (the default): never past `scan_cache`.
    #[serde(default = "default_scan_stale")]
    pub scan_stale: String,
    /// `lead.submit` only: the dealer's lead policy (consent channels, checks, time zone).
    #[serde(default)]
    pub lead: Option<FileLead>,
    /// `lead.submit` to an SMTP upstream: the e-mail carrying the ADF document.
    #[serde(default)]
    pub mail: Option<FileMail>,
    /// Cases run by `test-mappings` and the test suite.
    #[serde(default)]
    pub examples: Vec<FileExample>,
    /// Not mapped yet (what `aap-gateway new-dealer` writes): the skill is left off the card
    /// and answers `UNSUPPORTED_SKILL`, and `check` notes why, until the key is removed.
    #[serde(default)]
    pub unsupported: Option<String>,
}

/// How a dealer takes leads, besides where they are delivered.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileLead {
    /// Channels the dealer's staff follow up on (`email`, `phone`, `sms`). A consent grant that
    /// allows none of them is refused with `CONTACT_CONSENT_REQUIRED`. Empty = any.
    #[serde(default)]
    pub follow_up_channels: Vec<String>,
    /// IANA time zone of the rooftop, for appointment times written for people (ADF comments,
    /// `lead.appointment_local`).
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// Before delivery, look `vehicle_of_interest` up with this dealer's `inventory.vehicle`
    /// mapping: unknown → `VEHICLE_NOT_FOUND`, sold → `VEHICLE_UNAVAILABLE`. A lookup that fails
    /// for another reason does not stop the lead.
    #[serde(default)]
    pub check_vehicle: bool,
    /// A `test_drive` appointment without `vehicle_of_interest` is refused
    /// (`MISSING_REQUIRED_FIELD`, docs/protocol.md §Lead request and reply).
    #[serde(default)]
    pub test_drive_needs_vehicle: bool,
    /// The dealer's phone (E.164) returned in `data.dealer` with every lead reply.
    #[serde(default)]
    pub dealer_phone: Option<String>,
    /// The answers the CRM's own contract says mean "not processed, nothing stored" (HTTP
    /// delivery only). An error status or SOAP fault that no `errors` rule handles frees the
    /// idempotency key for a retry only when listed here; any other (a `502` / `504` from a load
    /// balancer after the CRM committed, a `500` mid-transaction) is an unknown outcome, left
    /// to `idempotency.on_ambiguous`. Unset: every unhandled error answer is an unknown outcome.
    #[serde(default)]
    pub not_processed: Option<FileNotProcessed>,
    /// A CRM that accepts now and decides later (`202 Accepted` with a ticket): when the
    /// delivery's `response.jq` gives `status: "pending"` with the ticket as `lead_id`, the
    /// gateway asks for the verdict with this call (HTTP delivery only; never the lead again).
    #[serde(default)]
    pub verdict: Option<FileVerdict>,
}

/// `lead.verdict`: how to learn the fate of a lead the CRM queued. The poll is an ordinary
/// call of the mapping language: its templates see `lead.ticket`, its `response.jq` gives
/// `{status: received | duplicate | rejected, lead_id?}` once decided, `{status: "pending"}`
/// while not.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileVerdict {
    /// Between two polls (and before the first), e.g. `500ms`.
    pub every: String,
    /// How long the buyer waits for the verdict, counted from the CRM's first answer; within
    /// the request deadline (`limits.request_timeout`). With no verdict by then the buyer hears
    /// `received` with the ticket as `lead_id`.
    pub wait: String,
    /// Polls in all. Those left when `wait` runs out go on after the reply, so that a verdict
    /// arriving later is logged and counted (`aap_gateway_lead_verdicts_total`).
    pub attempts: u32,
    /// The poll (usually `GET` on the ticket): `path`, `query`, `headers` as any request.
    pub request: FileRequest,
    /// `jq` turning the poll's answer into `{status, lead_id?}`.
    pub response: FileResponse,
    /// Error rules of the poll, as a skill's `errors` (e.g. a `404` while the ticket is young).
    #[serde(default)]
    pub errors: Vec<FileErrorRule>,
}

/// `lead.not_processed`: answers that prove the CRM did not take the lead.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileNotProcessed {
    /// HTTP statuses (400–599), e.g. `[400, 409, 422]`: the CRM refused the request whole.
    #[serde(default)]
    pub status: Vec<u16>,
    /// SOAP fault codes or subcodes (local names), e.g. `[Client, Sender]`.
    #[serde(default)]
    pub fault: Vec<String>,
}

fn default_timezone() -> String {
    "UTC".to_owned()
}

/// The e-mail of a lead delivered over SMTP: the ADF document is the body, the consent grant
/// an attached `consent.json` (ADF has no place for it, and it must never be dropped).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileMail {
    /// Subject template (text).
    pub subject: String,
}

fn default_scan_limit() -> usize {
    5000
}

fn default_scan_cache() -> String {
    "30s".to_owned()
}

fn default_scan_stale() -> String {
    "0s".to_owned()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileMode {
    #[default]
    Proxy,
    Feed,
}

/// An upstream call, rendered from templates.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRequest {
    /// HTTP method; GET and HEAD are retried on failure, others never. Default `GET`, and
    /// `POST` (the only one allowed) for SOAP upstreams.
    #[serde(default)]
    pub method: Option<String>,
    /// Path template below the upstream's base URL; values are percent-encoded as segments.
    /// SOAP upstreams usually leave it out (the base URL is the service endpoint).
    #[serde(default)]
    pub path: String,
    /// SOAP upstreams: the operation's action (SOAPAction in 1.1, the `action` parameter in
    /// 1.2); a template.
    #[serde(default)]
    pub action: Option<String>,
    /// Query parameter templates; a parameter that renders empty is left out.
    #[serde(default)]
    pub query: IndexMap<String, String>,
    /// Header templates; values may not contain line breaks.
    #[serde(default)]
    pub headers: IndexMap<String, String>,
    /// Body template; for SOAP upstreams the content of the envelope's Body.
    #[serde(default)]
    pub body: Option<String>,
    /// How values are escaped in `body`: `json` (each value serialized as JSON), `xml`, `text`;
    /// or `adf` (`lead.submit`): the body is the lead as an ADF/XML document and `body` is
    /// left out.
    #[serde(default)]
    pub body_format: Option<String>,
    /// How the upstream pages results (list skills).
    #[serde(default)]
    pub pagination: Option<FilePagination>,
    /// Which AAP filters and sort fields the templates translate. A request using others is
    /// completed in the gateway (fetch up to `scan_limit` listings, then filter, sort, page).
    #[serde(default)]
    pub supports: Option<FileSupports>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilePagination {
    /// `page` (page number + page size), `offset` (offset + limit), `cursor` (each reply gives
    /// the next page's cursor) or `next_link` (each reply gives the next page's URL).
    pub style: String,
    /// Query parameter carrying the page number (style `page`).
    #[serde(default)]
    pub page: Option<String>,
    /// Query parameter carrying the page size (styles `page`, `cursor`, `next_link`).
    #[serde(default)]
    pub size: Option<String>,
    /// Number of the first page (style `page`).
    #[serde(default = "default_first")]
    pub first: u64,
    /// Query parameter carrying the offset (style `offset`).
    #[serde(default)]
    pub offset: Option<String>,
    /// Query parameter carrying the limit (style `offset`).
    #[serde(default)]
    pub limit: Option<String>,
    /// Largest page the upstream serves.
    #[serde(default = "default_max_size")]
    pub max_size: u64,
    /// Query parameter carrying the cursor (style `cursor`; else `{{ page.cursor }}` in a
    /// template, e.g. a GraphQL body's `after`). Not sent on the first page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Styles `cursor` and `next_link`: jq on each reply giving what follows it — the next
    /// cursor (`.pageInfo.endCursor`, `.next_cursor`, `.nextPageToken`) or the next page's URL
    /// (`.links.next`, `."@odata.nextLink"`); `null`, `false` or `""` on the last page.
    #[serde(default)]
    pub next: Option<String>,
    /// Style `cursor` (optional): jq on each reply that is false on the last page
    /// (`.pageInfo.hasNextPage`).
    #[serde(default)]
    pub has_more: Option<String>,
    /// Style `next_link`: the next page's URL is the reply's `Link: <…>; rel="next"` header.
    #[serde(default)]
    pub link_header: bool,
}

fn default_first() -> u64 {
    1
}

fn default_max_size() -> u64 {
    100
}

/// What the upstream does itself, so that the engine lets it (docs/mappings.md, "Searching").
/// Everything declared here must give exactly AAP's answer; what is not declared the gateway
/// completes itself.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSupports {
    /// What the upstream's pages hold: `all` (the default: sold and held units too, as most
    /// DMSs list them) or `listable` (only units a buyer may see: available, in transit,
    /// pending). Only with `listable` can the upstream's pages and total be used as they are.
    #[serde(default)]
    pub listing: FileListing,
    /// AAP filter keys the templates translate: a name, or `{name, values: one}` when the
    /// upstream takes one value per call.
    #[serde(default)]
    pub filters: Vec<FileFilterSupport>,
    /// AAP sort fields the templates translate: a name, or `{field, missing: …}` saying where
    /// the upstream puts units without a value (AAP: last in both orders).
    #[serde(default)]
    pub sort: Vec<FileSortSupport>,
    /// The separator list values are joined with (e.g. `,`); a buyer value containing it is
    /// filtered in the gateway instead, since the upstream would split it.
    #[serde(default)]
    pub list_separator: Option<String>,
}

/// What a completed search's scan asks the upstream for (`scan_query`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileScanQuery {
    /// The buyer's filters the upstream takes.
    #[default]
    Filtered,
    /// No buyer filter: every unit the query lists.
    EveryUnit,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileListing {
    #[default]
    All,
    Listable,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FileFilterSupport {
    Name(String),
    Detailed(FileFilterDetail),
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileFilterDetail {
    /// The AAP filter key.
    pub name: String,
    /// `many` (the default: a list is sent joined) or `one` (one value per call: a search with
    /// several values is completed in the gateway).
    #[serde(default)]
    pub values: FileValues,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileValues {
    #[default]
    Many,
    One,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FileSortSupport {
    Field(String),
    Detailed(FileSortDetail),
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSortDetail {
    /// The AAP sort field.
    pub field: String,
    /// Where the upstream sorts units without a value: `last` (AAP's rule, the default),
    /// `first` (in both orders), `low` (as the smallest value: first ascending) or `high`
    /// (as the largest: first descending). Where that differs from AAP for the requested
    /// order, the search is completed in the gateway.
    #[serde(default)]
    pub missing: FileMissing,
    /// How the upstream breaks ties (units with the same value): `aap` (the default: by
    /// stock number, then VIN, as AAP does) or `own` (its own way, e.g. an internal id or
    /// insertion order). With `own` a search sorted by this field is completed in the gateway,
    /// so that pages never split ties differently from AAP's order.
    #[serde(default)]
    pub ties: FileTies,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileTies {
    #[default]
    Aap,
    Own,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileMissing {
    #[default]
    Last,
    First,
    Low,
    High,
}

/// How an upstream reply becomes AAP data.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileResponse {
    /// List skills: jq selecting the legacy records in one reply (or the whole feed).
    #[serde(default)]
    pub items: Option<String>,
    /// List skills: jq giving the number of matches, when the upstream reports it.
    #[serde(default)]
    pub total: Option<String>,
    /// List skills: jq turning one legacy record into one AAP vehicle (name every field).
    #[serde(default)]
    pub item: Option<String>,
    /// Single-object skills: jq producing the whole reply `data`.
    #[serde(default)]
    pub jq: Option<String>,
    /// Reply body format: `json` (default), `csv` or `xml`.
    #[serde(default)]
    pub format: Option<String>,
    /// XML and CSV replies: the body's charset (e.g. `windows-1252`), overriding the reply's
    /// `Content-Type`, BOM and XML declaration. Unset: those decide, UTF-8 when none does.
    #[serde(default)]
    pub charset: Option<String>,
    /// XML replies: element names that are always lists, even with one element.
    #[serde(default)]
    pub list_elements: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileErrorRule {
    pub when: FileWhen,
    /// The AAP code to answer, e.g. `VEHICLE_NOT_FOUND`. Give `code` or `reply`.
    #[serde(default)]
    pub code: Option<String>,
    /// The answer is an error on the wire but a success in meaning (a CRM's 409 with the lead
    /// it already has, a DMS's 404 for "no results"): `response` maps it with the skill's
    /// `response` as if it were a 2xx, `empty` (list skills) answers no listings, `{jq: …}`
    /// (single-object skills) maps it with its own program.
    #[serde(default)]
    pub reply: Option<FileRuleReply>,
    /// Message for the buyer; defaults to a standard one per code.
    #[serde(default)]
    pub message: Option<String>,
    /// The answer means the upstream refused the OAuth2 token although it is a success on the
    /// wire (GraphQL's `UNAUTHENTICATED` error on HTTP 200): the gateway fetches a fresh token
    /// and sends the call once more (it was not processed, so even a lead is safe to send);
    /// only the same answer again is answered with `code`. Needs `auth.kind: oauth2`.
    #[serde(default)]
    pub reauthenticate: bool,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FileRuleReply {
    /// `response` or `empty`.
    Named(String),
    /// `{jq: "…"}`.
    Jq(FileRuleJq),
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileRuleJq {
    pub jq: String,
}

/// All given conditions must hold.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWhen {
    /// Status code(s): `404`, `[404, 410]` or a class like `"4xx"`.
    #[serde(default)]
    pub status: Option<Value>,
    /// jq predicate over the decoded reply body (truthy = match).
    #[serde(default)]
    pub jq: Option<String>,
    /// SOAP upstreams: the fault code or subcode, local name (`Client`, `Sender`,
    /// `VehicleNotFound`); matches only replies that are faults.
    #[serde(default)]
    pub fault: Option<String>,
}

/// `feed.yaml`: the dealer's whole inventory as one document, cached and searched in the gateway.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileFeed {
    /// Upstream name from `upstreams.yaml`.
    pub upstream: String,
    /// The call that fetches the whole document.
    pub request: FileRequest,
    /// `json`, `csv` (header row) or `xml`.
    pub format: String,
    /// XML and CSV feeds: the document's charset (e.g. `windows-1252` for an Excel export),
    /// overriding the reply's `Content-Type`, BOM and XML declaration. Unset: those decide,
    /// UTF-8 when none does.
    #[serde(default)]
    pub charset: Option<String>,
    /// jq selecting the records in the document (CSV documents are an array of row objects).
    #[serde(default)]
    pub items: Option<String>,
    /// jq turning one record into one AAP vehicle.
    pub item: String,
    /// How often the cache is refreshed.
    #[serde(default = "default_refresh")]
    pub refresh: String,
    /// How long a stale copy may still be served while refreshes fail.
    #[serde(default = "default_max_stale")]
    pub max_stale: String,
    /// Lookup tables (merged over `common.yaml`'s).
    #[serde(default)]
    pub tables: Map<String, Value>,
    /// XML feeds: element names that are always lists.
    #[serde(default)]
    pub list_elements: Vec<String>,
    /// Compressed exports. A gzip file or a zip archive is recognised by its first bytes and
    /// unpacked whatever this says; these settings pick the zip member and cap what a document
    /// may unpack to.
    #[serde(default)]
    pub unpack: Option<FileUnpack>,
    /// CSV feeds read row by row (no `items`): the export's dialect, where it is not plain
    /// comma-separated values with decimal points.
    #[serde(default)]
    pub csv: Option<FileCsvDialect>,
    /// A second CSV file joined to the units by a key: photos by stock number, options by VIN.
    #[serde(default)]
    pub join: Option<FileJoin>,
}

/// `feed.yaml` `join:`: a second CSV file whose rows join the units' records by a key.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileJoin {
    /// The field of the unit's record the joined rows go to (`photos`: the item mapping reads
    /// `.photos`). Unset on a unit whose key finds no row.
    #[serde(rename = "as")]
    pub name: String,
    /// Another file of the feed's zip archive (its path in the archive). One of `member` and
    /// `request`.
    #[serde(default)]
    pub member: Option<String>,
    /// A second document of the feed's upstream. One of `member` and `request`.
    #[serde(default)]
    pub request: Option<FileRequest>,
    /// The joined file's column holding the key, as its header writes it (`Stock #`).
    pub key: String,
    /// jq: the unit record's key (`.["Stock #"]`, `.VIN`).
    pub on: String,
    /// `true`: every row a key finds, as a list (a row per photo). `false` (the default): the
    /// one row; a key two rows hold is ambiguous, and the units with it get neither.
    #[serde(default)]
    pub many: bool,
}

/// `feed.yaml` `csv:`: how a CSV export is written.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCsvDialect {
    /// The field separator, one ASCII character: `","` (the default), `";"`, `"|"`, or `"\t"`
    /// for a tab.
    #[serde(default)]
    pub delimiter: Option<String>,
    /// The quote character, one ASCII character (default `"`).
    #[serde(default)]
    pub quote: Option<String>,
    /// `point` (the default) or `comma`: numbers are written `12.499,50`. With `comma`, a field
    /// that is such a number (text without digits around it allowed: `€ 12.499,50`) reaches the
    /// item mapping as `12499.50`; dates and other text are left alone.
    #[serde(default)]
    pub decimal: Option<String>,
}

/// `feed.yaml` `unpack:`: reading a gzip or zip export.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileUnpack {
    /// Zip archives: the member to read, by its path in the archive (`export/units.csv`).
    /// Required when the archive holds more than one file; unset, its only file is read.
    #[serde(default)]
    pub member: Option<String>,
    /// Most bytes the document may unpack to; past it the refresh fails and the previous copy
    /// stays. Default: the upstream's `max_response_bytes` (what a plain document may be).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Most unpacked bytes per packed byte, checked once 1 MiB is out: above it the document is
    /// refused as a decompression bomb. Default 100 (exports pack 5 to 20 times).
    #[serde(default)]
    pub max_ratio: Option<u64>,
}

fn default_refresh() -> String {
    "5m".to_owned()
}

fn default_max_stale() -> String {
    "1h".to_owned()
}

/// One example case.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileExample {
    pub name: String,
    /// The AAP request object (the DataPart `data`).
    pub request: Value,
    /// Subset the rendered upstream request must match: `method`, `path`, `query`, `headers`.
    #[serde(default)]
    pub expect_upstream: Option<Value>,
    /// The canned upstream reply.
    #[serde(default)]
    pub upstream_reply: Option<FileReply>,
    /// Subset the AAP reply `data` must match.
    #[serde(default)]
    pub expect: Option<Value>,
    /// The AAP error code expected instead of a reply.
    #[serde(default)]
    pub expect_error: Option<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReply {
    #[serde(default = "default_status")]
    pub status: u16,
    /// Inline body: a JSON value (sent as JSON) or a string (sent as is).
    #[serde(default)]
    pub body: Option<Value>,
    /// Body read from a file, relative to the mapping file.
    #[serde(default)]
    pub body_file: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
}

fn default_status() -> u16 {
    200
}
