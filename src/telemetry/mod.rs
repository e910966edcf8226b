//! Logging setup: `RUST_LOG` filters (default `info`); human format on a terminal, JSON
//! otherwise or when asked. Logs go to stderr so stdout stays for command output.
//! `metrics`: the Prometheus metrics; `request`: the one log line and metrics of each request.

pub mod metrics;
pub mod request;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::settings::LogFormat;

/// Installs the global subscriber. Safe to call once per process.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init()
    } else {
        builder.try_init()
    };
    if result.is_err() {
        // Already installed (tests); the first subscriber stays.
    }
}
