//! An upstream call compiled: method, templates (path, query, headers, body) and paging.

use http::{HeaderName, Method};

use crate::engine::request::{Pagination, RequestSpec};
use crate::lang::template::Context;
use crate::mapping::file::FileRequest;
use crate::settings::yaml;

use super::loader::{MappingLoader, Source};

impl MappingLoader<'_> {
    /// Compiles an upstream call. `soap`: the upstream speaks SOAP (POST only, `body` is the
    /// envelope's Body content, `action` allowed). `lead`: the call delivers a lead
    /// (`body_format: adf` allowed).
    pub(super) fn request(
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
            let template = format!("query.{name}");
            ok &= add(
                self,
                &template,
                &yaml::push_pointer(&format!("{pointer}/query"), name),
                source,
                Context::Query,
            );
            query.push((name.clone(), template));
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
                // The lead as ADF/XML (`engine::lead::adf`), put in the context as `lead.adf`.
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
}
