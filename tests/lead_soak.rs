//! Soak: buyers submit leads — each one twice at once, to two replicas of the real binary
//! sharing one redis-server, and again on every retryable answer — while the SOAP CRM hangs,
//! fails and restarts, the mail intake is slow, refuses and hangs, and Redis restarts empty.
//! Every lead is then counted where it lands: the CRM (every submission it processed, by
//! `ExternalRef`) and the SMTP intake (every message it queued, by `Message-ID`). The rule:
//! **0 lost, 0 duplicated**.
//!
//! The short run is part of the suite; the long one is `--ignored` (docs/operations.md §Soak
//! figures has its command and what it measured). Both need `redis-server` (skipped without it
//! unless `AAP_TEST_REQUIRE_REDIS=1`).
//!
//! The replicas run with `on_backend_error: deny` (the setting for strictly one delivery per
//! key, docs/operations.md §Idempotency) and `on_ambiguous: resend`. The faults cut deliveries
//! before the CRM processed them or leave them unanswered; a CRM that processes a lead and
//! answers after the gateway's timeout is the one case no gateway can tell from a lost lead
//! (tests/leads.rs covers what `resend` and `hold` make of it).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::crm::Crm;
use aap_sim::inventory;
use aap_sim::sim::{self, Mode, SimApp, SimHandle, SimRequest, SimResponse};
use common::DemoCopy;
use common::process::{in_stock, lead_fault_demo, lead_request, lock, replica};
use common::redis::RedisServer;
use serde_json::{Value, json};

const TOYOTA: &str = "/a2a";
const HONDA: &str = "/dealers/demo-honda/a2a";

/// The demo CRM, counting every submission it processed (answered 200) per `ExternalRef`.
/// It outlives the CRM's restarts, as a CRM's database does.
struct CountingCrm {
    crm: Crm,
    processed: Mutex<HashMap<String, usize>>,
}

impl SimApp for CountingCrm {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        let response = self.crm.handle(req);
        if response.status() == 200
            && let Some(reference) = between(&req.body, "ExternalRef>", "</")
        {
            *lock(&self.processed).entry(reference).or_default() += 1;
        }
        response
    }
    fn fixtures(&self) -> Value {
        self.crm.fixtures()
    }
    fn fail(&self, req: &SimRequest) -> SimResponse {
        self.crm.fail(req)
    }
    fn garbage(&self, req: &SimRequest) -> SimResponse {
        self.crm.garbage(req)
    }
    fn huge(&self, req: &SimRequest) -> SimResponse {
        self.crm.huge(req)
    }
}

fn between(body: &[u8], start: &str, end: &str) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let from = text.find(start)? + start.len();
    let to = from + text[from..].find(end)?;
    Some(text[from..to].to_owned())
}

/// The demo, made quick to fail: short CRM and mail timeouts, a 3 s request deadline, keys in
/// Redis with short leases, quotas out of the way.
fn soak_config(redis_url: &str) -> DemoCopy {
    let files = lead_fault_demo("3s");
    files.edit(
        "mappings/demo-toyota/upstreams.yaml",
        "timeouts: { connect: 1s, request: 5s }\n  circuit_breaker: { failures: 5, cool_down: 10s }",
        "timeouts: { connect: 300ms, request: 800ms }\n  circuit_breaker: { failures: 5, cool_down: 500ms }",
    );
    files.edit(
        "mappings/demo-honda/upstreams.yaml",
        "timeouts: { connect: 2s, request: 10s }\n  circuit_breaker: { failures: 5, cool_down: 10s }",
        "timeouts: { connect: 500ms, request: 1s, data: 3s }\n  circuit_breaker: { failures: 5, cool_down: 500ms }",
    );
    files.append(
        "config/demo.yaml",
        &format!(
            "idempotency:\n  backend: redis\n  redis_url: {redis_url}\n  redis_timeout: 200ms\n  \
             lock_ttl: 1500ms\n  on_backend_error: deny\n  on_ambiguous: resend\n"
        ),
    );
    files
}

/// Lead `n` of `buyer`: its own customer (the CRM merges a customer's repeat leads).
fn lead(buyer: usize, n: usize, honda: bool) -> Value {
    let vehicle = if honda {
        in_stock(inventory::honda_powersports())
    } else {
        in_stock(inventory::toyota_group())
    };
    let customer = json!({
        "first_name": "Soak", "last_name": format!("Buyer {buyer}"),
        "email": format!("soak.{buyer}.{n}@example.com"),
        "phone": format!("+1415{:07}", buyer * 10_000 + n),
        "preferred_contact": "email"
    });
    let mut request = lead_request(
        customer,
        &vehicle,
        &format!("soak-buyer-{buyer}"),
        &format!("soak-{buyer}-{n}"),
    );
    request["message"] = json!("Is it still available?");
    request
}

/// What happened to the buyers' calls.
#[derive(Default)]
struct Calls {
    sent: AtomicUsize,
    in_progress: AtomicUsize,
    retryable: AtomicUsize,
    transport: AtomicUsize,
}

/// One try: the lead's `data` on success, `None` for anything the buyer retries.
async fn try_once(
    client: &reqwest::Client,
    url: &str,
    request: &Value,
    calls: &Calls,
) -> Option<Value> {
    calls.sent.fetch_add(1, Ordering::Relaxed);
    let post = common::post_send_message(client, url, request.clone());
    let Ok(response) = post.send().await else {
        calls.transport.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let Ok(body) = response.json::<Value>().await else {
        calls.transport.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    if let Some(data) = body.pointer("/result/message/parts/0/data/data") {
        return Some(data.clone());
    }
    let text = body.to_string();
    assert!(
        text.contains("\"retryable\":true") || text.contains("RATE_LIMITED"),
        "a lead was refused for good: {text}"
    );
    if text.contains("\"lead\":\"in_progress\"") {
        calls.in_progress.fetch_add(1, Ordering::Relaxed);
    } else {
        calls.retryable.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// Submits one lead to both replicas at once, and again after every retryable answer, until it
/// is answered; the `lead_id`s answered (one per successful call).
async fn submit(
    client: &reqwest::Client,
    urls: [String; 2],
    request: &Value,
    calls: &Calls,
    give_up: Instant,
) -> Vec<String> {
    loop {
        let (a, b) = tokio::join!(
            try_once(client, &urls[0], request, calls),
            try_once(client, &urls[1], request, calls)
        );
        let ids: Vec<String> = [a, b]
            .into_iter()
            .flatten()
            .map(|d| d["lead_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        if !ids.is_empty() {
            return ids;
        }
        assert!(
            Instant::now() < give_up,
            "a lead was never answered: {request}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// What the run measured.
#[derive(Debug, Default)]
struct Figures {
    leads: usize,
    faults: HashMap<&'static str, usize>,
    lost: usize,
    duplicated: usize,
}

/// The CRM on a port it keeps across restarts.
struct CrmServer {
    app: Arc<CountingCrm>,
    addr: SocketAddr,
    handle: tokio::sync::Mutex<Option<SimHandle>>,
}

impl CrmServer {
    async fn start() -> CrmServer {
        let listener = sim::bind_loopback().await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = Arc::new(CountingCrm {
            crm: Crm::new(),
            processed: Mutex::new(HashMap::new()),
        });
        let handle = sim::serve(listener, Arc::clone(&app) as Arc<dyn SimApp>).expect("serve");
        CrmServer {
            app,
            addr,
            handle: tokio::sync::Mutex::new(Some(handle)),
        }
    }

    async fn set_mode(&self, mode: Mode, delay_ms: u64) {
        if let Some(handle) = self.handle.lock().await.as_ref() {
            handle.set_mode(mode, delay_ms);
        }
    }

    /// A crash and a restart: submissions in flight are cut before the CRM processed them
    /// (they are held back first), then connections are refused for a moment.
    async fn restart(&self) {
        self.set_mode(Mode::Slow, 60_000).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(handle) = self.handle.lock().await.take() {
            handle.shutdown().await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("rebind");
        let handle = sim::serve(listener, Arc::clone(&self.app) as Arc<dyn SimApp>).expect("serve");
        *self.handle.lock().await = Some(handle);
    }
}

async fn soak(fault_phase: Duration, buyers: usize) -> Option<Figures> {
    let redis = RedisServer::start()?;
    let redis_url = redis.url.clone();
    let redis = Arc::new(Mutex::new(redis));
    let sims = Simulators::start().await.expect("simulators");
    let crm = Arc::new(CrmServer::start().await);
    let mut vars = common::simulator_vars(&sims);
    vars.insert("CRM_URL".to_owned(), format!("http://{}", crm.addr));
    let files = soak_config(&redis_url);
    let config = files.path("config/demo.yaml");
    let replicas = [replica(&config, &vars).await, replica(&config, &vars).await];

    let calls = Arc::new(Calls::default());
    let faulting = Arc::new(AtomicBool::new(true));
    let give_up = Instant::now() + fault_phase + Duration::from_secs(60);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2)) // shorter than some deliveries: buyers go away
        .build()
        .expect("client");
    let mut buyer_tasks = Vec::new();
    for buyer in 0..buyers {
        let (client, calls, faulting) = (client.clone(), Arc::clone(&calls), Arc::clone(&faulting));
        let bases = [replicas[0].url.clone(), replicas[1].url.clone()];
        buyer_tasks.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut n = 0;
            while faulting.load(Ordering::Relaxed) {
                let honda = (buyer + n) % 2 == 1;
                let path = if honda { HONDA } else { TOYOTA };
                let request = lead(buyer, n, honda);
                let urls = [format!("{}{path}", bases[0]), format!("{}{path}", bases[1])];
                let ids = submit(&client, urls, &request, &calls, give_up).await;
                answered.push((request, honda, ids));
                n += 1;
            }
            answered
        }));
    }

    // The faults, one after the other, each for a moment, then back to normal.
    let mut figures = Figures::default();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < fault_phase {
        let fault: &'static str = match round % 8 {
            0 => {
                crm.set_mode(Mode::Hang, 0).await;
                "crm hangs (timeouts)"
            }
            1 => {
                crm.set_mode(Mode::Fail, 0).await;
                "crm fails (HTTP 500)"
            }
            2 => {
                crm.restart().await;
                "crm restarts"
            }
            3 => {
                let redis = Arc::clone(&redis);
                tokio::task::spawn_blocking(move || lock(&redis).restart())
                    .await
                    .expect("redis restart");
                "redis restarts empty"
            }
            4 => {
                sims.smtp.control.set_mode(Mode::Slow, 2000);
                "intake answers the final dot late"
            }
            5 => {
                sims.smtp.control.set_mode(Mode::Fail, 0);
                "intake refuses (451)"
            }
            6 => {
                sims.smtp.control.set_mode(Mode::Hang, 0);
                "intake hangs after the message"
            }
            _ => "none",
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        crm.set_mode(Mode::Normal, 0).await;
        sims.smtp.control.set_mode(Mode::Normal, 0);
        if fault != "none" {
            *figures.faults.entry(fault).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        round += 1;
    }
    faulting.store(false, Ordering::Relaxed);
    let mut answered = Vec::new();
    for task in buyer_tasks {
        answered.extend(task.await.expect("buyer"));
    }
    // Deliveries still running (a hung intake's message, say) end within their timeouts.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let processed = lock(&crm.app.processed).clone();
    let mut mails: HashMap<String, usize> = HashMap::new();
    for message in sims.smtp.messages() {
        let id = message["message_id"]
            .as_str()
            .unwrap_or_default()
            .trim_matches(['<', '>'])
            .to_owned();
        *mails.entry(id).or_default() += 1;
    }
    let crm_leads = crm.app.fixtures()["leads"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    figures.leads = answered.len();
    for (request, honda, ids) in &answered {
        assert!(
            ids.windows(2).all(|w| w[0] == w[1]),
            "both replicas answered, with different leads: {ids:?}"
        );
        // The lead's reference: the CRM's ExternalRef, and the mail's Message-ID.
        let dealer = if *honda { "demo_honda" } else { "demo_toyota" };
        let fingerprint = aap_gateway::idempotency::fingerprint(request);
        let reference = aap_gateway::engine::lead::reference(dealer, None, request, &fingerprint);
        let landed = if *honda {
            mails
                .get(&format!("{reference}@aap-gateway"))
                .copied()
                .unwrap_or(0)
        } else {
            let recorded = crm_leads
                .iter()
                .filter(|l| l["external_ref"].as_str() == Some(reference.as_str()))
                .count();
            assert!(recorded <= 1, "{reference}: {recorded} CRM records");
            processed.get(&reference).copied().unwrap_or(0)
        };
        match landed {
            0 => figures.lost += 1,
            1 => {}
            _ => figures.duplicated += 1,
        }
    }
    // Nothing arrived that no buyer was answered for.
    let mail_total: usize = mails.values().sum();
    let honda_leads = answered.iter().filter(|(_, honda, _)| *honda).count();
    figures.duplicated += mail_total.saturating_sub(honda_leads);
    let crm_total: usize = processed.values().sum();
    figures.duplicated += crm_total.saturating_sub(answered.len() - honda_leads);
    eprintln!(
        "soak: {} leads ({} to the CRM, {} by mail), {} buyer calls ({} in progress, {} other \
         retryable, {} cut by the buyer or refused), faults survived {:?}: lost {}, duplicated {}",
        figures.leads,
        answered.len() - honda_leads,
        honda_leads,
        calls.sent.load(Ordering::Relaxed),
        calls.in_progress.load(Ordering::Relaxed),
        calls.retryable.load(Ordering::Relaxed),
        calls.transport.load(Ordering::Relaxed),
        figures.faults,
        figures.lost,
        figures.duplicated
    );
    Some(figures)
}

fn assert_exactly_once(figures: &Figures, rounds: usize) {
    assert!(
        figures.leads >= 8,
        "too few leads to mean anything: {figures:?}"
    );
    assert!(
        figures.faults.len() >= rounds.min(7),
        "every kind of fault ran: {figures:?}"
    );
    assert_eq!(figures.lost, 0, "{figures:?}");
    assert_eq!(figures.duplicated, 0, "{figures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_short_no_lead_lost_or_duplicated_under_faults() {
    let Some(figures) = soak(Duration::from_secs(8), 4).await else {
        return;
    };
    assert_exactly_once(&figures, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "long soak (about 3 minutes); docs/operations.md §Soak figures"]
async fn soak_long_no_lead_lost_or_duplicated_under_faults() {
    let Some(figures) = soak(Duration::from_secs(150), 8).await else {
        return;
    };
    assert_exactly_once(&figures, 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_waits_for_a_running_lead_delivery() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "request_timeout: 15s",
        "request_timeout: 2s\n  body_read_timeout: 1s",
    );
    let vars = common::simulator_vars(&sims);
    let mut gw = replica(&files.path("config/demo.yaml"), &vars).await;
    // The intake answers the final dot after 4 s: the buyer hears "in progress" at ~2 s.
    sims.smtp.control.set_mode(Mode::Slow, 4000);
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let calls = Calls::default();
    let sent = Instant::now();
    let answered = try_once(
        &client,
        &format!("{}{HONDA}", gw.url),
        &lead(0, 0, true),
        &calls,
    )
    .await;
    assert!(answered.is_none());
    assert_eq!(calls.in_progress.load(Ordering::Relaxed), 1);

    // SIGTERM now: the process drains, and waits for the delivery before it exits.
    common::process::terminate(&mut gw.child, Duration::from_secs(20)).await;
    assert!(
        sent.elapsed() >= Duration::from_millis(3800),
        "exited {:?} after the lead was sent, before its delivery ended",
        sent.elapsed()
    );
    assert_eq!(sims.smtp.messages().len(), 1);
    let log = std::fs::read_to_string(gw.log.path()).expect("log");
    assert!(log.contains("no lead delivery running"), "{log}");
}
