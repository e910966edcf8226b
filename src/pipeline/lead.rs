//! The lead branch of the pipeline (docs/protocol.md §Lead request and reply): the gateway's
//! rules, all before the CRM sees anything — the idempotency key, consent, the dealer's rules,
//! the vehicle check — then one delivery per key, in its own task
//! ([`engine::lead::deliveries`](crate::engine::lead::deliveries)), which the buyer waits for
//! until a little before the request deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::app::{App, Dealer};
use crate::engine::lead::LeadMapping;
use crate::engine::lead::deliveries::Delivery;
use crate::error::{AapCode, AapError};
use crate::idempotency::{self, Claim, KeyScope};
use crate::protocol::{Call, Reply, Skill};
use crate::rate_limit::Client;

/// Submits one validated lead call: its rules, then its delivery (or the stored reply of an
/// earlier delivery under the same key).
pub(super) async fn submit(
    app: &App,
    dealer: &Dealer,
    client: &Client,
    lead: &Arc<LeadMapping>,
    call: &Call,
    deadline: Instant,
) -> Result<Reply, AapError> {
    let until = answer_by(deadline, app.settings.limits.request_timeout);
    let request = &call.data;
    let fingerprint = idempotency::fingerprint(request); // canonical JSON
    let ticket = match KeyScope::of(dealer.id(), client.key_id(), request) {
        Some(scope) => match app.idempotency.claim(scope, fingerprint, until).await {
            Ok(Claim::Replay(reply)) => {
                app.metrics.idempotency_replay(&dealer.label);
                return Ok(reply); // same key, same payload: same reply
            }
            Ok(Claim::Fresh(ticket)) => Some(ticket),
            Err(error) => {
                match &error {
                    AapError::Domain {
                        code: AapCode::IdempotencyConflict,
                        ..
                    } => app.metrics.idempotency_conflict(&dealer.label),
                    AapError::LeadInProgress { .. } => app.metrics.lead_in_progress(&dealer.label),
                    _ => {}
                }
                return Err(error);
            }
        },
        None => None,
    };
    // Cancelled up to here (the buyer left, the deadline), the ticket frees the key: nothing
    // was sent.
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
    let outcome = app.deliveries.start(Delivery {
        lead: Arc::clone(lead),
        schemas: Arc::clone(&app.schemas),
        metrics: Arc::clone(&app.metrics),
        dealer: Arc::clone(&dealer.label),
        request: request.clone(),
        facts,
        ticket,
        answer_by: until,
    });
    // The delivery runs to its end whatever happens to this request; the buyer hears its
    // outcome, or "in progress" and joins it with a retry.
    match tokio::time::timeout_at(until.into(), outcome).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(AapError::Internal(
            "the lead delivery task ended without an outcome".to_owned(),
        )),
        Err(_) => {
            app.metrics.lead_in_progress(&dealer.label);
            Err(AapError::LeadInProgress {
                retry_after: idempotency::IN_PROGRESS_RETRY_AFTER,
            })
        }
    }
}

/// When a lead call stops waiting for its delivery and answers "in progress": a little before
/// the request deadline, so the buyer hears that rather than a timeout.
fn answer_by(deadline: Instant, request_timeout: Duration) -> Instant {
    let margin = (request_timeout / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
    deadline.checked_sub(margin).unwrap_or(deadline)
}
