//! Paging: the default and maximum page size, the `pagination` numbers and the [`Page`] answered.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// Page size when the request gives none (docs/protocol.md §Pagination and totals).
pub const DEFAULT_LIMIT: usize = 20;
/// Hard cap on the page size; larger requested limits are clamped and the effective one echoed.
pub const MAX_LIMIT: usize = 100;

/// `Some(n)` for a non-negative integral JSON number (`20` and `20.0` alike).
pub(super) fn whole(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
            .map(|f| f as u64)
    })
}

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
