//! Lead deliveries in flight: each runs in its own task, owned by nobody's request, and records
//! its outcome for the idempotency key itself. [`Deliveries`] counts them so that shutdown can
//! wait for the last one; it outlives a configuration (a reload hands it on), as deliveries do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};
use tracing::Instrument as _;

use super::{LeadMapping, Undelivered};
use crate::error::AapError;
use crate::idempotency::Ticket;
use crate::protocol::Reply;
use crate::schema::Schemas;
use crate::telemetry::metrics::Metrics;

/// The lead deliveries running in this process.
#[derive(Debug, Default)]
pub struct Deliveries {
    running: AtomicUsize,
    /// Woken when the count drops to zero.
    idle: Notify,
}

impl Deliveries {
    pub fn new() -> Arc<Deliveries> {
        Arc::default()
    }

    /// How many deliveries are running.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Returns once no delivery is running.
    pub async fn finished(&self) {
        loop {
            // Registered before the count is read, so a delivery that ends in between wakes it.
            let idle = self.idle.notified();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Runs `delivery` to its end in a task of its own; the receiver gets its outcome (or is
    /// dropped unanswered if the task panicked).
    pub fn start(
        self: &Arc<Self>,
        delivery: Delivery,
    ) -> oneshot::Receiver<Result<Reply, AapError>> {
        let (answer, outcome) = oneshot::channel();
        let running = Running::start(self, &delivery.metrics);
        let span = tracing::debug_span!("deliver_lead");
        tokio::spawn(
            async move {
                let _running = running;
                let _ = answer.send(delivery.run().await);
            }
            .instrument(span),
        );
        outcome
    }
}

/// Counts one running delivery while it lives (a panic included).
struct Running {
    deliveries: Arc<Deliveries>,
    metrics: Arc<Metrics>,
}

impl Running {
    fn start(deliveries: &Arc<Deliveries>, metrics: &Arc<Metrics>) -> Running {
        deliveries.running.fetch_add(1, Ordering::SeqCst);
        metrics.lead_deliveries(1);
        Running {
            deliveries: Arc::clone(deliveries),
            metrics: Arc::clone(metrics),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.deliveries.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.deliveries.idle.notify_waiters();
        }
        self.metrics.lead_deliveries(-1);
    }
}

/// One lead on its way to the CRM, owned by its own task: neither the buyer's disconnect nor
/// the request deadline cuts it short; the upstream's own timeouts bound it.
pub struct Delivery {
    pub lead: Arc<LeadMapping>,
    pub schemas: Arc<Schemas>,
    pub metrics: Arc<Metrics>,
    pub dealer: Arc<str>,
    pub request: Value,
    /// What the templates see as `lead` (reference, ADF, consent).
    pub facts: Value,
    /// The idempotency key's claim, when the lead has a key.
    pub ticket: Option<Box<Ticket>>,
    /// When the buyer stops waiting: a queued lead's verdict is awaited no longer.
    pub answer_by: std::time::Instant,
}

impl Delivery {
    /// Delivers, then records the outcome for the key: the reply, a free key (certainly not
    /// delivered), or what `on_ambiguous` makes of an unknown outcome.
    async fn run(mut self) -> Result<Reply, AapError> {
        let reference = self.facts["reference"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(ticket) = &mut self.ticket {
            // Recorded before the first byte leaves; unrecorded, nothing leaves (the ticket,
            // dropped, frees the key).
            ticket.delivering(&reference).await?;
        }
        let delivered = match self.lead.deliver(None, &self.request, &self.facts).await {
            Ok(data) => {
                let report = super::verdict::Report {
                    metrics: &self.metrics,
                    dealer: &self.dealer,
                    reference: &reference,
                };
                self.lead
                    .settle(
                        data,
                        &self.request,
                        &self.facts,
                        self.answer_by,
                        Some(report),
                    )
                    .await
            }
            Err(failed) => Err(failed),
        };
        let result = delivered.and_then(|data| {
            // Acknowledged by the CRM: a reply the schema refuses is an unreadable
            // acknowledgement, not a lead that did not arrive.
            let reply = self.lead.reply(data, &self.request);
            self.schemas
                .check_reply(&self.lead.file, reply)
                .map_err(|error| Undelivered {
                    error,
                    uncertain: true,
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
