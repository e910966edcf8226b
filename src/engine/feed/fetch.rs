//! Fetching a feed: the document (whole, or streamed row by row for CSV) and the file a join
//! names, with conditional requests and the status and document checks.

use super::*;

impl Feed {
    /// Fetches the document through `transport` and builds a snapshot. Decoding, mapping and
    /// indexing a whole inventory is CPU work of up to seconds: it runs on the feed's thread,
    /// never on the async workers that serve buyers.
    pub async fn fetch(self: &Arc<Self>, transport: Transport<'_>) -> Result<Snapshot, AapError> {
        match self.fetch_since(transport, None).await? {
            Fetched::Built(snapshot, _) => Ok(*snapshot),
            Fetched::Unchanged => Err(AapError::Internal(format!(
                "{}: an unconditional fetch came back unchanged",
                self.file
            ))),
        }
    }

    /// [`Feed::fetch`], conditional on `known` (what the served copy was made from): a `304`
    /// or the same body is [`Fetched::Unchanged`].
    pub(super) async fn fetch_since(
        self: &Arc<Self>,
        transport: Transport<'_>,
        known: Option<&Validators>,
    ) -> Result<Fetched, AapError> {
        let started = Instant::now();
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let mut rendered = self
            .request
            .render(Scope::context(&values), None)
            .map_err(|e| AapError::Internal(format!("{}: {e}", self.file)))?;
        // (A feed joined to a second document refetches both: a `304` for one would say
        // nothing of the other. The SHA-256 of both still keeps an unchanged copy.)
        if let Some(known) = known.filter(|_| !self.joins_a_request()) {
            // The mapping's own headers win (a vendor that wants no conditions can say so).
            let conditions: Vec<_> = (known.conditions())
                .filter(|(name, _)| !rendered.headers.iter().any(|(n, _)| n == name))
                .collect();
            rendered.headers.extend(conditions);
        }
        let known_digest = known.and_then(|k| k.digest);
        let previous = self.current();
        // A refresh gives way to the searches of the copy it replaces; a first load is what
        // readiness (or a buyer) waits for.
        let idle = previous.is_some() && self.idle_refreshes.load(Ordering::Relaxed);
        // A joined second document is fetched first, whole.
        let side = self.fetch_side(transport).await?;
        let side_digest = side.as_ref().map(|s| s.digest);
        let (mut snapshot, validators) = match transport {
            // A CSV feed is read as it arrives: the document is never held whole.
            Transport::Live(upstream) if self.csv_rows && upstream.soap().is_none() => {
                match self
                    .fetch_streaming(upstream, rendered, previous, idle, known.is_some(), side)
                    .await?
                {
                    None => return Ok(Fetched::Unchanged),
                    Some((snapshot, validators))
                        if validators.digest.is_some() && validators.digest == known_digest =>
                    {
                        // The same bytes: the copy built meanwhile goes, the served one stays.
                        self.thread.free(snapshot);
                        return Ok(Fetched::Unchanged);
                    }
                    Some(built) => built,
                }
            }
            transport => {
                let response = send(transport, &self.upstream, rendered, true).await?;
                if response.status == http::StatusCode::NOT_MODIFIED && known.is_some() {
                    return Ok(Fetched::Unchanged);
                }
                self.check_status(response.status)?;
                let feed = Arc::clone(self);
                let built = self
                    .thread
                    .run(idle, move || {
                        let digest = combined(Sha256::digest(&response.body).into(), side_digest);
                        if Some(digest) == known_digest {
                            return Ok(None);
                        }
                        let declared = Declared::reply(feed.charset, &response.headers);
                        let snapshot = feed.build_after(
                            &response.body,
                            declared,
                            previous.as_deref(),
                            side.as_ref(),
                        )?;
                        Ok(Some((snapshot, Validators::of(&response.headers, digest))))
                    })
                    .await
                    .map_err(|e| self.building_failed(e))??;
                match built {
                    Some(built) => built,
                    None => return Ok(Fetched::Unchanged),
                }
            }
        };
        snapshot.stats.elapsed = started.elapsed();
        if let Transport::Canned(canned) = transport {
            canned
                .records
                .fetch_add(snapshot.all.len(), std::sync::atomic::Ordering::Relaxed);
        }
        Ok(Fetched::Built(Box::new(snapshot), validators))
    }

    /// Fetches a CSV feed and builds the snapshot from its rows as they arrive: the body goes
    /// from the connection to the mapping thread in pieces (at most [`CHUNKS_IN_FLIGHT`]
    /// waiting), so a refresh never holds the whole document next to the copy it replaces.
    /// `None`: the upstream answered `304` to a `conditional` request.
    pub(super) async fn fetch_streaming(
        self: &Arc<Self>,
        upstream: &Upstream,
        rendered: crate::engine::request::Rendered,
        previous: Option<Arc<Snapshot>>,
        idle: bool,
        conditional: bool,
        side: Option<SideDoc>,
    ) -> Result<Option<(Snapshot, Validators)>, AapError> {
        let request = crate::upstream::UpstreamRequest {
            method: rendered.method,
            path_and_query: rendered.path_and_query,
            headers: rendered.headers,
            body: rendered.body.map(bytes::Bytes::from),
            idempotent: true,
        };
        let (response, stream) = upstream
            .call_streaming(request)
            .await
            .map_err(|e| e.into_aap(upstream.name()))?;
        if response.status == http::StatusCode::NOT_MODIFIED && conditional {
            return Ok(None);
        }
        self.check_status(response.status)?;
        let (chunks, reader) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let feed = Arc::clone(self);
        let headers = response.headers;
        let build = self.thread.run(idle, move || {
            let declared = Declared::reply(feed.charset, &headers);
            let bad = |cause: String| feed.bad_document(cause);
            // A gzip file is unpacked as it arrives; a zip archive is held packed, its member
            // read as a stream (`formats::unpacked`).
            let mut source = ChunkReader::new(reader);
            let previous = previous.as_deref();
            let units = |document: &mut dyn std::io::Read, table: Option<&SideTable>| {
                let rows =
                    formats::csv_stream_with(document, declared, &feed.csv_dialect).map_err(bad)?;
                feed.build_rows(rows, previous, table)
            };
            let snapshot = match &feed.join {
                // The joined member is read first, the units then stream past it.
                Some(
                    join @ Join {
                        side: JoinSide::Member(name),
                        ..
                    },
                ) => formats::unpacked_with_member(
                    &mut source,
                    &feed.unpack,
                    name,
                    |side| {
                        let rows = formats::csv_stream_with(side, declared, &feed.csv_dialect)?;
                        feed.side_table(join, rows)
                    },
                    |table, document| units(document, Some(&table.map_err(bad)?)),
                )
                .map_err(bad)??,
                _ => {
                    let table = (side.as_ref())
                        .map(|side| feed.side_document(side))
                        .transpose()
                        .map_err(bad)?;
                    formats::unpacked(&mut source, declared.content_type, &feed.unpack, |d| {
                        units(d, table.as_ref())
                    })
                    .map_err(bad)??
                }
            };
            let digest = combined(source.digest(), side.map(|s| s.digest));
            Ok::<_, AapError>((snapshot, Validators::of(&headers, digest)))
        });
        let mut bytes = response.body.len();
        let pumped = match stream {
            // A 2xx reply always streams; should it not, its body is all there is.
            None => {
                let _ = chunks.send(Ok(response.body)).await;
                Ok(())
            }
            Some(mut stream) => loop {
                match stream.chunk().await {
                    Ok(Some(chunk)) => {
                        bytes += chunk.len();
                        // Refused: the build stopped (its error is the one to report).
                        if chunks.send(Ok(chunk)).await.is_err() {
                            break Ok(());
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => {
                        let _ = chunks.send(Err(())).await;
                        break Err(e);
                    }
                }
            },
        };
        drop(chunks);
        let built = build.await.map_err(|e| self.building_failed(e))?;
        pumped.map_err(|e| e.into_aap(upstream.name()))?;
        let (mut snapshot, validators) = built?;
        snapshot.stats.bytes = bytes;
        Ok(Some((snapshot, validators)))
    }

    pub(super) fn check_status(&self, status: http::StatusCode) -> Result<(), AapError> {
        if status.is_success() {
            return Ok(());
        }
        Err(AapError::UpstreamUnavailable {
            upstream: self.upstream.name().to_owned(),
            cause: format!("feed answered HTTP {status} ({})", self.file),
        })
    }

    pub(super) fn building_failed(&self, e: String) -> AapError {
        AapError::Internal(format!("{}: building the snapshot: {e}", self.file))
    }

    pub(super) fn bad_document(&self, cause: String) -> AapError {
        AapError::InvalidUpstreamResponse {
            upstream: self.upstream.name().to_owned(),
            cause: format!("{cause} ({})", self.file),
        }
    }

    /// Whether the feed joins a second document of its upstream (`join.request`).
    pub(super) fn joins_a_request(&self) -> bool {
        matches!(
            &self.join,
            Some(Join {
                side: JoinSide::Request(_),
                ..
            })
        )
    }

    /// Fetches the document `join.request` names, whole (`None`: the feed joins none, or the
    /// transport is an example's canned reply, which stands for the units' document alone).
    pub(super) async fn fetch_side(
        &self,
        transport: Transport<'_>,
    ) -> Result<Option<SideDoc>, AapError> {
        let (Some(join), Transport::Live(upstream)) = (&self.join, transport) else {
            return Ok(None);
        };
        let JoinSide::Request(spec) = &join.side else {
            return Ok(None);
        };
        let values = minijinja::context! {
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
        };
        let rendered = spec
            .render(Scope::context(&values), None)
            .map_err(|e| AapError::Internal(format!("{}: join.request: {e}", self.file)))?;
        let response = send(Transport::Live(upstream), &self.upstream, rendered, true).await?;
        if !response.status.is_success() {
            return Err(AapError::UpstreamUnavailable {
                upstream: self.upstream.name().to_owned(),
                cause: format!(
                    "the joined document (`join.request`) answered HTTP {} ({})",
                    response.status, self.file
                ),
            });
        }
        let digest = Sha256::digest(&response.body).into();
        Ok(Some(SideDoc {
            body: response.body,
            headers: response.headers,
            digest,
        }))
    }
}
