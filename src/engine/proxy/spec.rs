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
use crate::schema::Listings;
use crate::upstream::Upstream;

use super::scan_cache::{CursorCache, ScanCache};

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
        /// Sequential paging (`style: cursor | next_link`): where a reply says what follows.
        next_page: Option<NextPage>,
    },
    Object {
        jq: Jq,
    },
}

/// Where a reply of sequential paging says what page follows it.
#[derive(Debug)]
pub struct NextPage {
    /// jq giving the next cursor (`style: cursor`) or the next page's URL (`style: next_link`);
    /// `null`, `false` or `""` on the last page.
    pub next: Option<Jq>,
    /// jq that is false on the last page (`.pageInfo.hasNextPage`), when the reply says so.
    pub has_more: Option<Jq>,
    /// The next page's URL is the reply's `Link: <…>; rel="next"` header.
    pub link_header: bool,
}

/// `when: { status, fault, jq }` → an AAP error, or a reply.
#[derive(Debug)]
pub struct ErrorRule {
    pub status: Option<StatusMatch>,
    /// SOAP fault code or subcode (local name).
    pub fault: Option<String>,
    pub jq: Option<Jq>,
    pub outcome: RuleOutcome,
    /// The answer means the upstream refused the OAuth2 token (a GraphQL `UNAUTHENTICATED` on
    /// HTTP 200): a fresh token and one more try before `outcome` answers.
    pub reauthenticate: bool,
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
    /// Sort fields the templates translate → how the upstream orders them.
    pub sort: HashMap<String, SortSupport>,
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

/// How an upstream sorts by one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortSupport {
    /// Where units without a value go.
    pub missing: Missing,
    /// It breaks ties as AAP does (stock number, then VIN); `false` (`ties: own`): a sorted
    /// search is completed in the gateway, whose order is AAP's.
    pub aap_ties: bool,
}

impl Default for SortSupport {
    fn default() -> SortSupport {
        SortSupport {
            missing: Missing::Last,
            aap_ties: true,
        }
    }
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
    /// `scan_query: every_unit`: a scan sends none of the buyer's filters, so that one walk of
    /// every unit answers every search and facets call while it is kept.
    pub scan_every_unit: bool,
    pub scan_cache: Arc<ScanCache>,
    /// Sequential paging: where each query's pages begin (`scan_cache`'s lifetime).
    pub cursors: CursorCache,
    /// The AAP listing schema: a record whose listing it refuses is dropped and counted.
    pub listings: Listings,
    /// `lead.submit` only: the answers the CRM's contract declares "not processed"
    /// (`lead.not_processed`); any other unhandled error answer to a lead is an unknown outcome.
    pub not_processed: NotProcessed,
    /// The mapping itself, once shared ([`ProxyMapping::into_shared`]): what a scan refreshed
    /// in the background runs on.
    pub this: std::sync::Weak<ProxyMapping>,
}

impl ProxyMapping {
    /// The mapping behind an `Arc`, knowing itself (for scans refreshed in the background).
    pub fn into_shared(self) -> Arc<ProxyMapping> {
        Arc::new_cyclic(|this| ProxyMapping {
            this: this.clone(),
            ..self
        })
    }
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
