//! Paging: the [`Page`] answered (the default and maximum page size are AAP's, in
//! `protocol::search`).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use crate::protocol::search::{DEFAULT_LIMIT, MAX_LIMIT};

/// One page of search results (the AAP `inventory.search.response` `data` without facets).
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// Matching listings across all pages.
    pub total: usize,
    /// Echo of the requested skip.
    pub skip: usize,
    /// The effective limit (after default and clamp).
    pub limit: usize,
    /// The page, in the requested order.
    pub vehicles: Vec<Arc<Value>>,
}
