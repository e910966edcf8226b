//! SOAP upstreams (`kind: soap`): the envelope around a mapping's rendered body, the
//! WS-Security UsernameToken in its header, and the reply's Body or Fault as JSON.
//!
//! ```text
//!  mapping ── body_xml (template, escaped) ──▶ soap::request ──▶ UpstreamRequest (POST)
//!          ──▶ Upstream::call (the same stack as REST: breaker, timeouts, slots …)
//!          ──▶ UpstreamResponse (any status) ──▶ soap::decode_reply ──▶ Body as JSON | Fault
//! ```
//!
//! A SOAP call is an HTTP `POST` of an envelope, so it reuses the whole REST client; this module
//! only adds what is SOAP. The envelope is built by hand from fixed strings: it is four constant
//! pieces around the template's output, and it is on the hot path (see `benches/soap.rs`), where
//! a DOM or a serializer would only add allocations. Everything that varies is XML-escaped
//! (credentials here, values in the templates); the action is checked before it goes into a
//! header.
//!
//! WS-Security follows the OASIS WSS 1.0 UsernameToken Profile: `Username`, `Password` (text,
//! or the digest `Base64(SHA-1(nonce + created + password))`), `Nonce` (16 random bytes) and
//! `Created` (UTC, to the second), with a fresh nonce per call so a server that remembers nonces
//! can refuse replays. SOAP calls are not idempotent unless the mapping says so: a `SubmitLead`
//! sent twice is two leads.
//!
//! Replies are decoded with the XML decoder of the mapping engine (namespaces stripped), so the
//! jq programs see `{"SubmitLeadResponse": {…}}` whatever prefixes the server uses. Faults are
//! picked out for both versions: SOAP 1.1 `faultcode`/`faultstring`/`detail`, SOAP 1.2
//! `Code/Value`, `Code/Subcode/Value`, `Reason/Text` and `Detail`.

use std::collections::HashSet;
use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use serde_json::{Map, Value};
use sha1::{Digest as _, Sha1};

use super::client::Upstream;
pub use super::config::{SoapSettings, SoapVersion, WsSecurity};
use super::{UpstreamError, UpstreamRequest};
use crate::formats::escape::xml_escape;
use crate::formats::{Declared, Format};

/// The SOAP 1.1 envelope namespace.
pub const SOAP11_NS: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The SOAP 1.2 envelope namespace.
pub const SOAP12_NS: &str = "http://www.w3.org/2003/05/soap-envelope";
/// OASIS WSS 1.0 `wsse` namespace.
pub const WSSE_NS: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
/// OASIS WSS 1.0 `wsu` namespace.
pub const WSU_NS: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
/// `Password/@Type` of a password sent as is.
pub const PASSWORD_TEXT: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordText";
/// `Password/@Type` of a password digest.
pub const PASSWORD_DIGEST: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest";
/// `Nonce/@EncodingType`.
pub const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// The SOAPAction header (SOAP 1.1).
const SOAP_ACTION: HeaderName = HeaderName::from_static("soapaction");
/// Room for the envelope around the body: the fixed strings, namespaces and a UsernameToken.
const ENVELOPE_OVERHEAD: usize = 1024;

/// A decoded SOAP reply.
#[derive(Debug, Clone, PartialEq)]
pub struct SoapReply {
    /// The Body's content, e.g. `{"SubmitLeadResponse": {…}}` (`{}` for an empty Body).
    pub body: Value,
    /// The Fault, when the Body holds one.
    pub fault: Option<SoapFault>,
}

/// A SOAP Fault, either version.
#[derive(Debug, Clone, PartialEq)]
pub struct SoapFault {
    /// Local part of the fault code: `Client`/`Server` (1.1), `Sender`/`Receiver` (1.2), or a
    /// service's own such as `FailedAuthentication`.
    pub code: String,
    /// Local part of the first subcode (SOAP 1.2 only).
    pub subcode: Option<String>,
    /// `faultstring` (1.1) or the first `Reason/Text` (1.2).
    pub reason: String,
    /// `detail` / `Detail` as JSON; `null` when absent.
    pub detail: Value,
}

impl Upstream {
    /// The SOAP settings: `Some` for `kind: soap`.
    pub fn soap(&self) -> Option<&SoapSettings> {
        self.settings().soap.as_ref()
    }
}

/// The HTTP call of one SOAP operation: POST to path_and_query, the envelope (Header with the
/// UsernameToken when configured, Body = body_xml, an already-escaped XML fragment rendered by a
/// template), SOAP 1.1: `Content-Type: text/xml; charset=utf-8` + `SOAPAction: "<action>"`
/// (quoted; `""` when None); SOAP 1.2: `Content-Type: application/soap+xml; charset=utf-8;
/// action="<action>"`. An action containing `"`, `\`, CR, LF or non-visible-ASCII is refused.
/// Not idempotent (never retried) unless `idempotent` is true.
pub fn request(
    settings: &SoapSettings,
    path_and_query: String,
    action: Option<&str>,
    body_xml: &str,
    idempotent: bool,
) -> Result<UpstreamRequest, UpstreamError> {
    let nonce = match settings.security {
        Some(_) => *uuid::Uuid::new_v4().as_bytes(),
        None => [0; 16],
    };
    request_at(
        settings,
        path_and_query,
        action,
        body_xml,
        idempotent,
        jiff::Timestamp::now(),
        nonce,
    )
}

/// Same, with the clock and nonce given (tests, benches).
pub fn request_at(
    settings: &SoapSettings,
    path_and_query: String,
    action: Option<&str>,
    body_xml: &str,
    idempotent: bool,
    now: jiff::Timestamp,
    nonce: [u8; 16],
) -> Result<UpstreamRequest, UpstreamError> {
    let action = action.filter(|a| !a.is_empty());
    if let Some(action) = action
        && !action
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        return Err(UpstreamError::InvalidRequest(
            "SOAP action must be visible ASCII without `\"` or `\\`".to_owned(),
        ));
    }
    let header = |text: String| {
        HeaderValue::try_from(text).map_err(|_| {
            UpstreamError::InvalidRequest("SOAP action is not a valid header value".to_owned())
        })
    };
    let headers = match settings.version {
        SoapVersion::V1_1 => vec![
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/xml; charset=utf-8"),
            ),
            (
                SOAP_ACTION,
                header(format!("\"{}\"", action.unwrap_or_default()))?,
            ),
        ],
        SoapVersion::V1_2 => {
            let content_type = match action {
                Some(action) => header(format!(
                    "application/soap+xml; charset=utf-8; action=\"{action}\""
                ))?,
                None => HeaderValue::from_static("application/soap+xml; charset=utf-8"),
            };
            vec![(http::header::CONTENT_TYPE, content_type)]
        }
    };
    Ok(UpstreamRequest {
        method: Method::POST,
        path_and_query,
        headers,
        body: Some(Bytes::from(envelope(settings, body_xml, now, &nonce))),
        idempotent,
    })
}

/// Decodes a SOAP reply (any HTTP status): the Body's content as JSON, or the Fault.
///
/// `declared` names the reply's charset as for `format: xml` (the mapping's `charset`, the
/// `Content-Type`); `list_elements` are element names that always become arrays. Errors are short
/// and name no content: bodies may carry personal data.
pub fn decode_reply(
    body: &[u8],
    declared: Declared<'_>,
    list_elements: &HashSet<String>,
) -> Result<SoapReply, String> {
    let format = Format::Xml {
        list_elements: list_elements.clone(),
    };
    let not_an_envelope = || "reply is not a SOAP envelope".to_owned();
    let Value::Object(mut root) = format.decode_with(body, declared)? else {
        return Err(not_an_envelope());
    };
    let Some(Value::Object(mut envelope)) = root.remove("Envelope") else {
        return Err(not_an_envelope());
    };
    let body = match envelope.remove("Body").map(single_owned) {
        Some(Value::Object(body)) => body,
        // `<soap:Body/>`: an operation without a result.
        Some(Value::String(text)) if text.trim().is_empty() => Map::new(),
        Some(_) => return Err("SOAP Body holds text instead of elements".to_owned()),
        None => return Err("reply is a SOAP envelope without a Body".to_owned()),
    };
    let fault = body.get("Fault").map(fault);
    Ok(SoapReply {
        body: Value::Object(body),
        fault,
    })
}

// === envelope ===

fn envelope(
    settings: &SoapSettings,
    body_xml: &str,
    now: jiff::Timestamp,
    nonce: &[u8; 16],
) -> String {
    let ns = match settings.version {
        SoapVersion::V1_1 => SOAP11_NS,
        SoapVersion::V1_2 => SOAP12_NS,
    };
    let mut out = String::with_capacity(body_xml.len() + ENVELOPE_OVERHEAD);
    out.push_str(r#"<?xml version="1.0" encoding="utf-8"?><soap:Envelope xmlns:soap=""#);
    out.push_str(ns);
    out.push_str(r#"">"#);
    if let Some(security) = &settings.security {
        let created = created(now);
        out.push_str(r#"<soap:Header><wsse:Security soap:mustUnderstand="1" xmlns:wsse=""#);
        out.push_str(WSSE_NS);
        out.push_str(r#"" xmlns:wsu=""#);
        out.push_str(WSU_NS);
        out.push_str(r#""><wsse:UsernameToken><wsse:Username>"#);
        out.push_str(&xml_escape(&security.username));
        out.push_str(r#"</wsse:Username><wsse:Password Type=""#);
        if security.digest {
            out.push_str(PASSWORD_DIGEST);
            out.push_str(r#"">"#);
            let digest = password_digest(nonce, &created, security.password.expose());
            BASE64.encode_string(digest, &mut out);
        } else {
            out.push_str(PASSWORD_TEXT);
            out.push_str(r#"">"#);
            out.push_str(&xml_escape(security.password.expose()));
        }
        out.push_str(r#"</wsse:Password><wsse:Nonce EncodingType=""#);
        out.push_str(BASE64_BINARY);
        out.push_str(r#"">"#);
        BASE64.encode_string(nonce, &mut out);
        out.push_str("</wsse:Nonce><wsu:Created>");
        out.push_str(&created);
        out.push_str("</wsu:Created></wsse:UsernameToken></wsse:Security></soap:Header>");
    }
    out.push_str("<soap:Body>");
    out.push_str(body_xml);
    out.push_str("</soap:Body></soap:Envelope>");
    out
}

/// `wsu:Created`: UTC to the second, `YYYY-MM-DDThh:mm:ssZ`.
fn created(now: jiff::Timestamp) -> String {
    let t = jiff::tz::Offset::UTC.to_datetime(now);
    let mut out = String::with_capacity(20);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    out
}

/// SHA-1(nonce + created + password), the UsernameToken Profile's `PasswordDigest` before
/// Base64.
fn password_digest(nonce: &[u8], created: &str, password: &str) -> [u8; 20] {
    let mut sha = Sha1::new();
    sha.update(nonce);
    sha.update(created.as_bytes());
    sha.update(password.as_bytes());
    sha.finalize().into()
}

// === reply ===

/// An element the decoder made an array (repeated, or listed in `list_elements`): its first.
fn single(value: &Value) -> &Value {
    match value {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    }
}

fn single_owned(value: Value) -> Value {
    match value {
        Value::Array(items) => items.into_iter().next().unwrap_or(Value::Null),
        other => other,
    }
}

/// The text of an element: itself when text-only, its `#text` when it has attributes too.
fn text(value: &Value) -> String {
    match single(value) {
        Value::String(text) => text.trim().to_owned(),
        Value::Object(fields) => fields.get("#text").map(text).unwrap_or_default(),
        _ => String::new(),
    }
}

/// `soap:Client` → `Client`: a QName's local part.
fn local_name(qname: &str) -> String {
    qname
        .rsplit_once(':')
        .map_or(qname, |(_, local)| local)
        .to_owned()
}

fn fault(value: &Value) -> SoapFault {
    let fault = single(value);
    let child = |name: &str| fault.get(name).map(single);
    match child("Code") {
        // SOAP 1.2: Code/Value, Code/Subcode/Value, Reason/Text+, Detail.
        Some(code) => SoapFault {
            code: local_name(&code.get("Value").map(text).unwrap_or_default()),
            subcode: code
                .get("Subcode")
                .and_then(|s| single(s).get("Value"))
                .map(|v| local_name(&text(v))),
            reason: child("Reason")
                .and_then(|r| r.get("Text"))
                .map(text)
                .unwrap_or_default(),
            detail: child("Detail").cloned().unwrap_or(Value::Null),
        },
        // SOAP 1.1: faultcode, faultstring, detail.
        None => SoapFault {
            code: local_name(&child("faultcode").map(text).unwrap_or_default()),
            subcode: None,
            reason: child("faultstring").map(text).unwrap_or_default(),
            detail: child("detail").cloned().unwrap_or(Value::Null),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::config::Secret;
    use quick_xml::events::Event;
    use serde_json::json;

    const NOW: &str = "2024-03-05T07:08:09.750Z";
    const NONCE: [u8; 16] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f,
    ];

    fn now() -> jiff::Timestamp {
        NOW.parse().expect("timestamp")
    }

    fn settings(version: SoapVersion, security: Option<(&str, &str, bool)>) -> SoapSettings {
        SoapSettings {
            version,
            security: security.map(|(username, password, digest)| WsSecurity {
                username: username.to_owned(),
                password: Secret::new(password),
                digest,
            }),
        }
    }

    fn render(settings: &SoapSettings, action: Option<&str>, body: &str) -> UpstreamRequest {
        request_at(settings, String::new(), action, body, false, now(), NONCE)
            .expect("valid request")
    }

    fn body_text(req: &UpstreamRequest) -> String {
        String::from_utf8(req.body.clone().expect("body").to_vec()).expect("utf-8")
    }

    fn header<'a>(req: &'a UpstreamRequest, name: &str) -> Option<&'a str> {
        req.headers
            .iter()
            .find(|(n, _)| n.as_str() == name)
            .map(|(_, v)| v.to_str().expect("ascii"))
    }

    /// Parses the whole document with quick-xml, failing on any malformation, and returns the
    /// unescaped text of every element named `local`.
    fn texts_of(xml: &str, local: &str) -> Vec<String> {
        let mut reader = quick_xml::Reader::from_str(xml);
        reader.config_mut().check_end_names = true;
        let mut depth = 0usize;
        let mut inside = false;
        let mut found = Vec::new();
        loop {
            match reader.read_event().expect("well-formed XML") {
                Event::Start(e) => {
                    depth += 1;
                    inside = e.local_name().as_ref() == local.as_bytes();
                    if inside {
                        found.push(String::new());
                    }
                }
                Event::End(_) => {
                    depth -= 1;
                    inside = false;
                }
                Event::Text(t) if inside => {
                    let raw = t.decode().expect("utf-8");
                    let text = quick_xml::escape::unescape(&raw).expect("entities");
                    found.last_mut().expect("open").push_str(&text);
                }
                Event::GeneralRef(r) if inside => {
                    let name = String::from_utf8(r.to_vec()).expect("utf-8");
                    let resolved = match name.as_str() {
                        "lt" => "<",
                        "gt" => ">",
                        "amp" => "&",
                        "quot" => "\"",
                        "apos" => "'",
                        other => panic!("unexpected entity {other}"),
                    };
                    found.last_mut().expect("open").push_str(resolved);
                }
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(depth, 0, "balanced");
        found
    }

    #[test]
    fn soap_1_1_envelope_has_the_exact_shape_and_headers() {
        let req = render(
            &settings(SoapVersion::V1_1, None),
            Some("http://dealer.example/crm/SubmitLead"),
            "<SubmitLead xmlns=\"urn:crm\"><Name>Jane</Name></SubmitLead>",
        );
        assert_eq!(req.method, Method::POST);
        assert!(!req.idempotent);
        assert_eq!(req.path_and_query, "");
        assert_eq!(
            body_text(&req),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">\
             <soap:Body><SubmitLead xmlns=\"urn:crm\"><Name>Jane</Name></SubmitLead></soap:Body>\
             </soap:Envelope>"
        );
        assert_eq!(
            header(&req, "content-type"),
            Some("text/xml; charset=utf-8")
        );
        assert_eq!(
            header(&req, "soapaction"),
            Some("\"http://dealer.example/crm/SubmitLead\"")
        );

        let no_action = render(&settings(SoapVersion::V1_1, None), None, "<X/>");
        assert_eq!(header(&no_action, "soapaction"), Some("\"\""));
    }

    #[test]
    fn soap_1_2_envelope_carries_the_action_in_the_content_type() {
        let req = render(
            &settings(SoapVersion::V1_2, Some(("demo-crm", "pw", true))),
            Some("urn:SubmitLead"),
            "<SubmitLead/>",
        );
        assert_eq!(
            header(&req, "content-type"),
            Some("application/soap+xml; charset=utf-8; action=\"urn:SubmitLead\"")
        );
        assert_eq!(header(&req, "soapaction"), None);
        let body = body_text(&req);
        let expected = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <soap:Envelope xmlns:soap=\"http://www.w3.org/2003/05/soap-envelope\">\
             <soap:Header><wsse:Security soap:mustUnderstand=\"1\" xmlns:wsse=\"{WSSE_NS}\" \
             xmlns:wsu=\"{WSU_NS}\"><wsse:UsernameToken><wsse:Username>demo-crm</wsse:Username>\
             <wsse:Password Type=\"{PASSWORD_DIGEST}\">{digest}</wsse:Password>\
             <wsse:Nonce EncodingType=\"{BASE64_BINARY}\">AAECAwQFBgcICQoLDA0ODw==</wsse:Nonce>\
             <wsu:Created>2024-03-05T07:08:09Z</wsu:Created></wsse:UsernameToken>\
             </wsse:Security></soap:Header><soap:Body><SubmitLead/></soap:Body></soap:Envelope>",
            digest = BASE64.encode(password_digest(&NONCE, "2024-03-05T07:08:09Z", "pw")),
        );
        assert_eq!(body, expected);

        let no_action = render(&settings(SoapVersion::V1_2, None), None, "<X/>");
        assert_eq!(
            header(&no_action, "content-type"),
            Some("application/soap+xml; charset=utf-8")
        );
    }

    #[test]
    fn password_digest_matches_an_independent_computation() {
        // Computed outside Rust:
        //   printf '%s' 000102030405060708090a0b0c0d0e0f | xxd -r -p > v
        //   printf '%s' '2024-03-05T07:08:09Z' >> v; printf '%s' 'pässw&rd<1>' >> v
        //   openssl dgst -sha1 -binary v | base64
        let req = render(
            &settings(SoapVersion::V1_1, Some(("demo-crm", "pässw&rd<1>", true))),
            None,
            "<X/>",
        );
        let body = body_text(&req);
        assert_eq!(
            texts_of(&body, "Password"),
            ["6lYDjNz58ioYvjOD/QfIkkSK2xU="],
            "digest of the fixed vector"
        );
        assert_eq!(texts_of(&body, "Nonce"), ["AAECAwQFBgcICQoLDA0ODw=="]);
        assert_eq!(texts_of(&body, "Created"), ["2024-03-05T07:08:09Z"]);
        assert!(
            !body.contains("pässw"),
            "a digest password never travels in clear"
        );
    }

    #[test]
    fn text_passwords_travel_escaped_with_nonce_and_created() {
        let req = render(
            &settings(SoapVersion::V1_1, Some(("demo-crm", "a<b&c\"d]]>e", false))),
            None,
            "<X/>",
        );
        let body = body_text(&req);
        assert!(body.contains(&format!("<wsse:Password Type=\"{PASSWORD_TEXT}\">")));
        assert_eq!(texts_of(&body, "Password"), ["a<b&c\"d]]>e"]);
        assert_eq!(texts_of(&body, "Nonce"), ["AAECAwQFBgcICQoLDA0ODw=="]);
        assert_eq!(texts_of(&body, "Created"), ["2024-03-05T07:08:09Z"]);
    }

    #[test]
    fn hostile_values_keep_the_envelope_well_formed() {
        let hostile = "</wsse:Username><evil attr=\"x\"/>&amp; ]]> 'é漢字🚗";
        let body_xml = format!("<Note>{}</Note>", xml_escape(hostile));
        for version in [SoapVersion::V1_1, SoapVersion::V1_2] {
            for digest in [true, false] {
                let req = render(
                    &settings(version, Some((hostile, hostile, digest))),
                    Some("urn:x"),
                    &body_xml,
                );
                let body = body_text(&req);
                assert_eq!(texts_of(&body, "Username"), [hostile]);
                assert_eq!(texts_of(&body, "Note"), [hostile]);
                if !digest {
                    assert_eq!(texts_of(&body, "Password"), [hostile]);
                }
                assert_eq!(texts_of(&body, "evil"), Vec::<String>::new());
            }
        }
    }

    #[test]
    fn actions_that_could_break_the_header_are_refused() {
        let s = settings(SoapVersion::V1_1, None);
        for bad in [
            "urn:a\"b",
            "urn:a\r\nX-Evil: 1",
            "urn:a b",
            "urn:é",
            "urn:a\\b",
        ] {
            let result = request_at(&s, String::new(), Some(bad), "<X/>", false, now(), NONCE);
            assert!(
                matches!(result, Err(UpstreamError::InvalidRequest(_))),
                "{bad:?} must be refused"
            );
        }
    }

    #[test]
    fn request_marks_idempotency_as_told_and_draws_fresh_nonces() {
        let s = settings(SoapVersion::V1_1, Some(("u", "p", true)));
        let a = request(&s, "/svc".to_owned(), None, "<X/>", true).expect("valid");
        let b = request(&s, "/svc".to_owned(), None, "<X/>", false).expect("valid");
        assert!(a.idempotent);
        assert!(!b.idempotent);
        assert_eq!(a.path_and_query, "/svc");
        assert_ne!(
            texts_of(&body_text(&a), "Nonce"),
            texts_of(&body_text(&b), "Nonce")
        );
    }

    #[test]
    fn decode_reply_returns_the_body_content() {
        let reply = br#"<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">
  <soap:Header><x:Trace xmlns:x="urn:x">1</x:Trace></soap:Header>
  <soap:Body>
    <SubmitLeadResponse xmlns="urn:crm">
      <LeadId>L-1</LeadId><Warning>a</Warning>
    </SubmitLeadResponse>
  </soap:Body>
</soap:Envelope>"#;
        let lists = HashSet::from(["Warning".to_owned()]);
        let decoded = decode_reply(reply, Declared::default(), &lists).expect("decodes");
        assert_eq!(
            decoded,
            SoapReply {
                body: json!({"SubmitLeadResponse": {"LeadId": "L-1", "Warning": ["a"]}}),
                fault: None,
            }
        );
        let empty = br#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body/></s:Envelope>"#;
        assert_eq!(
            decode_reply(empty, Declared::default(), &HashSet::new())
                .expect("decodes")
                .body,
            json!({})
        );
    }

    #[test]
    fn decode_reply_reads_the_charset_the_reply_names() {
        // An old SOAP stack answering in Latin-1, saying so only in the Content-Type.
        let reply = b"<s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\"><s:Body>\
            <R><Name>Ren\xE9e</Name></R></s:Body></s:Envelope>";
        let headers = http::HeaderMap::from_iter([(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/soap+xml; charset=ISO-8859-1"),
        )]);
        let decoded =
            decode_reply(reply, Declared::reply(None, &headers), &HashSet::new()).expect("decodes");
        assert_eq!(decoded.body, json!({"R": {"Name": "Renée"}}));
    }

    #[test]
    fn decode_reply_reads_a_soap_1_1_fault() {
        let reply = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"
    xmlns:wsse="http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd">
  <soap:Body><soap:Fault>
    <faultcode>wsse:FailedAuthentication</faultcode>
    <faultstring xml:lang="en">The security token could not be authenticated</faultstring>
    <detail><e:Info xmlns:e="urn:e">expired</e:Info></detail>
  </soap:Fault></soap:Body>
</soap:Envelope>"#;
        let decoded = decode_reply(reply, Declared::default(), &HashSet::new()).expect("decodes");
        assert_eq!(
            decoded.fault,
            Some(SoapFault {
                code: "FailedAuthentication".to_owned(),
                subcode: None,
                reason: "The security token could not be authenticated".to_owned(),
                detail: json!({"Info": "expired"}),
            })
        );
        assert!(decoded.body.get("Fault").is_some());

        let client = br#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><s:Fault><faultcode>s:Client</faultcode><faultstring>bad</faultstring></s:Fault></s:Body></s:Envelope>"#;
        let fault = decode_reply(client, Declared::default(), &HashSet::new())
            .expect("decodes")
            .fault
            .expect("fault");
        assert_eq!(
            (fault.code.as_str(), fault.reason.as_str(), &fault.detail),
            ("Client", "bad", &Value::Null)
        );
    }

    #[test]
    fn decode_reply_reads_a_soap_1_2_fault_with_subcode() {
        let reply = br#"<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope"
    xmlns:crm="urn:crm">
  <env:Body><env:Fault>
    <env:Code><env:Value>env:Sender</env:Value>
      <env:Subcode><env:Value>crm:DuplicateLead</env:Value></env:Subcode></env:Code>
    <env:Reason><env:Text xml:lang="en">Lead already exists</env:Text>
      <env:Text xml:lang="de">Lead existiert bereits</env:Text></env:Reason>
    <env:Detail><crm:ExistingLeadId>L-7</crm:ExistingLeadId></env:Detail>
  </env:Fault></env:Body>
</env:Envelope>"#;
        let fault = decode_reply(reply, Declared::default(), &HashSet::new())
            .expect("decodes")
            .fault
            .expect("fault");
        assert_eq!(
            fault,
            SoapFault {
                code: "Sender".to_owned(),
                subcode: Some("DuplicateLead".to_owned()),
                reason: "Lead already exists".to_owned(),
                detail: json!({"ExistingLeadId": "L-7"}),
            }
        );
    }

    #[test]
    fn decode_reply_refuses_what_is_not_an_envelope() {
        let secret = "jane.doe@example.com";
        for body in [
            format!("<html><body>{secret}</body></html>"),
            format!("{{\"email\": \"{secret}\"}}"),
            format!("<soap:Envelope xmlns:soap=\"{SOAP11_NS}\"><x>{secret}</x></soap:Envelope>"),
            format!(
                "<soap:Envelope xmlns:soap=\"{SOAP11_NS}\"><soap:Body>{secret}</soap:Body></soap:Envelope>"
            ),
            String::new(),
        ] {
            let error = decode_reply(body.as_bytes(), Declared::default(), &HashSet::new())
                .expect_err("not SOAP");
            assert!(!error.contains(secret), "{error} leaks the body");
            assert!(error.len() < 120, "{error} is short");
        }
    }
}
