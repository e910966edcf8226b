//! `handle`: every stage of a skill call, in order, one line each (DESIGN §3 step 9 onwards).
//! Stage logic lives in the stage's module; this function only shows the path.

use crate::app::{App, Dealer};
use crate::error::{AapError, Violation};
use crate::protocol::{Call, Reply};

/// Runs one decoded `SendMessage` call for `dealer`.
pub async fn handle(app: &App, dealer: &Dealer, call: Call) -> Result<Reply, AapError> {
    let (skill, handler) = dealer.handler(&call.skill)?; // UNSUPPORTED_SKILL
    app.schemas.validate_call(skill, &call)?; // request schema, every failure at once
    let data = handler.execute(&call).await?; // mapping / upstream
    let reply = Reply::new(skill, data, None);
    check_reply(app, &reply)?; // never emit a non-conforming payload
    Ok(reply)
}

fn check_reply(app: &App, reply: &Reply) -> Result<(), AapError> {
    let violations: Vec<Violation> = app.schemas.check_response(reply.skill, &reply.payload);
    if violations.is_empty() {
        Ok(())
    } else {
        Err(AapError::InvalidReply {
            skill: reply.skill.id().to_owned(),
            violations,
        })
    }
}
