//! The A2A / AAP model the pipeline works with: skills, calls, replies and the agent card.
//! Nothing here knows JSON-RPC or HTTP+JSON; `binding/` converts to and from the wire.

pub mod agent_card;
mod skill;

use std::sync::Arc;

use serde_json::Value;

pub use skill::Skill;

/// The skill a call names in `data.type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillRef {
    Known(Skill),
    /// A `type` that is no AAP request type (answered `UNSUPPORTED_SKILL`).
    Unknown(String),
}

/// One `SendMessage` call, reduced to what AAP gives meaning to.
#[derive(Debug, Clone)]
pub struct Call {
    pub skill: SkillRef,
    /// The skill named by the DataPart's `mediaType`, when it names one.
    pub declared: Option<Skill>,
    /// The AAP request object (the DataPart `data`), whole-valued floats already integers.
    pub data: Value,
    /// The caller's `contextId`, when sent (already checked non-empty and ≤ 256 chars).
    pub context_id: Option<String>,
}

/// Who sent a call, as the binding saw it: the client's address (the peer, or the client
/// named by a trusted proxy) and the API key it presented, hashed.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub ip: std::net::IpAddr,
    pub presented: Presented,
}

/// What the caller sent: the SHA-256 of its API key, if any (read from the headers and checked
/// in `auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presented(pub(crate) Option<[u8; 32]>);

/// A successful skill reply, holding the AAP response object `{type, data, message?}`.
///
/// Shared (`Arc`) so fixed replies built at load (a dealer profile) are sent without a copy.
#[derive(Debug, Clone)]
pub struct Reply {
    pub skill: Skill,
    pub payload: Arc<Value>,
}

impl Reply {
    pub fn new(skill: Skill, data: Value, message: Option<String>) -> Reply {
        let mut out = serde_json::Map::with_capacity(3);
        out.insert(
            "type".into(),
            Value::String(skill.response_type().to_owned()),
        );
        out.insert("data".into(), data);
        if let Some(m) = message {
            out.insert("message".into(), Value::String(m));
        }
        Reply {
            skill,
            payload: Arc::new(Value::Object(out)),
        }
    }
}
