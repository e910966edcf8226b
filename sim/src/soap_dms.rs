//! The legacy SOAP DMS simulator: the Toyota group's inventory ([`inventory::toyota_group`],
//! the same units as the REST DMS in [`super::dms`]) behind a WCF-style SOAP 1.2 vehicle service
//! that answers one unit at a time, authenticated with a WS-Security UsernameToken.
//!
//! It is what `aap-gateway demo` and the tests put behind the `inventory.vehicle` mapping in SOAP
//! mode. The record is the REST DMS's ([`Vehicle::legacy_json`], documented in [`inventory`]) as
//! elements; the `/_sim/` controls are in [`sim`]; the SOAP plumbing is shared with the CRM
//! ([`super::soap`]).
//!
//! ## `POST /dms/VehicleService.svc` — `GetVehicle`
//!
//! The path is matched case-insensitively (IIS); other paths → 404 `Not Found` (text), other
//! methods → 405 (`Allow: POST`). Faults follow the SOAP 1.2 HTTP binding: `soap:Sender` → 400,
//! `soap:Receiver` and `soap:VersionMismatch` → 500. Checks run in this order, the first failure
//! answers:
//!
//! | Check | Failure |
//! |---|---|
//! | `Content-Type` is `application/soap+xml`, `charset` absent or `utf-8` | 415, `soap:Sender` "unsupported content type: application/soap+xml required" |
//! | Its `action` parameter (quoted or not) is exactly `urn:demo-dms:inventory/GetVehicle` | 400, `soap:Sender` "unknown action" |
//! | Body is well-formed UTF-8 XML (no DTD, ≤ 64 levels deep) whose root is named `Envelope` | 400, `soap:Sender` "malformed envelope" |
//! | `Envelope` is in `http://www.w3.org/2003/05/soap-envelope` (another or no namespace fails) | 500, `soap:VersionMismatch` (with an `Upgrade` header naming SOAP 1.2) |
//! | `Envelope` has a `Body` | 400, `soap:Sender` "malformed envelope" |
//! | WS-Security UsernameToken (below) | 400, `soap:Sender`, Subcode `wsse:FailedAuthentication`, "authentication failed: <reason>" |
//! | First `Body` child is `GetVehicle` in `urn:demo-dms:inventory` | 400, `soap:Sender` "unknown operation: Body must hold GetVehicle" |
//! | `GetVehicle` has a `Vin` or a `StockNumber` | 400, `soap:Sender`, Subcode `dms:InvalidRequest`, "GetVehicle needs Vin or StockNumber" |
//! | A unit matches | 400, `soap:Sender`, Subcode `dms:VehicleNotFound`, "Vehicle not found" |
//!
//! A fault is `<soap:Fault><soap:Code><soap:Value>soap:Sender</soap:Value>[<soap:Subcode>
//! <soap:Value>dms:VehicleNotFound</soap:Value></soap:Subcode>]</soap:Code><soap:Reason>
//! <soap:Text xml:lang="en">…</soap:Text></soap:Reason></soap:Fault>`, the subcode's prefix
//! (`dms` = `urn:demo-dms:inventory`, `wsse` = OASIS WSS 1.0 secext) declared on `soap:Fault`.
//!
//! Security: `soap:Header/Security/UsernameToken` (local names, any prefix), `Username`
//! `demo-dms`; a `Password` of `Type` `…#PasswordText` (or no `Type`) must be `dms-secret`
//! (`Nonce` and `Created` are then ignored); a `…#PasswordDigest` is checked as by the CRM
//! (`Base64(SHA-1(Nonce ‖ Created ‖ "dms-secret"))`, `Created` within ±5 minutes, a nonce
//! refused for 10 minutes after use). The reasons are the CRM's, plus "invalid password".
//!
//! The lookup: `Vin` wins when both are present; both are matched like the REST DMS's
//! `/vehicles/{VIN}` and `/vehicles/by-stock/{StockNumber}` — exact but case-insensitive, after
//! trimming surrounding whitespace. Sold units are answered like any other (`Status` `Sold`).
//!
//! The answer (200, `application/soap+xml; charset=utf-8`, no whitespace between elements):
//!
//! ```xml
//! <soap:Envelope xmlns:soap="http://www.w3.org/2003/05/soap-envelope"><soap:Body>
//!   <GetVehicleResponse xmlns="urn:demo-dms:inventory"><Vehicle>
//!     <VIN>4T1DAACK5TU512345</VIN><StockNumber>SFN10023</StockNumber>…<MSRP/>…
//!     <Photos><Photo>https://…/01.jpg</Photo><Photo>https://…/02.jpg</Photo></Photos>…
//!     <BookValue>$23,000</BookValue>
//!   </Vehicle></GetVehicleResponse>
//! </soap:Body></soap:Envelope>
//! ```
//!
//! One element per key of the legacy record, in its order, text = the string value (escaped);
//! an empty string is an empty element (`<MSRP/>`); `Photos` holds one `Photo` per URL and is
//! `<Photos/>` when there are none.
//!
//! ## `GET /_sim/fixtures`
//!
//! The REST DMS's inventory facts (`total`, `searchable_total`, `sold_vins`, `in_transit_vins`,
//! `pending_vins`, `unpriced_vins`, `ev_vins`, `unknown_vin`, `unknown_stock`,
//! `in_stock_sample`, `counts_by_*`) with `"system": "soap-dms"`, and instead of the REST
//! credentials: `path`, `action`, `username`, `password`.
//!
//! `POST /_sim/reset` also forgets the nonces seen. Misbehaviour: `fail` → 500 `soap:Receiver`
//! "DMS unavailable"; `garbage` → 200 `application/soap+xml`, an envelope cut off mid-record and
//! not UTF-8; `huge` → 200, a well-formed `GetVehicleResponse` of about 8 MiB (`Vehicle`
//! records repeated).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::StatusCode;
use jiff::Timestamp;
use serde_json::{Map, Value};

use super::crm::Clock;
use super::dms::Dms;
use super::inventory::{self, Vehicle};
use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse};
use super::soap::{self, Authenticator, Credentials, EnvelopeError, MediaType, escape};

/// The service's path.
pub const PATH: &str = "/dms/VehicleService.svc";
/// The `action` parameter of the `Content-Type`.
pub const ACTION: &str = "urn:demo-dms:inventory/GetVehicle";
/// The namespace of `GetVehicle`, `GetVehicleResponse` and the `dms:` fault subcodes.
pub const INVENTORY_NS: &str = "urn:demo-dms:inventory";
/// The SOAP 1.2 envelope namespace.
pub const SOAP12_NS: &str = "http://www.w3.org/2003/05/soap-envelope";
/// The only UsernameToken user.
pub const USERNAME: &str = "demo-dms";
/// Its password (as text, or the secret of a digest).
pub const PASSWORD: &str = "dms-secret";

const CONTENT_TYPE: &str = "application/soap+xml; charset=utf-8";

/// Binds `127.0.0.1:0` and serves the SOAP DMS over the Toyota group's inventory.
pub async fn start_soap_dms() -> std::io::Result<SimHandle> {
    sim::start(Arc::new(SoapDms::new(inventory::toyota_group()))).await
}

/// The SOAP DMS over any inventory.
pub struct SoapDms {
    /// The REST DMS over the same units: lookups mirror it and its fixtures are reused.
    rest: Dms,
    clock: Clock,
    auth: Authenticator,
    huge: OnceLock<Bytes>,
}

impl std::fmt::Debug for SoapDms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoapDms")
            .field("vehicles", &self.rest.vehicles().len())
            .finish_non_exhaustive()
    }
}

impl SoapDms {
    /// The service over `vehicles`, on the real clock.
    pub fn new(vehicles: Vec<Vehicle>) -> SoapDms {
        SoapDms::with_clock(vehicles, Arc::new(Timestamp::now))
    }

    /// The service over `vehicles`, on `clock` (only digests look at the time).
    pub fn with_clock(vehicles: Vec<Vehicle>, clock: Clock) -> SoapDms {
        SoapDms {
            rest: Dms::new(vehicles),
            clock,
            auth: Authenticator::new(Credentials {
                username: USERNAME,
                password: PASSWORD,
                accept_text: true,
            }),
            huge: OnceLock::new(),
        }
    }

    pub fn vehicles(&self) -> &[Vehicle] {
        self.rest.vehicles()
    }

    /// Every check in the module doc's order; the SOAP body of the 200 answer.
    fn get_vehicle(&self, req: &SimRequest) -> Result<String, Fault> {
        let media = req
            .header("content-type")
            .and_then(MediaType::parse)
            .filter(|m| m.essence == "application/soap+xml" && m.charset_is_utf8())
            .ok_or(Fault::MediaType)?;
        if media.param("action") != Some(ACTION) {
            return Err(Fault::sender("unknown action"));
        }
        let root = soap::parse(&req.body).ok_or(Fault::sender("malformed envelope"))?;
        let envelope = soap::open_envelope(&root, SOAP12_NS)?;
        self.auth
            .check(envelope.header, (self.clock)())
            .map_err(|reason| Fault::Sender {
                subcode: Some(Subcode::FailedAuthentication),
                reason: Cow::Owned(format!("authentication failed: {reason}")),
            })?;
        let op = envelope
            .body
            .children
            .first()
            .filter(|op| op.is(INVENTORY_NS, "GetVehicle"))
            .ok_or(Fault::sender(
                "unknown operation: Body must hold GetVehicle",
            ))?;
        let vehicles = self.rest.vehicles();
        let found = match (op.field("Vin"), op.field("StockNumber")) {
            (Some(vin), _) => vehicles
                .iter()
                .find(|v| v.vin.eq_ignore_ascii_case(vin.trim())),
            (None, Some(stock)) => vehicles
                .iter()
                .find(|v| v.stock_number.eq_ignore_ascii_case(stock.trim())),
            (None, None) => {
                return Err(Fault::Sender {
                    subcode: Some(Subcode::InvalidRequest),
                    reason: Cow::Borrowed("GetVehicle needs Vin or StockNumber"),
                });
            }
        };
        let vehicle = found.ok_or(Fault::Sender {
            subcode: Some(Subcode::VehicleNotFound),
            reason: Cow::Borrowed("Vehicle not found"),
        })?;
        Ok(envelope_xml(&format!(
            "<GetVehicleResponse xmlns=\"{INVENTORY_NS}\">{}</GetVehicleResponse>",
            vehicle_xml(vehicle)
        )))
    }

    fn huge_body(&self) -> Bytes {
        self.huge
            .get_or_init(|| {
                let records: Vec<String> = self.vehicles().iter().map(vehicle_xml).collect();
                let mut body = String::with_capacity(sim::HUGE_BYTES + 64 * 1024);
                for record in records.iter().cycle() {
                    if body.len() >= sim::HUGE_BYTES {
                        break;
                    }
                    body.push_str(record);
                }
                Bytes::from(envelope_xml(&format!(
                    "<GetVehicleResponse xmlns=\"{INVENTORY_NS}\">{body}</GetVehicleResponse>"
                )))
            })
            .clone()
    }
}

impl SimApp for SoapDms {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        soap::endpoint(req, PATH, |req| match self.get_vehicle(req) {
            Ok(body) => xml(StatusCode::OK, body),
            Err(fault) => fault.response(),
        })
    }

    fn fixtures(&self) -> Value {
        let mut out = Map::new();
        out.insert("system".to_owned(), Value::from("soap-dms"));
        out.insert("path".to_owned(), Value::from(PATH));
        out.insert("action".to_owned(), Value::from(ACTION));
        out.insert("username".to_owned(), Value::from(USERNAME));
        out.insert("password".to_owned(), Value::from(PASSWORD));
        if let Value::Object(rest) = self.rest.fixtures() {
            let rest_only = ["system", "api_key_header", "api_key", "search_path"];
            out.extend(
                rest.into_iter()
                    .filter(|(k, _)| !rest_only.contains(&k.as_str())),
            );
        }
        Value::Object(out)
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        Fault::Receiver("DMS unavailable").response()
    }

    fn garbage(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            CONTENT_TYPE,
            Bytes::from_static(
                b"<?xml version=\"1.0\" encoding=\"utf-8\"?><soap:Envelope \
                  xmlns:soap=\"http://www.w3.org/2003/05/soap-envelope\"><soap:Body>\
                  <GetVehicleResponse xmlns=\"urn:demo-dms:inventory\"><Vehicle><VIN>\xff\xfe\x00\x1b",
            ),
        )
    }

    fn huge(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(StatusCode::OK, CONTENT_TYPE, self.huge_body())
    }

    fn reset(&self) {
        self.auth.clear();
    }
}

/// `<Vehicle>` with one element per legacy key, in order.
pub fn vehicle_xml(vehicle: &Vehicle) -> String {
    let mut out = String::from("<Vehicle>");
    if let Value::Object(record) = vehicle.legacy_json() {
        for (key, value) in &record {
            match value {
                Value::String(text) if text.is_empty() => out.push_str(&format!("<{key}/>")),
                Value::String(text) => out.push_str(&format!("<{key}>{}</{key}>", escape(text))),
                Value::Array(items) if items.is_empty() => out.push_str(&format!("<{key}/>")),
                Value::Array(items) => {
                    // `Photos` → `Photo`: the list's element is the singular.
                    let item = key.strip_suffix('s').unwrap_or("Item");
                    out.push_str(&format!("<{key}>"));
                    for v in items {
                        let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        out.push_str(&format!("<{item}>{}</{item}>", escape(&text)));
                    }
                    out.push_str(&format!("</{key}>"));
                }
                other => out.push_str(&format!("<{key}>{}</{key}>", escape(&other.to_string()))),
            }
        }
    }
    out.push_str("</Vehicle>");
    out
}

// === Wire ===

/// The `dms:` and `wsse:` fault subcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subcode {
    FailedAuthentication,
    InvalidRequest,
    VehicleNotFound,
}

impl Subcode {
    /// The QName and the declaration of its prefix.
    fn qname(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Subcode::FailedAuthentication => ("wsse:FailedAuthentication", "wsse", soap::WSSE_NS),
            Subcode::InvalidRequest => ("dms:InvalidRequest", "dms", INVENTORY_NS),
            Subcode::VehicleNotFound => ("dms:VehicleNotFound", "dms", INVENTORY_NS),
        }
    }
}

/// Why a call is answered with a SOAP 1.2 fault.
#[derive(Debug)]
enum Fault {
    MediaType,
    VersionMismatch,
    Sender {
        subcode: Option<Subcode>,
        reason: Cow<'static, str>,
    },
    Receiver(&'static str),
}

impl From<EnvelopeError> for Fault {
    fn from(e: EnvelopeError) -> Fault {
        match e {
            EnvelopeError::Malformed => Fault::sender("malformed envelope"),
            EnvelopeError::VersionMismatch => Fault::VersionMismatch,
        }
    }
}

impl Fault {
    fn sender(reason: &'static str) -> Fault {
        Fault::Sender {
            subcode: None,
            reason: Cow::Borrowed(reason),
        }
    }

    fn response(&self) -> SimResponse {
        match self {
            Fault::MediaType => fault(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "soap:Sender",
                None,
                "unsupported content type: application/soap+xml required",
            ),
            Fault::VersionMismatch => xml(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
                     <soap:Envelope xmlns:soap=\"{SOAP12_NS}\"><soap:Header><soap:Upgrade>\
                     <soap:SupportedEnvelope qname=\"ns:Envelope\" xmlns:ns=\"{SOAP12_NS}\"/>\
                     </soap:Upgrade></soap:Header><soap:Body>{}</soap:Body></soap:Envelope>",
                    fault_xml(
                        "soap:VersionMismatch",
                        None,
                        "envelope namespace must be http://www.w3.org/2003/05/soap-envelope"
                    )
                ),
            ),
            Fault::Sender { subcode, reason } => {
                fault(StatusCode::BAD_REQUEST, "soap:Sender", *subcode, reason)
            }
            Fault::Receiver(reason) => fault(
                StatusCode::INTERNAL_SERVER_ERROR,
                "soap:Receiver",
                None,
                reason,
            ),
        }
    }
}

fn fault(status: StatusCode, code: &str, subcode: Option<Subcode>, reason: &str) -> SimResponse {
    xml(status, envelope_xml(&fault_xml(code, subcode, reason)))
}

fn fault_xml(code: &str, subcode: Option<Subcode>, reason: &str) -> String {
    let (declaration, subcode) = match subcode.map(Subcode::qname) {
        Some((qname, prefix, ns)) => (
            format!(" xmlns:{prefix}=\"{ns}\""),
            format!("<soap:Subcode><soap:Value>{qname}</soap:Value></soap:Subcode>"),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        "<soap:Fault{declaration}><soap:Code><soap:Value>{code}</soap:Value>{subcode}</soap:Code>\
         <soap:Reason><soap:Text xml:lang=\"en\">{}</soap:Text></soap:Reason></soap:Fault>",
        escape(reason)
    )
}

fn envelope_xml(body: &str) -> String {
    soap::envelope(SOAP12_NS, body)
}

fn xml(status: StatusCode, body: String) -> SimResponse {
    soap::xml(status, CONTENT_TYPE, body)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use base64::Engine as _;
    use http::{HeaderMap, Method};
    use http_body_util::BodyExt as _;
    use jiff::SignedDuration;

    use super::*;
    use crate::crm::password_digest;
    use crate::inventory::Status;
    use crate::sim::{Mode, lock};
    use crate::soap::Element;

    const TEXT_TYPE: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText";
    const DIGEST_TYPE: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest";

    fn content_type() -> String {
        format!("application/soap+xml; charset=utf-8; action=\"{ACTION}\"")
    }

    fn text_token(password: &str) -> String {
        format!(
            "<o:Security xmlns:o=\"{}\"><o:UsernameToken><o:Username>{USERNAME}</o:Username>\
             <o:Password Type=\"{TEXT_TYPE}\">{password}</o:Password></o:UsernameToken></o:Security>",
            soap::WSSE_NS
        )
    }

    fn digest_token(nonce: &[u8], created: &str, secret: &str) -> String {
        format!(
            "<o:Security xmlns:o=\"{}\"><o:UsernameToken><o:Username>{USERNAME}</o:Username>\
             <o:Password Type=\"{DIGEST_TYPE}\">{}</o:Password><o:Nonce>{}</o:Nonce>\
             <u:Created xmlns:u=\"urn:wsu\">{created}</u:Created></o:UsernameToken></o:Security>",
            soap::WSSE_NS,
            password_digest(nonce, created, secret),
            base64::engine::general_purpose::STANDARD.encode(nonce),
        )
    }

    fn envelope(security: &str, get: &str) -> String {
        format!(
            "<s:Envelope xmlns:s=\"{SOAP12_NS}\"><s:Header>{security}</s:Header><s:Body>\
             <GetVehicle xmlns=\"{INVENTORY_NS}\">{get}</GetVehicle></s:Body></s:Envelope>"
        )
    }

    fn call_with(dms: &SoapDms, content_type: &str, body: &str) -> (StatusCode, String) {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", content_type.parse().expect("header"));
        let req = SimRequest {
            method: Method::POST,
            path: PATH.to_owned(),
            raw_query: String::new(),
            query: Vec::new(),
            headers,
            body: Bytes::from(body.to_owned()),
        };
        let response = dms.handle(&req);
        let status = response.status();
        let body = body_of(response);
        (status, body)
    }

    /// `Full` bodies are ready at once: poll once without a runtime.
    fn body_of(response: SimResponse) -> String {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut collect = std::pin::pin!(response.into_body().collect());
        match collect.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(c)) => {
                String::from_utf8(c.to_bytes().to_vec()).expect("utf-8")
            }
            std::task::Poll::Ready(Err(_)) | std::task::Poll::Pending => panic!("body not ready"),
        }
    }

    /// `GetVehicle` with `get` inside, as `demo-dms` with a text password.
    fn call(dms: &SoapDms, get: &str) -> (StatusCode, String) {
        call_with(dms, &content_type(), &envelope(&text_token(PASSWORD), get))
    }

    fn dms() -> SoapDms {
        SoapDms::new(inventory::toyota_group())
    }

    /// The `Vehicle` of a 200 answer.
    fn vehicle(status: StatusCode, body: &str) -> Element {
        assert_eq!(status, StatusCode::OK, "{body}");
        let root = soap::parse(body.as_bytes()).expect("well-formed");
        let body = root
            .children
            .into_iter()
            .find(|c| c.is(SOAP12_NS, "Body"))
            .expect("body");
        let response = body.children.into_iter().next().expect("response");
        assert!(response.is(INVENTORY_NS, "GetVehicleResponse"));
        let vehicle = response.children.into_iter().next().expect("vehicle");
        assert!(vehicle.is(INVENTORY_NS, "Vehicle"));
        vehicle
    }

    /// `(Code/Value, Subcode/Value, Reason/Text)` of a fault answer.
    fn fault_of(body: &str) -> (String, Option<String>, String) {
        let root = soap::parse(body.as_bytes()).expect("well-formed");
        let envelope = soap::open_envelope(&root, SOAP12_NS).expect("envelope");
        let fault = envelope.body.child("Fault").expect("fault");
        assert!(fault.is(SOAP12_NS, "Fault"));
        let code = fault.child("Code").expect("code");
        (
            code.field("Value").expect("value").to_owned(),
            code.child("Subcode")
                .and_then(|s| s.field("Value"))
                .map(str::to_owned),
            fault
                .child("Reason")
                .and_then(|r| r.field("Text"))
                .expect("text")
                .to_owned(),
        )
    }

    /// The element record as the JSON record (`Photos` as an array).
    fn as_json(vehicle: &Element) -> Value {
        let mut out = Map::new();
        for field in &vehicle.children {
            let value = if field.name == "Photos" {
                Value::Array(
                    field
                        .children_named("Photo")
                        .map(|p| Value::from(p.text.as_str()))
                        .collect(),
                )
            } else {
                Value::from(field.text.as_str())
            };
            out.insert(field.name.clone(), value);
        }
        Value::Object(out)
    }

    #[test]
    fn by_vin() {
        let dms = dms();
        let unit = &dms.vehicles()[3];
        let (status, body) = call(&dms, &format!("<Vin>{}</Vin>", unit.vin.to_lowercase()));
        let v = vehicle(status, &body);
        assert_eq!(
            as_json(&v),
            unit.legacy_json(),
            "every key, in order, same text"
        );
        let keys: Vec<&str> = v.children.iter().map(|c| c.name.as_str()).collect();
        let want: Vec<String> = unit
            .legacy_json()
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, want);
    }

    #[test]
    fn by_stock_and_vin_wins() {
        let dms = dms();
        let (a, b) = (&dms.vehicles()[5], &dms.vehicles()[9]);
        let (status, body) = call(
            &dms,
            &format!(
                "<StockNumber> {} </StockNumber>",
                a.stock_number.to_lowercase()
            ),
        );
        assert_eq!(vehicle(status, &body).field("VIN"), Some(a.vin.as_str()));
        let (status, body) = call(
            &dms,
            &format!(
                "<StockNumber>{}</StockNumber><Vin>{}</Vin>",
                a.stock_number, b.vin
            ),
        );
        assert_eq!(vehicle(status, &body).field("VIN"), Some(b.vin.as_str()));
        let (status, body) = call(&dms, "<Vin/><StockNumber></StockNumber>");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            fault_of(&body),
            (
                "soap:Sender".to_owned(),
                Some("dms:InvalidRequest".to_owned()),
                "GetVehicle needs Vin or StockNumber".to_owned()
            )
        );
    }

    #[test]
    fn sold_units_are_answered() {
        let dms = dms();
        let sold = dms
            .vehicles()
            .iter()
            .find(|v| v.status == Status::Sold)
            .expect("a sold unit");
        let (status, body) = call(&dms, &format!("<Vin>{}</Vin>", sold.vin));
        let v = vehicle(status, &body);
        assert_eq!(v.field("Status"), Some("Sold"));
        assert_eq!(as_json(&v), sold.legacy_json());
    }

    #[test]
    fn unknown_is_a_sender_fault_with_subcode() {
        let dms = dms();
        let unknown = dms.fixtures()["unknown_vin"]
            .as_str()
            .expect("vin")
            .to_owned();
        for get in [
            format!("<Vin>{unknown}</Vin>"),
            "<StockNumber>ZZ99999</StockNumber>".to_owned(),
        ] {
            let (status, body) = call(&dms, &get);
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert_eq!(
                fault_of(&body),
                (
                    "soap:Sender".to_owned(),
                    Some("dms:VehicleNotFound".to_owned()),
                    "Vehicle not found".to_owned()
                )
            );
            assert!(body.contains("xmlns:dms=\"urn:demo-dms:inventory\""));
        }
    }

    #[test]
    fn photos_list() {
        let dms = dms();
        let with = dms
            .vehicles()
            .iter()
            .find(|v| v.photos.len() > 2)
            .expect("photos");
        let (status, body) = call(&dms, &format!("<Vin>{}</Vin>", with.vin));
        let v = vehicle(status, &body);
        let photos: Vec<&str> = v
            .child("Photos")
            .expect("photos")
            .children_named("Photo")
            .map(|p| p.text.as_str())
            .collect();
        assert_eq!(photos, with.photos);
        let without = dms
            .vehicles()
            .iter()
            .find(|v| v.photos.is_empty() && v.msrp.is_none())
            .expect("no photos");
        let (status, body) = call(&dms, &format!("<Vin>{}</Vin>", without.vin));
        let v = vehicle(status, &body);
        assert!(v.child("Photos").is_some_and(|p| p.children.is_empty()));
        assert!(body.contains("<Photos/>") && body.contains("<MSRP/>"));
    }

    #[test]
    fn action_mismatch_is_sender_fault() {
        let dms = dms();
        let body = envelope(&text_token(PASSWORD), "<Vin>X</Vin>");
        for ct in [
            "application/soap+xml; charset=utf-8".to_owned(),
            "application/soap+xml; charset=utf-8; action=\"urn:demo-dms:inventory/Other\""
                .to_owned(),
            "application/soap+xml; action=\"URN:demo-dms:inventory/GetVehicle\"".to_owned(),
        ] {
            let (status, answer) = call_with(&dms, &ct, &body);
            assert_eq!(status, StatusCode::BAD_REQUEST, "{ct}");
            assert_eq!(fault_of(&answer).2, "unknown action");
        }
        for ct in [
            "text/xml; charset=utf-8",
            "application/soap+xml; charset=iso-8859-1; action=\"urn:demo-dms:inventory/GetVehicle\"",
        ] {
            let (status, answer) = call_with(&dms, ct, &body);
            assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
            assert_eq!(fault_of(&answer).0, "soap:Sender");
        }
        // Unquoted is fine.
        let (status, _) = call_with(
            &dms,
            &format!("Application/SOAP+XML;action={ACTION}"),
            &envelope(
                &text_token(PASSWORD),
                &format!("<Vin>{}</Vin>", dms.vehicles()[0].vin),
            ),
        );
        assert_eq!(status, StatusCode::OK);
    }

    #[test]
    fn envelope_checks() {
        let dms = dms();
        let ct = content_type();
        let (status, body) = call_with(&dms, &ct, "<s:Envelope");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(fault_of(&body).2, "malformed envelope");
        let soap11 = envelope(&text_token(PASSWORD), "<Vin>X</Vin>")
            .replace(SOAP12_NS, "http://schemas.xmlsoap.org/soap/envelope/");
        let (status, body) = call_with(&dms, &ct, &soap11);
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(fault_of(&body).0, "soap:VersionMismatch");
        assert!(body.contains("<soap:Upgrade>"));
        let other = envelope(&text_token(PASSWORD), "<Vin>X</Vin>")
            .replace("<GetVehicle ", "<GetVehicles ")
            .replace("</GetVehicle>", "</GetVehicles>");
        let (status, body) = call_with(&dms, &ct, &other);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            fault_of(&body).2,
            "unknown operation: Body must hold GetVehicle"
        );
    }

    #[test]
    fn authentication() {
        let now = Arc::new(Mutex::new(Timestamp::now()));
        let clock = Arc::clone(&now);
        let dms = SoapDms::with_clock(inventory::toyota_group(), Arc::new(move || *lock(&clock)));
        let vin = format!("<Vin>{}</Vin>", dms.vehicles()[0].vin);
        let ct = content_type();
        let failure = |security: &str| {
            let (status, body) = call_with(&dms, &ct, &envelope(security, &vin));
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            let (code, subcode, reason) = fault_of(&body);
            assert_eq!(code, "soap:Sender");
            assert_eq!(subcode.as_deref(), Some("wsse:FailedAuthentication"));
            assert!(body.contains(&format!("xmlns:wsse=\"{}\"", soap::WSSE_NS)));
            assert!(!body.contains(PASSWORD));
            reason
        };
        assert_eq!(
            failure(&text_token("wrong")),
            "authentication failed: invalid password"
        );
        assert_eq!(
            failure(""),
            "authentication failed: missing wsse:Security header"
        );
        assert_eq!(
            failure(&text_token(PASSWORD).replace(USERNAME, "demo-crm")),
            "authentication failed: unknown username"
        );
        // No Type means text.
        let (status, _) = call_with(
            &dms,
            &ct,
            &envelope(
                &text_token(PASSWORD).replace(&format!(" Type=\"{TEXT_TYPE}\""), ""),
                &vin,
            ),
        );
        assert_eq!(status, StatusCode::OK);

        let created = lock(&now).to_string();
        let digest = digest_token(b"dms-nonce-1", &created, PASSWORD);
        let (status, body) = call_with(&dms, &ct, &envelope(&digest, &vin));
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            failure(&digest),
            "authentication failed: nonce already used"
        );
        assert_eq!(
            failure(&digest_token(b"dms-nonce-2", &created, "wrong")),
            "authentication failed: invalid password digest"
        );
        let stale = lock(&now)
            .checked_add(SignedDuration::from_mins(-6))
            .expect("t")
            .to_string();
        assert_eq!(
            failure(&digest_token(b"dms-nonce-3", &stale, PASSWORD)),
            "authentication failed: Created is outside the 5-minute window"
        );
        // `POST /_sim/reset` forgets nonces.
        dms.reset();
        let (status, _) = call_with(&dms, &ct, &envelope(&digest, &vin));
        assert_eq!(status, StatusCode::OK);
    }

    #[test]
    fn fixtures_match_the_rest_dms() {
        let soap = dms().fixtures();
        let rest = Dms::new(inventory::toyota_group()).fixtures();
        assert_eq!(soap["system"], "soap-dms");
        assert_eq!(soap["action"], ACTION);
        assert_eq!(soap["username"], USERNAME);
        for (key, value) in rest.as_object().expect("object") {
            match key.as_str() {
                "system" => {}
                "api_key_header" | "api_key" | "search_path" => {
                    assert!(soap.get(key).is_none(), "{key}");
                }
                _ => assert_eq!(&soap[key], value, "{key}"),
            }
        }
        assert!(!soap["sold_vins"].as_array().expect("sold").is_empty());
    }

    #[tokio::test]
    async fn serves_over_http() {
        static NONCE: AtomicU64 = AtomicU64::new(0);
        let sim = start_soap_dms().await.expect("start");
        let client = reqwest::Client::new();
        let url = format!("{}{PATH}", sim.base_url());
        let fixtures: Value =
            crate::sim::get_json(&format!("{}/_sim/fixtures", sim.base_url())).await;
        let sample = fixtures["in_stock_sample"]["stock"]
            .as_str()
            .expect("stock")
            .to_owned();
        let post = || {
            let n = NONCE.fetch_add(1, Ordering::Relaxed);
            let token = digest_token(
                format!("http-{n}").as_bytes(),
                &Timestamp::now().to_string(),
                PASSWORD,
            );
            client
                .post(&url)
                .header("Content-Type", content_type())
                .body(envelope(
                    &token,
                    &format!("<StockNumber>{sample}</StockNumber>"),
                ))
                .send()
        };
        let r = post().await.expect("send");
        assert_eq!(r.headers()["content-type"], CONTENT_TYPE);
        let status = r.status();
        let body = r.text().await.expect("body");
        assert_eq!(
            vehicle(status, &body).field("StockNumber"),
            Some(sample.as_str())
        );

        sim.set_mode(Mode::Fail, 0);
        let r = post().await.expect("send");
        assert_eq!(r.status(), 500);
        let (code, _, reason) = fault_of(&r.text().await.expect("body"));
        assert_eq!(
            (code.as_str(), reason.as_str()),
            ("soap:Receiver", "DMS unavailable")
        );

        sim.set_mode(Mode::Garbage, 0);
        let r = post().await.expect("send");
        assert_eq!(r.status(), 200);
        let bytes = r.bytes().await.expect("body");
        assert!(std::str::from_utf8(&bytes).is_err() && soap::parse(&bytes).is_none());

        sim.set_mode(Mode::Huge, 0);
        let bytes = post().await.expect("send").bytes().await.expect("body");
        assert!(bytes.len() >= sim::HUGE_BYTES);
        let root = soap::parse(&bytes).expect("well-formed");
        let envelope = soap::open_envelope(&root, SOAP12_NS).expect("envelope");
        let response = envelope.body.children.first().expect("response");
        assert!(response.children.len() > 1000);
        assert!(response.children.iter().all(|v| v.name == "Vehicle"));
    }
}
