//! `File*`: the configuration file exactly as an operator writes it.
//!
//! These types mirror the YAML one to one, reject unknown keys, and hold every default in one
//! place (the `Default` impls below). They are never used at run time: `settings::load` turns them
//! into the validated types of `settings/types.rs`.

use serde::Deserialize;
use serde_json::Value;

/// The draft extension URI of the planned AAP 2.0.0 contract. Development only: `check` warns.
pub const DRAFT_EXTENSION_URI: &str =
    "https://draft.autoagentprotocol.invalid/extensions/aap/latest";
pub const DRAFT_SCHEMA_BASE_URL: &str = "https://draft.autoagentprotocol.invalid/latest/schemas/";

/// The whole file, for its JSON Schema (`aap-gateway schema config`, editor completion). The
/// loader reads the same keys one by one (so one broken section does not hide the others'
/// problems); a test holds its list of keys and this struct together.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "aap-gateway configuration")]
pub struct FileConfig {
    /// Address of the public (buyer-facing) listener, e.g. `0.0.0.0:8080` (the default).
    pub listen: Option<String>,
    /// Address of the admin listener (`/healthz`, `/readyz`, `/metrics`); default
    /// `127.0.0.1:9090`.
    pub admin_listen: Option<String>,
    /// The AAP extension every dealer card declares; the draft identifiers by default.
    pub aap: Option<FileAap>,
    /// The JSON-RPC binding (always on), the optional HTTP+JSON and MCP bindings.
    pub bindings: Option<FileBindings>,
    /// Request sizes, deadlines and load shedding.
    pub limits: Option<FileLimits>,
    /// How many connections the public listener holds, and for how long.
    pub connections: Option<FileConnections>,
    /// Logs, metrics and traces.
    pub telemetry: Option<FileTelemetry>,
    /// Where lead idempotency keys live and for how long.
    pub idempotency: Option<FileIdempotency>,
    /// Quotas per dealer, client and skill (`RATE_LIMITED`).
    pub rate_limit: Option<FileRateLimit>,
    /// Optional API keys for buyer agents.
    pub auth: Option<FileAuth>,
    /// The organisation behind every card (a dealer's own `card.provider` wins).
    pub provider: Option<FileProvider>,
    /// The dealers served, each with its card, routing and mapping folder.
    pub dealers: Vec<FileDealer>,
}

/// `listen`, `admin_listen` and the scalar top-level keys are read one by one in `load`; the
/// sections are these structs.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileAap {
    /// The AAP extension URI every dealer card declares and every call must activate.
    pub extension_uri: String,
    /// AAP contract version announced in the card's extension `params.version`.
    pub version: String,
    /// Base URL of the version-pinned AAP schemas, announced on the card.
    pub schema_base_url: String,
    /// Human-readable description of the extension entry on the card.
    pub description: String,
}

impl Default for FileAap {
    fn default() -> Self {
        FileAap {
            extension_uri: DRAFT_EXTENSION_URI.to_owned(),
            version: "0.0.0-dev".to_owned(),
            schema_base_url: DRAFT_SCHEMA_BASE_URL.to_owned(),
            description: "Auto Agent Protocol — A2A Automotive Retail Profile.".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileBindings {
    /// The JSON-RPC 2.0 binding (always on; AAP's only required binding).
    pub jsonrpc: FileJsonRpc,
    /// The A2A HTTP+JSON binding (`POST {jsonrpc path}/message:send`), off unless enabled.
    pub http_json: FileHttpJson,
    /// The Model Context Protocol binding (Streamable HTTP), off unless enabled: one MCP tool
    /// per configured skill, behind the same pipeline.
    pub mcp: FileMcp,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileMcp {
    /// Serve each dealer's MCP endpoint (not listed on the agent card).
    pub enabled: bool,
    /// Path of the MCP endpoint below the dealer's path prefix (e.g. `/mcp`); `{path}/` is
    /// served too. Must differ from the JSON-RPC path and not lie below it.
    pub path: String,
    /// Browser origins (`scheme://host[:port]`) allowed to call the endpoint. A request that
    /// sends any other `Origin` gets HTTP 403 (DNS-rebinding protection, as MCP requires);
    /// requests without `Origin` (agents, SDK clients) are not affected. Empty: no browser page
    /// may call it.
    pub allowed_origins: Vec<String>,
    /// Most MCP sessions held at once, over all dealers; an `initialize` beyond it first
    /// evicts the least recently used session.
    pub max_sessions: u64,
    /// A session unused for this long is forgotten (its client gets 404 and initializes
    /// again), e.g. `30m`.
    pub session_idle_timeout: String,
}

impl Default for FileMcp {
    fn default() -> Self {
        FileMcp {
            enabled: false,
            path: "/mcp".to_owned(),
            allowed_origins: Vec::new(),
            max_sessions: 10_000,
            session_idle_timeout: "30m".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileHttpJson {
    /// Serve it and list it on the card after the JSON-RPC interface.
    pub enabled: bool,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileJsonRpc {
    /// Path of the JSON-RPC endpoint below the dealer's path prefix; `{path}/` is served too.
    pub path: String,
    /// HTTP status of a `RATE_LIMITED` JSON-RPC reply: 200 (the official Python SDK client
    /// keeps the error only then) or 429 (visible to proxies; load shedding then answers 503).
    pub rate_limited_status: u16,
}

impl Default for FileJsonRpc {
    fn default() -> Self {
        FileJsonRpc {
            path: "/a2a".to_owned(),
            rate_limited_status: 200,
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileLimits {
    /// Largest request body accepted; larger bodies get HTTP 413.
    pub max_body_bytes: u64,
    /// Deadline for a whole request, upstream calls included (e.g. `15s`).
    pub request_timeout: String,
    /// How long a request body may take to arrive (HTTP 408 after); short, because a request
    /// reading its body is cheap to hold but an attacker can hold many.
    pub body_read_timeout: String,
    /// Requests handled at once (their body read); beyond this calls are shed at once.
    pub max_concurrency: u64,
    /// How long a graceful shutdown waits for in-flight requests (e.g. `20s`).
    pub shutdown_grace: String,
    /// CPU priority of feed refreshes: `idle` (they take only CPU that serving leaves, so
    /// buyers never wait for them) or `normal` (they share the CPU with serving).
    pub feed_refresh_priority: String,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits {
            max_body_bytes: 64 * 1024,
            request_timeout: "15s".to_owned(),
            body_read_timeout: "5s".to_owned(),
            max_concurrency: 1024,
            shutdown_grace: "20s".to_owned(),
            feed_refresh_priority: "idle".to_owned(),
        }
    }
}

/// `connections`: how many connections the public listener holds, and for how long.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileConnections {
    /// Open connections at most; further ones are closed as soon as they are accepted.
    pub max: u64,
    /// Open connections per client address (IPv6 per /64); trusted proxies are exempt.
    pub max_per_ip: u64,
    /// How long a new connection may stay silent before it is closed.
    pub first_byte_timeout: String,
    /// How long a connection may take from its first byte to its first complete request head
    /// (HTTP/1 headers, or the HTTP/2 preface and first stream).
    pub header_read_timeout: String,
    /// How long a connection with no request in flight stays open.
    pub idle_timeout: String,
    /// Streams (requests) at once on one HTTP/2 connection.
    pub http2_max_concurrent_streams: u32,
    /// How often an HTTP/2 connection is pinged to detect a dead peer.
    pub http2_keep_alive_interval: String,
    /// How long a ping may go unanswered before the connection is closed.
    pub http2_keep_alive_timeout: String,
}

impl Default for FileConnections {
    fn default() -> Self {
        FileConnections {
            max: 4096,
            max_per_ip: 128,
            first_byte_timeout: "5s".to_owned(),
            header_read_timeout: "10s".to_owned(),
            idle_timeout: "60s".to_owned(),
            http2_max_concurrent_streams: 100,
            http2_keep_alive_interval: "30s".to_owned(),
            http2_keep_alive_timeout: "10s".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileTelemetry {
    /// `auto` (human on a TTY, JSON otherwise), `json` or `text`.
    pub log_format: String,
    /// Service name reported in logs and traces (`service.name`).
    pub service_name: String,
    /// OTLP/HTTP base URL (`/v1/traces` is appended); traces are exported only when set here
    /// or in `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
}

impl Default for FileTelemetry {
    fn default() -> Self {
        FileTelemetry {
            log_format: "auto".to_owned(),
            service_name: "aap-gateway".to_owned(),
            otlp_endpoint: None,
        }
    }
}

/// `rate_limit`: how many calls a client may make, per dealer and skill (GCRA).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileRateLimit {
    /// `false` turns per-client limits off (e.g. behind an API gateway that limits already);
    /// `limits.max_concurrency` still sheds load.
    pub enabled: bool,
    /// `memory` (per replica) or `redis` (shared by every replica).
    pub backend: String,
    /// `redis://host:port/db` (`rediss://` for TLS) for `backend: redis`; usually set through
    /// the environment (`AAP_GATEWAY__RATE_LIMIT__REDIS_URL`), as `${NAME}` is not expanded in
    /// this file.
    pub redis_url: Option<String>,
    /// When Redis cannot be reached: `local` (fall back to this replica's limits) or `deny`.
    pub on_backend_error: String,
    /// How long a Redis command may take before it counts as a backend error.
    pub redis_timeout: String,
    /// Proxies (CIDRs) whose forwarding header names the real client. From any other peer the
    /// header is ignored (anyone can send it).
    pub trusted_proxies: Vec<String>,
    /// The one header the trusted proxies write: `x-forwarded-for`, `forwarded` or
    /// `x-real-ip`. Only that header is read, so a client cannot slip in another.
    pub client_ip_header: String,
    /// Every client address's quota for all requests on the public listener, checked before
    /// any other work (IPv6 per /64). Unset: 100/s, burst 200, or the largest per-client quota
    /// configured if that is higher (see `Quota::per_ip_default`).
    pub per_ip: Option<FileQuota>,
    /// The quota of each client for each skill of each dealer.
    pub default: FileQuota,
    /// Per-skill quotas replacing the default, e.g. `lead.submit: { rate: 10/min, burst: 3 }`.
    pub skills: std::collections::BTreeMap<String, FileQuota>,
    /// Quotas of each dealer for a skill, all clients together (checked after the client's own),
    /// e.g. `lead.submit: { rate: 600/h, burst: 60 }` so that many keys or addresses together
    /// cannot flood one dealer's CRM. `lead.submit` unset: 600/h, burst 60, or the largest
    /// per-client quota for leads if that is higher (see `Quota::per_dealer_lead_default`).
    pub per_dealer: std::collections::BTreeMap<String, FileQuota>,
}

impl Default for FileRateLimit {
    fn default() -> Self {
        FileRateLimit {
            enabled: true,
            backend: "memory".to_owned(),
            redis_url: None,
            on_backend_error: "local".to_owned(),
            redis_timeout: "50ms".to_owned(),
            trusted_proxies: Vec::new(),
            client_ip_header: "x-forwarded-for".to_owned(),
            per_ip: None,
            default: FileQuota {
                rate: "10/s".to_owned(),
                burst: 20,
            },
            skills: std::collections::BTreeMap::new(),
            per_dealer: std::collections::BTreeMap::new(),
        }
    }
}

/// `rate: 10/s` (also `/min`, `/h`, or a duration: `5/10s`) with `burst` calls at once.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileQuota {
    pub rate: String,
    pub burst: u32,
}

/// `auth`: who may call which skill. `none` (AAP's default: public agents) or `api_key`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileAuth {
    /// What every skill needs unless `skills` says otherwise: `none` or `api_key`.
    pub mode: String,
    /// Per-skill exceptions to `mode`, e.g. `lead.submit: api_key` with `mode: none` keeps
    /// search public and lets only key holders submit leads.
    pub skills: std::collections::BTreeMap<String, String>,
    /// API keys, stored hashed: `sha256` is the hex SHA-256 of the key.
    pub keys: Vec<FileApiKey>,
    /// A YAML file with more `keys:` (e.g. a mounted secret), relative to this file.
    pub keys_file: Option<String>,
}

impl Default for FileAuth {
    fn default() -> Self {
        FileAuth {
            mode: "none".to_owned(),
            skills: std::collections::BTreeMap::new(),
            keys: Vec::new(),
            keys_file: None,
        }
    }
}

/// One API key.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileApiKey {
    /// Names the client in logs and limits (never the key itself).
    pub id: String,
    /// Hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`).
    pub sha256: String,
    /// Dealer ids this key may call; absent = every dealer.
    #[serde(default)]
    pub dealers: Option<Vec<String>>,
    /// This client's quota, replacing the default quota (per-skill quotas still apply).
    #[serde(default)]
    pub quota: Option<FileQuota>,
}

/// The content of `auth.keys_file`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileKeysFile {
    pub keys: Vec<FileApiKey>,
}

/// `idempotency`: where `lead.submit` idempotency keys and their replies are kept.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileIdempotency {
    /// `memory` (this process) or `redis` (shared by every replica).
    pub backend: String,
    /// `redis://…` for `backend: redis`; defaults to `rate_limit.redis_url`.
    pub redis_url: Option<String>,
    /// When Redis cannot be reached: `local` (this replica's store) or `deny` (refuse leads).
    pub on_backend_error: String,
    /// How long a Redis command may take before it counts as a backend error.
    pub redis_timeout: String,
    /// The lease of a replica's claim on a key in Redis: renewed every third of it while the
    /// replica works on the lead, so a replica that dies frees its keys after this long.
    pub lock_ttl: String,
    /// How long a reply is replayed for its key (at least 24 h: docs/protocol.md §Idempotency).
    pub ttl: String,
    /// Most keys held in memory; the oldest completed ones are dropped first beyond it.
    pub max_entries: u64,
    /// Most bytes of keys and stored replies held in memory; the oldest completed entries are
    /// dropped first beyond it.
    pub max_bytes: u64,
    /// A delivery whose outcome is unknown (the connection was lost, or the CRM timed out, after
    /// it may have taken the lead): `resend` it under the same reference / Message-ID on the
    /// buyer's retry, or `hold` the key for reconciliation (retries are told it is held).
    pub on_ambiguous: String,
}

impl Default for FileIdempotency {
    fn default() -> Self {
        FileIdempotency {
            backend: "memory".to_owned(),
            redis_url: None,
            on_backend_error: "local".to_owned(),
            redis_timeout: "250ms".to_owned(),
            lock_ttl: "6s".to_owned(),
            ttl: "24h".to_owned(),
            max_entries: 100_000,
            max_bytes: 64 * 1024 * 1024,
            on_ambiguous: "resend".to_owned(),
        }
    }
}

/// Who operates the agent (card `provider`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileProvider {
    pub organization: String,
    pub url: String,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileDealer {
    /// Stable dealer id (letters, digits, `_`, `-`); used in logs, metrics and the endpoints file.
    pub id: String,
    /// Host names this dealer answers on (port ignored, case-insensitive). Empty = any host.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Path prefix this dealer answers under, e.g. `/dealers/demo-honda`. Absent = `/`.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// The dealer's agent card.
    pub card: FileCard,
    /// The dealer's public profile (AAP `DealerInformation`); when present the gateway answers
    /// `dealer.information` from it.
    #[serde(default)]
    pub profile: Option<Value>,
    /// Folder of mapping files (upstreams.yaml + one file per skill), relative to this file.
    #[serde(default)]
    pub mappings: Option<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCard {
    /// Agent name shown to buyers, e.g. "Demo Toyota".
    pub name: String,
    /// Short description of the agent.
    pub description: String,
    /// Public JSON-RPC URL of this dealer (HTTPS in production). When absent it is derived from
    /// the address the gateway listens on (right for `demo` and local tests only).
    #[serde(default)]
    pub url: Option<String>,
    /// Version of the card document (semver recommended).
    #[serde(default = "default_card_version")]
    pub version: String,
    #[serde(default)]
    pub documentation_url: Option<String>,
    #[serde(default)]
    pub icon_url: Option<String>,
    /// Overrides the deployment-wide `provider` for this card.
    #[serde(default)]
    pub provider: Option<FileProvider>,
}

fn default_card_version() -> String {
    "1.0.0".to_owned()
}
