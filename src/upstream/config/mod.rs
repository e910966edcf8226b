//! `FileUpstream`: one entry of a dealer's `upstreams.yaml` exactly as an operator writes it, and
//! its validation into [`UpstreamSettings`] (HTTP: `rest` and `soap`) or [`SmtpSettings`]
//! (`smtp`).
//!
//! The file types mirror the YAML one to one, reject unknown keys and hold every default in one
//! place (the `Default` impls in `file`). `${VAR}` references are expanded by the caller before these
//! types see the values. Validation never stops at the first problem: every problem is reported
//! with a JSON Pointer relative to the upstream's entry (e.g. `/timeouts/request`), so the caller
//! can locate it in the file.
//!
//! Keys that mean nothing for a kind are refused rather than ignored (an operator who writes
//! `retries` on an `smtp` upstream expects retries, and gets a located problem instead of a
//! silent surprise): `soap` only with `kind: soap`, `smtp` only with `kind: smtp`, `sftp` and
//! `ssh_key` only with `kind: sftp`, `ws_security` only with `kind: soap`, and `retries`, `headers` and `max_response_bytes` never with
//! `kind: smtp`.

//! The jobs, one a file (each depends only on those above it):
//!
//! - `file`: the entry as written (`FileUpstream` and its parts, `Secret`), with its defaults;
//! - `limits`: the bounds validation enforces, and the headers the client owns;
//! - `settings`: the validated run-time settings (`UpstreamSettings`, `SmtpSettings`, …);
//! - `check`: the problem collector and the checks of single values (durations, URLs, …);
//! - `auth`: the checks of `auth` (HTTP authentication, WS-Security);
//! - `sftp`: the checks of a `kind: sftp` entry (its URL, the pinned host key, the login);
//! - `validate`: `FileUpstream::validate` / `validate_endpoint`, one whole entry.

mod auth;
mod check;
mod file;
mod limits;
mod settings;
mod sftp;
mod validate;

pub(crate) use auth::base64_encode;
pub use check::UpstreamConfigProblem;
pub use file::{
    FileCircuitBreaker, FileClientAuth, FileHostKeys, FilePasswordType, FileRetries, FileSftp,
    FileSmtp, FileSoap, FileSoapVersion, FileStartTls, FileTimeouts, FileTls, FileUpstream,
    FileUpstreamAuth, FileUpstreamKind, Secret,
};
pub(crate) use limits::RESERVED_HEADERS;
pub use limits::{
    DEFAULT_DATA_TIMEOUT, MAX_ATTEMPTS, MAX_CONCURRENCY_LIMIT, MAX_DURATION,
    MAX_RESPONSE_BYTES_LIMIT, SMTPS_PORT, SUBMISSION_PORT,
};
pub use settings::{
    EndpointSettings, OAuth2Settings, SftpLogin, SftpSettings, SmtpCredentials, SmtpSettings,
    SmtpTls, SoapSettings, SoapVersion, UpstreamAuth, UpstreamSettings, WsSecurity,
};

#[cfg(test)]
mod tests;
