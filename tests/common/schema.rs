//! Reply validation against the project's own AAP schemas (`schemas/`, the ones the gateway
//! compiles in), formats checked: what every skill suite asserts of every reply it gets.

use std::sync::LazyLock;

use aap_gateway::protocol::Skill;
use aap_gateway::schema::Schemas;
use serde_json::Value;

static SCHEMAS: LazyLock<Schemas> =
    LazyLock::new(|| Schemas::load().expect("the compiled-in AAP schemas load"));

/// Asserts that an AAP response object (the DataPart `data`: `{type, data, …}`) is valid.
pub fn assert_reply_valid(payload: &Value) {
    let kind = payload["type"].as_str().expect("response type");
    let skill = Skill::ALL
        .into_iter()
        .find(|s| s.response_type() == kind)
        .unwrap_or_else(|| panic!("`{kind}` is no AAP response type"));
    let held = aap_gateway::protocol::Payload::Json(std::sync::Arc::new(payload.clone()));
    let violations = SCHEMAS.check_response(skill, &held);
    assert!(
        violations.is_empty(),
        "{kind} fails the AAP schema: {violations:#?}\n{payload}"
    );
}
