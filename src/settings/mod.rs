//! Settings: the configuration file plus `AAP_GATEWAY__SECTION__KEY` environment overrides,
//! validated into run-time types.
//!
//! Loading never stops at the first problem: each section and each dealer is read on its own and
//! every problem is collected with its location (`file:line:col`, or the environment variable it
//! came from), so `aap-gateway check` can show an operator the whole list at once.

pub mod file;
pub mod yaml;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use file::{DRAFT_EXTENSION_URI, DRAFT_SCHEMA_BASE_URL};
use file::{
    FileAap, FileApiKey, FileAuth, FileBindings, FileCard, FileConnections, FileDealer,
    FileIdempotency, FileKeysFile, FileLimits, FileProvider, FileQuota, FileRateLimit,
    FileTelemetry,
};
pub use yaml::{Origin, Problem, SourceMap};

/// Prefix of environment overrides: `AAP_GATEWAY__LIMITS__MAX_BODY_BYTES=131072`.
pub const ENV_PREFIX: &str = "AAP_GATEWAY";
const ENV_SEPARATOR: &str = "__";

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

#[derive(Debug, Clone)]
pub struct AapSettings {
    pub extension_uri: String,
    pub version: String,
    pub schema_base_url: String,
    pub description: String,
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
pub struct Provider {
    pub organization: String,
    pub url: String,
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

#[derive(Debug, Clone)]
pub struct CardSettings {
    pub name: String,
    pub description: String,
    pub url: Option<String>,
    pub version: String,
    pub documentation_url: Option<String>,
    pub icon_url: Option<String>,
    pub provider: Option<Provider>,
}

/// Loads `path` with overrides from the process environment.
pub fn load(path: &Path) -> Result<Settings, Vec<Problem>> {
    let env: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    load_with_env(path, env)
}

/// Loads `path` with overrides from `env` (tests pass their own map).
pub fn load_with_env(path: &Path, env: HashMap<String, String>) -> Result<Settings, Vec<Problem>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Problem {
            origin: Origin::WholeFile {
                path: path.to_path_buf(),
            },
            message: format!("cannot read configuration: {e}"),
        }]
    })?;
    // Parsed once for positions and syntax errors; `config` then does the merging.
    let (_, source) = yaml::parse(path, &text).map_err(|p| vec![p])?;
    let env_vars: Vec<String> = env.keys().cloned().collect();
    let merged = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Yaml))
        .add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator(ENV_SEPARATOR)
                .separator(ENV_SEPARATOR)
                .try_parsing(true)
                .source(Some(env.into_iter().collect())),
        )
        .build()
        .and_then(|c| c.try_deserialize::<config::Map<String, config::Value>>())
        .map_err(|e| vec![source.problem("", format!("cannot load configuration: {e}"))])?;

    let mut loader = Loader {
        source,
        env_vars,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let settings = loader.read(merged);
    match settings {
        Some(s) if loader.problems.is_empty() => Ok(s),
        _ => {
            sort_problems(&mut loader.problems);
            Err(loader.problems)
        }
    }
}

/// The configuration file's keys, in the order `read` takes them; `file::FileConfig` (the
/// file's JSON Schema) has exactly these fields.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "listen",
    "admin_listen",
    "aap",
    "bindings",
    "limits",
    "connections",
    "telemetry",
    "idempotency",
    "rate_limit",
    "auth",
    "provider",
    "dealers",
];

struct Loader {
    source: SourceMap,
    env_vars: Vec<String>,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Loader {
    /// Where the value at `pointer` came from: an environment variable that set it, or the file.
    fn origin(&self, pointer: &str) -> Origin {
        let var = format!(
            "{ENV_PREFIX}{ENV_SEPARATOR}{}",
            pointer
                .trim_start_matches('/')
                .replace('/', ENV_SEPARATOR)
                .to_uppercase()
        );
        if self.env_vars.iter().any(|v| v.eq_ignore_ascii_case(&var)) {
            return Origin::Env { var };
        }
        self.source.origin(pointer)
    }

    fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        let origin = self.origin(pointer);
        self.problems.push(Problem {
            origin,
            message: message.into(),
        });
    }

    fn warn(&mut self, pointer: &str, message: impl Into<String>) {
        let origin = self.origin(pointer);
        self.warnings.push(Problem {
            origin,
            message: message.into(),
        });
    }

    /// Deserializes one section, recording a located problem on failure.
    fn section<T: DeserializeOwned>(&mut self, pointer: &str, value: config::Value) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let at = yaml::pointer_of(pointer, e.path());
                let message = clean_serde_message(&e.inner().to_string());
                self.problem(&at, message);
                None
            }
        }
    }

    fn read(&mut self, mut root: config::Map<String, config::Value>) -> Option<Settings> {
        const KNOWN: &[&str] = TOP_LEVEL_KEYS;
        let unknown: Vec<String> = root
            .keys()
            .filter(|k| !KNOWN.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            self.problem(
                &format!("/{key}"),
                format!("unknown key `{key}`; expected one of {}", KNOWN.join(", ")),
            );
        }
        let mut take = |key: &str| root.shift_remove(key);

        let listen = self.address("/listen", take("listen"), "0.0.0.0:8080");
        let admin_listen = self.address("/admin_listen", take("admin_listen"), "127.0.0.1:9090");
        let aap: Option<FileAap> = self.optional_section("/aap", take("aap"));
        let bindings: Option<FileBindings> = self.optional_section("/bindings", take("bindings"));
        let limits: Option<FileLimits> = self.optional_section("/limits", take("limits"));
        let connections: Option<FileConnections> =
            self.optional_section("/connections", take("connections"));
        let telemetry: Option<FileTelemetry> =
            self.optional_section("/telemetry", take("telemetry"));
        let idempotency: Option<FileIdempotency> =
            self.optional_section("/idempotency", take("idempotency"));
        let rate_limit: Option<FileRateLimit> =
            self.optional_section("/rate_limit", take("rate_limit"));
        let auth: Option<FileAuth> = self.optional_section("/auth", take("auth"));
        let provider = match take("provider") {
            Some(v) if !is_nil(&v) => self.section::<FileProvider>("/provider", v).map(Some),
            _ => Some(None),
        };
        let dealers = self.dealers(take("dealers"));

        let aap = self.aap(aap?);
        let bindings = bindings?;
        let jsonrpc_path = self.jsonrpc_path(&bindings.jsonrpc.path);
        let rate_limited_http_status =
            self.rate_limited_status(bindings.jsonrpc.rate_limited_status);
        let limits = self.limits(limits?);
        let connections = self.connections(connections?);
        let telemetry = self.telemetry(telemetry?);
        let rate_limit = rate_limit?;
        let shared_redis_url = rate_limit.redis_url.clone();
        let rate_limit = self.rate_limit(rate_limit);
        let idempotency = self.idempotency(idempotency?, shared_redis_url);
        let auth = self.auth(auth?);
        let rate_limit = rate_limit.map(|mut limits| {
            let lead = crate::protocol::Skill::LeadSubmit;
            if !limits.per_dealer.contains_key(&lead) {
                let quota = lead_quota_default(&limits, auth.as_ref().and_then(Option::as_ref));
                limits.per_dealer.insert(lead, quota);
            }
            limits
        });
        let provider = provider?.map(|p| self.provider("/provider", p));
        let dealers = dealers?;
        if let Some(Some(auth)) = &auth {
            for key in &auth.keys {
                for id in key.dealers.iter().flatten() {
                    if !dealers.iter().any(|d| &d.id == id) {
                        self.problem(
                            "/auth/keys",
                            format!(
                                "key `{}` names dealer `{id}`, which is not configured",
                                key.id
                            ),
                        );
                    }
                }
            }
        }
        Some(Settings {
            source: self.source.clone(),
            listen: listen?,
            admin_listen: admin_listen?,
            aap: aap?,
            jsonrpc_path: jsonrpc_path?,
            jsonrpc_rate_limited_http_status: rate_limited_http_status?,
            http_json: bindings.http_json.enabled,
            limits: limits?,
            connections: connections?,
            telemetry: telemetry?,
            idempotency: idempotency?,
            rate_limit: rate_limit?,
            auth: auth?,
            dealers: dealers
                .into_iter()
                .map(|mut d| {
                    if d.card.provider.is_none() {
                        d.card.provider = provider.clone().flatten();
                    }
                    d
                })
                .collect(),
            warnings: std::mem::take(&mut self.warnings),
        })
    }

    fn optional_section<T: DeserializeOwned + Default>(
        &mut self,
        pointer: &str,
        value: Option<config::Value>,
    ) -> Option<T> {
        match value {
            Some(v) if !is_nil(&v) => self.section(pointer, v),
            _ => Some(T::default()),
        }
    }

    fn address(
        &mut self,
        pointer: &str,
        value: Option<config::Value>,
        default: &str,
    ) -> Option<SocketAddr> {
        let text = match value {
            Some(v) => self.section::<String>(pointer, v)?,
            None => default.to_owned(),
        };
        match text.parse() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.problem(
                    pointer,
                    format!("`{text}` is not a socket address like 0.0.0.0:8080"),
                );
                None
            }
        }
    }

    fn duration(&mut self, pointer: &str, text: &str) -> Option<Duration> {
        match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                self.problem(pointer, "must be greater than zero");
                None
            }
            Err(e) => {
                self.problem(
                    pointer,
                    format!("`{text}` is not a duration like 15s or 500ms: {e}"),
                );
                None
            }
        }
    }

    fn aap(&mut self, file: FileAap) -> Option<AapSettings> {
        let uri = file.extension_uri.trim().to_owned();
        if uri == DRAFT_EXTENSION_URI {
            self.warn(
                "/aap/extension_uri",
                "the draft AAP extension URI is for development only; never publish it",
            );
        } else if let Some(version) =
            uri.strip_prefix("https://autoagentprotocol.org/extensions/aap/")
        {
            if version.starts_with("v1.") {
                self.problem(
                    "/aap/extension_uri",
                    format!(
                        "`{uri}` names the frozen AAP v1 contract; this gateway speaks AAP 2.0"
                    ),
                );
                return None;
            }
        } else {
            self.problem(
                "/aap/extension_uri",
                format!(
                    "`{uri}` is not an AAP extension URI (expected {DRAFT_EXTENSION_URI} or \
                     https://autoagentprotocol.org/extensions/aap/v{{MAJOR}}.{{MINOR}})"
                ),
            );
            return None;
        }
        if !file.schema_base_url.ends_with('/') || !is_absolute_url(&file.schema_base_url) {
            self.problem(
                "/aap/schema_base_url",
                "must be an absolute URL ending in `/`, e.g. https://autoagentprotocol.org/v2.0/schemas/",
            );
            return None;
        }
        if file.version.trim().is_empty() {
            self.problem("/aap/version", "must not be empty");
            return None;
        }
        Some(AapSettings {
            extension_uri: uri,
            version: file.version,
            schema_base_url: file.schema_base_url,
            description: file.description,
        })
    }

    fn jsonrpc_path(&mut self, path: &str) -> Option<String> {
        if !is_clean_path(path) || path == "/" {
            self.problem(
                "/bindings/jsonrpc/path",
                format!(
                    "`{path}` must be a path like /a2a (leading `/`, no trailing `/`, no query)"
                ),
            );
            return None;
        }
        Some(path.to_owned())
    }

    /// `true` for 429: see docs/protocol.md §Rate limits for what each SDK client makes of it.
    fn rate_limited_status(&mut self, status: u16) -> Option<bool> {
        match status {
            200 => Some(false),
            429 => Some(true),
            other => {
                self.problem(
                    "/bindings/jsonrpc/rate_limited_status",
                    format!("`{other}` is not one of 200, 429"),
                );
                None
            }
        }
    }

    fn limits(&mut self, file: FileLimits) -> Option<Limits> {
        let request_timeout = self.duration("/limits/request_timeout", &file.request_timeout);
        let body_read_timeout = self.duration("/limits/body_read_timeout", &file.body_read_timeout);
        if let (Some(body), Some(request)) = (body_read_timeout, request_timeout)
            && body > request
        {
            self.problem(
                "/limits/body_read_timeout",
                "must not be longer than limits.request_timeout",
            );
        }
        let shutdown_grace = self.duration("/limits/shutdown_grace", &file.shutdown_grace);
        const MAX_BODY: u64 = 16 * 1024 * 1024;
        let max_body_bytes = if (1024..=MAX_BODY).contains(&file.max_body_bytes) {
            usize::try_from(file.max_body_bytes).ok()
        } else {
            self.problem(
                "/limits/max_body_bytes",
                format!("must be between 1024 and {MAX_BODY}"),
            );
            None
        };
        let max_concurrency = if file.max_concurrency == 0 {
            self.problem("/limits/max_concurrency", "must be at least 1");
            None
        } else {
            usize::try_from(file.max_concurrency).ok()
        };
        Some(Limits {
            max_body_bytes: max_body_bytes?,
            body_read_timeout: body_read_timeout.filter(|b| Some(*b) <= request_timeout)?,
            request_timeout: request_timeout?,
            max_concurrency: max_concurrency?,
            shutdown_grace: shutdown_grace?,
        })
    }

    fn connections(&mut self, file: FileConnections) -> Option<ConnectionSettings> {
        let mut count = |pointer: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                usize::try_from(value).ok()
            } else {
                self.problem(pointer, format!("must be between {low} and {high}"));
                None
            }
        };
        let max = count("/connections/max", file.max, 1, 1_000_000);
        let max_per_ip = count("/connections/max_per_ip", file.max_per_ip, 1, 1_000_000);
        let streams = count(
            "/connections/http2_max_concurrent_streams",
            u64::from(file.http2_max_concurrent_streams),
            1,
            1000,
        );
        if let (Some(max), Some(per_ip)) = (max, max_per_ip)
            && per_ip > max
        {
            self.problem(
                "/connections/max_per_ip",
                "must not be more than connections.max",
            );
        }
        let first_byte_timeout =
            self.duration("/connections/first_byte_timeout", &file.first_byte_timeout);
        let header_read_timeout = self.duration(
            "/connections/header_read_timeout",
            &file.header_read_timeout,
        );
        let idle_timeout = self.duration("/connections/idle_timeout", &file.idle_timeout);
        let http2_keep_alive_interval = self.duration(
            "/connections/http2_keep_alive_interval",
            &file.http2_keep_alive_interval,
        );
        let http2_keep_alive_timeout = self.duration(
            "/connections/http2_keep_alive_timeout",
            &file.http2_keep_alive_timeout,
        );
        Some(ConnectionSettings {
            max_per_ip: max_per_ip.filter(|p| Some(*p) <= max)?,
            max: max?,
            first_byte_timeout: first_byte_timeout?,
            header_read_timeout: header_read_timeout?,
            idle_timeout: idle_timeout?,
            http2_max_concurrent_streams: u32::try_from(streams?).ok()?,
            http2_keep_alive_interval: http2_keep_alive_interval?,
            http2_keep_alive_timeout: http2_keep_alive_timeout?,
        })
    }

    fn telemetry(&mut self, file: FileTelemetry) -> Option<TelemetrySettings> {
        let log_format = match file.log_format.as_str() {
            "auto" => LogFormat::Auto,
            "json" => LogFormat::Json,
            "text" => LogFormat::Text,
            other => {
                self.problem(
                    "/telemetry/log_format",
                    format!("`{other}` is not one of auto, json, text"),
                );
                return None;
            }
        };
        // The standard variable when the file says nothing (docs/operations.md §Traces).
        let endpoint = file
            .otlp_endpoint
            .filter(|e| !e.trim().is_empty())
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|e| !e.trim().is_empty());
        let otlp_traces_url = match endpoint {
            Some(e) if e.starts_with("http://") || e.starts_with("https://") => {
                Some(format!("{}/v1/traces", e.trim().trim_end_matches('/')))
            }
            Some(e) => {
                self.problem(
                    "/telemetry/otlp_endpoint",
                    format!(
                        "`{e}` is not an http:// or https:// URL like http://otel-collector:4318"
                    ),
                );
                return None;
            }
            None => None,
        };
        Some(TelemetrySettings {
            log_format,
            service_name: file.service_name,
            otlp_traces_url,
        })
    }

    fn idempotency(
        &mut self,
        file: FileIdempotency,
        rate_limit_redis_url: Option<String>,
    ) -> Option<IdempotencySettings> {
        // One Redis for both is the common case: `idempotency.redis_url` defaults to the
        // rate limiter's.
        let url = file.redis_url.clone().or(rate_limit_redis_url);
        let backend = self.backend("/idempotency", &file.backend, url.as_deref());
        let on_backend_error =
            self.on_backend_error("/idempotency/on_backend_error", &file.on_backend_error);
        let redis_timeout = self.duration("/idempotency/redis_timeout", &file.redis_timeout);
        let lock_ttl = self.duration("/idempotency/lock_ttl", &file.lock_ttl);
        if lock_ttl.is_some_and(|t| t < Duration::from_secs(1)) {
            self.problem(
                "/idempotency/lock_ttl",
                "must be at least 1s: it is renewed every third of it, each renewal a Redis call",
            );
        }
        if let (Some(lease), Some(redis)) = (lock_ttl, redis_timeout)
            && lease >= Duration::from_secs(1)
            && lease < redis * 6
        {
            self.problem(
                "/idempotency/lock_ttl",
                "must be at least 6 × redis_timeout: a renewal every third of it has to get \
                 through even when Redis is slow",
            );
        }
        let on_ambiguous = match file.on_ambiguous.as_str() {
            "resend" => Some(OnAmbiguous::Resend),
            "hold" => Some(OnAmbiguous::Hold),
            other => {
                self.problem(
                    "/idempotency/on_ambiguous",
                    format!("`{other}` is not one of resend, hold"),
                );
                None
            }
        };
        let ttl = self.duration("/idempotency/ttl", &file.ttl);
        if ttl.is_some_and(|t| t < Duration::from_secs(24 * 3600)) {
            self.warn(
                "/idempotency/ttl",
                "shorter than the 24 h docs/protocol.md §Idempotency recommends: a buyer retrying \
                 later gets a second lead",
            );
        }
        let max_entries = if file.max_entries == 0 {
            self.problem("/idempotency/max_entries", "must be at least 1");
            None
        } else {
            usize::try_from(file.max_entries).ok()
        };
        let max_bytes = if file.max_bytes < 64 * 1024 {
            self.problem(
                "/idempotency/max_bytes",
                "must be at least 65536 (64 KiB): one stored reply can take a few KiB",
            );
            None
        } else {
            Some(usize::try_from(file.max_bytes).unwrap_or(usize::MAX))
        };
        Some(IdempotencySettings {
            backend: backend?,
            on_backend_error: on_backend_error?,
            redis_timeout: redis_timeout?,
            lock_ttl: lock_ttl.filter(|t| *t >= Duration::from_secs(1))?,
            ttl: ttl?,
            max_entries: max_entries?,
            max_bytes: max_bytes?,
            on_ambiguous: on_ambiguous?,
        })
    }

    fn quota(&mut self, pointer: &str, file: &FileQuota) -> Option<Quota> {
        let parsed = file.rate.split_once('/').and_then(|(count, unit)| {
            let count: u32 = count.trim().parse().ok().filter(|c| *c > 0)?;
            let period = match unit.trim() {
                "s" | "sec" | "second" => Duration::from_secs(1),
                "m" | "min" | "minute" => Duration::from_secs(60),
                "h" | "hour" => Duration::from_secs(3600),
                other => humantime::parse_duration(other)
                    .ok()
                    .filter(|d| !d.is_zero())?,
            };
            Some((count, period))
        });
        let Some((count, period)) = parsed else {
            self.problem(
                &format!("{pointer}/rate"),
                format!("`{}` is not a rate like 10/s, 600/min or 5/10s", file.rate),
            );
            return None;
        };
        if file.burst == 0 {
            self.problem(&format!("{pointer}/burst"), "must be at least 1");
            return None;
        }
        Some(Quota {
            count,
            period,
            burst: file.burst,
        })
    }

    /// `backend: memory | redis` with the `redis_url` a Redis backend needs.
    fn backend(&mut self, section: &str, name: &str, url: Option<&str>) -> Option<LimitBackend> {
        match (name, url) {
            ("memory", _) => Some(LimitBackend::Memory),
            // Checked here, where the problem can name the variable or line it came from.
            ("redis", Some(url)) => match crate::redis_backend::parse_url(url) {
                Ok(_) => Some(LimitBackend::Redis {
                    url: url.to_owned(),
                }),
                Err(message) => {
                    self.problem(&format!("{section}/redis_url"), message);
                    None
                }
            },
            ("redis", None) => {
                self.problem(
                    &format!("{section}/backend"),
                    "`backend: redis` needs `redis_url` like redis://host:6379/0 (rediss:// for TLS)",
                );
                None
            }
            (other, _) => {
                self.problem(
                    &format!("{section}/backend"),
                    format!("`{other}` is not a backend; expected memory or redis"),
                );
                None
            }
        }
    }

    fn on_backend_error(&mut self, pointer: &str, value: &str) -> Option<OnBackendError> {
        match value {
            "local" => Some(OnBackendError::Local),
            "deny" => Some(OnBackendError::Deny),
            other => {
                self.problem(pointer, format!("`{other}` is not one of local, deny"));
                None
            }
        }
    }

    fn rate_limit(&mut self, file: FileRateLimit) -> Option<RateLimitSettings> {
        let backend = self.backend("/rate_limit", &file.backend, file.redis_url.as_deref());
        let on_backend_error =
            self.on_backend_error("/rate_limit/on_backend_error", &file.on_backend_error);
        let redis_timeout = self.duration("/rate_limit/redis_timeout", &file.redis_timeout);
        let mut trusted_proxies = Vec::new();
        for (i, cidr) in file.trusted_proxies.iter().enumerate() {
            let parsed = cidr
                .parse::<ipnet::IpNet>()
                .or_else(|_| cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(net) => trusted_proxies.push(net),
                Err(_) => self.problem(
                    &format!("/rate_limit/trusted_proxies/{i}"),
                    format!("`{cidr}` is not an address or CIDR like 10.0.0.0/8"),
                ),
            }
        }
        let client_ip_header = match file.client_ip_header.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Some(ClientIpHeader::XForwardedFor),
            "forwarded" => Some(ClientIpHeader::Forwarded),
            "x-real-ip" => Some(ClientIpHeader::XRealIp),
            _ => {
                self.problem(
                    "/rate_limit/client_ip_header",
                    format!(
                        "`{}` is not one of x-forwarded-for, forwarded, x-real-ip",
                        file.client_ip_header
                    ),
                );
                None
            }
        };
        let default = self.quota("/rate_limit/default", &file.default);
        let skills = self.skill_quotas("/rate_limit/skills", &file.skills);
        let per_dealer = self.skill_quotas("/rate_limit/per_dealer", &file.per_dealer);
        let per_ip = match &file.per_ip {
            Some(quota) => self.quota("/rate_limit/per_ip", quota),
            None => default
                .map(|d| Quota::per_ip_default(std::iter::once(d).chain(skills.values().copied()))),
        };
        Some(RateLimitSettings {
            enabled: file.enabled,
            backend: backend?,
            on_backend_error: on_backend_error?,
            redis_timeout: redis_timeout?,
            trusted_proxies,
            client_ip_header: client_ip_header?,
            per_ip: per_ip?,
            default: default?,
            skills,
            per_dealer,
        })
    }

    /// A map of skill id → quota (`rate_limit.skills`, `rate_limit.per_dealer`).
    fn skill_quotas(
        &mut self,
        base: &str,
        file: &std::collections::BTreeMap<String, FileQuota>,
    ) -> HashMap<crate::protocol::Skill, Quota> {
        let mut quotas = HashMap::new();
        for (name, quota) in file {
            let pointer = yaml::push_pointer(base, name);
            match crate::protocol::Skill::from_id(name) {
                Some(skill) => {
                    if let Some(q) = self.quota(&pointer, quota) {
                        quotas.insert(skill, q);
                    }
                }
                None => self.problem(
                    &pointer,
                    format!(
                        "`{name}` is not an AAP skill; use one of {}",
                        crate::protocol::Skill::ids()
                    ),
                ),
            }
        }
        quotas
    }

    fn auth(&mut self, file: FileAuth) -> Option<Option<AuthSettings>> {
        let needs_key = |this: &mut Loader, pointer: &str, mode: &str| match mode {
            "none" => Some(false),
            "api_key" => Some(true),
            other => {
                this.problem(pointer, format!("`{other}` is not one of none, api_key"));
                None
            }
        };
        let default = needs_key(self, "/auth/mode", &file.mode);
        let mut public_skills = std::collections::BTreeSet::new();
        let mut complete = default.is_some();
        for skill in crate::protocol::Skill::ALL {
            if default == Some(false) && !file.skills.contains_key(skill.id()) {
                public_skills.insert(skill);
            }
        }
        for (name, mode) in &file.skills {
            let pointer = yaml::push_pointer("/auth/skills", name);
            let Some(skill) = crate::protocol::Skill::from_id(name) else {
                self.problem(
                    &pointer,
                    format!(
                        "`{name}` is not an AAP skill; use one of {}",
                        crate::protocol::Skill::ids()
                    ),
                );
                complete = false;
                continue;
            };
            match needs_key(self, &pointer, mode) {
                Some(false) => {
                    public_skills.insert(skill);
                }
                Some(true) => {}
                None => complete = false,
            }
        }
        if !complete {
            return None;
        }
        if public_skills.len() == crate::protocol::Skill::ALL.len() {
            if !file.keys.is_empty() || file.keys_file.is_some() {
                self.warn(
                    "/auth/mode",
                    "keys are configured but no skill needs one (`mode: none` and no \
                     `skills` entry on api_key): calls are not authenticated",
                );
            }
            return Some(None);
        }
        let mut keys = Vec::new();
        for (i, key) in file.keys.iter().enumerate() {
            if let Some(k) = self.api_key(&format!("/auth/keys/{i}"), key) {
                keys.push(k);
            }
        }
        let keys_file = file
            .keys_file
            .as_ref()
            .map(|path| resolve(self.source.path(), path));
        if let Some(resolved) = &keys_file {
            let resolved = resolved.clone();
            let parsed = std::fs::read_to_string(&resolved)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    yaml::parse(&resolved, &text)
                        .map_err(|p| p.to_string())
                        .and_then(|(value, _)| {
                            serde_json::from_value::<FileKeysFile>(value).map_err(|e| e.to_string())
                        })
                });
            match parsed {
                Ok(file) => {
                    for (i, key) in file.keys.iter().enumerate() {
                        if let Some(k) = self.api_key(&format!("/auth/keys_file#{i}"), key) {
                            keys.push(k);
                        }
                    }
                }
                Err(e) => self.problem(
                    "/auth/keys_file",
                    format!("cannot read {}: {e}", resolved.display()),
                ),
            }
        }
        if keys.is_empty() {
            self.problem(
                "/auth",
                "skills that need an API key (`mode` or `skills` on api_key) need at least one \
                 key (`keys` or `keys_file`)",
            );
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        for key in &keys {
            if !seen.insert(key.id.clone()) {
                self.problem("/auth/keys", format!("key id `{}` is used twice", key.id));
            }
        }
        Some(Some(AuthSettings {
            public_skills,
            keys,
            keys_file,
        }))
    }

    fn api_key(&mut self, pointer: &str, file: &FileApiKey) -> Option<ApiKey> {
        let mut ok = true;
        if file.id.is_empty()
            || !file
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            self.problem(
                &format!("{pointer}/id"),
                "must be letters, digits, `-`, `_` or `.`",
            );
            ok = false;
        }
        let hex = file.sha256.trim().to_ascii_lowercase();
        let mut sha256 = [0u8; 32];
        let valid_hex = hex.len() == 64
            && (0..32).all(|i| {
                u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map(|b| sha256[i] = b)
                    .is_ok()
            });
        if !valid_hex {
            self.problem(
                &format!("{pointer}/sha256"),
                "must be the 64 hex digits of the key's SHA-256 (printf %s \"$KEY\" | sha256sum)",
            );
            ok = false;
        }
        let quota = match &file.quota {
            Some(q) => Some(self.quota(&format!("{pointer}/quota"), q)?),
            None => None,
        };
        ok.then(|| ApiKey {
            id: file.id.clone(),
            sha256,
            dealers: file.dealers.clone(),
            quota,
        })
    }

    fn provider(&mut self, pointer: &str, file: FileProvider) -> Option<Provider> {
        if !is_absolute_url(&file.url) {
            self.problem(
                &format!("{pointer}/url"),
                format!("`{}` is not an absolute URL", file.url),
            );
            return None;
        }
        Some(Provider {
            organization: file.organization,
            url: file.url,
        })
    }

    fn dealers(&mut self, value: Option<config::Value>) -> Option<Vec<DealerSettings>> {
        let Some(value) = value.filter(|v| !is_nil(v)) else {
            self.problem("", "no `dealers` configured; list at least one dealer");
            return None;
        };
        let items = self.section::<Vec<config::Value>>("/dealers", value)?;
        if items.is_empty() {
            self.problem("/dealers", "list at least one dealer");
            return None;
        }
        let mut dealers = Vec::with_capacity(items.len());
        let mut complete = true;
        for (i, item) in items.into_iter().enumerate() {
            let pointer = format!("/dealers/{i}");
            match self
                .section::<FileDealer>(&pointer, item)
                .and_then(|d| self.dealer(&pointer, d))
            {
                Some(d) => dealers.push(d),
                None => complete = false,
            }
        }
        self.check_dealer_overlaps(&dealers);
        complete.then_some(dealers)
    }

    fn dealer(&mut self, pointer: &str, file: FileDealer) -> Option<DealerSettings> {
        let mut ok = true;
        if file.id.is_empty()
            || !file
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.problem(
                &format!("{pointer}/id"),
                format!("`{}` must be letters, digits, `_` or `-`", file.id),
            );
            ok = false;
        }
        let mut hosts = Vec::with_capacity(file.hosts.len());
        for (i, host) in file.hosts.iter().enumerate() {
            let h = host.trim().to_ascii_lowercase();
            if h.is_empty() || h.contains(['/', ':', ' ']) && !h.starts_with('[') {
                self.problem(
                    &format!("{pointer}/hosts/{i}"),
                    format!("`{host}` must be a bare host name such as dealer.example.com"),
                );
                ok = false;
            }
            hosts.push(h);
        }
        let path_prefix = match file.path_prefix.as_deref() {
            None => String::new(),
            Some(p) if is_clean_path(p) && p != "/" => p.to_owned(),
            Some(p) => {
                self.problem(
                    &format!("{pointer}/path_prefix"),
                    format!(
                        "`{p}` must look like /dealers/my-dealer (leading `/`, no trailing `/`)"
                    ),
                );
                ok = false;
                String::new()
            }
        };
        let card = self.card(&format!("{pointer}/card"), file.card);
        if let Some(profile) = &file.profile
            && !profile.is_object()
        {
            self.problem(
                &format!("{pointer}/profile"),
                "must be a mapping (AAP DealerInformation)",
            );
            ok = false;
        }
        let card = card?;
        ok.then(|| DealerSettings {
            id: file.id,
            hosts,
            path_prefix,
            card,
            profile: file.profile,
            mappings: file.mappings.map(|m| resolve(self.source.path(), &m)),
            pointer: pointer.to_owned(),
        })
    }

    fn card(&mut self, pointer: &str, file: FileCard) -> Option<CardSettings> {
        let mut ok = true;
        for (key, value) in [("name", &file.name), ("description", &file.description)] {
            if value.trim().is_empty() {
                self.problem(
                    &format!("{pointer}/{key}"),
                    format!("`{key}` must not be empty"),
                );
                ok = false;
            }
        }
        match &file.url {
            Some(url) => {
                if let Err(message) = check_interface_url(url) {
                    self.problem(&format!("{pointer}/url"), message);
                    ok = false;
                }
            }
            None => self.warn(
                pointer,
                "card.url is not set; the card advertises the listen address, which is right only \
                 for local development",
            ),
        }
        for (key, value) in [
            ("documentation_url", &file.documentation_url),
            ("icon_url", &file.icon_url),
        ] {
            if let Some(v) = value
                && !is_absolute_url(v)
            {
                self.problem(
                    &format!("{pointer}/{key}"),
                    format!("`{v}` is not an absolute URL"),
                );
                ok = false;
            }
        }
        let provider = match file.provider {
            Some(p) => match self.provider(&format!("{pointer}/provider"), p) {
                Some(p) => Some(p),
                None => return None,
            },
            None => None,
        };
        ok.then_some(CardSettings {
            name: file.name,
            description: file.description,
            url: file.url,
            version: file.version,
            documentation_url: file.documentation_url,
            icon_url: file.icon_url,
            provider,
        })
    }

    /// Two dealers that would both claim the same request make routing ambiguous.
    fn check_dealer_overlaps(&mut self, dealers: &[DealerSettings]) {
        for (i, a) in dealers.iter().enumerate() {
            for b in &dealers[..i] {
                if a.id == b.id {
                    self.problem(
                        &format!("{}/id", a.pointer),
                        format!("duplicate dealer id `{}`", a.id),
                    );
                    continue;
                }
                let same_prefix = a.path_prefix == b.path_prefix;
                let hosts_overlap = (a.hosts.is_empty() && b.hosts.is_empty())
                    || a.hosts.iter().any(|h| b.hosts.contains(h));
                if same_prefix && hosts_overlap {
                    self.problem(
                        &a.pointer,
                        format!(
                            "dealer `{}` claims the same hosts and path prefix as `{}`; give one a \
                             distinct `hosts` entry or `path_prefix`",
                            a.id, b.id
                        ),
                    );
                }
            }
        }
    }
}

/// The unset `rate_limit.per_dealer` of `lead.submit` ([`Quota::per_dealer_lead_default`]):
/// the per-client quotas that apply to a lead are the skill's own, else each key's or the
/// default (see `rate_limit::Limiter::pick`).
fn lead_quota_default(limits: &RateLimitSettings, auth: Option<&AuthSettings>) -> Quota {
    match limits.skills.get(&crate::protocol::Skill::LeadSubmit) {
        Some(quota) => Quota::per_dealer_lead_default(std::iter::once(*quota)),
        None => Quota::per_dealer_lead_default(
            std::iter::once(limits.default).chain(
                auth.iter()
                    .flat_map(|a| a.keys.iter().filter_map(|k| k.quota)),
            ),
        ),
    }
}

fn is_nil(v: &config::Value) -> bool {
    matches!(v.kind, config::ValueKind::Nil)
}

fn is_clean_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.ends_with('/') | (p == "/")
        && !p.contains(['?', '#', ' ', '%'])
        && !p.contains("//")
}

fn is_absolute_url(s: &str) -> bool {
    match s.parse::<http::Uri>() {
        Ok(uri) => matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some(),
        Err(_) => false,
    }
}

/// Interface URLs are HTTPS; plain HTTP only on loopback for development (docs/protocol.md
/// §Endpoints).
pub fn check_interface_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("`{url}` is not an absolute URL"))?;
    let host = uri.host().ok_or_else(|| format!("`{url}` has no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback_host(host) => Ok(()),
        Some("http") => Err(format!(
            "`{url}` must use https; plain http is only allowed on loopback for development"
        )),
        _ => Err(format!("`{url}` must be an https URL")),
    }
}

pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Orders problems by where they are, so an operator can walk the file top to bottom.
pub fn sort_problems(problems: &mut [Problem]) {
    problems.sort_by_key(|p| match &p.origin {
        Origin::File { path, line, col } => (0, path.clone(), *line, *col, String::new()),
        Origin::WholeFile { path } => (0, path.clone(), 0, 0, String::new()),
        Origin::Env { var } => (1, PathBuf::new(), 0, 0, var.clone()),
    });
}

/// serde's messages name Rust-ish types; keep them but drop the noise `config` adds.
fn clean_serde_message(message: &str) -> String {
    let message = match message.find(" for key `") {
        Some(i) => &message[..i],
        None => message,
    };
    message
        .replace("invalid type: ", "wrong type: ")
        .trim()
        .to_owned()
}

/// `relative` resolved against the directory of `config_path`, with `.` and `..` removed
/// lexically so messages show `mappings/x/…` rather than `config/../mappings/x/…`.
pub fn resolve(config_path: &Path, relative: &str) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in base_dir(config_path).join(relative).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The directory relative paths in a configuration file are resolved against.
pub fn base_dir(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}
