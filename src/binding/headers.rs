//! A2A service parameters and HTTP headers shared by both bindings: the request media type,
//! `A2A-Version`, `A2A-Extensions` activation, and the headers an error reply carries.

use std::time::Duration;

use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

use crate::app::Dealer;
use crate::error::AapError;

/// The request's `Content-Type` must be one of `accepted` (parameters such as `charset` allowed,
/// case-insensitive).
pub fn check_media_type(headers: &HeaderMap, accepted: &[&str]) -> Result<(), AapError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if accepted.iter().any(|a| essence.eq_ignore_ascii_case(a)) {
        return Ok(());
    }
    let shown = if content_type.is_empty() {
        "<absent>"
    } else {
        content_type
    };
    Err(AapError::RequestMediaType {
        detail: format!(
            "request Content-Type `{shown}`; send {}",
            accepted.join(" or ")
        ),
    })
}

/// `A2A-Version` must be present with Major.Minor 1.0; a patch number is ignored
/// (docs/protocol.md §Request headers).
pub fn check_version(headers: &HeaderMap) -> Result<(), AapError> {
    let refused = |requested| Err(AapError::VersionNotSupported { requested });
    let Some(raw) = headers.get("a2a-version") else {
        return refused(None);
    };
    let Ok(text) = raw.to_str() else {
        return refused(Some("<not text>".to_owned()));
    };
    let text = text.trim();
    let mut parts = text.split('.');
    let ok = parts.next() == Some("1")
        && parts.next() == Some("0")
        && parts.clone().count() <= 1
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        refused(Some(text.to_owned()))
    }
}

/// Whether `A2A-Extensions` (any number of header lines, comma-separated members) names this
/// dealer's exact AAP extension URI.
pub fn activated(dealer: &Dealer, headers: &HeaderMap) -> bool {
    let uri = dealer.extension_uri();
    headers
        .get_all("a2a-extensions")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|member| member.trim() == uri)
}

/// The activation error naming this dealer's URI (docs/protocol.md §A2A protocol errors).
pub fn extension_required(dealer: &Dealer) -> AapError {
    AapError::ExtensionSupportRequired {
        uri: dealer.extension_uri().to_owned(),
    }
}

/// `Retry-After` for a refusal that says when to come back, `WWW-Authenticate` with a 401.
pub fn error_headers(headers: &mut HeaderMap, status: StatusCode, retry_after: Option<Duration>) {
    if let Some(after) = retry_after {
        // Whole seconds, rounded up: a client that waits this long is admitted.
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static(crate::auth::CHALLENGE),
        );
    }
}
