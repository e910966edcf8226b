//! A second file joined to the units by a key (`join:` of a feed mapping): photos by stock
//! number, options by VIN. The joined file is read whole into a table by key before the units
//! are mapped; each unit's record gets the rows its key finds under the join's name.
//!
//! Exact or loud: a unit whose key finds nothing keeps its own fields (the name is not set);
//! with `many: false` a key that two rows of the joined file hold is ambiguous — the units with
//! it get neither row (none is picked silently), and the keys are counted and logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::engine::request::RequestSpec;
use crate::formats::CsvRows;
use crate::lang::jq::{Jq, JqValue, JqVars, TextObjects};

/// A compiled `join:`.
#[derive(Debug)]
pub struct Join {
    /// The field of the unit's record the joined rows go to.
    pub name: String,
    /// Where the joined file is.
    pub side: JoinSide,
    /// The joined file's column holding the key.
    pub key: String,
    /// jq: the unit record's key.
    pub on: Jq,
    /// Every row a key finds, as a list (photos: a row per photo); else the one row.
    pub many: bool,
}

/// Where a joined file comes from.
#[derive(Debug)]
pub enum JoinSide {
    /// Another file of the feed's zip archive.
    Member(String),
    /// A second document of the feed's upstream.
    Request(RequestSpec),
}

/// The joined file's rows by key.
#[derive(Debug)]
pub(super) struct SideTable {
    rows: HashMap<Box<str>, Entry>,
    /// Keys more than one row holds (`many: false` only).
    pub(super) ambiguous_keys: usize,
    /// Units whose key found no row (or that have no key).
    unmatched: AtomicUsize,
    /// Units whose key is ambiguous.
    ambiguous_units: AtomicUsize,
    /// Units that got their rows.
    joined: AtomicUsize,
}

#[derive(Debug)]
enum Entry {
    Found(JqValue),
    Ambiguous,
}

/// How the join went, for the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinStats {
    pub joined: usize,
    pub unmatched: usize,
    pub ambiguous_units: usize,
    pub ambiguous_keys: usize,
}

impl SideTable {
    /// Reads every row of the joined file; an error names what is missing.
    pub(super) fn read<R: std::io::Read>(
        join: &Join,
        mut rows: CsvRows<R>,
    ) -> Result<SideTable, String> {
        let columns = rows.columns().clone();
        let names: Vec<&str> = columns.names().collect();
        let Some(key_at) = names.iter().position(|n| *n == join.key) else {
            let shown: Vec<String> = names.iter().take(12).map(|n| format!("`{n}`")).collect();
            return Err(format!(
                "the joined file has no column `{}` (`join.key`); its columns: {}",
                join.key,
                shown.join(", ")
            ));
        };
        let objects = TextObjects::new(names.iter().copied());
        let mut lists: HashMap<Box<str>, Vec<JqValue>> = HashMap::new();
        let mut record = csv::StringRecord::new();
        while rows.next_into(&mut record)? {
            let row = columns.row(&record);
            let Some(key) = row
                .entries()
                .find(|(at, _)| *at == key_at)
                .map(|(_, key)| key)
                .filter(|key| !key.is_empty())
            else {
                continue;
            };
            let value = objects.build(row.text(), row.entries());
            match lists.get_mut(key) {
                Some(list) => list.push(value),
                None => {
                    lists.insert(key.into(), vec![value]);
                }
            }
        }
        let mut ambiguous_keys = 0;
        let rows = lists
            .into_iter()
            .map(|(key, mut list)| {
                let entry = if join.many {
                    Entry::Found(JqValue::array(list))
                } else if list.len() == 1 {
                    Entry::Found(list.pop().unwrap_or_default())
                } else {
                    ambiguous_keys += 1;
                    Entry::Ambiguous
                };
                (key, entry)
            })
            .collect();
        Ok(SideTable {
            rows,
            ambiguous_keys,
            unmatched: AtomicUsize::new(0),
            ambiguous_units: AtomicUsize::new(0),
            joined: AtomicUsize::new(0),
        })
    }

    /// `record` with the rows its key finds under the join's name; `record` itself when it
    /// finds none.
    pub(super) fn joined(&self, join: &Join, record: &JqValue, vars: &JqVars) -> JqValue {
        let key = join
            .on
            .run_one(record, vars)
            .ok()
            .and_then(|k| k.key_text());
        let found = key.and_then(|key| self.rows.get(key.as_str()));
        let counter = match found {
            Some(Entry::Found(rows)) => match record.with_field(&join.name, rows.clone()) {
                Some(with) => {
                    self.joined.fetch_add(1, Ordering::Relaxed);
                    return with;
                }
                None => &self.unmatched,
            },
            Some(Entry::Ambiguous) => &self.ambiguous_units,
            None => &self.unmatched,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        record.clone()
    }

    pub(super) fn stats(&self) -> JoinStats {
        JoinStats {
            joined: self.joined.load(Ordering::Relaxed),
            unmatched: self.unmatched.load(Ordering::Relaxed),
            ambiguous_units: self.ambiguous_units.load(Ordering::Relaxed),
            ambiguous_keys: self.ambiguous_keys,
        }
    }
}
