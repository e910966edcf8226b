//! `FileUpstream`: one entry of a dealer's `upstreams.yaml` exactly as an operator writes it, and
//! its validation into [`UpstreamSettings`] (HTTP: `rest` and `soap`) or [`SmtpSettings`]
//! (`smtp`).
//!
//! The file types mirror the YAML one to one, reject unknown keys and hold every default in one
//! place (the `Default` impls below). `${VAR}` references are expanded by the caller before these
//! types see the values. Validation never stops at the first problem: every problem is reported
//! with a JSON Pointer relative to the upstream's entry (e.g. `/timeouts/request`), so the caller
//! can locate it in the file.
//!
//! Keys that mean nothing for a kind are refused rather than ignored (an operator who writes
//! `retries` on an `smtp` upstream expects retries, and gets a located problem instead of a
//! silent surprise): `soap` only with `kind: soap`, `smtp` only with `kind: smtp`, `ws_security`
//! only with `kind: soap`, and `retries`, `headers` and `max_response_bytes` never with
//! `kind: smtp`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use http::{HeaderName, HeaderValue};
use lettre::message::Mailbox;
use reqwest::Url;
use serde::Deserialize;

use crate::settings::yaml::push_pointer;

/// The SOAP version of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoapVersion {
    V1_1,
    V1_2,
}

/// WS-Security UsernameToken credentials.
#[derive(Debug, Clone)]
pub struct WsSecurity {
    pub username: String,
    pub password: Secret,
    /// Send `PasswordDigest` (else `PasswordText`).
    pub digest: bool,
}

/// What makes an upstream a SOAP upstream.
#[derive(Debug, Clone)]
pub struct SoapSettings {
    pub version: SoapVersion,
    /// The UsernameToken put in every envelope's header.
    pub security: Option<WsSecurity>,
}

/// The largest `retries.attempts`: more tries only pile load onto a system that is already down.
pub const MAX_ATTEMPTS: u32 = 5;
/// The largest `max_response_bytes` (256 MiB): a reply is held in memory whole.
pub const MAX_RESPONSE_BYTES_LIMIT: usize = 256 * 1024 * 1024;
/// The largest `max_concurrency`.
pub const MAX_CONCURRENCY_LIMIT: usize = 10_000;
/// The longest timeout, backoff or cool-down accepted (10 minutes); longer is surely a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// The port of `smtps://` URLs without one (implicit TLS, RFC 8314).
pub const SMTPS_PORT: u16 = 465;
/// The port of `smtp://` URLs without one (message submission, RFC 6409).
pub const SUBMISSION_PORT: u16 = 587;

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
#[derive(Clone, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileUpstream {
    /// `rest` (JSON or any body over HTTP), `soap` (SOAP 1.1/1.2 envelopes over HTTP) or `smtp`
    /// (e-mail, e.g. ADF/XML leads to a CRM's intake address).
    #[serde(default)]
    pub kind: FileUpstreamKind,
    /// HTTP kinds: base URL, `http` or `https`, no query, fragment or credentials; its path is a
    /// prefix of every call's path: `https://x/api` + `/v2/vehicles` → `https://x/api/v2/vehicles`
    /// (an empty call path is the base URL itself, the usual case for a SOAP endpoint).
    /// `smtp`: `smtp://host[:port]` (STARTTLS per `smtp.starttls`, port 587 by default) or
    /// `smtps://host[:port]` (TLS from the first byte, port 465 by default).
    pub base_url: String,
    /// How long to wait for the upstream.
    #[serde(default)]
    pub timeouts: FileTimeouts,
    /// Retries of idempotent calls (HTTP kinds only; absent = the defaults).
    #[serde(default)]
    pub retries: Option<FileRetries>,
    /// Stops calling an upstream that keeps failing.
    #[serde(default)]
    pub circuit_breaker: FileCircuitBreaker,
    /// Calls (or mails) in flight to this upstream at most; more wait for a slot (the wait
    /// counts against `timeouts.request`).
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u64,
    /// Largest reply body accepted (after decompression); larger replies fail. HTTP kinds only;
    /// absent = 4 MiB.
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// TLS settings for `https` base URLs (and an `https` OAuth2 token URL), or for `smtps` and
    /// STARTTLS.
    #[serde(default)]
    pub tls: FileTls,
    /// Static headers sent with every call, e.g. `User-Agent` (HTTP kinds only).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How the gateway authenticates to the upstream; absent = no authentication.
    #[serde(default)]
    pub auth: Option<FileAuth>,
    /// SOAP settings (`kind: soap` only; absent = SOAP 1.1).
    #[serde(default)]
    pub soap: Option<FileSoap>,
    /// Mail settings (`kind: smtp` only, and required there).
    #[serde(default)]
    pub smtp: Option<FileSmtp>,
    /// Allow what sends credentials or lead data readable on the network to a host that is not
    /// loopback: `http://` with authentication, e-mail without required STARTTLS, unverified
    /// TLS certificates. Refused unless set; `check` notes each one that is allowed.
    #[serde(default)]
    pub allow_plaintext: bool,
}

impl FileUpstream {
    /// What this entry would expose on the network (a JSON Pointer into the entry and why),
    /// after `${NAME}` expansion. Nothing for a loopback host (a sidecar's legacy app, the
    /// demo): that traffic never leaves the machine.
    pub fn plaintext_risks(&self) -> Vec<(&'static str, String)> {
        let Ok(url) = Url::parse(self.base_url.trim()) else {
            return Vec::new(); // reported by validation
        };
        let host = url.host_str().unwrap_or_default();
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback {
            return Vec::new();
        }
        let mut risks = Vec::new();
        if let (Some(auth), "http") = (&self.auth, url.scheme()) {
            let what = match auth {
                FileAuth::WsSecurity {
                    password_type: FilePasswordType::Text,
                    ..
                } => "a WS-Security password in clear text",
                FileAuth::WsSecurity { .. } => "a WS-Security user name and password digest",
                FileAuth::Oauth2 { .. } => "OAuth2 bearer tokens",
                _ => "its credentials",
            };
            risks.push(("/base_url", format!("sends {what} over plain http://")));
        }
        if self.kind == FileUpstreamKind::Smtp
            && url.scheme() == "smtp"
            && let Some(starttls @ (FileStartTls::Off | FileStartTls::Opportunistic)) =
                self.smtp.as_ref().and_then(|m| m.starttls)
        {
            let how = if starttls == FileStartTls::Off {
                "off"
            } else {
                "opportunistic"
            };
            risks.push((
                "/smtp/starttls",
                format!("with `starttls: {how}` lead e-mails (and SMTP AUTH) may travel in clear"),
            ));
        }
        if self.tls.insecure_skip_verify {
            risks.push((
                "/tls/insecure_skip_verify",
                "certificates are not verified: anyone on the path can read and change the traffic"
                    .to_owned(),
            ));
        }
        risks
    }
}

fn default_max_concurrency() -> u64 {
    16
}

fn default_max_response_bytes() -> u64 {
    4 * 1024 * 1024
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileUpstreamKind {
    #[default]
    Rest,
    Soap,
    Smtp,
}

/// `soap:` of a `kind: soap` upstream.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileSoap {
    /// `"1.1"` (default) or `"1.2"`; an unquoted YAML `1.1` / `1.2` is accepted too.
    pub version: Option<FileSoapVersion>,
}

/// A SOAP version as written: quoted, or read by YAML as a number.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FileSoapVersion {
    Text(String),
    Number(serde_json::Number),
}

/// `smtp:` of a `kind: smtp` upstream.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSmtp {
    /// Sender mailbox, `Name <address>` or a bare address (required).
    #[serde(default)]
    pub from: Option<String>,
    /// Recipient mailboxes, at least one.
    #[serde(default)]
    pub to: Vec<String>,
    /// STARTTLS on `smtp://`: `required` (default; no credentials or mail before TLS),
    /// `opportunistic` (TLS when offered: open to downgrade, development only) or `off` (plain
    /// text). Not allowed with `smtps://`, which speaks TLS from the start.
    #[serde(default)]
    pub starttls: Option<FileStartTls>,
    /// Name sent with `EHLO`; absent = `localhost`.
    #[serde(default)]
    pub hello_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileStartTls {
    Required,
    Opportunistic,
    Off,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileTimeouts {
    /// Deadline for opening a connection (TCP and TLS), e.g. `2s`.
    pub connect: String,
    /// Deadline for one attempt once it holds a concurrency slot: sending, and reading the
    /// whole reply (headers and body), e.g. `5s`.
    pub request: String,
    /// Longest wait for one of `max_concurrency` slots (HTTP kinds), e.g. `2s`; absent = the
    /// `request` timeout. A call that waits longer is refused as local overload (retryable,
    /// never a circuit-breaker failure: the upstream was not asked).
    pub queue: Option<String>,
    /// `kind: smtp` only: deadline for sending the message and reading the reply to its final
    /// dot, e.g. `10m` (the default, RFC 5321 §4.5.3.2.6: servers may scan or queue first). A
    /// send cut here may still arrive, so it must outlast the server's slowest answer.
    pub data: Option<String>,
}

impl Default for FileTimeouts {
    fn default() -> Self {
        FileTimeouts {
            connect: "2s".to_owned(),
            request: "5s".to_owned(),
            queue: None,
            data: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FileTls {
    /// PEM file of extra CA certificates trusted besides the system's (a private CA).
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate. Development only: it disables server authentication.
    pub insecure_skip_verify: bool,
}

/// Authentication to the upstream. Each secret may be given inline (usually a `${VAR}`
/// reference) or as a `*_file` path whose content (trailing newline trimmed) is the secret.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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
    /// WS-Security UsernameToken (OASIS WSS 1.0) in the SOAP envelope's header; `kind: soap`
    /// only.
    WsSecurity {
        /// User name.
        username: String,
        /// Password.
        #[serde(default)]
        password: Option<Secret>,
        /// File holding the password (instead of `password`).
        #[serde(default)]
        password_file: Option<PathBuf>,
        /// `digest` (default: the password travels as Base64(SHA-1(nonce + created +
        /// password))) or `text` (the password itself; only over TLS).
        #[serde(default)]
        password_type: FilePasswordType,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FilePasswordType {
    Text,
    #[default]
    Digest,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
    /// Longest wait for a concurrency slot (`timeouts.queue`, else `timeouts.request`).
    pub queue_timeout: Duration,
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
    /// `Some` for `kind: soap`.
    pub soap: Option<SoapSettings>,
}

/// Validated settings of any kind of upstream.
#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one short-lived value per upstream at load; boxing would buy nothing"
)]
pub enum EndpointSettings {
    /// `rest` and `soap`.
    Http(UpstreamSettings),
    Smtp(SmtpSettings),
}

/// Validated settings of an `smtp` upstream.
#[derive(Debug, Clone)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub from: Mailbox,
    /// At least one.
    pub to: Vec<Mailbox>,
    pub hello_name: Option<String>,
    pub credentials: Option<SmtpCredentials>,
    pub connect_timeout: Duration,
    /// Bounds everything before the message: slot wait, connection, `AUTH`, `MAIL`, `RCPT`,
    /// `DATA`.
    pub request_timeout: Duration,
    /// Bounds the message and the reply to its final dot (`timeouts.data`).
    pub data_timeout: Duration,
    pub breaker_failures: u32,
    pub breaker_cool_down: Duration,
    pub max_concurrency: usize,
    /// Certificates of `tls.ca_file`.
    pub ca_certificates: Vec<lettre::transport::smtp::client::Certificate>,
    pub insecure_skip_verify: bool,
}

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// `smtps://`: TLS from the first byte.
    Implicit,
    /// `STARTTLS` or fail before sending credentials or mail.
    StartTlsRequired,
    /// `STARTTLS` when the server offers it.
    StartTlsOpportunistic,
    /// Plain text.
    Off,
}

/// SMTP `AUTH` credentials (PLAIN or LOGIN, whichever the server offers).
#[derive(Debug, Clone)]
pub struct SmtpCredentials {
    pub username: String,
    pub password: Secret,
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
            FileAuth::WsSecurity { .. } => {
                self.problem(
                    "/auth/kind",
                    "`ws_security` travels in a SOAP envelope: only for `kind: soap`",
                );
                None
            }
        }
    }

    /// `auth`, with a catch-all problem when it failed without saying why.
    fn http_auth(&mut self, auth: FileAuth) -> Option<AuthSettings> {
        let before = self.problems.len();
        let auth = self.auth(auth);
        if auth.is_none() && self.problems.len() == before {
            self.problem("/auth", "invalid authentication settings");
        }
        auth
    }

    fn ws_security(
        &mut self,
        username: String,
        password: Option<Secret>,
        password_file: Option<PathBuf>,
        password_type: FilePasswordType,
    ) -> Option<WsSecurity> {
        let mut ok = true;
        if username.is_empty() || username.chars().any(char::is_control) {
            self.problem(
                "/auth/username",
                "must be non-empty and without control characters",
            );
            ok = false;
        }
        let password = self.secret("password", password, password_file)?;
        if password.expose().chars().any(char::is_control) {
            // XML cannot carry most control characters; never echo the value.
            self.problem("/auth/password", "must not contain control characters");
            ok = false;
        }
        ok.then_some(WsSecurity {
            username,
            password,
            digest: password_type == FilePasswordType::Digest,
        })
    }

    fn soap_version(&mut self, soap: Option<&FileSoap>) -> Option<SoapVersion> {
        let text = match soap.and_then(|s| s.version.as_ref()) {
            None => return Some(SoapVersion::V1_1),
            Some(FileSoapVersion::Text(text)) => text.trim().to_owned(),
            Some(FileSoapVersion::Number(number)) => number.to_string(),
        };
        match text.as_str() {
            "1.1" => Some(SoapVersion::V1_1),
            "1.2" => Some(SoapVersion::V1_2),
            _ => {
                self.problem(
                    "/soap/version",
                    format!("`{text}` is not a SOAP version; expected \"1.1\" or \"1.2\""),
                );
                None
            }
        }
    }

    /// `tls.ca_file`: the PEM text, when it holds at least one certificate.
    fn ca_file(&mut self, tls: &FileTls) -> Option<(Vec<u8>, Vec<reqwest::Certificate>)> {
        let path = tls.ca_file.as_ref()?;
        match std::fs::read(path) {
            Ok(pem) => match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) if certs.is_empty() => {
                    self.problem(
                        "/tls/ca_file",
                        format!("{} holds no PEM certificate", path.display()),
                    );
                    None
                }
                Ok(certs) => Some((pem, certs)),
                Err(e) => {
                    self.problem(
                        "/tls/ca_file",
                        format!("{} is not a PEM certificate bundle: {e}", path.display()),
                    );
                    None
                }
            },
            Err(e) => {
                self.problem(
                    "/tls/ca_file",
                    format!("cannot read {}: {e}", path.display()),
                );
                None
            }
        }
    }

    /// An `smtp://` or `smtps://` URL.
    fn smtp_url(&mut self, pointer: &str, text: &str) -> Option<SmtpEndpoint> {
        let url = match Url::parse(text.trim()) {
            Ok(url) => url,
            Err(e) => {
                self.problem(pointer, format!("not a valid URL: {e}"));
                return None;
            }
        };
        let implicit_tls = match url.scheme() {
            "smtps" => true,
            "smtp" => false,
            _ => {
                self.problem(
                    pointer,
                    "base_url of `kind: smtp` must be smtp:// or smtps://",
                );
                return None;
            }
        };
        let mut ok = true;
        // An IPv6 literal comes bracketed; the connection wants the bare address.
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            self.problem(pointer, "base_url needs a host");
            ok = false;
        }
        let port = url.port().unwrap_or(if implicit_tls {
            SMTPS_PORT
        } else {
            SUBMISSION_PORT
        });
        if port == 0 {
            self.problem(pointer, "port 0 is not a port");
            ok = false;
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            self.problem(
                pointer,
                "base_url of `kind: smtp` is only scheme, host and port (EHLO name: \
                 `smtp.hello_name`)",
            );
            ok = false;
        }
        if !url.username().is_empty() || url.password().is_some() {
            self.problem(
                pointer,
                "base_url must not carry credentials; use `auth` instead",
            );
            ok = false;
        }
        ok.then_some(SmtpEndpoint {
            host,
            port,
            implicit_tls,
        })
    }

    fn mailbox(&mut self, pointer: &str, text: &str) -> Option<Mailbox> {
        match text.trim().parse::<Mailbox>() {
            Ok(mailbox) => Some(mailbox),
            Err(e) => {
                self.problem(
                    pointer,
                    format!("`{text}` is not a mailbox like `Name <user@example.com>`: {e}"),
                );
                None
            }
        }
    }
}

/// Where a mail server listens, from `base_url`.
struct SmtpEndpoint {
    host: String,
    port: u16,
    /// `smtps://`: TLS from the first byte.
    implicit_tls: bool,
}

/// What every kind shares, each `None` when invalid.
struct Common {
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    breaker_failures: Option<u32>,
    breaker_cool_down: Option<Duration>,
    max_concurrency: Option<usize>,
    /// `tls.ca_file`, parsed.
    ca: Option<(Vec<u8>, Vec<reqwest::Certificate>)>,
}

impl FileUpstream {
    /// Validates an HTTP entry (`rest` or `soap`), reporting all problems at once. An `smtp`
    /// entry is refused: it is no HTTP upstream (see [`FileUpstream::validate_endpoint`]).
    pub fn validate(self) -> Result<UpstreamSettings, Vec<UpstreamConfigProblem>> {
        if self.kind == FileUpstreamKind::Smtp {
            return Err(vec![UpstreamConfigProblem {
                pointer: "/kind".to_owned(),
                message: "an `smtp` upstream sends mail and cannot serve HTTP calls here"
                    .to_owned(),
            }]);
        }
        match self.validate_endpoint()? {
            EndpointSettings::Http(settings) => Ok(settings),
            EndpointSettings::Smtp(_) => Err(invalid_settings()),
        }
    }

    /// Validates an entry of any kind, reporting all problems at once.
    pub fn validate_endpoint(self) -> Result<EndpointSettings, Vec<UpstreamConfigProblem>> {
        let mut c = Check::default();
        // Problems come in the order of the keys in the documentation's example.
        let settings = match self.kind {
            FileUpstreamKind::Rest | FileUpstreamKind::Soap => {
                let base_url = c.http_url("/base_url", &self.base_url, "base_url");
                let common = self.common(&mut c);
                self.http(&mut c, base_url, common)
                    .map(EndpointSettings::Http)
            }
            FileUpstreamKind::Smtp => {
                let endpoint = c.smtp_url("/base_url", &self.base_url);
                let common = self.common(&mut c);
                self.smtp(&mut c, endpoint, common)
                    .map(EndpointSettings::Smtp)
            }
        };
        match settings {
            _ if !c.problems.is_empty() => Err(c.problems),
            Some(settings) => Ok(settings),
            None => Err(invalid_settings()),
        }
    }

    fn common(&self, c: &mut Check) -> Common {
        Common {
            connect_timeout: c.duration("/timeouts/connect", &self.timeouts.connect),
            request_timeout: c.duration("/timeouts/request", &self.timeouts.request),
            breaker_failures: c.range(
                "/circuit_breaker/failures",
                self.circuit_breaker.failures,
                1,
                10_000,
            ),
            breaker_cool_down: c.duration(
                "/circuit_breaker/cool_down",
                &self.circuit_breaker.cool_down,
            ),
            max_concurrency: c
                .range(
                    "/max_concurrency",
                    self.max_concurrency,
                    1,
                    MAX_CONCURRENCY_LIMIT as u64,
                )
                .and_then(|n| usize::try_from(n).ok()),
            ca: c.ca_file(&self.tls),
        }
    }

    /// `rest` and `soap`.
    fn http(
        self,
        c: &mut Check,
        base_url: Option<Url>,
        common: Common,
    ) -> Option<UpstreamSettings> {
        let soap_kind = self.kind == FileUpstreamKind::Soap;
        if self.smtp.is_some() {
            c.problem("/smtp", "only for `kind: smtp`");
        }
        if !soap_kind && self.soap.is_some() {
            c.problem("/soap", "only for `kind: soap`");
        }
        let retries = self.retries.unwrap_or_default();
        let attempts = c.range("/retries/attempts", retries.attempts, 1, MAX_ATTEMPTS);
        let backoff = c.duration("/retries/backoff", &retries.backoff);
        let max_backoff = c.duration("/retries/max_backoff", &retries.max_backoff);
        if let (Some(b), Some(m)) = (backoff, max_backoff)
            && m < b
        {
            c.problem("/retries/max_backoff", "must be at least `retries.backoff`");
        }
        let budget_percent = c.range("/retries/budget_percent", retries.budget_percent, 0, 100);
        let budget_min_per_sec = c.range(
            "/retries/budget_min_per_sec",
            retries.budget_min_per_sec,
            0,
            1000,
        );
        let max_response_bytes = c
            .range(
                "/max_response_bytes",
                self.max_response_bytes
                    .unwrap_or_else(default_max_response_bytes),
                1024,
                MAX_RESPONSE_BYTES_LIMIT as u64,
            )
            .and_then(|n| usize::try_from(n).ok());

        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            let pointer = push_pointer("/headers", name);
            let name = c.header_name(&pointer, name);
            let value = c.header_value(&pointer, value, false);
            if let (Some(name), Some(value)) = (name, value) {
                headers.push((name, value));
            }
        }

        // `ws_security` is no HTTP authentication: it travels in the envelope.
        let mut ws_security_ok = true;
        let (auth, security) = match self.auth {
            Some(FileAuth::WsSecurity {
                username,
                password,
                password_file,
                password_type,
            }) if soap_kind => {
                let security = c.ws_security(username, password, password_file, password_type);
                ws_security_ok = security.is_some();
                (None, security)
            }
            Some(auth) => (c.http_auth(auth), None),
            None => (None, None),
        };
        let soap = if soap_kind {
            let version = c.soap_version(self.soap.as_ref());
            ws_security_ok.then_some(())?;
            Some(SoapSettings {
                version: version?,
                security,
            })
        } else {
            None
        };

        if self.timeouts.data.is_some() {
            c.problem(
                "/timeouts/data",
                "only `kind: smtp` uses it (the reply to a message's final dot)",
            );
        }
        let queue_timeout = match &self.timeouts.queue {
            Some(text) => c.duration("/timeouts/queue", text),
            None => common.request_timeout,
        };
        Some(UpstreamSettings {
            base_url: base_url?,
            connect_timeout: common.connect_timeout?,
            request_timeout: common.request_timeout?,
            queue_timeout: queue_timeout?,
            attempts: attempts?,
            backoff: backoff?,
            max_backoff: max_backoff?,
            budget_percent: budget_percent?,
            budget_min_per_sec: budget_min_per_sec?,
            breaker_failures: common.breaker_failures?,
            breaker_cool_down: common.breaker_cool_down?,
            max_concurrency: common.max_concurrency?,
            max_response_bytes: max_response_bytes?,
            ca_certificates: common.ca.map(|(_, certs)| certs).unwrap_or_default(),
            insecure_skip_verify: self.tls.insecure_skip_verify,
            headers,
            auth,
            soap,
        })
    }

    fn smtp(
        self,
        c: &mut Check,
        endpoint: Option<SmtpEndpoint>,
        common: Common,
    ) -> Option<SmtpSettings> {
        if self.soap.is_some() {
            c.problem("/soap", "only for `kind: soap`");
        }
        // A lead must not be mailed twice, and a mail server's reply is one line: these HTTP
        // settings would only mislead.
        if self.retries.is_some() {
            c.problem(
                "/retries",
                "not used by `kind: smtp`: a message is never sent twice",
            );
        }
        if !self.headers.is_empty() {
            c.problem("/headers", "not used by `kind: smtp`");
        }
        if self.max_response_bytes.is_some() {
            c.problem("/max_response_bytes", "not used by `kind: smtp`");
        }
        if self.timeouts.queue.is_some() {
            c.problem(
                "/timeouts/queue",
                "not used by `kind: smtp`: the wait for a slot counts against `request`",
            );
        }
        let data_timeout = c.duration(
            "/timeouts/data",
            self.timeouts
                .data
                .as_deref()
                .unwrap_or(DEFAULT_DATA_TIMEOUT),
        );
        let smtp = self.smtp.unwrap_or_else(|| {
            c.problem("/smtp", "missing: `kind: smtp` needs `smtp: { from, to }`");
            FileSmtp::default()
        });

        let from = match &smtp.from {
            Some(from) => c.mailbox("/smtp/from", from),
            None => {
                c.problem("/smtp/from", "missing: the sender's mailbox");
                None
            }
        };
        if smtp.to.is_empty() {
            c.problem("/smtp/to", "needs at least one recipient");
        }
        let mut to = Vec::with_capacity(smtp.to.len());
        let mut to_ok = true;
        for (i, text) in smtp.to.iter().enumerate() {
            match c.mailbox(&format!("/smtp/to/{i}"), text) {
                Some(mailbox) => to.push(mailbox),
                None => to_ok = false,
            }
        }
        let tls = match (endpoint.as_ref().map(|e| e.implicit_tls), smtp.starttls) {
            (Some(true), Some(_)) => {
                c.problem(
                    "/smtp/starttls",
                    "only for smtp://; smtps:// speaks TLS from the start",
                );
                None
            }
            (Some(true), None) => Some(SmtpTls::Implicit),
            (Some(false), None | Some(FileStartTls::Required)) => Some(SmtpTls::StartTlsRequired),
            (Some(false), Some(FileStartTls::Opportunistic)) => {
                Some(SmtpTls::StartTlsOpportunistic)
            }
            (Some(false), Some(FileStartTls::Off)) => Some(SmtpTls::Off),
            (None, _) => None,
        };
        let hello_name = smtp.hello_name.filter(|name| {
            let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic());
            if !ok {
                c.problem(
                    "/smtp/hello_name",
                    "must be a host name or address literal (visible ASCII, no spaces)",
                );
            }
            ok
        });
        let mut auth_ok = true;
        let credentials = match self.auth {
            None => None,
            Some(FileAuth::Basic {
                username,
                password,
                password_file,
            }) => {
                if username.is_empty() {
                    c.problem("/auth/username", "must not be empty");
                    auth_ok = false;
                }
                let password = c.secret("password", password, password_file);
                auth_ok &= password.is_some();
                password.map(|password| SmtpCredentials { username, password })
            }
            Some(_) => {
                c.problem(
                    "/auth/kind",
                    "`kind: smtp` supports only `basic` (SMTP AUTH PLAIN or LOGIN)",
                );
                auth_ok = false;
                None
            }
        };
        let mut ca_certificates = Vec::new();
        if let Some((pem, _)) = &common.ca {
            match lettre::transport::smtp::client::Certificate::from_pem(pem) {
                Ok(cert) => ca_certificates.push(cert),
                Err(e) => c.problem("/tls/ca_file", format!("not usable for SMTP: {e}")),
            }
        }

        let endpoint = endpoint?;
        (to_ok && auth_ok).then_some(())?;
        Some(SmtpSettings {
            host: endpoint.host,
            port: endpoint.port,
            tls: tls?,
            from: from?,
            to,
            hello_name,
            credentials,
            connect_timeout: common.connect_timeout?,
            request_timeout: common.request_timeout?,
            data_timeout: data_timeout?,
            breaker_failures: common.breaker_failures?,
            breaker_cool_down: common.breaker_cool_down?,
            max_concurrency: common.max_concurrency?,
            ca_certificates,
            insecure_skip_verify: self.tls.insecure_skip_verify,
        })
    }
}

/// `timeouts.data` of `kind: smtp` when unset: RFC 5321 §4.5.3.2.6's wait for the reply to
/// the final dot.
pub const DEFAULT_DATA_TIMEOUT: &str = "10m";

fn invalid_settings() -> Vec<UpstreamConfigProblem> {
    vec![UpstreamConfigProblem {
        pointer: String::new(),
        message: "invalid upstream settings".to_owned(),
    }]
}

/// Standard base64 with padding (RFC 4648 §4), for HTTP Basic credentials.
pub(crate) fn base64_encode(input: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(input)
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
              "base_url": "ftp://user:pw@x/?q=1",
              "timeouts": {"connect": "0s", "request": "soon"},
              "retries": {"attempts": 9, "backoff": "2s", "max_backoff": "1s", "budget_percent": 101},
              "circuit_breaker": {"failures": 0, "cool_down": "1h"},
              "max_concurrency": 0,
              "max_response_bytes": 10,
              "tls": {"ca_file": "/nonexistent/ca.pem"},
              "headers": {"Bad Header": "x", "X-Ok": "line\nbreak", "Host": "h"},
              "auth": {"kind": "api_key", "header": "X-Api-Key"},
              "soap": {"version": "1.1"},
              "smtp": {"from": "a@b", "to": ["c@d"]}
            }"#,
        );
        let got = pointers(file.validate());
        for expected in [
            "/soap",
            "/smtp",
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

    fn endpoint_pointers(json: &str) -> Vec<String> {
        match parse(json).validate_endpoint() {
            Ok(_) => panic!("expected problems in {json}"),
            Err(problems) => problems.into_iter().map(|p| p.pointer).collect(),
        }
    }

    #[test]
    fn soap_upstreams_carry_their_version_and_ws_security() {
        let settings = parse(
            r#"{"kind": "soap", "base_url": "http://crm/LeadService.asmx",
                "auth": {"kind": "ws_security", "username": "demo-crm", "password": "pw"}}"#,
        )
        .validate()
        .expect("valid");
        let soap = settings.soap.expect("soap settings");
        assert_eq!(soap.version, SoapVersion::V1_1, "1.1 by default");
        let security = soap.security.expect("ws_security");
        assert_eq!(security.username, "demo-crm");
        assert_eq!(security.password.expose(), "pw");
        assert!(security.digest, "digest by default");
        assert!(settings.auth.is_none(), "no HTTP authentication");
        assert_eq!(
            settings.attempts, 2,
            "retries still default (idempotent calls only)"
        );

        // YAML reads an unquoted 1.2 as a number.
        for version in [r#""1.2""#, "1.2"] {
            let settings = parse(&format!(
                r#"{{"kind": "soap", "base_url": "http://crm/svc", "soap": {{"version": {version}}},
                    "auth": {{"kind": "ws_security", "username": "u", "password": "p",
                              "password_type": "text"}}}}"#
            ))
            .validate()
            .expect("valid");
            let soap = settings.soap.expect("soap settings");
            assert_eq!(soap.version, SoapVersion::V1_2);
            assert!(!soap.security.expect("ws_security").digest);
        }

        // A SOAP upstream may use HTTP authentication instead.
        let settings = parse(
            r#"{"kind": "soap", "base_url": "http://crm/svc",
                "auth": {"kind": "basic", "username": "u", "password": "p"}}"#,
        )
        .validate()
        .expect("valid");
        assert!(settings.auth.is_some());
        assert!(settings.soap.expect("soap").security.is_none());
        let rest = parse(r#"{"base_url": "http://x"}"#)
            .validate()
            .expect("valid");
        assert!(rest.soap.is_none());
    }

    #[test]
    fn soap_settings_problems_are_located() {
        assert_eq!(
            endpoint_pointers(r#"{"base_url": "http://x", "soap": {"version": "1.1"}}"#),
            ["/soap"],
            "soap on a rest upstream"
        );
        assert_eq!(
            endpoint_pointers(
                r#"{"base_url": "http://x",
                    "auth": {"kind": "ws_security", "username": "u", "password": "p"}}"#
            ),
            ["/auth/kind"],
            "ws_security on a rest upstream"
        );
        assert_eq!(
            endpoint_pointers(
                r#"{"kind": "soap", "base_url": "http://x", "soap": {"version": "1.3"}}"#
            ),
            ["/soap/version"]
        );
        assert_eq!(
            endpoint_pointers(
                r#"{"kind": "soap", "base_url": "http://x",
                    "auth": {"kind": "ws_security", "username": "", "password_file": "/nonexistent"}}"#
            ),
            ["/auth/username", "/auth/password_file"]
        );
        assert!(
            serde_json::from_str::<FileUpstream>(
                r#"{"kind": "soap", "base_url": "http://x", "soap": {"version": "1.1", "style": "rpc"}}"#
            )
            .is_err(),
            "unknown soap keys"
        );
    }

    const SMTP: &str = r#""kind": "smtp", "base_url": "smtp://127.0.0.1:2525""#;

    #[test]
    fn smtp_upstreams_validate_into_mail_settings() {
        let settings = parse(&format!(
            r#"{{{SMTP},
                "smtp": {{"from": "Demo Honda Leads <leads@gateway.demo-honda.example>",
                          "to": ["leads@crm.demo-honda.example", "Backup <b@crm.example>"],
                          "hello_name": "gateway.example"}},
                "timeouts": {{"connect": "1s", "request": "10s"}},
                "auth": {{"kind": "basic", "username": "demo-smtp", "password": "pw"}}}}"#
        ))
        .validate_endpoint()
        .expect("valid");
        let EndpointSettings::Smtp(smtp) = settings else {
            panic!("smtp settings expected");
        };
        assert_eq!((smtp.host.as_str(), smtp.port), ("127.0.0.1", 2525));
        assert_eq!(
            smtp.tls,
            SmtpTls::StartTlsRequired,
            "STARTTLS required by default"
        );
        assert_eq!(
            smtp.from.to_string(),
            "Demo Honda Leads <leads@gateway.demo-honda.example>"
        );
        assert_eq!(smtp.to.len(), 2);
        assert_eq!(smtp.to[1].email.to_string(), "b@crm.example");
        assert_eq!(smtp.hello_name.as_deref(), Some("gateway.example"));
        let credentials = smtp.credentials.expect("credentials");
        assert_eq!(credentials.username, "demo-smtp");
        assert_eq!(credentials.password.expose(), "pw");
        assert_eq!(smtp.request_timeout, Duration::from_secs(10));

        for (url, port, tls) in [
            (
                "smtp://mail.example",
                SUBMISSION_PORT,
                SmtpTls::StartTlsRequired,
            ),
            ("smtps://mail.example", SMTPS_PORT, SmtpTls::Implicit),
            ("smtps://[::1]:1465/", 1465, SmtpTls::Implicit),
        ] {
            let settings = parse(&format!(
                r#"{{"kind": "smtp", "base_url": "{url}", "smtp": {{"from": "a@b.example", "to": ["c@d.example"]}}}}"#
            ))
            .validate_endpoint()
            .expect("valid");
            let EndpointSettings::Smtp(smtp) = settings else {
                panic!("smtp settings expected");
            };
            assert_eq!((smtp.port, smtp.tls), (port, tls), "{url}");
            assert!(!smtp.host.contains('['), "bare IPv6 address");
        }
    }

    #[test]
    fn smtp_problems_are_located() {
        let cases: [(&str, &[&str]); 8] = [
            (r#""smtp": {"from": "a@b.example"}"#, &["/smtp/to"]),
            (
                r#"
                "smtp": {"from": "not a mailbox", "to": ["c@d.example", "jane at example"]}"#,
                &["/smtp/from", "/smtp/to/1"],
            ),
            ("", &["/smtp", "/smtp/from", "/smtp/to"]),
            (
                r#""smtp": {"to": ["c@d.example"], "hello_name": "has space"}"#,
                &["/smtp/from", "/smtp/hello_name"],
            ),
            (
                r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "retries": {"attempts": 1}, "headers": {"X-A": "1"}, "max_response_bytes": 2048,
                   "soap": {}"#,
                &["/soap", "/retries", "/headers", "/max_response_bytes"],
            ),
            (
                r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "auth": {"kind": "bearer", "token": "t"}"#,
                &["/auth/kind"],
            ),
            (
                r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "auth": {"kind": "basic", "username": "u"}"#,
                &["/auth/password"],
            ),
            (
                r#""smtp": {"from": "a@b.example", "to": ["c@d.example"]},
                   "timeouts": {"request": "0s"}"#,
                &["/timeouts/request"],
            ),
        ];
        for (extra, expected) in cases {
            let separator = if extra.is_empty() { "" } else { "," };
            assert_eq!(
                endpoint_pointers(&format!("{{{SMTP}{separator}{extra}}}")),
                expected,
                "{extra}"
            );
        }

        let mail = r#""smtp": {"from": "a@b.example", "to": ["c@d.example"], "starttls": "off"}"#;
        for (url, expected) in [
            ("smtps://mail.example", "/smtp/starttls"),
            ("http://mail.example", "/base_url"),
            ("smtp://mail.example:0", "/base_url"),
            ("smtp://mail.example/ehlo-name", "/base_url"),
            ("smtp://user:pw@mail.example", "/base_url"),
        ] {
            assert_eq!(
                endpoint_pointers(&format!(
                    r#"{{"kind": "smtp", "base_url": "{url}", {mail}}}"#
                )),
                [expected],
                "{url}"
            );
        }
    }

    #[test]
    fn http_validation_refuses_smtp_entries() {
        let file = parse(&format!(
            r#"{{{SMTP}, "smtp": {{"from": "a@b.example", "to": ["c@d.example"]}}}}"#
        ));
        assert_eq!(pointers(file.validate()), ["/kind"]);
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
