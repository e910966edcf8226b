//! The charset a body is read in: chosen as the module above says, and the body transcoded to
//! UTF-8 once when it is another.

use std::borrow::Cow;
use std::fmt;

use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE};

use super::Declared;

/// The charset a body is read in, and what named it (for errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Charset {
    pub(super) encoding: &'static Encoding,
    pub(super) source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
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

pub(super) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// How far into an XML body the declaration's `?>` is looked for.
const XML_DECLARATION_MAX: usize = 1024;

/// Longer labels are not quoted in errors (the longest WHATWG label has 24 characters).
const LABEL_MAX: usize = 40;

/// The body as UTF-8 bytes: borrowed when it is UTF-8 already (the usual case; not validated
/// here, the parser does that and says where), transcoded once otherwise. A BOM is dropped.
pub(super) fn to_utf8<'b>(
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

pub(super) fn choose(body: &[u8], xml: bool, declared: Declared<'_>) -> Result<Charset, String> {
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
pub(super) fn content_type_charset(content_type: &str) -> Option<&str> {
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
pub(super) fn xml_declared_encoding(body: &[u8]) -> Option<&[u8]> {
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
