//! Rate limits: GCRA quotas per dealer, client and skill (docs/protocol.md §Rate limits), checked
//! after
//! authentication and before any schema work or upstream call, so a client that bursts is
//! told `RATE_LIMITED` before the dealer's legacy systems feel it.
//!
//! - **Client**: the authenticated API key when there is one, else the peer's IP address (an
//!   IPv6 client by its /64: one host holds a whole /64, so per-address buckets would be free
//!   to multiply). The forwarding header named by `client_ip_header` — only that one — is
//!   believed only when the peer is a configured trusted proxy, and then only up to the first
//!   address that is not itself trusted (anyone can write those headers; only our own proxies'
//!   entries are true).
//! - **Per address** ([`Limiter::check_address`]): one cheap bucket per client address for
//!   every public request, checked before routing, body reads, auth or parsing, so that
//!   unauthenticated, failing or malformed floods are refused before they cost anything.
//! - **Quota**: the skill's own quota when configured, else the key's quota, else the default.
//!   Each (dealer, client, skill) has its own bucket.
//! - **Per dealer** (`rate_limit.per_dealer`, always set for `lead.submit`): one bucket per
//!   (dealer, skill) shared by every client, so that many keys or addresses together cannot push
//!   more leads into one dealer's CRM than it expects. Charged ([`Limiter::check_dealer`]) only
//!   for calls that passed the client's own quota and the request schema: invalid calls must not
//!   drain a bucket every buyer shares.
//! - **Memory** (`governor`, keyed GCRA): keys whose bucket is full again carry no information
//!   and are swept, so memory stays bounded however many distinct clients appear; past
//!   [`MAX_KEYS`] a sweep runs inline.
//! - **Redis**: one atomic GCRA script per decision, shared by every replica; when Redis fails,
//!   `on_backend_error` decides: `local` falls back to this replica's memory limits, `deny`
//!   refuses. The backend logs the outage once when it starts (warn) and once when it ends
//!   (info) and counts each fallback (`aap_gateway_redis_fallbacks_total`); here each failure
//!   is a debug line (at most once per [`BACKEND_WARN_EVERY`]) and [`Limiter::backend_errors`]
//!   counts it.
//! - **Overload**: [`Limiter::admit`] sheds calls beyond `limits.max_concurrency` with the same
//!   `RATE_LIMITED` and a short retry hint, instead of queueing without bound; and
//!   [`Limiter::body_bytes`] bounds the bytes all bodies being received hold together.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota as GovernorQuota, RateLimiter};
use http::HeaderMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::AapError;
use crate::protocol::Skill;
use crate::redis_backend::RedisBackend;
use crate::settings::{ClientIpHeader, OnBackendError, Quota, RateLimitSettings};

/// Distinct keys held in memory before a sweep runs inline (besides the periodic one).
pub const MAX_KEYS: usize = 1_000_000;

/// A backend failure is logged (at debug) at most this often.
pub const BACKEND_WARN_EVERY: Duration = Duration::from_secs(10);

/// The retry hint when the gateway sheds load (over `limits.max_concurrency`).
pub const OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Who is calling, for limits and logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    /// An authenticated API key, by its id.
    Key(Arc<str>),
    /// An anonymous caller, by address.
    Ip(IpAddr),
}

impl Client {
    /// The authenticated API key's id, if the caller presented one.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Client::Key(id) => Some(id),
            Client::Ip(_) => None,
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Key(id) => write!(f, "key:{id}"),
            Client::Ip(ip) => write!(f, "ip:{ip}"),
        }
    }
}

/// The client's address: the peer, or — when the peer is a trusted proxy — the right-most
/// address in `header` that is not itself a trusted proxy. Other forwarding headers are
/// ignored: the proxy writes one, and a client could write any of the others.
pub fn client_ip(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[ipnet::IpNet],
    header: ClientIpHeader,
) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    // One entry per hop, `None` where the hop's address cannot be read (`for=unknown`, an
    // obfuscated `_id`, garbage).
    let mut hops: Vec<Option<IpAddr>> = Vec::new();
    let mut values = headers
        .get_all(header.name())
        .iter()
        .filter_map(|v| v.to_str().ok());
    match header {
        ClientIpHeader::Forwarded => {
            for text in values {
                for element in text.split(',') {
                    let node = element.split(';').find_map(|pair| {
                        let (k, v) = pair.trim().split_once('=')?;
                        k.trim().eq_ignore_ascii_case("for").then_some(v)
                    });
                    hops.push(node.and_then(parse_node));
                }
            }
        }
        ClientIpHeader::XForwardedFor => {
            for text in values {
                hops.extend(text.split(',').map(parse_node));
            }
        }
        // Set (not appended) by the proxy: the last one is the proxy's.
        ClientIpHeader::XRealIp => hops.extend(values.next_back().map(parse_node)),
    }
    // Walk back from the proxy nearest to us; the first untrusted hop is the client. A hop a
    // trusted proxy wrote but that cannot be read ends the walk at that proxy: skipping it would
    // take the next entry to the left — written by whoever sent the request — as the client.
    let mut proxy = peer;
    for hop in hops.into_iter().rev() {
        match hop.map(|ip| ip.to_canonical()) {
            None => return proxy,
            Some(ip) if is_trusted(&ip) => proxy = ip,
            Some(ip) => return ip,
        }
    }
    peer
}

/// The address a client is counted by: IPv4 as is, IPv6 by its /64 (the smallest block a
/// host is given; counting single addresses would hand each host 2^64 buckets).
pub fn bucket_ip(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// An address from `Forwarded: for=` or `X-Forwarded-For`: `1.2.3.4`, `"[2001:db8::1]:443"`,
/// `1.2.3.4:5678`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    text.rsplit_once(':')?.0.parse().ok()
}

/// A bucket's key: (dealer index, skill, client).
type Key = (u16, Skill, Client);

/// One keyed GCRA limiter per quota.
type Keyed<C> =
    RateLimiter<Key, DefaultKeyedStateStore<Key>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The per-address limiter, keyed by [`bucket_ip`].
type PerAddress<C> =
    RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A per-dealer limiter of one skill, keyed by dealer index (a handful of buckets: no sweep).
type PerDealer<C> =
    RateLimiter<u16, DefaultKeyedStateStore<u16>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The limits of one configuration.
pub struct Limiter<C: Clock + Clone = DefaultClock> {
    clock: C,
    /// `rate_limit.enabled`: when off, `check` admits every call.
    enabled: bool,
    default: Keyed<C>,
    default_quota: Quota,
    skills: HashMap<Skill, (Keyed<C>, Quota)>,
    /// Per-key quotas (`auth.keys[].quota`), by key id.
    keys: HashMap<Arc<str>, (Keyed<C>, Quota)>,
    /// `rate_limit.per_ip`, for every public request (memory only: it must cost nothing).
    per_address: PerAddress<C>,
    /// `rate_limit.per_dealer`: all clients of a dealer together, per skill.
    per_dealer: HashMap<Skill, (PerDealer<C>, Quota)>,
    redis: Option<RedisBackend>,
    on_backend_error: OnBackendError,
    backend_errors: AtomicU64,
    last_warning: Mutex<Option<Instant>>,
    slots: Arc<Semaphore>,
    /// Bytes that partly received request bodies may hold together (one permit a byte).
    bodies: Arc<Semaphore>,
    max_keys: usize,
    /// Buckets at which the next inline sweep runs: `max_keys`, or twice what the last sweep
    /// kept, so clients that are all live cannot make every call sweep.
    sweep_at: std::sync::atomic::AtomicUsize,
}

impl<C: Clock + Clone> std::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("default", &self.default_quota)
            .field("skills", &self.skills.len())
            .field("redis", &self.redis.is_some())
            .finish_non_exhaustive()
    }
}

/// A slot of `limits.max_concurrency`, held while a call runs.
pub type Slot = OwnedSemaphorePermit;

fn governor_quota(q: Quota) -> GovernorQuota {
    let burst = NonZeroU32::new(q.burst).unwrap_or(NonZeroU32::MIN);
    GovernorQuota::with_period(q.emission_interval().max(Duration::from_nanos(1))).map_or_else(
        || GovernorQuota::per_second(burst),
        |g| g.allow_burst(burst),
    )
}

impl Limiter<DefaultClock> {
    /// The limiter for `settings`, on the real clock.
    pub fn new(
        settings: &RateLimitSettings,
        key_quotas: &[(Arc<str>, Quota)],
        redis: Option<RedisBackend>,
        max_concurrency: usize,
    ) -> Limiter<DefaultClock> {
        Limiter::with_clock(
            settings,
            key_quotas,
            redis,
            max_concurrency,
            DefaultClock::default(),
        )
    }
}

impl Limiter<FakeRelativeClock> {
    /// A limiter on a clock the caller advances (tests).
    pub fn with_fake_clock(
        settings: &RateLimitSettings,
        key_quotas: &[(Arc<str>, Quota)],
        clock: FakeRelativeClock,
    ) -> Limiter<FakeRelativeClock> {
        Limiter::with_clock(settings, key_quotas, None, usize::MAX >> 4, clock)
    }
}

impl<C: Clock + Clone> Limiter<C> {
    fn with_clock(
        settings: &RateLimitSettings,
        key_quotas: &[(Arc<str>, Quota)],
        redis: Option<RedisBackend>,
        max_concurrency: usize,
        clock: C,
    ) -> Limiter<C> {
        let keyed = |q: Quota| RateLimiter::dashmap_with_clock(governor_quota(q), clock.clone());
        Limiter {
            enabled: settings.enabled,
            default: keyed(settings.default),
            default_quota: settings.default,
            skills: settings
                .skills
                .iter()
                .map(|(s, q)| (*s, (keyed(*q), *q)))
                .collect(),
            keys: key_quotas
                .iter()
                .map(|(id, q)| (Arc::clone(id), (keyed(*q), *q)))
                .collect(),
            per_address: RateLimiter::dashmap_with_clock(
                governor_quota(settings.per_ip),
                clock.clone(),
            ),
            per_dealer: settings
                .per_dealer
                .iter()
                .map(|(s, q)| {
                    let limiter =
                        RateLimiter::dashmap_with_clock(governor_quota(*q), clock.clone());
                    (*s, (limiter, *q))
                })
                .collect(),
            redis,
            on_backend_error: settings.on_backend_error,
            backend_errors: AtomicU64::new(0),
            last_warning: Mutex::new(None),
            slots: Arc::new(Semaphore::new(max_concurrency.max(1))),
            bodies: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            max_keys: MAX_KEYS,
            sweep_at: std::sync::atomic::AtomicUsize::new(MAX_KEYS),
            clock,
        }
    }

    /// Caps the keys held in memory (tests).
    pub fn set_max_keys(&mut self, max_keys: usize) {
        self.max_keys = max_keys.max(1);
        self.sweep_at.store(self.max_keys, Ordering::Relaxed);
    }

    /// Bounds the bytes all request bodies being received may hold together (see
    /// [`Limiter::body_bytes`]); without it, only each body's own limit holds.
    #[must_use]
    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        self.bodies = Arc::new(Semaphore::new(bytes.clamp(1, Semaphore::MAX_PERMITS)));
        self
    }

    /// Room for `bytes` more of a body being received, held until the returned permit (merged
    /// into `held`) is dropped; `None` when the budget is spent. Many slow bodies from a few
    /// addresses would otherwise add up to the pod's memory limit, and an OOM kill loses the
    /// deliveries in flight: past the budget a body is refused at once instead.
    pub fn body_bytes(&self, held: &mut Option<OwnedSemaphorePermit>, bytes: usize) -> bool {
        if bytes == 0 {
            return self.bodies.available_permits() > 0;
        }
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        match Arc::clone(&self.bodies).try_acquire_many_owned(n) {
            Ok(permit) => {
                match held {
                    Some(h) => h.merge(permit),
                    None => *held = Some(permit),
                }
                true
            }
            Err(_) => false,
        }
    }

    /// A slot among `limits.max_concurrency`, or `RATE_LIMITED` (shed) when all are taken.
    pub fn admit(&self) -> Result<Slot, AapError> {
        Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| AapError::Overloaded {
                retry_after: OVERLOAD_RETRY_AFTER,
            })
    }

    /// Slots of `limits.max_concurrency` taken now (for the in-flight gauge).
    pub fn in_flight(&self, max_concurrency: usize) -> usize {
        max_concurrency
            .max(1)
            .saturating_sub(self.slots.available_permits())
    }

    /// Counts one public request from `ip` (a client address, see [`bucket_ip`]) against
    /// `rate_limit.per_ip`; `RATE_LIMITED` with the time to wait when the address floods.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), AapError> {
        if !self.enabled {
            return Ok(());
        }
        let limiter = &self.per_address;
        if limiter.len() >= self.max_keys {
            limiter.retain_recent();
        }
        limiter
            .check_key(&bucket_ip(ip))
            .map_err(|not_until| AapError::RateLimited {
                retry_after: not_until.wait_time_from(self.clock.now()),
            })
    }

    /// Counts one call of `client` to `skill` at dealer number `dealer` against the client's
    /// quota; `RATE_LIMITED` with the time until the next call would be admitted when it is
    /// spent. Checked before the request schema, so a client's malformed calls spend its own
    /// quota.
    pub async fn check(
        &self,
        dealer: u16,
        dealer_id: &str,
        skill: Skill,
        client: &Client,
    ) -> Result<(), AapError> {
        if !self.enabled {
            return Ok(());
        }
        let (limiter, quota) = self.pick(skill, client);
        // Stored as {prefix}rl:{key}; named only when there is a shared store to ask.
        let shared = self.redis.is_some()
            && self
                .shared(&format!("{dealer_id}:{}:{client}", skill.id()), quota)
                .await?;
        if !shared {
            self.check_local(limiter, (dealer, skill, client.clone()))?;
        }
        Ok(())
    }

    /// Counts one call to `skill` against the dealer's quota for all clients together, when it
    /// has one (`rate_limit.per_dealer`). Checked only once the call passed the client's own
    /// quota and the request schema: a bucket every client shares must not be drained by calls
    /// that would be refused anyway, or two clients sending invalid leads at their own quota
    /// would starve every other buyer of the dealer's lead intake.
    pub async fn check_dealer(
        &self,
        dealer: u16,
        dealer_id: &str,
        skill: Skill,
    ) -> Result<(), AapError> {
        if !self.enabled {
            return Ok(());
        }
        if let Some((limiter, quota)) = self.per_dealer.get(&skill) {
            // `all` names no client (those are `key:…` and `ip:…`).
            let shared = self.redis.is_some()
                && self
                    .shared(&format!("{dealer_id}:{}:all", skill.id()), *quota)
                    .await?;
            if !shared {
                limiter
                    .check_key(&dealer)
                    .map_err(|not_until| AapError::RateLimited {
                        retry_after: not_until.wait_time_from(self.clock.now()),
                    })?;
            }
        }
        Ok(())
    }

    /// The shared (Redis) decision for `key`: `Ok(true)` admitted there, `Ok(false)` when the
    /// local limits decide (no Redis, or it failed under `on_backend_error: local`).
    async fn shared(&self, key: &str, quota: Quota) -> Result<bool, AapError> {
        let Some(redis) = &self.redis else {
            return Ok(false);
        };
        match redis
            .gcra(key, quota.emission_interval(), quota.burst)
            .await
        {
            Ok(None) => Ok(true),
            Ok(Some(retry_after)) => Err(AapError::RateLimited { retry_after }),
            Err(e) => {
                self.backend_failed(&e.to_string());
                match self.on_backend_error {
                    OnBackendError::Deny => Err(AapError::RateLimited {
                        retry_after: OVERLOAD_RETRY_AFTER,
                    }),
                    OnBackendError::Local => Ok(false),
                }
            }
        }
    }

    fn pick(&self, skill: Skill, client: &Client) -> (&Keyed<C>, Quota) {
        if let Some((l, q)) = self.skills.get(&skill) {
            return (l, *q);
        }
        if let Client::Key(id) = client
            && let Some((l, q)) = self.keys.get(id)
        {
            return (l, *q);
        }
        (&self.default, self.default_quota)
    }

    fn check_local(&self, limiter: &Keyed<C>, key: Key) -> Result<(), AapError> {
        if limiter.len() >= self.sweep_at.load(Ordering::Relaxed) {
            limiter.retain_recent();
            let kept = limiter.len();
            self.sweep_at
                .store(self.max_keys.max(kept.saturating_mul(2)), Ordering::Relaxed);
        }
        limiter
            .check_key(&key)
            .map_err(|not_until| AapError::RateLimited {
                retry_after: not_until.wait_time_from(self.clock.now()),
            })
    }

    /// Forgets buckets that are full again (they hold no information); run periodically.
    pub fn sweep(&self) {
        for limiter in std::iter::once(&self.default)
            .chain(self.skills.values().map(|(l, _)| l))
            .chain(self.keys.values().map(|(l, _)| l))
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        self.per_address.retain_recent();
        self.per_address.shrink_to_fit();
        for (limiter, _) in self.per_dealer.values() {
            limiter.retain_recent();
        }
    }

    /// Buckets held in memory.
    pub fn len(&self) -> usize {
        std::iter::once(&self.default)
            .chain(self.skills.values().map(|(l, _)| l))
            .chain(self.keys.values().map(|(l, _)| l))
            .map(RateLimiter::len)
            .sum::<usize>()
            + self.per_address.len()
            + self
                .per_dealer
                .values()
                .map(|(l, _)| l.len())
                .sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Backend (Redis) failures so far.
    pub fn backend_errors(&self) -> u64 {
        self.backend_errors.load(Ordering::Relaxed)
    }

    fn backend_failed(&self, error: &str) {
        self.backend_errors.fetch_add(1, Ordering::Relaxed);
        let mut last = self
            .last_warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= BACKEND_WARN_EVERY) {
            *last = Some(now);
            tracing::debug!(
                error,
                fallback = match self.on_backend_error {
                    OnBackendError::Local => "local limits",
                    OnBackendError::Deny => "deny",
                },
                errors = self.backend_errors(),
                "rate-limit backend unavailable"
            );
        }
    }
}

#[cfg(test)]
mod tests;
