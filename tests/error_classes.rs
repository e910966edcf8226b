//! How unhandled upstream answers are classified (docs/protocol.md §Upstream failures): a
//! stand-in REST system and a stand-in SOAP 1.1 service, written here, answer each stock number
//! in a different way, and no error rule handles most of them. What the same call would meet
//! again (a 4xx other than 408 / 429, a SOAP `Client` fault, a mapped reply failing the response
//! schema) is `INTERNAL_ERROR` with `retryable: false`; what may pass (5xx, 408, a `Server`
//! fault, a timeout) stays `retryable: true`; a 429 is the dealer system's own limit:
//! `RATE_LIMITED` with its hint. An error rule whose `jq` fails is a mapping error,
//! not a rule that silently never matches.

mod common;

use std::path::Path;

use common::Gateway;
use common::http_server::{Answer, HttpServer, Seen};
use serde_json::{Value, json};

const UPSTREAMS: &str = "dms:
  kind: rest
  base_url: ${STANDIN_URL}/rest
  timeouts: { connect: 1s, request: 300ms }
  retries: { attempts: 1 }
  circuit_breaker: { failures: 1000, cool_down: 1s }
soap:
  kind: soap
  base_url: ${STANDIN_URL}/soap
  soap: { version: \"1.1\" }
  timeouts: { connect: 1s, request: 1s }
  retries: { attempts: 1 }
  circuit_breaker: { failures: 1000, cool_down: 1s }
";

/// The REST lookup: `flag` must be a number; the rule's `tonumber` fails on anything else.
const REST_VEHICLE: &str = r#"skill: inventory.vehicle
upstream: dms
request:
  method: GET
  path: /units/{{ request.stock }}
response:
  jq: '{stock: .stock, status: "available", condition: .cond}'
errors:
  - when: { status: 200, jq: '(.flag | tonumber) > 1' }
    code: VEHICLE_UNAVAILABLE
"#;

const SOAP_VEHICLE: &str = r#"skill: inventory.vehicle
upstream: soap
request:
  action: urn:standin/GetUnit
  body: <GetUnit xmlns="urn:standin"><Stock>{{ request.stock }}</Stock></GetUnit>
response:
  format: xml
  jq: '.GetUnitResponse.Unit | {stock: .Stock, status: "available", condition: "used"}'
"#;

fn soap_envelope(body: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\"?><soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">\
         <soap:Body>{body}</soap:Body></soap:Envelope>"
    )
    .into_bytes()
}

fn fault(code: &str) -> Vec<u8> {
    soap_envelope(&format!(
        "<soap:Fault><faultcode>soap:{code}</faultcode><faultstring>no</faultstring></soap:Fault>"
    ))
}

/// REST: `/rest/units/S{status}` answers that status; `OK` a listable unit; `SCHEMA` a unit
/// whose condition is outside AAP's vocabulary; `JQERR` a unit the rule's `tonumber` fails on.
/// SOAP: `CLIENT` and `SERVER` faults (HTTP 500, as SOAP 1.1 sends them), anything else a unit.
fn standin(seen: Seen) -> Answer {
    if seen.path.starts_with("/soap") {
        let body = String::from_utf8_lossy(&seen.body).into_owned();
        let xml = "text/xml; charset=utf-8";
        return if body.contains(">CLIENT<") {
            (500, xml, fault("Client"))
        } else if body.contains(">FORGE<") {
            // A fault reason that would forge a log line in the human format.
            let reason = "no such unit\n2026-12-03T18:00:00Z  INFO forged: all good\r\x1b[2J";
            let fault = format!(
                "<soap:Fault><faultcode>soap:Server</faultcode><faultstring>{reason}</faultstring></soap:Fault>"
            );
            (500, xml, soap_envelope(&fault))
        } else if body.contains(">SERVER<") {
            (500, xml, fault("Server"))
        } else {
            let unit = "<GetUnitResponse xmlns=\"urn:standin\"><Unit><Stock>S1</Stock></Unit></GetUnitResponse>";
            (200, xml, soap_envelope(unit))
        };
    }
    let stock = seen.path.rsplit('/').next().unwrap_or_default().to_owned();
    let json = "application/json";
    let unit = |cond: &str, flag: &str| {
        json!({ "stock": stock, "cond": cond, "flag": flag })
            .to_string()
            .into_bytes()
    };
    match stock.as_str() {
        "OK" => (200, json, unit("used", "0")),
        "SCHEMA" => (200, json, unit("mint", "0")),
        "JQERR" => (200, json, unit("used", "not a number")),
        status => {
            let code = status
                .strip_prefix('S')
                .and_then(|s| s.parse().ok())
                .unwrap_or(500);
            (code, json, b"{\"error\": \"no\"}".to_vec())
        }
    }
}

fn folder(dir: &Path, vehicle: &str) {
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::write(dir.join("upstreams.yaml"), UPSTREAMS).expect("upstreams");
    std::fs::write(dir.join("inventory.vehicle.yaml"), vehicle).expect("mapping");
}

/// One test at a time: the log test installs a thread-scoped subscriber, and tracing's
/// per-callsite interest, shared by all threads, is unreliable while other threads log.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    gw: Gateway,
    _server: HttpServer,
    _folders: tempfile::TempDir,
}

async fn start() -> Setup {
    let server = HttpServer::start(standin).await;
    let folders = tempfile::tempdir().expect("temp");
    folder(&folders.path().join("rest"), REST_VEHICLE);
    folder(&folders.path().join("soap"), SOAP_VEHICLE);
    let mut yaml = String::from("rate_limit: { enabled: false }\ndealers:\n");
    for id in ["rest", "soap"] {
        yaml.push_str(&format!(
            "  - id: {id}\n    path_prefix: /dealers/{id}\n    card: {{ name: {id}, description: Test dealer. }}\n    mappings: {}\n",
            folders.path().join(id).display()
        ));
    }
    let config = folders.path().join("gateway.yaml");
    std::fs::write(&config, yaml).expect("config");
    let vars = [("STANDIN_URL".to_owned(), server.url())].into();
    let gw = common::start_file_with_vars(&config, None, vars).await;
    Setup {
        gw,
        _server: server,
        _folders: folders,
    }
}

async fn lookup(gw: &Gateway, dealer: &str, stock: &str) -> common::Reply {
    gw.send(
        &format!("/dealers/{dealer}/a2a"),
        json!({ "type": "inventory.vehicle.request", "stock": stock }),
    )
    .await
}

/// `(code, retryable)` of an AAP error reply; the ErrorInfo metadata must agree.
fn outcome(reply: &common::Reply) -> (String, bool) {
    let retryable = reply.aap_error()["retryable"].as_bool().expect("retryable");
    assert_eq!(
        reply.error_info()["metadata"]["retryable"],
        Value::from(retryable.to_string()),
        "{}",
        reply.text
    );
    (reply.aap_code().to_owned(), retryable)
}

#[tokio::test]
async fn deterministic_refusals_are_not_retryable_and_transient_failures_are() {
    let _serial = SERIAL.lock().await;
    let setup = start().await;
    let gw = &setup.gw;
    let ok = lookup(gw, "rest", "OK").await;
    assert_eq!(ok.payload()["data"]["stock"], "OK", "{}", ok.text);
    let cases = [
        ("rest", "S400", false),
        ("rest", "S403", false),
        ("rest", "S404", false),
        ("rest", "S422", false),
        ("rest", "S408", true),
        ("rest", "S500", true),
        ("rest", "S503", true),
        // The mapped reply fails the response schema: the same call maps the same way.
        ("rest", "SCHEMA", false),
        ("soap", "CLIENT", false),
        ("soap", "SERVER", true),
    ];
    // The dealer system's own limit: the buyer is told to slow down, with a hint.
    let reply = lookup(gw, "rest", "S429").await;
    assert_eq!(
        outcome(&reply),
        ("RATE_LIMITED".to_owned(), true),
        "rest S429: {}",
        reply.text
    );
    for (dealer, stock, retryable) in cases {
        let reply = lookup(gw, dealer, stock).await;
        assert_eq!(
            outcome(&reply),
            ("INTERNAL_ERROR".to_owned(), retryable),
            "{dealer} {stock}: {}",
            reply.text
        );
        // Nothing of the cause reaches the buyer.
        assert!(!reply.text.contains("Client") && !reply.text.contains("HTTP "));
    }
    let soap = lookup(gw, "soap", "S1").await;
    assert_eq!(soap.payload()["data"]["stock"], "S1", "{}", soap.text);
}

#[tokio::test]
async fn an_error_rule_whose_jq_fails_is_a_mapping_error_not_a_silent_miss() {
    let _serial = SERIAL.lock().await;
    let setup = start().await;
    // Without the rule's verdict the unit would be answered as available.
    let reply = lookup(&setup.gw, "rest", "JQERR").await;
    assert_eq!(
        outcome(&reply),
        ("INTERNAL_ERROR".to_owned(), true),
        "{}",
        reply.text
    );
}

/// Upstream text in a logged cause (here a SOAP fault reason) is written with its control
/// characters escaped: in the human log format one event stays one line, and a dealer system
/// cannot forge log lines or terminal escapes.
#[tokio::test]
async fn upstream_text_in_logs_has_its_control_characters_escaped() {
    let _serial = SERIAL.lock().await;
    let (logs, _capture) = common::logs::capture();
    let setup = start().await;
    let reply = lookup(&setup.gw, "soap", "FORGE").await;
    assert_eq!(outcome(&reply), ("INTERNAL_ERROR".to_owned(), true));
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("request failed inside the gateway"))
        .unwrap_or_else(|| panic!("no error logged: {text}"));
    assert!(
        line.contains(r"no such unit\n2026-12-03T18:00:00Z  INFO forged: all good\r\u{1b}[2J"),
        "{line}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("2026-12-03T18:00:00Z")),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
}
