//! Loading: the file plus `AAP_GATEWAY__…` overrides merged, the problem collector (`ConfigLoader`)
//! with its shared checks, and the top-level read that assembles `Settings` from the sections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::file::{
    FileAap, FileAuth, FileBindings, FileConnections, FileIdempotency, FileLimits, FileProvider,
    FileRateLimit, FileTelemetry,
};
use super::types::{AuthSettings, Quota, RateLimitSettings, Settings};
use super::yaml::{self, Origin, Problem, SourceMap};

/// Prefix of environment overrides: `AAP_GATEWAY__LIMITS__MAX_BODY_BYTES=131072`.
pub const ENV_PREFIX: &str = "AAP_GATEWAY";
const ENV_SEPARATOR: &str = "__";

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

    let mut loader = ConfigLoader {
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

pub(super) struct ConfigLoader {
    pub(super) source: SourceMap,
    env_vars: Vec<String>,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl ConfigLoader {
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

    pub(super) fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        let origin = self.origin(pointer);
        self.problems.push(Problem {
            origin,
            message: message.into(),
        });
    }

    pub(super) fn warn(&mut self, pointer: &str, message: impl Into<String>) {
        let origin = self.origin(pointer);
        self.warnings.push(Problem {
            origin,
            message: message.into(),
        });
    }

    /// Deserializes one section, recording a located problem on failure.
    pub(super) fn section<T: DeserializeOwned>(
        &mut self,
        pointer: &str,
        value: config::Value,
    ) -> Option<T> {
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
        let mcp = self.mcp(bindings.mcp.clone(), jsonrpc_path.as_deref());
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
            mcp: mcp?,
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

    pub(super) fn duration(&mut self, pointer: &str, text: &str) -> Option<Duration> {
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

pub(super) fn is_nil(v: &config::Value) -> bool {
    matches!(v.kind, config::ValueKind::Nil)
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
