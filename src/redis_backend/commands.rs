//! The calls: GCRA for rate limits; claim, renewal, outcome, release, epoch and seed for
//! idempotency; `PING` for readiness.

use std::time::Duration;

use redis::Value;

use super::connection::{RedisBackend, clamp_units, millis};
use super::types::{
    BackendError, Claiming, HeldClaim, Renewal, Reservation, Seed, parse_reservation,
};

impl RedisBackend {
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
            .key(self.key("idem-", "recovering"))
            .key(self.key("idem-", "epoch-young"))
            .key(self.key("idem-", "run"));
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
    /// any), starting the `recovery` time when the caller knew another (`known` non-empty), and
    /// made anew, starting it too, when the Redis process restarted with its data (it may be
    /// older than what the replicas saw: a snapshot, a failover). The flag: whether Redis let
    /// the script read its `run_id` (`false`: such a restart goes unnoticed).
    pub async fn epoch(
        &self,
        known: &str,
        recovery: Duration,
    ) -> Result<(String, bool), BackendError> {
        let candidate = uuid::Uuid::new_v4().to_string();
        let mut call = self.inner.epoch.key(self.key("idem-", "epoch"));
        call.key(self.key("idem-", "recovering"))
            .key(self.key("idem-", "epoch-young"))
            .key(self.key("idem-", "run"));
        call.arg(known).arg(&candidate).arg(millis(recovery));
        let (epoch, run): (String, String) = self
            .bounded(|mut conn| async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok((epoch, run == "1"))
    }

    /// Puts back outcomes Redis lost (keys it holds are left alone): `(key, outcome, ttl)`.
    /// Returns how many were written. One round trip per call: callers batch.
    /// `over_stale`: also replace claims Redis holds "in flight" (after it went back in time,
    /// they are stale; the outcome is final).
    pub async fn seed(
        &self,
        outcomes: &[(String, Seed, Duration)],
        over_stale: bool,
    ) -> Result<u64, BackendError> {
        if outcomes.is_empty() {
            return Ok(0);
        }
        let mut call = self.inner.seed.prepare_invoke();
        call.arg(if over_stale { "over" } else { "absent" });
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
}
