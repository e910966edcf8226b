//! The dealer's A2A v1.0 agent card (docs/protocol.md §Agent card), rendered once per `App` with
//! its cache validators.
//!
//! The card is bytes, not a struct re-serialized per request: buyers poll it, and a strong ETag
//! must be stable for a given configuration. `params.id` is derived from the card's content, so it
//! changes exactly when the card does (docs/protocol.md §Agent card, "Revision id").

use bytes::Bytes;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::Skill;

// === what a card is made of ===
// The validated `aap:` section and a dealer's `card:` (built by `settings`, which re-exports
// them): the card's own inputs, so that the protocol layer needs nothing above it.

/// The AAP extension as the card declares it (`aap:` in the configuration).
#[derive(Debug, Clone)]
pub struct AapSettings {
    pub extension_uri: String,
    pub version: String,
    pub schema_base_url: String,
    pub description: String,
}

/// A dealer's `card:` section.
#[derive(Debug, Clone)]
pub struct CardSettings {
    pub name: String,
    pub description: String,
    pub url: Option<String>,
    pub version: String,
    pub documentation_url: Option<String>,
    pub icon_url: Option<String>,
    pub provider: Option<Provider>,
}

/// The card's `provider`.
#[derive(Debug, Clone)]
pub struct Provider {
    pub organization: String,
    pub url: String,
}

/// A rendered card and its HTTP cache validators.
#[derive(Debug, Clone)]
pub struct AgentCard {
    pub body: Bytes,
    /// Strong validator, quoted: `"<hex sha-256 prefix>"`.
    pub etag: String,
    /// IMF-fixdate of the load that produced this card.
    pub last_modified: String,
}

/// What a card says about one dealer.
pub struct CardInput<'a> {
    pub card: &'a CardSettings,
    pub aap: &'a AapSettings,
    /// The JSON-RPC interface URL actually served.
    pub jsonrpc_url: &'a str,
    /// Skills this dealer serves, in card order.
    pub skills: &'a [Skill],
    pub loaded_at: std::time::SystemTime,
    /// The served skills whose calls need an API key (`auth`): the card declares how to send
    /// one, on each of these skills and, when every served skill needs it, for the agent.
    pub secured: &'a [Skill],
    /// The HTTP+JSON binding is served too (at the same base URL).
    pub http_json: bool,
}

impl AgentCard {
    pub fn render(input: &CardInput<'_>) -> AgentCard {
        let mut value = card_value(input, "");
        let digest = Sha256::digest(value.to_string().as_bytes());
        let mut id_bytes = [0u8; 16];
        id_bytes.copy_from_slice(&digest[..16]);
        let revision = uuid::Uuid::new_v8(id_bytes).to_string();
        value["capabilities"]["extensions"][0]["params"]["id"] = Value::String(revision);
        let body = serde_json::to_vec_pretty(&value).unwrap_or_default();
        let etag = format!("\"{}\"", hex(&Sha256::digest(&body)[..16]));
        AgentCard {
            body: Bytes::from(body),
            etag,
            last_modified: httpdate::fmt_http_date(input.loaded_at),
        }
    }

    /// The card as JSON (for `aap-gateway card` and tests).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

fn card_value(input: &CardInput<'_>, revision: &str) -> Value {
    let CardInput {
        card,
        aap,
        jsonrpc_url,
        skills,
        secured,
        http_json,
        ..
    } = input;
    // A2A v1.0 security: either scheme satisfies a requirement (docs/protocol.md §Agent card).
    let requirements = json!([
        { "schemes": { "bearer": { "list": [] } } },
        { "schemes": { "apiKey": { "list": [] } } },
    ]);
    let input_modes: Vec<&str> = skills.iter().map(|s| s.request_media_type()).collect();
    let output_modes: Vec<&str> = skills.iter().map(|s| s.response_media_type()).collect();
    let mut schema_urls = Map::new();
    for skill in *skills {
        schema_urls.insert(
            skill.id().to_owned(),
            json!({
                "request_schema": format!("{}{}", aap.schema_base_url, skill.request_schema_file()),
                "response_schema": format!("{}{}", aap.schema_base_url, skill.response_schema_file()),
            }),
        );
    }
    let skill_entries: Vec<Value> = skills
        .iter()
        .map(|s| {
            let mut entry = json!({
                "id": s.id(),
                "name": s.name(),
                "description": s.description(),
                "tags": s.tags(),
                "inputModes": [s.request_media_type()],
                "outputModes": [s.response_media_type()],
            });
            if secured.contains(s) {
                entry["securityRequirements"] = requirements.clone();
            }
            entry
        })
        .collect();
    let mut out = Map::new();
    out.insert("name".into(), json!(card.name));
    out.insert("description".into(), json!(card.description));
    // JSON-RPC first: AAP clients pick the first interface they support. The HTTP+JSON base
    // URL is the JSON-RPC endpoint's (its routes are `{base}/message:send`, …).
    let mut interfaces =
        vec![json!({ "url": jsonrpc_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0" })];
    if *http_json {
        interfaces.push(
            json!({ "url": jsonrpc_url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0" }),
        );
    }
    out.insert("supportedInterfaces".into(), Value::Array(interfaces));
    if let Some(p) = &card.provider {
        out.insert(
            "provider".into(),
            json!({ "organization": p.organization, "url": p.url }),
        );
    }
    out.insert("version".into(), json!(card.version));
    if let Some(url) = &card.documentation_url {
        out.insert("documentationUrl".into(), json!(url));
    }
    if let Some(url) = &card.icon_url {
        out.insert("iconUrl".into(), json!(url));
    }
    // Only what the gateway really serves: no streaming, push or extended card (docs/protocol.md
    // §Agent card).
    out.insert(
        "capabilities".into(),
        json!({
            "extensions": [{
                "uri": aap.extension_uri,
                "description": aap.description,
                "required": true,
                "params": {
                    "id": revision,
                    "version": aap.version,
                    "schema_base_url": aap.schema_base_url,
                    "skills": schema_urls,
                }
            }],
            "streaming": false,
            "pushNotifications": false,
            "extendedAgentCard": false,
        }),
    );
    out.insert("defaultInputModes".into(), json!(input_modes));
    out.insert("defaultOutputModes".into(), json!(output_modes));
    out.insert("skills".into(), Value::Array(skill_entries));
    if !secured.is_empty() {
        out.insert(
            "securitySchemes".into(),
            json!({
                "bearer": { "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "API key issued by the dealer group, as a bearer token." } },
                "apiKey": { "apiKeySecurityScheme": {
                    "location": "header", "name": "X-API-Key",
                    "description": "The same API key, in the X-API-Key header." } },
            }),
        );
        // The agent-wide requirement only when nothing is public: an absent one means
        // anonymous access, and the skill entries say which skills need a key.
        if skills.iter().all(|s| secured.contains(s)) {
            out.insert("securityRequirements".into(), requirements);
        }
    }
    Value::Object(out)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
