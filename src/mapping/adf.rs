//! A `lead.submit` request rendered as an ADF 1.0 document (docs/protocol.md §Lead delivery and
//! ADF), for dealer CRMs that take leads as ADF/XML — by HTTP POST or, as most still do, by
//! e-mail.
//!
//! The gateway has already validated the request against its schema and checked consent; this
//! module only translates. It follows AAP's ADF field table and rules, in the element order of our
//! reading of the ADF 1.0 DTD:
//!
//! ```text
//! <?xml version="1.0" encoding="UTF-8"?>
//! <?adf version="1.0"?>
//! <adf><prospect>
//!   <id sequence="1" source="aap-gateway">REFERENCE</id>
//!   <requestdate>submitted_at, else the time the gateway received the lead</requestdate>
//!   <vehicle interest="buy|test-drive" status="new|used">   vehicle_of_interest, or a placeholder
//!     year make model vin stock trim bodystyle transmission odometer price comments
//!   </vehicle>
//!   <vehicle interest="trade-in">                            trade_in, when present
//!     year make model vin stock trim bodystyle transmission odometer condition price comments
//!   </vehicle>
//!   <customer><contact>name email phone address</contact><comments/></customer>
//!   <vendor><vendorname>the dealership, from our own configuration</vendorname></vendor>
//!   <provider><name part="full">source_agent.name</name><url/></provider>
//! </prospect></adf>
//! ```
//!
//! Vehicles: `status` comes from the vehicle of interest's condition (`cpo` → `used`); the
//! trade-in's condition goes to `<condition>`; transmissions fold to `A` or `M`
//! ([`fold_transmission`]); `<odometer units="mi">`; `<price currency="USD">` is `type="quote"`
//! for the vehicle of interest and `type="asking"` for a (rare) buyer-stated trade-in value. A
//! lead without `vehicle_of_interest` leads with a general-inquiry placeholder vehicle (see
//! `VehicleBlock::placeholder` for why it looks the way it does).
//!
//! What ADF has no element for is folded into text rather than dropped: the vehicle's
//! `<comments>` (one per vehicle, entries joined with `; `) carries `certified pre-owned`,
//! `Displacement: {cc}cc`, a transmission that folds to neither `A` nor `M`, and every
//! `other_attributes` entry as `key: value`; the customer's `<comments>` (entries on separate
//! lines) carries the buyer's message, the requested appointment in the rooftop's time zone, its
//! notes, the preferred contact channel and the consent audit line. The ConsentGrant must never
//! be lost (docs/protocol.md §Consent), so that line quotes `consent_text` verbatim.
//!
//! Every value is written through quick-xml's writer and escaper, never spliced in by hand. Two
//! things an escaper cannot fix are handled first: characters XML 1.0 cannot carry at all (C0
//! controls other than tab and line feed, U+FFFE, U+FFFF) are dropped, and CR / CRLF line ends
//! become LF, as every XML parser would read them anyway. What the CRM reads back is therefore
//! exactly the text written.
//!
//! Not mapped (AAP's ADF table gives them no ADF element and the gateway keeps them elsewhere):
//! `vehicle_id`, `msrp`, `list_price`, `fees`, `idempotency_key`, `source_agent.agent_card_url`;
//! nor the colours, features and other listing details that the ADF table does not name.
//! `<vendor>` carries only `<vendorname>`, as in AAP's ADF skeleton, although a strict reading of
//! the DTD also wants a `<contact>` (an open point: docs/protocol.md §Lead delivery and ADF).

use std::io;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use quick_xml::Writer;
use quick_xml::escape::partial_escape;
use quick_xml::events::{BytesDecl, BytesPI, BytesText, Event};
use serde_json::Value;

/// `<id source="…">` of the prospect: who numbered the lead.
pub const ID_SOURCE: &str = "aap-gateway";

/// The comment of the placeholder vehicle of a lead without `vehicle_of_interest`.
pub const GENERAL_INQUIRY: &str = "General inquiry: no specific vehicle";

/// What the rendering needs besides the request: facts the gateway owns.
#[derive(Debug, Clone, Copy)]
pub struct AdfContext<'a> {
    /// The selling dealership (`<vendorname>`), from our own configuration, never the buyer.
    pub vendor_name: &'a str,
    /// The stable lead reference, written as `<id sequence="1" source="aap-gateway">`; the CRM
    /// recognizes a re-delivered lead by it.
    pub reference: &'a str,
    /// The rooftop's time zone, in which the appointment text is written.
    pub timezone: &'a TimeZone,
    /// Written as `<requestdate>` when the request has no `submitted_at`.
    pub received_at: Timestamp,
}

/// Renders a `lead.submit.request` (already validated against its schema) as an ADF 1.0 document.
pub fn render(request: &Value, ctx: &AdfContext<'_>) -> String {
    let prospect = Prospect::from_request(request, ctx);
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into a `Vec` cannot fail; an error could only come from quick-xml itself, and a
    // half-written document must not be sent, so nothing is returned then.
    if prospect.write(&mut writer).is_err() {
        return String::new();
    }
    String::from_utf8(writer.into_inner())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Folds a free-text transmission to ADF's `A` or `M`, or `None` when it is neither.
///
/// Anything without a clutch pedal is `A`: automatics of any speed count, CVT (and e-CVT),
/// dual-clutch (DCT, DSG), automated manuals, semi-automatic motorcycle gearboxes and the single
/// speed of an EV. `manual` / `stick` / `MT` is `M`.
pub fn fold_transmission(text: &str) -> Option<&'static str> {
    let lower = text.trim().to_lowercase();
    let tokens: Vec<&str> = lower
        .split(|c: char| c.is_whitespace() || c == '-' || c == ',' || c == '(' || c == ')')
        .filter(|t| !t.is_empty())
        .collect();
    let automatic = lower.contains("auto")
        || lower.contains("cvt")
        || lower.contains("dct")
        || lower.contains("dsg")
        || lower.contains("single speed")
        || lower.contains("single-speed")
        || lower.contains("direct drive")
        || tokens
            .iter()
            .any(|t| matches!(*t, "at" | "a/t" | "a" | "ivt" | "1" | "ecvt"));
    if automatic {
        return Some("A");
    }
    let manual = lower.contains("manual")
        || lower.contains("stick")
        || tokens.iter().any(|t| matches!(*t, "mt" | "m/t" | "m"));
    manual.then_some("M")
}

/// Text as XML 1.0 can carry it: line ends normalized to LF, forbidden characters dropped.
pub fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            '\t' | '\n' => out.push(c),
            c if (c as u32) < 0x20 => {}
            '\u{FFFE}' | '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

// === impl Prospect ===

/// The document's content, mapped from the request before any XML is written.
#[derive(Debug)]
struct Prospect {
    reference: String,
    request_date: String,
    vehicles: Vec<VehicleBlock>,
    name: String,
    email: Option<String>,
    phone: Option<String>,
    address: Option<AddressBlock>,
    customer_comments: Vec<String>,
    vendor_name: String,
    provider_name: String,
    provider_url: Option<String>,
}

#[derive(Debug)]
struct VehicleBlock {
    interest: &'static str,
    status: Option<&'static str>,
    /// Child elements in DTD order, `<comments>` excepted.
    children: Vec<Child>,
    comments: Vec<String>,
}

/// A leaf element of a vehicle block.
#[derive(Debug)]
struct Child {
    name: &'static str,
    attributes: &'static [(&'static str, &'static str)],
    text: String,
}

impl Child {
    fn new(name: &'static str, text: String) -> Child {
        Child {
            name,
            attributes: &[],
            text,
        }
    }
}

#[derive(Debug)]
struct AddressBlock {
    streets: Vec<String>,
    city: Option<String>,
    regioncode: Option<String>,
    postalcode: Option<String>,
    country: String,
}

/// Which of the lead's vehicles a block stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    OfInterest,
    TradeIn,
}

impl Prospect {
    fn from_request(request: &Value, ctx: &AdfContext<'_>) -> Prospect {
        let customer = &request["customer"];
        let appointment_type = str_at(request, &["appointment", "appointment_type"]);
        let mut vehicles = Vec::new();
        match request.get("vehicle_of_interest") {
            Some(Value::Object(v)) if !v.is_empty() => {
                let interest = if appointment_type == Some("test_drive") {
                    "test-drive"
                } else {
                    "buy"
                };
                vehicles.push(VehicleBlock::from_vehicle(
                    &request["vehicle_of_interest"],
                    Role::OfInterest,
                    interest,
                ));
            }
            _ => vehicles.push(VehicleBlock::placeholder()),
        }
        if let Some(trade) = request.get("trade_in").filter(|v| v.is_object()) {
            vehicles.push(VehicleBlock::from_vehicle(trade, Role::TradeIn, "trade-in"));
        }
        let name = [
            str_at(customer, &["first_name"]),
            str_at(customer, &["last_name"]),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        Prospect {
            reference: ctx.reference.to_owned(),
            request_date: str_at(request, &["submitted_at"])
                .map(str::to_owned)
                .unwrap_or_else(|| ctx.received_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            vehicles,
            name,
            email: str_at(customer, &["email"]).map(str::to_owned),
            phone: str_at(customer, &["phone"]).map(str::to_owned),
            address: customer.get("address").and_then(AddressBlock::from_address),
            customer_comments: customer_comments(request, ctx.timezone),
            vendor_name: ctx.vendor_name.to_owned(),
            provider_name: str_at(request, &["source_agent", "name"])
                .unwrap_or_default()
                .to_owned(),
            provider_url: str_at(request, &["source_agent", "url"]).map(str::to_owned),
        }
    }

    fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.write_event(Event::PI(BytesPI::new(r#"adf version="1.0""#)))?;
        w.create_element("adf").write_inner_content(|w| {
            w.create_element("prospect").write_inner_content(|w| {
                w.create_element("id")
                    .with_attributes([("sequence", "1"), ("source", ID_SOURCE)])
                    .write_text_content(text(&self.reference))?;
                leaf(w, "requestdate", &self.request_date)?;
                for vehicle in &self.vehicles {
                    vehicle.write(w)?;
                }
                self.write_customer(w)?;
                w.create_element("vendor")
                    .write_inner_content(|w| leaf(w, "vendorname", &self.vendor_name))?;
                w.create_element("provider").write_inner_content(|w| {
                    w.create_element("name")
                        .with_attribute(("part", "full"))
                        .write_text_content(text(&self.provider_name))?;
                    if let Some(url) = &self.provider_url {
                        leaf(w, "url", url)?;
                    }
                    Ok(())
                })?;
                Ok(())
            })?;
            Ok(())
        })?;
        Ok(())
    }

    fn write_customer(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        w.create_element("customer").write_inner_content(|w| {
            w.create_element("contact").write_inner_content(|w| {
                w.create_element("name")
                    .with_attribute(("part", "full"))
                    .write_text_content(text(&self.name))?;
                if let Some(email) = &self.email {
                    leaf(w, "email", email)?;
                }
                if let Some(phone) = &self.phone {
                    leaf(w, "phone", phone)?;
                }
                if let Some(address) = &self.address {
                    address.write(w)?;
                }
                Ok(())
            })?;
            if !self.customer_comments.is_empty() {
                leaf(w, "comments", &self.customer_comments.join("\n"))?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

// === impl VehicleBlock ===

impl VehicleBlock {
    fn from_vehicle(v: &Value, role: Role, interest: &'static str) -> VehicleBlock {
        let mut children = Vec::new();
        // The DTD requires year, make and model; they stay empty when the buyer did not give
        // them (AAP accepts partial vehicles) rather than being guessed.
        for name in ["year", "make", "model"] {
            children.push(Child::new(name, scalar_at(v, name).unwrap_or_default()));
        }
        for (name, field) in [
            ("vin", "vin"),
            ("stock", "stock"),
            ("trim", "trim"),
            ("bodystyle", "body"),
        ] {
            if let Some(value) = scalar_at(v, field) {
                children.push(Child::new(name, value));
            }
        }
        let transmission = scalar_at(v, "transmission");
        let folded = transmission.as_deref().and_then(fold_transmission);
        if let Some(folded) = folded {
            children.push(Child::new("transmission", folded.to_owned()));
        }
        if let Some(miles) = scalar_at(v, "mileage") {
            children.push(Child {
                name: "odometer",
                attributes: &[("units", "mi")],
                text: miles,
            });
        }
        let condition = str_at(v, &["condition"]);
        let status = match (role, condition) {
            (Role::OfInterest, Some("new")) => Some("new"),
            (Role::OfInterest, Some("used" | "cpo")) => Some("used"),
            _ => None,
        };
        if role == Role::TradeIn
            && let Some(condition) = condition
        {
            children.push(Child::new("condition", condition.to_owned()));
        }
        if let Some(price) = scalar_at(v, "price") {
            children.push(Child {
                name: "price",
                // A buyer-stated trade-in value is what the seller asks, not a dealer quote.
                attributes: match role {
                    Role::OfInterest => &[("type", "quote"), ("currency", "USD")],
                    Role::TradeIn => &[("type", "asking"), ("currency", "USD")],
                },
                text: price,
            });
        }

        let mut comments = Vec::new();
        if role == Role::OfInterest && condition == Some("cpo") {
            comments.push("certified pre-owned".to_owned());
        }
        if let Some(cc) = scalar_at(v, "displacement_cc") {
            comments.push(format!("Displacement: {cc}cc"));
        }
        if let (Some(raw), None) = (&transmission, folded) {
            comments.push(format!("Transmission: {raw}"));
        }
        if let Some(Value::Object(attributes)) = v.get("other_attributes") {
            for (key, value) in attributes {
                comments.push(format!("{key}: {}", attribute_text(value)));
            }
        }
        VehicleBlock {
            interest,
            status,
            children,
            comments,
        }
    }

    /// The vehicle of a lead that names none (the DTD wants at least one `<vehicle>`).
    ///
    /// Its `<year>`, `<make>` and `<model>` are present but empty, which the DTD allows
    /// (`#PCDATA`), and its comment says in words what it is. That is the least surprising
    /// choice: invented values (the current year, the dealer's brand, "Any") would look like a
    /// real unit to a CRM's inventory matching and reports, whereas an empty trio matches
    /// nothing and the lead is routed as a general inquiry. `interest="buy"` is the DTD default
    /// and no `status` is claimed.
    fn placeholder() -> VehicleBlock {
        VehicleBlock {
            interest: "buy",
            status: None,
            children: vec![
                Child::new("year", String::new()),
                Child::new("make", String::new()),
                Child::new("model", String::new()),
            ],
            comments: vec![GENERAL_INQUIRY.to_owned()],
        }
    }

    fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        let mut element = w
            .create_element("vehicle")
            .with_attribute(("interest", self.interest));
        if let Some(status) = self.status {
            element = element.with_attribute(("status", status));
        }
        element.write_inner_content(|w| {
            for child in &self.children {
                w.create_element(child.name)
                    .with_attributes(child.attributes.iter().copied())
                    .write_text_content(text(&child.text))?;
            }
            // ADF allows one comments element per vehicle: everything is merged into it.
            if !self.comments.is_empty() {
                leaf(w, "comments", &self.comments.join("; "))?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

// === impl AddressBlock ===

impl AddressBlock {
    fn from_address(address: &Value) -> Option<AddressBlock> {
        let fields = address.as_object().filter(|a| !a.is_empty())?;
        let get = |name: &str| {
            fields
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Some(AddressBlock {
            streets: ["address_line_1", "address_line_2"]
                .into_iter()
                .filter_map(get)
                .collect(),
            city: get("city"),
            regioncode: get("state"),
            postalcode: get("zip"),
            country: get("country").unwrap_or_else(|| "US".to_owned()),
        })
    }

    fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        w.create_element("address").write_inner_content(|w| {
            // The DTD wants at least one street line; an empty one says "not given".
            if self.streets.is_empty() {
                w.create_element("street")
                    .with_attribute(("line", "1"))
                    .write_text_content(text(""))?;
            }
            for (line, street) in ["1", "2"].into_iter().zip(&self.streets) {
                w.create_element("street")
                    .with_attribute(("line", line))
                    .write_text_content(text(street))?;
            }
            for (name, value) in [
                ("city", &self.city),
                ("regioncode", &self.regioncode),
                ("postalcode", &self.postalcode),
            ] {
                if let Some(value) = value {
                    leaf(w, name, value)?;
                }
            }
            leaf(w, "country", &self.country)?;
            Ok(())
        })?;
        Ok(())
    }
}

// === customer comments ===

/// The customer `<comments>` entries, in order: message, appointment, appointment notes,
/// preferred contact, consent audit line.
fn customer_comments(request: &Value, timezone: &TimeZone) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(message) = str_at(request, &["message"]).filter(|m| !m.trim().is_empty()) {
        out.push(message.to_owned());
    }
    if let Some(appointment) = request.get("appointment").filter(|a| a.is_object()) {
        out.push(appointment_text(appointment, timezone));
        if let Some(notes) = str_at(appointment, &["notes"]).filter(|n| !n.trim().is_empty()) {
            out.push(format!("Appointment notes: {notes}"));
        }
    }
    if let Some(channel) = str_at(request, &["customer", "preferred_contact"]) {
        out.push(format!("Preferred contact: {channel}"));
    }
    if let Some(consent) = request.get("consent").filter(|c| c.is_object()) {
        out.push(consent_line(consent));
    }
    out
}

/// `Requested test-drive: 2026-05-02 10:00 PDT (60 min)`, in the rooftop's zone.
fn appointment_text(appointment: &Value, timezone: &TimeZone) -> String {
    let what = match str_at(appointment, &["appointment_type"]) {
        Some("test_drive") => "test-drive",
        Some("trade_in") => "trade-in appraisal",
        Some("service") => "service appointment",
        _ => "sales appointment",
    };
    let when = match str_at(appointment, &["appointment_at"]) {
        Some(at) => match at.parse::<Timestamp>() {
            Ok(ts) => ts
                .to_zoned(timezone.clone())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string(),
            Err(_) => at.to_owned(),
        },
        None => "time to be arranged".to_owned(),
    };
    let duration = scalar_at(appointment, "duration_minutes")
        .map(|m| format!(" ({m} min)"))
        .unwrap_or_default();
    format!("Requested {what}: {when}{duration}")
}

/// `Contact consent granted 2026-04-30T10:16:00Z for email, phone[, expires …]: "<text>"`.
fn consent_line(consent: &Value) -> String {
    let channels: Vec<&str> = consent
        .get("allowed_channels")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let expires = str_at(consent, &["expires_at"])
        .map(|e| format!(", expires {e}"))
        .unwrap_or_default();
    format!(
        "Contact consent granted {} for {}{expires}: \"{}\"",
        str_at(consent, &["granted_at"]).unwrap_or_default(),
        channels.join(", "),
        str_at(consent, &["consent_text"]).unwrap_or_default(),
    )
}

// === helpers ===

/// A text event for `value`: quick-xml escapes `<`, `>` and `&` (quotes need no escaping in
/// element text, and CRMs with home-made parsers read `O'Brien` better than `O&apos;Brien`);
/// [`xml_text`] first removes what no escaping can carry.
fn text(value: &str) -> BytesText<'static> {
    BytesText::from_escaped(partial_escape(xml_text(value)).into_owned())
}

/// `<name>value</name>`.
fn leaf(w: &mut Writer<Vec<u8>>, name: &str, value: &str) -> io::Result<()> {
    w.create_element(name).write_text_content(text(value))?;
    Ok(())
}

/// The string at `path`, if present and a string.
fn str_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
}

/// A string or number member as text (whole numbers without a fraction, as the schema's
/// integers may arrive as `2022.0`).
fn scalar_at(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(number_text(n)),
        _ => None,
    }
}

fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
        _ => n.to_string(),
    }
}

/// An `other_attributes` value: string, number, boolean, or a list of them joined with `, `.
fn attribute_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => number_text(n),
        Value::Array(items) => items
            .iter()
            .map(attribute_text)
            .collect::<Vec<_>>()
            .join(", "),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        Value::Object(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::Reader;
    use serde_json::json;

    /// AAP's worked `lead.submit` example request.
    fn spec_example() -> Value {
        json!({"type":"lead.submit.request",
         "customer":{"first_name":"Anna","last_name":"Lee","email":"anna@example.com","phone":"+14155550123","preferred_contact":"phone"},
         "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["email","phone"],
                    "consent_text":"I agree to share my contact info with Demo Toyota about VIN 1HGCY2F57RA000001.","scope":["lead_submission"]},
         "vehicle_of_interest":{"vin":"1HGCY2F57RA000001","year":2022,"make":"Honda","model":"Civic","condition":"cpo"},
         "trade_in":{"year":2014,"make":"Toyota","model":"Corolla","condition":"good","mileage":96000},
         "appointment":{"appointment_type":"test_drive","appointment_at":"2026-05-02T17:00:00Z","duration_minutes":60},
         "source_agent":{"name":"chatgpt-shopping","agent_card_url":"https://chatgpt.com/.well-known/agent-card.json"},
         "submitted_at":"2026-04-30T10:16:05Z","idempotency_key":"01HZ9K8R1G4B7Q9WS2F7APYZ6T"})
    }

    fn la() -> TimeZone {
        jiff::tz::db()
            .get("America/Los_Angeles")
            .expect("bundled zone")
    }

    fn render_with(request: &Value) -> String {
        let tz = la();
        let ctx = AdfContext {
            vendor_name: "Demo Toyota",
            reference: "lead-0001",
            timezone: &tz,
            received_at: "2026-04-30T10:20:00.123Z".parse().expect("ts"),
        };
        render(request, &ctx)
    }

    /// A parsed element: name, attributes, text (concatenated), children.
    #[derive(Debug, Default)]
    struct El {
        name: String,
        attrs: Vec<(String, String)>,
        text: String,
        children: Vec<El>,
    }

    impl El {
        fn all(&self, name: &str) -> Vec<&El> {
            self.children.iter().filter(|c| c.name == name).collect()
        }
        fn one(&self, name: &str) -> &El {
            let found = self.all(name);
            assert_eq!(found.len(), 1, "exactly one <{name}> in <{}>", self.name);
            found[0]
        }
        fn at(&self, path: &str) -> &El {
            path.split('/').fold(self, |el, name| el.one(name))
        }
        fn attr(&self, name: &str) -> Option<&str> {
            self.attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }
        fn names(&self) -> Vec<&str> {
            self.children.iter().map(|c| c.name.as_str()).collect()
        }
    }

    /// Parses the document back with quick-xml, checking the prolog on the way.
    fn parse_back(doc: &str) -> El {
        assert!(doc.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        let mut reader = Reader::from_str(doc);
        let mut stack: Vec<El> = vec![El::default()];
        let mut saw_adf_pi = false;
        loop {
            match reader.read_event().expect("well-formed") {
                Event::Decl(_) => {}
                Event::PI(pi) => {
                    assert_eq!(pi.target(), b"adf");
                    assert_eq!(pi.content(), br#" version="1.0""#);
                    saw_adf_pi = true;
                }
                Event::Start(e) => {
                    let attrs = e
                        .attributes()
                        .map(|a| {
                            let a = a.expect("attribute");
                            (
                                String::from_utf8(a.key.as_ref().to_vec()).expect("utf8"),
                                a.unescape_value().expect("value").into_owned(),
                            )
                        })
                        .collect();
                    stack.push(El {
                        name: String::from_utf8(e.name().as_ref().to_vec()).expect("utf8"),
                        attrs,
                        ..El::default()
                    });
                }
                Event::Empty(e) => {
                    let el = El {
                        name: String::from_utf8(e.name().as_ref().to_vec()).expect("utf8"),
                        ..El::default()
                    };
                    stack.last_mut().expect("parent").children.push(el);
                }
                Event::End(_) => {
                    let el = stack.pop().expect("open");
                    stack.last_mut().expect("parent").children.push(el);
                }
                Event::Text(t) => {
                    let top = stack.last_mut().expect("open");
                    if !top.name.is_empty() {
                        top.text.push_str(&t.xml10_content().expect("text"));
                    }
                }
                Event::GeneralRef(r) => {
                    let top = stack.last_mut().expect("open");
                    let resolved = match r.resolve_char_ref().expect("char ref") {
                        Some(c) => c.to_string(),
                        None => {
                            quick_xml::escape::resolve_predefined_entity(&r.decode().expect("name"))
                                .expect("predefined")
                                .to_owned()
                        }
                    };
                    top.text.push_str(&resolved);
                }
                Event::Eof => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(saw_adf_pi, "<?adf version=\"1.0\"?> present");
        let mut root = stack.pop().expect("document");
        assert!(stack.is_empty());
        assert_eq!(root.children.len(), 1);
        let adf = root.children.remove(0);
        assert_eq!(adf.name, "adf");
        adf
    }

    fn comments_of(v: &El) -> Vec<String> {
        v.one("comments")
            .text
            .split("; ")
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn spec_example_renders_the_mapped_document() {
        let doc = render_with(&spec_example());
        assert!(
            doc.contains("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<?adf version=\"1.0\"?>")
        );
        let adf = parse_back(&doc);
        let p = adf.one("prospect");
        assert_eq!(
            p.names(),
            [
                "id",
                "requestdate",
                "vehicle",
                "vehicle",
                "customer",
                "vendor",
                "provider"
            ]
        );
        let id = p.one("id");
        assert_eq!(id.text, "lead-0001");
        assert_eq!(id.attr("sequence"), Some("1"));
        assert_eq!(id.attr("source"), Some("aap-gateway"));
        assert_eq!(p.one("requestdate").text, "2026-04-30T10:16:05Z");

        let vehicles = p.all("vehicle");
        let voi = vehicles[0];
        assert_eq!(voi.attr("interest"), Some("test-drive"));
        assert_eq!(voi.attr("status"), Some("used"));
        assert_eq!(voi.names(), ["year", "make", "model", "vin", "comments"]);
        assert_eq!(voi.one("year").text, "2022");
        assert_eq!(voi.one("make").text, "Honda");
        assert_eq!(voi.one("model").text, "Civic");
        assert_eq!(voi.one("vin").text, "1HGCY2F57RA000001");
        assert_eq!(voi.one("comments").text, "certified pre-owned");

        let trade = vehicles[1];
        assert_eq!(trade.attr("interest"), Some("trade-in"));
        assert_eq!(trade.attr("status"), None);
        assert_eq!(
            trade.names(),
            ["year", "make", "model", "odometer", "condition"]
        );
        assert_eq!(trade.one("odometer").text, "96000");
        assert_eq!(trade.one("odometer").attr("units"), Some("mi"));
        assert_eq!(trade.one("condition").text, "good");

        let customer = p.one("customer");
        assert_eq!(customer.names(), ["contact", "comments"]);
        let contact = customer.one("contact");
        assert_eq!(contact.names(), ["name", "email", "phone"]);
        assert_eq!(contact.one("name").text, "Anna Lee");
        assert_eq!(contact.one("name").attr("part"), Some("full"));
        assert_eq!(contact.one("email").text, "anna@example.com");
        assert_eq!(contact.one("phone").text, "+14155550123");
        assert_eq!(
            customer.one("comments").text,
            "Requested test-drive: 2026-05-02 10:00 PDT (60 min)\n\
             Preferred contact: phone\n\
             Contact consent granted 2026-04-30T10:16:00Z for email, phone: \
             \"I agree to share my contact info with Demo Toyota about VIN 1HGCY2F57RA000001.\""
        );
        assert_eq!(p.at("vendor/vendorname").text, "Demo Toyota");
        assert_eq!(p.one("vendor").names(), ["vendorname"]);
        let provider = p.one("provider");
        assert_eq!(provider.names(), ["name"]);
        assert_eq!(provider.one("name").text, "chatgpt-shopping");
        assert_eq!(provider.one("name").attr("part"), Some("full"));
    }

    #[test]
    fn hostile_text_stays_well_formed_and_round_trips() {
        let hostile = "O'Brien <script>&amp; \"quoted\" ]]> Zoë 東京 🚗 \u{1}\u{8}\u{1b}\u{7f}\ttab\r\nline\rend\u{FFFF}";
        let expected = "O'Brien <script>&amp; \"quoted\" ]]> Zoë 東京 🚗 \u{7f}\ttab\nline\nend";
        let mut request = spec_example();
        request["customer"]["first_name"] = json!(hostile);
        request["customer"]["last_name"] = json!("</name><name>x");
        request["message"] = json!(hostile);
        request["consent"]["consent_text"] = json!(hostile);
        request["vehicle_of_interest"]["model"] = json!(hostile);
        request["vehicle_of_interest"]["other_attributes"] = json!({"k<&>": hostile});
        request["source_agent"]["name"] = json!(hostile);
        request["source_agent"]["url"] = json!("https://agent.example/?a=1&b=\"2\"");
        let tz = la();
        let ctx = AdfContext {
            vendor_name: "Smith & Sons <Toyota>",
            reference: "ref\"&<>'",
            timezone: &tz,
            received_at: Timestamp::UNIX_EPOCH,
        };
        let doc = render(&request, &ctx);
        assert!(!doc.contains("<script>"));
        assert!(!doc.contains("]]>"));
        let adf = parse_back(&doc);
        let p = adf.one("prospect");
        assert_eq!(p.one("id").text, "ref\"&<>'");
        let contact = p.at("customer/contact");
        assert_eq!(contact.all("name").len(), 1);
        assert_eq!(
            contact.one("name").text,
            format!("{expected} </name><name>x")
        );
        let comments = p.at("customer/comments").text.clone();
        assert!(comments.starts_with(&format!("{expected}\n")), "{comments}");
        assert!(
            comments.ends_with(&format!(": \"{expected}\"")),
            "{comments}"
        );
        let voi = p.all("vehicle")[0];
        assert_eq!(voi.one("model").text, expected);
        assert_eq!(
            voi.one("comments").text,
            format!("certified pre-owned; k<&>: {expected}")
        );
        assert_eq!(p.at("vendor/vendorname").text, "Smith & Sons <Toyota>");
        assert_eq!(p.at("provider/name").text, expected);
        assert_eq!(
            p.at("provider/url").text,
            "https://agent.example/?a=1&b=\"2\""
        );
    }

    /// One request exercising every row of AAP's ADF field table.
    #[test]
    fn every_table_row() {
        let request = json!({"type":"lead.submit.request",
            "customer":{"first_name":"Ben","last_name":"Okafor","email":"ben@example.com","phone":"+13105550199",
                "preferred_contact":"sms",
                "address":{"address_line_1":"1 Main St","address_line_2":"Apt 4","city":"Oakland","state":"CA","zip":"94607"}},
            "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["phone","sms"],"consent_text":"OK to text me.",
                "scope":["lead_submission"],"expires_at":"2026-07-30T10:16:00Z"},
            "vehicle_of_interest":{"year":2025,"make":"Toyota","model":"RAV4","trim":"XLE","vin":"2T3P1RFV8RW000001",
                "stock":"T12345","condition":"new","body":"suv","transmission":"8-speed automatic","mileage":12,
                "price":34990,"displacement_cc":2487,"other_attributes":{"final_drive":"awd","seats":5,"abs":true,"packages":["tow","sun"]},
                "msrp":36000,"vehicle_id":"internal-9"},
            "trade_in":{"year":2016,"make":"Mazda","model":"3","trim":"Touring","vin":"JM1BM1V79G1000001","mileage":88000,
                "condition":"fair","transmission":"6-speed manual"},
            "appointment":{"appointment_type":"sales","appointment_at":"2026-12-05T18:30:00Z","notes":"Bring the title."},
            "message":"Looking for a family SUV.",
            "source_agent":{"name":"acme-agent","url":"https://acme.example/agent"}});
        let adf = parse_back(&render_with(&request));
        let p = adf.one("prospect");
        // No submitted_at: the time the gateway received the lead, to the second.
        assert_eq!(p.one("requestdate").text, "2026-04-30T10:20:00Z");

        let vehicles = p.all("vehicle");
        let voi = vehicles[0];
        assert_eq!(voi.attr("interest"), Some("buy"));
        assert_eq!(voi.attr("status"), Some("new"));
        assert_eq!(
            voi.names(),
            [
                "year",
                "make",
                "model",
                "vin",
                "stock",
                "trim",
                "bodystyle",
                "transmission",
                "odometer",
                "price",
                "comments"
            ]
        );
        for (name, value) in [
            ("year", "2025"),
            ("make", "Toyota"),
            ("model", "RAV4"),
            ("vin", "2T3P1RFV8RW000001"),
            ("stock", "T12345"),
            ("trim", "XLE"),
            ("bodystyle", "suv"),
            ("transmission", "A"),
            ("odometer", "12"),
            ("price", "34990"),
        ] {
            assert_eq!(voi.one(name).text, value, "{name}");
        }
        assert_eq!(voi.one("odometer").attr("units"), Some("mi"));
        assert_eq!(voi.one("price").attr("type"), Some("quote"));
        assert_eq!(voi.one("price").attr("currency"), Some("USD"));
        assert_eq!(
            comments_of(voi),
            [
                "Displacement: 2487cc",
                "final_drive: awd",
                "seats: 5",
                "abs: true",
                "packages: tow, sun"
            ]
        );

        let trade = vehicles[1];
        assert_eq!(trade.attr("interest"), Some("trade-in"));
        assert_eq!(
            trade.names(),
            [
                "year",
                "make",
                "model",
                "vin",
                "trim",
                "transmission",
                "odometer",
                "condition"
            ]
        );
        assert_eq!(trade.one("trim").text, "Touring");
        assert_eq!(trade.one("vin").text, "JM1BM1V79G1000001");
        assert_eq!(trade.one("transmission").text, "M");
        assert_eq!(trade.one("odometer").text, "88000");
        assert_eq!(trade.one("condition").text, "fair");

        let contact = p.at("customer/contact");
        assert_eq!(contact.one("name").text, "Ben Okafor");
        let address = contact.one("address");
        assert_eq!(
            address.names(),
            [
                "street",
                "street",
                "city",
                "regioncode",
                "postalcode",
                "country"
            ]
        );
        let streets = address.all("street");
        assert_eq!(streets[0].attr("line"), Some("1"));
        assert_eq!(streets[0].text, "1 Main St");
        assert_eq!(streets[1].attr("line"), Some("2"));
        assert_eq!(streets[1].text, "Apt 4");
        assert_eq!(address.one("city").text, "Oakland");
        assert_eq!(address.one("regioncode").text, "CA");
        assert_eq!(address.one("postalcode").text, "94607");
        assert_eq!(address.one("country").text, "US");

        assert_eq!(
            p.at("customer/comments").text,
            "Looking for a family SUV.\n\
             Requested sales appointment: 2026-12-05 10:30 PST\n\
             Appointment notes: Bring the title.\n\
             Preferred contact: sms\n\
             Contact consent granted 2026-04-30T10:16:00Z for phone, sms, expires 2026-07-30T10:16:00Z: \"OK to text me.\""
        );
        let provider = p.one("provider");
        assert_eq!(provider.names(), ["name", "url"]);
        assert_eq!(provider.one("name").text, "acme-agent");
        assert_eq!(provider.one("url").text, "https://acme.example/agent");
    }

    #[test]
    fn customer_only_lead_gets_the_placeholder_vehicle() {
        let mut request = spec_example();
        let obj = request.as_object_mut().expect("object");
        obj.remove("vehicle_of_interest");
        obj.remove("trade_in");
        obj.insert("appointment".into(), json!({"appointment_type": "service"}));
        let adf = parse_back(&render_with(&request));
        let p = adf.one("prospect");
        let vehicles = p.all("vehicle");
        assert_eq!(vehicles.len(), 1);
        let v = vehicles[0];
        assert_eq!(v.attr("interest"), Some("buy"));
        assert_eq!(v.attr("status"), None);
        assert_eq!(v.names(), ["year", "make", "model", "comments"]);
        assert!(v.one("year").text.is_empty());
        assert!(v.one("make").text.is_empty());
        assert!(v.one("model").text.is_empty());
        assert_eq!(v.one("comments").text, GENERAL_INQUIRY);
        assert!(
            p.at("customer/comments")
                .text
                .starts_with("Requested service appointment: time to be arranged\n")
        );
    }

    #[test]
    fn trade_in_only_lead_still_leads_with_the_placeholder() {
        let mut request = spec_example();
        request
            .as_object_mut()
            .expect("object")
            .remove("vehicle_of_interest");
        request["appointment"] = json!({"appointment_type": "trade_in",
            "appointment_at": "2026-05-02T17:00:00-07:00", "duration_minutes": 30});
        let adf = parse_back(&render_with(&request));
        let p = adf.one("prospect");
        let interests: Vec<Option<&str>> = p
            .all("vehicle")
            .iter()
            .map(|v| v.attr("interest"))
            .collect();
        assert_eq!(interests, [Some("buy"), Some("trade-in")]);
        assert!(
            p.at("customer/comments")
                .text
                .starts_with("Requested trade-in appraisal: 2026-05-02 17:00 PDT (30 min)\n")
        );
    }

    #[test]
    fn cpo_displacement_and_attributes_merge_into_one_comments() {
        let mut request = spec_example();
        request["vehicle_of_interest"] = json!({"year": 2021, "make": "Harley-Davidson",
            "model": "Street Glide", "condition": "cpo", "vehicle_type": "motorcycle",
            "displacement_cc": 1868, "transmission": "6-speed manual",
            "other_attributes": {"final_drive": "belt", "engine_stroke": 4}});
        let adf = parse_back(&render_with(&request));
        let voi = adf.one("prospect").all("vehicle")[0];
        assert_eq!(voi.all("comments").len(), 1);
        assert_eq!(
            voi.one("comments").text,
            "certified pre-owned; Displacement: 1868cc; final_drive: belt; engine_stroke: 4"
        );
        assert_eq!(voi.attr("status"), Some("used"));
        assert_eq!(voi.one("transmission").text, "M");
    }

    #[test]
    fn unfoldable_transmission_goes_to_comments() {
        let mut request = spec_example();
        request["vehicle_of_interest"]["transmission"] = json!("sequential");
        let adf = parse_back(&render_with(&request));
        let voi = adf.one("prospect").all("vehicle")[0];
        assert!(voi.all("transmission").is_empty());
        assert_eq!(
            voi.one("comments").text,
            "certified pre-owned; Transmission: sequential"
        );
    }

    #[test]
    fn transmission_folding() {
        for (text, folded) in [
            ("automatic", Some("A")),
            ("Automatic", Some("A")),
            ("8-speed automatic", Some("A")),
            ("10-Speed Automatic w/OD", Some("A")),
            ("cvt", Some("A")),
            ("CVT", Some("A")),
            ("e-CVT", Some("A")),
            ("dct", Some("A")),
            ("7-speed DCT", Some("A")),
            ("DSG", Some("A")),
            ("semi-automatic", Some("A")),
            ("automated manual", Some("A")),
            ("single-speed", Some("A")),
            ("A/T", Some("A")),
            ("A", Some("A")),
            ("manual", Some("M")),
            ("6-speed manual", Some("M")),
            ("Manual", Some("M")),
            ("M/T", Some("M")),
            ("stick shift", Some("M")),
            ("M", Some("M")),
            ("sequential", None),
            ("", None),
        ] {
            assert_eq!(fold_transmission(text), folded, "{text:?}");
        }
    }

    #[test]
    fn test_drive_only_changes_the_interest() {
        let mut request = spec_example();
        request["appointment"]["appointment_type"] = json!("sales");
        let adf = parse_back(&render_with(&request));
        let voi = adf.one("prospect").all("vehicle")[0];
        assert_eq!(voi.attr("interest"), Some("buy"));
    }

    #[test]
    fn xml_text_drops_what_xml_cannot_carry() {
        assert_eq!(
            xml_text("a\u{0}b\u{1f}c\td\r\ne\rf\u{fffe}"),
            "abc\td\ne\nf"
        );
        assert_eq!(xml_text("Zoë ]]> &"), "Zoë ]]> &");
    }
}
