//! The runtime: how a compiled mapping answers a call.
//!
//! One `Handler` per served skill, built at load by `mapping`: `proxy` translates each call to
//! the dealer's system, `feed` answers from a cached inventory file, `lead` delivers leads to the
//! CRM; `request` renders the upstream calls they make. Uses `lang`, `inventory`, `formats` and
//! `upstream`; never a buyer's HTTP request, never the mapping files.

pub mod feed;
pub mod lead;
pub mod proxy;
pub mod request;
mod upstream_error;

use std::sync::Arc;

use serde_json::Value;

use crate::error::AapError;
use crate::protocol::{Call, Data, Reply, Skill, search};
use feed::Feed;
use lead::LeadMapping;
use proxy::ProxyMapping;
pub use upstream_error::IntoAap;

/// A compiled way of answering one skill.
#[derive(Debug, Clone)]
pub enum Handler {
    /// A fixed reply from configuration (a dealer profile, or `static:` in a mapping), built and
    /// checked against the response schema at load.
    Static(Reply),
    /// Every call translated to the dealer's upstream.
    Proxy(Arc<ProxyMapping>),
    /// `inventory.facets` computed from the search mapping's results (`derive: search`).
    DerivedFacets(Arc<ProxyMapping>),
    /// Answered from the cached inventory feed.
    Feed { skill: Skill, feed: Arc<Feed> },
    /// `lead.submit`, run by `pipeline::handle` (consent, idempotency, delivery).
    Lead(Arc<LeadMapping>),
}

/// What a handler produced.
#[derive(Debug)]
pub enum Answer {
    /// A reply built and checked at load; sent as is.
    Prebuilt(Reply),
    /// Response `data` built for this call; the pipeline checks it against the response schema.
    Data(Data),
}

impl Handler {
    /// A handler answering `skill` with fixed `data`.
    pub fn fixed(skill: Skill, data: Value) -> Handler {
        Handler::Static(Reply::new(skill, data, None))
    }

    /// The fixed payload, for load-time checks.
    pub fn fixed_payload(&self) -> Option<&crate::protocol::Payload> {
        match self {
            Handler::Static(reply) => Some(&reply.payload),
            Handler::Proxy(_)
            | Handler::DerivedFacets(_)
            | Handler::Feed { .. }
            | Handler::Lead(_) => None,
        }
    }

    /// Where this handler was defined, for logs (the mapping or feed file).
    pub fn source(&self) -> &str {
        match self {
            Handler::Static(_) => "static configuration",
            Handler::Proxy(m) | Handler::DerivedFacets(m) => &m.file,
            Handler::Feed { feed, .. } => &feed.file,
            Handler::Lead(lead) => &lead.file,
        }
    }

    /// Answers a validated call.
    pub async fn execute(&self, call: &Call) -> Result<Answer, AapError> {
        match self {
            Handler::Static(reply) => Ok(Answer::Prebuilt(reply.clone())),
            Handler::Proxy(mapped) => mapped.execute(&call.data).await.map(Answer::Data),
            Handler::DerivedFacets(search) => search
                .facets(
                    proxy::Transport::Live(&search.upstream),
                    search::filters(&call.data),
                )
                .await
                .map(|facets| Answer::Data(Data::Json(facets))),
            Handler::Feed { skill, feed } => {
                let snapshot = feed.snapshot().await?;
                snapshot.answer(*skill, &call.data).map(Answer::Data)
            }
            // Leads need the gateway's rules around delivery; `pipeline` runs them.
            Handler::Lead(lead) => Err(AapError::Internal(format!(
                "{}: lead.submit reached the generic handler",
                lead.file
            ))),
        }
    }
}
