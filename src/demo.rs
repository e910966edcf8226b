//! `aap-gateway demo`: the gateway on the built-in demo configuration, ready to try.
//!
//! Binds the listeners first (port 0 allowed), builds the app against the real addresses so the
//! cards advertise URLs that work, then writes the endpoints file and prints ready-to-paste calls.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::app::App;

/// The legacy systems the demo dealers sit in front of (the `sim/` crate).
#[cfg(feature = "demo")]
pub use aap_sim::Simulators;

/// A build without the `demo` feature has no simulators: `demo` says so and stops.
#[cfg(not(feature = "demo"))]
pub enum Simulators {}

#[cfg(not(feature = "demo"))]
impl Simulators {
    pub const VARS: [&'static str; 0] = [];

    pub async fn start() -> std::io::Result<Simulators> {
        Err(std::io::Error::other(
            "this build has no demo (it was built without the `demo` feature)",
        ))
    }

    pub fn var(&self, _: &str) -> Option<String> {
        match *self {}
    }

    pub fn endpoints(&self) -> Value {
        match *self {}
    }
}

/// Where `demo` finds its configuration when `--config` is not given: `config/demo.yaml` under
/// the working directory, else under the crate's source directory (for `cargo run` elsewhere).
pub fn default_config() -> PathBuf {
    let local = PathBuf::from("config/demo.yaml");
    if local.exists() {
        local
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml")
    }
}

/// The JSON object written to `--endpoints-file` once everything is ready.
pub fn endpoints(app: &App, gateway: SocketAddr, admin: SocketAddr, simulators: Value) -> Value {
    let dealers: Vec<Value> = app
        .settings
        .dealers
        .iter()
        .filter_map(|s| app.dealer(&s.id))
        .map(|d| {
            json!({
                "id": d.id(),
                "card_url": d.card_url,
                "jsonrpc_url": d.jsonrpc_url,
                "http_json_url": app.settings.http_json.then(|| format!("{}/message:send", d.jsonrpc_url)),
                "mcp_url": mcp_url(app, d),
                "host": d.settings.hosts.first(),
            })
        })
        .collect();
    json!({
        "gateway": format!("http://{gateway}"),
        "admin": format!("http://{admin}"),
        "simulators": simulators,
        "dealers": dealers,
    })
}

/// The dealer's MCP endpoint, beside its card (`bindings.mcp`), when the binding is on.
fn mcp_url(app: &App, dealer: &crate::app::Dealer) -> Option<String> {
    let mcp = app.settings.mcp.as_ref()?;
    let base = dealer
        .card_url
        .strip_suffix("/.well-known/agent-card.json")
        .unwrap_or(&dealer.card_url);
    Some(format!("{base}{}", mcp.path))
}

/// The banner printed on stdout: card URLs and a curl call per dealer.
pub fn banner(app: &App, admin: SocketAddr) -> String {
    let uri = &app.settings.aap.extension_uri;
    let mut out = String::from("aap-gateway demo is running.\n\n");
    for setting in &app.settings.dealers {
        let Some(d) = app.dealer(&setting.id) else {
            continue;
        };
        let host = d
            .settings
            .hosts
            .first()
            .map(|h| format!(" -H 'Host: {h}'"))
            .unwrap_or_default();
        let skills: Vec<&str> = d.skills().map(|s| s.id()).collect();
        out.push_str(&format!(
            "Dealer {} ({})\n  card:     curl -s{host} {}\n  skills:   {}\n  call:     curl -s{host} {} \\\n              -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \\\n              -H 'A2A-Extensions: {uri}' \\\n              -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":{{\"message\":{{\"messageId\":\"m-1\",\"role\":\"ROLE_USER\",\"parts\":[{{\"data\":{{\"type\":\"dealer.information.request\"}}}}]}}}}}}'\n",
            d.settings.card.name,
            d.id(),
            d.card_url,
            skills.join(", "),
            d.jsonrpc_url,
        ));
        if app.settings.http_json {
            out.push_str(&format!(
                "  or REST:  curl -s{host} {}/message:send \\\n              -H 'Content-Type: application/json' -H 'A2A-Version: 1.0' \\\n              -H 'A2A-Extensions: {uri}' \\\n              -d '{{\"message\":{{\"messageId\":\"m-1\",\"role\":\"ROLE_USER\",\"parts\":[{{\"data\":{{\"type\":\"dealer.information.request\"}}}}]}}}}'\n",
                d.jsonrpc_url,
            ));
        }
        if let Some(url) = mcp_url(app, d) {
            out.push_str(&format!(
                "  MCP:      {url} (Streamable HTTP; e.g. npx @modelcontextprotocol/inspector)\n"
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "Health: curl -s http://{admin}/readyz\nStop with Ctrl-C.\n"
    ));
    out
}

/// Writes the endpoints file atomically (temp file + rename) so a watcher never reads half.
pub fn write_endpoints(path: &Path, endpoints: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(endpoints).unwrap_or_default(),
    )?;
    std::fs::rename(tmp, path)
}
