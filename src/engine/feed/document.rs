//! A fetched document mapped into a [`Snapshot`]: decoded, joined with its side table, every
//! record mapped and packed, the index built (on the feed's thread).

use super::*;

impl Feed {
    /// Maps a fetched document into a snapshot; `declared` names its charset (the mapping's,
    /// the reply's `Content-Type`).
    pub fn build(&self, body: &bytes::Bytes, declared: Declared<'_>) -> Result<Snapshot, AapError> {
        self.build_after(body, declared, None, None)
    }

    /// The joined file's table, from its CSV rows.
    pub(super) fn side_table<R: std::io::Read>(
        &self,
        join: &Join,
        rows: formats::CsvRows<R>,
    ) -> Result<SideTable, String> {
        SideTable::read(join, rows).map_err(|e| match &join.side {
            JoinSide::Member(name) => format!("joined member `{name}`: {e}"),
            JoinSide::Request(_) => format!("joined document (`join.request`): {e}"),
        })
    }

    /// The joined file's table from its bytes (unpacked if packed).
    pub(super) fn side_bytes(
        &self,
        join: &Join,
        body: &[u8],
        declared: Declared<'_>,
    ) -> Result<SideTable, String> {
        let text = formats::CsvText::new(body, declared)?;
        self.side_table(join, text.rows_with(&self.csv_dialect)?)
    }

    /// The table of a joined document fetched on its own (`join.request`).
    pub(super) fn side_document(&self, side: &SideDoc) -> Result<SideTable, String> {
        let Some(join) = &self.join else {
            return Err("no join".to_owned());
        };
        let declared = Declared::reply(self.charset, &side.headers);
        let unpack = Unpack {
            member: None,
            ..self.unpack.clone()
        };
        let unpacked = formats::unpacked_whole(&side.body, declared.content_type, &unpack)?;
        self.side_bytes(join, unpacked.as_deref().unwrap_or(&side.body), declared)
    }

    /// [`Feed::build`], sharing with `previous` every vehicle that maps to exactly what it
    /// holds under the same VIN. The first load (no `previous`) maps records on every core: no
    /// buyer is served yet. A refresh maps on this one thread, leaving the other cores to the
    /// buyers searching the previous copy meanwhile.
    pub(super) fn build_after(
        &self,
        body: &bytes::Bytes,
        declared: Declared<'_>,
        previous: Option<&Snapshot>,
        side: Option<&SideDoc>,
    ) -> Result<Snapshot, AapError> {
        let bad = |cause: String| self.bad_document(cause);
        let packed = body.len();
        let (unpacked, table) = match &self.join {
            Some(
                join @ Join {
                    side: JoinSide::Member(name),
                    ..
                },
            ) => {
                let whole = |file: &mut dyn std::io::Read| {
                    let mut out = Vec::new();
                    file.read_to_end(&mut out)
                        .map(|_| out)
                        .map_err(|e| e.to_string())
                };
                let (side, units) = formats::unpacked_with_member(
                    &body[..],
                    &self.unpack,
                    name,
                    whole,
                    |side, units| Ok::<_, String>((side?, whole(units)?)),
                )
                .and_then(|read| read)
                .map_err(bad)?;
                let table = self.side_bytes(join, &side, declared).map_err(bad)?;
                (Some(bytes::Bytes::from(units)), Some(table))
            }
            _ => {
                let unpacked = formats::unpacked_whole(body, declared.content_type, &self.unpack)
                    .map_err(bad)?
                    .map(bytes::Bytes::from);
                let table = (side.map(|side| self.side_document(side)))
                    .transpose()
                    .map_err(bad)?;
                (unpacked, table)
            }
        };
        let table = table.as_ref();
        let body = unpacked.as_ref().unwrap_or(body);
        if self.csv_rows {
            let text = formats::CsvText::new(body, declared).map_err(bad)?;
            let rows = text.rows_with(&self.csv_dialect).map_err(bad)?;
            let mut snapshot = self.build_rows(rows, previous, table)?;
            snapshot.stats.bytes = packed;
            return Ok(snapshot);
        }
        let vars = self.vars();
        let mut building = Building::new(previous, packed);
        let doc = JqValue::decode(&self.format, body, declared).map_err(bad)?;
        let records = match &self.items {
            Some(items) => items.run(&doc, &vars).map_err(|e| bad(e.to_string()))?,
            None => vec![doc],
        };
        let mut records = records.into_iter();
        let next = || {
            let batch: Vec<JqValue> = records.by_ref().take(BATCH).collect();
            Ok((!batch.is_empty()).then_some(batch))
        };
        let work = |batch: Vec<JqValue>| {
            (batch.iter())
                .map(|record| self.map(record, &vars, table))
                .collect()
        };
        in_order(threads(previous), next, work, |mapped| building.add(mapped)).map_err(bad)?;
        Ok(self.finish(building, table))
    }

    /// A snapshot of a CSV document's rows, each a record.
    pub(super) fn build_rows<R: std::io::Read>(
        &self,
        mut rows: formats::CsvRows<R>,
        previous: Option<&Snapshot>,
        table: Option<&SideTable>,
    ) -> Result<Snapshot, AapError> {
        let vars = self.vars();
        let mut building = Building::new(previous, 0);
        let columns = rows.columns().clone();
        let width = columns.width();
        let mut ragged = 0;
        let next = || {
            let mut batch = Vec::with_capacity(BATCH);
            while batch.len() < BATCH {
                let mut record = csv::StringRecord::new();
                if !rows.next_into(&mut record)? {
                    break;
                }
                // A row with more or fewer fields than the header: its fields cannot be told
                // apart (a shifted column would put the price under the mileage).
                if record.len() != width {
                    ragged += 1;
                    continue;
                }
                batch.push(record);
            }
            Ok((!batch.is_empty()).then_some(batch))
        };
        let objects = TextObjects::new(columns.names());
        let work = |batch: Vec<csv::StringRecord>| {
            batch
                .iter()
                .map(|record| {
                    let row = columns.row(record);
                    let record = objects.build(row.text(), row.entries());
                    self.map(&record, &vars, table)
                })
                .collect()
        };
        in_order(threads(previous), next, work, |mapped| building.add(mapped))
            .map_err(|cause| self.bad_document(cause))?;
        building.stats.ragged = ragged;
        Ok(self.finish(building, table))
    }

    pub(super) fn vars(&self) -> JqVars {
        JqVars {
            request: JqValue::from_json(&Value::Null),
            tables: self.shared.tables_jq.clone(),
            dealer: self.shared.dealer_jq.clone(),
            lead: JqValue::null(),
        }
    }

    /// The snapshot, once every record is in; skipped records are logged and counted.
    pub(super) fn finish(&self, mut building: Building<'_>, table: Option<&SideTable>) -> Snapshot {
        if let Some(table) = table {
            let join = table.stats();
            building.stats.join = Some(join);
            tracing::info!(
                feed = %self.file,
                joined = join.joined,
                unmatched = join.unmatched,
                ambiguous = join.ambiguous_units,
                "feed units joined"
            );
            if join.ambiguous_keys > 0 {
                tracing::warn!(
                    feed = %self.file,
                    keys = join.ambiguous_keys,
                    units = join.ambiguous_units,
                    "join keys held by more than one row of the joined file: the units with \
                     them got none of the rows (`join.many: true` lists them all)"
                );
                if let Some(meter) = self.upstream.meter() {
                    meter.mapping_event("join_key_ambiguous", join.ambiguous_keys as u64);
                }
            }
        }
        let first_skip = (self.first_skip.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if building.stats.skipped > 0 {
            let skipped = building.stats.skipped;
            let first = first_skip.as_deref().unwrap_or("");
            tracing::warn!(feed = %self.file, skipped, first, "feed records the item mapping could not map");
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("record_skipped", skipped as u64);
            }
        }
        let first_invalid = (self.first_invalid.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if building.stats.invalid > 0 {
            let dropped = building.stats.invalid;
            let failures = first_invalid.unwrap_or_default().join(", ");
            tracing::warn!(
                feed = %self.file,
                dropped,
                failures,
                "feed listings the AAP listing schema refuses were dropped (never served, never \
                 counted in a total)"
            );
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("listing_invalid", dropped as u64);
            }
        }
        if building.stats.ragged > 0 {
            let ragged = building.stats.ragged;
            tracing::warn!(
                feed = %self.file,
                ragged,
                "feed CSV rows with more or fewer fields than the header: skipped"
            );
            if let Some(meter) = self.upstream.meter() {
                meter.mapping_event("csv_row_ragged", ragged as u64);
            }
        }
        let mut snapshot = building.finish();
        snapshot.first_skip = first_skip;
        snapshot
    }

    /// What the item mapping makes of one record, ready for the snapshot; `None`: the
    /// mapping failed on it.
    pub(super) fn map(
        &self,
        record: &JqValue,
        vars: &JqVars,
        table: Option<&SideTable>,
    ) -> Result<MappedRecord, Unmapped> {
        let joined;
        let record = match (table, &self.join) {
            (Some(table), Some(join)) => {
                joined = table.joined(join, record, vars);
                &joined
            }
            _ => record,
        };
        let vehicle = match self.item.run_one_json(record, vars) {
            Ok(vehicle) => vehicle,
            Err(e) => {
                let mut first = self
                    .first_skip
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if first.is_none() {
                    *first = Some(e.to_string());
                }
                return Err(Unmapped::Failed);
            }
        };
        // A unit AAP may show answers to the listing schema here, once, so that one bad unit
        // never fails every search page it would be on (sold ones are never served).
        if crate::engine::proxy::is_listable(&vehicle)
            && let Err(why) = self.listings.check_json(&vehicle)
        {
            let mut first = (self.first_invalid.lock()).unwrap_or_else(PoisonError::into_inner);
            first.get_or_insert(why);
            return Err(Unmapped::Invalid);
        }
        let key = |name: &str| vehicle.get(name).and_then(Value::as_str);
        Ok(MappedRecord {
            vin: key("vin").map(str::to_ascii_uppercase),
            stock: key("stock").map(str::to_owned),
            id: key("vehicle_id").map(str::to_owned),
            prepared: Prepared::of(&vehicle),
            encoded: Packed::encode(&vehicle),
        })
    }
}
