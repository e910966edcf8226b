//! Shared plumbing for the legacy simulators: an HTTP/1.1 server on a loopback listener, the
//! request recorder and the misbehaviour switch that every simulator answers under `/_sim/`.
//!
//! The simulators stand in for a dealer's legacy systems in `aap-gateway demo` and in the tests,
//! so the gateway can be exercised end to end without a real DMS. Each one implements [`SimApp`]
//! (its normal answers and its own flavour of failure); [`serve`] adds the controls:
//!
//! | Call | Effect |
//! |---|---|
//! | `GET /_sim/received` | JSON array of the non-control requests in arrival order (the last [`RECEIVED_CAP`]): `{"method", "path", "query", "headers", "body", "raw_query"}` — `path` as sent (not decoded), `query` an object of decoded name → value (a repeated name's values joined with `,`), `headers` an object of lower-case name → value (repeated headers joined with `, `), `body` a (lossy UTF-8) string, `raw_query` the query string as sent |
//! | `DELETE /_sim/received` | Forgets the recorded requests (204) |
//! | `GET /_sim/mode` | `{"mode": "normal", "delay_ms": 0}` |
//! | `PUT /_sim/mode` | Body `{"mode": M, "delay_ms": N}`; answers the new mode. `normal`; `fail` = HTTP 500 with the system's legacy error body; `slow` = wait `delay_ms` (default 1000) then answer normally; `hang` = read the request and never answer (the task ends when the client goes away, the simulator shuts down, or after [`HANG_CAP`]); `garbage` = 200 with an undecodable body of the right content type; `huge` = 200 with a valid-looking body of about 8 MiB; `commit_502` / `commit_504` = handle the request normally (a lead is stored) and answer a proxy's 502 / 504 instead |
//! | `GET /_sim/fixtures` | Facts tests need (sold VINs, an unknown VIN, counts …), per simulator |
//! | `POST /_sim/reset` | Mode back to `normal`, the recording cleared and the simulator's own state reset ([`SimApp::reset`]: stored leads, for the intakes) (204) |
//!
//! The mode applies to every request outside `/_sim/`, before authentication. Simulators never
//! log: what they record stays in memory and is only returned by `/_sim/received`.
//!
//! A simulator that also speaks something other than HTTP (the SMTP intake) serves these controls
//! on an HTTP listener of its own and reaches the same state through a [`SimControl`]: it reads
//! the mode from there and [records](SimControl::record) its own transactions, which then appear
//! in `/_sim/received` next to the HTTP requests. Its tasks are [adopted](SimHandle::adopt) by
//! the [`SimHandle`], so they end with it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A simulator's response: everything is built in memory.
pub type SimResponse = Response<Full<Bytes>>;

/// How many requests `/_sim/received` remembers (the oldest are dropped first).
pub const RECEIVED_CAP: usize = 1000;

/// A `hang` request is answered (504) after this long at the latest, so no task lives forever.
pub const HANG_CAP: Duration = Duration::from_secs(600);

/// The `slow` delay when `PUT /_sim/mode` names none.
pub const DEFAULT_SLOW_MS: u64 = 1000;

/// The size `huge` bodies reach at least.
pub const HUGE_BYTES: usize = 8 * 1024 * 1024;

/// Request bodies larger than this are refused with 413.
const MAX_REQUEST_BODY: usize = 16 * 1024 * 1024;

/// One system's behaviour behind the shared controls.
pub trait SimApp: Send + Sync + 'static {
    /// The normal answer to a request outside `/_sim/`.
    fn handle(&self, req: &SimRequest) -> SimResponse;
    /// The body of `GET /_sim/fixtures`.
    fn fixtures(&self) -> Value;
    /// The `fail` answer to `req`: HTTP 500 with this system's legacy error body.
    fn fail(&self, req: &SimRequest) -> SimResponse;
    /// The `garbage` answer to `req`: 200, the content type `req`'s route answers with, a body
    /// no decoder accepts.
    fn garbage(&self, req: &SimRequest) -> SimResponse;
    /// The `huge` answer to `req`: 200 with a body of at least [`HUGE_BYTES`] that looks like
    /// what `req`'s route answers.
    fn huge(&self, req: &SimRequest) -> SimResponse;
    /// Forgets what the simulator stored (`POST /_sim/reset`); simulators without state keep
    /// this default, which does nothing.
    fn reset(&self) {}
}

/// A request as a simulator sees it: body read in full, query decoded.
#[derive(Debug, Clone)]
pub struct SimRequest {
    pub method: Method,
    /// The path as sent (percent-encoding kept).
    pub path: String,
    /// The query string as sent, without `?` (empty when none).
    pub raw_query: String,
    /// Decoded `name=value` pairs in order (`+` is a space).
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl SimRequest {
    /// A query parameter by case-insensitive name (legacy systems are lenient about that). A
    /// repeated parameter's non-empty values are joined with `,`; absent or empty gives `None`.
    pub fn param(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .query
            .iter()
            .filter(|(k, v)| k.eq_ignore_ascii_case(name) && !v.trim().is_empty())
            .map(|(_, v)| v.trim())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    /// A header's value as text, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The path's segments, percent-decoded, empty ones (double or trailing `/`) dropped.
    pub fn segments(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s, false))
            .collect()
    }

    /// The JSON entry `/_sim/received` reports for this request.
    fn record(&self) -> Value {
        let mut query = Map::new();
        for (k, v) in &self.query {
            match query.get_mut(k) {
                Some(Value::String(existing)) => {
                    existing.push(',');
                    existing.push_str(v);
                }
                _ => {
                    query.insert(k.clone(), Value::String(v.clone()));
                }
            }
        }
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            match headers.get_mut(name.as_str()) {
                Some(Value::String(existing)) => {
                    existing.push_str(", ");
                    existing.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(value));
                }
            }
        }
        json!({
            "method": self.method.as_str(),
            "path": self.path,
            "query": query,
            "headers": headers,
            "body": String::from_utf8_lossy(&self.body),
            "raw_query": self.raw_query,
        })
    }
}

/// How a simulator behaves, switched with `PUT /_sim/mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    Fail,
    Slow,
    Hang,
    Garbage,
    Huge,
    /// The request is handled (a lead is stored) and then a load balancer's `502` is answered
    /// instead: the caller cannot tell that the system committed.
    Commit502,
    /// As [`Mode::Commit502`], with a gateway timeout's `504`.
    Commit504,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Fail => "fail",
            Mode::Slow => "slow",
            Mode::Hang => "hang",
            Mode::Garbage => "garbage",
            Mode::Huge => "huge",
            Mode::Commit502 => "commit_502",
            Mode::Commit504 => "commit_504",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        [
            Mode::Normal,
            Mode::Fail,
            Mode::Slow,
            Mode::Hang,
            Mode::Garbage,
            Mode::Huge,
            Mode::Commit502,
            Mode::Commit504,
        ]
        .into_iter()
        .find(|m| m.as_str().eq_ignore_ascii_case(s.trim()))
    }
}

/// The current mode and its delay (only `slow` uses the delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeSetting {
    pub mode: Mode,
    pub delay_ms: u64,
}

impl ModeSetting {
    fn to_json(self) -> Value {
        json!({ "mode": self.mode.as_str(), "delay_ms": self.delay_ms })
    }
}

struct Shared {
    app: Arc<dyn SimApp>,
    mode: Mutex<ModeSetting>,
    received: Mutex<VecDeque<Value>>,
}

impl Shared {
    fn mode(&self) -> ModeSetting {
        *lock(&self.mode)
    }

    /// Appends to `/_sim/received`, dropping the oldest entry beyond [`RECEIVED_CAP`].
    fn record(&self, entry: Value) {
        let mut received = lock(&self.received);
        if received.len() >= RECEIVED_CAP {
            received.pop_front();
        }
        received.push_back(entry);
    }
}

/// A cloneable way into a running simulator's controls, for the parts of it that do not go
/// through [`serve`] (the SMTP side of the SMTP intake).
#[derive(Clone)]
pub struct SimControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SimControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimControl")
            .field("mode", &self.shared.mode())
            .finish_non_exhaustive()
    }
}

impl SimControl {
    /// The mode `PUT /_sim/mode` set last.
    pub fn mode(&self) -> ModeSetting {
        self.shared.mode()
    }

    /// Records a transaction as `/_sim/received` reports it. Entries should have the shape of
    /// the HTTP ones (`method`, `path`, `query`, `headers`, `body`, `raw_query`).
    pub fn record(&self, entry: Value) {
        self.shared.record(entry);
    }
}

/// A running simulator. Dropping it (or [`SimHandle::shutdown`]) stops the server and every
/// connection it holds, hanging ones included.
pub struct SimHandle {
    /// The loopback address the simulator listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    /// Further tasks of the same simulator (another protocol's listener), stopped with it.
    adopted: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for SimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What `GET /_sim/received` would answer.
    pub fn received(&self) -> Vec<Value> {
        lock(&self.shared.received).iter().cloned().collect()
    }

    /// What `DELETE /_sim/received` does.
    pub fn clear_received(&self) {
        lock(&self.shared.received).clear();
    }

    /// What `PUT /_sim/mode` does.
    pub fn set_mode(&self, mode: Mode, delay_ms: u64) {
        *lock(&self.shared.mode) = ModeSetting { mode, delay_ms };
    }

    /// What `GET /_sim/mode` reports.
    pub fn mode(&self) -> ModeSetting {
        self.shared.mode()
    }

    /// What `GET /_sim/fixtures` answers.
    pub fn fixtures(&self) -> Value {
        self.shared.app.fixtures()
    }

    /// Adds an entry to `/_sim/received` (see [`SimControl::record`]).
    pub fn record(&self, entry: Value) {
        self.shared.record(entry);
    }

    /// A cloneable handle on the mode and the recorder, for tasks outside the HTTP server.
    pub fn control(&self) -> SimControl {
        SimControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Ties `task` to this simulator: it is aborted when the handle is dropped or shut down.
    /// A task that owns its connections (in a `JoinSet`) thereby ends them all.
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.adopted.push(task);
    }

    /// Stops the server (and every adopted task) and waits until they are gone.
    pub async fn shutdown(mut self) {
        self.task.abort();
        for task in &self.adopted {
            task.abort();
        }
        let _ = (&mut self.task).await;
        for task in &mut self.adopted {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.task.abort();
        for task in &self.adopted {
            task.abort();
        }
    }
}

/// `GET url`, answered as JSON: the tests' way to read a simulator's controls over HTTP.
#[cfg(test)]
pub(crate) async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

/// Binds `127.0.0.1:0`, the only kind of address simulators are meant to use.
pub async fn bind_loopback() -> std::io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await
}

/// Serves `app` on a fresh loopback listener ([`bind_loopback`]) until the handle is dropped.
pub async fn start(app: Arc<dyn SimApp>) -> std::io::Result<SimHandle> {
    serve(bind_loopback().await?, app)
}

/// Serves `app` (with the `/_sim/` controls) on `listener` until the handle is dropped. Must be
/// called inside a Tokio runtime. The caller chooses the listener; keep it on loopback.
pub fn serve(listener: TcpListener, app: Arc<dyn SimApp>) -> std::io::Result<SimHandle> {
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        app,
        mode: Mutex::new(ModeSetting {
            mode: Mode::Normal,
            delay_ms: 0,
        }),
        received: Mutex::new(VecDeque::new()),
    });
    let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
    Ok(SimHandle {
        addr,
        shared,
        task,
        adopted: Vec::new(),
    })
}

/// Accepts HTTP/1.1 connections for the `/_sim/` controls and `shared`'s app until aborted.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    accept_each(listener, move |stream| {
        let shared = Arc::clone(&shared);
        let service = hyper::service::service_fn(move |req| {
            let shared = Arc::clone(&shared);
            async move { Ok::<_, Infallible>(dispatch(&shared, req).await) }
        });
        async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await
}

/// Accepts on `listener` until aborted and runs `connection` for each (`TCP_NODELAY` set). The
/// connections live in a `JoinSet` owned by this task, so aborting the task drops the set and
/// with it every connection (a `hang` in progress included).
pub(crate) async fn accept_each<F, C>(listener: TcpListener, mut connection: F)
where
    F: FnMut(TcpStream) -> C,
    C: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(connection(stream));
                }
                // Usually EMFILE: back off briefly instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn dispatch(shared: &Shared, req: Request<Incoming>) -> SimResponse {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
    };
    let raw_query = parts.uri.query().unwrap_or_default().to_owned();
    let req = SimRequest {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        query: parse_query(&raw_query),
        raw_query,
        headers: parts.headers,
        body,
    };
    if let Some(control) = req.path.strip_prefix("/_sim/") {
        return controls(shared, control.trim_end_matches('/'), &req);
    }
    shared.record(req.record());
    let setting = shared.mode();
    match setting.mode {
        Mode::Normal => shared.app.handle(&req),
        Mode::Fail => shared.app.fail(&req),
        Mode::Slow => {
            tokio::time::sleep(Duration::from_millis(setting.delay_ms)).await;
            shared.app.handle(&req)
        }
        Mode::Hang => {
            tokio::time::sleep(HANG_CAP).await;
            text(StatusCode::GATEWAY_TIMEOUT, "hung request released")
        }
        Mode::Garbage => shared.app.garbage(&req),
        Mode::Huge => shared.app.huge(&req),
        Mode::Commit502 | Mode::Commit504 => {
            // Committed behind the proxy; the proxy's answer is all the caller sees.
            let _committed = shared.app.handle(&req);
            if setting.mode == Mode::Commit502 {
                text(StatusCode::BAD_GATEWAY, "bad gateway")
            } else {
                text(StatusCode::GATEWAY_TIMEOUT, "gateway timeout")
            }
        }
    }
}

fn controls(shared: &Shared, control: &str, req: &SimRequest) -> SimResponse {
    match (control, &req.method) {
        ("received", &Method::GET) => {
            let received: Vec<Value> = lock(&shared.received).iter().cloned().collect();
            json_response(StatusCode::OK, &Value::Array(received))
        }
        ("received", &Method::DELETE) => {
            lock(&shared.received).clear();
            empty(StatusCode::NO_CONTENT)
        }
        ("mode", &Method::GET) => json_response(StatusCode::OK, &shared.mode().to_json()),
        ("mode", &Method::PUT) => match parse_mode(&req.body) {
            Ok(setting) => {
                *lock(&shared.mode) = setting;
                json_response(StatusCode::OK, &setting.to_json())
            }
            Err(message) => json_response(StatusCode::BAD_REQUEST, &json!({ "error": message })),
        },
        ("fixtures", &Method::GET) => json_response(StatusCode::OK, &shared.app.fixtures()),
        ("reset", &Method::POST) => {
            lock(&shared.received).clear();
            *lock(&shared.mode) = ModeSetting {
                mode: Mode::Normal,
                delay_ms: 0,
            };
            shared.app.reset();
            empty(StatusCode::NO_CONTENT)
        }
        ("received" | "mode" | "fixtures" | "reset", _) => json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({ "error": "method not allowed" }),
        ),
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({ "error": "unknown simulator control" }),
        ),
    }
}

fn parse_mode(body: &[u8]) -> Result<ModeSetting, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let mode = value
        .get("mode")
        .and_then(Value::as_str)
        .and_then(Mode::parse)
        .ok_or(
            "mode must be one of normal, fail, slow, hang, garbage, huge, commit_502, commit_504",
        )?;
    let delay_ms = match value.get("delay_ms") {
        None | Some(Value::Null) => {
            if mode == Mode::Slow {
                DEFAULT_SLOW_MS
            } else {
                0
            }
        }
        Some(v) => v
            .as_u64()
            .or_else(|| {
                // JSON clients send whole numbers as 20.0.
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= 86_400_000.0)
                    .map(|f| f as u64)
            })
            .ok_or("delay_ms must be a non-negative whole number")?,
    };
    Ok(ModeSetting { mode, delay_ms })
}

/// Decodes an `application/x-www-form-urlencoded` query into pairs, in order.
pub fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Percent-decodes `s` (and `+` as a space when `plus_is_space`); invalid escapes are kept as
/// they are and invalid UTF-8 is replaced, as lenient legacy servers do.
pub fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A response with a body and a content type.
pub fn bytes_response(status: StatusCode, content_type: &'static str, body: Bytes) -> SimResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: &Value) -> SimResponse {
    bytes_response(
        status,
        "application/json; charset=utf-8",
        Bytes::from(body.to_string()),
    )
}

/// A plain-text response.
pub fn text(status: StatusCode, body: &'static str) -> SimResponse {
    bytes_response(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(body.as_bytes()),
    )
}

fn empty(status: StatusCode) -> SimResponse {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// Locks, recovering from poisoning (a panicked handler never leaves these half-updated; the
/// simulators keep their state consistent under every lock they take).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl SimApp for Echo {
        fn handle(&self, req: &SimRequest) -> SimResponse {
            json_response(StatusCode::OK, &json!({ "segments": req.segments() }))
        }
        fn fixtures(&self) -> Value {
            json!({ "echo": true })
        }
        fn fail(&self, _: &SimRequest) -> SimResponse {
            json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({ "ErrorCode": "BOOM" }),
            )
        }
        fn garbage(&self, _: &SimRequest) -> SimResponse {
            bytes_response(
                StatusCode::OK,
                "application/json",
                Bytes::from_static(b"{\"x\xff"),
            )
        }
        fn huge(&self, _: &SimRequest) -> SimResponse {
            bytes_response(
                StatusCode::OK,
                "application/json",
                Bytes::from(format!("\"{}\"", "a".repeat(HUGE_BYTES))),
            )
        }
    }

    async fn start() -> SimHandle {
        super::start(Arc::new(Echo)).await.expect("start")
    }

    #[test]
    fn query_decoding() {
        let q = parse_query("make=Toyota%2CHonda&q=rav4+xle&empty=&flag&bad=%zz%4");
        assert_eq!(
            q,
            vec![
                ("make".into(), "Toyota,Honda".into()),
                ("q".into(), "rav4 xle".into()),
                ("empty".into(), "".into()),
                ("flag".into(), "".into()),
                ("bad".into(), "%zz%4".into()),
            ]
        );
        assert_eq!(percent_decode("a%20b+c", false), "a b+c");
        assert_eq!(percent_decode("%E2%82%AC", false), "€");
        assert_eq!(percent_decode("100%", true), "100%");
    }

    #[test]
    fn mode_bodies() {
        let slow = parse_mode(br#"{"mode":"slow"}"#).expect("slow");
        assert_eq!(slow.delay_ms, DEFAULT_SLOW_MS);
        let slow = parse_mode(br#"{"mode":"SLOW","delay_ms":20.0}"#).expect("slow 20");
        assert_eq!(slow.delay_ms, 20);
        assert!(parse_mode(br#"{"mode":"sideways"}"#).is_err());
        assert!(parse_mode(br#"{"mode":"slow","delay_ms":-1}"#).is_err());
        assert!(parse_mode(b"nope").is_err());
    }

    #[tokio::test]
    async fn records_requests_and_controls() {
        let sim = start().await;
        let base = sim.base_url();
        let client = reqwest::Client::new();
        let r = client
            .post(format!("{base}/a%20b/c?x=1&x=2&y=h%C3%A9"))
            .header("X-Thing", "v")
            .body("hello")
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["segments"], json!(["a b", "c"]));

        let received: Value = get_json(&format!("{base}/_sim/received")).await;
        let entries = received.as_array().expect("array");
        assert_eq!(entries.len(), 1, "control calls are not recorded");
        let e = &entries[0];
        assert_eq!(e["method"], "POST");
        assert_eq!(e["path"], "/a%20b/c");
        assert_eq!(e["query"], json!({ "x": "1,2", "y": "hé" }));
        assert_eq!(e["raw_query"], "x=1&x=2&y=h%C3%A9");
        assert_eq!(e["headers"]["x-thing"], "v");
        assert_eq!(e["body"], "hello");
        assert_eq!(sim.received().len(), 1);

        let r = client
            .delete(format!("{base}/_sim/received"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 204);
        assert!(sim.received().is_empty());

        let fixtures: Value = get_json(&format!("{base}/_sim/fixtures")).await;
        assert_eq!(fixtures, json!({ "echo": true }));

        let r = client
            .get(format!("{base}/_sim/nope"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 404);
        let r = client
            .put(format!("{base}/_sim/mode"))
            .body("{}")
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 400);
    }

    #[tokio::test]
    async fn received_is_bounded() {
        let sim = start().await;
        let base = sim.base_url();
        let client = reqwest::Client::new();
        for i in 0..(RECEIVED_CAP + 5) {
            client
                .get(format!("{base}/n?i={i}"))
                .send()
                .await
                .expect("send");
        }
        let received = sim.received();
        assert_eq!(received.len(), RECEIVED_CAP);
        assert_eq!(received[0]["query"]["i"], "5");
    }

    #[tokio::test]
    async fn every_mode() {
        let sim = start().await;
        let base = sim.base_url();
        let client = reqwest::Client::new();
        let put = |mode: Value| {
            let client = client.clone();
            let base = base.clone();
            async move {
                let r = client
                    .put(format!("{base}/_sim/mode"))
                    .json(&mode)
                    .send()
                    .await
                    .expect("send");
                assert_eq!(r.status(), 200);
                r.json::<Value>().await.expect("json")
            }
        };

        assert_eq!(put(json!({"mode": "fail"})).await["mode"], "fail");
        let r = client.get(format!("{base}/x")).send().await.expect("send");
        assert_eq!(r.status(), 500);

        put(json!({"mode": "slow", "delay_ms": 300})).await;
        let started = std::time::Instant::now();
        let r = client.get(format!("{base}/x")).send().await.expect("send");
        assert_eq!(r.status(), 200);
        assert!(started.elapsed() >= Duration::from_millis(300));

        put(json!({"mode": "garbage"})).await;
        let r = client.get(format!("{base}/x")).send().await.expect("send");
        assert_eq!(r.status(), 200);
        assert!(serde_json::from_slice::<Value>(&r.bytes().await.expect("body")).is_err());

        put(json!({"mode": "huge"})).await;
        let r = client.get(format!("{base}/x")).send().await.expect("send");
        assert!(r.bytes().await.expect("body").len() >= HUGE_BYTES);

        put(json!({"mode": "hang"})).await;
        let r = client
            .get(format!("{base}/x"))
            .timeout(Duration::from_millis(200))
            .send()
            .await;
        assert!(r.expect_err("hangs").is_timeout());

        let mode: Value = get_json(&format!("{base}/_sim/mode")).await;
        assert_eq!(mode, json!({"mode": "hang", "delay_ms": 0}));

        let r = client
            .post(format!("{base}/_sim/reset"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 204);
        assert_eq!(sim.mode().mode, Mode::Normal);
        assert!(sim.received().is_empty());
        let r = client.get(format!("{base}/x")).send().await.expect("send");
        assert_eq!(r.status(), 200);
    }

    #[tokio::test]
    async fn shutdown_releases_hanging_requests() {
        let sim = start().await;
        sim.set_mode(Mode::Hang, 0);
        let url = format!("{}/x", sim.base_url());
        let pending = tokio::spawn(async move { reqwest::get(url).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let addr = sim.addr;
        sim.shutdown().await;
        // The hanging connection is closed, so the client sees an error instead of waiting.
        let outcome = tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("released")
            .expect("task");
        assert!(outcome.is_err());
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    /// An app with state, to see `POST /_sim/reset` reach it.
    #[derive(Default)]
    struct Stateful {
        resets: std::sync::atomic::AtomicUsize,
    }

    impl SimApp for Stateful {
        fn handle(&self, _: &SimRequest) -> SimResponse {
            empty(StatusCode::NO_CONTENT)
        }
        fn fixtures(&self) -> Value {
            json!({ "resets": self.resets.load(std::sync::atomic::Ordering::SeqCst) })
        }
        fn fail(&self, _: &SimRequest) -> SimResponse {
            empty(StatusCode::INTERNAL_SERVER_ERROR)
        }
        fn garbage(&self, _: &SimRequest) -> SimResponse {
            empty(StatusCode::OK)
        }
        fn huge(&self, _: &SimRequest) -> SimResponse {
            empty(StatusCode::OK)
        }
        fn reset(&self) {
            self.resets
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn side_channels_record_and_read_the_mode() {
        let sim = start().await;
        let control = sim.control();
        control.record(
            json!({"method": "SMTP", "path": "", "query": {}, "headers": {},
            "body": "hi", "raw_query": ""}),
        );
        sim.record(json!({"method": "OTHER"}));
        let client = reqwest::Client::new();
        let received: Value = get_json(&format!("{}/_sim/received", sim.base_url())).await;
        assert_eq!(received[0]["method"], "SMTP");
        assert_eq!(received[0]["body"], "hi");
        assert_eq!(received[1]["method"], "OTHER");

        let r = client
            .put(format!("{}/_sim/mode", sim.base_url()))
            .body(r#"{"mode": "slow", "delay_ms": 5}"#)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
        assert_eq!(
            control.mode(),
            ModeSetting {
                mode: Mode::Slow,
                delay_ms: 5
            }
        );
    }

    #[tokio::test]
    async fn reset_reaches_the_app() {
        let sim = super::start(Arc::new(Stateful::default()))
            .await
            .expect("start");
        let r = reqwest::Client::new()
            .post(format!("{}/_sim/reset", sim.base_url()))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 204);
        assert_eq!(sim.fixtures(), json!({ "resets": 1 }));
    }

    #[tokio::test]
    async fn adopted_tasks_end_with_the_handle() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut sim = start().await;
        sim.adopt(tokio::spawn(async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        }));
        drop(sim);
        // The sender is dropped with the aborted task, so the receiver learns of it.
        let outcome = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("task ended");
        assert!(outcome.is_err());

        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut sim = start().await;
        sim.adopt(tokio::spawn(async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        }));
        sim.shutdown().await;
        assert!(rx.await.is_err());
    }
}
