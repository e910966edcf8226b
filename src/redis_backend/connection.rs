//! [`RedisBackend`] itself: the URL checked, one lazy auto-reconnecting connection, every exchange
//! under the timeout, and outages logged and counted when they start and end.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, RedisError, RedisResult, Script};

use crate::telemetry::metrics::Metrics;

use super::scripts::{
    EPOCH_LUA, FINISH_LUA, GCRA_LUA, RELEASE_LUA, RENEW_LUA, RESERVE_LUA, SEED_LUA,
};
use super::types::BackendError;

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
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
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
    pub(super) gcra: Script,
    pub(super) reserve: Script,
    pub(super) renew: Script,
    pub(super) finish: Script,
    pub(super) release: Script,
    pub(super) epoch: Script,
    pub(super) seed: Script,
}

/// What an outage of one backend means, for its logs and metrics.
struct Watch {
    /// `rate_limit` or `idempotency` (the metric label).
    store: &'static str,
    /// What callers do meanwhile (`on_backend_error`), for the log.
    fallback: &'static str,
    metrics: Arc<Metrics>,
}

impl RedisBackend {
    /// Validates the URL ([`redis_client`](crate::settings::redis_client)) and builds the client.
    /// Connects lazily on first use and reconnects after failures: no connection is attempted
    /// here, so `check` and startup never wait for Redis (and no runtime is needed yet).
    pub fn new(url: &str, timeout: Duration, prefix: &str) -> Result<RedisBackend, String> {
        if timeout.is_zero() {
            return Err("redis timeout must be greater than zero".to_owned());
        }
        let client = crate::settings::redis_client(url)?;
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

    pub(super) fn key(&self, kind: &str, key: &str) -> String {
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
    pub(super) async fn bounded<T, F, Fut>(&self, exchange: F) -> Result<T, BackendError>
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

/// A TTL in whole milliseconds, at least 1 (`PEXPIRE 0` would delete the key at once).
pub(super) fn millis(ttl: Duration) -> u64 {
    clamp_units(ttl.as_millis())
}

pub(super) fn clamp_units(units: u128) -> u64 {
    u64::try_from(units)
        .unwrap_or(MAX_UNITS)
        .clamp(1, MAX_UNITS)
}

/// The tests' log capture: one global subscriber per test binary, lines routed to the
/// capturing thread (shared with the integration tests).
#[cfg(test)]
#[allow(unreachable_pub, dead_code)]
#[path = "../../tests/common/logs.rs"]
mod test_logs;

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

    /// A backend at a port of 127.0.0.1 that was free a moment ago (nothing listens there).
    fn nothing_listens() -> RedisBackend {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        RedisBackend::new(&format!("redis://127.0.0.1:{port}"), T, "p:").unwrap()
    }

    #[tokio::test]
    async fn calls_fail_fast_when_nothing_listens() {
        let backend = nothing_listens();
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

    fn count(text: &str, needle: &str) -> usize {
        text.matches(needle).count()
    }

    #[test]
    fn an_outage_is_logged_when_it_starts_and_ends_and_every_fallback_counted() {
        let backend = nothing_listens();
        let metrics = Metrics::new();
        backend.watch("rate_limit", "local limits", &metrics);
        let (logs, _capture) = super::test_logs::capture();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
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
        assert_eq!(count(&logs.text(), "falling back"), 1);
        assert_eq!(count(&logs.text(), "local limits"), 1);
        // Redis answers again (as a successful call notes it).
        backend.note(None);
        backend.note(None);
        let text = logs.text();
        assert_eq!(count(&text, "redis answers again"), 1, "{text}");
        assert_eq!(count(&text, "WARN"), 1, "{text}");
        let scrape = metrics.encode();
        assert!(
            scrape.contains("aap_gateway_redis_degraded{store=\"rate_limit\"} 0"),
            "{scrape}"
        );
        assert!(!scrape.contains("s3cr3t"));
    }
}
