//! Runs the example cases embedded in mapping files offline: the AAP request goes through the
//! real engine, the upstream is a canned reply, and the rendered call and the AAP reply are
//! compared with what the example expects (subset match). Used by `test-mappings`, `check` and
//! the test suite.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Map, Value, json};

use crate::engine::Handler;
use crate::engine::lead::LeadMapping;
use crate::engine::proxy::{Canned, Transport};
use crate::error::{AapCode, AapError};
use crate::mapping::Example;
use crate::protocol::{Data, Reply, search};
use crate::schema::Schemas;

/// Why an example failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The reply the mapping built breaks the AAP response schema (a mapping defect).
    InvalidReply(Vec<String>),
    /// The example's expectations were not met; one line per difference.
    Mismatch(Vec<String>),
    /// A call the mapping rendered is malformed (a JSON body that is not JSON, XML that is not
    /// well-formed) or the mapping hides every listing: mapping defects, whatever the example
    /// expects.
    InvalidMapping(Vec<String>),
}

impl Failure {
    pub fn lines(&self) -> &[String] {
        match self {
            Failure::InvalidReply(l) | Failure::Mismatch(l) | Failure::InvalidMapping(l) => l,
        }
    }
}

/// Runs one example with `handler`.
pub async fn run(example: &Example, handler: &Handler, schemas: &Schemas) -> Result<(), Failure> {
    let case = &example.case;
    let mut request = case.request.clone();
    crate::binding::send_message::normalize_numbers(&mut request);
    let violations = schemas.check_request(example.skill, &request);
    if !violations.is_empty() {
        let code = crate::schema::classify(example.skill, &request, &violations);
        return match &case.expect_error {
            Some(expected) if expected == code.as_str() => Ok(()),
            _ => Err(Failure::Mismatch(
                violations
                    .iter()
                    .map(|v| {
                        format!(
                            "request {}: {}: {}",
                            v.instance_location, v.keyword, v.error
                        )
                    })
                    .collect(),
            )),
        };
    }
    let canned = canned(example)?;
    let outcome = answer(handler, &canned, &request).await;
    let soap = upstream_of(handler).is_some_and(|u| u.soap().is_some());
    let calls = canned.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let malformed: Vec<String> = calls
        .iter()
        .filter_map(|call| malformed_body(call, soap))
        .collect();
    if !malformed.is_empty() {
        return Err(Failure::InvalidMapping(malformed));
    }
    if let (Ok(data), Some(expected)) = (&outcome, &case.expect)
        && example.skill == crate::protocol::Skill::InventorySearch
        && hides_everything(data, expected, canned.records.load(Ordering::Relaxed))
    {
        return Err(Failure::InvalidMapping(vec![
            "the reply has no vehicles although the upstream's has records: every listing was \
             dropped — a unit whose `status` is not `available`, `intransit` or `pending` is \
             never shown (does the item mapping set `status`?), and a listing the AAP schema \
             refuses is dropped (the log line `listings the AAP listing schema refuses` names \
             its failing fields); if this example shows exactly that, expect `total: 0`"
                .to_owned(),
        ]));
    }
    let mut diffs = Vec::new();
    if let Some(expected) = &case.expect_upstream {
        let seen = canned
            .seen
            .lock()
            .map(|s| s.first().cloned())
            .unwrap_or_default();
        match seen {
            Some(call) => {
                let (path, query) = split_query(&call.path_and_query);
                let mut headers = Map::new();
                for (name, value) in &call.headers {
                    headers.insert(name.to_string(), json!(value.to_str().unwrap_or_default()));
                }
                let actual = json!({
                    "method": call.method.as_str(),
                    "path": path,
                    "query": query,
                    "headers": headers,
                    "body": call.body,
                });
                subset("upstream", expected, &actual, &mut diffs);
            }
            None => diffs.push("upstream: no call was made".to_owned()),
        }
    }
    match outcome {
        Ok(data) => {
            if let Some(code) = &case.expect_error {
                diffs.push(format!("expected error {code}, got a reply"));
            }
            let reply = Reply::new(example.skill, data, None);
            let violations = schemas.check_response(example.skill, &reply.payload);
            if !violations.is_empty() {
                return Err(Failure::InvalidReply(
                    violations
                        .iter()
                        .map(|v| {
                            format!("reply {}: {}: {}", v.instance_location, v.keyword, v.error)
                        })
                        .collect(),
                ));
            }
            if let Some(expected) = &case.expect {
                subset("reply", expected, &reply.payload.data(), &mut diffs);
            }
        }
        Err(error) => {
            let code = error.aap_code().map(AapCode::as_str);
            match (&case.expect_error, code) {
                (Some(expected), Some(code)) if expected == code => {}
                (Some(expected), _) => {
                    diffs.push(format!("expected error {expected}, got: {error}"))
                }
                (None, _) => diffs.push(format!("unexpected error: {error}")),
            }
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(Failure::Mismatch(diffs))
    }
}

/// The response `data` `handler` builds for a validated `request` when every upstream call gets
/// `canned`'s reply (which records the calls): examples, and `render`'s dry runs.
pub async fn answer(
    handler: &Handler,
    canned: &Canned,
    request: &Value,
) -> Result<Value, AapError> {
    match handler {
        Handler::Static(reply) => Ok(reply.payload.data()),
        Handler::Proxy(m) => m
            .execute_with(Transport::Canned(canned), request)
            .await
            .map(Data::into_value),
        Handler::DerivedFacets(m) => {
            m.facets(Transport::Canned(canned), search::filters(request))
                .await
        }
        Handler::ScannedVehicle(v) => v.execute(Some(canned), request).await.map(Data::into_value),
        Handler::Feed { skill, feed } => match feed.fetch(Transport::Canned(canned)).await {
            // Every record of the example dropped: say so and why, not an empty page.
            Ok(snapshot) => match snapshot.why_nothing_listable() {
                Some(why) => Err(AapError::Internal(format!(
                    "{}: the example's feed lists no vehicle: {why}",
                    feed.file
                ))),
                None => snapshot.answer(*skill, request).map(Data::into_value),
            },
            Err(e) => Err(e),
        },
        Handler::Lead(lead) => run_lead(lead, canned, request).await,
    }
}

/// The HTTP upstream `handler` calls, if it calls one (a lead delivered by mail does not).
pub fn upstream_of(handler: &Handler) -> Option<&crate::upstream::Upstream> {
    match handler {
        Handler::Proxy(m) | Handler::DerivedFacets(m) => Some(m.upstream.as_ref()),
        Handler::ScannedVehicle(v) => {
            Some(v.detail.as_ref().unwrap_or(&v.search).upstream.as_ref())
        }
        Handler::Feed { feed, .. } => Some(feed.upstream.as_ref()),
        Handler::Lead(lead) => match &lead.destination {
            crate::engine::lead::Destination::Http(m) => Some(m.upstream.as_ref()),
            crate::engine::lead::Destination::Mail(_) => None,
        },
        Handler::Static(_) => None,
    }
}

/// Why a rendered call's body is malformed for its format, if it is: a JSON body must parse, and
/// an XML one (a SOAP Body's content, an ADF document) must be well-formed.
fn malformed_body(call: &crate::engine::request::Rendered, soap: bool) -> Option<String> {
    let body = call.body.as_deref()?;
    let content_type = call
        .headers
        .iter()
        .find(|(n, _)| n == http::header::CONTENT_TYPE)
        .and_then(|(_, v)| v.to_str().ok())
        .unwrap_or_default();
    if content_type.contains("json") {
        return serde_json::from_str::<serde::de::IgnoredAny>(body)
            .err()
            .map(|e| format!("the rendered JSON body is not JSON ({e}): {body}"));
    }
    if soap || content_type.contains("xml") {
        return xml_problem(body)
            .map(|e| format!("the rendered XML body is not well-formed ({e}): {body}"));
    }
    None
}

/// The first well-formedness problem of an XML document or fragment.
fn xml_problem(text: &str) -> Option<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut depth = 0usize;
    loop {
        match reader.read_event() {
            Ok(Event::Start(_)) => depth += 1,
            Ok(Event::End(_)) => depth = depth.saturating_sub(1),
            Ok(Event::Eof) if depth == 0 => return None,
            Ok(Event::Eof) => return Some(format!("{depth} element(s) left open")),
            Ok(_) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
}

/// Whether a search example's reply has no vehicles while its canned upstream reply has records
/// and the example does not say it expects none.
/// A page past the end (`skip` beyond a `total` above 0) hid nothing: the example's own
/// expectations say whether it is what was meant.
fn hides_everything(data: &Value, expected: &Value, upstream_records: usize) -> bool {
    let empty = data["vehicles"].as_array().is_some_and(Vec::is_empty)
        && data["total"].as_u64().is_none_or(|t| t == 0);
    let expects_none = expected.get("total") == Some(&json!(0))
        || expected["vehicles"].as_array().is_some_and(Vec::is_empty);
    empty && !expects_none && upstream_records > 0
}

/// A lead example: the gateway's consent and dealer rules, then delivery to the canned CRM; the
/// data is completed as the live reply would be (dealer contact).
async fn run_lead(lead: &LeadMapping, canned: &Canned, request: &Value) -> Result<Value, AapError> {
    let now = jiff::Timestamp::now();
    crate::consent::check(request, now, &lead.policy.follow_up)?;
    lead.check_request(request)?;
    let fingerprint = crate::idempotency::fingerprint(request);
    let facts = lead.facts(request, &fingerprint, now, None, None);
    let data = lead
        .deliver(Some(canned), request, &facts)
        .await
        .map_err(|u| u.error)?;
    let data = lead
        .settle(data, request, &facts, std::time::Instant::now(), None)
        .await
        .map_err(|u| u.error)?;
    let reply = lead.reply(data, request);
    Ok(reply.payload.data())
}

/// The canned upstream of `example`: its `upstream_reply`, or an empty 200.
pub fn canned(example: &Example) -> Result<Canned, Failure> {
    let reply = example.case.upstream_reply.as_ref();
    let status = reply.map_or(200, |r| r.status);
    let body = match reply {
        Some(r) => match (&r.body, &r.body_file) {
            (Some(Value::String(s)), None) => Bytes::from(s.clone()),
            (Some(v), None) => Bytes::from(v.to_string()),
            (None, Some(file)) => {
                let dir = example
                    .file
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default();
                let path = dir.join(file);
                std::fs::read(&path).map(Bytes::from).map_err(|e| {
                    Failure::Mismatch(vec![format!(
                        "cannot read body_file {}: {e}",
                        path.display()
                    )])
                })?
            }
            (None, None) => Bytes::new(),
            (Some(_), Some(_)) => {
                return Err(Failure::Mismatch(vec![
                    "give `body` or `body_file`, not both".to_owned(),
                ]));
            }
        },
        None => Bytes::new(),
    };
    let content_type = match reply.and_then(|r| r.content_type.as_deref()) {
        Some(value) => Some(http::HeaderValue::from_str(value).map_err(|_| {
            Failure::Mismatch(vec![format!(
                "`content_type` {value:?} is not a valid header value"
            )])
        })?),
        None => None,
    };
    Ok(Canned::new(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        content_type,
        body,
    ))
}

/// `/a/b?x=1&y=%20` → (`/a/b`, `{"x": "1", "y": " "}`).
fn split_query(path_and_query: &str) -> (String, Value) {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let mut params = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        params.insert(decode(k), Value::String(decode(v)));
    }
    (path.to_owned(), Value::Object(params))
}

/// Every key of `expected` must be in `actual` with a matching value; arrays match element-wise
/// with equal length. Differences are appended as `where: expected X, got Y`.
pub fn subset(at: &str, expected: &Value, actual: &Value, diffs: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => subset(&format!("{at}.{k}"), ev, av, diffs),
                    None => diffs.push(format!("{at}.{k}: expected {ev}, missing")),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset(&format!("{at}[{i}]"), ev, av, diffs);
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        (e, a) if e == a => {}
        (e, a) => diffs.push(format!("{at}: expected {e}, got {a}")),
    }
}

/// Runs every example of `app`'s dealers; `(dealer id, example, outcome)`.
pub async fn run_all(app: &crate::app::App) -> Vec<(String, Example, Result<(), Failure>)> {
    let mut out = Vec::new();
    for dealer in &app.dealers {
        for example in dealer.examples() {
            let outcome = match dealer.handler_for(example.skill) {
                Some(handler) => run(example, handler, &app.schemas).await,
                None => Err(Failure::Mismatch(vec![format!(
                    "{} is not served",
                    example.skill
                )])),
            };
            out.push((dealer.id().to_owned(), example.clone(), outcome));
        }
    }
    out
}
