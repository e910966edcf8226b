//! Shared by the `tests/feed_*.rs` files of issue 39: a feed host of the tests' own on
//! 127.0.0.1:0 that serves exports byte for byte, with the headers a bucket or a vendor's web
//! server sends (`ETag`, `Last-Modified`, `Content-Encoding`) and answers conditional requests as
//! HTTP says; mapping folders written into a temp dir; packing helpers (gzip, zip).
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;

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

/// Writes a feed-mode mapping folder at `dir`: `feed.yaml` as given, an upstream `feed` at
/// `${FEED_URL}`, and the three inventory skills answered from the feed.
pub fn feed_folder(dir: &Path, feed_yaml: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join("feed.yaml"), feed_yaml).expect("feed.yaml");
    std::fs::write(
        dir.join("upstreams.yaml"),
        "feed:\n  kind: rest\n  base_url: ${FEED_URL}\n  timeouts: { connect: 1s, request: 5s }\n  \
         retries: { attempts: 1, backoff: 100ms }\n  max_response_bytes: 4194304\n",
    )
    .expect("upstreams.yaml");
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
