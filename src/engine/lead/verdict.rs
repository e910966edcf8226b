//! A CRM that accepts now and decides later (`202 Accepted` with a ticket): the ticket is
//! followed with the mapping's poll (`lead.verdict`) until the CRM says received, duplicate or
//! rejected. Owns the poll loop and what becomes of a verdict that comes late; uses
//! `engine::proxy` (the poll is an ordinary mapped call) and `telemetry`.
//!
//! The poll never sends the lead: it is a call of its own (usually a `GET` on the ticket), and
//! nothing it meets — a timeout, a 5xx, an unknown state — leads back to the delivery. The
//! buyer waits for the verdict at most `wait` (and never past the request's own deadline);
//! without one the buyer hears `received` with the ticket as `lead_id`, as the CRM did take the
//! lead, and the polls left go on after the reply so that a later verdict is logged (the
//! reference and the ticket, never the lead) and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::Instrument as _;

use crate::engine::proxy::{ProxyMapping, Transport};
use crate::error::AapError;
use crate::telemetry::metrics::Metrics;

/// `lead.verdict`, compiled.
#[derive(Debug)]
pub struct Verdict {
    /// The poll: its templates see `lead.ticket`; its jq gives `{status, lead_id?}`.
    pub poll: Arc<ProxyMapping>,
    pub every: Duration,
    pub wait: Duration,
    /// Polls in all, in time and late.
    pub attempts: u32,
}

/// Where a follow-up reports: the dealer's metrics and log fields.
pub struct Report<'a> {
    pub metrics: &'a Arc<Metrics>,
    pub dealer: &'a Arc<str>,
    /// The lead's stable reference (never its content).
    pub reference: &'a str,
}

/// What one poll made of the CRM's answer.
enum Polled {
    /// The CRM decided: the poll's data, whose `status` is received, duplicate or rejected.
    Decided(Value, &'static str),
    Pending,
    /// No verdict this time, and why (words that never quote the CRM's reply).
    Failed(&'static str),
}

impl Verdict {
    /// Follows `ticket` until the CRM decides, `wait` runs out or `answer_by` comes, and gives
    /// the reply data: the first answer's data with the verdict's fields over it, or with
    /// `status: "received"` when no verdict came in time.
    pub async fn follow(
        self: &Arc<Self>,
        first: Value,
        ticket: &str,
        request: &Value,
        facts: &Value,
        answer_by: Instant,
        report: Report<'_>,
    ) -> Value {
        let mut facts = facts.clone();
        if let Some(obj) = facts.as_object_mut() {
            obj.insert("ticket".into(), json!(ticket));
        }
        let until = (Instant::now() + self.wait).min(answer_by);
        let mut left = self.attempts;
        while left > 0 {
            let next = Instant::now() + self.every;
            if next > until {
                break;
            }
            tokio::time::sleep_until(next.into()).await;
            left -= 1;
            // A poll still out when the buyer's wait ends is no verdict (it is a read: safe).
            let polled = tokio::time::timeout_at(until.into(), self.poll_once(request, &facts))
                .await
                .unwrap_or(Polled::Failed("timeout"));
            match polled {
                Polled::Decided(decided, verdict) => {
                    report
                        .metrics
                        .lead_verdict(report.dealer, "in_time", verdict);
                    return settled(first, decided);
                }
                Polled::Pending => {}
                Polled::Failed(cause) => tracing::warn!(
                    dealer = %report.dealer,
                    reference = report.reference,
                    ticket,
                    cause,
                    "lead verdict poll failed; the lead is not sent again, the poll goes on"
                ),
            }
        }
        if left == 0 {
            report.metrics.lead_verdict(report.dealer, "never", "none");
            tracing::warn!(
                dealer = %report.dealer,
                reference = report.reference,
                ticket,
                "no verdict on a queued lead after every poll: the buyer was told received"
            );
        } else {
            self.late(
                left,
                request.clone(),
                facts,
                ticket.to_owned(),
                Arc::clone(report.metrics),
                Arc::clone(report.dealer),
                report.reference.to_owned(),
            );
        }
        received(first)
    }

    /// The polls left after the buyer's reply, in a task of their own: a verdict is logged and
    /// counted, never answered (the buyer's reply, and its idempotent replay, stay `received`).
    #[allow(clippy::too_many_arguments)]
    fn late(
        self: &Arc<Self>,
        mut left: u32,
        request: Value,
        facts: Value,
        ticket: String,
        metrics: Arc<Metrics>,
        dealer: Arc<str>,
        reference: String,
    ) {
        let this = Arc::clone(self);
        let span = tracing::debug_span!("lead_verdict_late");
        tokio::spawn(
            async move {
                while left > 0 {
                    tokio::time::sleep(this.every).await;
                    left -= 1;
                    if let Polled::Decided(_, verdict) = this.poll_once(&request, &facts).await {
                        metrics.lead_verdict(&dealer, "late", verdict);
                        if verdict == "rejected" {
                            tracing::warn!(
                                %dealer, reference, ticket,
                                "the CRM rejected a queued lead after the buyer was told received"
                            );
                        } else {
                            tracing::info!(
                                %dealer, reference, ticket, verdict,
                                "late verdict on a queued lead"
                            );
                        }
                        return;
                    }
                }
                metrics.lead_verdict(&dealer, "never", "none");
                tracing::warn!(
                    %dealer, reference, ticket,
                    "no verdict on a queued lead after every poll: the buyer was told received"
                );
            }
            .instrument(span),
        );
    }

    async fn poll_once(&self, request: &Value, facts: &Value) -> Polled {
        let transport = Transport::Live(&self.poll.upstream);
        match self.poll.execute_lead(transport, request, facts).await {
            Ok(data) => match data.get("status").and_then(Value::as_str) {
                Some("received") => Polled::Decided(data, "received"),
                Some("duplicate") => Polled::Decided(data, "duplicate"),
                Some("rejected") => Polled::Decided(data, "rejected"),
                Some("pending") => Polled::Pending,
                _ => Polled::Failed(
                    "the poll's response.jq gave no status received, duplicate, rejected or \
                     pending",
                ),
            },
            Err(error) => Polled::Failed(cause(&error)),
        }
    }
}

/// The first answer's data with the verdict's fields over it (the ticket stays the `lead_id`
/// unless the verdict names the lead).
fn settled(mut first: Value, decided: Value) -> Value {
    if let (Some(out), Value::Object(verdict)) = (first.as_object_mut(), decided) {
        for (key, value) in verdict {
            if !(key == "lead_id" && value.is_null()) {
                out.insert(key, value);
            }
        }
    }
    first
}

/// No verdict in time: the CRM has the lead, under the ticket.
fn received(mut first: Value) -> Value {
    if let Some(out) = first.as_object_mut() {
        out.insert("status".into(), json!("received"));
    }
    first
}

/// Why a poll gave no verdict, in words that never quote the CRM's reply.
fn cause(error: &AapError) -> &'static str {
    match error {
        AapError::UpstreamTimeout { .. } => "timeout",
        AapError::UpstreamUnavailable { .. } => "the CRM was unavailable",
        AapError::UpstreamRefused { .. } => "the CRM refused the poll",
        AapError::InvalidUpstreamResponse { .. } => "unreadable or unhandled answer",
        AapError::Domain { .. } => "an errors rule answered",
        _ => "the poll's mapping failed",
    }
}

/// The offline stand-in for a follow-up (examples run against a canned first answer): what
/// the buyer hears when no verdict comes in time.
pub fn offline(first: Value) -> Value {
    received(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_keeps_the_ticket_unless_it_names_the_lead() {
        let first = json!({ "lead_id": "T-1", "status": "pending" });
        assert_eq!(
            settled(first.clone(), json!({ "status": "rejected" })),
            json!({ "lead_id": "T-1", "status": "rejected" })
        );
        assert_eq!(
            settled(
                first.clone(),
                json!({ "status": "received", "lead_id": "L-9" })
            ),
            json!({ "lead_id": "L-9", "status": "received" })
        );
        assert_eq!(
            settled(
                first.clone(),
                json!({ "status": "duplicate", "lead_id": null })
            ),
            json!({ "lead_id": "T-1", "status": "duplicate" })
        );
        assert_eq!(
            received(first),
            json!({ "lead_id": "T-1", "status": "received" })
        );
    }
}
