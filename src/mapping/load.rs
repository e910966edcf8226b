//! Loads a dealer's mapping folder: parses every file with positions, compiles every template
//! and jq program, builds the upstream clients, and reports every problem located as
//! `file:line:col: message`. Nothing is compiled after load.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::telemetry::metrics::Meter;

use http::{HeaderName, Method};
use minijinja::value::Value as TplValue;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::decode::{self, Format};
use super::execute::{
    ErrorRule, Mapped, Missing, ResponseSpec, RuleOutcome, ScanCache, Shared, StatusMatch,
    Supports, Values,
};
use super::extract::{Jq, JqValue};
use super::feed::Feed;
use super::file::{
    FileCommon, FileFeed, FileFilterSupport, FileLead, FileListing, FileMissing, FileMode,
    FileRequest, FileRuleReply, FileSkill, FileSortSupport, FileValues,
};
use super::lead::{Delivery, LeadMapping, LeadPolicy, MailDelivery};
use super::request::{Pagination, RequestSpec};
use super::template::{Context, Templates};
use super::{Example, Handler};
use crate::error::AapCode;
use crate::protocol::Skill;
use crate::schema::Schemas;
use crate::settings::yaml::{self, Origin, Problem, SourceMap};
use crate::upstream::{Endpoint, FileUpstream, HttpClients, Mailer, Upstream};

/// What the loader needs besides the folder.
pub struct LoadContext<'a> {
    pub schemas: &'a Schemas,
    /// `${NAME}` in `upstreams.yaml` resolves through this (the process environment plus any
    /// overrides the caller adds, e.g. the demo's simulator addresses).
    pub vars: &'a dyn Fn(&str) -> Option<String>,
    pub dealer_id: &'a str,
    pub dealer_name: &'a str,
    /// Where the dealer's upstream calls are counted.
    pub metrics: &'a Arc<crate::telemetry::metrics::Metrics>,
    /// The dealer's running state before a reload, if any: what did not change is taken over.
    pub previous: Option<&'a Carried>,
    /// What this load's dealers share (one per configuration load).
    pub cache: &'a LoadCache,
}

/// What the dealers of one configuration load build once and share: compiled jq programs (by
/// their text) and HTTP clients (by their settings, see [`HttpClients`]). A dealer group whose
/// dealers have copies of one mapping compiles it once, not once per dealer. Everything cached
/// is immutable once built; what is each dealer's own (its `$dealer`, tables, upstream
/// breakers and slots, metrics, feed cache) is not cached.
#[derive(Debug, Default)]
pub struct LoadCache {
    jq: std::sync::Mutex<HashMap<String, Jq>>,
    /// Programs compiled through this cache (each text once).
    compiled: std::sync::atomic::AtomicUsize,
    /// Request templates by their names, sources and output contexts.
    #[allow(clippy::type_complexity)]
    templates: std::sync::Mutex<HashMap<Vec<(String, String, Context)>, Arc<Templates>>>,
    clients: HttpClients,
}

impl LoadCache {
    /// `code` compiled, once per load.
    fn jq(&self, code: &str) -> Result<Jq, super::extract::JqCompileError> {
        if let Some(jq) = self.jq.lock().ok().and_then(|c| c.get(code).cloned()) {
            return Ok(jq);
        }
        self.compiled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let jq = Jq::compile(code)?;
        if let Ok(mut compiled) = self.jq.lock() {
            compiled.insert(code.to_owned(), jq.clone());
        }
        Ok(jq)
    }

    /// One request's templates (`(name, pointer, source, context)` each) compiled together,
    /// once per load for the same names, sources and contexts; `Err`: every one that does not
    /// compile, with its pointer.
    #[allow(clippy::type_complexity)]
    fn templates(
        &self,
        pending: &[(String, String, String, Context)],
    ) -> Result<Arc<Templates>, Vec<(String, super::template::TemplateError)>> {
        let key: Vec<(String, String, Context)> = pending
            .iter()
            .map(|(name, _, source, context)| (name.clone(), source.clone(), *context))
            .collect();
        if let Some(templates) = self
            .templates
            .lock()
            .ok()
            .and_then(|c| c.get(&key).cloned())
        {
            return Ok(templates);
        }
        let mut templates = Templates::new();
        let errors: Vec<_> = pending
            .iter()
            .filter_map(|(name, at, source, context)| {
                templates
                    .add(name, source, *context)
                    .err()
                    .map(|e| (at.clone(), e))
            })
            .collect();
        if !errors.is_empty() {
            return Err(errors);
        }
        let templates = Arc::new(templates);
        if let Ok(mut compiled) = self.templates.lock() {
            compiled.insert(key, Arc::clone(&templates));
        }
        Ok(templates)
    }

    /// jq programs compiled so far.
    pub fn programs(&self) -> usize {
        self.compiled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// HTTP clients built so far.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}

/// What a reload takes over from a dealer's running configuration: every upstream whose
/// `upstreams.yaml` entry (after `${NAME}` expansion) is unchanged keeps its circuit breaker,
/// concurrency slots, retry budget and connection pool; a feed whose files, dealer name and
/// upstream are unchanged keeps its cached copy, so a source that is down stays served stale.
#[derive(Debug, Default, Clone)]
pub struct Carried {
    upstreams: HashMap<String, (Value, Target)>,
    feed: Option<(u64, Arc<Feed>)>,
}

/// A dealer's compiled mappings.
#[derive(Debug, Default)]
pub struct DealerMappings {
    pub handlers: BTreeMap<Skill, Handler>,
    pub feeds: Vec<Arc<Feed>>,
    pub examples: Vec<Example>,
    /// What the mappings cost or risk (e.g. searches completed in the gateway), for `check`.
    pub notes: Vec<Problem>,
    /// What the next reload may take over.
    pub carried: Carried,
}

/// An upstream of `upstreams.yaml`, built.
#[derive(Debug, Clone)]
enum Target {
    Http(Arc<Upstream>),
    Smtp(Arc<Mailer>),
}

/// `name → upstream`; `None` for names whose settings have problems (already reported).
type Upstreams = HashMap<String, Option<Target>>;

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
    /// What a valid mapping costs or risks, for `check` (not problems).
    notes: Vec<Problem>,
    carried: Carried,
}

/// Loads `dir`. Every problem is collected before returning.
pub fn load_folder(dir: &Path, ctx: &LoadContext<'_>) -> Result<DealerMappings, Vec<Problem>> {
    let mut loader = Loader {
        ctx,
        dir: dir.to_path_buf(),
        problems: Vec::new(),
        notes: Vec::new(),
        carried: Carried::default(),
    };
    let mut out = loader.load();
    if loader.problems.is_empty() {
        crate::settings::sort_problems(&mut loader.notes);
        out.notes = loader.notes;
        out.carried = loader.carried;
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
            if let Err(e) = self.ctx.cache.jq(&format!("{defs}\n.")) {
                self.problems.push(src.inner(
                    "/jq_defs",
                    e.line,
                    e.col,
                    format!("jq: {}", e.message),
                ));
            }
        }
        let feed = if names.iter().any(|n| n == "feed.yaml") {
            self.feed(&upstreams, &common, common_src.as_ref())
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
                self.problems.push(src.problem(
                    "/skill",
                    format!(
                        "`{}` is not an AAP skill; use one of {}",
                        file.skill,
                        Skill::ids()
                    ),
                ));
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
            if let Some(why) = &file.unsupported {
                let mapped = file.upstream.is_some()
                    || file.request.is_some()
                    || file.response.is_some()
                    || file.static_data.is_some()
                    || file.derive.is_some()
                    || file.mode == FileMode::Feed;
                if mapped {
                    self.problems.push(src.problem(
                        "/unsupported",
                        "`unsupported` next to a mapping: remove `unsupported` to serve the skill",
                    ));
                } else {
                    self.notes.push(src.problem(
                        "/unsupported",
                        format!("{skill} is not mapped yet and answers UNSUPPORTED_SKILL: {why}"),
                    ));
                }
                continue;
            }
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
    fn upstreams(&mut self) -> Upstreams {
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
            let kept = self
                .ctx
                .previous
                .and_then(|p| p.upstreams.get(&name))
                .filter(|(was, _)| *was == entry)
                .map(|(_, target)| target.clone());
            if let Some(target) = kept {
                self.carried
                    .upstreams
                    .insert(name.clone(), (entry, target.clone()));
                out.insert(name, Some(target));
                continue;
            }
            let settings = entry.clone();
            let Some(file) = self.deserialize::<FileUpstream>(&src, &pointer, entry) else {
                continue;
            };
            for (at, risk) in file.plaintext_risks() {
                let at = format!("{pointer}{at}");
                if file.allow_plaintext {
                    self.notes.push(src.problem(
                        &at,
                        format!("`{name}` {risk} (allowed by `allow_plaintext: true`)"),
                    ));
                } else {
                    self.problems.push(src.problem(
                        &at,
                        format!(
                            "`{name}` {risk}; use https:// (smtps:// or `starttls: required` for \
                             mail) and verified certificates, or set `allow_plaintext: true` on \
                             this upstream if the network between them is trusted"
                        ),
                    ));
                }
            }
            let meter = Meter::new(self.ctx.metrics, self.ctx.dealer_id, &name);
            match crate::upstream::build_sharing(&name, file, &self.ctx.cache.clients) {
                Ok(endpoint) => {
                    let target = match endpoint {
                        Endpoint::Http(u) => {
                            u.attach_meter(meter);
                            Target::Http(Arc::new(u))
                        }
                        Endpoint::Smtp(m) => {
                            m.attach_meter(meter);
                            Target::Smtp(Arc::new(m))
                        }
                    };
                    self.carried
                        .upstreams
                        .insert(name.clone(), (settings, target.clone()));
                    out.insert(name, Some(target));
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
        match self.ctx.cache.jq(&program) {
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

    /// Compiles an upstream call. `soap`: the upstream speaks SOAP (POST only, `body` is the
    /// envelope's Body content, `action` allowed). `lead`: the call delivers a lead
    /// (`body_format: adf` allowed).
    fn request(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        soap: bool,
        lead: bool,
    ) -> Option<RequestSpec> {
        let mut ok = true;
        let default_method = if soap { "POST" } else { "GET" };
        let method_text = file.method.as_deref().unwrap_or(default_method);
        let method = match Method::from_bytes(method_text.to_ascii_uppercase().as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                self.problems.push(src.problem(
                    &format!("{pointer}/method"),
                    format!("`{method_text}` is not an HTTP method"),
                ));
                return None;
            }
        };
        if soap && method != Method::POST {
            self.problems.push(src.problem(
                &format!("{pointer}/method"),
                "SOAP operations are always POST; leave `method` out",
            ));
            ok = false;
        }
        if !soap && file.path.is_empty() {
            self.problems
                .push(src.problem(pointer, "a request needs `path` (below the base URL)"));
            ok = false;
        }
        if !soap && file.action.is_some() {
            self.problems.push(src.problem(
                &format!("{pointer}/action"),
                "`action` is for SOAP upstreams (kind: soap)",
            ));
            ok = false;
        }
        // The templates are compiled together below, once per load for identical ones.
        let mut pending: Vec<(String, String, String, Context)> = Vec::new();
        let mut add = |_: &mut Self, name: &str, at: &str, source: &str, context: Context| {
            pending.push((name.to_owned(), at.to_owned(), source.to_owned(), context));
            true
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
        if let Some(source) = &file.action {
            ok &= add(
                self,
                "action",
                &format!("{pointer}/action"),
                source,
                Context::Header,
            );
        }
        let body_at = format!("{pointer}/body");
        let format_at = format!("{pointer}/body_format");
        let (body, content_type) = match (&file.body, file.body_format.as_deref()) {
            (None, Some("adf")) if lead && !soap => {
                // The lead as ADF/XML (`mapping::adf`), put in the context as `lead.adf`.
                // Built by the gateway, already XML: verbatim (a text body's explicit rule).
                ok &= add(
                    self,
                    "body",
                    &format_at,
                    "{{ lead.adf | safe }}",
                    Context::Text,
                );
                (Some(Context::Text), Some("application/xml"))
            }
            (_, Some("adf")) => {
                self.problems.push(src.problem(
                    &format_at,
                    if soap {
                        "a SOAP body is a template; put `{{ lead.adf }}` inside it to send ADF"
                    } else if lead {
                        "`body_format: adf` sends the lead as ADF/XML; leave `body` out"
                    } else {
                        "`body_format: adf` is for lead.submit"
                    },
                ));
                ok = false;
                (None, None)
            }
            (None, _) if soap => {
                self.problems.push(src.problem(
                    pointer,
                    "a SOAP request needs `body` (the content of the envelope's Body)",
                ));
                ok = false;
                (None, None)
            }
            (Some(source), format) if soap => {
                if format.is_some_and(|f| f != "xml") {
                    self.problems.push(
                        src.problem(&format_at, "a SOAP body is XML; leave `body_format` out"),
                    );
                    ok = false;
                }
                ok &= add(self, "body", &body_at, source, Context::XmlBody);
                // The envelope and its content type are the SOAP layer's.
                (Some(Context::XmlBody), None)
            }
            (None, None) => (None, None),
            (None, Some(_)) => {
                self.problems
                    .push(src.problem(&format_at, "`body_format` without a `body`"));
                (None, None)
            }
            (Some(source), format) => {
                let (context, ct) = match format.unwrap_or("json") {
                    "json" => (Context::JsonBody, "application/json"),
                    "xml" => (Context::XmlBody, "text/xml; charset=utf-8"),
                    "text" => (Context::Text, "text/plain; charset=utf-8"),
                    other => {
                        self.problems.push(src.problem(
                            &format_at,
                            format!("`{other}` is not one of json, xml, text, adf"),
                        ));
                        (Context::Text, "text/plain")
                    }
                };
                ok &= add(self, "body", &body_at, source, context);
                (Some(context), Some(ct))
            }
        };
        let templates = match self.ctx.cache.templates(&pending) {
            Ok(templates) => Some(templates),
            Err(errors) => {
                for (at, e) in errors {
                    self.problems.push(src.inner(
                        &at,
                        e.line.unwrap_or(1),
                        1,
                        format!("template: {}", e.message),
                    ));
                }
                ok = false;
                None
            }
        };
        let pagination = match &file.pagination {
            None => None,
            Some(p) => {
                let at = format!("{pointer}/pagination");
                let max_size = p.max_size.max(1);
                let named = |a: &Option<String>, b: &Option<String>| a.is_some() && b.is_some();
                let pagination = match (p.style.as_str(), &p.page, &p.size, &p.offset, &p.limit) {
                    ("page", page, size, None, None) if page.is_some() == size.is_some() => {
                        Some(Pagination::Page {
                            page: page.clone(),
                            size: size.clone(),
                            first: p.first,
                            max_size,
                        })
                    }
                    ("offset", None, None, offset, limit)
                        if offset.is_some() == limit.is_some() =>
                    {
                        Some(Pagination::Offset {
                            offset: offset.clone(),
                            limit: limit.clone(),
                            max_size,
                        })
                    }
                    ("page", ..) => {
                        self.problems.push(src.problem(
                            &at,
                            "style `page` takes both `page` and `size` (the query parameter \
                             names) or neither (then `{{ page.number }}` and `{{ page.size }}` \
                             carry the page in the path, headers or body)",
                        ));
                        None
                    }
                    ("offset", ..) => {
                        self.problems.push(src.problem(
                            &at,
                            "style `offset` takes both `offset` and `limit` (the query parameter \
                             names) or neither (then `{{ page.offset }}` and `{{ page.size }}` \
                             carry the page in the path, headers or body)",
                        ));
                        None
                    }
                    (other, ..) => {
                        self.problems.push(src.problem(
                            &format!("{at}/style"),
                            format!("`{other}` is not a paging style; use `page` or `offset`"),
                        ));
                        None
                    }
                };
                let in_query = named(&p.page, &p.size) || named(&p.offset, &p.limit);
                let in_templates = std::iter::once(file.path.as_str())
                    .chain(file.query.values().map(String::as_str))
                    .chain(file.headers.values().map(String::as_str))
                    .chain(file.body.as_deref())
                    .any(|t| t.contains("page."));
                if pagination.is_some() && soap && in_query {
                    self.problems.push(src.problem(
                        &at,
                        "a SOAP service reads the envelope, not the URL's query: leave the \
                         parameter names out and put `{{ page.number }}` / `{{ page.offset }}` \
                         and `{{ page.size }}` in `body`",
                    ));
                    ok = false;
                } else if pagination.is_some() && !in_query && !in_templates {
                    self.problems.push(src.problem(
                        &at,
                        "the page never reaches the upstream: name its query parameters, or use \
                         `{{ page.number }}` / `{{ page.offset }}` and `{{ page.size }}` in the \
                         path, a header or the body",
                    ));
                    ok = false;
                }
                ok &= pagination.is_some();
                pagination
            }
        };
        ok.then_some(())?;
        Some(RequestSpec {
            method,
            templates: templates?,
            query,
            headers,
            body,
            content_type,
            pagination,
            action: file.action.is_some(),
            path_ends_open: file.path.trim_end().ends_with('/'),
        })
    }

    fn feed(
        &mut self,
        upstreams: &Upstreams,
        common: &FileCommon,
        common_src: Option<&Source>,
    ) -> Option<Arc<Feed>> {
        let src = self.read("feed.yaml")?;
        let value = src.value.clone();
        let file: FileFeed = self.deserialize(&src, "", value)?;
        let upstream = self.upstream_ref(&src, "/upstream", &file.upstream, upstreams);
        if upstream.as_ref().is_some_and(|u| u.soap().is_some()) {
            self.problems.push(src.problem(
                "/upstream",
                "a feed is fetched over plain HTTP; a SOAP upstream cannot serve it",
            ));
        }
        let request = self.request(&src, "/request", &file.request, false, false);
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
            items?,
            csv_rows,
            item?,
            refresh?,
            max_stale?,
            shared,
        ));
        self.carried.feed = Some((definition, Arc::clone(&feed)));
        Some(feed)
    }

    /// A `charset:` label (at `pointer`): `Some(None)` when unset, `None` after a problem.
    /// Only XML and CSV bodies take one; JSON is always UTF-8.
    fn charset(
        &mut self,
        src: &Source,
        pointer: &str,
        label: Option<&str>,
        format: Option<&Format>,
    ) -> Option<Option<&'static encoding_rs::Encoding>> {
        let Some(label) = label else {
            return Some(None);
        };
        if matches!(format, Some(Format::Json)) {
            self.problems.push(src.problem(
                pointer,
                "`charset` is for xml and csv bodies; JSON is always UTF-8",
            ));
            return None;
        }
        match decode::charset(label) {
            Ok(encoding) => Some(Some(encoding)),
            Err(e) => {
                self.problems.push(src.problem(pointer, e));
                None
            }
        }
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

    fn target_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &Upstreams,
    ) -> Option<Target> {
        match upstreams.get(name) {
            Some(Some(t)) => Some(t.clone()),
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

    /// An HTTP (REST or SOAP) upstream.
    fn upstream_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &Upstreams,
    ) -> Option<Arc<Upstream>> {
        match self.target_ref(src, pointer, name, upstreams)? {
            Target::Http(u) => Some(u),
            Target::Smtp(_) => {
                self.problems.push(src.problem(
                    pointer,
                    format!("`{name}` is an SMTP upstream; only lead.submit can deliver by e-mail"),
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
        upstreams: &Upstreams,
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
                // A feed.yaml that exists but failed to load has said why already.
                None if self.dir.join("feed.yaml").exists() => None,
                None => {
                    self.problems.push(
                        src.problem("/mode", "mode `feed` needs a feed.yaml in the same folder"),
                    );
                    None
                }
            };
        }
        if skill == Skill::LeadSubmit {
            return self.lead(src, file, upstreams, common);
        }
        if file.lead.is_some() || file.mail.is_some() {
            self.problems.push(src.problem(
                if file.lead.is_some() {
                    "/lead"
                } else {
                    "/mail"
                },
                "only lead.submit takes `lead` and `mail`",
            ));
        }
        let upstream = self.proxy_upstream(src, &file, upstreams);
        self.proxy(skill, src, file, upstream, common)
            .map(|m| Handler::Proxy(Arc::new(m)))
    }

    fn proxy_upstream(
        &mut self,
        src: &Source,
        file: &FileSkill,
        upstreams: &Upstreams,
    ) -> Option<Arc<Upstream>> {
        match &file.upstream {
            Some(name) => self.upstream_ref(src, "/upstream", name, upstreams),
            None => {
                self.problems.push(src.problem(
                    "",
                    "a proxy-mode mapping needs `upstream` (or `static`, `derive`, `mode: feed`)",
                ));
                None
            }
        }
    }

    /// `lead.submit.yaml`: the policy, then delivery over HTTP (the mapping engine) or by mail.
    fn lead(
        &mut self,
        src: &Source,
        file: FileSkill,
        upstreams: &Upstreams,
        common: &FileCommon,
    ) -> Option<Handler> {
        let policy = self.lead_policy(src, file.lead.as_ref());
        if file.mode == FileMode::Feed {
            self.problems
                .push(src.problem("/mode", "`lead.submit` cannot be served from a feed"));
            return None;
        }
        let Some(name) = &file.upstream else {
            self.problems.push(src.problem(
                "",
                "lead.submit needs `upstream` (the CRM: a rest, soap or smtp upstream)",
            ));
            return None;
        };
        let target = self.target_ref(src, "/upstream", name, upstreams);
        let path = src.path.display().to_string();
        match target {
            Some(Target::Smtp(mailer)) => {
                let delivery = self.mail_delivery(src, &file, mailer, common);
                Some(Handler::Lead(Arc::new(LeadMapping {
                    file: path,
                    policy: policy?,
                    delivery: delivery?,
                })))
            }
            Some(Target::Http(upstream)) => {
                if file.mail.is_some() {
                    self.problems.push(src.problem(
                        "/mail",
                        format!("`{name}` is not an SMTP upstream; `mail` is for e-mail delivery"),
                    ));
                }
                let mapped = self.proxy(Skill::LeadSubmit, src, file, Some(upstream), common);
                Some(Handler::Lead(Arc::new(LeadMapping {
                    file: path,
                    policy: policy?,
                    delivery: Delivery::Http(Arc::new(mapped?)),
                })))
            }
            None => {
                // Still compile an HTTP delivery so every problem of the file is reported at once.
                if file.request.is_some() {
                    let _ = self.proxy(Skill::LeadSubmit, src, file, None, common);
                }
                None
            }
        }
    }

    fn lead_policy(&mut self, src: &Source, file: Option<&FileLead>) -> Option<LeadPolicy> {
        let default = FileLead {
            follow_up_channels: Vec::new(),
            timezone: "UTC".to_owned(),
            check_vehicle: false,
            test_drive_needs_vehicle: false,
            dealer_phone: None,
        };
        let file = file.unwrap_or(&default);
        let mut ok = true;
        for (i, channel) in file.follow_up_channels.iter().enumerate() {
            if !crate::consent::CHANNELS.contains(&channel.as_str()) {
                self.problems.push(src.problem(
                    &format!("/lead/follow_up_channels/{i}"),
                    format!("`{channel}` is not a channel; expected email, phone or sms"),
                ));
                ok = false;
            }
        }
        let timezone = match jiff::tz::TimeZone::get(&file.timezone) {
            Ok(tz) => Some(tz),
            Err(_) => {
                self.problems.push(src.problem(
                    "/lead/timezone",
                    format!(
                        "`{}` is not an IANA time zone like America/Los_Angeles",
                        file.timezone
                    ),
                ));
                None
            }
        };
        if let Some(phone) = &file.dealer_phone
            && !is_e164(phone)
        {
            self.problems.push(src.problem(
                "/lead/dealer_phone",
                format!("`{phone}` is not an E.164 number like +14155550100"),
            ));
            ok = false;
        }
        ok.then_some(())?;
        Some(LeadPolicy {
            follow_up: file.follow_up_channels.clone(),
            timezone: timezone?,
            check_vehicle: file.check_vehicle,
            test_drive_needs_vehicle: file.test_drive_needs_vehicle,
            dealer_phone: file.dealer_phone.clone(),
            dealer_name: self.ctx.dealer_name.to_owned(),
            dealer_id: self.ctx.dealer_id.to_owned(),
        })
    }

    fn mail_delivery(
        &mut self,
        src: &Source,
        file: &FileSkill,
        mailer: Arc<Mailer>,
        common: &FileCommon,
    ) -> Option<Delivery> {
        let mut ok = true;
        for (key, present) in [
            ("/request", file.request.is_some()),
            ("/errors", !file.errors.is_empty()),
        ] {
            if present {
                self.problems.push(src.problem(
                    key,
                    "an e-mail delivery has no HTTP call: leave it out (the mail carries the ADF \
                     document)",
                ));
                ok = false;
            }
        }
        let subject = match &file.mail {
            Some(mail) => {
                let mut templates = Templates::new();
                match templates.add("subject", &mail.subject, Context::Header) {
                    Ok(()) => Some(templates),
                    Err(e) => {
                        self.problems.push(src.inner(
                            "/mail/subject",
                            e.line.unwrap_or(1),
                            1,
                            format!("template: {}", e.message),
                        ));
                        None
                    }
                }
            }
            None => {
                self.problems.push(src.problem(
                    "",
                    "a lead delivered by e-mail needs `mail: { subject: ... }`",
                ));
                None
            }
        };
        let response = match file.response.as_ref().and_then(|r| r.jq.as_ref()) {
            Some(jq) => self.jq(src, "/response/jq", jq, common),
            None => {
                self.problems.push(src.problem(
                    "/response",
                    "give `jq` building the reply data from the mail receipt \
                     {message_id, server_reply}",
                ));
                None
            }
        };
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        ok.then_some(())?;
        Some(Delivery::Mail(Box::new(MailDelivery {
            mailer,
            subject: subject?,
            response: response?,
            shared,
        })))
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
        upstream: Option<Arc<Upstream>>,
        common: &FileCommon,
    ) -> Option<Mapped> {
        // Without a usable upstream, guess its kind from the file so the request's own
        // problems are still reported.
        let soap = match &upstream {
            Some(u) => u.soap().is_some(),
            None => file.request.as_ref().is_some_and(|r| r.action.is_some()),
        };
        let lead = skill == Skill::LeadSubmit;
        let request = match &file.request {
            Some(r) => self.request(src, "/request", r, soap, lead),
            None => {
                self.problems
                    .push(src.problem("", "a proxy-mode mapping needs `request`"));
                None
            }
        };
        let response_file = file.response.clone().unwrap_or_default();
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
            errors.push(ErrorRule {
                status,
                fault: rule.when.fault.clone(),
                jq,
                outcome,
            });
        }
        let declared = file.request.as_ref().and_then(|r| r.supports.as_ref());
        let supports = declared
            .map(|s| Supports {
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
                        FileSortSupport::Field(field) => (field.clone(), Missing::Last),
                        FileSortSupport::Detailed(d) => (
                            d.field.clone(),
                            match d.missing {
                                FileMissing::Last => Missing::Last,
                                FileMissing::First => Missing::First,
                                FileMissing::Low => Missing::Low,
                                FileMissing::High => Missing::High,
                            },
                        ),
                    })
                    .collect(),
                list_separator: s.list_separator.clone(),
            })
            .unwrap_or_default();
        let constant_status = response_file
            .item
            .as_deref()
            .is_some_and(|item| constant_listable_status(item, common.jq_defs.as_deref()));
        let listable_only =
            constant_status || declared.is_some_and(|s| s.listing == FileListing::Listable);
        if list {
            self.check_supports(src, &file, listable_only);
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
        let scan_cache = if list {
            match humantime::parse_duration(file.scan_cache.trim()) {
                Ok(ttl) => Some(ScanCache::new(ttl)),
                Err(_) => {
                    self.problems.push(src.problem(
                        "/scan_cache",
                        format!(
                            "`{}` is not a duration like 30s or 2m (0s turns the cache off)",
                            file.scan_cache
                        ),
                    ));
                    None
                }
            }
        } else {
            Some(ScanCache::default())
        };
        let shared = self.shared(Self::merged_tables(common, &file.tables));
        Some(Mapped {
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
            scan_cache: scan_cache?,
        })
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
        .is_some_and(|(value, _)| super::search::SERVABLE_STATUSES.contains(&value))
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

/// `+` and 2–15 digits, the first not 0 (E.164, as AAP's phone pattern).
fn is_e164(phone: &str) -> bool {
    phone.strip_prefix('+').is_some_and(|digits| {
        (2..=15).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0')
    })
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

    #[test]
    fn dealers_with_copies_of_one_mapping_compile_it_once() {
        let schemas = Schemas::load().expect("schemas");
        let metrics = crate::telemetry::metrics::Metrics::new();
        let cache = LoadCache::default();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let copy = tempfile::tempdir().expect("temp dir");
        for entry in std::fs::read_dir(root.join("mappings/demo-toyota")).expect("demo-toyota") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                let name = path.file_name().expect("file name");
                std::fs::copy(&path, copy.path().join(name)).expect("copy");
            }
        }
        let load = |dealer_id: &str, dir: &Path| {
            let ctx = LoadContext {
                schemas: &schemas,
                vars: &|_| None,
                dealer_id,
                dealer_name: dealer_id,
                metrics: &metrics,
                previous: None,
                cache: &cache,
            };
            load_folder(dir, &ctx).expect("loads")
        };
        let first = load("toyota_a", &root.join("mappings/demo-toyota"));
        let (programs, clients) = (cache.programs(), cache.clients());
        assert!(programs > 0 && clients > 0);
        let second = load("toyota_b", copy.path());
        assert_eq!(cache.programs(), programs, "no program compiled again");
        assert_eq!(cache.clients(), clients, "no HTTP client built again");
        // Each dealer still has its own `$dealer` and upstreams.
        let mapped = |m: &DealerMappings| match m.handlers.get(&Skill::InventorySearch) {
            Some(Handler::Proxy(mapped)) => Arc::clone(mapped),
            _ => panic!("a proxied search"),
        };
        let (a, b) = (mapped(&first), mapped(&second));
        assert!(Arc::ptr_eq(&a.request.templates, &b.request.templates));
        assert_ne!(a.shared.dealer_jq, b.shared.dealer_jq);
        assert!(!Arc::ptr_eq(&a.upstream, &b.upstream));
    }
}
