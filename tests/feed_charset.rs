//! Legacy charsets end to end: the real gateway in-process, in front of a feed server of the
//! test's own on 127.0.0.1:0 serving exports byte for byte as dealer systems write them.
//!
//! - `tests/fixtures/mappings/latin1-feed/`: an XML export declared `encoding="ISO-8859-1"`,
//!   served as `application/xml` without a charset; the declaration alone must be enough.
//! - `tests/fixtures/mappings/cp1252-csv-feed/`: an Excel CSV export (Windows-1252), served as
//!   `text/csv` without a charset; the mapping's `charset: windows-1252` says how to read it.
//! - The same CSV folder without `charset:`: nothing declares the charset, the export is not
//!   UTF-8, so the feed never loads and calls answer a retryable `INTERNAL_ERROR`.
//!
//! The bodies served are the fixtures' `examples/` files, which `test-mappings` also runs.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::{Gateway, Reply};
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

const LATIN1_XML: &str = "/dealers/latin1-xml/a2a";
const CP1252_CSV: &str = "/dealers/cp1252-csv/a2a";
const UNDECLARED_CSV: &str = "/dealers/undeclared-csv/a2a";

fn fixture(name: &str) -> PathBuf {
    common::repo_path(&format!("tests/fixtures/mappings/{name}"))
}

fn xml_export() -> Vec<u8> {
    std::fs::read(fixture("latin1-feed").join("examples/feed.xml")).expect("read feed.xml")
}

fn csv_export() -> Vec<u8> {
    std::fs::read(fixture("cp1252-csv-feed").join("examples/feed.csv")).expect("read feed.csv")
}

// =============================================================================================
// The feed server

/// Serves the two exports with the content types legacy systems send (no charset), counting
/// the requests per path.
struct FeedServer {
    url: String,
    hits: Arc<HashMap<&'static str, AtomicUsize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FeedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FeedServer {
    async fn start() -> FeedServer {
        let routes: Arc<HashMap<&'static str, (&'static str, Bytes)>> = Arc::new(HashMap::from([
            (
                "/feeds/inventory.xml",
                ("application/xml", Bytes::from(xml_export())),
            ),
            (
                "/feeds/inventory.csv",
                ("text/csv", Bytes::from(csv_export())),
            ),
        ]));
        let hits: Arc<HashMap<&'static str, AtomicUsize>> =
            Arc::new(routes.keys().map(|&p| (p, AtomicUsize::new(0))).collect());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let counters = Arc::clone(&hits);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (routes, counters) = (Arc::clone(&routes), Arc::clone(&counters));
                let service = hyper::service::service_fn(move |req: Request<_>| {
                    let answer = match routes.get_key_value(req.uri().path()) {
                        Some((path, (content_type, body))) => {
                            counters[path].fetch_add(1, Ordering::SeqCst);
                            Response::builder()
                                .header(http::header::CONTENT_TYPE, *content_type)
                                .body(Full::new(body.clone()))
                        }
                        None => Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::new())),
                    };
                    async move { Ok::<_, Infallible>(answer.expect("response")) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        FeedServer { url, hits, task }
    }

    fn hits(&self, path: &str) -> usize {
        self.hits[path].load(Ordering::SeqCst)
    }
}

// =============================================================================================
// The gateway

/// One gateway with three dealers: the two fixture folders, and a copy of the CSV one without
/// its `charset:` line (kept alive in the returned temp dir).
async fn start(feeds: &FeedServer) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let undeclared = dir.path().join("undeclared-csv");
    common::copy_dir(&fixture("cp1252-csv-feed"), &undeclared);
    let feed_yaml = undeclared.join("feed.yaml");
    let text = std::fs::read_to_string(&feed_yaml).expect("read feed.yaml");
    assert!(text.contains("\ncharset: windows-1252\n"), "{text}");
    std::fs::write(&feed_yaml, text.replace("\ncharset: windows-1252\n", "\n"))
        .expect("write feed.yaml");

    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        config_yaml(&[
            ("latin1_xml", "latin1-xml", &fixture("latin1-feed")),
            ("cp1252_csv", "cp1252-csv", &fixture("cp1252-csv-feed")),
            ("undeclared_csv", "undeclared-csv", &undeclared),
        ]),
    )
    .expect("write config");
    let vars = HashMap::from([("FEED_URL".to_owned(), feeds.url.clone())]);
    common::start_file_with_vars(&config, Some(dir), vars).await
}

/// A gateway configuration with one dealer per `(id, prefix, mapping folder)`.
fn config_yaml(dealers: &[(&str, &str, &Path)]) -> String {
    let mut yaml = "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndealers:\n".to_owned();
    for (id, prefix, mappings) in dealers {
        yaml.push_str(&format!(
            r#"  - id: {id}
    path_prefix: /dealers/{prefix}
    card:
      name: Garage {id}
      description: Test dealer whose inventory is a legacy export.
      url: https://{prefix}.example.com/a2a
    mappings: {mappings}
    profile:
      name: Garage {id}
      rooftops:
        - name: Garage {id}
          phones: [{{ name: Sales, value: "+14085550100" }}]
          timezone: America/Los_Angeles
"#,
            mappings = mappings.display()
        ));
    }
    yaml
}

fn data<'r>(reply: &'r Reply, kind: &str) -> &'r Value {
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert!(reply.body.get("error").is_none(), "{}", reply.text);
    assert_eq!(reply.payload()["type"], kind, "{}", reply.text);
    &reply.payload()["data"]
}

/// The reply `data` of a `kind` call (`inventory.search`, …) with the fields of `request`.
async fn call(gw: &Gateway, path: &str, kind: &str, request: Value) -> Value {
    let mut call = json!({ "type": format!("{kind}.request") });
    if let (Some(call), Some(extra)) = (call.as_object_mut(), request.as_object()) {
        call.extend(extra.clone());
    }
    let reply = gw.send(path, call).await;
    data(&reply, &format!("{kind}.response")).clone()
}

async fn search(gw: &Gateway, path: &str, request: Value) -> Value {
    call(gw, path, "inventory.search", request).await
}

async fn vehicle(gw: &Gateway, path: &str, request: Value) -> Value {
    call(gw, path, "inventory.vehicle", request).await
}

// =============================================================================================
// The cases

/// The exports really are legacy bytes, not UTF-8 (else the cases below prove nothing).
#[test]
fn the_exports_are_not_utf8() {
    for (name, body) in [("feed.xml", xml_export()), ("feed.csv", csv_export())] {
        assert!(std::str::from_utf8(&body).is_err(), "{name} is UTF-8");
        for byte in [0xE9, 0xA9, 0x80, 0x97] {
            assert!(body.contains(&byte), "{name} lacks byte {byte:#04x}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_latin1_xml_export_is_read_by_its_declaration() {
    let feeds = FeedServer::start().await;
    let gw = start(&feeds).await;

    let page = search(
        &gw,
        LATIN1_XML,
        json!({ "filters": { "model": ["mégane"] } }),
    )
    .await;
    assert_eq!(page["total"], 1, "{page}");
    let megane = &page["vehicles"][0];
    assert_eq!(megane["vin"], "VF1RFB00X66000001");
    assert_eq!(megane["model"], "Mégane");
    assert_eq!(megane["trim"], "E-Tech 100% électrique");
    assert_eq!(megane["interior_color"], "Crème");
    assert_eq!(
        megane["features"],
        json!(["Sièges chauffants", "Caméra de recul"])
    );
    // © (0xA9), and Windows-1252's — (0x97) and € (0x80), which true ISO-8859-1 lacks.
    assert_eq!(megane["description"], "Bose© audio — € 1 000 de remise");

    let clio = vehicle(&gw, LATIN1_XML, json!({ "vin": "VF1KW000000000002" })).await;
    assert_eq!(clio["trim"], "Évolution");
    assert_eq!(
        feeds.hits("/feeds/inventory.xml"),
        1,
        "fetched once, cached"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_windows_1252_csv_export_is_read_in_the_mapping_charset() {
    let feeds = FeedServer::start().await;
    let gw = start(&feeds).await;

    let megane = vehicle(&gw, CP1252_CSV, json!({ "stock": "C0003" })).await;
    assert_eq!(megane["model"], "Mégane");
    assert_eq!(megane["trim"], "Évolution");
    assert_eq!(megane["interior_color"], "Crème");
    assert_eq!(
        megane["description"],
        "Entretien à jour — garantie 12 mois, € 500 de remise"
    );

    let page = search(
        &gw,
        CP1252_CSV,
        json!({ "filters": { "interior_color": ["noir étoilé"] } }),
    )
    .await;
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["vehicles"][0]["interior_color"], "Noir Étoilé");
    assert_eq!(page["vehicles"][0]["description"], "Jantes 17\" ©");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undeclared_windows_1252_csv_never_loads_and_answers_a_retryable_internal_error() {
    let feeds = FeedServer::start().await;
    let gw = start(&feeds).await;

    let reply = gw
        .send(
            UNDECLARED_CSV,
            json!({ "type": "inventory.vehicle.request", "stock": "C0003" }),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["error"]["code"], -32603, "{}", reply.text);
    assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
    assert_eq!(reply.aap_error()["retryable"], true, "{}", reply.text);
    // The cause (which names the charset to set) stays in the log.
    for leak in [
        "charset",
        "UTF-8",
        "inventory.csv",
        "127.0.0.1",
        "Entretien",
    ] {
        assert!(
            !reply.text.contains(leak),
            "the error leaks `{leak}`: {}",
            reply.text
        );
    }
    assert!(
        feeds.hits("/feeds/inventory.csv") >= 1,
        "the export was fetched"
    );
}

// =============================================================================================
// The command line

fn run_cli(args: &[&str], config: &Path, feed_url: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("FEED_URL", feed_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run aap-gateway");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), all)
}

/// `check` accepts `charset:`, and the folders' examples (the same Latin-1 / Windows-1252 files,
/// canned) pass `test-mappings`.
#[test]
fn check_and_test_mappings_pass_on_the_fixtures() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        config_yaml(&[
            ("latin1_xml", "latin1-xml", &fixture("latin1-feed")),
            ("cp1252_csv", "cp1252-csv", &fixture("cp1252-csv-feed")),
        ]),
    )
    .expect("write config");
    // No network: any URL will do.
    let url = "http://127.0.0.1:9";
    let (code, all) = run_cli(&["check"], &config, url);
    assert_eq!(code, 0, "check failed:\n{all}");
    let (code, all) = run_cli(&["test-mappings"], &config, url);
    assert_eq!(code, 0, "test-mappings failed:\n{all}");
    assert!(all.contains("4 passed, 0 failed"), "{all}");

    // An unknown label is a located load problem.
    let folder = dir.path().join("bad");
    common::copy_dir(&fixture("cp1252-csv-feed"), &folder);
    let feed_yaml = folder.join("feed.yaml");
    let text = std::fs::read_to_string(&feed_yaml).expect("read feed.yaml");
    std::fs::write(
        &feed_yaml,
        text.replace("charset: windows-1252", "charset: cp-1252"),
    )
    .expect("write feed.yaml");
    // And a proxy-mode reply in JSON takes none: JSON is always UTF-8.
    let vehicle_yaml = folder.join("inventory.vehicle.yaml");
    std::fs::write(
        &vehicle_yaml,
        "skill: inventory.vehicle\nupstream: feed\nrequest: { method: GET, path: /vehicle }\n\
         response:\n  jq: .\n  charset: latin1\n",
    )
    .expect("write inventory.vehicle.yaml");
    std::fs::write(&config, config_yaml(&[("bad", "bad", &folder)])).expect("write config");
    let (code, all) = run_cli(&["check"], &config, url);
    assert_eq!(code, 1, "{all}");
    let line = text
        .lines()
        .position(|l| l.starts_with("charset:"))
        .expect("charset line")
        + 1;
    for (at, message) in [
        (
            format!("{}:{line}:", feed_yaml.display()),
            "unknown charset `cp-1252`; expected a label like utf-8, windows-1252",
        ),
        (
            format!("{}:6:", vehicle_yaml.display()),
            "`charset` is for xml and csv bodies; JSON is always UTF-8",
        ),
    ] {
        assert!(
            all.lines()
                .any(|l| l.starts_with(&at) && l.contains(message)),
            "{at} {message}:\n{all}"
        );
    }
}
