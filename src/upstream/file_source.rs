//! `kind: file`: a feed document read from a local path (a volume another container writes: a
//! sync sidecar, an SFTP drop mounted into the pod), answered as an HTTP reply would be so that
//! the feed runtime reads it as any other — `200` with `ETag` and `Last-Modified`, or `304` to a
//! conditional request for the same file.
//!
//! Half-written files: the writer's contract is to write under another name and rename into
//! place (`rename(2)` is atomic on one filesystem); the gateway then opens either the old file or
//! the new one, whole. A writer that writes in place is caught by two looks at the open file: a
//! file changed within the last [`SETTLE`] is looked at again after it, and a file whose size or
//! modification time moved between the looks, or while it was read, is refused with an error
//! that names the contract (the refresh fails, the previous copy keeps serving, the next refresh
//! tries again).
//!
//! Identity: the `ETag` is the file's size and modification time (nanoseconds), so an unchanged
//! file is not read again (`If-None-Match`) and a file replaced by a rename is.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::{UpstreamError, UpstreamRequest};

/// How long a file must have stayed unchanged before it is read.
pub(super) const SETTLE: Duration = Duration::from_millis(1000);

/// What one look at an open file sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Look {
    size: u64,
    modified: SystemTime,
}

impl Look {
    fn of(file: &std::fs::File, path: &Path) -> Result<Look, UpstreamError> {
        let meta = file
            .metadata()
            .map_err(|e| unreadable(path, &e.to_string()))?;
        let modified = meta
            .modified()
            .map_err(|e| unreadable(path, &e.to_string()))?;
        Ok(Look {
            size: meta.len(),
            modified,
        })
    }

    fn etag(&self) -> String {
        let nanos =
            (self.modified.duration_since(SystemTime::UNIX_EPOCH)).map_or(0, |d| d.as_nanos());
        format!("\"{}-{nanos}\"", self.size)
    }
}

fn unreadable(path: &Path, why: &str) -> UpstreamError {
    UpstreamError::Connect(format!("cannot read `{}`: {why}", path.display()))
}

/// The file `req` names under the directory `base`.
fn resolve(base: &Path, req: &UpstreamRequest) -> Result<PathBuf, UpstreamError> {
    Ok(base.join(relative_path(req, "file")?))
}

/// The path a file source's request names, relative to the upstream's directory: the
/// request's path, percent-decoded, with no `..`, no query, read with GET (`kind: file` and
/// `kind: sftp`; `what` names the kind in the error).
pub(super) fn relative_path(req: &UpstreamRequest, what: &str) -> Result<String, UpstreamError> {
    let invalid = |why: &str| UpstreamError::InvalidRequest(format!("{what} path {why}"));
    if req.method != Method::GET {
        return Err(invalid("is read with GET only"));
    }
    if req.path_and_query.contains('?') {
        return Err(invalid("has no query string"));
    }
    let decoded = percent_encoding::percent_decode_str(&req.path_and_query)
        .decode_utf8()
        .map_err(|_| invalid("is not UTF-8"))?;
    let relative = decoded.trim_start_matches('/');
    if relative.is_empty()
        || Path::new(relative)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(invalid(
            "must name a file under the upstream's directory (no `..`, not the directory itself)",
        ));
    }
    Ok(relative.to_owned())
}

/// Reads the file `req` names, as the module doc says; at most `limit` bytes. Blocks (up to
/// [`SETTLE`] and the read): call it off the runtime's workers.
pub(super) fn read(
    base: &Path,
    req: &UpstreamRequest,
    limit: usize,
) -> Result<(StatusCode, HeaderMap, Bytes), UpstreamError> {
    let path = resolve(base, req)?;
    let file = std::fs::File::open(&path).map_err(|e| unreadable(&path, &e.to_string()))?;
    if !file
        .metadata()
        .map_err(|e| unreadable(&path, &e.to_string()))?
        .is_file()
    {
        return Err(unreadable(&path, "not a regular file"));
    }
    let mut look = Look::of(&file, &path)?;
    let age = SystemTime::now()
        .duration_since(look.modified)
        .unwrap_or_default();
    if age < SETTLE {
        // `read` runs on a blocking thread (`spawn_blocking`), never on a runtime worker.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(SETTLE - age);
        let again = Look::of(&file, &path)?;
        if again != look {
            return Err(changing(&path));
        }
        look = again;
    }
    let etag = look.etag();
    let mut headers = HeaderMap::new();
    let value =
        |text: &str| HeaderValue::from_str(text).map_err(|e| unreadable(&path, &e.to_string()));
    headers.insert(http::header::ETAG, value(&etag)?);
    headers.insert(
        http::header::LAST_MODIFIED,
        value(&httpdate::fmt_http_date(look.modified))?,
    );
    let unchanged = (req.headers.iter())
        .any(|(name, v)| name == http::header::IF_NONE_MATCH && v.as_bytes() == etag.as_bytes());
    if unchanged {
        return Ok((StatusCode::NOT_MODIFIED, headers, Bytes::new()));
    }
    if look.size > limit as u64 {
        return Err(UpstreamError::TooLarge { limit });
    }
    let mut body = Vec::with_capacity(look.size as usize);
    (&file)
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| unreadable(&path, &e.to_string()))?;
    if body.len() > limit {
        return Err(UpstreamError::TooLarge { limit });
    }
    if body.len() as u64 != look.size || Look::of(&file, &path)? != look {
        return Err(changing(&path));
    }
    Ok((StatusCode::OK, headers, Bytes::from(body)))
}

fn changing(path: &Path) -> UpstreamError {
    UpstreamError::Protocol(format!(
        "`{}` changed while it was looked at: it is being written in place. The writer must \
         write under another name and rename the file into place",
        path.display()
    ))
}
