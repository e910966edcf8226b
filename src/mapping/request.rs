//! An upstream call compiled: method, templates (path, query, headers, body) and paging.

use std::collections::BTreeSet;

use http::{HeaderName, Method};

use crate::engine::request::{Pagination, RequestSpec};
use crate::lang::template::Context;
use crate::mapping::file::{FilePagination, FileRequest};
use crate::settings::yaml;

use super::loader::{MappingLoader, Source};

impl MappingLoader<'_> {
    /// Compiles an upstream call, step by step. `soap`: the upstream speaks SOAP (POST only,
    /// `body` is the envelope's Body content, `action` allowed). `lead`: the call delivers a
    /// lead (`body_format: adf` allowed). `list`: a search, whose pages the engine makes.
    pub(super) fn request(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        soap: bool,
        lead: bool,
        list: bool,
    ) -> Option<RequestSpec> {
        let method = self.method(src, pointer, file, soap);
        let mut ok = self.request_shape(src, pointer, file, soap);
        // The templates are compiled together, once per load for identical ones.
        let mut pending: Vec<(String, String, String, Context)> = Vec::new();
        let (query, headers) = self.url_and_header_templates(src, pointer, file, &mut pending);
        let (body, content_type) = self.body(src, pointer, file, soap, lead, &mut pending);
        ok &= headers.is_some() && body.is_some();
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
                None
            }
        };
        let variables = templates
            .as_ref()
            .map(|t| t.variables())
            .unwrap_or_default();
        let pagination = match &file.pagination {
            None => None,
            Some(p) => {
                let at = format!("{pointer}/pagination");
                let pagination = self.pagination(src, &at, p, soap, &variables);
                ok &= pagination.is_some();
                pagination
            }
        };
        if list && templates.is_some() {
            self.note_hidden_request_fields(src, pointer, &variables, pagination.is_some());
        }
        ok.then_some(())?;
        Some(RequestSpec {
            method: method?,
            templates: templates?,
            query,
            headers: headers?,
            body: body?,
            content_type,
            pagination,
            action: file.action.is_some(),
            path_ends_open: file.path.trim_end().ends_with('/'),
        })
    }

    /// The HTTP method: GET by default, POST for SOAP (and only POST).
    fn method(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        soap: bool,
    ) -> Option<Method> {
        let default_method = if soap { "POST" } else { "GET" };
        let method_text = file.method.as_deref().unwrap_or(default_method);
        let Ok(method) = Method::from_bytes(method_text.to_ascii_uppercase().as_bytes()) else {
            self.problems.push(src.problem(
                &format!("{pointer}/method"),
                format!("`{method_text}` is not an HTTP method"),
            ));
            return None;
        };
        if soap && method != Method::POST {
            self.problems.push(src.problem(
                &format!("{pointer}/method"),
                "SOAP operations are always POST; leave `method` out",
            ));
            return None;
        }
        Some(method)
    }

    /// What a REST and a SOAP call each need or refuse.
    fn request_shape(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        soap: bool,
    ) -> bool {
        let mut ok = true;
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
        ok
    }

    /// The path, query, header and action templates, added to `pending`; the query's names
    /// and templates, and the header names (`None` when a header name is invalid).
    #[allow(clippy::type_complexity)]
    fn url_and_header_templates(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        pending: &mut Vec<(String, String, String, Context)>,
    ) -> (Vec<(String, String)>, Option<Vec<HeaderName>>) {
        let mut add = |name: &str, at: String, source: &str, context: Context| {
            pending.push((name.to_owned(), at, source.to_owned(), context));
        };
        add("path", format!("{pointer}/path"), &file.path, Context::Path);
        let mut query = Vec::new();
        for (name, source) in &file.query {
            let template = format!("query.{name}");
            let at = yaml::push_pointer(&format!("{pointer}/query"), name);
            add(&template, at, source, Context::Query);
            query.push((name.clone(), template));
        }
        let mut headers = Some(Vec::new());
        for (name, source) in &file.headers {
            let at = yaml::push_pointer(&format!("{pointer}/headers"), name);
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(h) => {
                    add(&format!("header.{h}"), at, source, Context::Header);
                    if let Some(headers) = &mut headers {
                        headers.push(h);
                    }
                }
                Err(_) => {
                    self.problems
                        .push(src.problem(&at, format!("`{name}` is not a valid header name")));
                    headers = None;
                }
            }
        }
        if let Some(source) = &file.action {
            add(
                "action",
                format!("{pointer}/action"),
                source,
                Context::Header,
            );
        }
        (query, headers)
    }

    /// The body template (added to `pending`) and its content type; `None` on a problem.
    #[allow(clippy::type_complexity)]
    fn body(
        &mut self,
        src: &Source,
        pointer: &str,
        file: &FileRequest,
        soap: bool,
        lead: bool,
        pending: &mut Vec<(String, String, String, Context)>,
    ) -> (Option<Option<Context>>, Option<&'static str>) {
        let body_at = format!("{pointer}/body");
        let format_at = format!("{pointer}/body_format");
        let mut ok = true;
        let mut add = |name: &str, at: &str, source: &str, context: Context| {
            pending.push((name.to_owned(), at.to_owned(), source.to_owned(), context));
            true
        };
        let (body, content_type) = match (&file.body, file.body_format.as_deref()) {
            (None, Some("adf")) if lead && !soap => {
                // The lead as ADF/XML (`engine::lead::adf`), put in the context as `lead.adf`.
                // Built by the gateway, already XML: verbatim (a text body's explicit rule).
                ok &= add("body", &format_at, "{{ lead.adf | safe }}", Context::Text);
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
                ok &= add("body", &body_at, source, Context::XmlBody);
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
                ok &= add("body", &body_at, source, context);
                (Some(context), Some(ct))
            }
        };
        (ok.then_some(body), content_type)
    }

    /// `pagination`: the style, where the page goes, and that its position reaches the
    /// upstream (`variables`: what the request's templates read).
    fn pagination(
        &mut self,
        src: &Source,
        at: &str,
        p: &FilePagination,
        soap: bool,
        variables: &BTreeSet<String>,
    ) -> Option<Pagination> {
        let max_size = p.max_size.max(1);
        let pagination = match (p.style.as_str(), &p.page, &p.size, &p.offset, &p.limit) {
            ("page", page, size, None, None) if page.is_some() == size.is_some() => {
                Some(Pagination::Page {
                    page: page.clone(),
                    size: size.clone(),
                    first: p.first,
                    max_size,
                })
            }
            ("offset", None, None, offset, limit) if offset.is_some() == limit.is_some() => {
                Some(Pagination::Offset {
                    offset: offset.clone(),
                    limit: limit.clone(),
                    max_size,
                })
            }
            ("cursor", None, size, None, None) => Some(Pagination::Cursor {
                cursor: p.cursor.clone(),
                size: size.clone(),
                max_size,
            }),
            ("next_link", None, size, None, None) if p.cursor.is_none() => {
                Some(Pagination::NextLink {
                    size: size.clone(),
                    max_size,
                })
            }
            ("cursor" | "next_link", ..) => {
                self.problems.push(src.problem(
                    at,
                    "styles `cursor` and `next_link` take `size` (the page size's query \
                     parameter), `next` and `has_more` (jq on the reply), `link_header`, and \
                     for `cursor` the `cursor` parameter; not `page`, `offset` or `limit`",
                ));
                None
            }
            ("page", ..) => {
                self.problems.push(src.problem(
                    at,
                    "style `page` takes both `page` and `size` (the query parameter \
                     names) or neither (then `{{ page.number }}` and `{{ page.size }}` \
                     carry the page in the path, headers or body)",
                ));
                None
            }
            ("offset", ..) => {
                self.problems.push(src.problem(
                    at,
                    "style `offset` takes both `offset` and `limit` (the query parameter \
                     names) or neither (then `{{ page.offset }}` and `{{ page.size }}` \
                     carry the page in the path, headers or body)",
                ));
                None
            }
            (other, ..) => {
                self.problems.push(src.problem(
                    &format!("{at}/style"),
                    format!(
                        "`{other}` is not a paging style; use `page`, `offset`, `cursor` or \
                         `next_link`"
                    ),
                ));
                None
            }
        };
        if matches!(pagination, Some(Pagination::NextLink { .. })) {
            // The position is the link itself.
            return pagination;
        }
        let position_in_query = p.page.is_some() || p.offset.is_some() || p.cursor.is_some();
        let position_in_templates = ["page.number", "page.index", "page.offset", "page.cursor"]
            .iter()
            .any(|v| variables.contains(*v));
        if pagination.is_some() && soap && position_in_query {
            self.problems.push(src.problem(
                at,
                "a SOAP service reads the envelope, not the URL's query: leave the parameter \
                 names out and put `{{ page.number }}` / `{{ page.offset }}` and \
                 `{{ page.size }}` in `body`",
            ));
            return None;
        }
        if pagination.is_some() && !position_in_query && !position_in_templates {
            self.problems.push(src.problem(
                at,
                "the page's position never reaches the upstream, so every page would be the \
                 first: name its query parameters, or use `{{ page.number }}`, \
                 `{{ page.index }}`, `{{ page.offset }}` or `{{ page.cursor }}` (with \
                 `{{ page.size }}`) in the path, a header or the body",
            ));
            return None;
        }
        pagination
    }

    /// `check` notes a search template reading what the engine does not give it: the buyer's
    /// window (`request.pagination`), where the engine pages with `page`. (A translated
    /// `request.sort` or filter renders empty on a scan's calls, which carry only the filters
    /// the upstream takes: that is what they should send then.)
    fn note_hidden_request_fields(
        &mut self,
        src: &Source,
        pointer: &str,
        variables: &BTreeSet<String>,
        paged: bool,
    ) {
        let reads = |prefix: &str| {
            variables
                .iter()
                .any(|v| v == prefix || v.starts_with(&format!("{prefix}.")))
        };
        if reads("request.pagination") {
            self.notes.push(src.problem(
                pointer,
                if paged {
                    "a template reads `request.pagination`: the engine pages the upstream itself \
                     (a scan's calls carry no `request.pagination`, and a search sent straight \
                     through needs the pages covering the buyer's window, not the window): use \
                     `page.number`, `page.offset` and `page.size`"
                } else {
                    "a template reads `request.pagination`, but a search the gateway completes \
                     sends no window (its calls carry only the filters the upstream takes): \
                     declare `pagination` and use `page.*`"
                },
            ));
        }
    }
}
