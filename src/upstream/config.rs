//! `FileUpstream`: one entry of a dealer's `upstreams.yaml` exactly as an operator writes it, and
//! its validation into [`UpstreamSettings`].
//!
//! The file types mirror the YAML one to one, reject unknown keys and hold every default in one
//! place (the `Default` impls below). `${VAR}` references are expanded by the caller before these
//! types see the values. Validation never stops at the first problem: every problem is reported
//! with a JSON Pointer relative to the upstream's entry (e.g. `/timeouts/request`), so the caller
//! can locate it in the file.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use reqwest::Url;
use serde::Deserialize;

use crate::settings::yaml::push_pointer;

/// The largest `retries.attempts`: more tries only pile load onto a system that is already down.
pub const MAX_ATTEMPTS: u32 = 5;
/// The largest `max_response_bytes` (256 MiB): a reply is held in memory whole.
pub const MAX_RESPONSE_BYTES_LIMIT: usize = 256 * 1024 * 1024;
/// The largest `max_concurrency`.
pub const MAX_CONCURRENCY_LIMIT: usize = 10_000;
/// The longest timeout, backoff or cool-down accepted (10 minutes); longer is surely a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(600);

/// Headers the client owns: setting them by hand would break framing or routing.
pub(crate) const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
];

/// A secret string: deserialized as-is, never shown by `Debug`.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself; never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// One upstream system (an entry of `upstreams.yaml`, keyed by the upstream's name).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    /// `rest` (JSON or any body over HTTP) or `soap` (not supported yet).
    #[serde(default)]
    pub kind: FileUpstreamKind,
    /// Base URL, `http` or `https`, no query, fragment or credentials. Its path is a prefix of
    /// every call's path: `https://x/api` + `/v2/vehicles` → `https://x/api/v2/vehicles`.
    pub base_url: String,
    /// How long to wait for the upstream.
    #[serde(default)]
    pub timeouts: FileTimeouts,
    /// Retries of idempotent calls.
    #[serde(default)]
    pub retries: FileRetries,
    /// Stops calling an upstream that keeps failing.
    #[serde(default)]
    pub circuit_breaker: FileCircuitBreaker,
    /// Calls in flight to this upstream at most; more wait for a slot (the wait counts against
    /// `timeouts.request`).
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u64,
    /// Largest reply body accepted (after decompression); larger replies fail.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// TLS settings for `https` base URLs (and an `https` OAuth2 token URL).
    #[serde(default)]
    pub tls: FileTls,
    /// Static headers sent with every call, e.g. `User-Agent`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How the gateway authenticates to the upstream; absent = no authentication.
    #[serde(default)]
    pub auth: Option<FileAuth>,
}

fn default_max_concurrency() -> u64 {
    16
}

fn default_max_response_bytes() -> u64 {
    4 * 1024 * 1024
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileUpstreamKind {
    #[default]
    Rest,
    Soap,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileTimeouts {
    /// Deadline for opening a connection (TCP and TLS), e.g. `2s`.
    pub connect: String,
    /// Deadline for one attempt: waiting for a concurrency slot, sending, and reading the whole
    /// reply (headers and body), e.g. `5s`.
    pub request: String,
}

impl Default for FileTimeouts {
    fn default() -> Self {
        FileTimeouts {
            connect: "2s".to_owned(),
            request: "5s".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileRetries {
    /// Tries per idempotent call, the first one included (1 = never retry; at most 5). Retried:
    /// connect errors, timeouts, 502, 503 and 504.
    pub attempts: u32,
    /// Backoff before the first retry; doubled for each further retry, with full jitter.
    pub backoff: String,
    /// Longest backoff between two tries.
    pub max_backoff: String,
    /// Retries allowed, as a percentage of the calls of the last 10 seconds (0–100), so a failing
    /// upstream is not hammered by retries.
    pub budget_percent: u32,
    /// Retries per second always allowed on top of `budget_percent` (so a quiet upstream still
    /// gets its retries).
    pub budget_min_per_sec: u32,
}

impl Default for FileRetries {
    fn default() -> Self {
        FileRetries {
            attempts: 2,
            backoff: "100ms".to_owned(),
            max_backoff: "1s".to_owned(),
            budget_percent: 20,
            budget_min_per_sec: 1,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileCircuitBreaker {
    /// Consecutive failed tries (timeouts, connect errors, malformed replies, 5xx) that open the
    /// breaker; while open, calls fail at once.
    pub failures: u32,
    /// How long the breaker stays open before one trial call is let through.
    pub cool_down: String,
}

impl Default for FileCircuitBreaker {
    fn default() -> Self {
        FileCircuitBreaker {
            failures: 5,
            cool_down: "30s".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileTls {
    /// PEM file of extra CA certificates trusted besides the system's (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate. Development only: it disables server authentication.
    pub insecure_skip_verify: bool,
}

/// Authentication to the upstream. Each secret may be given inline (usually a `${VAR}`
/// reference) or as a `*_file` path whose content (trailing newline trimmed) is the secret.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileAuth {
    /// A fixed key in a header.
    ApiKey {
        /// Header carrying the key, e.g. `X-Api-Key`.
        header: String,
        /// The key.
        #[serde(default)]
        value: Option<Secret>,
        /// File holding the key (instead of `value`).
        #[serde(default)]
        value_file: Option<PathBuf>,
    },
    /// HTTP Basic authentication.
    Basic {
        /// User name (no `:`).
        username: String,
        /// Password.
        #[serde(default)]
        password: Option<Secret>,
        /// File holding the password (instead of `password`).
        #[serde(default)]
        password_file: Option<PathBuf>,
    },
    /// A fixed bearer token.
    Bearer {
        /// The token.
        #[serde(default)]
        token: Option<Secret>,
        /// File holding the token (instead of `token`).
        #[serde(default)]
        token_file: Option<PathBuf>,
    },
    /// OAuth 2.0 client credentials grant (RFC 6749 §4.4); the token is cached and refreshed
    /// shortly before it expires.
    Oauth2 {
        /// Token endpoint, `http` or `https`.
        token_url: String,
        /// Client id.
        client_id: String,
        /// Client secret.
        #[serde(default)]
        client_secret: Option<Secret>,
        /// File holding the client secret (instead of `client_secret`).
        #[serde(default)]
        client_secret_file: Option<PathBuf>,
        /// Space-separated scopes to request; absent = the server's default.
        #[serde(default)]
        scope: Option<String>,
        /// `audience` parameter some servers (Auth0 and the like) require.
        #[serde(default)]
        audience: Option<String>,
        /// How the client authenticates to the token endpoint: `basic` (HTTP Basic, RFC 6749
        /// §2.3.1) or `body` (`client_id` and `client_secret` form fields).
        #[serde(default)]
        client_auth: FileClientAuth,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileClientAuth {
    #[default]
    Basic,
    Body,
}

/// A problem in one upstream's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfigProblem {
    /// JSON Pointer relative to the upstream's entry, e.g. `/timeouts/request`.
    pub pointer: String,
    pub message: String,
}

impl fmt::Display for UpstreamConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

/// Validated settings of one upstream: if a value exists here it is usable.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub base_url: Url,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Tries per idempotent call, the first included (1..=5).
    pub attempts: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// 0..=100.
    pub budget_percent: u32,
    pub budget_min_per_sec: u32,
    pub breaker_failures: u32,
    pub breaker_cool_down: Duration,
    pub max_concurrency: usize,
    pub max_response_bytes: usize,
    /// Parsed PEM certificates of `tls.ca_file`.
    pub ca_certificates: Vec<reqwest::Certificate>,
    pub insecure_skip_verify: bool,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<AuthSettings>,
}

/// Validated authentication.
#[derive(Debug, Clone)]
pub enum AuthSettings {
    /// A fixed header (API key, Basic, static bearer), marked sensitive.
    Static {
        name: HeaderName,
        value: HeaderValue,
    },
    OAuth2(OAuth2Settings),
}

#[derive(Debug, Clone)]
pub struct OAuth2Settings {
    pub token_url: Url,
    pub client_id: String,
    pub client_secret: Secret,
    pub scope: Option<String>,
    pub audience: Option<String>,
    pub client_auth: FileClientAuth,
}

/// Collects problems while validating one entry.
#[derive(Default)]
struct Check {
    problems: Vec<UpstreamConfigProblem>,
}

impl Check {
    fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        self.problems.push(UpstreamConfigProblem {
            pointer: pointer.to_owned(),
            message: message.into(),
        });
    }

    fn duration(&mut self, pointer: &str, text: &str) -> Option<Duration> {
        match humantime::parse_duration(text.trim()) {
            Ok(d) if d.is_zero() => {
                self.problem(pointer, "must be greater than zero");
                None
            }
            Ok(d) if d > MAX_DURATION => {
                self.problem(pointer, "must be at most 10m");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.problem(
                    pointer,
                    format!("`{text}` is not a duration like 5s or 500ms: {e}"),
                );
                None
            }
        }
    }

    fn http_url(&mut self, pointer: &str, text: &str, what: &str) -> Option<Url> {
        let url = match Url::parse(text.trim()) {
            Ok(url) => url,
            Err(e) => {
                self.problem(pointer, format!("not a valid URL: {e}"));
                return None;
            }
        };
        let mut ok = true;
        if !matches!(url.scheme(), "http" | "https") {
            self.problem(pointer, format!("{what} must be http or https"));
            ok = false;
        }
        if url.host_str().is_none_or(str::is_empty) {
            self.problem(pointer, format!("{what} needs a host"));
            ok = false;
        }
        if url.query().is_some() || url.fragment().is_some() {
            self.problem(
                pointer,
                format!("{what} must not have a query string or fragment"),
            );
            ok = false;
        }
        if !url.username().is_empty() || url.password().is_some() {
            self.problem(
                pointer,
                format!("{what} must not carry credentials; use `auth` instead"),
            );
            ok = false;
        }
        ok.then_some(url)
    }

    fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        pointer: &str,
        value: T,
        min: T,
        max: T,
    ) -> Option<T> {
        if value < min || value > max {
            self.problem(pointer, format!("must be between {min} and {max}"));
            None
        } else {
            Some(value)
        }
    }

    /// A secret given inline or as a file, exactly one of the two.
    fn secret(
        &mut self,
        field: &str,
        inline: Option<Secret>,
        file: Option<PathBuf>,
    ) -> Option<Secret> {
        let pointer = format!("/auth/{field}");
        let file_pointer = format!("/auth/{field}_file");
        match (inline, file) {
            (Some(_), Some(_)) => {
                self.problem(
                    &file_pointer,
                    format!("give either `{field}` or `{field}_file`, not both"),
                );
                None
            }
            (None, None) => {
                self.problem(
                    &pointer,
                    format!("missing: give `{field}` or `{field}_file`"),
                );
                None
            }
            (Some(secret), None) if secret.expose().is_empty() => {
                self.problem(&pointer, "must not be empty");
                None
            }
            (Some(secret), None) => Some(secret),
            (None, Some(path)) => match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let text = text.trim_end_matches(['\r', '\n']);
                    if text.is_empty() {
                        self.problem(&file_pointer, format!("{} is empty", path.display()));
                        None
                    } else {
                        Some(Secret::new(text))
                    }
                }
                Err(e) => {
                    self.problem(
                        &file_pointer,
                        format!("cannot read {}: {e}", path.display()),
                    );
                    None
                }
            },
        }
    }

    fn header_name(&mut self, pointer: &str, name: &str) -> Option<HeaderName> {
        match HeaderName::from_bytes(name.trim().as_bytes()) {
            Ok(name) if RESERVED_HEADERS.contains(&name.as_str()) => {
                self.problem(pointer, format!("`{name}` is set by the client itself"));
                None
            }
            Ok(name) => Some(name),
            Err(_) => {
                self.problem(pointer, format!("`{name}` is not a valid header name"));
                None
            }
        }
    }

    fn header_value(&mut self, pointer: &str, value: &str, sensitive: bool) -> Option<HeaderValue> {
        match HeaderValue::from_str(value) {
            Ok(mut value) => {
                value.set_sensitive(sensitive);
                Some(value)
            }
            Err(_) => {
                // Never echo the value: it may be a secret.
                self.problem(
                    pointer,
                    "not a valid header value (visible ASCII and spaces only, no CR/LF)",
                );
                None
            }
        }
    }

    fn auth(&mut self, auth: FileAuth) -> Option<AuthSettings> {
        match auth {
            FileAuth::ApiKey {
                header,
                value,
                value_file,
            } => {
                let name = self.header_name("/auth/header", &header);
                let secret = self.secret("value", value, value_file)?;
                let value = self.header_value("/auth/value", secret.expose(), true);
                Some(AuthSettings::Static {
                    name: name?,
                    value: value?,
                })
            }
            FileAuth::Basic {
                username,
                password,
                password_file,
            } => {
                let mut ok = true;
                if username.is_empty() || username.contains(':') {
                    self.problem("/auth/username", "must be non-empty and without `:`");
                    ok = false;
                }
                let password = self.secret("password", password, password_file)?;
                let encoded = base64_encode(format!("{username}:{}", password.expose()).as_bytes());
                let value = self.header_value("/auth/password", &format!("Basic {encoded}"), true);
                ok.then_some(())?;
                Some(AuthSettings::Static {
                    name: http::header::AUTHORIZATION,
                    value: value?,
                })
            }
            FileAuth::Bearer { token, token_file } => {
                let token = self.secret("token", token, token_file)?;
                let value =
                    self.header_value("/auth/token", &format!("Bearer {}", token.expose()), true)?;
                Some(AuthSettings::Static {
                    name: http::header::AUTHORIZATION,
                    value,
                })
            }
            FileAuth::Oauth2 {
                token_url,
                client_id,
                client_secret,
                client_secret_file,
                scope,
                audience,
                client_auth,
            } => {
                let token_url = self.http_url("/auth/token_url", &token_url, "token_url");
                let mut ok = true;
                if client_id.is_empty() {
                    self.problem("/auth/client_id", "must not be empty");
                    ok = false;
                }
                let client_secret = self.secret("client_secret", client_secret, client_secret_file);
                ok.then_some(())?;
                Some(AuthSettings::OAuth2(OAuth2Settings {
                    token_url: token_url?,
                    client_id,
                    client_secret: client_secret?,
                    scope: scope.filter(|s| !s.trim().is_empty()),
                    audience: audience.filter(|s| !s.trim().is_empty()),
                    client_auth,
                }))
            }
        }
    }
}

impl FileUpstream {
    /// Validates every field, reporting all problems at once.
    pub fn validate(self) -> Result<UpstreamSettings, Vec<UpstreamConfigProblem>> {
        let mut c = Check::default();
        if self.kind == FileUpstreamKind::Soap {
            c.problem(
                "/kind",
                "SOAP upstreams are not supported yet; only `rest` is available",
            );
        }
        let base_url = c.http_url("/base_url", &self.base_url, "base_url");
        let connect_timeout = c.duration("/timeouts/connect", &self.timeouts.connect);
        let request_timeout = c.duration("/timeouts/request", &self.timeouts.request);
        let attempts = c.range("/retries/attempts", self.retries.attempts, 1, MAX_ATTEMPTS);
        let backoff = c.duration("/retries/backoff", &self.retries.backoff);
        let max_backoff = c.duration("/retries/max_backoff", &self.retries.max_backoff);
        if let (Some(b), Some(m)) = (backoff, max_backoff)
            && m < b
        {
            c.problem("/retries/max_backoff", "must be at least `retries.backoff`");
        }
        let budget_percent = c.range(
            "/retries/budget_percent",
            self.retries.budget_percent,
            0,
            100,
        );
        let budget_min_per_sec = c.range(
            "/retries/budget_min_per_sec",
            self.retries.budget_min_per_sec,
            0,
            1000,
        );
        let breaker_failures = c.range(
            "/circuit_breaker/failures",
            self.circuit_breaker.failures,
            1,
            10_000,
        );
        let breaker_cool_down = c.duration(
            "/circuit_breaker/cool_down",
            &self.circuit_breaker.cool_down,
        );
        let max_concurrency = c.range(
            "/max_concurrency",
            self.max_concurrency,
            1,
            MAX_CONCURRENCY_LIMIT as u64,
        );
        let max_response_bytes = c.range(
            "/max_response_bytes",
            self.max_response_bytes,
            1024,
            MAX_RESPONSE_BYTES_LIMIT as u64,
        );

        let mut ca_certificates = Vec::new();
        if let Some(path) = &self.tls.ca_file {
            match std::fs::read(path) {
                Ok(pem) => match reqwest::Certificate::from_pem_bundle(&pem) {
                    Ok(certs) if certs.is_empty() => c.problem(
                        "/tls/ca_file",
                        format!("{} holds no PEM certificate", path.display()),
                    ),
                    Ok(certs) => ca_certificates = certs,
                    Err(e) => c.problem(
                        "/tls/ca_file",
                        format!("{} is not a PEM certificate bundle: {e}", path.display()),
                    ),
                },
                Err(e) => c.problem(
                    "/tls/ca_file",
                    format!("cannot read {}: {e}", path.display()),
                ),
            }
        }

        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            let pointer = push_pointer("/headers", name);
            let name = c.header_name(&pointer, name);
            let value = c.header_value(&pointer, value, false);
            if let (Some(name), Some(value)) = (name, value) {
                headers.push((name, value));
            }
        }

        let auth = match self.auth {
            Some(auth) => {
                let before = c.problems.len();
                let auth = c.auth(auth);
                if auth.is_none() && c.problems.len() == before {
                    c.problem("/auth", "invalid authentication settings");
                }
                auth
            }
            None => None,
        };

        if !c.problems.is_empty() {
            return Err(c.problems);
        }
        let missing = || {
            vec![UpstreamConfigProblem {
                pointer: String::new(),
                message: "invalid upstream settings".to_owned(),
            }]
        };
        Ok(UpstreamSettings {
            base_url: base_url.ok_or_else(missing)?,
            connect_timeout: connect_timeout.ok_or_else(missing)?,
            request_timeout: request_timeout.ok_or_else(missing)?,
            attempts: attempts.ok_or_else(missing)?,
            backoff: backoff.ok_or_else(missing)?,
            max_backoff: max_backoff.ok_or_else(missing)?,
            budget_percent: budget_percent.ok_or_else(missing)?,
            budget_min_per_sec: budget_min_per_sec.ok_or_else(missing)?,
            breaker_failures: breaker_failures.ok_or_else(missing)?,
            breaker_cool_down: breaker_cool_down.ok_or_else(missing)?,
            max_concurrency: usize::try_from(max_concurrency.ok_or_else(missing)?)
                .map_err(|_| missing())?,
            max_response_bytes: usize::try_from(max_response_bytes.ok_or_else(missing)?)
                .map_err(|_| missing())?,
            ca_certificates,
            insecure_skip_verify: self.tls.insecure_skip_verify,
            headers,
            auth,
        })
    }
}

/// Standard base64 with padding (RFC 4648 §4), for HTTP Basic credentials.
pub(crate) fn base64_encode(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test entries are written as JSON (which is YAML too); the caller's YAML loader hands
    /// these types the same serde data model.
    fn parse(json: &str) -> FileUpstream {
        serde_json::from_str(json).expect("valid FileUpstream")
    }

    fn pointers(result: Result<UpstreamSettings, Vec<UpstreamConfigProblem>>) -> Vec<String> {
        match result {
            Ok(_) => panic!("expected problems"),
            Err(problems) => problems.into_iter().map(|p| p.pointer).collect(),
        }
    }

    #[test]
    fn defaults_are_valid() {
        let settings = parse(r#"{"base_url": "https://dms.example.com/api/"}"#)
            .validate()
            .expect("valid");
        assert_eq!(settings.connect_timeout, Duration::from_secs(2));
        assert_eq!(settings.request_timeout, Duration::from_secs(5));
        assert_eq!(settings.attempts, 2);
        assert_eq!(settings.backoff, Duration::from_millis(100));
        assert_eq!(settings.max_backoff, Duration::from_secs(1));
        assert_eq!(settings.budget_percent, 20);
        assert_eq!(settings.breaker_failures, 5);
        assert_eq!(settings.breaker_cool_down, Duration::from_secs(30));
        assert_eq!(settings.max_concurrency, 16);
        assert_eq!(settings.max_response_bytes, 4 * 1024 * 1024);
        assert!(settings.auth.is_none());
    }

    #[test]
    fn every_problem_is_reported_with_its_pointer() {
        let file = parse(
            r#"{
              "kind": "soap",
              "base_url": "ftp://user:pw@x/?q=1",
              "timeouts": {"connect": "0s", "request": "soon"},
              "retries": {"attempts": 9, "backoff": "2s", "max_backoff": "1s", "budget_percent": 101},
              "circuit_breaker": {"failures": 0, "cool_down": "1h"},
              "max_concurrency": 0,
              "max_response_bytes": 10,
              "tls": {"ca_file": "/nonexistent/ca.pem"},
              "headers": {"Bad Header": "x", "X-Ok": "line\nbreak", "Host": "h"},
              "auth": {"kind": "api_key", "header": "X-Api-Key"}
            }"#,
        );
        let got = pointers(file.validate());
        for expected in [
            "/kind",
            "/base_url",
            "/timeouts/connect",
            "/timeouts/request",
            "/retries/attempts",
            "/retries/max_backoff",
            "/retries/budget_percent",
            "/circuit_breaker/failures",
            "/circuit_breaker/cool_down",
            "/max_concurrency",
            "/max_response_bytes",
            "/tls/ca_file",
            "/headers/Bad Header",
            "/headers/X-Ok",
            "/headers/Host",
            "/auth/value",
        ] {
            assert!(got.contains(&expected.to_owned()), "{expected} in {got:?}");
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let bad = r#"{"base_url": "http://x", "timeouts": {"read": "1s"}}"#;
        assert!(serde_json::from_str::<FileUpstream>(bad).is_err());
        let bad_auth =
            r#"{"base_url": "http://x", "auth": {"kind": "bearer", "token": "t", "extra": 1}}"#;
        assert!(serde_json::from_str::<FileUpstream>(bad_auth).is_err());
    }

    #[test]
    fn secrets_come_from_files_and_never_show_in_debug() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cr3t\n").expect("write");
        let file = parse(&format!(
            r#"{{"base_url": "http://x", "auth": {{"kind": "bearer", "token_file": {path:?}}}}}"#,
            path = path.display().to_string()
        ));
        let settings = file.validate().expect("valid");
        match &settings.auth {
            Some(AuthSettings::Static { value, .. }) => {
                assert_eq!(value.as_bytes(), b"Bearer s3cr3t");
                assert!(value.is_sensitive());
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(!format!("{settings:?}").contains("s3cr3t"));

        let inline = parse(
            r#"{"base_url": "http://x", "auth": {"kind": "basic", "username": "u", "password": "hunter2"}}"#,
        );
        assert!(!format!("{inline:?}").contains("hunter2"));
    }

    #[test]
    fn both_or_neither_secret_is_a_problem() {
        let file = parse(
            r#"{"base_url": "http://x", "auth": {"kind": "bearer", "token": "a", "token_file": "/x"}}"#,
        );
        assert_eq!(pointers(file.validate()), ["/auth/token_file"]);
        let file = parse(
            r#"{"base_url": "http://x", "auth": {"kind": "oauth2", "token_url": "mailto:x", "client_id": ""}}"#,
        );
        let got = pointers(file.validate());
        assert!(got.contains(&"/auth/token_url".to_owned()), "{got:?}");
        assert!(got.contains(&"/auth/client_id".to_owned()), "{got:?}");
        assert!(got.contains(&"/auth/client_secret".to_owned()), "{got:?}");
    }

    #[test]
    fn ca_files_must_hold_pem_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").expect("write");
        let file = parse(&format!(
            r#"{{"base_url": "https://x", "tls": {{"ca_file": {path:?}}}}}"#,
            path = path.display().to_string()
        ));
        assert_eq!(pointers(file.validate()), ["/tls/ca_file"]);

        // The system bundle, where there is one, is a valid CA file.
        let system = "/etc/ssl/certs/ca-certificates.crt";
        if std::path::Path::new(system).exists() {
            let file = parse(&format!(
                r#"{{"base_url": "https://x", "tls": {{"ca_file": "{system}"}}}}"#
            ));
            assert!(!file.validate().expect("valid").ca_certificates.is_empty());
        }
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(input.as_bytes()), expected);
        }
    }
}
