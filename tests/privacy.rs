//! Personal data never reaches the logs: the real binary runs the demo with every crate logging
//! at debug level, leads go through both dealers — delivered, refused by consent rules, refused
//! by the schema, failed by the CRM — and the captured log holds none of the customer's data.

mod common;

use std::time::Duration;

use aap_sim::inventory::{self, Status};
use common::process::DemoProcess;
use serde_json::{Value, json};

/// A customer whose every value is unmistakable in a log.
const FIRST: &str = "Privacia";
const LAST: &str = "Testperson";
const EMAIL: &str = "privacia.testperson@example.com";
const PHONE: &str = "+14155559876";
const STREET: &str = "742 Evergreen Terrace";
const CITY: &str = "Springfieldia";
const MESSAGE: &str = "my-private-note-4711";
const CONSENT: &str = "I, Privacia, agree to be contacted (consent-text-0815).";
const NOTES: &str = "appointment-notes-0042";

fn lead(vin: &str, key: &str) -> Value {
    json!({
        "type": "lead.submit.request",
        "customer": {
            "first_name": FIRST, "last_name": LAST, "email": EMAIL, "phone": PHONE,
            "preferred_contact": "email",
            "address": { "address_line_1": STREET, "city": CITY, "state": "CA", "zip": "94110" }
        },
        "consent": {
            "granted_at": "2026-04-30T10:16:00Z", "allowed_channels": ["email", "phone"],
            "consent_text": CONSENT, "scope": ["lead_submission"]
        },
        "vehicle_of_interest": { "vin": vin },
        "appointment": { "appointment_type": "sales", "notes": NOTES },
        "message": MESSAGE,
        "source_agent": { "name": "privacy-test-agent" },
        "idempotency_key": key
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn no_customer_data_reaches_the_logs_at_debug_level() {
    let demo = DemoProcess::start(&[("RUST_LOG", "debug")]).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let toyota = demo.jsonrpc_url("demo_toyota");
    let honda = demo.jsonrpc_url("demo_honda");
    let send = |url: String, data: Value| {
        let client = client.clone();
        async move {
            let req = common::post_send_message(&client, &url, data).header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            );
            let reply: Value = req.send().await.expect("reply").json().await.expect("json");
            reply
        }
    };
    let toyota_vin = inventory::toyota_group()
        .into_iter()
        .find(|u| u.status == Status::InStock)
        .expect("unit")
        .vin;
    let honda_vin = inventory::honda_powersports()
        .into_iter()
        .find(|u| u.status == Status::InStock)
        .expect("unit")
        .vin;

    // Delivered to each CRM.
    let ok = send(toyota.clone(), lead(&toyota_vin, "p-1")).await;
    assert_eq!(
        ok["result"]["message"]["parts"][0]["data"]["data"]["status"], "received",
        "{ok}"
    );
    let ok = send(honda.clone(), lead(&honda_vin, "p-2")).await;
    assert_eq!(
        ok["result"]["message"]["parts"][0]["data"]["data"]["status"], "received",
        "{ok}"
    );
    // Replayed.
    send(toyota.clone(), lead(&toyota_vin, "p-1")).await;
    // Refused by the consent rules and by the schema (a malformed e-mail address).
    let mut no_channel = lead(&toyota_vin, "p-3");
    no_channel["customer"]["preferred_contact"] = json!("sms");
    let refused = send(toyota.clone(), no_channel).await;
    assert!(refused.get("error").is_some(), "{refused}");
    let mut bad = lead(&toyota_vin, "p-4");
    bad["customer"]["email"] = json!(format!("{EMAIL} not-an-address"));
    bad["customer"]["phone"] = json!(format!("{PHONE}x"));
    let refused = send(toyota.clone(), bad).await;
    assert!(refused.get("error").is_some(), "{refused}");
    // The CRM fails: the cause is logged under an error id.
    let crm = demo.endpoints["simulators"]["crm"]
        .as_str()
        .expect("crm url");
    client
        .put(format!("{crm}/_sim/mode"))
        .body(r#"{"mode": "fail"}"#)
        .send()
        .await
        .expect("mode");
    let failed = send(toyota.clone(), lead(&toyota_vin, "p-5")).await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = demo.log_text();
    // The log is really at debug level and saw the leads' path.
    assert!(
        log.contains("\"level\":\"DEBUG\""),
        "debug logging is on:\n{log}"
    );
    assert!(log.contains("request failed inside the gateway"), "{log}");
    assert!(
        log.contains("\"upstream\":\"crm\""),
        "the SOAP CRM calls are logged:\n{log}"
    );
    // One line per request, with its ids, outcome and latency (and nothing of its content).
    let requests: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "aap_gateway::request")
        .collect();
    let outcomes: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| {
            (
                r["dealer"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("demo_toyota", "ok"),
            ("demo_honda", "ok"),
            ("demo_toyota", "ok"),
            ("demo_toyota", "CONTACT_CONSENT_REQUIRED"),
            ("demo_toyota", "SCHEMA_VALIDATION_FAILED"),
            ("demo_toyota", "INTERNAL_ERROR"),
        ],
        "{requests:?}"
    );
    for r in &requests {
        assert_eq!(r["level"], "INFO");
        assert_eq!(r["skill"], "lead.submit");
        assert_eq!(r["binding"], "jsonrpc");
        assert_eq!(r["status"], 200);
        assert_eq!(r["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(r["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{r}");
        assert_eq!(r["request_id"].as_str().map(str::len), Some(36), "{r}");
    }
    for secret in [
        FIRST,
        LAST,
        EMAIL,
        PHONE,
        "4155559876",
        STREET,
        CITY,
        MESSAGE,
        CONSENT,
        "consent-text-0815",
        NOTES,
    ] {
        assert!(
            !log.contains(secret),
            "`{secret}` appears in the log:\n{}",
            log.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
