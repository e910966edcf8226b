//! `upstreams.yaml`: each entry expanded (`${NAME}`), checked for plaintext risks and built (or
//! taken over from the running configuration), and the references mappings make to them.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::settings::yaml;
use crate::telemetry::metrics::Meter;
use crate::upstream::{Endpoint, FileUpstream, Upstream};

use super::context::{Target, Upstreams};
use super::loader::{MappingLoader, Source};

impl MappingLoader<'_> {
    /// `upstreams.yaml`: `name → upstream`. Names whose settings have problems are still
    /// known (`None`), so references to them do not produce a second, misleading problem.
    pub(super) fn upstreams(&mut self) -> Upstreams {
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

    /// The upstream `name`, of a kind that answers calls (not `kind: file` or `kind: sftp`,
    /// which only a feed reads).
    pub(super) fn target_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &Upstreams,
    ) -> Option<Target> {
        match self.any_target_ref(src, pointer, name, upstreams)? {
            Target::Http(u) if u.is_file() || u.is_sftp() => {
                let kind = if u.is_file() { "file" } else { "sftp" };
                self.problems.push(src.problem(
                    pointer,
                    format!("`{name}` is a `kind: {kind}` upstream; only a feed.yaml reads files"),
                ));
                None
            }
            target => Some(target),
        }
    }

    /// A feed's upstream: HTTP, `kind: file` or `kind: sftp`.
    pub(super) fn feed_upstream_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &Upstreams,
    ) -> Option<Arc<Upstream>> {
        let target = self.any_target_ref(src, pointer, name, upstreams)?;
        self.http_only(src, pointer, name, target)
    }

    /// The HTTP upstream of `target`; an SMTP one is a located problem.
    fn http_only(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        target: Target,
    ) -> Option<Arc<Upstream>> {
        match target {
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

    fn any_target_ref(
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
    pub(super) fn upstream_ref(
        &mut self,
        src: &Source,
        pointer: &str,
        name: &str,
        upstreams: &Upstreams,
    ) -> Option<Arc<Upstream>> {
        let target = self.target_ref(src, pointer, name, upstreams)?;
        self.http_only(src, pointer, name, target)
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
}
