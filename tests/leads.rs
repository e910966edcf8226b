//! `lead.submit` end to end: the real gateway in front of the demo's CRMs — Demo Toyota's SOAP
//! CRM (WS-Security digests, appointments) and Demo Honda's SMTP intake (ADF/XML by e-mail) —
//! plus an HTTP intake taking ADF/XML and REST JSON leads.
//!
//! What a dealer group relies on: every field reaches the CRM intact (markup and non-ASCII
//! included), consent is enforced before any CRM call, a retried lead is never a second lead,
//! and a CRM that fails costs the buyer a retry, never a lost or invented lead.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::inventory::{self, Status, Vehicle};
use aap_sim::sim::Mode;
use common::{DemoCopy, Gateway, Reply, simulator_vars};
use jiff::civil::Weekday;
use jiff::{Timestamp, ToSpan, tz::TimeZone};
use serde_json::{Value, json};

const TOYOTA: &str = "/a2a";
const HONDA: &str = "/dealers/demo-honda/a2a";

/// Text that breaks naive XML: markup, entities, a CDATA terminator, quotes, non-ASCII.
const HOSTILE_FIRST: &str = "Zoë <b>\"Ann\"</b>";
const HOSTILE_LAST: &str = "O'Brien & Søn ]]> 李";
const HOSTILE_MESSAGE: &str =
    "Is the <Camry> still there? A&B said \"yes\" ]]> — 日本語で大丈夫？ <!-- -->";

// ---------------------------------------------------------------------------------------------
// Fixtures

struct Rig {
    gw: Gateway,
    sims: Simulators,
}

/// The demo as shipped, in front of fresh simulators.
async fn rig() -> Rig {
    let sims = Simulators::start().await.expect("simulators");
    let gw = common::start_file_with_vars(
        &common::repo_path("config/demo.yaml"),
        None,
        simulator_vars(&sims),
    )
    .await;
    Rig { gw, sims }
}

/// A copy of the demo whose CRM calls time out after 500 ms.
async fn rig_with_short_crm_timeout() -> Rig {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "mappings/demo-toyota/upstreams.yaml",
        "timeouts: { connect: 1s, request: 5s }",
        "timeouts: { connect: 300ms, request: 500ms }",
    );
    let gw = files.start(simulator_vars(&sims)).await;
    Rig { gw, sims }
}

/// The value of a metrics sample (`name{labels}` exactly as exposed) of a gateway.
fn metric(gw: &Gateway, series: &str) -> Option<f64> {
    common::sample(&gw.app.metrics.encode(), series)
}

fn unit(units: Vec<Vehicle>, status: Status) -> Vehicle {
    units
        .into_iter()
        .find(|u| u.status == status)
        .expect("a unit with that status")
}

fn toyota(status: Status) -> Vehicle {
    unit(inventory::toyota_group(), status)
}

fn honda(status: Status) -> Vehicle {
    unit(inventory::honda_powersports(), status)
}

/// A free slot of the demo CRM (Mon–Sat, 09:00–17:30 Los Angeles) `days` or more days ahead,
/// at `hh:mm` local time, in UTC.
fn slot(days: i64, hour: i8, minute: i8) -> String {
    let tz = TimeZone::get("America/Los_Angeles").expect("tz");
    let mut date = Timestamp::now().to_zoned(tz.clone()).date() + days.days();
    while date.weekday() == Weekday::Sunday {
        date = date.tomorrow().expect("date");
    }
    let local = date
        .at(hour, minute, 0, 0)
        .to_zoned(tz)
        .expect("local time");
    local.timestamp().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A complete lead for `vehicle` (AAP's worked `lead.submit` example, with hostile text).
fn lead(vehicle: &Vehicle, key: &str) -> Value {
    json!({
        "type": "lead.submit.request",
        "customer": {
            "first_name": HOSTILE_FIRST,
            "last_name": HOSTILE_LAST,
            "email": "anna.lee+aap@example.com",
            "phone": "+14155550123",
            "preferred_contact": "phone",
            "address": { "address_line_1": "1 Main St <Apt 2>", "city": "San José", "state": "CA", "zip": "94110" }
        },
        "consent": {
            "granted_at": "2026-04-30T10:16:00Z",
            "allowed_channels": ["email", "phone"],
            "consent_text": "I agree to share my contact info with the dealer & its CRM about <this> vehicle.",
            "scope": ["lead_submission"]
        },
        "vehicle_of_interest": {
            "vin": vehicle.vin, "year": vehicle.year, "make": vehicle.make, "model": vehicle.model,
            "condition": "new"
        },
        "trade_in": { "year": 2014, "make": "Toyota", "model": "Corolla", "condition": "good", "mileage": 96000 },
        "message": HOSTILE_MESSAGE,
        "source_agent": { "name": "chatgpt-shopping", "agent_card_url": "https://chatgpt.example/.well-known/agent-card.json" },
        "submitted_at": "2026-04-30T10:16:05Z",
        "idempotency_key": key
    })
}

fn with(mut value: Value, pointer: &str, new: Value) -> Value {
    *value.pointer_mut(pointer).expect("pointer exists") = new;
    value
}

fn without(mut value: Value, parent: &str, key: &str) -> Value {
    value
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("object")
        .remove(key);
    value
}

fn data(reply: &Reply) -> &Value {
    assert!(
        reply.body.get("error").is_none(),
        "expected a reply, got {}",
        reply.text
    );
    assert_eq!(
        reply.payload()["type"],
        "lead.submit.response",
        "{}",
        reply.text
    );
    &reply.payload()["data"]
}

fn assert_code(reply: &Reply, code: &str) {
    assert_eq!(reply.aap_code(), code, "{}", reply.text);
}

fn crm_leads(sims: &Simulators) -> Vec<Value> {
    sims.crm.fixtures()["leads"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn crm_calls(sims: &Simulators) -> usize {
    sims.crm.received().len()
}

// ---------------------------------------------------------------------------------------------
// Delivery: every field intact

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_reaches_the_soap_crm_with_every_field_intact() {
    let Rig { gw, sims } = rig().await;
    let car = toyota(Status::InStock);
    let at = slot(3, 10, 0);
    let request = with(
        lead(&car, "key-fields"),
        "/trade_in",
        json!({ "year": 2014, "make": "Toyota", "model": "Corolla <LE>", "condition": "good", "mileage": 96000 }),
    );
    let mut request = request;
    request["appointment"] = json!({ "appointment_type": "test_drive", "appointment_at": at,
                                     "duration_minutes": 60, "notes": "Bring the <blue> one & the keys" });
    let reply = gw.send(TOYOTA, request.clone()).await;
    let data = data(&reply);
    assert_eq!(data["status"], "received");
    assert_eq!(data["appointment"]["status"], "confirmed");
    assert_eq!(data["appointment"]["confirmed_at"], at.as_str());
    assert_eq!(
        data["dealer"],
        json!({ "name": "Demo Toyota", "phone": "+14155550100" })
    );
    let message = reply.payload()["message"].as_str().expect("a message");
    assert!(message.contains("booked"), "{message}");

    let leads = crm_leads(&sims);
    assert_eq!(leads.len(), 1, "{leads:?}");
    let stored = &leads[0];
    assert_eq!(stored["lead_id"], data["lead_id"]);
    assert_eq!(stored["source"], "chatgpt-shopping");
    assert_eq!(
        stored["agent_card_url"],
        "https://chatgpt.example/.well-known/agent-card.json"
    );
    assert_eq!(stored["submitted_at"], "2026-04-30T10:16:05Z");
    let customer = &stored["customer"];
    assert_eq!(customer["first_name"], HOSTILE_FIRST);
    assert_eq!(customer["last_name"], HOSTILE_LAST);
    assert_eq!(customer["email"], "anna.lee+aap@example.com");
    assert_eq!(customer["phone"], "+14155550123");
    assert_eq!(customer["preferred_contact"], "phone");
    assert_eq!(customer["address"]["line1"], "1 Main St <Apt 2>");
    assert_eq!(customer["address"]["city"], "San José");
    assert_eq!(customer["address"]["state"], "CA");
    assert_eq!(customer["address"]["zip"], "94110");
    assert_eq!(customer["address"]["country"], "US");
    let consent = &stored["consent"];
    assert_eq!(consent["granted_at"], "2026-04-30T10:16:00Z");
    assert_eq!(consent["channels"], json!(["email", "phone"]));
    assert_eq!(
        consent["text"],
        "I agree to share my contact info with the dealer & its CRM about <this> vehicle."
    );
    assert_eq!(stored["vehicle"]["vin"], car.vin.as_str());
    assert_eq!(stored["vehicle"]["year"], car.year.to_string());
    assert_eq!(stored["vehicle"]["condition"], "New");
    assert_eq!(stored["trade_in"]["model"], "Corolla <LE>");
    assert_eq!(stored["trade_in"]["mileage"], "96000");
    assert_eq!(stored["trade_in"]["condition"], "good");
    assert_eq!(stored["comments"], HOSTILE_MESSAGE);
    let appointment = &stored["appointment"];
    assert_eq!(appointment["type"], "test_drive");
    assert_eq!(appointment["start"], at.as_str());
    assert_eq!(appointment["duration_minutes"], "60");
    assert_eq!(appointment["notes"], "Bring the <blue> one & the keys");
    // The external reference is the gateway's, not the buyer's key (keys are scoped per agent).
    let reference = stored["external_ref"].as_str().expect("external_ref");
    assert!(reference.starts_with("aap-"), "{reference}");

    // The envelope on the wire: WS-Security digest, SOAP 1.1 action, escaped markup.
    let received = sims.crm.received();
    let call = received.last().expect("a CRM call");
    assert_eq!(
        call["headers"]["soapaction"],
        "\"urn:demo-crm:leads/SubmitLead\""
    );
    let body = call["body"].as_str().expect("body");
    assert!(body.contains("#PasswordDigest"), "{body}");
    assert!(
        !body.contains("crm-secret"),
        "the password travels as a digest only"
    );
    assert!(!body.contains("<Camry>"), "markup in values is escaped");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_reaches_the_smtp_intake_as_adf_with_the_consent_attached() {
    let Rig { gw, sims } = rig().await;
    let bike = honda(Status::InStock);
    let mut request = lead(&bike, "key-mail");
    request["appointment"] =
        json!({ "appointment_type": "test_drive", "appointment_at": slot(2, 11, 0) });
    let reply = gw.send(HONDA, request.clone()).await;
    let data = data(&reply);
    assert_eq!(data["status"], "received");
    // By e-mail nothing is booked: the CRM's staff schedule it.
    assert_eq!(data["appointment"]["status"], "requested");
    let lead_id = data["lead_id"].as_str().expect("lead_id");

    let messages = sims.smtp.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let mail = &messages[0];
    assert_eq!(mail["to"], json!(["leads@crm.demo-honda.example"]));
    assert!(
        mail["subject"]
            .as_str()
            .is_some_and(|s| s.contains(lead_id)),
        "{mail}"
    );
    let adf = &mail["adf"];
    assert!(adf.get("error").is_none(), "the ADF document parses: {adf}");
    assert_eq!(adf["id"]["value"], lead_id);
    assert_eq!(adf["requestdate"], "2026-04-30T10:16:05Z");
    assert_eq!(
        adf["customer"]["name"],
        format!("{HOSTILE_FIRST} {HOSTILE_LAST}")
    );
    assert_eq!(adf["customer"]["email"], "anna.lee+aap@example.com");
    assert_eq!(adf["customer"]["phone"], "+14155550123");
    let comments = adf["customer"]["comments"].as_str().expect("comments");
    assert!(comments.contains(HOSTILE_MESSAGE), "{comments}");
    assert!(comments.contains("Requested test-drive"), "{comments}");
    let vehicles = adf["vehicles"].as_array().expect("vehicles");
    let buy = &vehicles[0];
    assert_eq!(buy["interest"], "test-drive");
    assert_eq!(buy["vin"], bike.vin.as_str());
    assert_eq!(buy["make"], bike.make);
    let trade = &vehicles[1];
    assert_eq!(trade["interest"], "trade-in");
    assert_eq!(trade["condition"], "good");
    assert_eq!(adf["vendor"]["vendorname"], "Demo Honda");
    assert_eq!(adf["provider"]["name"], "chatgpt-shopping");
    // ADF has no place for the consent grant; it travels beside the document, whole.
    assert_eq!(mail["consent"], request["consent"]);
}

/// Mail servers end a session after so many commands or messages (the demo intake: 200
/// commands, `421`). A pooled connection spent that way must not fail the lead that meets it:
/// nothing of that message was accepted, so it goes again on a fresh connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_mail_server_ending_a_pooled_session_loses_no_lead() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "lead.submit: { rate: 60/min, burst: 20 }",
        "lead.submit: { rate: 100/s, burst: 100 }",
    );
    let gw = files.start(simulator_vars(&sims)).await;
    let bike = honda(Status::InStock);
    // About four commands a message on a reused connection: the 51st meets the `421`.
    const LEADS: usize = 56;
    for n in 0..LEADS {
        let reply = gw.send(HONDA, lead(&bike, &format!("pooled-{n}"))).await;
        assert_eq!(
            data(&reply)["status"],
            "received",
            "lead {n}: {}",
            reply.text
        );
    }
    assert_eq!(sims.smtp.messages().len(), LEADS, "one e-mail per lead");
}

/// Issue 38 item 9: a buyer's line break in a value the mail subject uses is bad input, answered
/// once and not retryable (a retry would meet it again), never an endless `INTERNAL_ERROR`; no
/// mail leaves, and the corrected lead goes under the same key.
#[tokio::test(flavor = "multi_thread")]
async fn a_line_break_in_a_mail_subject_value_is_bad_input_not_a_retry_loop() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "mappings/demo-honda/lead.submit.yaml",
        "subject: \"New AAP lead {{ lead.reference }}\"",
        "subject: \"New AAP lead {{ lead.reference }} for {{ request.customer.last_name }}\"",
    );
    let gw = files.start(simulator_vars(&sims)).await;
    let bike = honda(Status::InStock);
    let request = with(
        lead(&bike, "subject-crlf"),
        "/customer/last_name",
        json!("Lee\r\nBcc: attacker@example.com"),
    );
    let reply = gw.send(HONDA, request.clone()).await;
    assert_code(&reply, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(reply.aap_error()["retryable"], false, "{}", reply.text);
    assert!(reply.text.contains("mail subject"), "{}", reply.text);
    assert!(!reply.text.contains("attacker"), "{}", reply.text);
    assert!(sims.smtp.messages().is_empty(), "no mail left");
    // Nothing was sent: the key is free for the corrected lead.
    let fixed = with(request, "/customer/last_name", json!("Lee"));
    let reply = gw.send(HONDA, fixed).await;
    assert_eq!(data(&reply)["status"], "received");
    let messages = sims.smtp.messages();
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0]["subject"]
            .as_str()
            .is_some_and(|s| s.ends_with("for Lee")),
        "{messages:?}"
    );
}

/// A copy of the demo whose Demo Honda delivers leads to the HTTP intake with `mapping`.
async fn intake_rig(mapping: &str) -> (Gateway, aap_sim::sim::SimHandle, Simulators) {
    intake_rig_with(mapping, "").await
}

/// [`intake_rig`], with `config` appended to the gateway's configuration.
async fn intake_rig_with(
    mapping: &str,
    config: &str,
) -> (Gateway, aap_sim::sim::SimHandle, Simulators) {
    let sims = Simulators::start().await.expect("simulators");
    let intake = aap_sim::intake::start_intake().await.expect("intake");
    let files = DemoCopy::new();
    if !config.is_empty() {
        files.append("config/demo.yaml", config);
    }
    files.append(
        "mappings/demo-honda/upstreams.yaml",
        "\nintake:\n  kind: rest\n  base_url: ${INTAKE_URL}\n  auth: { kind: api_key, header: X-Api-Key, value: demo-intake-key }\n",
    );
    std::fs::write(files.path("mappings/demo-honda/lead.submit.yaml"), mapping)
        .expect("write mapping");
    let mut vars: HashMap<String, String> = simulator_vars(&sims);
    vars.insert("INTAKE_URL".into(), intake.base_url());
    let gw = files.start(vars).await;
    (gw, intake, sims)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_posted_as_adf_to_an_http_intake_stays_well_formed() {
    let (gw, intake, _sims) = intake_rig(
        "skill: lead.submit\nupstream: intake\nrequest:\n  method: POST\n  path: /leads/adf\n  body_format: adf\nresponse:\n  jq: '{ lead_id: .id, status: (if .status == \"duplicate\" then \"received\" else \"received\" end) }'\n",
    )
    .await;
    let bike = honda(Status::InStock);
    let reply = gw.send(HONDA, lead(&bike, "key-adf-http")).await;
    let data = data(&reply);
    assert_eq!(data["status"], "received");
    let stored = intake.fixtures()["adf"][0].clone();
    assert_eq!(stored["id"], data["lead_id"]);
    let parsed = &stored["lead"];
    assert_eq!(
        parsed["customer"]["name"],
        format!("{HOSTILE_FIRST} {HOSTILE_LAST}")
    );
    assert!(
        parsed["customer"]["comments"]
            .as_str()
            .is_some_and(|c| c.contains(HOSTILE_MESSAGE))
    );
    assert_eq!(parsed["vehicles"][0]["vin"], bike.vin.as_str());
    let raw = stored["raw"].as_str().expect("raw document");
    assert!(raw.contains("<?adf version=\"1.0\"?>"), "{raw}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_sent_as_rest_json_keeps_every_value() {
    let (gw, intake, _sims) = intake_rig(concat!(
        "skill: lead.submit\nupstream: intake\nrequest:\n  method: POST\n  path: /api/leads\n",
        "  body: |\n",
        "    { \"external_ref\": {{ lead.reference }}, \"customer\": {{ request.customer }},\n",
        "      \"consent\": {{ request.consent }}, \"message\": {{ request.message }} }\n",
        "response:\n  jq: '{ lead_id: .leadId, status: (if .duplicate then \"received\" else \"received\" end) }'\n",
    ))
    .await;
    let bike = honda(Status::InStock);
    let request = lead(&bike, "key-json");
    let reply = gw.send(HONDA, request.clone()).await;
    let data = data(&reply);
    let stored = intake.fixtures()["json"][0].clone();
    assert_eq!(stored["id"], data["lead_id"]);
    assert_eq!(stored["lead"]["customer"], request["customer"]);
    assert_eq!(stored["lead"]["consent"], request["consent"]);
    assert_eq!(stored["lead"]["message"], HOSTILE_MESSAGE);
}

/// Issue 38 item 10: an `errors` rule whose jq fails on a lead is a mapping defect, logged
/// without the jq message (jaq quotes the value it failed on: here the customer's e-mail).
#[tokio::test]
async fn a_failing_error_rule_never_logs_the_leads_values() {
    let (logs, _capture) = common::logs::capture();
    let (gw, _intake, _sims) = intake_rig(concat!(
        "skill: lead.submit\nupstream: intake\nrequest:\n  method: POST\n  path: /api/leads\n",
        "  body: |\n",
        "    { \"external_ref\": {{ lead.reference }}, \"customer\": {{ request.customer }},\n",
        "      \"consent\": {{ request.consent }} }\n",
        "response:\n  jq: '{ lead_id: .leadId, status: \"received\" }'\n",
        "errors:\n  - when: { jq: '($request.customer.email | tonumber) > 0' }\n",
        "    code: APPOINTMENT_TIME_UNAVAILABLE\n",
    ))
    .await;
    let reply = gw
        .send(HONDA, lead(&honda(Status::InStock), "rule-fails"))
        .await;
    assert_code(&reply, "INTERNAL_ERROR");
    let text = logs.text();
    assert!(text.contains("when.jq"), "the defect is logged: {text}");
    assert!(!text.contains("anna.lee"), "{text}");
}

/// A REST JSON lead mapping for the intake; `lead` is its `lead:` block (or empty).
fn json_intake_mapping(lead: &str) -> String {
    format!(
        "skill: lead.submit\nupstream: intake\n{lead}request:\n  method: POST\n  path: /api/leads\n  body: |\n    {{ \"external_ref\": {{{{ lead.reference }}}}, \"customer\": {{{{ request.customer }}}} }}\nresponse:\n  jq: '{{ lead_id: .leadId, status: \"received\" }}'\n"
    )
}

/// Issue 38 item 1: a load balancer's 502 after the CRM committed says nothing about the lead.
/// Under `on_ambiguous: hold` it is held, never sent again; only a status the CRM's contract
/// declares "not processed" (`lead.not_processed`) frees the key for a retry.
#[tokio::test(flavor = "multi_thread")]
async fn a_502_after_commit_is_an_unknown_outcome_unless_declared_not_processed() {
    let hold = "idempotency:\n  on_ambiguous: hold\n";
    let (gw, intake, _sims) = intake_rig_with(&json_intake_mapping(""), hold).await;
    intake.set_mode(Mode::Commit502, 0);
    let request = lead(&honda(Status::InStock), "committed-then-502");
    let first = gw.send(HONDA, request.clone()).await;
    assert_eq!(
        first.aap_error()["details"]["lead"],
        "held",
        "{}",
        first.text
    );
    intake.set_mode(Mode::Normal, 0);
    let retry = gw.send(HONDA, request.clone()).await;
    assert_eq!(
        retry.aap_error()["details"]["lead"],
        "held",
        "{}",
        retry.text
    );
    assert_eq!(intake.received().len(), 1, "never sent again");
    assert_eq!(intake.fixtures()["json"].as_array().map(Vec::len), Some(1));

    // The CRM's contract says a 502 means nothing was stored: the retry delivers.
    let declared = json_intake_mapping("lead:\n  not_processed: { status: [502] }\n");
    let (gw, intake, _sims) = intake_rig_with(&declared, hold).await;
    intake.set_mode(Mode::Commit502, 0);
    let first = gw.send(HONDA, request.clone()).await;
    assert_code(&first, "INTERNAL_ERROR");
    assert!(
        first.aap_error()["details"]["lead"].is_null(),
        "{}",
        first.text
    );
    intake.set_mode(Mode::Normal, 0);
    let retry = gw.send(HONDA, request).await;
    assert_eq!(data(&retry)["status"], "received");
    assert_eq!(intake.received().len(), 2, "sent again");
}

/// Issue 38 item 6: a key freed after an unknown outcome (`resend`) and reused with another body
/// is another lead under another reference: a CRM that de-duplicates on the reference keeps both
/// instead of answering the new lead with the old one.
#[tokio::test(flavor = "multi_thread")]
async fn a_freed_key_reused_with_another_body_is_sent_under_a_new_reference() {
    let (gw, intake, _sims) = intake_rig_with(&json_intake_mapping(""), "").await;
    intake.set_mode(Mode::Commit502, 0);
    let first = lead(&honda(Status::InStock), "reused-after-502");
    let reply = gw.send(HONDA, first.clone()).await;
    assert_code(&reply, "INTERNAL_ERROR"); // unknown outcome, `resend`: the key is freed
    intake.set_mode(Mode::Normal, 0);
    let second = with(first, "/customer/first_name", json!("Someone Else"));
    let reply = gw.send(HONDA, second).await;
    assert_eq!(data(&reply)["status"], "received");
    let stored = intake.fixtures()["json"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(stored.len(), 2, "both leads kept: {stored:?}");
    assert_ne!(
        stored[0]["lead"]["external_ref"],
        stored[1]["lead"]["external_ref"]
    );
    assert_eq!(
        stored[1]["id"],
        data(&reply)["lead_id"],
        "the reply names the new lead"
    );
}

// ---------------------------------------------------------------------------------------------
// Appointments

#[tokio::test(flavor = "multi_thread")]
async fn appointment_outcomes_map_to_confirmed_proposed_requested_and_rejected() {
    let Rig { gw, sims } = rig().await;
    let car = toyota(Status::InStock);
    let at = slot(4, 14, 0);
    let cases = [
        // A free slot is booked.
        (
            json!({ "appointment_type": "test_drive", "appointment_at": at }),
            "confirmed",
        ),
        // The same slot again: taken, alternatives are proposed.
        (
            json!({ "appointment_type": "test_drive", "appointment_at": at }),
            "proposed",
        ),
        // No time: staff will schedule.
        (json!({ "appointment_type": "sales" }), "requested"),
        // Longer than the dealer hosts.
        (
            json!({ "appointment_type": "service", "appointment_at": slot(5, 10, 0), "duration_minutes": 300 }),
            "rejected",
        ),
    ];
    for (i, (appointment, expected)) in cases.into_iter().enumerate() {
        let mut request = lead(&car, &format!("appt-{i}"));
        // A different customer each time, so the CRM does not merge them.
        request["customer"]["email"] = json!(format!("buyer{i}@example.com"));
        request["customer"]["phone"] = json!(format!("+1415555{i:04}"));
        request["appointment"] = appointment;
        let reply = gw.send(TOYOTA, request).await;
        let data = data(&reply);
        let appt = &data["appointment"];
        assert_eq!(appt["status"], expected, "case {i}: {}", reply.text);
        match expected {
            "confirmed" => assert_eq!(appt["confirmed_at"], at.as_str()),
            "proposed" => {
                assert_eq!(appt["proposed_times"].as_array().map(Vec::len), Some(2));
                let message = reply.payload()["message"].as_str().unwrap_or_default();
                assert!(message.contains("not a booking"), "{message}");
            }
            _ => {
                assert!(appt.get("confirmed_at").is_none() && appt.get("proposed_times").is_none())
            }
        }
    }
    assert_eq!(crm_leads(&sims).len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_appointment_in_the_past_is_unavailable_and_no_lead_is_stored() {
    let Rig { gw, sims } = rig().await;
    let mut request = lead(&toyota(Status::InStock), "past");
    request["appointment"] =
        json!({ "appointment_type": "test_drive", "appointment_at": "2026-01-05T18:00:00Z" });
    let reply = gw.send(TOYOTA, request).await;
    assert_code(&reply, "APPOINTMENT_TIME_UNAVAILABLE");
    assert_eq!(reply.aap_error()["retryable"], false);
    assert!(crm_leads(&sims).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Consent: one rule each, and never a CRM call

async fn refused(request: Value, code: &str) {
    let Rig { gw, sims } = rig().await;
    let reply = gw.send(TOYOTA, request).await;
    assert_code(&reply, code);
    assert_eq!(reply.error_code(), -32000, "{}", reply.text);
    assert_eq!(
        crm_calls(&sims),
        0,
        "consent is checked before the CRM is called"
    );
}

fn good() -> Value {
    lead(&toyota(Status::InStock), "consent")
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_absent_is_contact_consent_required() {
    refused(without(good(), "", "consent"), "CONTACT_CONSENT_REQUIRED").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_without_its_text_is_invalid_consent() {
    refused(
        without(good(), "/consent", "consent_text"),
        "INVALID_CONSENT",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_for_another_scope_is_invalid_consent() {
    refused(
        with(good(), "/consent/scope", json!(["marketing"])),
        "INVALID_CONSENT",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_that_has_expired_is_invalid_consent() {
    let request = with(good(), "/consent", {
        let mut c = good()["consent"].clone();
        c["expires_at"] = json!("2026-05-01T00:00:00Z");
        c
    });
    refused(request, "INVALID_CONSENT").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_granted_in_the_future_is_invalid_consent() {
    let future = (Timestamp::now() + 2.hours())
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    refused(
        with(good(), "/consent/granted_at", json!(future)),
        "INVALID_CONSENT",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_preferred_channel_outside_the_grant_needs_consent() {
    let request = with(good(), "/customer/preferred_contact", json!("sms"));
    refused(request, "CONTACT_CONSENT_REQUIRED").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_without_any_of_the_dealers_channels_needs_consent() {
    // Demo Honda follows up by e-mail or phone only.
    let Rig { gw, sims } = rig().await;
    let mut request = lead(&honda(Status::InStock), "sms-only");
    request["consent"]["allowed_channels"] = json!(["sms"]);
    request["customer"]["preferred_contact"] = json!("sms");
    let reply = gw.send(HONDA, request).await;
    assert_code(&reply, "CONTACT_CONSENT_REQUIRED");
    assert!(sims.smtp.messages().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_that_reaches_no_contact_point_needs_consent() {
    let mut request = without(good(), "/customer", "email");
    request["consent"]["allowed_channels"] = json!(["email"]);
    request["customer"]["preferred_contact"] = json!("any");
    refused(request, "CONTACT_CONSENT_REQUIRED").await;
}

// ---------------------------------------------------------------------------------------------
// Quotas

/// Issue 38 item 11: invalid lead calls spend their sender's quota, never the dealer-wide lead
/// bucket every buyer shares; a valid lead after a burst of invalid ones still goes through.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_leads_never_drain_the_dealers_shared_lead_quota() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "lead.submit: { rate: 60/min, burst: 20 }",
        "lead.submit: { rate: 100/s, burst: 100 }\n  per_dealer:\n    lead.submit: { rate: 1/min, burst: 3 }",
    );
    let gw = files.start(simulator_vars(&sims)).await;
    let good = lead(&toyota(Status::InStock), "after-the-flood");
    let invalid = without(good.clone(), "", "customer");
    for _ in 0..10 {
        let reply = gw.send(TOYOTA, invalid.clone()).await;
        assert_code(&reply, "MISSING_REQUIRED_FIELD");
    }
    let reply = gw.send(TOYOTA, good).await;
    assert_eq!(data(&reply)["status"], "received", "{}", reply.text);
    // The shared bucket still holds: three valid leads spend its burst, the fourth waits.
    for n in 0..2 {
        let reply = gw
            .send(
                TOYOTA,
                lead(&toyota(Status::InStock), &format!("valid-{n}")),
            )
            .await;
        // The same customer again: the CRM merges it (`duplicate`), but it was delivered.
        data(&reply);
    }
    let reply = gw
        .send(TOYOTA, lead(&toyota(Status::InStock), "one-too-many"))
        .await;
    assert_code(&reply, "RATE_LIMITED");
}

// ---------------------------------------------------------------------------------------------
// Idempotency

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_returns_the_identical_reply_without_a_second_crm_call() {
    let Rig { gw, sims } = rig().await;
    let request = lead(&toyota(Status::InStock), "01HZ9K8R1G4B7Q9WS2F7APYZ6T");
    let first = gw.send(TOYOTA, request.clone()).await;
    data(&first);
    let calls = crm_calls(&sims);
    // Same payload with keys in another order.
    let reordered: Value =
        serde_json::from_str(&serde_json::to_string(&request).expect("json")).expect("json");
    let second = gw.send(TOYOTA, reordered).await;
    assert_eq!(second.payload()["data"], first.payload()["data"]);
    assert_eq!(second.payload()["message"], first.payload()["message"]);
    assert_ne!(
        second.body["result"]["message"]["messageId"], first.body["result"]["message"]["messageId"],
        "a replay is a new message"
    );
    assert_eq!(crm_calls(&sims), calls, "no second CRM call");
    assert_eq!(crm_leads(&sims).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_payload_under_a_used_key_is_a_conflict() {
    let Rig { gw, sims } = rig().await;
    let request = lead(&toyota(Status::InStock), "reused-key");
    data(&gw.send(TOYOTA, request.clone()).await);
    let changed = with(request, "/message", json!("Actually, the red one."));
    let reply = gw.send(TOYOTA, changed).await;
    assert_code(&reply, "IDEMPOTENCY_CONFLICT");
    assert_eq!(reply.aap_error()["retryable"], false);
    assert_eq!(crm_leads(&sims).len(), 1);
}

/// Sends `request` to Demo Toyota with the API key `key`.
async fn send_with_key(gw: &Gateway, key: &str, request: Value) -> Reply {
    let mut headers = common::standard_headers();
    headers.push(("x-api-key", key));
    let body = common::send_message(request).to_string().into_bytes();
    gw.post_raw(TOYOTA, &headers, body).await
}

#[tokio::test(flavor = "multi_thread")]
async fn with_api_keys_an_idempotency_key_belongs_to_the_callers_api_key() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "\ndealers:\n",
        &format!(
            "\nauth:\n  mode: api_key\n  keys:\n    - id: partner-a\n      sha256: {}\n    - id: partner-b\n      sha256: {}\ndealers:\n",
            common::sha256_hex("key-a"),
            common::sha256_hex("key-b")
        ),
    );
    let gw = files.start(simulator_vars(&sims)).await;
    let request = lead(&toyota(Status::InStock), "shared-key");
    let first = send_with_key(&gw, "key-a", request.clone()).await;
    let first_id = data(&first)["lead_id"].clone();
    // Another client naming the same agent and key: its own lead, neither A's reply nor a
    // conflict that would block A's retries.
    // (Another customer too: the CRM merges leads of one customer for one car.)
    let other = with(
        with(
            request.clone(),
            "/customer/email",
            json!("someone.else@example.com"),
        ),
        "/customer/phone",
        json!("+14155550999"),
    );
    let second = send_with_key(&gw, "key-b", other).await;
    assert_ne!(data(&second)["lead_id"], first_id);
    assert_eq!(crm_leads(&sims).len(), 2);
    // A's own key still replays for A, and conflicts for A.
    let again = send_with_key(&gw, "key-a", request.clone()).await;
    assert_eq!(data(&again)["lead_id"], first_id);
    let changed = with(request, "/message", json!("Actually, the red one."));
    assert_code(
        &send_with_key(&gw, "key-a", changed).await,
        "IDEMPOTENCY_CONFLICT",
    );
    assert_eq!(crm_leads(&sims).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_concurrent_duplicates_make_exactly_one_crm_call() {
    let Rig { gw, sims } = rig().await;
    // A slow CRM, so the duplicates overlap the first call.
    sims.crm.set_mode(Mode::Slow, 300);
    let request = lead(&toyota(Status::InStock), "burst");
    let gw = std::sync::Arc::new(gw);
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let gw = std::sync::Arc::clone(&gw);
            let request = request.clone();
            tokio::spawn(async move { gw.send(TOYOTA, request).await })
        })
        .collect();
    let mut ids = Vec::new();
    for call in calls {
        let reply = call.await.expect("task");
        ids.push(data(&reply)["lead_id"].clone());
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    assert_eq!(crm_calls(&sims), 1, "exactly one CRM call");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_crm_recognises_a_keyless_resubmission_and_a_repeat_customer() {
    let Rig { gw, sims } = rig().await;
    let car = toyota(Status::InStock);
    let keyless = without(lead(&car, "x"), "", "idempotency_key");
    let first = gw.send(TOYOTA, keyless.clone()).await;
    let second = gw.send(TOYOTA, keyless).await;
    // The same lead sent twice without a key: the gateway's reference is the same, the CRM
    // answers with the first lead.
    assert_eq!(data(&second)["lead_id"], data(&first)["lead_id"]);
    assert_eq!(data(&second)["status"], "received");
    // The same customer about the same car under a new key: the CRM merges it.
    let again = with(lead(&car, "other-key"), "/message", json!("Me again"));
    let reply = gw.send(TOYOTA, again).await;
    assert_eq!(data(&reply)["status"], "duplicate");
    assert_eq!(data(&reply)["lead_id"], data(&first)["lead_id"]);
    assert_eq!(crm_leads(&sims).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// The vehicle of interest

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_or_sold_vehicle_of_interest_stops_the_lead() {
    let Rig { gw, sims } = rig().await;
    let unknown = inventory::unknown_vin(&inventory::toyota_group());
    let mut request = lead(&toyota(Status::InStock), "unknown-vin");
    request["vehicle_of_interest"]["vin"] = json!(unknown);
    assert_code(&gw.send(TOYOTA, request).await, "VEHICLE_NOT_FOUND");
    let request = lead(&toyota(Status::Sold), "sold-vin");
    assert_code(&gw.send(TOYOTA, request).await, "VEHICLE_UNAVAILABLE");
    assert_eq!(crm_calls(&sims), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_test_drive_needs_a_vehicle() {
    let Rig { gw, sims } = rig().await;
    let mut request = without(
        lead(&toyota(Status::InStock), "td"),
        "",
        "vehicle_of_interest",
    );
    request["appointment"] = json!({ "appointment_type": "test_drive" });
    let reply = gw.send(TOYOTA, request).await;
    assert_code(&reply, "MISSING_REQUIRED_FIELD");
    assert_eq!(crm_calls(&sims), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_from_outside_the_dealers_region_is_answered_rejected() {
    let Rig { gw, sims: _sims } = rig().await;
    let request = with(
        lead(&toyota(Status::InStock), "tx"),
        "/customer/address/state",
        json!("TX"),
    );
    let reply = gw.send(TOYOTA, request).await;
    assert_eq!(data(&reply)["status"], "rejected");
}

// ---------------------------------------------------------------------------------------------
// A failing CRM: retryable errors, never a lost or doubled lead

/// How long a failing lead may take with the copy's 500 ms CRM timeout (plus slack for CI).
const BOUND: Duration = Duration::from_millis(2500);

async fn crm_fault(mode: Mode, delay_ms: u64) {
    let Rig { gw, sims } = rig_with_short_crm_timeout().await;
    sims.crm.set_mode(mode, delay_ms);
    let request = lead(
        &toyota(Status::InStock),
        &format!("fault-{}", mode.as_str()),
    );
    let started = Instant::now();
    let reply = gw.send(TOYOTA, request.clone()).await;
    let elapsed = started.elapsed();
    assert_eq!(reply.error_code(), -32603, "{mode:?}: {}", reply.text);
    assert_code(&reply, "INTERNAL_ERROR");
    assert_eq!(reply.aap_error()["retryable"], true);
    assert!(elapsed < BOUND, "{mode:?}: answered after {elapsed:?}");
    assert!(crm_calls(&sims) >= 1, "{mode:?}: the CRM was really called");

    // The buyer retries with the same key once the CRM is back: one lead, answered `received`.
    sims.crm.set_mode(Mode::Normal, 0);
    if mode == Mode::Slow {
        // Let the slow CRM finish the first submission.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let retry = gw.send(TOYOTA, request).await;
    assert_eq!(data(&retry)["status"], "received", "{mode:?}");
    let leads = crm_leads(&sims);
    assert_eq!(leads.len(), 1, "{mode:?}: exactly one lead: {leads:?}");
    assert_eq!(leads[0]["lead_id"], data(&retry)["lead_id"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crm_fault_is_a_retryable_internal_error() {
    crm_fault(Mode::Fail, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_crm_times_out_as_a_retryable_internal_error() {
    crm_fault(Mode::Hang, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_crm_times_out_and_the_retry_never_creates_a_second_lead() {
    crm_fault(Mode::Slow, 1200).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_garbled_crm_reply_is_a_retryable_internal_error() {
    crm_fault(Mode::Garbage, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_smtp_intake_is_a_retryable_internal_error() {
    let Rig { gw, sims } = rig().await;
    sims.smtp.control.set_mode(Mode::Fail, 0);
    let request = lead(&honda(Status::InStock), "smtp-fail");
    let reply = gw.send(HONDA, request.clone()).await;
    assert_code(&reply, "INTERNAL_ERROR");
    assert_eq!(reply.aap_error()["retryable"], true);
    assert!(sims.smtp.messages().is_empty());
    sims.smtp.control.set_mode(Mode::Normal, 0);
    let retry = gw.send(HONDA, request).await;
    assert_eq!(data(&retry)["status"], "received");
    assert_eq!(sims.smtp.messages().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Replicas sharing idempotency keys through a real redis-server

/// A replica of the demo whose idempotency keys live in `redis_url`.
async fn replica(sims: &Simulators, redis_url: &str, on_error: &str) -> Gateway {
    let files = DemoCopy::new();
    files.append(
        "config/demo.yaml",
        &format!(
            "idempotency:\n  backend: redis\n  redis_url: {redis_url}\n  redis_timeout: 200ms\n  \
             on_backend_error: {on_error}\n"
        ),
    );
    files.start(simulator_vars(sims)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_retried_on_another_replica_replays_the_first_replicas_reply() {
    let Some(redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let a = replica(&sims, &redis.url, "local").await;
    let b = replica(&sims, &redis.url, "local").await;
    let request = lead(&toyota(Status::InStock), "across-replicas");

    let first = a.send(TOYOTA, request.clone()).await;
    assert_eq!(data(&first)["status"], "received");
    let calls = crm_calls(&sims);
    let retried = b.send(TOYOTA, request.clone()).await;
    assert_eq!(
        retried.payload(),
        first.payload(),
        "the first replica's reply"
    );
    assert_eq!(crm_calls(&sims), calls, "no second CRM call");
    assert_eq!(
        metric(
            &b,
            "aap_gateway_idempotency_replays_total{dealer=\"demo_toyota\"}"
        ),
        Some(1.0),
        "counted as a replay"
    );
    // The second replica now replays from its own store too, and a changed payload conflicts
    // on either replica.
    assert_eq!(
        b.send(TOYOTA, request.clone()).await.payload(),
        first.payload()
    );
    let changed = with(request, "/message", json!("Actually, the red one."));
    assert_code(
        &b.send(TOYOTA, changed.clone()).await,
        "IDEMPOTENCY_CONFLICT",
    );
    assert_code(&a.send(TOYOTA, changed).await, "IDEMPOTENCY_CONFLICT");
    assert_eq!(crm_leads(&sims).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_duplicates_on_two_replicas_make_exactly_one_crm_call() {
    let Some(redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let replicas = std::sync::Arc::new([
        replica(&sims, &redis.url, "local").await,
        replica(&sims, &redis.url, "local").await,
    ]);
    sims.crm.set_mode(Mode::Slow, 300); // the duplicates overlap the first call
    let request = lead(&toyota(Status::InStock), "burst-across-replicas");
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let replicas = std::sync::Arc::clone(&replicas);
            let request = request.clone();
            tokio::spawn(async move { replicas[i % 2].send(TOYOTA, request).await })
        })
        .collect();
    let mut ids = Vec::new();
    for call in calls {
        ids.push(data(&call.await.expect("task"))["lead_id"].clone());
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "{ids:?}");
    assert_eq!(crm_calls(&sims), 1, "exactly one CRM call");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lead_that_failed_on_one_replica_runs_again_on_the_other() {
    let Some(redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let a = replica(&sims, &redis.url, "local").await;
    let b = replica(&sims, &redis.url, "local").await;
    let request = lead(&toyota(Status::InStock), "failed-then-retried");
    sims.crm.set_mode(Mode::Fail, 0);
    assert_code(&a.send(TOYOTA, request.clone()).await, "INTERNAL_ERROR");
    sims.crm.set_mode(Mode::Normal, 0);
    // The failure released the key at once: the retry neither waits for the lock nor replays.
    let started = Instant::now();
    let retry = b.send(TOYOTA, request).await;
    assert_eq!(data(&retry)["status"], "received");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(crm_leads(&sims).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_redis_local_still_delivers_and_deny_refuses_the_lead() {
    let Some(mut redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let local = replica(&sims, &redis.url, "local").await;
    let deny = replica(&sims, &redis.url, "deny").await;
    redis.stop();

    // `local`: delivered, and replayed by this replica's own store.
    let request = lead(&toyota(Status::InStock), "redis-down-local");
    let first = local.send(TOYOTA, request.clone()).await;
    assert_eq!(data(&first)["status"], "received");
    assert_eq!(local.send(TOYOTA, request).await.payload(), first.payload());
    assert!(local.app.idempotency.counters.backend_errors.load(Relaxed) >= 1);

    // `deny`: refused as retryable before the CRM sees it, answered well within a second.
    let calls = crm_calls(&sims);
    let started = Instant::now();
    let refused = deny
        .send(TOYOTA, lead(&toyota(Status::InStock), "redis-down-deny"))
        .await;
    assert_code(&refused, "INTERNAL_ERROR");
    assert_eq!(refused.aap_error()["retryable"], true);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(crm_calls(&sims), calls, "no CRM call");
}

// ---------------------------------------------------------------------------------------------
// Exactly once: a delivery runs to its end in its own task, and its outcome belongs to the key

/// Retries `request` on `gw` while the gateway answers "in progress" (as a buyer following the
/// retry hint would), until `within`; the last reply and how many "in progress" answers came.
async fn retry_while_in_progress(
    gw: &Gateway,
    path: &str,
    request: &Value,
    within: Duration,
) -> (Reply, usize) {
    let give_up = Instant::now() + within;
    let mut in_progress = 0;
    loop {
        let reply = gw.send(path, request.clone()).await;
        let pending = reply.body.get("error").is_some()
            && reply.aap_code() == "INTERNAL_ERROR"
            && reply.aap_error()["details"]["lead"] == "in_progress";
        if !pending || Instant::now() > give_up {
            return (reply, in_progress);
        }
        in_progress += 1;
        let hint = reply.aap_error()["details"]["retry_after_ms"]
            .as_u64()
            .unwrap_or(100);
        tokio::time::sleep(Duration::from_millis(hint.min(300))).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_who_disconnects_mid_delivery_gets_the_one_delivered_lead_on_retry() {
    let Rig { gw, sims } = rig().await;
    sims.crm.set_mode(Mode::Slow, 1200); // within the CRM's 5 s timeout
    let request = lead(&toyota(Status::InStock), "gone-mid-delivery");
    // The buyer gives up after 300 ms and closes its connection.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .no_proxy()
        .build()
        .expect("client");
    let post = common::post_send_message(&impatient, &gw.url(TOYOTA), request.clone());
    assert!(post.send().await.is_err(), "the buyer timed out");

    // The delivery went on without it; the retry joins it or gets its recorded reply.
    let (retry, _) = retry_while_in_progress(&gw, TOYOTA, &request, Duration::from_secs(10)).await;
    assert_eq!(data(&retry)["status"], "received", "{}", retry.text);
    assert_eq!(crm_calls(&sims), 1, "one delivery, never a second");
    let leads = crm_leads(&sims);
    assert_eq!(leads.len(), 1, "{leads:?}");
    assert_eq!(leads[0]["lead_id"], data(&retry)["lead_id"]);
    // The abandoned request was logged and counted like any other.
    let metrics = gw.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("aap_gateway_requests_total")
                && l.contains("outcome=\"ABANDONED\"")
                && l.contains("skill=\"lead.submit\"")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_smtp_final_reply_slower_than_the_request_deadline_is_one_email() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "request_timeout: 15s",
        "request_timeout: 2s\n  body_read_timeout: 1s",
    );
    files.edit(
        "mappings/demo-honda/upstreams.yaml",
        "timeouts: { connect: 2s, request: 10s }",
        "timeouts: { connect: 1s, request: 1s }",
    );
    let gw = files.start(simulator_vars(&sims)).await;
    // The intake answers the final dot after 4 s: past the buyer's deadline and the mail
    // upstream's `timeouts.request` (cut to 1 s), well within its `timeouts.data`.
    sims.smtp.control.set_mode(Mode::Slow, 4000);
    let request = lead(&honda(Status::InStock), "slow-final-reply");
    let started = Instant::now();
    let first = gw.send(HONDA, request.clone()).await;
    assert_code(&first, "INTERNAL_ERROR");
    assert_eq!(first.aap_error()["retryable"], true);
    assert_eq!(
        first.aap_error()["details"]["lead"],
        "in_progress",
        "{}",
        first.text
    );
    assert!(first.aap_error()["details"]["retry_after_ms"].as_u64() > Some(0));
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "{:?}",
        started.elapsed()
    );

    let (retry, in_progress) =
        retry_while_in_progress(&gw, HONDA, &request, Duration::from_secs(10)).await;
    assert_eq!(data(&retry)["status"], "received", "{}", retry.text);
    assert!(
        in_progress >= 1,
        "the retries were told to come back meanwhile"
    );
    assert_eq!(sims.smtp.messages().len(), 1, "exactly one e-mail");
}

/// A replica whose claims' leases are short (renewed every 500 ms), for the Redis tests below.
async fn short_lease_replica(sims: &Simulators, redis_url: &str, extra: &str) -> Gateway {
    let files = DemoCopy::new();
    files.append(
        "config/demo.yaml",
        &format!(
            "idempotency:\n  backend: redis\n  redis_url: {redis_url}\n  redis_timeout: 200ms\n  \
             lock_ttl: 1500ms\n{extra}"
        ),
    );
    files.start(simulator_vars(sims)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redis_restarted_empty_never_lets_another_replica_deliver_again() {
    let Some(mut redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let a = short_lease_replica(&sims, &redis.url, "").await;
    let b = short_lease_replica(&sims, &redis.url, "").await;
    let request = lead(&toyota(Status::InStock), "redis-restarted");
    let first = a.send(TOYOTA, request.clone()).await;
    assert_eq!(data(&first)["status"], "received");
    // Both replicas have talked to Redis (and learnt its epoch) before it loses everything.
    let other = lead(&toyota(Status::InStock), "warm-up-b");
    let warm = b.send(TOYOTA, other).await;
    assert!(warm.body.get("result").is_some(), "{}", warm.text);
    let calls = crm_calls(&sims);

    redis.restart(); // empty
    let (retry, _) = retry_while_in_progress(&b, TOYOTA, &request, Duration::from_secs(10)).await;
    assert_eq!(retry.payload(), first.payload(), "{}", retry.text);
    assert_eq!(crm_calls(&sims), calls, "no second delivery");
    assert!(a.app.idempotency.counters.restored.load(Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_replicas_claim_answers_in_progress_then_runs_out_within_its_lease() {
    use aap_gateway::redis_backend::{Claiming, HeldClaim, RedisBackend, Reservation};
    let Some(redis) = common::redis::RedisServer::start() else {
        return;
    };
    let sims = Simulators::start().await.expect("simulators");
    let gw = short_lease_replica(&sims, &redis.url, "").await;
    let request = lead(&toyota(Status::InStock), "claimed-by-the-dead");
    // A replica claims the key, starts delivering, and dies: its lease is never renewed.
    let dead = RedisBackend::new(&redis.url, Duration::from_secs(1), "aapgw:").expect("backend");
    let scope = aap_gateway::idempotency::KeyScope::of("demo_toyota", None, &request).expect("key");
    let fingerprint =
        aap_gateway::idempotency::hex(&aap_gateway::idempotency::fingerprint(&request));
    let (epoch, _) = dead.epoch("", Duration::from_secs(1)).await.expect("epoch");
    let terms = Claiming {
        lease: Duration::from_millis(1500),
        ttl: Duration::from_secs(3600),
        epoch: &epoch,
        recovery: Duration::from_secs(1),
        hold_orphans: false,
    };
    let Reservation::Reserved { token, .. } = dead
        .reserve(&scope.shared_key(), &fingerprint, &terms)
        .await
        .expect("reserve")
    else {
        panic!("the key was free");
    };
    let claim = HeldClaim {
        token: &token,
        fingerprint: &fingerprint,
        reference: "aap-dead-replica",
        delivering: true,
    };
    dead.renew(
        &scope.shared_key(),
        &claim,
        Duration::from_millis(1500),
        Duration::from_secs(3600),
    )
    .await
    .expect("delivering");
    let claimed = Instant::now();

    // The retry joins the claim while its lease runs (1.5 s, not a 60 s lock or the 15 s
    // deadline); once it ran out, the orphaned delivery is resent under its reference.
    let (retry, _) = retry_while_in_progress(&gw, TOYOTA, &request, Duration::from_secs(20)).await;
    assert_eq!(data(&retry)["status"], "received", "{}", retry.text);
    let waited = claimed.elapsed();
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(crm_leads(&sims).len(), 1);
    assert_eq!(
        metric(
            &gw,
            "aap_gateway_lead_outcome_unknown_total{dealer=\"demo_toyota\",action=\"resend\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn under_hold_a_delivery_of_unknown_outcome_is_never_sent_again() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    files.edit(
        "mappings/demo-toyota/upstreams.yaml",
        "timeouts: { connect: 1s, request: 5s }",
        "timeouts: { connect: 300ms, request: 500ms }",
    );
    files.append("config/demo.yaml", "idempotency:\n  on_ambiguous: hold\n");
    let gw = files.start(simulator_vars(&sims)).await;
    sims.crm.set_mode(Mode::Slow, 1200); // the CRM reads the lead, then answers too late
    let request = lead(&toyota(Status::InStock), "held-for-reconciliation");
    let first = gw.send(TOYOTA, request.clone()).await;
    assert_eq!(
        first.aap_error()["details"]["lead"],
        "held",
        "{}",
        first.text
    );
    assert_eq!(first.aap_error()["retryable"], true);
    assert!(
        first.headers.contains_key("retry-after"),
        "{:?}",
        first.headers
    );
    sims.crm.set_mode(Mode::Normal, 0);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let retry = gw.send(TOYOTA, request).await;
    assert_eq!(
        retry.aap_error()["details"]["lead"],
        "held",
        "{}",
        retry.text
    );
    assert_eq!(crm_calls(&sims), 1, "never delivered twice");
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(
            "aap_gateway_lead_outcome_unknown_total{dealer=\"demo_toyota\",action=\"hold\"} 1"
        ),
        "{metrics}"
    );
}
