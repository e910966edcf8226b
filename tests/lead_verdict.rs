//! Issue 39 item 4: a CRM that accepts now and decides later. Its intake answers `202 Accepted`
//! with a ticket and decides a while later, reachable at `GET /queue/{ticket}`; the gateway
//! follows the ticket (`lead.verdict`) within the buyer's wait and maps the verdict to
//! `received` / `duplicate` / `rejected`. The stand-in never de-duplicates and is awkward the way
//! queues are: a young ticket is `404`, the poll meets a `503` and states the mapping does not
//! know. Whatever a poll sees, the lead reaches the CRM once: counted at the stand-in.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http_server::{HttpServer, Seen, reply};
use common::{DemoCopy, Gateway, Reply};
use serde_json::{Value, json};

const HONDA: &str = "/dealers/demo-honda/a2a";

/// How the stand-in's queue decides a ticket: after `after_polls` polls it answers `state`
/// (with the CRM's own lead id when accepted); before that, the poll meets `young` (a 404 for
/// the first poll), a 503, then a state nobody documented.
#[derive(Clone)]
struct Decision {
    after_polls: usize,
    state: &'static str,
    /// Each poll is answered this late (a slow queue).
    delay: Duration,
}

#[derive(Default)]
struct Queue {
    posts: AtomicUsize,
    polls: Mutex<HashMap<String, usize>>,
}

struct Crm {
    server: HttpServer,
    queue: Arc<Queue>,
}

impl Crm {
    async fn start(decision: Decision) -> Crm {
        let queue = Arc::new(Queue::default());
        let q = Arc::clone(&queue);
        let server = HttpServer::start_scripted(move |seen: Seen| {
            let q = Arc::clone(&q);
            let decision = decision.clone();
            async move { answer(&q, &decision, &seen).await }
        })
        .await;
        Crm { server, queue }
    }

    fn posts(&self) -> usize {
        self.queue.posts.load(Ordering::SeqCst)
    }

    fn polls(&self) -> usize {
        self.queue.polls.lock().expect("lock").values().sum()
    }
}

async fn answer(
    q: &Queue,
    decision: &Decision,
    seen: &Seen,
) -> http::Response<common::http_server::ChunkBody> {
    let json_reply = |status: u16, body: Value| {
        let mut r = reply(status, body.to_string().into_bytes());
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        r
    };
    if seen.method == http::Method::POST && seen.path == "/intake" {
        // Never de-duplicates: every POST is a lead in the queue.
        let n = q.posts.fetch_add(1, Ordering::SeqCst) + 1;
        return json_reply(
            202,
            json!({ "ticket": format!("Q-{n:04}"), "state": "QUEUED" }),
        );
    }
    if let Some(ticket) = seen.path.strip_prefix("/queue/") {
        tokio::time::sleep(decision.delay).await;
        let poll = {
            let mut polls = q.polls.lock().expect("lock");
            let n = polls.entry(ticket.to_owned()).or_default();
            *n += 1;
            *n
        };
        if poll >= decision.after_polls {
            let mut body = json!({ "ticket": ticket, "state": decision.state });
            if decision.state == "ACCEPTED" {
                body["crm_lead_id"] = json!(format!("CRM-{ticket}"));
            }
            if decision.state == "MERGED" {
                body["merged_into"] = json!("CRM-Q-0001");
            }
            return json_reply(200, body);
        }
        return match poll {
            1 => json_reply(404, json!({ "error": "no such ticket (yet)" })),
            2 => json_reply(503, json!({ "error": "queue busy" })),
            _ => json_reply(200, json!({ "ticket": ticket, "state": "ENRICHING" })),
        };
    }
    json_reply(404, json!({ "error": "not found" }))
}

/// The lead mapping: a queued answer is `pending` with the ticket; the poll maps the queue's
/// states (`404` while the ticket is young is "pending" too).
fn mapping(every: &str, wait: &str, attempts: u32) -> String {
    format!(
        r#"skill: lead.submit
upstream: queue_crm
lead:
  verdict:
    every: {every}
    wait: {wait}
    attempts: {attempts}
    request:
      method: GET
      path: /queue/{{{{ lead.ticket }}}}
    response:
      jq: |
        if .state == "ACCEPTED" then {{ lead_id: .crm_lead_id, status: "received" }}
        elif .state == "MERGED" then {{ lead_id: .merged_into, status: "duplicate" }}
        elif .state == "REJECTED" then {{ status: "rejected" }}
        elif .state == "QUEUED" then {{ status: "pending" }}
        else {{ status: .state }} end
    errors:
      - when: {{ status: 404 }}
        reply: {{ jq: '{{ status: "pending" }}' }}
request:
  method: POST
  path: /intake
  body: |
    {{ "ref": {{{{ lead.reference }}}}, "email": {{{{ request.customer.email }}}} }}
response:
  jq: |
    if .state == "QUEUED" then {{ lead_id: .ticket, status: "pending" }}
    else {{ lead_id: .ticket, status: "received" }} end
"#
    )
}

async fn rig(crm: &Crm, every: &str, wait: &str, attempts: u32) -> Gateway {
    let files = DemoCopy::new();
    files.append(
        "mappings/demo-honda/upstreams.yaml",
        "\nqueue_crm:\n  kind: rest\n  base_url: ${QUEUE_URL}\n  timeouts: { connect: 1s, request: 2s }\n  retries: { attempts: 1 }\n",
    );
    std::fs::write(
        files.path("mappings/demo-honda/lead.submit.yaml"),
        mapping(every, wait, attempts),
    )
    .expect("write mapping");
    let mut vars = common::simulator_vars(&aap_sim::Simulators::start().await.expect("sims"));
    vars.insert("QUEUE_URL".into(), crm.server.url());
    files.start(vars).await
}

fn lead(key: &str) -> Value {
    json!({
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Jürgen", "last_name": "Queue-Tester",
            "email": "juergen.queue@example.com", "preferred_contact": "email"
        },
        "consent": {
            "granted_at": "2026-04-30T10:16:00Z",
            "allowed_channels": ["email"],
            "consent_text": "I agree to share my contact info with the dealer.",
            "scope": ["lead_submission"]
        },
        "message": "Is it still there?",
        "source_agent": { "name": "queue-test-agent" },
        "submitted_at": "2026-04-30T10:16:05Z",
        "idempotency_key": key
    })
}

fn data(reply: &Reply) -> &Value {
    reply
        .payload()
        .get("data")
        .unwrap_or_else(|| panic!("no data: {}", reply.text))
}

fn metric(text: &str, series: &str) -> f64 {
    common::sample(text, series).unwrap_or(0.0)
}

fn verdicts(when: &str, verdict: &str) -> String {
    format!(
        "aap_gateway_lead_verdicts_total{{dealer=\"demo_honda\",when=\"{when}\",verdict=\"{verdict}\"}}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_the_crm_rejects_after_queueing_it_is_answered_rejected() {
    let crm = Crm::start(Decision {
        after_polls: 4,
        state: "REJECTED",
        delay: Duration::ZERO,
    })
    .await;
    let gw = rig(&crm, "100ms", "3s", 10).await;
    let reply = gw.send(HONDA, lead("reject-1")).await;
    let data = data(&reply);
    assert_eq!(data["status"], "rejected", "{}", reply.text);
    assert_eq!(data["lead_id"], "Q-0001", "the ticket names the lead");
    assert_eq!(crm.posts(), 1);
    assert_eq!(
        crm.polls(),
        4,
        "404, 503, an unknown state, then the verdict"
    );

    // The buyer's retry replays the verdict: no second lead, no new poll.
    let again = gw.send(HONDA, lead("reject-1")).await;
    assert_eq!(self::data(&again), data);
    assert_eq!((crm.posts(), crm.polls()), (1, 4));
    let m = gw.metrics().await;
    assert_eq!(metric(&m, &verdicts("in_time", "rejected")), 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn accepted_and_merged_verdicts_carry_the_crms_own_lead_id() {
    let crm = Crm::start(Decision {
        after_polls: 1,
        state: "ACCEPTED",
        delay: Duration::ZERO,
    })
    .await;
    let gw = rig(&crm, "50ms", "2s", 5).await;
    let reply = gw.send(HONDA, lead("accept-1")).await;
    assert_eq!(
        data(&reply)["lead_id"],
        "CRM-Q-0001",
        "the verdict's id wins over the ticket: {}",
        reply.text
    );
    assert_eq!(data(&reply)["status"], "received");

    let crm = Crm::start(Decision {
        after_polls: 1,
        state: "MERGED",
        delay: Duration::ZERO,
    })
    .await;
    let gw = rig(&crm, "50ms", "2s", 5).await;
    let reply = gw.send(HONDA, lead("merge-1")).await;
    assert_eq!(data(&reply)["status"], "duplicate", "{}", reply.text);
    assert_eq!(data(&reply)["lead_id"], "CRM-Q-0001");
    assert_eq!(crm.posts(), 1);
}

/// No verdict within `wait`: the buyer hears `received` under the ticket (the CRM has the
/// lead); the polls left go on, and the rejection that comes later is logged without the
/// lead's content and counted.
#[tokio::test]
async fn a_verdict_after_the_buyers_wait_is_logged_and_counted_not_lost() {
    let (logs, _capture) = common::logs::capture();
    let crm = Crm::start(Decision {
        after_polls: 6,
        state: "REJECTED",
        delay: Duration::ZERO,
    })
    .await;
    let gw = rig(&crm, "150ms", "400ms", 12).await;
    let reply = gw.send(HONDA, lead("late-1")).await;
    assert_eq!(data(&reply)["status"], "received", "{}", reply.text);
    assert_eq!(data(&reply)["lead_id"], "Q-0001");
    let polls_in_time = crm.polls();
    assert!(polls_in_time <= 2, "{polls_in_time} polls within 400 ms");

    let mut m = String::new();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        m = gw.metrics().await;
        if metric(&m, &verdicts("late", "rejected")) == 1.0 {
            break;
        }
    }
    assert_eq!(metric(&m, &verdicts("late", "rejected")), 1.0, "{m}");
    assert_eq!(crm.polls(), 6, "polling stops at the verdict");
    assert_eq!(crm.posts(), 1, "the lead was never sent again");
    let text = logs.text();
    assert!(
        text.contains("rejected a queued lead after the buyer was told received"),
        "{text}"
    );
    assert!(!text.contains("juergen.queue"), "no personal data: {text}");
    // The replay stays what the buyer was told.
    let again = gw.send(HONDA, lead("late-1")).await;
    assert_eq!(data(&again)["status"], "received");
    assert_eq!(crm.posts(), 1);
}

/// Polls that time out (the queue answers after the upstream's 2 s timeout is long gone past
/// the buyer's wait) never send the lead again, and the buyer still hears the truth: received.
#[tokio::test(flavor = "multi_thread")]
async fn slow_polls_never_send_the_lead_again() {
    let crm = Crm::start(Decision {
        after_polls: 1,
        state: "ACCEPTED",
        delay: Duration::from_millis(1500),
    })
    .await;
    let gw = rig(&crm, "100ms", "500ms", 2).await;
    let reply = gw.send(HONDA, lead("slow-1")).await;
    assert_eq!(data(&reply)["status"], "received", "{}", reply.text);
    assert_eq!(data(&reply)["lead_id"], "Q-0001", "no verdict in time");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(crm.posts(), 1);
    let m = gw.metrics().await;
    assert_eq!(metric(&m, &verdicts("late", "received")), 1.0, "{m}");
}

/// A mapping that says `pending` but declares no way to follow the ticket is a defect: the
/// CRM has the lead, so the outcome is unknown (never a retry that sends it twice).
#[tokio::test(flavor = "multi_thread")]
async fn pending_without_a_verdict_poll_is_an_unknown_outcome() {
    let crm = Crm::start(Decision {
        after_polls: 1,
        state: "ACCEPTED",
        delay: Duration::ZERO,
    })
    .await;
    let files = DemoCopy::new();
    files.append(
        "mappings/demo-honda/upstreams.yaml",
        "\nqueue_crm:\n  kind: rest\n  base_url: ${QUEUE_URL}\n  retries: { attempts: 1 }\n",
    );
    files.append("config/demo.yaml", "idempotency:\n  on_ambiguous: hold\n");
    let text = mapping("1s", "2s", 1);
    let without: String = {
        let start = text.find("lead:\n").expect("lead block");
        let end = text.find("request:\n  method: POST").expect("request");
        format!("{}{}", &text[..start], &text[end..])
    };
    std::fs::write(files.path("mappings/demo-honda/lead.submit.yaml"), without).expect("write");
    let mut vars = common::simulator_vars(&aap_sim::Simulators::start().await.expect("sims"));
    vars.insert("QUEUE_URL".into(), crm.server.url());
    let gw = files.start(vars).await;
    let first = gw.send(HONDA, lead("no-poll")).await;
    assert_eq!(
        first.aap_error()["details"]["lead"],
        "held",
        "{}",
        first.text
    );
    let retry = gw.send(HONDA, lead("no-poll")).await;
    assert_eq!(
        retry.aap_error()["details"]["lead"],
        "held",
        "{}",
        retry.text
    );
    assert_eq!(crm.posts(), 1);
}

/// `check` locates a verdict that could never be heard, in the file, at the key.
#[test]
fn check_locates_a_poll_slower_than_the_buyers_wait() {
    let files = DemoCopy::new();
    files.append(
        "mappings/demo-honda/upstreams.yaml",
        "\nqueue_crm:\n  kind: rest\n  base_url: http://127.0.0.1:9\n",
    );
    let text = mapping("5s", "2s", 3).replace("path: /queue/", "path: /queue/{{ lead.nope(");
    std::fs::write(files.path("mappings/demo-honda/lead.submit.yaml"), &text).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["check", "--config"])
        .arg(files.path("config/demo.yaml"))
        .output()
        .expect("run check");
    let stderr =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stderr}");
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).expect(needle) + 1;
    assert!(
        stderr.contains(&format!("lead.submit.yaml:{}", line_of("every: 5s"))),
        "every is located: {stderr}"
    );
    assert!(stderr.contains("longer than `wait: 2s`"), "{stderr}");
    assert!(
        stderr.contains(&format!("lead.submit.yaml:{}", line_of("path: /queue/"))),
        "the poll's template is located in the same file: {stderr}"
    );
}
