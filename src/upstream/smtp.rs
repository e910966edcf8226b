//! SMTP upstreams (`kind: smtp`): deliver a message (an ADF/XML lead, say) to a CRM's intake
//! mailbox, behind the same protection as HTTP upstreams.
//!
//! ```text
//!  mapping ── OutgoingMail ──▶ Mailer::send
//!                                breaker ─ open? fail fast (CircuitOpen)
//!                                message ─ MIME built by lettre (Message-ID from the caller)
//!                                send    ─ under timeouts.request: slot → pooled connection
//!                                          (TLS/STARTTLS, EHLO, AUTH) → MAIL/RCPT/DATA → 250
//!                              ◀── MailReceipt | UpstreamError (never retried)
//! ```
//!
//! The protocol is lettre's (`AsyncSmtpTransport` with its connection pool); this module adds
//! what a gateway needs around it:
//!
//! - `timeouts.request` bounds the whole send. lettre itself only times the TCP connect.
//! - Never retried: once `DATA` is under way the gateway cannot know whether the server kept the
//!   message, and a lead must not arrive twice. The caller's stable `Message-ID` lets a CRM (or
//!   a person) recognise a resend.
//! - A send cut short (timeout, or the caller went away) retires the whole connection pool. The
//!   connection it used may be mid-transaction; lettre would park it and the next message on it
//!   could read the late reply meant for this one, and report a delivery that did not happen.
//!   The retired pool closes its connections once nothing uses it any more.
//! - The transport is built on the first send, not at load: lettre's pool starts a background
//!   task, which needs the runtime that `aap-gateway check` never starts. Everything that can
//!   be wrong (addresses, TLS roots, credentials) is checked at load.
//! - Circuit breaker as for HTTP: timeouts, connection and protocol failures and transient (4xx)
//!   refusals count as failures; an accepted message or a permanent (5xx) refusal proves the
//!   server is up.
//!
//! Logging: one `debug` event per send (upstream, outcome, elapsed). Recipients, subjects,
//! bodies and the server's reply text are never logged; errors carry reply codes only.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::message::header::{ContentDisposition, ContentType};
use lettre::message::{Message, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::transport::smtp::{AsyncSmtpTransportBuilder, PoolConfig};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use super::UpstreamError;
use super::breaker::{Breaker, BreakerState};
use super::client::{USER_AGENT, error_chain};
use super::config::{EndpointSettings, FileUpstream, SmtpSettings, SmtpTls, UpstreamConfigProblem};

/// Idle pooled connections are closed after this long: mail servers drop idle sessions
/// (RFC 5321 lets them after 5 minutes, many do much sooner), and a dead one costs a `NOOP`.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Reply codes that refuse the credentials or demand authentication (RFC 4954).
const AUTH_REFUSALS: [u16; 4] = [530, 534, 535, 538];

/// One mail server, ready to send. Cheap to clone (shared: the pool, the breaker, the slots).
#[derive(Clone)]
pub struct Mailer {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    settings: SmtpSettings,
    builder: AsyncSmtpTransportBuilder,
    pool: Mutex<Pool>,
    slots: Semaphore,
    breaker: Breaker,
    /// Metrics of this mailer's sends, once the app attaches them.
    meter: std::sync::OnceLock<crate::telemetry::metrics::Meter>,
}

/// The current transport; `generation` tells a send whether the one it used was retired since.
#[derive(Default)]
struct Pool {
    generation: u64,
    transport: Option<AsyncSmtpTransport<Tokio1Executor>>,
}

/// One message to send.
#[derive(Debug, Clone)]
pub struct OutgoingMail {
    /// One line; control characters become spaces.
    pub subject: String,
    /// `local@domain` without `<>`, stable per lead so a resend is recognisable.
    pub message_id: String,
    /// The first part is the inline body; further parts are attachments (multipart/mixed).
    pub parts: Vec<MailPart>,
}

/// One MIME part; the transfer encoding (7bit, quoted-printable, base64) is chosen for it.
#[derive(Debug, Clone)]
pub struct MailPart {
    /// e.g. `text/plain; charset=utf-8` or `application/xml`.
    pub content_type: String,
    pub filename: Option<String>,
    pub body: String,
}

/// The server's acceptance of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailReceipt {
    /// The `Message-ID` sent, without `<>`.
    pub message_id: String,
    /// The reply to the end of `DATA`, e.g. `250 2.0.0 Ok: queued as 4BQ2x`.
    pub server_reply: String,
}

impl Mailer {
    /// Validates one `upstreams.yaml` entry of `kind: smtp` and prepares its transport.
    pub fn build(name: &str, file: FileUpstream) -> Result<Mailer, Vec<UpstreamConfigProblem>> {
        match file.validate_endpoint()? {
            EndpointSettings::Smtp(settings) => Mailer::from_settings(name, settings),
            EndpointSettings::Http(_) => Err(vec![UpstreamConfigProblem {
                pointer: "/kind".to_owned(),
                message: "a mailer needs `kind: smtp`".to_owned(),
            }]),
        }
    }

    /// Prepares the transport for already validated settings (TLS roots are loaded here).
    pub fn from_settings(
        name: &str,
        settings: SmtpSettings,
    ) -> Result<Mailer, Vec<UpstreamConfigProblem>> {
        let tls_parameters = || {
            let mut builder = TlsParameters::builder(settings.host.clone())
                .dangerous_accept_invalid_certs(settings.insecure_skip_verify)
                .dangerous_accept_invalid_hostnames(settings.insecure_skip_verify);
            for cert in &settings.ca_certificates {
                builder = builder.add_root_certificate(cert.clone());
            }
            builder.build().map_err(|e| {
                vec![UpstreamConfigProblem {
                    pointer: "/tls".to_owned(),
                    message: format!("cannot set up TLS: {}", error_chain(&e)),
                }]
            })
        };
        let tls = match settings.tls {
            SmtpTls::Implicit => Tls::Wrapper(tls_parameters()?),
            SmtpTls::StartTlsRequired => Tls::Required(tls_parameters()?),
            SmtpTls::StartTlsOpportunistic => Tls::Opportunistic(tls_parameters()?),
            SmtpTls::Off => Tls::None,
        };
        if settings.insecure_skip_verify && settings.tls != SmtpTls::Off {
            tracing::warn!(
                upstream = name,
                "tls.insecure_skip_verify is on: the mail server's certificate is not checked"
            );
        }
        if settings.credentials.is_some()
            && matches!(settings.tls, SmtpTls::Off | SmtpTls::StartTlsOpportunistic)
        {
            tracing::warn!(
                upstream = name,
                "SMTP credentials may travel in plain text (smtp.starttls is not `required`)"
            );
        }
        let max_size = u32::try_from(settings.max_concurrency).unwrap_or(u32::MAX);
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&settings.host)
            .port(settings.port)
            .tls(tls)
            // lettre applies this to the TCP connect only; `send` bounds the rest.
            .timeout(Some(settings.connect_timeout))
            .pool_config(
                PoolConfig::new()
                    .max_size(max_size)
                    .idle_timeout(POOL_IDLE_TIMEOUT),
            );
        if let Some(hello_name) = &settings.hello_name {
            builder = builder.hello_name(ClientId::Domain(hello_name.clone()));
        }
        if let Some(credentials) = &settings.credentials {
            builder = builder
                .credentials(Credentials::new(
                    credentials.username.clone(),
                    credentials.password.expose().to_owned(),
                ))
                .authentication(vec![Mechanism::Plain, Mechanism::Login]);
        }
        Ok(Mailer {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                builder,
                pool: Mutex::new(Pool::default()),
                slots: Semaphore::new(settings.max_concurrency),
                breaker: Breaker::new(name, settings.breaker_failures, settings.breaker_cool_down),
                settings,
                meter: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The upstream's name (its key in `upstreams.yaml`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The validated settings.
    pub fn settings(&self) -> &SmtpSettings {
        &self.inner.settings
    }

    /// The circuit breaker's state, for health reports.
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state()
    }

    /// Sends one message; Ok only when the server accepted it (250 after DATA). Never retried
    /// (a lead must not be mailed twice). Whole send bounded by timeouts.request; the circuit
    /// breaker applies as for HTTP upstreams.
    ///
    /// `Timeout` after the message went out does not prove it was lost: the server may still
    /// accept it, hence the stable `Message-ID`.
    pub async fn send(&self, mail: OutgoingMail) -> Result<MailReceipt, UpstreamError> {
        let span = tracing::debug_span!(
            "upstream",
            otel.kind = "client",
            upstream = %self.inner.name,
            error.kind = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self.send_unmetered(mail).instrument(span.clone()).await;
        if let Err(e) = &result {
            span.record("error.kind", crate::telemetry::metrics::error_kind(e));
        }
        if let Some(meter) = self.inner.meter.get() {
            // An accepted mail counts as a 2xx.
            meter.observe(result.as_ref().map(|_| 200), started.elapsed());
        }
        result
    }

    /// Records this mailer's sends in `meter` from now on (set once, by the app).
    pub fn attach_meter(&self, meter: crate::telemetry::metrics::Meter) {
        let _ = self.inner.meter.set(meter);
    }

    async fn send_unmetered(&self, mail: OutgoingMail) -> Result<MailReceipt, UpstreamError> {
        let inner = &*self.inner;
        let started = Instant::now();
        let message_id = mail.message_id.clone();
        let (envelope, bytes) = inner.message(mail)?;
        let permit = match inner.breaker.try_acquire() {
            Ok(permit) => permit,
            Err(retry_after) => {
                tracing::debug!(upstream = %inner.name, "circuit open; not sending");
                return Err(UpstreamError::CircuitOpen { retry_after });
            }
        };
        let after = inner.settings.request_timeout;
        let outcome = tokio::time::timeout(after, inner.deliver(&envelope, &bytes))
            .await
            .unwrap_or(Err(UpstreamError::Timeout { after }));
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &outcome {
            Ok(_) => {
                tracing::debug!(upstream = %inner.name, outcome = "accepted", elapsed_ms, "mail sent");
            }
            Err(error) => {
                tracing::debug!(upstream = %inner.name, error = %error, elapsed_ms, "mail not sent");
            }
        }
        permit.record(matches!(
            outcome,
            Ok(_)
                | Err(UpstreamError::Rejected {
                    permanent: true,
                    ..
                })
                | Err(UpstreamError::Auth(_))
        ));
        let reply = outcome?;
        Ok(MailReceipt {
            message_id,
            server_reply: reply,
        })
    }
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the transport builder: its `Debug` is lettre's to decide.
        f.debug_struct("Mailer")
            .field("name", &self.inner.name)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

// === impl Inner ===

impl Inner {
    /// The MIME message and its envelope, or `InvalidRequest` (a mapping bug).
    fn message(&self, mail: OutgoingMail) -> Result<(Envelope, Vec<u8>), UpstreamError> {
        let invalid = |why: String| UpstreamError::InvalidRequest(format!("mail {why}"));
        if !is_message_id(&mail.message_id) {
            return Err(invalid(
                "message_id must look like `local@domain` (visible ASCII; no `<>`, quotes or \
                 spaces)"
                    .to_owned(),
            ));
        }
        let mut builder = Message::builder()
            .from(self.settings.from.clone())
            .subject(one_line(&mail.subject))
            .message_id(Some(format!("<{}>", mail.message_id)))
            .user_agent(USER_AGENT.to_owned());
        for to in &self.settings.to {
            builder = builder.to(to.clone());
        }
        let mut parts = mail.parts.into_iter().enumerate().map(|(i, part)| {
            let content_type = ContentType::parse(&part.content_type).map_err(|_| {
                invalid(format!(
                    "part {i}: `{}` is not a media type",
                    part.content_type
                ))
            })?;
            let mut single = SinglePart::builder().header(content_type);
            if let Some(filename) = &part.filename {
                let filename = one_line(filename);
                single = single.header(if i == 0 {
                    ContentDisposition::inline_with_name(&filename)
                } else {
                    ContentDisposition::attachment(&filename)
                });
            }
            Ok(single.body(part.body))
        });
        let first = parts
            .next()
            .ok_or_else(|| invalid("has no part".to_owned()))??;
        let rest: Vec<SinglePart> = parts.collect::<Result<_, UpstreamError>>()?;
        let message = if rest.is_empty() {
            builder.singlepart(first)
        } else {
            let mixed = rest
                .into_iter()
                .fold(MultiPart::mixed().singlepart(first), MultiPart::singlepart);
            builder.multipart(mixed)
        }
        .map_err(|e| invalid(format!("cannot be built: {e}")))?;
        Ok((message.envelope().clone(), message.formatted()))
    }

    /// One delivery on a pooled connection, in a concurrency slot: the server's final reply.
    async fn deliver(&self, envelope: &Envelope, bytes: &[u8]) -> Result<String, UpstreamError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| UpstreamError::Protocol("mailer closed".to_owned()))?;
        let (generation, transport) = self.transport();
        let mut cut_short = RetireUnlessFinished {
            inner: self,
            generation,
            finished: false,
        };
        let result = transport.send_raw(envelope, bytes).await;
        cut_short.finished = true;
        let response = result.map_err(|e| self.classify(&e))?;
        let mut reply = response.code().to_string();
        for line in response.message() {
            reply.push(' ');
            reply.push_str(line);
        }
        Ok(reply)
    }

    fn transport(&self) -> (u64, AsyncSmtpTransport<Tokio1Executor>) {
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = pool.generation;
        let transport = pool
            .transport
            .get_or_insert_with(|| self.builder.clone().build())
            .clone();
        (generation, transport)
    }

    /// Drops the transport of `generation` (if still current): the next send starts a new
    /// pool, and the old one closes its connections when its last user is done.
    fn retire(&self, generation: u64) {
        let old = {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            if pool.generation != generation {
                return;
            }
            pool.generation += 1;
            pool.transport.take()
        };
        tracing::debug!(upstream = %self.name, "send cut short; SMTP connection pool retired");
        drop(old);
    }

    fn classify(&self, error: &lettre::transport::smtp::Error) -> UpstreamError {
        if let Some(code) = error.status() {
            let code = u16::from(code);
            // The reply text may quote addresses or content: keep the codes only.
            let mut reply = code.to_string();
            if let Some(enhanced) = std::error::Error::source(error)
                .map(ToString::to_string)
                .and_then(|text| text.split_whitespace().next().map(str::to_owned))
                .filter(|word| is_enhanced_status(word))
            {
                reply.push(' ');
                reply.push_str(&enhanced);
            }
            return if AUTH_REFUSALS.contains(&code) {
                UpstreamError::Auth(format!("SMTP AUTH refused: {reply}"))
            } else {
                UpstreamError::Rejected {
                    reply,
                    permanent: error.is_permanent(),
                }
            };
        }
        // lettre has no `is_connection()`; its `Display` names the kind.
        if error.to_string().starts_with("Connection error") {
            return if error.is_timeout() {
                UpstreamError::Connect(format!(
                    "no connection within {}",
                    humantime::format_duration(self.settings.connect_timeout)
                ))
            } else {
                UpstreamError::Connect(error_chain(error))
            };
        }
        if error.is_tls() {
            UpstreamError::Protocol(format!("TLS: {}", error_chain(error)))
        } else if error.is_response() {
            // The parse error quotes the reply; say only what went wrong.
            UpstreamError::Protocol("malformed or missing SMTP reply".to_owned())
        } else {
            UpstreamError::Protocol(error_chain(error))
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // lettre's pool spawns its clean-up when dropped, which needs a runtime; without one
        // (the process is ending) there is nothing left to clean.
        if tokio::runtime::Handle::try_current().is_err() {
            let pool = self.pool.get_mut().unwrap_or_else(PoisonError::into_inner);
            if let Some(transport) = pool.transport.take() {
                std::mem::forget(transport);
            }
        }
    }
}

/// Retires the pool unless the send it guards finished (see the module doc).
struct RetireUnlessFinished<'a> {
    inner: &'a Inner,
    generation: u64,
    finished: bool,
}

impl Drop for RetireUnlessFinished<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.inner.retire(self.generation);
        }
    }
}

/// `local@domain` as a `Message-ID` needs it (RFC 5322 §3.6.4), in a form that cannot break
/// the header: visible ASCII, no brackets, quotes, spaces or further `@`.
fn is_message_id(id: &str) -> bool {
    let Some((local, domain)) = id.split_once('@') else {
        return false;
    };
    let allowed = |b: u8| b.is_ascii_graphic() && !b"<>\"\\()[],;:@".contains(&b);
    !local.is_empty()
        && !domain.is_empty()
        && id.len() <= 250
        && local.bytes().all(allowed)
        && domain.bytes().all(allowed)
}

/// An enhanced status code (RFC 3463), e.g. `4.3.0`.
fn is_enhanced_status(word: &str) -> bool {
    let mut parts = word.split('.');
    let class_ok = matches!(parts.next(), Some("2" | "4" | "5"));
    let rest: Vec<&str> = parts.collect();
    class_ok
        && rest.len() == 2
        && rest
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A header value on one line: control characters (CR, LF …) become spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_that_could_break_the_header_are_refused() {
        for good in ["lead-42@gateway.demo-honda.example", "a.b+c@x"] {
            assert!(is_message_id(good), "{good}");
        }
        for bad in [
            "",
            "no-at",
            "@x",
            "x@",
            "<a@b>",
            "a b@c",
            "a@b\r\nBcc: x@y",
            "a@b@c",
            "é@x",
        ] {
            assert!(!is_message_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_enhanced_status_codes_are_kept_from_replies() {
        assert!(is_enhanced_status("4.3.0"));
        assert!(is_enhanced_status("5.7.135"));
        for word in ["jane@example.com", "4.3", "3.0.0", "4.x.0", "Requested"] {
            assert!(!is_enhanced_status(word), "{word}");
        }
    }

    #[test]
    fn subjects_stay_on_one_line() {
        assert_eq!(one_line("Lead\r\nBcc: x@y\tNow"), "Lead  Bcc: x@y Now");
    }
}
