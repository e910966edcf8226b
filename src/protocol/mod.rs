//! The A2A / AAP model the pipeline works with: skills, calls, replies and the agent card.
//! Nothing here knows JSON-RPC or HTTP+JSON; `binding/` converts to and from the wire.

pub mod agent_card;
pub mod json_text;
pub mod search;
mod skill;
pub mod vehicle;

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

pub use search::SearchRequest;
pub use skill::Skill;
use vehicle::SearchPage;

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

/// The AAP `data` a handler built for one call.
#[derive(Debug)]
pub enum Data {
    Json(Value),
    /// An `inventory.search` page, held as built ([`vehicle`]).
    Search(SearchPage),
}

impl From<Value> for Data {
    fn from(v: Value) -> Data {
        Data::Json(v)
    }
}

impl Data {
    /// The data as JSON.
    pub fn into_value(self) -> Value {
        match self {
            Data::Json(v) => v,
            Data::Search(page) => page.to_value(),
        }
    }
}

/// A successful skill reply, holding the AAP response object `{type, data, message?}`.
///
/// Shared (`Arc`) so fixed replies built at load (a dealer profile) are sent without a copy.
#[derive(Debug, Clone)]
pub struct Reply {
    pub skill: Skill,
    pub payload: Payload,
}

/// The AAP response object of a [`Reply`]: JSON, or a search page as built, which is written
/// and validated as the JSON `{"type": …, "data": page}` without becoming it.
#[derive(Debug, Clone)]
pub enum Payload {
    Json(Arc<Value>),
    Search(Arc<SearchPage>),
}

impl Payload {
    /// The response object as JSON (a copy for a search page): for the cold paths (examples,
    /// `render`, stored replies).
    pub fn to_value(&self) -> Cow<'_, Value> {
        match self {
            Payload::Json(v) => Cow::Borrowed(v),
            Payload::Search(page) => Cow::Owned(page.reply_value()),
        }
    }

    /// Appends the response object's JSON text to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Payload::Json(v) => json_text::write_value(out, &**v),
            Payload::Search(page) => {
                out.extend_from_slice(b"{\"type\":");
                json_text::write_str(out, Skill::InventorySearch.response_type());
                out.extend_from_slice(b",\"data\":");
                page.write_json(out);
                out.push(b'}');
            }
        }
    }

    /// The response object's `data` as JSON (`null` when it has none), for the same paths.
    pub fn data(&self) -> Value {
        match self {
            Payload::Json(v) => v.get("data").cloned().unwrap_or(Value::Null),
            Payload::Search(page) => page.to_value(),
        }
    }
}

/// The response object as JSON text.
impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = Vec::new();
        self.write_json(&mut text);
        f.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?)
    }
}

impl Reply {
    /// A search page without a message stays as built; any other data is JSON.
    pub fn new(skill: Skill, data: impl Into<Data>, message: Option<String>) -> Reply {
        let data = match (data.into(), &message) {
            (Data::Search(page), None) if skill == Skill::InventorySearch => {
                return Reply {
                    skill,
                    payload: Payload::Search(Arc::new(page)),
                };
            }
            (data, _) => data.into_value(),
        };
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
            payload: Payload::Json(Arc::new(Value::Object(out))),
        }
    }
}
