//! Text as XML 1.0 carries it, written through quick-xml's escaper, and the request's values
//! read as text.

use std::io;

use quick_xml::Writer;
use quick_xml::escape::partial_escape;
use quick_xml::events::BytesText;
use serde_json::Value;

/// Text as XML 1.0 can carry it: line ends normalized to LF, forbidden characters dropped.
pub fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            '\t' | '\n' => out.push(c),
            c if (c as u32) < 0x20 => {}
            '\u{FFFE}' | '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// A text event for `value`: quick-xml escapes `<`, `>` and `&` (quotes need no escaping in
/// element text, and CRMs with home-made parsers read `O'Brien` better than `O&apos;Brien`);
/// [`xml_text`] first removes what no escaping can carry.
pub(super) fn text(value: &str) -> BytesText<'static> {
    BytesText::from_escaped(partial_escape(xml_text(value)).into_owned())
}

/// `<name>value</name>`.
pub(super) fn leaf(w: &mut Writer<Vec<u8>>, name: &str, value: &str) -> io::Result<()> {
    w.create_element(name).write_text_content(text(value))?;
    Ok(())
}

/// The string at `path`, if present and a string.
pub(super) fn str_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
}

/// A string or number member as text (whole numbers without a fraction, as the schema's
/// integers may arrive as `2022.0`).
pub(super) fn scalar_at(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(number_text(n)),
        _ => None,
    }
}

fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
        _ => n.to_string(),
    }
}

/// An `other_attributes` value: string, number, boolean, or a list of them joined with `, `.
pub(super) fn attribute_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => number_text(n),
        Value::Array(items) => items
            .iter()
            .map(attribute_text)
            .collect::<Vec<_>>()
            .join(", "),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        Value::Object(_) => value.to_string(),
    }
}
