//! The validated run-time settings of an upstream: if a value exists here it is usable.

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use lettre::message::Mailbox;
use url::Url;

use super::file::{FileClientAuth, Secret};

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
    /// Calls started per second at most (`max_requests_per_second`), finite and positive.
    pub max_requests_per_second: Option<f64>,
    pub max_response_bytes: usize,
    /// Parsed PEM certificates of `tls.ca_file`.
    pub ca_certificates: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub insecure_skip_verify: bool,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<UpstreamAuth>,
    /// `Some` for `kind: soap`.
    pub soap: Option<SoapSettings>,
    /// `Some` for `kind: sftp`.
    pub sftp: Option<SftpSettings>,
}

/// Validated settings of a `kind: sftp` upstream (its timeouts, slots and size limit are the
/// [`UpstreamSettings`] around it).
#[derive(Debug, Clone)]
pub struct SftpSettings {
    pub host: String,
    pub port: u16,
    /// The remote directory (the base URL's path, percent-decoded, without a trailing `/`;
    /// `~` for the login's home directory).
    pub directory: String,
    pub username: String,
    pub login: SftpLogin,
    /// At least one: the server must show a key with one of these SHA-256 fingerprints.
    pub host_keys: Vec<russh::keys::ssh_key::Fingerprint>,
    /// The algorithms of the pinned keys when every pin is a whole key (so the server is asked
    /// for that key, not another it also holds); empty: the client's usual preference.
    pub host_key_algorithms: Vec<russh::keys::Algorithm>,
}

/// How an SFTP upstream logs in.
#[derive(Clone)]
pub enum SftpLogin {
    Password(Secret),
    Key(std::sync::Arc<russh::keys::PrivateKey>),
}

impl std::fmt::Debug for SftpLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SftpLogin::Password(_) => f.write_str("Password(***)"),
            SftpLogin::Key(_) => f.write_str("Key(***)"),
        }
    }
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
pub enum UpstreamAuth {
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
