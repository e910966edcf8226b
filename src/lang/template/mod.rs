//! Request templates (minijinja), compiled once at load and escaped for where their output goes.
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
mod tests {
    use super::*;
    use serde_json::json;

    fn render(source: &str, context: Context, values: serde_json::Value) -> Result<String, String> {
        let mut t = Templates::new();
        t.add("t", source, context).map_err(|e| e.message)?;
        let full = TplValue::from(minijinja::value::Serde(&values));
        let tables = full.get_attr("tables").ok();
        t.render(
            "t",
            context,
            Scope {
                request: values.get("request"),
                tables: tables.as_ref(),
                context: Ctx::Ready(&full),
            },
        )
    }

    /// Every template `Direct` takes renders, for every request, what minijinja renders, and
    /// those it leaves to minijinja are the values it cannot decide.
    mod direct {
        use super::*;
        use proptest::prelude::*;
        use serde_json::Value as Json;

        fn scalar() -> impl Strategy<Value = Json> {
            prop_oneof![
                Just(Json::Null),
                any::<bool>().prop_map(Json::Bool),
                any::<i64>().prop_map(Json::from),
                any::<u64>().prop_map(Json::from),
                (-1e6f64..1e6).prop_map(Json::from),
                Just(json!(25000.0)),
                "new|used|cpo|[a-z]{0,2}".prop_map(Json::from),
                Just(json!(1e300)),
                "[a-zA-Z0-9 ,|&=?/#%\"'\\\n\u{e9}\u{1F697}-]{0,8}".prop_map(Json::from),
            ]
        }

        fn value() -> impl Strategy<Value = Json> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
                    prop::collection::btree_map(
                        "make|model|year_min|filters|items|_x1",
                        inner,
                        0..4
                    )
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
                ]
            })
        }

        fn vocabulary() -> impl Strategy<Value = Json> {
            prop_oneof![
                "new|used|cpo|[a-z]{0,2}".prop_map(Json::from),
                Just(Json::Null),
                Just(json!(3))
            ]
        }

        /// Requests shaped like skill requests, so that most paths reach a value.
        fn request() -> impl Strategy<Value = Json> {
            let list = || prop::collection::vec(scalar(), 0..4).prop_map(Json::Array);
            prop_oneof![
                value(),
                (list(), scalar(), list(), value()).prop_map(|(make, year, model, items)| {
                    json!({
                        "make": make.clone(),
                        "items": items,
                        "filters": {"make": make, "year_min": year, "model": model},
                    })
                }),
                // Vocabularies a table translates, as `lookup` reads them.
                (
                    prop::collection::vec(vocabulary(), 0..4),
                    prop_oneof![vocabulary(), scalar()],
                )
                    .prop_map(|(condition, field)| {
                        json!({"filters": {"condition": condition}, "sort": {"field": field}})
                    }),
            ]
        }

        fn template() -> impl Strategy<Value = String> {
            let any_path = prop::collection::vec("make|model|year_min|filters|items|_x1|0", 0..4)
                .prop_map(|keys| {
                    std::iter::once("request".to_owned())
                        .chain(keys)
                        .collect::<Vec<_>>()
                        .join(".")
                });
            let path = prop_oneof![
                any_path,
                "request\\.(make|items|sort\\.field|filters\\.(make|model|year_min|condition))"
                    .prop_map(|p| p.to_owned()),
            ];
            let filter = prop_oneof![
                Just(String::new()),
                Just("|join(',')".to_owned()),
                Just(" | join(\", \")".to_owned()),
                Just(" | join('')".to_owned()),
                Just(" | join('\u{2022}') ".to_owned()),
                Just(" | join(\"a'b\")".to_owned()),
                Just(" | length".to_owned()),
                Just(" | lookup(tables.out)".to_owned()),
                Just("|lookup( tables.out )".to_owned()),
                Just(" | lookup(tables.nope)".to_owned()),
                Just(" | map('lookup', tables.out) | join(',')".to_owned()),
                Just("|map(\"lookup\",tables.out)|join(\"; \")".to_owned()),
                Just(" | map('lookup', tables.nope) | join(',')".to_owned()),
                Just(" | map('upper') | join(',')".to_owned()),
                Just(" | join(',', attribute='x')".to_owned()),
            ];
            let text = "[a-z/ ]{0,6}(\r?\n)?";
            prop_oneof![
                (path, filter, "[ ]{0,2}", "(\r?\n)?")
                    .prop_map(|(p, f, pad, nl)| format!("{{{{{pad}{p}{f}{pad}}}}}{nl}")),
                text.prop_map(|t| t.to_owned()),
                Just("{{ dealer.id }}".to_owned()),
                Just("x{{ request.make }}".to_owned()),
                Just("{{- request.make -}}".to_owned()),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]
            #[test]
            fn direct_renders_what_minijinja_renders(
                source in template(),
                request in request(),
                table in prop::collection::btree_map(
                    "new|used|cpo|[a-z]{0,2}",
                    prop_oneof![scalar(), Just(Json::Null), "[A-Z][a-z]{0,5}".prop_map(Json::from)],
                    0..6,
                ),
                context in prop_oneof![Just(Context::Query), Just(Context::Path)],
            ) {
                let mut t = Templates::new();
                prop_assume!(t.add("t", &source, context).is_ok());
                let values = json!({"request": request, "dealer": {"id": "d"}, "tables": {"out": table}});
                let full = TplValue::from(minijinja::value::Serde(&values));
                let tables = full.get_attr("tables").expect("tables");
                let scope = Scope { request: Some(&request), tables: Some(&tables), context: Ctx::Ready(&full) };
                let direct = t.render("t", context, scope);
                let minijinja = t.render("t", context, Scope::context(&full));
                prop_assert_eq!(&direct, &minijinja, "{:?} over {}", source, request);
                let shape = t.direct[context as usize].get("t");
                // The shapes are recognised where they should be (the test is not vacuous).
                if context == Context::Query
                    && source.trim_end().starts_with("{{ request.")
                    && !source.contains(['-', '0'])
                    && !source.contains("length")
                    && !source.contains("upper")
                    && !source.contains("attribute")
                {
                    prop_assert!(shape.is_some(), "{:?} was not recognised", source);
                }
                if !source.contains('{') {
                    prop_assert!(matches!(shape, Some(Direct::Text(_))), "{:?}", source);
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            /// The `lookup` shapes, over requests and tables drawn from one small vocabulary
            /// so that most lookups find something (a string, a number, `null`) or nothing.
            #[test]
            fn lookups_render_what_minijinja_renders(
                path in "request\\.(sort\\.field|filters\\.condition|missing)",
                filter in prop_oneof![
                    Just(" | lookup(tables.out)"),
                    Just(" | lookup(tables.nope)"),
                    Just(" | map('lookup', tables.out) | join(',')"),
                    Just(" | map('lookup', tables.nope) | join(', ')"),
                ],
                condition in prop::collection::vec(vocabulary(), 0..4),
                field in vocabulary(),
                table in prop::collection::btree_map("new|used|cpo|[a-z]{0,2}", vocabulary(), 0..5),
            ) {
                let source = format!("{{{{ {path}{filter} }}}}");
                let request = json!({"filters": {"condition": condition}, "sort": {"field": field}});
                let mut t = Templates::new();
                t.add("t", &source, Context::Query).expect("compiles");
                prop_assert!(t.direct[Context::Query as usize].contains_key("t"), "{} is a direct shape", source);
                let values = json!({"request": request, "tables": {"out": table}});
                let full = TplValue::from(minijinja::value::Serde(&values));
                let tables = full.get_attr("tables").expect("tables");
                let scope = Scope { request: Some(&request), tables: Some(&tables), context: Ctx::Ready(&full) };
                let direct = t.render("t", Context::Query, scope);
                let minijinja = t.render("t", Context::Query, Scope::context(&full));
                prop_assert_eq!(&direct, &minijinja, "{:?} over {}", source, values);
            }
        }

        #[test]
        fn the_common_values_render_directly() {
            let tables = TplValue::from(minijinja::value::Serde(
                &json!({"out": {"used": "Pre-Owned", "new": "New", "n": 3, "gone": null}}),
            ));
            let direct = |source: &str, request: Json| {
                Direct::of(source, Context::Query)
                    .expect("a direct shape")
                    .render(Scope {
                        request: Some(&request),
                        tables: Some(&tables),
                        context: Ctx::Ready(&TplValue::UNDEFINED),
                    })
            };
            let filters = json!({
                "filters": {"make": ["Honda", "Toyota"], "year_min": 2020, "price_max": 25000.5,
                            "condition": ["new", "used", "cpo", "n", "gone"]},
                "sort": "used", "order": "cpo", "gone": "gone",
            });
            for (source, want) in [
                ("{{ request.filters.make | join(',') }}", "Honda,Toyota"),
                ("{{ request.filters.year_min }}", "2020"),
                ("{{ request.filters.price_max }}", "25000.5"),
                ("{{ request.filters.model | join(',') }}", ""),
                // A table's `null` is minijinja's `none`, which `join` prints as `None`.
                (
                    "{{ request.filters.condition | map('lookup', tables.out) | join(',') }}",
                    "New,Pre-Owned,,3,None",
                ),
                ("{{ request.sort | lookup(tables.out) }}", "Pre-Owned"),
                ("{{ request.order | lookup(tables.out) }}", ""),
                ("{{ request.gone | lookup(tables.out) }}", ""),
            ] {
                assert_eq!(
                    direct(source, filters.clone()).as_deref(),
                    Some(want),
                    "{source}"
                );
                let mut t = Templates::new();
                t.add("t", source, Context::Query).expect("compiles");
                let full = TplValue::from(minijinja::value::Serde(
                    &json!({"request": filters, "tables": tables}),
                ));
                let minijinja = t.render("t", Context::Query, Scope::context(&full));
                assert_eq!(minijinja.as_deref(), Ok(want), "{source} in minijinja");
            }
            // A join of a string (its characters, in minijinja) is minijinja's to decide.
            assert_eq!(
                direct(
                    "{{ request.filters | join(',') }}",
                    json!({"filters": "ab"})
                ),
                None
            );
            assert!(Direct::of("{{ request.make }}", Context::Path).is_none());
            assert!(Direct::of("{{ request.make | upper }}", Context::Query).is_none());
        }
    }

    #[test]
    fn path_values_are_one_segment() {
        let out = render(
            "/v/{{ request.vin }}",
            Context::Path,
            json!({"request": {"vin": "../admin?x=1#"}}),
        );
        assert_eq!(out.unwrap(), "/v/..%2Fadmin%3Fx%3D1%23");
    }

    #[test]
    fn absent_values_render_empty() {
        let out = render(
            "{{ request.filters.make | join(',') }}",
            Context::Query,
            json!({"request": {}}),
        );
        assert_eq!(out.unwrap(), "");
    }

    #[test]
    fn lookup_maps_vocabularies() {
        let out = render(
            "{{ request.c | map('lookup', tables.out) | join(',') }}",
            Context::Query,
            json!({"request": {"c": ["new", "cpo"]}, "tables": {"out": {"new": "New", "cpo": "Certified"}}}),
        );
        assert_eq!(out.unwrap(), "New,Certified");
    }

    #[test]
    fn json_bodies_serialize_values() {
        let out = render(
            r#"{"name": {{ n }}}"#,
            Context::JsonBody,
            json!({"n": "a\"b</x>"}),
        );
        let parsed: serde_json::Value = serde_json::from_str(&out.unwrap()).unwrap();
        assert_eq!(parsed["name"], "a\"b</x>");
    }

    #[test]
    fn json_bodies_render_absent_values_as_null() {
        let out = render(
            r#"{"vin": {{ request.vin }}, "comments": {{ request.message }}, "n": {{ none }}}"#,
            Context::JsonBody,
            json!({"request": {"vin": "1HG"}, "none": null}),
        )
        .unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed, json!({"vin": "1HG", "comments": null, "n": null}));
    }

    #[test]
    fn xml_bodies_escape_markup() {
        let out = render(
            "<n>{{ n }}</n>",
            Context::XmlBody,
            json!({"n": "<a&b>\"]]>"}),
        );
        assert_eq!(out.unwrap(), "<n>&lt;a&amp;b&gt;&quot;]]&gt;</n>");
    }

    #[test]
    fn header_values_refuse_line_breaks() {
        assert!(render("x{{ v }}", Context::Header, json!({"v": "a\r\nX-Evil: 1"})).is_err());
        assert_eq!(
            render("k-{{ v }}", Context::Header, json!({"v": "abc"})).unwrap(),
            "k-abc"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let mut t = Templates::new();
        let e = t.add("t", "a\n{{ x | }}", Context::Text).unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn runaway_templates_are_stopped() {
        let out = render(
            "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
            Context::Text,
            json!({}),
        );
        assert!(out.is_err());
    }

    #[test]
    fn a_text_body_takes_strings_only_through_an_explicit_filter() {
        let values = json!({"msg": "line1\nFIELD=forged", "n": 3, "b": true});
        let bare = render("MSG={{ msg }}", Context::Text, values.clone()).unwrap_err();
        assert!(bare.contains("needs an explicit filter"), "{bare}");
        assert_eq!(
            render("MSG={{ msg | safe }}", Context::Text, values.clone()).unwrap(),
            "MSG=line1\nFIELD=forged"
        );
        assert_eq!(
            render("MSG={{ msg | tojson }}", Context::Text, values.clone()).unwrap(),
            r#"MSG="line1\nFIELD=forged""#
        );
        assert_eq!(
            render("N={{ n }} B={{ b }}", Context::Text, values).unwrap(),
            "N=3 B=true"
        );
        // Absent values stay empty, as elsewhere outside JSON.
        assert_eq!(
            render("X={{ nope }}", Context::Text, json!({})).unwrap(),
            "X="
        );
    }
}
