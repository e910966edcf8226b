//! One call of a mapping: render the request, send it, apply the error rules, decode the reply,
//! extract AAP data with jq; single-object skills and `lead.submit`.

use std::collections::HashSet;

use http::StatusCode;
use minijinja::value::Value as TplValue;
use serde_json::{Value, json};

use crate::engine::request::Rendered;
use crate::error::{AapCode, AapError};
use crate::formats::{Declared, Format};
use crate::lang::jq::{Doc, Jq, JqValue, JqVars};
use crate::lang::template::{Lazy, Scope};
use crate::protocol::{Data, SearchRequest, Skill};
use crate::upstream::UpstreamResponse;
use crate::upstream::soap::{self, SoapFault};
use tracing::debug_span;

use super::page::check_listable;
use super::spec::{ProxyMapping, ResponseSpec, RuleOutcome};
use super::transport::{Transport, send};

/// What a call produced: the reply to map, or a rule's verdict on it.
pub(super) enum Called<'a> {
    Body(Doc),
    Rule(&'a RuleOutcome, Doc),
}

/// What one send produced: a call's result, or a `reauthenticate` rule's finding that the
/// upstream refused the token (the rule's error, unless a fresh token does better).
enum Once<'a> {
    Called(Called<'a>),
    TokenRefused {
        generation: Option<u64>,
        error: AapError,
    },
}

impl ProxyMapping {
    /// Answers a validated call against the live upstream.
    pub async fn execute(&self, request: &Value) -> Result<Data, AapError> {
        self.execute_with(Transport::Live(&self.upstream), request)
            .await
    }

    /// Answers a validated call through `transport`.
    pub async fn execute_with(
        &self,
        transport: Transport<'_>,
        request: &Value,
    ) -> Result<Data, AapError> {
        match (&self.response, self.skill) {
            (ResponseSpec::List { .. }, _) => {
                self.search(transport, &SearchRequest::read(request)).await
            }
            (ResponseSpec::Object { jq }, skill) => {
                let data = self.object(transport, request, jq).await?;
                if skill == Skill::InventoryVehicle {
                    check_listable(&data)?;
                }
                Ok(Data::Json(data))
            }
        }
    }

    /// `lead.submit`: delivers the lead (`lead` = the gateway's facts, `engine::lead`) and maps
    /// the acknowledgement to reply data.
    pub async fn execute_lead(
        &self,
        transport: Transport<'_>,
        request: &Value,
        lead: &Value,
    ) -> Result<Value, AapError> {
        let ResponseSpec::Object { jq } = &self.response else {
            return Err(AapError::Internal(format!(
                "{}: lead.submit takes one `jq` program",
                self.file
            )));
        };
        self.object_with(transport, request, jq, Some(lead)).await
    }

    /// The jq variables of a call. `$request` is made a jq value only for a mapping whose
    /// programs read it (most item mappings do not; it is a copy of the whole request).
    pub(super) fn vars(&self, request: &Value, lead: Option<&Value>) -> JqVars {
        let request = if self.reads_request() {
            JqValue::from_json(request)
        } else {
            JqValue::null()
        };
        JqVars {
            request,
            tables: self.shared.tables_jq.clone(),
            dealer: self.shared.dealer_jq.clone(),
            lead: lead.map_or_else(JqValue::null, JqValue::from_json),
        }
    }

    pub(super) fn template_values(&self, request: &Value, lead: Option<&Value>) -> TplValue {
        minijinja::context! {
            request => TplValue::from(minijinja::value::Serde(request)),
            tables => self.shared.tables_tpl.clone(),
            dealer => self.shared.dealer_tpl.clone(),
            lead => lead.map_or(TplValue::UNDEFINED, |l| TplValue::from(minijinja::value::Serde(l))),
        }
    }

    async fn object(
        &self,
        transport: Transport<'_>,
        request: &Value,
        jq: &Jq,
    ) -> Result<Value, AapError> {
        self.object_with(transport, request, jq, None).await
    }

    async fn object_with(
        &self,
        transport: Transport<'_>,
        request: &Value,
        jq: &Jq,
        lead: Option<&Value>,
    ) -> Result<Value, AapError> {
        let rendered = debug_span!("render").in_scope(|| {
            let build = || self.template_values(request, lead);
            let context = Lazy::new(&build);
            self.request.render(
                Scope::request(request, &self.shared.tables_tpl, &context),
                None,
            )
        });
        let rendered = rendered.map_err(|e| self.render_error(e))?;
        let vars = self.vars(request, lead);
        let (program, doc) = match self.call(transport, rendered, &vars).await? {
            Called::Body(doc) | Called::Rule(RuleOutcome::Response, doc) => (jq, doc),
            Called::Rule(RuleOutcome::Jq(own), doc) => (own, doc),
            Called::Rule(other, _) => {
                return Err(AapError::Internal(format!(
                    "{}: error rule outcome {other:?} on a single-object skill",
                    self.file
                )));
            }
        };
        let out = debug_span!("extract").in_scope(|| program.run_one_json(doc.value(), &vars));
        out.map_err(|e| self.extract_error(e.to_string()))
    }

    /// Whether any program of the mapping may read `$request` ([`Jq::reads_request`]).
    fn reads_request(&self) -> bool {
        let response = match &self.response {
            ResponseSpec::List {
                items, total, item, ..
            } => [Some(items), total.as_ref(), Some(item)],
            ResponseSpec::Object { jq } => [Some(jq), None, None],
        };
        let rules = self.errors.iter().flat_map(|rule| {
            let own = match &rule.outcome {
                RuleOutcome::Jq(jq) => Some(jq),
                _ => None,
            };
            rule.jq.iter().chain(own)
        });
        response
            .into_iter()
            .flatten()
            .chain(rules)
            .any(Jq::reads_request)
    }

    /// Counts `count` mapping events on the dealer's upstream metrics.
    pub(super) fn event(&self, event: &'static str, count: usize) {
        if let Some(meter) = self.upstream.meter() {
            meter.mapping_event(event, count as u64);
        }
    }

    /// Sends one call, applies the error rules, decodes the body. An answer an error rule
    /// recognises (a domain error, or a reply) tells the breaker the upstream works.
    pub(super) async fn call(
        &self,
        transport: Transport<'_>,
        rendered: Rendered,
        vars: &JqVars,
    ) -> Result<Called<'_>, AapError> {
        self.call_linked(transport, rendered, vars, None).await
    }

    /// [`ProxyMapping::call`], also giving the reply's `Link: <…>; rel="next"` in `next_link`.
    pub(super) async fn call_linked(
        &self,
        transport: Transport<'_>,
        rendered: Rendered,
        vars: &JqVars,
        mut next_link: Option<&mut Option<String>>,
    ) -> Result<Called<'_>, AapError> {
        // A `reauthenticate` rule may ask for one more try: the call is kept to send again.
        let again = self
            .errors
            .iter()
            .any(|r| r.reauthenticate)
            .then(|| rendered.clone());
        let once = self
            .call_once(transport, rendered, vars, next_link.as_deref_mut())
            .await?;
        match once {
            Once::Called(called) => Ok(called),
            Once::TokenRefused { generation, error } => match again {
                Some(again) if self.upstream.token_refused(generation) => {
                    // Rare: boxed, so the common path's future stays small.
                    let retried = Box::pin(self.call_once(transport, again, vars, next_link));
                    match retried.await? {
                        Once::Called(called) => Ok(called),
                        Once::TokenRefused { error, .. } => Err(error),
                    }
                }
                _ => Err(error),
            },
        }
    }

    /// One send of a call and what the error rules make of its answer.
    async fn call_once(
        &self,
        transport: Transport<'_>,
        rendered: Rendered,
        vars: &JqVars,
        next_link: Option<&mut Option<String>>,
    ) -> Result<Once<'_>, AapError> {
        let soap = self.upstream.soap().is_some();
        // Reads are safe to retry, SOAP reads included; a lead is never sent twice by the client.
        let idempotent = matches!(rendered.method, http::Method::GET | http::Method::HEAD)
            || (soap && self.skill != Skill::LeadSubmit);
        let mut response = send(transport, &self.upstream, rendered, idempotent).await?;
        if let Some(out) = next_link {
            *out = super::page::next_link(&response.headers);
        }
        let (doc, fault) = self.decode(&response);
        for (index, rule) in self.errors.iter().enumerate() {
            let status_ok = rule
                .status
                .as_ref()
                .is_none_or(|s| s.matches(response.status));
            let fault_ok = match (&rule.fault, &fault) {
                (None, _) => true,
                (Some(want), Some(f)) => {
                    f.code == *want || f.subcode.as_deref() == Some(want.as_str())
                }
                (Some(_), None) => false,
            };
            if !(status_ok && fault_ok) {
                continue;
            }
            let jq_ok = match (&rule.jq, &doc) {
                (None, _) => true,
                // A predicate that fails is a defect of the mapping, not "no match": silently
                // skipping the rule would answer the buyer as if the rule did not exist.
                (Some(jq), Ok(doc)) => jq.run_bool(doc.value(), vars).map_err(|e| {
                    if let Some(verdict) = response.verdict.take() {
                        verdict.answered();
                    }
                    // jq messages quote the value they failed on: for a lead, personal data.
                    let cause = if self.skill == Skill::LeadSubmit {
                        "details withheld: they may quote personal data; reproduce with \
                         test-mappings"
                            .to_owned()
                    } else {
                        e.to_string()
                    };
                    AapError::Internal(format!(
                        "mapping error: `errors[{index}].when.jq` of {} failed: {cause}",
                        self.file
                    ))
                })?,
                (Some(_), Err(_)) => false,
            };
            if !jq_ok {
                continue;
            }
            if rule.outcome.is_answer()
                && let Some(verdict) = response.verdict.take()
            {
                verdict.answered();
            }
            return match &rule.outcome {
                RuleOutcome::Error { code, message } => {
                    let error = AapError::Domain {
                        code: *code,
                        message: message.clone(),
                        details: None,
                    };
                    if rule.reauthenticate {
                        return Ok(Once::TokenRefused {
                            generation: response.token_generation,
                            error,
                        });
                    }
                    Err(error)
                }
                RuleOutcome::Empty => Ok(Once::Called(Called::Rule(
                    &rule.outcome,
                    Doc::from_value(JqValue::null()),
                ))),
                outcome => match doc {
                    Ok(doc) => Ok(Once::Called(Called::Rule(outcome, doc))),
                    Err(e) => Err(AapError::InvalidUpstreamResponse {
                        upstream: self.upstream.name().to_owned(),
                        cause: format!("{e} ({})", self.file),
                    }),
                },
            };
        }
        let upstream = self.upstream.name().to_owned();
        if let Some(fault) = fault {
            // Fault texts may quote what was sent, and a lead is personal data.
            let reason = if self.skill == Skill::LeadSubmit {
                String::new()
            } else {
                format!(": {}", fault.reason.chars().take(200).collect::<String>())
            };
            let cause = format!(
                "SOAP fault {}{} not handled by an error rule ({}){reason}",
                fault.code,
                fault
                    .subcode
                    .as_deref()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                self.file
            );
            if self.skill == Skill::LeadSubmit
                && !self
                    .not_processed
                    .fault(&fault.code, fault.subcode.as_deref())
            {
                return Err(self.lead_unknown(upstream, cause));
            }
            // The caller's fault (`Client` in SOAP 1.1, `Sender` in 1.2) comes back for the
            // same call: not worth a buyer's retry. The server's may pass.
            return Err(match fault.code.as_str() {
                "Server" | "Receiver" => AapError::UpstreamUnavailable { upstream, cause },
                "Client" | "Sender" => AapError::UpstreamRefused { upstream, cause },
                _ => AapError::InvalidUpstreamResponse { upstream, cause },
            });
        }
        if !response.status.is_success() {
            let cause = format!(
                "HTTP {} not handled by an error rule ({})",
                response.status, self.file
            );
            let status = response.status;
            if self.skill == Skill::LeadSubmit && !self.not_processed.status(status.as_u16()) {
                return Err(self.lead_unknown(upstream, cause));
            }
            // The upstream's own limit, past what a retry within the call's budget could wait
            // for: the buyer is told to slow down, with the upstream's hint (its `Retry-After`,
            // else the end of its stated window, else a second).
            let hint = crate::upstream::retry_after(&response.headers);
            if status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && hint.is_some())
            {
                let retry_after = hint
                    .or_else(|| {
                        crate::upstream::stated_window(&response.headers).map(|(window, _)| window)
                    })
                    .unwrap_or(std::time::Duration::from_secs(1));
                self.event("upstream_rate_limited", 1);
                return Err(AapError::UpstreamRateLimited {
                    upstream,
                    retry_after,
                });
            }
            // A 4xx refuses the request itself (the same call meets it again), except a timeout
            // (408) or a quota (429); 5xx and anything odd may pass.
            return Err(
                if status.is_client_error()
                    && status != StatusCode::REQUEST_TIMEOUT
                    && status != StatusCode::TOO_MANY_REQUESTS
                {
                    AapError::UpstreamRefused { upstream, cause }
                } else if status.is_server_error() || status.is_client_error() {
                    AapError::UpstreamUnavailable { upstream, cause }
                } else {
                    AapError::InvalidUpstreamResponse { upstream, cause }
                },
            );
        }
        doc.map(|doc| Once::Called(Called::Body(doc))).map_err(|e| {
            AapError::InvalidUpstreamResponse {
                upstream,
                cause: format!("{e} ({})", self.file),
            }
        })
    }

    /// The reply body for jq, and the SOAP fault it carries. A SOAP fault is seen by jq
    /// predicates as `{"Fault": {"code", "subcode", "reason", "detail"}}`.
    fn decode(&self, response: &UpstreamResponse) -> (Result<Doc, String>, Option<SoapFault>) {
        let body = &response.body;
        let declared = Declared::reply(self.charset, &response.headers);
        if self.upstream.soap().is_none() {
            // A list whose records are a path of keys reads them off the reply's tape.
            let lazy = matches!(
                self.response,
                ResponseSpec::List {
                    records: Some(_),
                    ..
                }
            );
            return (Doc::decode(&self.format, body, declared, lazy), None);
        }
        let empty = HashSet::new();
        let list_elements = match &self.format {
            Format::Xml { list_elements } => list_elements,
            Format::Json | Format::Csv => &empty,
        };
        match soap::decode_reply(body, declared, list_elements) {
            Ok(reply) => match reply.fault {
                Some(fault) => {
                    let doc = json!({ "Fault": {
                        "code": fault.code, "subcode": fault.subcode,
                        "reason": fault.reason, "detail": fault.detail,
                    }});
                    (Ok(Doc::from_value(JqValue::from_json(&doc))), Some(fault))
                }
                None => (Ok(Doc::from_value(JqValue::from_json(&reply.body))), None),
            },
            Err(e) => (Err(e), None),
        }
    }

    pub(super) fn render_error(&self, message: String) -> AapError {
        if message.starts_with(crate::lang::template::UNSENDABLE) {
            // A buyer's value the dealer system cannot be asked about: no unit has such an
            // identifier, and a search value like that is malformed for this dealer.
            return match self.skill {
                Skill::InventoryVehicle => AapError::domain(
                    AapCode::VehicleNotFound,
                    "No vehicle matches that identifier.",
                ),
                _ => AapError::Validation {
                    code: AapCode::SchemaValidationFailed,
                    violations: vec![crate::error::Violation {
                        instance_location: String::new(),
                        keyword: "format".to_owned(),
                        error: "a value cannot be passed to the dealer's system".to_owned(),
                    }],
                },
            };
        }
        AapError::Internal(format!(
            "{}: cannot render the upstream request: {message}",
            self.file
        ))
    }

    /// A lead's error answer that no rule handles and the CRM's contract does not declare
    /// "not processed" (`lead.not_processed`): a `502` / `504` from a load balancer, or a `500`,
    /// says nothing of whether the CRM committed the lead. An unreadable answer, then: the
    /// lead's outcome is unknown (`idempotency.on_ambiguous` decides), never "not delivered".
    fn lead_unknown(&self, upstream: String, cause: String) -> AapError {
        AapError::InvalidUpstreamResponse {
            upstream,
            cause: format!("{cause}; not declared in lead.not_processed, so the CRM may have it"),
        }
    }

    pub(super) fn extract_error(&self, message: String) -> AapError {
        // jq messages quote the values they failed on; a CRM's answer about a lead may hold
        // the customer's data, which never goes to the logs.
        let message = if self.skill == Skill::LeadSubmit {
            "a jq program failed on the CRM's reply (details withheld: they may quote personal \
             data; reproduce with test-mappings)"
                .to_owned()
        } else {
            message
        };
        AapError::InvalidUpstreamResponse {
            upstream: self.upstream.name().to_owned(),
            cause: format!("{}: {message}", self.file),
        }
    }
}
