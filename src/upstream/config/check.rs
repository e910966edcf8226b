//! The problem collector of one entry, and the checks of single values: durations, URLs,
//! ranges, secrets, headers, the SOAP version, CA files, mailboxes.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use lettre::message::Mailbox;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use url::Url;

use super::file::{FileSoap, FileSoapVersion, FileTls, Secret};
use super::limits::{MAX_DURATION, RESERVED_HEADERS, SMTPS_PORT, SUBMISSION_PORT};
use super::settings::SoapVersion;

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

/// Collects problems while validating one entry.
#[derive(Default)]
pub(super) struct Check {
    pub(super) problems: Vec<UpstreamConfigProblem>,
}

impl Check {
    pub(super) fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        self.problems.push(UpstreamConfigProblem {
            pointer: pointer.to_owned(),
            message: message.into(),
        });
    }

    pub(super) fn duration(&mut self, pointer: &str, text: &str) -> Option<Duration> {
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

    /// `kind: file`: `file:///` and an absolute directory, nothing else.
    pub(super) fn file_url(&mut self, pointer: &str, text: &str) -> Option<Url> {
        let url = match Url::parse(text.trim()) {
            Ok(url) => url,
            Err(e) => {
                self.problem(pointer, format!("not a valid URL: {e}"));
                return None;
            }
        };
        let local = url.scheme() == "file"
            && url.host_str().is_none_or(str::is_empty)
            && url.query().is_none()
            && url.fragment().is_none()
            && url.to_file_path().is_ok();
        if !local {
            self.problem(
                pointer,
                "base_url of `kind: file` is a local directory: `file:///mnt/exports`",
            );
            return None;
        }
        Some(url)
    }

    pub(super) fn http_url(&mut self, pointer: &str, text: &str, what: &str) -> Option<Url> {
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

    pub(super) fn range<T: PartialOrd + fmt::Display + Copy>(
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
    pub(super) fn secret(
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

    pub(super) fn header_name(&mut self, pointer: &str, name: &str) -> Option<HeaderName> {
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

    pub(super) fn header_value(
        &mut self,
        pointer: &str,
        value: &str,
        sensitive: bool,
    ) -> Option<HeaderValue> {
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

    pub(super) fn soap_version(&mut self, soap: Option<&FileSoap>) -> Option<SoapVersion> {
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
    pub(super) fn ca_file(
        &mut self,
        tls: &FileTls,
    ) -> Option<(Vec<u8>, Vec<CertificateDer<'static>>)> {
        let path = tls.ca_file.as_ref()?;
        match std::fs::read(path) {
            Ok(pem) => match read_certificates(&pem) {
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
    pub(super) fn smtp_url(&mut self, pointer: &str, text: &str) -> Option<SmtpEndpoint> {
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

    pub(super) fn mailbox(&mut self, pointer: &str, text: &str) -> Option<Mailbox> {
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
pub(super) struct SmtpEndpoint {
    pub(super) host: String,
    pub(super) port: u16,
    /// `smtps://`: TLS from the first byte.
    pub(super) implicit_tls: bool,
}

/// The certificates of a PEM bundle, each one a trust anchor the TLS library accepts.
fn read_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    for (n, cert) in certs.iter().enumerate() {
        rustls::RootCertStore::empty()
            .add(cert.clone())
            .map_err(|e| format!("certificate {} of the bundle: {e}", n + 1))?;
    }
    Ok(certs)
}
