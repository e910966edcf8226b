//! The checks of a `kind: sftp` entry: `sftp://host[:port]/directory`, the pinned host key
//! (`sftp.host_key`: fingerprints or whole keys, at least one, never trust on first use) and the
//! login (`auth`: `basic` for a password, `ssh_key` for a private key).

use std::str::FromStr as _;

use russh::keys::ssh_key::{Fingerprint, HashAlg, PublicKey};
use russh::keys::{Algorithm, PrivateKey};
use url::Url;

use super::check::Check;
use super::file::{FileHostKeys, FileSftp, FileUpstreamAuth, Secret};
use super::settings::SftpLogin;

/// How to find the key to pin, said wherever one is missing or unreadable.
const HOW_TO_PIN: &str = "ask the vendor for the server's host key fingerprint, or read it \
     (on a network you trust) with `ssh-keyscan -p PORT host | ssh-keygen -lf -` and pin the \
     `SHA256:…` of one of its keys: `sftp: { host_key: \"SHA256:…\" }`";

/// The SSH port when the URL names none.
const SSH_PORT: u16 = 22;

/// Where `base_url` points.
pub(super) struct SftpTarget {
    pub(super) url: Url,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) directory: String,
}

impl Check {
    /// `kind: sftp`: `sftp://host[:port]/directory`, no credentials, query or fragment.
    pub(super) fn sftp_url(&mut self, pointer: &str, text: &str) -> Option<SftpTarget> {
        let url = match Url::parse(text.trim()) {
            Ok(url) => url,
            Err(e) => {
                self.problem(pointer, format!("not a valid URL: {e}"));
                return None;
            }
        };
        let mut ok = true;
        if url.scheme() != "sftp" {
            self.problem(
                pointer,
                "base_url of `kind: sftp` is `sftp://host[:port]/directory`",
            );
            ok = false;
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        if host.is_empty() {
            self.problem(pointer, "base_url needs a host");
            ok = false;
        }
        if url.query().is_some() || url.fragment().is_some() {
            self.problem(pointer, "base_url must not have a query string or fragment");
            ok = false;
        }
        if !url.username().is_empty() || url.password().is_some() {
            self.problem(
                pointer,
                "base_url must not carry credentials; use `auth` (`basic` or `ssh_key`)",
            );
            ok = false;
        }
        let Ok(path) = percent_encoding::percent_decode_str(url.path()).decode_utf8() else {
            self.problem(pointer, "base_url's path is not UTF-8");
            return None;
        };
        // `/~/exports` is `exports` below the login's home directory (SFTP's relative paths).
        let directory = match path.strip_prefix("/~") {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                let rest = rest.trim_matches('/');
                if rest.is_empty() { "." } else { rest }.to_owned()
            }
            _ => match path.trim_end_matches('/') {
                "" => "/".to_owned(),
                dir => dir.to_owned(),
            },
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        ok.then_some(())?;
        Some(SftpTarget {
            port: url.port().unwrap_or(SSH_PORT),
            url,
            host,
            directory,
        })
    }

    /// `sftp.host_key`: the SHA-256 fingerprints to accept, and the algorithms of the pinned
    /// keys when every pin is a whole key.
    pub(super) fn host_keys(
        &mut self,
        sftp: Option<&FileSftp>,
    ) -> Option<(Vec<Fingerprint>, Vec<Algorithm>)> {
        let pins: Vec<&str> = match sftp.and_then(|s| s.host_key.as_ref()) {
            Some(FileHostKeys::One(pin)) => vec![pin.as_str()],
            Some(FileHostKeys::Many(pins)) => pins.iter().map(String::as_str).collect(),
            None => Vec::new(),
        };
        if pins.is_empty() {
            self.problem(
                "/sftp/host_key",
                format!(
                    "missing: an SFTP server is trusted only by its pinned host key (never on \
                     first use); {HOW_TO_PIN}"
                ),
            );
            return None;
        }
        let mut fingerprints = Vec::with_capacity(pins.len());
        let mut algorithms = Vec::with_capacity(pins.len());
        let mut whole_keys = true;
        let mut ok = true;
        for (i, pin) in pins.iter().enumerate() {
            let pointer = match sftp.and_then(|s| s.host_key.as_ref()) {
                Some(FileHostKeys::Many(_)) => format!("/sftp/host_key/{i}"),
                _ => "/sftp/host_key".to_owned(),
            };
            match parse_pin(pin) {
                Ok(Pin::Fingerprint(fingerprint)) => {
                    whole_keys = false;
                    fingerprints.push(fingerprint);
                }
                Ok(Pin::Key(key)) => {
                    fingerprints.push(key.fingerprint(HashAlg::Sha256));
                    if !algorithms.contains(&key.algorithm()) {
                        algorithms.push(key.algorithm());
                    }
                }
                Err(why) => {
                    self.problem(&pointer, format!("{why}; {HOW_TO_PIN}"));
                    ok = false;
                }
            }
        }
        ok.then_some(())?;
        if !whole_keys {
            algorithms.clear();
        }
        Some((fingerprints, algorithms))
    }

    /// `auth` of `kind: sftp`: `basic` (a password) or `ssh_key` (a private key), required.
    pub(super) fn sftp_login(
        &mut self,
        auth: Option<FileUpstreamAuth>,
    ) -> Option<(String, SftpLogin)> {
        let username_ok = |c: &mut Check, username: &str| {
            let ok = !username.is_empty() && !username.chars().any(char::is_control);
            if !ok {
                c.problem(
                    "/auth/username",
                    "must be non-empty and without control characters",
                );
            }
            ok
        };
        match auth {
            None => {
                self.problem(
                    "/auth",
                    "missing: `kind: sftp` logs in with `auth: { kind: ssh_key, username, \
                     private_key_file }` or `auth: { kind: basic, username, password }`",
                );
                None
            }
            Some(FileUpstreamAuth::Basic {
                username,
                password,
                password_file,
            }) => {
                let ok = username_ok(self, &username);
                let password = self.secret("password", password, password_file)?;
                ok.then_some((username, SftpLogin::Password(password)))
            }
            Some(FileUpstreamAuth::SshKey {
                username,
                private_key,
                private_key_file,
                passphrase,
            }) => {
                let ok = username_ok(self, &username);
                let text = self.secret("private_key", private_key, private_key_file)?;
                let key = self.private_key(&text, passphrase.as_ref())?;
                ok.then_some((username, SftpLogin::Key(std::sync::Arc::new(key))))
            }
            Some(_) => {
                self.problem(
                    "/auth/kind",
                    "`kind: sftp` logs in with `ssh_key` (a private key) or `basic` (a password)",
                );
                None
            }
        }
    }

    /// The private key of an `ssh_key` login, decrypted with `passphrase` when it is encrypted.
    fn private_key(&mut self, text: &Secret, passphrase: Option<&Secret>) -> Option<PrivateKey> {
        let key =
            match russh::keys::decode_secret_key(text.expose(), passphrase.map(Secret::expose)) {
                Ok(key) => key,
                // The key's text is never echoed.
                Err(russh::keys::Error::KeyIsEncrypted) => {
                    self.problem(
                        "/auth/passphrase",
                        "the private key is encrypted: give its `passphrase` (usually `${NAME}`)",
                    );
                    return None;
                }
                Err(e) => {
                    self.problem(
                        "/auth/private_key",
                        format!(
                            "not a usable private key ({e}): give an OpenSSH private key \
                         (`ssh-keygen -t ed25519`)"
                        ),
                    );
                    return None;
                }
            };
        Some(key)
    }
}

enum Pin {
    Fingerprint(Fingerprint),
    Key(PublicKey),
}

/// A pin as written: `SHA256:…`, a public key line (`ssh-ed25519 AAAA… comment`) or a
/// `known_hosts` line (`[host]:2222 ssh-ed25519 AAAA…`).
fn parse_pin(text: &str) -> Result<Pin, String> {
    let text = text.trim();
    if let Some((alg, _)) = text.split_once(':')
        && !text.contains(char::is_whitespace)
    {
        if alg.eq_ignore_ascii_case("md5") {
            return Err("MD5 fingerprints are too weak to pin: give the `SHA256:…` one".to_owned());
        }
        return Fingerprint::from_str(text)
            .map(Pin::Fingerprint)
            .map_err(|_| format!("`{text}` is not a `SHA256:…` fingerprint"));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    // The key type is the first word, or the second after a `known_hosts` host pattern.
    let start = words
        .iter()
        .position(|w| Algorithm::new(w).is_ok_and(|a| !matches!(a, Algorithm::Other(_))))
        .filter(|&i| i <= 1 && i + 1 < words.len())
        .ok_or_else(|| {
            "not a `SHA256:…` fingerprint, a public key (`ssh-ed25519 AAAA…`) or a \
             `known_hosts` line"
                .to_owned()
        })?;
    PublicKey::from_openssh(&format!("{} {}", words[start], words[start + 1]))
        .map(Pin::Key)
        .map_err(|e| format!("the pinned public key does not parse: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGj9c6ByI5W0Qkv4+aWrDWOFygjfc6DYyAArPVXXbWtH";

    #[test]
    fn pins_are_fingerprints_keys_or_known_hosts_lines() {
        let key = PublicKey::from_openssh(ED25519).unwrap();
        let fingerprint = key.fingerprint(HashAlg::Sha256);
        for text in [
            ED25519.to_owned(),
            format!("{ED25519} vendor@example"),
            format!("[sftp.example]:2222 {ED25519}"),
            format!("sftp.example {ED25519} comment"),
        ] {
            match parse_pin(&text) {
                Ok(Pin::Key(parsed)) => {
                    assert_eq!(parsed.fingerprint(HashAlg::Sha256), fingerprint, "{text}")
                }
                _ => panic!("{text}: not read as a key"),
            }
        }
        match parse_pin(&format!("  {fingerprint} ")) {
            Ok(Pin::Fingerprint(parsed)) => assert_eq!(parsed, fingerprint),
            _ => panic!("fingerprint not read"),
        }
        for bad in [
            "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48",
            "SHA256:not-base64!",
            "ssh-ed25519",
            "a b ssh-ed25519 AAAA",
            "",
        ] {
            assert!(parse_pin(bad).is_err(), "{bad} accepted");
        }
    }
}
