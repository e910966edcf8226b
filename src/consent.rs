//! The consent rules (docs/protocol.md §Consent) that a schema cannot express, checked before a
//! lead reaches any upstream.
//!
//! The request schema has already refused an absent or malformed grant (`CONTACT_CONSENT_REQUIRED`
//! / `INVALID_CONSENT`, chosen by `schema::classify`). What is left depends on the clock and on
//! the dealer: a grant that has expired or is dated in the future is not usable
//! (`INVALID_CONSENT`); a grant that does not cover the channel the buyer asked to be contacted
//! on, or any channel the dealer follows up on, or any contact point the customer gave, leaves
//! the dealer no lawful way to answer (`CONTACT_CONSENT_REQUIRED`).

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::error::{AapCode, AapError, Violation};

/// How far in the future `granted_at` may lie: buyer agents' clocks drift, and a grant a few
/// seconds "from the future" was still given by a person a moment ago.
pub const CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The channels consent can name (docs/protocol.md §Consent).
pub const CHANNELS: [&str; 3] = ["email", "phone", "sms"];

/// Checks the consent of a schema-valid `lead.submit.request` at `now`. `follow_up` are the
/// channels the dealer's process uses (empty = any channel will do).
pub fn check(request: &Value, now: Timestamp, follow_up: &[String]) -> Result<(), AapError> {
    let consent = request.get("consent").unwrap_or(&Value::Null);
    check_times(consent, now)?;
    check_channels(request, consent, follow_up)
}

fn check_times(consent: &Value, now: Timestamp) -> Result<(), AapError> {
    let time = |key: &str| {
        consent
            .get(key)
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<Timestamp>().ok())
    };
    let mut violations = Vec::new();
    let granted = time("granted_at");
    let expires = time("expires_at");
    let skew = jiff::SignedDuration::try_from(CLOCK_SKEW).unwrap_or_default();
    if let Some(granted) = granted
        && granted.duration_since(now) > skew
    {
        violations.push(violation(
            "/consent/granted_at",
            "future",
            "the grant is dated in the future",
        ));
    }
    if let Some(expires) = expires {
        if expires <= now {
            violations.push(violation(
                "/consent/expires_at",
                "expired",
                "the grant has expired",
            ));
        } else if granted.is_some_and(|g| expires <= g) {
            violations.push(violation(
                "/consent/expires_at",
                "order",
                "the grant expires before it was granted",
            ));
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(AapError::Validation {
            code: AapCode::InvalidConsent,
            violations,
        })
    }
}

fn check_channels(request: &Value, consent: &Value, follow_up: &[String]) -> Result<(), AapError> {
    let allowed: Vec<&str> = consent
        .get("allowed_channels")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let customer = request.get("customer").unwrap_or(&Value::Null);
    let has = |key: &str| customer.get(key).and_then(Value::as_str).is_some();
    let refuse = |message: String, needed: Vec<&str>| {
        Err(AapError::Domain {
            code: AapCode::ContactConsentRequired,
            message,
            details: Some(json!({
                "required_channels": needed,
                "allowed_channels": allowed,
            })),
        })
    };

    // The buyer asked to be contacted on a channel it did not consent to.
    if let Some(preferred) = customer.get("preferred_contact").and_then(Value::as_str)
        && preferred != "any"
        && !allowed.contains(&preferred)
    {
        return refuse(
            format!(
                "The customer prefers to be contacted by {preferred}, but consent does not allow \
                 {preferred}; add it to consent.allowed_channels or change preferred_contact."
            ),
            vec![preferred],
        );
    }
    // None of the dealer's follow-up channels is allowed.
    if !follow_up.is_empty() && !follow_up.iter().any(|c| allowed.contains(&c.as_str())) {
        return refuse(
            format!(
                "This dealer follows up by {}; consent allows none of them.",
                follow_up.join(" or ")
            ),
            follow_up.iter().map(String::as_str).collect(),
        );
    }
    // An allowed channel must reach the customer: email needs an address, phone and sms a number.
    let reachable = allowed.iter().any(|c| match *c {
        "email" => has("email"),
        "phone" | "sms" => has("phone"),
        _ => false,
    });
    if !reachable {
        return refuse(
            "Consent allows no channel the customer gave contact details for (email needs \
             customer.email; phone and sms need customer.phone)."
                .to_owned(),
            allowed.clone(),
        );
    }
    Ok(())
}

fn violation(at: &str, keyword: &str, error: &str) -> Violation {
    Violation {
        instance_location: at.to_owned(),
        keyword: keyword.to_owned(),
        error: error.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-05-01T12:00:00Z";

    fn lead(consent: Value, customer: Value) -> Value {
        json!({ "type": "lead.submit.request", "customer": customer, "consent": consent,
                "source_agent": { "name": "t" } })
    }

    fn grant(channels: &[&str]) -> Value {
        json!({ "granted_at": "2026-04-30T10:16:00Z", "allowed_channels": channels,
                "consent_text": "I agree.", "scope": ["lead_submission"] })
    }

    fn anna() -> Value {
        json!({ "first_name": "Anna", "last_name": "Lee", "email": "anna@example.com",
                "phone": "+14155550123" })
    }

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn code(r: Result<(), AapError>) -> Option<AapCode> {
        match r {
            Ok(()) => None,
            Err(AapError::Validation { code, .. } | AapError::Domain { code, .. }) => Some(code),
            Err(e) => panic!("unexpected {e:?}"),
        }
    }

    #[test]
    fn a_current_grant_covering_the_preferred_channel_passes() {
        let mut customer = anna();
        customer["preferred_contact"] = json!("phone");
        let r = check(&lead(grant(&["email", "phone"]), customer), now(), &[]);
        assert_eq!(code(r), None);
    }

    #[test]
    fn an_expired_grant_is_invalid_consent() {
        let mut g = grant(&["email"]);
        g["expires_at"] = json!("2026-05-01T11:59:59Z");
        let r = check(&lead(g, anna()), now(), &[]);
        match r {
            Err(AapError::Validation { code, violations }) => {
                assert_eq!(code, AapCode::InvalidConsent);
                assert_eq!(violations[0].instance_location, "/consent/expires_at");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_grant_dated_in_the_future_is_invalid_beyond_the_clock_skew() {
        let mut g = grant(&["email"]);
        g["granted_at"] = json!("2026-05-01T12:04:00Z");
        assert_eq!(code(check(&lead(g.clone(), anna()), now(), &[])), None);
        g["granted_at"] = json!("2026-05-01T12:06:00Z");
        assert_eq!(
            code(check(&lead(g, anna()), now(), &[])),
            Some(AapCode::InvalidConsent)
        );
    }

    #[test]
    fn a_grant_expiring_before_it_was_given_is_invalid() {
        let mut g = grant(&["email"]);
        g["granted_at"] = json!("2026-05-01T11:00:00Z");
        g["expires_at"] = json!("2026-05-01T10:00:00Z");
        // Expired too; one report names what is wrong first.
        assert_eq!(
            code(check(&lead(g, anna()), now(), &[])),
            Some(AapCode::InvalidConsent)
        );
    }

    #[test]
    fn a_preferred_channel_outside_the_grant_needs_consent() {
        let mut customer = anna();
        customer["preferred_contact"] = json!("sms");
        let r = check(
            &lead(grant(&["email", "phone"]), customer.clone()),
            now(),
            &[],
        );
        assert_eq!(code(r), Some(AapCode::ContactConsentRequired));
        customer["preferred_contact"] = json!("any");
        let r = check(&lead(grant(&["email"]), customer), now(), &[]);
        assert_eq!(code(r), None);
    }

    #[test]
    fn the_dealer_needs_one_of_its_follow_up_channels() {
        let follow_up = vec!["phone".to_owned(), "sms".to_owned()];
        let r = check(&lead(grant(&["email"]), anna()), now(), &follow_up);
        assert_eq!(code(r), Some(AapCode::ContactConsentRequired));
        let r = check(&lead(grant(&["email", "sms"]), anna()), now(), &follow_up);
        assert_eq!(code(r), None);
    }

    #[test]
    fn an_allowed_channel_must_reach_the_customer() {
        let customer = json!({ "first_name": "A", "last_name": "B", "phone": "+14155550123" });
        let r = check(&lead(grant(&["email"]), customer.clone()), now(), &[]);
        assert_eq!(code(r), Some(AapCode::ContactConsentRequired));
        let r = check(&lead(grant(&["sms"]), customer), now(), &[]);
        assert_eq!(code(r), None);
    }
}
