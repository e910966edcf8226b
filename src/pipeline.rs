//! `handle`: every stage of a skill call, in order, one line each (docs/protocol.md §Order of
//! checks, steps 9–10). Stage logic lives in the stage's module; this function only shows the
//! path. Each stage runs in its trace span (`DEBUG`: free unless traces are exported).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde_json::Value;
use tracing::{Instrument as _, debug_span};

use crate::app::{App, Dealer};
use crate::engine::lead::LeadMapping;
use crate::engine::{Answer, Handler};
use crate::error::{AapCode, AapError};
use crate::idempotency::{self, Claim, Scope, Ticket};
use crate::protocol::{Call, Caller, Reply, Skill};
use crate::rate_limit::Client;
use crate::schema::Schemas;
use crate::telemetry::metrics::Metrics;

/// Runs one decoded `SendMessage` call for `dealer`.
pub async fn handle(
    app: &App,
    dealer: &Dealer,
    caller: &Caller,
    call: Call,
) -> Result<Reply, AapError> {
    // The binding's deadline started with this call: a lead answers before it runs out.
    let deadline = Instant::now() + app.settings.limits.request_timeout;
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
        let until = answer_by(deadline, app.settings.limits.request_timeout);
        return submit_lead(app, dealer, &client, lead, &call, until).await;
    }
    match handler.execute(&call).await? {
        Answer::Prebuilt(reply) => Ok(reply), // built and checked at load
        Answer::Data(data) => check_reply(
            &app.schemas,
            handler.source(),
            Reply::new(skill, data, None),
        ), // response schema
    }
}

/// When a lead call stops waiting for its delivery and answers "in progress": a little before
/// the request deadline, so the buyer hears that rather than a timeout.
fn answer_by(deadline: Instant, request_timeout: Duration) -> Instant {
    let margin = (request_timeout / 10).clamp(Duration::from_millis(20), Duration::from_secs(1));
    deadline.checked_sub(margin).unwrap_or(deadline)
}

/// `lead.submit`: the gateway's rules, all before the CRM sees anything (docs/protocol.md §Lead
/// request and reply); then one delivery per key, in its own task.
async fn submit_lead(
    app: &App,
    dealer: &Dealer,
    client: &Client,
    lead: &Arc<LeadMapping>,
    call: &Call,
    until: Instant,
) -> Result<Reply, AapError> {
    let request = &call.data;
    let fingerprint = idempotency::fingerprint(request); // canonical JSON
    let ticket = match Scope::of(dealer.id(), client.key_id(), request) {
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
    let delivery = Delivery {
        lead: Arc::clone(lead),
        schemas: Arc::clone(&app.schemas),
        metrics: Arc::clone(&app.metrics),
        dealer: Arc::clone(&dealer.label),
        request: request.clone(),
        facts,
        ticket,
    };
    let (answer, outcome) = tokio::sync::oneshot::channel();
    let span = debug_span!("deliver_lead");
    tokio::spawn(
        async move {
            let _ = answer.send(delivery.run().await);
        }
        .instrument(span),
    );
    // The delivery runs to its end whatever happens to this request; the buyer hears its
    // outcome, or "in progress" and joins it with a retry.
    match tokio::time::timeout_at(tokio::time::Instant::from_std(until), outcome).await {
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

/// Lead deliveries running in this process (they outlive their request and the configuration
/// that started them): shutdown waits for them, within its grace.
static DELIVERIES: AtomicUsize = AtomicUsize::new(0);

/// How many lead deliveries are running.
pub fn deliveries_running() -> usize {
    DELIVERIES.load(Ordering::SeqCst)
}

/// Returns once no lead delivery is running.
pub async fn deliveries_finished() {
    while deliveries_running() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Counts one running delivery while it lives (a panic included).
struct Running(Arc<Metrics>);

impl Running {
    fn start(metrics: &Arc<Metrics>) -> Running {
        DELIVERIES.fetch_add(1, Ordering::SeqCst);
        metrics.lead_deliveries(1);
        Running(Arc::clone(metrics))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        DELIVERIES.fetch_sub(1, Ordering::SeqCst);
        self.0.lead_deliveries(-1);
    }
}

/// One lead on its way to the CRM, owned by its own task: neither the buyer's disconnect nor
/// the request deadline cuts it short; the upstream's own timeouts bound it.
struct Delivery {
    lead: Arc<LeadMapping>,
    schemas: Arc<Schemas>,
    metrics: Arc<Metrics>,
    dealer: Arc<str>,
    request: Value,
    facts: Value,
    ticket: Option<Box<Ticket>>,
}

impl Delivery {
    /// Delivers, then records the outcome for the key: the reply, a free key (certainly not
    /// delivered), or what `on_ambiguous` makes of an unknown outcome.
    async fn run(mut self) -> Result<Reply, AapError> {
        let _running = Running::start(&self.metrics);
        let reference = self.facts["reference"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(ticket) = &mut self.ticket {
            ticket.delivering(&reference).await; // recorded before the first byte leaves
        }
        let delivered = self.lead.deliver(None, &self.request, &self.facts).await;
        let result = delivered.and_then(|data| {
            // Acknowledged by the CRM: a reply the schema refuses is an unreadable
            // acknowledgement, not a lead that did not arrive.
            let reply = self.lead.reply(data, &self.request);
            check_reply(&self.schemas, &self.lead.file, reply).map_err(|error| {
                crate::engine::lead::Undelivered {
                    error,
                    uncertain: true,
                }
            })
        });
        match result {
            Ok(reply) => {
                if let Some(ticket) = self.ticket.take() {
                    ticket.complete(&reply).await; // replayed for the key from now on
                }
                Ok(reply)
            }
            Err(failed) if !failed.uncertain => {
                if let Some(ticket) = self.ticket.take() {
                    ticket.not_delivered(); // a retry delivers
                }
                Err(failed.error)
            }
            Err(failed) => self.unknown(&reference, failed.error).await,
        }
    }

    /// The CRM may or may not have the lead: counted, logged with the reference (never the
    /// lead's content), and left to `on_ambiguous`.
    async fn unknown(&mut self, reference: &str, error: AapError) -> Result<Reply, AapError> {
        let held = match self.ticket.take() {
            Some(ticket) => ticket.unknown(reference).await,
            None => None, // no key: the buyer's resubmission is a new lead to the gateway
        };
        let action = if held.is_some() { "hold" } else { "resend" };
        self.metrics.lead_ambiguous(&self.dealer, action);
        tracing::warn!(
            dealer = %self.dealer,
            upstream = self.lead.upstream(),
            reference,
            action,
            cause = unknown_cause(&error),
            "lead delivery outcome unknown: the CRM may have taken the lead"
        );
        Err(held.unwrap_or(error))
    }
}

/// What cut a delivery short, in words that never quote the CRM's reply.
fn unknown_cause(error: &AapError) -> &'static str {
    match error {
        AapError::UpstreamTimeout { .. } => "timeout",
        AapError::InvalidUpstreamResponse { .. } => "connection lost or unreadable reply",
        AapError::InvalidReply { .. } => "reply failed the response schema",
        _ => "unreadable acknowledgement",
    }
}

/// Never emit a non-conforming payload: a mapping that builds one is an internal error.
fn check_reply(schemas: &Schemas, mapping: &str, reply: Reply) -> Result<Reply, AapError> {
    let violations = debug_span!("validate_response")
        .in_scope(|| schemas.check_response(reply.skill, &reply.payload));
    if violations.is_empty() {
        Ok(reply)
    } else {
        Err(AapError::InvalidReply {
            skill: reply.skill.id().to_owned(),
            mapping: mapping.to_owned(),
            violations,
        })
    }
}
