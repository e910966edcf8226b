//! The SMTP lead intake simulator: a dealer CRM's intake mailbox, the way most dealer CRMs still
//! take leads — an e-mail whose body is an ADF/XML document (docs/protocol.md §Lead delivery
//! and ADF).
//!
//! It is what `aap-gateway demo` and the tests put behind the gateway's lettre-based mailer
//! (`kind: smtp` upstreams). Two listeners on loopback ephemeral ports:
//!
//! - **SMTP** ([`SmtpIntake::smtp_addr`]): a small hand-written ESMTP server (RFC 5321 with
//!   AUTH, RFC 4954). **Plain text only**: STARTTLS is neither advertised nor accepted, so
//!   clients must be configured without TLS (lettre: `builder_dangerous`, `starttls: off`).
//! - **HTTP** ([`SmtpIntake::control`]): the shared `/_sim/` controls of [`sim`]; every other
//!   path answers 404.
//!
//! ## The SMTP dialogue
//!
//! | Command | Answer |
//! |---|---|
//! | (connect) | `220 crm.demo-honda.example ESMTP lead intake ready` |
//! | `EHLO name` | `250` with `AUTH PLAIN LOGIN`, `SIZE 1048576`, `8BITMIME` |
//! | `HELO name` | `250` (no extensions, so no AUTH: mail cannot be sent after HELO alone) |
//! | `AUTH PLAIN [initial]` / `AUTH LOGIN [user]` | after EHLO; `235` for `demo-smtp` / `smtp-secret`, else `535`; `*` cancels (`501`) |
//! | `MAIL FROM:<addr> [SIZE=n …]` | `250`; before HELO/EHLO `503`; before AUTH `530`; `SIZE` over the limit `552` |
//! | `RCPT TO:<addr>` | `250` for `leads@crm.demo-honda.example` (any case), else `550`; before MAIL `503` |
//! | `DATA` | `354`, then the message up to `<CRLF>.<CRLF>`, dot-unstuffed; over [`MAX_MESSAGE_BYTES`] → `552`; else `250 2.0.0 Ok: queued as DEMO000001` |
//! | `RSET`, `NOOP`, `QUIT` | `250`, `250`, `221` and close |
//! | `STARTTLS` | `502` (not offered: plain text only) |
//! | anything else | `500` |
//!
//! Bounds, so no client can hold the simulator: command lines of at most
//! [`MAX_COMMAND_LINE`] bytes (`500` beyond), at most [`MAX_COMMANDS`] commands per connection
//! (then `421` and close), an idle timeout of [`IDLE_TIMEOUT`] per line (`421` and close), and
//! [`sim::HANG_CAP`] for a whole connection. Every connection ends when the control
//! [`SimHandle`] is dropped.
//!
//! ## What it keeps
//!
//! Every completed `DATA` is recorded in `/_sim/received` as `{"method": "SMTP", "path": "",
//! "query": {}, "headers": {"mail-from": …, "rcpt-to": "a, b"}, "body": "<raw message>",
//! "raw_query": ""}` — in every mode, as the HTTP simulators record requests before misbehaving.
//!
//! An accepted message (mode `normal` or `slow`) is parsed with mail-parser and kept, the last
//! [`sim::RECEIVED_CAP`] of them, in `GET /_sim/fixtures`:
//!
//! ```text
//! {"messages": [{"from", "to": [..], "subject", "message_id", "adf", "consent"}],
//!  "username": "demo-smtp", "password": "smtp-secret",
//!  "recipient": "leads@crm.demo-honda.example", "smtp_addr": "127.0.0.1:PORT"}
//! ```
//!
//! `from` and `to` are the header addresses, `message_id` is without angle brackets (absent
//! headers give `null`). `adf` is the lead as [`adf_parse::parse`] reads the first
//! `text/xml` or `application/xml` part (else the first `text/plain` one), or `{"error":
//! "<reason>"}` — a real intake accepts the mail and fails the lead later, so a bad document
//! does not change the SMTP answer. `consent` is the attachment named `consent.json` parsed as
//! JSON, `{"error": "consent.json is not JSON"}`, or `null` without one.
//!
//! Misbehaviour applies to the reply to the end of `DATA` (the message is read in full first):
//! `fail` → `451 4.3.0 Mail server temporarily unavailable`, nothing kept; `slow` → the reply
//! after `delay_ms`; `hang` → no reply until the client goes away; `garbage` → a line that is
//! not SMTP, nothing kept; `huge` → `552`, nothing kept.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http::StatusCode;
use mail_parser::{MessageParser, MimeHeaders, PartType};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::adf_parse;
use super::sim::{self, Mode, SimApp, SimControl, SimHandle, SimRequest, SimResponse, lock};

/// The only user name the server accepts.
pub const USERNAME: &str = "demo-smtp";
/// Its password.
pub const PASSWORD: &str = "smtp-secret";
/// The only recipient the server accepts mail for.
pub const RECIPIENT: &str = "leads@crm.demo-honda.example";
/// The largest message accepted (advertised as `SIZE`).
pub const MAX_MESSAGE_BYTES: usize = 1_048_576;
/// Longest command line, CRLF included (RFC 5321 allows 512; AUTH responses need a little more).
pub const MAX_COMMAND_LINE: usize = 2048;
/// Most commands one connection may send.
pub const MAX_COMMANDS: usize = 200;
/// A connection that sends nothing for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's name in its greeting.
const HOSTNAME: &str = "crm.demo-honda.example";
/// Most recipients of one message.
const MAX_RECIPIENTS: usize = 100;

/// A running SMTP intake: the SMTP listener and the HTTP control listener.
#[derive(Debug)]
pub struct SmtpIntake {
    /// The `/_sim/` controls (mode, received, fixtures, reset). Dropping it stops the SMTP
    /// server and closes every SMTP connection too.
    pub control: SimHandle,
    /// Where the SMTP server listens (loopback).
    pub smtp_addr: SocketAddr,
}

impl SmtpIntake {
    /// `smtp://127.0.0.1:PORT`, the form the gateway's `kind: smtp` upstreams take.
    pub fn smtp_url(&self) -> String {
        format!("smtp://{}", self.smtp_addr)
    }

    /// The accepted messages, as `GET /_sim/fixtures` lists them.
    pub fn messages(&self) -> Vec<Value> {
        match self.control.fixtures().get_mut("messages").map(Value::take) {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        }
    }
}

/// Binds two `127.0.0.1:0` listeners and serves the SMTP intake on them.
pub async fn start_smtp_intake() -> std::io::Result<SmtpIntake> {
    serve_smtp_intake(sim::bind_loopback().await?, sim::bind_loopback().await?)
}

/// Serves SMTP on `smtp` and the controls on `control` (keep both on loopback). Must be called
/// inside a Tokio runtime.
pub fn serve_smtp_intake(smtp: TcpListener, control: TcpListener) -> std::io::Result<SmtpIntake> {
    serve_with(smtp, control, Limits::default())
}

/// The per-connection bounds (shorter in tests).
#[derive(Debug, Clone, Copy)]
struct Limits {
    idle: Duration,
    max_commands: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle: IDLE_TIMEOUT,
            max_commands: MAX_COMMANDS,
        }
    }
}

fn serve_with(
    smtp: TcpListener,
    control: TcpListener,
    limits: Limits,
) -> std::io::Result<SmtpIntake> {
    let smtp_addr = smtp.local_addr()?;
    let messages = Arc::new(Mutex::new(VecDeque::new()));
    let app = ControlApp {
        smtp_addr,
        messages: Arc::clone(&messages),
    };
    let mut handle = sim::serve(control, Arc::new(app))?;
    let server = Arc::new(Server {
        control: handle.control(),
        messages,
        queued: AtomicU64::new(0),
        limits,
    });
    handle.adopt(tokio::spawn(accept_loop(smtp, server)));
    Ok(SmtpIntake {
        control: handle,
        smtp_addr,
    })
}

// === the HTTP side ===

/// The control listener's app: no API of its own, the fixtures are the kept messages.
struct ControlApp {
    smtp_addr: SocketAddr,
    messages: Arc<Mutex<VecDeque<Value>>>,
}

impl SimApp for ControlApp {
    fn handle(&self, _: &SimRequest) -> SimResponse {
        sim::json_response(
            StatusCode::NOT_FOUND,
            &json!({ "error": "not found: this simulator takes mail over SMTP" }),
        )
    }

    fn fixtures(&self) -> Value {
        let messages: Vec<Value> = lock(&self.messages).iter().cloned().collect();
        json!({
            "messages": messages,
            "username": USERNAME,
            "password": PASSWORD,
            "recipient": RECIPIENT,
            "smtp_addr": self.smtp_addr.to_string(),
        })
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        sim::json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({ "error": "mail server temporarily unavailable" }),
        )
    }

    fn garbage(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            "application/json; charset=utf-8",
            Bytes::from_static(b"{\"error\": \"\xff\xfe<html>"),
        )
    }

    fn huge(&self, _: &SimRequest) -> SimResponse {
        let filler = "x".repeat(sim::HUGE_BYTES);
        sim::json_response(
            StatusCode::OK,
            &json!({ "error": "not found", "trace": filler }),
        )
    }

    fn reset(&self) {
        lock(&self.messages).clear();
    }
}

// === the SMTP side ===

/// What every SMTP connection shares.
struct Server {
    control: SimControl,
    messages: Arc<Mutex<VecDeque<Value>>>,
    queued: AtomicU64,
    limits: Limits,
}

/// Accepts SMTP connections until aborted (the [`SimHandle`] adopted the task, so dropping it
/// ends every connection). However the client behaves, a connection ends after `HANG_CAP`.
async fn accept_loop(listener: TcpListener, server: Arc<Server>) {
    sim::accept_each(listener, move |stream| {
        let server = Arc::clone(&server);
        async move {
            let _ = tokio::time::timeout(sim::HANG_CAP, converse(stream, server)).await;
        }
    })
    .await
}

async fn converse(stream: TcpStream, server: Arc<Server>) {
    let (read, write) = stream.into_split();
    let mut session = Session {
        reader: BufReader::new(read),
        writer: write,
        server,
        greeting: Greeting::None,
        authenticated: false,
        mail_from: None,
        rcpt_to: Vec::new(),
        commands: 0,
    };
    // An I/O error means the client went away; there is nobody to tell.
    let _ = session.run().await;
}

/// One line from the client.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    /// A line without its line end.
    Line(Vec<u8>),
    /// A line longer than allowed (read and thrown away).
    TooLong,
    /// The client closed the connection.
    Closed,
    /// Nothing arrived for the idle timeout.
    Idle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Greeting {
    None,
    Helo,
    Ehlo,
}

/// Whether the conversation goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Close,
}

struct Session {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    server: Arc<Server>,
    greeting: Greeting,
    authenticated: bool,
    mail_from: Option<String>,
    rcpt_to: Vec<String>,
    commands: usize,
}

impl Session {
    async fn run(&mut self) -> std::io::Result<()> {
        self.reply(&format!("220 {HOSTNAME} ESMTP lead intake ready"))
            .await?;
        loop {
            let input = self.next_line(MAX_COMMAND_LINE).await?;
            if matches!(input, Input::Line(_) | Input::TooLong) {
                self.commands += 1;
                if self.commands > self.server.limits.max_commands {
                    return self
                        .reply("421 4.7.0 Too many commands, closing connection")
                        .await;
                }
            }
            let line = match input {
                Input::Line(line) => line,
                Input::TooLong => {
                    self.reply("500 5.5.2 Line too long").await?;
                    continue;
                }
                Input::Closed => return Ok(()),
                Input::Idle => return self.reply(IDLE_REPLY).await,
            };
            if self.command(&String::from_utf8_lossy(&line)).await? == Flow::Close {
                return Ok(());
            }
        }
    }

    async fn command(&mut self, line: &str) -> std::io::Result<Flow> {
        let (verb, args) = match line.split_once(' ') {
            Some((verb, args)) => (verb, args.trim()),
            None => (line.trim(), ""),
        };
        match verb.to_ascii_uppercase().as_str() {
            "EHLO" | "HELO" if args.is_empty() => {
                self.reply("501 5.5.4 Syntax: EHLO hostname").await?;
            }
            "EHLO" => {
                self.greeting = Greeting::Ehlo;
                self.reset_transaction();
                self.reply(&format!(
                    "250-{HOSTNAME} greets you\r\n250-AUTH PLAIN LOGIN\r\n\
                     250-SIZE {MAX_MESSAGE_BYTES}\r\n250 8BITMIME"
                ))
                .await?;
            }
            "HELO" => {
                self.greeting = Greeting::Helo;
                self.reset_transaction();
                self.reply(&format!("250 {HOSTNAME}")).await?;
            }
            "AUTH" => return self.auth(args).await,
            "MAIL" => self.mail(args).await?,
            "RCPT" => self.rcpt(args).await?,
            "DATA" => return self.data(args).await,
            "RSET" => {
                self.reset_transaction();
                self.reply("250 2.0.0 Ok").await?;
            }
            "NOOP" => self.reply("250 2.0.0 Ok").await?,
            "QUIT" => {
                self.reply("221 2.0.0 Bye").await?;
                return Ok(Flow::Close);
            }
            // Known, but this simulator is plain text only.
            "STARTTLS" => self.reply("502 5.5.1 STARTTLS not supported").await?,
            _ => self.reply("500 5.5.2 Command unrecognized").await?,
        }
        Ok(Flow::Continue)
    }

    async fn auth(&mut self, args: &str) -> std::io::Result<Flow> {
        if self.greeting != Greeting::Ehlo {
            self.reply("503 5.5.1 Send EHLO first").await?;
            return Ok(Flow::Continue);
        }
        if self.authenticated {
            self.reply("503 5.5.1 Already authenticated").await?;
            return Ok(Flow::Continue);
        }
        if self.mail_from.is_some() {
            self.reply("503 5.5.1 AUTH not allowed during a mail transaction")
                .await?;
            return Ok(Flow::Continue);
        }
        let (mechanism, initial) = match args.split_once(' ') {
            Some((m, initial)) => (m, Some(initial.trim().to_owned())),
            None => (args, None),
        };
        let credentials = match mechanism.to_ascii_uppercase().as_str() {
            "PLAIN" => {
                let response = match initial {
                    Some(initial) => initial,
                    None => match self.ask("334 ").await? {
                        Ok(response) => response,
                        Err(flow) => return Ok(flow),
                    },
                };
                decode_sasl(&response).and_then(|plain| split_plain(&plain))
            }
            "LOGIN" => {
                let user = match initial {
                    Some(initial) => initial,
                    // "Username:"
                    None => match self.ask("334 VXNlcm5hbWU6").await? {
                        Ok(user) => user,
                        Err(flow) => return Ok(flow),
                    },
                };
                // "Password:"
                let pass = match self.ask("334 UGFzc3dvcmQ6").await? {
                    Ok(pass) => pass,
                    Err(flow) => return Ok(flow),
                };
                decode_sasl(&user).zip(decode_sasl(&pass))
            }
            "" => {
                self.reply("501 5.5.4 Syntax: AUTH mechanism").await?;
                return Ok(Flow::Continue);
            }
            _ => {
                self.reply("504 5.5.4 Unrecognized authentication type")
                    .await?;
                return Ok(Flow::Continue);
            }
        };
        match credentials {
            None => self.reply("501 5.5.2 Cannot decode response").await?,
            Some((user, pass)) if user == USERNAME.as_bytes() && pass == PASSWORD.as_bytes() => {
                self.authenticated = true;
                self.reply("235 2.7.0 Authentication successful").await?;
            }
            Some(_) => {
                self.reply("535 5.7.8 Authentication credentials invalid")
                    .await?;
            }
        }
        Ok(Flow::Continue)
    }

    /// Sends a SASL challenge and reads the client's response; `Err(flow)` when there is none
    /// (cancelled with `*`, too long, or the connection is over) and the reply has been sent.
    async fn ask(&mut self, challenge: &str) -> std::io::Result<Result<String, Flow>> {
        self.reply(challenge).await?;
        Ok(match self.next_line(MAX_COMMAND_LINE).await? {
            Input::Line(line) if line.as_slice() == b"*" => {
                self.reply("501 5.0.0 Authentication cancelled").await?;
                Err(Flow::Continue)
            }
            Input::Line(line) => Ok(String::from_utf8_lossy(&line).trim().to_owned()),
            Input::TooLong => {
                self.reply("500 5.5.2 Line too long").await?;
                Err(Flow::Continue)
            }
            Input::Closed => Err(Flow::Close),
            Input::Idle => {
                self.reply(IDLE_REPLY).await?;
                Err(Flow::Close)
            }
        })
    }

    async fn mail(&mut self, args: &str) -> std::io::Result<()> {
        if self.greeting == Greeting::None {
            return self.reply("503 5.5.1 Send HELO/EHLO first").await;
        }
        if !self.authenticated {
            return self.reply("530 5.7.0 Authentication required").await;
        }
        if self.mail_from.is_some() {
            return self.reply("503 5.5.1 Nested MAIL command").await;
        }
        let Some((address, parameters)) = path_argument(args, "FROM:") else {
            return self.reply("501 5.5.4 Syntax: MAIL FROM:<address>").await;
        };
        let too_big = parameters.split_whitespace().any(|p| {
            p.get(..5).is_some_and(|k| k.eq_ignore_ascii_case("SIZE="))
                && p[5..]
                    .parse::<u64>()
                    .map_or(true, |n| n > MAX_MESSAGE_BYTES as u64)
        });
        if too_big {
            return self.reply(TOO_BIG_REPLY).await;
        }
        self.mail_from = Some(address.to_owned());
        self.reply("250 2.1.0 Ok").await
    }

    async fn rcpt(&mut self, args: &str) -> std::io::Result<()> {
        if self.mail_from.is_none() {
            return self.reply("503 5.5.1 Need MAIL command").await;
        }
        let Some((address, _)) = path_argument(args, "TO:") else {
            return self.reply("501 5.5.4 Syntax: RCPT TO:<address>").await;
        };
        if self.rcpt_to.len() >= MAX_RECIPIENTS {
            return self.reply("452 4.5.3 Too many recipients").await;
        }
        // The refusal does not repeat the address: replies may end up in logs.
        if !address.eq_ignore_ascii_case(RECIPIENT) {
            return self
                .reply("550 5.1.1 Recipient address rejected: no such mailbox")
                .await;
        }
        self.rcpt_to.push(address.to_owned());
        self.reply("250 2.1.5 Ok").await
    }

    async fn data(&mut self, args: &str) -> std::io::Result<Flow> {
        if !args.is_empty() {
            self.reply("501 5.5.4 Syntax: DATA").await?;
            return Ok(Flow::Continue);
        }
        if self.mail_from.is_none() {
            self.reply("503 5.5.1 Need MAIL command").await?;
            return Ok(Flow::Continue);
        }
        if self.rcpt_to.is_empty() {
            self.reply("503 5.5.1 Need RCPT command").await?;
            return Ok(Flow::Continue);
        }
        self.reply("354 End data with <CR><LF>.<CR><LF>").await?;
        let mut message = Vec::new();
        let mut too_big = false;
        loop {
            match self.next_line(MAX_MESSAGE_BYTES + 2).await? {
                Input::Line(line) if line.as_slice() == b"." => break,
                Input::Line(line) => {
                    // Dot-unstuffing (RFC 5321 §4.5.2): the client doubled every leading dot.
                    let line = line.strip_prefix(b".").unwrap_or(&line);
                    too_big = too_big || message.len() + line.len() + 2 > MAX_MESSAGE_BYTES;
                    if too_big {
                        message = Vec::new();
                    } else {
                        message.extend_from_slice(line);
                        message.extend_from_slice(b"\r\n");
                    }
                }
                Input::TooLong => {
                    too_big = true;
                    message = Vec::new();
                }
                Input::Closed => return Ok(Flow::Close),
                Input::Idle => {
                    self.reply(IDLE_REPLY).await?;
                    return Ok(Flow::Close);
                }
            }
        }
        let from = self.mail_from.take().unwrap_or_default();
        let to = std::mem::take(&mut self.rcpt_to);
        if too_big {
            self.reply(TOO_BIG_REPLY).await?;
            return Ok(Flow::Continue);
        }
        self.server.control.record(json!({
            "method": "SMTP",
            "path": "",
            "query": {},
            "headers": { "mail-from": from, "rcpt-to": to.join(", ") },
            "body": String::from_utf8_lossy(&message),
            "raw_query": "",
        }));
        let setting = self.server.control.mode();
        match setting.mode {
            Mode::Normal => self.accept(&message).await?,
            Mode::Slow => {
                tokio::time::sleep(Duration::from_millis(setting.delay_ms)).await;
                self.accept(&message).await?;
            }
            Mode::Fail => {
                self.reply("451 4.3.0 Mail server temporarily unavailable")
                    .await?;
            }
            Mode::Hang => {
                self.wait_for_close().await;
                return Ok(Flow::Close);
            }
            Mode::Garbage => {
                self.reply("<html><body>503 Service Unavailable</body></html>")
                    .await?;
            }
            Mode::Huge => self.reply(TOO_BIG_REPLY).await?,
            Mode::Commit502 | Mode::Commit504 => {
                // Taken, then the connection drops before the `250`: the acknowledgement is lost.
                self.keep(&message);
                return Ok(Flow::Close);
            }
        }
        Ok(Flow::Continue)
    }

    /// Keeps the message (parsed) and acknowledges it.
    async fn accept(&mut self, raw: &[u8]) -> std::io::Result<()> {
        let n = self.keep(raw);
        self.reply(&format!("250 2.0.0 Ok: queued as DEMO{n:06}"))
            .await
    }

    /// Keeps the message (parsed); returns its queue number.
    fn keep(&mut self, raw: &[u8]) -> u64 {
        let entry = describe(raw);
        {
            let mut messages = lock(&self.server.messages);
            if messages.len() >= sim::RECEIVED_CAP {
                messages.pop_front();
            }
            messages.push_back(entry);
        }
        self.server.queued.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `hang`: answer nothing, read and drop whatever arrives until the client goes away.
    async fn wait_for_close(&mut self) {
        let mut sink = [0u8; 1024];
        while let Ok(n) = self.reader.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    }

    fn reset_transaction(&mut self) {
        self.mail_from = None;
        self.rcpt_to.clear();
    }

    async fn next_line(&mut self, max: usize) -> std::io::Result<Input> {
        match tokio::time::timeout(self.server.limits.idle, read_line(&mut self.reader, max)).await
        {
            Ok(input) => input,
            Err(_) => Ok(Input::Idle),
        }
    }

    async fn reply(&mut self, text: &str) -> std::io::Result<()> {
        self.writer
            .write_all(format!("{text}\r\n").as_bytes())
            .await?;
        self.writer.flush().await
    }
}

const IDLE_REPLY: &str = "421 4.4.2 Idle timeout, closing connection";
const TOO_BIG_REPLY: &str = "552 5.3.4 Message size exceeds fixed maximum message size";

/// Reads one line of at most `max` bytes (line end included), without its line end. A longer
/// line is read to its end and thrown away, so memory stays bounded whatever the client sends.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> std::io::Result<Input> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(Input::Closed);
        }
        let (chunk, complete) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..=end], true),
            None => (available, false),
        };
        let taken = chunk.len();
        if too_long || line.len() + taken > max {
            too_long = true;
            line.clear();
        } else {
            line.extend_from_slice(chunk);
        }
        reader.consume(taken);
        if complete {
            if too_long {
                return Ok(Input::TooLong);
            }
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Input::Line(line));
        }
    }
}

/// `FROM:<address> params` → (`address`, `params`); the prefix is case-insensitive and a space
/// after the colon is tolerated.
fn path_argument<'a>(args: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let head = args.get(..prefix.len())?;
    if !head.eq_ignore_ascii_case(prefix) {
        return None;
    }
    let rest = args[prefix.len()..].trim_start().strip_prefix('<')?;
    let (address, parameters) = rest.split_once('>')?;
    Some((address.trim(), parameters.trim()))
}

/// A SASL response: base64, or `=` for an empty one (RFC 4954).
fn decode_sasl(response: &str) -> Option<Vec<u8>> {
    if response == "=" {
        return Some(Vec::new());
    }
    BASE64.decode(response.trim()).ok()
}

/// PLAIN's `authzid NUL authcid NUL passwd` → (authcid, passwd), when the authorization id is
/// empty or the user's own.
fn split_plain(plain: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut fields = plain.split(|b| *b == 0);
    match (fields.next(), fields.next(), fields.next(), fields.next()) {
        (Some(authzid), Some(user), Some(pass), None) if authzid.is_empty() || authzid == user => {
            Some((user.to_vec(), pass.to_vec()))
        }
        _ => None,
    }
}

/// What the fixtures keep of an accepted message.
fn describe(raw: &[u8]) -> Value {
    let Some(message) = MessageParser::default().parse(raw) else {
        return json!({
            "from": null, "to": [], "subject": null, "message_id": null,
            "adf": { "error": "message could not be parsed" }, "consent": null,
        });
    };
    let from = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address());
    let to: Vec<&str> = message
        .to()
        .map(|list| list.iter().filter_map(|a| a.address()).collect())
        .unwrap_or_default();
    let is_consent = |part: &&mail_parser::MessagePart<'_>| {
        part.attachment_name()
            .is_some_and(|name| name.eq_ignore_ascii_case("consent.json"))
    };
    // Leaf parts that could hold the document, with their media type (text/plain by default).
    let candidates: Vec<(&mail_parser::MessagePart<'_>, String)> = message
        .parts
        .iter()
        .filter(|part| !matches!(part.body, PartType::Multipart(_) | PartType::Message(_)))
        .filter(|part| !is_consent(part))
        .map(|part| {
            let media = part.content_type().map_or_else(
                || "text/plain".to_owned(),
                |ct| {
                    format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or_default())
                        .to_ascii_lowercase()
                },
            );
            (part, media)
        })
        .collect();
    let document = candidates
        .iter()
        .find(|(_, media)| media == "text/xml" || media == "application/xml")
        .or_else(|| candidates.iter().find(|(_, media)| media == "text/plain"));
    let adf = match document {
        Some((part, _)) => match adf_parse::parse(part.contents()) {
            Ok(lead) => lead,
            Err(e) => json!({ "error": e.to_string() }),
        },
        None => json!({ "error": "no ADF part" }),
    };
    let consent = message
        .parts
        .iter()
        .find(is_consent)
        .map_or(Value::Null, |part| {
            serde_json::from_slice(part.contents())
                .unwrap_or_else(|_| json!({ "error": "consent.json is not JSON" }))
        });
    json!({
        "from": from,
        "to": to,
        "subject": message.subject(),
        "message_id": message.message_id(),
        "adf": adf,
        "consent": consent,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use lettre::message::header::ContentType;
    use lettre::message::{Attachment, MultiPart, SinglePart};
    use lettre::transport::smtp::authentication::{Credentials, Mechanism};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    use super::*;
    use aap_gateway::engine::lead::adf::{self, AdfContext};

    const HOSTILE: &str = "Zoë <b>&amp; \"O'Brien\" ]]> 東京\u{1}";
    const HOSTILE_READ: &str = "Zoë <b>&amp; \"O'Brien\" ]]> 東京";

    fn transport(intake: &SmtpIntake, password: &str) -> AsyncSmtpTransport<Tokio1Executor> {
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(intake.smtp_addr.ip().to_string())
            .port(intake.smtp_addr.port())
            .credentials(Credentials::new(USERNAME.to_owned(), password.to_owned()))
            .timeout(Some(Duration::from_secs(5)))
            .build()
    }

    fn consent() -> Value {
        json!({"granted_at": "2026-04-30T10:16:00Z", "allowed_channels": ["email", "phone"],
            "consent_text": format!("I agree {HOSTILE_READ}"), "scope": ["lead_submission"]})
    }

    fn lead_mail(to: &str) -> Message {
        let request = json!({"type": "lead.submit.request",
            "customer": {"first_name": HOSTILE, "last_name": "Lee", "email": "anna@example.com",
                "phone": "+14155550123"},
            "consent": consent(),
            "vehicle_of_interest": {"vin": "1HGCY2F57RA000001", "year": 2022, "make": "Honda",
                "model": "Civic", "condition": "cpo"},
            "message": format!("Call me. {HOSTILE}\n.\n..leading dots"),
            "source_agent": {"name": "agent"}});
        let document = adf::render(
            &request,
            &AdfContext {
                vendor_name: "Demo Honda",
                reference: "lead-ref-1",
                timezone: &jiff::tz::TimeZone::UTC,
                received_at: jiff::Timestamp::UNIX_EPOCH,
            },
        );
        Message::builder()
            .from(
                "Demo Honda AAP Gateway <aap-leads@gateway.demo-honda.example>"
                    .parse()
                    .expect("from"),
            )
            .to(to.parse().expect("to"))
            .subject("New AAP lead lead-ref-1")
            .message_id(Some("<lead-ref-1@gateway.demo-honda.example>".to_owned()))
            .multipart(
                MultiPart::mixed()
                    .singlepart(
                        SinglePart::builder()
                            .header(
                                ContentType::parse("application/xml; charset=utf-8").expect("ct"),
                            )
                            .body(document),
                    )
                    .singlepart(Attachment::new("consent.json".to_owned()).body(
                        consent().to_string(),
                        ContentType::parse("application/json").expect("ct"),
                    )),
            )
            .expect("message")
    }

    #[tokio::test]
    async fn lettre_delivers_an_adf_lead_with_its_consent() {
        let intake = start_smtp_intake().await.expect("start");
        let response = transport(&intake, PASSWORD)
            .send(lead_mail(RECIPIENT))
            .await
            .expect("sent");
        assert_eq!(u16::from(response.code()), 250);

        let messages = intake.messages();
        assert_eq!(messages.len(), 1);
        let m = &messages[0];
        assert_eq!(m["from"], "aap-leads@gateway.demo-honda.example");
        assert_eq!(m["to"], json!([RECIPIENT]));
        assert_eq!(m["subject"], "New AAP lead lead-ref-1");
        assert_eq!(m["message_id"], "lead-ref-1@gateway.demo-honda.example");
        assert_eq!(m["consent"], consent());
        let lead = &m["adf"];
        assert_eq!(
            lead["id"],
            json!({"source": "aap-gateway", "value": "lead-ref-1"})
        );
        assert_eq!(lead["customer"]["name"], format!("{HOSTILE_READ} Lee"));
        let comments = lead["customer"]["comments"].as_str().expect("comments");
        assert!(
            comments.starts_with(&format!("Call me. {HOSTILE_READ}\n.\n..leading dots\n")),
            "{comments}"
        );
        assert!(
            comments.ends_with(&format!("I agree {HOSTILE_READ}\"")),
            "{comments}"
        );
        assert_eq!(lead["vehicles"][0]["comments"], "certified pre-owned");
        assert_eq!(lead["vendor"]["vendorname"], "Demo Honda");

        let received = intake.control.received();
        assert_eq!(received.len(), 1);
        let r = &received[0];
        assert_eq!(r["method"], "SMTP");
        assert_eq!(r["path"], "");
        assert_eq!(r["query"], json!({}));
        assert_eq!(
            r["headers"]["mail-from"],
            "aap-leads@gateway.demo-honda.example"
        );
        assert_eq!(r["headers"]["rcpt-to"], RECIPIENT);
        assert!(r["body"].as_str().expect("body").contains("consent.json"));

        // The HTTP side: controls work, everything else is 404.
        let client = reqwest::Client::new();
        let fixtures: Value =
            crate::sim::get_json(&format!("{}/_sim/fixtures", intake.control.base_url())).await;
        assert_eq!(fixtures["username"], USERNAME);
        assert_eq!(fixtures["messages"], json!(messages));
        let r = client
            .get(format!("{}/leads", intake.control.base_url()))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 404);
        let r = client
            .post(format!("{}/_sim/reset", intake.control.base_url()))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 204);
        assert!(intake.messages().is_empty());
    }

    #[tokio::test]
    async fn lettre_can_use_auth_login() {
        let intake = start_smtp_intake().await.expect("start");
        let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
            intake.smtp_addr.ip().to_string(),
        )
        .port(intake.smtp_addr.port())
        .credentials(Credentials::new(USERNAME.to_owned(), PASSWORD.to_owned()))
        .authentication(vec![Mechanism::Login])
        .build();
        transport.send(lead_mail(RECIPIENT)).await.expect("sent");
        assert_eq!(intake.messages().len(), 1);
    }

    #[tokio::test]
    async fn wrong_password_is_refused() {
        let intake = start_smtp_intake().await.expect("start");
        let error = transport(&intake, "nope")
            .send(lead_mail(RECIPIENT))
            .await
            .expect_err("refused");
        assert!(error.is_permanent(), "{error}");
        assert_eq!(error.status().map(u16::from), Some(535));
        assert!(intake.messages().is_empty());
        assert!(intake.control.received().is_empty());
    }

    #[tokio::test]
    async fn wrong_recipient_is_refused() {
        let intake = start_smtp_intake().await.expect("start");
        let error = transport(&intake, PASSWORD)
            .send(lead_mail("sales@crm.demo-honda.example"))
            .await
            .expect_err("refused");
        assert_eq!(error.status().map(u16::from), Some(550));
        assert!(intake.messages().is_empty());
    }

    #[tokio::test]
    async fn fail_mode_is_transient_and_keeps_nothing() {
        let intake = start_smtp_intake().await.expect("start");
        intake.control.set_mode(Mode::Fail, 0);
        let error = transport(&intake, PASSWORD)
            .send(lead_mail(RECIPIENT))
            .await
            .expect_err("refused");
        assert!(error.is_transient(), "{error}");
        assert_eq!(error.status().map(u16::from), Some(451));
        assert!(intake.messages().is_empty());
        assert_eq!(
            intake.control.received().len(),
            1,
            "the attempt is recorded"
        );
    }

    #[tokio::test]
    async fn hang_mode_times_the_client_out() {
        let intake = start_smtp_intake().await.expect("start");
        intake.control.set_mode(Mode::Hang, 0);
        let transport = transport(&intake, PASSWORD);
        let outcome = tokio::time::timeout(
            Duration::from_millis(500),
            transport.send(lead_mail(RECIPIENT)),
        )
        .await;
        assert!(outcome.is_err(), "no answer after DATA");
        assert!(intake.messages().is_empty());
        assert_eq!(intake.control.received().len(), 1);
    }

    // === the dialogue, byte by byte ===

    struct Raw {
        reader: BufReader<OwnedReadHalf>,
        writer: OwnedWriteHalf,
    }

    impl Raw {
        async fn connect(addr: SocketAddr) -> Raw {
            let (read, writer) = TcpStream::connect(addr)
                .await
                .expect("connect")
                .into_split();
            let mut raw = Raw {
                reader: BufReader::new(read),
                writer,
            };
            let greeting = raw.reply().await;
            assert!(greeting.starts_with("220 "), "{greeting}");
            raw
        }

        async fn send(&mut self, line: &str) {
            self.writer
                .write_all(format!("{line}\r\n").as_bytes())
                .await
                .expect("write");
        }

        /// One reply, continuation lines joined with `\n`; empty when the server closed.
        async fn reply(&mut self) -> String {
            let mut lines = Vec::new();
            loop {
                let mut line = String::new();
                let n =
                    tokio::time::timeout(Duration::from_secs(5), self.reader.read_line(&mut line))
                        .await
                        .expect("answered in time")
                        .expect("read");
                if n == 0 {
                    return lines.join("\n");
                }
                let line = line.trim_end().to_owned();
                let last = line.as_bytes().get(3) != Some(&b'-');
                lines.push(line);
                if last {
                    return lines.join("\n");
                }
            }
        }

        async fn cmd(&mut self, line: &str) -> String {
            self.send(line).await;
            self.reply().await
        }

        async fn login(&mut self) {
            assert!(self.cmd("EHLO test").await.starts_with("250-"));
            let token = BASE64.encode(format!("\0{USERNAME}\0{PASSWORD}"));
            assert!(
                self.cmd(&format!("AUTH PLAIN {token}"))
                    .await
                    .starts_with("235 ")
            );
        }

        async fn envelope(&mut self) {
            assert!(
                self.cmd("MAIL FROM:<gw@example.com>")
                    .await
                    .starts_with("250 ")
            );
            assert!(
                self.cmd(&format!("RCPT TO:<{RECIPIENT}>"))
                    .await
                    .starts_with("250 ")
            );
        }
    }

    fn code(reply: &str) -> &str {
        reply.get(..3).unwrap_or(reply)
    }

    #[tokio::test]
    async fn dialogue_rules() {
        let intake = start_smtp_intake().await.expect("start");
        let mut c = Raw::connect(intake.smtp_addr).await;
        assert_eq!(code(&c.cmd("MAIL FROM:<a@example.com>").await), "503");
        assert_eq!(code(&c.cmd("EHLO").await), "501");
        let ehlo = c.cmd("EHLO client.example").await;
        let lines: Vec<&str> = ehlo.lines().collect();
        assert_eq!(
            lines[1..],
            ["250-AUTH PLAIN LOGIN", "250-SIZE 1048576", "250 8BITMIME"]
        );
        assert!(!ehlo.contains("STARTTLS"));
        assert_eq!(code(&c.cmd("STARTTLS").await), "502");
        assert_eq!(code(&c.cmd("MAIL FROM:<a@example.com>").await), "530");
        assert_eq!(code(&c.cmd("VRFY someone").await), "500");
        assert_eq!(code(&c.cmd("AUTH CRAM-MD5").await), "504");
        let wrong = BASE64.encode(format!("\0{USERNAME}\0wrong"));
        assert_eq!(code(&c.cmd(&format!("AUTH PLAIN {wrong}")).await), "535");
        assert_eq!(code(&c.cmd("AUTH PLAIN !!!").await), "501");
        assert_eq!(c.cmd("AUTH PLAIN").await, "334");
        assert_eq!(code(&c.cmd("*").await), "501");
        assert_eq!(c.cmd("AUTH LOGIN").await, "334 VXNlcm5hbWU6");
        assert_eq!(c.cmd(&BASE64.encode(USERNAME)).await, "334 UGFzc3dvcmQ6");
        assert_eq!(code(&c.cmd(&BASE64.encode(PASSWORD)).await), "235");
        assert_eq!(code(&c.cmd("AUTH LOGIN").await), "503");
        assert_eq!(code(&c.cmd(&format!("RCPT TO:<{RECIPIENT}>")).await), "503");
        assert_eq!(code(&c.cmd("DATA").await), "503");
        assert_eq!(
            code(&c.cmd("MAIL FROM:<gw@example.com> SIZE=2000000").await),
            "552"
        );
        assert_eq!(code(&c.cmd("MAIL FROM gw@example.com").await), "501");
        assert_eq!(
            code(&c.cmd("mail from: <gw@example.com> SIZE=100").await),
            "250"
        );
        assert_eq!(code(&c.cmd("MAIL FROM:<gw@example.com>").await), "503");
        assert_eq!(code(&c.cmd("DATA").await), "503");
        let refused = c.cmd("RCPT TO:<anna@example.com>").await;
        assert_eq!(code(&refused), "550");
        assert!(!refused.contains("anna"), "replies do not echo addresses");
        assert_eq!(
            code(&c.cmd("RCPT TO:<LEADS@crm.demo-honda.example>").await),
            "250"
        );
        assert_eq!(code(&c.cmd("NOOP").await), "250");
        assert_eq!(code(&c.cmd("RSET").await), "250");
        assert_eq!(
            code(&c.cmd("DATA").await),
            "503",
            "RSET ended the transaction"
        );

        c.envelope().await;
        assert_eq!(code(&c.cmd("DATA").await), "354");
        for line in ["Subject: dots", "", "..leading dot", "...", "last"] {
            c.send(line).await;
        }
        let queued = c.cmd(".").await;
        assert!(
            queued.starts_with("250 2.0.0 Ok: queued as DEMO"),
            "{queued}"
        );
        let received = intake.control.received();
        assert_eq!(
            received[0]["body"],
            "Subject: dots\r\n\r\n.leading dot\r\n..\r\nlast\r\n"
        );
        assert_eq!(received[0]["headers"]["mail-from"], "gw@example.com");
        let kept = intake.messages();
        assert_eq!(kept[0]["subject"], "dots");
        assert_eq!(
            kept[0]["adf"],
            json!({"error": "document is not well-formed XML"})
        );
        assert_eq!(kept[0]["consent"], Value::Null);

        assert_eq!(code(&c.cmd("QUIT").await), "221");
        assert_eq!(c.reply().await, "", "closed after QUIT");
    }

    #[tokio::test]
    async fn oversized_messages_are_refused() {
        let intake = start_smtp_intake().await.expect("start");
        let mut c = Raw::connect(intake.smtp_addr).await;
        c.login().await;
        c.envelope().await;
        assert_eq!(code(&c.cmd("DATA").await), "354");
        let line = "x".repeat(998);
        for _ in 0..(MAX_MESSAGE_BYTES / 1000 + 10) {
            c.send(&line).await;
        }
        assert_eq!(code(&c.cmd(".").await), "552");
        assert!(intake.messages().is_empty());
        assert!(intake.control.received().is_empty());
        assert_eq!(code(&c.cmd("NOOP").await), "250", "the session goes on");

        // One line longer than any message is read through and refused the same way.
        c.envelope().await;
        assert_eq!(code(&c.cmd("DATA").await), "354");
        c.send(&"y".repeat(MAX_MESSAGE_BYTES + 10)).await;
        assert_eq!(code(&c.cmd(".").await), "552");
    }

    #[tokio::test]
    async fn misbehaving_replies_to_data() {
        let intake = start_smtp_intake().await.expect("start");
        let mut c = Raw::connect(intake.smtp_addr).await;
        c.login().await;
        let send = async |c: &mut Raw| {
            c.envelope().await;
            assert_eq!(code(&c.cmd("DATA").await), "354");
            c.send("Subject: x").await;
            c.cmd(".").await
        };

        intake.control.set_mode(Mode::Garbage, 0);
        let garbage = send(&mut c).await;
        assert!(
            !garbage.as_bytes()[..3].iter().all(u8::is_ascii_digit),
            "{garbage}"
        );

        intake.control.set_mode(Mode::Huge, 0);
        assert_eq!(code(&send(&mut c).await), "552");

        intake.control.set_mode(Mode::Slow, 300);
        let started = Instant::now();
        assert_eq!(code(&send(&mut c).await), "250");
        assert!(started.elapsed() >= Duration::from_millis(300));

        assert_eq!(intake.messages().len(), 1, "only the slow one was kept");
        assert_eq!(intake.control.received().len(), 3);
    }

    #[tokio::test]
    async fn idle_and_chatty_connections_are_closed() {
        let intake = serve_with(
            sim::bind_loopback().await.expect("bind"),
            sim::bind_loopback().await.expect("bind"),
            Limits {
                idle: Duration::from_millis(200),
                max_commands: 3,
            },
        )
        .expect("serve");
        let mut c = Raw::connect(intake.smtp_addr).await;
        assert_eq!(code(&c.reply().await), "421", "idle");
        assert_eq!(c.reply().await, "", "then closed");

        let mut c = Raw::connect(intake.smtp_addr).await;
        assert_eq!(code(&c.cmd(&"N".repeat(MAX_COMMAND_LINE + 1)).await), "500");
        assert_eq!(code(&c.cmd("NOOP").await), "250");
        assert_eq!(code(&c.cmd("NOOP").await), "250");
        assert_eq!(code(&c.cmd("NOOP").await), "421", "too many commands");
        assert_eq!(c.reply().await, "");
    }

    #[tokio::test]
    async fn dropping_the_handle_closes_every_connection() {
        let intake = start_smtp_intake().await.expect("start");
        let addr = intake.smtp_addr;
        let mut c = Raw::connect(addr).await;
        c.login().await;
        intake.control.set_mode(Mode::Hang, 0);
        c.envelope().await;
        assert_eq!(code(&c.cmd("DATA").await), "354");
        c.send("Subject: x").await;
        c.send(".").await;
        drop(intake);
        assert_eq!(c.reply().await, "", "the hanging connection is closed");
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[test]
    fn arguments_and_sasl() {
        assert_eq!(
            path_argument("FROM:<a@b.c> SIZE=10 BODY=8BITMIME", "FROM:"),
            Some(("a@b.c", "SIZE=10 BODY=8BITMIME"))
        );
        assert_eq!(path_argument("from: <>", "FROM:"), Some(("", "")));
        assert_eq!(path_argument("TO:a@b.c", "TO:"), None);
        assert_eq!(path_argument("", "TO:"), None);
        assert_eq!(decode_sasl("="), Some(Vec::new()));
        assert_eq!(
            split_plain(b"demo\0demo\0pw"),
            Some((b"demo".to_vec(), b"pw".to_vec()))
        );
        assert_eq!(split_plain(b"other\0demo\0pw"), None);
        assert_eq!(split_plain(b"\0demo"), None);
    }
}
