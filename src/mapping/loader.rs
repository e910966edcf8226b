//! The loader's state and the steps every part shares: reading a file with positions,
//! deserializing it, compiling jq with the folder's definitions, tables, charsets.

use std::path::PathBuf;

use minijinja::value::Value as TplValue;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::engine::proxy::MappingGlobals;
use crate::formats::{self, Format};
use crate::lang::jq::{Jq, JqValue, KeyPath};
use crate::mapping::file::FileCommon;
use crate::settings::yaml::{self, Origin, Problem, SourceMap};

use super::context::{Carried, LoadContext};

/// One parsed YAML file.
pub(super) struct Source {
    pub(super) path: PathBuf,
    pub(super) text: String,
    pub(super) value: Value,
    pub(super) map: SourceMap,
}

impl Source {
    /// The node at `pointer` as a source of its own, located in this file: a part written like
    /// a skill file (a lead's verdict poll) compiles with the skill's own steps.
    pub(super) fn part(&self, pointer: &str) -> Source {
        Source {
            path: self.path.clone(),
            text: self.text.clone(),
            value: self.value.pointer(pointer).cloned().unwrap_or_default(),
            map: self.map.below(pointer),
        }
    }

    pub(super) fn problem(&self, pointer: &str, message: impl Into<String>) -> Problem {
        self.map.problem(pointer, message)
    }

    /// A position inside a string value (a template or jq program), `line`/`col` 1-based
    /// within the string.
    pub(super) fn inner(&self, pointer: &str, line: usize, col: usize, message: String) -> Problem {
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

pub(super) struct MappingLoader<'a> {
    pub(super) ctx: &'a LoadContext<'a>,
    pub(super) dir: PathBuf,
    pub(super) problems: Vec<Problem>,
    /// What a valid mapping costs or risks, for `check` (not problems).
    pub(super) notes: Vec<Problem>,
    pub(super) carried: Carried,
}

impl MappingLoader<'_> {
    pub(super) fn read(&mut self, name: &str) -> Option<Source> {
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

    pub(super) fn deserialize<T: DeserializeOwned>(
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

    pub(super) fn shared(&self, tables: Map<String, Value>) -> MappingGlobals {
        let dealer = json!({ "id": self.ctx.dealer_id, "name": self.ctx.dealer_name });
        let tables = Value::Object(tables);
        MappingGlobals {
            tables_tpl: TplValue::from(minijinja::value::Serde(&tables)),
            tables_jq: JqValue::from_json(&tables),
            dealer_tpl: TplValue::from(minijinja::value::Serde(&dealer)),
            dealer_jq: JqValue::from_json(&dealer),
        }
    }

    pub(super) fn merged_tables(
        common: &FileCommon,
        own: &Map<String, Value>,
    ) -> Map<String, Value> {
        let mut tables = common.tables.clone();
        for (k, v) in own {
            tables.insert(k.clone(), v.clone());
        }
        tables
    }

    pub(super) fn jq(
        &mut self,
        src: &Source,
        pointer: &str,
        code: &str,
        common: &FileCommon,
    ) -> Option<Jq> {
        let (program, offset) = with_defs(code, common);
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

    /// A duration longer than zero at `pointer` (a feed's `refresh`, a lead verdict's
    /// `every`), written as humantime reads it (`500ms`, `30s`, `5m`, `1h 30m`); `None` after a
    /// problem located there.
    pub(super) fn duration(
        &mut self,
        src: &Source,
        pointer: &str,
        text: &str,
    ) -> Option<std::time::Duration> {
        match humantime::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                self.problems.push(src.problem(
                    pointer,
                    format!("`{text}` is not a duration like 500ms, 30s or 5m"),
                ));
                None
            }
        }
    }

    /// The keys of `code` when it is a path of literal keys (`Jq::key_path`); problems in it
    /// are reported where it is compiled for use.
    pub(super) fn key_path(&self, code: &str, common: &FileCommon) -> Option<KeyPath> {
        let (program, _) = with_defs(code, common);
        self.ctx.cache.jq(&program).ok()?.key_path().cloned()
    }

    /// A `charset:` label (at `pointer`): `Some(None)` when unset, `None` after a problem.
    /// Only XML and CSV bodies take one; JSON is always UTF-8.
    pub(super) fn charset(
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
        match formats::charset(label) {
            Ok(encoding) => Some(Some(encoding)),
            Err(e) => {
                self.problems.push(src.problem(pointer, e));
                None
            }
        }
    }
}

/// `code` after the file's shared `jq_defs`, and how many lines those take.
fn with_defs(code: &str, common: &FileCommon) -> (String, usize) {
    match &common.jq_defs {
        Some(defs) => (format!("{defs}\n{code}"), defs.lines().count()),
        None => (code.to_owned(), 0),
    }
}

/// `items` selects an array; the engine iterates it.
pub(super) fn items_program(code: &str) -> String {
    format!(
        "({code}) | if type == \"array\" then .[] else error(\"`items` must give an array, got \\(type)\") end"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::context::TestLoad;

    /// A feed's `refresh` and a lead verdict's `every` and `wait` are read by the one
    /// [`MappingLoader::duration`]: a duration longer than zero, spaces around it allowed, and
    /// anything else a problem at its own line.
    #[test]
    fn durations_are_read_alike_and_refused_where_they_are_written() {
        let test = TestLoad::new();
        let ctx = test.ctx("d");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("feed.yaml");
        let text = "refresh: 90s\nmax_stale: soon\nlead:\n  verdict:\n    every: \" 1h 30m \"\n    \
                    wait: 0s\n    again: 500ms\n";
        let (value, map) = yaml::parse(&path, text).expect("yaml");
        let src = Source {
            path: path.clone(),
            text: text.to_owned(),
            value,
            map,
        };
        let mut loader = MappingLoader {
            ctx: &ctx,
            dir: dir.path().to_path_buf(),
            problems: Vec::new(),
            notes: Vec::new(),
            carried: Carried::default(),
        };
        let secs = std::time::Duration::from_secs;
        for (pointer, written, read) in [
            ("/refresh", "90s", Some(secs(90))),
            ("/max_stale", "soon", None),
            ("/lead/verdict/every", " 1h 30m ", Some(secs(5400))),
            ("/lead/verdict/wait", "0s", None),
            (
                "/lead/verdict/again",
                "500ms",
                Some(std::time::Duration::from_millis(500)),
            ),
        ] {
            assert_eq!(loader.duration(&src, pointer, written), read, "{pointer}");
        }
        let problems: Vec<String> = loader.problems.iter().map(ToString::to_string).collect();
        let at = |line: usize| format!("{}:{line}:", path.display());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with(&at(2))
                && problems[0].ends_with("`soon` is not a duration like 500ms, 30s or 5m"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with(&at(6))
                && problems[1].ends_with("`0s` is not a duration like 500ms, 30s or 5m"),
            "{problems:?}"
        );
    }
}
