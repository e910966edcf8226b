//! `FileUpstream::validate` / `validate_endpoint`: one whole entry, every problem reported with
//! its pointer, the kind's own keys checked and the others refused.

use std::time::Duration;

use url::Url;

use super::check::{Check, SmtpEndpoint, UpstreamConfigProblem};
use super::file::{
    FileSmtp, FileStartTls, FileUpstream, FileUpstreamAuth, FileUpstreamKind,
    default_max_response_bytes,
};
use super::limits::{
    DEFAULT_DATA_TIMEOUT, MAX_ATTEMPTS, MAX_CONCURRENCY_LIMIT, MAX_RESPONSE_BYTES_LIMIT,
};
use super::settings::{
    EndpointSettings, SftpSettings, SmtpCredentials, SmtpSettings, SmtpTls, SoapSettings,
    UpstreamSettings,
};
use crate::settings::yaml::push_pointer;

/// What every kind shares, each `None` when invalid.
struct Common {
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    breaker_failures: Option<u32>,
    breaker_cool_down: Option<Duration>,
    max_concurrency: Option<usize>,
    /// `tls.ca_file`, parsed.
    ca: Option<(Vec<u8>, Vec<rustls::pki_types::CertificateDer<'static>>)>,
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
    pub fn validate_endpoint(mut self) -> Result<EndpointSettings, Vec<UpstreamConfigProblem>> {
        let mut c = Check::default();
        // Problems come in the order of the keys in the documentation's example.
        let settings = match self.kind {
            FileUpstreamKind::Rest | FileUpstreamKind::Soap => {
                let base_url = c.http_url("/base_url", &self.base_url, "base_url");
                let common = self.common(&mut c);
                self.http(&mut c, base_url, common)
                    .map(EndpointSettings::Http)
            }
            FileUpstreamKind::File => {
                let base_url = c.file_url("/base_url", &self.base_url);
                for (pointer, set) in [
                    ("/auth", self.auth.is_some()),
                    ("/headers", !self.headers.is_empty()),
                ] {
                    if set {
                        c.problem(
                            pointer,
                            "a `file` upstream reads a local directory: no HTTP settings",
                        );
                    }
                }
                let common = self.common(&mut c);
                self.http(&mut c, base_url, common)
                    .map(EndpointSettings::Http)
            }
            FileUpstreamKind::Sftp => {
                let target = c.sftp_url("/base_url", &self.base_url);
                let pins = c.host_keys(self.sftp.as_ref());
                let login = c.sftp_login(self.auth.take());
                for (pointer, set) in [
                    ("/headers", !self.headers.is_empty()),
                    ("/retries", self.retries.is_some()),
                    (
                        "/max_requests_per_second",
                        self.max_requests_per_second.is_some(),
                    ),
                    ("/tls/ca_file", self.tls.ca_file.is_some()),
                    ("/tls/insecure_skip_verify", self.tls.insecure_skip_verify),
                ] {
                    if set {
                        c.problem(
                            pointer,
                            "not used by `kind: sftp` (SSH is secured by the pinned host key)",
                        );
                    }
                }
                let common = self.common(&mut c);
                let base_url = target.as_ref().map(|t| t.url.clone());
                let settings = self.http(&mut c, base_url, common);
                match (settings, target, pins, login) {
                    (
                        Some(mut settings),
                        Some(target),
                        Some((host_keys, host_key_algorithms)),
                        Some((username, login)),
                    ) => {
                        settings.sftp = Some(SftpSettings {
                            host: target.host,
                            port: target.port,
                            directory: target.directory,
                            username,
                            login,
                            host_keys,
                            host_key_algorithms,
                        });
                        Some(EndpointSettings::Http(settings))
                    }
                    _ => None,
                }
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
        if self.kind != FileUpstreamKind::Sftp && self.sftp.is_some() {
            c.problem("/sftp", "only for `kind: sftp`");
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
            Some(FileUpstreamAuth::WsSecurity {
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
        let max_requests_per_second = match self.max_requests_per_second {
            Some(rate) if !(rate.is_finite() && rate > 0.0 && rate <= 100_000.0) => {
                c.problem(
                    "/max_requests_per_second",
                    "must be a number above 0 and at most 100000 (e.g. 20, or 0.5 for one call \
                     every two seconds); remove it for no ceiling",
                );
                None
            }
            rate => Some(rate),
        };
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
            max_requests_per_second: max_requests_per_second?,
            max_response_bytes: max_response_bytes?,
            ca_certificates: common.ca.map(|(_, certs)| certs).unwrap_or_default(),
            insecure_skip_verify: self.tls.insecure_skip_verify,
            headers,
            auth,
            soap,
            sftp: None,
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
        if self.sftp.is_some() {
            c.problem("/sftp", "only for `kind: sftp`");
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
        if self.max_requests_per_second.is_some() {
            c.problem(
                "/max_requests_per_second",
                "not used by `kind: smtp` (`max_concurrency` bounds a mail server)",
            );
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
            Some(FileUpstreamAuth::Basic {
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

fn invalid_settings() -> Vec<UpstreamConfigProblem> {
    vec![UpstreamConfigProblem {
        pointer: String::new(),
        message: "invalid upstream settings".to_owned(),
    }]
}
