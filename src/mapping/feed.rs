//! `feed.yaml`: the inventory feed, taken over from the running configuration when unchanged.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::engine::feed::{Feed, Join, JoinSide};
use crate::formats::{CsvDialect, DEFAULT_MAX_RATIO, Format, Unpack};
use crate::mapping::file::{FileCommon, FileCsvDialect, FileFeed, FileJoin, FileUnpack};

use super::context::Upstreams;
use super::loader::{MappingLoader, Source, items_program};

impl MappingLoader<'_> {
    pub(super) fn feed(
        &mut self,
        upstreams: &Upstreams,
        common: &FileCommon,
        common_src: Option<&Source>,
    ) -> Option<Arc<Feed>> {
        let src = self.read("feed.yaml")?;
        let value = src.value.clone();
        let file: FileFeed = self.deserialize(&src, "", value)?;
        let upstream = self.feed_upstream_ref(&src, "/upstream", &file.upstream, upstreams);
        if upstream.as_ref().is_some_and(|u| u.soap().is_some()) {
            self.problems.push(src.problem(
                "/upstream",
                "a feed is fetched over plain HTTP; a SOAP upstream cannot serve it",
            ));
        }
        let request = self.request(&src, "/request", &file.request, false, false, false);
        let format = match Format::parse(Some(&file.format), &file.list_elements) {
            Ok(f) => Some(f),
            Err(e) => {
                self.problems.push(src.problem("/format", e));
                None
            }
        };
        let charset = self.charset(&src, "/charset", file.charset.as_deref(), format.as_ref());
        // Without `items` the document itself is the list of records (CSV rows, a JSON array).
        let items = self
            .jq(
                &src,
                "/items",
                &items_program(file.items.as_deref().unwrap_or(".")),
                common,
            )
            .map(Some);
        let item = self.jq(&src, "/item", &file.item, common);
        // A CSV document's rows are its records unless `items` says otherwise: they are then
        // read and mapped one at a time, never held as one document.
        let csv_rows = file.items.is_none() && matches!(format, Some(Format::Csv));
        let unpack = self.unpack(&src, file.unpack.as_ref(), upstream.as_deref());
        let dialect = self.csv_dialect(&src, file.csv.as_ref(), csv_rows);
        let join = match &file.join {
            Some(join) => self.join(&src, join, common).map(Some),
            None => Some(None),
        };
        let refresh = self.duration(&src, "/refresh", &file.refresh);
        let max_stale = self.duration(&src, "/max_stale", &file.max_stale);
        if let (Some(r), Some(m)) = (refresh, max_stale)
            && m < r
        {
            self.problems
                .push(src.problem("/max_stale", "must be at least `refresh`"));
            return None;
        }
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        let upstream = upstream?;
        // Everything the feed's snapshot is made from besides its upstream.
        let definition = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&src.text, common_src.map(|c| &c.text), self.ctx.dealer_name).hash(&mut h);
            h.finish()
        };
        let kept = self
            .ctx
            .previous
            .and_then(|p| p.feed.as_ref())
            .filter(|(was, feed)| *was == definition && Arc::ptr_eq(&feed.upstream, &upstream));
        if let Some((_, feed)) = kept {
            self.carried.feed = Some((definition, Arc::clone(feed)));
            return Some(Arc::clone(feed));
        }
        let feed = Arc::new(Feed::new(
            src.path.display().to_string(),
            upstream,
            request?,
            format?,
            charset?,
            unpack?,
            dialect?,
            items?,
            csv_rows,
            item?,
            join?,
            refresh?,
            max_stale?,
            shared,
            self.ctx.schemas.listings(),
        ));
        self.carried.feed = Some((definition, Arc::clone(&feed)));
        Some(feed)
    }

    /// The `join:`: exactly one of `member` and `request`, a key column, a unit key program.
    fn join(&mut self, src: &Source, file: &FileJoin, common: &FileCommon) -> Option<Join> {
        let mut ok = true;
        if file.name.is_empty() {
            self.problems
                .push(src.problem("/join/as", "must name the field the joined rows go to"));
            ok = false;
        }
        if file.key.is_empty() {
            self.problems.push(src.problem(
                "/join/key",
                "must name the joined file's key column, as its header writes it",
            ));
            ok = false;
        }
        let side = match (&file.member, &file.request) {
            (Some(member), None) if !member.is_empty() && !member.ends_with('/') => {
                Some(JoinSide::Member(member.clone()))
            }
            (Some(_), None) => {
                self.problems.push(src.problem(
                    "/join/member",
                    "must name a file in the archive, not a folder",
                ));
                None
            }
            (None, Some(request)) => self
                .request(src, "/join/request", request, false, false, false)
                .map(JoinSide::Request),
            (Some(_), Some(_)) | (None, None) => {
                self.problems.push(src.problem(
                    "/join",
                    "needs one of `member` (another file of the zip archive) and `request` \
                     (a second document of the upstream)",
                ));
                None
            }
        };
        let on = self.jq(src, "/join/on", &file.on, common);
        let (side, on) = (side?, on?);
        ok.then(|| Join {
            name: file.name.clone(),
            side,
            key: file.key.clone(),
            on,
            many: file.many,
        })
    }

    /// The `csv:` dialect; only a feed read row by row has one.
    fn csv_dialect(
        &mut self,
        src: &Source,
        file: Option<&FileCsvDialect>,
        csv_rows: bool,
    ) -> Option<CsvDialect> {
        let Some(file) = file else {
            return Some(CsvDialect::default());
        };
        if !csv_rows {
            self.problems.push(src.problem(
                "/csv",
                "`csv` is for a CSV feed read row by row: `format: csv` without `items`",
            ));
            return None;
        }
        let mut ok = true;
        let mut byte = |pointer: &str, value: &Option<String>, default: u8| match value.as_deref() {
            None => Some(default),
            Some("\\t") => Some(b'\t'),
            Some(text) if text.len() == 1 && text.is_ascii() && text != "\n" && text != "\r" => {
                Some(text.as_bytes()[0])
            }
            Some(text) => {
                self.problems.push(src.problem(
                    pointer,
                    format!("`{text}` is not one ASCII character (write a tab as `\\t`)"),
                ));
                ok = false;
                None
            }
        };
        let delimiter = byte("/csv/delimiter", &file.delimiter, b',');
        let quote = byte("/csv/quote", &file.quote, b'"');
        let decimal_comma = match file.decimal.as_deref() {
            None | Some("point") => Some(false),
            Some("comma") => Some(true),
            Some(other) => {
                self.problems.push(src.problem(
                    "/csv/decimal",
                    format!("unknown decimal `{other}`; expected point or comma"),
                ));
                None
            }
        };
        let (delimiter, quote, decimal_comma) = (delimiter?, quote?, decimal_comma?);
        if delimiter == quote {
            self.problems
                .push(src.problem("/csv/quote", "must differ from the delimiter"));
            ok = false;
        }
        ok.then_some(CsvDialect {
            delimiter,
            quote,
            decimal_comma,
        })
    }

    /// The `unpack:` caps, defaulting to what a plain document may be.
    fn unpack(
        &mut self,
        src: &Source,
        file: Option<&FileUnpack>,
        upstream: Option<&crate::upstream::Upstream>,
    ) -> Option<Unpack> {
        let file = file.cloned().unwrap_or_default();
        let mut ok = true;
        if file
            .member
            .as_deref()
            .is_some_and(|m| m.is_empty() || m.ends_with('/'))
        {
            self.problems.push(src.problem(
                "/unpack/member",
                "must name a file in the archive, not a folder",
            ));
            ok = false;
        }
        for (pointer, value) in [
            ("/unpack/max_bytes", file.max_bytes),
            ("/unpack/max_ratio", file.max_ratio),
        ] {
            if value == Some(0) {
                self.problems
                    .push(src.problem(pointer, "must be at least 1"));
                ok = false;
            }
        }
        let max_bytes = file
            .max_bytes
            .or_else(|| upstream.map(|u| u.settings().max_response_bytes as u64))?;
        ok.then(|| Unpack {
            member: file.member,
            max_bytes,
            max_ratio: file.max_ratio.unwrap_or(DEFAULT_MAX_RATIO),
        })
    }
}
