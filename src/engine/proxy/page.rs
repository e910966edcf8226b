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
    Data::Search(SearchPage::new(page.total, page.skip, page.limit, vehicles))
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
