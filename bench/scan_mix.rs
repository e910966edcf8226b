//! What completed searches cost a fragile DMS (issue 40): `bench/scan_mix.sh` runs this against
//! the release gateway (`BENCH_BIN`, started here with `serve`).
//!
//! The stand-in DMS, written here, lists `units` vehicles (sold ones among them, about one in
//! twelve; some without a price or mileage), filters by one make, pages by number (`page`,
//! `pageSize` ≤ 50) with the total, and answers every call after 100 ms. It counts every call,
//! the most in flight, and when each started (the peak of calls started within any one second).
//! The mapping is what a new user writes for it: the make sent when the buyer gives one, the
//! listing `all` (it lists sold units), so every search and facets call is completed in the
//! gateway from a scan, `max_concurrency: 8`.
//!
//! The workload: a seeded generator of `calls` searches and facets calls as buyer agents send
//! them — 80 % searches (filters: one make, two makes, a year floor, a price ceiling, a
//! condition; sorted by price either way, by year, by mileage or not at all; pages 1–5 of 20,
//! page 1 most often), 20 % facets — with think times spread over several `scan_cache` windows.
//!
//! - **cold / warm**: the largest scan (no make: every unit) asked for once on a fresh gateway,
//!   then again: the buyer's latency both times and the DMS calls.
//! - **sequential**: the mix from one buyer, one call after another, so every DMS call belongs
//!   to exactly one AAP call: DMS calls per AAP call (mean, p99, max) and latency.
//! - **open loop**: the same mix arriving at `rate` calls per second whatever the answers
//!   (buyers at once): DMS calls per AAP call (mean), the DMS's peak calls per second and most in
//!   flight, buyer latency.
//!
//! ```sh
//! target/debug/examples/scan_mix --bin target/release/aap-gateway --units 2000
//! ```
//!
//! Prints one Markdown table row per run and one JSON line per run.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    /// The gateway binary.
    #[arg(long)]
    bin: PathBuf,
    /// Units the DMS lists (sold ones included).
    #[arg(long, default_value_t = 2000)]
    units: usize,
    /// AAP calls in the mix.
    #[arg(long, default_value_t = 1000)]
    calls: usize,
    /// The generator's seed.
    #[arg(long, default_value_t = 40)]
    seed: u64,
    /// Arrivals per second of the open-loop run.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// The mapping's `scan_cache`.
    #[arg(long, default_value = "5s")]
    scan_cache: String,
    /// The mapping's `scan_stale`.
    #[arg(long, default_value = "0s")]
    scan_stale: String,
    /// The mapping's `scan_query` (`filtered`: the make sent when the buyer gives one;
    /// `every_unit`: every scan reads every unit).
    #[arg(long, default_value = "filtered")]
    scan_query: String,
    /// The upstream's `max_concurrency`.
    #[arg(long, default_value_t = 8)]
    max_concurrency: usize,
    /// The upstream's `max_requests_per_second` (none when absent).
    #[arg(long)]
    max_rps: Option<f64>,
    /// Mean think time between two calls of the sequential run, in milliseconds.
    #[arg(long, default_value_t = 20)]
    think_ms: u64,
    /// What to run: cold, sequential, open (comma-separated).
    #[arg(long, default_value = "cold,sequential,open")]
    runs: String,
}

// =============================================================================================
// A seeded generator (SplitMix64): the same seed, the same mix

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Exponential with mean `mean`.
    fn exponential(&mut self, mean: f64) -> f64 {
        let u = ((self.next() >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 1.0);
        -mean * u.ln()
    }
}

const MAKES: [&str; 8] = [
    "Toyota",
    "Honda",
    "Ford",
    "Chevrolet",
    "Nissan",
    "Subaru",
    "Kia",
    "Hyundai",
];
const BODIES: [&str; 4] = ["sedan", "suv", "truck", "hatchback"];

/// One buyer call of the mix: the AAP `data`.
fn buyer_call(rng: &mut Rng) -> Value {
    let mut filters = serde_json::Map::new();
    let makes = rng.below(10);
    if makes < 5 {
        filters.insert(
            "make".into(),
            json!([MAKES[rng.below(MAKES.len() as u64) as usize]]),
        );
    } else if makes < 6 {
        let a = MAKES[rng.below(4) as usize];
        let b = MAKES[4 + rng.below(4) as usize];
        filters.insert("make".into(), json!([a, b]));
    }
    if rng.chance(0.3) {
        filters.insert("year_min".into(), json!(2014 + rng.below(8)));
    }
    if rng.chance(0.25) {
        filters.insert("price_max".into(), json!(15_000 + 5_000 * rng.below(6)));
    }
    if rng.chance(0.15) {
        filters.insert(
            "condition".into(),
            json!([if rng.chance(0.5) { "new" } else { "used" }]),
        );
    }
    if rng.chance(0.2) {
        return json!({ "type": "inventory.facets.request", "filters": filters });
    }
    let sort = match rng.below(10) {
        0..=2 => Value::Null,
        3..=4 => json!({ "field": "price", "order": "asc" }),
        5..=6 => json!({ "field": "price", "order": "desc" }),
        7..=8 => json!({ "field": "year", "order": "desc" }),
        _ => json!({ "field": "mileage", "order": "asc" }),
    };
    // Pages 1–5 of 20, the first most often.
    let page = match rng.below(100) {
        0..=54 => 1,
        55..=74 => 2,
        75..=86 => 3,
        87..=94 => 4,
        _ => 5,
    };
    let mut data = json!({
        "type": "inventory.search.request",
        "filters": filters,
        "pagination": { "skip": (page - 1) * 20, "limit": 20 },
    });
    if !sort.is_null() {
        data["sort"] = sort;
    }
    data
}

// =============================================================================================
// The stand-in DMS

struct Dms {
    units: Vec<Value>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    started: Mutex<Vec<Instant>>,
}

fn dms_units(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let make = MAKES[(i * 7 + i / 13) % MAKES.len()];
            json!({
                "stockNo": format!("S{:05}", (i * 7919) % 100_000),
                "vin": format!("4T1B{:013}", 1_000_000_000 + i * 104_729),
                "make": make,
                "model": format!("{make} {}", ["One", "Two", "Max"][i % 3]),
                "year": 2010 + (i * 31 % 16),
                "price": (i % 17 != 3).then_some(8_000 + (i * 7_307) % 52_000),
                "mileage": (i % 9 != 5).then_some((i * 3_331) % 140_000),
                "condition": if i % 4 == 0 { "new" } else { "used" },
                "body": BODIES[i % BODIES.len()],
                "state": if i % 12 == 7 { "SOLD" } else { "IN_STOCK" },
            })
        })
        .collect()
}

fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl Dms {
    async fn answer(&self, query: &str) -> Response<Full<Bytes>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.started.lock().expect("lock").push(Instant::now());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let make = param(query, "make").filter(|m| !m.is_empty());
        let size: usize = param(query, "pageSize")
            .and_then(|v| v.parse().ok())
            .unwrap_or(10)
            .clamp(1, 50);
        let page: usize = param(query, "page")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let matching: Vec<&Value> = self
            .units
            .iter()
            .filter(|u| make.is_none_or(|m| u["make"].as_str() == Some(m)))
            .collect();
        let start = ((page - 1) * size).min(matching.len());
        let items = &matching[start..(start + size).min(matching.len())];
        let body = json!({ "items": items, "total": matching.len() }).to_string();
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("response")
    }

    /// The most calls started within any one second.
    fn peak_per_second(&self) -> usize {
        let mut started = self.started.lock().expect("lock").clone();
        started.sort();
        let mut most = 0;
        let mut first = 0;
        for (last, at) in started.iter().enumerate() {
            while *at - started[first] >= Duration::from_secs(1) {
                first += 1;
            }
            most = most.max(last + 1 - first);
        }
        most
    }

    fn reset(&self) {
        self.calls.store(0, Ordering::SeqCst);
        self.most_in_flight.store(0, Ordering::SeqCst);
        self.started.lock().expect("lock").clear();
    }
}

async fn serve_dms(dms: Arc<Dms>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let dms = Arc::clone(&dms);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<_>| {
                    let dms = Arc::clone(&dms);
                    async move {
                        let query = req.uri().query().unwrap_or_default().to_owned();
                        Ok::<_, Infallible>(dms.answer(&query).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

// =============================================================================================
// The gateway

struct Gateway {
    child: Child,
    rpc: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

async fn start_gateway(args: &Args, dir: &Path, dms: SocketAddr) -> Gateway {
    let mappings = dir.join("keel");
    std::fs::create_dir_all(&mappings).expect("mappings");
    write(
        &mappings.join("upstreams.yaml"),
        &format!(
            "dms:\n  kind: rest\n  base_url: http://{dms}\n  max_concurrency: {}\n  timeouts: {{ connect: 1s, request: 5s, queue: 10s }}\n{}",
            args.max_concurrency,
            args.max_rps
                .map(|r| format!("  max_requests_per_second: {r}\n"))
                .unwrap_or_default()
        ),
    );
    write(
        &mappings.join("inventory.search.yaml"),
        &format!(
            r#"skill: inventory.search
upstream: dms
scan_cache: {}
scan_stale: {}
scan_query: {}
request:
  path: /api/units
  query:
    make: "{{{{ request.filters.make | join(',') }}}}"
  pagination: {{ style: page, page: page, size: pageSize, first: 1, max_size: 50 }}
  supports:
    filters: [{{ name: make, values: one }}]
response:
  items: .items
  total: .total
  item: |
    {{
      stock: .stockNo, vin: .vin, make: .make, model: .model, year: .year, price: .price,
      mileage: .mileage, condition: .condition, body: .body,
      status: (if .state == "SOLD" then "sold" else "available" end)
    }} | compact
"#,
            args.scan_cache, args.scan_stale, args.scan_query
        ),
    );
    write(
        &mappings.join("inventory.facets.yaml"),
        "skill: inventory.facets\nderive: search\n",
    );
    let (port, admin) = (free_port(), free_port());
    write(
        &dir.join("gateway.yaml"),
        &format!(
            "listen: 127.0.0.1:{port}\nadmin_listen: 127.0.0.1:{admin}\nrate_limit: {{ enabled: false }}\nlimits: {{ max_concurrency: 4096 }}\ndealers:\n  - id: keel\n    path_prefix: /dealers/keel\n    card: {{ name: Keel Street Motors, description: A bench dealer. }}\n    mappings: {}\n",
            mappings.display()
        ),
    );
    let log = std::fs::File::create(dir.join("gateway.log")).expect("log");
    let child = Command::new(&args.bin)
        .args(["serve", "-c"])
        .arg(dir.join("gateway.yaml"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the gateway starts");
    // Stopped (killed and waited for) when dropped, on every path.
    let gateway = Gateway {
        child,
        rpc: format!("http://127.0.0.1:{port}/dealers/keel/a2a"),
    };
    let client = reqwest::Client::new();
    let ready = format!("http://127.0.0.1:{admin}/readyz");
    for _ in 0..600 {
        if client
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return gateway;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the gateway did not get ready; see {}",
        dir.join("gateway.log").display()
    );
}

/// One AAP call: (answered, latency).
async fn call(client: &reqwest::Client, rpc: &str, data: &Value) -> (bool, Duration) {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": { "message": { "messageId": "m-1", "role": "ROLE_USER", "parts": [{ "data": data }] } }
    });
    let started = Instant::now();
    let reply = client
        .post(rpc)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header(
            "a2a-extensions",
            "https://draft.autoagentprotocol.invalid/extensions/aap/latest",
        )
        .body(body.to_string())
        .send()
        .await;
    let reply = match reply {
        Ok(r) => r.json::<Value>().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let took = started.elapsed();
    let answered = reply.as_ref().is_ok_and(|v| v.get("result").is_some());
    // The first few refusals are shown: a bench whose answers are errors measures nothing.
    static SHOWN: AtomicUsize = AtomicUsize::new(0);
    if !answered && SHOWN.fetch_add(1, Ordering::Relaxed) < 3 {
        eprintln!("refused: {data} → {reply:?}");
    }
    (answered, took)
}

// =============================================================================================
// Figures

fn percentile<T: Copy + Ord>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

struct Report {
    run: &'static str,
    units: usize,
    calls: usize,
    errors: usize,
    dms_calls: usize,
    per_call: Option<(usize, usize)>,
    peak: usize,
    most_in_flight: usize,
    latency: Vec<Duration>,
}

impl Report {
    fn print(&self, args: &Args) {
        let mut latency = self.latency.clone();
        latency.sort();
        let mean = self.dms_calls as f64 / self.calls.max(1) as f64;
        let (p99, max) = self
            .per_call
            .map_or(("–".to_owned(), "–".to_owned()), |(p, m)| {
                (p.to_string(), m.to_string())
            });
        println!(
            "| {} | {} | {} | {} | {:.2} | {p99} | {max} | {} | {} | {} | {} | {} | {} |",
            self.run,
            self.units,
            self.calls,
            self.errors,
            mean,
            self.dms_calls,
            self.peak,
            self.most_in_flight,
            ms(percentile(&latency, 50.0)),
            ms(percentile(&latency, 99.0)),
            ms(*latency.last().unwrap_or(&Duration::ZERO)),
        );
        let line = json!({
            "run": self.run, "units": self.units, "calls": self.calls, "errors": self.errors,
            "dms_calls": self.dms_calls, "dms_calls_per_aap_call_mean": mean,
            "dms_calls_per_aap_call_p99": self.per_call.map(|(p, _)| p),
            "dms_calls_per_aap_call_max": self.per_call.map(|(_, m)| m),
            "dms_peak_per_second": self.peak, "dms_most_in_flight": self.most_in_flight,
            "latency_ms_p50": ms(percentile(&latency, 50.0)),
            "latency_ms_p99": ms(percentile(&latency, 99.0)),
            "latency_ms_max": ms(*latency.last().unwrap_or(&Duration::ZERO)),
            "scan_cache": args.scan_cache, "scan_stale": args.scan_stale,
            "scan_query": args.scan_query,
            "max_concurrency": args.max_concurrency, "seed": args.seed, "rate": args.rate,
            "max_requests_per_second": args.max_rps,
        });
        eprintln!("{line}");
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dms = Arc::new(Dms {
        units: dms_units(args.units),
        calls: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        most_in_flight: AtomicUsize::new(0),
        started: Mutex::new(Vec::new()),
    });
    let addr = serve_dms(Arc::clone(&dms)).await;
    let work = tempfile::tempdir().expect("work dir");
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(256)
        .build()
        .expect("client");
    let mut rng = Rng(args.seed);
    let mix: Vec<Value> = (0..args.calls).map(|_| buyer_call(&mut rng)).collect();
    let runs: Vec<&str> = args.runs.split(',').map(str::trim).collect();
    println!(
        "| run | units | AAP calls | errors | DMS calls per AAP call (mean) | p99 | max | DMS calls | DMS peak calls/s | DMS most in flight | buyer p50 ms | buyer p99 ms | buyer max ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let _ = std::io::stdout().flush();

    if runs.contains(&"cold") {
        // The largest scan (every unit), on a fresh gateway: cold, then warm.
        let dir = work.path().join("cold");
        std::fs::create_dir_all(&dir).expect("dir");
        let gw = start_gateway(&args, &dir, addr).await;
        let search = json!({
            "type": "inventory.search.request",
            "sort": { "field": "price", "order": "asc" },
            "pagination": { "skip": 0, "limit": 20 },
        });
        for run in ["cold", "warm"] {
            dms.reset();
            let (answered, latency) = call(&client, &gw.rpc, &search).await;
            Report {
                run,
                units: args.units,
                calls: 1,
                errors: usize::from(!answered),
                dms_calls: dms.calls.load(Ordering::SeqCst),
                per_call: None,
                peak: dms.peak_per_second(),
                most_in_flight: dms.most_in_flight.load(Ordering::SeqCst),
                latency: vec![latency],
            }
            .print(&args);
        }
    }

    if runs.contains(&"sequential") {
        let dir = work.path().join("sequential");
        std::fs::create_dir_all(&dir).expect("dir");
        let gw = start_gateway(&args, &dir, addr).await;
        dms.reset();
        let mut think = Rng(args.seed ^ 0x5EED);
        let (mut latency, mut per_call, mut errors) = (Vec::new(), Vec::new(), 0);
        for data in &mix {
            let before = dms.calls.load(Ordering::SeqCst);
            let (answered, took) = call(&client, &gw.rpc, data).await;
            per_call.push(dms.calls.load(Ordering::SeqCst) - before);
            latency.push(took);
            errors += usize::from(!answered);
            let pause = think.exponential(args.think_ms as f64);
            tokio::time::sleep(Duration::from_secs_f64(pause / 1000.0)).await;
        }
        per_call.sort_unstable();
        Report {
            run: "sequential",
            units: args.units,
            calls: mix.len(),
            errors,
            dms_calls: dms.calls.load(Ordering::SeqCst),
            per_call: Some((percentile(&per_call, 99.0), *per_call.last().unwrap_or(&0))),
            peak: dms.peak_per_second(),
            most_in_flight: dms.most_in_flight.load(Ordering::SeqCst),
            latency,
        }
        .print(&args);
    }

    if runs.contains(&"open") {
        let dir = work.path().join("open");
        std::fs::create_dir_all(&dir).expect("dir");
        let gw = start_gateway(&args, &dir, addr).await;
        dms.reset();
        let rpc = Arc::new(gw.rpc.clone());
        let started = Instant::now();
        let gap = Duration::from_secs_f64(1.0 / args.rate);
        let mut tasks = Vec::with_capacity(mix.len());
        for (i, data) in mix.iter().enumerate() {
            let at = started + gap * i as u32;
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            let (client, rpc, data) = (client.clone(), Arc::clone(&rpc), data.clone());
            tasks.push(tokio::spawn(
                async move { call(&client, &rpc, &data).await },
            ));
        }
        let (mut latency, mut errors) = (Vec::new(), 0);
        for task in tasks {
            let (answered, took) = task.await.expect("a call");
            latency.push(took);
            errors += usize::from(!answered);
        }
        Report {
            run: "open loop",
            units: args.units,
            calls: mix.len(),
            errors,
            dms_calls: dms.calls.load(Ordering::SeqCst),
            per_call: None,
            peak: dms.peak_per_second(),
            most_in_flight: dms.most_in_flight.load(Ordering::SeqCst),
            latency,
        }
        .print(&args);
    }
}
