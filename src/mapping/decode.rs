//! Upstream bodies → JSON values for the jq step: JSON as is, CSV as an array of row objects
//! keyed by the header row, XML as nested objects (namespaces stripped).
//!
//! XML mapping: an element becomes an object of its children by local name; attributes become
//! `@name`; an element with only text becomes that string; mixed text goes to `#text`. A name
//! that repeats becomes an array, and so does any name listed in `list_elements` even when it
//! appears once, so jq programs see one stable shape.

use std::collections::HashSet;

use quick_xml::events::Event;
use quick_xml::reader::Reader;
use serde_json::{Map, Value};

/// The formats an upstream body can come in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Xml { list_elements: HashSet<String> },
}

impl Format {
    pub fn parse(name: Option<&str>, list_elements: &[String]) -> Result<Format, String> {
        match name.unwrap_or("json") {
            "json" => Ok(Format::Json),
            "csv" => Ok(Format::Csv),
            "xml" => Ok(Format::Xml {
                list_elements: list_elements.iter().cloned().collect(),
            }),
            other => Err(format!(
                "unknown format `{other}`; expected json, csv or xml"
            )),
        }
    }

    /// Decodes a body. Errors are short and safe to log (no body content).
    pub fn decode(&self, body: &[u8]) -> Result<Value, String> {
        match self {
            Format::Json => {
                serde_json::from_slice(body).map_err(|e| format!("body is not JSON ({e})"))
            }
            Format::Csv => decode_csv(body),
            Format::Xml { list_elements } => decode_xml(body, list_elements),
        }
    }
}

fn decode_csv(body: &[u8]) -> Result<Value, String> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(body);
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| format!("CSV header row unreadable ({e})"))?
        .iter()
        .map(str::to_owned)
        .collect();
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("CSV row {} unreadable ({e})", i + 2))?;
        let mut row = Map::with_capacity(headers.len());
        for (name, value) in headers.iter().zip(record.iter()) {
            row.insert(name.clone(), Value::String(value.to_owned()));
        }
        rows.push(Value::Object(row));
    }
    Ok(Value::Array(rows))
}

/// Element being built while reading XML.
struct Node {
    name: String,
    fields: Map<String, Value>,
    text: String,
}

fn decode_xml(body: &[u8], list_elements: &HashSet<String>) -> Result<Value, String> {
    // Text is trimmed once per element when it closes (`close`), not per event: entities
    // arrive as events of their own, and trimming each piece would eat the spaces around them
    // (`one &amp; two` → `one&two`).
    let mut reader = Reader::from_reader(body);
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<(String, Value)> = None;
    let mut buf = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("body is not XML ({e})"))?;
        match event {
            Event::Start(e) => stack.push(open(&e)?),
            Event::Empty(e) => {
                let node = open(&e)?;
                close(node, &mut stack, &mut root, list_elements);
            }
            Event::End(_) => {
                let node = stack.pop().ok_or("unbalanced XML end tag")?;
                close(node, &mut stack, &mut root, list_elements);
            }
            Event::Text(t) => {
                if let Some(node) = stack.last_mut() {
                    let text = t.decode().map_err(|e| format!("bad XML text ({e})"))?;
                    let text = quick_xml::escape::unescape(&text)
                        .map_err(|e| format!("bad XML entity ({e})"))?;
                    node.text.push_str(&text);
                }
            }
            Event::CData(t) => {
                if let Some(node) = stack.last_mut() {
                    node.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::GeneralRef(r) => {
                if let Some(node) = stack.last_mut() {
                    let name = String::from_utf8_lossy(&r).into_owned();
                    let resolved = match name.as_str() {
                        "lt" => "<".to_owned(),
                        "gt" => ">".to_owned(),
                        "amp" => "&".to_owned(),
                        "quot" => "\"".to_owned(),
                        "apos" => "'".to_owned(),
                        n => char_ref(n).ok_or_else(|| format!("unknown XML entity `&{n};`"))?,
                    };
                    node.text.push_str(&resolved);
                }
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
        buf.clear();
    }
    if !stack.is_empty() {
        return Err("XML document ends inside an element".to_owned());
    }
    let (name, value) = root.ok_or("XML document has no root element")?;
    let mut out = Map::new();
    out.insert(name, value);
    Ok(Value::Object(out))
}

fn char_ref(name: &str) -> Option<String> {
    let code = if let Some(hex) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
        u32::from_str_radix(hex, 16).ok()?
    } else {
        name.strip_prefix('#')?.parse().ok()?
    };
    char::from_u32(code).map(String::from)
}

fn local(name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    match name.rsplit_once(':') {
        Some((_, local)) => local.to_owned(),
        None => name.into_owned(),
    }
}

fn open(e: &quick_xml::events::BytesStart<'_>) -> Result<Node, String> {
    let mut fields = Map::new();
    for attr in e.attributes() {
        let attr = attr.map_err(|e| format!("bad XML attribute ({e})"))?;
        let key = attr.key.as_ref();
        // Namespace declarations carry no data.
        if key == b"xmlns" || key.starts_with(b"xmlns:") {
            continue;
        }
        let value = attr
            .unescape_value()
            .map_err(|e| format!("bad XML attribute ({e})"))?;
        fields.insert(
            format!("@{}", local(key)),
            Value::String(value.into_owned()),
        );
    }
    Ok(Node {
        name: local(e.name().as_ref()),
        fields,
        text: String::new(),
    })
}

fn close(
    node: Node,
    stack: &mut [Node],
    root: &mut Option<(String, Value)>,
    list_elements: &HashSet<String>,
) {
    let Node {
        name,
        mut fields,
        mut text,
    } = node;
    let trimmed = text.trim();
    if trimmed.len() != text.len() {
        text = trimmed.to_owned();
    }
    let value = if fields.is_empty() {
        Value::String(text)
    } else {
        if !text.is_empty() {
            fields.insert("#text".to_owned(), Value::String(text));
        }
        Value::Object(fields)
    };
    match stack.last_mut() {
        None => *root = Some((name, value)),
        Some(parent) => {
            let always_list = list_elements.contains(&name);
            match parent.fields.get_mut(&name) {
                Some(Value::Array(items)) => items.push(value),
                Some(existing) => {
                    let first = existing.take();
                    *existing = Value::Array(vec![first, value]);
                }
                None if always_list => {
                    parent.fields.insert(name, Value::Array(vec![value]));
                }
                None => {
                    parent.fields.insert(name, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_rows_become_objects_keyed_by_header() {
        let body = "\u{FEFF}VIN,Price,Model\r\nA1,\"$24,990\",Civic \r\nB2,,Accord\r\n";
        let v = Format::Csv.decode(body.as_bytes()).unwrap();
        assert_eq!(
            v,
            json!([{"VIN": "A1", "Price": "$24,990", "Model": "Civic"}, {"VIN": "B2", "Price": "", "Model": "Accord"}])
        );
    }

    #[test]
    fn xml_namespaces_lists_and_attributes() {
        let body = r#"<?xml version="1.0"?>
<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>
  <r:Result xmlns:r="urn:x" count="1"><r:Vehicle><r:VIN>A&amp;B</r:VIN></r:Vehicle></r:Result>
</s:Body></s:Envelope>"#;
        let format = Format::Xml {
            list_elements: HashSet::from(["Vehicle".to_owned()]),
        };
        let v = format.decode(body.as_bytes()).unwrap();
        assert_eq!(
            v,
            json!({"Envelope": {"Body": {"Result": {"@count": "1", "Vehicle": [{"VIN": "A&B"}]}}}})
        );
    }

    #[test]
    fn repeated_xml_elements_become_arrays() {
        let v = Format::Xml {
            list_elements: HashSet::new(),
        }
        .decode(b"<a><b>1</b><b>2</b><c/></a>")
        .unwrap();
        assert_eq!(v, json!({"a": {"b": ["1", "2"], "c": ""}}));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Format::Json.decode(b"\xff\xfe{").is_err());
        assert!(
            Format::Xml {
                list_elements: HashSet::new()
            }
            .decode(b"<a><b></a>")
            .is_err()
        );
    }
}
