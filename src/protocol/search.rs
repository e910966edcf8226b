//! A validated `inventory.search.request`, read once into the parts the gateway acts on: the
//! filters, the order and the window (docs/protocol.md §Search semantics, §Pagination and
//! totals). Every later stage — the proxy's choice between the upstream's pages and a scan, the
//! in-memory search, the feed — reads these fields, never the request's JSON again.

use std::sync::LazyLock;

use serde_json::{Map, Value};

/// Page size when the request gives none (docs/protocol.md §Pagination and totals).
pub const DEFAULT_LIMIT: usize = 20;
/// Hard cap on the page size; larger requested limits are clamped and the effective one echoed.
pub const MAX_LIMIT: usize = 100;

/// A search request's parts, borrowed from the validated request.
#[derive(Debug, Clone, Copy)]
pub struct SearchRequest<'a> {
    /// The request as validated: what templates see as `request` and jq programs as
    /// `$request`.
    pub data: &'a Value,
    /// `filters` (empty when absent).
    pub filters: &'a Map<String, Value>,
    pub sort: Option<Sort<'a>>,
    /// `pagination.skip` (0 when absent).
    pub skip: usize,
    /// The effective `pagination.limit`: [`DEFAULT_LIMIT`] when absent, clamped to
    /// 1..=[`MAX_LIMIT`].
    pub limit: usize,
}

/// `sort`: a field and its direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort<'a> {
    pub field: &'a str,
    pub descending: bool,
}

static NO_FILTERS: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// The `filters` of a validated search or facets request (empty when absent).
pub fn filters(data: &Value) -> &Map<String, Value> {
    data.get("filters")
        .and_then(Value::as_object)
        .unwrap_or(&NO_FILTERS)
}

impl<'a> SearchRequest<'a> {
    /// Reads a request the search schema accepted. What the schema refuses cannot reach here;
    /// a member of another type than the schema's is read as absent.
    pub fn read(data: &'a Value) -> SearchRequest<'a> {
        let filters = filters(data);
        let sort = data.get("sort").and_then(|sort| {
            Some(Sort {
                field: sort.get("field")?.as_str()?,
                descending: sort.get("order").and_then(Value::as_str) == Some("desc"),
            })
        });
        // `get` twice, not `Value::pointer`, which copies each step of its path to unescape it.
        let pagination = data.get("pagination");
        let number = |key: &str| {
            pagination
                .and_then(|p| p.get(key))
                .and_then(whole)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        SearchRequest {
            data,
            filters,
            sort,
            skip: number("skip").unwrap_or(0),
            limit: number("limit").unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT),
        }
    }
}

/// `Some(n)` for a non-negative integral JSON number (`20` and `20.0` alike).
fn whole(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_empty_request_is_every_listing_in_the_default_order_and_window() {
        let data = json!({ "type": "inventory.search.request" });
        let request = SearchRequest::read(&data);
        assert!(request.filters.is_empty());
        assert_eq!(request.sort, None);
        assert_eq!((request.skip, request.limit), (0, DEFAULT_LIMIT));
    }

    #[test]
    fn the_window_is_clamped_and_whole_floats_count() {
        let data = json!({ "pagination": { "skip": 40.0, "limit": 500 } });
        let request = SearchRequest::read(&data);
        assert_eq!((request.skip, request.limit), (40, MAX_LIMIT));
        let data = json!({ "pagination": { "limit": 0 } });
        assert_eq!(SearchRequest::read(&data).limit, 1);
        let data = json!({ "pagination": { "skip": 2.5 } });
        assert_eq!(SearchRequest::read(&data).skip, 0);
    }

    #[test]
    fn sort_reads_field_and_direction() {
        let data = json!({ "sort": { "field": "price", "order": "desc" }, "filters": { "make": ["Kia"] } });
        let request = SearchRequest::read(&data);
        assert_eq!(
            request.sort,
            Some(Sort {
                field: "price",
                descending: true
            })
        );
        assert_eq!(request.filters.len(), 1);
        let data = json!({ "sort": { "field": "year" } });
        assert!(
            !SearchRequest::read(&data)
                .sort
                .is_some_and(|s| s.descending)
        );
    }
}
