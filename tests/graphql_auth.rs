//! Issue 37 item 4: a GraphQL DMS answers a refused token with HTTP 200 and an
//! `UNAUTHENTICATED` error, where a REST API would send 401. An `errors` rule with
//! `reauthenticate: true` makes the gateway fetch a fresh OAuth2 token and send the call once
//! more, as it does for a 401; only the same answer again is answered with the rule's code.
//! Counted where it matters: token fetches and GraphQL calls at the stand-ins.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::http_server::{HttpServer, Seen};
use common::{Gateway, TestDealer};
use serde_json::{Value, json};

/// Tokens `tok-1`, `tok-2`, … in order of issue.
async fn token_server() -> HttpServer {
    let issued = Arc::new(AtomicUsize::new(0));
    HttpServer::start(move |_seen: Seen| {
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        let body = json!({ "access_token": format!("tok-{n}"), "token_type": "Bearer", "expires_in": 3600 });
        (200, "application/json", body.to_string().into_bytes())
    })
    .await
}

/// A GraphQL endpoint that takes only the tokens `accepted` says yes to, and says so the
/// GraphQL way: HTTP 200 with `errors[].extensions.code`.
async fn graphql(accepted: fn(&str) -> bool) -> HttpServer {
    HttpServer::start(move |seen: Seen| {
        let token = seen
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default()
            .to_owned();
        let body = if accepted(&token) {
            json!({ "data": { "inventory": { "totalCount": 1, "edges": [ { "node": {
                "vin": "5YJ3E1EA7PF000001", "stockNo": "G1", "make": "Tesla", "model": "Model 3",
                "year": 2023, "price": 38990, "status": "available" } } ],
                "pageInfo": { "endCursor": "c1", "hasNextPage": false } } } })
        } else {
            json!({ "data": null, "errors": [ { "message": "token revoked",
                    "extensions": { "code": "UNAUTHENTICATED" } } ] })
        };
        (200, "application/json", body.to_string().into_bytes())
    })
    .await
}

fn search_yaml(reauthenticate: bool) -> String {
    let flag = if reauthenticate {
        "    reauthenticate: true\n"
    } else {
        ""
    };
    format!(
        r#"skill: inventory.search
upstream: summit
request:
  method: POST
  path: /graphql
  body: |
    {{"query": "query($first: Int!, $after: String) {{ inventory(first: $first, after: $after) {{ totalCount edges {{ node {{ vin stockNo make model year price status }} }} pageInfo {{ endCursor hasNextPage }} }} }}",
     "variables": {{"first": {{{{ page.size }}}}, "after": {{{{ page.cursor }}}}}}}}
  pagination:
    style: cursor
    next: .data.inventory.pageInfo.endCursor
    has_more: .data.inventory.pageInfo.hasNextPage
    max_size: 50
  supports: {{ listing: listable }}
response:
  items: .data.inventory.edges
  total: .data.inventory.totalCount
  item: '.node | {{ vin: .vin, stock: .stockNo, make: .make, model: .model, year: .year, price: .price, status: .status }}'
errors:
  - when: {{ jq: '[.errors[]?.extensions.code] | index("UNAUTHENTICATED") != null' }}
    code: INTERNAL_ERROR
{flag}  - when: {{ jq: '(.errors // []) | length > 0' }}
    code: INTERNAL_ERROR
"#
    )
}

fn upstreams_yaml(auth: &str) -> String {
    format!(
        "summit:\n  kind: rest\n  base_url: ${{SUMMIT_URL}}\n  timeouts: {{ connect: 1s, request: 2s }}\n  auth: {auth}\n"
    )
}

const OAUTH2: &str =
    "{ kind: oauth2, token_url: \"${TOKEN_URL}\", client_id: gw, client_secret: s3cret }";

/// The GraphQL dealer `summit`: its upstream and its search mapping.
fn summit(search: String, upstreams: String) -> Vec<TestDealer> {
    vec![TestDealer::new(
        "summit",
        vec![
            ("upstreams.yaml", upstreams),
            ("inventory.search.yaml", search),
        ],
    )]
}

async fn start(
    reauthenticate: bool,
    accepted: fn(&str) -> bool,
) -> (Gateway, HttpServer, HttpServer) {
    let tokens = token_server().await;
    let api = graphql(accepted).await;
    let dealers = summit(search_yaml(reauthenticate), upstreams_yaml(OAUTH2));
    let vars = [
        ("SUMMIT_URL", api.url()),
        ("TOKEN_URL", format!("{}/oauth/token", tokens.url())),
    ];
    let gw = common::start_dealers(&dealers, &vars).await;
    (gw, tokens, api)
}

async fn search(gw: &Gateway) -> common::Reply {
    gw.send(
        "/dealers/summit/a2a",
        json!({ "type": "inventory.search.request" }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_token_refused_on_http_200_is_renewed_and_the_call_sent_once_more() {
    let (gw, tokens, api) = start(true, |t| t != "tok-1").await;
    let reply = search(&gw).await;
    let vehicles: &Value = &reply.payload()["data"]["vehicles"];
    assert_eq!(vehicles[0]["stock"], "G1", "{}", reply.text);
    assert_eq!(tokens.requests(), 2, "a fresh token after the refusal");
    assert_eq!(api.requests(), 2, "the call sent once more");
    // The next search uses the fresh token straight away.
    let again = search(&gw).await;
    assert_eq!(again.payload()["data"]["vehicles"][0]["stock"], "G1");
    assert_eq!((tokens.requests(), api.requests()), (2, 3));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_refuses_every_token_is_tried_once_more_only() {
    let (gw, tokens, api) = start(true, |_| false).await;
    let reply = search(&gw).await;
    assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
    assert_eq!(api.requests(), 2, "one more try, not a loop");
    assert_eq!(tokens.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_rule_a_refused_token_is_the_rules_error_at_once() {
    let (gw, tokens, api) = start(false, |t| t != "tok-1").await;
    let reply = search(&gw).await;
    assert_eq!(reply.aap_code(), "INTERNAL_ERROR", "{}", reply.text);
    assert_eq!((tokens.requests(), api.requests()), (1, 1));
}

/// `check` refuses `reauthenticate` on an upstream whose credentials a retry cannot renew.
#[test]
fn check_refuses_reauthenticate_without_oauth2() {
    let dir = tempfile::tempdir().expect("temp");
    let search = search_yaml(true);
    let dealers = summit(
        search.clone(),
        upstreams_yaml("{ kind: api_key, header: X-Key, value: k }"),
    );
    let path = common::write_dealers(dir.path(), &dealers);
    let (code, text) = common::run_cli(&["check"], &path, &[("SUMMIT_URL", "http://127.0.0.1:9")]);
    assert_ne!(code, 0, "{text}");
    let line = search
        .lines()
        .position(|l| l.contains("reauthenticate"))
        .expect("line")
        + 1;
    assert!(
        text.contains(&format!("inventory.search.yaml:{line}")),
        "located: {text}"
    );
    assert!(text.contains("no `auth.kind: oauth2`"), "{text}");
}
