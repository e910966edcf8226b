//! The legacy SOAP CRM simulator: a dealer CRM's `LeadService.asmx` that takes sales leads —
//! customer, consent, vehicle of interest, trade-in and an optional appointment request — over
//! SOAP 1.1, authenticated with a WS-Security UsernameToken password digest.
//!
//! It is what `aap-gateway demo` and the tests put behind the lead and appointment mappings: the
//! gateway turns each AAP lead into one `SubmitLead` call and maps the result (or fault) back.
//! The `/_sim/` controls are in [`sim`]; the SOAP plumbing shared with [`super::soap_dms`] is in
//! [`soap`].
//!
//! ## `POST /crm/LeadService.asmx` — `SubmitLead`
//!
//! The path is matched case-insensitively (IIS); other paths → 404 `Not Found` (text), other
//! methods → 405 (`Allow: POST`). Checks run in this order, the first failure answers:
//!
//! | Check | Failure |
//! |---|---|
//! | `Content-Type` is `text/xml`, `charset` absent or `utf-8` | 415, `soap:Client` "unsupported content type: text/xml required" |
//! | `SOAPAction: "urn:demo-crm:leads/SubmitLead"`, quotes included | 500, `soap:Client` "unknown SOAPAction" |
//! | Body is well-formed UTF-8 XML (no DTD, ≤ 64 levels deep) whose root is named `Envelope` | 500, `soap:Client` "malformed envelope" |
//! | `Envelope` is in `http://schemas.xmlsoap.org/soap/envelope/` (another or no namespace fails) | 500, `soap:VersionMismatch` |
//! | `Envelope` has a `Body` | 500, `soap:Client` "malformed envelope" |
//! | WS-Security UsernameToken (below) | 500, `wsse:FailedAuthentication` "authentication failed: <reason>" |
//! | First `Body` child is `SubmitLead` in `urn:demo-crm:leads` | 500, `soap:Client` "unknown operation: Body must hold SubmitLead" |
//! | The lead (below) | 500, `soap:Client` "invalid lead: <field path> is required" / "… is not …" |
//!
//! Faults are `<soap:Fault><faultcode>…</faultcode><faultstring>…</faultstring></soap:Fault>`;
//! the `wsse` prefix is declared on `soap:Fault`. Fault texts name fields, never their values.
//!
//! ### Security: `soap:Header/Security/UsernameToken`
//!
//! OASIS WSS 1.0 UsernameToken; elements and the `Type` attribute are matched by local name (any
//! prefix or namespace). `Username` must be `demo-crm`; `Password` must have a `Type` ending in
//! `#PasswordDigest` (absent or `#PasswordText` → "password digest required"), with text
//! `Base64(SHA-1(base64-decoded Nonce ‖ Created ‖ "crm-secret"))` ([`password_digest`]; `Created`
//! as sent, character for character). `Created` is RFC 3339 and within ±5 minutes of the CRM's
//! clock; a `Nonce` accepted in the last 10 minutes is refused ("nonce already used"). Other
//! reasons: "missing wsse:Security header", "missing UsernameToken", "missing Username",
//! "unknown username", "missing Password", "unsupported password Type", "missing Nonce", "Nonce
//! is not base64", "missing Created", "Created is not an RFC 3339 timestamp", "Created is outside
//! the 5-minute window", "invalid password digest".
//!
//! ### The lead: `SubmitLead/Lead`
//!
//! Children matched by local name (any prefix), the first of a name wins, unknown ones ignored.
//! Text is taken as the parser unescapes it (entities, character references and CDATA), so
//! fixtures keep it exactly; values are *interpreted* after trimming surrounding whitespace. An
//! element that is empty or whitespace counts as absent, and so does a group none of whose fields
//! is present.
//!
//! | Field | Rule |
//! |---|---|
//! | `ExternalRef` | required; the idempotency key (compared trimmed, case-sensitive) |
//! | `Source` | required |
//! | `SourceUrl`, `AgentCardUrl`, `Comments` | optional, free text |
//! | `SubmittedAt` | optional, RFC 3339 |
//! | `Customer/FirstName`, `Customer/LastName` | required |
//! | `Customer/Email`, `Customer/Phone` | at least one; not otherwise validated |
//! | `Customer/PreferredContact` | optional, free text |
//! | `Customer/Address/{Line1, Line2, City, State, Zip, Country}` | optional; `State` decides the region |
//! | `Consent/GrantedAt` | required, RFC 3339 (so `Consent` is required) |
//! | `Consent/ExpiresAt` | optional, RFC 3339 |
//! | `Consent/Channels/Channel` | one or more, each exactly `email`, `phone` or `sms` |
//! | `Consent/Text` | required |
//! | `Vehicle/{Vin, Stock, Year, Make, Model, Trim, Condition}` | optional; `Year` 4 digits |
//! | `TradeIn/{Vin, Year, Make, Model, Trim, Mileage, Condition}` | optional; `Year` 4 digits, `Mileage` 1–9 digits |
//! | `Appointment/Type` | required when `Appointment` is present: `sales`, `service`, `test_drive`, `trade_in` |
//! | `Appointment/Start` | optional, RFC 3339 |
//! | `Appointment/DurationMinutes` | optional, 1–9 digits, not 0 |
//! | `Appointment/Notes` | optional |
//!
//! ### The answer (HTTP 200, `text/xml; charset=utf-8`)
//!
//! ```xml
//! <soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>
//!   <SubmitLeadResponse xmlns="urn:demo-crm:leads"><SubmitLeadResult>
//!     <LeadId>L-000001</LeadId><Outcome>Created|Existing|Merged|Rejected</Outcome>[<Reason>…</Reason>]
//!     [<Appointment><AppointmentId>A-000001</AppointmentId><Status>Booked|Alternatives|Pending|Declined</Status>
//!       [<Start>2026-06-01T17:00:00Z</Start>][<Alternatives><Slot>…Z</Slot><Slot>…Z</Slot></Alternatives>]</Appointment>]
//!   </SubmitLeadResult></SubmitLeadResponse>
//! </soap:Body></soap:Envelope>
//! ```
//!
//! (without the whitespace). The outcome, first rule that applies:
//!
//! | Outcome | When | Effect |
//! |---|---|---|
//! | `Existing` | `ExternalRef` answered before | the first answer again (same `LeadId`, `Reason`, appointment id, status, start and alternatives); nothing stored or booked |
//! | business error | `Appointment/Start` before now | `<SubmitLeadResult><Error><Code>APPOINTMENT_IN_PAST</Code><Message>Appointment start is in the past</Message></Error></SubmitLeadResult>`; nothing stored, the `ExternalRef` not remembered |
//! | `Merged` | a `Created` lead received in the last 24 h has the same customer (`Email` or `Phone` equal, trimmed, case-insensitive) and the same `Vehicle/Vin` (case-insensitive; no `Vin` on both sides also matches) | that lead's `LeadId`; no new lead, the submission is listed in its `merged` |
//! | `Rejected` | `Customer/Address/State` present and not `CA`, `NV`, `OR`, `WA`, `AZ` (case-insensitive) | new `LeadId`, `Reason` `region not served`, stored |
//! | `Created` | otherwise | new `LeadId`, stored |
//!
//! The appointment (when present; a new `A-…` id each time, first rule that applies):
//! `Declined` when the lead is `Rejected`; `Pending` without `Start`; `Declined` when
//! `DurationMinutes` > 240; `Booked` when `Start` is a free slot — `Start` is then echoed in UTC
//! and the slot taken; otherwise `Alternatives` with the next two free slots strictly after
//! `Start` (nothing booked). A slot is an instant on a :00 or :30 minute with zero seconds whose
//! America/Los_Angeles local time is Monday–Saturday, 09:00–17:30 inclusive; durations do not
//! block neighbouring slots.
//!
//! ## `GET /_sim/fixtures`
//!
//! `{"username", "password", "path", "soap_action", "leads": [lead…], "submissions": N,
//! "booked": [slot…]}`. A lead is `{"lead_id", "external_ref", "outcome", "reason",
//! "source", "source_url", "agent_card_url", "submitted_at", "customer": {"first_name",
//! "last_name", "email", "phone", "preferred_contact", "address": {"line1", "line2", "city",
//! "state", "zip", "country"}}, "consent": {"granted_at", "expires_at", "channels": […], "text"},
//! "vehicle": {"vin", "stock", "year", "make", "model", "trim", "condition"}, "trade_in": {"vin",
//! "year", "make", "model", "trim", "mileage", "condition"}, "comments", "appointment":
//! {"appointment_id", "type", "start", "duration_minutes", "notes", "status", "booked_start",
//! "alternatives": […]}, "merged": [{"external_ref", "appointment"}]}` — absent fields omitted
//! (`reason` only on `Rejected`, `booked_start` only when `Booked`, `alternatives` only with
//! `Alternatives`, `merged` only once a submission was merged in), every request field the exact
//! text received, all values strings; leads in insertion order (`Created` and `Rejected` only). `submissions` counts the `SubmitLead` calls that passed every check above;
//! `booked` lists the taken slots in UTC, ascending.
//!
//! `POST /_sim/reset` also forgets every lead, booking, remembered `ExternalRef`, counter (ids
//! start again at `L-000001` / `A-000001`) and seen nonce ([`Crm::clear`]).
//!
//! Misbehaviour: `fail` → 500 `soap:Server` "CRM database unavailable"; `garbage` → 200
//! `text/xml`, an envelope cut off mid-element; `huge` → 200, a well-formed `SubmitLeadResponse`
//! of about 8 MiB (an `Alternatives` list of that many slots).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::StatusCode;
use jiff::civil::Weekday;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse, lock};
use crate::soap::{self, Authenticator, Credentials, Element, EnvelopeError, MediaType, escape};

/// The service's path.
pub const PATH: &str = "/crm/LeadService.asmx";
/// The `SOAPAction` header value, quotes included.
pub const SOAP_ACTION: &str = "\"urn:demo-crm:leads/SubmitLead\"";
/// The namespace of `SubmitLead` and `SubmitLeadResponse`.
pub const LEADS_NS: &str = "urn:demo-crm:leads";
/// The SOAP 1.1 envelope namespace.
pub const SOAP11_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The only UsernameToken user.
pub const USERNAME: &str = "demo-crm";
/// The secret the password digest is made with.
pub const PASSWORD: &str = "crm-secret";
/// The states whose customers the dealer serves.
pub const SERVED_STATES: [&str; 5] = ["CA", "NV", "OR", "WA", "AZ"];
/// The `Reason` of a `Rejected` lead.
pub const REGION_NOT_SERVED: &str = "region not served";
/// Longer appointments are `Declined`.
pub const MAX_DURATION_MINUTES: u32 = 240;
/// How far back a lead can absorb a duplicate (`Merged`).
pub const MERGE_WINDOW: SignedDuration = SignedDuration::from_hours(24);
/// The time zone of the opening hours.
pub const TIME_ZONE: &str = "America/Los_Angeles";

/// The CRM's notion of now; injected so tests can move time.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Binds `127.0.0.1:0` and serves an empty CRM on the real clock.
pub async fn start_crm() -> std::io::Result<SimHandle> {
    sim::start(Arc::new(Crm::new())).await
}

/// `Base64(SHA-1(nonce ‖ created ‖ password))`: the WS-Security UsernameToken password digest.
pub fn password_digest(nonce: &[u8], created: &str, password: &str) -> String {
    soap::password_digest(nonce, created, password)
}

/// The CRM: leads, bookings and the nonces it has seen.
pub struct Crm {
    clock: Clock,
    tz: TimeZone,
    auth: Authenticator,
    state: Mutex<State>,
    huge: OnceLock<Bytes>,
}

impl std::fmt::Debug for Crm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crm")
            .field("leads", &lock(&self.state).leads.len())
            .finish_non_exhaustive()
    }
}

impl Default for Crm {
    fn default() -> Crm {
        Crm::new()
    }
}

impl Crm {
    /// An empty CRM on the real clock.
    pub fn new() -> Crm {
        Crm::with_clock(Arc::new(Timestamp::now))
    }

    /// An empty CRM on `clock`.
    pub fn with_clock(clock: Clock) -> Crm {
        Crm {
            clock,
            // Bundled tzdb: the lookup cannot miss; UTC only keeps this total.
            tz: TimeZone::get(TIME_ZONE).unwrap_or(TimeZone::UTC),
            auth: Authenticator::new(Credentials {
                username: USERNAME,
                password: PASSWORD,
                accept_text: false,
            }),
            state: Mutex::new(State::default()),
            huge: OnceLock::new(),
        }
    }

    /// Forgets every lead, booking, counter and seen nonce.
    pub fn clear(&self) {
        *lock(&self.state) = State::default();
        self.auth.clear();
    }

    /// Every check in the module doc's order; the SOAP body of the 200 answer.
    fn submit(&self, req: &SimRequest) -> Result<String, Fault> {
        let media = req.header("content-type").and_then(MediaType::parse);
        if !media.is_some_and(|m| m.essence == "text/xml" && m.charset_is_utf8()) {
            return Err(Fault::MediaType);
        }
        if req.header("soapaction").map(str::trim) != Some(SOAP_ACTION) {
            return Err(Fault::Client("unknown SOAPAction".to_owned()));
        }
        let root = soap::parse(&req.body).ok_or(Fault::Malformed)?;
        let envelope = soap::open_envelope(&root, SOAP11_NS)?;
        let now = (self.clock)();
        self.auth.check(envelope.header, now).map_err(Fault::Auth)?;
        let op = envelope
            .body
            .children
            .first()
            .filter(|op| op.is(LEADS_NS, "SubmitLead"))
            .ok_or_else(|| {
                Fault::Client("unknown operation: Body must hold SubmitLead".to_owned())
            })?;
        let lead =
            Lead::parse(op).map_err(|what| Fault::Client(format!("invalid lead: {what}")))?;
        Ok(self.decide(lead, now).to_xml())
    }

    /// The business rules of the module doc's outcome table.
    fn decide(&self, lead: Lead, now: Timestamp) -> Reply {
        let mut state = lock(&self.state);
        state.submissions += 1;
        let key = lead.external_ref.trim().to_owned();
        if let Some(first) = state.answers.get(&key) {
            return Reply::Answer(Outcome::Existing, first.clone());
        }
        if lead
            .appointment
            .as_ref()
            .and_then(|a| a.start.as_ref())
            .is_some_and(|(_, start)| *start < now)
        {
            return Reply::AppointmentInPast;
        }
        if let Some(index) = state.merge_target(&lead, now) {
            let appointment = lead
                .appointment
                .as_ref()
                .map(|a| self.schedule(&mut state, a, false));
            let answer = Answer {
                lead_id: state.leads[index].answer.lead_id.clone(),
                reason: None,
                appointment: appointment.clone(),
            };
            state.leads[index].merged.push(Merge {
                external_ref: lead.external_ref,
                appointment: lead.appointment.zip(appointment),
            });
            state.answers.insert(key, answer.clone());
            return Reply::Answer(Outcome::Merged, answer);
        }
        let rejected = lead
            .customer
            .address
            .as_ref()
            .and_then(|a| a.get("state"))
            .is_some_and(|s| {
                !SERVED_STATES
                    .iter()
                    .any(|served| served.eq_ignore_ascii_case(s.trim()))
            });
        state.next_lead += 1;
        let lead_id = format!("L-{:06}", state.next_lead);
        let appointment = lead
            .appointment
            .as_ref()
            .map(|a| self.schedule(&mut state, a, rejected));
        let (outcome, reason) = if rejected {
            (Outcome::Rejected, Some(REGION_NOT_SERVED))
        } else {
            (Outcome::Created, None)
        };
        let answer = Answer {
            lead_id,
            reason,
            appointment,
        };
        state.answers.insert(key, answer.clone());
        state.leads.push(StoredLead {
            answer: answer.clone(),
            outcome,
            lead,
            received_at: now,
            merged: Vec::new(),
        });
        Reply::Answer(outcome, answer)
    }

    /// Answers an appointment request, booking the slot when it is free and valid.
    fn schedule(
        &self,
        state: &mut State,
        request: &AppointmentRequest,
        rejected: bool,
    ) -> AppointmentAnswer {
        state.next_appointment += 1;
        let id = format!("A-{:06}", state.next_appointment);
        let too_long = request
            .duration
            .as_ref()
            .is_some_and(|(_, minutes)| *minutes > MAX_DURATION_MINUTES);
        let (status, start, alternatives) = match request.start.as_ref().map(|(_, t)| *t) {
            _ if rejected => (AppointmentStatus::Declined, None, Vec::new()),
            None => (AppointmentStatus::Pending, None, Vec::new()),
            Some(_) if too_long => (AppointmentStatus::Declined, None, Vec::new()),
            Some(t) if self.is_slot(t) && !state.booked.contains(&t) => {
                state.booked.insert(t);
                (AppointmentStatus::Booked, Some(t), Vec::new())
            }
            Some(t) => (
                AppointmentStatus::Alternatives,
                None,
                self.free_slots_after(t, &state.booked),
            ),
        };
        AppointmentAnswer {
            id,
            status,
            start,
            alternatives,
        }
    }

    /// True when `t` is a :00 or :30 start inside opening hours.
    fn is_slot(&self, t: Timestamp) -> bool {
        let local = t.to_zoned(self.tz.clone());
        let minutes = i32::from(local.hour()) * 60 + i32::from(local.minute());
        local.subsec_nanosecond() == 0
            && local.second() == 0
            && matches!(local.minute(), 0 | 30)
            && local.weekday() != Weekday::Sunday
            && (9 * 60..=17 * 60 + 30).contains(&minutes)
    }

    /// The next two free slots strictly after `after` (looking two weeks ahead at most).
    fn free_slots_after(&self, after: Timestamp, booked: &BTreeSet<Timestamp>) -> Vec<Timestamp> {
        // Los Angeles is a whole number of hours off UTC, so UTC half hours are local half hours.
        const HALF_HOUR: i64 = 30 * 60;
        let first = after.as_second().div_euclid(HALF_HOUR) * HALF_HOUR + HALF_HOUR;
        (0..14 * 48)
            .filter_map(|i| Timestamp::from_second(first + i * HALF_HOUR).ok())
            .filter(|t| self.is_slot(*t) && !booked.contains(t))
            .take(2)
            .collect()
    }

    fn huge_body(&self) -> Bytes {
        self.huge
            .get_or_init(|| {
                let mut slots = String::with_capacity(sim::HUGE_BYTES + 64 * 1024);
                let mut t = Timestamp::UNIX_EPOCH;
                while slots.len() < sim::HUGE_BYTES {
                    slots.push_str(&format!("<Slot>{t}</Slot>"));
                    t = t
                        .checked_add(SignedDuration::from_mins(30))
                        .unwrap_or(Timestamp::UNIX_EPOCH);
                }
                Bytes::from(envelope(&format!(
                    "<SubmitLeadResponse xmlns=\"{LEADS_NS}\"><SubmitLeadResult>\
                     <LeadId>L-999999</LeadId><Outcome>Created</Outcome><Appointment>\
                     <AppointmentId>A-999999</AppointmentId><Status>Alternatives</Status>\
                     <Alternatives>{slots}</Alternatives></Appointment></SubmitLeadResult>\
                     </SubmitLeadResponse>"
                )))
            })
            .clone()
    }
}

impl SimApp for Crm {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        soap::endpoint(req, PATH, |req| match self.submit(req) {
            Ok(body) => xml(StatusCode::OK, body),
            Err(fault) => fault.response(),
        })
    }

    fn fixtures(&self) -> Value {
        let state = lock(&self.state);
        json!({
            "username": USERNAME,
            "password": PASSWORD,
            "path": PATH,
            "soap_action": SOAP_ACTION,
            "leads": state.leads.iter().map(StoredLead::to_json).collect::<Vec<_>>(),
            "submissions": state.submissions,
            "booked": state.booked.iter().map(Timestamp::to_string).collect::<Vec<_>>(),
        })
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        fault(
            StatusCode::INTERNAL_SERVER_ERROR,
            "soap:Server",
            "CRM database unavailable",
        )
    }

    fn garbage(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            CONTENT_TYPE,
            Bytes::from_static(
                b"<?xml version=\"1.0\" encoding=\"utf-8\"?><soap:Envelope \
                  xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>\
                  <SubmitLeadResponse xmlns=\"urn:demo-crm:leads\"><SubmitLeadResult><LeadId>L-00",
            ),
        )
    }

    fn huge(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(StatusCode::OK, CONTENT_TYPE, self.huge_body())
    }

    fn reset(&self) {
        self.clear();
    }
}

// === Wire ===

const CONTENT_TYPE: &str = "text/xml; charset=utf-8";

/// Why a call is answered with a SOAP fault.
#[derive(Debug)]
enum Fault {
    MediaType,
    Malformed,
    VersionMismatch,
    Auth(&'static str),
    Client(String),
}

impl From<EnvelopeError> for Fault {
    fn from(e: EnvelopeError) -> Fault {
        match e {
            EnvelopeError::Malformed => Fault::Malformed,
            EnvelopeError::VersionMismatch => Fault::VersionMismatch,
        }
    }
}

impl Fault {
    fn response(&self) -> SimResponse {
        let status = StatusCode::INTERNAL_SERVER_ERROR;
        match self {
            Fault::MediaType => fault(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "soap:Client",
                "unsupported content type: text/xml required",
            ),
            Fault::Malformed => fault(status, "soap:Client", "malformed envelope"),
            Fault::VersionMismatch => fault(
                status,
                "soap:VersionMismatch",
                "envelope namespace must be http://schemas.xmlsoap.org/soap/envelope/",
            ),
            Fault::Auth(reason) => fault(
                status,
                "wsse:FailedAuthentication",
                &format!("authentication failed: {reason}"),
            ),
            Fault::Client(message) => fault(status, "soap:Client", message),
        }
    }
}

fn fault(status: StatusCode, code: &str, message: &str) -> SimResponse {
    let wsse = if code.starts_with("wsse:") {
        format!(" xmlns:wsse=\"{}\"", soap::WSSE_NS)
    } else {
        String::new()
    };
    xml(
        status,
        envelope(&format!(
            "<soap:Fault{wsse}><faultcode>{code}</faultcode><faultstring>{}</faultstring>\
             </soap:Fault>",
            escape(message)
        )),
    )
}

fn envelope(body: &str) -> String {
    soap::envelope(SOAP11_NS, body)
}

fn xml(status: StatusCode, body: String) -> SimResponse {
    soap::xml(status, CONTENT_TYPE, body)
}

/// `<name>text</name>`, escaped.
fn leaf(out: &mut String, name: &str, text: &str) {
    out.push_str(&format!("<{name}>{}</{name}>", escape(text)));
}

/// What `SubmitLead` answers.
#[derive(Debug)]
enum Reply {
    Answer(Outcome, Answer),
    AppointmentInPast,
}

impl Reply {
    fn to_xml(&self) -> String {
        let mut out = format!("<SubmitLeadResponse xmlns=\"{LEADS_NS}\"><SubmitLeadResult>");
        match self {
            Reply::AppointmentInPast => out.push_str(
                "<Error><Code>APPOINTMENT_IN_PAST</Code>\
                 <Message>Appointment start is in the past</Message></Error>",
            ),
            Reply::Answer(outcome, answer) => {
                leaf(&mut out, "LeadId", &answer.lead_id);
                leaf(&mut out, "Outcome", outcome.as_str());
                if let Some(reason) = answer.reason {
                    leaf(&mut out, "Reason", reason);
                }
                if let Some(a) = &answer.appointment {
                    out.push_str("<Appointment>");
                    leaf(&mut out, "AppointmentId", &a.id);
                    leaf(&mut out, "Status", a.status.as_str());
                    if let Some(start) = a.start {
                        leaf(&mut out, "Start", &start.to_string());
                    }
                    if a.status == AppointmentStatus::Alternatives {
                        out.push_str("<Alternatives>");
                        for slot in &a.alternatives {
                            leaf(&mut out, "Slot", &slot.to_string());
                        }
                        out.push_str("</Alternatives>");
                    }
                    out.push_str("</Appointment>");
                }
            }
        }
        out.push_str("</SubmitLeadResult></SubmitLeadResponse>");
        envelope(&out)
    }
}

// === State ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Existing,
    Merged,
    Rejected,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "Created",
            Outcome::Existing => "Existing",
            Outcome::Merged => "Merged",
            Outcome::Rejected => "Rejected",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppointmentStatus {
    Booked,
    Alternatives,
    Pending,
    Declined,
}

impl AppointmentStatus {
    fn as_str(self) -> &'static str {
        match self {
            AppointmentStatus::Booked => "Booked",
            AppointmentStatus::Alternatives => "Alternatives",
            AppointmentStatus::Pending => "Pending",
            AppointmentStatus::Declined => "Declined",
        }
    }
}

/// The answer given to an `ExternalRef`, replayed verbatim as `Existing`.
#[derive(Debug, Clone)]
struct Answer {
    lead_id: String,
    reason: Option<&'static str>,
    appointment: Option<AppointmentAnswer>,
}

#[derive(Debug, Clone)]
struct AppointmentAnswer {
    id: String,
    status: AppointmentStatus,
    /// The booked slot.
    start: Option<Timestamp>,
    alternatives: Vec<Timestamp>,
}

#[derive(Debug, Default)]
struct State {
    /// `Created` and `Rejected` leads, in arrival order.
    leads: Vec<StoredLead>,
    /// First answer per trimmed `ExternalRef`.
    answers: HashMap<String, Answer>,
    booked: BTreeSet<Timestamp>,
    submissions: u64,
    next_lead: u32,
    next_appointment: u32,
}

impl State {
    /// The latest `Created` lead of the last 24 h with the same customer and vehicle.
    fn merge_target(&self, lead: &Lead, now: Timestamp) -> Option<usize> {
        let same = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a.trim().to_lowercase() == b.trim().to_lowercase(),
            _ => false,
        };
        let vin = |l: &Lead| {
            l.vehicle
                .as_ref()
                .and_then(|v| v.get("vin"))
                .map(|vin| vin.trim().to_lowercase())
        };
        self.leads.iter().rposition(|s| {
            s.outcome == Outcome::Created
                && now.duration_since(s.received_at) <= MERGE_WINDOW
                && (same(&s.lead.customer.email, &lead.customer.email)
                    || same(&s.lead.customer.phone, &lead.customer.phone))
                && vin(&s.lead) == vin(lead)
        })
    }
}

#[derive(Debug)]
struct StoredLead {
    answer: Answer,
    outcome: Outcome,
    lead: Lead,
    received_at: Timestamp,
    merged: Vec<Merge>,
}

/// A later submission folded into a lead.
#[derive(Debug)]
struct Merge {
    external_ref: String,
    appointment: Option<(AppointmentRequest, AppointmentAnswer)>,
}

impl StoredLead {
    fn to_json(&self) -> Value {
        let lead = &self.lead;
        let mut out = Map::new();
        put(&mut out, "lead_id", Some(&self.answer.lead_id));
        put(&mut out, "external_ref", Some(&lead.external_ref));
        put(&mut out, "outcome", Some(self.outcome.as_str()));
        put(&mut out, "reason", self.answer.reason);
        put(&mut out, "source", Some(&lead.source));
        put(&mut out, "source_url", lead.source_url.as_deref());
        put(&mut out, "agent_card_url", lead.agent_card_url.as_deref());
        put(&mut out, "submitted_at", lead.submitted_at.as_deref());
        out.insert("customer".to_owned(), lead.customer.to_json());
        out.insert("consent".to_owned(), lead.consent.to_json());
        if let Some(vehicle) = &lead.vehicle {
            out.insert("vehicle".to_owned(), vehicle.to_json());
        }
        if let Some(trade_in) = &lead.trade_in {
            out.insert("trade_in".to_owned(), trade_in.to_json());
        }
        put(&mut out, "comments", lead.comments.as_deref());
        if let (Some(request), Some(answer)) = (&lead.appointment, &self.answer.appointment) {
            out.insert("appointment".to_owned(), appointment_json(request, answer));
        }
        if !self.merged.is_empty() {
            let merged = self
                .merged
                .iter()
                .map(|m| {
                    let mut entry = Map::new();
                    put(&mut entry, "external_ref", Some(&m.external_ref));
                    if let Some((request, answer)) = &m.appointment {
                        entry.insert("appointment".to_owned(), appointment_json(request, answer));
                    }
                    Value::Object(entry)
                })
                .collect();
            out.insert("merged".to_owned(), Value::Array(merged));
        }
        Value::Object(out)
    }
}

fn appointment_json(request: &AppointmentRequest, answer: &AppointmentAnswer) -> Value {
    let mut out = Map::new();
    put(&mut out, "appointment_id", Some(&answer.id));
    put(&mut out, "type", Some(&request.kind));
    put(
        &mut out,
        "start",
        request.start.as_ref().map(|(s, _)| s.as_str()),
    );
    put(
        &mut out,
        "duration_minutes",
        request.duration.as_ref().map(|(s, _)| s.as_str()),
    );
    put(&mut out, "notes", request.notes.as_deref());
    put(&mut out, "status", Some(answer.status.as_str()));
    if let Some(start) = answer.start {
        put(&mut out, "booked_start", Some(&start.to_string()));
    }
    if answer.status == AppointmentStatus::Alternatives {
        let slots = answer.alternatives.iter().map(|t| json!(t.to_string()));
        out.insert("alternatives".to_owned(), Value::Array(slots.collect()));
    }
    Value::Object(out)
}

/// Inserts `key` when `value` is present.
fn put(out: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        out.insert(key.to_owned(), Value::String(value.to_owned()));
    }
}

// === The lead ===

/// A validated `SubmitLead/Lead`, every text exactly as received.
#[derive(Debug)]
struct Lead {
    external_ref: String,
    source: String,
    source_url: Option<String>,
    agent_card_url: Option<String>,
    submitted_at: Option<String>,
    customer: Customer,
    consent: Consent,
    vehicle: Option<Group>,
    trade_in: Option<Group>,
    comments: Option<String>,
    appointment: Option<AppointmentRequest>,
}

#[derive(Debug)]
struct Customer {
    first_name: String,
    last_name: String,
    email: Option<String>,
    phone: Option<String>,
    preferred_contact: Option<String>,
    address: Option<Group>,
}

#[derive(Debug)]
struct Consent {
    granted_at: String,
    expires_at: Option<String>,
    channels: Vec<String>,
    text: String,
}

#[derive(Debug)]
struct AppointmentRequest {
    kind: String,
    start: Option<(String, Timestamp)>,
    duration: Option<(String, u32)>,
    notes: Option<String>,
}

/// Optional text fields of one element, present ones only, in contract order.
#[derive(Debug)]
struct Group(Vec<(&'static str, String)>);

const ADDRESS: [(&str, &str); 6] = [
    ("Line1", "line1"),
    ("Line2", "line2"),
    ("City", "city"),
    ("State", "state"),
    ("Zip", "zip"),
    ("Country", "country"),
];
const VEHICLE: [(&str, &str); 7] = [
    ("Vin", "vin"),
    ("Stock", "stock"),
    ("Year", "year"),
    ("Make", "make"),
    ("Model", "model"),
    ("Trim", "trim"),
    ("Condition", "condition"),
];
const TRADE_IN: [(&str, &str); 7] = [
    ("Vin", "vin"),
    ("Year", "year"),
    ("Make", "make"),
    ("Model", "model"),
    ("Trim", "trim"),
    ("Mileage", "mileage"),
    ("Condition", "condition"),
];
const CHANNELS: [&str; 3] = ["email", "phone", "sms"];
const APPOINTMENT_TYPES: [&str; 4] = ["sales", "service", "test_drive", "trade_in"];

impl Group {
    /// `None` when `el` is absent or holds none of `fields`.
    fn read(el: Option<&Element>, fields: &[(&str, &'static str)]) -> Option<Group> {
        let el = el?;
        let present: Vec<(&'static str, String)> = fields
            .iter()
            .filter_map(|(name, key)| el.field(name).map(|v| (*key, v.to_owned())))
            .collect();
        (!present.is_empty()).then_some(Group(present))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Checks that `key`, when present, is `min..=max` ASCII digits.
    fn digits(&self, key: &str, min: usize, max: usize, path: &str) -> Result<(), String> {
        match self.get(key).map(str::trim) {
            Some(v)
                if !(min..=max).contains(&v.len()) || !v.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Err(format!("{path} is not a number of {min} to {max} digits"))
            }
            Some(_) | None => Ok(()),
        }
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (key, value) in &self.0 {
            put(&mut out, key, Some(value));
        }
        Value::Object(out)
    }
}

impl Lead {
    /// Validates `SubmitLead/Lead`; the error names the offending field, never its value.
    fn parse(op: &Element) -> Result<Lead, String> {
        let lead = op
            .child("Lead")
            .filter(|l| l.has_content())
            .ok_or("Lead is required")?;
        let external_ref = required(lead, "", "ExternalRef")?;
        let source = required(lead, "", "Source")?;
        let submitted_at = optional(lead, "SubmittedAt");
        timestamp(submitted_at.as_deref(), "SubmittedAt")?;
        let customer = Customer::parse(lead.child("Customer"))?;
        let consent = Consent::parse(lead.child("Consent"))?;
        let vehicle = Group::read(lead.child("Vehicle"), &VEHICLE);
        if let Some(v) = &vehicle {
            v.digits("year", 4, 4, "Vehicle/Year")?;
        }
        let trade_in = Group::read(lead.child("TradeIn"), &TRADE_IN);
        if let Some(t) = &trade_in {
            t.digits("year", 4, 4, "TradeIn/Year")?;
            t.digits("mileage", 1, 9, "TradeIn/Mileage")?;
        }
        let appointment = lead
            .child("Appointment")
            .filter(|a| a.has_content())
            .map(AppointmentRequest::parse)
            .transpose()?;
        Ok(Lead {
            external_ref,
            source,
            source_url: optional(lead, "SourceUrl"),
            agent_card_url: optional(lead, "AgentCardUrl"),
            submitted_at,
            customer,
            consent,
            vehicle,
            trade_in,
            comments: optional(lead, "Comments"),
            appointment,
        })
    }
}

impl Customer {
    fn parse(el: Option<&Element>) -> Result<Customer, String> {
        let empty = Element::default();
        let el = el.unwrap_or(&empty);
        let customer = Customer {
            first_name: required(el, "Customer/", "FirstName")?,
            last_name: required(el, "Customer/", "LastName")?,
            email: optional(el, "Email"),
            phone: optional(el, "Phone"),
            preferred_contact: optional(el, "PreferredContact"),
            address: Group::read(el.child("Address"), &ADDRESS),
        };
        if customer.email.is_none() && customer.phone.is_none() {
            return Err("Customer/Email or Customer/Phone is required".to_owned());
        }
        Ok(customer)
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        put(&mut out, "first_name", Some(&self.first_name));
        put(&mut out, "last_name", Some(&self.last_name));
        put(&mut out, "email", self.email.as_deref());
        put(&mut out, "phone", self.phone.as_deref());
        put(
            &mut out,
            "preferred_contact",
            self.preferred_contact.as_deref(),
        );
        if let Some(address) = &self.address {
            out.insert("address".to_owned(), address.to_json());
        }
        Value::Object(out)
    }
}

impl Consent {
    fn parse(el: Option<&Element>) -> Result<Consent, String> {
        let empty = Element::default();
        let el = el.unwrap_or(&empty);
        let granted_at = required(el, "Consent/", "GrantedAt")?;
        timestamp(Some(&granted_at), "Consent/GrantedAt")?;
        let expires_at = optional(el, "ExpiresAt");
        timestamp(expires_at.as_deref(), "Consent/ExpiresAt")?;
        let channels: Vec<String> = el
            .child("Channels")
            .map(|c| {
                c.children_named("Channel")
                    .filter_map(Element::value)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if channels.is_empty() {
            return Err("Consent/Channels/Channel is required".to_owned());
        }
        if !channels.iter().all(|c| CHANNELS.contains(&c.trim())) {
            return Err("Consent/Channels/Channel must be email, phone or sms".to_owned());
        }
        Ok(Consent {
            granted_at,
            expires_at,
            channels,
            text: required(el, "Consent/", "Text")?,
        })
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        put(&mut out, "granted_at", Some(&self.granted_at));
        put(&mut out, "expires_at", self.expires_at.as_deref());
        out.insert("channels".to_owned(), json!(self.channels));
        put(&mut out, "text", Some(&self.text));
        Value::Object(out)
    }
}

impl AppointmentRequest {
    fn parse(el: &Element) -> Result<AppointmentRequest, String> {
        let kind = required(el, "Appointment/", "Type")?;
        if !APPOINTMENT_TYPES.contains(&kind.trim()) {
            return Err(
                "Appointment/Type must be sales, service, test_drive or trade_in".to_owned(),
            );
        }
        let start = optional(el, "Start")
            .map(|s| match soap::rfc3339(s.trim()) {
                Some(t) => Ok((s, t)),
                None => Err("Appointment/Start is not an RFC 3339 date-time".to_owned()),
            })
            .transpose()?;
        let duration = optional(el, "DurationMinutes")
            .map(|s| {
                let digits = s.trim();
                match digits.parse::<u32>() {
                    Ok(n)
                        if n > 0
                            && digits.len() <= 9
                            && digits.bytes().all(|b| b.is_ascii_digit()) =>
                    {
                        Ok((s, n))
                    }
                    Ok(_) | Err(_) => {
                        Err("Appointment/DurationMinutes is not a positive whole number".to_owned())
                    }
                }
            })
            .transpose()?;
        Ok(AppointmentRequest {
            kind,
            start,
            duration,
            notes: optional(el, "Notes"),
        })
    }
}

fn optional(el: &Element, name: &str) -> Option<String> {
    el.field(name).map(str::to_owned)
}

fn required(el: &Element, path: &str, name: &str) -> Result<String, String> {
    optional(el, name).ok_or_else(|| format!("{path}{name} is required"))
}

fn timestamp(value: Option<&str>, path: &str) -> Result<(), String> {
    match value {
        Some(v) if soap::rfc3339(v.trim()).is_none() => {
            Err(format!("{path} is not an RFC 3339 date-time"))
        }
        Some(_) | None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use http::{HeaderMap, Method};
    use jiff::ToSpan;
    use jiff::civil::Time;

    use super::*;
    use crate::sim::Mode;

    /// A CRM on a clock the test moves.
    struct Harness {
        crm: Crm,
        now: Arc<Mutex<Timestamp>>,
    }

    impl Harness {
        fn new() -> Harness {
            let now = Arc::new(Mutex::new(Timestamp::now()));
            let clock = Arc::clone(&now);
            Harness {
                crm: Crm::with_clock(Arc::new(move || *lock(&clock))),
                now,
            }
        }

        fn now(&self) -> Timestamp {
            *lock(&self.now)
        }

        fn advance(&self, by: SignedDuration) {
            let mut now = lock(&self.now);
            *now = now.checked_add(by).expect("in range");
        }

        /// Posts `body` with the right headers.
        fn call(&self, body: &str) -> (StatusCode, String) {
            self.call_with(body, "text/xml; charset=utf-8", Some(SOAP_ACTION))
        }

        fn call_with(
            &self,
            body: &str,
            content_type: &str,
            action: Option<&str>,
        ) -> (StatusCode, String) {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", content_type.parse().expect("header"));
            if let Some(action) = action {
                headers.insert("soapaction", action.parse().expect("header"));
            }
            let req = SimRequest {
                method: Method::POST,
                path: PATH.to_owned(),
                raw_query: String::new(),
                query: Vec::new(),
                headers,
                body: Bytes::from(body.to_owned()),
            };
            into_parts(self.crm.handle(&req))
        }

        /// A signed `SubmitLead` of `lead` (the inner XML of `Lead`).
        fn submit(&self, lead: &str) -> (StatusCode, String) {
            self.call(&envelope_with(&security(self.now(), PASSWORD), lead))
        }

        /// A signed `SubmitLead` that must succeed; its `SubmitLeadResult`.
        fn ok(&self, lead: &str) -> Element {
            let (status, body) = self.submit(lead);
            assert_eq!(status, StatusCode::OK, "{body}");
            result(&body)
        }

        fn fixtures(&self) -> Value {
            self.crm.fixtures()
        }
    }

    /// `Full` bodies are ready at once: poll once without a runtime.
    fn into_parts(response: SimResponse) -> (StatusCode, String) {
        use http_body_util::BodyExt as _;
        let status = response.status();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut collect = std::pin::pin!(response.into_body().collect());
        match collect.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(c)) => (
                status,
                String::from_utf8(c.to_bytes().to_vec()).expect("utf-8"),
            ),
            std::task::Poll::Ready(Err(_)) | std::task::Poll::Pending => panic!("body not ready"),
        }
    }

    fn fresh_nonce() -> Vec<u8> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("nonce-{n:010}").into_bytes()
    }

    fn token(username: &str, password: &str, kind: &str, nonce: &[u8], created: &str) -> String {
        use base64::Engine as _;
        let nonce_b64 = base64::engine::general_purpose::STANDARD.encode(nonce);
        format!(
            "<wsse:Security soap:mustUnderstand=\"1\" \
               xmlns:wsse=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd\" \
               xmlns:wsu=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd\">\
             <wsse:UsernameToken><wsse:Username>{username}</wsse:Username>\
             <wsse:Password Type=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#{kind}\">{password}</wsse:Password>\
             <wsse:Nonce EncodingType=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary\">{nonce_b64}</wsse:Nonce>\
             <wsu:Created>{created}</wsu:Created></wsse:UsernameToken></wsse:Security>"
        )
    }

    /// A valid digest token made at `created` with `secret`.
    fn security(created: Timestamp, secret: &str) -> String {
        let nonce = fresh_nonce();
        let created = created.to_string();
        let digest = password_digest(&nonce, &created, secret);
        token(USERNAME, &digest, "PasswordDigest", &nonce, &created)
    }

    fn envelope_with(security: &str, lead: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">\
             <soap:Header>{security}</soap:Header><soap:Body>\
             <crm:SubmitLead xmlns:crm=\"urn:demo-crm:leads\"><crm:Lead>{lead}</crm:Lead></crm:SubmitLead>\
             </soap:Body></soap:Envelope>"
        )
    }

    /// A minimal valid lead; `extra` is appended inside `Lead`.
    fn lead(external_ref: &str, email: &str, extra: &str) -> String {
        format!(
            "<crm:ExternalRef>{external_ref}</crm:ExternalRef><crm:Source>aap-gateway</crm:Source>\
             <crm:Customer><crm:FirstName>Ana</crm:FirstName><crm:LastName>Ruiz</crm:LastName>\
             <crm:Email>{email}</crm:Email></crm:Customer>\
             <crm:Consent><crm:GrantedAt>2026-01-01T00:00:00Z</crm:GrantedAt>\
             <crm:Channels><crm:Channel>email</crm:Channel></crm:Channels>\
             <crm:Text>I agree to be contacted.</crm:Text></crm:Consent>{extra}"
        )
    }

    fn appointment(start: Option<Timestamp>, extra: &str) -> String {
        let start = start
            .map(|t| format!("<crm:Start>{t}</crm:Start>"))
            .unwrap_or_default();
        format!("<crm:Appointment><crm:Type>test_drive</crm:Type>{start}{extra}</crm:Appointment>")
    }

    /// The `SubmitLeadResult` of a 200 answer.
    fn result(body: &str) -> Element {
        let root = soap::parse(body.as_bytes()).expect("well-formed");
        assert!(root.is(SOAP11_NS, "Envelope"), "{body}");
        let body = root
            .children
            .into_iter()
            .find(|c| c.is(SOAP11_NS, "Body"))
            .expect("body");
        let response = body.children.into_iter().next().expect("response");
        assert!(response.is(LEADS_NS, "SubmitLeadResponse"));
        let result = response.children.into_iter().next().expect("result");
        assert!(result.is(LEADS_NS, "SubmitLeadResult"));
        result
    }

    fn text<'a>(el: &'a Element, path: &str) -> Option<&'a str> {
        let mut at = el;
        for name in path.split('/') {
            at = at.child(name)?;
        }
        Some(at.text.as_str())
    }

    fn slots(el: &Element) -> Vec<String> {
        el.child("Appointment")
            .and_then(|a| a.child("Alternatives"))
            .map(|a| a.children_named("Slot").map(|s| s.text.clone()).collect())
            .unwrap_or_default()
    }

    /// `(faultcode, faultstring)` of a fault answer.
    fn fault_of(status: StatusCode, body: &str) -> (String, String) {
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        let root = soap::parse(body.as_bytes()).expect("well-formed");
        let envelope = soap::open_envelope(&root, SOAP11_NS).expect("envelope");
        let fault = envelope.body.child("Fault").expect("fault");
        assert!(fault.is(SOAP11_NS, "Fault"));
        (
            fault.field("faultcode").expect("code").to_owned(),
            fault.field("faultstring").expect("string").to_owned(),
        )
    }

    fn auth_failure(h: &Harness, security: &str) -> String {
        let (status, body) = h.call(&envelope_with(security, &lead("R-auth", "a@x.test", "")));
        let (code, message) = fault_of(status, &body);
        assert_eq!(code, "wsse:FailedAuthentication");
        assert!(body.contains(&format!("xmlns:wsse=\"{}\"", soap::WSSE_NS)));
        assert!(!body.contains(PASSWORD), "no secrets in faults");
        message
    }

    /// A valid slot: `days` (or more, skipping Sundays) after today in Los Angeles, at h:m.
    fn slot(now: Timestamp, days: i64, hour: i8, minute: i8) -> Timestamp {
        let tz = TimeZone::get(TIME_ZONE).expect("tz");
        let mut date = now.to_zoned(tz.clone()).date() + days.days();
        if date.weekday() == Weekday::Sunday {
            date += 1.day();
        }
        date.to_datetime(Time::new(hour, minute, 0, 0).expect("time"))
            .to_zoned(tz)
            .expect("zoned")
            .timestamp()
    }

    #[test]
    fn digest_auth_accepted() {
        let h = Harness::new();
        let r = h.ok(&lead("R-1", "ana@example.test", ""));
        assert_eq!(text(&r, "LeadId"), Some("L-000001"));
        assert_eq!(text(&r, "Outcome"), Some("Created"));
        assert!(r.child("Reason").is_none() && r.child("Appointment").is_none());
        let f = h.fixtures();
        assert_eq!(f["submissions"], 1);
        assert_eq!(f["username"], USERNAME);
        assert_eq!(f["leads"][0]["lead_id"], "L-000001");
        assert_eq!(f["leads"][0]["external_ref"], "R-1");
        assert_eq!(f["leads"][0]["outcome"], "Created");
        // Any prefix works, and a default namespace too.
        let body = envelope_with(&security(h.now(), PASSWORD), "")
            .replace("wsse:", "s:")
            .replace("xmlns:wsse", "xmlns:s")
            .replace(
                "<crm:SubmitLead xmlns:crm=\"urn:demo-crm:leads\"><crm:Lead></crm:Lead></crm:SubmitLead>",
                &format!(
                    "<SubmitLead xmlns=\"urn:demo-crm:leads\"><Lead>{}</Lead></SubmitLead>",
                    lead("R-2", "bo@example.test", "").replace("crm:", "")
                ),
            );
        let (status, answer) = h.call(&body);
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(text(&result(&answer), "LeadId"), Some("L-000002"));
    }

    #[test]
    fn wrong_password_refused() {
        let h = Harness::new();
        let message = auth_failure(&h, &security(h.now(), "not-the-secret"));
        assert_eq!(message, "authentication failed: invalid password digest");
        let nonce = fresh_nonce();
        let created = h.now().to_string();
        let digest = password_digest(&nonce, &created, PASSWORD);
        let other_user = token("someone", &digest, "PasswordDigest", &nonce, &created);
        assert_eq!(
            auth_failure(&h, &other_user),
            "authentication failed: unknown username"
        );
        assert_eq!(
            auth_failure(&h, ""),
            "authentication failed: missing wsse:Security header"
        );
        assert_eq!(
            auth_failure(
                &h,
                &format!("<wsse:Security xmlns:wsse=\"{}\"/>", soap::WSSE_NS)
            ),
            "authentication failed: missing UsernameToken"
        );
        let (status, body) = h.call(
            &envelope_with("", &lead("R-1", "a@x.test", ""))
                .replace("<soap:Header></soap:Header>", ""),
        );
        assert_eq!(
            fault_of(status, &body).1,
            "authentication failed: missing wsse:Security header"
        );
        assert_eq!(h.fixtures()["submissions"], 0);
    }

    #[test]
    fn text_password_refused() {
        let h = Harness::new();
        let nonce = fresh_nonce();
        let text = token(
            USERNAME,
            PASSWORD,
            "PasswordText",
            &nonce,
            &h.now().to_string(),
        );
        assert_eq!(
            auth_failure(&h, &text),
            "authentication failed: password digest required"
        );
        let untyped = text.replace(
            " Type=\"http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText\"",
            "",
        );
        assert_eq!(
            auth_failure(&h, &untyped),
            "authentication failed: password digest required"
        );
    }

    #[test]
    fn stale_created_refused() {
        let h = Harness::new();
        for offset in [-6, 6] {
            let created = h
                .now()
                .checked_add(SignedDuration::from_mins(offset))
                .expect("t");
            assert_eq!(
                auth_failure(&h, &security(created, PASSWORD)),
                "authentication failed: Created is outside the 5-minute window",
                "{offset} min"
            );
        }
        let created = h
            .now()
            .checked_add(SignedDuration::from_mins(-4))
            .expect("t");
        h.call(&envelope_with(
            &security(created, PASSWORD),
            &lead("R-1", "a@x.test", ""),
        ));
        assert_eq!(h.fixtures()["submissions"], 1, "4 minutes is fine");
        let nonce = fresh_nonce();
        let bad = token(USERNAME, "x", "PasswordDigest", &nonce, "yesterday");
        assert_eq!(
            auth_failure(&h, &bad),
            "authentication failed: Created is not an RFC 3339 timestamp"
        );
    }

    #[test]
    fn replayed_nonce_refused() {
        let h = Harness::new();
        let nonce = fresh_nonce();
        let created = h.now().to_string();
        let digest = password_digest(&nonce, &created, PASSWORD);
        let security = token(USERNAME, &digest, "PasswordDigest", &nonce, &created);
        let (status, body) = h.call(&envelope_with(&security, &lead("R-1", "a@x.test", "")));
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            auth_failure(&h, &security),
            "authentication failed: nonce already used"
        );
        // Eleven minutes later the nonce is forgotten; a fresh Created makes it valid again.
        h.advance(SignedDuration::from_mins(11));
        let created = h.now().to_string();
        let digest = password_digest(&nonce, &created, PASSWORD);
        let again = token(USERNAME, &digest, "PasswordDigest", &nonce, &created);
        let (status, body) = h.call(&envelope_with(&again, &lead("R-2", "b@x.test", "")));
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    #[test]
    fn outcome_existing_replays_the_first_answer() {
        let h = Harness::new();
        let start = slot(h.now(), 3, 10, 0);
        let first = h.ok(&lead(
            "R-1",
            "ana@example.test",
            &appointment(Some(start), ""),
        ));
        assert_eq!(text(&first, "Appointment/Status"), Some("Booked"));
        let again = h.ok(&lead(
            "R-1",
            "ana@example.test",
            &appointment(Some(start), ""),
        ));
        assert_eq!(text(&again, "Outcome"), Some("Existing"));
        assert_eq!(text(&again, "LeadId"), text(&first, "LeadId"));
        assert_eq!(
            text(&again, "Appointment/AppointmentId"),
            Some("A-000001"),
            "same appointment, no new id"
        );
        assert_eq!(text(&again, "Appointment/Status"), Some("Booked"));
        assert_eq!(
            text(&again, "Appointment/Start"),
            Some(start.to_string().as_str())
        );
        let f = h.fixtures();
        assert_eq!(f["leads"].as_array().expect("leads").len(), 1);
        assert_eq!(f["submissions"], 2);
        assert_eq!(f["booked"], json!([start.to_string()]));
        // A retry under the same ref but different content is still the first answer.
        let different = h.ok(&lead("R-1", "someone@else.test", ""));
        assert_eq!(text(&different, "Outcome"), Some("Existing"));
        assert_eq!(text(&different, "LeadId"), Some("L-000001"));
    }

    #[test]
    fn outcome_merged_within_a_day() {
        let h = Harness::new();
        let vehicle = "<crm:Vehicle><crm:Vin>4T1DAACK5TU512345</crm:Vin></crm:Vehicle>";
        let first = h.ok(&lead("R-1", "Ana@Example.test", vehicle));
        assert_eq!(text(&first, "Outcome"), Some("Created"));
        let merged = h.ok(&lead(
            "R-2",
            " ana@example.TEST ",
            &vehicle.replace("4T1DAACK5TU512345", "4t1daack5tu512345"),
        ));
        assert_eq!(text(&merged, "Outcome"), Some("Merged"));
        assert_eq!(text(&merged, "LeadId"), Some("L-000001"));
        // Another vehicle, or none, is another lead.
        let other = h.ok(&lead("R-3", "ana@example.test", ""));
        assert_eq!(text(&other, "Outcome"), Some("Created"));
        assert_eq!(text(&other, "LeadId"), Some("L-000002"));
        // Same phone, no vehicle on both sides: merged into R-3's lead.
        let by_phone = lead("R-4", "other@example.test", "").replace(
            "<crm:Email>other@example.test</crm:Email>",
            "<crm:Phone>+1 415 555 0100</crm:Phone>",
        );
        let phone_first = h.ok(&by_phone);
        assert_eq!(text(&phone_first, "Outcome"), Some("Created"));
        let phone_again = h.ok(&by_phone.replace("R-4", "R-5"));
        assert_eq!(text(&phone_again, "Outcome"), Some("Merged"));
        assert_eq!(text(&phone_again, "LeadId"), text(&phone_first, "LeadId"));
        // The merged submission's retry answers like the merge did.
        let retry = h.ok(&lead("R-2", "ana@example.test", vehicle));
        assert_eq!(text(&retry, "Outcome"), Some("Existing"));
        assert_eq!(text(&retry, "LeadId"), Some("L-000001"));
        let f = h.fixtures();
        assert_eq!(f["leads"].as_array().expect("leads").len(), 3);
        assert_eq!(f["leads"][0]["merged"], json!([{ "external_ref": "R-2" }]));
        // After 24 hours the same customer and vehicle is a new lead.
        h.advance(SignedDuration::from_hours(25));
        let later = h.ok(&lead("R-6", "ana@example.test", vehicle));
        assert_eq!(text(&later, "Outcome"), Some("Created"));
    }

    #[test]
    fn outcome_rejected_outside_the_region() {
        let h = Harness::new();
        let address = |state: &str| {
            lead("R-x", "ana@example.test", "").replace(
                "</crm:Customer>",
                &format!(
                    "<crm:Address><crm:City>Austin</crm:City><crm:State>{state}</crm:State></crm:Address></crm:Customer>"
                ),
            )
        };
        let rejected = h.ok(&address("TX").replace("R-x", "R-1").replace(
            "</crm:Consent>",
            &format!(
                "</crm:Consent>{}",
                appointment(Some(slot(h.now(), 2, 11, 0)), "")
            ),
        ));
        assert_eq!(text(&rejected, "Outcome"), Some("Rejected"));
        assert_eq!(text(&rejected, "Reason"), Some(REGION_NOT_SERVED));
        assert_eq!(text(&rejected, "LeadId"), Some("L-000001"));
        assert_eq!(text(&rejected, "Appointment/Status"), Some("Declined"));
        let served = h.ok(&address(" ca ").replace("R-x", "R-2"));
        assert_eq!(text(&served, "Outcome"), Some("Created"));
        let retry = h.ok(&address("TX").replace("R-x", "R-1"));
        assert_eq!(text(&retry, "Outcome"), Some("Existing"));
        assert_eq!(text(&retry, "Reason"), Some(REGION_NOT_SERVED));
        let f = h.fixtures();
        assert_eq!(f["leads"][0]["outcome"], "Rejected");
        assert_eq!(f["leads"][0]["reason"], REGION_NOT_SERVED);
        assert_eq!(
            f["leads"][0]["customer"]["address"],
            json!({"city": "Austin", "state": "TX"})
        );
        assert_eq!(f["booked"], json!([]));
    }

    #[test]
    fn appointment_statuses() {
        let h = Harness::new();
        let pending = h.ok(&lead("R-1", "a@x.test", &appointment(None, "")));
        assert_eq!(text(&pending, "Appointment/Status"), Some("Pending"));
        assert_eq!(
            text(&pending, "Appointment/AppointmentId"),
            Some("A-000001")
        );
        assert!(
            pending
                .child("Appointment")
                .and_then(|a| a.child("Start"))
                .is_none()
        );

        let start = slot(h.now(), 2, 9, 30);
        let long = h.ok(&lead(
            "R-2",
            "b@x.test",
            &appointment(
                Some(start),
                "<crm:DurationMinutes>241</crm:DurationMinutes>",
            ),
        ));
        assert_eq!(text(&long, "Appointment/Status"), Some("Declined"));

        // Written with a local offset, answered in UTC.
        let local = start.to_zoned(TimeZone::get(TIME_ZONE).expect("tz"));
        let booked = h.ok(&lead(
            "R-3",
            "c@x.test",
            &format!(
                "<crm:Appointment><crm:Type>sales</crm:Type><crm:Start>{}</crm:Start>\
                 <crm:DurationMinutes>240</crm:DurationMinutes><crm:Notes>n</crm:Notes></crm:Appointment>",
                local.strftime("%Y-%m-%dT%H:%M:%S%:z")
            ),
        ));
        assert_eq!(text(&booked, "Appointment/Status"), Some("Booked"));
        assert_eq!(text(&booked, "Appointment/AppointmentId"), Some("A-000003"));
        let utc = start.to_string();
        assert!(utc.ends_with('Z'));
        assert_eq!(text(&booked, "Appointment/Start"), Some(utc.as_str()));

        // Taken: the next two free slots after it.
        let next = start.checked_add(SignedDuration::from_mins(30)).expect("t");
        let after = start.checked_add(SignedDuration::from_mins(60)).expect("t");
        let taken = h.ok(&lead("R-4", "d@x.test", &appointment(Some(start), "")));
        assert_eq!(text(&taken, "Appointment/Status"), Some("Alternatives"));
        assert_eq!(slots(&taken), [next.to_string(), after.to_string()]);
        // Book the first alternative; a new request at the start skips it.
        h.ok(&lead("R-5", "e@x.test", &appointment(Some(next), "")));
        let skipping = h.ok(&lead("R-6", "f@x.test", &appointment(Some(start), "")));
        let later = start.checked_add(SignedDuration::from_mins(90)).expect("t");
        assert_eq!(slots(&skipping), [after.to_string(), later.to_string()]);

        // Off the half hour, before opening, after the last start, on a Sunday.
        let quarter = slot(h.now(), 4, 10, 15);
        let off = h.ok(&lead("R-7", "g@x.test", &appointment(Some(quarter), "")));
        assert_eq!(
            slots(&off),
            [
                slot(h.now(), 4, 10, 30).to_string(),
                slot(h.now(), 4, 11, 0).to_string()
            ]
        );
        let early = h.ok(&lead(
            "R-8",
            "h@x.test",
            &appointment(Some(slot(h.now(), 4, 8, 0)), ""),
        ));
        assert_eq!(text(&early, "Appointment/Status"), Some("Alternatives"));
        assert_eq!(slots(&early)[0], slot(h.now(), 4, 9, 0).to_string());
        let last = h.ok(&lead(
            "R-9",
            "i@x.test",
            &appointment(Some(slot(h.now(), 5, 17, 30)), ""),
        ));
        assert_eq!(text(&last, "Appointment/Status"), Some("Booked"));
        let tz = TimeZone::get(TIME_ZONE).expect("tz");
        let mut sunday = h.now().to_zoned(tz.clone()).date() + 2.days();
        while sunday.weekday() != Weekday::Sunday {
            sunday += 1.day();
        }
        let sunday_ten = sunday
            .to_datetime(Time::new(10, 0, 0, 0).expect("time"))
            .to_zoned(tz.clone())
            .expect("zoned")
            .timestamp();
        let closed = h.ok(&lead(
            "R-10",
            "j@x.test",
            &appointment(Some(sunday_ten), ""),
        ));
        let monday_nine = (sunday + 1.day())
            .to_datetime(Time::new(9, 0, 0, 0).expect("time"))
            .to_zoned(tz)
            .expect("zoned")
            .timestamp();
        assert_eq!(slots(&closed)[0], monday_nine.to_string());

        let f = h.fixtures();
        let appt = &f["leads"][2]["appointment"];
        assert_eq!(appt["appointment_id"], "A-000003");
        assert_eq!(appt["type"], "sales");
        assert_eq!(
            appt["start"],
            local.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
        );
        assert_eq!(appt["duration_minutes"], "240");
        assert_eq!(appt["notes"], "n");
        assert_eq!(appt["status"], "Booked");
        assert_eq!(appt["booked_start"], utc);
        assert_eq!(
            f["leads"][3]["appointment"]["alternatives"],
            json!([next.to_string(), after.to_string()])
        );
        assert_eq!(
            f["leads"][0]["appointment"],
            json!({"appointment_id": "A-000001", "type": "test_drive", "status": "Pending"})
        );
        assert_eq!(f["booked"].as_array().expect("booked").len(), 3);
    }

    #[test]
    fn appointment_in_past_is_a_business_error() {
        let h = Harness::new();
        let past = h
            .now()
            .checked_add(SignedDuration::from_mins(-1))
            .expect("t");
        let (status, body) = h.submit(&lead("R-1", "a@x.test", &appointment(Some(past), "")));
        assert_eq!(status, StatusCode::OK);
        let r = result(&body);
        assert_eq!(text(&r, "Error/Code"), Some("APPOINTMENT_IN_PAST"));
        assert!(r.child("LeadId").is_none());
        let f = h.fixtures();
        assert_eq!(f["leads"], json!([]));
        assert_eq!(f["submissions"], 1);
        // Not remembered: the same ref with a future start is a new lead.
        let future = slot(h.now(), 2, 12, 0);
        let r = h.ok(&lead("R-1", "a@x.test", &appointment(Some(future), "")));
        assert_eq!(text(&r, "Outcome"), Some("Created"));
        assert_eq!(text(&r, "Appointment/AppointmentId"), Some("A-000001"));
    }

    #[test]
    fn special_characters_round_trip() {
        let h = Harness::new();
        let nasty = "<&\"]]> Ñandú — 東京 🚗 'x'";
        let escaped = "&lt;&amp;&quot;]]&gt; Ñandú — &#26481;&#x4eac; 🚗 &apos;x&apos;";
        let full = format!(
            "<crm:ExternalRef>R-&amp;1</crm:ExternalRef><crm:Source>{escaped}</crm:Source>\
             <crm:SourceUrl>https://a.test/?a=1&amp;b=2</crm:SourceUrl>\
             <crm:AgentCardUrl>https://agent.test/.well-known/agent-card.json</crm:AgentCardUrl>\
             <crm:SubmittedAt>2026-01-02T03:04:05.678+01:00</crm:SubmittedAt>\
             <crm:Customer><crm:FirstName><![CDATA[{nasty_cdata}]]></crm:FirstName>\
             <crm:LastName>{escaped}</crm:LastName><crm:Email>ñ@example.test</crm:Email>\
             <crm:Phone>+1 (415) 555-0100</crm:Phone><crm:PreferredContact>sms</crm:PreferredContact>\
             <crm:Address><crm:Line1>{escaped}</crm:Line1><crm:Line2></crm:Line2><crm:City>San José</crm:City>\
             <crm:State>CA</crm:State><crm:Zip>95113</crm:Zip><crm:Country>US</crm:Country></crm:Address></crm:Customer>\
             <crm:Consent><crm:GrantedAt>2026-01-01T00:00:00Z</crm:GrantedAt><crm:ExpiresAt>2027-01-01T00:00:00Z</crm:ExpiresAt>\
             <crm:Channels><crm:Channel>email</crm:Channel><crm:Channel>sms</crm:Channel></crm:Channels>\
             <crm:Text>{escaped}</crm:Text></crm:Consent>\
             <crm:Vehicle><crm:Vin>4T1DAACK5TU512345</crm:Vin><crm:Stock>SFN1</crm:Stock><crm:Year>2026</crm:Year>\
             <crm:Make>Toyota</crm:Make><crm:Model>Camry</crm:Model><crm:Trim>XSE</crm:Trim><crm:Condition>New</crm:Condition></crm:Vehicle>\
             <crm:TradeIn><crm:Vin>1M8GDM9AXKP042788</crm:Vin><crm:Year>2015</crm:Year><crm:Make>Honda</crm:Make>\
             <crm:Model>Civic</crm:Model><crm:Trim>LX</crm:Trim><crm:Mileage>98765</crm:Mileage><crm:Condition>Fair</crm:Condition></crm:TradeIn>\
             <crm:Comments>{escaped}<!-- a comment --> and <![CDATA[<b>more</b>]]></crm:Comments>\
             <crm:Appointment><crm:Type>trade_in</crm:Type><crm:Notes>{escaped}</crm:Notes></crm:Appointment>",
            nasty_cdata = nasty.replace("]]>", "]]]]><![CDATA[>"),
        );
        let r = h.ok(&full);
        assert_eq!(text(&r, "Outcome"), Some("Created"));
        let f = h.fixtures();
        let l = &f["leads"][0];
        assert_eq!(l["external_ref"], "R-&1");
        assert_eq!(l["source"], nasty);
        assert_eq!(l["source_url"], "https://a.test/?a=1&b=2");
        assert_eq!(l["submitted_at"], "2026-01-02T03:04:05.678+01:00");
        assert_eq!(l["customer"]["first_name"], nasty);
        assert_eq!(l["customer"]["last_name"], nasty);
        assert_eq!(l["customer"]["email"], "ñ@example.test");
        assert_eq!(
            l["customer"]["address"],
            json!({"line1": nasty, "city": "San José", "state": "CA", "zip": "95113", "country": "US"})
        );
        assert_eq!(l["consent"]["channels"], json!(["email", "sms"]));
        assert_eq!(l["consent"]["text"], nasty);
        assert_eq!(l["consent"]["expires_at"], "2027-01-01T00:00:00Z");
        assert_eq!(l["vehicle"]["year"], "2026");
        assert_eq!(l["trade_in"]["mileage"], "98765");
        assert_eq!(l["comments"], format!("{nasty} and <b>more</b>"));
        assert_eq!(l["appointment"]["notes"], nasty);
        assert_eq!(l["appointment"]["status"], "Pending");
        let keys: Vec<&str> = l
            .as_object()
            .expect("lead")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "lead_id",
                "external_ref",
                "outcome",
                "source",
                "source_url",
                "agent_card_url",
                "submitted_at",
                "customer",
                "consent",
                "vehicle",
                "trade_in",
                "comments",
                "appointment"
            ]
        );
    }

    #[test]
    fn malformed_xml_is_a_client_fault() {
        let h = Harness::new();
        let good = envelope_with(&security(h.now(), PASSWORD), &lead("R-1", "a@x.test", ""));
        for bad in [
            "".to_owned(),
            "not xml".to_owned(),
            good.replace("</soap:Envelope>", ""),
            good.replace("<crm:Source>aap-gateway", "<crm:Source>a & b"),
            good.replace("<crm:Source>aap-gateway", "<crm:Source>&nbsp;"),
            good.replace("crm:Lead>", "x:Lead>"),
            format!("<!DOCTYPE x [<!ENTITY e \"boom\">]>{good}"),
            format!("{good}<extra/>"),
            good.replace("soap:Body", "soap:Corps"),
            "<Other/>".to_owned(),
            format!("{}{}", "<a>".repeat(100), "</a>".repeat(100)),
        ] {
            let (status, body) = h.call(&bad);
            assert_eq!(
                fault_of(status, &body),
                ("soap:Client".to_owned(), "malformed envelope".to_owned()),
                "{bad}"
            );
        }
        let mut latin1 = good.clone().into_bytes();
        latin1.push(0xff);
        let (status, body) = h.call(&String::from_utf8_lossy(&latin1));
        assert_eq!(fault_of(status, &body).1, "malformed envelope");
        assert_eq!(h.fixtures()["submissions"], 0);
    }

    #[test]
    fn missing_fields_are_client_faults() {
        let h = Harness::new();
        let base = lead("R-1", "secret@example.test", "");
        let cases: Vec<(String, &str)> = vec![
            (
                base.replace("<crm:ExternalRef>R-1</crm:ExternalRef>", ""),
                "ExternalRef is required",
            ),
            (
                base.replace("<crm:ExternalRef>R-1", "<crm:ExternalRef>  "),
                "ExternalRef is required",
            ),
            (base.replace("aap-gateway", ""), "Source is required"),
            (
                base.replace("<crm:FirstName>Ana</crm:FirstName>", "<crm:FirstName/>"),
                "Customer/FirstName is required",
            ),
            (base.replace("Ruiz", ""), "Customer/LastName is required"),
            (
                base.replace("<crm:Email>secret@example.test</crm:Email>", ""),
                "Customer/Email or Customer/Phone is required",
            ),
            (
                base.replace("2026-01-01T00:00:00Z", "2026-01-01"),
                "Consent/GrantedAt is not an RFC 3339 date-time",
            ),
            (
                base.replace("<crm:Channel>email</crm:Channel>", ""),
                "Consent/Channels/Channel is required",
            ),
            (
                base.replace("<crm:Channel>email", "<crm:Channel>fax"),
                "Consent/Channels/Channel must be email, phone or sms",
            ),
            (
                base.replace("I agree to be contacted.", ""),
                "Consent/Text is required",
            ),
            (
                lead("R-1", "a@x.test", "")
                    .split("<crm:Consent>")
                    .next()
                    .expect("head")
                    .to_owned(),
                "Consent/GrantedAt is required",
            ),
            (
                format!("{base}<crm:SubmittedAt>now</crm:SubmittedAt>"),
                "SubmittedAt is not an RFC 3339 date-time",
            ),
            (
                format!("{base}<crm:Vehicle><crm:Year>26</crm:Year></crm:Vehicle>"),
                "Vehicle/Year is not a number of 4 to 4 digits",
            ),
            (
                format!("{base}<crm:TradeIn><crm:Mileage>12,345</crm:Mileage></crm:TradeIn>"),
                "TradeIn/Mileage is not a number of 1 to 9 digits",
            ),
            (
                format!("{base}<crm:Appointment><crm:Notes>x</crm:Notes></crm:Appointment>"),
                "Appointment/Type is required",
            ),
            (
                format!("{base}<crm:Appointment><crm:Type>Sales</crm:Type></crm:Appointment>"),
                "Appointment/Type must be sales, service, test_drive or trade_in",
            ),
            (
                format!(
                    "{base}<crm:Appointment><crm:Type>sales</crm:Type><crm:Start>tomorrow 10am</crm:Start></crm:Appointment>"
                ),
                "Appointment/Start is not an RFC 3339 date-time",
            ),
            (
                format!(
                    "{base}<crm:Appointment><crm:Type>sales</crm:Type><crm:DurationMinutes>0</crm:DurationMinutes></crm:Appointment>"
                ),
                "Appointment/DurationMinutes is not a positive whole number",
            ),
            (String::new(), "Lead is required"),
        ];
        for (lead, what) in cases {
            let (status, body) = h.submit(&lead);
            assert_eq!(
                fault_of(status, &body),
                ("soap:Client".to_owned(), format!("invalid lead: {what}")),
            );
            assert!(
                !body.contains("secret@example"),
                "no personal data in faults"
            );
        }
        // Empty optional groups are absent.
        let r = h.ok(&format!(
            "{base}<crm:Vehicle><crm:Vin> </crm:Vin></crm:Vehicle><crm:Appointment/><crm:Comments></crm:Comments>"
        ));
        assert!(r.child("Appointment").is_none());
        let f = h.fixtures();
        let keys: Vec<&str> = f["leads"][0]
            .as_object()
            .expect("lead")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "lead_id",
                "external_ref",
                "outcome",
                "source",
                "customer",
                "consent"
            ]
        );
        assert_eq!(f["submissions"], 1);
    }

    #[test]
    fn envelope_checks() {
        let h = Harness::new();
        let good = envelope_with(&security(h.now(), PASSWORD), &lead("R-1", "a@x.test", ""));
        for action in [
            None,
            Some("urn:demo-crm:leads/SubmitLead"),
            Some("\"urn:demo-crm:leads/Other\""),
        ] {
            let (status, body) = h.call_with(&good, "text/xml", action);
            assert_eq!(
                fault_of(status, &body).1,
                "unknown SOAPAction",
                "{action:?}"
            );
        }
        for content_type in [
            "application/soap+xml; charset=utf-8",
            "text/xml; charset=iso-8859-1",
            "text/plain",
        ] {
            let (status, body) = h.call_with(&good, content_type, Some(SOAP_ACTION));
            assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{content_type}");
            assert!(body.contains("<faultcode>soap:Client</faultcode>"));
        }
        let soap12 = good.replace(SOAP11_NS, "http://www.w3.org/2003/05/soap-envelope");
        let (status, body) = h.call(&soap12);
        assert_eq!(fault_of(status, &body).0, "soap:VersionMismatch");
        let (status, body) = h.call("<Envelope><Body/></Envelope>");
        assert_eq!(
            fault_of(status, &body).0,
            "soap:VersionMismatch",
            "no namespace"
        );
        let other_op = good.replace("crm:SubmitLead", "crm:GetLead");
        let (status, body) = h.call(&other_op);
        assert_eq!(
            fault_of(status, &body).1,
            "unknown operation: Body must hold SubmitLead"
        );
        // A fresh token: the one in `good` was spent by the call above.
        let fresh = envelope_with(&security(h.now(), PASSWORD), &lead("R-1", "a@x.test", ""));
        let other_ns = fresh.replace(
            "xmlns:crm=\"urn:demo-crm:leads\"",
            "xmlns:crm=\"urn:other\"",
        );
        let (status, body) = h.call(&other_ns);
        assert_eq!(fault_of(status, &body).0, "soap:Client");
        let (status, body) = h.call_with("<x/>", "TEXT/XML; Charset=\"UTF-8\"", Some(SOAP_ACTION));
        assert_eq!(
            fault_of(status, &body).1,
            "malformed envelope",
            "content type ok"
        );

        let get = SimRequest {
            method: Method::GET,
            path: "/CRM/leadservice.asmx".to_owned(),
            raw_query: String::new(),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let response = h.crm.handle(&get);
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(response.headers()["allow"], "POST");
        let elsewhere = SimRequest {
            path: "/crm/Other.asmx".to_owned(),
            ..get
        };
        assert_eq!(h.crm.handle(&elsewhere).status(), StatusCode::NOT_FOUND);
        assert_eq!(h.fixtures()["submissions"], 0);
    }

    #[test]
    fn clear_forgets_everything() {
        let h = Harness::new();
        h.ok(&lead(
            "R-1",
            "a@x.test",
            &appointment(Some(slot(h.now(), 2, 10, 0)), ""),
        ));
        h.crm.clear();
        let f = h.fixtures();
        assert_eq!(
            (
                f["leads"].clone(),
                f["submissions"].clone(),
                f["booked"].clone()
            ),
            (json!([]), json!(0), json!([]))
        );
        assert_eq!(
            text(&h.ok(&lead("R-1", "a@x.test", "")), "LeadId"),
            Some("L-000001")
        );
    }

    #[tokio::test]
    async fn serves_over_http() {
        let sim = start_crm().await.expect("start");
        let client = reqwest::Client::new();
        let url = format!("{}{PATH}", sim.base_url());
        let body = || {
            envelope_with(
                &security(Timestamp::now(), PASSWORD),
                &lead("R-http", "h@x.test", ""),
            )
        };
        let post = |body: String| {
            client
                .post(&url)
                .header("Content-Type", "text/xml; charset=utf-8")
                .header("SOAPAction", SOAP_ACTION)
                .body(body)
                .send()
        };
        let r = post(body()).await.expect("send");
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], CONTENT_TYPE);
        let answer = r.text().await.expect("body");
        assert_eq!(text(&result(&answer), "Outcome"), Some("Created"));
        let fixtures: Value =
            crate::sim::get_json(&format!("{}/_sim/fixtures", sim.base_url())).await;
        assert_eq!(fixtures["leads"][0]["external_ref"], "R-http");
        assert_eq!(sim.received()[0]["headers"]["soapaction"], SOAP_ACTION);

        sim.set_mode(Mode::Fail, 0);
        let r = post(body()).await.expect("send");
        assert_eq!(r.status(), 500);
        let (code, message) = fault_of(
            StatusCode::INTERNAL_SERVER_ERROR,
            &r.text().await.expect("body"),
        );
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("soap:Server", "CRM database unavailable")
        );

        sim.set_mode(Mode::Garbage, 0);
        let r = post(body()).await.expect("send");
        assert_eq!(r.status(), 200);
        assert!(soap::parse(&r.bytes().await.expect("body")).is_none());

        sim.set_mode(Mode::Huge, 0);
        let r = post(body()).await.expect("send");
        let bytes = r.bytes().await.expect("body");
        assert!(bytes.len() >= sim::HUGE_BYTES);
        let root = soap::parse(&bytes).expect("well-formed");
        assert!(soap::open_envelope(&root, SOAP11_NS).is_ok());

        sim.set_mode(Mode::Normal, 0);
        let r = post(body()).await.expect("send");
        assert_eq!(
            text(&result(&r.text().await.expect("body")), "Outcome"),
            Some("Existing")
        );
    }

    #[test]
    fn parser_details() {
        let doc = soap::parse(
            b"<?xml version=\"1.0\"?>\n<!-- c --><a:r xmlns:a=\"urn:a\" a:k=\"v&amp;w\" k2='x'>\r\n<b>x&#x41;&#66;<![CDATA[&lt;]]></b><c/></a:r>\n",
        )
        .expect("parse");
        assert!(doc.is("urn:a", "r"));
        assert_eq!(doc.attr("k"), Some("v&w"));
        assert_eq!(doc.attr("k2"), Some("x"));
        assert_eq!(doc.field("b"), Some("xAB&lt;"));
        assert!(
            doc.child("c")
                .is_some_and(|c| c.value().is_none() && c.ns.is_none())
        );
        assert!(soap::parse(b"<a:r/>").is_none(), "undeclared prefix");
        let mt = MediaType::parse("application/soap+xml; charset=utf-8; action=\"urn:x;y\"")
            .expect("mt");
        assert_eq!(mt.essence, "application/soap+xml");
        assert_eq!(mt.param("action"), Some("urn:x;y"));
        assert!(mt.charset_is_utf8());
        assert!(MediaType::parse("text/xml; nonsense").is_none());
        assert_eq!(password_digest(b"abc", "2026-01-01T00:00:00Z", "pw"), {
            use base64::Engine as _;
            use sha1::Digest as _;
            base64::engine::general_purpose::STANDARD
                .encode(sha1::Sha1::digest(b"abc2026-01-01T00:00:00Zpw"))
        });
    }
}
