//! SMTP upstreams (`kind: smtp`): deliver a message (an ADF/XML lead, say) to a CRM's intake
//! mailbox, behind the same protection as HTTP upstreams.
//!
//! ```text
//!  mapping ── OutgoingMail ──▶ Mailer::send
//!                                breaker ─ open? fail fast (CircuitOpen)
//!                                message ─ MIME built by lettre (Message-ID from the caller)
//!                                envelope ─ under timeouts.request: slot → pooled connection
//!                                           (TLS/STARTTLS, EHLO, AUTH) → MAIL/RCPT/DATA 354
//!                                content ─ under timeouts.data: message → final dot → 250
//!                              ◀── MailReceipt | MailFailure (never retried)
//! ```
//!
//! The protocol is lettre's (`AsyncSmtpConnection`); this module drives the transaction itself
//! because a lead needs to know *where* a send stopped:
//!
//! - **Before the message** (slot, connection, `AUTH`, `MAIL`, `RCPT`, `DATA`): bounded by
//!   `timeouts.request` (the wait for a slot included). A failure here is certain: the server
//!   has no message, and the lead may be sent again.
//! - **The message and the reply to its final dot**: bounded by `timeouts.data` (10 minutes by
//!   default, as RFC 5321 §4.5.3.2.6 asks: servers often scan or queue before answering). A
//!   4xx/5xx reply is certain too; a timeout or a lost connection is not: the server may have
//!   kept the message ([`MailFailure::unconfirmed`]). The caller's stable `Message-ID` lets a
//!   CRM (or a person) recognise a resend.
//! - Never retried here: whether to send again is the caller's decision.
//! - Connections are pooled (at most `max_concurrency`, idle ones closed after 30 s and checked
//!   with `NOOP` before reuse). A connection whose send did not end cleanly is dropped, never
//!   reused: the late reply meant for one message must not be read as another's. Servers end
//!   sessions after so many commands or messages: when a reused connection answers the
//!   envelope with `421` or is gone, the message (not yet accepted) goes once more on a fresh
//!   connection.
//! - Circuit breaker as for HTTP: timeouts, connection and protocol failures and transient (4xx)
//!   refusals count as failures; an accepted message or a permanent (5xx) refusal proves the
//!   server is up. Waiting for a slot is the gateway's own queue, not a server failure.
//!
//! Logging: one `debug` event per send (upstream, outcome, elapsed). Recipients, subjects,
//! bodies and the server's reply text are never logged; errors carry reply codes only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::message::header::{ContentDisposition, ContentType};
use lettre::message::{Message, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Tls, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::response::Response;
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use super::UpstreamError;
use super::breaker::{Breaker, BreakerState};
use super::config::{EndpointSettings, FileUpstream, SmtpSettings, SmtpTls, UpstreamConfigProblem};
use super::error_chain;
use super::http_client::USER_AGENT;

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
    tls: Tls,
    hello: ClientId,
    credentials: Option<Credentials>,
    /// Connections that ended their last send cleanly, with the time they went idle.
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    slots: Semaphore,
    breaker: Breaker,
    /// Metrics of this mailer's sends, once the app attaches them.
    meter: std::sync::OnceLock<crate::telemetry::metrics::Meter>,
}

/// Why a send failed, and whether the server may have kept the message anyway.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct MailFailure {
    pub error: UpstreamError,
    /// The whole message went out and no reply to its final dot came back (a timeout or a lost
    /// connection): the server may have queued it. `false`: it certainly has no message.
    pub unconfirmed: bool,
}

impl MailFailure {
    fn certain(error: UpstreamError) -> MailFailure {
        MailFailure {
            error,
            unconfirmed: false,
        }
    }
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
    /// Nothing connects before the first send.
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
        let hello = settings
            .hello_name
            .clone()
            .map_or_else(ClientId::default, ClientId::Domain);
        let credentials = settings
            .credentials
            .as_ref()
            .map(|c| Credentials::new(c.username.clone(), c.password.expose().to_owned()));
        Ok(Mailer {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                tls,
                hello,
                credentials,
                idle: Mutex::new(Vec::new()),
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

    /// The circuit breaker's state (`aap_gateway_upstream_breaker_open` shows it).
    pub fn breaker_state(&self) -> BreakerState {
        self.inner.breaker.state()
    }

    /// Sends one message; Ok only when the server accepted it (250 after the final dot). Never
    /// retried. See [`Mailer::deliver`] for whether a failed send may still have arrived.
    pub async fn send(&self, mail: OutgoingMail) -> Result<MailReceipt, UpstreamError> {
        self.deliver(mail).await.map_err(|f| f.error)
    }

    /// [`Mailer::send`], saying on failure whether the server may have kept the message: only
    /// a send that lost its connection or timed out after the whole message went out is
    /// [`MailFailure::unconfirmed`].
    pub async fn deliver(&self, mail: OutgoingMail) -> Result<MailReceipt, MailFailure> {
        let span = tracing::debug_span!(
            "upstream",
            otel.kind = "client",
            upstream = %self.inner.name,
            error.kind = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self.send_unmetered(mail).instrument(span.clone()).await;
        if let Err(f) = &result {
            span.record("error.kind", f.error.kind());
        }
        if let Some(meter) = self.inner.meter.get()
            && !matches!(
                result,
                Err(MailFailure {
                    error: UpstreamError::Busy { .. },
                    ..
                })
            )
        {
            // An accepted mail counts as a 2xx.
            meter.observe(
                result.as_ref().map(|_| 200).map_err(|f| f.error.kind()),
                started.elapsed(),
            );
        }
        result
    }

    /// Records this mailer's sends in `meter` from now on (set once, by the app).
    pub fn attach_meter(&self, meter: crate::telemetry::metrics::Meter) {
        self.inner.breaker.attach_gauge(meter.breaker_gauge());
        let _ = self.inner.meter.set(meter);
    }

    async fn send_unmetered(&self, mail: OutgoingMail) -> Result<MailReceipt, MailFailure> {
        let inner = &*self.inner;
        let started = Instant::now();
        let message_id = mail.message_id.clone();
        let (envelope, bytes) = inner.message(mail).map_err(MailFailure::certain)?;
        let permit = match inner.breaker.try_acquire() {
            Ok(permit) => permit,
            Err(retry_after) => {
                tracing::debug!(upstream = %inner.name, "circuit open; not sending");
                return Err(MailFailure::certain(UpstreamError::CircuitOpen {
                    retry_after,
                }));
            }
        };
        let outcome = inner.transaction(&envelope, &bytes).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &outcome {
            Ok(_) => {
                tracing::debug!(upstream = %inner.name, outcome = "accepted", elapsed_ms, "mail sent");
            }
            Err(f) => {
                tracing::debug!(
                    upstream = %inner.name,
                    error = %f.error,
                    unconfirmed = f.unconfirmed,
                    elapsed_ms,
                    "mail not sent"
                );
            }
        }
        match &outcome {
            // The gateway's own queue: the server was not asked (the permit goes unused).
            Err(MailFailure {
                error: UpstreamError::Busy { .. },
                ..
            }) => drop(permit),
            other => permit.record(matches!(
                other,
                Ok(_)
                    | Err(MailFailure {
                        error: UpstreamError::Rejected {
                            permanent: true,
                            ..
                        } | UpstreamError::Auth(_),
                        ..
                    })
            )),
        }
        let reply = outcome?;
        Ok(MailReceipt {
            message_id,
            server_reply: reply,
        })
    }
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

    /// One transaction on a pooled connection: the envelope under `timeouts.request` (the wait
    /// for a slot included), the message and its final reply under `timeouts.data`.
    async fn transaction(&self, envelope: &Envelope, bytes: &[u8]) -> Result<String, MailFailure> {
        let request = self.settings.request_timeout;
        let slotted = AtomicBool::new(false);
        let envelope_sent = tokio::time::timeout(request, async {
            let slot = self.slots.acquire().await.map_err(|_| MailFailure {
                error: UpstreamError::Protocol("mailer closed".to_owned()),
                unconfirmed: false,
            })?;
            slotted.store(true, Ordering::Relaxed);
            let (mut conn, reused) = self.connection().await.map_err(|e| self.certain(&e))?;
            match self.envelope(&mut conn, envelope, bytes).await {
                Ok(()) => Ok((slot, conn)),
                // Servers end sessions after so many messages or commands (`421`, or just
                // closing): a pooled connection may be spent. Nothing of this message was
                // accepted yet, so it goes once more on a fresh connection.
                Err(e) if reused && session_ended(&e) => {
                    let mut conn = self.connect().await.map_err(|e| self.certain(&e))?;
                    match self.envelope(&mut conn, envelope, bytes).await {
                        Ok(()) => Ok((slot, conn)),
                        Err(e) => Err(self.certain(&e)),
                    }
                }
                Err(e) => Err(self.certain(&e)),
            }
        })
        .await;
        let (slot, mut conn) = match envelope_sent {
            Ok(sent) => sent?,
            // Nothing was sent past `DATA`: the server has no message.
            Err(_) if !slotted.load(Ordering::Relaxed) => {
                return Err(MailFailure::certain(UpstreamError::Busy {
                    waited: request,
                }));
            }
            Err(_) => {
                return Err(MailFailure::certain(UpstreamError::Timeout {
                    after: request,
                }));
            }
        };
        let data = self.settings.data_timeout;
        let reply = match tokio::time::timeout(data, conn.message(bytes)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                // A reply code is the server's answer: it refused the message. Anything else
                // (a lost connection) leaves the message's fate unknown.
                let error = self.classify(&e);
                let unconfirmed = e.status().is_none();
                return Err(MailFailure { error, unconfirmed });
            }
            Err(_) => {
                return Err(MailFailure {
                    error: UpstreamError::Timeout { after: data },
                    unconfirmed: true,
                });
            }
        };
        // A clean end: the connection may carry the next message.
        self.park(conn);
        drop(slot);
        Ok(reply_text(&reply))
    }

    /// `MAIL`, `RCPT` for each recipient, `DATA` answered by 354.
    async fn envelope(
        &self,
        conn: &mut AsyncSmtpConnection,
        envelope: &Envelope,
        bytes: &[u8],
    ) -> Result<(), lettre::transport::smtp::Error> {
        let mut options = Vec::new();
        let info = conn.server_info();
        let non_ascii = envelope
            .from()
            .into_iter()
            .chain(envelope.to())
            .any(|a| !AsRef::<str>::as_ref(a).is_ascii());
        if non_ascii && info.supports_feature(Extension::SmtpUtfEight) {
            options.push(MailParameter::SmtpUtfEight);
        }
        if !bytes.is_ascii() && info.supports_feature(Extension::EightBitMime) {
            options.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        conn.command(Mail::new(envelope.from().cloned(), options))
            .await?;
        for to in envelope.to() {
            conn.command(Rcpt::new(to.clone(), Vec::new())).await?;
        }
        conn.command(Data).await?;
        Ok(())
    }

    /// An idle connection that still answers `NOOP` (`true`: reused), or a new one.
    async fn connection(
        &self,
    ) -> Result<(AsyncSmtpConnection, bool), lettre::transport::smtp::Error> {
        loop {
            let idle = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                idle.retain(|(_, since)| since.elapsed() < POOL_IDLE_TIMEOUT);
                idle.pop()
            };
            let Some((mut conn, _)) = idle else {
                break;
            };
            if conn.test_connected().await {
                return Ok((conn, true));
            }
        }
        Ok((self.connect().await?, false))
    }

    /// A new connection: TLS, EHLO, AUTH.
    async fn connect(&self) -> Result<AsyncSmtpConnection, lettre::transport::smtp::Error> {
        let wrapper = match &self.tls {
            Tls::Wrapper(parameters) => Some(parameters.clone()),
            _ => None,
        };
        let mut conn = AsyncSmtpConnection::connect_tokio1(
            (self.settings.host.as_str(), self.settings.port),
            Some(self.settings.connect_timeout),
            &self.hello,
            wrapper,
            None,
        )
        .await?;
        match &self.tls {
            Tls::Opportunistic(parameters) if conn.can_starttls() => {
                conn.starttls(parameters.clone(), &self.hello).await?;
            }
            Tls::Required(parameters) => conn.starttls(parameters.clone(), &self.hello).await?,
            _ => {}
        }
        if let Some(credentials) = &self.credentials {
            conn.auth(&[Mechanism::Plain, Mechanism::Login], credentials)
                .await?;
        }
        Ok(conn)
    }

    /// Keeps a connection whose last send ended cleanly for the next message.
    fn park(&self, conn: AsyncSmtpConnection) {
        if conn.has_broken() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.settings.max_concurrency {
            idle.push((conn, Instant::now()));
        }
    }

    /// A failure before the message went out.
    fn certain(&self, error: &lettre::transport::smtp::Error) -> MailFailure {
        MailFailure::certain(self.classify(error))
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

/// The server ended the session rather than answering the command: `421` (service closing
/// the channel) or a connection that is gone.
fn session_ended(error: &lettre::transport::smtp::Error) -> bool {
    error.status().is_none_or(|code| u16::from(code) == 421)
}

/// `250 2.0.0 Ok: queued as …`: the code and the reply's lines.
fn reply_text(response: &Response) -> String {
    let mut reply = response.code().to_string();
    for line in response.message() {
        reply.push(' ');
        reply.push_str(line);
    }
    reply
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
