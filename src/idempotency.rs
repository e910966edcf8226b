//! Idempotent `lead.submit` (docs/protocol.md §Idempotency): a buyer that retries with the same
//! `idempotency_key` gets the first reply again, never a second lead.
//!
//! - **Scope**: a key belongs to one dealer and one `source_agent.name`; two buyer agents that
//!   happen to pick the same key never see each other's leads.
//! - **Same payload** means equal canonical JSON of the request data (object keys sorted, numbers
//!   as the binding normalised them): key order and whitespace do not matter, any value does.
//! - **Replay**: a completed call's reply is stored for `ttl` and returned as is (the binding
//!   gives it a fresh `messageId`). Only successes are stored: after an error the buyer retries
//!   and the call runs again (the CRM's own duplicate check, fed a stable reference, keeps that
//!   from creating a second lead).
//! - **Conflict**: the same key with another payload is `IDEMPOTENCY_CONFLICT`.
//! - **Single flight**: a duplicate arriving while the first call runs waits for it and gets its
//!   reply; if the first call fails, the waiters fail with it (retryable) instead of each trying
//!   the CRM again.
//! - **Bounded**: at most `max_entries` keys are held; beyond that the oldest completed entries
//!   are dropped first (they would expire first anyway, the TTL being the same for all).
//! - **Replicas** (`idempotency.backend: redis`): the in-process [`Store`] still serves single
//!   flight and replays inside a replica; a fresh local claim then reserves the key in Redis
//!   ([`crate::redis_backend`]), so a retry that lands on another replica replays the stored
//!   reply, conflicts, or waits (polling) while the first replica's call runs. A reservation
//!   holds for `lock_ttl` only, so a replica that dies mid-call frees the key; a waiter that then
//!   finds it free runs the call itself (the CRM's duplicate check on the stable lead reference
//!   keeps that from creating a second lead). When Redis fails, `on_backend_error` decides:
//!   `local` delivers with this replica's store only (a lead delivered beats a lead lost),
//!   `deny` refuses the lead as retryable.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::error::{AapCode, AapError};
use crate::protocol::{Reply, Skill};
use crate::redis_backend::{RedisBackend, Reservation};
use crate::settings::OnBackendError;

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
    fn shared_key(&self) -> String {
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

/// Counts for metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Replies answered again for a repeated key.
    pub replays: AtomicU64,
    /// Keys reused with another payload.
    pub conflicts: AtomicU64,
    /// Shared-store (Redis) failures.
    pub backend_errors: AtomicU64,
}

/// The idempotency keys of one configuration: the in-process store, plus Redis when replicas
/// share keys.
#[derive(Debug)]
pub struct Idempotency {
    local: Arc<Store>,
    shared: Option<Shared>,
    pub counters: Counters,
}

#[derive(Debug)]
struct Shared {
    redis: RedisBackend,
    lock_ttl: Duration,
    on_backend_error: OnBackendError,
}

/// A key held in the shared store while this replica runs the call.
#[derive(Debug)]
struct Hold {
    redis: RedisBackend,
    key: String,
    token: String,
    fingerprint: String,
}

/// First and longest pause between polls of a key another replica is running.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);

impl Idempotency {
    /// Keys in this process only.
    pub fn local(ttl: Duration, max_entries: usize) -> Idempotency {
        Idempotency {
            local: Arc::new(Store::new(ttl, max_entries)),
            shared: None,
            counters: Counters::default(),
        }
    }

    /// Keys shared through `redis` (the local store still coalesces calls inside the replica).
    pub fn shared(
        ttl: Duration,
        max_entries: usize,
        redis: RedisBackend,
        lock_ttl: Duration,
        on_backend_error: OnBackendError,
    ) -> Idempotency {
        Idempotency {
            shared: Some(Shared {
                redis,
                lock_ttl,
                on_backend_error,
            }),
            ..Idempotency::local(ttl, max_entries)
        }
    }

    /// The in-process store.
    pub fn store(&self) -> &Arc<Store> {
        &self.local
    }

    /// Claims `scope` for a request with `fingerprint`: a fresh ticket, the stored reply, or
    /// `IDEMPOTENCY_CONFLICT`; waits while an equal request with the same key runs here or on
    /// another replica.
    pub async fn claim(&self, scope: Scope, fingerprint: Fingerprint) -> Result<Claim, AapError> {
        let claim = self.local.claim(scope.clone(), fingerprint).await;
        let claim = match (claim, &self.shared) {
            (Ok(Claim::Fresh(ticket)), Some(shared)) => {
                self.claim_shared(shared, &scope, ticket).await
            }
            (other, _) => other,
        };
        match &claim {
            Ok(Claim::Replay(_)) => self.counters.replays.fetch_add(1, Ordering::Relaxed),
            Err(AapError::Domain {
                code: AapCode::IdempotencyConflict,
                ..
            }) => self.counters.conflicts.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        claim
    }

    /// The local claim was fresh: now the replicas' claim.
    async fn claim_shared(
        &self,
        shared: &Shared,
        scope: &Scope,
        mut ticket: Ticket,
    ) -> Result<Claim, AapError> {
        let key = scope.shared_key();
        let fingerprint = hex(&ticket.fingerprint);
        let give_up = Instant::now() + shared.lock_ttl;
        let mut pause = POLL_FIRST;
        loop {
            let found = shared.look(&key, &fingerprint).await;
            match found {
                Ok(Found::Reserved(token)) => {
                    ticket.hold = Some(Hold {
                        redis: shared.redis.clone(),
                        key,
                        token,
                        fingerprint,
                    });
                    return Ok(Claim::Fresh(ticket));
                }
                Ok(Found::Done(f, payload)) => {
                    if f != fingerprint {
                        return Err(conflict());
                    }
                    let reply = Reply {
                        skill: Skill::LeadSubmit,
                        payload: Arc::new(payload),
                    };
                    ticket.complete_local(&reply); // local waiters and later retries here
                    return Ok(Claim::Replay(reply));
                }
                Ok(Found::Running(f)) => {
                    if f != fingerprint {
                        return Err(conflict());
                    }
                    if Instant::now() + pause > give_up {
                        return Err(still_running());
                    }
                    tokio::time::sleep(pause).await; // another replica runs it: wait for its reply
                    pause = (pause * 2).min(POLL_MAX);
                }
                Err(error) => {
                    self.counters.backend_errors.fetch_add(1, Ordering::Relaxed);
                    let deny = shared.on_backend_error == OnBackendError::Deny;
                    tracing::warn!(
                        %error,
                        fallback = if deny { "deny" } else { "local store" },
                        "idempotency backend unavailable"
                    );
                    return if deny {
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
}

/// What the shared store holds for a key, its stored reply parsed.
enum Found {
    /// Now held by this replica, with this token.
    Reserved(String),
    /// Running elsewhere, for a request with this fingerprint.
    Running(String),
    /// Completed for a request with this fingerprint, with this reply payload.
    Done(String, Value),
}

impl Shared {
    async fn look(&self, key: &str, fingerprint: &str) -> Result<Found, String> {
        let reservation = self
            .redis
            .reserve(key, fingerprint, self.lock_ttl)
            .await
            .map_err(|e| e.to_string())?;
        Ok(match reservation {
            Reservation::Reserved { token } => Found::Reserved(token),
            Reservation::InFlight { fingerprint } => Found::Running(fingerprint),
            Reservation::Done { fingerprint, reply } => Found::Done(
                fingerprint,
                serde_json::from_str(&reply)
                    .map_err(|e| format!("stored reply is not JSON: {e}"))?,
            ),
        })
    }
}

fn still_running() -> AapError {
    AapError::Domain {
        code: AapCode::InternalError,
        message: "A submission with this idempotency_key is still being processed; retry with \
                  the same key."
            .to_owned(),
        details: None,
    }
}

/// What a claim on a key found.
#[derive(Debug)]
pub enum Claim {
    /// First use (or the earlier call failed): run the call, then [`Ticket::complete`] it.
    Fresh(Ticket),
    /// The key was used with this payload: answer this reply again.
    Replay(Reply),
}

/// The in-memory store of idempotency keys.
#[derive(Debug)]
pub struct Store {
    ttl: Duration,
    max_entries: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Scope, Entry>,
    /// Completed keys in completion order (= expiry order), for expiry and eviction. May hold
    /// keys already removed or re-completed; `Entry::Done::seq` tells which record is current.
    order: VecDeque<(Instant, Scope, u64)>,
    seq: u64,
}

#[derive(Debug)]
enum Entry {
    InFlight {
        fingerprint: Fingerprint,
        done: watch::Receiver<Outcome>,
        id: u64,
    },
    Done {
        fingerprint: Fingerprint,
        reply: Reply,
        seq: u64,
    },
}

#[derive(Debug, Clone)]
enum Outcome {
    Running,
    Completed(Reply),
    Failed,
}

/// The right to run a fresh call for a key. Dropping it without [`Ticket::complete`] (an error,
/// a cancelled request) frees the key and fails the waiters.
#[derive(Debug)]
pub struct Ticket {
    store: Option<Arc<Store>>,
    scope: Scope,
    fingerprint: Fingerprint,
    id: u64,
    tx: watch::Sender<Outcome>,
    /// The key's reservation in the shared store, when replicas share keys.
    hold: Option<Hold>,
}

impl Store {
    pub fn new(ttl: Duration, max_entries: usize) -> Store {
        Store {
            ttl,
            max_entries: max_entries.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// How long replies are kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Keys held (in flight or completed, expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `scope` for a request with `fingerprint`: a fresh ticket, the stored reply, or
    /// `IDEMPOTENCY_CONFLICT`. Waits while an equal request with the same key is running.
    pub async fn claim(
        self: &Arc<Self>,
        scope: Scope,
        fingerprint: Fingerprint,
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
                Some(Entry::InFlight {
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
                    inner.evict(self.max_entries);
                    inner.seq += 1;
                    let id = inner.seq;
                    let (tx, done) = watch::channel(Outcome::Running);
                    inner.entries.insert(
                        scope.clone(),
                        Entry::InFlight {
                            fingerprint,
                            done,
                            id,
                        },
                    );
                    return Ok(Claim::Fresh(Ticket {
                        store: Some(Arc::clone(self)),
                        scope,
                        fingerprint,
                        id,
                        tx,
                        hold: None,
                    }));
                }
            }
        };
        // Single flight: wait for the running call with this key.
        let outcome = rx
            .wait_for(|o| !matches!(o, Outcome::Running))
            .await
            .map(|o| o.clone())
            .unwrap_or(Outcome::Failed);
        match outcome {
            Outcome::Completed(reply) => Ok(Claim::Replay(reply)),
            Outcome::Running | Outcome::Failed => Err(AapError::Domain {
                code: AapCode::InternalError,
                message: "An earlier submission with this idempotency key failed while this one \
                          waited for it; retry with the same key."
                    .to_owned(),
                details: None,
            }),
        }
    }
}

impl Inner {
    /// Drops expired completed entries.
    fn sweep(&mut self, now: Instant) {
        while let Some((expires, _, _)) = self.order.front() {
            if *expires > now {
                break;
            }
            if let Some((_, scope, seq)) = self.order.pop_front() {
                self.remove_done(&scope, seq);
            }
        }
    }

    /// Makes room for one more entry by dropping the oldest completed ones.
    fn evict(&mut self, max_entries: usize) {
        while self.entries.len() >= max_entries {
            let Some((_, scope, seq)) = self.order.pop_front() else {
                // Only calls in flight: they are bounded by the server's concurrency limit.
                return;
            };
            self.remove_done(&scope, seq);
        }
    }

    fn remove_done(&mut self, scope: &Scope, seq: u64) {
        if matches!(self.entries.get(scope), Some(Entry::Done { seq: s, .. }) if *s == seq) {
            self.entries.remove(scope);
        }
    }
}

impl Ticket {
    /// Stores `reply` for the key (in the shared store too) and hands it to every waiter.
    pub async fn complete(mut self, reply: &Reply) {
        if let Some(hold) = self.hold.take() {
            let ttl = self.store.as_ref().map_or(Duration::ZERO, |s| s.ttl);
            let stored = hold
                .redis
                .complete(
                    &hold.key,
                    &hold.token,
                    &hold.fingerprint,
                    &reply.payload.to_string(),
                    ttl,
                )
                .await;
            // The lead is delivered either way; a retry elsewhere then runs it again, and the
            // CRM's duplicate check on the stable reference keeps it one lead.
            match stored {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "idempotency reservation expired before the lead was delivered; raise \
                     idempotency.lock_ttl"
                ),
                Err(error) => {
                    tracing::warn!(%error, "idempotency backend: the reply was not stored");
                }
            }
        }
        self.complete_local(reply);
    }

    /// Stores `reply` in this process's store and hands it to every waiter.
    fn complete_local(mut self, reply: &Reply) {
        if let Some(store) = self.store.take() {
            let mut inner = store.lock();
            inner.seq += 1;
            let seq = inner.seq;
            let expires = Instant::now() + store.ttl;
            let current = matches!(inner.entries.get(&self.scope), Some(Entry::InFlight { id, .. }) if *id == self.id);
            if current {
                inner.entries.insert(
                    self.scope.clone(),
                    Entry::Done {
                        fingerprint: self.fingerprint,
                        reply: reply.clone(),
                        seq,
                    },
                );
                inner.order.push_back((expires, self.scope.clone(), seq));
            }
        }
        let _ = self.tx.send(Outcome::Completed(reply.clone()));
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            // The call failed or was cancelled: free the key for a retry on any replica now,
            // rather than after lock_ttl. Best effort (the lock runs out anyway).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(error) = hold.redis.release(&hold.key, &hold.token).await {
                        tracing::debug!(%error, "idempotency backend: reservation not released");
                    }
                });
            }
        }
        if let Some(store) = self.store.take() {
            let mut inner = store.lock();
            let current = matches!(inner.entries.get(&self.scope), Some(Entry::InFlight { id, .. }) if *id == self.id);
            if current {
                inner.entries.remove(&self.scope);
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
        let Claim::Fresh(ticket) = store.claim(scope("k"), [1; 32]).await.unwrap() else {
            panic!("fresh")
        };
        ticket.complete(&reply("L-1")).await;
        let again = store.claim(scope("k"), [1; 32]).await.unwrap();
        assert_eq!(lead_id(&again).as_deref(), Some("L-1"));
        let err = store.claim(scope("k"), [2; 32]).await.unwrap_err();
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
            store.claim(other, [2; 32]).await.unwrap(),
            Claim::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn a_failed_call_frees_its_key() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let Claim::Fresh(ticket) = store.claim(scope("k"), [1; 32]).await.unwrap() else {
            panic!("fresh")
        };
        drop(ticket);
        assert!(matches!(
            store.claim(scope("k"), [1; 32]).await.unwrap(),
            Claim::Fresh(_)
        ));
    }

    #[tokio::test]
    async fn concurrent_duplicates_wait_for_the_first_call() {
        let store = Arc::new(Store::new(Duration::from_secs(60), 10));
        let Claim::Fresh(ticket) = store.claim(scope("k"), [1; 32]).await.unwrap() else {
            panic!("fresh")
        };
        let waiters: Vec<_> = (0..5)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.claim(scope("k"), [1; 32]).await })
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
        let Claim::Fresh(ticket) = store.claim(scope("k"), [1; 32]).await.unwrap() else {
            panic!("fresh")
        };
        let waiter = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.claim(scope("k"), [1; 32]).await })
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
            let Claim::Fresh(t) = store.claim(scope(&format!("k{i}")), [1; 32]).await.unwrap()
            else {
                panic!("fresh")
            };
            t.complete(&reply(&format!("L-{i}"))).await;
            assert!(store.len() <= 3, "{} entries", store.len());
        }
        // The newest survive eviction.
        assert_eq!(
            lead_id(&store.claim(scope("k9"), [1; 32]).await.unwrap()).as_deref(),
            Some("L-9")
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(matches!(
            store.claim(scope("k9"), [1; 32]).await.unwrap(),
            Claim::Fresh(_)
        ));
    }
}
