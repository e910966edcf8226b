//! The exactly-once proof (issue 38): buyers submit leads, each one to every replica at once and
//! again on every retryable answer, to two dealers: Demo Toyota sends leads as JSON to a CRM,
//! Demo Honda e-mails them (ADF/XML over SMTP) to a mail intake. Both stand-ins commit every lead
//! they read and then answer as the fault of the moment says — the CRM `502`, `504`, a dropped
//! connection or an answer after the upstream timeout; the intake drops the connection before
//! its `250`, answers `451` or `421` to the final dot, or answers after the timeout — while a
//! gateway replica is killed with `SIGKILL` mid-delivery and started again, and Redis is killed
//! with `SIGKILL` and restarted from its append-only file (`appendfsync everysec`: the last
//! second's writes are lost) or, in the failover rows, replaced by a replica that was detached
//! a moment before the primary died (it lacks the last writes), reached through a relay that
//! switches to it as a Sentinel-managed address would.
//!
//! Neither stand-in de-duplicates: every lead it is sent is a lead it keeps. Each lead is
//! counted there, by its idempotency key (the customer's e-mail names it) and by the gateway's
//! reference (the CRM's `external_ref`, the mail's `Message-ID`):
//!
//! - **lost**: the buyer heard `received`, or gave up, and no copy arrived;
//! - **duplicated under a new reference**: a second copy whose reference differs from the first
//!   (a CRM de-duplicating on the reference would keep both);
//! - **resent under the same reference**: a second copy under the first copy's reference; those
//!   sent again after the intake *refused* the earlier copy (`451`/`421` to the final dot,
//!   which SMTP defines as "not kept", so the gateway sends again under any setting) are
//!   counted apart;
//! - **held**: the buyer's last answer was `details.lead: held` (with the copies that arrived).
//!
//! Rows: both `on_ambiguous` choices, both idempotency backends, and a failover for each choice
//! with Redis. With Redis two replicas share keys (`on_backend_error: deny`); with `memory` one
//! replica (its store is its own: a second replica could not know the first's keys). Each row is
//! a test of its own (they run in parallel); every row runs every fault kind at least once.
//! docs/operations.md §Exactly-once figures has the measured rows and the long run's command.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::inventory;
use common::DemoCopy;
use common::process::{Replica, in_stock, lead_fault_demo, lead_request, lock, replica};
use common::redis::{Persistence, RedisServer, Relay};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Demo Toyota: leads as JSON to the CRM stand-in.
const TOYOTA: &str = "/a2a";
/// Demo Honda: leads by mail to the intake stand-in.
const HONDA: &str = "/dealers/demo-honda/a2a";

// ---------------------------------------------------------------------------------------------
// The faults both stand-ins know. Each commits the lead first, whatever comes after.

const NORMAL: u8 = 0;
/// CRM: `502` after commit.
const COMMIT_502: u8 = 1;
/// CRM: `504` after commit.
const COMMIT_504: u8 = 2;
/// CRM: the connection dropped after commit; intake: dropped before the `250`.
const COMMIT_DROP: u8 = 3;
/// The answer comes after the gateway's upstream timeout (1 s).
const COMMIT_LATE: u8 = 4;
/// The answer comes after 700 ms (inside the timeout): deliveries in flight for a kill.
const SLOW: u8 = 5;
/// Intake: `451` to the final dot, after keeping the message.
const COMMIT_451: u8 = 6;
/// Intake: `421` to the final dot and the connection closed, after keeping the message.
const COMMIT_421: u8 = 7;

/// One copy of a lead as a stand-in kept it.
#[derive(Debug, Clone)]
struct Copy {
    /// The idempotency key (from the customer's e-mail).
    key: String,
    /// The CRM's `external_ref`, or the mail's `Message-ID`.
    reference: String,
    /// The stand-in told the gateway it did not keep it (`451`/`421` after the final dot).
    refused: bool,
}

/// What both stand-ins share: the fault of the moment and every copy kept.
#[derive(Clone, Default)]
struct Standin {
    fault: Arc<AtomicU8>,
    kept: Arc<Mutex<Vec<Copy>>>,
}

impl Standin {
    fn set(&self, fault: u8) {
        self.fault.store(fault, Ordering::SeqCst);
    }

    fn keep(&self, key: String, reference: String, refused: bool) -> usize {
        let mut kept = lock(&self.kept);
        kept.push(Copy {
            key,
            reference,
            refused,
        });
        kept.len()
    }
}

/// A stand-in on a loopback port: each connection is served by `serve`.
struct Listening {
    addr: SocketAddr,
    standin: Standin,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen<F, Fut>(serve: F) -> Listening
where
    F: Fn(tokio::net::TcpStream, Standin) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let standin = Standin::default();
    let task = tokio::spawn({
        let standin = standin.clone();
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, standin.clone()));
            }
        }
    });
    Listening {
        addr,
        standin,
        task,
    }
}

/// The CRM: one connection, one request (answered with `Connection: close`).
async fn serve_crm(mut stream: tokio::net::TcpStream, crm: Standin) {
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
    let id = crm.keep(key, reference, false);
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
    let text = match crm.fault.load(Ordering::SeqCst) {
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

/// The mail intake: an ESMTP session (any `AUTH PLAIN` accepted) in which every message that
/// reaches its final dot is kept, then answered as the fault says.
async fn serve_intake(stream: tokio::net::TcpStream, intake: Standin) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    if !say(&mut write, "220 intake.proof.example ESMTP").await {
        return;
    }
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let command = String::from_utf8_lossy(&line)
            .trim_end()
            .to_ascii_uppercase();
        let reply = if command.starts_with("EHLO") {
            "250-intake.proof.example\r\n250-AUTH PLAIN\r\n250 8BITMIME"
        } else if command.starts_with("AUTH") {
            "235 2.7.0 Authenticated"
        } else if command == "QUIT" {
            let _ = say(&mut write, "221 2.0.0 Bye").await;
            return;
        } else if command == "DATA" {
            if !say(&mut write, "354 End data with <CR><LF>.<CR><LF>").await {
                return;
            }
            let mut message = Vec::new();
            loop {
                line.clear();
                match lines.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if line == b".\r\n" {
                    break;
                }
                let unstuffed = line.strip_prefix(b".").unwrap_or(&line);
                message.extend_from_slice(unstuffed);
            }
            let fault = intake.fault.load(Ordering::SeqCst);
            let (key, message_id) = read_mail(&message);
            let refused = matches!(fault, COMMIT_451 | COMMIT_421);
            let n = intake.keep(key, message_id, refused);
            let queued = format!("250 2.0.0 Ok: queued as PROOF{n:06}");
            match fault {
                COMMIT_DROP => return,
                COMMIT_451 => "451 4.3.0 Temporary failure, try again later",
                COMMIT_421 => {
                    let _ = say(&mut write, "421 4.3.2 Shutting down").await;
                    return;
                }
                COMMIT_LATE | SLOW => {
                    let wait = if fault == SLOW { 700 } else { 1500 };
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    if !say(&mut write, &queued).await {
                        return;
                    }
                    continue;
                }
                _ => {
                    if !say(&mut write, &queued).await {
                        return;
                    }
                    continue;
                }
            }
        } else {
            // HELO, MAIL, RCPT, RSET, NOOP: all fine.
            "250 2.0.0 Ok"
        };
        if !say(&mut write, reply).await {
            return;
        }
    }
}

/// Writes one reply; `false` when the gateway went away.
async fn say(write: &mut tokio::net::tcp::OwnedWriteHalf, text: &str) -> bool {
    write
        .write_all(format!("{text}\r\n").as_bytes())
        .await
        .is_ok()
}

/// The idempotency key (the customer's e-mail in the ADF document) and the `Message-ID` of a
/// message, read with a MIME parser (the parts may be base64 or quoted-printable).
fn read_mail(raw: &[u8]) -> (String, String) {
    let message = mail_parser::MessageParser::default()
        .parse(raw)
        .expect("a MIME message");
    let message_id = message.message_id().unwrap_or_default().to_owned();
    let key = message
        .parts
        .iter()
        .find_map(|part| {
            let text = String::from_utf8_lossy(part.contents()).into_owned();
            let end = text.find("@example.com")?;
            let start = text[..end].rfind("proof-")?;
            Some(text[start..end].to_owned())
        })
        .unwrap_or_default();
    (key, message_id)
}

// ---------------------------------------------------------------------------------------------
// Redis for the failover rows: a primary, a replica following it, and a relay in front.

/// The failover rows' Redis: the primary the relay leads to, and its replica.
struct Failover {
    relay: Relay,
    primary: RedisServer,
    standby: RedisServer,
    /// Bytes of the replication stream each failover lost (the primary's offset at its death
    /// less the standby's when it was detached).
    lost: Vec<u64>,
}

impl Failover {
    async fn start() -> Option<Failover> {
        let primary = RedisServer::start_primary()?;
        let standby = RedisServer::start_replica_of(&primary)?;
        let relay = Relay::start(primary.port()).await;
        Some(Failover {
            relay,
            primary,
            standby,
            lost: Vec::new(),
        })
    }

    /// The standby is detached (`REPLICAOF NO ONE`) while the primary still takes writes, then
    /// the primary is killed (`SIGKILL`) and the relay switched to the standby; a new standby
    /// then follows the new primary, for the next failover.
    async fn fail_over(&mut self, writes_meanwhile: Duration) {
        let detached = self.standby.command(&["REPLICAOF", "NO", "ONE"]);
        assert_eq!(detached, "OK", "REPLICAOF NO ONE");
        let applied = self.standby.replication_offset();
        tokio::time::sleep(writes_meanwhile).await;
        let written = self.primary.replication_offset();
        self.primary.stop();
        self.relay.switch(self.standby.port());
        self.lost.push(written.saturating_sub(applied));
        let next = tokio::task::block_in_place(|| RedisServer::start_replica_of(&self.standby))
            .expect("redis-server");
        let old = std::mem::replace(
            &mut self.primary,
            std::mem::replace(&mut self.standby, next),
        );
        drop(old);
    }
}

enum Redis {
    None,
    AppendOnly(RedisServer),
    Failover(Failover),
}

// ---------------------------------------------------------------------------------------------
// The gateway

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Redis,
    /// Redis through a relay, failing over to a replica.
    RedisFailover,
    Memory,
}

/// The demo with Demo Toyota sending leads as JSON to the CRM stand-in and Demo Honda mailing
/// them to the intake stand-in, both quick to time out, and the row's idempotency settings.
fn proof_config(keys: &str) -> DemoCopy {
    let files = lead_fault_demo("3s");
    files.append("config/demo.yaml", keys);
    common::process::send_leads_as_json(
        &files,
        "demo-toyota",
        "PROOF_CRM_URL",
        "{ connect: 300ms, request: 1s }",
    );
    files.edit(
        "mappings/demo-honda/upstreams.yaml",
        "timeouts: { connect: 2s, request: 10s }\n  circuit_breaker: { failures: 5, cool_down: 10s }",
        "timeouts: { connect: 300ms, request: 1s, data: 1s }\n  circuit_breaker: { failures: 5, cool_down: 300ms }",
    );
    files
}

fn lead(key: &str, mail: bool) -> Value {
    let vehicle = if mail {
        in_stock(inventory::honda_powersports())
    } else {
        in_stock(inventory::toyota_group())
    };
    let customer = json!({
        "first_name": "Proof", "last_name": "Buyer",
        "email": format!("{key}@example.com"),
        "phone": "+14155550142",
        "preferred_contact": "email"
    });
    lead_request(customer, &vehicle, "proof-buyer", key)
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

/// Submits `request` to `path` on every replica at once until one answers `received`, or it was
/// held three times in a row, or `give_up` passes.
async fn submit(
    client: &reqwest::Client,
    urls: &RwLock<Vec<String>>,
    path: &str,
    request: &Value,
    give_up: Instant,
) -> Option<Answer> {
    let mut held = 0;
    loop {
        let bases = urls.read().expect("urls").clone();
        let mut tries = tokio::task::JoinSet::new();
        for base in bases {
            let (client, request, url) = (client.clone(), request.clone(), format!("{base}{path}"));
            tries.spawn(async move { try_once(&client, &url, &request).await });
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

/// Lead `n` of `buyer`: its key, and whether it goes by mail (to Demo Honda).
fn nth_lead(buyer: usize, n: usize) -> (String, bool) {
    (format!("proof-{buyer}-{n}"), (buyer + n) % 2 == 1)
}

/// Whether the lead of `key` (`proof-{buyer}-{n}`) goes by mail.
fn goes_by_mail(key: &str) -> bool {
    let numbers: Vec<usize> = key
        .trim_start_matches("proof-")
        .split('-')
        .map(|n| n.parse().expect("a key of nth_lead"))
        .collect();
    nth_lead(numbers[0], numbers[1]).1
}

// ---------------------------------------------------------------------------------------------
// The run

/// What one row measured at one stand-in.
#[derive(Debug, Default)]
struct Figures {
    leads: usize,
    kept: usize,
    lost: usize,
    new_reference: usize,
    /// Further copies under the first copy's reference…
    same_reference: usize,
    /// …of which sent again after the intake refused the copy before (`451`/`421`).
    after_refusal: usize,
    held: usize,
    /// Held leads the stand-in does have (a reconciliation finds them).
    held_kept: usize,
    /// Leads whose buyer never heard `received` nor `held` (the stand-in has them: else lost).
    unanswered: usize,
}

/// Counts the leads of `answered` at a stand-in that kept `kept`.
fn count(answered: &HashMap<String, Option<Answer>>, kept: &[Copy]) -> Figures {
    let mut copies: HashMap<&str, Vec<&Copy>> = HashMap::new();
    for copy in kept {
        copies.entry(&copy.key).or_default().push(copy);
    }
    let mut figures = Figures {
        leads: answered.len(),
        kept: kept.len(),
        ..Figures::default()
    };
    for (key, answer) in answered {
        let copies = copies.get(key.as_str()).cloned().unwrap_or_default();
        let distinct: BTreeSet<&str> = copies.iter().map(|c| c.reference.as_str()).collect();
        if copies.is_empty() && *answer != Some(Answer::Held) {
            figures.lost += 1;
            eprintln!("lost: {key} ({answer:?})");
        }
        figures.new_reference += distinct.len().saturating_sub(1);
        let again = copies.len() - distinct.len();
        figures.same_reference += again;
        // Each refused copy but the last one made the gateway send once more.
        let refused = copies.iter().filter(|c| c.refused).count();
        figures.after_refusal += refused.min(copies.len().saturating_sub(1)).min(again);
        figures.unanswered += usize::from(answer.is_none());
        if *answer == Some(Answer::Held) {
            figures.held += 1;
            figures.held_kept += usize::from(!copies.is_empty());
        }
    }
    figures
}

/// What one row measured.
#[derive(Debug, Default)]
struct Row {
    crm: Figures,
    mail: Figures,
    faults: BTreeMap<&'static str, usize>,
    /// The replication stream each failover lost (bytes).
    failover_lost: Vec<u64>,
}

async fn run(
    backend: Backend,
    on_ambiguous: &str,
    fault_phase: Duration,
    buyers: usize,
) -> Option<Row> {
    let mut redis = match backend {
        Backend::Redis => {
            Redis::AppendOnly(RedisServer::start_persistent(Persistence::AppendOnly)?)
        }
        Backend::RedisFailover => Redis::Failover(Failover::start().await?),
        Backend::Memory => Redis::None,
    };
    let redis_url = match &redis {
        Redis::AppendOnly(server) => Some(server.url.clone()),
        Redis::Failover(failover) => Some(failover.relay.url()),
        Redis::None => None,
    };
    let keys = match redis_url {
        Some(url) => format!(
            "idempotency:\n  backend: redis\n  redis_url: {url}\n  redis_timeout: 200ms\n  lock_ttl: 1500ms\n  on_backend_error: deny\n  on_ambiguous: {on_ambiguous}\n"
        ),
        None => format!("idempotency:\n  backend: memory\n  on_ambiguous: {on_ambiguous}\n"),
    };
    let sims = Simulators::start().await.expect("simulators");
    let crm = listen(serve_crm).await;
    let intake = listen(serve_intake).await;
    let mut vars = common::simulator_vars(&sims);
    vars.insert("PROOF_CRM_URL".to_owned(), format!("http://{}", crm.addr));
    vars.insert("SMTP_URL".to_owned(), format!("smtp://{}", intake.addr));
    let files = proof_config(&keys);
    let config = files.path("config/demo.yaml");
    let count_replicas = if backend == Backend::Memory { 1 } else { 2 };
    let mut replicas: Vec<Replica> = Vec::new();
    for _ in 0..count_replicas {
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
    // Leads sent by mail, and to the CRM: the faults go on until each has a few (a loaded
    // machine may make the first pass slow).
    let sent_by = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut buyer_tasks = Vec::new();
    for buyer in 0..buyers {
        let (client, urls, faulting) = (client.clone(), Arc::clone(&urls), Arc::clone(&faulting));
        let (answered, sent, sent_by) = (
            Arc::clone(&answered),
            Arc::clone(&sent),
            Arc::clone(&sent_by),
        );
        buyer_tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while faulting.load(Ordering::Relaxed) {
                let (key, mail) = nth_lead(buyer, n);
                let path = if mail { HONDA } else { TOYOTA };
                sent.fetch_add(1, Ordering::Relaxed);
                sent_by[usize::from(mail)].fetch_add(1, Ordering::Relaxed);
                let answer = submit(&client, &urls, path, &lead(&key, mail), give_up).await;
                lock(&answered).insert(key, answer);
                n += 1;
            }
        }));
    }

    // The faults, one kind after the other, each for a moment, then normal for a moment, until
    // every kind ran and the fault phase is over.
    let mut row = Row::default();
    let started = Instant::now();
    let mut round = 0;
    let (http, mail) = (&crm.standin, &intake.standin);
    let few = |i: usize| sent_by[i].load(Ordering::Relaxed) < MIN_LEADS;
    while round < 6
        || started.elapsed() < fault_phase
        || ((few(0) || few(1)) && started.elapsed() < fault_phase * 3)
    {
        let faults: [&'static str; 2] = match round % 6 {
            0 => {
                http.set(COMMIT_502);
                mail.set(COMMIT_DROP);
                [
                    "crm commits, answers 502",
                    "intake keeps the message, drops the connection before its 250",
                ]
            }
            1 => {
                http.set(COMMIT_504);
                mail.set(COMMIT_451);
                [
                    "crm commits, answers 504",
                    "intake keeps the message, answers 451",
                ]
            }
            2 => {
                http.set(COMMIT_DROP);
                mail.set(COMMIT_421);
                [
                    "crm commits, drops the connection",
                    "intake keeps the message, answers 421 and closes",
                ]
            }
            3 => {
                http.set(COMMIT_LATE);
                mail.set(COMMIT_LATE);
                [
                    "crm commits, answers after the timeout",
                    "intake keeps the message, answers 250 after the timeout",
                ]
            }
            4 => {
                // Deliveries in flight (both take 700 ms), then the replica dies.
                http.set(SLOW);
                mail.set(SLOW);
                tokio::time::sleep(Duration::from_millis(400)).await;
                let dead = replicas.remove(0);
                drop(dead); // SIGKILL
                let fresh = replica(&config, &vars).await;
                replicas.insert(0, fresh);
                *urls.write().expect("urls") = replicas.iter().map(|r| r.url.clone()).collect();
                [
                    "gateway replica killed (SIGKILL) mid-delivery, restarted",
                    "",
                ]
            }
            _ => match &mut redis {
                Redis::AppendOnly(server) => {
                    // SIGKILL, then the append-only file is loaded.
                    tokio::task::block_in_place(|| server.restart());
                    ["redis killed (SIGKILL), restarted from its AOF", ""]
                }
                Redis::Failover(failover) => {
                    // Claims, and the held outcomes of leads whose acknowledgement is lost, are
                    // written while the standby is detached: the new primary lacks them.
                    http.set(COMMIT_502);
                    mail.set(COMMIT_DROP);
                    failover.fail_over(Duration::from_millis(600)).await;
                    [
                        "redis fails over to a replica that lacks the last writes",
                        "",
                    ]
                }
                Redis::None => ["", ""],
            },
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        http.set(NORMAL);
        mail.set(NORMAL);
        for fault in faults.into_iter().filter(|f| !f.is_empty()) {
            *row.faults.entry(fault).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
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
    let mut retries = tokio::task::JoinSet::new();
    for key in held {
        let (client, urls) = (client.clone(), Arc::clone(&urls));
        retries.spawn(async move {
            let mail = goes_by_mail(&key);
            let path = if mail { HONDA } else { TOYOTA };
            let give_up = Instant::now() + Duration::from_secs(3);
            let answer = submit(&client, &urls, path, &lead(&key, mail), give_up).await;
            (key, answer)
        });
    }
    for (key, answer) in retries.join_all().await {
        lock(&answered).insert(key, answer);
    }
    if let Redis::Failover(failover) = &redis {
        row.failover_lost.clone_from(&failover.lost);
    }

    let answered = lock(&answered).clone();
    assert_eq!(answered.len(), sent.load(Ordering::Relaxed));
    let split = |mail: bool| -> HashMap<String, Option<Answer>> {
        answered
            .iter()
            .filter(|(key, _)| goes_by_mail(key) == mail)
            .map(|(k, a)| (k.clone(), *a))
            .collect()
    };
    let (to_crm, by_mail) = (split(false), split(true));
    let (crm_kept, mail_kept) = (lock(&http.kept).clone(), lock(&mail.kept).clone());
    for (kept, leads, at) in [
        (&crm_kept, &to_crm, "CRM"),
        (&mail_kept, &by_mail, "intake"),
    ] {
        for copy in kept.iter() {
            assert!(
                leads.contains_key(&copy.key),
                "the {at} kept a lead no buyer sent it: {copy:?}"
            );
        }
    }
    row.crm = count(&to_crm, &crm_kept);
    row.mail = count(&by_mail, &mail_kept);
    // A lead nobody answered: what the replicas alive now logged under its reference.
    for (key, _) in answered.iter().filter(|(_, a)| a.is_none()) {
        let mail = goes_by_mail(key);
        let request = lead(key, mail);
        let dealer = if mail { "demo_honda" } else { "demo_toyota" };
        let fingerprint = aap_gateway::idempotency::fingerprint(&request);
        let reference = aap_gateway::engine::lead::reference(dealer, None, &request, &fingerprint);
        for replica in &replicas {
            let log = std::fs::read_to_string(replica.log.path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains(&reference)).collect();
            eprintln!(
                "unanswered {key} ({reference}), {} log lines at {}:\n{}\nlast lines:\n{}",
                lines.len(),
                replica.url,
                lines.join("\n"),
                log.lines().rev().take(15).collect::<Vec<_>>().join("\n")
            );
        }
    }
    for (at, figures) in [("CRM", &row.crm), ("intake", &row.mail)] {
        eprintln!(
            "{backend:?} on_ambiguous={on_ambiguous}, {at}: {} leads, {} copies kept; lost {}, \
             duplicated under a new reference {}, resent under the same reference {} ({} after \
             a refusal), held {} ({} of them kept), unanswered {}",
            figures.leads,
            figures.kept,
            figures.lost,
            figures.new_reference,
            figures.same_reference,
            figures.after_refusal,
            figures.held,
            figures.held_kept,
            figures.unanswered
        );
    }
    eprintln!(
        "{backend:?} on_ambiguous={on_ambiguous}: faults {:?}; failovers lost {:?} bytes of \
         the replication stream",
        row.faults, row.failover_lost
    );
    Some(row)
}

fn assert_the_goal(backend: Backend, on_ambiguous: &str, row: &Row) {
    let kinds = match backend {
        Backend::Memory => 9,
        Backend::Redis | Backend::RedisFailover => 10,
    };
    assert!(row.faults.len() >= kinds, "not every fault ran: {row:?}");
    if backend == Backend::RedisFailover {
        assert!(
            row.failover_lost.iter().any(|&bytes| bytes > 0),
            "no failover lost a write: {row:?}"
        );
    }
    for (at, figures) in [("CRM", &row.crm), ("intake", &row.mail)] {
        assert!(
            figures.leads >= MIN_LEADS,
            "too few leads at the {at} to mean much: {row:?}"
        );
        assert_eq!(figures.lost, 0, "no lead lost at the {at}: {row:?}");
        assert!(
            figures.held + figures.same_reference > 0,
            "the faults made no outcome at the {at} unknown: {row:?}"
        );
        if on_ambiguous == "resend" {
            assert_eq!(figures.held, 0, "resend holds nothing: {row:?}");
        }
        assert_eq!(
            figures.new_reference, 0,
            "every copy at the {at} carries the first copy's reference: {row:?}"
        );
        if backend != Backend::Memory && on_ambiguous == "hold" {
            assert_eq!(
                figures.same_reference, figures.after_refusal,
                "hold with Redis sends a lead again only after the intake refused it: {row:?}"
            );
        }
    }
}

/// Leads each stand-in must be sent for a row to mean much.
const MIN_LEADS: usize = 6;

/// Each row: faults for this long (every kind at least once: a pass takes about 6 s).
const SHORT: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread")]
async fn redis_hold_loses_nothing_and_sends_nothing_twice() {
    if let Some(row) = run(Backend::Redis, "hold", SHORT, 4).await {
        assert_the_goal(Backend::Redis, "hold", &row);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_resend_loses_nothing_and_resends_under_the_first_reference() {
    if let Some(row) = run(Backend::Redis, "resend", SHORT, 4).await {
        assert_the_goal(Backend::Redis, "resend", &row);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_failover_hold_loses_nothing_and_sends_nothing_twice() {
    if let Some(row) = run(Backend::RedisFailover, "hold", SHORT, 4).await {
        assert_the_goal(Backend::RedisFailover, "hold", &row);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_failover_resend_loses_nothing_and_resends_under_the_first_reference() {
    if let Some(row) = run(Backend::RedisFailover, "resend", SHORT, 4).await {
        assert_the_goal(Backend::RedisFailover, "resend", &row);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_hold_loses_nothing_and_resends_only_under_the_first_reference() {
    let row = run(Backend::Memory, "hold", SHORT, 4)
        .await
        .expect("no Redis needed");
    assert_the_goal(Backend::Memory, "hold", &row);
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_resend_loses_nothing_and_resends_only_under_the_first_reference() {
    let row = run(Backend::Memory, "resend", SHORT, 4)
        .await
        .expect("no Redis needed");
    assert_the_goal(Backend::Memory, "resend", &row);
}

/// The long run of every row (about 10 minutes): `cargo test --test lead_proof -- --ignored
/// --nocapture`; `AAP_PROOF_ROW=Memory-resend` (a backend and a choice, as printed) runs one.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "long: run by hand for the figures in docs/operations.md"]
async fn every_row_long() {
    let long = Duration::from_secs(90);
    let only = std::env::var("AAP_PROOF_ROW").unwrap_or_default();
    for (backend, on_ambiguous) in [
        (Backend::Redis, "hold"),
        (Backend::Redis, "resend"),
        (Backend::RedisFailover, "hold"),
        (Backend::RedisFailover, "resend"),
        (Backend::Memory, "hold"),
        (Backend::Memory, "resend"),
    ] {
        if !only.is_empty() && only != format!("{backend:?}-{on_ambiguous}") {
            continue;
        }
        if let Some(row) = run(backend, on_ambiguous, long, 6).await {
            assert_the_goal(backend, on_ambiguous, &row);
        }
    }
}
