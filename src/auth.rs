//! Client authentication, optional and per skill (`auth.mode`, `auth.skills`; AAP agents are
//! public by default), e.g. API keys for `lead.submit` while search stays public.
//!
//! A caller presents an API key as `Authorization: Bearer <key>` or `X-API-Key: <key>`. Keys are
//! configured by their SHA-256 only, so a leaked configuration leaks no key; the binding hashes
//! what the caller sent ([`Presented`]) and this module looks the hash up. A key may be limited
//! to some dealers and may carry its own quota. The authenticated key id — never the key — is
//! the client for rate limits, lead idempotency and logs. A key presented to a public skill is
//! checked all the same: a wrong key is a client bug to report early, not a reason to count the
//! caller as someone else.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::error::AapError;
use crate::protocol::Skill;
use crate::settings::AuthSettings;

/// The `WWW-Authenticate` challenge of a 401.
pub const CHALLENGE: &str = "Bearer realm=\"aap-gateway\"";

pub use crate::protocol::Presented;

impl Presented {
    /// Reads `Authorization: Bearer …` or `X-API-Key: …` (an empty key counts as none).
    pub fn from_headers(headers: &HeaderMap) -> Presented {
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then_some(token.trim())
            });
        let key = bearer.or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        });
        Presented(
            key.filter(|k| !k.is_empty())
                .map(|k| Sha256::digest(k.as_bytes()).into()),
        )
    }

    /// Whether the caller sent a key at all.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }
}

#[derive(Debug)]
struct Entry {
    id: Arc<str>,
    dealers: Option<Vec<String>>,
}

/// The configured keys, by hash, and the skills served without one.
#[derive(Debug)]
pub struct Authenticator {
    keys: HashMap<[u8; 32], Entry>,
    public_skills: std::collections::BTreeSet<Skill>,
}

impl Authenticator {
    pub fn new(settings: &AuthSettings) -> Authenticator {
        Authenticator {
            public_skills: settings.public_skills.clone(),
            keys: settings
                .keys
                .iter()
                .map(|k| {
                    (
                        k.sha256,
                        Entry {
                            id: Arc::from(k.id.as_str()),
                            dealers: k.dealers.clone(),
                        },
                    )
                })
                .collect(),
        }
    }

    /// Whether calls of `skill` must present a key.
    pub fn requires_key(&self, skill: Skill) -> bool {
        !self.public_skills.contains(&skill)
    }

    /// The id of the key `presented`, if it is valid for `dealer`.
    pub fn authenticate(&self, presented: Presented, dealer: &str) -> Result<Arc<str>, AapError> {
        let Presented(Some(hash)) = presented else {
            return Err(AapError::Unauthenticated { invalid: false });
        };
        let entry = self
            .keys
            .get(&hash)
            .ok_or(AapError::Unauthenticated { invalid: true })?;
        if entry
            .dealers
            .as_ref()
            .is_some_and(|d| !d.iter().any(|id| id == dealer))
        {
            return Err(AapError::PermissionDenied {
                key: entry.id.to_string(),
            });
        }
        Ok(Arc::clone(&entry.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::ApiKey;

    fn auth() -> Authenticator {
        let key = |id: &str, secret: &str, dealers: Option<Vec<String>>| ApiKey {
            id: id.to_owned(),
            sha256: Sha256::digest(secret.as_bytes()).into(),
            dealers,
            quota: None,
        };
        Authenticator::new(&AuthSettings {
            public_skills: [Skill::InventorySearch].into(),
            keys: vec![
                key("everywhere", "s3cret-all", None),
                key(
                    "toyota-only",
                    "s3cret-toyota",
                    Some(vec!["demo_toyota".to_owned()]),
                ),
            ],
            keys_file: None,
        })
    }

    fn headers(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        h
    }

    #[test]
    fn a_bearer_token_or_an_x_api_key_header_authenticates() {
        let a = auth();
        for h in [
            headers("authorization", "Bearer s3cret-all"),
            headers("authorization", "bearer  s3cret-all "),
            headers("x-api-key", "s3cret-all"),
        ] {
            let id = a.authenticate(Presented::from_headers(&h), "demo_honda");
            assert_eq!(id.unwrap().as_ref(), "everywhere");
        }
    }

    #[test]
    fn missing_and_wrong_keys_are_unauthenticated() {
        let a = auth();
        let none = a.authenticate(Presented::from_headers(&HeaderMap::new()), "d");
        assert!(matches!(
            none,
            Err(AapError::Unauthenticated { invalid: false })
        ));
        let basic = headers("authorization", "Basic czNjcmV0LWFsbA==");
        let wrong = a.authenticate(Presented::from_headers(&basic), "d");
        assert!(matches!(
            wrong,
            Err(AapError::Unauthenticated { invalid: false })
        ));
        let bad = headers("x-api-key", "guess");
        let bad = a.authenticate(Presented::from_headers(&bad), "d");
        assert!(matches!(
            bad,
            Err(AapError::Unauthenticated { invalid: true })
        ));
    }

    #[test]
    fn only_the_public_skills_go_without_a_key() {
        let a = auth();
        assert!(!a.requires_key(Skill::InventorySearch));
        assert!(a.requires_key(Skill::LeadSubmit));
        assert!(a.requires_key(Skill::DealerInformation));
    }

    #[test]
    fn a_key_limited_to_some_dealers_is_refused_elsewhere() {
        let a = auth();
        let h = headers("x-api-key", "s3cret-toyota");
        assert!(
            a.authenticate(Presented::from_headers(&h), "demo_toyota")
                .is_ok()
        );
        assert!(matches!(
            a.authenticate(Presented::from_headers(&h), "demo_honda"),
            Err(AapError::PermissionDenied { .. })
        ));
    }
}
