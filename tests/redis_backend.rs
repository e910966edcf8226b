//! The Redis backend against a real `redis-server` (each test starts its own; a test returns
//! early, printing why, when the binary is missing): GCRA accuracy and sharing between replicas,
//! the idempotency reservation lifecycle, key expiry, and behaviour through outages.

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aap_gateway::redis_backend::{
    BackendError, Claiming, HeldClaim, RedisBackend, Renewal, Reservation, Seed,
};
use common::redis::RedisServer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Generous: these tests are about results, not speed (a busy 2-core CI box).
const TIMEOUT: Duration = Duration::from_secs(2);
/// The outage tests' timeout, and the slack a failing call may take beyond it.
const SHORT: Duration = Duration::from_millis(200);
const SLACK: Duration = Duration::from_millis(300);

const FP_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const FP_B: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const REPLY: &str = "{\"lead_id\":\"L-1\",\"note\":\"Grüße\\nline two\"}";
const LOCK: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(60);

fn backend(server: &RedisServer, prefix: &str) -> RedisBackend {
    RedisBackend::new(&server.url, TIMEOUT, prefix).expect("valid url")
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// How long free keys stay refused after Redis was found empty (these tests' choice).
const RECOVERY: Duration = Duration::from_millis(400);

fn terms(epoch: &str, lease: Duration) -> Claiming<'_> {
    Claiming {
        lease,
        ttl: TTL,
        epoch,
        recovery: RECOVERY,
        hold_orphans: false,
    }
}

/// A claim by a replica that knows Redis's current epoch (learnt first, as the keeper does).
async fn reserve(
    backend: &RedisBackend,
    key: &str,
    fingerprint: &str,
    lease: Duration,
) -> Result<Reservation, BackendError> {
    let (epoch, _) = backend.epoch("", RECOVERY).await?;
    backend
        .reserve(key, fingerprint, &terms(&epoch, lease))
        .await
}

async fn reserved(backend: &RedisBackend, key: &str, fingerprint: &str, lock: Duration) -> String {
    match reserve(backend, key, fingerprint, lock)
        .await
        .expect("reserve")
    {
        Reservation::Reserved { token, .. } => token,
        other => panic!("expected Reserved, got {other:?}"),
    }
}

fn in_flight(reservation: &Reservation, fingerprint: &str) -> bool {
    matches!(reservation, Reservation::InFlight { fingerprint: f, .. } if f == fingerprint)
}

// === GCRA ===

#[tokio::test]
async fn gcra_admits_the_burst_then_refuses_until_retry_after() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limiter = backend(&server, "t:");
    let interval = Duration::from_millis(200);

    for i in 0..3 {
        assert_eq!(
            limiter.gcra("k", interval, 3).await.unwrap(),
            None,
            "request {i}"
        );
    }
    let retry_after = limiter
        .gcra("k", interval, 3)
        .await
        .unwrap()
        .expect("4th refused");
    assert!(
        retry_after <= interval && retry_after >= interval - Duration::from_millis(30),
        "retry_after {retry_after:?}"
    );
    // A refusal records nothing: asking again does not push the next slot further out.
    let again = limiter
        .gcra("k", interval, 3)
        .await
        .unwrap()
        .expect("still refused");
    assert!(again <= retry_after, "{again:?} > {retry_after:?}");

    tokio::time::sleep(again).await;
    assert_eq!(
        limiter.gcra("k", interval, 3).await.unwrap(),
        None,
        "admitted after waiting"
    );
    let next = limiter
        .gcra("k", interval, 3)
        .await
        .unwrap()
        .expect("one slot only");
    assert!(next > interval - Duration::from_millis(30), "{next:?}");
}

#[tokio::test]
async fn gcra_admits_burst_plus_rate_over_a_second() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limiter = backend(&server, "t:");
    let (interval, burst) = (Duration::from_millis(50), 5);

    let first = Instant::now();
    let mut last = first;
    let mut admitted = 0;
    while first.elapsed() < Duration::from_secs(1) {
        last = Instant::now();
        if limiter.gcra("k", interval, burst).await.unwrap().is_none() {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The server saw the calls spread over about `last - first`.
    let expected = f64::from(burst) + (last - first).as_secs_f64() / interval.as_secs_f64();
    assert!(
        (f64::from(admitted) - expected).abs() <= 1.0,
        "admitted {admitted}, expected {expected:.2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_replicas_share_one_quota_under_concurrent_load() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let replicas = [backend(&server, "shared:"), backend(&server, "shared:")];
    // Nothing refills during the test: exactly one burst may get through.
    let (interval, burst) = (Duration::from_secs(60), 25);

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let limiter = replicas[i % 2].clone();
        tasks.spawn(async move { limiter.gcra("quota", interval, burst).await });
    }
    let mut admitted = 0;
    while let Some(outcome) = tasks.join_next().await {
        match outcome.unwrap().unwrap() {
            None => admitted += 1,
            Some(retry_after) => assert!(retry_after > Duration::ZERO),
        }
    }
    assert_eq!(admitted, burst);

    // Another prefix is another namespace.
    let other = backend(&server, "other:");
    assert_eq!(other.gcra("quota", interval, burst).await.unwrap(), None);
}

#[tokio::test]
async fn gcra_key_expires_once_idle() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limiter = backend(&server, "t:");
    let mut conn = server.connect().await;
    let interval = Duration::from_millis(100);

    for _ in 0..3 {
        assert_eq!(limiter.gcra("idle", interval, 3).await.unwrap(), None);
    }
    // The key lives as long as the bucket takes to drain: 3 × 100 ms.
    let ttl = pttl(&mut conn, "t:rl:idle").await;
    assert!((200..=300).contains(&ttl), "PTTL {ttl}");

    let deadline = Instant::now() + Duration::from_secs(2);
    while pttl(&mut conn, "t:rl:idle").await != -2 {
        assert!(Instant::now() < deadline, "the key did not expire");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Drained: a full burst again.
    for _ in 0..3 {
        assert_eq!(limiter.gcra("idle", interval, 3).await.unwrap(), None);
    }
}

// === Idempotency ===

#[tokio::test]
async fn reserve_then_in_flight_then_done_with_the_reply() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    let replica = backend(&server, "t:");

    let token = reserved(&store, "k", FP_A, LOCK).await;
    // A duplicate (from any replica) sees the running call and its fingerprint.
    assert!(in_flight(
        &reserve(&replica, "k", FP_B, LOCK).await.unwrap(),
        FP_A
    ));

    assert!(store.complete("k", &token, FP_A, REPLY, TTL).await.unwrap());
    let done = Reservation::Done {
        fingerprint: FP_A.to_owned(),
        reply: REPLY.to_owned(),
    };
    assert_eq!(reserve(&replica, "k", FP_A, LOCK).await.unwrap(), done);
    // Another payload gets the stored fingerprint back; comparing is the caller's job.
    assert_eq!(reserve(&replica, "k", FP_B, LOCK).await.unwrap(), done);

    // The reply is kept for the reply TTL, not the lock's.
    let ttl = pttl(&mut server.connect().await, "t:idem:k").await;
    assert!(ttl > 55_000 && ttl <= 60_000, "PTTL {ttl}");
    // The token is spent: no second completion.
    assert!(
        !store
            .complete("k", &token, FP_A, "other", TTL)
            .await
            .unwrap()
    );
    assert_eq!(reserve(&store, "k", FP_A, LOCK).await.unwrap(), done);
}

#[tokio::test]
async fn a_wrong_token_can_neither_complete_nor_release() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    let token = reserved(&store, "k", FP_A, LOCK).await;

    assert!(
        !store
            .complete("k", "not-the-token", FP_A, REPLY, TTL)
            .await
            .unwrap()
    );
    store.release("k", "not-the-token").await.unwrap();
    assert!(in_flight(
        &reserve(&store, "k", FP_A, LOCK).await.unwrap(),
        FP_A
    ));
    // Nor can a token from another key.
    let other = reserved(&store, "other", FP_A, LOCK).await;
    assert!(!store.complete("k", &other, FP_A, REPLY, TTL).await.unwrap());
    store.release("k", &other).await.unwrap();
    assert!(in_flight(
        &reserve(&store, "k", FP_A, LOCK).await.unwrap(),
        FP_A
    ));

    // Once done, releasing with the spent token keeps the reply.
    assert!(store.complete("k", &token, FP_A, REPLY, TTL).await.unwrap());
    store.release("k", &token).await.unwrap();
    assert!(matches!(
        reserve(&store, "k", FP_A, LOCK).await.unwrap(),
        Reservation::Done { .. }
    ));
}

#[tokio::test]
async fn release_frees_the_key() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    let first = reserved(&store, "k", FP_A, LOCK).await;
    store.release("k", &first).await.unwrap();
    assert_eq!(
        pttl(&mut server.connect().await, "t:idem:k").await,
        -2,
        "the entry is gone"
    );

    let second = reserved(&store, "k", FP_B, LOCK).await;
    assert_ne!(first, second, "every reservation gets its own token");
    assert!(!store.complete("k", &first, FP_A, REPLY, TTL).await.unwrap());
    assert!(
        store
            .complete("k", &second, FP_B, REPLY, TTL)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn an_expired_lock_frees_the_key_and_voids_its_token() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    // The replica holding this reservation "crashes".
    let crashed = reserved(&store, "k", FP_A, Duration::from_millis(150)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let fresh = reserved(&store, "k", FP_A, LOCK).await;
    // If the first replica was only slow, its late result must not touch the new reservation.
    assert!(
        !store
            .complete("k", &crashed, FP_A, "late", TTL)
            .await
            .unwrap()
    );
    store.release("k", &crashed).await.unwrap();
    assert!(in_flight(
        &reserve(&store, "k", FP_A, LOCK).await.unwrap(),
        FP_A
    ));
    assert!(store.complete("k", &fresh, FP_A, REPLY, TTL).await.unwrap());
}

/// A replica's claim, as its keeper renews it.
fn held<'a>(token: &'a str, delivering: bool) -> HeldClaim<'a> {
    HeldClaim {
        token,
        fingerprint: FP_A,
        reference: "aap-ref-1",
        delivering,
    }
}

#[tokio::test]
async fn a_renewed_lease_holds_and_an_unrenewed_one_runs_out() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    let lease = Duration::from_millis(300);
    let token = reserved(&store, "k", FP_A, lease).await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let renewed = store.renew("k", &held(&token, false), lease, TTL).await;
        assert_eq!(renewed.unwrap(), Renewal::Renewed);
    }
    // 600 ms after the claim, still held: the renewals count, not the first lease.
    assert!(in_flight(
        &reserve(&store, "k", FP_A, lease).await.unwrap(),
        FP_A
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Not renewed and not yet delivering: the key is simply free again.
    let other = reserve(&store, "k", FP_A, lease).await.unwrap();
    assert!(
        matches!(other, Reservation::Reserved { orphan: None, .. }),
        "{other:?}"
    );
    // The first claim lost the key for good.
    let late = store.renew("k", &held(&token, false), lease, TTL).await;
    assert_eq!(late.unwrap(), Renewal::Lost);
}

#[tokio::test]
async fn a_claim_that_ran_out_mid_delivery_is_an_unknown_outcome() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = backend(&server, "t:");
    let lease = Duration::from_millis(150);
    for key in ["resend", "hold"] {
        let token = reserved(&store, key, FP_A, lease).await;
        let delivering = store.renew(key, &held(&token, true), lease, TTL).await;
        assert_eq!(delivering.unwrap(), Renewal::Renewed);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (epoch, _) = store.epoch("", RECOVERY).await.unwrap();
    // `resend`: taken over, the dead replica's reference handed on for the log.
    let taken = store
        .reserve("resend", FP_A, &terms(&epoch, LOCK))
        .await
        .unwrap();
    assert!(
        matches!(&taken, Reservation::Reserved { orphan: Some(r), .. } if r == "aap-ref-1"),
        "{taken:?}"
    );
    // `hold`: held for reconciliation, once and for every later claim.
    let holding = Claiming {
        hold_orphans: true,
        ..terms(&epoch, LOCK)
    };
    let first = store.reserve("hold", FP_A, &holding).await.unwrap();
    assert!(
        matches!(&first, Reservation::Held { reference, orphan: true, .. } if reference == "aap-ref-1"),
        "{first:?}"
    );
    let again = store.reserve("hold", FP_A, &holding).await.unwrap();
    assert!(
        matches!(again, Reservation::Held { orphan: false, .. }),
        "{again:?}"
    );
}

#[tokio::test]
async fn after_redis_lost_its_data_free_keys_wait_while_claims_and_outcomes_are_put_back() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let a = backend(&server, "t:");
    let b = backend(&server, "t:");
    let (epoch, _) = a.epoch("", RECOVERY).await.unwrap();
    let running = reserved(&a, "running", FP_A, LOCK).await;

    server.restart(); // empty
    // B knew the old epoch: the key it asks for is not handed out, it learns the new epoch ...
    let mut found = b.reserve("done", FP_A, &terms(&epoch, LOCK)).await;
    for _ in 0..20 {
        if found.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        found = b.reserve("done", FP_A, &terms(&epoch, LOCK)).await;
    }
    let Ok(Reservation::Epoch(current)) = found else {
        panic!("expected the new epoch, got {found:?}");
    };
    assert_ne!(current, epoch);
    // ... and with it hears that Redis is recovering.
    let recovering = b.reserve("done", FP_A, &terms(&current, LOCK)).await;
    assert!(
        matches!(recovering, Ok(Reservation::Recovering { .. })),
        "{recovering:?}"
    );
    // Meanwhile A (once its connection, dropped by the restart, is made anew) puts back its
    // running claim and an outcome it knows.
    while a.ping().await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let put_back = a.renew("running", &held(&running, true), LOCK, TTL).await;
    assert_eq!(put_back.unwrap(), Renewal::PutBack);
    let seed = Seed::Done {
        fingerprint: FP_A.to_owned(),
        reply: REPLY.to_owned(),
    };
    let written = a
        .seed(
            &[
                ("done".to_owned(), seed.clone(), TTL),
                ("running".to_owned(), seed, TTL),
            ],
            false,
        )
        .await
        .unwrap();
    assert_eq!(written, 1, "a key Redis holds is left alone");
    tokio::time::sleep(RECOVERY).await;
    assert!(matches!(
        b.reserve("done", FP_A, &terms(&current, LOCK))
            .await
            .unwrap(),
        Reservation::Done { .. }
    ));
    assert!(in_flight(
        &b.reserve("running", FP_A, &terms(&current, LOCK))
            .await
            .unwrap(),
        FP_A
    ));
}

// === Outages ===

#[tokio::test]
async fn an_outage_fails_every_call_within_the_timeout_and_restart_recovers() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let shared = RedisBackend::new(&server.url, SHORT, "t:").unwrap();
    shared.ping().await.unwrap();
    assert_eq!(shared.gcra("k", SHORT, 1).await.unwrap(), None);

    server.stop();
    // Repeatedly: failures must not pile up into a hang.
    for _ in 0..3 {
        fails_fast("ping", shared.ping()).await;
        fails_fast("gcra", shared.gcra("k", SHORT, 1)).await;
        fails_fast("reserve", reserve(&shared, "k", FP_A, LOCK)).await;
        fails_fast("complete", shared.complete("k", "t", FP_A, REPLY, TTL)).await;
        fails_fast("release", shared.release("k", "t")).await;
    }

    // The same backend finds the restarted (empty) server by itself.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(error) = shared.ping().await {
        assert!(
            Instant::now() < deadline,
            "no reconnect after restart: {error}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The restart flushed the script cache too: EVALSHA must reload the scripts.
    assert_eq!(shared.gcra("k", SHORT, 1).await.unwrap(), None);
    let token = reserved(&shared, "k", FP_A, LOCK).await;
    assert!(
        shared
            .complete("k", &token, FP_A, REPLY, TTL)
            .await
            .unwrap()
    );
}

async fn fails_fast<T: std::fmt::Debug>(
    call: &str,
    outcome: impl Future<Output = Result<T, BackendError>>,
) {
    let started = Instant::now();
    let outcome = outcome.await;
    let took = started.elapsed();
    assert!(
        matches!(
            outcome,
            Err(BackendError::Unavailable(_) | BackendError::Timeout(_))
        ),
        "{call}: {outcome:?}"
    );
    assert!(took < SHORT + SLACK, "{call} took {took:?}");
}

#[tokio::test]
async fn a_silently_dead_connection_is_replaced() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let proxy = FreezingProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port()))).await;
    let shared = RedisBackend::new(&format!("redis://{}", proxy.addr), SHORT, "t:").unwrap();
    shared.ping().await.unwrap();

    // The peer is gone without a reset: nothing answers and no error ever arrives.
    proxy.freeze();
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = shared.ping().await;
        assert!(
            matches!(outcome, Err(BackendError::Timeout(_))),
            "{outcome:?}"
        );
        assert!(
            started.elapsed() < SHORT + SLACK,
            "took {:?}",
            started.elapsed()
        );
    }
    // After three timeouts in a row the backend dials again.
    shared.ping().await.expect("a fresh connection");
    assert_eq!(shared.gcra("k", SHORT, 1).await.unwrap(), None);
}

/// A TCP proxy whose open connections can be frozen: bytes stop flowing both ways but the
/// sockets stay open, as when a peer vanishes without a reset. New connections still work.
struct FreezingProxy {
    addr: SocketAddr,
    epoch: watch::Sender<u64>,
}

impl FreezingProxy {
    async fn start(upstream: SocketAddr) -> FreezingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (epoch, epochs) = watch::channel(0_u64);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut frozen = epochs.clone();
                let born = *frozen.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let freeze = async move {
                        let _ = frozen.wait_for(|epoch| *epoch > born).await;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = freeze => std::future::pending::<()>().await,
                    }
                });
            }
        });
        FreezingProxy { addr, epoch }
    }

    /// Freezes every connection open now.
    fn freeze(&self) {
        self.epoch.send_modify(|epoch| *epoch += 1);
    }
}

// === Latency (not a benchmark: prints what one call costs on this machine) ===

#[tokio::test]
#[ignore = "prints latencies; run with --ignored --nocapture"]
async fn sequential_call_latency() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let shared = backend(&server, "t:");
    shared.ping().await.unwrap();
    const N: u32 = 1000;

    let started = Instant::now();
    for _ in 0..N {
        shared
            .gcra("k", Duration::from_micros(1), 1000)
            .await
            .unwrap();
    }
    eprintln!("gcra: {:?} per call", started.elapsed() / N);

    let started = Instant::now();
    for i in 0..N {
        let key = format!("k{i}");
        let token = reserved(&shared, &key, FP_A, LOCK).await;
        shared
            .complete(&key, &token, FP_A, REPLY, TTL)
            .await
            .unwrap();
    }
    eprintln!("reserve + complete: {:?} per pair", started.elapsed() / N);

    let started = Instant::now();
    for _ in 0..N {
        shared.ping().await.unwrap();
    }
    eprintln!("ping: {:?} per call", started.elapsed() / N);
}

#[test]
fn backend_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let shared = RedisBackend::new("redis://127.0.0.1:1", TIMEOUT, "t:").unwrap();
    send(&shared.gcra("k", TIMEOUT, 1));
    let claiming = terms("", LOCK);
    send(&shared.reserve("k", FP_A, &claiming));
    send(&shared.complete("k", "t", FP_A, REPLY, TTL));
    send(&shared.release("k", "t"));
    send(&shared.ping());
}
