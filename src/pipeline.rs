//! `handle`: every stage of a skill call, in order, one line each (DESIGN §3 step 9 onwards).
//! Stage logic lives in the stage's module; this function only shows the path.

use crate::app::{App, Dealer};
use crate::error::AapError;
use crate::mapping::{Answer, Handler};
use crate::protocol::{Call, Reply};

/// Runs one decoded `SendMessage` call for `dealer`.
pub async fn handle(app: &App, dealer: &Dealer, call: Call) -> Result<Reply, AapError> {
    let (skill, handler) = dealer.handler(&call.skill)?; // UNSUPPORTED_SKILL
    app.schemas.validate_call(skill, &call)?; // request schema, every failure at once
    match handler.execute(&call).await? {
        Answer::Prebuilt(reply) => Ok(reply), // built and checked at load
        Answer::Data(data) => check_reply(app, handler, Reply::new(skill, data, None)), // response schema
    }
}

/// Never emit a non-conforming payload: a mapping that builds one is an internal error.
fn check_reply(app: &App, handler: &Handler, reply: Reply) -> Result<Reply, AapError> {
    let violations = app.schemas.check_response(reply.skill, &reply.payload);
    if violations.is_empty() {
        Ok(reply)
    } else {
        Err(AapError::InvalidReply {
            skill: reply.skill.id().to_owned(),
            mapping: handler.source().to_owned(),
            violations,
        })
    }
}
