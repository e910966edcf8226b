//! The MCP tools: one per AAP skill, named after it (`inventory.search` → `inventory_search`),
//! with an `inputSchema` that is the skill's AAP request schema without its `type`
//! discriminator and an `outputSchema` that is the response schema's `data`, both
//! self-contained ([`super::schema`]) and built once per process ([`CATALOGUE`]).
//!
//! Descriptions are written for a model choosing and filling a tool: what each filter means,
//! its unit, and that a lead needs the buyer's explicit consent. They are laid over the
//! schemas by JSON Pointer; a unit test fails when a pointer no longer names a property.
//!
//! A call's `arguments` become the AAP request object (`type` added) of a [`Call`]; a reply
//! becomes `structuredContent` (its `data`) plus a short text summary.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use super::schema::Files;
use crate::error::{AapError, FieldViolation};
use crate::protocol::{Call, Payload, Reply, Skill, SkillRef, json_text};

/// Every tool, built once from the compiled-in schemas (`Err`: a build defect, which the unit
/// tests catch; a client then gets an internal error for `tools/list`).
pub(super) static CATALOGUE: LazyLock<Result<Catalogue, String>> = LazyLock::new(Catalogue::build);

/// The tools of all five skills.
#[derive(Debug)]
pub(super) struct Catalogue {
    /// In [`Skill::ALL`] order.
    tools: Vec<(Skill, Value)>,
}

/// The tool name of a skill: its id with `_` for `.` (MCP tool names are best kept to
/// `[A-Za-z0-9_-]`, which every client accepts).
pub(super) fn tool_name(skill: Skill) -> &'static str {
    match skill {
        Skill::DealerInformation => "dealer_information",
        Skill::InventoryFacets => "inventory_facets",
        Skill::InventorySearch => "inventory_search",
        Skill::InventoryVehicle => "inventory_vehicle",
        Skill::LeadSubmit => "lead_submit",
    }
}

/// The skill a tool name names.
pub(super) fn skill_of(name: &str) -> Option<Skill> {
    Skill::ALL.into_iter().find(|s| tool_name(*s) == name)
}

impl Catalogue {
    fn build() -> Result<Catalogue, String> {
        let files = Files::parse()?;
        let tools = Skill::ALL
            .into_iter()
            .map(|skill| Ok((skill, tool(&files, skill)?)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Catalogue { tools })
    }

    /// The `tools/list` entries of the skills `served`, in catalogue order.
    pub(super) fn list(&self, served: &[Skill]) -> Vec<&Value> {
        self.tools
            .iter()
            .filter(|(skill, _)| served.contains(skill))
            .map(|(_, tool)| tool)
            .collect()
    }
}

/// One tool's `tools/list` entry.
fn tool(files: &Files, skill: Skill) -> Result<Value, String> {
    let mut input = files.inlined(&skill.request_schema_file(), "")?;
    let Value::Object(object) = &mut input else {
        return Err(format!(
            "{}: the request schema is not an object",
            skill.id()
        ));
    };
    // The tool is the discriminator: `type` is added to the arguments, never asked for.
    for key in ["title", "description"] {
        object.remove(key);
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.remove("type");
    }
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| r != "type");
    }
    let mut output = files.inlined(&skill.response_schema_file(), "/properties/data")?;
    // MCP requires an object at the root; a reply whose `data` is an `allOf` of object schemas
    // (vehicle detail) says so once more where clients look.
    match &mut output {
        Value::Object(o) if o.get("type").is_none_or(|t| t == "object") => {
            o.insert("type".to_owned(), json!("object"));
        }
        _ => return Err(format!("{}: the reply data is not an object", skill.id())),
    }
    for (pointer, text) in descriptions(skill) {
        let Some(Value::Object(property)) = input.pointer_mut(&pointer) else {
            return Err(format!("{}: no property at {pointer}", skill.id()));
        };
        property.insert("description".to_owned(), json!(text));
    }
    let (read_only, idempotent) = match skill {
        Skill::LeadSubmit => (false, true),
        Skill::DealerInformation
        | Skill::InventoryFacets
        | Skill::InventorySearch
        | Skill::InventoryVehicle => (true, true),
    };
    Ok(json!({
        "name": tool_name(skill),
        "title": skill.name(),
        "description": tool_description(skill),
        "inputSchema": input,
        "outputSchema": output,
        "annotations": {
            "title": skill.name(),
            "readOnlyHint": read_only,
            "destructiveHint": false,
            "idempotentHint": idempotent,
            "openWorldHint": false,
        },
    }))
}

fn tool_description(skill: Skill) -> &'static str {
    match skill {
        Skill::DealerInformation => {
            "The dealership's profile: its locations (rooftops) with addresses, phone numbers, \
             e-mail addresses, opening hours, what each location offers, and dealer fees. Takes \
             no arguments. The rooftop names are the values of the `rooftops` filter of \
             inventory_search and inventory_facets."
        }
        Skill::InventorySearch => {
            "Search this dealer's vehicles for sale (in stock, in transit or with a deal \
             pending; sold vehicles never appear). Filters combine with AND across fields and OR \
             within a list; text filters match a whole value, case-insensitively (use `query` \
             for words inside descriptions). Prices are whole US dollars (`price` already \
             includes mandatory dealer fees, not taxes), mileage is in miles. Returns `total` \
             (all matches) and one page of `vehicles`: 20 by default, at most 100; ask for the \
             next page with `pagination.skip`."
        }
        Skill::InventoryFacets => {
            "What this dealer has, counted: for each make, model, trim, condition, body, fuel, \
             color, rooftop and more, how many vehicles for sale have that value, plus the \
             price, year and mileage ranges; optionally under the same filters as \
             inventory_search. Each count equals the total a search adding that value would \
             find. Use it to learn the exact values the filters accept."
        }
        Skill::InventoryVehicle => {
            "Full detail of one vehicle for sale, by `vin`, `stock` number or `vehicle_id` (give \
             at least one, as inventory_search returned it): price and fees, equipment, \
             photos, location. VEHICLE_NOT_FOUND when the dealer has no such vehicle, \
             VEHICLE_UNAVAILABLE when it is sold."
        }
        Skill::LeadSubmit => {
            "Send the buyer's request to be contacted by this dealer — optionally about a \
             vehicle, a trade-in, or an appointment such as a test drive. Only with the buyer's \
             explicit consent: ask the buyer first, then send `consent` with when they agreed \
             (`granted_at`), the channels they allow (`allowed_channels`), the exact words \
             they agreed to (`consent_text`) and `scope: [\"lead_submission\"]`. Never invent \
             contact details or consent. Set `idempotency_key` and resend the same lead with \
             the same key after a timeout or error: the dealer never gets it twice. An \
             appointment is booked only when the reply's appointment status is `confirmed`."
        }
    }
}

/// The filters shared by search and facets, described for a model; under `base`.
const FILTERS: &[(&str, &str)] = &[
    (
        "make",
        "Manufacturers, e.g. [\"Toyota\"]; any of them. Whole value, case-insensitive.",
    ),
    (
        "model",
        "Models, e.g. [\"Camry\", \"RAV4\"]; any of them. Whole value, case-insensitive.",
    ),
    (
        "trim",
        "Trim levels, e.g. [\"XLE\"]; any of them. Whole value, case-insensitive.",
    ),
    (
        "condition",
        "new, used or cpo (certified pre-owned); any of them.",
    ),
    (
        "vehicle_type",
        "car, motorcycle, trailer, rv or other; any of them. A vehicle without a type is a car.",
    ),
    (
        "transmission",
        "Transmission values as inventory_facets lists them (e.g. [\"Automatic\"]).",
    ),
    (
        "fuel",
        "Fuel types as inventory_facets lists them (e.g. [\"Hybrid\", \"Electric\"]).",
    ),
    (
        "driveline",
        "Drivelines as inventory_facets lists them (e.g. [\"AWD\"]).",
    ),
    (
        "body",
        "Body styles as inventory_facets lists them (e.g. [\"SUV\", \"Sedan\"]).",
    ),
    (
        "exterior_color",
        "Exterior colors, whole value (e.g. [\"White\"]).",
    ),
    (
        "interior_color",
        "Interior colors, whole value (e.g. [\"Black\"]).",
    ),
    (
        "charge_port",
        "EV charge port types (e.g. [\"CCS\", \"NACS\"]).",
    ),
    (
        "electric_range_mi_min",
        "Least electric range, in miles (inclusive).",
    ),
    (
        "electric_range_mi_max",
        "Most electric range, in miles (inclusive).",
    ),
    (
        "dc_fast_charge",
        "true: only vehicles that can DC fast charge; false: only those that cannot or do not say.",
    ),
    (
        "displacement_cc_min",
        "Least engine displacement, in cubic centimetres (inclusive; motorcycles).",
    ),
    (
        "displacement_cc_max",
        "Most engine displacement, in cubic centimetres (inclusive; motorcycles).",
    ),
    (
        "rooftops",
        "Names of the dealer's locations (from dealer_information); any of them.",
    ),
    ("year_min", "Oldest model year (inclusive)."),
    ("year_max", "Newest model year (inclusive)."),
    (
        "price_min",
        "Lowest price, whole US dollars (inclusive). Vehicles without a price never match.",
    ),
    (
        "price_max",
        "Highest price, whole US dollars (inclusive). Vehicles without a price never match.",
    ),
    (
        "mileage_max",
        "Highest odometer reading, in miles (inclusive).",
    ),
    ("vin", "One exact 17-character VIN."),
    ("stock", "One exact dealer stock number."),
    (
        "query",
        "Free-text words that must all occur in the year, make, model, trim, body, color, fuel, \
         features or description (at most 200 characters).",
    ),
];

/// Descriptions laid over a tool's `inputSchema`, by JSON Pointer.
fn descriptions(skill: Skill) -> Vec<(String, &'static str)> {
    let filters = |out: &mut Vec<(String, &'static str)>| {
        out.push((
            "/properties/filters".to_owned(),
            "Which vehicles to consider; every field is optional, an absent or empty one \
             constrains nothing.",
        ));
        for (name, text) in FILTERS {
            out.push((format!("/properties/filters/properties/{name}"), *text));
        }
    };
    let mut out = Vec::new();
    match skill {
        Skill::DealerInformation => {}
        Skill::InventoryFacets => filters(&mut out),
        Skill::InventorySearch => {
            filters(&mut out);
            out.extend([
                (
                    "/properties/pagination/properties/skip".to_owned(),
                    "Matches to skip: 0 for the first page, then skip + limit for the next.",
                ),
                (
                    "/properties/pagination/properties/limit".to_owned(),
                    "Vehicles per page: 20 by default, at most 100 are returned (the reply \
                     says how many).",
                ),
                (
                    "/properties/sort".to_owned(),
                    "Order of the results; vehicles lacking the sort value come last.",
                ),
                (
                    "/properties/privacy/properties/anonymous".to_owned(),
                    "A hint that the buyer wants no tracking; searches never carry personal data.",
                ),
            ]);
        }
        Skill::InventoryVehicle => out.extend([
            (
                "/properties/vin".to_owned(),
                "The vehicle's 17-character VIN.",
            ),
            (
                "/properties/stock".to_owned(),
                "The dealer's stock number, exactly as inventory_search returned it.",
            ),
            (
                "/properties/vehicle_id".to_owned(),
                "The dealer's vehicle id, exactly as inventory_search returned it.",
            ),
        ]),
        Skill::LeadSubmit => out.extend([
            (
                "/properties/customer".to_owned(),
                "The buyer, as they gave their details: first and last name and at least an \
                 e-mail address or a phone number (E.164, e.g. +14155550123).",
            ),
            (
                "/properties/consent".to_owned(),
                "The buyer's explicit consent to be contacted by this dealer about this \
                 request. Ask the buyer; never assume it. `granted_at`: when they agreed \
                 (RFC 3339, not in the future); `allowed_channels`: the channels they accept \
                 (email, phone, sms), which must include their preferred contact; \
                 `consent_text`: the exact words they agreed to; `scope`: \
                 [\"lead_submission\"].",
            ),
            (
                "/properties/source_agent".to_owned(),
                "Who is sending the lead: your assistant's name (and URL if any).",
            ),
            (
                "/properties/vehicle_of_interest".to_owned(),
                "The vehicle the buyer asks about, e.g. {\"vin\": …} from inventory_search.",
            ),
            (
                "/properties/trade_in".to_owned(),
                "A vehicle the buyer wants to trade in; condition is excellent, good, fair or \
                 poor.",
            ),
            (
                "/properties/appointment".to_owned(),
                "An appointment the buyer asks for (sales, service, test_drive, trade_in), \
                 optionally at a time; the dealer confirms, proposes other times, or records \
                 the request.",
            ),
            (
                "/properties/message".to_owned(),
                "The buyer's message to the dealer, in their words (at most 4000 characters).",
            ),
            (
                "/properties/idempotency_key".to_owned(),
                "A unique key you choose for this lead (1-128 characters). Resend the same \
                 lead with the same key to retry safely; a changed lead under a used key is \
                 refused (IDEMPOTENCY_CONFLICT).",
            ),
        ]),
    }
    out
}

/// The AAP request object of a `tools/call` for `skill`: its `arguments` (an object, or
/// absent for none) with the skill's `type`, whole-valued floats made integers as on every
/// binding. A `type` the caller sent is left for the request schema to judge.
pub(super) fn decode(skill: Skill, arguments: Option<Value>) -> Result<Call, AapError> {
    let mut data = match arguments {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(AapError::InvalidParams {
                violations: vec![FieldViolation {
                    field: "params.arguments".to_owned(),
                    description: "must be an object".to_owned(),
                }],
            });
        }
    };
    data.entry("type")
        .or_insert_with(|| Value::String(skill.request_type().to_owned()));
    let mut data = Value::Object(data);
    super::super::send_message::normalize_numbers(&mut data);
    Ok(Call {
        skill: SkillRef::Known(skill),
        declared: None,
        data,
        context_id: None,
    })
}

/// Appends a successful `CallToolResult` for `reply` to `out`: a short text summary, the
/// reply's `data` as `structuredContent` (written straight from the reply, a search page as
/// built).
pub(super) fn write_result(reply: &Reply, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"content\":[{\"type\":\"text\",\"text\":");
    json_text::write_str(out, &summary(reply));
    out.extend_from_slice(b"}],\"structuredContent\":");
    match &reply.payload {
        Payload::Json(value) => {
            json_text::write_value(out, value.get("data").unwrap_or(&Value::Null));
        }
        Payload::Search(page) => page.write_json(out),
    }
    out.extend_from_slice(b",\"isError\":false}");
}

/// One or two sentences a model can act on without parsing the structured content.
fn summary(reply: &Reply) -> String {
    let message = match &reply.payload {
        Payload::Json(value) => value.get("message").and_then(Value::as_str),
        Payload::Search(_) => None,
    };
    let text = match (&reply.payload, reply.skill) {
        (Payload::Search(page), _) => {
            let [total, skip, _] = page.counts();
            format!(
                "{total} vehicles match; this page holds {} of them from position {skip}. \
                 The listings are in structuredContent.vehicles.",
                page.vehicles().len()
            )
        }
        (Payload::Json(value), skill) => {
            let data = value.get("data").unwrap_or(&Value::Null);
            let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
            match skill {
                Skill::InventorySearch => format!(
                    "{} vehicles match; the listings are in structuredContent.vehicles.",
                    data.get("total").unwrap_or(&Value::Null)
                ),
                Skill::DealerInformation => {
                    let rooftops: Vec<String> = data
                        .get("rooftops")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|r| text(r, "name"))
                        .collect();
                    format!(
                        "{}: {} location(s): {}.",
                        text(data, "name").unwrap_or_else(|| "The dealer".to_owned()),
                        rooftops.len(),
                        rooftops.join("; ")
                    )
                }
                Skill::InventoryFacets => {
                    let makes: Vec<String> = data
                        .get("makes")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .take(5)
                        .filter_map(|m| {
                            Some(format!("{} {}", m.get("value")?.as_str()?, m.get("count")?))
                        })
                        .collect();
                    let keys: Vec<&str> = data
                        .as_object()
                        .map(|f| f.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    format!(
                        "Counts per value for: {}. Most common makes: {}.",
                        keys.join(", "),
                        if makes.is_empty() {
                            "none".to_owned()
                        } else {
                            makes.join(", ")
                        }
                    )
                }
                Skill::InventoryVehicle => {
                    let v = data.get("vehicle").unwrap_or(data);
                    let words: Vec<String> = ["year", "make", "model", "trim", "condition"]
                        .iter()
                        .filter_map(|k| v.get(*k).filter(|x| !x.is_null()))
                        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                        .collect();
                    let price = v
                        .get("price")
                        .and_then(Value::as_u64)
                        .map_or_else(|| "no advertised price".to_owned(), |p| format!("${p}"));
                    format!(
                        "{}, {price}, status {}, VIN {}.",
                        words.join(" "),
                        text(v, "status").unwrap_or_else(|| "unknown".to_owned()),
                        text(v, "vin").unwrap_or_else(|| "not given".to_owned())
                    )
                }
                Skill::LeadSubmit => {
                    let appointment = data
                        .get("appointment")
                        .and_then(|a| text(a, "status"))
                        .map(|s| format!(" Appointment: {s}."))
                        .unwrap_or_default();
                    format!(
                        "Lead {} {}.{appointment}",
                        text(data, "lead_id").unwrap_or_default(),
                        text(data, "status").unwrap_or_default()
                    )
                }
            }
        }
    };
    match message {
        Some(m) => format!("{text} {m}"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_skill_has_a_tool_with_self_contained_schemas() {
        let catalogue = Catalogue::build().expect("catalogue");
        let all = catalogue.list(&Skill::ALL);
        assert_eq!(all.len(), 5);
        for (skill, tool) in Skill::ALL.iter().zip(all) {
            assert_eq!(tool["name"], tool_name(*skill));
            assert_eq!(skill_of(tool_name(*skill)), Some(*skill));
            assert_eq!(tool["inputSchema"]["type"], "object");
            assert_eq!(tool["outputSchema"]["type"], "object");
            assert!(tool["inputSchema"]["properties"].get("type").is_none());
            let text = tool.to_string();
            assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
        }
        assert_eq!(catalogue.list(&[Skill::InventoryVehicle]).len(), 1);
    }

    #[test]
    fn every_filter_is_described_with_its_meaning() {
        let catalogue = Catalogue::build().expect("catalogue");
        let search = catalogue.list(&[Skill::InventorySearch])[0];
        let filters = search["inputSchema"]["properties"]["filters"]["properties"]
            .as_object()
            .expect("filters");
        for (name, schema) in filters {
            assert!(
                schema["description"].as_str().is_some_and(|d| d.len() > 10),
                "filter {name} has no description"
            );
        }
        let lead = catalogue.list(&[Skill::LeadSubmit])[0];
        assert!(
            lead["description"]
                .as_str()
                .unwrap()
                .contains("explicit consent")
        );
        assert!(
            lead["inputSchema"]["properties"]["consent"]["description"]
                .as_str()
                .unwrap()
                .contains("never assume")
        );
    }

    #[test]
    fn arguments_become_the_request_object() {
        let call = decode(
            Skill::InventorySearch,
            Some(json!({"filters": {"price_max": 20000.0}})),
        )
        .expect("call");
        assert_eq!(
            call.data,
            json!({"type": "inventory.search.request", "filters": {"price_max": 20000}})
        );
        let none = decode(Skill::DealerInformation, None).expect("call");
        assert_eq!(none.data, json!({"type": "dealer.information.request"}));
        assert!(matches!(
            decode(Skill::DealerInformation, Some(json!([1]))),
            Err(AapError::InvalidParams { .. })
        ));
    }
}
