//! Idempotent `lead.submit` (docs/protocol.md §Idempotency): a buyer that retries with the same
//! `idempotency_key` gets the first reply again, never a second delivery.
//!
//! - **KeyScope**: a key belongs to one dealer and one caller (the API key when auth is on, else
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
//!   outage is logged when it starts and ends ([`crate::redis_backend::RedisBackend::watch`]), never per call.
//!
//! The jobs, one a file (each uses only those above it):
//!
//! - `scope`: what a key is (its [`KeyScope`]) and the request's [`Fingerprint`];
//! - `shared`: this replica's view of the keys in Redis (epoch, claims and their leases);
//! - `store`: the in-process [`Store`] and the [`Ticket`] of a fresh claim;
//! - `claims`: [`Idempotency`], the store plus Redis when replicas share keys, and its keeper.

mod claims;
mod scope;
mod shared;
mod store;

pub use claims::{ClaimLimits, Counters, Idempotency};
pub use scope::{Fingerprint, KeyScope, fingerprint, hex, key_owner};
pub use store::{Claim, HELD_RETRY_AFTER, IN_PROGRESS_RETRY_AFTER, Store, Ticket};
