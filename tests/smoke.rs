mod common;

use serde_json::json;

#[tokio::test]
async fn demo_serves_dealer_information_for_both_dealers() {
    let gw = common::demo().await;
    for path in ["/a2a", "/dealers/demo-honda/a2a"] {
        let reply = gw
            .send(path, json!({"type": "dealer.information.request"}))
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.payload()["type"],
            "dealer.information.response",
            "{}",
            reply.text
        );
    }
}

/// The request lines are written in batches (`telemetry::batch`): a line reaches the log within
/// moments without any other line pushing it out, and a graceful stop writes what still waits,
/// before its own lines.
#[tokio::test]
async fn request_lines_reach_the_log_soon_and_before_a_graceful_stop() {
    use std::time::{Duration, Instant};

    let mut demo = common::process::DemoProcess::start(&[]).await;
    let url = demo.jsonrpc_url("demo_toyota");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let send = || {
        common::post_send_message(&client, &url, json!({"type": "dealer.information.request"}))
            .send()
    };
    let requests = |demo: &common::process::DemoProcess| {
        let lines = demo.log_lines();
        lines.iter().filter(|l| l["message"] == "request").count()
    };

    assert_eq!(send().await.expect("reply").status(), 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while requests(&demo) == 0 {
        assert!(
            Instant::now() < deadline,
            "no request line:\n{}",
            demo.log_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A second request, and at once a graceful stop: its line is written before the stop's.
    assert_eq!(send().await.expect("reply").status(), 200);
    common::process::terminate(&mut demo.child, Duration::from_secs(20)).await;
    let lines = demo.log_lines();
    let at = |message: &str| lines.iter().rposition(|l| l["message"] == message);
    let (last_request, stop) = (at("request"), at("shutdown signal received"));
    assert_eq!(requests(&demo), 2, "{}", demo.log_text());
    assert!(
        last_request < stop && stop.is_some(),
        "the request line comes before the stop's:\n{}",
        demo.log_text()
    );
}

/// The runtime has as many worker threads as CPUs the process may use (`TOKIO_WORKER_THREADS`
/// stands in for a cgroup quota or an affinity mask here), and on one CPU none: the gateway
/// serves from its main thread. Either way a proxied search and a search of a feed (loaded off
/// the runtime, its download on it) answer, and a graceful stop ends it.
#[tokio::test]
async fn on_one_cpu_the_gateway_serves_from_one_thread() {
    use std::time::Duration;

    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for (cpus, workers) in [("1", 0), ("3", 3)] {
        let mut demo = common::process::DemoProcess::start(&[("TOKIO_WORKER_THREADS", cpus)]).await;
        for dealer in ["demo_toyota", "demo_honda"] {
            let search = json!({"type": "inventory.search.request", "pagination": {"limit": 2}});
            let reply: serde_json::Value =
                common::post_send_message(&client, &demo.jsonrpc_url(dealer), search)
                    .send()
                    .await
                    .expect("reply")
                    .json()
                    .await
                    .expect("JSON");
            let data = &reply["result"]["message"]["parts"][0]["data"];
            assert_eq!(
                data["type"], "inventory.search.response",
                "{dealer}: {reply}"
            );
            assert_eq!(
                data["data"]["vehicles"].as_array().map(Vec::len),
                Some(2),
                "{dealer}: {reply}"
            );
        }

        let threads = std::fs::read_dir(format!("/proc/{}/task", demo.child.id()))
            .expect("the process's threads")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "tokio-rt-worker")
            .count();
        assert_eq!(threads, workers, "worker threads with {cpus} CPU(s)");
        common::process::terminate(&mut demo.child, Duration::from_secs(20)).await;
    }
}

/// A worker count that is not a positive whole number stops the start with a plain message,
/// not tokio's panic.
#[test]
fn a_bad_worker_thread_count_is_refused_plainly() {
    for bad in ["0", "many"] {
        let out = common::process::demo_command()
            .env("TOKIO_WORKER_THREADS", bad)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "TOKIO_WORKER_THREADS must be a whole number of threads above 0, not \"{bad}\""
            )) && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}
