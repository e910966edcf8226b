//! `handle`: every stage of a skill call, in order, one line each (docs/protocol.md §Order of
//! checks, from the load shedding of step 6 to step 10). Stage logic lives in the stage's
//! module; this function only shows the path. Each stage runs in its trace span (`DEBUG`: free
//! unless traces are exported). `lead` is the lead branch: the gateway's rules, then the
//! delivery.
//!
//! Uses everything below it (`app`, `auth`, `rate_limit`, `schema`, `idempotency`, `consent`,
//! `engine`); knows nothing of the wire: the binding hands it a way to decode its envelope.

mod lead;

use std::time::Instant;

use tracing::{Instrument as _, debug_span};

use crate::app::{App, Dealer};
use crate::engine::{Answer, Handler};
use crate::error::AapError;
use crate::protocol::{Call, Caller, Reply};
use crate::telemetry::request::RequestLog;

/// Runs one `SendMessage` call for `dealer`: a concurrency slot, the binding's envelope decoded
/// into a [`Call`] (`decode`), then every stage under the request deadline.
pub async fn handle(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    log: &mut RequestLog,
    decode: impl FnOnce() -> Result<Call, AapError>,
) -> Result<Reply, AapError> {
    // Only now does the call need capacity; over `limits.max_concurrency` it is shed at once
    // (RATE_LIMITED; 503 on HTTP+JSON) rather than queued without bound.
    let _slot = app.limits.admit()?;
    let call = debug_span!("decode").in_scope(decode)?; // the envelope (-32602, -32005, …)
    log.skill(&call.skill);
    let timeout = app.settings.limits.request_timeout;
    let deadline = Instant::now() + timeout;
    let stages = stages(app, dealer, caller, call, deadline);
    match tokio::time::timeout_at(deadline.into(), stages).await {
        Ok(reply) => reply,
        Err(_) => Err(AapError::Internal(format!(
            "request deadline of {timeout:?} exceeded"
        ))),
    }
}

/// The stages of a decoded call, in order (docs/protocol.md §Order of checks, step 9–10).
async fn stages(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    call: Call,
    deadline: Instant,
) -> Result<Reply, AapError> {
    let (skill, handler) = dealer.handler(&call.skill)?; // UNSUPPORTED_SKILL
    // The API key when the skill needs one or one is sent (401/403), else the address.
    let client = debug_span!("auth").in_scope(|| app.client(dealer, skill, caller))?;
    app.limits
        .check(dealer.index, dealer.id(), skill, &client)
        .instrument(debug_span!("rate_limit"))
        .await?; // RATE_LIMITED: the client's own quota
    // The request schema, every failure at once.
    debug_span!("validate_request").in_scope(|| app.schemas.validate_call(skill, &call))?;
    // The dealer's quota for all clients, charged only for calls that got this far.
    app.limits
        .check_dealer(dealer.index, dealer.id(), skill)
        .instrument(debug_span!("dealer_rate_limit"))
        .await?; // RATE_LIMITED
    if let Handler::Lead(mapping) = handler {
        // idempotency → consent → dealer rules → vehicle → delivery
        return lead::submit(app, dealer, &client, mapping, &call, deadline).await;
    }
    match handler.execute(&call).await? {
        Answer::Prebuilt(reply) => Ok(reply), // built and checked at load
        Answer::Data(data) => app
            .schemas
            .check_reply(handler.source(), Reply::new(skill, data, None)), // response schema
    }
}
