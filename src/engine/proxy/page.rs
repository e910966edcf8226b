//! AAP's search window and page, and whether a buyer may see a vehicle.

use serde_json::Value;

use crate::error::{AapCode, AapError};
use crate::inventory;
use crate::protocol::Data;
use crate::protocol::vehicle::{SearchPage, Vehicle};

/// Whether a buyer may see this vehicle: its `status` (docs/protocol.md §Listing status).
pub fn is_listable(vehicle: &Value) -> bool {
    is_listable_status(vehicle.get("status").and_then(Value::as_str))
}

/// Whether a buyer may see a vehicle of this `status`.
pub fn is_listable_status(status: Option<&str>) -> bool {
    status.is_some_and(|s| inventory::SERVABLE_STATUSES.contains(&s))
}

/// `inventory.vehicle` must not answer a unit that left stock (docs/protocol.md §Listing status).
pub fn check_listable(vehicle: &Value) -> Result<(), AapError> {
    if is_listable(vehicle) {
        Ok(())
    } else {
        Err(AapError::domain(
            AapCode::VehicleUnavailable,
            "This vehicle is no longer available.",
        ))
    }
}

/// The `data` of an `inventory.search.response` answered from listings the gateway holds.
pub fn page_data(page: inventory::Page) -> Data {
    let vehicles = page.vehicles.into_iter().map(Vehicle::Json).collect();
    // Every listing the gateway holds was checked when it was read (`Listings::retain_valid`
    // for a proxied page, `Listings::check_json` for a feed's unit).
    Data::Search(SearchPage::new(page.total, page.skip, page.limit, vehicles).listings_checked())
}

pub(super) fn as_count(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The target of a `Link: <…>; rel="next"` header (RFC 8288), if the reply has one.
pub(super) fn next_link(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(links)
        .find(|(_, rels)| {
            rels.split_ascii_whitespace()
                .any(|r| r.eq_ignore_ascii_case("next"))
        })
        .map(|(target, _)| target.to_owned())
}

/// Each `<target>; params` of a `Link` header value, with its `rel` parameter.
fn links(value: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = value;
    std::iter::from_fn(move || {
        let open = rest.find('<')?;
        let close = open + rest[open..].find('>')?;
        let target = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let end = after.find('<').unwrap_or(after.len());
        let params = &after[..end];
        rest = &after[end..];
        let rel = params
            .split(';')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("rel"))
            .map_or("", |(_, v)| v.trim().trim_matches('"'));
        Some((target, rel))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_read_from_any_link_header() {
        let mut headers = http::HeaderMap::new();
        headers.append(
            http::header::LINK,
            http::HeaderValue::from_static(
                "<https://dms.example/v1/units?page=1>; rel=\"prev first\", \
                 <https://dms.example/v1/units?page=3&a=b,c>; rel=\"next\"",
            ),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://dms.example/v1/units?page=3&a=b,c")
        );
        let mut last = http::HeaderMap::new();
        last.append(
            http::header::LINK,
            http::HeaderValue::from_static("</v1/units?page=1>; rel=first"),
        );
        assert_eq!(next_link(&last), None);
    }
}
