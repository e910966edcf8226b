//! The bounds validation enforces, and the headers the client owns.

use std::time::Duration;

/// The largest `retries.attempts`: more tries only pile load onto a system that is already down.
pub const MAX_ATTEMPTS: u32 = 5;
/// The largest `max_response_bytes` (256 MiB): a reply is held in memory whole.
pub const MAX_RESPONSE_BYTES_LIMIT: usize = 256 * 1024 * 1024;
/// The largest `max_concurrency`.
pub const MAX_CONCURRENCY_LIMIT: usize = 10_000;
/// The longest timeout, backoff or cool-down accepted (10 minutes); longer is surely a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// The port of `smtps://` URLs without one (implicit TLS, RFC 8314).
pub const SMTPS_PORT: u16 = 465;
/// The port of `smtp://` URLs without one (message submission, RFC 6409).
pub const SUBMISSION_PORT: u16 = 587;

/// Headers the client owns: setting them by hand would break framing or routing.
pub(crate) const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
];

/// `timeouts.data` of `kind: smtp` when unset: RFC 5321 §4.5.3.2.6's wait for the reply to
/// the final dot.
pub const DEFAULT_DATA_TIMEOUT: &str = "10m";
