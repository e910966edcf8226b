//! The project's AAP JSON Schemas (draft 2020-12), compiled once at load, and the rules that turn
//! a list of schema failures into one AAP error code (docs/protocol.md §Validation failures).
//!
//! Validation reports every failure at once, each at the offending field: `required` at the
//! missing property's pointer, `additionalProperties` at the extra key's pointer.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Registry, ValidationError, Validator};
use serde_json::Value;

use crate::error::{AapCode, AapError, Violation};
use crate::protocol::vehicle::Vehicle;
use crate::protocol::{Payload, Reply, Skill};

mod listing;
mod page;

/// Base URI the schema files are registered under (their `$id`s); never fetched.
const BASE: &str = "https://aap-gateway.invalid/schemas/";

/// Every schema file, compiled into the binary so the gateway needs no files at run time.
const FILES: &[(&str, &str)] = &[
    (
        "address.schema.json",
        include_str!("../../schemas/address.schema.json"),
    ),
    (
        "dealer-fee.schema.json",
        include_str!("../../schemas/dealer-fee.schema.json"),
    ),
    (
        "vehicle.schema.json",
        include_str!("../../schemas/vehicle.schema.json"),
    ),
    (
        "customer.schema.json",
        include_str!("../../schemas/customer.schema.json"),
    ),
    (
        "consent-grant.schema.json",
        include_str!("../../schemas/consent-grant.schema.json"),
    ),
    (
        "appointment.schema.json",
        include_str!("../../schemas/appointment.schema.json"),
    ),
    (
        "facets.schema.json",
        include_str!("../../schemas/facets.schema.json"),
    ),
    (
        "dealer-information.schema.json",
        include_str!("../../schemas/dealer-information.schema.json"),
    ),
    (
        "dealer-information-request.schema.json",
        include_str!("../../schemas/dealer-information-request.schema.json"),
    ),
    (
        "dealer-information-response.schema.json",
        include_str!("../../schemas/dealer-information-response.schema.json"),
    ),
    (
        "inventory-facets-request.schema.json",
        include_str!("../../schemas/inventory-facets-request.schema.json"),
    ),
    (
        "inventory-facets-response.schema.json",
        include_str!("../../schemas/inventory-facets-response.schema.json"),
    ),
    (
        "inventory-search-request.schema.json",
        include_str!("../../schemas/inventory-search-request.schema.json"),
    ),
    (
        "inventory-search-response.schema.json",
        include_str!("../../schemas/inventory-search-response.schema.json"),
    ),
    (
        "vehicle-detail-request.schema.json",
        include_str!("../../schemas/vehicle-detail-request.schema.json"),
    ),
    (
        "vehicle-detail-response.schema.json",
        include_str!("../../schemas/vehicle-detail-response.schema.json"),
    ),
    (
        "lead-submit-request.schema.json",
        include_str!("../../schemas/lead-submit-request.schema.json"),
    ),
    (
        "lead-submit-response.schema.json",
        include_str!("../../schemas/lead-submit-response.schema.json"),
    ),
];

/// The schema files as `(name, text)`, e.g. for docs/reference.md, generated from them.
pub fn files() -> &'static [(&'static str, &'static str)] {
    FILES
}

/// A schema file that does not parse or compile; a build defect, reported at start-up.
#[derive(Debug, thiserror::Error)]
#[error("schema `{file}`: {message}")]
pub struct SchemaError {
    pub file: String,
    pub message: String,
}

/// The compiled validators: one per request, one per response, and `DealerInformation`.
pub struct Schemas {
    requests: [Validator; 5],
    responses: [Validator; 5],
    /// The search response again, for pages held as built (`protocol::vehicle`); shared with
    /// the mappings that drop listings the schema refuses ([`Listings`]).
    search_pages: Arc<listing::SearchPages>,
    dealer_information: Validator,
}

/// The listing schema (the search response's `vehicles` items), shareable by the mappings
/// that check listings as they map them.
#[derive(Clone)]
pub struct Listings(Arc<listing::SearchPages>);

impl std::fmt::Debug for Listings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Listings")
    }
}

impl Listings {
    /// Whether the listing schema accepts one listing held as JSON; its failures
    /// (`location (keyword)`, never a value) when not.
    pub fn check_json(&self, vehicle: &Value) -> Result<(), Vec<String>> {
        self.0.check_json(vehicle)
    }

    /// Keeps the listings the schema accepts, in order, and those `checked` leaves out; gives
    /// how many were dropped and the first dropped one's failures (`location (keyword)`, never a
    /// value).
    pub fn retain_valid(
        &self,
        vehicles: &mut Vec<Vehicle>,
        checked: impl Fn(&Vehicle) -> bool,
    ) -> (usize, Vec<String>) {
        self.0.retain_valid(vehicles, checked)
    }
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schemas { .. }")
    }
}

/// The gateway's schemas, loaded once for the unit tests of this module's parts.
#[cfg(test)]
fn loaded() -> &'static Schemas {
    static SCHEMAS: std::sync::LazyLock<Schemas> =
        std::sync::LazyLock::new(|| Schemas::load().expect("schemas"));
    &SCHEMAS
}

impl Schemas {
    /// Parses and compiles every schema. Done once per `App`.
    pub fn load() -> Result<Schemas, SchemaError> {
        let mut resources = HashMap::with_capacity(FILES.len());
        for (file, text) in FILES {
            let value: Value = serde_json::from_str(text).map_err(|e| SchemaError {
                file: (*file).to_owned(),
                message: e.to_string(),
            })?;
            resources.insert(format!("{BASE}{file}"), value);
        }
        let registry = Registry::new()
            .extend(resources.clone())
            .and_then(|b| b.prepare())
            .map_err(|e| SchemaError {
                file: "(registry)".to_owned(),
                message: e.to_string(),
            })?;
        let compile = |file: &str| -> Result<Validator, SchemaError> {
            let reference = serde_json::json!({ "$ref": format!("{BASE}{file}") });
            jsonschema::draft202012::options()
                .should_validate_formats(true)
                .with_registry(&registry)
                .build(&reference)
                .map_err(|e| SchemaError {
                    file: file.to_owned(),
                    message: e.to_string(),
                })
        };
        let search_pages = {
            let file = Skill::InventorySearch.response_schema_file();
            let uri = format!("{BASE}{file}");
            listing::SearchPages::new(
                &uri,
                &resources[&uri],
                &resources,
                &listing::compiler(&registry),
            )
            .map_err(|message| SchemaError { file, message })?
        };
        let per_skill = |file_of: fn(Skill) -> String| -> Result<[Validator; 5], SchemaError> {
            let [a, b, c, d, e] = Skill::ALL.map(|s| compile(&file_of(s)));
            Ok([a?, b?, c?, d?, e?])
        };
        Ok(Schemas {
            requests: per_skill(Skill::request_schema_file)?,
            responses: per_skill(Skill::response_schema_file)?,
            search_pages: Arc::new(search_pages),
            dealer_information: compile("dealer-information.schema.json")?,
        })
    }

    /// Every failure of an AAP request object (the DataPart `data`). Empty = valid.
    pub fn check_request(&self, skill: Skill, data: &Value) -> Vec<Violation> {
        violations(&self.requests[index(skill)], data)
    }

    /// Every failure of an AAP response object (`{type, data, message?}`). Empty = valid.
    pub fn check_response(&self, skill: Skill, response: &Payload) -> Vec<Violation> {
        let validator = &self.responses[index(skill)];
        match response {
            Payload::Json(value) => violations(validator, value),
            // Checked as held; the failures of one that fails are read off its JSON value.
            Payload::Search(page) if self.search_pages.is_valid(page) => Vec::new(),
            Payload::Search(_) => violations(validator, &response.to_value()),
        }
    }

    /// The reply a mapping built, or `InvalidReply` naming the mapping: a non-conforming payload
    /// is never sent.
    pub fn check_reply(&self, mapping: &str, reply: Reply) -> Result<Reply, AapError> {
        let violations = tracing::debug_span!("validate_response")
            .in_scope(|| self.check_response(reply.skill, &reply.payload));
        if violations.is_empty() {
            Ok(reply)
        } else {
            Err(AapError::InvalidReply {
                skill: reply.skill.id().to_owned(),
                mapping: mapping.to_owned(),
                violations,
            })
        }
    }

    /// The listing check, for the runtime to drop the listings a mapping built wrong before they
    /// are counted (docs/mappings.md §Records a mapping cannot map).
    pub fn listings(&self) -> Listings {
        Listings(Arc::clone(&self.search_pages))
    }

    /// Every failure of a `DealerInformation` object (a dealer profile).
    pub fn check_dealer_information(&self, data: &Value) -> Vec<Violation> {
        violations(&self.dealer_information, data)
    }
}

fn index(skill: Skill) -> usize {
    match skill {
        Skill::DealerInformation => 0,
        Skill::InventoryFacets => 1,
        Skill::InventorySearch => 2,
        Skill::InventoryVehicle => 3,
        Skill::LeadSubmit => 4,
    }
}

fn violations(validator: &Validator, instance: &Value) -> Vec<Violation> {
    // Nearly every instance is valid: `is_valid` stops at nothing and builds no error values,
    // several times cheaper than walking `iter_errors` to its empty end.
    if validator.is_valid(instance) {
        return Vec::new();
    }
    let mut out: Vec<Violation> = Vec::new();
    for error in validator.iter_errors(instance) {
        push_error(&mut out, &error);
    }
    out
}

/// Converts one library error into output units, one per offending field.
fn push_error(out: &mut Vec<Violation>, error: &ValidationError<'_>) {
    let at = error.instance_path().as_str();
    let mut push = |instance_location: String, keyword: &str, message: String| {
        let v = Violation {
            instance_location,
            keyword: keyword.to_owned(),
            error: message,
        };
        if !out.contains(&v) {
            out.push(v);
        }
    };
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            push(child(at, name), "required", "is required".to_owned());
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            for key in unexpected {
                push(
                    child(at, key),
                    error.kind().keyword(),
                    "is not allowed".to_owned(),
                );
            }
        }
        ValidationErrorKind::AnyOf { context } => match required_alternatives(context) {
            Some(names) => push(
                at.to_owned(),
                "required",
                format!("must have at least one of: {}", names.join(", ")),
            ),
            None => push(
                at.to_owned(),
                "anyOf",
                "must match one of the allowed shapes".to_owned(),
            ),
        },
        kind => push(at.to_owned(), kind.keyword(), message(kind)),
    }
}

/// When every `anyOf` branch failed only on `required`, the names it wanted (e.g. vin / stock /
/// vehicle_id): that is a missing field, not a malformed one.
fn required_alternatives(context: &[Vec<ValidationError<'static>>]) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for branch in context {
        if branch.is_empty() {
            return None;
        }
        for e in branch {
            match e.kind() {
                ValidationErrorKind::Required { property } => {
                    names.push(property.as_str().unwrap_or_default().to_owned());
                }
                _ => return None,
            }
        }
    }
    (!names.is_empty()).then_some(names)
}

fn child(at: &str, name: &str) -> String {
    crate::settings::yaml::push_pointer(at, name)
}

/// Short messages (`must be integer`), as docs/protocol.md §Validation failures shows them.
fn message(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::Type {
            kind: TypeKind::Single(t),
        } => format!("must be {t}"),
        ValidationErrorKind::Type {
            kind: TypeKind::Multiple(set),
        } => {
            let names: Vec<String> = set.iter().map(|t| t.to_string()).collect();
            format!("must be one of types: {}", names.join(", "))
        }
        ValidationErrorKind::Enum { options } => {
            let names: Vec<String> = options
                .as_array()
                .map(|a| a.iter().map(plain).collect())
                .unwrap_or_default();
            format!("must be one of: {}", names.join(", "))
        }
        ValidationErrorKind::Constant { expected_value } => format!("must be {expected_value}"),
        ValidationErrorKind::Pattern { pattern } => format!("must match pattern {pattern}"),
        ValidationErrorKind::Format { format } => format!("must be a valid {format}"),
        ValidationErrorKind::MinLength { limit } => format!("must be at least {limit} characters"),
        ValidationErrorKind::MaxLength { limit } => format!("must be at most {limit} characters"),
        ValidationErrorKind::Minimum { limit } => format!("must be >= {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be <= {limit}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => format!("must be > {limit}"),
        ValidationErrorKind::ExclusiveMaximum { limit } => format!("must be < {limit}"),
        ValidationErrorKind::MinItems { limit } => format!("must have at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!("must have at most {limit} items"),
        ValidationErrorKind::UniqueItems => "must not contain duplicate items".to_owned(),
        ValidationErrorKind::FalseSchema => "is not allowed".to_owned(),
        ValidationErrorKind::OneOfNotValid { .. } => {
            "must match exactly one allowed shape".to_owned()
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            "matches more than one allowed shape".to_owned()
        }
        _ => format!("fails `{}`", kind.keyword()),
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

// === code choice ===

const SALE_CONDITIONS: [&str; 3] = ["new", "used", "cpo"];
const TRADE_IN_CONDITIONS: [&str; 4] = ["excellent", "good", "fair", "poor"];

/// Picks the one AAP code for a failed request (docs/protocol.md §Validation failures).
pub fn classify(skill: Skill, data: &Value, violations: &[Violation]) -> AapCode {
    let is_consent = |v: &Violation| {
        v.instance_location == "/consent" || v.instance_location.starts_with("/consent/")
    };
    let consent_absent =
        |v: &Violation| v.instance_location == "/consent" && v.keyword == "required";
    if skill == Skill::LeadSubmit && violations.iter().any(consent_absent) {
        return if violations.len() == 1 {
            AapCode::ContactConsentRequired
        } else {
            AapCode::SchemaValidationFailed
        };
    }
    if violations.is_empty() {
        return AapCode::SchemaValidationFailed;
    }
    if skill == Skill::LeadSubmit && violations.iter().all(is_consent) {
        return AapCode::InvalidConsent;
    }
    if violations.iter().all(|v| is_wrong_vocabulary(data, v)) {
        return AapCode::InvalidCondition;
    }
    if violations.iter().all(|v| v.keyword == "required") {
        return AapCode::MissingRequiredField;
    }
    AapCode::SchemaValidationFailed
}

/// A condition field holding a value of the *other* AAP condition vocabulary.
fn is_wrong_vocabulary(data: &Value, v: &Violation) -> bool {
    let loc = v.instance_location.as_str();
    let other: &[&str] = if loc == "/trade_in/condition" {
        &SALE_CONDITIONS
    } else if loc == "/vehicle_of_interest/condition" || is_filter_condition(loc) {
        &TRADE_IN_CONDITIONS
    } else {
        return false;
    };
    data.pointer(loc)
        .and_then(Value::as_str)
        .is_some_and(|s| other.contains(&s))
}

fn is_filter_condition(loc: &str) -> bool {
    loc.strip_prefix("/filters/condition/")
        .is_some_and(|i| i.bytes().all(|b| b.is_ascii_digit()))
}

// === whole calls ===

impl Schemas {
    /// Validates a call's request object, adding a `/type` failure when the part's `mediaType`
    /// names another skill, and picks the error code.
    pub fn validate_call(
        &self,
        skill: Skill,
        call: &crate::protocol::Call,
    ) -> Result<(), crate::error::AapError> {
        let mut violations = self.check_request(skill, &call.data);
        if let Some(declared) = call.declared.filter(|d| *d != skill) {
            let v = Violation {
                instance_location: "/type".to_owned(),
                keyword: "const".to_owned(),
                error: format!(
                    "does not match the part's mediaType {}",
                    declared.request_media_type()
                ),
            };
            if !violations.contains(&v) {
                violations.insert(0, v);
            }
        }
        if violations.is_empty() {
            return Ok(());
        }
        let code = classify(skill, &call.data, &violations);
        Err(crate::error::AapError::Validation { code, violations })
    }
}
