//! What a key is: its [`KeyScope`] (dealer, caller, key) and the [`Fingerprint`] of the request
//! it came with.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical JSON of a request.
pub type Fingerprint = [u8; 32];

/// Where a key lives: (dealer id, who sent it, key). Who sent it is the authenticated API key
/// when auth is on — a client cannot then replay or block another client's keys by naming the
/// same agent — else the request's `source_agent.name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyScope {
    pub dealer: String,
    pub source: String,
    pub key: String,
}

impl KeyScope {
    /// The scope of a lead request's key, when it carries one; `api_key` is the id of the
    /// caller's authenticated key, if any.
    pub fn of(dealer: &str, api_key: Option<&str>, request: &Value) -> Option<KeyScope> {
        let key = request.get("idempotency_key")?.as_str()?;
        Some(KeyScope {
            dealer: dealer.to_owned(),
            source: key_owner(api_key, request).into_owned(),
            key: key.to_owned(),
        })
    }

    /// The key's name in a shared store: the dealer in clear (for operators), the buyer's
    /// strings hashed (any length, any characters, and no buyer text in Redis's key space).
    pub fn shared_key(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update((self.source.len() as u64).to_be_bytes());
        hasher.update(self.source.as_bytes());
        hasher.update(self.key.as_bytes());
        format!("{}:{}", self.dealer, hex(&hasher.finalize().into()))
    }
}

/// Who a lead's idempotency key belongs to (its scope, and its lead reference): the
/// authenticated API key when there is one, else the request's `source_agent.name`.
pub fn key_owner<'a>(api_key: Option<&str>, request: &'a Value) -> std::borrow::Cow<'a, str> {
    match api_key {
        Some(id) => std::borrow::Cow::Owned(format!("api key {id}")),
        None => std::borrow::Cow::Borrowed(
            request
                .pointer("/source_agent/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
    }
}

/// Lower-case hex of a fingerprint.
pub fn hex(fingerprint: &Fingerprint) -> String {
    let mut out = String::with_capacity(64);
    for byte in fingerprint {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// SHA-256 of the canonical JSON of `value`: object keys sorted at every level, no whitespace.
pub fn fingerprint(value: &Value) -> Fingerprint {
    let mut hasher = Sha256::new();
    canonical(value, &mut hasher);
    hasher.finalize().into()
}

fn canonical(value: &Value, out: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.update(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                out.update(Value::String(key.clone()).to_string().as_bytes());
                out.update(b":");
                if let Some(v) = map.get(key) {
                    canonical(v, out);
                }
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(item, out);
            }
            out.update(b"]");
        }
        scalar => out.update(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_fingerprint() {
        let a: Value = serde_json::from_str(r#"{"a": 1, "b": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"x":"s","y":[1,2]},"a":1}"#).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c = json!({"a": 1, "b": {"x": "s", "y": [2, 1]}});
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }
}
