//! Hot reload: a mapping changed on disk is served without a restart and without a failed
//! request; a broken change is refused and the running configuration keeps serving; SIGHUP
//! reloads the real binary.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aap_sim::Simulators;
use aap_sim::sim::Mode;
use common::process::DemoProcess;
use common::{DemoCopy, Gateway, simulator_vars};
use serde_json::json;

const FACETS: &str = "mappings/demo-toyota/inventory.facets.yaml";
const SEARCH: &str = "mappings/demo-toyota/inventory.search.yaml";

fn is_ok(reply: &common::Reply) -> bool {
    reply.status == 200 && reply.body.get("result").is_some()
}

async fn reloads(gw: &Gateway, result: &str) -> f64 {
    let text = gw.metrics().await;
    let series = format!("aap_gateway_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `probe` until it holds, for at most 10 s.
async fn eventually<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls `dealer.information` and `inventory.search` in a loop on four tasks until stopped;
/// returns (calls, failures).
fn load(gw: &Arc<Gateway>, stop: &Arc<AtomicBool>) -> tokio::task::JoinHandle<(usize, usize)> {
    let (gw, stop) = (Arc::clone(gw), Arc::clone(stop));
    tokio::spawn(async move {
        let calls = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let (gw, stop) = (Arc::clone(&gw), Arc::clone(&stop));
                let (calls, failures) = (Arc::clone(&calls), Arc::clone(&failures));
                tokio::spawn(async move {
                    let data = if i % 2 == 0 {
                        json!({ "type": "dealer.information.request" })
                    } else {
                        json!({ "type": "inventory.search.request", "pagination": { "limit": 3 } })
                    };
                    while !stop.load(Ordering::Relaxed) {
                        let reply = gw.send("/a2a", data.clone()).await;
                        calls.fetch_add(1, Ordering::Relaxed);
                        if !is_ok(&reply) {
                            failures.fetch_add(1, Ordering::Relaxed);
                            eprintln!("failed during reload: {}", reply.text);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.expect("worker");
        }
        (
            calls.load(Ordering::Relaxed),
            failures.load(Ordering::Relaxed),
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mapping_changed_on_disk_is_served_with_no_failed_request() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    // Four workers calling flat out from one client are not what the demo's limit is for.
    files.edit(
        "config/demo.yaml",
        "rate_limit:\n",
        "rate_limit:\n  enabled: false\n",
    );
    let root = files.root().to_path_buf();
    let gw = Arc::new(files.start_reloading(simulator_vars(&sims)).await);
    let facets = json!({ "type": "inventory.facets.request" });
    assert!(is_ok(&gw.send("/a2a", facets.clone()).await));

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = load(&gw, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The dealer stops offering facets: the mapping file goes away.
    std::fs::remove_file(root.join(FACETS)).expect("remove mapping");
    eventually("facets are no longer served", || {
        let (gw, facets) = (Arc::clone(&gw), facets.clone());
        async move {
            let reply = gw.send("/a2a", facets).await;
            reply.body.get("error").is_some() && reply.aap_code() == "UNSUPPORTED_SKILL"
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let (calls, failures) = traffic.await.expect("traffic");
    assert!(calls > 20, "the load really ran: {calls} calls");
    assert_eq!(failures, 0, "no request failed across the reload");
    assert!(reloads(&gw, "ok").await >= 1.0);
    // The card follows the configuration.
    let card = gw.card("/.well-known/agent-card.json").await;
    let skills = common::skill_ids(&card);
    assert!(!skills.contains(&"inventory.facets"), "{skills:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_change_is_refused_and_the_old_configuration_keeps_serving() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    let root = files.root().to_path_buf();
    let gw = files.start_reloading(simulator_vars(&sims)).await;
    let search = json!({ "type": "inventory.search.request", "pagination": { "limit": 2 } });
    let before = gw.send("/a2a", search.clone()).await;
    assert!(is_ok(&before));

    let path = root.join(SEARCH);
    let good = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, good.replace("items: .Items", "items: .Items | ((")).expect("write");
    eventually("the reload is refused", || async {
        reloads(&gw, "error").await >= 1.0
    })
    .await;
    assert_eq!(reloads(&gw, "ok").await, 0.0);
    let after = gw.send("/a2a", search.clone()).await;
    assert!(is_ok(&after), "still served: {}", after.text);
    assert_eq!(after.payload(), before.payload());

    // Fixed: the next change is applied.
    std::fs::write(&path, good).expect("write");
    eventually("the fixed mapping is loaded", || async {
        reloads(&gw, "ok").await >= 1.0
    })
    .await;
    assert!(is_ok(&gw.send("/a2a", search).await));
}

/// API keys in `auth.keys_file` (a mounted secret, in a folder of its own) are re-read when the
/// file changes: a new key is accepted and a removed one refused, without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_api_keys_file_is_picked_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).expect("secrets dir");
    let write_keys = |id: &str, key: &str| {
        let yaml = format!(
            "keys:\n  - {{ id: {id}, sha256: \"{}\" }}\n",
            common::sha256_hex(key)
        );
        std::fs::write(secrets.join("keys.yaml"), yaml).expect("keys file");
    };
    write_keys("first", "key-one");
    let yaml = format!(
        "auth:\n  mode: api_key\n  keys_file: secrets/keys.yaml\ndealers:{}",
        common::profile_dealer("keyed_motors", "Keyed Motors", "")
    );
    let gw = common::start_yaml_reloading(dir, &yaml).await;
    let call = |key: &'static str| {
        let gw = &gw;
        async move {
            let mut headers = common::standard_headers();
            headers.push(("x-api-key", key));
            let body = common::send_message(json!({ "type": "dealer.information.request" }));
            gw.post_raw("/a2a", &headers, body.to_string().into_bytes())
                .await
                .status
        }
    };
    assert_eq!(call("key-one").await, 200);
    assert_eq!(call("key-two").await, 401);
    write_keys("second", "key-two");
    eventually("the new key is accepted", || async {
        call("key-two").await == 200
    })
    .await;
    assert_eq!(call("key-one").await, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_keeps_breakers_and_feed_caches_of_what_did_not_change() {
    let sims = Simulators::start().await.expect("simulators");
    let files = DemoCopy::new();
    let root = files.root().to_path_buf();
    let gw = files.start_reloading(simulator_vars(&sims)).await;
    let search = json!({ "type": "inventory.search.request", "pagination": { "limit": 2 } });
    let honda = "/dealers/demo-honda/a2a";
    let cached = gw.send(honda, search.clone()).await;
    assert!(is_ok(&cached), "{}", cached.text);
    let feed_fetches = sims.feed.received().len();

    // Both sources go down. Toyota's DMS fails until its breaker opens: then a search no
    // longer reaches it.
    sims.feed.set_mode(Mode::Fail, 0);
    sims.dms.set_mode(Mode::Fail, 0);
    common::until_the_dms_breaker_opens(&gw, &sims, "/a2a", &search).await;

    // A change elsewhere: both dealers' upstreams are as they were.
    let facets = root.join(FACETS);
    let text = std::fs::read_to_string(&facets).expect("read");
    std::fs::write(&facets, format!("{text}\n# reviewed\n")).expect("write");
    eventually("the change is applied", || async {
        reloads(&gw, "ok").await >= 1.0
    })
    .await;
    let still = gw.send(honda, search.clone()).await;
    assert!(
        is_ok(&still),
        "the feed's copy is still served: {}",
        still.text
    );
    assert_eq!(still.payload(), cached.payload());
    assert_eq!(
        sims.feed.received().len(),
        feed_fetches,
        "the reload did not fetch the feed again"
    );
    let before = sims.dms.received().len();
    assert!(!is_ok(&gw.send("/a2a", search.clone()).await));
    assert_eq!(
        sims.dms.received().len(),
        before,
        "the DMS's breaker is still open"
    );

    // The DMS's entry changes: a new client, a closed breaker, so the DMS is called again.
    let upstreams = root.join("mappings/demo-toyota/upstreams.yaml");
    let text = std::fs::read_to_string(&upstreams).expect("read");
    assert!(
        text.contains("max_concurrency: 16"),
        "the demo file changed"
    );
    std::fs::write(
        &upstreams,
        text.replacen("max_concurrency: 16", "max_concurrency: 12", 1),
    )
    .expect("write");
    eventually("the second change is applied", || async {
        reloads(&gw, "ok").await >= 2.0
    })
    .await;
    let before = sims.dms.received().len();
    assert!(!is_ok(&gw.send("/a2a", search).await));
    assert!(
        sims.dms.received().len() > before,
        "a changed upstream starts with a closed breaker"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_real_binary() {
    let mut demo = DemoProcess::start(&[]).await;
    let status = Command::new("kill")
        .args(["-HUP", &demo.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let reloaded = |demo: &DemoProcess| {
        demo.log_lines()
            .iter()
            .any(|v| v["message"] == "configuration reloaded" && v["trigger"] == "SIGHUP")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reloaded(&demo) {
        assert!(
            Instant::now() < deadline,
            "no reload logged:\n{}",
            demo.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        demo.child.try_wait().expect("wait").is_none(),
        "still running after SIGHUP"
    );
}
