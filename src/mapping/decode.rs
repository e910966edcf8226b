//! Upstream bodies → JSON values for the jq step: JSON as is, CSV as an array of row objects
//! keyed by the header row, XML as nested objects (namespaces stripped).
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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE};
use quick_xml::events::Event;
use quick_xml::reader::Reader;
use serde_json::{Map, Value};

use super::extract::JqValue;

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

    /// [`Format::decode_with`] as the value jq programs run on. JSON (the common case, and the
    /// one on every proxied search) is parsed straight into it, its strings slices of `body`.
    pub fn decode_jq(
        &self,
        body: &bytes::Bytes,
        declared: Declared<'_>,
    ) -> Result<JqValue, String> {
        match self {
            Format::Json => JqValue::from_json_bytes(body).map_err(not_json),
            Format::Csv | Format::Xml { .. } => self
                .decode_with(body, declared)
                .map(|v| JqValue::from_json(&v)),
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

fn not_json(e: serde_json::Error) -> String {
    format!("body is not JSON ({e})")
}

// === charsets ===

/// The charset a body is read in, and what named it (for errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charset {
    encoding: &'static Encoding,
    source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Mapping,
    ContentType,
    Bom,
    XmlDeclaration,
    Default,
}

impl fmt::Display for Charset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.encoding.name();
        match self.source {
            Source::Mapping => write!(f, "{name} per the mapping's `charset`"),
            Source::ContentType => write!(f, "{name} per the Content-Type header"),
            Source::Bom => write!(f, "{name} per the byte order mark"),
            Source::XmlDeclaration => write!(f, "{name} per the XML declaration"),
            Source::Default => f.write_str("no charset declared"),
        }
    }
}

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// How far into an XML body the declaration's `?>` is looked for.
const XML_DECLARATION_MAX: usize = 1024;

/// Longer labels are not quoted in errors (the longest WHATWG label has 24 characters).
const LABEL_MAX: usize = 40;

/// The body as UTF-8 bytes: borrowed when it is UTF-8 already (the usual case; not validated
/// here, the parser does that and says where), transcoded once otherwise. A BOM is dropped.
fn to_utf8<'b>(
    body: &'b [u8],
    xml: bool,
    declared: Declared<'_>,
) -> Result<(Cow<'b, [u8]>, Charset), String> {
    let charset = choose(body, xml, declared)?;
    if charset.encoding == UTF_8 {
        return Ok((
            Cow::Borrowed(body.strip_prefix(UTF8_BOM).unwrap_or(body)),
            charset,
        ));
    }
    // Single-byte charsets decode every byte; multi-byte ones (UTF-16, Shift_JIS …) can fail.
    let (text, had_errors) = charset.encoding.decode_with_bom_removal(body);
    if had_errors {
        return Err(format!("body is not valid {charset}"));
    }
    let bytes = match text {
        Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
        Cow::Owned(text) => Cow::Owned(text.into_bytes()),
    };
    Ok((bytes, charset))
}

fn choose(body: &[u8], xml: bool, declared: Declared<'_>) -> Result<Charset, String> {
    let found = |encoding, source| Ok(Charset { encoding, source });
    if let Some(encoding) = declared.mapping {
        return found(encoding, Source::Mapping);
    }
    if let Some(label) = declared.content_type.and_then(content_type_charset) {
        return match Encoding::for_label_no_replacement(label.as_bytes()) {
            Some(encoding) => found(encoding, Source::ContentType),
            None => Err(unknown_label("the Content-Type header", label.as_bytes())),
        };
    }
    if let Some((encoding, _)) = Encoding::for_bom(body) {
        return found(encoding, Source::Bom);
    }
    if xml && let Some(label) = xml_declared_encoding(body) {
        return match Encoding::for_label_no_replacement(label) {
            // A declaration readable as ASCII is not in UTF-16, whatever it says (a UTF-16
            // document starts with a BOM or with `<\0?\0`).
            Some(encoding) if encoding == UTF_16LE || encoding == UTF_16BE => {
                found(UTF_8, Source::XmlDeclaration)
            }
            Some(encoding) => found(encoding, Source::XmlDeclaration),
            None => Err(unknown_label("the XML declaration", label)),
        };
    }
    found(UTF_8, Source::Default)
}

/// The label is quoted only when it looks like one (it comes from the reply, and errors name
/// no reply content).
fn unknown_label(place: &str, label: &[u8]) -> String {
    let label_like = label.len() <= LABEL_MAX
        && label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b));
    let label = match std::str::from_utf8(label) {
        Ok(label) if label_like => format!(" {label:?}"),
        _ => String::new(),
    };
    format!("{place} names an unknown charset{label}; set `charset:` in the mapping to override")
}

/// The `charset=` parameter of a `Content-Type` value, unquoted.
fn content_type_charset(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"'))
            .filter(|v| !v.is_empty())
    })
}

/// The `encoding="…"` of an XML declaration opening `body`, read as ASCII (leading whitespace,
/// which strict XML forbids, is tolerated).
fn xml_declared_encoding(body: &[u8]) -> Option<&[u8]> {
    let rest = body.trim_ascii_start().strip_prefix(b"<?xml")?;
    // `<?xml-stylesheet …?>` is a processing instruction, not a declaration.
    if !rest.first().is_some_and(u8::is_ascii_whitespace) {
        return None;
    }
    let head = &rest[..rest.len().min(XML_DECLARATION_MAX)];
    let end = head.windows(2).position(|w| w == b"?>")?;
    // Pseudo-attributes: name S? = S? ("…" | '…'), in any order.
    let mut decl = &head[..end];
    loop {
        decl = decl.trim_ascii_start();
        let eq = decl.iter().position(|&b| b == b'=')?;
        let name = decl[..eq].trim_ascii_end();
        let value = decl[eq + 1..].trim_ascii_start();
        let quote = *value.first().filter(|&&q| q == b'"' || q == b'\'')?;
        let len = value[1..].iter().position(|&b| b == quote)?;
        if name == b"encoding" {
            return Some(value[1..1 + len].trim_ascii());
        }
        decl = &value[len + 2..];
    }
}

// === CSV ===

/// A CSV document in UTF-8 (transcoded once if its charset is another), ready to be read row by
/// row ([`CsvText::rows`]) without ever being held as one value: a feed of 50,000 rows as one
/// `Value` takes about ten times its size. The rows are the objects [`Format::decode_with`]
/// gives for `Format::Csv`, with the same charset rules and the same errors.
#[derive(Debug)]
pub struct CsvText<'b> {
    text: Cow<'b, [u8]>,
    charset: Charset,
}

impl<'b> CsvText<'b> {
    /// Chooses the charset as the module doc says and makes the body UTF-8.
    pub fn new(body: &'b [u8], declared: Declared<'_>) -> Result<CsvText<'b>, String> {
        let (text, charset) = to_utf8(body, false, declared)?;
        Ok(CsvText { text, charset })
    }

    /// Reads the header row; the data rows follow through [`CsvRows::next_into`].
    pub fn rows(&self) -> Result<CsvRows<&[u8]>, String> {
        CsvRows::new(&*self.text, self.charset)
    }
}

/// The CSV document `source` yields, read as it arrives: the same rows and errors as
/// [`CsvText`] gives for the whole body, without holding it. The charset is chosen as the module
/// doc says from `declared` and the first bytes (a byte order mark); a document in another
/// charset than UTF-8 is read whole and transcoded first, as [`CsvText`] does.
pub fn csv_stream<R>(
    source: R,
    declared: Declared<'_>,
) -> Result<CsvRows<Box<dyn std::io::Read + Send>>, String>
where
    R: std::io::Read + Send + 'static,
{
    use std::io::{BufRead, BufReader, Read};
    let mut source = BufReader::with_capacity(64 * 1024, source);
    // Enough of the start to see a byte order mark (the longest is UTF-8's three bytes).
    let mut head = Vec::new();
    while head.len() < UTF8_BOM.len() {
        let available = source
            .fill_buf()
            .map_err(|e| format!("body unreadable ({e})"))?;
        if available.is_empty() {
            break;
        }
        let take = available.len().min(UTF8_BOM.len() - head.len());
        head.extend_from_slice(&available[..take]);
        source.consume(take);
    }
    let charset = choose(&head, false, declared)?;
    if charset.encoding != UTF_8 {
        let mut body = head;
        source
            .read_to_end(&mut body)
            .map_err(|e| format!("body unreadable ({e})"))?;
        let text = CsvText::new(&body, declared)?;
        let owned = text.text.into_owned();
        return CsvRows::new(Box::new(std::io::Cursor::new(owned)), text.charset);
    }
    let start = head.strip_prefix(UTF8_BOM).unwrap_or(&head).to_vec();
    CsvRows::new(Box::new(std::io::Cursor::new(start).chain(source)), charset)
}

impl<R: std::io::Read> CsvRows<R> {
    fn new(source: R, charset: Charset) -> Result<CsvRows<R>, String> {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            // Fields are trimmed as they are read (`CsvRow::entries`): `Trim::All` would
            // rebuild every record to trim it.
            .trim(csv::Trim::Headers)
            .from_reader(source);
        let headers = reader
            .headers()
            .map_err(|e| unreadable(charset, "CSV header row".to_owned(), e))?;
        let mut columns: Vec<(String, Vec<usize>)> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, name) in headers.iter().enumerate() {
            match seen.get(name).and_then(|&at| columns.get_mut(at)) {
                Some((_, at)) => at.push(i),
                None => {
                    seen.insert(name, columns.len());
                    columns.push((name.to_owned(), vec![i]));
                }
            }
        }
        drop(seen);
        Ok(CsvRows {
            reader,
            columns: CsvColumns(columns),
            charset,
            read: 0,
        })
    }
}

/// The rows of a CSV document, one at a time.
pub struct CsvRows<R> {
    reader: csv::Reader<R>,
    columns: CsvColumns,
    charset: Charset,
    /// Data rows read so far.
    read: usize,
}

impl<R> std::fmt::Debug for CsvRows<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvRows")
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl<R: std::io::Read> CsvRows<R> {
    /// The header: what turns a record into its row object ([`CsvColumns::row`]).
    pub fn columns(&self) -> &CsvColumns {
        &self.columns
    }

    /// Reads the next record into `record` (a buffer reused across rows); `false` at the end.
    pub fn next_into(&mut self, record: &mut csv::StringRecord) -> Result<bool, String> {
        // Records are counted as the error names them (a quoted field may span lines): the
        // header row is 1.
        let number = self.read + 2;
        let more = self
            .reader
            .read_record(record)
            .map_err(|e| unreadable(self.charset, format!("CSV row {number}"), e))?;
        self.read += usize::from(more);
        Ok(more)
    }
}

fn unreadable(charset: Charset, what: String, e: csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Utf8 { .. } => format!(
            "{what} is not valid UTF-8 ({charset}); if the export is Latin-1 or from Excel, set \
             `charset: windows-1252` in the mapping"
        ),
        _ => format!("{what} unreadable ({e})"),
    }
}

/// A CSV header: the object keys and the columns each one reads.
#[derive(Debug, Clone)]
pub struct CsvColumns(Vec<(String, Vec<usize>)>);

impl CsvColumns {
    /// The object keys, in order (each name once).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// `record` as the object it stands for.
    pub fn row<'a>(&'a self, record: &'a csv::StringRecord) -> CsvRow<'a> {
        CsvRow {
            columns: self,
            record,
        }
    }
}

/// One CSV row as the object it stands for: header name → the row's (trimmed) field.
#[derive(Debug)]
pub struct CsvRow<'a> {
    columns: &'a CsvColumns,
    record: &'a csv::StringRecord,
}

impl CsvRow<'_> {
    /// The object's entries in order. A header name that repeats keeps the place of its first
    /// column and the field of its last column the row reaches (as inserting the row's fields
    /// one by one into an object would); a short row lacks the names of its missing columns.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        let names = &self.columns.0;
        self.entries()
            .map(|(at, field)| (names[at].0.as_str(), field))
    }

    /// [`CsvRow::fields`] with each name given by its place in [`CsvColumns::names`]; the
    /// fields are slices of [`CsvRow::text`].
    pub fn entries(&self) -> impl Iterator<Item = (usize, &str)> {
        self.columns
            .0
            .iter()
            .enumerate()
            .filter_map(|(n, (_, at))| {
                let last = at.iter().rev().find_map(|&i| self.record.get(i))?;
                // As csv's `Trim::All`: ASCII white space.
                Some((n, last.trim_matches(|c: char| c.is_ascii_whitespace())))
            })
    }

    /// The row's fields, one after the other.
    pub fn text(&self) -> &str {
        self.record.as_slice()
    }
}

fn decode_csv(body: &[u8], charset: Charset) -> Result<Value, String> {
    let text = CsvText {
        text: Cow::Borrowed(body),
        charset,
    };
    let mut rows = text.rows()?;
    let mut record = csv::StringRecord::new();
    let mut out = Vec::new();
    while rows.next_into(&mut record)? {
        let object: Map<String, Value> = rows
            .columns()
            .row(&record)
            .fields()
            .map(|(name, field)| (name.to_owned(), Value::String(field.to_owned())))
            .collect();
        out.push(Value::Object(object));
    }
    Ok(Value::Array(out))
}

// === XML ===

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
struct Budget {
    depth: usize,
    nodes: usize,
}

const BUDGET: Budget = Budget {
    depth: MAX_XML_DEPTH,
    nodes: MAX_XML_NODES,
};

/// Element being built while reading XML.
struct Node {
    name: String,
    fields: Map<String, Value>,
    text: String,
}

fn decode_xml(body: &[u8], list_elements: &HashSet<String>) -> Result<Value, String> {
    decode_xml_within(body, list_elements, BUDGET)
}

fn decode_xml_within(
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

    /// Every row `CsvText::rows` reads, as the JSON the feed maps.
    fn rows_one_by_one(body: &[u8]) -> Result<Value, String> {
        let text = CsvText::new(body, Declared::default())?;
        every_row(text.rows()?)
    }

    /// The rows left in `rows`, each as the JSON object the feed maps.
    fn every_row<R: std::io::Read>(mut rows: CsvRows<R>) -> Result<Value, String> {
        let mut record = csv::StringRecord::new();
        let mut out = Vec::new();
        while rows.next_into(&mut record)? {
            out.push(row_json(&rows.columns().row(&record)));
        }
        Ok(Value::Array(out))
    }

    fn row_json(row: &CsvRow<'_>) -> Value {
        let object = row
            .fields()
            .map(|(name, field)| (name.to_owned(), Value::String(field.to_owned())))
            .collect();
        Value::Object(object)
    }

    #[test]
    fn csv_fields_and_names_lose_surrounding_ascii_white_space_only() {
        let body = " Make ,\tPrice\r\n  Honda\t,\" $1 \" \r\n\u{a0}Kia\u{a0},\"\"\r\n";
        assert_eq!(
            Format::Csv.decode(body.as_bytes()).unwrap(),
            json!([{"Make": "Honda", "Price": "$1"}, {"Make": "\u{a0}Kia\u{a0}", "Price": ""}])
        );
    }

    #[test]
    fn csv_rows_become_the_jq_objects_their_json_text_parses_to() {
        // Names that repeat, rows short and long, quotes, escapes JSON must write, non-ASCII.
        let body = "Make,Note,Make,Tab\\\r\nHonda,\"a \\ b \"\"q\"\"\",Acura,\"x\ty\u{1}\"\r\n\
                    Kia\r\n,,,,extra\r\n\"Škoda\",\"line\nbreak\",Ü,€\r\n";
        let text = CsvText::new(body.as_bytes(), Declared::default()).unwrap();
        let mut rows = text.rows().unwrap();
        let objects = crate::mapping::extract::TextObjects::new(rows.columns().names());
        let mut record = csv::StringRecord::new();
        let mut seen = 0;
        while rows.next_into(&mut record).unwrap() {
            let row = rows.columns().row(&record);
            let json = serde_json::to_vec(&row_json(&row)).unwrap();
            let expected = crate::mapping::extract::JqValue::from_json_slice(&json).unwrap();
            assert_eq!(
                objects.build(row.text(), row.entries()),
                expected,
                "{row:?}"
            );
            seen += 1;
        }
        assert_eq!(seen, 4);
    }

    #[test]
    fn csv_rows_read_one_by_one_are_the_rows_of_the_decoded_document() {
        // A repeated header keeps its first place and its last field the row reaches; a short
        // row lacks its missing columns; a long row's extra fields are dropped.
        let body =
            "\u{FEFF}A,B,A,C\r\n1,2,3,4\r\n5,6\r\n7\r\n8,9,10,11,12\r\n\"x, \"\"y\"\"\",,,\r\n";
        let whole = Format::Csv.decode(body.as_bytes()).unwrap();
        assert_eq!(
            whole,
            json!([{"A": "3", "B": "2", "C": "4"}, {"A": "5", "B": "6"}, {"A": "7"},
                   {"A": "10", "B": "9", "C": "11"}, {"A": "", "B": "", "C": ""}])
        );
        assert_eq!(rows_one_by_one(body.as_bytes()).unwrap(), whole);
        let quoted = "Name\r\n\"x, \"\"y\"\"\"\r\n";
        assert_eq!(
            rows_one_by_one(quoted.as_bytes()).unwrap(),
            json!([{"Name": "x, \"y\""}])
        );
    }

    /// A source that hands out one byte per read, as the worst network would.
    struct Trickle(std::io::Cursor<Vec<u8>>);

    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(1);
            self.0.read(&mut buf[..n])
        }
    }

    fn streamed(body: &[u8], declared: Declared<'_>) -> Result<Value, String> {
        every_row(csv_stream(
            Trickle(std::io::Cursor::new(body.to_vec())),
            declared,
        )?)
    }

    #[test]
    fn a_csv_read_as_it_arrives_gives_the_rows_and_errors_of_the_whole_body() {
        let utf8 = "\u{FEFF}VIN,Model\r\nA1,Civic \r\nB2,\"CR-V, \"\"Hybrid\"\"\"\r\n".as_bytes();
        let latin1 = b"VIN,Color\r\nA1,Cr\xe8me\r\n";
        let cases = [
            (utf8, Declared::default()),
            (latin1, mapping("windows-1252", None)),
            (latin1, content_type("text/csv; charset=iso-8859-1")),
            (b"A,B\n1,2\n\xff,3\n", Declared::default()),
            (b"", Declared::default()),
        ];
        for (body, declared) in cases {
            assert_eq!(
                streamed(body, declared),
                Format::Csv.decode_with(body, declared),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            streamed(latin1, mapping("windows-1252", None)).unwrap(),
            json!([{ "VIN": "A1", "Color": "Cr\u{e8}me" }])
        );
    }

    #[test]
    fn csv_rows_read_one_by_one_fail_as_the_whole_document_does() {
        for body in [&b"A,B\n1,2\n\xff,3\n"[..], b"\xff,B\n1,2\n"] {
            let whole = Format::Csv.decode(body).unwrap_err();
            assert_eq!(rows_one_by_one(body).unwrap_err(), whole);
        }
        let whole = Format::Csv.decode(b"A,B\n1,2\n\xff,3\n").unwrap_err();
        assert!(whole.starts_with("CSV row 3 is not valid UTF-8"), "{whole}");
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

    // --- charsets ---

    fn xml() -> Format {
        Format::Xml {
            list_elements: HashSet::new(),
        }
    }

    fn content_type(value: &str) -> Declared<'_> {
        Declared {
            mapping: None,
            content_type: Some(value),
        }
    }

    fn mapping(label: &str, content_type: Option<&'static str>) -> Declared<'static> {
        Declared {
            mapping: Some(charset(label).unwrap()),
            content_type,
        }
    }

    /// Windows-1252 bytes: é E9, ü FC, © A9, € 80 (0x80 is a C1 control in true ISO-8859-1;
    /// exports labelled ISO-8859-1 mean Windows-1252, and so does the label).
    const CAR_1252: &[u8] = b"<car><model>M\xE9gane</model><trim>\xFCber \xA9</trim>\
        <price>\x80 31 990</price></car>";

    fn car() -> Value {
        json!({"car": {"model": "Mégane", "trim": "über ©", "price": "€ 31 990"}})
    }

    fn with_declaration(encoding: &str, body: &[u8]) -> Vec<u8> {
        let mut out = format!("<?xml version=\"1.0\" encoding=\"{encoding}\"?>\n").into_bytes();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn latin1_xml_is_read_in_the_charset_its_declaration_names() {
        for label in ["ISO-8859-1", "iso-8859-1", "latin1", "windows-1252"] {
            let body = with_declaration(label, CAR_1252);
            assert_eq!(xml().decode(&body).unwrap(), car(), "{label}");
        }
        // Single quotes, other pseudo-attributes around it, a newline before it.
        let body = [
            b"\n<?xml encoding = 'ISO-8859-1' standalone='yes' ?>".as_slice(),
            CAR_1252,
        ]
        .concat();
        assert_eq!(xml().decode(&body).unwrap(), car());
    }

    #[test]
    fn the_content_type_charset_overrides_the_xml_declaration() {
        // A UTF-8 body whose declaration lies, and a Latin-1 one whose declaration lies.
        let utf8 = with_declaration("ISO-8859-1", "<car><model>Mégane</model></car>".as_bytes());
        let got = xml()
            .decode_with(&utf8, content_type("application/xml; charset=UTF-8"))
            .unwrap();
        assert_eq!(got, json!({"car": {"model": "Mégane"}}));
        let latin1 = with_declaration("UTF-8", CAR_1252);
        let got = xml()
            .decode_with(&latin1, content_type("text/xml;Charset=\"iso-8859-1\""))
            .unwrap();
        assert_eq!(got, car());
    }

    #[test]
    fn the_mapping_charset_overrides_content_type_and_declaration() {
        let body = with_declaration("UTF-8", CAR_1252);
        let declared = mapping("windows-1252", Some("application/xml; charset=utf-8"));
        assert_eq!(xml().decode_with(&body, declared).unwrap(), car());
    }

    #[test]
    fn a_utf16le_body_with_a_bom_is_transcoded() {
        let text = "<?xml version=\"1.0\" encoding=\"UTF-16\"?><car><model>Mégane</model>\
                    <trim>über ©</trim><price>€ 31 990</price></car>";
        let mut body = vec![0xFF, 0xFE];
        body.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(xml().decode(&body).unwrap(), car());
        // Cut in the middle of a code unit: an error, not a guess.
        let error = xml().decode(&body[..body.len() - 1]).unwrap_err();
        assert_eq!(error, "body is not valid UTF-16LE per the byte order mark");
    }

    #[test]
    fn a_windows_1252_csv_is_read_in_the_mapping_charset() {
        let body = b"VIN,Model,Interior\r\nA1,M\xE9gane,Cr\xE8me \xA9 \x80\r\n";
        let got = Format::Csv
            .decode_with(body, mapping("windows-1252", Some("text/csv")))
            .unwrap();
        assert_eq!(
            got,
            json!([{"VIN": "A1", "Model": "Mégane", "Interior": "Crème © €"}])
        );
    }

    #[test]
    fn a_csv_that_is_not_utf8_asks_for_a_charset_without_quoting_the_body() {
        let body = b"VIN,Model\r\nA1,Civic\r\nB2,M\xE9gane\r\n";
        let error = Format::Csv.decode(body).unwrap_err();
        assert!(error.contains("charset: windows-1252"), "{error}");
        assert!(error.starts_with("CSV row 3 is not valid UTF-8"), "{error}");
        assert!(error.contains("no charset declared"), "{error}");
        assert!(!error.contains("gane") && !error.contains("B2"), "{error}");
        // A Content-Type that says UTF-8 is named as the reason.
        let error = Format::Csv
            .decode_with(body, content_type("text/csv; charset=utf-8"))
            .unwrap_err();
        assert!(
            error.contains("UTF-8 per the Content-Type header"),
            "{error}"
        );
        assert!(error.contains("charset: windows-1252"), "{error}");
    }

    #[test]
    fn a_utf8_body_is_borrowed_not_copied() {
        let body = "\u{FEFF}<car><model>Mégane</model></car>".as_bytes();
        let (text, charset) = to_utf8(body, true, Declared::default()).unwrap();
        assert!(matches!(text, Cow::Borrowed(b) if b.as_ptr() == body[3..].as_ptr()));
        assert_eq!(charset.source, Source::Bom);
        let body = "VIN,Model\nA1,Mégane\n".as_bytes();
        let declared = content_type("text/csv; charset=utf-8");
        let (text, _) = to_utf8(body, false, declared).unwrap();
        assert!(matches!(text, Cow::Borrowed(b) if b.as_ptr() == body.as_ptr()));
        // Nor is an ASCII body in a single-byte charset.
        let (text, _) = to_utf8(b"VIN\nA1\n", false, mapping("latin1", None)).unwrap();
        assert!(matches!(text, Cow::Borrowed(_)));
        // Invalid UTF-8 XML fails in the parser, as before.
        let error = xml()
            .decode(b"<car><model>M\xE9gane</model></car>")
            .unwrap_err();
        assert!(error.starts_with("bad XML text"), "{error}");
    }

    #[test]
    fn an_unknown_charset_label_is_a_clear_error() {
        let body = with_declaration("x-no-such-charset", b"<car/>");
        let error = xml().decode(&body).unwrap_err();
        assert_eq!(
            error,
            "the XML declaration names an unknown charset \"x-no-such-charset\"; \
             set `charset:` in the mapping to override"
        );
        let error = Format::Csv
            .decode_with(b"a\n1\n", content_type("text/csv; charset=klingon"))
            .unwrap_err();
        assert!(error.starts_with("the Content-Type header names an unknown charset \"klingon\""));
        // What does not look like a label is not quoted.
        let body = with_declaration("<b>J. Smith</b>", b"<car/>");
        let error = xml().decode(&body).unwrap_err();
        assert!(
            error.starts_with("the XML declaration names an unknown charset;"),
            "{error}"
        );
        // The mapping's label is checked when the folder loads.
        assert!(charset("latin1").is_ok_and(|e| e == encoding_rs::WINDOWS_1252));
        assert!(charset("ISO-8859-15").is_ok_and(|e| e == encoding_rs::ISO_8859_15));
        assert!(
            charset("klingon")
                .unwrap_err()
                .starts_with("unknown charset `klingon`")
        );
        // Labels that encoding_rs maps to its "replacement" decoder are not charsets to read.
        assert!(charset("iso-2022-kr").is_err());
    }

    #[test]
    fn charset_sources_are_read_precisely() {
        assert_eq!(
            content_type_charset("text/csv; charset=\"UTF-8\""),
            Some("UTF-8")
        );
        assert_eq!(
            content_type_charset("text/csv ; CHARSET = latin1 ; x=y"),
            Some("latin1")
        );
        assert_eq!(content_type_charset("text/csv"), None);
        assert_eq!(content_type_charset("text/csv; charset="), None);
        assert_eq!(
            xml_declared_encoding(b"<?xml version=\"1.0\"?><a/>"),
            None,
            "no encoding pseudo-attribute"
        );
        assert_eq!(
            xml_declared_encoding(b"<?xml-stylesheet href='a'?><a/>"),
            None
        );
        assert_eq!(xml_declared_encoding(b"<a/>"), None);
        // A declaration that says UTF-16 but is readable as ASCII is not UTF-16.
        let body = with_declaration("UTF-16", "<a>é</a>".as_bytes());
        assert_eq!(xml().decode(&body).unwrap(), json!({"a": "é"}));
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

    /// Bodies as legacy systems and broken proxies send them: a BOM or not, an XML declaration
    /// naming some charset or not, then anything.
    fn legacy_body() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let prefix = prop_oneof![
            Just(Vec::new()),
            Just(UTF8_BOM.to_vec()),
            Just(b"\xFF\xFE".to_vec()),
            Just(b"\xFE\xFF".to_vec()),
            prop::sample::select(vec![
                "ISO-8859-1",
                "windows-1252",
                "UTF-16",
                "utf-16be",
                "Shift_JIS",
                "x-unknown",
                "",
            ])
            .prop_map(|label| format!("<?xml version=\"1.0\" encoding=\"{label}\"?>").into_bytes()),
            Just(b"<?xml version='1.0' encoding='".to_vec()),
        ];
        let rest = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            "[<>a-z/ =\"'&;#\\[\\]!?\u{e9}\u{20ac}\\x00-\\x7f]{0,200}".prop_map(String::into_bytes),
        ];
        (prefix, rest).prop_map(|(mut prefix, rest)| {
            prefix.extend(rest);
            prefix
        })
    }

    proptest::proptest! {
        /// Whatever the body and whatever declares its charset, decoding answers (a value or
        /// an error) and never panics.
        #[test]
        fn no_body_or_charset_makes_decoding_panic(
            body in legacy_body(),
            mapping_label in proptest::option::of(proptest::sample::select(
                vec!["windows-1252", "utf-8", "utf-16le", "shift_jis"],
            )),
            content_type in proptest::option::of(proptest::sample::select(vec![
                "text/xml; charset=ISO-8859-1",
                "application/xml;charset=\"utf-16\"",
                "text/csv; charset=",
                "text/csv; charset=bogus",
                "text/plain",
            ])),
        ) {
            let declared = Declared {
                mapping: mapping_label.map(|label| charset(label).unwrap()),
                content_type,
            };
            let list = Format::Xml { list_elements: HashSet::from(["a".to_owned()]) };
            for format in [Format::Json, Format::Csv, list] {
                let _ = format.decode_with(&body, declared);
                let _ = format.decode_jq(&bytes::Bytes::copy_from_slice(&body), declared);
            }
        }
    }

    // --- budgets ---

    /// `depth` nested `<e>` elements (each with a sibling `<s/>` for width), closed properly.
    fn nested(depth: usize, width: usize) -> Vec<u8> {
        let mut out = String::with_capacity(depth * (8 + 4 * width));
        for _ in 0..depth {
            out.push_str("<e>");
            for _ in 0..width {
                out.push_str("<s/>");
            }
        }
        for _ in 0..depth {
            out.push_str("</e>");
        }
        out.into_bytes()
    }

    #[test]
    fn deep_xml_is_refused_where_it_gets_too_deep() {
        let ok = xml().decode_jq(
            &bytes::Bytes::copy_from_slice(&nested(MAX_XML_DEPTH, 0)),
            Declared::default(),
        );
        assert!(ok.is_ok(), "{:?}", ok.err());
        // 128 levels of 3 bytes each: the 129th `<e>` ends at byte 3 × 129.
        let too_deep = xml().decode(&nested(MAX_XML_DEPTH + 1, 0)).unwrap_err();
        assert_eq!(
            too_deep,
            format!("XML nests deeper than {MAX_XML_DEPTH} elements (at byte 387)")
        );
        // The attack of issue 15: ~10⁵ levels in a few hundred KB (far under the reply cap)
        // used to overflow the stack when the value was converted and dropped.
        for format in [xml(), Format::Json] {
            let body = match format {
                Format::Json => "[".repeat(100_000).into_bytes(),
                Format::Csv | Format::Xml { .. } => nested(100_000, 0),
            };
            let error = format
                .decode_jq(&bytes::Bytes::copy_from_slice(&body), Declared::default())
                .unwrap_err();
            assert!(
                error.contains("deeper than") || error.contains("recursion limit"),
                "{error}"
            );
        }
    }

    #[test]
    fn deep_json_is_bounded_by_the_parser() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
        assert!(
            Format::Json
                .decode_jq(
                    &bytes::Bytes::copy_from_slice(&deep(127)),
                    Declared::default()
                )
                .is_ok()
        );
        let error = Format::Json
            .decode_jq(
                &bytes::Bytes::copy_from_slice(&deep(129)),
                Declared::default(),
            )
            .unwrap_err();
        assert!(error.contains("recursion limit"), "{error}");
        assert!(Format::Json.decode(&deep(129)).is_err());
    }

    #[test]
    fn wide_xml_is_refused_past_the_node_budget() {
        let budget = Budget {
            depth: 8,
            nodes: 100,
        };
        let list = HashSet::new();
        // The root and 99 children: 100 nodes.
        assert!(decode_xml_within(&nested(1, 99), &list, budget).is_ok());
        let error = decode_xml_within(&nested(1, 100), &list, budget).unwrap_err();
        assert_eq!(
            error,
            "XML holds more than 100 elements and attributes (at byte 403)"
        );
        // Attributes count too.
        let attributes = format!(
            "<e {}/>",
            (0..100)
                .map(|i| format!("a{i}=''"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        assert!(decode_xml_within(attributes.as_bytes(), &list, budget).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 64,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Deep and wide documents: within the budgets they decode (and convert to jq values,
        /// and are dropped) on a test thread's stack; past them they are refused, and the
        /// error says which budget and where. Never a crash.
        #[test]
        fn deep_and_wide_documents_decode_or_are_refused(
            depth in proptest::prop_oneof![1usize..=140, 140usize..20_000],
            width in 0usize..40,
            nodes in 50usize..2_000,
        ) {
            let budget = Budget { depth: MAX_XML_DEPTH, nodes };
            let body = nested(depth, width);
            let needed = depth * (1 + width);
            // The `<s/>` children sit one level below the deepest `<e>`.
            let levels = depth + usize::from(width > 0);
            match decode_xml_within(&body, &HashSet::new(), budget) {
                Ok(value) => {
                    proptest::prop_assert!(levels <= MAX_XML_DEPTH && needed <= nodes);
                    drop(JqValue::from_json(&value));
                }
                Err(error) => {
                    let over_depth = error.starts_with("XML nests deeper than 128 elements (at byte ");
                    let over_nodes = error.starts_with(&format!("XML holds more than {nodes} elements"));
                    proptest::prop_assert!(over_depth || over_nodes, "{}", error);
                    proptest::prop_assert!(levels > MAX_XML_DEPTH || needed > nodes);
                }
            }
        }
    }
}
