//! Dry runs (`aap-gateway render`): the exact upstream request(s) a dealer's mapping sends for an
//! AAP request, and with a canned upstream reply the AAP reply it builds — through the same
//! engine `serve` runs, with no network. Replaces the "deliberately wrong `expect_upstream`"
//! trick of finding out what a mapping sends.
//!
//! What is printed is what goes on the wire: the upstream's base URL, static headers,
//! `User-Agent`, credentials and (SOAP) the envelope are added as the upstream client adds them,
//! with every secret masked: credential headers, WS-Security passwords, and any value that came
//! from a `${NAME}` variable (mapping files take their keys that way).

use std::fmt::Write as _;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::Value;

use crate::app::{App, Dealer};
use crate::engine::Handler;
use crate::engine::proxy::Canned;
use crate::engine::request::Rendered;
use crate::mapping::Example;
use crate::protocol::Skill;
use crate::tools::examples;
use crate::upstream::Upstream;
use crate::upstream::config::UpstreamAuth;

/// What replaces a secret in printed requests.
pub const MASK: &str = "****";

/// The upstream reply to pretend, for the AAP reply.
#[derive(Debug, Clone)]
pub struct CannedReply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// The AAP `data` of `input`: a DataPart's `data`, a `SendMessageRequest`, or a whole JSON-RPC
/// `SendMessage` call (what a buyer's log holds).
pub fn aap_data(input: Value) -> Result<Value, String> {
    // An AAP request names its `type`; a lead's own `message` (the buyer's text) is no envelope.
    if input.get("type").and_then(Value::as_str).is_some() {
        return Ok(input);
    }
    let message = input
        .pointer("/params/message")
        .or_else(|| input.get("message"))
        .filter(|m| m.is_object())
        .cloned();
    let data = match message {
        Some(m) => m["parts"]
            .as_array()
            .and_then(|parts| parts.iter().find_map(|p| p.get("data")))
            .cloned()
            .ok_or("the message has no DataPart (`parts[].data`)")?,
        None => input,
    };
    if data.get("type").and_then(Value::as_str).is_none() {
        return Err("not an AAP request: expected an object with `type`, e.g. \
             {\"type\": \"inventory.search.request\", …}, or a SendMessage call"
            .to_owned());
    }
    Ok(data)
}

/// The dry run of `data` at `dealer`, as text. `secrets` are values to mask wherever they show
/// (those the mapping files were given through `${NAME}`).
pub async fn dry_run(
    app: &App,
    dealer: &Dealer,
    mut data: Value,
    reply: Option<CannedReply>,
    secrets: &[String],
) -> Result<String, String> {
    let ty = data.get("type").and_then(Value::as_str).unwrap_or_default();
    let skill = Skill::from_request_type(ty).ok_or_else(|| {
        format!(
            "`{ty}` is not an AAP request type; use one of {}",
            Skill::ALL.map(Skill::request_type).join(", ")
        )
    })?;
    let handler = dealer.handler_for(skill).ok_or_else(|| {
        format!(
            "dealer `{}` does not serve {skill} (UNSUPPORTED_SKILL); it serves {}",
            dealer.id(),
            dealer
                .skills()
                .map(Skill::id)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    crate::binding::send_message::normalize_numbers(&mut data);
    let violations = app.schemas.check_request(skill, &data);
    if !violations.is_empty() {
        let code = crate::schema::classify(skill, &data, &violations);
        let mut text = format!("the request is refused before any upstream call: {code}\n");
        for v in &violations {
            let _ = writeln!(
                text,
                "  {}: {}: {}",
                v.instance_location, v.keyword, v.error
            );
        }
        return Err(text);
    }
    let canned = Canned::new(
        StatusCode::from_u16(reply.as_ref().map_or(200, |r| r.status))
            .map_err(|e| format!("upstream status: {e}"))?,
        match reply.as_ref().and_then(|r| r.content_type.as_deref()) {
            Some(ct) => {
                Some(HeaderValue::from_str(ct).map_err(|e| format!("upstream content type: {e}"))?)
            }
            None => None,
        },
        Bytes::from(reply.as_ref().map(|r| r.body.clone()).unwrap_or_default()),
    );
    let outcome = examples::answer(handler, &canned, &data).await;
    let masks = masks(handler, secrets);
    let mut out = format!("dealer {} · {skill} · {}\n", dealer.id(), handler.source());
    out.push_str(&calls_text(handler, &canned, &masks));
    let called = canned.seen.lock().map(|s| !s.is_empty()).unwrap_or(false);
    match (reply, outcome) {
        // Failed before any call (a template that cannot render, a rule of the gateway's).
        (None, Err(error)) if !called => {
            let _ = write!(
                out,
                "\n── no call: {} ──\n",
                mask(&error.to_string(), &masks)
            );
        }
        (None, _) => out.push_str(
            "\n(no upstream reply given: pass --upstream-reply FILE to see the AAP reply; later \
             pages or calls depend on it)\n",
        ),
        (Some(_), Ok(data)) => {
            let reply = crate::protocol::Reply::new(skill, data, None);
            let _ = write!(
                out,
                "\n── AAP reply ──\n{}\n",
                serde_json::to_string_pretty(&*reply.payload.to_value()).unwrap_or_default()
            );
            let violations = app.schemas.check_response(skill, &reply.payload);
            if !violations.is_empty() {
                out.push_str("\nthe reply breaks the AAP response schema (a mapping defect):\n");
                for v in &violations {
                    let _ = writeln!(out, "  {}: {}: {}", v.instance_location, v.keyword, v.error);
                }
            }
        }
        (Some(_), Err(error)) => {
            let wire = crate::binding::wire_error::to_wire(
                &error,
                &crate::binding::wire_error::ErrorStamp::now(),
            );
            let _ = write!(
                out,
                "\n── AAP error ──\n{}: {}\n",
                wire.reason, wire.message
            );
            if wire.reason == "INTERNAL_ERROR" {
                // The cause a buyer never sees, for the person fixing the mapping.
                let _ = writeln!(out, "cause: {}", mask(&error.to_string(), &masks));
            }
        }
    }
    Ok(out)
}

/// The upstream calls a passing example makes, as `render` prints them (`test-mappings
/// --show-requests`).
pub async fn example_requests(dealer: &Dealer, example: &Example, secrets: &[String]) -> String {
    let Some(handler) = dealer.handler_for(example.skill) else {
        return String::new();
    };
    let Ok(canned) = examples::canned(example) else {
        return String::new();
    };
    let mut request = example.case.request.clone();
    crate::binding::send_message::normalize_numbers(&mut request);
    let _ = examples::answer(handler, &canned, &request).await;
    calls_text(handler, &canned, &masks(handler, secrets))
}

/// What to mask: `secrets` and the handler's upstream's own, longest first (a secret holding
/// another is masked whole); short values are not masked (they would hide ordinary text).
fn masks(handler: &Handler, secrets: &[String]) -> Vec<String> {
    let mut masks: Vec<String> = secrets.to_vec();
    if let Some(u) = examples::upstream_of(handler) {
        masks.extend(upstream_secrets(u));
    }
    masks.retain(|s| s.len() >= 4);
    masks.sort_by_key(|s| std::cmp::Reverse(s.len()));
    masks.dedup();
    masks
}

/// Every call `canned` recorded, as sent on the wire.
fn calls_text(handler: &Handler, canned: &Canned, masks: &[String]) -> String {
    let calls = canned.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let upstream = examples::upstream_of(handler);
    let mut out = String::new();
    if calls.is_empty() {
        match upstream {
            Some(_) => out.push_str("\nno upstream call\n"),
            None => out.push_str(
                "\nno HTTP upstream call (answered from configuration, or a lead delivered by \
                 e-mail)\n",
            ),
        }
    }
    for (i, call) in calls.iter().enumerate() {
        let name = upstream.map_or("upstream", Upstream::name);
        let _ = write!(out, "\n── upstream call {} ({name}) ──\n", i + 1);
        match upstream {
            Some(u) => out.push_str(&wire_text(u, call, masks)),
            None => out.push_str(&mask(&call.path_and_query, masks)),
        }
    }
    out
}

/// The secrets an upstream's settings hold (auth header values, OAuth2 and WS-Security secrets).
fn upstream_secrets(upstream: &Upstream) -> Vec<String> {
    let settings = upstream.settings();
    let mut out = Vec::new();
    match &settings.auth {
        Some(UpstreamAuth::Static { value, .. }) => {
            if let Ok(v) = value.to_str() {
                out.push(v.to_owned());
                // `Bearer <token>`, `Basic <b64>`: the credential alone, too.
                if let Some((_, token)) = v.split_once(' ') {
                    out.push(token.to_owned());
                }
            }
        }
        Some(UpstreamAuth::OAuth2(o)) => out.push(o.client_secret.expose().to_owned()),
        None => {}
    }
    if let Some(security) = settings.soap.as_ref().and_then(|s| s.security.as_ref()) {
        out.push(security.password.expose().to_owned());
    }
    out
}

/// The request as the upstream client sends it: method and URL, headers, body.
fn wire_text(upstream: &Upstream, call: &Rendered, masks: &[String]) -> String {
    let settings = upstream.settings();
    let (headers, body) = match upstream.soap() {
        Some(soap) => match crate::upstream::soap::request(
            soap,
            call.path_and_query.clone(),
            call.action.as_deref(),
            call.body.as_deref().unwrap_or_default(),
            false,
        ) {
            Ok(mut req) => {
                req.headers
                    .retain(|(name, _)| !call.headers.iter().any(|(n, _)| n == name));
                req.headers.extend(call.headers.iter().cloned());
                let body = req
                    .body
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .map(|b| mask_passwords(&b));
                (req.headers, body)
            }
            Err(e) => (
                call.headers.clone(),
                Some(format!("(not a valid SOAP call: {e})")),
            ),
        },
        None => (call.headers.clone(), call.body.clone()),
    };
    // The client's order: static headers, replaced by the call's, then the credential.
    let mut all: Vec<(HeaderName, String)> = settings
        .headers
        .iter()
        .filter(|(n, _)| !headers.iter().any(|(h, _)| h == n))
        .map(|(n, v)| (n.clone(), shown(n, v)))
        .collect();
    all.extend(headers.iter().map(|(n, v)| (n.clone(), shown(n, v))));
    match &settings.auth {
        Some(UpstreamAuth::Static { name, .. }) => all.push((name.clone(), MASK.to_owned())),
        Some(UpstreamAuth::OAuth2(o)) => all.push((
            http::header::AUTHORIZATION,
            format!("Bearer {MASK} (token from {})", o.token_url),
        )),
        None => {}
    }
    if !all.iter().any(|(n, _)| n == http::header::USER_AGENT) {
        all.push((
            http::header::USER_AGENT,
            concat!("aap-gateway/", env!("CARGO_PKG_VERSION")).to_owned(),
        ));
    }
    let base = upstream.base_url().as_str();
    let url = match call.path_and_query.bytes().next() {
        Some(b'/') => format!("{}{}", base.trim_end_matches('/'), call.path_and_query),
        _ => format!("{base}{}", call.path_and_query),
    };
    let method = if upstream.soap().is_some() {
        "POST"
    } else {
        call.method.as_str()
    };
    let mut text = format!("{method} {}\n", mask(&url, masks));
    for (name, value) in all {
        let _ = writeln!(text, "{name}: {}", mask(&value, masks));
    }
    if let Some(body) = body {
        let _ = write!(text, "\n{}\n", mask(&pretty_json(&body), masks));
    }
    text
}

/// A header's value as printed: credentials and sensitive values masked.
fn shown(name: &HeaderName, value: &HeaderValue) -> String {
    const CREDENTIALS: &[&str] = &[
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",
        "api-key",
        "apikey",
    ];
    if value.is_sensitive() || CREDENTIALS.contains(&name.as_str()) {
        MASK.to_owned()
    } else {
        String::from_utf8_lossy(value.as_bytes()).into_owned()
    }
}

/// Every occurrence of a secret in `text` (also percent-encoded, as in a query) masked.
pub fn mask(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        out = out.replace(s.as_str(), MASK);
        let encoded = percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        if encoded != *s {
            out = out.replace(&encoded, MASK);
        }
    }
    out
}

/// WS-Security `Password` elements emptied of their text (digest or clear).
fn mask_passwords(xml: &str) -> String {
    let mut out = String::with_capacity(xml.len());
    let mut rest = xml;
    while let Some(start) = find_password_open(rest) {
        let Some(close) = rest[start..].find('>') else {
            break;
        };
        let content_start = start + close + 1;
        let Some(end) = rest[content_start..].find("</") else {
            break;
        };
        out.push_str(&rest[..content_start]);
        out.push_str(MASK);
        rest = &rest[content_start + end..];
    }
    out.push_str(rest);
    out
}

/// The start of the next `<…:Password` or `<Password` open tag.
fn find_password_open(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("Password") {
        let at = from + i;
        let before = &text[..at];
        let tag_start = before.rfind('<')?;
        let name = &text[tag_start + 1..at];
        let after = text[at + "Password".len()..].chars().next();
        if !name.starts_with('/')
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || c == ':' || c == '_')
            && matches!(after, Some(' ' | '>'))
        {
            return Some(tag_start);
        }
        from = at + 1;
    }
    None
}

/// A JSON body pretty-printed (easier to read and diff); anything else as is.
fn pretty_json(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => {
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| body.to_owned())
        }
        _ => body.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn passwords_and_secrets_are_masked() {
        let xml = r#"<wsse:UsernameToken><wsse:Username>u</wsse:Username><wsse:Password Type="x#PasswordText">hunter22</wsse:Password><wsse:Nonce>n</wsse:Nonce></wsse:UsernameToken>"#;
        let masked = mask_passwords(xml);
        assert!(!masked.contains("hunter22"), "{masked}");
        assert!(masked.contains("<wsse:Username>u</wsse:Username>"));
        assert!(masked.contains("<wsse:Nonce>n</wsse:Nonce>"));
        let secrets = vec!["s3cr3t/key".to_owned()];
        assert_eq!(
            mask("/v?k=s3cr3t%2Fkey&x=s3cr3t/key", &secrets),
            "/v?k=****&x=****"
        );
    }

    #[test]
    fn requests_are_read_in_every_shape() {
        let data = json!({"type": "inventory.search.request"});
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"parts": [{"data": data.clone()}]}}});
        assert_eq!(aap_data(call), Ok(data.clone()));
        assert_eq!(aap_data(data.clone()), Ok(data));
        assert!(aap_data(json!({"filters": {}})).is_err());
        // A lead DataPart carries the buyer's `message`: it is the request, not an envelope.
        let lead = json!({"type": "lead.submit.request", "message": "Is it still available?"});
        assert_eq!(aap_data(lead.clone()), Ok(lead));
    }
}
