//! The checks of `auth`: HTTP authentication (API key, Basic, bearer, OAuth2) and WS-Security.

use std::path::PathBuf;

use base64::Engine as _;

use super::check::Check;
use super::file::{FilePasswordType, FileUpstreamAuth, Secret};
use super::settings::{OAuth2Settings, UpstreamAuth, WsSecurity};

impl Check {
    fn auth(&mut self, auth: FileUpstreamAuth) -> Option<UpstreamAuth> {
        match auth {
            FileUpstreamAuth::ApiKey {
                header,
                value,
                value_file,
            } => {
                let name = self.header_name("/auth/header", &header);
                let secret = self.secret("value", value, value_file)?;
                let value = self.header_value("/auth/value", secret.expose(), true);
                Some(UpstreamAuth::Static {
                    name: name?,
                    value: value?,
                })
            }
            FileUpstreamAuth::Basic {
                username,
                password,
                password_file,
            } => {
                let mut ok = true;
                if username.is_empty() || username.contains(':') {
                    self.problem("/auth/username", "must be non-empty and without `:`");
                    ok = false;
                }
                let password = self.secret("password", password, password_file)?;
                let encoded = base64_encode(format!("{username}:{}", password.expose()).as_bytes());
                let value = self.header_value("/auth/password", &format!("Basic {encoded}"), true);
                ok.then_some(())?;
                Some(UpstreamAuth::Static {
                    name: http::header::AUTHORIZATION,
                    value: value?,
                })
            }
            FileUpstreamAuth::Bearer { token, token_file } => {
                let token = self.secret("token", token, token_file)?;
                let value =
                    self.header_value("/auth/token", &format!("Bearer {}", token.expose()), true)?;
                Some(UpstreamAuth::Static {
                    name: http::header::AUTHORIZATION,
                    value,
                })
            }
            FileUpstreamAuth::Oauth2 {
                token_url,
                client_id,
                client_secret,
                client_secret_file,
                scope,
                audience,
                client_auth,
            } => {
                let token_url = self.http_url("/auth/token_url", &token_url, "token_url");
                let mut ok = true;
                if client_id.is_empty() {
                    self.problem("/auth/client_id", "must not be empty");
                    ok = false;
                }
                let client_secret = self.secret("client_secret", client_secret, client_secret_file);
                ok.then_some(())?;
                Some(UpstreamAuth::OAuth2(OAuth2Settings {
                    token_url: token_url?,
                    client_id,
                    client_secret: client_secret?,
                    scope: scope.filter(|s| !s.trim().is_empty()),
                    audience: audience.filter(|s| !s.trim().is_empty()),
                    client_auth,
                }))
            }
            FileUpstreamAuth::WsSecurity { .. } => {
                self.problem(
                    "/auth/kind",
                    "`ws_security` travels in a SOAP envelope: only for `kind: soap`",
                );
                None
            }
            FileUpstreamAuth::SshKey { .. } => {
                self.problem(
                    "/auth/kind",
                    "`ssh_key` logs in over SSH: only for `kind: sftp`",
                );
                None
            }
        }
    }

    /// `auth`, with a catch-all problem when it failed without saying why.
    pub(super) fn http_auth(&mut self, auth: FileUpstreamAuth) -> Option<UpstreamAuth> {
        let before = self.problems.len();
        let auth = self.auth(auth);
        if auth.is_none() && self.problems.len() == before {
            self.problem("/auth", "invalid authentication settings");
        }
        auth
    }

    pub(super) fn ws_security(
        &mut self,
        username: String,
        password: Option<Secret>,
        password_file: Option<PathBuf>,
        password_type: FilePasswordType,
    ) -> Option<WsSecurity> {
        let mut ok = true;
        if username.is_empty() || username.chars().any(char::is_control) {
            self.problem(
                "/auth/username",
                "must be non-empty and without control characters",
            );
            ok = false;
        }
        let password = self.secret("password", password, password_file)?;
        if password.expose().chars().any(char::is_control) {
            // XML cannot carry most control characters; never echo the value.
            self.problem("/auth/password", "must not contain control characters");
            ok = false;
        }
        ok.then_some(WsSecurity {
            username,
            password,
            digest: password_type == FilePasswordType::Digest,
        })
    }
}

/// Standard base64 with padding (RFC 4648 §4), for HTTP Basic credentials.
pub(crate) fn base64_encode(input: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(input)
}
