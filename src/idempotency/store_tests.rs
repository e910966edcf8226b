//! The in-process store's bounds, expiry and claims.

use super::*;
use crate::protocol::Skill;
use serde_json::json;
use std::sync::Arc;

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

fn scope(key: &str) -> KeyScope {
    KeyScope {
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
        Claim::Replay(r) => r.payload.to_value()["data"]["lead_id"]
            .as_str()
            .map(str::to_owned),
        Claim::Fresh(_) => None,
    }
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

/// Issue 38 item 8: the bounds drop delivered replies before a key held for reconciliation.
#[tokio::test]
async fn held_keys_outlive_the_replies_evicted_around_them() {
    let store = Arc::new(Store::new(Duration::from_secs(60), 3));
    let ticket = fresh(&store, "held", OnAmbiguous::Hold).await;
    assert!(ticket.unknown("aap-held").await.is_some());
    for i in 0..10 {
        let t = fresh(&store, &format!("k{i}"), OnAmbiguous::Hold).await;
        t.complete(&reply(&format!("L-{i}"))).await;
        assert!(store.len() <= 3, "{} entries", store.len());
    }
    let err = claim(&store, "held", OnAmbiguous::Hold).await.unwrap_err();
    assert!(matches!(err, AapError::LeadHeld { .. }), "{err:?}");
    // Only held keys left: the oldest goes, so the store stays bounded.
    let store = Arc::new(Store::new(Duration::from_secs(60), 2));
    for key in ["h0", "h1", "h2"] {
        let t = fresh(&store, key, OnAmbiguous::Hold).await;
        assert!(t.unknown(key).await.is_some());
        assert!(store.len() <= 2, "{} entries", store.len());
    }
    assert!(matches!(
        claim(&store, "h2", OnAmbiguous::Hold).await,
        Err(AapError::LeadHeld { .. })
    ));
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
