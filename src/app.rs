//! `App`: the fully built, immutable state of one configuration — compiled schemas, dealers with
//! their rendered cards and skill handlers. Shared as `Arc<App>`; a reload builds a new one and
//! swaps it whole, so a request always sees one consistent configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::SystemTime;

use crate::error::AapError;
use std::sync::Arc;

use crate::idempotency::Store;
use crate::mapping::feed::Feed;
use crate::mapping::load::{LoadContext, load_folder};
use crate::mapping::{Example, Handler};
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
    /// `lead.submit` idempotency keys and their replies.
    pub idempotency: Arc<Store>,
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
    feeds: Vec<Arc<Feed>>,
    examples: Vec<Example>,
    /// Skill ids served, for `UNSUPPORTED_SKILL` details.
    served: Vec<&'static str>,
    extension_uri: String,
}

impl App {
    /// Builds the app for `settings`. `listen` is the address the gateway really listens on; it
    /// forms the card URLs of dealers whose `card.url` is not configured.
    pub fn build(settings: Settings, listen: SocketAddr) -> Result<App, Vec<Problem>> {
        App::build_with_vars(settings, listen, &|name: &str| std::env::var(name).ok())
    }

    /// Like `build`, resolving `${NAME}` in mapping files through `vars`.
    pub fn build_with_vars(
        settings: Settings,
        listen: SocketAddr,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<App, Vec<Problem>> {
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
            match build_dealer(&settings, &schemas, dealer, listen, loaded_at, vars) {
                Ok(d) => dealers.push(d),
                Err(mut p) => problems.append(&mut p),
            }
        }
        if !problems.is_empty() {
            crate::settings::sort_problems(&mut problems);
            return Err(problems);
        }
        crate::router::sort_by_specificity(&mut dealers);
        let idempotency = Arc::new(Store::new(
            settings.idempotency.ttl,
            settings.idempotency.max_entries,
        ));
        Ok(App {
            settings,
            schemas,
            dealers,
            idempotency,
            loaded_at,
        })
    }

    /// Starts the background work of this configuration (feed refreshers). The tasks stop when
    /// the returned handles are aborted (on shutdown or reload).
    pub fn start_background(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.dealers
            .iter()
            .flat_map(|d| d.feeds.iter())
            .map(|feed| tokio::spawn(Arc::clone(feed).keep_fresh()))
            .collect()
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
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<Dealer, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut handlers = BTreeMap::new();
    let mut feeds = Vec::new();
    let mut examples = Vec::new();
    if let Some(dir) = &dealer.mappings {
        let ctx = LoadContext {
            schemas,
            vars,
            dealer_id: &dealer.id,
            dealer_name: &dealer.card.name,
        };
        match load_folder(dir, &ctx) {
            Ok(m) => {
                handlers = m.handlers;
                feeds = m.feeds;
                examples = m.examples;
            }
            Err(mut p) => problems.append(&mut p),
        }
    }
    if let Some(profile) = &dealer.profile {
        let pointer = format!("{}/profile", dealer.pointer);
        let violations = schemas.check_dealer_information(profile);
        for v in &violations {
            problems.push(settings.source.problem(
                &format!("{pointer}{}", v.instance_location),
                format!("profile{}: {}: {}", v.instance_location, v.keyword, v.error),
            ));
        }
        let mapped = handlers.contains_key(&Skill::DealerInformation);
        if mapped {
            problems.push(settings.source.problem(
                &pointer,
                "dealer.information comes from both `profile` and a mapping file; keep one",
            ));
        }
        if !mapped && violations.is_empty() {
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
    if let Some(Handler::Lead(lead)) = handlers.get(&Skill::LeadSubmit)
        && lead.policy.check_vehicle
        && !handlers.contains_key(&Skill::InventoryVehicle)
    {
        problems.push(settings.source.problem(
            &dealer.pointer,
            format!(
                "{}: `lead.check_vehicle` needs this dealer to serve inventory.vehicle",
                lead.file
            ),
        ));
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
        feeds,
        examples,
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

    /// The handler serving `skill`, if any.
    pub fn handler_for(&self, skill: Skill) -> Option<&Handler> {
        self.handlers.get(&skill)
    }

    /// Inventory feeds this dealer caches.
    pub fn feeds(&self) -> &[Arc<Feed>] {
        &self.feeds
    }

    /// Example cases of this dealer's mapping files.
    pub fn examples(&self) -> &[Example] {
        &self.examples
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
