//! The gateway's own sections: `aap`, `bindings`, `limits`, `connections` and `telemetry`.

use super::file::{
    DRAFT_EXTENSION_URI, FileAap, FileConnections, FileLimits, FileMcp, FileTelemetry,
};
use super::load::ConfigLoader;
use super::paths::{is_absolute_url, is_clean_path};
use super::types::{
    ConnectionSettings, Limits, LogFormat, McpSettings, RefreshPriority, TelemetrySettings,
};
use crate::protocol::agent_card::AapSettings;

impl ConfigLoader {
    pub(super) fn aap(&mut self, file: FileAap) -> Option<AapSettings> {
        let uri = file.extension_uri.trim().to_owned();
        if uri == DRAFT_EXTENSION_URI {
            self.warn(
                "/aap/extension_uri",
                "the draft AAP extension URI is for development only; never publish it",
            );
        } else if let Some(version) =
            uri.strip_prefix("https://autoagentprotocol.org/extensions/aap/")
        {
            if version.starts_with("v1.") {
                self.problem(
                    "/aap/extension_uri",
                    format!(
                        "`{uri}` names the frozen AAP v1 contract; this gateway speaks AAP 2.0"
                    ),
                );
                return None;
            }
        } else {
            self.problem(
                "/aap/extension_uri",
                format!(
                    "`{uri}` is not an AAP extension URI (expected {DRAFT_EXTENSION_URI} or \
                     https://autoagentprotocol.org/extensions/aap/v{{MAJOR}}.{{MINOR}})"
                ),
            );
            return None;
        }
        if !file.schema_base_url.ends_with('/') || !is_absolute_url(&file.schema_base_url) {
            self.problem(
                "/aap/schema_base_url",
                "must be an absolute URL ending in `/`, e.g. https://autoagentprotocol.org/v2.0/schemas/",
            );
            return None;
        }
        if file.version.trim().is_empty() {
            self.problem("/aap/version", "must not be empty");
            return None;
        }
        Some(AapSettings {
            extension_uri: uri,
            version: file.version,
            schema_base_url: file.schema_base_url,
            description: file.description,
        })
    }

    pub(super) fn jsonrpc_path(&mut self, path: &str) -> Option<String> {
        if !is_clean_path(path) || path == "/" {
            self.problem(
                "/bindings/jsonrpc/path",
                format!(
                    "`{path}` must be a path like /a2a (leading `/`, no trailing `/`, no query)"
                ),
            );
            return None;
        }
        Some(path.to_owned())
    }

    /// `bindings.mcp`: `Some(None)` when off. Its path must not shadow the JSON-RPC endpoint or
    /// the HTTP+JSON routes below it, nor the card.
    pub(super) fn mcp(
        &mut self,
        file: FileMcp,
        jsonrpc: Option<&str>,
    ) -> Option<Option<McpSettings>> {
        if !file.enabled {
            return Some(None);
        }
        let mut ok = true;
        let path = file.path.as_str();
        if !is_clean_path(path) || path == "/" {
            self.problem(
                "/bindings/mcp/path",
                format!(
                    "`{path}` must be a path like /mcp (leading `/`, no trailing `/`, no query)"
                ),
            );
            ok = false;
        } else if let Some(jsonrpc) = jsonrpc
            && (path == jsonrpc || path.starts_with(&format!("{jsonrpc}/")))
        {
            self.problem(
                "/bindings/mcp/path",
                format!("`{path}` is the JSON-RPC path `{jsonrpc}` or below it; choose another, e.g. /mcp"),
            );
            ok = false;
        } else if path.starts_with("/.well-known/") {
            self.problem(
                "/bindings/mcp/path",
                format!("`{path}` is reserved for the agent card"),
            );
            ok = false;
        }
        let mut allowed_origins = Vec::with_capacity(file.allowed_origins.len());
        for origin in &file.allowed_origins {
            match parse_origin(origin) {
                Some(o) => allowed_origins.push(o),
                None => {
                    self.problem(
                        "/bindings/mcp/allowed_origins",
                        format!("`{origin}` is not an origin like https://app.example.com or http://localhost:3000 (scheme, host and optional port; no path)"),
                    );
                    ok = false;
                }
            }
        }
        let max_sessions = match usize::try_from(file.max_sessions) {
            Ok(n @ 1..=1_000_000) => Some(n),
            _ => {
                self.problem(
                    "/bindings/mcp/max_sessions",
                    "must be between 1 and 1000000",
                );
                None
            }
        };
        let idle = self.duration(
            "/bindings/mcp/session_idle_timeout",
            &file.session_idle_timeout,
        );
        if idle.is_some_and(|d| d.is_zero()) {
            self.problem(
                "/bindings/mcp/session_idle_timeout",
                "must be longer than 0s",
            );
            return None;
        }
        if !ok {
            return None;
        }
        Some(Some(McpSettings {
            path: file.path,
            allowed_origins,
            max_sessions: max_sessions?,
            session_idle_timeout: idle?,
        }))
    }

    /// `true` for 429: see docs/protocol.md §Rate limits for what each SDK client makes of it.
    pub(super) fn rate_limited_status(&mut self, status: u16) -> Option<bool> {
        match status {
            200 => Some(false),
            429 => Some(true),
            other => {
                self.problem(
                    "/bindings/jsonrpc/rate_limited_status",
                    format!("`{other}` is not one of 200, 429"),
                );
                None
            }
        }
    }

    pub(super) fn limits(&mut self, file: FileLimits) -> Option<Limits> {
        let request_timeout = self.duration("/limits/request_timeout", &file.request_timeout);
        let body_read_timeout = self.duration("/limits/body_read_timeout", &file.body_read_timeout);
        if let (Some(body), Some(request)) = (body_read_timeout, request_timeout)
            && body > request
        {
            self.problem(
                "/limits/body_read_timeout",
                "must not be longer than limits.request_timeout",
            );
        }
        let shutdown_grace = self.duration("/limits/shutdown_grace", &file.shutdown_grace);
        let feed_refresh_priority = match file.feed_refresh_priority.as_str() {
            "idle" => Some(RefreshPriority::Idle),
            "normal" => Some(RefreshPriority::Normal),
            other => {
                self.problem(
                    "/limits/feed_refresh_priority",
                    format!("`{other}` is not one of idle, normal"),
                );
                None
            }
        };
        const MAX_BODY: u64 = 16 * 1024 * 1024;
        let max_body_bytes = if (1024..=MAX_BODY).contains(&file.max_body_bytes) {
            usize::try_from(file.max_body_bytes).ok()
        } else {
            self.problem(
                "/limits/max_body_bytes",
                format!("must be between 1024 and {MAX_BODY}"),
            );
            None
        };
        let max_concurrency = if file.max_concurrency == 0 {
            self.problem("/limits/max_concurrency", "must be at least 1");
            None
        } else {
            usize::try_from(file.max_concurrency).ok()
        };
        Some(Limits {
            max_body_bytes: max_body_bytes?,
            body_read_timeout: body_read_timeout.filter(|b| Some(*b) <= request_timeout)?,
            request_timeout: request_timeout?,
            max_concurrency: max_concurrency?,
            shutdown_grace: shutdown_grace?,
            feed_refresh_priority: feed_refresh_priority?,
        })
    }

    pub(super) fn connections(&mut self, file: FileConnections) -> Option<ConnectionSettings> {
        let mut count = |pointer: &str, value: u64, low: u64, high: u64| {
            if (low..=high).contains(&value) {
                usize::try_from(value).ok()
            } else {
                self.problem(pointer, format!("must be between {low} and {high}"));
                None
            }
        };
        let max = count("/connections/max", file.max, 1, 1_000_000);
        let max_per_ip = count("/connections/max_per_ip", file.max_per_ip, 1, 1_000_000);
        let streams = count(
            "/connections/http2_max_concurrent_streams",
            u64::from(file.http2_max_concurrent_streams),
            1,
            1000,
        );
        if let (Some(max), Some(per_ip)) = (max, max_per_ip)
            && per_ip > max
        {
            self.problem(
                "/connections/max_per_ip",
                "must not be more than connections.max",
            );
        }
        let first_byte_timeout =
            self.duration("/connections/first_byte_timeout", &file.first_byte_timeout);
        let header_read_timeout = self.duration(
            "/connections/header_read_timeout",
            &file.header_read_timeout,
        );
        let idle_timeout = self.duration("/connections/idle_timeout", &file.idle_timeout);
        let http2_keep_alive_interval = self.duration(
            "/connections/http2_keep_alive_interval",
            &file.http2_keep_alive_interval,
        );
        let http2_keep_alive_timeout = self.duration(
            "/connections/http2_keep_alive_timeout",
            &file.http2_keep_alive_timeout,
        );
        Some(ConnectionSettings {
            max_per_ip: max_per_ip.filter(|p| Some(*p) <= max)?,
            max: max?,
            first_byte_timeout: first_byte_timeout?,
            header_read_timeout: header_read_timeout?,
            idle_timeout: idle_timeout?,
            http2_max_concurrent_streams: u32::try_from(streams?).ok()?,
            http2_keep_alive_interval: http2_keep_alive_interval?,
            http2_keep_alive_timeout: http2_keep_alive_timeout?,
        })
    }

    pub(super) fn telemetry(&mut self, file: FileTelemetry) -> Option<TelemetrySettings> {
        let log_format = match file.log_format.as_str() {
            "auto" => LogFormat::Auto,
            "json" => LogFormat::Json,
            "text" => LogFormat::Text,
            other => {
                self.problem(
                    "/telemetry/log_format",
                    format!("`{other}` is not one of auto, json, text"),
                );
                return None;
            }
        };
        // The standard variable when the file says nothing (docs/operations.md §Traces).
        let endpoint = file
            .otlp_endpoint
            .filter(|e| !e.trim().is_empty())
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|e| !e.trim().is_empty());
        let otlp_traces_url = match endpoint {
            Some(e) if e.starts_with("http://") || e.starts_with("https://") => {
                Some(format!("{}/v1/traces", e.trim().trim_end_matches('/')))
            }
            Some(e) => {
                self.problem(
                    "/telemetry/otlp_endpoint",
                    format!(
                        "`{e}` is not an http:// or https:// URL like http://otel-collector:4318"
                    ),
                );
                return None;
            }
            None => None,
        };
        Some(TelemetrySettings {
            log_format,
            service_name: file.service_name,
            otlp_traces_url,
        })
    }
}

/// An `Origin` as browsers send it (`scheme://host[:port]`, RFC 6454), lower-cased; `None` for
/// anything else (a path, a query, user info, another scheme).
pub fn parse_origin(text: &str) -> Option<String> {
    let uri: http::Uri = text.trim().parse().ok()?;
    let scheme = uri.scheme_str()?;
    let authority = uri.authority()?;
    let bare = uri
        .path_and_query()
        .is_none_or(|p| p.as_str() == "/" || p.as_str().is_empty());
    let plain = !authority.as_str().contains('@') && !text.trim().ends_with('/');
    (matches!(scheme, "http" | "https") && bare && plain && !authority.host().is_empty())
        .then(|| format!("{scheme}://{}", authority.as_str().to_ascii_lowercase()))
}
