//! Path and URL rules (clean paths, absolute and interface URLs, loopback hosts), and relative
//! paths resolved against the configuration file.

use std::path::{Path, PathBuf};

pub(super) fn is_clean_path(p: &str) -> bool {
    p.starts_with('/')
        && !p.ends_with('/') | (p == "/")
        && !p.contains(['?', '#', ' ', '%'])
        && !p.contains("//")
}

pub(super) fn is_absolute_url(s: &str) -> bool {
    match s.parse::<http::Uri>() {
        Ok(uri) => matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some(),
        Err(_) => false,
    }
}

/// Interface URLs are HTTPS; plain HTTP only on loopback for development (docs/protocol.md
/// §Endpoints).
pub fn check_interface_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("`{url}` is not an absolute URL"))?;
    let host = uri.host().ok_or_else(|| format!("`{url}` has no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback_host(host) => Ok(()),
        Some("http") => Err(format!(
            "`{url}` must use https; plain http is only allowed on loopback for development"
        )),
        _ => Err(format!("`{url}` must be an https URL")),
    }
}

pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `relative` resolved against the directory of `config_path`, with `.` and `..` removed
/// lexically so messages show `mappings/x/…` rather than `config/../mappings/x/…`.
pub fn resolve(config_path: &Path, relative: &str) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in base_dir(config_path).join(relative).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The directory relative paths in a configuration file are resolved against.
pub fn base_dir(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Checks a Redis URL the way the settings loader and [`RedisBackend::new`] read it:
/// `redis://[[user]:password@]host[:port][/db]`, or `rediss://…` for TLS. Over TLS the server's
/// certificate and host name are always verified, against the system's trust store (or the
/// certificates `SSL_CERT_FILE` / `SSL_CERT_DIR` name instead); redis-rs' `#insecure` (no
/// verification) is refused. No connection is made. Messages never echo the URL, which may
/// hold a password.
pub fn redis_client(url: &str) -> Result<redis::Client, String> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis" | "rediss") => {}
        Some(other) => {
            return Err(format!(
                "redis url scheme `{other}` is not supported, use redis:// or rediss:// (TLS)"
            ));
        }
        None => return Err("redis url must start with redis:// or rediss:// (TLS)".to_owned()),
    }
    // redis-rs' parse errors name the problem, never the URL.
    let client = redis::Client::open(url).map_err(|e| format!("invalid redis url: {e}"))?;
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => Err(
            "rediss:// with #insecure (no certificate check) is not supported: trust the \
             server's CA instead (SSL_CERT_FILE or SSL_CERT_DIR)"
                .to_owned(),
        ),
        redis::ConnectionAddr::TcpTls { .. } | redis::ConnectionAddr::Tcp(..) => Ok(client),
        _ => Err("redis url must name a host (unix sockets are not supported)".to_owned()),
    }
}
