//! A compiled upstream request: method, path, query, headers and body templates, and the paging
//! of list calls. Rendering produces the exact call to send; escaping is per output context
//! (`template`), and the query string is assembled here with percent-encoding, so no request
//! value can add a parameter, change the path or split a header.

use http::{HeaderName, HeaderValue, Method};
use minijinja::value::Value as TplValue;
use percent_encoding::utf8_percent_encode;

use crate::formats::escape::URL_COMPONENT;
use crate::lang::template::{Context, Lazy, Scope, Templates, UNSENDABLE};

/// How an upstream pages a list. The engine owns the arithmetic; the page reaches the upstream
/// as query parameters (when their names are given) and as the template variable `page`
/// (`page.number`, `page.index`, `page.offset`, `page.size`) for a path, header or body.
#[derive(Debug, Clone)]
pub enum Pagination {
    /// Page numbers, the first page being `first`: `?page=N&pageSize=S` when named.
    Page {
        page: Option<String>,
        size: Option<String>,
        first: u64,
        max_size: u64,
    },
    /// Offsets: `?offset=N&limit=S` when named.
    Offset {
        offset: Option<String>,
        limit: Option<String>,
        max_size: u64,
    },
    /// Cursors (GraphQL connections, `next_cursor`, `nextPageToken`): the first page without
    /// one, each next one with the cursor the previous reply gave; `?cursor=C&size=S` when
    /// named, else `page.cursor` and `page.size` in a template.
    Cursor {
        cursor: Option<String>,
        size: Option<String>,
        max_size: u64,
    },
    /// Next links (`links.next`, `@odata.nextLink`, `Link: <…>; rel="next"`): the first page
    /// as rendered (`?size=S` when named), each next one at the URL the previous reply gave.
    NextLink { size: Option<String>, max_size: u64 },
}

impl Pagination {
    pub fn max_size(&self) -> u64 {
        match self {
            Pagination::Page { max_size, .. }
            | Pagination::Offset { max_size, .. }
            | Pagination::Cursor { max_size, .. }
            | Pagination::NextLink { max_size, .. } => *max_size,
        }
    }

    /// Whether pages are reached one after another (a cursor or link from each reply), not by
    /// their position.
    pub fn sequential(&self) -> bool {
        matches!(
            self,
            Pagination::Cursor { .. } | Pagination::NextLink { .. }
        )
    }

    /// The template variable `page` for one page.
    fn variable(&self, page: &PageRef) -> TplValue {
        let first = match self {
            Pagination::Page { first, .. } => *first,
            Pagination::Offset { .. } | Pagination::Cursor { .. } | Pagination::NextLink { .. } => {
                1
            }
        };
        minijinja::context! {
            number => page.index.saturating_add(first),
            index => page.index,
            offset => page.index.saturating_mul(page.size),
            size => page.size,
            cursor => page.cursor.as_deref(),
        }
    }
}

/// One upstream page to fetch: `index` in units of `size` (0-based), and for sequential
/// paging the cursor or next link the previous reply gave (`None` on the first page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRef {
    pub index: u64,
    pub size: u64,
    pub cursor: Option<std::sync::Arc<str>>,
}

impl PageRef {
    /// Page `index` of `size` records, reached by its position.
    pub fn at(index: u64, size: u64) -> PageRef {
        PageRef {
            index,
            size,
            cursor: None,
        }
    }
}

/// The pages covering `[skip, skip + limit)` and where the wanted slice starts in their
/// concatenation. Paging arithmetic lives here, never in templates.
pub fn plan(skip: u64, limit: u64, max_size: u64) -> (Vec<PageRef>, usize) {
    let size = limit.clamp(1, max_size.max(1));
    let first = skip / size;
    // Saturating: a `skip` near u64::MAX asks for pages past any stock, never a wrapped one.
    let last = skip.saturating_add(limit.max(1) - 1) / size;
    let pages = (first..=last)
        .map(|index| PageRef::at(index, size))
        .collect();
    let start = usize::try_from(skip - first * size).unwrap_or(0);
    (pages, start)
}

/// A rendered call, before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub method: Method,
    /// Path and encoded query, starting with `/`.
    pub path_and_query: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<String>,
    /// SOAP upstreams: the operation's action.
    pub action: Option<String>,
}

impl Rendered {
    /// The path without the query string (safe to log: queries may carry personal data).
    pub fn path(&self) -> &str {
        self.path_and_query.split('?').next().unwrap_or_default()
    }

    /// The call of a next link a reply gave (`links.next`, `@odata.nextLink`, a `Link` header):
    /// a GET of that URL with this call's headers and no body. A relative link resolves against
    /// `base` (the upstream's base URL); a link that leaves it (another scheme, host, port, or a
    /// path outside the base path) is never followed.
    pub fn follow(&self, link: &str, base: &url::Url) -> Result<Rendered, String> {
        let url = base
            .join(link)
            .map_err(|e| format!("the next link is not a URL ({e})"))?;
        let prefix = base.path().trim_end_matches('/');
        let same_origin = url.scheme() == base.scheme()
            && url.host_str() == base.host_str()
            && url.port_or_known_default() == base.port_or_known_default();
        let path = url
            .path()
            .strip_prefix(prefix)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'));
        let Some(path) = path.filter(|_| same_origin) else {
            return Err("the next link leaves the upstream's base URL; it is not followed".into());
        };
        let path_and_query = match url.query() {
            Some(query) => format!("{path}?{query}"),
            None => path.to_owned(),
        };
        Ok(Rendered {
            method: Method::GET,
            path_and_query,
            headers: self
                .headers
                .iter()
                .filter(|(name, _)| name != http::header::CONTENT_TYPE)
                .cloned()
                .collect(),
            body: None,
            action: None,
        })
    }
}

/// A request spec compiled at load.
#[derive(Debug)]
pub struct RequestSpec {
    pub method: Method,
    /// Shared by the identical requests of one load (`load::LoadCache`).
    pub templates: std::sync::Arc<Templates>,
    /// Each query parameter's name and its template's (`query.<name>`).
    pub query: Vec<(String, String)>,
    pub headers: Vec<HeaderName>,
    pub body: Option<Context>,
    pub content_type: Option<&'static str>,
    pub pagination: Option<Pagination>,
    /// Whether an `action` template (SOAP) was compiled.
    pub action: bool,
    /// Whether the path template itself ends with `/`; otherwise a rendered path ending with
    /// `/` (or holding `//`) means a value in it rendered empty.
    pub path_ends_open: bool,
}

impl RequestSpec {
    /// Renders the call for `values` (`request`, `dealer`, `tables`); `page` adds the paging
    /// parameters of one page.
    pub fn render(&self, values: Scope<'_>, page: Option<&PageRef>) -> Result<Rendered, String> {
        let (build, paged);
        let values = match (&self.pagination, page) {
            (Some(p), Some(page)) => {
                build = move || minijinja::context! { page => p.variable(page), ..values.full().clone() };
                paged = Lazy::new(&build);
                values.with_context(&paged)
            }
            _ => values,
        };
        let path = self.templates.render("path", Context::Path, values)?;
        // URL parsers collapse `.` and `..` segments (even percent-encoded), which would move
        // the call to another resource: such a value is never sent.
        if path.split('/').any(|seg| {
            // Only a segment of dots and `%2e`s can be one; most have neither.
            seg.contains(['.', '%']) && {
                let seg = seg.to_ascii_lowercase().replace("%2e", ".");
                seg == "." || seg == ".."
            }
        }) {
            return Err(format!("{UNSENDABLE}a path segment would be `.` or `..`"));
        }
        // `/v2/stock/{{ request.stock }}` with an empty stock number would ask for the whole
        // collection: a value that renders empty is never sent.
        if path.contains("//") || (path.len() > 1 && path.ends_with('/') && !self.path_ends_open) {
            return Err(format!("{UNSENDABLE}a value in the path rendered empty"));
        }
        // An empty path is the base URL itself (a SOAP endpoint).
        if !path.is_empty() && !path.starts_with('/') {
            return Err(format!(
                "the rendered path `{path}` does not start with `/`"
            ));
        }
        let mut query = String::new();
        for (name, template) in &self.query {
            let value = self.templates.render(template, Context::Query, values)?;
            if !value.is_empty() {
                push_param(&mut query, name, &value);
            }
        }
        if let (Some(p), Some(page)) = (&self.pagination, page) {
            match p {
                Pagination::Page {
                    page: Some(name),
                    size: Some(size),
                    first,
                    ..
                } => {
                    let number = page.index.saturating_add(*first);
                    push_param(&mut query, name, itoa::Buffer::new().format(number));
                    push_param(&mut query, size, itoa::Buffer::new().format(page.size));
                }
                Pagination::Offset {
                    offset: Some(offset),
                    limit: Some(limit),
                    ..
                } => {
                    let at = page.index.saturating_mul(page.size);
                    push_param(&mut query, offset, &at.to_string());
                    push_param(&mut query, limit, &page.size.to_string());
                }
                Pagination::Cursor { cursor, size, .. } => {
                    if let (Some(name), Some(at)) = (cursor, &page.cursor) {
                        push_param(&mut query, name, at);
                    }
                    if let Some(size) = size {
                        push_param(&mut query, size, &page.size.to_string());
                    }
                }
                Pagination::NextLink {
                    size: Some(size), ..
                } => push_param(&mut query, size, &page.size.to_string()),
                // Carried by the templates (`page.*`).
                Pagination::Page { .. }
                | Pagination::Offset { .. }
                | Pagination::NextLink { size: None, .. } => {}
            }
        }
        let mut headers = Vec::with_capacity(self.headers.len() + 1);
        for name in &self.headers {
            let value =
                self.templates
                    .render(&format!("header.{name}"), Context::Header, values)?;
            if value.is_empty() {
                continue;
            }
            let value = HeaderValue::from_str(&value)
                .map_err(|_| format!("header `{name}` would not be a valid header value"))?;
            headers.push((name.clone(), value));
        }
        let body = match self.body {
            Some(context) => Some(self.templates.render("body", context, values)?),
            None => None,
        };
        if let (Some(ct), Some(_)) = (self.content_type, &body)
            && !headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE)
        {
            headers.push((http::header::CONTENT_TYPE, HeaderValue::from_static(ct)));
        }
        let action = if self.action {
            Some(self.templates.render("action", Context::Header, values)?)
        } else {
            None
        };
        let path_and_query = if query.is_empty() {
            path
        } else {
            let mut path = path;
            path.reserve(query.len() + 1);
            path.push('?');
            path.push_str(&query);
            path
        };
        Ok(Rendered {
            method: self.method.clone(),
            path_and_query,
            headers,
            body,
            action,
        })
    }
}

fn push_param(query: &mut String, name: &str, value: &str) {
    if !query.is_empty() {
        query.push('&');
    }
    query.extend(utf8_percent_encode(name, URL_COMPONENT));
    query.push('=');
    query.extend(utf8_percent_encode(value, URL_COMPONENT));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str, query: &[(&str, &str)]) -> RequestSpec {
        let mut templates = Templates::new();
        templates.add("path", path, Context::Path).expect("path");
        for (name, source) in query {
            templates
                .add(&format!("query.{name}"), source, Context::Query)
                .expect("query");
        }
        RequestSpec {
            method: Method::GET,
            templates: std::sync::Arc::new(templates),
            query: query
                .iter()
                .map(|(name, _)| (name.to_string(), format!("query.{name}")))
                .collect(),
            headers: Vec::new(),
            body: None,
            content_type: None,
            pagination: Some(Pagination::Page {
                page: Some("p".into()),
                size: Some("n".into()),
                first: 1,
                max_size: 50,
            }),
            action: false,
            path_ends_open: false,
        }
    }

    /// The template context is built once, and only when a template needs minijinja.
    #[test]
    fn the_context_is_built_only_for_templates_that_need_it() {
        let request = serde_json::json!({"filters": {"make": ["Honda", "Kia"], "year_min": 2020, "condition": ["used", "new"]}});
        let tables = minijinja::context! { out => minijinja::context! { used => "Pre-Owned", new => "New" } };
        let built = std::sync::atomic::AtomicUsize::new(0);
        let build = || {
            built.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            minijinja::context! {
                request => TplValue::from(minijinja::value::Serde(&request)),
                dealer => minijinja::context! { id => "d1" },
                tables => tables.clone(),
            }
        };
        let page = PageRef::at(1, 20);
        let page = Some(&page);
        for (path, make, want, builds) in [
            (
                "/api/vehicles",
                "{{ request.filters.make | join(',') }}",
                "/api/vehicles?make=Honda%2CKia&year=2020&p=2&n=20",
                0,
            ),
            (
                "/api/vehicles",
                "{{ request.filters.condition | map('lookup', tables.out) | join(',') }}",
                "/api/vehicles?make=Pre-Owned%2CNew&year=2020&p=2&n=20",
                0,
            ),
            (
                "/d/{{ dealer.id }}/p{{ page.number }}",
                "{{ request.filters.make | first }}",
                "/d/d1/p2?make=Honda&year=2020&p=2&n=20",
                1,
            ),
        ] {
            built.store(0, std::sync::atomic::Ordering::Relaxed);
            let spec = spec(
                path,
                &[("make", make), ("year", "{{ request.filters.year_min }}")],
            );
            let context = Lazy::new(&build);
            let rendered = spec
                .render(Scope::request(&request, &tables, &context), page)
                .expect("render");
            assert_eq!(rendered.path_and_query, want);
            assert_eq!(
                built.load(std::sync::atomic::Ordering::Relaxed),
                builds,
                "{path}"
            );
        }
    }

    #[test]
    fn aligned_skip_needs_one_page() {
        assert_eq!(plan(40, 20, 100), (vec![PageRef::at(2, 20)], 0));
    }

    #[test]
    fn unaligned_skip_fetches_two_pages_and_slices() {
        assert_eq!(
            plan(5, 20, 100),
            (vec![PageRef::at(0, 20), PageRef::at(1, 20)], 5)
        );
    }

    #[test]
    fn a_skip_near_the_end_of_u64_does_not_wrap() {
        let (pages, start) = plan(u64::MAX - 3, 100, 100);
        assert_eq!(pages.first().map(|p| p.index), Some((u64::MAX - 3) / 100));
        assert!(pages.len() <= 2);
        assert!(start < 100);
    }

    #[test]
    fn limits_above_the_upstream_maximum_span_pages() {
        let (pages, start) = plan(0, 100, 25);
        assert_eq!(pages.len(), 4);
        assert_eq!(start, 0);
        let (pages, start) = plan(30, 50, 25);
        assert_eq!(
            pages.iter().map(|p| p.index).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(start, 5);
    }
}
