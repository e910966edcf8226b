//! Idempotency claims shared through a real `redis-server` (each test starts its own; a test
//! returns early, printing why, when the binary is missing): what a replica's claims do when
//! Redis fails, forgets or is taken over at the moments that matter for exactly-once leads
//! (issue 38).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aap_gateway::error::AapError;
use aap_gateway::idempotency::{Claim, ClaimLimits, Idempotency, KeyScope, Ticket};
use aap_gateway::redis_backend::RedisBackend;
use aap_gateway::settings::{OnAmbiguous, OnBackendError};
use common::redis::{Persistence, RedisServer};

const TIMEOUT: Duration = Duration::from_millis(500);
const LOCK: Duration = Duration::from_secs(3);

fn limits(on_ambiguous: OnAmbiguous) -> ClaimLimits {
    ClaimLimits {
        ttl: Duration::from_secs(600),
        max_entries: 1000,
        max_bytes: 1 << 20,
        on_ambiguous,
    }
}

/// One replica's keys, sharing `server` under `prefix`.
fn replica(
    server: &RedisServer,
    prefix: &str,
    on_ambiguous: OnAmbiguous,
    on_error: OnBackendError,
) -> Arc<Idempotency> {
    let redis = RedisBackend::new(&server.url, TIMEOUT, prefix).expect("valid url");
    Arc::new(Idempotency::shared(
        limits(on_ambiguous),
        redis,
        LOCK,
        on_error,
    ))
}

fn scope(key: &str) -> KeyScope {
    KeyScope {
        dealer: "d".into(),
        source: "agent".into(),
        key: key.into(),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(2)
}

async fn fresh(keys: &Idempotency, key: &str, fingerprint: [u8; 32]) -> Box<Ticket> {
    match keys.claim(scope(key), fingerprint, soon()).await {
        Ok(Claim::Fresh(ticket)) => ticket,
        other => panic!("expected a fresh claim, got {other:?}"),
    }
}

/// The Redis key of `key`'s entry under `prefix`.
fn entry(prefix: &str, key: &str) -> String {
    format!("{prefix}idem:{}", scope(key).shared_key())
}

// === item 7: "delivering" is recorded before the lead leaves, or the lead does not leave ===

#[tokio::test]
async fn a_delivery_redis_cannot_record_does_not_start_under_deny() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let keys = replica(&server, "i7d:", OnAmbiguous::Hold, OnBackendError::Deny);
    let mut ticket = fresh(&keys, "k", [1; 32]).await;
    server.stop();
    let refused = ticket.delivering("aap-1").await.unwrap_err();
    assert!(
        matches!(&refused, AapError::Domain { message, .. } if message.contains("registered")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_delivery_redis_cannot_record_goes_under_local() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let keys = replica(&server, "i7l:", OnAmbiguous::Hold, OnBackendError::Local);
    let mut ticket = fresh(&keys, "k", [1; 32]).await;
    server.stop();
    ticket
        .delivering("aap-1")
        .await
        .expect("a lead delivered beats a lead lost");
}

#[tokio::test]
async fn a_claim_taken_over_before_the_delivery_began_stops_it() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keys = replica(&server, "i7t:", OnAmbiguous::Hold, OnBackendError::Local);
    let mut ticket = fresh(&keys, "k", [1; 32]).await;
    // Another replica's claim holds the key now (this one's lease ran out meanwhile).
    let mut conn = server.connect().await;
    let _: () = redis::cmd("HSET")
        .arg(entry("i7t:", "k"))
        .arg("token")
        .arg("someone-else")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    let refused = ticket.delivering("aap-1").await.unwrap_err();
    assert!(
        matches!(refused, AapError::LeadInProgress { .. }),
        "{refused:?}"
    );
}

// === item 5: the keeper renews every claim, whatever one renewal does ===

#[tokio::test]
async fn one_failing_renewal_does_not_let_the_other_claims_lapse() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lock = Duration::from_millis(900);
    let redis = RedisBackend::new(&server.url, TIMEOUT, "i5:").expect("valid url");
    let keys = Arc::new(Idempotency::shared(
        limits(OnAmbiguous::Hold),
        redis,
        lock,
        OnBackendError::Local,
    ));
    let mut tickets = Vec::new();
    for n in 0..20 {
        tickets.push(fresh(&keys, &format!("k{n}"), [1; 32]).await);
    }
    // One entry Redis cannot renew (a value of the wrong type: every renewal of it errors).
    let mut conn = server.connect().await;
    let broken = entry("i5:", "k7");
    let _: () = redis::cmd("DEL")
        .arg(&broken)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let _: () = redis::cmd("SET")
        .arg(&broken)
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let keeper = tokio::spawn(Arc::clone(&keys).keep_shared());
    // Three leases long: without renewals every claim would have lapsed twice.
    tokio::time::sleep(lock * 3).await;
    let other = replica(&server, "i5:", OnAmbiguous::Hold, OnBackendError::Local);
    for n in (0..20).filter(|n| *n != 7) {
        let until = Instant::now() + Duration::from_millis(50);
        let claim = other.claim(scope(&format!("k{n}")), [1; 32], until).await;
        assert!(
            matches!(claim, Err(AapError::LeadInProgress { .. })),
            "k{n} lapsed while its replica lived: {claim:?}"
        );
    }
    keeper.abort();
    drop(tickets);
}

// === item 4: a replica that starts fresh against a restarted Redis does not skip recovery ===

#[tokio::test]
async fn a_fresh_replica_first_at_a_restarted_redis_does_not_skip_the_recovery_window() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let old = replica(&server, "i4:", OnAmbiguous::Hold, OnBackendError::Local);
    let ticket = fresh(&old, "before", [1; 32]).await; // `old` knows Redis's epoch now
    drop(ticket);
    // Redis comes back empty (a restart without persistence, a failover to an empty replica).
    let mut conn = server.connect().await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    // A replica started just now gets there first: it cannot tell, and makes the new epoch.
    let new = replica(&server, "i4:", OnAmbiguous::Hold, OnBackendError::Local);
    let _first = fresh(&new, "first-after", [1; 32]).await;
    // The replica that remembers the lost data finds a young epoch: recovery starts, for all.
    let until = Instant::now() + Duration::from_millis(100);
    let claim = old.claim(scope("o1"), [1; 32], until).await;
    assert!(
        matches!(claim, Err(AapError::LeadInProgress { .. })),
        "{claim:?}"
    );
    let claim = new.claim(scope("n2"), [1; 32], until).await;
    assert!(
        matches!(claim, Err(AapError::LeadInProgress { .. })),
        "{claim:?}"
    );
}

// === item 3: a Redis that restarts from an older snapshot (or fails over to a replica behind) ===

/// A buyer's retries of `key` until one is not "in progress" (a recovery window), at most
/// `within`.
async fn settled(keys: &Idempotency, key: &str, within: Duration) -> Result<Claim, AapError> {
    let deadline = Instant::now() + within;
    loop {
        let until = Instant::now() + Duration::from_millis(100);
        match keys.claim(scope(key), [1; 32], until).await {
            Err(AapError::LeadInProgress { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

async fn restored_from_an_older_snapshot(on_ambiguous: OnAmbiguous, prefix: &str) {
    let Some(mut server) = RedisServer::start_persistent(Persistence::Snapshot) else {
        return;
    };
    let lock = Duration::from_millis(600);
    let redis = RedisBackend::new(&server.url, TIMEOUT, prefix).expect("valid url");
    let keys = Arc::new(Idempotency::shared(
        limits(on_ambiguous),
        redis,
        lock,
        OnBackendError::Local,
    ));
    let keeper = tokio::spawn(Arc::clone(&keys).keep_shared());
    let mut ticket = fresh(&keys, "delivered", [1; 32]).await;
    ticket.delivering("aap-1").await.expect("recorded");
    // The snapshot is taken while the lead is on its way to the CRM...
    let mut conn = server.connect().await;
    let _: () = redis::cmd("SAVE")
        .query_async(&mut conn)
        .await
        .expect("SAVE");
    // ...which takes it; the reply is stored, in Redis too, after the snapshot.
    let reply = aap_gateway::protocol::Reply::new(
        aap_gateway::protocol::Skill::LeadSubmit,
        serde_json::json!({ "lead_id": "L-1", "status": "received" }),
        None,
    );
    ticket.complete(&reply).await;
    // Redis is killed and comes back from that snapshot: the delivered lead is "in flight,
    // delivering" again, and its lease runs out while nobody renews it.
    server.restart();
    let mut conn = server.connect().await;
    let state: Option<String> = redis::cmd("HGET")
        .arg(entry(prefix, "delivered"))
        .arg("state")
        .query_async(&mut conn)
        .await
        .expect("HGET");
    assert_eq!(
        state.as_deref(),
        Some("inflight"),
        "the snapshot's stale claim"
    );
    tokio::time::sleep(lock).await;
    // The buyer retries through another replica: it gets the lead's reply — neither a resend
    // (a duplicate at a CRM that does not de-duplicate), nor "held", nor "in progress" forever.
    let other = replica(&server, prefix, on_ambiguous, OnBackendError::Local);
    let claim = settled(&other, "delivered", lock * 6).await;
    assert!(
        matches!(&claim, Ok(Claim::Replay(r)) if r.payload.to_value()["data"]["lead_id"] == "L-1"),
        "{claim:?}"
    );
    keeper.abort();
}

#[tokio::test]
async fn a_redis_restored_from_an_older_snapshot_does_not_resend_a_delivered_lead() {
    restored_from_an_older_snapshot(OnAmbiguous::Resend, "i3r:").await;
}

#[tokio::test]
async fn a_redis_restored_from_an_older_snapshot_does_not_hold_a_delivered_lead() {
    restored_from_an_older_snapshot(OnAmbiguous::Hold, "i3h:").await;
}

/// A Redis whose ACL refuses `INFO` to the gateway's user (`-@dangerous` is common): claims
/// still work, only the restart check is off (the keeper warns once).
#[tokio::test]
async fn a_redis_refusing_info_still_serves_claims() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut conn = server.connect().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "gateway", "on", ">secret", "~*", "+@all", "-info",
        ])
        .query_async(&mut conn)
        .await
        .expect("ACL SETUSER");
    let url = server.url.replace("redis://", "redis://gateway:secret@");
    let redis = RedisBackend::new(&url, TIMEOUT, "acl:").expect("valid url");
    let (_, run_known) = redis
        .epoch("", Duration::from_secs(1))
        .await
        .expect("the epoch without INFO");
    assert!(!run_known);
    let keys = Arc::new(Idempotency::shared(
        limits(OnAmbiguous::Hold),
        redis,
        LOCK,
        OnBackendError::Deny,
    ));
    let ticket = fresh(&keys, "k", [1; 32]).await;
    drop(ticket);
}

// === a failover to a replica that lost the last writes (tests/lead_proof.rs has it under load) ===

/// A replica of the gateway with a keeper, reaching Redis at `url` (a relay), 600 ms leases.
fn keeping_replica(
    url: &str,
    prefix: &str,
    on_ambiguous: OnAmbiguous,
) -> (Arc<Idempotency>, tokio::task::JoinHandle<()>) {
    let redis = RedisBackend::new(url, TIMEOUT, prefix).expect("valid url");
    let keys = Arc::new(Idempotency::shared(
        limits(on_ambiguous),
        redis,
        Duration::from_millis(600),
        OnBackendError::Local,
    ));
    let keeper = tokio::spawn(Arc::clone(&keys).keep_shared());
    (keys, keeper)
}

/// A lead is claimed and its outcome recorded (delivered under `resend`, unknown and held under
/// `hold`) while the standby is detached; the primary is killed, the relay switched to the
/// standby, which has no trace of the lead. The buyer's retry through another replica must get
/// the recorded outcome — not a fresh claim, which would deliver the lead a second time.
async fn failed_over_to_a_replica_behind(on_ambiguous: OnAmbiguous, prefix: &str) {
    let Some(mut primary) = RedisServer::start_primary() else {
        return;
    };
    let Some(standby) = RedisServer::start_replica_of(&primary) else {
        return;
    };
    let relay = common::redis::Relay::start(primary.port()).await;
    let (first, keeper) = keeping_replica(&relay.url(), prefix, on_ambiguous);
    drop(fresh(&first, "earlier", [1; 32]).await); // the epoch, on the standby too
    standby.wait_caught_up(&primary);
    assert_eq!(standby.command(&["REPLICAOF", "NO", "ONE"]), "OK");

    let mut ticket = fresh(&first, "lead", [1; 32]).await;
    ticket.delivering("aap-lead").await.expect("recorded");
    match on_ambiguous {
        OnAmbiguous::Resend => {
            let reply = aap_gateway::protocol::Reply::new(
                aap_gateway::protocol::Skill::LeadSubmit,
                serde_json::json!({ "lead_id": "L-1", "status": "received" }),
                None,
            );
            ticket.complete(&reply).await;
        }
        OnAmbiguous::Hold => {
            assert!(ticket.unknown("aap-lead").await.is_some(), "held");
        }
    }
    assert!(
        primary.replication_offset() > standby.replication_offset(),
        "the standby lacks the last writes"
    );
    primary.stop();
    relay.switch(standby.port());
    assert_eq!(
        standby.command(&["EXISTS", &entry(prefix, "lead")]),
        "0",
        "the new primary has no trace of the lead"
    );

    let (other, other_keeper) = keeping_replica(&relay.url(), prefix, on_ambiguous);
    let claim = settled(&other, "lead", Duration::from_secs(4)).await;
    match on_ambiguous {
        OnAmbiguous::Resend => assert!(
            matches!(&claim, Ok(Claim::Replay(r)) if r.payload.to_value()["data"]["lead_id"] == "L-1"),
            "{claim:?}"
        ),
        OnAmbiguous::Hold => assert!(
            matches!(&claim, Err(AapError::LeadHeld { .. })),
            "{claim:?}"
        ),
    }
    keeper.abort();
    other_keeper.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_a_replica_behind_does_not_resend_a_delivered_lead() {
    failed_over_to_a_replica_behind(OnAmbiguous::Resend, "fo-r:").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_a_replica_behind_does_not_send_a_held_lead() {
    failed_over_to_a_replica_behind(OnAmbiguous::Hold, "fo-h:").await;
}
