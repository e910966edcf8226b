//! `App`: the fully built, immutable state of one configuration — compiled schemas, dealers with
//! their rendered cards and skill handlers. Shared as `Arc<App>`; a reload builds a new one and
//! swaps it whole, so a request always sees one consistent configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::SystemTime;

use crate::error::AapError;
use crate::mapping::Handler;
use crate::protocol::agent_card::{AgentCard, CardInput};
use crate::protocol::{Skill, SkillRef};
use crate::schema::Schemas;
use crate::settings::{DealerSettings, Problem, Settings};

#[derive(Debug)]
pub struct App {
    pub settings: Settings,
    pub schemas: Schemas,
    /// Most specific first (see `router`).
    pub dealers: Vec<Dealer>,
    pub loaded_at: SystemTime,
}

#[derive(Debug)]
pub struct Dealer {
    pub settings: DealerSettings,
    pub card: AgentCard,
    /// The JSON-RPC URL the card advertises.
    pub jsonrpc_url: String,
    /// The URL of this dealer's agent card.
    pub card_url: String,
    handlers: BTreeMap<Skill, Handler>,
    /// Skill ids served, for `UNSUPPORTED_SKILL` details.
    served: Vec<&'static str>,
    extension_uri: String,
}

impl App {
    /// Builds the app for `settings`. `listen` is the address the gateway really listens on; it
    /// forms the card URLs of dealers whose `card.url` is not configured.
    pub fn build(settings: Settings, listen: SocketAddr) -> Result<App, Vec<Problem>> {
        let schemas = Schemas::load().map_err(|e| {
            vec![Problem {
                origin: crate::settings::Origin::WholeFile {
                    path: "schemas/".into(),
                },
                message: e.to_string(),
            }]
        })?;
        let loaded_at = SystemTime::now();
        let mut problems = Vec::new();
        let mut dealers = Vec::with_capacity(settings.dealers.len());
        for dealer in &settings.dealers {
            match build_dealer(&settings, &schemas, dealer, listen, loaded_at) {
                Ok(d) => dealers.push(d),
                Err(mut p) => problems.append(&mut p),
            }
        }
        if !problems.is_empty() {
            crate::settings::sort_problems(&mut problems);
            return Err(problems);
        }
        crate::router::sort_by_specificity(&mut dealers);
        Ok(App {
            settings,
            schemas,
            dealers,
            loaded_at,
        })
    }

    pub fn dealer(&self, id: &str) -> Option<&Dealer> {
        self.dealers.iter().find(|d| d.settings.id == id)
    }
}

fn build_dealer(
    settings: &Settings,
    schemas: &Schemas,
    dealer: &DealerSettings,
    listen: SocketAddr,
    loaded_at: SystemTime,
) -> Result<Dealer, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut handlers = BTreeMap::new();
    if let Some(profile) = &dealer.profile {
        let pointer = format!("{}/profile", dealer.pointer);
        let violations = schemas.check_dealer_information(profile);
        for v in &violations {
            problems.push(settings.source.problem(
                &format!("{pointer}{}", v.instance_location),
                format!("profile{}: {}: {}", v.instance_location, v.keyword, v.error),
            ));
        }
        if violations.is_empty() {
            let handler = Handler::fixed(Skill::DealerInformation, profile.clone());
            // The whole reply, as sent, must pass the response schema too.
            if let Some(payload) = handler.fixed_payload() {
                for v in schemas.check_response(Skill::DealerInformation, payload) {
                    problems.push(settings.source.problem(
                        &pointer,
                        format!(
                            "profile reply{}: {}: {}",
                            v.instance_location, v.keyword, v.error
                        ),
                    ));
                }
            }
            handlers.insert(Skill::DealerInformation, handler);
        }
    }
    if handlers.is_empty() && problems.is_empty() {
        problems.push(settings.source.problem(
            &dealer.pointer,
            format!(
                "dealer `{}` serves no skill; give it a `profile`",
                dealer.id
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let base = match &dealer.card.url {
        Some(url) => url
            .trim_end_matches(&settings.jsonrpc_path)
            .trim_end_matches('/')
            .to_owned(),
        None => format!("http://{}{}", advertised(listen), dealer.path_prefix),
    };
    let jsonrpc_url = dealer
        .card
        .url
        .clone()
        .unwrap_or_else(|| format!("{base}{}", settings.jsonrpc_path));
    let skills: Vec<Skill> = handlers.keys().copied().collect();
    let card = AgentCard::render(&CardInput {
        card: &dealer.card,
        aap: &settings.aap,
        jsonrpc_url: &jsonrpc_url,
        skills: &skills,
        loaded_at,
    });
    Ok(Dealer {
        settings: dealer.clone(),
        card,
        card_url: format!("{base}/.well-known/agent-card.json"),
        jsonrpc_url,
        served: skills.iter().map(|s| s.id()).collect(),
        handlers,
        extension_uri: settings.aap.extension_uri.clone(),
    })
}

/// An unspecified listen address (0.0.0.0) is advertised as loopback.
fn advertised(listen: SocketAddr) -> SocketAddr {
    if listen.ip().is_unspecified() {
        let ip = if listen.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        };
        SocketAddr::new(ip, listen.port())
    } else {
        listen
    }
}

impl Dealer {
    pub fn id(&self) -> &str {
        &self.settings.id
    }

    pub fn extension_uri(&self) -> &str {
        &self.extension_uri
    }

    /// Skills this dealer serves, in card order.
    pub fn skills(&self) -> impl Iterator<Item = Skill> + '_ {
        self.handlers.keys().copied()
    }

    /// The handler for the skill a call names, or `UNSUPPORTED_SKILL`.
    pub fn handler(&self, skill: &SkillRef) -> Result<(Skill, &Handler), AapError> {
        match skill {
            SkillRef::Known(s) => match self.handlers.get(s) {
                Some(h) => Ok((*s, h)),
                None => Err(AapError::unsupported_skill(s.id(), &self.served)),
            },
            SkillRef::Unknown(t) => {
                let name = t.strip_suffix(".request").unwrap_or(t);
                Err(AapError::unsupported_skill(name, &self.served))
            }
        }
    }
}
