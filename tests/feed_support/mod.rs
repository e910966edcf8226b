//! Shared by the `tests/feed_*.rs` files of issue 39: a feed host of the tests' own on
//! 127.0.0.1:0 that serves exports byte for byte, with the headers a bucket or a vendor's web
//! server sends (`ETag`, `Last-Modified`, `Content-Encoding`) and answers conditional requests as
//! HTTP says; mapping folders and the gateway's configuration written into a temp dir, and the
//! gateway started on them; packing helpers (gzip, zip); what the tests read back (a dealer's
//! feed, its refreshes by outcome, the prices it lists, its listings).
//!
//! Needs the test crate's `mod common;` beside it.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aap_gateway::engine::feed::Feed;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::common::{self, Gateway};

/// One file the host serves.
#[derive(Debug, Clone, Default)]
pub struct Export {
    pub body: Bytes,
    pub content_type: &'static str,
    /// `Content-Encoding` to send as is (the body is then already encoded).
    pub content_encoding: Option<&'static str>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// Answer this status with an empty body instead (a failing host).
    pub fail: Option<u16>,
}

/// What the host saw of one request.
#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: HeaderMap,
    /// The status answered.
    pub status: u16,
}

/// The feed host: exports by path, replaceable while it runs; every request recorded.
pub struct FeedHost {
    pub url: String,
    exports: Arc<Mutex<HashMap<String, Export>>>,
    hits: Arc<Mutex<Vec<Hit>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FeedHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FeedHost {
    pub async fn start() -> FeedHost {
        let exports: Arc<Mutex<HashMap<String, Export>>> = Arc::default();
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (served, seen) = (Arc::clone(&exports), Arc::clone(&hits));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (served, seen) = (Arc::clone(&served), Arc::clone(&seen));
                let service = hyper::service::service_fn(move |req: Request<_>| {
                    let export = served.lock().expect("lock").get(req.uri().path()).cloned();
                    let response = answer(export, req.headers());
                    seen.lock().expect("lock").push(Hit {
                        path: req.uri().path().to_owned(),
                        headers: req.headers().clone(),
                        status: response.status().as_u16(),
                    });
                    async move { Ok::<_, Infallible>(response) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        FeedHost {
            url,
            exports,
            hits,
            task,
        }
    }

    /// Serves `export` at `path` from now on.
    pub fn serve(&self, path: &str, export: Export) {
        self.exports
            .lock()
            .expect("lock")
            .insert(path.to_owned(), export);
    }

    /// Changes what `path` serves.
    pub fn edit(&self, path: &str, change: impl FnOnce(&mut Export)) {
        let mut exports = self.exports.lock().expect("lock");
        change(exports.get_mut(path).expect("served"));
    }

    /// The requests for `path` so far.
    pub fn hits(&self, path: &str) -> Vec<Hit> {
        let hits = self.hits.lock().expect("lock");
        hits.iter().filter(|h| h.path == path).cloned().collect()
    }
}

/// HTTP's conditional GET (RFC 9110 §13): `If-None-Match` wins over `If-Modified-Since`.
fn answer(export: Option<Export>, headers: &HeaderMap) -> Response<Full<Bytes>> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(export) = export else {
        return status(StatusCode::NOT_FOUND);
    };
    if let Some(fail) = export.fail {
        return status(StatusCode::from_u16(fail).expect("status"));
    }
    let unchanged = match (header("if-none-match"), &export.etag) {
        (Some(tags), Some(etag)) => tags.split(',').any(|t| t.trim() == etag),
        (Some(_), None) => false,
        (None, _) => match (header("if-modified-since"), &export.last_modified) {
            (Some(since), Some(modified)) => {
                let since = httpdate::parse_http_date(since).ok();
                let modified = httpdate::parse_http_date(modified).ok();
                matches!((since, modified), (Some(s), Some(m)) if m <= s)
            }
            _ => false,
        },
    };
    let mut builder = Response::builder();
    if let Some(etag) = &export.etag {
        builder = builder.header("etag", etag);
    }
    if let Some(modified) = &export.last_modified {
        builder = builder.header("last-modified", modified);
    }
    if unchanged {
        return builder
            .status(StatusCode::NOT_MODIFIED)
            .body(Full::new(Bytes::new()))
            .expect("response");
    }
    builder = builder.header("content-type", export.content_type);
    if let Some(encoding) = export.content_encoding {
        builder = builder.header("content-encoding", encoding);
    }
    builder.body(Full::new(export.body)).expect("response")
}

fn status(status: StatusCode) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .expect("response")
}

// =============================================================================================
// Packing

/// `data` gzipped, as `gzip -9` writes it.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).expect("gzip");
    encoder.finish().expect("gzip")
}

/// A zip archive of `members` (name, bytes), deflated.
pub fn zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        writer.start_file(*name, options).expect("zip member");
        writer.write_all(data).expect("zip member");
    }
    writer.finish().expect("zip").into_inner()
}

// =============================================================================================
// The gateway's configuration

/// The `upstreams.yaml` of [`feed_folder`]: one REST upstream `feed` at `${FEED_URL}`.
pub const FEED_UPSTREAM: &str = "feed:\n  kind: rest\n  base_url: ${FEED_URL}\n  \
    timeouts: { connect: 1s, request: 5s }\n  retries: { attempts: 1, backoff: 100ms }\n  \
    max_response_bytes: 4194304\n";

/// Writes a feed-mode mapping folder at `dir`: `feed.yaml` as given, an upstream `feed` at
/// `${FEED_URL}`, and the three inventory skills answered from the feed.
pub fn feed_folder(dir: &Path, feed_yaml: &str) {
    feed_folder_with(dir, feed_yaml, FEED_UPSTREAM);
}

/// [`feed_folder`] with `upstreams.yaml` as given (a `kind: file` drop, a bad `base_url`).
pub fn feed_folder_with(dir: &Path, feed_yaml: &str, upstreams_yaml: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("feed.yaml"), feed_yaml).expect("feed.yaml");
    std::fs::write(dir.join("upstreams.yaml"), upstreams_yaml).expect("upstreams.yaml");
    for skill in ["inventory.search", "inventory.vehicle", "inventory.facets"] {
        std::fs::write(
            dir.join(format!("{skill}.yaml")),
            format!("skill: {skill}\nmode: feed\n"),
        )
        .expect("skill");
    }
}

/// A gateway configuration with one dealer per `(id, mapping folder)`, served at
/// `/dealers/{id}/a2a`.
pub fn config_yaml(dealers: &[(&str, &Path)]) -> String {
    let mut yaml = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndealers:\n".to_owned();
    for (id, mappings) in dealers {
        yaml.push_str(&format!(
            r#"  - id: {id}
    path_prefix: /dealers/{id}
    card:
      name: Yard {id}
      description: Test dealer whose inventory is a vendor export.
      url: https://{id}.example.com/a2a
    mappings: {mappings}
    profile:
      name: Yard {id}
      rooftops:
        - name: Yard {id}
          phones: [{{ name: Sales, value: "+14085550100" }}]
          timezone: America/Denver
"#,
            mappings = mappings.display()
        ));
    }
    yaml
}

/// Writes [`config_yaml`] of `dealers` to `dir/gateway.yaml`; its path.
pub fn write_config(dir: &Path, dealers: &[(&str, &Path)]) -> PathBuf {
    let config = dir.join("gateway.yaml");
    std::fs::write(&config, config_yaml(dealers)).expect("config");
    config
}

/// The real gateway in-process with one feed dealer per `(id, feed.yaml)` ([`feed_folder`]s in
/// a temp dir kept with the gateway), `${FEED_URL}` being `feed_url`.
pub async fn start_feeds(feed_url: &str, dealers: &[(&str, impl AsRef<str>)]) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let folders: Vec<(&str, PathBuf)> = dealers
        .iter()
        .map(|(id, yaml)| {
            let folder = dir.path().join(id);
            feed_folder(&folder, yaml.as_ref());
            (*id, folder)
        })
        .collect();
    let listed: Vec<(&str, &Path)> = folders.iter().map(|(id, f)| (*id, f.as_path())).collect();
    let config = write_config(dir.path(), &listed);
    let vars = HashMap::from([("FEED_URL".to_owned(), feed_url.to_owned())]);
    common::start_file_with_vars(&config, Some(dir), vars).await
}

/// A feed host and the gateway reading it.
pub struct Setup {
    pub host: FeedHost,
    pub gw: Gateway,
}

/// [`start_feeds`] on `host`, kept with the gateway (serve what the first loads should find
/// before, or after to watch a first load fail).
pub async fn start_on(host: FeedHost, dealers: &[(&str, impl AsRef<str>)]) -> Setup {
    let gw = start_feeds(&host.url, dealers).await;
    Setup { host, gw }
}

// =============================================================================================
// What the tests read back

/// The dealer's (first) feed.
pub fn feed(gw: &Gateway, dealer: &str) -> Arc<Feed> {
    Arc::clone(&gw.app.dealer(dealer).expect("dealer").feeds()[0])
}

/// The prices the dealer's search lists, cheapest first.
pub async fn prices(gw: &Gateway, dealer: &str) -> Vec<i64> {
    let call =
        json!({ "type": "inventory.search.request", "sort": { "field": "price", "order": "asc" } });
    let reply = gw.send(&format!("/dealers/{dealer}/a2a"), call).await;
    assert!(reply.body.get("error").is_none(), "{}", reply.text);
    let page: &Value = &reply.payload()["data"];
    page["vehicles"]
        .as_array()
        .expect("vehicles")
        .iter()
        .filter_map(|v| v["price"].as_i64())
        .collect()
}

/// `aap_gateway_feed_refreshes_total` of `dealer` by outcome, from the admin listener.
pub async fn refreshes(gw: &Gateway, dealer: &str) -> HashMap<String, u64> {
    let text = gw.metrics().await;
    let prefix = format!("aap_gateway_feed_refreshes_total{{dealer=\"{dealer}\",outcome=\"");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (outcome, value) = rest.split_once("\"} ")?;
            Some((outcome.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// `aap_gateway_mapping_events_total` of `dealer` for `event`, summed over its other labels.
pub fn mapping_events(metrics: &str, dealer: &str, event: &str) -> u64 {
    let (dealer, event) = (format!("dealer=\"{dealer}\""), format!("event=\"{event}\""));
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("aap_gateway_mapping_events_total")
                && l.contains(&dealer)
                && l.contains(&event)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The reply `data` of a `kind` call (`inventory.search`, …) to `dealer` with the fields of
/// `request`, which must be answered ([`common::Reply::answered`]).
pub async fn call(gw: &Gateway, dealer: &str, kind: &str, request: Value) -> Value {
    let mut call = json!({ "type": format!("{kind}.request") });
    common::merge(&mut call, request);
    let reply = gw.send(&format!("/dealers/{dealer}/a2a"), call).await;
    reply.answered(&format!("{kind}.response")).clone()
}

/// [`call`] of `inventory.search`.
pub async fn search(gw: &Gateway, dealer: &str, request: Value) -> Value {
    call(gw, dealer, "inventory.search", request).await
}
