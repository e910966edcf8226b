//! SOAP and WS-Security plumbing shared by the SOAP CRM ([`crate::crm`]) and the SOAP DMS
//! ([`crate::soap_dms`]): the endpoint's routing, a small namespace-aware XML tree, envelope
//! opening, `Content-Type` parsing and the UsernameToken check.

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use jiff::{SignedDuration, Timestamp};
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;
use sha1::{Digest as _, Sha1};

use http::header::{ALLOW, HeaderValue};
use http::{Method, StatusCode};

use crate::sim::{self, SimRequest, SimResponse, lock};

/// A SOAP endpoint's routing, as IIS does it: `path` matched case-insensitively (else 404) and
/// POST only (else 405 with `Allow: POST`); `call` answers the rest.
pub(crate) fn endpoint(
    req: &SimRequest,
    path: &str,
    call: impl FnOnce(&SimRequest) -> SimResponse,
) -> SimResponse {
    if !req.path.eq_ignore_ascii_case(path) {
        return sim::text(StatusCode::NOT_FOUND, "Not Found");
    }
    if req.method != Method::POST {
        let mut response = sim::text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    call(req)
}

/// `body` in a SOAP envelope of the namespace `ns` (1.1 or 1.2), after the XML declaration.
pub(crate) fn envelope(ns: &str, body: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><soap:Envelope xmlns:soap=\"{ns}\">\
         <soap:Body>{body}</soap:Body></soap:Envelope>"
    )
}

/// An XML answer of the system's `content_type`.
pub(crate) fn xml(status: StatusCode, content_type: &'static str, body: String) -> SimResponse {
    sim::bytes_response(status, content_type, bytes::Bytes::from(body))
}

/// The OASIS WSS 1.0 `wsse` namespace (for fault codes).
pub(crate) const WSSE_NS: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
/// How far `Created` may be from now.
pub(crate) const CREATED_SKEW: SignedDuration = SignedDuration::from_mins(5);
/// How long an accepted nonce is remembered (and refused).
pub(crate) const NONCE_TTL: SignedDuration = SignedDuration::from_mins(10);
/// Deeper documents are refused (and the tree never recurses far).
const MAX_DEPTH: usize = 64;

/// An element: namespace, local name, attributes by local name, child elements and all of
/// its own text (character data, references and CDATA, concatenated, unescaped).
#[derive(Debug, Default)]
pub(crate) struct Element {
    pub(crate) ns: Option<String>,
    pub(crate) name: String,
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) children: Vec<Element>,
    pub(crate) text: String,
}

impl Element {
    /// True for `{ns}name`.
    pub(crate) fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    /// The first child with this local name.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    pub(crate) fn children_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// An attribute by local name.
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The exact text, unless it is empty or whitespace.
    pub(crate) fn value(&self) -> Option<&str> {
        (!self.text.trim().is_empty()).then_some(self.text.as_str())
    }

    /// The value of the first child with this local name.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.child(name).and_then(Element::value)
    }

    /// True when some text below (or in) this element is not whitespace.
    pub(crate) fn has_content(&self) -> bool {
        self.value().is_some() || self.children.iter().any(Element::has_content)
    }
}

/// Parses a whole UTF-8 document; `None` when it is not well-formed, has a DTD, uses an
/// undeclared prefix or an unknown entity, or nests deeper than 64 elements.
pub(crate) fn parse(xml: &[u8]) -> Option<Element> {
    let mut reader = NsReader::from_reader(xml);
    let mut buf = Vec::new();
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let (ns, event) = reader.read_resolved_event_into(&mut buf).ok()?;
        let ns = match ns {
            ResolveResult::Bound(ns) => Some(std::str::from_utf8(ns.as_ref()).ok()?.to_owned()),
            ResolveResult::Unbound => None,
            ResolveResult::Unknown(_) => return None,
        };
        match event {
            Event::Start(e) => {
                if (stack.is_empty() && root.is_some()) || stack.len() >= MAX_DEPTH {
                    return None;
                }
                stack.push(open(ns, &e)?);
            }
            Event::Empty(e) => {
                if stack.is_empty() && root.is_some() {
                    return None;
                }
                close(open(ns, &e)?, &mut stack, &mut root);
            }
            Event::End(_) => {
                let element = stack.pop()?;
                close(element, &mut stack, &mut root);
            }
            Event::Text(t) => push_text(&mut stack, &t.xml_content().ok()?)?,
            Event::CData(t) => push_text(&mut stack, &t.xml_content().ok()?)?,
            Event::GeneralRef(r) => push_text(&mut stack, &entity(&r)?)?,
            Event::DocType(_) => return None,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
        buf.clear();
    }
    if stack.is_empty() { root } else { None }
}

fn open(ns: Option<String>, e: &BytesStart<'_>) -> Option<Element> {
    let mut attrs = Vec::new();
    for attr in e.attributes() {
        let attr = attr.ok()?;
        if attr.key.as_namespace_binding().is_some() {
            continue;
        }
        let name = std::str::from_utf8(attr.key.local_name().as_ref())
            .ok()?
            .to_owned();
        attrs.push((name, attr.unescape_value().ok()?.into_owned()));
    }
    Some(Element {
        ns,
        name: std::str::from_utf8(e.local_name().as_ref())
            .ok()?
            .to_owned(),
        attrs,
        children: Vec::new(),
        text: String::new(),
    })
}

fn close(element: Element, stack: &mut [Element], root: &mut Option<Element>) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
}

/// Text outside the root element may only be whitespace.
fn push_text(stack: &mut [Element], text: &str) -> Option<()> {
    match stack.last_mut() {
        Some(element) => element.text.push_str(text),
        None if text.trim().is_empty() => {}
        None => return None,
    }
    Some(())
}

/// A character reference or one of the five predefined entities.
fn entity(r: &BytesRef<'_>) -> Option<Cow<'static, str>> {
    if let Some(c) = r.resolve_char_ref().ok()? {
        return Some(Cow::Owned(c.to_string()));
    }
    let text = match r.decode().ok()?.as_ref() {
        "lt" => "<",
        "gt" => ">",
        "amp" => "&",
        "quot" => "\"",
        "apos" => "'",
        _ => return None,
    };
    Some(Cow::Borrowed(text))
}

/// Escapes text for element content or attribute values.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    quick_xml::escape::escape(text)
}

/// Why a document is not an envelope of the expected SOAP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvelopeError {
    /// Not rooted at `Envelope`, or no `Body`.
    Malformed,
    /// An `Envelope` in another namespace.
    VersionMismatch,
}

/// An envelope's `Header` (when present) and `Body`.
#[derive(Debug)]
pub(crate) struct Envelope<'a> {
    pub(crate) header: Option<&'a Element>,
    pub(crate) body: &'a Element,
}

/// Opens `root` as an envelope in namespace `ns`.
pub(crate) fn open_envelope<'a>(
    root: &'a Element,
    ns: &str,
) -> Result<Envelope<'a>, EnvelopeError> {
    if root.name != "Envelope" {
        return Err(EnvelopeError::Malformed);
    }
    if root.ns.as_deref() != Some(ns) {
        return Err(EnvelopeError::VersionMismatch);
    }
    Ok(Envelope {
        header: root.children.iter().find(|c| c.is(ns, "Header")),
        body: root
            .children
            .iter()
            .find(|c| c.is(ns, "Body"))
            .ok_or(EnvelopeError::Malformed)?,
    })
}

/// A parsed `Content-Type`: lower-case essence, parameters with lower-case names and
/// unquoted values.
#[derive(Debug)]
pub(crate) struct MediaType {
    pub(crate) essence: String,
    params: Vec<(String, String)>,
}

impl MediaType {
    pub(crate) fn parse(header: &str) -> Option<MediaType> {
        let mut parts = split_unquoted(header).into_iter();
        let essence = parts.next()?.trim().to_ascii_lowercase();
        let params = parts
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let (name, value) = p.split_once('=')?;
                let value = value.trim();
                let value = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(quoted) => quoted.replace("\\\"", "\"").replace("\\\\", "\\"),
                    None => value.to_owned(),
                };
                Some((name.trim().to_ascii_lowercase(), value))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(MediaType { essence, params })
    }

    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// True when `charset` is absent or UTF-8.
    pub(crate) fn charset_is_utf8(&self) -> bool {
        self.param("charset")
            .is_none_or(|c| c.eq_ignore_ascii_case("utf-8"))
    }
}

/// Splits at `;` outside double quotes.
fn split_unquoted(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Strict RFC 3339 (`2026-06-01T09:00:00-07:00`, `…Z`, fractions allowed).
pub(crate) fn rfc3339(s: &str) -> Option<Timestamp> {
    let parsed =
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    Timestamp::from_nanosecond(parsed.unix_timestamp_nanos()).ok()
}

/// `Base64(SHA-1(nonce ‖ created ‖ password))`.
pub(crate) fn password_digest(nonce: &[u8], created: &str, password: &str) -> String {
    let hash = Sha1::new()
        .chain_update(nonce)
        .chain_update(created.as_bytes())
        .chain_update(password.as_bytes())
        .finalize();
    BASE64.encode(hash)
}

/// Who may call, and whether a plain-text password will do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credentials {
    pub(crate) username: &'static str,
    pub(crate) password: &'static str,
    pub(crate) accept_text: bool,
}

/// Checks UsernameTokens and remembers the nonces of accepted digests.
#[derive(Debug)]
pub(crate) struct Authenticator {
    credentials: Credentials,
    seen: Mutex<Nonces>,
}

/// Accepted nonces, oldest first, for [`NONCE_TTL`].
#[derive(Debug, Default)]
struct Nonces {
    order: VecDeque<(Timestamp, Vec<u8>)>,
    set: HashSet<Vec<u8>>,
}

impl Authenticator {
    pub(crate) fn new(credentials: Credentials) -> Authenticator {
        Authenticator {
            credentials,
            seen: Mutex::new(Nonces::default()),
        }
    }

    pub(crate) fn clear(&self) {
        *lock(&self.seen) = Nonces::default();
    }

    /// Checks `Header/Security/UsernameToken`; the error is the fault's reason.
    pub(crate) fn check(
        &self,
        header: Option<&Element>,
        now: Timestamp,
    ) -> Result<(), &'static str> {
        let token = header
            .and_then(|h| h.child("Security"))
            .ok_or("missing wsse:Security header")?
            .child("UsernameToken")
            .ok_or("missing UsernameToken")?;
        let username = token.field("Username").ok_or("missing Username")?;
        if username.trim() != self.credentials.username {
            return Err("unknown username");
        }
        let password = token.child("Password").ok_or("missing Password")?;
        let text = password.text.trim();
        match password.attr("Type") {
            Some(kind) if kind.trim().ends_with("#PasswordDigest") => {
                self.check_digest(token, text, now)
            }
            None => self.check_text(text),
            Some(kind) if kind.trim().ends_with("#PasswordText") => self.check_text(text),
            Some(_) => Err("unsupported password Type"),
        }
    }

    fn check_text(&self, password: &str) -> Result<(), &'static str> {
        if !self.credentials.accept_text {
            Err("password digest required")
        } else if password == self.credentials.password {
            Ok(())
        } else {
            Err("invalid password")
        }
    }

    fn check_digest(
        &self,
        token: &Element,
        digest: &str,
        now: Timestamp,
    ) -> Result<(), &'static str> {
        let nonce = token.field("Nonce").ok_or("missing Nonce")?;
        let nonce = BASE64
            .decode(nonce.trim())
            .map_err(|_| "Nonce is not base64")?;
        let created = token.field("Created").ok_or("missing Created")?;
        let at = rfc3339(created.trim()).ok_or("Created is not an RFC 3339 timestamp")?;
        if now.duration_since(at).abs() > CREATED_SKEW {
            return Err("Created is outside the 5-minute window");
        }
        if digest != password_digest(&nonce, created, self.credentials.password) {
            return Err("invalid password digest");
        }
        let mut seen = lock(&self.seen);
        while seen
            .order
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > NONCE_TTL)
        {
            if let Some((_, old)) = seen.order.pop_front() {
                seen.set.remove(&old);
            }
        }
        if !seen.set.insert(nonce.clone()) {
            return Err("nonce already used");
        }
        seen.order.push_back((now, nonce));
        Ok(())
    }
}
