//! The entry as written: `FileUpstream` and its parts mirror the YAML one to one, reject unknown
//! keys and hold every default; `Secret` keeps secrets out of `Debug`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use url::Url;

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
    /// `rest` (JSON or any body over HTTP), `soap` (SOAP 1.1/1.2 envelopes over HTTP), `smtp`
    /// (e-mail, e.g. ADF/XML leads to a CRM's intake address), `file` (a feed document in a
    /// local directory: a shared volume another container writes) or `sftp` (a feed document on
    /// an SFTP server, whose host key `sftp.host_key` pins).
    #[serde(default)]
    pub kind: FileUpstreamKind,
    /// HTTP kinds: base URL, `http` or `https`, no query, fragment or credentials; its path is a
    /// prefix of every call's path: `https://x/api` + `/v2/vehicles` → `https://x/api/v2/vehicles`
    /// (an empty call path is the base URL itself, the usual case for a SOAP endpoint).
    /// `smtp`: `smtp://host[:port]` (STARTTLS per `smtp.starttls`, port 587 by default) or
    /// `smtps://host[:port]` (TLS from the first byte, port 465 by default). `file`:
    /// `file:///an/absolute/directory`; a feed's request path names a file under it. `sftp`:
    /// `sftp://host[:port]/remote/directory` (port 22 by default; the path as the server sees
    /// it, `/~/` for the login's home directory); a feed's request path names a file under it.
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
    /// HTTP kinds: calls started per second at most (e.g. `20`, or `0.5` for one every two
    /// seconds), spaced evenly in the order they ask; a call whose turn is further away than
    /// `timeouts.queue` is refused at once (`RATE_LIMITED` with the wait as its hint) instead of
    /// passing a burst on. Absent = no ceiling but the upstream's own (`Retry-After`,
    /// `X-RateLimit-Remaining`/`-Reset`), which is always honoured.
    #[serde(default)]
    pub max_requests_per_second: Option<f64>,
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
    pub auth: Option<FileUpstreamAuth>,
    /// SOAP settings (`kind: soap` only; absent = SOAP 1.1).
    #[serde(default)]
    pub soap: Option<FileSoap>,
    /// Mail settings (`kind: smtp` only, and required there).
    #[serde(default)]
    pub smtp: Option<FileSmtp>,
    /// SFTP settings (`kind: sftp` only, and required there: the pinned host key).
    #[serde(default)]
    pub sftp: Option<FileSftp>,
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
                FileUpstreamAuth::WsSecurity {
                    password_type: FilePasswordType::Text,
                    ..
                } => "a WS-Security password in clear text",
                FileUpstreamAuth::WsSecurity { .. } => {
                    "a WS-Security user name and password digest"
                }
                FileUpstreamAuth::Oauth2 { .. } => "OAuth2 bearer tokens",
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

pub(super) fn default_max_response_bytes() -> u64 {
    4 * 1024 * 1024
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileUpstreamKind {
    #[default]
    Rest,
    Soap,
    Smtp,
    /// A feed document read from a local directory (`base_url: file:///mnt/exports`).
    File,
    /// A feed document read over SFTP (`base_url: sftp://host:22/exports`).
    Sftp,
}

/// `sftp:` of a `kind: sftp` upstream.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSftp {
    /// The server's host key, pinned: a `SHA256:…` fingerprint as `ssh-keyscan -p PORT host |
    /// ssh-keygen -lf -` prints it, or the key itself as an OpenSSH `known_hosts` line or
    /// public key (`ssh-ed25519 AAAA…`). A list pins several (a key being rotated). Required:
    /// a server showing any other key is refused, never trusted on first use.
    #[serde(default)]
    pub host_key: Option<FileHostKeys>,
}

/// One pinned host key or several.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FileHostKeys {
    One(String),
    Many(Vec<String>),
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
pub enum FileUpstreamAuth {
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
    /// An SSH key login (`kind: sftp` only; `basic` logs in with a password instead).
    SshKey {
        /// The login's user name.
        username: String,
        /// The private key: OpenSSH (`-----BEGIN OPENSSH PRIVATE KEY-----`; ed25519, ECDSA or
        /// RSA), PKCS#8 or PuTTY.
        #[serde(default)]
        private_key: Option<Secret>,
        /// File holding the private key (instead of `private_key`).
        #[serde(default)]
        private_key_file: Option<PathBuf>,
        /// The key's passphrase, when it is encrypted.
        #[serde(default)]
        passphrase: Option<Secret>,
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
