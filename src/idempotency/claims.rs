//! [`Idempotency`]: one configuration's keys — the in-process store, plus claims in Redis with
//! leases when replicas share keys — and the keeper that renews them and puts back what Redis
//! lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;

use crate::error::AapError;
use crate::protocol::{Reply, Skill};
use crate::redis_backend::{BackendError, Claiming, HeldClaim, RedisBackend, Renewal, Reservation};
use crate::settings::{OnAmbiguous, OnBackendError};
use crate::telemetry::metrics::Metrics;

use super::scope::{Fingerprint, KeyScope, hex};
use super::shared::{ClaimState, ClaimsShared, Hold};
use super::store::{
    Claim, IN_PROGRESS_RETRY_AFTER, Store, Ticket, conflict, held, in_progress, not_registered,
};

/// What the store's Redis did, beyond what metrics count (replays, conflicts, "in progress"
/// answers and unknown outcomes are counted there, once).
#[derive(Debug, Default)]
pub struct Counters {
    /// ClaimsShared-store (Redis) failures.
    pub backend_errors: AtomicU64,
    /// Outcomes and claims put back into a Redis that had lost them.
    pub restored: AtomicU64,
}

/// First and longest pause between polls of a key another replica is running.
const POLL_FIRST: Duration = Duration::from_millis(20);

const POLL_MAX: Duration = Duration::from_millis(250);

/// How often the keeper tries Redis while it does not answer (leases must be renewed as soon
/// as it is back).
const KEEPER_RETRY: Duration = Duration::from_millis(200);

/// One renewal's lead reference (for the log) and result.
type RenewalDone = (String, Result<Renewal, BackendError>);

/// Lease renewals in flight at once (one multiplexed connection pipelines them).
const RENEW_AT_ONCE: usize = 32;

/// Outcomes put back per Redis round trip.
const RESTORE_BATCH: usize = 64;

/// The idempotency keys of one configuration: the in-process store, plus Redis when replicas
/// share keys.
#[derive(Debug)]
pub struct Idempotency {
    local: Arc<Store>,
    shared: Option<Arc<ClaimsShared>>,
    on_ambiguous: OnAmbiguous,
    metrics: Option<Arc<Metrics>>,
    pub counters: Counters,
}

/// The idempotency settings [`Idempotency`] needs.
#[derive(Debug, Clone, Copy)]
pub struct ClaimLimits {
    pub ttl: Duration,
    pub max_entries: usize,
    pub max_bytes: usize,
    pub on_ambiguous: OnAmbiguous,
}

impl Idempotency {
    /// Keys in this process only.
    pub fn local(limits: ClaimLimits) -> Idempotency {
        Idempotency {
            local: Arc::new(Store::with_bytes(
                limits.ttl,
                limits.max_entries,
                limits.max_bytes,
            )),
            shared: None,
            on_ambiguous: limits.on_ambiguous,
            metrics: None,
            counters: Counters::default(),
        }
    }

    /// Keys shared through `redis` (the local store still joins duplicates inside the
    /// replica); claims hold a lease of `lock_ttl`.
    pub fn shared(
        limits: ClaimLimits,
        redis: RedisBackend,
        lock_ttl: Duration,
        on_backend_error: OnBackendError,
    ) -> Idempotency {
        Idempotency {
            shared: Some(Arc::new(ClaimsShared {
                redis,
                lock_ttl,
                ttl: limits.ttl,
                on_backend_error,
                hold_orphans: limits.on_ambiguous == OnAmbiguous::Hold,
                epoch: Mutex::new(String::new()),
                claims: Mutex::new(HashMap::new()),
                restore: AtomicBool::new(false),
                restore_over: AtomicBool::new(false),
                run_unknown: AtomicBool::new(false),
                wake: Notify::new(),
            })),
            ..Idempotency::local(limits)
        }
    }

    /// Counts unknown outcomes found at claim time (a dead replica's delivery) into `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: &Arc<Metrics>) -> Idempotency {
        self.metrics = Some(Arc::clone(metrics));
        self
    }

    /// Takes over the in-process store of `old`, the keys of a configuration whose
    /// `idempotency:` settings differed (a reload), with this one's TTL and bounds: the replies
    /// it stored are replayed, the deliveries it runs are joined ("in progress", never a second
    /// delivery) and record their outcomes where this configuration finds them. `old`'s claims in
    /// Redis stay with `old`, whose [`Idempotency::retire`] keeps renewing them.
    pub fn carry_over(&mut self, old: &Idempotency) {
        old.local.reconfigure_like(&self.local);
        self.local = Arc::clone(&old.local);
    }

    /// What a delivery with an unknown outcome leaves for the retry.
    pub fn on_ambiguous(&self) -> OnAmbiguous {
        self.on_ambiguous
    }

    /// Claims `scope` for a request with `fingerprint`: a fresh ticket, the stored reply,
    /// `IDEMPOTENCY_CONFLICT`, or "in progress" / "held". While an equal request with the same
    /// key runs (here or on another replica) it waits for its outcome until `until`.
    pub async fn claim(
        &self,
        scope: KeyScope,
        fingerprint: Fingerprint,
        until: Instant,
    ) -> Result<Claim, AapError> {
        let claim = self
            .local
            .claim(scope.clone(), fingerprint, until, self.on_ambiguous)
            .await;
        match (claim, &self.shared) {
            (Ok(Claim::Fresh(ticket)), Some(shared)) => {
                self.claim_shared(shared, &scope, ticket, until).await
            }
            (other, _) => other,
        }
    }

    /// The local claim was fresh: now the replicas' claim.
    async fn claim_shared(
        &self,
        shared: &Arc<ClaimsShared>,
        scope: &KeyScope,
        mut ticket: Box<Ticket>,
        until: Instant,
    ) -> Result<Claim, AapError> {
        let key = scope.shared_key();
        let fingerprint = hex(&ticket.fingerprint);
        let mut pause = POLL_FIRST;
        let mut epochs_seen = 0;
        let mut retried = false;
        loop {
            let epoch = shared.epoch();
            let terms = Claiming {
                lease: shared.lock_ttl,
                ttl: shared.ttl,
                epoch: &epoch,
                recovery: shared.recovery(),
                hold_orphans: shared.hold_orphans,
            };
            let found = shared.redis.reserve(&key, &fingerprint, &terms).await;
            match found {
                Ok(Reservation::Reserved { token, orphan }) => {
                    if let Some(reference) = &orphan {
                        self.orphaned(scope, reference, "resend");
                    }
                    shared.lock_claims().insert(
                        key.clone(),
                        ClaimState {
                            token: token.clone(),
                            fingerprint: fingerprint.clone(),
                            reference: String::new(),
                            delivering: false,
                        },
                    );
                    ticket.hold = Some(Hold {
                        shared: Arc::clone(shared),
                        key,
                        token,
                        fingerprint,
                    });
                    ticket.orphan = orphan;
                    return Ok(Claim::Fresh(ticket));
                }
                Ok(Reservation::Done {
                    fingerprint: f,
                    reply,
                }) => {
                    if f != fingerprint {
                        return Err(conflict());
                    }
                    let payload = serde_json::from_str::<Value>(&reply).map_err(|_| {
                        AapError::Internal(
                            "idempotency backend: a stored reply is not JSON".to_owned(),
                        )
                    })?;
                    let reply = Reply {
                        skill: Skill::LeadSubmit,
                        payload: crate::protocol::Payload::Json(Arc::new(payload)),
                    };
                    ticket.complete_local(&reply); // local waiters and later retries here
                    return Ok(Claim::Replay(reply));
                }
                Ok(Reservation::Held {
                    fingerprint: f,
                    reference,
                    orphan,
                }) => {
                    if f != fingerprint {
                        return Err(conflict());
                    }
                    if orphan {
                        self.orphaned(scope, &reference, "hold");
                    }
                    ticket.hold_local(&reference);
                    return Err(held(reference));
                }
                Ok(Reservation::InFlight {
                    fingerprint: f,
                    lease_left: _,
                }) => {
                    if f != fingerprint {
                        return Err(conflict());
                    }
                    if Instant::now() + pause > until {
                        return Err(in_progress(IN_PROGRESS_RETRY_AFTER));
                    }
                    tokio::time::sleep(pause).await; // another replica runs it: wait for its outcome
                    pause = (pause * 2).min(POLL_MAX);
                }
                Ok(Reservation::Recovering { left }) => return Err(in_progress(left)),
                Ok(Reservation::Epoch(current)) => {
                    shared.adopt(current);
                    epochs_seen += 1;
                    if epochs_seen > 2 {
                        return Err(in_progress(IN_PROGRESS_RETRY_AFTER));
                    }
                }
                Err(_) if !retried => {
                    // A connection Redis dropped (a restart, a failover) is made anew on the
                    // next call: one more try before falling back.
                    retried = true;
                }
                Err(_) => {
                    // Logged once per outage by the backend; counted here.
                    self.counters.backend_errors.fetch_add(1, Ordering::Relaxed);
                    shared.restore.store(true, Ordering::Relaxed);
                    return if shared.on_backend_error == OnBackendError::Deny {
                        Err(not_registered())
                    } else {
                        Ok(Claim::Fresh(ticket))
                    };
                }
            }
        }
    }

    /// A replica died while it delivered `reference` (its lease ran out): counted and logged
    /// as an unknown outcome, `action` being what the policy made of it.
    fn orphaned(&self, scope: &KeyScope, reference: &str, action: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.lead_ambiguous(&Arc::from(scope.dealer.as_str()), action);
        }
        tracing::warn!(
            dealer = %scope.dealer,
            reference,
            action,
            "lead delivery outcome unknown: the replica delivering it stopped renewing its claim"
        );
    }

    /// Keeps the shared state: learns Redis's epoch, renews the leases of this replica's
    /// claims every third of `lock_ttl`, and puts back what Redis lost. Runs until aborted;
    /// returns at once without Redis.
    pub async fn keep_shared(self: Arc<Self>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let every = (shared.lock_ttl / 3).max(Duration::from_millis(100));
        loop {
            let answered = self.tend(&shared).await;
            let pause = if answered { every } else { KEEPER_RETRY };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = shared.wake.notified() => {}
            }
        }
    }

    /// The keeper of keys a reload replaced ([`Idempotency::carry_over`]): renews this
    /// configuration's claims in Redis until the last delivery holding one ends, then returns.
    /// Without it a delivery still running (mail may take minutes) would lose its claim after
    /// `lock_ttl` and be taken over, and sent again, by a retry.
    pub async fn retire(self: Arc<Self>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let every = (shared.lock_ttl / 3).max(Duration::from_millis(100));
        let mut logged = false;
        loop {
            let running = shared.lock_claims().len();
            if running == 0 {
                if logged {
                    tracing::info!("idempotency: the replaced configuration's last claim ended");
                }
                return;
            }
            if !logged {
                tracing::info!(
                    claims = running,
                    "idempotency: settings changed; the replaced configuration's claims are \
                     renewed until their deliveries end"
                );
                logged = true;
            }
            let answered = self.tend(&shared).await;
            tokio::time::sleep(if answered { every } else { KEEPER_RETRY }).await;
        }
    }

    /// One round of [`Idempotency::keep_shared`]; `false` when Redis did not answer.
    async fn tend(&self, shared: &Arc<ClaimsShared>) -> bool {
        let known = shared.epoch();
        match shared.redis.epoch(&known, shared.recovery()).await {
            Ok((current, run_known)) => {
                if !run_known && !shared.run_unknown.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "idempotency: Redis refuses INFO to this user, so a Redis restarted \
                         from a snapshot (or a failover) is not noticed and its stale claims may \
                         be taken over; allow INFO (e.g. ACL +info)"
                    );
                }
                if current != known {
                    shared.adopt(current);
                }
            }
            Err(_) => {
                shared.restore.store(true, Ordering::Relaxed);
                return false;
            }
        }
        let claims: Vec<(String, ClaimState)> = shared
            .lock_claims()
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        // Every claim is renewed, RENEW_AT_ONCE at a time on the multiplexed connection, and a
        // failure stops none of the others: one by one, stopping at the first error, the tail
        // of a long list would lapse behind a slow Redis while this replica is alive, and be
        // taken over.
        let mut renewals = tokio::task::JoinSet::new();
        let mut answered = true;
        for (key, claim) in claims {
            while renewals.len() >= RENEW_AT_ONCE {
                answered &= self.renewed(renewals.join_next().await);
            }
            let shared = Arc::clone(shared);
            renewals.spawn(async move {
                let held = HeldClaim {
                    token: &claim.token,
                    fingerprint: &claim.fingerprint,
                    reference: &claim.reference,
                    delivering: claim.delivering,
                };
                let renewal = shared
                    .redis
                    .renew(&key, &held, shared.lock_ttl, shared.ttl)
                    .await;
                (claim.reference, renewal)
            });
        }
        while let Some(done) = renewals.join_next().await {
            answered &= self.renewed(Some(done));
        }
        if !answered {
            shared.restore.store(true, Ordering::Relaxed);
            return false;
        }
        if shared.restore.swap(false, Ordering::Relaxed)
            && let Err(error) = self.restore(shared).await
        {
            shared.restore.store(true, Ordering::Relaxed);
            tracing::debug!(%error, "idempotency outcomes not put back yet");
            return false;
        }
        true
    }

    /// Notes one renewal's result; `false` when Redis did not answer it.
    fn renewed(&self, done: Option<Result<RenewalDone, tokio::task::JoinError>>) -> bool {
        match done {
            Some(Ok((_, Ok(Renewal::Renewed)))) | None => true,
            Some(Ok((_, Ok(Renewal::PutBack)))) => {
                self.counters.restored.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(Ok((reference, Ok(Renewal::Lost)))) => {
                tracing::warn!(
                    %reference,
                    "idempotency claim lost to another replica (its lease ran out while Redis \
                     did not answer)"
                );
                true
            }
            Some(Ok((_, Err(_))) | Err(_)) => false,
        }
    }

    /// Writes the outcomes this replica's store holds into Redis where it lacks them.
    async fn restore(
        &self,
        shared: &ClaimsShared,
    ) -> Result<(), crate::redis_backend::BackendError> {
        let outcomes = self.local.outcomes();
        let over = shared.restore_over.swap(false, Ordering::Relaxed);
        let mut written = 0;
        for batch in outcomes.chunks(RESTORE_BATCH) {
            match shared.redis.seed(batch, over).await {
                Ok(n) => written += n,
                Err(error) => {
                    if over {
                        shared.restore_over.store(true, Ordering::Relaxed);
                    }
                    return Err(error);
                }
            }
        }
        if written > 0 {
            self.counters.restored.fetch_add(written, Ordering::Relaxed);
            tracing::info!(
                outcomes = written,
                "idempotency: outcomes Redis had lost were put back from this replica's store"
            );
        }
        Ok(())
    }
}
