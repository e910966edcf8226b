//! Settings: the configuration file plus `AAP_GATEWAY__SECTION__KEY` environment overrides,
//! validated into run-time types.
//!
//! Loading never stops at the first problem: each section and each dealer is read on its own and
//! every problem is collected with its location (`file:line:col`, or the environment variable it
//! came from), so `aap-gateway check` can show an operator the whole list at once.
//!
//! The jobs, one a file (each uses only those above it):
//!
//! - `file`: the file as written (`File*`); `yaml`: positions for `file:line:col`;
//! - `types`: the validated run-time settings (`Settings` and its parts);
//! - `paths`: path and URL rules, relative paths resolved against the configuration file;
//! - `load`: file plus environment, the problem collector (`ConfigLoader`) and the top-level read;
//! - `gateway`, `quotas`, `auth`, `dealers`: each section's validation into its types.

mod auth;
mod dealers;
pub mod file;
mod gateway;
mod load;
mod paths;
mod quotas;
mod types;
pub mod yaml;

pub use crate::protocol::agent_card::{AapSettings, CardSettings, Provider};
pub use file::{DRAFT_EXTENSION_URI, DRAFT_SCHEMA_BASE_URL};
pub use gateway::parse_origin;
pub use load::{ENV_PREFIX, TOP_LEVEL_KEYS, load, load_with_env, sort_problems};
pub use paths::{base_dir, check_interface_url, is_loopback_host, redis_client, resolve};
pub use types::{
    ApiKey, AuthSettings, ClientIpHeader, ConnectionSettings, DealerSettings, IdempotencySettings,
    LimitBackend, Limits, LogFormat, McpSettings, OnAmbiguous, OnBackendError, Quota,
    RateLimitSettings, RefreshPriority, Settings, TelemetrySettings, redact_userinfo,
};
pub use yaml::{Origin, Problem, SourceMap};
