//! Idempotent `lead.submit` (docs/protocol.md §Idempotency): a buyer that retries with the same
//! `idempotency_key` gets the first reply again, never a second delivery.
//!
//! - **Scope**: a key belongs to one dealer and one caller (the API key when auth is on, else
//!   `source_agent.name`); two buyers that pick the same key never see each other's leads.
//! - **Same payload** means equal canonical JSON of the request data (object keys sorted, numbers
//!   as the binding normalised them): key order and whitespace do not matter, any value does.
//! - **One delivery per key**: the first call holds a [`Ticket`] while its delivery runs (in its
//!   own task, see `pipeline`); a duplicate meanwhile waits for it up to its own deadline, then
//!   is told "in progress" (retryable, with a hint). The ticket records the outcome:
//!   - delivered: the reply is stored for `ttl` and replayed as is;
//!   - certainly not delivered (refused before the CRM took the lead): the key is freed, and a
//!     retry delivers;
//!   - unknown (the connection was lost, or the CRM timed out, after it may have taken the
//!     lead): `on_ambiguous` decides — `resend` frees the key so the retry delivers again under
//!     the same reference and Message-ID; `hold` keeps the key held for reconciliation.
//! - **Conflict**: the same key with another payload is `IDEMPOTENCY_CONFLICT`.
//! - **Bounded**: at most `max_entries` keys and `max_bytes` of keys and replies are held; beyond
//!   that the oldest finished entries are dropped first (the TTL being the same for all, they
//!   would expire first anyway).
//! - **Replicas** (`idempotency.backend: redis`): the in-process [`Store`] still joins duplicates
//!   inside a replica; a fresh local claim then claims the key in Redis
//!   ([`crate::redis_backend`]) under a lease of `lock_ttl`, renewed every third of it while
//!   this replica works on the lead, so a replica that dies frees its keys after `lock_ttl`. A
//!   claim whose lease ran out while its delivery was under way is an unknown outcome, handled
//!   by `on_ambiguous` like any other.
//! - **Redis restarting empty**: Redis holds an epoch (a random id). A replica that finds it
//!   gone or changed knows Redis lost its data: for `lock_ttl` no free key is handed out
//!   ("in progress"), while every replica puts back its running claims and the outcomes its own
//!   store holds. What no live replica remembers (a replica that died, an entry its store
//!   dropped) is lost: docs/operations.md §Idempotency says what is guaranteed.
//! - **Redis unavailable**: `on_backend_error` decides: `local` delivers with this replica's
//!   store only (a lead delivered beats a lead lost), `deny` refuses the lead as retryable. The
//!   outage is logged when it starts and ends ([`RedisBackend::watch`]), never per call.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, watch};

use crate::error::{AapCode, AapError};
use crate::protocol::{Reply, Skill};
use crate::redis_backend::{Claiming, HeldClaim, RedisBackend, Renewal, Reservation, Seed};
use crate::settings::{OnAmbiguous, OnBackendError};
use crate::telemetry::metrics::Metrics;

/// SHA-256 of the canonical JSON of a request.
pub type Fingerprint = [u8; 32];

/// Where a key lives: (dealer id, who sent it, key). Who sent it is the authenticated API key
/// when auth is on — a client cannot then replay or block another client's keys by naming the
/// same agent — else the request's `source_agent.name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub dealer: String,
    pub source: String,
    pub key: String,
}

impl Scope {
    /// The scope of a lead request's key, when it carries one; `api_key` is the id of the
    /// caller's authenticated key, if any.
    pub fn of(dealer: &str, api_key: Option<&str>, request: &Value) -> Option<Scope> {
        let key = request.get("idempotency_key")?.as_str()?;
        Some(Scope {
            dealer: dealer.to_owned(),
            source: key_owner(api_key, request).into_owned(),
            key: key.to_owned(),
        })
    }

    /// The key's name in a shared store: the dealer in clear (for operators), the buyer's
    /// strings hashed (any length, any characters, and no buyer text in Redis's key space).
    pub fn shared_key(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update((self.source.len() as u64).to_be_bytes());
        hasher.update(self.source.as_bytes());
        hasher.update(self.key.as_bytes());
        format!("{}:{}", self.dealer, hex(&hasher.finalize().into()))
    }
}

/// Who a lead's idempotency key belongs to (its scope, and its lead reference): the
/// authenticated API key when there is one, else the request's `source_agent.name`.
pub fn key_owner<'a>(api_key: Option<&str>, request: &'a Value) -> std::borrow::Cow<'a, str> {
    match api_key {
        Some(id) => std::borrow::Cow::Owned(format!("api key {id}")),
        None => std::borrow::Cow::Borrowed(
            request
                .pointer("/source_agent/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
    }
}

/// What the store's Redis did, beyond what metrics count (replays, conflicts, "in progress"
/// answers and unknown outcomes are counted there, once).
#[derive(Debug, Default)]
pub struct Counters {
    /// Shared-store (Redis) failures.
    pub backend_errors: AtomicU64,
    /// Outcomes and claims put back into a Redis that had lost them.
    pub restored: AtomicU64,
}

/// The retry hint of an "in progress" answer.
pub const IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The retry hint of a lead held for reconciliation.
pub const HELD_RETRY_AFTER: Duration = Duration::from_secs(60);
/// First and longest pause between polls of a key another replica is running.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);
/// How often the keeper tries Redis while it does not answer (leases must be renewed as soon
/// as it is back).
const KEEPER_RETRY: Duration = Duration::from_millis(200);
/// Outcomes put back per Redis round trip.
const RESTORE_BATCH: usize = 64;
/// What an entry costs besides its strings (map slot, order queue, channel).
const ENTRY_OVERHEAD: usize = 256;

/// The idempotency keys of one configuration: the in-process store, plus Redis when replicas
/// share keys.
#[derive(Debug)]
pub struct Idempotency {
    local: Arc<Store>,
    shared: Option<Arc<Shared>>,
    on_ambiguous: OnAmbiguous,
    metrics: Option<Arc<Metrics>>,
    pub counters: Counters,
}

#[derive(Debug)]
struct Shared {
    redis: RedisBackend,
    lock_ttl: Duration,
    ttl: Duration,
    on_backend_error: OnBackendError,
    hold_orphans: bool,
    /// Redis's epoch as this replica last saw it (`""`: not yet).
    epoch: Mutex<String>,
    /// The claims this replica holds, by shared key: their leases are renewed by the keeper.
    claims: Mutex<HashMap<String, ClaimState>>,
    /// Redis may lack outcomes this replica knows (it restarted, or was down): put them back.
    restore: AtomicBool,
    wake: Notify,
}

#[derive(Debug, Clone)]
struct ClaimState {
    token: String,
    fingerprint: String,
    reference: String,
    delivering: bool,
}

/// The idempotency settings [`Idempotency`] needs.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub ttl: Duration,
    pub max_entries: usize,
    pub max_bytes: usize,
    pub on_ambiguous: OnAmbiguous,
}

impl Idempotency {
    /// Keys in this process only.
    pub fn local(limits: Limits) -> Idempotency {
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
        limits: Limits,
        redis: RedisBackend,
        lock_ttl: Duration,
        on_backend_error: OnBackendError,
    ) -> Idempotency {
        Idempotency {
            shared: Some(Arc::new(Shared {
                redis,
                lock_ttl,
                ttl: limits.ttl,
                on_backend_error,
                hold_orphans: limits.on_ambiguous == OnAmbiguous::Hold,
                epoch: Mutex::new(String::new()),
                claims: Mutex::new(HashMap::new()),
                restore: AtomicBool::new(false),
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

    /// What a delivery with an unknown outcome leaves for the retry.
    pub fn on_ambiguous(&self) -> OnAmbiguous {
        self.on_ambiguous
    }

    /// Claims `scope` for a request with `fingerprint`: a fresh ticket, the stored reply,
    /// `IDEMPOTENCY_CONFLICT`, or "in progress" / "held". While an equal request with the same
    /// key runs (here or on another replica) it waits for its outcome until `until`.
    pub async fn claim(
        &self,
        scope: Scope,
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
        shared: &Arc<Shared>,
        scope: &Scope,
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
                        payload: Arc::new(payload),
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
                        Err(AapError::Domain {
                            code: AapCode::InternalError,
                            message: "The lead could not be registered right now; retry with \
                                      the same idempotency_key."
                                .to_owned(),
                            details: None,
                        })
                    } else {
                        Ok(Claim::Fresh(ticket))
                    };
                }
            }
        }
    }

    /// A replica died while it delivered `reference` (its lease ran out): counted and logged
    /// as an unknown outcome, `action` being what the policy made of it.
    fn orphaned(&self, scope: &Scope, reference: &str, action: &'static str) {
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

    /// One round of [`Idempotency::keep_shared`]; `false` when Redis did not answer.
    async fn tend(&self, shared: &Shared) -> bool {
        let known = shared.epoch();
        match shared.redis.epoch(&known, shared.recovery()).await {
            Ok(current) if current != known => shared.adopt(current),
            Ok(_) => {}
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
        for (key, claim) in claims {
            let held = HeldClaim {
                token: &claim.token,
                fingerprint: &claim.fingerprint,
                reference: &claim.reference,
                delivering: claim.delivering,
            };
            match shared
                .redis
                .renew(&key, &held, shared.lock_ttl, shared.ttl)
                .await
            {
                Ok(Renewal::Renewed) => {}
                Ok(Renewal::PutBack) => {
                    self.counters.restored.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Renewal::Lost) => tracing::warn!(
                    reference = %claim.reference,
                    "idempotency claim lost to another replica (its lease ran out while Redis \
                     did not answer)"
                ),
                Err(_) => {
                    shared.restore.store(true, Ordering::Relaxed);
                    return false;
                }
            }
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

    /// Writes the outcomes this replica's store holds into Redis where it lacks them.
    async fn restore(&self, shared: &Shared) -> Result<(), crate::redis_backend::BackendError> {
        let outcomes = self.local.outcomes();
        let mut written = 0;
        for batch in outcomes.chunks(RESTORE_BATCH) {
            written += shared.redis.seed(batch).await?;
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

impl Shared {
    fn epoch(&self) -> String {
        self.epoch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Redis's epoch changed: it lost its data (or this replica is new). Put back what this
    /// replica knows, now.
    fn adopt(&self, epoch: String) {
        let mut known = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        if *known != epoch {
            if !known.is_empty() {
                tracing::warn!(
                    "idempotency: Redis lost its data (new epoch); no new key is handed out \
                     while the replicas put back their claims and outcomes"
                );
            }
            *known = epoch;
            self.restore.store(true, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// How long free keys are refused after Redis lost its data: every replica's keeper runs
    /// three times meanwhile.
    fn recovery(&self) -> Duration {
        self.lock_ttl
    }

    fn lock_claims(&self) -> MutexGuard<'_, HashMap<String, ClaimState>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A key claimed in the shared store while this replica works on the lead.
#[derive(Debug)]
struct Hold {
    shared: Arc<Shared>,
    key: String,
    token: String,
    fingerprint: String,
}

impl Hold {
    /// No longer renewed.
    fn forget(&self) {
        let mut claims = self.shared.lock_claims();
        if claims.get(&self.key).is_some_and(|c| c.token == self.token) {
            claims.remove(&self.key);
        }
    }
}

/// The result of a claim.
#[derive(Debug)]
pub enum Claim {
    /// Run the call; then record its outcome with the ticket (boxed: it is large, the reply
    /// small).
    Fresh(Box<Ticket>),
    /// The stored reply of an earlier call with this key and payload.
    Replay(Reply),
}

/// The in-process store: keys and replies with a TTL, bounded in entries and bytes.
#[derive(Debug)]
pub struct Store {
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Scope, Entry>,
    /// Finished entries in completion order (= expiry order), with their expiry.
    order: VecDeque<(Instant, Scope, u64)>,
    seq: u64,
    /// What the entries cost, [`Entry::bytes`] summed.
    bytes: usize,
}

#[derive(Debug)]
enum Entry {
    Running {
        fingerprint: Fingerprint,
        done: watch::Receiver<Outcome>,
        id: u64,
        bytes: usize,
    },
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        seq: u64,
        bytes: usize,
    },
    /// The delivery's outcome is unknown (`on_ambiguous: hold`).
    Held {
        fingerprint: Fingerprint,
        reference: String,
        seq: u64,
        bytes: usize,
    },
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Running { bytes, .. }
            | Entry::Done { bytes, .. }
            | Entry::Held { bytes, .. } => *bytes,
        }
    }
}

#[derive(Debug, Clone)]
enum Outcome {
    Running,
    Completed(Reply),
    /// Not delivered, or delivered with an unknown outcome under `resend`: the key is free.
    Failed,
    Held(String),
}

/// The right to run a fresh call for a key. Record the outcome with [`Ticket::complete`],
/// [`Ticket::not_delivered`] or [`Ticket::unknown`]; dropping it frees the key and fails the
/// waiters (a call cancelled before its delivery began).
#[derive(Debug)]
pub struct Ticket {
    store: Option<Arc<Store>>,
    scope: Scope,
    fingerprint: Fingerprint,
    id: u64,
    tx: watch::Sender<Outcome>,
    on_ambiguous: OnAmbiguous,
    /// The key's claim in the shared store, when replicas share keys.
    hold: Option<Hold>,
    /// The reference of a dead replica's delivery this claim took over (`resend`).
    pub orphan: Option<String>,
}

/// What a key and its strings cost in memory.
fn key_bytes(scope: &Scope) -> usize {
    ENTRY_OVERHEAD + scope.dealer.len() + scope.source.len() + scope.key.len()
}

impl Store {
    /// A store bounded in entries only (tests).
    pub fn new(ttl: Duration, max_entries: usize) -> Store {
        Store::with_bytes(ttl, max_entries, usize::MAX)
    }

    /// A store of at most `max_entries` keys and `max_bytes` of keys and replies.
    pub fn with_bytes(ttl: Duration, max_entries: usize, max_bytes: usize) -> Store {
        Store {
            ttl,
            max_entries: max_entries.max(1),
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Keys held (in flight or finished, expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the held entries cost, as counted against `max_bytes`.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `scope` for a request with `fingerprint`: a fresh ticket, the stored reply,
    /// `IDEMPOTENCY_CONFLICT` or "held". While an equal request with the same key is running,
    /// waits for its outcome until `until`, then answers "in progress".
    pub async fn claim(
        self: &Arc<Self>,
        scope: Scope,
        fingerprint: Fingerprint,
        until: Instant,
        on_ambiguous: OnAmbiguous,
    ) -> Result<Claim, AapError> {
        let mut rx = {
            let mut inner = self.lock();
            let now = Instant::now();
            inner.sweep(now);
            match inner.entries.get(&scope) {
                Some(Entry::Done {
                    fingerprint: f,
                    reply,
                    ..
                }) => {
                    return if *f == fingerprint {
                        Ok(Claim::Replay(reply.clone()))
                    } else {
                        Err(conflict())
                    };
                }
                Some(Entry::Held {
                    fingerprint: f,
                    reference,
                    ..
                }) => {
                    return Err(if *f == fingerprint {
                        held(reference.clone())
                    } else {
                        conflict()
                    });
                }
                Some(Entry::Running {
                    fingerprint: f,
                    done,
                    ..
                }) => {
                    if *f != fingerprint {
                        return Err(conflict());
                    }
                    done.clone()
                }
                None => {
                    let bytes = key_bytes(&scope);
                    inner.evict(self.max_entries, self.max_bytes, bytes);
                    inner.seq += 1;
                    let id = inner.seq;
                    let (tx, done) = watch::channel(Outcome::Running);
                    inner.put(
                        scope.clone(),
                        Entry::Running {
                            fingerprint,
                            done,
                            id,
                            bytes,
                        },
                    );
                    return Ok(Claim::Fresh(Box::new(Ticket {
                        store: Some(Arc::clone(self)),
                        scope,
                        fingerprint,
                        id,
                        tx,
                        on_ambiguous,
                        hold: None,
                        orphan: None,
                    })));
                }
            }
        };
        // Join the running call with this key, for as long as this request may wait.
        let waited = tokio::time::timeout_at(
            tokio::time::Instant::from_std(until),
            rx.wait_for(|o| !matches!(o, Outcome::Running)),
        )
        .await;
        let outcome = match waited {
            Ok(Ok(outcome)) => outcome.clone(),
            Ok(Err(_)) => Outcome::Failed,
            Err(_) => return Err(in_progress(IN_PROGRESS_RETRY_AFTER)),
        };
        match outcome {
            Outcome::Completed(reply) => Ok(Claim::Replay(reply)),
            Outcome::Held(reference) => Err(held(reference)),
            Outcome::Running | Outcome::Failed => Err(AapError::Domain {
                code: AapCode::InternalError,
                message: "An earlier submission with this idempotency key failed while this one \
                          waited for it; retry with the same key."
                    .to_owned(),
                details: None,
            }),
        }
    }

    /// The finished outcomes held, as Redis keeps them, with the time each has left.
    fn outcomes(&self) -> Vec<(String, Seed, Duration)> {
        let inner = self.lock();
        let now = Instant::now();
        inner
            .order
            .iter()
            .filter_map(|(expires, scope, seq)| {
                let left = expires.checked_duration_since(now)?;
                let seed = match inner.entries.get(scope)? {
                    Entry::Done {
                        fingerprint,
                        reply,
                        seq: s,
                        ..
                    } if s == seq => Seed::Done {
                        fingerprint: hex(fingerprint),
                        reply: reply.payload.to_string(),
                    },
                    Entry::Held {
                        fingerprint,
                        reference,
                        seq: s,
                        ..
                    } if s == seq => Seed::Held {
                        fingerprint: hex(fingerprint),
                        reference: reference.clone(),
                    },
                    _ => return None,
                };
                Some((scope.shared_key(), seed, left))
            })
            .collect()
    }
}

impl Inner {
    fn put(&mut self, scope: Scope, entry: Entry) {
        self.bytes += entry.bytes();
        if let Some(old) = self.entries.insert(scope, entry) {
            self.bytes -= old.bytes();
        }
    }

    fn take(&mut self, scope: &Scope) {
        if let Some(old) = self.entries.remove(scope) {
            self.bytes -= old.bytes();
        }
    }

    /// Drops expired finished entries.
    fn sweep(&mut self, now: Instant) {
        while let Some((expires, _, _)) = self.order.front() {
            if *expires > now {
                break;
            }
            if let Some((_, scope, seq)) = self.order.pop_front() {
                self.remove_finished(&scope, seq);
            }
        }
    }

    /// Makes room for one more entry of `incoming` bytes by dropping the oldest finished ones.
    fn evict(&mut self, max_entries: usize, max_bytes: usize, incoming: usize) {
        while self.entries.len() >= max_entries || self.bytes.saturating_add(incoming) > max_bytes {
            let Some((_, scope, seq)) = self.order.pop_front() else {
                // Only calls in flight: they are bounded by the server's concurrency limit.
                return;
            };
            self.remove_finished(&scope, seq);
        }
    }

    fn remove_finished(&mut self, scope: &Scope, seq: u64) {
        let finished = match self.entries.get(scope) {
            Some(Entry::Done { seq: s, .. } | Entry::Held { seq: s, .. }) => *s == seq,
            _ => false,
        };
        if finished {
            self.take(scope);
        }
    }

    /// Replaces the running entry `id` of `scope` (if still current) with a finished one.
    fn finish(&mut self, store: &Store, scope: &Scope, id: u64, entry: impl FnOnce(u64) -> Entry) {
        let current =
            matches!(self.entries.get(scope), Some(Entry::Running { id: i, .. }) if *i == id);
        if !current {
            return;
        }
        self.take(scope);
        self.seq += 1;
        let seq = self.seq;
        let entry = entry(seq);
        self.evict(store.max_entries, store.max_bytes, entry.bytes());
        self.put(scope.clone(), entry);
        self.order
            .push_back((Instant::now() + store.ttl, scope.clone(), seq));
    }
}

impl Ticket {
    /// The lead is about to leave for the CRM, under `reference`: from now on a claim this
    /// replica stops renewing is an unknown outcome, not a free key. Waits (at most the Redis
    /// timeout) until the shared store knows, so no delivery starts unrecorded.
    pub async fn delivering(&mut self, reference: &str) {
        let Some(hold) = &self.hold else {
            return;
        };
        let state = {
            let mut claims = hold.shared.lock_claims();
            let Some(claim) = claims.get_mut(&hold.key).filter(|c| c.token == hold.token) else {
                return;
            };
            claim.delivering = true;
            claim.reference = reference.to_owned();
            claim.clone()
        };
        let held = HeldClaim {
            token: &state.token,
            fingerprint: &state.fingerprint,
            reference: &state.reference,
            delivering: true,
        };
        // A failure is noted by the backend; the keeper retries.
        let _ = hold
            .shared
            .redis
            .renew(&hold.key, &held, hold.shared.lock_ttl, hold.shared.ttl)
            .await;
    }

    /// The lead was delivered: stores `reply` for the key (in the shared store too) and hands
    /// it to every waiter.
    pub async fn complete(mut self, reply: &Reply) {
        if let Some(hold) = self.hold.take() {
            hold.forget();
            let stored = hold
                .shared
                .redis
                .complete(
                    &hold.key,
                    &hold.token,
                    &hold.fingerprint,
                    &reply.payload.to_string(),
                    hold.shared.ttl,
                )
                .await;
            match stored {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "idempotency: the key was taken over while its lead was delivered (its \
                     lease ran out); the reply is kept by this replica only"
                ),
                // Logged once per outage by the backend; put back when Redis answers.
                Err(_) => hold.shared.restore.store(true, Ordering::Relaxed),
            }
        }
        self.complete_local(reply);
    }

    /// The lead certainly did not reach the CRM: the key is free for a retry at once.
    pub fn not_delivered(self) {
        drop(self);
    }

    /// The delivery ended and nobody knows whether the CRM took the lead: `resend` frees the key
    /// (the retry delivers under the same reference); `hold` keeps it held for reconciliation
    /// and returns the buyer's answer.
    pub async fn unknown(mut self, reference: &str) -> Option<AapError> {
        match self.on_ambiguous {
            OnAmbiguous::Resend => {
                drop(self);
                None
            }
            OnAmbiguous::Hold => {
                if let Some(hold) = self.hold.take() {
                    hold.forget();
                    let stored = hold
                        .shared
                        .redis
                        .hold(
                            &hold.key,
                            &hold.token,
                            &hold.fingerprint,
                            reference,
                            hold.shared.ttl,
                        )
                        .await;
                    if stored.is_err() {
                        hold.shared.restore.store(true, Ordering::Relaxed);
                    }
                }
                self.hold_local(reference);
                Some(held(reference.to_owned()))
            }
        }
    }

    /// Stores `reply` in this process's store and hands it to every waiter.
    fn complete_local(mut self, reply: &Reply) {
        if let Some(store) = self.store.take() {
            let bytes = key_bytes(&self.scope) + reply.payload.to_string().len();
            let fingerprint = self.fingerprint;
            store
                .lock()
                .finish(&store, &self.scope, self.id, |seq| Entry::Done {
                    fingerprint,
                    reply: reply.clone(),
                    seq,
                    bytes,
                });
        }
        let _ = self.tx.send(Outcome::Completed(reply.clone()));
    }

    /// Holds the key in this process's store and tells every waiter.
    fn hold_local(mut self, reference: &str) {
        if let Some(store) = self.store.take() {
            let bytes = key_bytes(&self.scope) + reference.len();
            let fingerprint = self.fingerprint;
            store
                .lock()
                .finish(&store, &self.scope, self.id, |seq| Entry::Held {
                    fingerprint,
                    reference: reference.to_owned(),
                    seq,
                    bytes,
                });
        }
        let _ = self.tx.send(Outcome::Held(reference.to_owned()));
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            hold.forget();
            // Free the key for a retry on any replica now, rather than when the lease runs out.
            // Best effort (the lease runs out anyway).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(error) = hold.shared.redis.release(&hold.key, &hold.token).await {
                        tracing::debug!(%error, "idempotency backend: claim not released");
                    }
                });
            }
        }
        if let Some(store) = self.store.take() {
            let mut inner = store.lock();
            let current = matches!(inner.entries.get(&self.scope), Some(Entry::Running { id, .. }) if *id == self.id);
            if current {
                inner.take(&self.scope);
            }
            drop(inner);
            let _ = self.tx.send(Outcome::Failed);
        }
    }
}

fn conflict() -> AapError {
    AapError::domain(
        AapCode::IdempotencyConflict,
        "This idempotency_key was already used with a different request; use a new key for a \
         new lead.",
    )
}

fn in_progress(retry_after: Duration) -> AapError {
    AapError::LeadInProgress { retry_after }
}

fn held(reference: String) -> AapError {
    AapError::LeadHeld {
        reference,
        retry_after: HELD_RETRY_AFTER,
    }
}

/// Lower-case hex of a fingerprint.
pub fn hex(fingerprint: &Fingerprint) -> String {
    let mut out = String::with_capacity(64);
    for byte in fingerprint {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// SHA-256 of the canonical JSON of `value`: object keys sorted at every level, no whitespace.
pub fn fingerprint(value: &Value) -> Fingerprint {
    let mut hasher = Sha256::new();
    canonical(value, &mut hasher);
    hasher.finalize().into()
}

fn canonical(value: &Value, out: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.update(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                out.update(Value::String(key.clone()).to_string().as_bytes());
                out.update(b":");
                if let Some(v) = map.get(key) {
                    canonical(v, out);
                }
            }
            out.update(b"}");
        }
        Value::Array(items) => {
            out.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(item, out);
            }
            out.update(b"]");
        }
        scalar => out.update(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Skill;
    use serde_json::json;
    use std::sync::Arc;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn scope(key: &str) -> Scope {
        Scope {
            dealer: "d".into(),
            source: "agent".into(),
            key: key.into(),
        }
    }

    fn reply(id: &str) -> Reply {
        Reply::new(
            Skill::LeadSubmit,
            json!({ "lead_id": id, "status": "received" }),
            None,
        )
    }

    /// A claim of `key` for the test payload, joining a running call for at most five seconds.
    async fn claim(store: &Arc<Store>, key: &str, policy: OnAmbiguous) -> Result<Claim, AapError> {
        store.claim(scope(key), [1; 32], soon(), policy).await
    }

    /// The ticket of a key nobody holds.
    async fn fresh(store: &Arc<Store>, key: &str, policy: OnAmbiguous) -> Box<Ticket> {
        match claim(store, key, policy).await.unwrap() {
            Claim::Fresh(ticket) => ticket,
            Claim::Replay(_) => panic!("fresh"),
        }
    }

    fn lead_id(claim: &Claim) -> Option<String> {
        match claim {
            Claim::Replay(r) => r.payload["data"]["lead_id"].as_str().map(str::to_owned),
            Claim::Fresh(_) => None,
        }
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_fingerprint() {
        let a: Value = serde_json::from_str(r#"{"a": 1, "b": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"x":"s","y":[1,2]},"a":1}"#).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c = json!({"a": 1, "b": {"x": "s", "y": [2, 1]}});
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[tokio::test]
    async fn a_completed_key_replays_and_a_changed_payload_conflicts() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "k", OnAmbiguous::Resend).await;
        ticket.complete(&reply("L-1")).await;
        let again = claim(&store, "k", OnAmbiguous::Resend).await.unwrap();
        assert_eq!(lead_id(&again).as_deref(), Some("L-1"));
        let err = store
            .claim(scope("k"), [2; 32], soon(), OnAmbiguous::Resend)
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            AapError::Domain {
                code: AapCode::IdempotencyConflict,
                ..
            }
        ));
        // Another source agent's key of the same name is another key.
        let mut other = scope("k");
        other.source = "someone-else".into();
        assert!(matches!(
            store
                .claim(other, [2; 32], soon(), OnAmbiguous::Resend)
                .await
                .unwrap(),
            Claim::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn a_failed_call_frees_its_key() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "k", OnAmbiguous::Resend).await;
        drop(ticket);
        assert!(matches!(
            claim(&store, "k", OnAmbiguous::Resend).await.unwrap(),
            Claim::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn concurrent_duplicates_wait_for_the_first_call() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "k", OnAmbiguous::Resend).await;
        let waiters: Vec<_> = (0..5)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { claim(&store, "k", OnAmbiguous::Resend).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        ticket.complete(&reply("L-7")).await;
        for w in waiters {
            let claim = w.await.unwrap().unwrap();
            assert_eq!(lead_id(&claim).as_deref(), Some("L-7"));
        }
    }

    #[tokio::test]
    async fn waiters_fail_with_the_first_call() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "k", OnAmbiguous::Resend).await;
        let waiter = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { claim(&store, "k", OnAmbiguous::Resend).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(ticket);
        let err = waiter.await.unwrap().unwrap_err();
        assert!(matches!(
            err,
            AapError::Domain {
                code: AapCode::InternalError,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn entries_expire_and_the_store_stays_bounded() {
        let store = Arc::new(Store::new(Duration::from_millis(30), 3));
        for i in 0..10 {
            let t = fresh(&store, &format!("k{i}"), OnAmbiguous::Resend).await;
            t.complete(&reply(&format!("L-{i}"))).await;
            assert!(store.len() <= 3, "{} entries", store.len());
        }
        // The newest survive eviction.
        assert_eq!(
            lead_id(&claim(&store, "k9", OnAmbiguous::Resend).await.unwrap()).as_deref(),
            Some("L-9")
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(matches!(
            claim(&store, "k9", OnAmbiguous::Resend).await.unwrap(),
            Claim::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn a_duplicate_joins_the_running_call_only_until_its_deadline() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "k", OnAmbiguous::Resend).await;
        let started = Instant::now();
        let until = started + Duration::from_millis(50);
        let err = store
            .claim(scope("k"), [1; 32], until, OnAmbiguous::Resend)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AapError::LeadInProgress { retry_after } if retry_after == IN_PROGRESS_RETRY_AFTER),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_millis(500));
        // Still one call: the first ticket's outcome is what the next duplicate gets.
        ticket.complete(&reply("L-1")).await;
        let again = claim(&store, "k", OnAmbiguous::Resend).await.unwrap();
        assert_eq!(lead_id(&again).as_deref(), Some("L-1"));
    }

    #[tokio::test]
    async fn an_unknown_outcome_frees_the_key_under_resend_and_holds_it_under_hold() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let ticket = fresh(&store, "r", OnAmbiguous::Resend).await;
        assert!(ticket.unknown("aap-r").await.is_none());
        assert!(matches!(
            claim(&store, "r", OnAmbiguous::Resend).await.unwrap(),
            Claim::Fresh(_)
        ));

        let ticket = fresh(&store, "h", OnAmbiguous::Hold).await;
        let waiter = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { claim(&store, "h", OnAmbiguous::Hold).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answer = ticket.unknown("aap-h").await;
        assert!(
            matches!(&answer, Some(AapError::LeadHeld { reference, .. }) if reference == "aap-h"),
            "{answer:?}"
        );
        for err in [
            waiter.await.unwrap().unwrap_err(),
            claim(&store, "h", OnAmbiguous::Hold).await.unwrap_err(),
        ] {
            assert!(matches!(err, AapError::LeadHeld { .. }), "{err:?}");
        }
    }

    #[tokio::test]
    async fn the_store_stays_within_its_bytes() {
        let max_bytes = 8 * 1024;
        let store = Arc::new(Store::with_bytes(Duration::from_secs(60), 1000, max_bytes));
        let big = Reply::new(
            Skill::LeadSubmit,
            json!({ "lead_id": "L", "status": "received", "note": "x".repeat(1500) }),
            None,
        );
        for i in 0..50 {
            let t = fresh(&store, &format!("k{i}"), OnAmbiguous::Resend).await;
            t.complete(&big).await;
            assert!(store.bytes() <= max_bytes, "{} bytes", store.bytes());
        }
        assert!(
            store.len() >= 3 && store.len() < 10,
            "{} entries",
            store.len()
        );
        // The newest survive.
        assert!(matches!(
            claim(&store, "k49", OnAmbiguous::Resend).await.unwrap(),
            Claim::Replay(_)
        ));
    }
}
