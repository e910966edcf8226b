//! The wire formats of dealer systems, below both the mapping engine and the upstream client:
//! decoding bodies (JSON, CSV, XML, legacy charsets) and escaping values for XML, URLs and
//! headers (`escape`). Uses nothing of the crate: it is the floor both stand on.
//!
//! Upstream bodies → JSON values: JSON as is, CSV as an array of row objects keyed by the header
//! row, XML as nested objects (namespaces stripped). `lang::jq` reads them into jq values.
//!
//! XML mapping: an element becomes an object of its children by local name; attributes become
//! `@name`; an element with only text becomes that string; mixed text goes to `#text`. A name
//! that repeats becomes an array, and so does any name listed in `list_elements` even when it
//! appears once, so jq programs see one stable shape.
//!
//! Charsets: XML and CSV bodies from legacy systems are often Latin-1 / Windows-1252. The charset
//! is the first of: the mapping's `charset:`, the reply's `Content-Type` `charset=`, a byte order
//! mark, (XML) the declaration's `encoding="…"`, UTF-8. A body in another charset is transcoded
//! to UTF-8 once, before parsing; a UTF-8 body is parsed in place, never copied. JSON is always
//! UTF-8 (RFC 8259).
//!
//! Packing: a document that is a gzip file or a zip archive (not a `Content-Encoding`, which the
//! HTTP client decodes) is recognised by its first bytes and unpacked as it is read, within a
//! size and a ratio cap (`unpack`).

mod charsets;
mod csv_rows;
pub mod escape;
#[cfg(test)]
mod tests;
mod unpack;
mod xml_tree;

use std::collections::HashSet;

use encoding_rs::Encoding;
use serde_json::Value;

use self::charsets::to_utf8;
use self::csv_rows::decode_csv;
pub use self::csv_rows::{
    CsvColumns, CsvDialect, CsvRow, CsvRows, CsvText, csv_stream, csv_stream_with,
};
pub use self::unpack::{
    DEFAULT_MAX_RATIO, Packing, RATIO_FLOOR, Unpack, unpacked, unpacked_whole, unpacked_with_member,
};
use self::xml_tree::decode_xml;
pub use self::xml_tree::{MAX_XML_DEPTH, MAX_XML_NODES};

/// The formats an upstream body can come in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Xml { list_elements: HashSet<String> },
}

/// What names a body's charset from outside the body, strongest first. The body itself can
/// still name it (byte order mark, XML declaration) when neither does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Declared<'a> {
    /// The mapping's `charset:`; wins over everything the reply says.
    pub mapping: Option<&'static Encoding>,
    /// The reply's `Content-Type` header; its `charset=` parameter counts.
    pub content_type: Option<&'a str>,
}

impl<'a> Declared<'a> {
    /// The mapping's charset and the `Content-Type` of a reply's `headers`.
    pub fn reply(mapping: Option<&'static Encoding>, headers: &'a http::HeaderMap) -> Self {
        Declared {
            mapping,
            content_type: headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        }
    }
}

/// Parses a mapping's `charset:` label (WHATWG labels, case-insensitive: `windows-1252`,
/// `iso-8859-1` and `latin1` (all three read as Windows-1252, which is what legacy exports mean),
/// `iso-8859-15`, `utf-16le`, `shift_jis` …).
pub fn charset(label: &str) -> Result<&'static Encoding, String> {
    Encoding::for_label_no_replacement(label.as_bytes()).ok_or_else(|| {
        format!(
            "unknown charset `{label}`; expected a label like utf-8, windows-1252 or iso-8859-15"
        )
    })
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

    /// Decodes a body nothing outside it declares a charset for ([`Format::decode_with`]).
    pub fn decode(&self, body: &[u8]) -> Result<Value, String> {
        self.decode_with(body, Declared::default())
    }

    /// Decodes a body, reading XML and CSV in the charset chosen as the module doc says. Errors
    /// are short and safe to log (no body content).
    pub fn decode_with(&self, body: &[u8], declared: Declared<'_>) -> Result<Value, String> {
        match self {
            Format::Json => serde_json::from_slice(body).map_err(not_json),
            Format::Csv => {
                let (text, charset) = to_utf8(body, false, declared)?;
                decode_csv(&text, charset)
            }
            Format::Xml { list_elements } => {
                let (text, _) = to_utf8(body, true, declared)?;
                decode_xml(&text, list_elements)
            }
        }
    }
}

/// Why a body is not JSON, short and safe to log (no body content).
pub fn not_json(e: serde_json::Error) -> String {
    format!("body is not JSON ({e})")
}
