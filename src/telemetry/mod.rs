//! Logs, traces and metrics.
//!
//! - **Logs**: `RUST_LOG` filters (default `info`); human format on a terminal, JSON otherwise
//!   or when asked; stderr, so stdout stays for command output. `request` writes the one line
//!   per request; those lines are written in batches, at most 20 ms late (`batch`).
//! - **Traces** (`trace`): OpenTelemetry spans per request and stage, exported over OTLP/HTTP
//!   (protobuf) only when an endpoint is configured. The request spans are `DEBUG`-level and the
//!   log layer filters at `RUST_LOG`, so without an exporter they are disabled at their call
//!   sites and cost a cached branch.
//! - **Metrics** (`metrics`): the Prometheus registry behind `/metrics`.

mod batch;
pub mod metrics;
pub mod request;
mod request_line;
pub mod trace;

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, fmt};

use crate::settings::{LogFormat, TelemetrySettings};

/// A logged value that may hold text from outside (a dealer system's fault reason, a jq error
/// quoting a record): control characters are written escaped (`\n`, `\r`, `\t`, `\u{1b}`), so
/// in the human format one event stays one line and nothing from outside moves the cursor. The
/// JSON format escapes anyway; this only touches control characters.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<T>(pub T);

impl<T: std::fmt::Display> std::fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string();
        for c in text.chars() {
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() => write!(f, "\\u{{{:x}}}", u32::from(c))?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] flushes the spans still queued.
/// Dropped (or shut down), it writes the log lines still waiting.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    logs: Option<Arc<batch::Batch<std::io::Stderr>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Exports what is still queued (bounded by the exporter's timeout). Call once, at exit.
    pub fn shutdown(mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "trace exporter did not shut down cleanly");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(logs) = &self.logs {
            logs.flush();
        }
    }
}

/// Installs the global subscriber: logs in `format`, and traces when `settings` names an OTLP
/// endpoint. Safe to call once per process (later calls keep the first subscriber).
pub fn init(format: LogFormat, settings: Option<&TelemetrySettings>) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let batch = batch::Batch::start(std::io::stderr());
    let writer = batch::Writer(Arc::clone(&batch));
    let logs = if json {
        fmt::layer()
            .with_writer(writer)
            .json()
            .event_format(request_line::Lines(request_line::json_format()))
            .with_filter(filter)
            .boxed()
    } else {
        fmt::layer().with_writer(writer).with_filter(filter).boxed()
    };
    let mut telemetry = Telemetry {
        provider: None,
        logs: Some(batch),
    };
    let mut problem = None;
    let traces = settings
        .and_then(|s| Some((s.otlp_traces_url.as_deref()?, s.service_name.as_str())))
        .and_then(|(url, service)| match trace::provider(url, service) {
            Ok(provider) => {
                let tracer = provider.tracer("aap-gateway");
                telemetry.provider = Some(provider);
                // Only the gateway's own request and stage spans go out.
                let spans = Targets::new().with_target("aap_gateway", tracing::Level::DEBUG);
                Some(
                    tracing_opentelemetry::layer()
                        .with_tracer(tracer)
                        .with_filter(spans),
                )
            }
            Err(e) => {
                problem = Some(e);
                None
            }
        });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
    if let Some(e) = problem {
        tracing::warn!(error = %e, "traces are not exported");
    }
    telemetry
}
