//! A proxy-mode mapping compiled: response programs, error rules, `supports`, and what `check`
//! says about its listings and statuses.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::engine::proxy::{
    CursorCache, ErrorRule, Missing, NextPage, ProxyMapping, ResponseSpec, RuleOutcome, ScanCache,
    SortSupport, StatusMatch, Supports, Values,
};
use crate::error::AapCode;
use crate::formats::Format;
use crate::lang::jq::Jq;
use crate::mapping::file::{
    FileCommon, FileFilterSupport, FileListing, FileMissing, FilePagination, FileResponse,
    FileRuleReply, FileScanQuery, FileSkill, FileSortSupport, FileSupports, FileTies, FileValues,
};
use crate::protocol::Skill;
use crate::upstream::Upstream;

use super::loader::{MappingLoader, Source, items_program};

impl MappingLoader<'_> {
    /// A proxy-mode skill file, compiled step by step; every problem of the file is reported.
    pub(super) fn proxy(
        &mut self,
        skill: Skill,
        src: &Source,
        file: FileSkill,
        upstream: Option<Arc<Upstream>>,
        common: &FileCommon,
    ) -> Option<ProxyMapping> {
        // Without a usable upstream, guess its kind from the file so the request's own
        // problems are still reported.
        let soap = match &upstream {
            Some(u) => u.soap().is_some(),
            None => file.request.as_ref().is_some_and(|r| r.action.is_some()),
        };
        let lead = skill == Skill::LeadSubmit;
        let list = skill == Skill::InventorySearch;
        let request = match &file.request {
            Some(r) => self.request(src, "/request", r, soap, lead, list),
            None => {
                self.problems
                    .push(src.problem("", "a proxy-mode mapping needs `request`"));
                None
            }
        };
        let response_file = file.response.clone().unwrap_or_default();
        let (format, charset) = self.reply_format(src, soap, &response_file);
        let response = if list {
            let paging = file.request.as_ref().and_then(|r| r.pagination.as_ref());
            let next_page = self.next_page(src, paging, common);
            self.list_response(src, skill, &response_file, soap, format.as_ref(), common)
                .zip(next_page)
                .map(|(response, next)| match response {
                    ResponseSpec::List {
                        items,
                        total,
                        item,
                        records,
                        next_page: _,
                    } => ResponseSpec::List {
                        items,
                        total,
                        item,
                        records,
                        next_page: next,
                    },
                    other @ ResponseSpec::Object { .. } => other,
                })
        } else {
            self.object_response(src, skill, &response_file, common)
        };
        let errors = self.error_rules(src, &file, soap, list, common);
        if let Some(upstream) = upstream.as_ref().filter(|u| !u.uses_oauth2()) {
            for (i, rule) in file.errors.iter().enumerate() {
                if rule.reauthenticate {
                    self.problems.push(src.problem(
                        &format!("/errors/{i}/reauthenticate"),
                        format!(
                            "`reauthenticate` renews an OAuth2 token, and `{}` has no \
                             `auth.kind: oauth2`: a refused key or password is not renewed by \
                             trying again",
                            upstream.name()
                        ),
                    ));
                }
            }
        }
        let declared = file.request.as_ref().and_then(|r| r.supports.as_ref());
        let supports = declared.map(supports).unwrap_or_default();
        let constant_status = response_file
            .item
            .as_deref()
            .is_some_and(|item| constant_listable_status(item, common.jq_defs.as_deref()));
        let listable_only =
            constant_status || declared.is_some_and(|s| s.listing == FileListing::Listable);
        if list {
            self.check_supports(src, &file, listable_only);
            self.check_paging(src, &file, listable_only);
        }
        if response.is_some() && matches!(skill, Skill::InventorySearch | Skill::InventoryVehicle) {
            let program = match (&response_file.item, &response_file.jq) {
                (Some(item), _) if list => Some(("/response/item", item.as_str())),
                (_, Some(jq)) if !list => Some(("/response/jq", jq.as_str())),
                _ => None,
            };
            if let Some((pointer, program)) = program {
                self.check_status(src, pointer, program, common);
            }
        }
        let scan_cache = self.scan_cache(src, &file, list);
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        Some(ProxyMapping {
            skill,
            file: src.path.display().to_string(),
            upstream: upstream?,
            request: request?,
            format: format?,
            charset: charset?,
            response: response?,
            errors,
            shared,
            supports,
            listable_only,
            scan_limit: file.scan_limit.max(1),
            scan_every_unit: file.scan_query == FileScanQuery::EveryUnit,
            cursors: CursorCache::new(scan_cache.as_ref().map_or(Duration::ZERO, ScanCache::ttl)),
            scan_cache: Arc::new(scan_cache?),
            listings: self.ctx.schemas.listings(),
            // Set by the lead compiler from `lead.not_processed`.
            not_processed: crate::engine::proxy::NotProcessed::default(),
            this: std::sync::Weak::new(),
        })
    }

    /// The reply's format (XML for SOAP) and charset.
    fn reply_format(
        &mut self,
        src: &Source,
        soap: bool,
        response_file: &FileResponse,
    ) -> (
        Option<Format>,
        Option<Option<&'static encoding_rs::Encoding>>,
    ) {
        let format_name = match (soap, response_file.format.as_deref()) {
            (true, None | Some("xml")) => Some("xml"),
            (true, Some(_)) => {
                self.problems.push(src.problem(
                    "/response/format",
                    "SOAP replies are XML; leave `format` out",
                ));
                Some("xml")
            }
            (false, f) => f,
        };
        let format = match Format::parse(format_name, &response_file.list_elements) {
            Ok(f) => Some(f),
            Err(e) => {
                self.problems.push(src.problem("/response/format", e));
                None
            }
        };
        let charset = self.charset(
            src,
            "/response/charset",
            response_file.charset.as_deref(),
            format.as_ref(),
        );
        (format, charset)
    }

    /// A search's `items`, `total` and `item` programs.
    fn list_response(
        &mut self,
        src: &Source,
        skill: Skill,
        response_file: &FileResponse,
        soap: bool,
        format: Option<&Format>,
        common: &FileCommon,
    ) -> Option<ResponseSpec> {
        match (&response_file.items, &response_file.item, &response_file.jq) {
            (Some(items), Some(item), None) => {
                let records = self.key_path(items, common);
                let items = self.jq(src, "/response/items", &items_program(items), common);
                let total = match &response_file.total {
                    Some(t) => self.jq(src, "/response/total", t, common).map(Some),
                    None => Some(None),
                };
                let item = self.jq(src, "/response/item", item, common);
                let json = !soap && matches!(format, Some(Format::Json));
                if let (Some(items), Some(item)) = (&items, &item) {
                    self.note_extraction_costs(src, items, item, records.is_some(), json);
                }
                match (items, total, item) {
                    (Some(items), Some(total), Some(item)) => Some(ResponseSpec::List {
                        items,
                        total,
                        item,
                        records,
                        next_page: None,
                    }),
                    _ => None,
                }
            }
            _ => {
                self.problems.push(src.problem(
                    "/response",
                    format!(
                        "`{skill}` takes `items` and `item` (and optionally `total`), not `jq`"
                    ),
                ));
                None
            }
        }
    }

    /// Where the replies of sequential paging say what follows (`pagination.next`,
    /// `has_more`, `link_header`); `Some(None)` for the other styles, `None` on a problem.
    fn next_page(
        &mut self,
        src: &Source,
        paging: Option<&FilePagination>,
        common: &FileCommon,
    ) -> Option<Option<NextPage>> {
        let Some(p) = paging.filter(|p| matches!(p.style.as_str(), "cursor" | "next_link")) else {
            let stray =
                paging.is_some_and(|p| p.next.is_some() || p.has_more.is_some() || p.link_header);
            if stray {
                self.problems.push(src.problem(
                    "/request/pagination",
                    "`next`, `has_more` and `link_header` are for styles `cursor` and `next_link`",
                ));
                return None;
            }
            return Some(None);
        };
        let at = "/request/pagination";
        let next = match &p.next {
            Some(code) => Some(self.jq(src, &format!("{at}/next"), code, common)?),
            None => None,
        };
        let has_more = match &p.has_more {
            Some(code) => Some(self.jq(src, &format!("{at}/has_more"), code, common)?),
            None => None,
        };
        match (p.style.as_str(), &next, p.link_header) {
            ("cursor", Some(_), false)
            | ("next_link", Some(_), false)
            | ("next_link", None, true) => Some(Some(NextPage {
                next,
                has_more,
                link_header: p.link_header,
            })),
            (style, ..) => {
                self.problems.push(src.problem(
                    at,
                    if style == "cursor" {
                        "style `cursor` needs `next`: jq giving each reply's next cursor \
                         (e.g. `.pageInfo.endCursor`)"
                    } else {
                        "style `next_link` needs `next` (jq giving the next page's URL, e.g. \
                         `.links.next`) or `link_header: true`, not both"
                    },
                ));
                None
            }
        }
    }

    /// A single-object skill's `jq` program.
    fn object_response(
        &mut self,
        src: &Source,
        skill: Skill,
        response_file: &FileResponse,
        common: &FileCommon,
    ) -> Option<ResponseSpec> {
        match (&response_file.jq, &response_file.items) {
            (Some(jq), None) => self
                .jq(src, "/response/jq", jq, common)
                .map(|jq| ResponseSpec::Object { jq }),
            _ => {
                self.problems.push(src.problem(
                    "/response",
                    format!("`{skill}` takes one `jq` program producing the reply data"),
                ));
                None
            }
        }
    }

    /// The `errors` rules, in order; a rule with a problem is reported and left out.
    fn error_rules(
        &mut self,
        src: &Source,
        file: &FileSkill,
        soap: bool,
        list: bool,
        common: &FileCommon,
    ) -> Vec<ErrorRule> {
        let mut errors = Vec::new();
        for (i, rule) in file.errors.iter().enumerate() {
            let at = format!("/errors/{i}");
            let outcome = match (&rule.code, &rule.reply) {
                (Some(code), None) => match AapCode::parse(code) {
                    Some(code) => RuleOutcome::Error {
                        code,
                        message: rule
                            .message
                            .clone()
                            .unwrap_or_else(|| default_message(code).to_owned()),
                    },
                    None => {
                        self.problems.push(src.problem(
                            &format!("{at}/code"),
                            format!(
                                "`{code}` is not an AAP error code; use one of {}",
                                AapCode::ALL.map(|c| c.as_str()).join(", ")
                            ),
                        ));
                        continue;
                    }
                },
                (None, Some(reply)) => match self.rule_reply(src, &at, reply, list, common) {
                    Some(outcome) => outcome,
                    None => continue,
                },
                (Some(_), Some(_)) | (None, None) => {
                    self.problems.push(src.problem(
                        &at,
                        "give `code` (the AAP error to answer) or `reply` (the answer is a \
                         success: `response`, `empty` or `{jq: …}`), not both",
                    ));
                    continue;
                }
            };
            let status = match &rule.when.status {
                None => None,
                Some(v) => match status_match(v) {
                    Some(s) => Some(s),
                    None => {
                        self.problems.push(src.problem(
                            &format!("{at}/when/status"),
                            "must be a status code, a list of them, or a class like \"4xx\"",
                        ));
                        continue;
                    }
                },
            };
            let jq = match &rule.when.jq {
                Some(code) => match self.jq(src, &format!("{at}/when/jq"), code, common) {
                    Some(j) => Some(j),
                    None => continue,
                },
                None => None,
            };
            if rule.when.fault.is_some() && !soap {
                self.problems.push(src.problem(
                    &format!("{at}/when/fault"),
                    "`fault` matches SOAP faults; this upstream is not SOAP",
                ));
                continue;
            }
            if status.is_none() && jq.is_none() && rule.when.fault.is_none() {
                self.problems.push(src.problem(
                    &format!("{at}/when"),
                    "give `status`, `fault`, `jq` or several",
                ));
                continue;
            }
            if rule.reauthenticate && !matches!(outcome, RuleOutcome::Error { .. }) {
                self.problems.push(src.problem(
                    &format!("{at}/reauthenticate"),
                    "`reauthenticate` tries once more with a fresh token, then answers the \
                     rule's `code`: give `code`, not `reply`",
                ));
                continue;
            }
            errors.push(ErrorRule {
                status,
                fault: rule.when.fault.clone(),
                jq,
                outcome,
                reauthenticate: rule.reauthenticate,
            });
        }
        errors
    }

    /// `scan_cache` and `scan_stale` (a search's); other skills keep none.
    fn scan_cache(&mut self, src: &Source, file: &FileSkill, list: bool) -> Option<ScanCache> {
        if !list {
            return Some(ScanCache::default());
        }
        let mut duration = |pointer: &str, text: &str, off: &str| {
            let parsed = humantime::parse_duration(text.trim());
            if parsed.is_err() {
                self.problems.push(src.problem(
                    pointer,
                    format!("`{text}` is not a duration like 30s or 2m ({off})"),
                ));
            }
            parsed.ok()
        };
        let ttl = duration("/scan_cache", &file.scan_cache, "0s turns the cache off");
        let stale = duration(
            "/scan_stale",
            &file.scan_stale,
            "0s: a scan never answers past scan_cache",
        );
        let (ttl, stale) = (ttl?, stale?);
        if ttl.is_zero() && !stale.is_zero() {
            self.problems.push(src.problem(
                "/scan_stale",
                "`scan_stale` keeps a due scan answering past `scan_cache`, which is off (0s): \
                 set `scan_cache` (e.g. 30s) or remove `scan_stale`",
            ));
            return None;
        }
        if ttl.is_zero() && file.scan_query == FileScanQuery::EveryUnit {
            self.problems.push(src.problem(
                "/scan_query",
                "`scan_query: every_unit` reads every unit so that one scan answers every search \
                 while `scan_cache` keeps it, which is off (0s): each search would read the \
                 whole stock; set `scan_cache` (e.g. 30s) or remove `scan_query`",
            ));
            return None;
        }
        Some(ScanCache::new(ttl, stale))
    }

    /// An error rule's `reply`: what the engine makes of an answer that is a success in meaning.
    fn rule_reply(
        &mut self,
        src: &Source,
        at: &str,
        reply: &FileRuleReply,
        list: bool,
        common: &FileCommon,
    ) -> Option<RuleOutcome> {
        let pointer = format!("{at}/reply");
        match reply {
            FileRuleReply::Named(name) => match (name.as_str(), list) {
                ("response", _) => Some(RuleOutcome::Response),
                ("empty", true) => Some(RuleOutcome::Empty),
                ("empty", false) => {
                    self.problems.push(src.problem(
                        &pointer,
                        "`empty` answers a search with no listings; this skill answers one \
                         object: use `response` or `{jq: …}`",
                    ));
                    None
                }
                (other, _) => {
                    self.problems.push(src.problem(
                        &pointer,
                        format!(
                            "`{other}` is not a reply; use `response` (map it with `response`), \
                             `empty` (no listings) or `{{jq: …}}` (map it with this program)"
                        ),
                    ));
                    None
                }
            },
            FileRuleReply::Jq(own) if !list => self
                .jq(src, &format!("{pointer}/jq"), &own.jq, common)
                .map(RuleOutcome::Jq),
            FileRuleReply::Jq(_) => {
                self.problems.push(src.problem(
                    &pointer,
                    "a search maps replies with `items`/`item`: use `response` or `empty`",
                ));
                None
            }
        }
    }

    /// Notes what a list mapping's programs cost per record when they miss the fast paths
    /// (docs/mappings.md, "Cost"): an `item` outside the native subset runs in jaq's
    /// interpreter, and JSON `items` other than a path of keys decodes each reply whole.
    fn note_extraction_costs(
        &mut self,
        src: &Source,
        items: &Jq,
        item: &Jq,
        records_on_tape: bool,
        json: bool,
    ) {
        if !item.is_native() {
            self.notes.push(src.problem(
                "/response/item",
                "`item` runs in jaq's interpreter (it uses jq outside the gateway's native \
                 subset, see docs/mappings.md \"Cost\"): about 4x the CPU per record of a \
                 native program",
            ));
        }
        if json && !records_on_tape && items.is_native() {
            self.notes.push(src.problem(
                "/response/items",
                "`items` is not a path of keys (like `.Items` or `.data.vehicles`): each reply is decoded \
                 whole into jq values before `item` runs, about 1.3x the CPU of reading the \
                 records where they are",
            ));
        }
    }

    /// What a search mapping's `supports` costs, said by `check` as notes.
    fn check_supports(&mut self, src: &Source, file: &FileSkill, listable_only: bool) {
        let supports = file.request.as_ref().and_then(|r| r.supports.as_ref());
        let paged = file
            .request
            .as_ref()
            .is_some_and(|r| r.pagination.is_some());
        let scan = format!(
            "up to scan_limit ({}) upstream listings{}",
            file.scan_limit,
            if paged { ", page by page" } else { "" }
        );
        match supports {
            _ if listable_only && supports.is_some() => {}
            Some(_) => self.notes.push(src.problem(
                "/request/supports",
                format!(
                    "every search is completed in the gateway and scans {scan}: the upstream's \
                     pages may hold sold or held units (declare `listing: listable` if it lists \
                     only units a buyer may see)"
                ),
            )),
            None => self.notes.push(src.problem(
                "/request",
                format!(
                    "no `supports`: nothing is sent to the upstream as a filter or sort, and \
                     every search is completed in the gateway and scans {scan} (declare what \
                     the upstream filters, sorts and lists in `request.supports`)"
                ),
            )),
        }
    }

    /// What a search mapping's paging costs or risks, said by `check`: a search the gateway
    /// completes without paging makes one call and relies on it holding every match, and
    /// paging without a total reads one page past a short page to prove it was the last.
    fn check_paging(&mut self, src: &Source, file: &FileSkill, listable_only: bool) {
        let Some(request) = &file.request else {
            return;
        };
        let total = file.response.as_ref().is_some_and(|r| r.total.is_some());
        match (&request.pagination, total) {
            (None, true) => self.notes.push(src.problem(
                "/request",
                "no `pagination`: a search the gateway completes (or answers from the \
                 upstream's order) makes one upstream call; when the upstream's `total` says it \
                 holds more than that reply, the search is refused as incomplete. Declare how \
                 the upstream pages (`pagination`) to serve every match",
            )),
            (None, false) => self.notes.push(src.problem(
                "/request",
                "no `pagination` and no `total`: every search is completed in the gateway from \
                 one upstream reply, which must hold every match — nothing can tell when the \
                 upstream cut it short. Declare `pagination`, and `response.total` if the \
                 upstream reports one",
            )),
            (Some(_), false) => self.notes.push(src.problem(
                "/response",
                format!(
                    "no `total`: every search is completed in the gateway{}, and a scan reads one \
                     page past a short page to prove it was the last (one more upstream call)",
                    if listable_only {
                        " (the upstream's own pages cannot say how many match)"
                    } else {
                        ""
                    }
                ),
            )),
            (Some(_), true) => {}
        }
    }

    /// A listing without a listable `status` is never shown: a program that cannot produce one
    /// hides every unit.
    fn check_status(&mut self, src: &Source, pointer: &str, program: &str, common: &FileCommon) {
        let mentions = |text: &str| text.contains("status");
        let defs = common.jq_defs.as_deref().unwrap_or_default();
        if !mentions(program) && !mentions(defs) {
            self.problems.push(src.problem(
                pointer,
                "the mapping never sets `status`, so every vehicle would be hidden (AAP shows \
                 only `available`, `intransit` and `pending` units): map the upstream's status, \
                 e.g. `status: (.Status | lookup($tables.status_in))`, or write \
                 `status: \"available\"` if the upstream lists only units in stock",
            ));
        }
    }
}

/// `request.supports` as the engine reads it.
fn supports(s: &FileSupports) -> Supports {
    Supports {
        filters: s
            .filters
            .iter()
            .map(|f| match f {
                FileFilterSupport::Name(name) => (name.clone(), Values::Many),
                FileFilterSupport::Detailed(d) => (
                    d.name.clone(),
                    match d.values {
                        FileValues::Many => Values::Many,
                        FileValues::One => Values::One,
                    },
                ),
            })
            .collect(),
        sort: s
            .sort
            .iter()
            .map(|f| match f {
                FileSortSupport::Field(field) => (field.clone(), SortSupport::default()),
                FileSortSupport::Detailed(d) => (
                    d.field.clone(),
                    SortSupport {
                        missing: match d.missing {
                            FileMissing::Last => Missing::Last,
                            FileMissing::First => Missing::First,
                            FileMissing::Low => Missing::Low,
                            FileMissing::High => Missing::High,
                        },
                        aap_ties: d.ties == FileTies::Aap,
                    },
                ),
            })
            .collect(),
        list_separator: s.list_separator.clone(),
    }
}

/// Whether an item program (with the folder's jq definitions) gives every record one listable
/// status, written as a literal: `status: "available"` and no other mention of `status`. Then
/// every record the upstream lists is one a buyer may see, whatever the upstream holds.
fn constant_listable_status(item: &str, defs: Option<&str>) -> bool {
    let text = format!("{}\n{item}", defs.unwrap_or_default());
    let mut mentions = text.match_indices("status");
    let (Some((at, _)), None) = (mentions.next(), mentions.next()) else {
        return false;
    };
    let rest = text[at + "status".len()..]
        .trim_start_matches('"')
        .trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return false;
    };
    let Some(literal) = rest.trim_start().strip_prefix('"') else {
        return false;
    };
    literal
        .split_once('"')
        .is_some_and(|(value, _)| crate::inventory::SERVABLE_STATUSES.contains(&value))
}

fn status_match(v: &Value) -> Option<StatusMatch> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .map(|c| StatusMatch::Codes(vec![c])),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_u64().and_then(|c| u16::try_from(c).ok()))
            .collect::<Option<Vec<u16>>>()
            .map(StatusMatch::Codes),
        Value::String(s) => {
            let s = s.to_ascii_lowercase();
            let class = s
                .strip_suffix("xx")?
                .parse::<u16>()
                .ok()
                .filter(|c| (1..=5).contains(c))?;
            Some(StatusMatch::Class(class))
        }
        _ => None,
    }
}

/// The buyer-facing message of an error rule that does not give one.
pub fn default_message(code: AapCode) -> &'static str {
    match code {
        AapCode::VehicleNotFound => "No vehicle matches that identifier.",
        AapCode::VehicleUnavailable => "This vehicle is no longer available.",
        AapCode::AppointmentTimeUnavailable => "The requested appointment time cannot be honoured.",
        AapCode::RateLimited => "The dealer's system is busy; retry later.",
        AapCode::InternalError => "The dealer's systems could not answer right now; retry later.",
        AapCode::UnsupportedSkill => "This skill is not available.",
        AapCode::ContactConsentRequired => "Consent is required to contact the customer.",
        AapCode::InvalidConsent => "The consent grant is not usable.",
        AapCode::IdempotencyConflict => "This idempotency key was used with a different request.",
        AapCode::SchemaValidationFailed
        | AapCode::MissingRequiredField
        | AapCode::InvalidCondition => "The dealer's system rejected the request.",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_literal_listable_status_is_recognised_and_nothing_else_is() {
        assert!(constant_listable_status(
            r#"{vin: .VIN, status: "available"}"#,
            None
        ));
        assert!(constant_listable_status(r#"{"status": "pending"}"#, None));
        assert!(constant_listable_status(
            "vehicle",
            Some(r#"def vehicle: {status: "intransit"};"#)
        ));
        assert!(!constant_listable_status(r#"{status: "sold"}"#, None));
        assert!(!constant_listable_status(
            r#"{status: (.Status | lookup($tables.s))}"#,
            None
        ));
        assert!(!constant_listable_status(
            r#"{status: "available"} | if .x then .status = "sold" else . end"#,
            None
        ));
        assert!(!constant_listable_status("{vin: .VIN}", None));
    }

    #[test]
    fn status_rules() {
        assert!(matches!(
            status_match(&json!("4xx")),
            Some(StatusMatch::Class(4))
        ));
        assert!(
            matches!(status_match(&json!([404, 410])), Some(StatusMatch::Codes(c)) if c == vec![404, 410])
        );
        assert!(status_match(&json!("oops")).is_none());
    }
}
