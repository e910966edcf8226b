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
//! {prefix}idem-epoch-young string  the epoch was made less than a lease ago  expires after a lease
//! {prefix}idem-run     string  the run_id of the Redis process that last claimed; another =
//!                              it restarted, maybe from an older snapshot   never expires
//! ```
//!
//! ## Files
//!
//! - `types`: what the calls take and answer, and the reserve script's reply decoded;
//! - `scripts`: the Lua scripts, one per decision;
//! - `connection`: [`RedisBackend`] itself — the URL, the lazy connection, the timeout, outage
//!   logs;
//! - `commands`: the calls (GCRA, idempotency claims, epoch, seed, ping).

mod commands;
mod connection;
mod scripts;
mod types;

pub use connection::RedisBackend;
pub use types::{BackendError, Claiming, HeldClaim, Renewal, Reservation, Seed};
