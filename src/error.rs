//! `AapError`: every way a call can fail, in AAP and A2A vocabulary and nothing of the wire.
//!
//! Stages return `Result<_, AapError>` and use `?`; only `binding::wire_error` turns an error into
//! codes, statuses and bodies, and only `binding::serve_call` logs the internal cause (once).

use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// The twelve AAP error codes (docs/protocol.md §AAP error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AapCode {
    UnsupportedSkill,
    SchemaValidationFailed,
    MissingRequiredField,
    InvalidCondition,
    VehicleNotFound,
    VehicleUnavailable,
    ContactConsentRequired,
    InvalidConsent,
    AppointmentTimeUnavailable,
    IdempotencyConflict,
    RateLimited,
    InternalError,
}

impl AapCode {
    pub const ALL: [AapCode; 12] = [
        AapCode::UnsupportedSkill,
        AapCode::SchemaValidationFailed,
        AapCode::MissingRequiredField,
        AapCode::InvalidCondition,
        AapCode::VehicleNotFound,
        AapCode::VehicleUnavailable,
        AapCode::ContactConsentRequired,
        AapCode::InvalidConsent,
        AapCode::AppointmentTimeUnavailable,
        AapCode::IdempotencyConflict,
        AapCode::RateLimited,
        AapCode::InternalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AapCode::UnsupportedSkill => "UNSUPPORTED_SKILL",
            AapCode::SchemaValidationFailed => "SCHEMA_VALIDATION_FAILED",
            AapCode::MissingRequiredField => "MISSING_REQUIRED_FIELD",
            AapCode::InvalidCondition => "INVALID_CONDITION",
            AapCode::VehicleNotFound => "VEHICLE_NOT_FOUND",
            AapCode::VehicleUnavailable => "VEHICLE_UNAVAILABLE",
            AapCode::ContactConsentRequired => "CONTACT_CONSENT_REQUIRED",
            AapCode::InvalidConsent => "INVALID_CONSENT",
            AapCode::AppointmentTimeUnavailable => "APPOINTMENT_TIME_UNAVAILABLE",
            AapCode::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            AapCode::RateLimited => "RATE_LIMITED",
            AapCode::InternalError => "INTERNAL_ERROR",
        }
    }

    pub fn parse(code: &str) -> Option<AapCode> {
        AapCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// When the gateway answers this code, as docs/reference.md and `check` tell mapping
    /// authors (docs/protocol.md §AAP error codes has the same table).
    pub fn when(self) -> &'static str {
        match self {
            AapCode::UnsupportedSkill => {
                "`data.type` names no AAP skill, or one this dealer does not serve; a mapping \
                 rule may say so for a request the dealer's system cannot answer"
            }
            AapCode::SchemaValidationFailed => {
                "the request fails its schema and no narrower code applies; a request value \
                 that cannot be sent to the dealer's system"
            }
            AapCode::MissingRequiredField => {
                "every schema failure is a missing field; `inventory.vehicle` without an \
                 identifier; a test drive without a vehicle where the dealer requires one"
            }
            AapCode::InvalidCondition => {
                "every schema failure is a condition of the other vocabulary (a trade-in value \
                 in a sale condition or the reverse)"
            }
            AapCode::VehicleNotFound => {
                "no listing matches the identifiers (vehicle detail, a lead's vehicle check, a \
                 mapping rule such as an upstream 404)"
            }
            AapCode::VehicleUnavailable => {
                "the listing exists but is not in a servable status (sold, removed)"
            }
            AapCode::ContactConsentRequired => {
                "a lead without consent, or with no channel the customer may be contacted on"
            }
            AapCode::InvalidConsent => {
                "a lead whose consent is present but unusable: malformed, expired, granted in \
                 the future, channels not covered"
            }
            AapCode::AppointmentTimeUnavailable => {
                "only when a lead mapping's error rule says so (the CRM refused the time)"
            }
            AapCode::IdempotencyConflict => {
                "a lead's `idempotency_key` reused with another payload"
            }
            AapCode::RateLimited => {
                "a quota is spent or the gateway sheds load; with `Retry-After`"
            }
            AapCode::InternalError => {
                "anything failing inside the gateway or behind it: upstream timeout, refusal, \
                 5xx, undecodable reply, a mapped reply that breaks the AAP schema"
            }
        }
    }

    /// The default `retryable` of docs/protocol.md §AAP error codes.
    pub fn retryable_by_default(self) -> bool {
        matches!(self, AapCode::RateLimited | AapCode::InternalError)
    }
}

impl fmt::Display for AapCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed rule in a request or reply payload, in the JSON Schema output-unit style
/// (docs/protocol.md §Validation failures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer relative to the AAP payload (the DataPart `data`).
    pub instance_location: String,
    /// The JSON Schema keyword that failed (`type`, `required`, `enum`, ...).
    pub keyword: String,
    /// A short, safe-to-display message.
    pub error: String,
}

/// A field problem in the A2A envelope (not the AAP payload), reported as `google.rpc.BadRequest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Location inside the `SendMessageRequest`, e.g. `message.parts`.
    pub field: String,
    pub description: String,
}

/// Everything that can end a call early. `Clone`: the callers that share one scan of an
/// upstream (single flight) each answer its outcome.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AapError {
    // --- JSON-RPC / A2A protocol errors (A2A error shape, no `aap.error`) ---
    #[error("invalid JSON payload: {detail}")]
    Parse { detail: String },
    #[error("invalid JSON-RPC request: {detail}")]
    InvalidRequest { detail: String },
    #[error("method not found: {method}")]
    MethodNotFound { method: String },
    #[error("invalid SendMessage parameters")]
    InvalidParams { violations: Vec<FieldViolation> },
    #[error("task not found")]
    TaskNotFound,
    #[error("push notifications are not supported")]
    PushNotificationNotSupported,
    #[error("unsupported operation: {operation}")]
    UnsupportedOperation { operation: String },
    #[error("content type not supported: {detail}")]
    ContentTypeNotSupported { detail: String },
    /// The request's own `Content-Type` (not a part's): the same A2A error, but HTTP 415 on the
    /// HTTP+JSON binding.
    #[error("request media type not supported: {detail}")]
    RequestMediaType { detail: String },
    #[error("AAP extension not activated; required {uri}")]
    ExtensionSupportRequired { uri: String },
    #[error("A2A version not supported: {requested:?}")]
    VersionNotSupported { requested: Option<String> },

    // --- AAP skill-level errors (typed `aap.error` payload) ---
    /// A business outcome named by the protocol or by a mapping's error rule.
    #[error("{code}: {message}")]
    Domain {
        code: AapCode,
        message: String,
        details: Option<Value>,
    },
    /// Request payload failed its schema; `code` is one of the three validation codes or a
    /// consent code chosen by `schema::classify`.
    #[error("{code}: {} validation errors", violations.len())]
    Validation {
        code: AapCode,
        violations: Vec<Violation>,
    },
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    /// Every `limits.max_concurrency` slot is taken: shed at once. `RATE_LIMITED` on the wire,
    /// but HTTP 503 on the HTTP+JSON binding: the gateway is full, not the caller over quota.
    #[error("overloaded; retry after {retry_after:?}")]
    Overloaded { retry_after: Duration },
    /// No API key, or one the gateway does not know (`invalid`), when `auth.mode: api_key`.
    #[error("unauthenticated ({})", if *invalid { "unknown key" } else { "no key" })]
    Unauthenticated { invalid: bool },
    /// A known key that may not call this dealer.
    #[error("key `{key}` may not call this dealer")]
    PermissionDenied { key: String },

    // --- gateway / upstream failures: INTERNAL_ERROR, cause logged, never sent ---
    #[error("upstream `{upstream}` timed out after {after:?}")]
    UpstreamTimeout { upstream: String, after: Duration },
    #[error("upstream `{upstream}` unavailable: {cause}")]
    UpstreamUnavailable { upstream: String, cause: String },
    /// The upstream's circuit breaker is open: it rests for about `retry_after` more, a hint
    /// the buyer gets (`INTERNAL_ERROR`, retryable).
    #[error("upstream `{upstream}` resting (circuit breaker open) for {retry_after:?}")]
    UpstreamResting {
        upstream: String,
        retry_after: Duration,
    },
    /// The gateway's queue for the upstream's concurrency slots is full: local overload, shed
    /// like [`AapError::Overloaded`] (`RATE_LIMITED`, HTTP 503), never an upstream failure.
    #[error("upstream `{upstream}` busy: no concurrency slot within {waited:?}")]
    UpstreamBusy { upstream: String, waited: Duration },
    /// The upstream's own limit: it answered `429` (or `503` with `Retry-After`) beyond what a
    /// retry within the call's budget could wait for, or its pace (`max_requests_per_second`,
    /// its `X-RateLimit-*` headers) has no turn for this call within `timeouts.queue`.
    /// `RATE_LIMITED` with the upstream's hint (HTTP 503: the dealer's system is full, not the
    /// caller over its quota).
    #[error("upstream `{upstream}` rate limited: next call in {retry_after:?}")]
    UpstreamRateLimited {
        upstream: String,
        retry_after: Duration,
    },
    /// The upstream refused the call in a way the same call would meet again (an unhandled 4xx
    /// other than 408 / 429, a SOAP `Client` / `Sender` fault): `INTERNAL_ERROR`, not retryable.
    #[error("upstream `{upstream}` refused the call: {cause}")]
    UpstreamRefused { upstream: String, cause: String },
    #[error("upstream `{upstream}` sent an invalid response: {cause}")]
    InvalidUpstreamResponse { upstream: String, cause: String },
    /// A reply built by a mapping failed the AAP response schema.
    #[error(
        "reply for {skill} built by {mapping} failed the response schema: {}",
        summarize(violations)
    )]
    InvalidReply {
        skill: String,
        mapping: String,
        violations: Vec<Violation>,
    },
    /// What the gateway could fetch cannot be the whole answer (docs/protocol.md §Exact or
    /// refused): `INTERNAL_ERROR` rather than a partial page dressed as whole.
    #[error("{mapping}: the answer would not be whole: {cause}")]
    Incomplete { mapping: String, cause: Incomplete },
    #[error("internal error: {0}")]
    Internal(String),

    // --- a lead whose delivery is not over: INTERNAL_ERROR, retryable, with a hint ---
    /// A `lead.submit` with this idempotency key is being delivered (by this replica or
    /// another), or the shared store is recovering from a restart: nothing new was started.
    #[error("a lead with this idempotency key is in progress; retry after {retry_after:?}")]
    LeadInProgress { retry_after: Duration },
    /// The key's delivery ended with an unknown outcome and `idempotency.on_ambiguous: hold`
    /// keeps it for reconciliation: never delivered again under this key.
    #[error("the lead with reference {reference} is held for reconciliation")]
    LeadHeld {
        reference: String,
        retry_after: Duration,
    },
}

/// Why what the gateway fetched cannot be the whole answer. Each is counted
/// (`aap_gateway_mapping_events_total{event}`, [`Incomplete::event`]) and logged with the
/// dealer and mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incomplete {
    /// The upstream reports more matches than its paging let the gateway fetch (no
    /// `pagination`, or pages that end early).
    #[error(
        "the upstream reports {reported} matches and {fetched} could be fetched; declare how it \
         pages (`pagination`), or a `max_size` it honours"
    )]
    Unreachable { reported: usize, fetched: usize },
    /// A page came back shorter than asked, and the next page held more records: the
    /// upstream's page size is smaller than the one asked for.
    #[error(
        "page {page} held {got} records of the {asked} asked for and the next page held more: \
         the upstream caps its pages below `pagination.max_size`"
    )]
    ShortPage { page: u64, got: usize, asked: u64 },
    /// A record came back twice in one walk: the position did not reach the upstream, or its
    /// order moved between pages.
    #[error(
        "a record came back twice (on page {page}): the position did not reach the upstream or its order moved"
    )]
    Repeated { page: u64 },
    /// The upstream listed more records than its own total.
    #[error("the upstream listed {fetched} records but reports {reported}")]
    Overcounted { reported: usize, fetched: usize },
    /// The answer needs more upstream listings than `scan_limit`.
    #[error("the search needs more than scan_limit ({limit}) upstream listings")]
    ScanLimit { limit: usize },
}

impl Incomplete {
    /// The event name its metric counts under.
    pub fn event(&self) -> &'static str {
        match self {
            Incomplete::Unreachable { .. } => "incomplete_unreachable",
            Incomplete::ShortPage { .. } => "incomplete_short_page",
            Incomplete::Repeated { .. } => "incomplete_repeated_record",
            Incomplete::Overcounted { .. } => "incomplete_overcounted",
            Incomplete::ScanLimit { .. } => "scan_limit_reached",
        }
    }

    /// Whether the same call may be whole later: records that moved while the gateway paged
    /// may settle; a mapping that cannot reach every record never will.
    pub fn retryable(&self) -> bool {
        match self {
            Incomplete::Repeated { .. } | Incomplete::Overcounted { .. } => true,
            Incomplete::Unreachable { .. }
            | Incomplete::ShortPage { .. }
            | Incomplete::ScanLimit { .. } => false,
        }
    }
}

/// `"/data/vehicles/0/price (type: must be integer), …"` for logs.
fn summarize(violations: &[Violation]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .map(|v| format!("{} ({}: {})", v.instance_location, v.keyword, v.error))
        .collect();
    parts.join(", ")
}

impl AapError {
    /// The AAP code this error answers with (`aap.error.code`), or `None` for an A2A protocol
    /// or authentication error, which keeps A2A's own shape. `binding::wire_error::to_wire`
    /// writes the same code (a test there holds the two together); `test-mappings` compares
    /// an example's `expect_error` with it.
    pub fn aap_code(&self) -> Option<AapCode> {
        match self {
            AapError::Domain { code, .. } | AapError::Validation { code, .. } => Some(*code),
            AapError::UpstreamTimeout { .. }
            | AapError::UpstreamUnavailable { .. }
            | AapError::UpstreamResting { .. }
            | AapError::UpstreamRefused { .. }
            | AapError::InvalidUpstreamResponse { .. }
            | AapError::InvalidReply { .. }
            | AapError::Incomplete { .. }
            | AapError::Internal(_)
            | AapError::LeadInProgress { .. }
            | AapError::LeadHeld { .. } => Some(AapCode::InternalError),
            AapError::RateLimited { .. }
            | AapError::Overloaded { .. }
            | AapError::UpstreamBusy { .. }
            | AapError::UpstreamRateLimited { .. } => Some(AapCode::RateLimited),
            AapError::Parse { .. }
            | AapError::InvalidRequest { .. }
            | AapError::MethodNotFound { .. }
            | AapError::InvalidParams { .. }
            | AapError::TaskNotFound
            | AapError::PushNotificationNotSupported
            | AapError::UnsupportedOperation { .. }
            | AapError::ContentTypeNotSupported { .. }
            | AapError::RequestMediaType { .. }
            | AapError::ExtensionSupportRequired { .. }
            | AapError::VersionNotSupported { .. }
            | AapError::Unauthenticated { .. }
            | AapError::PermissionDenied { .. } => None,
        }
    }

    /// An AAP domain error with the code's default message.
    pub fn domain(code: AapCode, message: impl Into<String>) -> AapError {
        AapError::Domain {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn unsupported_skill(skill: &str, served: &[&str]) -> AapError {
        AapError::Domain {
            code: AapCode::UnsupportedSkill,
            message: format!("This dealer agent does not implement the skill `{skill}`."),
            details: Some(serde_json::json!({ "skill": skill, "supported_skills": served })),
        }
    }
}
