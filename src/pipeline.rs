//! `handle`: every stage of a skill call, in order, one line each (docs/protocol.md §Order of
//! checks, steps 9–10). Stage logic lives in the stage's module; this function only shows the
//! path. Each stage runs in its trace span (`DEBUG`: free unless traces are exported).

use jiff::Timestamp;
use tracing::{Instrument as _, debug_span};

use crate::app::{App, Dealer};
use crate::error::{AapCode, AapError};
use crate::idempotency::{self, Claim, Scope};
use crate::mapping::lead::LeadMapping;
use crate::mapping::{Answer, Handler};
use crate::protocol::{Call, Caller, Reply, Skill};
use crate::rate_limit::Client;

/// Runs one decoded `SendMessage` call for `dealer`.
pub async fn handle(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    call: Call,
) -> Result<Reply, AapError> {
    let (skill, handler) = dealer.handler(&call.skill)?; // UNSUPPORTED_SKILL
    // The API key when the skill needs one or one is sent (401/403), else the address.
    let client = debug_span!("auth").in_scope(|| app.client(dealer, skill, caller))?;
    app.limits
        .check(dealer.index, dealer.id(), skill, &client)
        .instrument(debug_span!("rate_limit"))
        .await?; // RATE_LIMITED
    // The request schema, every failure at once.
    debug_span!("validate_request").in_scope(|| app.schemas.validate_call(skill, &call))?;
    if let Handler::Lead(lead) = handler {
        return submit_lead(app, dealer, &client, handler, lead, &call).await;
    }
    match handler.execute(&call).await? {
        Answer::Prebuilt(reply) => Ok(reply), // built and checked at load
        Answer::Data(data) => check_reply(app, handler, Reply::new(skill, data, None)), // response schema
    }
}

/// `lead.submit`: the gateway's rules, all before the CRM sees anything (docs/protocol.md §Lead
/// request and reply).
async fn submit_lead(
    app: &App,
    dealer: &Dealer,
    client: &Client,
    handler: &Handler,
    lead: &LeadMapping,
    call: &Call,
) -> Result<Reply, AapError> {
    let request = &call.data;
    let fingerprint = idempotency::fingerprint(request); // canonical JSON
    let ticket = match Scope::of(dealer.id(), client.key_id(), request) {
        Some(scope) => match app.idempotency.claim(scope, fingerprint).await {
            Ok(Claim::Replay(reply)) => {
                app.metrics.idempotency_replay(&dealer.label);
                return Ok(reply); // same key, same payload: same reply
            }
            Ok(Claim::Fresh(ticket)) => Some(ticket),
            Err(error) => {
                if matches!(
                    error,
                    AapError::Domain {
                        code: AapCode::IdempotencyConflict,
                        ..
                    }
                ) {
                    app.metrics.idempotency_conflict(&dealer.label);
                }
                return Err(error);
            }
        },
        None => None,
    };
    let now = Timestamp::now();
    crate::consent::check(request, now, &lead.policy.follow_up)?; // expired, future, channels
    lead.check_request(request)?; // dealer rules on the request
    let inventory = dealer.handler_for(Skill::InventoryVehicle);
    let checked = lead.verify_vehicle(inventory, request).await?; // VEHICLE_NOT_FOUND / _UNAVAILABLE
    let facts = lead.facts(
        request,
        &fingerprint,
        now,
        checked.as_ref(),
        client.key_id(),
    ); // reference, ADF
    let data = lead.deliver(None, request, &facts).await?; // acknowledged by the CRM, or an error
    let reply = check_reply(app, handler, lead.reply(data, request))?; // response schema
    if let Some(ticket) = ticket {
        ticket.complete(&reply).await; // replayed for the key from now on
    }
    Ok(reply)
}

/// Never emit a non-conforming payload: a mapping that builds one is an internal error.
fn check_reply(app: &App, handler: &Handler, reply: Reply) -> Result<Reply, AapError> {
    let violations = debug_span!("validate_response")
        .in_scope(|| app.schemas.check_response(reply.skill, &reply.payload));
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
