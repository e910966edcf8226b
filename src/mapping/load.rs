//! Loads a dealer's mapping folder: parses every file with positions, compiles every template
//! and jq program, builds the upstream clients, and reports every problem located as
//! `file:line:col: message`. Nothing is compiled after load.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{HeaderName, Method};
use minijinja::value::Value as TplValue;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::decode::Format;
use super::execute::{ErrorRule, Mapped, ResponseSpec, Shared, StatusMatch, Supports};
use super::extract::{Jq, JqValue};
use super::feed::Feed;
use super::file::{FileCommon, FileFeed, FileMode, FileRequest, FileSkill};
use super::request::{Pagination, RequestSpec};
use super::template::{Context, Templates};
use super::{Example, Handler};
use crate::error::AapCode;
use crate::protocol::Skill;
use crate::schema::Schemas;
use crate::settings::yaml::{self, Origin, Problem, SourceMap};
use crate::upstream::{FileUpstream, Upstream};

/// What the loader needs besides the folder.
pub struct LoadContext<'a> {
    pub schemas: &'a Schemas,
    /// `${NAME}` in `upstreams.yaml` resolves through this (the process environment plus any
    /// overrides the caller adds, e.g. the demo's simulator addresses).
    pub vars: &'a dyn Fn(&str) -> Option<String>,
    pub dealer_id: &'a str,
    pub dealer_name: &'a str,
}

/// A dealer's compiled mappings.
#[derive(Debug, Default)]
pub struct DealerMappings {
    pub handlers: BTreeMap<Skill, Handler>,
    pub feeds: Vec<Arc<Feed>>,
    pub examples: Vec<Example>,
}

/// One parsed YAML file.
struct Source {
    path: PathBuf,
    text: String,
    value: Value,
    map: SourceMap,
}

impl Source {
    fn problem(&self, pointer: &str, message: impl Into<String>) -> Problem {
        self.map.problem(pointer, message)
    }

    /// A position inside a string value (a template or jq program), `line`/`col` 1-based
    /// within the string.
    fn inner(&self, pointer: &str, line: usize, col: usize, message: String) -> Problem {
        let origin = match self.map.origin(pointer) {
            Origin::File {
                path,
                line: key_line,
                col: key_col,
            } => {
                let key_text = self
                    .text
                    .lines()
                    .nth(key_line.saturating_sub(1))
                    .unwrap_or("");
                let after = key_text.split_once(':').map_or("", |(_, v)| v).trim();
                if after.starts_with('|') || after.starts_with('>') {
                    // Block scalar: the string starts on the next line, indented.
                    let first = self.text.lines().nth(key_line).unwrap_or("");
                    let indent = first.len() - first.trim_start().len();
                    Origin::File {
                        path,
                        line: key_line + line,
                        col: indent + col,
                    }
                } else {
                    let value_col = key_text.find(after).map_or(key_col, |i| i + 1);
                    Origin::File {
                        path,
                        line: key_line,
                        col: value_col + col,
                    }
                }
            }
            other => other,
        };
        Problem { origin, message }
    }
}

struct Loader<'a> {
    ctx: &'a LoadContext<'a>,
    dir: PathBuf,
    problems: Vec<Problem>,
}

/// Loads `dir`. Every problem is collected before returning.
pub fn load_folder(dir: &Path, ctx: &LoadContext<'_>) -> Result<DealerMappings, Vec<Problem>> {
    let mut loader = Loader {
        ctx,
        dir: dir.to_path_buf(),
        problems: Vec::new(),
    };
    let out = loader.load();
    if loader.problems.is_empty() {
        Ok(out)
    } else {
        crate::settings::sort_problems(&mut loader.problems);
        Err(loader.problems)
    }
}

impl Loader<'_> {
    fn read(&mut self, name: &str) -> Option<Source> {
        let path = self.dir.join(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                self.problems.push(Problem {
                    origin: Origin::WholeFile { path },
                    message: format!("cannot read: {e}"),
                });
                return None;
            }
        };
        match yaml::parse(&path, &text) {
            Ok((value, map)) => Some(Source {
                path,
                text,
                value,
                map,
            }),
            Err(p) => {
                self.problems.push(p);
                None
            }
        }
    }

    fn deserialize<T: DeserializeOwned>(
        &mut self,
        src: &Source,
        pointer: &str,
        value: Value,
    ) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let at = yaml::pointer_of(pointer, e.path());
                let message = e
                    .inner()
                    .to_string()
                    .replace("invalid type: ", "wrong type: ");
                self.problems.push(src.problem(&at, message));
                None
            }
        }
    }

    fn load(&mut self) -> DealerMappings {
        let mut out = DealerMappings::default();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                self.problems.push(Problem {
                    origin: Origin::WholeFile {
                        path: self.dir.clone(),
                    },
                    message: format!("cannot read the mappings folder: {e}"),
                });
                return out;
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().is_file())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
            .collect();
        names.sort();

        let upstreams = if names.iter().any(|n| n == "upstreams.yaml") {
            self.upstreams()
        } else {
            HashMap::new()
        };
        let common = if names.iter().any(|n| n == "common.yaml") {
            self.read("common.yaml").and_then(|src| {
                let value = src.value.clone();
                self.deserialize::<FileCommon>(&src, "", value)
                    .map(|c| (src, c))
            })
        } else {
            None
        };
        let (common_src, common) = match common {
            Some((s, c)) => (Some(s), c),
            None => (None, FileCommon::default()),
        };
        if let (Some(defs), Some(src)) = (&common.jq_defs, &common_src) {
            // Compile the definitions alone once, so their errors point into common.yaml.
            if let Err(e) = Jq::compile(&format!("{defs}\n.")) {
                self.problems.push(src.inner(
                    "/jq_defs",
                    e.line,
                    e.col,
                    format!("jq: {}", e.message),
                ));
            }
        }
        let feed = if names.iter().any(|n| n == "feed.yaml") {
            self.feed(&upstreams, &common)
        } else {
            None
        };
        if let Some(f) = &feed {
            out.feeds.push(Arc::clone(f));
        }

        // Skills in dependency order: derived facets need the search mapping.
        let mut skill_files: Vec<(Skill, Source, FileSkill)> = Vec::new();
        for name in &names {
            if matches!(
                name.as_str(),
                "upstreams.yaml" | "common.yaml" | "feed.yaml"
            ) {
                continue;
            }
            let Some(src) = self.read(name) else { continue };
            let value = src.value.clone();
            let Some(file) = self.deserialize::<FileSkill>(&src, "", value) else {
                continue;
            };
            let stem = name.trim_end_matches(".yaml").trim_end_matches(".yml");
            let Some(skill) = Skill::from_id(&file.skill) else {
                self.problems
                    .push(src.problem("/skill", format!("`{}` is not an AAP skill", file.skill)));
                continue;
            };
            if stem != skill.id() {
                self.problems.push(src.problem(
                    "/skill",
                    format!(
                        "file `{name}` serves `{}`; name it `{}.yaml`",
                        skill.id(),
                        skill.id()
                    ),
                ));
                continue;
            }
            skill_files.push((skill, src, file));
        }
        skill_files.sort_by_key(|(s, _, f)| (f.derive.is_some(), *s));
        let mut mapped: HashMap<Skill, Arc<Mapped>> = HashMap::new();
        for (skill, src, file) in skill_files {
            let examples = file.examples.clone();
            if let Some(handler) = self.skill(
                skill,
                &src,
                file,
                &upstreams,
                &common,
                feed.as_ref(),
                &mapped,
            ) {
                if let Handler::Proxy(m) = &handler {
                    mapped.insert(skill, Arc::clone(m));
                }
                for (i, example) in examples.into_iter().enumerate() {
                    out.examples.push(Example {
                        skill,
                        file: src.path.clone(),
                        origin: src.map.origin(&format!("/examples/{i}")),
                        case: example,
                    });
                }
                out.handlers.insert(skill, handler);
            }
        }
        out
    }

    /// `upstreams.yaml`: `name → upstream`. Names whose settings have problems are still
    /// known (`None`), so references to them do not produce a second, misleading problem.
    fn upstreams(&mut self) -> HashMap<String, Option<Arc<Upstream>>> {
        let mut out = HashMap::new();
        let Some(mut src) = self.read("upstreams.yaml") else {
            return out;
        };
        let value = std::mem::take(&mut src.value);
        let Value::Object(entries) = value else {
            self.problems
                .push(src.problem("", "must map upstream names to their settings"));
            return out;
        };
        for (name, mut entry) in entries {
            let pointer = yaml::push_pointer("", &name);
            out.insert(name.clone(), None);
            let before = self.problems.len();
            self.expand_vars(&src, &pointer, &mut entry);
            if self.problems.len() > before {
                continue;
            }
            let Some(file) = self.deserialize::<FileUpstream>(&src, &pointer, entry) else {
                continue;
            };
            match Upstream::build(&name, file) {
                Ok(u) => {
                    out.insert(name, Some(Arc::new(u)));
                }
                Err(problems) => {
                    for p in problems {
                        self.problems
                            .push(src.problem(&format!("{pointer}{}", p.pointer), p.message));
                    }
                }
            }
        }
        out
    }

    /// Replaces `${NAME}` and `${NAME:-default}` in every string.
    fn expand_vars(&mut self, src: &Source, pointer: &str, value: &mut Value) {
        match value {
            Value::String(s) if s.contains("${") => match expand(s, self.ctx.vars) {
                Ok(expanded) => *s = expanded,
                Err(name) => self.problems.push(src.problem(
                    pointer,
                    format!("`${{{name}}}` is not set (environment variable)"),
                )),
            },
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.expand_vars(src, &format!("{pointer}/{i}"), item);
                }
            }
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    let p = yaml::push_pointer(pointer, k);
                    self.expand_vars(src, &p, v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }

    fn shared(&self, tables: Map<String, Value>) -> Shared {
        let dealer = json!({ "id": self.ctx.dealer_id, "name": self.ctx.dealer_name });
        let tables = Value::Object(tables);
        Shared {
            tables_tpl: TplValue::from(minijinja::value::Serde(&tables)),
            tables_jq: JqValue::from_json(&tables),
            dealer_tpl: TplValue::from(minijinja::value::Serde(&dealer)),
            dealer_jq: JqValue::from_json(&dealer),
        }
    }

    fn merged_tables(common: &FileCommon, own: &Map<String, Value>) -> Map<String, Value> {
        let mut tables = common.tables.clone();
        for (k, v) in own {
            tables.insert(k.clone(), v.clone());
        }
        tables
    }

    fn jq(&mut self, src: &Source, pointer: &str, code: &str, common: &FileCommon) -> Option<Jq> {
        let (program, offset) = match &common.jq_defs {
            Some(defs) => (format!("{defs}\n{code}"), defs.lines().count()),
            None => (code.to_owned(), 0),
        };
        match Jq::compile(&program) {
            Ok(jq) => Some(jq),
            Err(e) if e.line > offset => {
                self.problems.push(src.inner(
                    pointer,
                    e.line - offset,
                    e.col,
                    format!("jq: {}", e.message),
                ));
                None
            }
            // An error inside the shared definitions is reported once, at common.yaml.
            Err(_) => None,
        }
    }

    fn request(&mut self, src: &Source, pointer: &str, file: &FileRequest) -> Option<RequestSpec> {
        let mut ok = true;
        let method = match Method::from_bytes(file.method.to_ascii_uppercase().as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                self.problems.push(src.problem(
                    &format!("{pointer}/method"),
                    format!("`{}` is not an HTTP method", file.method),
                ));
                return None;
            }
        };
        let mut templates = Templates::new();
        let mut add = |this: &mut Self, name: &str, at: &str, source: &str, context: Context| {
            if let Err(e) = templates.add(name, source, context) {
                this.problems.push(src.inner(
                    at,
                    e.line.unwrap_or(1),
                    1,
                    format!("template: {}", e.message),
                ));
                false
            } else {
                true
            }
        };
        ok &= add(
            self,
            "path",
            &format!("{pointer}/path"),
            &file.path,
            Context::Path,
        );
        let mut query = Vec::new();
        for (name, source) in &file.query {
            ok &= add(
                self,
                &format!("query.{name}"),
                &yaml::push_pointer(&format!("{pointer}/query"), name),
                source,
                Context::Query,
            );
            query.push(name.clone());
        }
        let mut headers = Vec::new();
        for (name, source) in &file.headers {
            let at = yaml::push_pointer(&format!("{pointer}/headers"), name);
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(h) => {
                    ok &= add(self, &format!("header.{h}"), &at, source, Context::Header);
                    headers.push(h);
                }
                Err(_) => {
                    self.problems
                        .push(src.problem(&at, format!("`{name}` is not a valid header name")));
                    ok = false;
                }
            }
        }
        let (body, content_type) = match (&file.body, file.body_format.as_deref()) {
            (None, None) => (None, None),
            (None, Some(_)) => {
                self.problems.push(src.problem(
                    &format!("{pointer}/body_format"),
                    "`body_format` without a `body`",
                ));
                (None, None)
            }
            (Some(source), format) => {
                let (context, ct) = match format.unwrap_or("json") {
                    "json" => (Context::JsonBody, "application/json"),
                    "xml" => (Context::XmlBody, "text/xml; charset=utf-8"),
                    "text" => (Context::Text, "text/plain; charset=utf-8"),
                    other => {
                        self.problems.push(src.problem(
                            &format!("{pointer}/body_format"),
                            format!("`{other}` is not one of json, xml, text"),
                        ));
                        (Context::Text, "text/plain")
                    }
                };
                ok &= add(self, "body", &format!("{pointer}/body"), source, context);
                (Some(context), Some(ct))
            }
        };
        let pagination = match &file.pagination {
            None => None,
            Some(p) => {
                let at = format!("{pointer}/pagination");
                let max_size = p.max_size.max(1);
                match (p.style.as_str(), &p.page, &p.size, &p.offset, &p.limit) {
                    ("page", Some(page), Some(size), None, None) => Some(Pagination::Page {
                        page: page.clone(),
                        size: size.clone(),
                        first: p.first,
                        max_size,
                    }),
                    ("offset", None, None, Some(offset), Some(limit)) => Some(Pagination::Offset {
                        offset: offset.clone(),
                        limit: limit.clone(),
                        max_size,
                    }),
                    ("page", ..) => {
                        self.problems.push(src.problem(
                            &at,
                            "style `page` takes `page` and `size` (the query parameter names)",
                        ));
                        ok = false;
                        None
                    }
                    ("offset", ..) => {
                        self.problems.push(src.problem(
                            &at,
                            "style `offset` takes `offset` and `limit` (the query parameter names)",
                        ));
                        ok = false;
                        None
                    }
                    (other, ..) => {
                        self.problems.push(src.problem(
                            &format!("{at}/style"),
                            format!("`{other}` is not one of page, offset"),
                        ));
                        ok = false;
                        None
                    }
                }
            }
        };
        ok.then_some(RequestSpec {
            method,
            templates,
            query,
            headers,
            body,
            content_type,
            pagination,
        })
    }

    fn feed(
        &mut self,
        upstreams: &HashMap<String, Option<Arc<Upstream>>>,
        common: &FileCommon,
    ) -> Option<Arc<Feed>> {
        let src = self.read("feed.yaml")?;
        let value = src.value.clone();
        let file: FileFeed = self.deserialize(&src, "", value)?;
        let upstream = self.upstream_ref(&src, "/upstream", &file.upstream, upstreams);
        let request = self.request(&src, "/request", &file.request);
        let format = match Format::parse(Some(&file.format), &file.list_elements) {
            Ok(f) => Some(f),
            Err(e) => {
                self.problems.push(src.problem("/format", e));
                None
            }
        };
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
        Some(Arc::new(Feed::new(
            src.path.display().to_string(),
            upstream?,
            request?,
            format?,
            items?,
            item?,
            refresh?,
            max_stale?,
            shared,
        )))
    }

    fn duration(&mut self, src: &Source, pointer: &str, text: &str) -> Option<std::time::Duration> {
        match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                self.problems.push(src.problem(
                    pointer,
                    format!("`{text}` is not a duration like 5m or 30s"),
                ));
                None
            }
        }
    }

    fn upstream_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &HashMap<String, Option<Arc<Upstream>>>,
    ) -> Option<Arc<Upstream>> {
        match upstreams.get(name) {
            Some(Some(u)) => Some(Arc::clone(u)),
            // Declared, but its settings have problems (already reported).
            Some(None) => None,
            None => {
                let mut known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
                known.sort_unstable();
                self.problems.push(src.problem(
                    pointer,
                    format!(
                        "unknown upstream `{name}`; upstreams.yaml defines: {}",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
                None
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn skill(
        &mut self,
        skill: Skill,
        src: &Source,
        file: FileSkill,
        upstreams: &HashMap<String, Option<Arc<Upstream>>>,
        common: &FileCommon,
        feed: Option<&Arc<Feed>>,
        mapped: &HashMap<Skill, Arc<Mapped>>,
    ) -> Option<Handler> {
        if let Some(data) = file.static_data {
            return self.static_reply(skill, src, data);
        }
        if let Some(derive) = &file.derive {
            if skill != Skill::InventoryFacets || derive != "search" {
                self.problems
                    .push(src.problem("/derive", "only `inventory.facets` can `derive: search`"));
                return None;
            }
            return match mapped.get(&Skill::InventorySearch) {
                Some(search) => Some(Handler::DerivedFacets(Arc::clone(search))),
                None if file.mode == FileMode::Feed
                    || feed.is_some() && self.dir.join("inventory.search.yaml").exists() =>
                {
                    feed.map(|f| Handler::Feed {
                        skill,
                        feed: Arc::clone(f),
                    })
                }
                None => {
                    self.problems.push(src.problem("/derive", "`derive: search` needs a proxy-mode inventory.search.yaml in the same folder"));
                    None
                }
            };
        }
        if file.mode == FileMode::Feed {
            if !matches!(
                skill,
                Skill::InventorySearch | Skill::InventoryFacets | Skill::InventoryVehicle
            ) {
                self.problems.push(src.problem(
                    "/mode",
                    format!("`{skill}` cannot be served from an inventory feed"),
                ));
                return None;
            }
            return match feed {
                Some(f) => Some(Handler::Feed {
                    skill,
                    feed: Arc::clone(f),
                }),
                None => {
                    self.problems.push(
                        src.problem("/mode", "mode `feed` needs a feed.yaml in the same folder"),
                    );
                    None
                }
            };
        }
        self.proxy(skill, src, file, upstreams, common)
            .map(|m| Handler::Proxy(Arc::new(m)))
    }

    fn static_reply(&mut self, skill: Skill, src: &Source, data: Value) -> Option<Handler> {
        let handler = Handler::fixed(skill, data);
        let payload = handler.fixed_payload()?;
        let violations = self.ctx.schemas.check_response(skill, payload);
        for v in &violations {
            let at = v
                .instance_location
                .strip_prefix("/data")
                .unwrap_or(&v.instance_location);
            self.problems.push(src.problem(
                &format!("/static{at}"),
                format!("{}: {}", v.keyword, v.error),
            ));
        }
        violations.is_empty().then_some(handler)
    }

    fn proxy(
        &mut self,
        skill: Skill,
        src: &Source,
        file: FileSkill,
        upstreams: &HashMap<String, Option<Arc<Upstream>>>,
        common: &FileCommon,
    ) -> Option<Mapped> {
        if skill == Skill::LeadSubmit {
            self.problems
                .push(src.problem("/skill", "lead.submit mappings are not supported yet"));
            return None;
        }
        let upstream = match &file.upstream {
            Some(name) => self.upstream_ref(src, "/upstream", name, upstreams),
            None => {
                self.problems.push(src.problem(
                    "",
                    "a proxy-mode mapping needs `upstream` (or `static`, `derive`, `mode: feed`)",
                ));
                None
            }
        };
        let request = match &file.request {
            Some(r) => self.request(src, "/request", r),
            None => {
                self.problems
                    .push(src.problem("", "a proxy-mode mapping needs `request`"));
                None
            }
        };
        let response_file = file.response.clone().unwrap_or_default();
        let format = match Format::parse(
            response_file.format.as_deref(),
            &response_file.list_elements,
        ) {
            Ok(f) => Some(f),
            Err(e) => {
                self.problems.push(src.problem("/response/format", e));
                None
            }
        };
        let list = skill == Skill::InventorySearch;
        let response = if list {
            match (&response_file.items, &response_file.item, &response_file.jq) {
                (Some(items), Some(item), None) => {
                    let items = self.jq(src, "/response/items", &items_program(items), common);
                    let total = match &response_file.total {
                        Some(t) => self.jq(src, "/response/total", t, common).map(Some),
                        None => Some(None),
                    };
                    let item = self.jq(src, "/response/item", item, common);
                    match (items, total, item) {
                        (Some(items), Some(total), Some(item)) => {
                            Some(ResponseSpec::List { items, total, item })
                        }
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
        } else {
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
        };
        let mut errors = Vec::new();
        for (i, rule) in file.errors.iter().enumerate() {
            let at = format!("/errors/{i}");
            let code = match AapCode::parse(&rule.code) {
                Some(c) => c,
                None => {
                    self.problems.push(src.problem(
                        &format!("{at}/code"),
                        format!("`{}` is not an AAP error code", rule.code),
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
            if status.is_none() && jq.is_none() {
                self.problems
                    .push(src.problem(&format!("{at}/when"), "give `status`, `jq` or both"));
                continue;
            }
            let message = rule
                .message
                .clone()
                .unwrap_or_else(|| default_message(code).to_owned());
            errors.push(ErrorRule {
                status,
                jq,
                code,
                message,
            });
        }
        let supports = file
            .request
            .as_ref()
            .and_then(|r| r.supports.as_ref())
            .map(|s| Supports {
                filters: s.filters.iter().cloned().collect::<HashSet<_>>(),
                sort: s.sort.iter().cloned().collect::<HashSet<_>>(),
                list_separator: s.list_separator.clone(),
            });
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        Some(Mapped {
            skill,
            file: src.path.display().to_string(),
            upstream: upstream?,
            request: request?,
            format: format?,
            response: response?,
            errors,
            shared,
            supports,
            scan_limit: file.scan_limit.max(1),
        })
    }
}

/// `items` selects an array; the engine iterates it.
fn items_program(code: &str) -> String {
    format!(
        "({code}) | if type == \"array\" then .[] else error(\"`items` must give an array, got \\(type)\") end"
    )
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

/// Expands `${NAME}` / `${NAME:-default}`; the error is the first unset name.
pub fn expand(text: &str, vars: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match vars(name).or_else(|| default.map(str::to_owned)) {
            Some(v) => out.push_str(&v),
            None => return Err(name.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_with_defaults() {
        let vars = |n: &str| (n == "A").then(|| "x".to_owned());
        assert_eq!(expand("${A}/${B:-y}", &vars).unwrap(), "x/y");
        assert_eq!(expand("${C}", &vars).unwrap_err(), "C");
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
