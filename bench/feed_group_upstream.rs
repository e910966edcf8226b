//! The feed host of `bench/feed_group.sh`: a hundred dealers' inventory exports served from one
//! process on 127.0.0.1, as a syndication vendor's bucket or the dealers' DMS exports are.
//!
//! ```sh
//! cargo run --release --example feed_group_upstream -- --dealers 100 --endpoints-file up.json
//! ```
//!
//! Each dealer (`d001` … `d100`) gets, from `--seed`, a format, a size and a behaviour:
//!
//! - **format**: `csv.gz` (the demo Honda feed's CSV, gzipped, served as a file:
//!   `application/gzip`, no `Content-Encoding`), `json` (a nested export of the demo DMS's JSON
//!   records under `export.vehicles`) or `xml` (the demo DMS's XML export);
//! - **size**: 100 to 3,000 units, log-uniform (most dealers small, a few large), the demo's own
//!   units cycled, each with its own VIN (valid check digit, unique across the group), stock
//!   number and photos;
//! - **behaviour** (exact shares of the group, shuffled): `etag` (35 %: the same document, an
//!   `ETag`, `304` to `If-None-Match`), `last_modified` (15 %: `Last-Modified`, `304` to
//!   `If-Modified-Since`), `same_bytes` (10 %: no validators, the same bytes every time),
//!   `changing` (25 %: every answer is the other of two versions that differ in every 20th unit,
//!   with its own `ETag`), `fail_500` (5 %), `timeout` (4 %: no answer for `--hang` seconds) and
//!   `truncated` (6 %, always `csv.gz`: the gzip cut at 60 %, a `Content-Length` that matches
//!   the cut, so only the gzip stream can tell). The three failing kinds answer their first
//!   request normally (the first load), and fail every request after it.
//!
//! Paths: `GET /feeds/{dealer}/inventory.{csv.gz,json,xml}`. Every request is counted by dealer
//! and answer (`GET /_counts`: `{"d001": {"200": 3, "304": 12}, …}`); `POST /_reset` forgets
//! the counts and what was served (the next request of each dealer is a first one again: the
//! bench starts a gateway per run). Once it listens, the
//! endpoints file is written: `{"url", "dealers": [{"id", "format", "units", "behaviour",
//! "bytes"}], "units", "bytes"}`. The same arguments give the same bytes. Runs until interrupted.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aap_sim::feed::{csv_document, xml_document};
use aap_sim::inventory::{self, Vehicle, check_digit};
use bytes::Bytes;
use clap::Parser;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    /// Dealers in the group.
    #[arg(long, default_value_t = 100)]
    dealers: usize,
    /// Seed of the formats, sizes and behaviours.
    #[arg(long, default_value_t = 39)]
    seed: u64,
    /// Smallest and largest dealer (units).
    #[arg(long, default_value_t = 100)]
    min_units: usize,
    #[arg(long, default_value_t = 3000)]
    max_units: usize,
    /// Seconds a `timeout` dealer leaves a request unanswered.
    #[arg(long, default_value_t = 10)]
    hang: u64,
    /// Write the addresses and the group's make-up here once listening.
    #[arg(long)]
    endpoints_file: PathBuf,
}

/// splitmix64: a small seeded generator (the same arguments give the same group).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform fraction in [0, 1).
    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    CsvGz,
    Json,
    Xml,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::CsvGz => "csv",
            Format::Json => "json",
            Format::Xml => "xml",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Format::CsvGz => "inventory.csv.gz",
            Format::Json => "inventory.json",
            Format::Xml => "inventory.xml",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::CsvGz => "application/gzip",
            Format::Json => "application/json",
            Format::Xml => "application/xml; charset=utf-8",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Etag,
    LastModified,
    SameBytes,
    Changing,
    Fail500,
    Timeout,
    Truncated,
}

impl Behaviour {
    fn name(self) -> &'static str {
        match self {
            Behaviour::Etag => "etag",
            Behaviour::LastModified => "last_modified",
            Behaviour::SameBytes => "same_bytes",
            Behaviour::Changing => "changing",
            Behaviour::Fail500 => "fail_500",
            Behaviour::Timeout => "timeout",
            Behaviour::Truncated => "truncated",
        }
    }
}

/// The group's behaviours in exact shares (percent), shuffled with `rng`.
fn behaviours(dealers: usize, rng: &mut Rng) -> Vec<Behaviour> {
    const SHARES: [(Behaviour, usize); 7] = [
        (Behaviour::Etag, 35),
        (Behaviour::LastModified, 15),
        (Behaviour::SameBytes, 10),
        (Behaviour::Changing, 25),
        (Behaviour::Fail500, 5),
        (Behaviour::Timeout, 4),
        (Behaviour::Truncated, 6),
    ];
    let mut all = Vec::with_capacity(dealers);
    for (behaviour, percent) in SHARES {
        all.extend(std::iter::repeat_n(behaviour, dealers * percent / 100));
    }
    // What rounding left: the well-behaved kind.
    all.resize(dealers, Behaviour::Etag);
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i + 1));
    }
    all
}

/// `rows` units of dealer `dealer` (0-based), cycling through the demo inventories from a
/// place of its own; `version` moves the price and the modification time of every 20th unit.
fn dealer_inventory(dealer: usize, rows: usize, version: usize) -> Vec<Vehicle> {
    let base: Vec<Vehicle> = inventory::honda_powersports()
        .into_iter()
        .chain(inventory::toyota_group())
        .collect();
    let start = dealer * 37;
    (0..rows)
        .map(|i| {
            let mut v = base[(start + i) % base.len()].clone();
            let serial = (dealer * 3_000 + i) % 1_000_000;
            let old_vin = std::mem::take(&mut v.vin);
            // Serial (positions 12–17) = unique in the group; position 9 recomputed.
            let mut vin = format!("{}{serial:06}", &old_vin[..11]);
            if let Some(check) = check_digit(&vin) {
                vin.replace_range(8..9, &check.to_string());
            }
            for photo in &mut v.photos {
                *photo = photo.replace(&old_vin, &vin);
            }
            v.vin = vin;
            let prefix: String = v
                .stock_number
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            v.stock_number = format!("{prefix}{:03}{:05}", dealer + 1, i + 1);
            let changed = version % 2 == 1 && i % 20 == 0;
            let cycle = u32::try_from(i / base.len()).unwrap_or(u32::MAX);
            v.internet_price = v
                .internet_price
                .map(|p| p + (cycle % 9) * 100 + if changed { 500 } else { 0 });
            v.last_updated -= time::Duration::minutes(i64::from(cycle % 600) + i64::from(changed));
            v
        })
        .collect()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 5),
        flate2::Compression::default(),
    );
    // (Writing to a Vec cannot fail.)
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// The document of `vehicles` in `format`, as served.
fn document(format: Format, dealer: &str, vehicles: &[Vehicle]) -> Bytes {
    match format {
        Format::CsvGz => Bytes::from(gzip(csv_document(vehicles).as_bytes())),
        Format::Xml => Bytes::from(xml_document(vehicles)),
        Format::Json => {
            let records: Vec<Value> = vehicles.iter().map(Vehicle::legacy_json).collect();
            let export = json!({
                "export": {
                    "dealer": dealer,
                    "generated": "2026-12-07T06:00:00Z",
                    "count": records.len(),
                    "vehicles": records,
                }
            });
            Bytes::from(export.to_string())
        }
    }
}

struct Dealer {
    id: String,
    format: Format,
    units: usize,
    behaviour: Behaviour,
    /// One version, or two for `changing`.
    versions: Vec<Bytes>,
    served: AtomicUsize,
    counts: Mutex<BTreeMap<u16, u64>>,
}

/// A fixed `Last-Modified` (the export's nightly run).
const LAST_MODIFIED: &str = "Mon, 07 Dec 2026 06:00:00 GMT";

impl Dealer {
    fn etag(&self, version: usize) -> String {
        format!("\"{}-v{version}\"", self.id)
    }

    async fn answer(&self, req: &Request<Incoming>, hang: Duration) -> Response<Full<Bytes>> {
        let n = self.served.fetch_add(1, Ordering::Relaxed);
        let header = |name: header::HeaderName| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let failing = n > 0;
        let response = match self.behaviour {
            Behaviour::Fail500 if failing => status(StatusCode::INTERNAL_SERVER_ERROR),
            Behaviour::Timeout if failing => {
                tokio::time::sleep(hang).await;
                status(StatusCode::GATEWAY_TIMEOUT)
            }
            Behaviour::Truncated if failing => {
                let whole = &self.versions[0];
                self.body(whole.slice(..whole.len() * 6 / 10))
            }
            Behaviour::Etag if header(header::IF_NONE_MATCH) == Some(self.etag(0)) => {
                status(StatusCode::NOT_MODIFIED)
            }
            Behaviour::LastModified
                if header(header::IF_MODIFIED_SINCE).as_deref() == Some(LAST_MODIFIED) =>
            {
                status(StatusCode::NOT_MODIFIED)
            }
            Behaviour::Changing => {
                let version = n % self.versions.len();
                let mut response = self.body(self.versions[version].clone());
                set(&mut response, header::ETAG, &self.etag(version));
                response
            }
            Behaviour::Etag => {
                let mut response = self.body(self.versions[0].clone());
                set(&mut response, header::ETAG, &self.etag(0));
                response
            }
            Behaviour::LastModified => {
                let mut response = self.body(self.versions[0].clone());
                set(&mut response, header::LAST_MODIFIED, LAST_MODIFIED);
                response
            }
            _ => self.body(self.versions[0].clone()),
        };
        let code = response.status().as_u16();
        *(self.counts.lock().unwrap_or_else(|e| e.into_inner()))
            .entry(code)
            .or_default() += 1;
        response
    }

    fn body(&self, body: Bytes) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(body));
        set(
            &mut response,
            header::CONTENT_TYPE,
            self.format.content_type(),
        );
        response
    }
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

fn set(response: &mut Response<Full<Bytes>>, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
}

struct Host {
    dealers: BTreeMap<String, Dealer>,
    hang: Duration,
}

impl Host {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if path == "/_reset" && req.method() == http::Method::POST {
            for dealer in self.dealers.values() {
                dealer.served.store(0, Ordering::Relaxed);
                dealer
                    .counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
            }
            return status(StatusCode::NO_CONTENT);
        }
        if path == "/_counts" {
            let counts: serde_json::Map<String, Value> = (self.dealers.values())
                .map(|d| {
                    let counts = d.counts.lock().unwrap_or_else(|e| e.into_inner());
                    let by_code: serde_json::Map<String, Value> = (counts.iter())
                        .map(|(code, n)| (code.to_string(), json!(n)))
                        .collect();
                    (d.id.clone(), Value::Object(by_code))
                })
                .collect();
            let mut response =
                Response::new(Full::new(Bytes::from(Value::Object(counts).to_string())));
            set(&mut response, header::CONTENT_TYPE, "application/json");
            return response;
        }
        let dealer = path
            .strip_prefix("/feeds/")
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(id, file)| self.dealers.get(id).filter(|d| d.format.file() == file));
        match dealer {
            Some(dealer) => dealer.answer(&req, self.hang).await,
            None => status(StatusCode::NOT_FOUND),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.dealers == 0 || args.min_units == 0 || args.min_units > args.max_units {
        return Err("--dealers ≥ 1 and 1 ≤ --min-units ≤ --max-units".into());
    }
    let mut rng = Rng(args.seed);
    let kinds = behaviours(args.dealers, &mut rng);
    let (low, high) = (args.min_units as f64, args.max_units as f64);
    let mut dealers = BTreeMap::new();
    for (i, behaviour) in kinds.into_iter().enumerate() {
        let id = format!("d{:03}", i + 1);
        let units = (low * (high / low).powf(rng.fraction())).round() as usize;
        let format = match (behaviour, rng.below(10)) {
            (Behaviour::Truncated, _) => Format::CsvGz,
            (_, 0..=3) => Format::CsvGz,
            (_, 4..=6) => Format::Json,
            _ => Format::Xml,
        };
        let versions = if behaviour == Behaviour::Changing {
            2
        } else {
            1
        };
        let versions = (0..versions)
            .map(|v| document(format, &id, &dealer_inventory(i, units, v)))
            .collect();
        dealers.insert(
            id.clone(),
            Dealer {
                id,
                format,
                units,
                behaviour,
                versions,
                served: AtomicUsize::new(0),
                counts: Mutex::new(BTreeMap::new()),
            },
        );
    }
    let made_up: Vec<Value> = (dealers.values())
        .map(|d| {
            json!({ "id": d.id, "format": d.format.name(), "units": d.units,
                    "behaviour": d.behaviour.name(), "bytes": d.versions[0].len() })
        })
        .collect();
    let units: usize = dealers.values().map(|d| d.units).sum();
    let bytes: usize = dealers.values().map(|d| d.versions[0].len()).sum();
    let host = Arc::new(Host {
        dealers,
        hang: Duration::from_secs(args.hang),
    });

    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let endpoints = json!({ "url": url, "dealers": made_up, "units": units, "bytes": bytes });
    let tmp = args.endpoints_file.with_extension("tmp");
    std::fs::write(&tmp, endpoints.to_string())?;
    std::fs::rename(&tmp, &args.endpoints_file)?;

    let serving = async {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Usually EMFILE: back off briefly instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let host = Arc::clone(&host);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let host = Arc::clone(&host);
                    async move { Ok::<_, Infallible>(host.handle(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        () = serving => {}
        signal = tokio::signal::ctrl_c() => signal?,
    }
    Ok(())
}
