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
    let url = demo.dealer("demo_toyota")["jsonrpc_url"]
        .as_str()
        .expect("dealer url")
        .to_owned();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let send = || {
        let mut req = client
            .post(&url)
            .body(common::send_message(json!({"type": "dealer.information.request"})).to_string());
        for (k, v) in common::standard_headers() {
            req = req.header(k, v);
        }
        req.send()
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
