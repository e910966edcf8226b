//! `kind: sftp`: a feed document on an SFTP server (how inventory syndication vendors deliver
//! exports), answered as an HTTP reply would be so that the feed runtime reads it as any other:
//! `200` with `ETag` and `Last-Modified` and the body streamed in pieces, or `304` to a
//! conditional request for the same file.
//!
//! Trust: the server must show a host key whose SHA-256 fingerprint is pinned in
//! `sftp.host_key`; any other is refused during the key exchange, before the login's secret is
//! sent ([`UpstreamError::HostKey`], a `warn` line naming the fingerprint seen, and the
//! `host_key` error kind of the upstream's metrics). There is no trust on first use.
//!
//! One connection per read: a feed is read every few minutes, so a pooled SSH session would
//! only be one more thing to go stale. `timeouts.connect` bounds the TCP connection, the key
//! exchange, the login and the SFTP subsystem's start; `timeouts.request` the whole read, from
//! the first byte sent to the file's last.
//!
//! Identity and half-written files, as for `kind: file` (`file_source.rs`): the `ETag` is the
//! open file's size and modification time (SFTP gives seconds), so an unchanged file is not
//! read again (`If-None-Match`) and a replaced one is. A file modified within the last
//! [`SETTLE`] is looked at again after it, and a file whose size or modification time moved
//! between the looks, or while it was read, or that ended short of its size, is refused with an
//! error naming the writer's contract (write under another name, rename into place): the
//! refresh fails, the previous copy keeps serving, the next refresh tries again.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, StatusCode};
use russh::keys::PublicKeyOrCertificate;
use russh::keys::ssh_key::{Fingerprint, HashAlg};
use russh_sftp::client::SftpSession;
use russh_sftp::client::fs::File;
use tokio::io::AsyncReadExt as _;

use super::config::{SftpLogin, SftpSettings};
use super::{UpstreamError, UpstreamRequest};

/// How long a file must have stayed unchanged before it is read. SFTP's modification times
/// are whole seconds: two of them, so that a write in the same second as the look is seen.
const SETTLE: Duration = Duration::from_secs(2);

/// The most read at once from the file (the SFTP client pipelines its requests below it).
const PIECE: usize = 64 * 1024;

/// What one look at the open file sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Look {
    size: u64,
    /// Seconds since the epoch.
    modified: u32,
}

impl Look {
    async fn of(file: &File, path: &str) -> Result<Look, UpstreamError> {
        let attrs = file.metadata().await.map_err(|e| failed(path, &e))?;
        if attrs.is_dir() {
            return Err(UpstreamError::Connect(format!(
                "`{path}` on the SFTP server is a directory, not a file"
            )));
        }
        match (attrs.size, attrs.mtime) {
            (Some(size), Some(modified)) => Ok(Look { size, modified }),
            _ => Err(UpstreamError::Protocol(format!(
                "the SFTP server gives no size or modification time for `{path}`"
            ))),
        }
    }

    fn etag(&self) -> String {
        format!("\"{}-{}\"", self.size, self.modified)
    }

    fn modified(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(self.modified.into())
    }
}

fn failed(path: &str, e: &russh_sftp::client::error::Error) -> UpstreamError {
    UpstreamError::Connect(format!("cannot read `{path}` over SFTP: {e}"))
}

fn changing(path: &str) -> UpstreamError {
    UpstreamError::Protocol(format!(
        "`{path}` on the SFTP server changed while it was looked at: it is being written in \
         place. The writer must upload under another name and rename the file into place"
    ))
}

/// The SSH client's side of the key exchange: the server's key must be a pinned one.
struct Pinned {
    pins: Arc<[Fingerprint]>,
}

/// What ends an SSH connection early.
#[derive(Debug)]
enum SshError {
    Ssh(russh::Error),
    /// The server showed a key that is not pinned (its fingerprint).
    HostKey(Fingerprint),
}

impl From<russh::Error> for SshError {
    fn from(e: russh::Error) -> Self {
        SshError::Ssh(e)
    }
}

impl russh::client::Handler for Pinned {
    type Error = SshError;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let seen = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.fingerprint(HashAlg::Sha256),
            PublicKeyOrCertificate::Certificate(cert) => {
                cert.public_key().fingerprint(HashAlg::Sha256)
            }
        };
        if self.pins.contains(&seen) {
            Ok(true)
        } else {
            Err(SshError::HostKey(seen))
        }
    }
}

/// An SFTP connection's settings, built once per upstream.
pub(super) struct Client {
    settings: SftpSettings,
    config: Arc<russh::client::Config>,
    pins: Arc<[Fingerprint]>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sftp::Client")
            .field("host", &self.settings.host)
            .field("port", &self.settings.port)
            .finish_non_exhaustive()
    }
}

/// A file being read: the connection it came by, and what was seen of it.
pub(super) struct Body {
    // Dropped in this order: the file, the SFTP session, then the SSH connection.
    file: File,
    _sftp: SftpSession,
    ssh: russh::client::Handle<Pinned>,
    path: String,
    look: Look,
    read: u64,
    done: bool,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("sftp::Body")
            .field("path", &self.path)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl Body {
    /// The next piece of the file; `None` at its end, once the file proved unchanged and whole.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        if self.done {
            return Ok(None);
        }
        let mut piece = BytesMut::with_capacity(PIECE);
        let n = (&mut self.file)
            .take(PIECE as u64)
            .read_buf(&mut piece)
            .await
            .map_err(|e| {
                UpstreamError::Protocol(format!("reading `{}` over SFTP: {e}", self.path))
            })?;
        if n > 0 {
            self.read += n as u64;
            if self.read > self.look.size {
                return Err(changing(&self.path));
            }
            return Ok(Some(piece.freeze()));
        }
        self.done = true;
        let whole =
            self.read == self.look.size && Look::of(&self.file, &self.path).await? == self.look;
        close(&self.ssh).await;
        if !whole {
            return Err(changing(&self.path));
        }
        Ok(None)
    }
}

/// Says goodbye to the server (best effort: a connection dropped without it ends when the SSH
/// session's task sees its handle gone, or at `timeouts.request` of inactivity).
async fn close(ssh: &russh::client::Handle<Pinned>) {
    let _ = ssh
        .disconnect(russh::Disconnect::ByApplication, "", "en")
        .await;
}

/// What a read found: a status and headers as an HTTP reply's, and the file to stream (`None`
/// for a `304`).
pub(super) type Opened = (StatusCode, HeaderMap, Option<Body>);

impl Client {
    pub(super) fn new(settings: SftpSettings, request_timeout: Duration) -> Client {
        let mut preferred = russh::Preferred::default();
        if !settings.host_key_algorithms.is_empty() {
            // Ask for the pinned key, not another the server also holds.
            preferred.key = Cow::Owned(settings.host_key_algorithms.clone());
        }
        let config = russh::client::Config {
            inactivity_timeout: Some(request_timeout),
            preferred,
            ..Default::default()
        };
        Client {
            pins: settings.host_keys.iter().cloned().collect(),
            settings,
            config: Arc::new(config),
        }
    }

    /// The remote path `req` names under the base URL's directory: its path, percent-decoded,
    /// no `..`, no query.
    fn resolve(&self, req: &UpstreamRequest) -> Result<String, UpstreamError> {
        let relative = super::file_source::relative_path(req, "SFTP")?;
        Ok(match self.settings.directory.as_str() {
            "/" => format!("/{relative}"),
            "." => relative,
            dir => format!("{dir}/{relative}"),
        })
    }

    /// Connects, checks the host key, logs in and opens the SFTP subsystem, all within
    /// `connect_timeout`.
    async fn connect(
        &self,
        upstream: &str,
        connect_timeout: Duration,
    ) -> Result<(russh::client::Handle<Pinned>, SftpSession), UpstreamError> {
        let s = &self.settings;
        let at = format!("{}:{}", s.host, s.port);
        let session = async {
            let handler = Pinned {
                pins: Arc::clone(&self.pins),
            };
            let mut ssh = match russh::client::connect(
                Arc::clone(&self.config),
                (s.host.as_str(), s.port),
                handler,
            )
            .await
            {
                Ok(ssh) => ssh,
                Err(SshError::HostKey(seen)) => {
                    tracing::warn!(
                        upstream,
                        server = %at,
                        fingerprint = %seen,
                        "SFTP server refused: its host key is not the one pinned in sftp.host_key"
                    );
                    return Err(UpstreamError::HostKey(format!(
                        "the SFTP server {at} shows host key {seen}, which is not pinned in \
                             `sftp.host_key` of upstream `{upstream}`: nothing was read. If the \
                             server's key was changed on purpose, pin the new one (`ssh-keyscan \
                             -p {} {} | ssh-keygen -lf -`, checked with the vendor)",
                        s.port, s.host
                    )));
                }
                Err(SshError::Ssh(e)) => {
                    return Err(UpstreamError::Connect(format!("SSH to {at}: {e}")));
                }
            };
            let ssh_failed = |e: russh::Error| UpstreamError::Connect(format!("SSH to {at}: {e}"));
            let login = match &s.login {
                SftpLogin::Password(password) => {
                    ssh.authenticate_password(s.username.as_str(), password.expose())
                        .await
                }
                SftpLogin::Key(key) => {
                    // An RSA key signs with the best hash the server takes (SHA-2 where it
                    // says so; OpenSSH refuses SHA-1 since 8.8).
                    let hash = match key.algorithm().is_rsa() {
                        true => ssh
                            .best_supported_rsa_hash()
                            .await
                            .map_err(ssh_failed)?
                            .flatten(),
                        false => None,
                    };
                    let key = russh::keys::PrivateKeyWithHashAlg::new(Arc::clone(key), hash);
                    ssh.authenticate_publickey(s.username.as_str(), key).await
                }
            }
            .map_err(ssh_failed)?;
            if !login.success() {
                let how = match s.login {
                    SftpLogin::Password(_) => "password",
                    SftpLogin::Key(_) => "key",
                };
                return Err(UpstreamError::Auth(format!(
                    "the SFTP server {at} refused the {how} login of `{}`",
                    s.username
                )));
            }
            let channel = ssh.channel_open_session().await.map_err(ssh_failed)?;
            channel
                .request_subsystem(true, "sftp")
                .await
                .map_err(ssh_failed)?;
            let sftp = SftpSession::new(channel.into_stream())
                .await
                .map_err(|e| UpstreamError::Connect(format!("SFTP on {at}: {e}")))?;
            Ok((ssh, sftp))
        };
        tokio::time::timeout(connect_timeout, session)
            .await
            .map_err(|_| {
                UpstreamError::Connect(format!(
                    "no SFTP session with {at} within {}",
                    humantime::format_duration(connect_timeout)
                ))
            })?
    }

    /// Opens the file `req` names, as the module doc says; `limit` bytes at most. The caller
    /// bounds the whole read by `timeouts.request`.
    pub(super) async fn open(
        &self,
        upstream: &str,
        req: &UpstreamRequest,
        connect_timeout: Duration,
        limit: usize,
    ) -> Result<Opened, UpstreamError> {
        let path = self.resolve(req)?;
        let (ssh, sftp) = self.connect(upstream, connect_timeout).await?;
        let file = sftp
            .open(path.as_str())
            .await
            .map_err(|e| failed(&path, &e))?;
        let mut look = Look::of(&file, &path).await?;
        let age = SystemTime::now()
            .duration_since(look.modified())
            .unwrap_or_default();
        if age < SETTLE {
            tokio::time::sleep(SETTLE - age).await;
            let again = Look::of(&file, &path).await?;
            if again != look {
                return Err(changing(&path));
            }
            look = again;
        }
        let etag = look.etag();
        let mut headers = HeaderMap::new();
        let value = |text: &str| {
            HeaderValue::from_str(text).map_err(|e| UpstreamError::Protocol(e.to_string()))
        };
        headers.insert(http::header::ETAG, value(&etag)?);
        headers.insert(
            http::header::LAST_MODIFIED,
            value(&httpdate::fmt_http_date(look.modified()))?,
        );
        let unchanged = (req.headers.iter()).any(|(name, v)| {
            name == http::header::IF_NONE_MATCH && v.as_bytes() == etag.as_bytes()
        });
        if unchanged {
            close(&ssh).await;
            return Ok((StatusCode::NOT_MODIFIED, headers, None));
        }
        if look.size > limit as u64 {
            close(&ssh).await;
            return Err(UpstreamError::TooLarge { limit });
        }
        let body = Body {
            file,
            _sftp: sftp,
            ssh,
            path,
            look,
            read: 0,
            done: false,
        };
        Ok((StatusCode::OK, headers, Some(body)))
    }
}
