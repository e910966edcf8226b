//! What a load takes (`LoadContext`, the `LoadCache` a configuration load's dealers share) and
//! what it gives (`DealerMappings`, and `Carried`: what the next reload may take over).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::engine::Handler;
use crate::engine::feed::Feed;
use crate::lang::jq::Jq;
use crate::lang::template::{Context, Templates};
use crate::mapping::Example;
use crate::protocol::Skill;
use crate::schema::Schemas;
use crate::settings::yaml::Problem;
use crate::upstream::{HttpClients, Mailer, Upstream};

/// What the loader needs besides the folder.
pub struct LoadContext<'a> {
    pub schemas: &'a Schemas,
    /// `${NAME}` in `upstreams.yaml` resolves through this (the process environment plus any
    /// overrides the caller adds, e.g. the demo's simulator addresses).
    pub vars: &'a dyn Fn(&str) -> Option<String>,
    pub dealer_id: &'a str,
    pub dealer_name: &'a str,
    /// Where the dealer's upstream calls are counted.
    pub metrics: &'a Arc<crate::telemetry::metrics::Metrics>,
    /// The dealer's running state before a reload, if any: what did not change is taken over.
    pub previous: Option<&'a Carried>,
    /// What this load's dealers share (one per configuration load).
    pub cache: &'a LoadCache,
}

/// What a [`LoadContext`] borrows, owned by a unit test: the schemas, the metrics and one
/// cache for every dealer it loads; no `${NAME}` is set, nothing is carried over.
#[cfg(test)]
pub(crate) struct TestLoad {
    pub(crate) schemas: Schemas,
    pub(crate) metrics: Arc<crate::telemetry::metrics::Metrics>,
    pub(crate) cache: LoadCache,
}

#[cfg(test)]
impl TestLoad {
    pub(crate) fn new() -> TestLoad {
        TestLoad {
            schemas: Schemas::load().expect("schemas"),
            metrics: crate::telemetry::metrics::Metrics::new(),
            cache: LoadCache::default(),
        }
    }

    /// The context of a load of dealer `dealer_id` (its name the same).
    pub(crate) fn ctx<'a>(&'a self, dealer_id: &'a str) -> LoadContext<'a> {
        fn unset(_: &str) -> Option<String> {
            None
        }
        LoadContext {
            schemas: &self.schemas,
            vars: &unset,
            dealer_id,
            dealer_name: dealer_id,
            metrics: &self.metrics,
            previous: None,
            cache: &self.cache,
        }
    }
}

/// What the dealers of one configuration load build once and share: compiled jq programs (by
/// their text) and HTTP clients (by their settings, see [`HttpClients`]). A dealer group whose
/// dealers have copies of one mapping compiles it once, not once per dealer. Everything cached
/// is immutable once built; what is each dealer's own (its `$dealer`, tables, upstream
/// breakers and slots, metrics, feed cache) is not cached.
#[derive(Debug, Default)]
pub struct LoadCache {
    jq: std::sync::Mutex<HashMap<String, Jq>>,
    /// Programs compiled through this cache (each text once).
    compiled: std::sync::atomic::AtomicUsize,
    /// Request templates by their names, sources and output contexts.
    #[allow(clippy::type_complexity)]
    templates: std::sync::Mutex<HashMap<Vec<(String, String, Context)>, Arc<Templates>>>,
    pub(super) clients: HttpClients,
}

impl LoadCache {
    /// `code` compiled, once per load.
    pub(super) fn jq(&self, code: &str) -> Result<Jq, crate::lang::jq::JqCompileError> {
        if let Some(jq) = self.jq.lock().ok().and_then(|c| c.get(code).cloned()) {
            return Ok(jq);
        }
        self.compiled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let jq = Jq::compile(code)?;
        if let Ok(mut compiled) = self.jq.lock() {
            compiled.insert(code.to_owned(), jq.clone());
        }
        Ok(jq)
    }

    /// One request's templates (`(name, pointer, source, context)` each) compiled together,
    /// once per load for the same names, sources and contexts; `Err`: every one that does not
    /// compile, with its pointer.
    #[allow(clippy::type_complexity)]
    pub(super) fn templates(
        &self,
        pending: &[(String, String, String, Context)],
    ) -> Result<Arc<Templates>, Vec<(String, crate::lang::template::TemplateError)>> {
        let key: Vec<(String, String, Context)> = pending
            .iter()
            .map(|(name, _, source, context)| (name.clone(), source.clone(), *context))
            .collect();
        if let Some(templates) = self
            .templates
            .lock()
            .ok()
            .and_then(|c| c.get(&key).cloned())
        {
            return Ok(templates);
        }
        let mut templates = Templates::new();
        let errors: Vec<_> = pending
            .iter()
            .filter_map(|(name, at, source, context)| {
                templates
                    .add(name, source, *context)
                    .err()
                    .map(|e| (at.clone(), e))
            })
            .collect();
        if !errors.is_empty() {
            return Err(errors);
        }
        let templates = Arc::new(templates);
        if let Ok(mut compiled) = self.templates.lock() {
            compiled.insert(key, Arc::clone(&templates));
        }
        Ok(templates)
    }

    /// jq programs compiled so far.
    pub fn programs(&self) -> usize {
        self.compiled.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// HTTP clients built so far.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}

/// What a reload takes over from a dealer's running configuration: every upstream whose
/// `upstreams.yaml` entry (after `${NAME}` expansion) is unchanged keeps its circuit breaker,
/// concurrency slots, retry budget and connection pool; a feed whose files, dealer name and
/// upstream are unchanged keeps its cached copy, so a source that is down stays served stale.
#[derive(Debug, Default, Clone)]
pub struct Carried {
    pub(super) upstreams: HashMap<String, (Value, Target)>,
    pub(super) feed: Option<(u64, Arc<Feed>)>,
}

/// A dealer's compiled mappings.
#[derive(Debug, Default)]
pub struct DealerMappings {
    pub handlers: BTreeMap<Skill, Handler>,
    pub feeds: Vec<Arc<Feed>>,
    pub examples: Vec<Example>,
    /// What the mappings cost or risk (e.g. searches completed in the gateway), for `check`.
    pub notes: Vec<Problem>,
    /// What the next reload may take over.
    pub carried: Carried,
}

/// An upstream of `upstreams.yaml`, built.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Http(Arc<Upstream>),
    Smtp(Arc<Mailer>),
}

/// `name → upstream`; `None` for names whose settings have problems (already reported).
pub(super) type Upstreams = HashMap<String, Option<Target>>;
