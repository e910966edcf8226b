//! The in-process store (keys and replies with a TTL, bounded in entries and bytes), the
//! [`Ticket`] a fresh claim holds while its delivery runs, and the answers a claim can give.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::{AapCode, AapError};
use crate::protocol::Reply;
use crate::redis_backend::{HeldClaim, Renewal, Seed};
use crate::settings::{OnAmbiguous, OnBackendError};

use super::scope::{Fingerprint, KeyScope, hex};
use super::shared::Hold;

/// The retry hint of an "in progress" answer.
pub const IN_PROGRESS_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The retry hint of a lead held for reconciliation.
pub const HELD_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What an entry costs besides its strings (map slot, order queue, channel).
const ENTRY_OVERHEAD: usize = 256;

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
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// How long a finished entry is kept, and the bounds: under the lock, as a reload that
    /// changes them keeps the store (deliveries in flight record their outcomes into it).
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    entries: HashMap<KeyScope, Entry>,
    /// Finished entries in completion order (= expiry order), with their expiry.
    order: VecDeque<(Instant, KeyScope, u64)>,
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
    scope: KeyScope,
    pub(super) fingerprint: Fingerprint,
    id: u64,
    tx: watch::Sender<Outcome>,
    on_ambiguous: OnAmbiguous,
    /// The key's claim in the shared store, when replicas share keys.
    pub(super) hold: Option<Hold>,
    /// The reference of a dead replica's delivery this claim took over (`resend`).
    pub orphan: Option<String>,
}

/// What a key and its strings cost in memory.
fn key_bytes(scope: &KeyScope) -> usize {
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
            inner: Mutex::new(Inner {
                ttl,
                max_entries: max_entries.max(1),
                max_bytes,
                ..Inner::default()
            }),
        }
    }

    /// Takes the TTL and bounds of `other` (a reload changed them): entries stored keep their
    /// expiry, the bounds apply from the next entry on.
    pub(super) fn reconfigure_like(&self, other: &Store) {
        let (ttl, max_entries, max_bytes) = {
            let o = other.lock();
            (o.ttl, o.max_entries, o.max_bytes)
        };
        let mut inner = self.lock();
        inner.ttl = ttl;
        inner.max_entries = max_entries;
        inner.max_bytes = max_bytes;
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
        scope: KeyScope,
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
                    let (entries, most) = (inner.max_entries, inner.max_bytes);
                    inner.evict(entries, most, bytes);
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
    pub(super) fn outcomes(&self) -> Vec<(String, Seed, Duration)> {
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
    fn put(&mut self, scope: KeyScope, entry: Entry) {
        self.bytes += entry.bytes();
        if let Some(old) = self.entries.insert(scope, entry) {
            self.bytes -= old.bytes();
        }
    }

    fn take(&mut self, scope: &KeyScope) {
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

    /// Makes room for one more entry of `incoming` bytes by dropping the oldest finished ones:
    /// delivered replies first; a key held for reconciliation (`on_ambiguous: hold`) only when
    /// nothing else is left, with a warning, since its lead may then be sent again.
    fn evict(&mut self, max_entries: usize, max_bytes: usize, incoming: usize) {
        let over = |inner: &Inner| {
            inner.entries.len() >= max_entries || inner.bytes.saturating_add(incoming) > max_bytes
        };
        let mut held = Vec::new();
        while over(self) {
            let Some((expires, scope, seq)) = self.order.pop_front() else {
                break;
            };
            if matches!(self.entries.get(&scope), Some(Entry::Held { seq: s, .. }) if *s == seq) {
                held.push((expires, scope, seq));
                continue;
            }
            self.remove_finished(&scope, seq);
        }
        let mut held = held.into_iter();
        while over(self) {
            // Only held keys and calls in flight (bounded by the server's concurrency limit).
            let Some((_, scope, seq)) = held.next() else {
                break;
            };
            if let Some(Entry::Held { reference, .. }) = self.entries.get(&scope) {
                tracing::warn!(
                    reference = %reference,
                    "idempotency: a key held for reconciliation was dropped to stay within \
                     idempotency.max_entries / max_bytes; a retry of its lead delivers again"
                );
            }
            self.remove_finished(&scope, seq);
        }
        // The held keys kept go back in front, in their order (the oldest expire first).
        for kept in held.rev() {
            self.order.push_front(kept);
        }
    }

    fn remove_finished(&mut self, scope: &KeyScope, seq: u64) {
        let finished = match self.entries.get(scope) {
            Some(Entry::Done { seq: s, .. } | Entry::Held { seq: s, .. }) => *s == seq,
            _ => false,
        };
        if finished {
            self.take(scope);
        }
    }

    /// Replaces the running entry `id` of `scope` (if still current) with a finished one.
    fn finish(&mut self, scope: &KeyScope, id: u64, entry: impl FnOnce(u64) -> Entry) {
        let current =
            matches!(self.entries.get(scope), Some(Entry::Running { id: i, .. }) if *i == id);
        if !current {
            return;
        }
        self.take(scope);
        self.seq += 1;
        let seq = self.seq;
        let entry = entry(seq);
        self.evict(self.max_entries, self.max_bytes, entry.bytes());
        self.put(scope.clone(), entry);
        self.order
            .push_back((Instant::now() + self.ttl, scope.clone(), seq));
    }
}

impl Ticket {
    /// The lead is about to leave for the CRM, under `reference`: from now on a claim this
    /// replica stops renewing is an unknown outcome, not a free key. Waits (at most the Redis
    /// timeout) until the shared store knows, so no delivery starts unrecorded: a claim another
    /// replica took meanwhile stops the delivery ("in progress": that replica runs the key), and
    /// a Redis that does not answer stops it under `on_backend_error: deny` (nothing was sent;
    /// the key is freed) or, under `local`, lets it go with the keeper recording it as soon as
    /// Redis answers (a lead delivered beats a lead lost).
    pub async fn delivering(&mut self, reference: &str) -> Result<(), AapError> {
        let Some(hold) = &self.hold else {
            return Ok(());
        };
        let state = {
            let mut claims = hold.shared.lock_claims();
            let Some(claim) = claims.get_mut(&hold.key).filter(|c| c.token == hold.token) else {
                return Ok(());
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
        let recorded = hold
            .shared
            .redis
            .renew(&hold.key, &held, hold.shared.lock_ttl, hold.shared.ttl)
            .await;
        match recorded {
            Ok(Renewal::Renewed | Renewal::PutBack) => Ok(()),
            Ok(Renewal::Lost) => {
                tracing::warn!(
                    reference,
                    "idempotency claim lost to another replica before its delivery began; \
                     not delivered here"
                );
                Err(in_progress(IN_PROGRESS_RETRY_AFTER))
            }
            // Logged once per outage by the backend.
            Err(_) => {
                hold.shared.restore.store(true, Ordering::Relaxed);
                match hold.shared.on_backend_error {
                    OnBackendError::Deny => Err(not_registered()),
                    OnBackendError::Local => Ok(()),
                }
            }
        }
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
    pub(super) fn complete_local(mut self, reply: &Reply) {
        if let Some(store) = self.store.take() {
            let bytes = key_bytes(&self.scope) + reply.payload.to_string().len();
            let fingerprint = self.fingerprint;
            store
                .lock()
                .finish(&self.scope, self.id, |seq| Entry::Done {
                    fingerprint,
                    reply: reply.clone(),
                    seq,
                    bytes,
                });
        }
        let _ = self.tx.send(Outcome::Completed(reply.clone()));
    }

    /// Holds the key in this process's store and tells every waiter.
    pub(super) fn hold_local(mut self, reference: &str) {
        if let Some(store) = self.store.take() {
            let bytes = key_bytes(&self.scope) + reference.len();
            let fingerprint = self.fingerprint;
            store
                .lock()
                .finish(&self.scope, self.id, |seq| Entry::Held {
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

pub(super) fn conflict() -> AapError {
    AapError::domain(
        AapCode::IdempotencyConflict,
        "This idempotency_key was already used with a different request; use a new key for a \
         new lead.",
    )
}

/// Redis did not answer while a lead was to be registered (`on_backend_error: deny`).
pub(super) fn not_registered() -> AapError {
    AapError::Domain {
        code: AapCode::InternalError,
        message: "The lead could not be registered right now; retry with the same \
                  idempotency_key."
            .to_owned(),
        details: None,
    }
}

pub(super) fn in_progress(retry_after: Duration) -> AapError {
    AapError::LeadInProgress { retry_after }
}

pub(super) fn held(reference: String) -> AapError {
    AapError::LeadHeld {
        reference,
        retry_after: HELD_RETRY_AFTER,
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
