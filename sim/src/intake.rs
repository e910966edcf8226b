//! The HTTP lead intake simulator: a "web CRM" that takes leads either as ADF/XML documents
//! (docs/protocol.md §Lead delivery and ADF, read strictly by [`adf_parse`]) or as its own JSON
//! records.
//!
//! It is what the tests put behind `lead.submit` mappings that POST the gateway's ADF document
//! (`aap_gateway::engine::lead::adf`) or a REST JSON lead. Both ways de-duplicate on the caller's stable
//! reference, as real CRMs do, so a retried delivery never creates a second lead. The `/_sim/`
//! controls are in [`sim`]; [`sim::SimApp::reset`] also forgets the stored leads and restarts
//! the numbering.
//!
//! Every call needs `X-Api-Key: demo-intake-key`, else 401 `{"error": "missing or invalid API
//! key"}`. Errors are JSON `{"error": "<reason>"}`; a reason never quotes the lead.
//!
//! ## `POST /leads/adf` — an ADF document
//!
//! `Content-Type: application/xml` or `text/xml` (parameters such as `charset` allowed), else
//! 415. The body is read with [`adf_parse::parse`]: a refused document → 400 with its reason
//! (e.g. `{"error": "no vendorname"}`). Accepted → 201 `{"id": "ADF-000001", "status":
//! "accepted"}`. A document whose `<id source="aap-gateway">` value was seen before → 200 with
//! that lead's id and `"status": "duplicate"`, nothing stored.
//!
//! ## `POST /api/leads` — a JSON lead
//!
//! `Content-Type: application/json`, else 415. The body must be a JSON object with a non-empty
//! string `external_ref` and non-empty strings `customer.first_name` and `customer.last_name`,
//! else 400; the whole object is stored. Accepted → 201 `{"leadId": "WEB-000001", "duplicate":
//! false}`; an `external_ref` seen before → 200 with that lead's id and `"duplicate": true`.
//!
//! Other paths → 404, other methods on these paths → 405.
//!
//! `GET /_sim/fixtures`: `{"api_key_header", "api_key", "adf_path", "json_path", "adf": [{"id",
//! "lead": <parsed>, "raw": "<document as received>"}], "json": [{"id", "lead": <object>}]}`,
//! oldest first (the last [`sim::RECEIVED_CAP`] of each kind).
//!
//! Misbehaviour: `commit_502` / `commit_504` store the lead, then answer a proxy's 502 / 504
//! (the caller cannot tell it was committed). `fail` → 500 `{"error": "lead store unavailable"}`, nothing stored; `garbage`
//! → 200 `application/json` that is not JSON; `huge` → 200, a valid JSON acknowledgement padded
//! to about [`sim::HUGE_BYTES`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::adf_parse;
use super::adf_parse::GATEWAY_ID_SOURCE;
use super::sim::{self, SimApp, SimHandle, SimRequest, SimResponse, lock};

/// The header carrying the API key.
pub const API_KEY_HEADER: &str = "X-Api-Key";
/// The only API key the intake accepts.
pub const API_KEY: &str = "demo-intake-key";
/// Where ADF documents are POSTed.
pub const ADF_PATH: &str = "/leads/adf";
/// Where JSON leads are POSTed.
pub const JSON_PATH: &str = "/api/leads";

/// Binds `127.0.0.1:0` and serves the intake.
pub async fn start_intake() -> std::io::Result<SimHandle> {
    sim::start(Arc::new(Intake::default())).await
}

/// The intake's state: the leads it took.
#[derive(Default)]
pub struct Intake {
    store: Mutex<Store>,
    huge: OnceLock<Bytes>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = lock(&self.store);
        f.debug_struct("Intake")
            .field("adf", &store.adf.len())
            .field("json", &store.json.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Store {
    adf_count: u64,
    json_count: u64,
    adf: VecDeque<AdfLead>,
    json: VecDeque<JsonLead>,
}

#[derive(Debug)]
struct AdfLead {
    id: String,
    /// The `<id source="aap-gateway">` value, the de-duplication key.
    reference: Option<String>,
    lead: Value,
    raw: String,
}

#[derive(Debug)]
struct JsonLead {
    id: String,
    external_ref: String,
    lead: Value,
}

impl Intake {
    fn adf(&self, req: &SimRequest) -> SimResponse {
        if !content_type_is(req, &["application/xml", "text/xml"]) {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "content type must be application/xml or text/xml",
            );
        }
        let lead = match adf_parse::parse(&req.body) {
            Ok(lead) => lead,
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
        let reference = (lead["id"]["source"] == GATEWAY_ID_SOURCE)
            .then(|| lead["id"]["value"].as_str())
            .flatten()
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        let mut store = lock(&self.store);
        if let Some(reference) = &reference
            && let Some(seen) = store
                .adf
                .iter()
                .find(|l| l.reference.as_ref() == Some(reference))
        {
            return sim::json_response(
                StatusCode::OK,
                &json!({ "id": seen.id, "status": "duplicate" }),
            );
        }
        store.adf_count += 1;
        let id = format!("ADF-{:06}", store.adf_count);
        bounded_push(
            &mut store.adf,
            AdfLead {
                id: id.clone(),
                reference,
                lead,
                raw: String::from_utf8_lossy(&req.body).into_owned(),
            },
        );
        sim::json_response(
            StatusCode::CREATED,
            &json!({ "id": id, "status": "accepted" }),
        )
    }

    fn json(&self, req: &SimRequest) -> SimResponse {
        if !content_type_is(req, &["application/json"]) {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "content type must be application/json",
            );
        }
        let lead = match serde_json::from_slice::<Value>(&req.body) {
            Ok(lead @ Value::Object(_)) => lead,
            _ => return error(StatusCode::BAD_REQUEST, "body must be a JSON object"),
        };
        let non_empty = |pointer: &str| {
            lead.pointer(pointer)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.trim().is_empty())
        };
        let Some(external_ref) = lead
            .get("external_ref")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
        else {
            return error(
                StatusCode::BAD_REQUEST,
                "external_ref must be a non-empty string",
            );
        };
        if !non_empty("/customer/first_name") || !non_empty("/customer/last_name") {
            return error(
                StatusCode::BAD_REQUEST,
                "customer.first_name and customer.last_name are required",
            );
        }
        let mut store = lock(&self.store);
        if let Some(seen) = store.json.iter().find(|l| l.external_ref == external_ref) {
            return sim::json_response(
                StatusCode::OK,
                &json!({ "leadId": seen.id, "duplicate": true }),
            );
        }
        store.json_count += 1;
        let id = format!("WEB-{:06}", store.json_count);
        bounded_push(
            &mut store.json,
            JsonLead {
                id: id.clone(),
                external_ref,
                lead,
            },
        );
        sim::json_response(
            StatusCode::CREATED,
            &json!({ "leadId": id, "duplicate": false }),
        )
    }

    fn huge_body(&self) -> Bytes {
        self.huge
            .get_or_init(|| {
                let filler = "x".repeat(sim::HUGE_BYTES);
                Bytes::from(
                    json!({ "leadId": "WEB-000000", "duplicate": false, "trace": filler })
                        .to_string(),
                )
            })
            .clone()
    }
}

impl SimApp for Intake {
    fn handle(&self, req: &SimRequest) -> SimResponse {
        let path = req.path.trim_end_matches('/');
        if path != ADF_PATH && path != JSON_PATH {
            return error(StatusCode::NOT_FOUND, "not found");
        }
        if req.method != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "only POST is supported");
        }
        if req.header(API_KEY_HEADER) != Some(API_KEY) {
            return error(StatusCode::UNAUTHORIZED, "missing or invalid API key");
        }
        if path == ADF_PATH {
            self.adf(req)
        } else {
            self.json(req)
        }
    }

    fn fixtures(&self) -> Value {
        let store = lock(&self.store);
        let adf: Vec<Value> = store
            .adf
            .iter()
            .map(|l| json!({ "id": l.id, "lead": l.lead, "raw": l.raw }))
            .collect();
        let json: Vec<Value> = store
            .json
            .iter()
            .map(|l| json!({ "id": l.id, "lead": l.lead }))
            .collect();
        json!({
            "api_key_header": API_KEY_HEADER,
            "api_key": API_KEY,
            "adf_path": ADF_PATH,
            "json_path": JSON_PATH,
            "adf": adf,
            "json": json,
        })
    }

    fn fail(&self, _: &SimRequest) -> SimResponse {
        error(StatusCode::INTERNAL_SERVER_ERROR, "lead store unavailable")
    }

    fn garbage(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            "application/json; charset=utf-8",
            Bytes::from_static(b"{\"leadId\": \"WEB-\xff\xfe<html><body>Service Unavailable"),
        )
    }

    fn huge(&self, _: &SimRequest) -> SimResponse {
        sim::bytes_response(
            StatusCode::OK,
            "application/json; charset=utf-8",
            self.huge_body(),
        )
    }

    fn reset(&self) {
        *lock(&self.store) = Store::default();
    }
}

/// Whether the request's media type (parameters ignored) is one of `allowed`.
fn content_type_is(req: &SimRequest, allowed: &[&str]) -> bool {
    req.header(http::header::CONTENT_TYPE.as_str())
        .and_then(|ct| ct.split(';').next())
        .map(|media| media.trim().to_ascii_lowercase())
        .is_some_and(|media| allowed.contains(&media.as_str()))
}

/// Appends, dropping the oldest beyond [`sim::RECEIVED_CAP`] so the store stays bounded.
fn bounded_push<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.len() >= sim::RECEIVED_CAP {
        queue.pop_front();
    }
    queue.push_back(item);
}

fn error(status: StatusCode, message: &str) -> SimResponse {
    sim::json_response(status, &json!({ "error": message }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Mode;
    use aap_gateway::engine::lead::adf::{self, AdfContext};

    struct Client {
        sim: SimHandle,
        http: reqwest::Client,
    }

    impl Client {
        async fn start() -> Client {
            Client {
                sim: start_intake().await.expect("start"),
                http: reqwest::Client::new(),
            }
        }

        async fn post(&self, path: &str, content_type: &str, body: &str) -> (u16, Value) {
            let r = self
                .http
                .post(format!("{}{path}", self.sim.base_url()))
                .header(API_KEY_HEADER, API_KEY)
                .header("Content-Type", content_type)
                .body(body.to_owned())
                .send()
                .await
                .expect("send");
            let status = r.status().as_u16();
            (status, r.json().await.expect("json"))
        }
    }

    fn lead_document(reference: &str, first_name: &str) -> String {
        let request = json!({"type":"lead.submit.request",
            "customer":{"first_name":first_name,"last_name":"Lee","email":"anna@example.com"},
            "consent":{"granted_at":"2026-04-30T10:16:00Z","allowed_channels":["email"],
                "consent_text":"I agree.","scope":["lead_submission"]},
            "vehicle_of_interest":{"vin":"1HGCY2F57RA000001","year":2022,"make":"Honda","model":"Civic"},
            "source_agent":{"name":"agent"}});
        adf::render(
            &request,
            &AdfContext {
                vendor_name: "Demo Honda",
                reference,
                timezone: &jiff::tz::TimeZone::UTC,
                received_at: jiff::Timestamp::UNIX_EPOCH,
            },
        )
    }

    #[tokio::test]
    async fn adf_leads_are_accepted_once() {
        let c = Client::start().await;
        let doc = lead_document("ref-1", "Zoë <&> \"]]>");
        let (status, body) = c.post(ADF_PATH, "application/xml", &doc).await;
        assert_eq!(status, 201);
        assert_eq!(body, json!({"id": "ADF-000001", "status": "accepted"}));

        let (status, body) = c.post(ADF_PATH, "text/xml; charset=utf-8", &doc).await;
        assert_eq!(status, 200);
        assert_eq!(body, json!({"id": "ADF-000001", "status": "duplicate"}));

        let (status, body) = c
            .post(ADF_PATH, "application/xml", &lead_document("ref-2", "Ben"))
            .await;
        assert_eq!(status, 201);
        assert_eq!(body["id"], "ADF-000002");

        let fixtures = c.sim.fixtures();
        let adf = fixtures["adf"].as_array().expect("adf");
        assert_eq!(adf.len(), 2);
        assert_eq!(adf[0]["id"], "ADF-000001");
        assert_eq!(adf[0]["raw"], doc);
        assert_eq!(adf[0]["lead"]["customer"]["name"], "Zoë <&> \"]]> Lee");
        assert_eq!(
            adf[0]["lead"]["id"],
            json!({"source": "aap-gateway", "value": "ref-1"})
        );
        assert_eq!(adf[0]["lead"]["vehicles"][0]["vin"], "1HGCY2F57RA000001");
        assert_eq!(fixtures["json"], json!([]));
    }

    #[tokio::test]
    async fn adf_refusals() {
        let c = Client::start().await;
        let doc = lead_document("ref-1", "Anna");
        let url = format!("{}{ADF_PATH}", c.sim.base_url());

        let r = c
            .http
            .post(&url)
            .header("Content-Type", "application/xml")
            .body(doc.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 401);
        let body: Value = r.json().await.expect("json");
        assert_eq!(body, json!({"error": "missing or invalid API key"}));

        let (status, _) = c.post(ADF_PATH, "application/json", &doc).await;
        assert_eq!(status, 415);

        let broken = doc.replace("<vendorname>Demo Honda</vendorname>", "");
        let (status, body) = c.post(ADF_PATH, "application/xml", &broken).await;
        assert_eq!(status, 400);
        assert_eq!(body, json!({"error": "no vendorname"}));

        let (status, body) = c.post(ADF_PATH, "application/xml", "<adf><Anna Lee").await;
        assert_eq!(status, 400);
        assert!(!body.to_string().contains("Anna"), "{body}");

        let r = c
            .http
            .get(&url)
            .header(API_KEY_HEADER, API_KEY)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 405);
        let (status, _) = c.post("/leads", "application/xml", &doc).await;
        assert_eq!(status, 404);
        assert_eq!(c.sim.fixtures()["adf"], json!([]));
    }

    #[tokio::test]
    async fn json_leads_are_accepted_once() {
        let c = Client::start().await;
        let lead = json!({"external_ref": "ref-1",
            "customer": {"first_name": "Anna", "last_name": "Lee", "email": "anna@example.com"},
            "notes": "<b>&</b>"});
        let (status, body) = c
            .post(JSON_PATH, "application/json", &lead.to_string())
            .await;
        assert_eq!(status, 201);
        assert_eq!(body, json!({"leadId": "WEB-000001", "duplicate": false}));
        let (status, body) = c
            .post(
                JSON_PATH,
                "application/json; charset=utf-8",
                &lead.to_string(),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(body, json!({"leadId": "WEB-000001", "duplicate": true}));

        for (invalid, reason) in [
            ("[1]", "body must be a JSON object"),
            ("{", "body must be a JSON object"),
            (
                r#"{"customer": {"first_name": "A", "last_name": "B"}}"#,
                "external_ref must be a non-empty string",
            ),
            (
                r#"{"external_ref": 7, "customer": {"first_name": "A", "last_name": "B"}}"#,
                "external_ref must be a non-empty string",
            ),
            (
                r#"{"external_ref": "r", "customer": {"first_name": "A"}}"#,
                "customer.first_name and customer.last_name are required",
            ),
        ] {
            let (status, body) = c.post(JSON_PATH, "application/json", invalid).await;
            assert_eq!(status, 400, "{invalid}");
            assert_eq!(body, json!({ "error": reason }), "{invalid}");
        }
        let (status, _) = c.post(JSON_PATH, "text/plain", &lead.to_string()).await;
        assert_eq!(status, 415);

        let fixtures = c.sim.fixtures();
        assert_eq!(
            fixtures["json"],
            json!([{"id": "WEB-000001", "lead": lead}])
        );
    }

    #[tokio::test]
    async fn misbehaviour_and_reset() {
        let c = Client::start().await;
        let doc = lead_document("ref-1", "Anna");
        c.sim.set_mode(Mode::Fail, 0);
        let (status, body) = c.post(ADF_PATH, "application/xml", &doc).await;
        assert_eq!(status, 500);
        assert_eq!(body, json!({"error": "lead store unavailable"}));
        assert_eq!(c.sim.fixtures()["adf"], json!([]));
        assert_eq!(c.sim.received().len(), 1, "the attempt is still recorded");

        c.sim.set_mode(Mode::Garbage, 0);
        let r = c
            .http
            .post(format!("{}{JSON_PATH}", c.sim.base_url()))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
        assert!(serde_json::from_slice::<Value>(&r.bytes().await.expect("body")).is_err());

        c.sim.set_mode(Mode::Huge, 0);
        let r = c
            .http
            .post(format!("{}{JSON_PATH}", c.sim.base_url()))
            .send()
            .await
            .expect("send");
        let bytes = r.bytes().await.expect("body");
        assert!(bytes.len() >= sim::HUGE_BYTES);
        let huge: Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(huge["duplicate"], false);

        c.sim.set_mode(Mode::Normal, 0);
        let (status, _) = c.post(ADF_PATH, "application/xml", &doc).await;
        assert_eq!(status, 201);
        let r = c
            .http
            .post(format!("{}/_sim/reset", c.sim.base_url()))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 204);
        assert_eq!(c.sim.fixtures()["adf"], json!([]));
        let (status, body) = c.post(ADF_PATH, "application/xml", &doc).await;
        assert_eq!(status, 201, "forgotten after the reset");
        assert_eq!(body["id"], "ADF-000001");
    }
}
