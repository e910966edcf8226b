//! A compiled proxy-mode skill ([`ProxyMapping`]) and its parts: response programs, error rules and
//! what the upstream supports.

use std::collections::HashMap;
use std::sync::Arc;

use http::StatusCode;
use minijinja::value::Value as TplValue;

use crate::engine::request::RequestSpec;
use crate::error::AapCode;
use crate::formats::Format;
use crate::lang::jq::{Jq, JqValue, KeyPath};
use crate::protocol::Skill;
use crate::upstream::Upstream;

use super::scan_cache::ScanCache;

/// Values every template and jq program of one mapping file sees besides the request.
#[derive(Debug, Clone)]
pub struct MappingGlobals {
    pub tables_tpl: TplValue,
    pub tables_jq: JqValue,
    pub dealer_tpl: TplValue,
    pub dealer_jq: JqValue,
}

/// How a reply becomes AAP data.
#[derive(Debug)]
pub enum ResponseSpec {
    List {
        items: Jq,
        total: Option<Jq>,
        item: Jq,
        /// `items` as keys, when it is a path of literal keys (`.Items`): the records are
        /// then read straight off a JSON reply's tape (`extract::Doc::records`).
        records: Option<KeyPath>,
    },
    Object {
        jq: Jq,
    },
}

/// `when: { status, fault, jq }` → an AAP error, or a reply.
#[derive(Debug)]
pub struct ErrorRule {
    pub status: Option<StatusMatch>,
    /// SOAP fault code or subcode (local name).
    pub fault: Option<String>,
    pub jq: Option<Jq>,
    pub outcome: RuleOutcome,
}

/// What a matching error rule makes of the upstream's answer.
#[derive(Debug)]
pub enum RuleOutcome {
    /// An AAP error.
    Error { code: AapCode, message: String },
    /// A success in meaning: mapped by the skill's `response` as if it were a 2xx.
    Response,
    /// List skills: no listings.
    Empty,
    /// Single-object skills: mapped by the rule's own program.
    Jq(Jq),
}

impl RuleOutcome {
    /// Whether the answer shows a working upstream (for the circuit breaker and the
    /// upstream-error metric): everything but "the dealer's system is in trouble".
    pub(super) fn is_answer(&self) -> bool {
        !matches!(
            self,
            RuleOutcome::Error {
                code: AapCode::InternalError | AapCode::RateLimited,
                ..
            }
        )
    }
}

#[derive(Debug, Clone)]
pub enum StatusMatch {
    Codes(Vec<u16>),
    /// `4xx` → 4.
    Class(u16),
}

impl StatusMatch {
    pub(super) fn matches(&self, status: StatusCode) -> bool {
        match self {
            StatusMatch::Codes(codes) => codes.contains(&status.as_u16()),
            StatusMatch::Class(c) => status.as_u16() / 100 == *c,
        }
    }
}

/// What the upstream does exactly as AAP means it (`request.supports`; nothing when absent).
#[derive(Debug, Clone, Default)]
pub struct Supports {
    /// Filter keys the templates translate → whether the upstream takes one value per call.
    pub filters: HashMap<String, Values>,
    /// Sort fields the templates translate → where the upstream puts units without a value.
    pub sort: HashMap<String, Missing>,
    /// The separator the templates join list values with; a value containing it cannot be
    /// sent as one value, so such a request is completed in the gateway.
    pub list_separator: Option<String>,
}

/// How many values of a list filter the upstream takes in one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Values {
    #[default]
    Many,
    One,
}

/// Where an upstream sorts units without a value for the sort field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Missing {
    /// Last in both orders (AAP's rule).
    #[default]
    Last,
    /// First in both orders.
    First,
    /// As the smallest value: first ascending, last descending.
    Low,
    /// As the largest value: last ascending, first descending.
    High,
}

impl Missing {
    /// Whether units without a value come last in this order, as AAP wants.
    pub(super) fn last_when(self, descending: bool) -> bool {
        match self {
            Missing::Last => true,
            Missing::First => false,
            Missing::Low => descending,
            Missing::High => !descending,
        }
    }
}

/// A compiled proxy-mode skill.
#[derive(Debug)]
pub struct ProxyMapping {
    pub skill: Skill,
    /// The mapping file, for logs.
    pub file: String,
    pub upstream: Arc<Upstream>,
    pub request: RequestSpec,
    pub format: Format,
    /// The mapping's `charset:` for reply bodies, if it names one.
    pub charset: Option<&'static encoding_rs::Encoding>,
    pub response: ResponseSpec,
    pub errors: Vec<ErrorRule>,
    pub shared: MappingGlobals,
    pub supports: Supports,
    /// Every record the upstream lists is one a buyer may see: the mapping declares
    /// `listing: listable`, or its item program gives every record the same listable status.
    pub listable_only: bool,
    pub scan_limit: usize,
    pub scan_cache: ScanCache,
    /// `lead.submit` only: the answers the CRM's contract declares "not processed"
    /// (`lead.not_processed`); any other unhandled error answer to a lead is an unknown outcome.
    pub not_processed: NotProcessed,
}

/// Error answers that prove the upstream did not process the call (`lead.not_processed`).
#[derive(Debug, Clone, Default)]
pub struct NotProcessed {
    pub status: Vec<u16>,
    /// SOAP fault codes or subcodes, local names.
    pub fault: Vec<String>,
}

impl NotProcessed {
    /// Whether an HTTP status is declared "not processed".
    pub fn status(&self, status: u16) -> bool {
        self.status.contains(&status)
    }

    /// Whether a SOAP fault (code, subcode) is declared "not processed".
    pub fn fault(&self, code: &str, subcode: Option<&str>) -> bool {
        self.fault
            .iter()
            .any(|f| f == code || subcode.is_some_and(|s| s == f))
    }
}
