//! The listings one walk over an upstream's pages has met, by identity: a record that comes
//! back on a later page (an upstream whose order shifts while it is paged) makes the walk
//! refuse its answer rather than count a unit twice.
//!
//! A listing's identity is its VIN (ASCII upper case), else its stock number. Every record of
//! every proxied search passes through here, so identities are written end to end into one
//! buffer and found by hash: no allocation per record, and equality is exact (a hash match is
//! confirmed on the bytes).

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::protocol::vehicle::{Field, Vehicle};

/// Identities met so far.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Every identity met, end to end: a kind byte (`v` VIN, `s` stock number) and its text.
    text: Vec<u8>,
    /// Spans of `text`, by hash.
    spans: HashTable<Span>,
    hasher: RandomState,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    hash: u64,
    start: u32,
    end: u32,
}

impl Seen {
    /// Room for `records` identities of ~18 bytes without growing.
    pub(super) fn with_capacity(records: usize) -> Self {
        Self {
            text: Vec::with_capacity(records * 18),
            spans: HashTable::with_capacity(records),
            hasher: RandomState::default(),
        }
    }

    /// Whether `vehicle` is met for the first time (a listing without a VIN or stock number has
    /// no identity, and is never a repeat).
    pub(super) fn first_time(&mut self, vehicle: &Vehicle) -> bool {
        let start = self.text.len();
        if let Some(vin) = text(vehicle, "vin").filter(|v| !v.is_empty()) {
            self.text.push(b'v');
            self.text.extend_from_slice(vin.as_bytes());
            self.text[start + 1..].make_ascii_uppercase();
        } else if let Some(stock) = text(vehicle, "stock").filter(|s| !s.is_empty()) {
            self.text.push(b's');
            self.text.extend_from_slice(stock.as_bytes());
        } else {
            return true;
        }
        let (Ok(start32), Ok(end)) = (u32::try_from(start), u32::try_from(self.text.len())) else {
            // Past 4 GiB of identities: a walk never gets here (`scan_limit`), but a repeat
            // must not be missed if one did.
            self.text.truncate(start);
            return false;
        };
        let (text, new) = self.text.split_at(start);
        let hash = self.hasher.hash_one(new);
        let found = self.spans.find(hash, |s| {
            s.hash == hash && &text[s.start as usize..s.end as usize] == new
        });
        if found.is_some() {
            self.text.truncate(start);
            return false;
        }
        let span = Span {
            hash,
            start: start32,
            end,
        };
        self.spans.insert_unique(hash, span, |s| s.hash);
        true
    }
}

/// The text of a listing's key, when it is text.
fn text<'v>(vehicle: &'v Vehicle, key: &str) -> Option<&'v str> {
    match vehicle {
        Vehicle::Json(v) => v.get(key)?.as_str(),
        Vehicle::Record(r) => match r.get(key)? {
            Field::Text(t) => Some(t.as_str(r.body())),
            Field::Json(v) => v.as_str(),
            Field::List(_) | Field::Num(_) => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn listing(value: serde_json::Value) -> Vehicle {
        Vehicle::Json(std::sync::Arc::new(value))
    }

    #[test]
    fn a_vin_is_met_once_whatever_its_case() {
        let mut seen = Seen::default();
        assert!(seen.first_time(&listing(json!({"vin": "1hgcm82633a004352"}))));
        assert!(!seen.first_time(&listing(json!({"vin": "1HGCM82633A004352"}))));
        assert!(seen.first_time(&listing(json!({"vin": "1HGCM82633A004353"}))));
    }

    #[test]
    fn a_stock_number_is_the_identity_only_without_a_vin_and_keeps_its_case() {
        let mut seen = Seen::with_capacity(4);
        assert!(seen.first_time(&listing(json!({"stock": "a-17"}))));
        assert!(seen.first_time(&listing(json!({"stock": "A-17"}))));
        assert!(!seen.first_time(&listing(json!({"stock": "a-17", "vin": ""}))));
        // The same text as a VIN and as a stock number are two identities.
        assert!(seen.first_time(&listing(json!({"vin": "A-17"}))));
        assert!(!seen.first_time(&listing(json!({"vin": "a-17", "stock": "x"}))));
    }

    #[test]
    fn a_listing_without_identity_is_never_a_repeat() {
        let mut seen = Seen::default();
        for _ in 0..3 {
            assert!(seen.first_time(&listing(json!({"price": 1}))));
            assert!(seen.first_time(&listing(json!({"vin": 17}))));
        }
    }

    #[test]
    fn many_identities_are_told_apart_exactly() {
        let mut seen = Seen::with_capacity(2);
        for i in 0..5_000 {
            assert!(seen.first_time(&listing(json!({"vin": format!("VIN{i:014}")}))));
        }
        for i in (0..5_000).step_by(7) {
            assert!(!seen.first_time(&listing(json!({"vin": format!("vin{i:014}")}))));
        }
    }
}
