//! How a dealer serves each skill it offers.
//!
//! A `Handler` is built once at load and holds everything compiled; `execute` turns a validated
//! call into the AAP response `data`. Skills without a handler are not served and answer
//! `UNSUPPORTED_SKILL`.

use serde_json::Value;

use crate::error::AapError;
use crate::protocol::Call;

/// A compiled way of answering one skill.
#[derive(Debug, Clone)]
pub enum Handler {
    /// Answers with fixed data from configuration (the dealer profile for `dealer.information`),
    /// checked against the response schema at load.
    Static(Value),
}

impl Handler {
    /// Produces the AAP response `data` for a validated call.
    pub async fn execute(&self, _call: &Call) -> Result<Value, AapError> {
        match self {
            Handler::Static(data) => Ok(data.clone()),
        }
    }
}
