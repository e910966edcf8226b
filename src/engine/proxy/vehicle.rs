//! `inventory.vehicle` by an identifier the dealer's detail call cannot take (issue 37 item 6):
//! many DMS detail endpoints are by VIN only, while buyers quote the stock number on the
//! window sticker. The unit is found in the search mapping's scan — the same exact-or-refused
//! walk, and `scan_cache`, that completes searches — then answered by the detail call with an
//! identifier it takes, or from the listing itself when there is no detail call
//! (`derive: search`).
//!
//! A unit the upstream lists with a status AAP may not show (sold, held) is
//! `VEHICLE_UNAVAILABLE`; one it does not list is `VEHICLE_NOT_FOUND` — only ever after a whole
//! scan: a scan that cannot be whole is refused, never read as "not found".

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{ProxyMapping, Transport};
use crate::error::{AapCode, AapError};
use crate::protocol::Data;

/// The identifiers of `inventory.vehicle.request`, most specific first (AAP: "the dealer uses
/// the most specific match").
pub const IDENTIFIERS: [&str; 3] = ["vin", "stock", "vehicle_id"];

/// An `inventory.vehicle` answered through the search mapping's scan for identifiers its
/// detail call does not take.
#[derive(Debug)]
pub struct ScannedVehicle {
    /// The detail call, if the upstream has one.
    pub detail: Option<Arc<ProxyMapping>>,
    /// The identifiers the detail call takes (a subset of [`IDENTIFIERS`]).
    pub takes: Vec<&'static str>,
    /// The search mapping whose scan finds the unit.
    pub search: Arc<ProxyMapping>,
}

impl ScannedVehicle {
    /// Answers a validated `inventory.vehicle.request`. `canned`: examples and dry runs, where
    /// every call gets the canned reply.
    pub async fn execute(
        &self,
        canned: Option<&super::Canned>,
        request: &Value,
    ) -> Result<Data, AapError> {
        fn transport<'a>(canned: Option<&'a super::Canned>, m: &'a ProxyMapping) -> Transport<'a> {
            match canned {
                Some(c) => Transport::Canned(c),
                None => Transport::Live(&m.upstream),
            }
        }
        let Some((key, value)) = IDENTIFIERS
            .iter()
            .find_map(|k| Some((*k, request.get(*k)?.as_str()?)))
        else {
            return Err(not_found());
        };
        if let Some(detail) = &self.detail
            && self.takes.contains(&key)
        {
            return detail
                .execute_with(transport(canned, detail), request)
                .await;
        }
        let inventory = self
            .search
            .scan_everything(transport(canned, &self.search))
            .await?;
        let Some((unit, servable)) = inventory.identify(key, value) else {
            return Err(not_found());
        };
        if !servable {
            return Err(AapError::domain(
                AapCode::VehicleUnavailable,
                "This vehicle is no longer available.",
            ));
        }
        // The detail call, asked by an identifier of the unit it takes: the full record, and
        // the upstream's own word on whether it is still for sale.
        if let Some(detail) = &self.detail
            && let Some((key, value)) = self.takes.iter().find_map(|k| {
                let v = unit.get(*k)?.as_str()?;
                Some((*k, v))
            })
        {
            let mut asked = Map::new();
            asked.insert("type".into(), Value::from("inventory.vehicle.request"));
            asked.insert(key.into(), Value::from(value));
            return detail
                .execute_with(transport(canned, detail), &Value::Object(asked))
                .await;
        }
        Ok(Data::Json(Arc::unwrap_or_clone(unit)))
    }
}

fn not_found() -> AapError {
    AapError::domain(
        AapCode::VehicleNotFound,
        "No vehicle at this dealer matches that identifier.",
    )
}
