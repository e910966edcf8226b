//! XML bodies: elements become nested objects (namespaces stripped), within depth and node
//! budgets.

use std::collections::HashSet;

use quick_xml::events::Event;
use quick_xml::reader::Reader;
use serde_json::{Map, Value};

/// Deepest element nesting accepted in an XML body (the root is level 1). Every later step
/// (conversion to jq values, jq itself, dropping the value) walks a document recursively, so a
/// 100 KB body of nested elements would overflow a worker's stack and abort the process; real
/// DMS replies and feeds nest a dozen levels. JSON bodies have the same bound (serde_json's
/// recursion limit of 128).
pub const MAX_XML_DEPTH: usize = 128;

/// Most elements and attributes accepted in one XML body: a decoded node costs far more memory
/// than its few bytes of markup, so this bounds the memory a reply can claim (a feed of 50 000
/// vehicles with 60 fields each stays well under it).
pub const MAX_XML_NODES: usize = 4_000_000;

/// How much of a document `decode_xml` accepts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    pub(super) depth: usize,
    pub(super) nodes: usize,
}

pub(super) const BUDGET: Budget = Budget {
    depth: MAX_XML_DEPTH,
    nodes: MAX_XML_NODES,
};

/// Element being built while reading XML.
struct Node {
    name: String,
    fields: Map<String, Value>,
    text: String,
}

pub(super) fn decode_xml(body: &[u8], list_elements: &HashSet<String>) -> Result<Value, String> {
    decode_xml_within(body, list_elements, BUDGET)
}

pub(super) fn decode_xml_within(
    body: &[u8],
    list_elements: &HashSet<String>,
    budget: Budget,
) -> Result<Value, String> {
    // Text is trimmed once per element when it closes (`close`), not per event: entities
    // arrive as events of their own, and trimming each piece would eat the spaces around them
    // (`one &amp; two` → `one&two`).
    let mut reader = Reader::from_reader(body);
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<(String, Value)> = None;
    let mut buf = Vec::new();
    let mut nodes = 0usize;
    // Errors name the byte offset where the budget ran out (no content: it comes from the reply).
    let mut count = |node: &Node, depth: usize, at: u64| {
        nodes += 1 + node.fields.len();
        if depth > budget.depth {
            Err(format!(
                "XML nests deeper than {} elements (at byte {at})",
                budget.depth
            ))
        } else if nodes > budget.nodes {
            Err(format!(
                "XML holds more than {} elements and attributes (at byte {at})",
                budget.nodes
            ))
        } else {
            Ok(())
        }
    };
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("body is not XML ({e})"))?;
        match event {
            Event::Start(e) => {
                let node = open(&e)?;
                count(&node, stack.len() + 1, reader.buffer_position())?;
                stack.push(node);
            }
            Event::Empty(e) => {
                let node = open(&e)?;
                count(&node, stack.len() + 1, reader.buffer_position())?;
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
