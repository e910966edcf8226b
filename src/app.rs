//! `App`: the fully built, immutable state of one configuration — compiled schemas, dealers with
//! their rendered cards and skill handlers. Shared as `Arc<App>`; a reload builds a new one and
//! swaps it whole, so a request always sees one consistent configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::SystemTime;

use crate::error::AapError;
use std::sync::Arc;

use crate::auth::Authenticator;
use crate::engine::Handler;
use crate::engine::feed::Feed;
use crate::engine::lead::deliveries::Deliveries;
use crate::idempotency::Idempotency;
use crate::mapping::Example;
use crate::mapping::{Carried, LoadCache, LoadContext, load_folder};
use crate::protocol::Caller;
use crate::protocol::agent_card::{AgentCard, CardInput};
use crate::protocol::{Skill, SkillRef};
use crate::rate_limit::{Client, Limiter};
use crate::redis_backend::RedisBackend;
use crate::schema::Schemas;
use crate::settings::{DealerSettings, Problem, Settings};
use crate::settings::{LimitBackend, OnBackendError};
use crate::telemetry::metrics::Metrics;

/// How often idle rate-limit buckets are forgotten.
const LIMIT_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug)]
pub struct App {
    pub settings: Settings,
    /// Shared with lead deliveries, which outlive their request.
    pub schemas: Arc<Schemas>,
    /// Most specific first (see `router`).
    pub dealers: Vec<Dealer>,
    /// `lead.submit` idempotency keys and their replies.
    pub idempotency: Arc<Idempotency>,
    /// Quotas per dealer, client and skill, and the concurrency limit.
    pub limits: Arc<Limiter>,
    /// `None`: public agents.
    pub auth: Option<Authenticator>,
    pub loaded_at: SystemTime,
    /// The process's metrics (shared with the apps before and after a reload).
    pub metrics: Arc<Metrics>,
    /// Lead deliveries running (shared with the apps before and after a reload: a delivery
    /// outlives the configuration that started it).
    pub deliveries: Arc<Deliveries>,
}

#[derive(Debug)]
pub struct Dealer {
    /// Position in `App::dealers`; names the dealer in rate-limit keys.
    pub index: u16,
    /// The dealer id as a metrics label.
    pub label: Arc<str>,
    pub settings: DealerSettings,
    pub card: AgentCard,
    /// The JSON-RPC URL the card advertises.
    pub jsonrpc_url: String,
    /// The URL of this dealer's agent card.
    pub card_url: String,
    handlers: BTreeMap<Skill, Handler>,
    feeds: Vec<Arc<Feed>>,
    examples: Vec<Example>,
    /// What the dealer's mappings cost or risk, for `check`.
    notes: Vec<Problem>,
    /// Skill ids served, for `UNSUPPORTED_SKILL` details.
    served: Vec<&'static str>,
    extension_uri: String,
    /// What the next reload may take over.
    carried: Carried,
}

impl crate::router::Placed for Dealer {
    fn placement(&self) -> &DealerSettings {
        &self.settings
    }
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
        App::build_with(settings, listen, vars, Metrics::new())
    }

    /// Like `build_with_vars`, counting into `metrics`.
    pub fn build_with(
        settings: Settings,
        listen: SocketAddr,
        vars: &dyn Fn(&str) -> Option<String>,
        metrics: Arc<Metrics>,
    ) -> Result<App, Vec<Problem>> {
        App::build_from(settings, listen, vars, metrics, None)
    }

    /// The configuration replacing `old` on a reload: counters carry on, and each dealer takes
    /// over the upstreams and feed cache that did not change (see [`Carried`]); the rest of
    /// the running state is taken by [`App::adopt_state`].
    pub fn rebuild(
        settings: Settings,
        listen: SocketAddr,
        vars: &dyn Fn(&str) -> Option<String>,
        old: &App,
    ) -> Result<App, Vec<Problem>> {
        App::build_from(settings, listen, vars, Arc::clone(&old.metrics), Some(old))
    }

    fn build_from(
        settings: Settings,
        listen: SocketAddr,
        vars: &dyn Fn(&str) -> Option<String>,
        metrics: Arc<Metrics>,
        old: Option<&App>,
    ) -> Result<App, Vec<Problem>> {
        let schemas = Schemas::load().map(Arc::new).map_err(|e| {
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
        let cache = LoadCache::default();
        for dealer in &settings.dealers {
            let previous = old
                .and_then(|o| o.dealers.iter().find(|d| d.id() == dealer.id))
                .map(|d| &d.carried);
            let env = Env {
                listen,
                loaded_at,
                vars,
                metrics: &metrics,
                previous,
                cache: &cache,
            };
            match build_dealer(&settings, &schemas, dealer, &env) {
                Ok(d) => dealers.push(d),
                Err(mut p) => problems.append(&mut p),
            }
        }
        if !problems.is_empty() {
            crate::settings::sort_problems(&mut problems);
            return Err(problems);
        }
        crate::router::sort_by_specificity(&mut dealers);
        for (i, dealer) in dealers.iter_mut().enumerate() {
            dealer.index = u16::try_from(i).unwrap_or(u16::MAX);
        }
        let keys = &settings.idempotency;
        let limits = crate::idempotency::ClaimLimits {
            ttl: keys.ttl,
            max_entries: keys.max_entries,
            max_bytes: keys.max_bytes,
            on_ambiguous: keys.on_ambiguous,
        };
        let idempotency = Arc::new(match &keys.backend {
            LimitBackend::Memory => Idempotency::local(limits).with_metrics(&metrics),
            LimitBackend::Redis { url } => {
                let backend = RedisBackend::new(url, keys.redis_timeout, "aapgw:")
                    .map_err(|e| vec![settings.source.problem("/idempotency/redis_url", e)])?;
                let fallback = match keys.on_backend_error {
                    OnBackendError::Local => "local store",
                    OnBackendError::Deny => "deny",
                };
                backend.watch("idempotency", fallback, &metrics);
                Idempotency::shared(limits, backend, keys.lock_ttl, keys.on_backend_error)
                    .with_metrics(&metrics)
            }
        });
        let redis = match &settings.rate_limit.backend {
            LimitBackend::Redis { url } => {
                let backend =
                    RedisBackend::new(url, settings.rate_limit.redis_timeout, "aapgw:")
                        .map_err(|e| vec![settings.source.problem("/rate_limit/redis_url", e)])?;
                let fallback = match settings.rate_limit.on_backend_error {
                    OnBackendError::Local => "local limits",
                    OnBackendError::Deny => "deny",
                };
                backend.watch("rate_limit", fallback, &metrics);
                Some(backend)
            }
            LimitBackend::Memory => None,
        };
        let key_quotas: Vec<(Arc<str>, crate::settings::Quota)> = settings
            .auth
            .iter()
            .flat_map(|a| a.keys.iter())
            .filter_map(|k| k.quota.map(|q| (Arc::from(k.id.as_str()), q)))
            .collect();
        let limits = Arc::new(
            Limiter::new(
                &settings.rate_limit,
                &key_quotas,
                redis,
                settings.limits.max_concurrency,
            )
            // Bodies being received hold at most as much as `max_concurrency` full bodies.
            .with_body_budget(
                settings
                    .limits
                    .max_concurrency
                    .saturating_mul(settings.limits.max_body_bytes),
            ),
        );
        let auth = settings.auth.as_ref().map(Authenticator::new);
        let deliveries = old.map_or_else(Deliveries::new, |old| Arc::clone(&old.deliveries));
        Ok(App {
            settings,
            schemas,
            dealers,
            idempotency,
            limits,
            auth,
            loaded_at,
            metrics,
            deliveries,
        })
    }

    /// Takes over the running state of `old` (idempotency keys in flight and stored, rate-limit
    /// buckets) where the settings that shape it did not change, so a reload neither replays a
    /// lead twice nor hands every client a fresh burst.
    pub fn adopt_state(&mut self, old: &App) {
        if self.settings.idempotency == old.settings.idempotency {
            self.idempotency = Arc::clone(&old.idempotency);
        } else if let Some(keys) = Arc::get_mut(&mut self.idempotency) {
            // Stored replies and deliveries in flight carry over; the old claims in Redis are
            // renewed by the old keys' retiring keeper (`App::retire_replaced`).
            keys.carry_over(&old.idempotency);
        } else {
            // Unreachable while `rebuild` hands out no other reference before the swap.
            tracing::error!(
                "idempotency: the new settings' keys are already shared; stored replies and \
                 deliveries in flight do not carry over"
            );
        }
        let same_limits = self.settings.rate_limit == old.settings.rate_limit
            && self.settings.auth == old.settings.auth
            && self.settings.limits.max_concurrency == old.settings.limits.max_concurrency
            // Buckets are keyed by the dealer's position.
            && self.dealers.iter().map(Dealer::id).eq(old.dealers.iter().map(Dealer::id));
        if same_limits {
            self.limits = Arc::clone(&old.limits);
        }
    }

    /// Keeps what `old` (the configuration this one replaced) still owes its deliveries in
    /// flight: when the idempotency keys were not shared ([`App::adopt_state`]), the old keys'
    /// claims in Redis are renewed until those deliveries end. Call after `old`'s background
    /// tasks were stopped; the task ends by itself.
    pub fn retire_replaced(&self, old: &App) {
        if !Arc::ptr_eq(&self.idempotency, &old.idempotency) {
            tokio::spawn(Arc::clone(&old.idempotency).retire());
        }
    }

    /// Starts the background work of this configuration (feed refreshers). The tasks stop when
    /// the returned handles are aborted (on shutdown or reload).
    pub fn start_background(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks: Vec<_> = self
            .dealers
            .iter()
            .flat_map(|d| d.feeds.iter())
            .map(|feed| {
                feed.set_refresh_priority(self.settings.limits.feed_refresh_priority);
                tokio::spawn(Arc::clone(feed).keep_fresh())
            })
            .collect();
        // Leases of the replicas' claims on lead keys, and recovery after a Redis restart.
        tasks.push(tokio::spawn(Arc::clone(&self.idempotency).keep_shared()));
        // Full buckets carry no information: forget them so memory follows live clients only.
        let limits = Arc::clone(&self.limits);
        tasks.push(tokio::spawn(async move {
            let mut every = tokio::time::interval(LIMIT_SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                limits.sweep();
            }
        }));
        tasks
    }

    /// Who is calling `skill`: the API key's id when the skill needs one or the caller sent
    /// one (401/403 when it is missing or wrong), else the client's address.
    pub fn client(
        &self,
        dealer: &Dealer,
        skill: Skill,
        caller: &Caller,
    ) -> Result<Client, AapError> {
        match &self.auth {
            Some(auth) if auth.requires_key(skill) || caller.presented.is_some() => auth
                .authenticate(caller.presented, dealer.id())
                .map(Client::Key),
            // An IPv6 client by its /64: one host holds the whole block.
            Some(_) | None => Ok(Client::Ip(crate::rate_limit::bucket_ip(caller.ip))),
        }
    }

    pub fn dealer(&self, id: &str) -> Option<&Dealer> {
        self.dealers.iter().find(|d| d.settings.id == id)
    }
}

/// What every dealer of one build shares.
struct Env<'a> {
    listen: SocketAddr,
    loaded_at: SystemTime,
    vars: &'a dyn Fn(&str) -> Option<String>,
    metrics: &'a Arc<Metrics>,
    /// The dealer's state in the configuration being replaced, on a reload.
    previous: Option<&'a Carried>,
    /// What the dealers of this build share.
    cache: &'a LoadCache,
}

fn build_dealer(
    settings: &Settings,
    schemas: &Schemas,
    dealer: &DealerSettings,
    env: &Env<'_>,
) -> Result<Dealer, Vec<Problem>> {
    let Env {
        listen, loaded_at, ..
    } = *env;
    let mut problems = Vec::new();
    let mut handlers = BTreeMap::new();
    let mut feeds = Vec::new();
    let mut examples = Vec::new();
    let mut notes = Vec::new();
    let mut carried = Carried::default();
    if let Some(dir) = &dealer.mappings {
        let ctx = LoadContext {
            schemas,
            vars: env.vars,
            dealer_id: &dealer.id,
            dealer_name: &dealer.card.name,
            metrics: env.metrics,
            previous: env.previous,
            cache: env.cache,
        };
        match load_folder(dir, &ctx) {
            Ok(m) => {
                handlers = m.handlers;
                feeds = m.feeds;
                examples = m.examples;
                notes = m.notes;
                carried = m.carried;
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
    if let Some(Handler::Lead(lead)) = handlers.get(&Skill::LeadSubmit)
        && let Some(note) = lead_deadline_note(lead, &handlers, settings.limits.request_timeout)
    {
        notes.push(note);
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
        secured: &skills
            .iter()
            .copied()
            .filter(|s| {
                settings
                    .auth
                    .as_ref()
                    .is_some_and(|a| !a.public_skills.contains(s))
            })
            .collect::<Vec<_>>(),
        http_json: settings.http_json,
    });
    Ok(Dealer {
        index: 0,
        label: Arc::from(dealer.id.as_str()),
        settings: dealer.clone(),
        card,
        card_url: format!("{base}/.well-known/agent-card.json"),
        jsonrpc_url,
        served: skills.iter().map(|s| s.id()).collect(),
        handlers,
        feeds,
        examples,
        notes,
        carried,
        extension_uri: settings.aap.extension_uri.clone(),
    })
}

/// A note for `check` when a lead's path (the vehicle check, then the delivery, each under its
/// upstream's timeouts) can outlast `limits.request_timeout`: the buyer is then told "in
/// progress" and joins the running delivery with a retry, which `check` should say.
fn lead_deadline_note(
    lead: &crate::engine::lead::LeadMapping,
    handlers: &BTreeMap<Skill, Handler>,
    request_timeout: std::time::Duration,
) -> Option<Problem> {
    use crate::engine::lead::Destination;
    let http = |u: &crate::upstream::Upstream| {
        let s = u.settings();
        (
            s.queue_timeout + s.connect_timeout + s.request_timeout,
            "timeouts.queue + connect + request",
        )
    };
    let (delivery, terms) = match &lead.destination {
        Destination::Http(mapped) => http(&mapped.upstream),
        Destination::Mail(mail) => {
            let s = mail.mailer.settings();
            (
                s.request_timeout + s.data_timeout,
                "timeouts.request + data",
            )
        }
    };
    let check = match handlers.get(&Skill::InventoryVehicle) {
        Some(Handler::Proxy(mapped)) if lead.policy.check_vehicle => http(&mapped.upstream).0,
        _ => std::time::Duration::ZERO,
    };
    let path = delivery + check;
    (path > request_timeout).then(|| Problem {
        origin: crate::settings::Origin::WholeFile {
            path: lead.file.clone().into(),
        },
        message: format!(
            "a lead's delivery may take up to {} (upstream `{}`: {terms}{}), longer than \
             limits.request_timeout ({}): a buyer still waiting then is told \"in progress\" \
             (retryable) and its retry with the same idempotency_key gets the delivery's \
             outcome; the delivery itself is never cut short by the deadline",
            humantime::format_duration(path),
            lead.upstream(),
            if check.is_zero() {
                ""
            } else {
                ", plus the vehicle check"
            },
            humantime::format_duration(request_timeout),
        ),
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

    /// What this dealer's mappings cost or risk (`check` prints them).
    pub fn notes(&self) -> &[Problem] {
        &self.notes
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
