//! A snapshot being built from mapped records, and its lookups by VIN, stock number and id.

use std::hash::BuildHasher;
use std::time::Instant;

use hashbrown::HashTable;

use super::parallel::threads;
use super::{BuildStats, Snapshot};
use crate::inventory::packed::Packed;
use crate::inventory::{InventoryBuilder, Prepared, Stored};

/// One record as the item mapping made it, ready to join the snapshot.
pub(super) struct MappedRecord {
    pub(super) prepared: Prepared,
    /// The vehicle's [packed](Packed) encoding; the snapshot keeps its own copy only of a
    /// vehicle that changed (see [`Building::add`]).
    pub(super) encoded: Vec<u8>,
    /// Upper-cased.
    pub(super) vin: Option<String>,
    pub(super) stock: Option<String>,
    pub(super) id: Option<String>,
}

/// Why a record did not become a listing.
pub(super) enum Unmapped {
    /// The item mapping failed on it.
    Failed,
    /// Its listing is one AAP's listing schema refuses (an impossible year, a negative price).
    Invalid,
}

/// A snapshot being built, one mapped record at a time, in feed order.
pub(super) struct Building<'a> {
    previous: Option<&'a Snapshot>,
    all: Vec<Packed>,
    inventory: InventoryBuilder,
    by_vin: Lookup,
    by_stock: Lookup,
    by_id: Lookup,
    /// The VINs added so far, as indices of `by_vin`'s entries by the VIN's hash: a feed that
    /// repeats a unit lists it once. (No copy of the VINs: those are in `by_vin`.)
    seen_vins: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    pub(super) stats: BuildStats,
}

impl<'a> Building<'a> {
    pub(super) fn new(previous: Option<&'a Snapshot>, bytes: usize) -> Building<'a> {
        // A refresh reserves what the copy it replaces needed (see `sized_like`).
        let room = |n: usize| n + n / 32;
        Building {
            previous,
            all: Vec::with_capacity(previous.map_or(0, |p| room(p.all.len()))),
            inventory: previous.map_or_else(InventoryBuilder::new, |p| {
                InventoryBuilder::sized_like(&p.inventory)
            }),
            by_vin: Lookup::sized_like(previous.map(|p| &p.by_vin)),
            by_stock: Lookup::sized_like(previous.map(|p| &p.by_stock)),
            by_id: Lookup::sized_like(previous.map(|p| &p.by_id)),
            seen_vins: HashTable::with_capacity(previous.map_or(0, Snapshot::len)),
            hasher: foldhash::fast::RandomState::default(),
            stats: BuildStats {
                bytes,
                ..BuildStats::default()
            },
        }
    }

    /// Adds what the item mapping made of one record. One broken record must not take the
    /// whole inventory down: it is counted and skipped.
    pub(super) fn add(&mut self, mapped: Result<MappedRecord, Unmapped>) {
        let MappedRecord {
            prepared,
            encoded,
            vin,
            stock,
            id,
        } = match mapped {
            Ok(record) => record,
            Err(Unmapped::Failed) => {
                self.stats.skipped += 1;
                return;
            }
            Err(Unmapped::Invalid) => {
                self.stats.invalid += 1;
                return;
            }
        };
        // A feed that repeats a unit lists it once (the first row wins).
        let vin_hash = vin.as_deref().map(|vin| self.hasher.hash_one(vin));
        if let (Some(vin), Some(hash)) = (vin.as_deref(), vin_hash) {
            let by_vin = &self.by_vin;
            if (self.seen_vins)
                .find(hash, |&entry| by_vin.key_at(entry) == Some(vin))
                .is_some()
            {
                self.stats.repeated += 1;
                return;
            }
        }
        let Ok(index) = u32::try_from(self.all.len()) else {
            self.stats.skipped += 1;
            return;
        };
        let unchanged = vin.as_deref().and_then(|vin| {
            let previous = self.previous?;
            let kept = previous.all.get(previous.by_vin.get(vin)? as usize)?;
            (kept.as_bytes() == encoded.as_slice()).then(|| kept.clone())
        });
        if unchanged.is_some() {
            self.stats.reused += 1;
        }
        // A refresh shares most vehicles with the copy it replaces: only a changed one needs
        // an allocation of its own.
        let packed = unchanged.unwrap_or_else(|| Packed::from_packed_bytes(&encoded));
        if let (Some(vin), Some(hash)) = (vin, vin_hash)
            && let Some(entry) = self.by_vin.insert(&vin, index)
        {
            let (by_vin, hasher) = (&self.by_vin, &self.hasher);
            self.seen_vins.insert_unique(hash, entry, |&entry| {
                hasher.hash_one(by_vin.key_at(entry).unwrap_or(""))
            });
        }
        if let Some(stock) = &stock {
            self.by_stock.insert(stock, index);
        }
        if let Some(id) = &id {
            self.by_id.insert(id, index);
        }
        self.inventory
            .push_prepared(prepared, Stored::Packed(packed.clone()));
        self.all.push(packed);
    }

    pub(super) fn finish(self) -> Snapshot {
        let Building {
            previous,
            all,
            inventory,
            by_vin,
            by_stock,
            by_id,
            stats,
            seen_vins,
            hasher: _,
        } = self;
        // Only `add` needed it: gone before the orders are sorted.
        drop(seen_vins);
        // As the mapping (`threads`): a first load sorts on every core, a refresh on one.
        let threads = threads(previous);
        let mut lookups = [by_vin, by_stock, by_id];
        let mut sealed = false;
        let inventory = if threads > 1 {
            std::thread::scope(|scope| {
                let target = &mut lookups;
                let sealing = std::thread::Builder::new()
                    .name("feed-sorting".to_owned())
                    .spawn_scoped(scope, move || target.iter_mut().for_each(Lookup::seal));
                let inventory = inventory.finish_on(threads);
                if let Ok(sealing) = sealing {
                    if let Err(panic) = sealing.join() {
                        std::panic::resume_unwind(panic);
                    }
                    sealed = true;
                }
                inventory
            })
        } else {
            inventory.finish()
        };
        if !sealed {
            lookups.iter_mut().for_each(Lookup::seal);
        }
        let [by_vin, by_stock, by_id] = lookups;
        Snapshot {
            inventory,
            all: all.into_boxed_slice(),
            by_vin,
            by_stock,
            by_id,
            fetched_at: Instant::now(),
            stats,
            first_skip: None,
        }
    }
}

/// Vehicles by one identifier, exact match; a repeated identifier finds the last vehicle that
/// has it. The keys share one buffer (no allocation per vehicle).
#[derive(Debug, Default)]
pub(super) struct Lookup {
    text: String,
    /// `(start, end, vehicle)`: the key's bytes in `text`; sorted by key, then vehicle, once
    /// sealed.
    entries: Vec<(u32, u32, u32)>,
}

impl Lookup {
    /// An empty lookup with room for about what `like` holds.
    pub(super) fn sized_like(like: Option<&Lookup>) -> Lookup {
        let room = |n: usize| n + n / 32;
        like.map_or_else(Lookup::default, |like| Lookup {
            text: String::with_capacity(room(like.text.len())),
            entries: Vec::with_capacity(room(like.entries.len())),
        })
    }

    /// Adds a key; its entry's index until the lookup is sealed. (Past 4 GiB of keys, or
    /// of entries, one is left out: no feed gets there under `max_response_bytes`.)
    pub(super) fn insert(&mut self, key: &str, vehicle: u32) -> Option<u32> {
        let start = u32::try_from(self.text.len()).ok()?;
        let end = u32::try_from(self.text.len() + key.len()).ok()?;
        let entry = u32::try_from(self.entries.len()).ok()?;
        self.text.push_str(key);
        self.entries.push((start, end, vehicle));
        Some(entry)
    }

    /// The key of entry `entry` (as [`Lookup::insert`] numbered it).
    fn key_at(&self, entry: u32) -> Option<&str> {
        self.entries.get(entry as usize).map(|e| self.key(e))
    }

    pub(super) fn key(&self, &(start, end, _): &(u32, u32, u32)) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    /// Sorts the keys for [`Lookup::get`].
    pub(super) fn seal(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)).then(a.2.cmp(&b.2)));
        entries.shrink_to_fit();
        self.entries = entries;
        self.text.shrink_to_fit();
    }

    pub(super) fn get(&self, key: &str) -> Option<u32> {
        let after = self.entries.partition_point(|e| self.key(e) <= key);
        let last = self.entries.get(after.checked_sub(1)?)?;
        (self.key(last) == key).then_some(last.2)
    }
}
