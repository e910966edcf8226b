//! Request templates (minijinja), compiled once at load and escaped for where their output goes.
//! Owns the template environment and its filters; uses `formats::escape` for every context.
//!
//! Every interpolated value is escaped for its output context, so no request value can change
//! the structure of an upstream call: in a path each value is percent-encoded as one segment
//! (`/` included), query values are encoded by the URL builder, header values refuse CR, LF and
//! NUL, JSON bodies serialize each value as JSON, and XML bodies escape `<`, `>`, `&`, `"`, `'`.
//! A text body has no grammar the gateway could escape for, so it takes numbers and booleans as
//! they are and a string only through a filter that vouches for it (`| safe` to send it
//! verbatim, or an escaping filter such as `| tojson`); a bare string refuses to render.

use std::borrow::Cow;
use std::fmt::Write as _;

use minijinja::value::Value as TplValue;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};
use percent_encoding::utf8_percent_encode;

use crate::formats::escape::{URL_COMPONENT, header_safe, xml_escape};

/// Start of a render error caused by a request value that cannot be sent (a `..` path
/// segment, a line break in a header), as opposed to a defect in the mapping.
pub const UNSENDABLE: &str = "unsendable value: ";

/// Where a template's output goes; decides how interpolated values are escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    Path,
    Query,
    Header,
    JsonBody,
    XmlBody,
    Text,
}

/// How many [`Context`]s there are (`Text` is the last).
const CONTEXTS: usize = Context::Text as usize + 1;

/// Templates rendered without minijinja, by name.
type DirectMap = std::collections::HashMap<Box<str>, Direct, foldhash::fast::RandomState>;

impl Context {
    fn suffix(self) -> &'static str {
        match self {
            Context::Path => "path",
            Context::Query => "query",
            Context::Header => "header",
            Context::JsonBody => "json",
            Context::XmlBody => "xml",
            Context::Text => "text",
        }
    }
}

/// Most instructions one render may run; bounds a runaway loop in an operator's template.
const FUEL: u64 = 100_000;

/// A template failed to compile: `line` is 1-based within the template text.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TemplateError {
    pub line: Option<usize>,
    pub message: String,
}

/// The templates of one mapping file.
pub struct Templates {
    env: Environment<'static>,
    /// The templates of a shape rendered without minijinja, by context and name (the key in
    /// `env` is `name@suffix`): a render looks its template up without making that key.
    direct: [DirectMap; CONTEXTS],
}

/// What a render reads: the skill request as JSON, from which the shapes in [`Direct`] render
/// without minijinja, and the whole template context (`request`, `dealer`, `tables`, `lead`,
/// `page`) for the rest, which may be built on first need: a call whose templates all render
/// directly never converts the request for minijinja.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    request: Option<&'a serde_json::Value>,
    /// The mapping's tables, as the context holds them (for `lookup`).
    tables: Option<&'a TplValue>,
    context: Ctx<'a>,
}

#[derive(Clone, Copy)]
enum Ctx<'a> {
    Ready(&'a TplValue),
    Lazy(&'a Lazy<'a>),
}

/// A template context built on first use, at most once.
pub struct Lazy<'a> {
    built: std::sync::OnceLock<TplValue>,
    build: &'a (dyn Fn() -> TplValue + Sync + 'a),
}

impl<'a> Lazy<'a> {
    pub fn new(build: &'a (dyn Fn() -> TplValue + Sync + 'a)) -> Lazy<'a> {
        Lazy {
            built: std::sync::OnceLock::new(),
            build,
        }
    }
}

impl<'a> Scope<'a> {
    /// A context without a skill request (feeds, mail subjects): every template goes through
    /// minijinja.
    pub fn context(context: &'a TplValue) -> Scope<'a> {
        Scope {
            request: None,
            tables: None,
            context: Ctx::Ready(context),
        }
    }

    /// The skill request and the mapping's tables, with the context holding them built when a
    /// template needs it.
    pub fn request(
        request: &'a serde_json::Value,
        tables: &'a TplValue,
        context: &'a Lazy<'a>,
    ) -> Scope<'a> {
        Scope {
            request: Some(request),
            tables: Some(tables),
            context: Ctx::Lazy(context),
        }
    }

    /// The same request with another context (one with the `page` of a paged call).
    pub fn with_context<'b>(self, context: &'b Lazy<'b>) -> Scope<'b>
    where
        'a: 'b,
    {
        Scope {
            context: Ctx::Lazy(context),
            ..self
        }
    }

    /// The whole context, built now if it was not.
    pub fn full(&self) -> &'a TplValue {
        match self.context {
            Ctx::Ready(context) => context,
            Ctx::Lazy(lazy) => lazy.built.get_or_init(lazy.build),
        }
    }
}

/// The template shapes most request mappings consist of, rendered without minijinja's setup
/// per render (half the cost of rendering a search call). Each renders what minijinja renders
/// (`direct_renders_what_minijinja_renders`); a value outside what a shape decides here
/// (a join of nested arrays, a number in place of a list) goes through minijinja.
#[derive(Debug)]
enum Direct {
    /// Text without tags: the text itself, less the one trailing newline minijinja drops.
    Text(String),
    /// A whole query value: a path from `request`, through one of the [`Filter`] shapes.
    Request { path: Box<[String]>, filter: Filter },
}

/// What a [`Direct::Request`] does with the value at its path.
#[derive(Debug)]
enum Filter {
    /// `{{ request.a.b }}`
    None,
    /// `{{ request.a.b | join(",") }}`
    Join(String),
    /// `{{ request.a.b | lookup(tables.t) }}`
    Lookup(String),
    /// `{{ request.a.b | map('lookup', tables.t) | join(",") }}`
    MapLookupJoin(String, String),
}

impl Filter {
    /// The filters after a path (`join(",")`, …), if they are one of the shapes.
    fn of(filters: &[&str]) -> Option<Filter> {
        /// The text between the parentheses of `name(…)`.
        fn call<'s>(filter: &'s str, name: &str) -> Option<&'s str> {
            let args = filter.strip_prefix(name)?.trim_start();
            Some(args.strip_prefix('(')?.strip_suffix(')')?.trim())
        }
        fn quoted(arg: &str) -> Option<String> {
            let quote = arg.chars().next().filter(|q| matches!(q, '"' | '\''))?;
            let text = arg.strip_prefix(quote)?.strip_suffix(quote)?;
            (!text.contains([quote, '\\'])).then(|| text.to_owned())
        }
        fn table(arg: &str) -> Option<String> {
            let name = arg.strip_prefix("tables.")?;
            identifier(name).then(|| name.to_owned())
        }
        match filters {
            [] => Some(Filter::None),
            [join] => match call(join, "join") {
                Some(sep) => Some(Filter::Join(quoted(sep)?)),
                None => Some(Filter::Lookup(table(call(join, "lookup")?)?)),
            },
            [map, join] => {
                let (name, t) = call(map, "map")?.split_once(',')?;
                (quoted(name.trim())? == "lookup").then_some(())?;
                Some(Filter::MapLookupJoin(
                    table(t.trim())?,
                    quoted(call(join, "join")?)?,
                ))
            }
            _ => None,
        }
    }
}

/// A name minijinja reads as one attribute (`make`, `year_min`).
fn identifier(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Direct {
    /// The shape of `source` in `context`, if it has one.
    fn of(source: &str, context: Context) -> Option<Direct> {
        let source = source.strip_suffix('\n').unwrap_or(source);
        let source = source.strip_suffix('\r').unwrap_or(source);
        if !source.contains('{') {
            return Some(Direct::Text(source.to_owned()));
        }
        if context != Context::Query {
            return None;
        }
        let inner = source.strip_prefix("{{")?.strip_suffix("}}")?;
        let mut parts = inner.split('|').map(str::trim);
        let mut keys = parts.next()?.split('.');
        if keys.next() != Some("request") {
            return None;
        }
        let path: Box<[String]> = keys.map(str::to_owned).collect();
        if path.is_empty() || !path.iter().all(|key| identifier(key)) {
            return None;
        }
        let filter = Filter::of(&parts.collect::<Vec<_>>())?;
        Some(Direct::Request { path, filter })
    }

    /// The rendered text, or `None` for minijinja to decide (always, for a request shape
    /// rendered without the request as JSON).
    fn render(&self, values: Scope<'_>) -> Option<String> {
        use serde_json::Value as Json;
        let (path, filter) = match self {
            Direct::Text(text) => return Some(text.clone()),
            Direct::Request { path, filter } => (path, filter),
        };
        let request = values.request?;
        // An attribute of anything but a map is undefined (the environment's `Chainable`).
        let value = path
            .iter()
            .try_fold(request, |value, key| value.as_object()?.get(key));
        // Scalars print as minijinja prints them, through its own value.
        let printed = |value: &Json| TplValue::from(minijinja::value::Serde(value)).to_string();
        // `lookup` as the filter does it, on the table minijinja would read.
        let table = |name: &str| {
            let table = values.tables?.get_attr(name).ok()?;
            Some(move |key: &str| {
                table
                    .get_item(&TplValue::from(key))
                    .unwrap_or(TplValue::UNDEFINED)
            })
        };
        match (value, filter) {
            // Undefined prints empty, and joins as an empty list.
            (None, Filter::None | Filter::Join(_)) | (Some(Json::Null), Filter::None) => {
                Some(String::new())
            }
            (Some(Json::String(s)), Filter::None) => Some(s.clone()),
            (Some(scalar @ (Json::Bool(_) | Json::Number(_))), Filter::None) => {
                Some(printed(scalar))
            }
            (Some(Json::Array(items)), Filter::Join(sep)) => {
                joined(items, sep, |item| match item {
                    Json::String(s) => Some(Cow::Borrowed(s)),
                    Json::Array(_) | Json::Object(_) => None,
                    scalar => Some(Cow::Owned(printed(scalar))),
                })
            }
            (Some(Json::String(s)), Filter::Lookup(name)) => {
                let found = table(name)?(s);
                // As the formatter prints a value: nothing for undefined and none.
                Some(if found.is_undefined() || found.is_none() {
                    String::new()
                } else {
                    plain_text(&found)
                })
            }
            (Some(Json::Array(items)), Filter::MapLookupJoin(name, sep)) => {
                let lookup = table(name)?;
                // `join` prints each looked-up item as it is, `none` and undefined included.
                joined(items, sep, |item| {
                    Some(Cow::Owned(plain_text(&lookup(item.as_str()?))))
                })
            }
            _ => None,
        }
    }
}

/// The texts of `items` joined with `sep`, as `join` does; `None` when an item has no text
/// here (`text` says which).
fn joined<'v>(
    items: &'v [serde_json::Value],
    sep: &str,
    mut text: impl FnMut(&'v serde_json::Value) -> Option<Cow<'v, str>>,
) -> Option<String> {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        out.push_str(&text(item)?);
    }
    Some(out)
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Templates { .. }")
    }
}

impl Default for Templates {
    fn default() -> Self {
        Templates::new()
    }
}

impl Templates {
    pub fn new() -> Templates {
        let mut env = Environment::new();
        // `request.filters.make` is simply empty when the buyer sent no filters.
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_fuel(Some(FUEL));
        env.set_auto_escape_callback(|name| match name.rsplit('@').next() {
            Some("path") => AutoEscape::Custom("path".into()),
            Some("json") => AutoEscape::Json,
            Some("xml") => AutoEscape::Custom("xml".into()),
            Some("header") => AutoEscape::Custom("header".into()),
            Some("text") => AutoEscape::Custom("text".into()),
            _ => AutoEscape::None,
        });
        env.set_formatter(format_value);
        env.add_filter("lookup", lookup);
        Templates {
            env,
            direct: Default::default(),
        }
    }

    /// Compiles `source` as template `name` for output context `context`.
    pub fn add(&mut self, name: &str, source: &str, context: Context) -> Result<(), TemplateError> {
        let key = format!("{name}@{}", context.suffix());
        self.env
            .add_template_owned(key.clone(), source.to_owned())
            .map_err(|e| TemplateError {
                line: e.line(),
                message: describe(&e),
            })?;
        let direct = &mut self.direct[context as usize];
        match Direct::of(source, context) {
            Some(shape) => direct.insert(name.into(), shape),
            None => direct.remove(name),
        };
        Ok(())
    }

    /// Every variable the templates read, with the path it is read at (`request.filters.make`,
    /// `page.number`): what `check` holds against what the engine gives them.
    pub fn variables(&self) -> std::collections::BTreeSet<String> {
        self.env
            .templates()
            .flat_map(|(_, template)| template.undeclared_variables(true))
            .collect()
    }

    /// Renders template `name` (as added with `context`).
    pub fn render(
        &self,
        name: &str,
        context: Context,
        values: Scope<'_>,
    ) -> Result<String, String> {
        let out = match self.direct[context as usize]
            .get(name)
            .and_then(|direct| direct.render(values))
        {
            Some(out) => out,
            None => {
                let key = format!("{name}@{}", context.suffix());
                self.render_minijinja(&key, context, values.full())?
            }
        };
        if context == Context::Header && !header_safe(&out) {
            return Err(format!(
                "{UNSENDABLE}a header value would contain a line break"
            ));
        }
        Ok(out)
    }

    fn render_minijinja(
        &self,
        key: &str,
        context: Context,
        values: &TplValue,
    ) -> Result<String, String> {
        let template = self.env.get_template(key).map_err(|e| describe(&e))?;
        template.render(values).map_err(|e| {
            if e.kind() == ErrorKind::InvalidOperation && context == Context::Header {
                format!("{UNSENDABLE}{}", describe(&e))
            } else {
                describe(&e)
            }
        })
    }
}

/// Writes one interpolated value, escaped for the template's output context.
fn format_value(
    out: &mut Output<'_>,
    state: &mut State<'_, '_>,
    value: &TplValue,
) -> Result<(), Error> {
    if value.is_undefined() || value.is_none() {
        // In a JSON body an absent value is `null`, so the body stays JSON
        // (`"comments": {{ request.message }}` without a message); elsewhere it is empty.
        return match state.auto_escape() {
            AutoEscape::Json => out.write_str("null").map_err(fmt_error),
            _ => Ok(()),
        };
    }
    let custom = match state.auto_escape() {
        AutoEscape::Custom(name) => Some(name.to_string()),
        _ => None,
    };
    match custom.as_deref() {
        Some("path") => {
            let text = plain_text(value);
            write!(out, "{}", utf8_percent_encode(&text, URL_COMPONENT)).map_err(fmt_error)
        }
        Some("xml") => out
            .write_str(&xml_escape(&plain_text(value)))
            .map_err(fmt_error),
        Some("header") => {
            let text = plain_text(value);
            if !header_safe(&text) {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "line break in a header value",
                ));
            }
            out.write_str(&text).map_err(fmt_error)
        }
        Some("text") => {
            let vouched = value.is_safe()
                || matches!(
                    value.kind(),
                    minijinja::value::ValueKind::Number | minijinja::value::ValueKind::Bool
                );
            if !vouched {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "a value in a `body_format: text` body needs an explicit filter: `| safe` \
                     to send it verbatim, or an escaping one such as `| tojson`",
                ));
            }
            let text = match value.kind() {
                // As JSON writes them, not minijinja's `True`.
                minijinja::value::ValueKind::Bool => value.is_true().to_string(),
                _ => plain_text(value),
            };
            out.write_str(&text).map_err(fmt_error)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

fn fmt_error(_: std::fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "cannot write template output")
}

/// Text of a value as a template would print it (strings without quotes).
fn plain_text(value: &TplValue) -> String {
    match value.as_str() {
        Some(s) => s.to_owned(),
        None => value.to_string(),
    }
}

/// `{{ value | lookup(tables.condition_out) }}`: the table's entry for the value, or undefined.
fn lookup(value: TplValue, table: TplValue) -> TplValue {
    table.get_item(&value).unwrap_or(TplValue::UNDEFINED)
}

fn describe(e: &Error) -> String {
    let mut message = e
        .detail()
        .map_or_else(|| e.kind().to_string(), str::to_owned);
    if let Some(line) = e.line() {
        let _ = write!(message, " (template line {line})");
    }
    message
}

#[cfg(test)]
mod tests;
