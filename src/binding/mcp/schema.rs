//! The project's AAP schemas made self-contained for MCP clients: every `$ref` (within a file or
//! to another file) replaced by what it names, so a tool's `inputSchema` and `outputSchema` need
//! no registry. MCP clients validate with what they have (the Python SDK resolves no external
//! reference; the TypeScript SDK's Ajv knows no 2020-12 `$defs` across files), and a model reads
//! the schema as one document.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Deeper than any chain of references in `schemas/`: a longer one is a cycle.
const MAX_DEPTH: usize = 32;

/// The schema files by name, parsed.
pub(super) struct Files(HashMap<&'static str, Value>);

impl Files {
    /// Parses the compiled-in schema files.
    pub(super) fn parse() -> Result<Files, String> {
        let mut files = HashMap::new();
        for (name, text) in crate::schema::files() {
            let value: Value =
                serde_json::from_str(text).map_err(|e| format!("schema `{name}`: {e}"))?;
            files.insert(*name, value);
        }
        Ok(Files(files))
    }

    /// `pointer` (e.g. `/properties/data`, `""` for the root) of `file`, every reference
    /// resolved.
    pub(super) fn inlined(&self, file: &str, pointer: &str) -> Result<Value, String> {
        let node = self.target(file, pointer)?;
        self.inline(file, node, 0)
    }

    fn target(&self, file: &str, pointer: &str) -> Result<&Value, String> {
        self.0
            .get(file)
            .ok_or_else(|| format!("no schema file `{file}`"))?
            .pointer(pointer)
            .ok_or_else(|| format!("`{file}#{pointer}` names nothing"))
    }

    /// `node` of `file` with its references resolved and the keywords that only serve
    /// references (`$id`, `$schema`, `$defs`) dropped.
    fn inline(&self, file: &str, node: &Value, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "references in `{file}` nest deeper than {MAX_DEPTH}"
            ));
        }
        match node {
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (key, value) in map {
                    match key.as_str() {
                        "$ref" | "$id" | "$schema" | "$defs" | "$comment" => {}
                        // Data, not schemas: copied as they are.
                        "const" | "enum" | "default" | "examples" => {
                            out.insert(key.clone(), value.clone());
                        }
                        _ => {
                            out.insert(key.clone(), self.inline(file, value, depth + 1)?);
                        }
                    }
                }
                let Some(reference) = map.get("$ref").and_then(Value::as_str) else {
                    return Ok(Value::Object(out));
                };
                let (target_file, pointer) = match reference.split_once('#') {
                    Some(("", pointer)) => (file, pointer),
                    Some((other, pointer)) => (other, pointer),
                    None => (reference, ""),
                };
                let target = self.target(target_file, pointer)?;
                let resolved = self.inline(target_file, target, depth + 1)?;
                Ok(merge(resolved, out))
            }
            Value::Array(items) => items
                .iter()
                .map(|item| self.inline(file, item, depth + 1))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(node.clone()),
        }
    }
}

/// A resolved reference with the keywords written beside it: one object when they do not
/// overlap (a `description` next to a `$ref`), else both under `allOf`, which is what 2020-12
/// means by keywords beside `$ref`.
fn merge(resolved: Value, siblings: Map<String, Value>) -> Value {
    if siblings.is_empty() {
        return resolved;
    }
    match resolved {
        Value::Object(mut target) if siblings.keys().all(|k| !target.contains_key(k)) => {
            target.extend(siblings);
            Value::Object(target)
        }
        other => {
            let mut out = siblings;
            out.insert("allOf".to_owned(), Value::Array(vec![other]));
            Value::Object(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every schema of every skill resolves to a document without references, and a
    /// validator built from it alone agrees with the gateway's (registry-backed) one on a
    /// valid and an invalid request.
    #[test]
    fn every_reference_is_resolved() {
        let files = Files::parse().expect("schemas");
        for (name, _) in crate::schema::files() {
            let inlined = files.inlined(name, "").expect(name);
            let text = inlined.to_string();
            assert!(!text.contains("\"$ref\""), "{name}: {text}");
            assert!(!text.contains("\"$defs\""), "{name}");
        }
        let search = files
            .inlined("inventory-search-request.schema.json", "")
            .expect("search");
        let validator = jsonschema::draft202012::new(&search).expect("self-contained");
        let good = serde_json::json!({"type": "inventory.search.request", "filters": {"make": ["Toyota"], "price_max": 30000}});
        let bad =
            serde_json::json!({"type": "inventory.search.request", "filters": {"make": "Toyota"}});
        assert!(validator.is_valid(&good));
        assert!(!validator.is_valid(&bad), "strings are arrays of strings");
    }

    #[test]
    fn keywords_beside_a_reference_are_kept() {
        let merged = merge(
            serde_json::json!({"type": "string"}),
            [("description".to_owned(), serde_json::json!("d"))]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            merged,
            serde_json::json!({"type": "string", "description": "d"})
        );
        let overlapping = merge(
            serde_json::json!({"type": "string"}),
            [("type".to_owned(), serde_json::json!("null"))]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            overlapping,
            serde_json::json!({"type": "null", "allOf": [{"type": "string"}]})
        );
    }
}
