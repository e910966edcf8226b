//! Prometheus metrics (the names of docs/operations.md §Metrics), served as OpenMetrics text on the
//! admin listener.
//!
//! One `Metrics` lives for the whole process and is handed from each `App` to the next on
//! reload, so counters survive configuration changes. Label values are bounded: dealer ids and
//! upstream names come from the configuration, skills and outcomes from fixed vocabularies
//! (AAP codes, A2A reasons). Recording takes a read lock on a label family and an atomic add;
//! label sets hold `Arc<str>` and `&'static str`, so nothing is allocated per request once a
//! series exists.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets (seconds): 1 ms to ~16 s, doubling — gateway work is sub-millisecond, legacy
/// systems take up to their timeouts.
#[derive(Clone, Copy, Debug, Default)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.001, 2.0, 15,
        ))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    dealer: Arc<str>,
    skill: &'static str,
    binding: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    dealer: Arc<str>,
    skill: &'static str,
    binding: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    dealer: Arc<str>,
    upstream: Arc<str>,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamErrorLabels {
    dealer: Arc<str>,
    upstream: Arc<str>,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkillLabels {
    dealer: Arc<str>,
    skill: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DealerLabels {
    dealer: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MappingEventLabels {
    dealer: Arc<str>,
    upstream: Arc<str>,
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnknownOutcomeLabels {
    dealer: Arc<str>,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    dealer: Arc<str>,
    /// `in_time` (the buyer heard it), `late` (after the buyer heard `received`), `never`.
    when: &'static str,
    /// `received`, `duplicate`, `rejected`, or `none` with `never`.
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    dealer: Arc<str>,
    upstream: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    dealer: Arc<str>,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RouteLabels, Histogram, Buckets>,
    upstream_seconds: Family<UpstreamLabels, Histogram, Buckets>,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    breaker_open: Family<BreakerLabels, Gauge>,
    mapping_events: Family<MappingEventLabels, Counter>,
    rate_limited: Family<SkillLabels, Counter>,
    replays: Family<DealerLabels, Counter>,
    conflicts: Family<DealerLabels, Counter>,
    feed_age: Family<DealerLabels, Gauge<f64, AtomicU64>>,
    feed_listable: Family<DealerLabels, Gauge>,
    feed_refreshes: Family<OutcomeLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    in_flight: Gauge,
    waiting: Gauge,
    connections_open: Gauge,
    connections_refused: Family<ReasonLabels, Counter>,
    connections_timed_out: Family<PhaseLabels, Counter>,
    redis_fallbacks: Family<StoreLabels, Counter>,
    redis_degraded: Family<StoreLabels, Gauge>,
    leads_unknown: Family<UnknownOutcomeLabels, Counter>,
    leads_in_progress: Family<DealerLabels, Counter>,
    lead_deliveries: Gauge,
    lead_verdicts: Family<VerdictLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let requests = Family::default();
        registry.register(
            "aap_gateway_requests",
            "Skill calls by dealer, skill, binding and outcome (ok, an AAP code or an A2A reason)",
            requests.clone(),
        );
        let request_seconds = Family::new_with_constructor(Buckets);
        registry.register(
            "aap_gateway_request_duration_seconds",
            "Time from the request's arrival to its reply",
            request_seconds.clone(),
        );
        let upstream_seconds = Family::new_with_constructor(Buckets);
        registry.register(
            "aap_gateway_upstream_duration_seconds",
            "Calls to dealer systems by outcome (HTTP status class or error kind), retries included",
            upstream_seconds.clone(),
        );
        let upstream_errors = Family::default();
        registry.register(
            "aap_gateway_upstream_errors",
            "Failed calls to dealer systems by kind",
            upstream_errors.clone(),
        );
        let breaker_open = Family::default();
        registry.register(
            "aap_gateway_upstream_breaker_open",
            "1 while a dealer system's circuit breaker is open (calls fail fast until a trial \
             call succeeds), else 0",
            breaker_open.clone(),
        );
        let mapping_events = Family::default();
        registry.register(
            "aap_gateway_mapping_events",
            "What mappings met in dealer systems' replies: records skipped, scans refused at \
             scan_limit, unlisted units in pages declared listable",
            mapping_events.clone(),
        );
        let rate_limited = Family::default();
        registry.register(
            "aap_gateway_rate_limited",
            "Calls refused with RATE_LIMITED (quota or load shedding)",
            rate_limited.clone(),
        );
        let replays = Family::default();
        registry.register(
            "aap_gateway_idempotency_replays",
            "lead.submit retries answered with the stored reply",
            replays.clone(),
        );
        let conflicts = Family::default();
        registry.register(
            "aap_gateway_idempotency_conflicts",
            "Idempotency keys reused with another payload",
            conflicts.clone(),
        );
        let feed_age = Family::default();
        registry.register(
            "aap_gateway_feed_cache_age_seconds",
            "Age of the oldest cached inventory feed of a dealer",
            feed_age.clone(),
        );
        let feed_listable = Family::default();
        registry.register(
            "aap_gateway_feed_listable_vehicles",
            "Vehicles a dealer's cached inventory feeds list to buyers (0 with a copy loaded: \
             the feed lists nothing, and the log and /readyz say why)",
            feed_listable.clone(),
        );
        let feed_refreshes = Family::default();
        registry.register(
            "aap_gateway_feed_refreshes",
            "Inventory feed fetches by outcome: changed (a new copy), not_modified (a 304 or the \
             same bytes: the copy kept), failed (the copy kept until max_stale)",
            feed_refreshes.clone(),
        );
        let reloads = Family::default();
        registry.register(
            "aap_gateway_config_reloads",
            "Configuration reloads by result",
            reloads.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "aap_gateway_requests_in_flight",
            "Requests holding one of limits.max_concurrency slots (body read, being answered)",
            in_flight.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "aap_gateway_requests_waiting",
            "Requests arrived whose body is still being read (no slot held yet)",
            waiting.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "aap_gateway_connections_open",
            "Open connections on the public listener",
            connections_open.clone(),
        );
        let connections_refused = Family::default();
        registry.register(
            "aap_gateway_connections_refused",
            "Connections closed on accept by a cap (reason: max, max_per_ip)",
            connections_refused.clone(),
        );
        let connections_timed_out = Family::default();
        registry.register(
            "aap_gateway_connections_timed_out",
            "Connections closed by a deadline (phase: first_byte, header, idle)",
            connections_timed_out.clone(),
        );
        let redis_fallbacks = Family::default();
        registry.register(
            "aap_gateway_redis_fallbacks",
            "Decisions taken without Redis, as on_backend_error says (store: rate_limit, \
             idempotency)",
            redis_fallbacks.clone(),
        );
        let redis_degraded = Family::default();
        registry.register(
            "aap_gateway_redis_degraded",
            "1 while the last call to a store's Redis failed (store: rate_limit, idempotency)",
            redis_degraded.clone(),
        );
        let leads_unknown = Family::default();
        registry.register(
            "aap_gateway_lead_outcome_unknown",
            "Lead deliveries whose outcome is unknown (connection lost or timed out after the \
             CRM may have taken the lead, or a replica died delivering it), by what \
             idempotency.on_ambiguous made of them (action: resend, hold)",
            leads_unknown.clone(),
        );
        let leads_in_progress = Family::default();
        registry.register(
            "aap_gateway_lead_in_progress",
            "lead.submit calls answered \"in progress\" (retryable): their key's delivery was \
             still running, or Redis was recovering",
            leads_in_progress.clone(),
        );
        let lead_verdicts = Family::default();
        registry.register(
            "aap_gateway_lead_verdicts",
            "Verdicts on leads a CRM queued (lead.verdict): when (in_time: the buyer heard it; \
             late: after the buyer heard received; never: the polls ran out) and verdict \
             (received, duplicate, rejected, none)",
            lead_verdicts.clone(),
        );
        let lead_deliveries = Gauge::default();
        registry.register(
            "aap_gateway_lead_deliveries_running",
            "Lead deliveries running in their own task (they outlive a buyer who went away)",
            lead_deliveries.clone(),
        );
        let build_info = Family::<VersionLabels, Gauge>::default();
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "aap_gateway_build_info",
            "The running build (value 1)",
            build_info,
        );
        Arc::new(Metrics {
            registry,
            requests,
            request_seconds,
            upstream_seconds,
            upstream_errors,
            breaker_open,
            mapping_events,
            rate_limited,
            replays,
            conflicts,
            feed_age,
            feed_listable,
            feed_refreshes,
            reloads,
            in_flight,
            waiting,
            connections_open,
            connections_refused,
            connections_timed_out,
            redis_fallbacks,
            redis_degraded,
            leads_unknown,
            leads_in_progress,
            lead_deliveries,
            lead_verdicts,
        })
    }

    /// One finished skill call.
    pub fn request(
        &self,
        dealer: &Arc<str>,
        skill: &'static str,
        binding: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                dealer: Arc::clone(dealer),
                skill,
                binding,
                outcome,
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabels {
                dealer: Arc::clone(dealer),
                skill,
                binding,
            })
            .observe(elapsed.as_secs_f64());
        if outcome == "RATE_LIMITED" {
            self.rate_limited
                .get_or_create(&SkillLabels {
                    dealer: Arc::clone(dealer),
                    skill,
                })
                .inc();
        }
    }

    /// One call to a dealer system: `Ok(status)` for any HTTP reply, or the error's kind
    /// (`UpstreamError::kind`).
    pub fn upstream(
        &self,
        dealer: &Arc<str>,
        upstream: &Arc<str>,
        result: Result<u16, &'static str>,
        elapsed: Duration,
    ) {
        let outcome = match result {
            Ok(status) => match status {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                _ => "5xx",
            },
            Err(kind) => kind,
        };
        self.upstream_seconds
            .get_or_create(&UpstreamLabels {
                dealer: Arc::clone(dealer),
                upstream: Arc::clone(upstream),
                outcome,
            })
            .observe(elapsed.as_secs_f64());
        if let Err(kind) = result {
            self.upstream_error(dealer, upstream, kind);
        }
    }

    /// One upstream failure of `kind`. A 5xx reply (`status`) is counted once its caller has
    /// judged it a failure (`upstream::Verdict`): a fault a mapping handles is an answer.
    pub fn upstream_error(&self, dealer: &Arc<str>, upstream: &Arc<str>, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels {
                dealer: Arc::clone(dealer),
                upstream: Arc::clone(upstream),
                kind,
            })
            .inc();
    }

    pub fn mapping_event(
        &self,
        dealer: &Arc<str>,
        upstream: &Arc<str>,
        event: &'static str,
        count: u64,
    ) {
        self.mapping_events
            .get_or_create(&MappingEventLabels {
                dealer: Arc::clone(dealer),
                upstream: Arc::clone(upstream),
                event,
            })
            .inc_by(count);
    }

    pub fn idempotency_replay(&self, dealer: &Arc<str>) {
        let labels = DealerLabels {
            dealer: Arc::clone(dealer),
        };
        self.replays.get_or_create(&labels).inc();
    }

    pub fn idempotency_conflict(&self, dealer: &Arc<str>) {
        let labels = DealerLabels {
            dealer: Arc::clone(dealer),
        };
        self.conflicts.get_or_create(&labels).inc();
    }

    /// A lead delivery whose outcome is unknown; `action`: `resend` or `hold`.
    pub fn lead_ambiguous(&self, dealer: &Arc<str>, action: &'static str) {
        let labels = UnknownOutcomeLabels {
            dealer: Arc::clone(dealer),
            action,
        };
        self.leads_unknown.get_or_create(&labels).inc();
    }

    /// A queued lead's verdict (`lead.verdict`), or its absence (`when: "never"`).
    pub fn lead_verdict(&self, dealer: &Arc<str>, when: &'static str, verdict: &'static str) {
        let labels = VerdictLabels {
            dealer: Arc::clone(dealer),
            when,
            verdict,
        };
        self.lead_verdicts.get_or_create(&labels).inc();
    }

    /// A `lead.submit` answered "in progress".
    pub fn lead_in_progress(&self, dealer: &Arc<str>) {
        let labels = DealerLabels {
            dealer: Arc::clone(dealer),
        };
        self.leads_in_progress.get_or_create(&labels).inc();
    }

    /// A lead delivery task started (`+1`) or ended (`-1`).
    pub fn lead_deliveries(&self, delta: i64) {
        self.lead_deliveries.inc_by(delta);
    }

    /// A configuration reload: applied (`true`) or refused.
    pub fn reload(&self, applied: bool) {
        let result = if applied { "ok" } else { "error" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// One fetch of a feed of `dealer`: `changed`, `not_modified` or `failed`.
    pub fn feed_refresh(&self, dealer: &Arc<str>, outcome: &'static str) {
        let labels = OutcomeLabels {
            dealer: Arc::clone(dealer),
            outcome,
        };
        self.feed_refreshes.get_or_create(&labels).inc();
    }

    /// Sets the listable-vehicles gauge of `dealer` (its feeds' copies together; none: no
    /// series).
    pub fn feed_listable(&self, dealer: &Arc<str>, listable: Option<usize>) {
        let labels = DealerLabels {
            dealer: Arc::clone(dealer),
        };
        match listable {
            Some(n) => {
                self.feed_listable
                    .get_or_create(&labels)
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            None => {
                self.feed_listable.remove(&labels);
            }
        }
    }

    /// Sets the feed-age gauge of `dealer` (the oldest of its feeds; none: no series).
    pub fn feed_age(&self, dealer: &Arc<str>, age: Option<Duration>) {
        let labels = DealerLabels {
            dealer: Arc::clone(dealer),
        };
        match age {
            Some(age) => {
                self.feed_age.get_or_create(&labels).set(age.as_secs_f64());
            }
            None => {
                self.feed_age.remove(&labels);
            }
        }
    }

    /// Sets the in-flight gauge (read from the limiter at scrape time).
    pub fn in_flight(&self, n: usize) {
        self.in_flight.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One request starts reading its body; the guard ends the wait.
    pub fn waiting(&self) -> GaugeGuard {
        GaugeGuard::inc(&self.waiting)
    }

    /// One accepted connection; the guard counts it closed.
    pub fn connection_open(&self) -> GaugeGuard {
        GaugeGuard::inc(&self.connections_open)
    }

    /// A connection closed on accept by the cap `reason` (`max`, `max_per_ip`).
    pub fn connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A connection closed by the deadline of `phase` (`first_byte`, `header`, `idle`).
    pub fn connection_timed_out(&self, phase: &'static str) {
        self.connections_timed_out
            .get_or_create(&PhaseLabels { phase })
            .inc();
    }

    /// One decision of `store` (`rate_limit`, `idempotency`) taken without Redis.
    pub fn redis_fallback(&self, store: &'static str) {
        self.redis_fallbacks
            .get_or_create(&StoreLabels { store })
            .inc();
    }

    /// Whether `store`'s Redis is failing (its calls fall back), for the degraded gauge.
    pub fn redis_degraded(&self, store: &'static str, degraded: bool) {
        self.redis_degraded
            .get_or_create(&StoreLabels { store })
            .set(i64::from(degraded));
    }

    /// Everything, as OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Holds one unit of a gauge; gives it back when dropped, however the holder ends.
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn inc(gauge: &Gauge) -> GaugeGuard {
        gauge.inc();
        GaugeGuard(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What an upstream records its calls with: the process's metrics and its labels.
#[derive(Clone)]
pub struct Meter {
    metrics: Arc<Metrics>,
    dealer: Arc<str>,
    upstream: Arc<str>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("dealer", &self.dealer)
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl Meter {
    pub fn new(metrics: &Arc<Metrics>, dealer: &str, upstream: &str) -> Meter {
        Meter {
            metrics: Arc::clone(metrics),
            dealer: Arc::from(dealer),
            upstream: Arc::from(upstream),
        }
    }

    /// Records one call: `Ok(status)` for any HTTP reply (`200` for an accepted mail).
    pub fn observe(&self, result: Result<u16, &'static str>, elapsed: Duration) {
        self.metrics
            .upstream(&self.dealer, &self.upstream, result, elapsed);
    }

    /// One fetch of the feed this upstream serves: `changed`, `not_modified` or `failed`.
    pub fn feed_refresh(&self, outcome: &'static str) {
        self.metrics.feed_refresh(&self.dealer, outcome);
    }

    /// A 5xx reply judged a failure.
    pub fn status_failure(&self) {
        self.metrics
            .upstream_error(&self.dealer, &self.upstream, "status");
    }

    /// The gauge of this upstream's circuit breaker (the series exists from now on, at 0).
    pub fn breaker_gauge(&self) -> Gauge {
        self.metrics
            .breaker_open
            .get_or_create(&BreakerLabels {
                dealer: Arc::clone(&self.dealer),
                upstream: Arc::clone(&self.upstream),
            })
            .clone()
    }

    /// Something a mapping met in the upstream's replies (`record_skipped`,
    /// `scan_limit_reached`, `unlisted_in_listable_page`).
    pub fn mapping_event(&self, event: &'static str, count: u64) {
        self.metrics
            .mapping_event(&self.dealer, &self.upstream, event, count);
    }
}
