//! The only wire-aware code: bindings decode HTTP into `Call`s and encode `Reply`s and errors.
//!
//! `jsonrpc` is the AAP binding. `send_message` is the A2A `SendMessageRequest` shape both
//! bindings share; `wire_error` is the one error mapping. `report` is the one place an error is
//! logged and converted, so an internal cause is logged exactly once and never sent.

pub mod jsonrpc;
pub mod send_message;
pub mod wire_error;

use crate::app::Dealer;
use crate::error::AapError;
use wire_error::{ErrorStamp, WireError};

/// Converts `error` for the wire, logging the internal cause (once) under its `error_id`.
pub(crate) fn report(error: &AapError, dealer: &Dealer) -> WireError {
    let wire = wire_error::to_wire(error, &ErrorStamp::now());
    if wire_error::is_internal(error) {
        tracing::error!(
            dealer = %dealer.id(),
            error_id = wire.error_id.as_deref().unwrap_or_default(),
            error = %error,
            "request failed inside the gateway"
        );
    } else {
        tracing::debug!(dealer = %dealer.id(), reason = wire.reason, error = %error, "request refused");
    }
    wire
}
