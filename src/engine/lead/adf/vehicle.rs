//! The `<vehicle>` blocks: the vehicle of interest (or the general-inquiry placeholder) and the
//! trade-in, in DTD order, with what ADF has no element for folded into `<comments>`.

use std::io;

use quick_xml::Writer;
use serde_json::Value;

use super::context::GENERAL_INQUIRY;
use super::xml::{attribute_text, leaf, scalar_at, str_at, text};

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

#[derive(Debug)]
pub(super) struct VehicleBlock {
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

/// Which of the lead's vehicles a block stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    OfInterest,
    TradeIn,
}

impl VehicleBlock {
    pub(super) fn from_vehicle(v: &Value, role: Role, interest: &'static str) -> VehicleBlock {
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
    pub(super) fn placeholder() -> VehicleBlock {
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

    pub(super) fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
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
