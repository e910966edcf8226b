//! How a dealer serves each skill it offers.
//!
//! A `Handler` is built once at load and holds everything compiled; `execute` turns a validated
//! call into the AAP response `data`. Skills without a handler are not served and answer
//! `UNSUPPORTED_SKILL`.

use std::sync::Arc;

use serde_json::Value;

use crate::error::AapError;
use crate::protocol::{Call, Reply, Skill};

/// A compiled way of answering one skill.
#[derive(Debug, Clone)]
pub enum Handler {
    /// Answers with a fixed reply from configuration (the dealer profile for
    /// `dealer.information`), built and checked against the response schema at load.
    Static(Reply),
}

/// What a handler produced.
#[derive(Debug)]
pub enum Answer {
    /// A reply built and checked at load; sent as is.
    Prebuilt(Reply),
    /// Response `data` built for this call; the pipeline checks it against the response schema.
    Data(Value),
}

impl Handler {
    /// A handler answering `skill` with fixed `data`.
    pub fn fixed(skill: Skill, data: Value) -> Handler {
        Handler::Static(Reply::new(skill, data, None))
    }

    /// The fixed payload, for load-time checks.
    pub fn fixed_payload(&self) -> Option<&Arc<Value>> {
        match self {
            Handler::Static(reply) => Some(&reply.payload),
        }
    }

    /// Answers a validated call.
    pub async fn execute(&self, _call: &Call) -> Result<Answer, AapError> {
        match self {
            Handler::Static(reply) => Ok(Answer::Prebuilt(reply.clone())),
        }
    }
}
