//! YAML with positions: parses a document into a `serde_json::Value` and remembers where every
//! node starts, so that config and mapping problems can be reported as `file:line:col`.
//!
//! The `config` crate (and serde) forget positions; keeping a pointer → position index beside the
//! parsed value lets every later stage, even one that only knows a JSON Pointer, say exactly where
//! in the operator's file the problem is.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where a problem is: a file position, a file, or an environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `line` and `col` are 1-based.
    File {
        path: PathBuf,
        line: usize,
        col: usize,
    },
    WholeFile {
        path: PathBuf,
    },
    Env {
        var: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line, col } => write!(f, "{}:{line}:{col}", path.display()),
            Origin::WholeFile { path } => write!(f, "{}", path.display()),
            Origin::Env { var } => write!(f, "env {var}"),
        }
    }
}

/// A located configuration problem, printed as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub origin: Origin,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

/// Positions of the nodes of one YAML file, by JSON Pointer.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    path: PathBuf,
    positions: HashMap<String, (usize, usize)>,
    /// For a part of a file ([`SourceMap::below`]): where the part itself starts, the answer
    /// for its root.
    anchor: Option<(usize, usize)>,
}

impl SourceMap {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The position of `pointer`, or of its nearest ancestor present in the file. The document
    /// root is never an answer: its position is merely the file's first key (`listen:`), which
    /// would blame an unrelated line for a key that is absent; that case names the file.
    pub fn origin(&self, pointer: &str) -> Origin {
        let mut p = pointer;
        loop {
            if p.is_empty() {
                return match self.anchor {
                    Some((line, col)) => Origin::File {
                        path: self.path.clone(),
                        line,
                        col,
                    },
                    None => Origin::WholeFile {
                        path: self.path.clone(),
                    },
                };
            }
            if let Some(&(line, col)) = self.positions.get(p) {
                return Origin::File {
                    path: self.path.clone(),
                    line,
                    col,
                };
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => {
                    return Origin::WholeFile {
                        path: self.path.clone(),
                    };
                }
            }
        }
    }

    /// A problem located at `pointer`.
    pub fn problem(&self, pointer: &str, message: impl Into<String>) -> Problem {
        Problem {
            origin: self.origin(pointer),
            message: message.into(),
        }
    }

    /// The positions of the node at `pointer`, with pointers relative to it: a part of a file
    /// compiled like a file of its own (a lead's verdict poll) reports problems where they are.
    pub fn below(&self, pointer: &str) -> SourceMap {
        let positions = self
            .positions
            .iter()
            .filter_map(|(p, &at)| {
                let rest = p.strip_prefix(pointer)?;
                (rest.starts_with('/')).then(|| (rest.to_owned(), at))
            })
            .collect();
        SourceMap {
            path: self.path.clone(),
            positions,
            anchor: self.positions.get(pointer).copied(),
        }
    }

    /// The 1-based line of `pointer` when it is in the file.
    pub fn line_of(&self, pointer: &str) -> Option<usize> {
        self.positions.get(pointer).map(|&(line, _)| line)
    }
}

/// Appends a JSON Pointer segment, escaping `~` and `/` (RFC 6901).
pub fn push_pointer(base: &str, segment: &str) -> String {
    let mut out = String::with_capacity(base.len() + segment.len() + 1);
    out.push_str(base);
    out.push('/');
    for c in segment.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// The JSON Pointer of a serde error's path, below `base`.
pub fn pointer_of(base: &str, path: &serde_path_to_error::Path) -> String {
    let mut at = base.to_owned();
    for segment in path.iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => {
                at = push_pointer(&at, &index.to_string())
            }
            serde_path_to_error::Segment::Map { key } => at = push_pointer(&at, key),
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    at
}

/// Parses one YAML document. Returns the value and its source map, or the syntax error located.
pub fn parse(path: &Path, text: &str) -> Result<(Value, SourceMap), Problem> {
    let mut builder = Builder {
        stack: Vec::new(),
        root: None,
        anchors: HashMap::new(),
        map: SourceMap {
            path: path.to_path_buf(),
            positions: HashMap::new(),
            anchor: None,
        },
        error: None,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, false) {
        let mark = e.marker();
        return Err(Problem {
            origin: Origin::File {
                path: path.to_path_buf(),
                line: mark.line(),
                col: mark.col() + 1,
            },
            message: format!("invalid YAML: {}", e.info()),
        });
    }
    if let Some(problem) = builder.error {
        return Err(problem);
    }
    Ok((builder.root.unwrap_or(Value::Null), builder.map))
}

enum Frame {
    Seq {
        pointer: String,
        anchor: usize,
        items: Vec<Value>,
    },
    Map {
        pointer: String,
        anchor: usize,
        entries: Map<String, Value>,
        key: Option<String>,
    },
}

struct Builder {
    stack: Vec<Frame>,
    root: Option<Value>,
    anchors: HashMap<usize, Value>,
    map: SourceMap,
    error: Option<Problem>,
}

impl Builder {
    /// The pointer of the node that starts now (a map value, a sequence item, or the root).
    fn next_pointer(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame::Seq { pointer, items, .. }) => {
                Some(push_pointer(pointer, &items.len().to_string()))
            }
            Some(Frame::Map {
                pointer,
                key: Some(k),
                ..
            }) => Some(push_pointer(pointer, k)),
            // The node is a key.
            Some(Frame::Map { key: None, .. }) => None,
        }
    }

    fn fail(&mut self, mark: Marker, message: String) {
        if self.error.is_none() {
            self.error = Some(Problem {
                origin: Origin::File {
                    path: self.map.path.clone(),
                    line: mark.line(),
                    col: mark.col() + 1,
                },
                message,
            });
        }
    }

    /// Places a finished node into its parent (or as the root).
    fn complete(&mut self, value: Value, anchor: usize, mark: Marker) {
        if anchor > 0 {
            self.anchors.insert(anchor, value.clone());
        }
        let mut failure = None;
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::Seq { items, .. }) => items.push(value),
            Some(Frame::Map {
                entries,
                key,
                pointer,
                ..
            }) => match key.take() {
                Some(k) => {
                    entries.insert(k, value);
                }
                None => {
                    let k = match value {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => "null".to_owned(),
                        Value::Array(_) | Value::Object(_) => {
                            failure = Some("a mapping key must be a scalar".to_owned());
                            String::new()
                        }
                    };
                    if entries.contains_key(&k) {
                        failure = Some(format!("duplicate key `{k}`"));
                    }
                    let child = push_pointer(pointer, &k);
                    self.map
                        .positions
                        .insert(child, (mark.line(), mark.col() + 1));
                    *key = Some(k);
                }
            },
        }
        if let Some(message) = failure {
            self.fail(mark, message);
        }
    }

    fn record(&mut self, mark: Marker) {
        if let Some(p) = self.next_pointer() {
            self.map
                .positions
                .entry(p)
                .or_insert((mark.line(), mark.col() + 1));
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                self.record(mark);
                let value = scalar(&text, style, tag.as_ref().map(|t| t.suffix.as_str()));
                self.complete(value, anchor, mark);
            }
            Event::SequenceStart(anchor, _) => {
                self.record(mark);
                let pointer = self.next_pointer().unwrap_or_default();
                self.stack.push(Frame::Seq {
                    pointer,
                    anchor,
                    items: Vec::new(),
                });
            }
            Event::MappingStart(anchor, _) => {
                self.record(mark);
                let pointer = self.next_pointer().unwrap_or_default();
                self.stack.push(Frame::Map {
                    pointer,
                    anchor,
                    entries: Map::new(),
                    key: None,
                });
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq { anchor, items, .. }) = self.stack.pop() {
                    self.complete(Value::Array(items), anchor, mark);
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map {
                    anchor, entries, ..
                }) = self.stack.pop()
                {
                    self.complete(Value::Object(entries), anchor, mark);
                }
            }
            Event::Alias(id) => {
                self.record(mark);
                let value = self.anchors.get(&id).cloned().unwrap_or(Value::Null);
                self.complete(value, 0, mark);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// YAML 1.2 core-schema scalar resolution; quoted scalars are always strings.
fn scalar(text: &str, style: TScalarStyle, tag: Option<&str>) -> Value {
    if style != TScalarStyle::Plain || tag == Some("str") {
        return Value::String(text.to_owned());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Value::Number(i.into());
    }
    if let Some(hex) = text.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Value::Number(i.into());
    }
    let looks_numeric =
        text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+' || c == '.');
    if looks_numeric && let Some(n) = text.parse::<f64>().ok().and_then(Number::from_f64) {
        return Value::Number(n);
    }
    Value::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_and_positions() {
        let text = "a: 1\nb:\n  - x\n  - { c: \"2\", d: 2.5 }\ne: ~\n";
        let (value, map) = parse(Path::new("f.yaml"), text).unwrap();
        assert_eq!(
            value,
            json!({"a": 1, "b": ["x", {"c": "2", "d": 2.5}], "e": null})
        );
        assert_eq!(map.origin("/b/1/d").to_string(), "f.yaml:4:15");
        assert_eq!(map.origin("/b/0").to_string(), "f.yaml:3:5");
        // A pointer that is not in the file falls back to its nearest ancestor.
        assert_eq!(map.origin("/b/1/zz").to_string(), "f.yaml:4:5");
        // An absent top-level key is the file's, not the first key's.
        assert_eq!(map.origin("/z/y").to_string(), "f.yaml");
        assert_eq!(map.origin("").to_string(), "f.yaml");
    }

    #[test]
    fn syntax_errors_are_located() {
        let err = parse(Path::new("f.yaml"), "a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.to_string().starts_with("f.yaml:"), "{err}");
        let dup = parse(Path::new("f.yaml"), "a: 1\na: 2\n").unwrap_err();
        assert_eq!(dup.to_string(), "f.yaml:2:1: duplicate key `a`");
    }

    #[test]
    fn pointer_segments_are_escaped() {
        assert_eq!(push_pointer("/x", "a/b~c"), "/x/a~1b~0c");
    }
}
