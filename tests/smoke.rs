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
