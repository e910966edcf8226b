//! The HTTP client under the upstreams: connection pool, TLS, proxies, gzip.
//!
//! Built from hyper-util's pooled client, hyper-rustls and tower-http's decompression, the
//! same parts `reqwest` is made of, without the layers a gateway does not use: `reqwest` read
//! every call's URL back from the request's URI twice more (its redirect policy and its reply)
//! and wrapped every call in futures of its own; a mapped search costs 8–11 µs less CPU without
//! them (`bench/README.md`).
//!
//! What a call gets: HTTP/1.1, or HTTP/2 where TLS negotiates it; header names in title case
//! (some legacy HTTP/1 stacks match them case-sensitively); `Accept: */*` and a `User-Agent`
//! unless the call names its own; `Accept-Encoding: gzip`, and gzip replies decoded as they are
//! read; the system's root certificates (read once per process) plus `tls.ca_file`, or no check
//! at all under `tls.insecure_skip_verify`; `timeouts.connect` over the TCP connection, a
//! proxy's tunnel and the TLS handshake together; and the proxy of `HTTPS_PROXY` /
//! `HTTP_PROXY` / `ALL_PROXY` unless `NO_PROXY` names the host (as curl reads them): a tunnel
//! (`CONNECT`) for `https` upstreams, absolute-form requests for `http` ones. Redirects are
//! never followed: a redirect from a back-office API is an answer for the mapping, and
//! following it could carry credentials to another host.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tower::{Service, ServiceExt as _};
use tower_http::decompression::{Decompression, DecompressionBody};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The `User-Agent` sent unless `headers` names another (and on mail).
pub(crate) const USER_AGENT: &str = concat!("aap-gateway/", env!("CARGO_PKG_VERSION"));

/// How a client is built.
#[derive(Debug, Clone)]
pub(crate) struct ClientSettings<'a> {
    pub connect_timeout: Duration,
    pub pool_idle_timeout: Duration,
    pub max_idle_per_host: usize,
    pub insecure_skip_verify: bool,
    /// Trusted besides the system's roots.
    pub ca_certificates: &'a [CertificateDer<'static>],
}

/// A pooled HTTP client. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub(crate) struct HttpClient {
    client: Decompression<Client<Connector, Full<Bytes>>>,
    proxies: Arc<Matcher>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

/// A reply whose body is read as it arrives (decompressed).
pub(crate) type HttpReply = Response<ReplyBody>;

/// The body of a [`HttpReply`].
pub(crate) struct ReplyBody(DecompressionBody<Incoming>);

impl std::fmt::Debug for ReplyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyBody")
    }
}

impl ReplyBody {
    /// The next piece of the body; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, CallError> {
        loop {
            match self.0.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(CallError::Body(e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                    // Trailers: nothing a mapping reads.
                }
            }
        }
    }

    /// The body's exact length, when known before reading it.
    pub(crate) fn exact_len(&self) -> Option<u64> {
        hyper::body::Body::size_hint(&self.0).exact()
    }
}

/// Why a call got no reply.
#[derive(Debug)]
pub(crate) enum CallError {
    /// No connection (refused, unreachable, name not found, TLS handshake, proxy tunnel).
    Connect(BoxError),
    /// No connection within `timeouts.connect`.
    ConnectTimeout,
    /// The connection broke, or the reply was not HTTP.
    Send(BoxError),
    /// The body broke off, or did not decompress.
    Body(BoxError),
}

impl CallError {
    /// A failed TLS handshake: rustls reports it as an `io::Error` of kind `InvalidData`,
    /// possibly wrapped in another `io::Error` (whose `source()` skips the inner one).
    pub(crate) fn is_tls_handshake(&self) -> bool {
        let CallError::Connect(error) = self else {
            return false;
        };
        let mut source: Option<&(dyn StdError + 'static)> = Some(&**error);
        while let Some(e) = source {
            source = match e.downcast_ref::<std::io::Error>() {
                Some(io) if io.kind() == std::io::ErrorKind::InvalidData => return true,
                Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
                None => e.source(),
            };
        }
        false
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Connect(e) => write!(f, "{}", super::error_chain(&**e)),
            CallError::ConnectTimeout => f.write_str("no connection in time"),
            CallError::Send(e) => write!(f, "{}", super::error_chain(&**e)),
            CallError::Body(e) => write!(f, "reading the reply: {}", super::error_chain(&**e)),
        }
    }
}

impl HttpClient {
    /// A client for `settings`, with the proxies of the environment; `Err` says why not (a
    /// certificate the TLS library refuses).
    pub(crate) fn new(settings: &ClientSettings<'_>) -> Result<HttpClient, String> {
        HttpClient::with_proxies(settings, Matcher::from_env())
    }

    fn with_proxies(settings: &ClientSettings<'_>, proxies: Matcher) -> Result<HttpClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let tls = if settings.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                .with_no_client_auth()
        } else {
            let roots = if settings.ca_certificates.is_empty() {
                system_roots()
            } else {
                let mut roots = RootCertStore::clone(&system_roots());
                for cert in settings.ca_certificates {
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("tls.ca_file: {e}"))?;
                }
                Arc::new(roots)
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false); // `https` destinations come through here for their TCP part
        http.set_nodelay(true);
        let proxies = Arc::new(proxies);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(Route {
                http,
                proxies: Arc::clone(&proxies),
            });
        let connector = Connector {
            https,
            timeout: settings.connect_timeout,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.max_idle_per_host)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http1_title_case_headers(true)
            .build(connector);
        Ok(HttpClient {
            client: Decompression::new(client)
                .no_br()
                .no_deflate()
                .no_zstd()
                .gzip(true),
            proxies,
        })
    }

    /// Sends one request and returns the reply once its headers are in.
    pub(crate) async fn send(
        &self,
        method: Method,
        uri: Uri,
        mut headers: HeaderMap,
        body: Option<Bytes>,
    ) -> Result<HttpReply, CallError> {
        if uri.scheme() == Some(&http::uri::Scheme::HTTP)
            && let Some(auth) = self
                .proxies
                .intercept(&uri)
                .and_then(|proxy| proxy.basic_auth().cloned())
        {
            // Sent to the proxy itself (an `https` call gives it in the tunnel's request).
            headers
                .entry(http::header::PROXY_AUTHORIZATION)
                .or_insert(auth);
        }
        headers
            .entry(http::header::USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT));
        // As HTTP clients (and reqwest before this one) send it: a legacy server may pick a
        // representation nobody asked for when a request names none.
        headers
            .entry(http::header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        let reply = self.client.clone().oneshot(request).await.map_err(|e| {
            if caused_by::<ConnectTimedOut>(&e) {
                CallError::ConnectTimeout
            } else if e.is_connect() {
                CallError::Connect(Box::new(e))
            } else {
                CallError::Send(Box::new(e))
            }
        })?;
        Ok(reply.map(ReplyBody))
    }
}

/// Whether an error of type `E` is among `error`'s causes.
fn caused_by<E: StdError + 'static>(error: &(dyn StdError + 'static)) -> bool {
    let mut source = error.source();
    while let Some(e) = source {
        if e.is::<E>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The system's root certificates, read once per process (reading and parsing them took most
/// of the start of a group of 100 dealers when every client did it).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!(error = %error, "a system root certificate could not be read");
        }
        let mut roots = RootCertStore::empty();
        let (_, ignored) = roots.add_parsable_certificates(found.certs);
        if ignored > 0 {
            tracing::debug!(
                ignored,
                "system root certificates the TLS library does not use"
            );
        }
        Arc::new(roots)
    }))
}

/// `tls.insecure_skip_verify`: any certificate is accepted; the handshake's signatures are
/// still checked, so the connection is at least to whoever holds the key it shows.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `timeouts.connect` over the whole of a connection's setup (TCP, proxy tunnel, TLS).
#[derive(Clone)]
struct Connector {
    https: HttpsConnector<Route>,
    timeout: Duration,
}

/// The marker of a connection that was not set up within `timeouts.connect`.
#[derive(Debug)]
struct ConnectTimedOut;

impl std::fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no connection in time")
    }
}

impl StdError for ConnectTimedOut {}

type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl Service<Uri> for Connector {
    type Response = MaybeHttpsStream<Stream>;
    type Error = BoxError;
    type Future = Connecting<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.https.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.https.call(dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(result) => result,
                Err(_) => Err(Box::new(ConnectTimedOut) as BoxError),
            }
        })
    }
}

/// The TCP part of a connection: straight to the upstream, or through the environment's proxy.
#[derive(Clone)]
struct Route {
    http: HttpConnector,
    proxies: Arc<Matcher>,
}

impl Service<Uri> for Route {
    type Response = Stream;
    type Error = BoxError;
    type Future = Connecting<Stream>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let Some(proxy) = self.proxies.intercept(&dst) else {
            return Box::pin(async move {
                let io = http.call(dst).await?;
                Ok(Stream { io, proxy: false })
            });
        };
        let proxy_uri = proxy.uri().clone();
        if dst.scheme() == Some(&http::uri::Scheme::HTTPS) {
            let mut tunnel = Tunnel::new(proxy_uri, http);
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            Box::pin(async move {
                let io = tunnel.call(dst).await?;
                Ok(Stream { io, proxy: false })
            })
        } else {
            // Plain HTTP: to the proxy, which takes the request in absolute form.
            Box::pin(async move {
                let io = http.call(proxy_uri).await?;
                Ok(Stream { io, proxy: true })
            })
        }
    }
}

/// A TCP connection, marked when it goes to a forwarding proxy (hyper then writes each
/// request's target in absolute form).
struct Stream {
    io: TokioIo<tokio::net::TcpStream>,
    proxy: bool,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxy)
    }
}

impl Read for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    fn client(proxies: Matcher) -> HttpClient {
        let settings = ClientSettings {
            connect_timeout: Duration::from_secs(2),
            pool_idle_timeout: Duration::from_secs(5),
            max_idle_per_host: 4,
            insecure_skip_verify: false,
            ca_certificates: &[],
        };
        HttpClient::with_proxies(&settings, proxies).expect("client")
    }

    /// Reads one request head: its lines, without the blank line that ends it.
    async fn head(reader: &mut BufReader<TcpStream>) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.expect("read");
            let line = line.trim_end().to_owned();
            if line.is_empty() {
                return lines;
            }
            lines.push(line);
        }
    }

    async fn body_text(reply: HttpReply) -> String {
        let mut body = reply.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.chunk().await.expect("body") {
            text.extend_from_slice(&chunk);
        }
        String::from_utf8(text).expect("utf-8")
    }

    /// A forwarding proxy that answers itself with the request line and the proxy credentials
    /// it was given.
    async fn forward_proxy() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            let mut reader = BufReader::new(socket);
            let lines = head(&mut reader).await;
            let auth = lines
                .iter()
                .find_map(|l| l.strip_prefix("Proxy-Authorization: "))
                .unwrap_or("none")
                .to_owned();
            let text = format!("{}|{auth}", lines[0]);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            );
            reader
                .get_mut()
                .write_all(reply.as_bytes())
                .await
                .expect("write");
        });
        addr
    }

    #[tokio::test]
    async fn a_plain_http_call_goes_to_the_proxy_in_absolute_form_with_its_credentials() {
        let proxy = forward_proxy().await;
        let client = client(
            Matcher::builder()
                .http(format!("http://ops:s3cret@{proxy}"))
                .build(),
        );
        let uri: Uri = "http://dms.dealer.example:8080/api/v2/vehicles?make=Honda"
            .parse()
            .expect("uri");
        let reply = client
            .send(Method::GET, uri, HeaderMap::new(), None)
            .await
            .expect("reply");
        assert_eq!(
            body_text(reply).await,
            "GET http://dms.dealer.example:8080/api/v2/vehicles?make=Honda HTTP/1.1|Basic b3BzOnMzY3JldA=="
        );
    }

    #[tokio::test]
    async fn no_proxy_hosts_are_called_directly() {
        let upstream = forward_proxy().await; // answers like a server: request line, no auth
        let client = client(
            Matcher::builder()
                .http("http://127.0.0.1:9") // nothing listens there
                .no("127.0.0.1")
                .build(),
        );
        let uri: Uri = format!("http://{upstream}/ping").parse().expect("uri");
        let reply = client
            .send(Method::GET, uri, HeaderMap::new(), None)
            .await
            .expect("reply");
        assert_eq!(body_text(reply).await, "GET /ping HTTP/1.1|none");
    }

    /// A `CONNECT` proxy that checks the credentials, then pipes bytes both ways.
    async fn tunnel_proxy() -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Receiver<Vec<String>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (seen, heads) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            let mut reader = BufReader::new(socket);
            let lines = head(&mut reader).await;
            let target = lines[0]
                .strip_prefix("CONNECT ")
                .and_then(|rest| rest.split(' ').next())
                .expect("a CONNECT request")
                .to_owned();
            let _ = seen.send(lines);
            let mut upstream = TcpStream::connect(target).await.expect("target");
            let mut client = reader.into_inner();
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .expect("write");
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
        (addr, heads)
    }

    #[tokio::test]
    async fn an_https_call_goes_through_a_connect_tunnel() {
        // The tunnel's far end is not TLS: the call fails in the TLS handshake, after the
        // proxy was asked (with credentials) for the upstream's host and port.
        let target = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let target_addr = target.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut socket, _) = target.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        });
        let (proxy, heads) = tunnel_proxy().await;
        let client = client(
            Matcher::builder()
                .https(format!("http://ops:s3cret@{proxy}"))
                .build(),
        );
        let uri: Uri = format!("https://localhost:{}/x", target_addr.port())
            .parse()
            .expect("uri");
        let error = client
            .send(Method::GET, uri, HeaderMap::new(), None)
            .await
            .expect_err("not TLS at the far end");
        assert!(error.is_tls_handshake(), "{error}");
        let lines = heads.await.expect("the proxy was asked");
        assert_eq!(
            lines[0],
            format!("CONNECT localhost:{} HTTP/1.1", target_addr.port())
        );
        assert!(
            lines.contains(&"Proxy-Authorization: Basic b3BzOnMzY3JldA==".to_owned())
                || lines.contains(&"proxy-authorization: Basic b3BzOnMzY3JldA==".to_owned()),
            "{lines:?}"
        );
    }

    #[tokio::test]
    async fn timeouts_connect_covers_the_tls_handshake() {
        // A server that accepts and never answers: TCP connects, the handshake never ends.
        let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = silent.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                held.push(socket);
            }
        });
        let settings = ClientSettings {
            connect_timeout: Duration::from_millis(150),
            pool_idle_timeout: Duration::from_secs(5),
            max_idle_per_host: 4,
            insecure_skip_verify: false,
            ca_certificates: &[],
        };
        let client =
            HttpClient::with_proxies(&settings, Matcher::builder().build()).expect("client");
        let uri: Uri = format!("https://localhost:{}/x", addr.port())
            .parse()
            .expect("uri");
        let started = std::time::Instant::now();
        let error = tokio::time::timeout(
            Duration::from_secs(5),
            client.send(Method::GET, uri, HeaderMap::new(), None),
        )
        .await
        .expect("the connect timeout ends the call")
        .expect_err("no handshake");
        assert!(matches!(error, CallError::ConnectTimeout), "{error}");
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
