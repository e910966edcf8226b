//! Upstreams over TLS: the system's roots, `tls.ca_file`, `tls.insecure_skip_verify`, HTTP/2 by
//! ALPN. The upstream is a real HTTPS server (rustls, hyper) on 127.0.0.1 with a certificate
//! from a throwaway CA made here; it answers with the HTTP version and path it was asked for.

use std::convert::Infallible;
use std::sync::Arc;

use aap_gateway::upstream::{FileUpstream, Upstream, UpstreamError, UpstreamRequest};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// A CA, and a certificate it signed for `localhost` and `127.0.0.1`.
struct Pki {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn make_pki() -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "aap-gateway test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
    let key = KeyPair::generate().expect("server key");
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server params")
        .signed_by(&key, &ca)
        .expect("server certificate");
    Pki {
        ca_pem: ca.pem(),
        chain: vec![cert.der().clone(), ca.der().clone()],
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

/// An HTTPS server offering HTTP/2 and HTTP/1.1; answers `{version} {path}`.
async fn https_server(pki: &Pki) -> std::net::SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(pki.key.clone_key()))
        .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to serve.
                let Ok(tls) = acceptor.accept(socket).await else {
                    return;
                };
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let text = format!("{:?} {}", req.version(), req.uri().path());
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

fn upstream(base_url: &str, mut entry: Value) -> Upstream {
    entry["base_url"] = json!(base_url);
    entry["kind"] = json!("rest");
    entry["retries"] = json!({ "attempts": 1 });
    let file: FileUpstream = serde_json::from_value(entry).expect("valid entry");
    Upstream::build("test", file).expect("valid upstream")
}

fn ca_file(dir: &tempfile::TempDir, name: &str, pem: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, pem).expect("write CA file");
    path.display().to_string()
}

async fn body_of(up: &Upstream) -> Result<String, UpstreamError> {
    let reply = up.call(UpstreamRequest::get("/api/ping")).await?;
    assert_eq!(reply.status, 200);
    Ok(String::from_utf8(reply.body.to_vec()).expect("utf-8"))
}

#[tokio::test]
async fn a_server_whose_ca_is_in_tls_ca_file_is_called_over_http2() {
    let pki = make_pki();
    let addr = https_server(&pki).await;
    let dir = tempfile::tempdir().expect("dir");
    for host in ["localhost", "127.0.0.1"] {
        let up = upstream(
            &format!("https://{host}:{}", addr.port()),
            json!({ "tls": { "ca_file": ca_file(&dir, "ca.pem", &pki.ca_pem) } }),
        );
        assert_eq!(body_of(&up).await.expect("a reply"), "HTTP/2.0 /api/ping");
    }
}

#[tokio::test]
async fn a_certificate_no_trusted_ca_signed_is_a_tls_error() {
    let pki = make_pki();
    let addr = https_server(&pki).await;
    let base = format!("https://localhost:{}", addr.port());
    let dir = tempfile::tempdir().expect("dir");
    let other = make_pki(); // another CA altogether
    for entry in [
        json!({}), // the system's roots only
        json!({ "tls": { "ca_file": ca_file(&dir, "other.pem", &other.ca_pem) } }),
    ] {
        let error = body_of(&upstream(&base, entry.clone()))
            .await
            .expect_err("refused");
        assert!(
            matches!(error, UpstreamError::Protocol(ref m) if m.starts_with("TLS") && m.contains("invalid peer certificate")),
            "{entry}: {error:?}"
        );
    }
}

#[tokio::test]
async fn insecure_skip_verify_accepts_any_certificate() {
    let pki = make_pki();
    let addr = https_server(&pki).await;
    let up = upstream(
        &format!("https://localhost:{}", addr.port()),
        json!({ "tls": { "insecure_skip_verify": true } }),
    );
    assert_eq!(body_of(&up).await.expect("a reply"), "HTTP/2.0 /api/ping");
}

#[test]
fn a_ca_file_that_is_not_a_certificate_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("dir");
    let not_a_ca = ca_file(
        &dir,
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    );
    let file: FileUpstream = serde_json::from_value(json!({
        "kind": "rest",
        "base_url": "https://dms.dealer.example",
        "tls": { "ca_file": not_a_ca },
    }))
    .expect("valid entry");
    let problems = Upstream::build("test", file).expect_err("refused");
    let pointers: Vec<&str> = problems.iter().map(|p| p.pointer.as_str()).collect();
    assert_eq!(pointers, ["/tls/ca_file"], "{problems:?}");
}
