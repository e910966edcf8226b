//! Authentication to an upstream: a fixed header (API key, Basic, static bearer token), or an
//! OAuth 2.0 client-credentials token fetched, cached and refreshed by the gateway.
//!
//! OAuth2 tokens: the token endpoint is often as fragile as the system it guards, so one token
//! serves every call until shortly before it expires (`min(30 s, 10 % of its lifetime)` early, so
//! a call never leaves with a token that dies on the way). Concurrent callers that find no fresh
//! token wait for a single fetch (single flight) instead of each asking for one. When the
//! upstream answers 401 the client invalidates that token (only that one: a newer token fetched
//! meanwhile is kept) and tries once more with a fresh token; at most one such forced refresh
//! per second, so an upstream that rejects every token does not flood the token endpoint.
//!
//! Secrets and tokens are held in sensitive `HeaderValue`s and never logged.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;

use super::UpstreamError;
use super::config::{FileClientAuth, OAuth2Settings, UpstreamAuth, base64_encode};
use crate::formats::escape::FORM;

/// Lifetime assumed when the token endpoint does not say (`expires_in` absent).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(300);
/// The most a token is refreshed ahead of its expiry.
const MAX_REFRESH_AHEAD: Duration = Duration::from_secs(30);
/// A 401 forces a token refresh at most this often.
const MIN_FORCED_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Largest token endpoint reply read.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

/// How calls to one upstream are authenticated.
#[derive(Debug)]
pub(crate) enum Auth {
    None,
    Static {
        name: HeaderName,
        value: HeaderValue,
    },
    OAuth2(Box<TokenSource>),
}

/// The header a call carries, and for OAuth2 which token it was (to invalidate it on a 401).
#[derive(Debug, Clone)]
pub(crate) struct Credential {
    pub(crate) name: HeaderName,
    pub(crate) value: HeaderValue,
    pub(crate) token_generation: Option<u64>,
}

impl Auth {
    pub(crate) fn new(
        upstream: &str,
        settings: Option<UpstreamAuth>,
        client: super::http_client::HttpClient,
        timeout: Duration,
    ) -> Auth {
        match settings {
            None => Auth::None,
            Some(UpstreamAuth::Static { name, value }) => Auth::Static { name, value },
            Some(UpstreamAuth::OAuth2(settings)) => Auth::OAuth2(Box::new(TokenSource {
                upstream: upstream.to_owned(),
                settings,
                client,
                timeout,
                cached: Mutex::new(Cache::default()),
                refresh: tokio::sync::Mutex::new(()),
            })),
        }
    }

    /// The header to send, fetching a token first when needed.
    pub(crate) async fn credential(&self) -> Result<Option<Credential>, UpstreamError> {
        match self {
            Auth::None => Ok(None),
            Auth::Static { name, value } => Ok(Some(Credential {
                name: name.clone(),
                value: value.clone(),
                token_generation: None,
            })),
            Auth::OAuth2(source) => {
                let token = source.token().await?;
                Ok(Some(Credential {
                    name: http::header::AUTHORIZATION,
                    value: token.value,
                    token_generation: Some(token.generation),
                }))
            }
        }
    }

    /// After a 401: forgets the token of `credential` (if it is still the cached one). `true`
    /// when the next call will carry a fresh token, so trying again makes sense.
    pub(crate) fn invalidate(&self, credential: Option<&Credential>) -> bool {
        self.invalidate_generation(credential.and_then(|c| c.token_generation))
    }

    /// [`Auth::invalidate`] of the token of `generation` (what a reply says it was sent with).
    pub(crate) fn invalidate_generation(&self, generation: Option<u64>) -> bool {
        match (self, generation) {
            (Auth::OAuth2(source), Some(generation)) => source.invalidate(generation),
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    /// `Bearer …`, sensitive.
    value: HeaderValue,
    refresh_at: Instant,
    generation: u64,
}

#[derive(Debug)]
pub(crate) struct TokenSource {
    upstream: String,
    settings: OAuth2Settings,
    client: super::http_client::HttpClient,
    timeout: Duration,
    /// The current token; a plain mutex, held for a clone only.
    cached: Mutex<Cache>,
    /// Held while fetching, so concurrent callers share one fetch.
    refresh: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Cache {
    token: Option<Token>,
    /// When a 401 last forced a refresh.
    last_forced: Option<Instant>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

impl TokenSource {
    fn fresh(&self) -> Option<Token> {
        let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        cached
            .token
            .as_ref()
            .filter(|t| Instant::now() < t.refresh_at)
            .cloned()
    }

    async fn token(&self) -> Result<Token, UpstreamError> {
        if let Some(token) = self.fresh() {
            return Ok(token);
        }
        let _single_flight = self.refresh.lock().await;
        // Someone else may have fetched while we waited.
        if let Some(token) = self.fresh() {
            return Ok(token);
        }
        let generation = {
            let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            cached.token.as_ref().map_or(1, |t| t.generation + 1)
        };
        let token = match tokio::time::timeout(self.timeout, self.fetch(generation)).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(UpstreamError::Auth(format!(
                    "token endpoint did not answer within {}",
                    humantime::format_duration(self.timeout)
                )));
            }
        };
        self.cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .token = Some(token.clone());
        Ok(token)
    }

    fn invalidate(&self, generation: u64) -> bool {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let Cache { token, last_forced } = &mut *cached;
        let now = Instant::now();
        match token {
            // A newer token is already cached, or this one is stale anyway: a retry gets a
            // fresh one.
            Some(token) if token.generation != generation || now >= token.refresh_at => true,
            None => true,
            // An upstream that rejects even fresh tokens must not turn every call into a token
            // request: at most one forced refresh per interval.
            Some(_)
                if last_forced
                    .is_some_and(|at| now.duration_since(at) < MIN_FORCED_REFRESH_INTERVAL) =>
            {
                false
            }
            Some(token) => {
                tracing::debug!(upstream = %self.upstream, "oauth2 token rejected (401); refreshing");
                token.refresh_at = now;
                *last_forced = Some(now);
                true
            }
        }
    }

    async fn fetch(&self, generation: u64) -> Result<Token, UpstreamError> {
        let s = &self.settings;
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        if let Some(scope) = &s.scope {
            form.push(("scope", scope));
        }
        if let Some(audience) = &s.audience {
            form.push(("audience", audience));
        }
        let mut headers = http::HeaderMap::with_capacity(3);
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        match s.client_auth {
            FileClientAuth::Body => {
                form.push(("client_id", &s.client_id));
                form.push(("client_secret", s.client_secret.expose()));
            }
            FileClientAuth::Basic => {
                let credentials = format!(
                    "{}:{}",
                    utf8_percent_encode(&s.client_id, FORM),
                    utf8_percent_encode(s.client_secret.expose(), FORM)
                );
                let mut value = HeaderValue::from_str(&format!(
                    "Basic {}",
                    base64_encode(credentials.as_bytes())
                ))
                .map_err(|_| UpstreamError::Auth("invalid client credentials".to_owned()))?;
                value.set_sensitive(true);
                headers.insert(http::header::AUTHORIZATION, value);
            }
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let uri = http::Uri::try_from(s.token_url.as_str())
            .map_err(|e| UpstreamError::Auth(format!("token request failed: token_url: {e}")))?;
        let started = Instant::now();
        let response = self
            .client
            .send(http::Method::POST, uri, headers, Some(body.into()))
            .await
            .map_err(|e| UpstreamError::Auth(format!("token request failed: {e}")))?;
        let (parts, mut reply) = response.into_parts();
        let status = parts.status;
        let mut body = Vec::new();
        loop {
            match reply.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
                        return Err(UpstreamError::Auth(format!(
                            "token reply larger than {MAX_TOKEN_RESPONSE_BYTES} bytes"
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(UpstreamError::Auth(format!(
                        "reading the token reply failed: {e}"
                    )));
                }
            }
        }
        tracing::debug!(
            upstream = %self.upstream,
            status = status.as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "oauth2 token request"
        );
        if !status.is_success() {
            // The body may echo credentials; only the status is reported.
            return Err(UpstreamError::Auth(format!(
                "token endpoint answered HTTP {}",
                status.as_u16()
            )));
        }
        let reply: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            UpstreamError::Auth(format!(
                "token reply is not a JSON object with `access_token`: {}",
                json_error_summary(&e)
            ))
        })?;
        if reply.access_token.is_empty() {
            return Err(UpstreamError::Auth(
                "token reply has an empty access_token".to_owned(),
            ));
        }
        let lifetime = match &reply.expires_in {
            None | Some(serde_json::Value::Null) => DEFAULT_TOKEN_LIFETIME,
            Some(value) => parse_expires_in(value).ok_or_else(|| {
                UpstreamError::Auth("token reply has an invalid expires_in".to_owned())
            })?,
        };
        let ahead = MAX_REFRESH_AHEAD.min(lifetime / 10);
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", reply.access_token)).map_err(|_| {
                UpstreamError::Auth("access_token is not a valid header value".to_owned())
            })?;
        value.set_sensitive(true);
        Ok(Token {
            value,
            refresh_at: started + lifetime.saturating_sub(ahead),
            generation,
        })
    }
}

/// `expires_in` as seconds: a number, or a string of one (some servers quote it).
fn parse_expires_in(value: &serde_json::Value) -> Option<Duration> {
    let seconds = match value {
        serde_json::Value::Number(n) => n.as_f64()?,
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    (0.0..1e9)
        .contains(&seconds)
        .then(|| Duration::from_secs_f64(seconds))
}

/// Describes a JSON error without quoting the input (it may hold a secret).
fn json_error_summary(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_accepts_numbers_and_numeric_strings() {
        assert_eq!(
            parse_expires_in(&serde_json::json!(3600)),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            parse_expires_in(&serde_json::json!("60")),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_expires_in(&serde_json::json!(-1)), None);
        assert_eq!(parse_expires_in(&serde_json::json!({})), None);
    }

    #[test]
    fn basic_client_credentials_are_form_encoded_first() {
        assert_eq!(utf8_percent_encode("a b:c", FORM).to_string(), "a%20b%3Ac");
    }
}
