//! This replica's view of the keys in Redis: the epoch it last saw, the claims it holds (their
//! leases renewed by the keeper), and a claim's [`Hold`] on a ticket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::redis_backend::RedisBackend;
use crate::settings::OnBackendError;

#[derive(Debug)]
pub(super) struct ClaimsShared {
    pub(super) redis: RedisBackend,
    pub(super) lock_ttl: Duration,
    pub(super) ttl: Duration,
    pub(super) on_backend_error: OnBackendError,
    pub(super) hold_orphans: bool,
    /// Redis's epoch as this replica last saw it (`""`: not yet).
    pub(super) epoch: Mutex<String>,
    /// The claims this replica holds, by shared key: their leases are renewed by the keeper.
    pub(super) claims: Mutex<HashMap<String, ClaimState>>,
    /// Redis may lack outcomes this replica knows (it restarted, or was down): put them back.
    pub(super) restore: AtomicBool,
    /// Redis's epoch changed: the next put-back also replaces "in flight" claims Redis holds for
    /// keys this replica knows the outcome of (a Redis restored from a snapshot brings back
    /// claims of leads since delivered).
    pub(super) restore_over: AtomicBool,
    /// Redis refused this replica its `run_id` (warned once).
    pub(super) run_unknown: AtomicBool,
    pub(super) wake: Notify,
}

#[derive(Debug, Clone)]
pub(super) struct ClaimState {
    pub(super) token: String,
    pub(super) fingerprint: String,
    pub(super) reference: String,
    pub(super) delivering: bool,
}

impl ClaimsShared {
    pub(super) fn epoch(&self) -> String {
        self.epoch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Redis's epoch changed: it lost its data, restarted (it may hold a snapshot older than
    /// what this replica saw), or this replica is new. Put back what this replica knows, now,
    /// over stale claims too.
    pub(super) fn adopt(&self, epoch: String) {
        let mut known = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        if *known != epoch {
            if !known.is_empty() {
                tracing::warn!(
                    "idempotency: Redis lost its data or restarted (new epoch); no new key is \
                     handed out while the replicas put back their claims and outcomes"
                );
            }
            *known = epoch;
            self.restore_over.store(true, Ordering::Relaxed);
            self.restore.store(true, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    /// How long free keys are refused after Redis lost its data: every replica's keeper runs
    /// three times meanwhile.
    pub(super) fn recovery(&self) -> Duration {
        self.lock_ttl
    }

    pub(super) fn lock_claims(&self) -> MutexGuard<'_, HashMap<String, ClaimState>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A key claimed in the shared store while this replica works on the lead.
#[derive(Debug)]
pub(super) struct Hold {
    pub(super) shared: Arc<ClaimsShared>,
    pub(super) key: String,
    pub(super) token: String,
    pub(super) fingerprint: String,
}

impl Hold {
    /// No longer renewed.
    pub(super) fn forget(&self) {
        let mut claims = self.shared.lock_claims();
        if claims.get(&self.key).is_some_and(|c| c.token == self.token) {
            claims.remove(&self.key);
        }
    }
}
