//! Shared state on Redis, for gateways running as several replicas behind a load balancer.
//!
//! A per-replica rate limit lets a buyer through N times per replica, and a per-replica
//! idempotency store lets a retried `lead.submit` that lands on another replica create a second
//! lead. This module keeps both in one Redis so every replica sees the same state:
//!
//! - **Rate limits** use GCRA (the generic cell rate algorithm): one number per key, the
//!   theoretical arrival time (TAT) of the next request. The clock is the Redis server's `TIME`,
//!   so replicas with skewed clocks still agree.
//! - **Idempotency** mirrors [`crate::idempotency`]: a claim under a lease (renewed by its
//!   replica, so a dead replica's claim runs out; one that ran out mid-delivery is an unknown
//!   outcome), the stored reply for replay or the held reference, and the fingerprint to detect
//!   a conflicting payload. An epoch key tells replicas that Redis lost its data. Single flight
//!   across replicas is the caller's job: [`Reservation::InFlight`] says someone else is running
//!   the call.
//!
//! Every decision is one Lua script, so it is atomic and costs one round trip (`EVALSHA`, falling
//! back to loading the script once after a Redis restart). Every call is bounded by `timeout`;
//! failures are reported, never retried here: the caller decides whether to fail open or closed.
//! Nothing connects before the first call, so startup and `check` never wait for Redis.
//!
//! ## Key layout
//!
//! ```text
//! {prefix}rl:{key}     string  TAT in µs since the Unix epoch (server clock);
//!                              expires when the bucket has drained (PX = TAT − now)
//! {prefix}idem:{key}   hash    state=inflight, fp, token, lease (ms, server clock),
//!                              phase=claimed|delivering, ref            expires after the reply TTL
//!                              state=done, fp, reply                    expires after the reply TTL
//!                              state=held, fp, ref                      expires after the reply TTL
//! {prefix}idem-epoch   string  a random id; gone = Redis lost its data  never expires
//! {prefix}idem-recovering  string  no free key handed out while it lives  expires after a lease
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, RedisError, RedisResult, Script, Value};

use crate::telemetry::metrics::Metrics;

/// Consecutive timeouts after which the connection is dropped and a fresh one made. A
/// connection whose peer vanished without a reset (a failover, a NAT that forgot us) never
/// reports an error: its commands just go unanswered.
const FRESH_CONNECTION_AFTER_TIMEOUTS: u32 = 3;

/// Longest expiry or interval sent to Redis (about 34 years), so conversions never overflow.
const MAX_UNITS: u64 = 1 << 40;

/// A shared-state backend on Redis: one pooled, auto-reconnecting connection
/// ([`ConnectionManager`]), every command bounded by `timeout`, keys namespaced by `prefix`
/// (e.g. `"aapgw:"`).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

/// Why a backend call failed. For the gateway both mean the same: no shared decision now.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Redis refused, dropped the connection, or answered with an error.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// No answer within the backend's timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// What [`RedisBackend::reserve`] found for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was free and is now held: run the call, renew the lease meanwhile, then record
    /// the outcome (or `release`) with `token`. `orphan`: the reference of a delivery whose
    /// replica's lease ran out before it recorded an outcome (`on_ambiguous: resend`).
    Reserved {
        token: String,
        orphan: Option<String>,
    },
    /// Another call with this key is running (maybe on another replica); its lease runs for
    /// `lease_left` unless renewed.
    InFlight {
        fingerprint: String,
        lease_left: Duration,
    },
    /// A call with this key completed: `reply` is its stored reply.
    Done { fingerprint: String, reply: String },
    /// The key's delivery had an unknown outcome and is held for reconciliation. `orphan`: it
    /// was held just now, its replica's lease having run out mid-delivery.
    Held {
        fingerprint: String,
        reference: String,
        orphan: bool,
    },
    /// Redis lost its data: replicas are putting back what they know for `left` more; no key is
    /// handed out meanwhile.
    Recovering { left: Duration },
    /// Redis's epoch is not the caller's (Redis lost its data, or the caller is new): adopt it,
    /// put back what this replica knows, and ask again.
    Epoch(String),
}

/// The terms of a claim (see [`RedisBackend::reserve`]).
#[derive(Debug, Clone, Copy)]
pub struct Claiming<'a> {
    pub lease: Duration,
    /// How long the entry lives (the reply TTL).
    pub ttl: Duration,
    /// The epoch the caller knows (`""`: none yet).
    pub epoch: &'a str,
    /// How long free keys stay refused after Redis was found empty by a caller that knew it.
    pub recovery: Duration,
    /// `on_ambiguous: hold`: an orphaned delivery is held, not taken over.
    pub hold_orphans: bool,
}

/// A claim this replica holds, as its lease renewal writes it.
#[derive(Debug, Clone, Copy)]
pub struct HeldClaim<'a> {
    pub token: &'a str,
    pub fingerprint: &'a str,
    pub reference: &'a str,
    /// The lead may be on its way: an orphaned claim is then an unknown outcome.
    pub delivering: bool,
}

/// What a lease renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The claim had vanished (Redis restarted empty) and was put back.
    PutBack,
    /// Another claim or an outcome holds the key now.
    Lost,
}

/// An outcome to put back into a Redis that lost it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seed {
    Done {
        fingerprint: String,
        reply: String,
    },
    Held {
        fingerprint: String,
        reference: String,
    },
}

struct Inner {
    client: Client,
    /// Where Redis is, for `Debug`: never the password.
    server: String,
    timeout: Duration,
    prefix: String,
    /// Made on first use (it needs a running Tokio runtime); emptied to force a fresh one.
    connection: Mutex<Option<ConnectionManager>>,
    timeouts_in_a_row: AtomicU32,
    /// Whether the last call failed: an outage is logged when it starts and when it ends.
    degraded: AtomicBool,
    /// Who uses this backend, once [`RedisBackend::watch`] said.
    watch: OnceLock<Watch>,
    gcra: Script,
    reserve: Script,
    renew: Script,
    finish: Script,
    release: Script,
    epoch: Script,
    seed: Script,
}

/// What an outage of one backend means, for its logs and metrics.
struct Watch {
    /// `rate_limit` or `idempotency` (the metric label).
    store: &'static str,
    /// What callers do meanwhile (`on_backend_error`), for the log.
    fallback: &'static str,
    metrics: Arc<Metrics>,
}

/// GCRA. KEYS[1]: the limiter key. ARGV[1]: emission interval (µs), ARGV[2]: burst.
/// Returns {1, 0} when admitted (the new TAT is stored), {0, retry_after_µs} when refused
/// (nothing is written).
const GCRA_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * tonumber(ARGV[2])
if now < allow_at then
  return {0, allow_at - now}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return {1, 0}
";

/// Idempotency claim. KEYS[1]: the entry, KEYS[2]: the epoch, KEYS[3]: the recovery marker.
/// ARGV[1]: fingerprint, ARGV[2]: the new token, ARGV[3]: lease (ms), ARGV[4]: entry TTL (ms),
/// ARGV[5]: the epoch the caller knows ('' if none), ARGV[6]: a new epoch in case there is none,
/// ARGV[7]: the recovery time (ms), ARGV[8]: 'hold' or 'resend' for an orphaned delivery.
///
/// An absent epoch means Redis lost its data (or never had any): a caller that knew an epoch
/// starts the recovery time, during which free keys are not handed out (the replicas put back
/// what they know first). Returns {'epoch', e} when the caller's epoch is not Redis's,
/// {'done', fp, reply}, {'held', fp, ref[, 'orphan']}, {'inflight', fp, lease_left_ms},
/// {'recovering', ms}, {'reserved'} or {'reserved', 'orphan', ref} (taken over from a replica
/// whose lease ran out while it delivered).
const RESERVE_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[6]
  redis.call('SET', KEYS[2], epoch)
  if ARGV[5] ~= '' then redis.call('SET', KEYS[3], '1', 'PX', ARGV[7]) end
end
if epoch ~= ARGV[5] then return {'epoch', epoch} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local e = redis.call('HMGET', KEYS[1], 'state', 'fp', 'reply', 'lease', 'phase', 'ref')
if e[1] == 'done' then return {'done', e[2] or '', e[3] or ''} end
if e[1] == 'held' then return {'held', e[2] or '', e[6] or ''} end
local orphan = false
if e[1] == 'inflight' then
  local lease = tonumber(e[4]) or 0
  if lease > now or e[2] ~= ARGV[1] then
    return {'inflight', e[2] or '', string.format('%d', math.max(lease - now, 0))}
  end
  if e[5] == 'delivering' then
    if ARGV[8] == 'hold' then
      redis.call('HSET', KEYS[1], 'state', 'held')
      redis.call('HDEL', KEYS[1], 'token', 'lease', 'phase')
      redis.call('PEXPIRE', KEYS[1], ARGV[4])
      return {'held', e[2] or '', e[6] or '', 'orphan'}
    end
    orphan = true
  end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  return {'recovering', string.format('%d', math.max(redis.call('PTTL', KEYS[3]), 1))}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[1], 'token', ARGV[2],
  'lease', string.format('%d', now + tonumber(ARGV[3])), 'phase', 'claimed')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if orphan then return {'reserved', 'orphan', e[6] or ''} end
return {'reserved'}
";

/// Lease renewal. KEYS[1]: the entry. ARGV[1]: token, ARGV[2]: lease (ms), ARGV[3]: fingerprint,
/// ARGV[4]: lead reference, ARGV[5]: phase ('claimed' or 'delivering'), ARGV[6]: entry TTL (ms).
/// An entry that vanished (Redis restarted empty) is put back. Returns 1 when renewed, 2 when
/// put back, 0 when another claim or an outcome holds the key now.
const RENEW_LUA: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local e = redis.call('HMGET', KEYS[1], 'state', 'token')
if e[1] and (e[1] ~= 'inflight' or e[2] ~= ARGV[1]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'state', 'inflight', 'fp', ARGV[3], 'token', ARGV[1],
  'lease', string.format('%d', now + tonumber(ARGV[2])), 'phase', ARGV[5], 'ref', ARGV[4])
if not e[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return 2
end
return 1
";

/// KEYS[1]: the entry. ARGV[1]: token, ARGV[2]: state ('done' or 'held'), ARGV[3]: fingerprint,
/// ARGV[4]: the reply (done) or the lead reference (held), ARGV[5]: TTL (ms). Records the
/// outcome if `token` still holds the key, or the key vanished (Redis restarted empty).
/// Returns 1 when stored, 0 when another claim or an outcome holds the key now.
const FINISH_LUA: &str = r"
local e = redis.call('HMGET', KEYS[1], 'state', 'token')
if e[1] and (e[1] ~= 'inflight' or e[2] ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
local field = 'reply'
if ARGV[2] == 'held' then field = 'ref' end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'fp', ARGV[3], field, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
";

/// KEYS[1]: the entry. ARGV[1]: token. Deletes the entry if the token still holds it.
const RELEASE_LUA: &str = r"
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

/// KEYS[1]: the epoch, KEYS[2]: the recovery marker. ARGV as RESERVE_LUA's 5 to 7. Returns
/// Redis's epoch (made now if there was none).
const EPOCH_LUA: &str = r"
local epoch = redis.call('GET', KEYS[1])
if epoch then return epoch end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[1] ~= '' then redis.call('SET', KEYS[2], '1', 'PX', ARGV[3]) end
return ARGV[2]
";

/// Puts back outcomes a replica knows. KEYS: entries; ARGV: per key four values (state, fp,
/// reply or reference, TTL ms). A key Redis holds is left alone. Returns how many were written.
const SEED_LUA: &str = r"
local n = 0
for i, key in ipairs(KEYS) do
  local a = (i - 1) * 4
  if redis.call('EXISTS', key) == 0 then
    local field = 'reply'
    if ARGV[a + 1] == 'held' then field = 'ref' end
    redis.call('HSET', key, 'state', ARGV[a + 1], 'fp', ARGV[a + 2], field, ARGV[a + 3])
    redis.call('PEXPIRE', key, ARGV[a + 4])
    n = n + 1
  end
end
return n
";

impl RedisBackend {
    /// Validates the URL ([`parse_url`]) and builds the client.
    /// Connects lazily on first use and reconnects after failures: no connection is attempted
    /// here, so `check` and startup never wait for Redis (and no runtime is needed yet).
    pub fn new(url: &str, timeout: Duration, prefix: &str) -> Result<RedisBackend, String> {
        if timeout.is_zero() {
            return Err("redis timeout must be greater than zero".to_owned());
        }
        let client = parse_url(url)?;
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        let credentials = if settings.username().is_some() || settings.password().is_some() {
            "***@"
        } else {
            ""
        };
        let scheme = match info.addr() {
            ConnectionAddr::TcpTls { .. } => "rediss",
            _ => "redis",
        };
        let server = format!("{scheme}://{credentials}{}/{}", info.addr(), settings.db());
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                client,
                server,
                timeout,
                prefix: prefix.to_owned(),
                connection: Mutex::new(None),
                timeouts_in_a_row: AtomicU32::new(0),
                degraded: AtomicBool::new(false),
                watch: OnceLock::new(),
                gcra: Script::new(GCRA_LUA),
                reserve: Script::new(RESERVE_LUA),
                renew: Script::new(RENEW_LUA),
                finish: Script::new(FINISH_LUA),
                release: Script::new(RELEASE_LUA),
                epoch: Script::new(EPOCH_LUA),
                seed: Script::new(SEED_LUA),
            }),
        })
    }

    /// GCRA in one round trip, on the Redis server's clock. `emission_interval` = period / count
    /// (at least 1 µs); `burst` = how many requests may arrive at once (at least 1).
    /// `Ok(None)`: admitted and recorded. `Ok(Some(retry_after))`: refused, nothing recorded;
    /// one request would be admitted after `retry_after`. An idle key expires once drained.
    pub async fn gcra(
        &self,
        key: &str,
        emission_interval: Duration,
        burst: u32,
    ) -> Result<Option<Duration>, BackendError> {
        let interval = clamp_units(emission_interval.as_micros());
        let mut call = self.inner.gcra.key(self.key("rl:", key));
        call.arg(interval).arg(burst.max(1));
        let (admitted, retry_after_us): (i64, i64) = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        if admitted == 1 {
            Ok(None)
        } else {
            let micros = u64::try_from(retry_after_us).unwrap_or(0).max(1);
            Ok(Some(Duration::from_micros(micros)))
        }
    }

    /// Idempotency: claims `key` for a call with `fingerprint` (hex) under a `lease` (renewed
    /// with [`RedisBackend::renew`]; a replica that dies frees its keys when it runs out), or
    /// reports what holds it. See [`Claiming`] for the rest. One round trip.
    pub async fn reserve(
        &self,
        key: &str,
        fingerprint: &str,
        claiming: &Claiming<'_>,
    ) -> Result<Reservation, BackendError> {
        let token = uuid::Uuid::new_v4().to_string();
        let candidate = uuid::Uuid::new_v4().to_string();
        let mut call = self.inner.reserve.key(self.key("idem:", key));
        call.key(self.key("idem-", "epoch"))
            .key(self.key("idem-", "recovering"));
        call.arg(fingerprint)
            .arg(&token)
            .arg(millis(claiming.lease))
            .arg(millis(claiming.ttl))
            .arg(claiming.epoch)
            .arg(&candidate)
            .arg(millis(claiming.recovery))
            .arg(if claiming.hold_orphans {
                "hold"
            } else {
                "resend"
            });
        let reply: Value = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        parse_reservation(reply, token)
    }

    /// Renews the lease of the claim `token` holds on `key` (putting the claim back if Redis
    /// lost it), recording the lead's `reference` and whether its delivery has begun.
    pub async fn renew(
        &self,
        key: &str,
        claim: &HeldClaim<'_>,
        lease: Duration,
        ttl: Duration,
    ) -> Result<Renewal, BackendError> {
        let mut call = self.inner.renew.key(self.key("idem:", key));
        call.arg(claim.token)
            .arg(millis(lease))
            .arg(claim.fingerprint)
            .arg(claim.reference)
            .arg(if claim.delivering {
                "delivering"
            } else {
                "claimed"
            })
            .arg(millis(ttl));
        let renewed: i64 = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(match renewed {
            1 => Renewal::Renewed,
            2 => Renewal::PutBack,
            _ => Renewal::Lost,
        })
    }

    /// Stores `reply` (opaque text) with `fingerprint` for `ttl`, if `token` still holds the
    /// claim (or Redis lost it): `Ok(false)` when another claim or an outcome holds the key.
    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        fingerprint: &str,
        reply: &str,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.finish(key, token, "done", fingerprint, reply, ttl)
            .await
    }

    /// Holds `key` for reconciliation (its delivery's outcome is unknown) for `ttl`, on the
    /// same terms as [`RedisBackend::complete`].
    pub async fn hold(
        &self,
        key: &str,
        token: &str,
        fingerprint: &str,
        reference: &str,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        self.finish(key, token, "held", fingerprint, reference, ttl)
            .await
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        state: &str,
        fingerprint: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, BackendError> {
        let mut call = self.inner.finish.key(self.key("idem:", key));
        call.arg(token)
            .arg(state)
            .arg(fingerprint)
            .arg(value)
            .arg(millis(ttl));
        let stored: i64 = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(stored == 1)
    }

    /// Drops the reservation if `token` still holds it (the call failed: the key is free again).
    pub async fn release(&self, key: &str, token: &str) -> Result<(), BackendError> {
        let mut call = self.inner.release.key(self.key("idem:", key));
        call.arg(token);
        let _released: i64 = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(())
    }

    /// Redis's idempotency epoch: made now if Redis has none (it lost its data, or never had
    /// any), starting the `recovery` time when the caller knew another (`known` non-empty).
    pub async fn epoch(&self, known: &str, recovery: Duration) -> Result<String, BackendError> {
        let candidate = uuid::Uuid::new_v4().to_string();
        let mut call = self.inner.epoch.key(self.key("idem-", "epoch"));
        call.key(self.key("idem-", "recovering"));
        call.arg(known).arg(&candidate).arg(millis(recovery));
        self.bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await
    }

    /// Puts back outcomes Redis lost (keys it holds are left alone): `(key, outcome, ttl)`.
    /// Returns how many were written. One round trip per call: callers batch.
    pub async fn seed(&self, outcomes: &[(String, Seed, Duration)]) -> Result<u64, BackendError> {
        if outcomes.is_empty() {
            return Ok(0);
        }
        let mut call = self.inner.seed.prepare_invoke();
        for (key, seed, ttl) in outcomes {
            call.key(self.key("idem:", key));
            let (state, fingerprint, value) = match seed {
                Seed::Done { fingerprint, reply } => ("done", fingerprint, reply),
                Seed::Held {
                    fingerprint,
                    reference,
                } => ("held", fingerprint, reference),
            };
            call.arg(state)
                .arg(fingerprint)
                .arg(value)
                .arg(millis(*ttl));
        }
        let written: i64 = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(u64::try_from(written).unwrap_or(0))
    }

    /// `PING`, for readiness reports.
    pub async fn ping(&self) -> Result<(), BackendError> {
        let _pong: String = self
            .bounded(|mut conn| async move { redis::cmd("PING").query_async(&mut conn).await })
            .await?;
        Ok(())
    }

    fn key(&self, kind: &str, key: &str) -> String {
        format!("{}{kind}{key}", self.inner.prefix)
    }

    /// Names the backend's user: from now on every failed call counts as one fallback of
    /// `store` (`aap_gateway_redis_fallbacks_total`), and an outage is logged once when it
    /// starts (warn, saying `fallback`) and once when Redis answers again (info). Set once.
    pub fn watch(&self, store: &'static str, fallback: &'static str, metrics: &Arc<Metrics>) {
        let _ = self.inner.watch.set(Watch {
            store,
            fallback,
            metrics: Arc::clone(metrics),
        });
    }

    /// Runs one Redis exchange under the timeout and sorts its failure; notes outages.
    async fn bounded<T, F, Fut>(&self, exchange: F) -> Result<T, BackendError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let result = self.exchange(exchange).await;
        self.note(result.as_ref().err());
        result
    }

    /// Counts a failed call and logs the transitions between answering and failing.
    fn note(&self, error: Option<&BackendError>) {
        let inner = &*self.inner;
        let was_degraded = inner.degraded.swap(error.is_some(), Ordering::Relaxed);
        let watch = inner.watch.get();
        let store = watch.map_or("redis", |w| w.store);
        if let Some(w) = watch {
            if error.is_some() {
                w.metrics.redis_fallback(w.store);
            }
            if was_degraded != error.is_some() {
                w.metrics.redis_degraded(w.store, error.is_some());
            }
        }
        match error {
            Some(error) if !was_degraded => tracing::warn!(
                store,
                server = %inner.server,
                %error,
                fallback = watch.map_or("on_backend_error", |w| w.fallback),
                "redis unavailable: falling back until it answers again"
            ),
            None if was_degraded => tracing::info!(
                store,
                server = %inner.server,
                "redis answers again: shared state resumed"
            ),
            _ => {}
        }
    }

    async fn exchange<T, F, Fut>(&self, exchange: F) -> Result<T, BackendError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let conn = self.connection()?;
        let timeout = self.inner.timeout;
        match tokio::time::timeout(timeout, exchange(conn)).await {
            Ok(Ok(value)) => {
                self.inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
                Ok(value)
            }
            Ok(Err(error)) if error.is_timeout() => Err(self.timed_out()),
            Ok(Err(error)) => Err(unavailable(&error)),
            Err(_elapsed) => Err(self.timed_out()),
        }
    }

    /// The shared connection, made on first use or after [`Self::timed_out`] dropped it.
    fn connection(&self) -> Result<ConnectionManager, BackendError> {
        let mut slot = self.slot();
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        // Short reconnect back-off: a call waits on a reconnect only up to its timeout anyway,
        // and after an outage the first calls should find Redis again quickly.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.inner.timeout))
            .set_response_timeout(None)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
            .set_number_of_retries(3);
        let conn = ConnectionManager::new_lazy_with_config(self.inner.client.clone(), config)
            .map_err(|e| unavailable(&e))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn timed_out(&self) -> BackendError {
        let in_a_row = self.inner.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row >= FRESH_CONNECTION_AFTER_TIMEOUTS {
            self.inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
            *self.slot() = None;
        }
        BackendError::Timeout(self.inner.timeout)
    }

    fn slot(&self) -> MutexGuard<'_, Option<ConnectionManager>> {
        // Only ever replaced whole: a panic elsewhere cannot leave it half-written.
        self.inner
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.inner.server)
            .field("prefix", &self.inner.prefix)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// redis-rs errors name the failure (refused, reset, a server error), never the URL.
fn unavailable(error: &RedisError) -> BackendError {
    BackendError::Unavailable(error.to_string())
}

/// Decodes the reserve script's reply by hand: a generic conversion error would quote the
/// stored reply, which may hold a buyer's personal data, into the message.
fn parse_reservation(reply: Value, token: String) -> Result<Reservation, BackendError> {
    let malformed =
        || BackendError::Unavailable("malformed reply to the reserve script".to_owned());
    let Value::Array(items) = reply else {
        return Err(malformed());
    };
    let items: Vec<Option<String>> = items.into_iter().map(text).collect();
    let at = |i: usize| items.get(i).cloned().flatten();
    let ms = |i: usize| {
        at(i)
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_millis)
    };
    let reservation = match (at(0).as_deref(), items.len()) {
        (Some("reserved"), 1) => Reservation::Reserved {
            token,
            orphan: None,
        },
        (Some("reserved"), 3) => Reservation::Reserved {
            token,
            orphan: Some(at(2).ok_or_else(malformed)?),
        },
        (Some("inflight"), 3) => Reservation::InFlight {
            fingerprint: at(1).ok_or_else(malformed)?,
            lease_left: ms(2).ok_or_else(malformed)?,
        },
        (Some("done"), 3) => Reservation::Done {
            fingerprint: at(1).ok_or_else(malformed)?,
            reply: at(2).ok_or_else(malformed)?,
        },
        (Some("held"), 3 | 4) => Reservation::Held {
            fingerprint: at(1).ok_or_else(malformed)?,
            reference: at(2).ok_or_else(malformed)?,
            orphan: items.len() == 4,
        },
        (Some("recovering"), 2) => Reservation::Recovering {
            left: ms(1).ok_or_else(malformed)?,
        },
        (Some("epoch"), 2) => Reservation::Epoch(at(1).ok_or_else(malformed)?),
        _ => return Err(malformed()),
    };
    Ok(reservation)
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// Checks a Redis URL the way the settings loader and [`RedisBackend::new`] read it:
/// `redis://[[user]:password@]host[:port][/db]`, or `rediss://…` for TLS. Over TLS the server's
/// certificate and host name are always verified, against the system's trust store (or the
/// certificates `SSL_CERT_FILE` / `SSL_CERT_DIR` name instead); redis-rs' `#insecure` (no
/// verification) is refused. No connection is made. Messages never echo the URL, which may
/// hold a password.
pub fn parse_url(url: &str) -> Result<Client, String> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis" | "rediss") => {}
        Some(other) => {
            return Err(format!(
                "redis url scheme `{other}` is not supported, use redis:// or rediss:// (TLS)"
            ));
        }
        None => return Err("redis url must start with redis:// or rediss:// (TLS)".to_owned()),
    }
    // redis-rs' parse errors name the problem, never the URL.
    let client = Client::open(url).map_err(|e| format!("invalid redis url: {e}"))?;
    match client.get_connection_info().addr() {
        ConnectionAddr::TcpTls { insecure: true, .. } => Err(
            "rediss:// with #insecure (no certificate check) is not supported: trust the \
             server's CA instead (SSL_CERT_FILE or SSL_CERT_DIR)"
                .to_owned(),
        ),
        ConnectionAddr::TcpTls { .. } | ConnectionAddr::Tcp(..) => Ok(client),
        _ => Err("redis url must name a host (unix sockets are not supported)".to_owned()),
    }
}

/// A TTL in whole milliseconds, at least 1 (`PEXPIRE 0` would delete the key at once).
fn millis(ttl: Duration) -> u64 {
    clamp_units(ttl.as_millis())
}

fn clamp_units(units: u128) -> u64 {
    u64::try_from(units)
        .unwrap_or(MAX_UNITS)
        .clamp(1, MAX_UNITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(50);

    #[test]
    fn new_needs_neither_a_server_nor_a_runtime() {
        // Port 1 on localhost: nothing listens, and nothing is tried yet.
        let backend = RedisBackend::new("redis://127.0.0.1:1/3", T, "aapgw:").unwrap();
        assert_eq!(
            format!("{backend:?}"),
            r#"RedisBackend { server: "redis://127.0.0.1:1/3", prefix: "aapgw:", timeout: 50ms, .. }"#
        );
    }

    #[test]
    fn debug_hides_credentials() {
        let backend =
            RedisBackend::new("redis://gw:s3cr3t@cache.internal:6380/1", T, "p:").unwrap();
        let shown = format!("{backend:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("gw:"),
            "{shown}"
        );
        assert!(
            shown.contains("redis://***@cache.internal:6380/1"),
            "{shown}"
        );
    }

    #[test]
    fn tls_urls_are_accepted_and_shown_as_tls_without_credentials() {
        let backend = RedisBackend::new("rediss://:pw@cache:6380/2", T, "p:").unwrap();
        assert_eq!(
            format!("{backend:?}"),
            r#"RedisBackend { server: "rediss://***@cache:6380/2", prefix: "p:", timeout: 50ms, .. }"#
        );
    }

    #[test]
    fn unverified_tls_and_foreign_schemes_are_refused_clearly() {
        let insecure = RedisBackend::new("rediss://:pw@cache:6380/#insecure", T, "p:").unwrap_err();
        assert!(
            insecure.contains("#insecure") && !insecure.contains("pw"),
            "{insecure}"
        );
        let http = RedisBackend::new("http://cache:6379", T, "p:").unwrap_err();
        assert!(http.contains("`http`"), "{http}");
        assert!(RedisBackend::new("cache:6379", T, "p:").is_err());
        assert!(RedisBackend::new("redis+unix:///tmp/redis.sock", T, "p:").is_err());
        assert!(RedisBackend::new("REDIS://cache:6379", T, "p:").is_ok());
        assert!(RedisBackend::new("redis://cache:6379", Duration::ZERO, "p:").is_err());
    }

    #[test]
    fn bad_urls_are_refused_without_echoing_them() {
        let error = RedisBackend::new("redis://:s3cr3t@cache:6379/notadb", T, "p:").unwrap_err();
        assert!(!error.contains("s3cr3t"), "{error}");
    }

    #[test]
    fn durations_are_clamped_for_redis() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), MAX_UNITS);
    }

    #[test]
    fn reserve_replies_are_decoded_strictly() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let array = |items: &[&str]| Value::Array(items.iter().map(|s| bulk(s)).collect());
        let token = || "t".to_owned();
        let parse = |items: &[&str]| parse_reservation(array(items), token()).unwrap();
        assert_eq!(
            parse(&["reserved"]),
            Reservation::Reserved {
                token: token(),
                orphan: None
            }
        );
        assert_eq!(
            parse(&["reserved", "orphan", "aap-1"]),
            Reservation::Reserved {
                token: token(),
                orphan: Some("aap-1".to_owned())
            }
        );
        assert_eq!(
            parse(&["inflight", "ab", "1500"]),
            Reservation::InFlight {
                fingerprint: "ab".to_owned(),
                lease_left: Duration::from_millis(1500)
            }
        );
        assert_eq!(
            parse(&["done", "ab", "{}"]),
            Reservation::Done {
                fingerprint: "ab".to_owned(),
                reply: "{}".to_owned()
            }
        );
        assert_eq!(
            parse(&["held", "ab", "aap-1", "orphan"]),
            Reservation::Held {
                fingerprint: "ab".to_owned(),
                reference: "aap-1".to_owned(),
                orphan: true
            }
        );
        assert_eq!(
            parse(&["recovering", "900"]),
            Reservation::Recovering {
                left: Duration::from_millis(900)
            }
        );
        assert_eq!(parse(&["epoch", "e2"]), Reservation::Epoch("e2".to_owned()));
        let secret = array(&["weird", "ab", "jane@example.com"]);
        let error = parse_reservation(secret, token()).unwrap_err().to_string();
        assert!(!error.contains("jane"), "{error}");
        assert!(parse_reservation(array(&["inflight", "ab", "soon"]), token()).is_err());
    }

    #[tokio::test]
    async fn calls_fail_fast_when_nothing_listens() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let backend = RedisBackend::new(&format!("redis://127.0.0.1:{port}"), T, "p:").unwrap();
        let started = std::time::Instant::now();
        let error = backend.ping().await.unwrap_err();
        assert!(
            matches!(
                error,
                BackendError::Unavailable(_) | BackendError::Timeout(_)
            ),
            "{error}"
        );
        assert!(started.elapsed() < T * 4, "{:?}", started.elapsed());
    }

    /// A buffer the test's log lines go to.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn count(&self, needle: &str) -> usize {
            String::from_utf8_lossy(&self.0.lock().unwrap())
                .matches(needle)
                .count()
        }
    }

    #[test]
    fn an_outage_is_logged_when_it_starts_and_ends_and_every_fallback_counted() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let backend = RedisBackend::new(&format!("redis://127.0.0.1:{port}"), T, "p:").unwrap();
        let metrics = Metrics::new();
        backend.watch("rate_limit", "local limits", &metrics);
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tracing::subscriber::with_default(subscriber, || {
            runtime.block_on(async {
                for _ in 0..3 {
                    backend.ping().await.unwrap_err();
                }
            });
            let scrape = metrics.encode();
            assert!(
                scrape.contains("aap_gateway_redis_fallbacks_total{store=\"rate_limit\"} 3"),
                "{scrape}"
            );
            assert!(
                scrape.contains("aap_gateway_redis_degraded{store=\"rate_limit\"} 1"),
                "{scrape}"
            );
            assert_eq!(logs.count("falling back"), 1);
            assert_eq!(logs.count("local limits"), 1);
            // Redis answers again (as a successful call notes it).
            backend.note(None);
            backend.note(None);
        });
        assert_eq!(logs.count("redis answers again"), 1);
        assert_eq!(logs.count("WARN"), 1);
        let scrape = metrics.encode();
        assert!(
            scrape.contains("aap_gateway_redis_degraded{store=\"rate_limit\"} 0"),
            "{scrape}"
        );
        assert!(!scrape.contains("s3cr3t"));
    }
}
