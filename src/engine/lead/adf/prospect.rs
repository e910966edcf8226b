//! The prospect: the request mapped before any XML is written (customer, contact address,
//! comments, vendor, provider), and the document written from it.

use std::io;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesPI, Event};
use serde_json::Value;

use super::context::{AdfContext, ID_SOURCE};
use super::vehicle::{Role, VehicleBlock};
use super::xml::{leaf, scalar_at, str_at, text};

/// The document's content, mapped from the request before any XML is written.
#[derive(Debug)]
pub(super) struct Prospect {
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
struct AddressBlock {
    streets: Vec<String>,
    city: Option<String>,
    regioncode: Option<String>,
    postalcode: Option<String>,
    country: String,
}

impl Prospect {
    pub(super) fn from_request(request: &Value, ctx: &AdfContext<'_>) -> Prospect {
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

    pub(super) fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
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
