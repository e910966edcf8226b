//! A2A `SendMessageRequest` ⇄ `Call` / `Reply`, shared by both bindings (the JSON-RPC `params`
//! and the HTTP+JSON body carry the same object).
//!
//! Applies the message rules of docs/protocol.md §Order of checks, steps 7–9, and §Envelope edges,
//! in order: envelope fields (all problems at once), `taskId`, the AAP DataPart and its
//! `mediaType`, `acceptedOutputModes`, then the skill named by `data.type`.

use serde_json::Value;

use crate::error::{AapCode, AapError, FieldViolation, Violation};
use crate::protocol::{Call, Reply, Skill, SkillRef, json_text};

/// Longest `contextId` accepted from a caller (docs/protocol.md §Envelope edges).
pub const MAX_CONTEXT_ID: usize = 256;

/// Decodes a `SendMessageRequest` object.
pub fn decode(params: Value) -> Result<Call, AapError> {
    let Value::Object(mut params) = params else {
        return Err(invalid_params(
            "params",
            "must be a SendMessageRequest object",
        ));
    };
    let Some(Value::Object(mut message)) = params.remove("message") else {
        return Err(invalid_params(
            "message",
            "is required and must be a Message object",
        ));
    };

    let mut problems = Vec::new();
    match message.get("messageId") {
        Some(Value::String(s)) if !s.is_empty() => {}
        _ => problems.push(field(
            "message.messageId",
            "is required and must be a non-empty string",
        )),
    }
    match message.get("role") {
        Some(Value::String(r)) if r == "ROLE_USER" => {}
        _ => problems.push(field("message.role", "must be ROLE_USER")),
    }
    let context_id = match message.remove("contextId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= MAX_CONTEXT_ID => Some(s),
        Some(_) => {
            problems.push(field(
                "message.contextId",
                "must be a non-empty string of at most 256 characters",
            ));
            None
        }
    };
    let mut parts = match message.remove("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        _ => {
            problems.push(field("message.parts", "must be a non-empty array of Parts"));
            Vec::new()
        }
    };
    let data_parts: Vec<usize> = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.get("data").is_some())
        .map(|(i, _)| i)
        .collect();
    if data_parts.len() > 1 {
        problems.push(field(
            "message.parts",
            "must carry exactly one AAP DataPart",
        ));
    }
    for &i in &data_parts {
        if !parts[i].get("data").is_some_and(Value::is_object) {
            problems.push(field(
                &format!("message.parts[{i}].data"),
                "must be an object",
            ));
        }
    }
    if !problems.is_empty() {
        return Err(AapError::InvalidParams {
            violations: problems,
        });
    }
    if message.get("taskId").is_some_and(|t| !t.is_null()) {
        return Err(AapError::TaskNotFound);
    }
    let Some(&index) = data_parts.first() else {
        return Err(AapError::ContentTypeNotSupported {
            detail: "the message has no AAP DataPart; send the request as a `data` part".to_owned(),
        });
    };
    let Value::Object(mut part) = parts.swap_remove(index) else {
        return Err(invalid_params("message.parts", "parts must be objects"));
    };
    let declared = match part.get("mediaType") {
        None | Some(Value::Null) => None,
        Some(Value::String(mt)) if essence(mt) == "application/json" => None,
        Some(Value::String(mt)) => match Skill::from_request_media_type(&essence(mt)) {
            Some(skill) => Some(skill),
            None => {
                return Err(AapError::ContentTypeNotSupported {
                    detail: format!("part mediaType `{mt}` is not an AAP request media type"),
                });
            }
        },
        Some(_) => {
            return Err(invalid_params(
                "message.parts.mediaType",
                "must be a string",
            ));
        }
    };
    let mut data = part.remove("data").unwrap_or(Value::Null);
    normalize_numbers(&mut data);

    let skill = match data.get("type") {
        Some(Value::String(t)) => match Skill::from_request_type(t) {
            Some(s) => SkillRef::Known(s),
            None => SkillRef::Unknown(t.clone()),
        },
        other => match declared {
            // The mediaType names the skill; its schema reports the bad or missing `type`.
            Some(s) => SkillRef::Known(s),
            None => return Err(untyped(other.is_none())),
        },
    };
    check_output_modes(params.get("configuration"), &skill)?;
    Ok(Call {
        skill,
        declared,
        data,
        context_id,
    })
}

/// `data.type` missing or not a string, with no mediaType to name the skill.
fn untyped(absent: bool) -> AapError {
    let (code, keyword, error) = if absent {
        (AapCode::MissingRequiredField, "required", "is required")
    } else {
        (AapCode::SchemaValidationFailed, "type", "must be string")
    };
    AapError::Validation {
        code,
        violations: vec![Violation {
            instance_location: "/type".to_owned(),
            keyword: keyword.to_owned(),
            error: error.to_owned(),
        }],
    }
}

/// docs/protocol.md §Order of checks, step 8: absent, empty, or naming `*/*`, `application/json`
/// or the skill's response type is fine; a list that excludes all of them cannot be served.
fn check_output_modes(configuration: Option<&Value>, skill: &SkillRef) -> Result<(), AapError> {
    let modes = match configuration.and_then(|c| c.get("acceptedOutputModes")) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(modes)) => modes,
        Some(_) => {
            return Err(invalid_params(
                "configuration.acceptedOutputModes",
                "must be an array of media types",
            ));
        }
    };
    if modes.is_empty() {
        return Ok(());
    }
    // A skill this gateway does not know has no response type to judge the list against; the
    // informative answer is its UNSUPPORTED_SKILL, which comes next.
    let SkillRef::Known(skill) = skill else {
        return Ok(());
    };
    let wanted = skill.response_media_type();
    let acceptable = modes.iter().filter_map(Value::as_str).any(|m| {
        let m = essence(m);
        m == "*/*" || m == "application/json" || m == wanted
    });
    if acceptable {
        Ok(())
    } else {
        Err(AapError::ContentTypeNotSupported {
            detail: format!(
                "none of acceptedOutputModes can be produced; this skill answers {wanted}"
            ),
        })
    }
}

/// A media type without its parameters, lower-cased (type and subtype are case-insensitive).
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn field(name: &str, description: &str) -> FieldViolation {
    FieldViolation {
        field: name.to_owned(),
        description: description.to_owned(),
    }
}

fn invalid_params(name: &str, description: &str) -> AapError {
    AapError::InvalidParams {
        violations: vec![field(name, description)],
    }
}

/// JSON clients (the Python A2A SDK sends protobuf `Value`s) send whole numbers as `20.0`: a
/// whole-valued float is an integer everywhere (docs/protocol.md §Numbers); `20.5` stays a float.
pub fn normalize_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                // 2^63 is exactly representable; every whole f64 below it fits an i64.
                if f.fract() == 0.0 && f.abs() < 9.223_372_036_854_776e18 {
                    // Truncation is exact here: `f` has no fractional part and is in range.
                    #[allow(clippy::cast_possible_truncation)]
                    let i = f as i64;
                    *value = Value::Number(i.into());
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// A2A `SendMessageResponse` (`{"message": Message}`) for a reply: the agent's `Message` with one
/// DataPart holding the reply's payload, written straight into the response buffer
/// ([`SendMessageResponse::write_json`]; no intermediate JSON tree).
#[derive(Debug)]
pub struct SendMessageResponse {
    message_id: String,
    context_id: String,
    data: crate::protocol::Payload,
    media_type: &'static str,
}

impl SendMessageResponse {
    /// Appends the response's JSON text to `out`:
    /// `{"message":{"messageId","contextId","role","parts":[{"data","mediaType"}]}}`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"message\":{\"messageId\":");
        json_text::write_str(out, &self.message_id);
        out.extend_from_slice(b",\"contextId\":");
        json_text::write_str(out, &self.context_id);
        out.extend_from_slice(b",\"role\":\"ROLE_AGENT\",\"parts\":[{\"data\":");
        self.data.write_json(out);
        out.extend_from_slice(b",\"mediaType\":");
        json_text::write_str(out, self.media_type);
        out.extend_from_slice(b"}]}}");
    }
}

/// The agent's reply `Message`: fresh `messageId`, the caller's or a new `contextId`, one DataPart.
pub fn encode_reply(reply: Reply, context_id: Option<String>) -> SendMessageResponse {
    let context_id = context_id.unwrap_or_else(|| format!("ctx_{}", uuid::Uuid::now_v7().simple()));
    SendMessageResponse {
        message_id: uuid::Uuid::new_v4().to_string(),
        context_id,
        data: reply.payload,
        media_type: reply.skill.response_media_type(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The response is written as its JSON value is, for a search page held as built and for
    /// JSON data, with a caller's `contextId` that needs escapes.
    #[test]
    fn a_response_is_written_as_its_json_is() {
        use crate::protocol::vehicle::SearchPage;
        let page = SearchPage::new(1, 0, 20, vec![json!({"vin": "1HGCM82633A004352"}).into()]);
        let replies = [
            Reply::new(
                Skill::InventorySearch,
                crate::protocol::Data::Search(page),
                None,
            ),
            Reply::new(
                Skill::DealerInformation,
                json!({"name": "Ünï \"Motors\""}),
                None,
            ),
        ];
        for reply in replies {
            let data = reply.payload.to_value().into_owned();
            let media_type = reply.skill.response_media_type();
            let response = encode_reply(reply, Some("ctx \"1\"\n".to_owned()));
            let mut written = Vec::new();
            response.write_json(&mut written);
            let expected = json!({"message": {
                "messageId": response.message_id,
                "contextId": "ctx \"1\"\n",
                "role": "ROLE_AGENT",
                "parts": [{"data": data, "mediaType": media_type}],
            }});
            assert_eq!(String::from_utf8(written).unwrap(), expected.to_string());
        }
    }

    #[test]
    fn whole_floats_become_integers() {
        let mut v = json!({"a": 20.0, "b": [1.0, 2.5], "c": 1.2345678901234568e16, "d": -0.0});
        normalize_numbers(&mut v);
        assert_eq!(
            v,
            json!({"a": 20, "b": [1, 2.5], "c": 12345678901234568_i64, "d": 0})
        );
    }
}
