//! The validated run-time settings: if a value exists here it is usable.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::yaml::{Problem, SourceMap};
use crate::protocol::agent_card::{AapSettings, CardSettings};

/// Validated settings. If a value exists here it is usable.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Positions in the main configuration file, for problems found after loading.
    pub source: SourceMap,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub aap: AapSettings,
    /// Path of the JSON-RPC endpoint below each dealer's prefix, e.g. `/a2a`.
    pub jsonrpc_path: String,
    /// `bindings.jsonrpc.rate_limited_status`: whether `RATE_LIMITED` JSON-RPC replies carry
    /// the HTTP status of the HTTP+JSON binding (429, or 503 when shedding) instead of 200.
    pub jsonrpc_rate_limited_http_status: bool,
    /// `bindings.http_json.enabled`: the HTTP+JSON binding at `{jsonrpc_path}/message:send`.
    pub http_json: bool,
    /// `bindings.mcp`: the MCP binding, `None` when off.
    pub mcp: Option<McpSettings>,
    pub limits: Limits,
    pub connections: ConnectionSettings,
    pub telemetry: TelemetrySettings,
    pub idempotency: IdempotencySettings,
    pub rate_limit: RateLimitSettings,
    /// `None`: public agents (AAP's default).
    pub auth: Option<AuthSettings>,
    pub dealers: Vec<DealerSettings>,
    /// Problems that do not stop the gateway but that `check` reports.
    pub warnings: Vec<Problem>,
}

/// The MCP binding (`bindings.mcp`), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSettings {
    /// Path below each dealer's prefix, e.g. `/mcp`.
    pub path: String,
    /// Allowed `Origin` values, lower-cased `scheme://host[:port]`.
    pub allowed_origins: Vec<String>,
    /// Sessions held at once, at least 1.
    pub max_sessions: usize,
    /// Idle time after which a session is forgotten.
    pub session_idle_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencySettings {
    /// Where keys live; `Redis` shares them between replicas.
    pub backend: LimitBackend,
    /// When Redis fails: `Local` runs the lead with this replica's store only (the CRM's
    /// de-duplication on the stable lead reference is the safety net); `Deny` refuses the lead
    /// (INTERNAL_ERROR, retryable).
    pub on_backend_error: OnBackendError,
    pub redis_timeout: Duration,
    /// The lease of a replica's claim on a key, renewed every third of it while the replica
    /// works on the lead: a replica that dies frees its keys after this long.
    pub lock_ttl: Duration,
    pub ttl: Duration,
    pub max_entries: usize,
    /// Bytes of keys and stored replies held in memory at most.
    pub max_bytes: usize,
    pub on_ambiguous: OnAmbiguous,
}

/// What a delivery whose outcome is unknown leaves for the buyer's retry
/// (`idempotency.on_ambiguous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAmbiguous {
    /// The retry delivers again under the same reference and Message-ID: no lead is lost; a CRM
    /// that took the first one sees a recognisable resend.
    Resend,
    /// The key is held: retries are told so (retryable, with a hint) until an operator has
    /// reconciled the lead with the CRM, or the key's `ttl` ends. Never a second delivery.
    Hold,
}

/// A quota: `count` calls per `period`, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub count: u32,
    pub period: Duration,
    pub burst: u32,
}

impl Quota {
    /// `rate_limit.per_ip` when unset: a floor of 100/s, burst 200 against anonymous floods —
    /// raised to the largest per-client quota configured, so an unset setting never refuses
    /// what a quota the operator wrote allows (one address is one client without API keys).
    pub fn per_ip_default(configured: impl Iterator<Item = Quota>) -> Quota {
        let floor = Quota {
            count: 100,
            period: Duration::from_secs(1),
            burst: 200,
        };
        Quota::at_least(floor, configured)
    }

    /// `rate_limit.per_dealer` for `lead.submit` when unset: 600 leads an hour per dealer,
    /// burst 60, from all clients together — far above a real dealer's lead flow, far below
    /// what a flood from many keys or addresses would push into its CRM — raised to the most
    /// one client may submit (`quotas`: the per-client quotas that apply to `lead.submit`), so
    /// an unset setting never refuses what a quota the operator wrote allows.
    pub fn per_dealer_lead_default(quotas: impl Iterator<Item = Quota>) -> Quota {
        let floor = Quota {
            count: 600,
            period: Duration::from_secs(3600),
            burst: 60,
        };
        Quota::at_least(floor, quotas)
    }

    /// `floor`, raised to the fastest rate and largest burst among `configured`.
    fn at_least(floor: Quota, configured: impl Iterator<Item = Quota>) -> Quota {
        configured.fold(floor, |most, q| Quota {
            burst: most.burst.max(q.burst),
            ..if q.per_second() > most.per_second() {
                q
            } else {
                most
            }
        })
    }

    fn per_second(&self) -> f64 {
        f64::from(self.count) / self.period.as_secs_f64()
    }

    /// The time one call "costs": the quota refills one call per interval.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count.max(1)
    }
}

#[derive(Clone, PartialEq, Eq)]
pub enum LimitBackend {
    Memory,
    Redis { url: String },
}

/// The URL without its credentials: settings are logged and printed, the Redis password must
/// not be.
impl fmt::Debug for LimitBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitBackend::Memory => f.write_str("Memory"),
            LimitBackend::Redis { url } => f
                .debug_struct("Redis")
                .field("url", &redact_userinfo(url))
                .finish(),
        }
    }
}

/// `scheme://***@host…` for a URL with a user or password; anything else as it is.
pub fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBackendError {
    /// Fall back to this replica's own state.
    Local,
    /// Refuse calls until the backend answers again.
    Deny,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitSettings {
    /// `false`: no per-client quotas at all (`rate_limit.enabled`).
    pub enabled: bool,
    pub backend: LimitBackend,
    pub on_backend_error: OnBackendError,
    pub redis_timeout: Duration,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The header the trusted proxies write; no other is read.
    pub client_ip_header: ClientIpHeader,
    /// Every address's quota for all public requests, before any other work.
    pub per_ip: Quota,
    pub default: Quota,
    pub skills: HashMap<crate::protocol::Skill, Quota>,
    /// Quotas of each dealer for a skill, all clients together (`lead.submit` always has one).
    pub per_dealer: HashMap<crate::protocol::Skill, Quota>,
}

/// The forwarding header a trusted proxy writes (`rate_limit.client_ip_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, …` (appended to by each proxy).
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=…` (appended to by each proxy).
    Forwarded,
    /// `X-Real-IP: client` (set, not appended, by the proxy: one address).
    XRealIp,
}

impl ClientIpHeader {
    pub fn name(self) -> &'static str {
        match self {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
            ClientIpHeader::XRealIp => "x-real-ip",
        }
    }
}

/// `connections`: caps and deadlines of the public listener's connections.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSettings {
    /// Sized at start: a reload does not change it.
    pub max: usize,
    pub max_per_ip: usize,
    pub first_byte_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
}

/// API keys and the skills that need one. Present only when at least one skill does.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthSettings {
    /// Skills served without a key (`auth.mode` and `auth.skills` resolved); every other skill
    /// needs one.
    pub public_skills: std::collections::BTreeSet<crate::protocol::Skill>,
    pub keys: Vec<ApiKey>,
    /// `keys_file`, resolved: a reload watches its folder (a mounted secret changes apart from
    /// the configuration file).
    pub keys_file: Option<PathBuf>,
}

/// An API key, known by its hash only.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub id: String,
    pub sha256: [u8; 32],
    /// `None` = every dealer.
    pub dealers: Option<Vec<String>>,
    pub quota: Option<Quota>,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// How long a request body may take to arrive (HTTP 408 after).
    pub body_read_timeout: Duration,
    pub max_concurrency: usize,
    pub shutdown_grace: Duration,
    pub feed_refresh_priority: RefreshPriority,
}

/// `limits.feed_refresh_priority`: the CPU priority a feed's refreshes build at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshPriority {
    /// The operating system's idle class (Linux `SCHED_IDLE`): a refresh runs only on CPU
    /// that no request wants, and gives it up the moment a request wakes.
    Idle,
    /// As the gateway's other threads.
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Json,
    Text,
}

#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    pub service_name: String,
    /// Where traces go (OTLP/HTTP, protobuf): the traces URL, `/v1/traces` included. `None`: no
    /// exporter (and no exporter cost).
    pub otlp_traces_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DealerSettings {
    pub id: String,
    /// Lower-case host names; empty = any host.
    pub hosts: Vec<String>,
    /// `""` or a prefix such as `/dealers/demo-honda` (no trailing slash).
    pub path_prefix: String,
    pub card: CardSettings,
    pub profile: Option<Value>,
    /// The dealer's mapping folder, resolved against the configuration file's directory.
    pub mappings: Option<PathBuf>,
    /// JSON Pointer of this dealer in the configuration file, for located problems.
    pub pointer: String,
}
