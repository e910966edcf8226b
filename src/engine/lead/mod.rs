//! `lead.submit`: a buyer's lead delivered to the dealer's CRM, and the CRM's answer mapped back.
//! Owns delivery (HTTP or mail), the ADF document and the running deliveries; uses
//! `engine::proxy`, `lang`, `idempotency`, `schema` and `upstream`.
//!
//! The pipeline runs the gateway's own rules first (schema, idempotency, consent, the optional
//! vehicle check); this module holds what is specific to one dealer's lead mapping:
//!
//! - **Delivery**: over HTTP through the ordinary mapping engine (a SOAP operation, a REST JSON
//!   call, or the ADF/XML document POSTed to an intake), or by e-mail to the CRM's intake
//!   address (the ADF document as the body, the consent grant attached as `consent.json`).
//! - **Facts** the templates and jq programs see as `lead` / `$lead`: a stable `reference` (the
//!   same for every retry of one submission, so a CRM that de-duplicates by external reference
//!   never creates a second lead), `received_at`, the `adf` document, the consent as JSON, and
//!   the appointment time in the rooftop's zone.
//! - **The reply**: the mapping's jq gives `data`; the gateway adds the dealer contact and a
//!   message that says what happens next (and that only `confirmed` is a booking,
//!   docs/protocol.md §Lead request and reply).
//!
//! Only an acknowledged delivery is answered: a CRM that fails, times out or answers something
//! the mapping cannot read gives `INTERNAL_ERROR` (retryable), never `received`. A failed
//! delivery says whether the CRM may have taken the lead anyway ([`Undelivered::uncertain`]),
//! which decides what becomes of its idempotency key.

pub mod adf;
pub mod deliveries;

use std::sync::Arc;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use minijinja::value::Value as TplValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use self::adf::AdfContext;
use crate::engine::IntoAap as _;
use crate::engine::proxy::{Canned, MappingGlobals, ProxyMapping, Transport};
use crate::engine::{Answer, Handler};
use crate::error::{AapCode, AapError};
use crate::idempotency::Fingerprint;
use crate::lang::jq::{Jq, JqValue, JqVars};
use crate::lang::template::{Context, Scope, Templates};
use crate::protocol::{Call, Reply, Skill, SkillRef};
use crate::upstream::{MailPart, Mailer, OutgoingMail};

/// Why a delivery gave no reply, and whether the CRM may have the lead all the same.
#[derive(Debug)]
pub struct Undelivered {
    pub error: AapError,
    /// `false`: the lead certainly did not reach the CRM (refused before it was accepted: no
    /// connection, breaker open, a full queue, an SMTP refusal, an HTTP error status or SOAP
    /// fault read back whole, a domain error rule). `true`: it may have (a timeout or a lost
    /// connection once the request or message was out, or an acknowledgement the mapping
    /// could not read).
    pub uncertain: bool,
}

impl Undelivered {
    /// Sorts an HTTP delivery's error: only failures that prove the CRM refused or never saw
    /// the call are certain.
    fn http(error: AapError) -> Undelivered {
        let uncertain = matches!(
            error,
            AapError::UpstreamTimeout { .. }
                | AapError::InvalidUpstreamResponse { .. }
                | AapError::InvalidReply { .. }
                | AapError::Internal(_)
        );
        Undelivered { error, uncertain }
    }
}

/// A dealer's compiled lead mapping.
#[derive(Debug)]
pub struct LeadMapping {
    /// The mapping file, for logs.
    pub file: String,
    pub policy: LeadPolicy,
    pub destination: Destination,
}

/// The dealer's rules for leads (`lead:` in `lead.submit.yaml`).
#[derive(Debug, Clone)]
pub struct LeadPolicy {
    /// Channels the dealer follows up on; empty = any.
    pub follow_up: Vec<String>,
    pub timezone: TimeZone,
    pub check_vehicle: bool,
    pub test_drive_needs_vehicle: bool,
    /// Returned in `data.dealer` with the dealer's name.
    pub dealer_phone: Option<String>,
    /// The dealership's name (ADF `<vendor>`, `data.dealer.name`).
    pub dealer_name: String,
    pub dealer_id: String,
}

/// Where leads go.
#[derive(Debug)]
pub enum Destination {
    /// An HTTP call built by the mapping engine (SOAP, REST JSON, ADF POST).
    Http(Arc<ProxyMapping>),
    /// An e-mail to the CRM's intake address.
    Mail(Box<MailDelivery>),
}

/// A lead by e-mail: the subject template and the jq program that turns the server's receipt
/// (`{"message_id", "server_reply"}`) into the reply data.
#[derive(Debug)]
pub struct MailDelivery {
    pub mailer: Arc<Mailer>,
    pub subject: Templates,
    pub response: Jq,
    pub shared: MappingGlobals,
}

impl LeadMapping {
    /// Dealer rules on the request itself (before any upstream call).
    pub fn check_request(&self, request: &Value) -> Result<(), AapError> {
        let test_drive =
            request.pointer("/appointment/appointment_type") == Some(&json!("test_drive"));
        if self.policy.test_drive_needs_vehicle
            && test_drive
            && request.get("vehicle_of_interest").is_none()
        {
            return Err(AapError::Validation {
                code: AapCode::MissingRequiredField,
                violations: vec![crate::error::Violation {
                    instance_location: "/vehicle_of_interest".to_owned(),
                    keyword: "required".to_owned(),
                    error: "a test drive needs the vehicle of interest".to_owned(),
                }],
            });
        }
        Ok(())
    }

    /// Looks the vehicle of interest up with the dealer's `inventory.vehicle` handler when the
    /// policy asks for it: unknown and sold units stop the lead; a lookup that fails for
    /// another reason does not (a lead is worth more than the check), and says so in the log.
    /// The unit found, if any, fills what the buyer left out of the lead's vehicle (ADF).
    pub async fn verify_vehicle(
        &self,
        inventory: Option<&Handler>,
        request: &Value,
    ) -> Result<Option<Value>, AapError> {
        if !self.policy.check_vehicle {
            return Ok(None);
        }
        let (Some(handler), Some(lookup)) = (inventory, vehicle_lookup(request)) else {
            return Ok(None);
        };
        let call = Call {
            skill: SkillRef::Known(Skill::InventoryVehicle),
            declared: None,
            data: lookup,
            context_id: None,
        };
        match handler.execute(&call).await {
            Ok(Answer::Data(vehicle)) => Ok(Some(vehicle.into_value())),
            Ok(Answer::Prebuilt(_)) => Ok(None),
            Err(
                e @ AapError::Domain {
                    code: AapCode::VehicleNotFound | AapCode::VehicleUnavailable,
                    ..
                },
            ) => Err(e),
            Err(e) => {
                tracing::warn!(
                    dealer = %self.policy.dealer_id,
                    error = %e,
                    "vehicle check failed (the inventory system did not answer); delivering \
                     the lead without it, as `lead.check_vehicle` documents"
                );
                Ok(None)
            }
        }
    }

    /// The facts the templates (`lead`) and jq programs (`$lead`) see. `checked`: the unit the
    /// vehicle check found; its fields fill what the buyer's `vehicle_of_interest` leaves out.
    pub fn facts(
        &self,
        request: &Value,
        fingerprint: &Fingerprint,
        now: Timestamp,
        checked: Option<&Value>,
        api_key: Option<&str>,
    ) -> Value {
        let reference = reference(&self.policy.dealer_id, api_key, request, fingerprint);
        let completed = checked.map(|unit| with_checked_vehicle(request, unit));
        let adf = adf::render(
            completed.as_ref().unwrap_or(request),
            &AdfContext {
                vendor_name: &self.policy.dealer_name,
                reference: &reference,
                timezone: &self.policy.timezone,
                received_at: now,
            },
        );
        let appointment_local = request
            .pointer("/appointment/appointment_at")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(|t| {
                t.to_zoned(self.policy.timezone.clone())
                    .strftime("%Y-%m-%d %H:%M %Z")
                    .to_string()
            });
        json!({
            "reference": reference,
            "received_at": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "adf": adf,
            "consent_json": request.get("consent").map(Value::to_string),
            "appointment_local": appointment_local,
        })
    }

    /// Delivers the lead and maps the acknowledgement to reply `data`. `canned`: run offline
    /// against a canned reply (examples) instead of the live CRM.
    pub async fn deliver(
        &self,
        canned: Option<&Canned>,
        request: &Value,
        facts: &Value,
    ) -> Result<Value, Undelivered> {
        match &self.destination {
            Destination::Http(mapped) => {
                let transport = match canned {
                    Some(c) => Transport::Canned(c),
                    None => Transport::Live(&mapped.upstream),
                };
                mapped
                    .execute_lead(transport, request, facts)
                    .await
                    .map_err(Undelivered::http)
            }
            Destination::Mail(mail) => self.mail(mail, canned.is_some(), request, facts).await,
        }
    }

    /// The upstream (or mailer) the lead goes to, for logs.
    pub fn upstream(&self) -> &str {
        match &self.destination {
            Destination::Http(mapped) => mapped.upstream.name(),
            Destination::Mail(mail) => mail.mailer.name(),
        }
    }

    async fn mail(
        &self,
        mail: &MailDelivery,
        offline: bool,
        request: &Value,
        facts: &Value,
    ) -> Result<Value, Undelivered> {
        let certain = |error| Undelivered {
            error,
            uncertain: false,
        };
        let values = minijinja::context! {
            request => TplValue::from(minijinja::value::Serde(request)),
            tables => mail.shared.tables_tpl.clone(),
            dealer => mail.shared.dealer_tpl.clone(),
            lead => TplValue::from(minijinja::value::Serde(facts)),
        };
        let subject = mail
            .subject
            .render("subject", Context::Header, Scope::context(&values))
            .map_err(|e| subject_error(&self.file, &e))
            .map_err(certain)?;
        let text = |key: &str| {
            facts
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let reference = text("reference");
        let receipt = if !offline {
            let outgoing = OutgoingMail {
                subject,
                message_id: format!("{reference}@aap-gateway"),
                parts: vec![
                    MailPart {
                        content_type: "text/plain; charset=utf-8".to_owned(),
                        filename: None,
                        body: text("adf"),
                    },
                    MailPart {
                        content_type: "application/json".to_owned(),
                        filename: Some("consent.json".to_owned()),
                        body: text("consent_json"),
                    },
                ],
            };
            let receipt = mail
                .mailer
                .deliver(outgoing)
                .await
                .map_err(|f| Undelivered {
                    error: f.error.into_aap(mail.mailer.name()),
                    uncertain: f.unconfirmed,
                })?;
            json!({ "message_id": receipt.message_id, "server_reply": receipt.server_reply })
        } else {
            // Examples run offline: the receipt a server would give.
            json!({
                "message_id": format!("{reference}@aap-gateway"),
                "server_reply": "250 2.0.0 OK (example)",
            })
        };
        let vars = JqVars {
            request: JqValue::from_json(request),
            tables: mail.shared.tables_jq.clone(),
            dealer: mail.shared.dealer_jq.clone(),
            lead: JqValue::from_json(facts),
        };
        mail.response
            .run_one(&JqValue::from_json(&receipt), &vars)
            .map(|v| v.to_json())
            .map_err(|_| Undelivered {
                // jq messages quote values, and lead values are personal data.
                error: AapError::Internal(format!(
                    "{}: the response jq failed on the mail receipt",
                    self.file
                )),
                // The server accepted the message.
                uncertain: true,
            })
    }

    /// The reply: `data` completed with the dealer contact, and a message saying what happens
    /// next.
    pub fn reply(&self, mut data: Value, request: &Value) -> Reply {
        if let Some(obj) = data.as_object_mut()
            && !obj.contains_key("dealer")
        {
            let mut dealer = Map::new();
            dealer.insert("name".into(), json!(self.policy.dealer_name));
            if let Some(phone) = &self.policy.dealer_phone {
                dealer.insert("phone".into(), json!(phone));
            }
            obj.insert("dealer".into(), Value::Object(dealer));
        }
        let message = message(&data, request);
        Reply::new(Skill::LeadSubmit, data, Some(message))
    }
}

/// Why the mail subject could not be rendered. A buyer's value with a line break (which would
/// start a header of its own) is bad input, answered as such and never retryable: a retry would
/// meet the same value. Anything else is a defect in the mapping.
fn subject_error(file: &str, message: &str) -> AapError {
    if message.starts_with(crate::lang::template::UNSENDABLE) {
        return AapError::Validation {
            code: AapCode::SchemaValidationFailed,
            violations: vec![crate::error::Violation {
                instance_location: String::new(),
                keyword: "format".to_owned(),
                error: "a value placed in the mail subject contains a line break".to_owned(),
            }],
        };
    }
    AapError::Internal(format!("{file}: mail subject: {message}"))
}

/// The `inventory.vehicle` request that finds the vehicle of interest, when it names one.
pub fn vehicle_lookup(request: &Value) -> Option<Value> {
    let vehicle = request.get("vehicle_of_interest")?;
    let mut lookup = Map::new();
    lookup.insert("type".into(), json!("inventory.vehicle.request"));
    for key in ["vin", "stock", "vehicle_id"] {
        if let Some(v) = vehicle.get(key).filter(|v| v.is_string()) {
            lookup.insert(key.into(), v.clone());
        }
    }
    (lookup.len() > 1).then_some(Value::Object(lookup))
}

/// The lead's stable external reference: the same for every retry of one submission. With an
/// idempotency key it is derived from (dealer, the key's owner, key, payload) — the owner as
/// [`crate::idempotency::key_owner`] says, so two clients' keys never share a reference a CRM
/// would de-duplicate on; the payload because a key reused with another body once its first
/// delivery was forgotten (freed after an unknown outcome or a refusal, expired, evicted) is
/// another lead, which a CRM de-duplicating on the reference must not take for the first.
/// Without a key it is derived from (dealer, payload), so even a keyless retry of the very same
/// lead is recognised by the CRM.
pub fn reference(
    dealer: &str,
    api_key: Option<&str>,
    request: &Value,
    fingerprint: &Fingerprint,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(dealer.as_bytes());
    hasher.update([0]);
    match request.get("idempotency_key").and_then(Value::as_str) {
        Some(key) => {
            hasher.update(b"key\0");
            hasher.update(crate::idempotency::key_owner(api_key, request).as_bytes());
            hasher.update([0]);
            hasher.update(key.as_bytes());
            hasher.update([0]);
            hasher.update(fingerprint);
        }
        None => {
            hasher.update(b"payload\0");
            hasher.update(fingerprint);
        }
    }
    let digest = hasher.finalize();
    let mut out = String::with_capacity(28);
    out.push_str("aap-");
    for byte in &digest[..12] {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// What the buyer agent should tell its user (only `confirmed` is a booking: docs/protocol.md
/// §Lead request and reply).
fn message(data: &Value, request: &Value) -> String {
    let status = data
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let channels: Vec<&str> = request
        .pointer("/consent/allowed_channels")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let follow_up = if channels.is_empty() {
        String::new()
    } else {
        format!(" by {}", channels.join(" or "))
    };
    let lead = match status {
        "duplicate" => "The dealer already had an equivalent recent request from this customer \
                        and merged this one into it."
            .to_owned(),
        "rejected" => "The dealer did not accept this lead.".to_owned(),
        _ => format!("The dealer received the lead and will follow up{follow_up}."),
    };
    let appointment = data.get("appointment");
    let appt_status = appointment
        .and_then(|a| a.get("status"))
        .and_then(Value::as_str);
    let appt = match appt_status {
        Some("confirmed") => format!(
            " The appointment is booked for {}.",
            appointment
                .and_then(|a| a.get("confirmed_at"))
                .and_then(Value::as_str)
                .unwrap_or("the requested time")
        ),
        Some("proposed") => " The requested time is not available; the dealer proposes the \
                             listed times. This is not a booking yet: submit a new lead with \
                             the chosen time."
            .to_owned(),
        Some("requested") => " The appointment request was passed on; staff will contact the \
                              customer to schedule it. This is not a booking yet."
            .to_owned(),
        Some("rejected") => " The dealer cannot host the requested appointment.".to_owned(),
        _ => String::new(),
    };
    format!("{lead}{appt}")
}

/// The lead with its `vehicle_of_interest` completed from the unit the vehicle check found:
/// the buyer's own values win; only the identifying and descriptive fields a CRM shows are added.
fn with_checked_vehicle(request: &Value, unit: &Value) -> Value {
    const FILLED: [&str; 9] = [
        "vin",
        "stock",
        "year",
        "make",
        "model",
        "trim",
        "condition",
        "mileage",
        "vehicle_type",
    ];
    let mut completed = request.clone();
    if let Some(voi) = completed
        .get_mut("vehicle_of_interest")
        .and_then(Value::as_object_mut)
    {
        for key in FILLED {
            if let Some(value) = unit.get(key).filter(|v| !v.is_null())
                && !voi.contains_key(key)
            {
                voi.insert(key.to_owned(), value.clone());
            }
        }
    }
    completed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_stable_per_key_and_payload_and_scoped_by_dealer_and_agent() {
        let a = json!({ "idempotency_key": "k1", "source_agent": { "name": "x" }, "message": "a" });
        let b = json!({ "idempotency_key": "k1", "source_agent": { "name": "x" }, "message": "b" });
        let c = json!({ "idempotency_key": "k1", "source_agent": { "name": "y" } });
        let f1 = [1; 32];
        let f2 = [2; 32];
        assert_eq!(reference("d", None, &a, &f1), reference("d", None, &a, &f1));
        // Issue 38 item 6: another body under the same key is another lead.
        assert_ne!(reference("d", None, &a, &f1), reference("d", None, &b, &f2));
        assert_ne!(reference("d", None, &a, &f1), reference("e", None, &a, &f1));
        assert_ne!(reference("d", None, &a, &f1), reference("d", None, &c, &f1));
        let keyless = json!({ "source_agent": { "name": "x" } });
        assert_eq!(
            reference("d", None, &keyless, &f1),
            reference("d", None, &keyless, &f1)
        );
        assert_ne!(
            reference("d", None, &keyless, &f1),
            reference("d", None, &keyless, &f2)
        );
        assert_eq!(reference("d", None, &a, &f1).len(), 28);
        // With API keys, the key's owner replaces the agent's name.
        assert_ne!(
            reference("d", Some("p"), &a, &f1),
            reference("d", Some("q"), &a, &f1)
        );
        assert_ne!(
            reference("d", Some("p"), &a, &f1),
            reference("d", None, &a, &f1)
        );
    }

    #[test]
    fn the_vehicle_lookup_uses_the_identifiers_given() {
        let r = json!({ "vehicle_of_interest": { "vin": "V", "year": 2022 } });
        assert_eq!(
            vehicle_lookup(&r),
            Some(json!({ "type": "inventory.vehicle.request", "vin": "V" }))
        );
        let r = json!({ "vehicle_of_interest": { "year": 2022, "make": "Honda" } });
        assert_eq!(vehicle_lookup(&r), None);
        assert_eq!(vehicle_lookup(&json!({})), None);
    }

    #[test]
    fn messages_never_call_a_proposal_a_booking() {
        let r = json!({ "consent": { "allowed_channels": ["email", "phone"] } });
        let m = message(
            &json!({ "status": "received", "appointment": { "status": "proposed" } }),
            &r,
        );
        assert!(m.contains("not a booking"), "{m}");
        let m = message(
            &json!({ "status": "received", "appointment": { "status": "confirmed", "confirmed_at": "2026-05-02T17:00:00Z" } }),
            &r,
        );
        assert!(m.contains("booked for 2026-05-02T17:00:00Z"), "{m}");
        assert!(m.contains("by email or phone"), "{m}");
    }
}
