//! The exactly-once proof (issue 38): buyers submit leads, each one to every replica at once and
//! again on every retryable answer, while the CRM commits every lead it is sent and then answers
//! `502`, `504`, drops the connection or answers too late, a gateway replica is killed with
//! `SIGKILL` mid-delivery and started again, and Redis is killed with `SIGKILL` and restarted
//! from its append-only file (`appendfsync everysec`: the last second's writes are lost).
//!
//! The CRM stand-in never de-duplicates: every lead it is sent is a lead it keeps. Each lead is
//! counted there, by its idempotency key (the customer's e-mail names it) and by the gateway's
//! reference (`external_ref`):
//!
//! - **lost**: the buyer heard `received`, or gave up, and the CRM has no copy;
//! - **duplicated under a new reference**: a second copy whose reference differs from the first
//!   (a CRM de-duplicating on the reference would keep both);
//! - **resent under the same reference**: a second copy under the first copy's reference;
//! - **held**: the buyer's last answer was `details.lead: held` (with the copies the CRM has).
//!
//! Rows: both `on_ambiguous` choices, both idempotency backends. With Redis two replicas share
//! keys (`on_backend_error: deny`); with `memory` one replica (its store is its own: a second
//! replica could not know the first's keys). docs/operations.md §Exactly-once figures has the
//! measured rows and the command for the long run.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::inventory::{self, Status};
use common::DemoCopy;
use common::process::{Replica, replica};
use common::redis::{Persistence, RedisServer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HONDA: &str = "/dealers/demo-honda/a2a";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The CRM: commits every lead it reads, then answers as its current fault says.

const NORMAL: u8 = 0;
const COMMIT_502: u8 = 1;
const COMMIT_504: u8 = 2;
const COMMIT_DROP: u8 = 3;
/// Commits, then answers after the gateway's upstream timeout (1 s).
const COMMIT_LATE: u8 = 4;
/// Commits, then answers after 700 ms (inside the timeout): deliveries in flight for a kill.
const SLOW: u8 = 5;

struct Crm {
    addr: SocketAddr,
    fault: Arc<AtomicU8>,
    /// Every lead kept: (idempotency key, reference).
    kept: Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Crm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Crm {
    async fn start() -> Crm {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let fault = Arc::new(AtomicU8::new(NORMAL));
        let kept = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (fault, kept) = (Arc::clone(&fault), Arc::clone(&kept));
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (fault, kept) = (Arc::clone(&fault), Arc::clone(&kept));
                    tokio::spawn(serve(stream, fault, kept));
                }
            }
        });
        Crm {
            addr,
            fault,
            kept,
            task,
        }
    }

    fn set(&self, fault: u8) {
        self.fault.store(fault, Ordering::SeqCst);
    }
}

/// One connection, one request (answered with `Connection: close`).
async fn serve(
    mut stream: tokio::net::TcpStream,
    fault: Arc<AtomicU8>,
    kept: Arc<Mutex<Vec<(String, String)>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, length) = loop {
        let Ok(n) = stream.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let Ok(lead) = serde_json::from_slice::<Value>(&buf[head_end..head_end + length]) else {
        let _ = stream
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let reference = lead["external_ref"].as_str().unwrap_or_default().to_owned();
    let key = lead["customer"]["email"]
        .as_str()
        .and_then(|e| e.strip_suffix("@example.com"))
        .unwrap_or_default()
        .to_owned();
    let id = {
        let mut kept = lock(&kept);
        kept.push((key, reference));
        kept.len()
    };
    let answer = |status: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let ok = answer(
        "200 OK",
        &json!({ "leadId": format!("L-{id}") }).to_string(),
    );
    let text = match fault.load(Ordering::SeqCst) {
        COMMIT_502 => answer("502 Bad Gateway", "{}"),
        COMMIT_504 => answer("504 Gateway Timeout", "{}"),
        COMMIT_DROP => return,
        COMMIT_LATE => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            ok
        }
        SLOW => {
            tokio::time::sleep(Duration::from_millis(700)).await;
            ok
        }
        _ => ok,
    };
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The gateway

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Redis,
    Memory,
}

/// The demo with Demo Honda sending leads as JSON to the CRM stand-in, quick to time out, quotas
/// out of the way, and the row's idempotency settings.
fn proof_config(keys: &str) -> DemoCopy {
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "request_timeout: 15s",
        "request_timeout: 3s\n  body_read_timeout: 1s",
    );
    files.edit(
        "config/demo.yaml",
        "lead.submit: { rate: 60/min, burst: 20 }",
        "lead.submit: { rate: 100000/min, burst: 10000 }",
    );
    files.edit(
        "config/demo.yaml",
        "default: { rate: 100/s, burst: 200 }",
        "default: { rate: 100000/s, burst: 100000 }",
    );
    files.append("config/demo.yaml", keys);
    files.append(
        "mappings/demo-honda/upstreams.yaml",
        "\ncrm_json:\n  kind: rest\n  base_url: ${PROOF_CRM_URL}\n  timeouts: { connect: 300ms, request: 1s }\n",
    );
    std::fs::write(
        files.path("mappings/demo-honda/lead.submit.yaml"),
        "skill: lead.submit\nupstream: crm_json\nrequest:\n  method: POST\n  path: /leads\n  body: |\n    { \"external_ref\": {{ lead.reference }}, \"customer\": {{ request.customer }} }\nresponse:\n  jq: '{ lead_id: .leadId, status: \"received\" }'\n",
    )
    .expect("write mapping");
    files
}

fn lead(key: &str) -> Value {
    let bike = inventory::honda_powersports()
        .into_iter()
        .find(|u| u.status == Status::InStock)
        .expect("a unit in stock");
    json!({
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Proof", "last_name": "Buyer",
            "email": format!("{key}@example.com"),
            "phone": "+14155550142",
            "preferred_contact": "email"
        },
        "consent": {
            "granted_at": "2026-04-30T10:16:00Z",
            "allowed_channels": ["email", "phone"],
            "consent_text": "I agree to share my contact info with the dealer about this vehicle.",
            "scope": ["lead_submission"]
        },
        "vehicle_of_interest": {
            "vin": bike.vin, "year": bike.year, "make": bike.make, "model": bike.model,
            "condition": "new"
        },
        "source_agent": { "name": "proof-buyer" },
        "submitted_at": "2026-04-30T10:16:05Z",
        "idempotency_key": key
    })
}

// ---------------------------------------------------------------------------------------------
// The buyers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Received,
    Held,
    /// In progress, another retryable error, no answer at all.
    Retry,
}

async fn try_once(client: &reqwest::Client, url: &str, request: &Value) -> Answer {
    let Ok(response) = common::post_send_message(client, url, request.clone())
        .send()
        .await
    else {
        return Answer::Retry;
    };
    let Ok(body) = response.json::<Value>().await else {
        return Answer::Retry;
    };
    if body
        .pointer("/result/message/parts/0/data/data/lead_id")
        .is_some()
    {
        return Answer::Received;
    }
    let text = body.to_string();
    assert!(
        text.contains("\"retryable\":true"),
        "a lead was refused for good: {text}"
    );
    if text.contains("\"lead\":\"held\"") {
        Answer::Held
    } else {
        Answer::Retry
    }
}

/// Submits `request` to every replica at once until one answers `received`, or it was held
/// three times in a row, or `give_up` passes.
async fn submit(
    client: &reqwest::Client,
    urls: &RwLock<Vec<String>>,
    request: &Value,
    give_up: Instant,
) -> Option<Answer> {
    let mut held = 0;
    loop {
        let bases = urls.read().expect("urls").clone();
        let mut tries = tokio::task::JoinSet::new();
        for base in bases {
            let (client, request) = (client.clone(), request.clone());
            tries
                .spawn(async move { try_once(&client, &format!("{base}{HONDA}"), &request).await });
        }
        let answers: Vec<Answer> = tries.join_all().await;
        if answers.contains(&Answer::Received) {
            return Some(Answer::Received);
        }
        if answers.contains(&Answer::Held) {
            held += 1;
            if held >= 3 {
                return Some(Answer::Held);
            }
        } else {
            held = 0;
        }
        if Instant::now() > give_up {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// What one row measured.
#[derive(Debug, Default)]
struct Figures {
    leads: usize,
    lost: usize,
    new_reference: usize,
    same_reference: usize,
    held: usize,
    /// Held leads the CRM does have (a reconciliation finds them).
    held_at_crm: usize,
    /// Leads whose buyer never heard `received` nor `held` (the CRM has them: else lost).
    unanswered: usize,
    faults: BTreeMap<&'static str, usize>,
}

async fn run(
    backend: Backend,
    on_ambiguous: &str,
    fault_phase: Duration,
    buyers: usize,
) -> Option<Figures> {
    let redis = match backend {
        Backend::Redis => Some(RedisServer::start_persistent(Persistence::AppendOnly)?),
        Backend::Memory => None,
    };
    let keys = match &redis {
        Some(redis) => format!(
            "idempotency:\n  backend: redis\n  redis_url: {}\n  redis_timeout: 200ms\n  lock_ttl: 1500ms\n  on_backend_error: deny\n  on_ambiguous: {on_ambiguous}\n",
            redis.url
        ),
        None => format!("idempotency:\n  backend: memory\n  on_ambiguous: {on_ambiguous}\n"),
    };
    let redis = Arc::new(Mutex::new(redis));
    let sims = Simulators::start().await.expect("simulators");
    let crm = Crm::start().await;
    let mut vars = common::simulator_vars(&sims);
    vars.insert("PROOF_CRM_URL".to_owned(), format!("http://{}", crm.addr));
    let files = proof_config(&keys);
    let config = files.path("config/demo.yaml");
    let count = if backend == Backend::Redis { 2 } else { 1 };
    let mut replicas: Vec<Replica> = Vec::new();
    for _ in 0..count {
        replicas.push(replica(&config, &vars).await);
    }
    let urls = Arc::new(RwLock::new(
        replicas.iter().map(|r| r.url.clone()).collect::<Vec<_>>(),
    ));

    let faulting = Arc::new(AtomicBool::new(true));
    let give_up = Instant::now() + fault_phase + Duration::from_secs(30);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(4))
        .build()
        .expect("client");
    let answered = Arc::new(Mutex::new(HashMap::<String, Option<Answer>>::new()));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut buyer_tasks = Vec::new();
    for buyer in 0..buyers {
        let (client, urls, faulting) = (client.clone(), Arc::clone(&urls), Arc::clone(&faulting));
        let (answered, sent) = (Arc::clone(&answered), Arc::clone(&sent));
        buyer_tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while faulting.load(Ordering::Relaxed) {
                let key = format!("proof-{buyer}-{n}");
                sent.fetch_add(1, Ordering::Relaxed);
                let answer = submit(&client, &urls, &lead(&key), give_up).await;
                lock(&answered).insert(key, answer);
                n += 1;
            }
        }));
    }

    let mut figures = Figures::default();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < fault_phase {
        let fault: &'static str = match round % 6 {
            0 => {
                crm.set(COMMIT_502);
                "crm commits, answers 502"
            }
            1 => {
                crm.set(COMMIT_504);
                "crm commits, answers 504"
            }
            2 => {
                crm.set(COMMIT_DROP);
                "crm commits, drops the connection"
            }
            3 => {
                crm.set(COMMIT_LATE);
                "crm commits, answers after the timeout"
            }
            4 => {
                // Deliveries in flight (the CRM takes 700 ms), then the replica dies.
                crm.set(SLOW);
                tokio::time::sleep(Duration::from_millis(400)).await;
                let dead = replicas.remove(0);
                drop(dead); // SIGKILL
                let fresh = replica(&config, &vars).await;
                replicas.insert(0, fresh);
                *urls.write().expect("urls") = replicas.iter().map(|r| r.url.clone()).collect();
                "gateway replica killed (SIGKILL) mid-delivery, restarted"
            }
            _ => {
                if backend == Backend::Redis {
                    let redis = Arc::clone(&redis);
                    tokio::task::spawn_blocking(move || {
                        if let Some(redis) = lock(&redis).as_mut() {
                            redis.restart(); // SIGKILL, then the append-only file is loaded
                        }
                    })
                    .await
                    .expect("redis restart");
                    "redis killed (SIGKILL), restarted from its AOF"
                } else {
                    "none"
                }
            }
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        crm.set(NORMAL);
        if fault != "none" {
            *figures.faults.entry(fault).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        round += 1;
    }
    faulting.store(false, Ordering::Relaxed);
    for task in buyer_tasks {
        task.await.expect("buyer");
    }
    // The faults are over: a held lead's last retry, as a buyer coming back later would.
    let held: Vec<String> = lock(&answered)
        .iter()
        .filter(|(_, a)| **a == Some(Answer::Held))
        .map(|(k, _)| k.clone())
        .collect();
    for key in held {
        let answer = submit(
            &client,
            &urls,
            &lead(&key),
            Instant::now() + Duration::from_secs(3),
        )
        .await;
        lock(&answered).insert(key, answer);
    }

    let kept = lock(&crm.kept).clone();
    let mut copies: HashMap<&str, Vec<&str>> = HashMap::new();
    for (key, reference) in &kept {
        copies.entry(key).or_default().push(reference);
    }
    let answered = lock(&answered).clone();
    figures.leads = answered.len();
    assert_eq!(figures.leads, sent.load(Ordering::Relaxed));
    for (key, answer) in &answered {
        let refs = copies.get(key.as_str()).cloned().unwrap_or_default();
        let distinct: BTreeSet<&str> = refs.iter().copied().collect();
        if refs.is_empty() && *answer != Some(Answer::Held) {
            figures.lost += 1;
            eprintln!("lost: {key} ({answer:?})");
        }
        figures.new_reference += distinct.len().saturating_sub(1);
        figures.same_reference += refs.len() - distinct.len();
        figures.unanswered += usize::from(answer.is_none());
        if *answer == Some(Answer::Held) {
            figures.held += 1;
            figures.held_at_crm += usize::from(!refs.is_empty());
        }
    }
    assert!(
        kept.iter().all(|(key, _)| answered.contains_key(key)),
        "the CRM kept a lead no buyer sent"
    );
    eprintln!(
        "{backend:?} on_ambiguous={on_ambiguous}: {} leads, {} kept at the CRM; lost {}, \
         duplicated under a new reference {}, resent under the same reference {}, held {} \
         ({} of them at the CRM), unanswered {}; faults {:?}",
        figures.leads,
        kept.len(),
        figures.lost,
        figures.new_reference,
        figures.same_reference,
        figures.held,
        figures.held_at_crm,
        figures.unanswered,
        figures.faults
    );
    Some(figures)
}

fn assert_the_goal(backend: Backend, on_ambiguous: &str, figures: &Figures) {
    assert!(
        figures.leads >= 10,
        "too few leads to mean much: {figures:?}"
    );
    assert!(
        figures.faults.len() >= 5,
        "not every fault ran: {figures:?}"
    );
    assert_eq!(figures.lost, 0, "no lead lost: {figures:?}");
    assert!(
        figures.held + figures.same_reference > 0,
        "the faults made no outcome unknown: {figures:?}"
    );
    if on_ambiguous == "resend" {
        assert_eq!(figures.held, 0, "resend holds nothing: {figures:?}");
    }
    assert_eq!(
        figures.new_reference, 0,
        "every copy carries the first copy's reference: {figures:?}"
    );
    if backend == Backend::Redis && on_ambiguous == "hold" {
        assert_eq!(
            figures.same_reference, 0,
            "hold with Redis never sends a lead twice: {figures:?}"
        );
    }
}

const SHORT: Duration = Duration::from_secs(9);

#[tokio::test(flavor = "multi_thread")]
async fn redis_hold_loses_nothing_and_sends_nothing_twice() {
    if let Some(figures) = run(Backend::Redis, "hold", SHORT, 3).await {
        assert_the_goal(Backend::Redis, "hold", &figures);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_resend_loses_nothing_and_resends_under_the_first_reference() {
    if let Some(figures) = run(Backend::Redis, "resend", SHORT, 3).await {
        assert_the_goal(Backend::Redis, "resend", &figures);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_hold_loses_nothing_and_resends_only_under_the_first_reference() {
    let figures = run(Backend::Memory, "hold", SHORT, 3)
        .await
        .expect("no Redis needed");
    assert_the_goal(Backend::Memory, "hold", &figures);
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_resend_loses_nothing_and_resends_only_under_the_first_reference() {
    let figures = run(Backend::Memory, "resend", SHORT, 3)
        .await
        .expect("no Redis needed");
    assert_the_goal(Backend::Memory, "resend", &figures);
}

/// The long run of every row (about 8 minutes): `cargo test --test lead_proof -- --ignored
/// --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: run by hand for the figures in docs/operations.md"]
async fn every_row_long() {
    let long = Duration::from_secs(90);
    for (backend, on_ambiguous) in [
        (Backend::Redis, "hold"),
        (Backend::Redis, "resend"),
        (Backend::Memory, "hold"),
        (Backend::Memory, "resend"),
    ] {
        if let Some(figures) = run(backend, on_ambiguous, long, 6).await {
            assert_the_goal(backend, on_ambiguous, &figures);
        }
    }
}
