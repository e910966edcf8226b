//! The README's "try it" calls, run as written against the real demo binary.
//!
//! Every `curl` of the README's shell blocks that calls the demo (`http://127.0.0.1:8080`) runs
//! through `sh` with only the address moved to the demo's free port, and must get what its
//! comment promises: a reply of the skill it calls (no JSON-RPC error), the agent card, the HTTP
//! status a comment names ("here 404 VEHICLE_NOT_FOUND"), and the same answer again where a
//! comment says to send it twice. A README call that stops working fails here.

mod common;

use std::process::Command;

use common::process::DemoProcess;
use serde_json::Value;

/// The address the README's calls use.
const README_GATEWAY: &str = "http://127.0.0.1:8080";

/// One `curl` of the README with the comment lines above it.
#[derive(Debug)]
struct Call {
    comment: String,
    command: String,
}

/// The calls to the demo in the README's ```sh blocks, in order. A comment block belongs to
/// every call after it until the next comment.
fn readme_calls() -> Vec<Call> {
    let readme = std::fs::read_to_string(common::repo_path("README.md")).expect("README.md");
    let mut calls = Vec::new();
    let mut in_sh = false;
    let mut comment = String::new();
    let mut command: Option<String> = None;
    let mut after_command = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if !in_sh {
            in_sh = trimmed == "```sh";
            comment.clear();
            continue;
        }
        if trimmed == "```" {
            in_sh = false;
            continue;
        }
        if let Some(open) = command.as_mut() {
            open.push(' ');
            open.push_str(trimmed.trim_end_matches('\\'));
            if !trimmed.ends_with('\\') {
                let command = command.take().unwrap_or_default();
                if command.contains(README_GATEWAY) {
                    calls.push(Call {
                        comment: comment.clone(),
                        command,
                    });
                }
                after_command = true;
            }
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            if after_command {
                comment.clear();
                after_command = false;
            }
            comment.push_str(text.trim());
            comment.push(' ');
        } else if trimmed.starts_with("curl ") {
            let open = trimmed.trim_end_matches('\\').to_owned();
            if trimmed.ends_with('\\') {
                command = Some(open);
            } else {
                if open.contains(README_GATEWAY) {
                    calls.push(Call {
                        comment: comment.clone(),
                        command: open,
                    });
                }
                after_command = true;
            }
        }
    }
    calls
}

/// Whether `curl` runs here; without it the README's calls cannot run as written, so the test is
/// skipped with what to install — except under CI, which installs it.
fn curl_installed() -> bool {
    let found = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        found || !ci,
        "CI: curl must be installed for the README's calls"
    );
    if !found {
        eprintln!(
            "skipping the README's calls: curl not found (install it, e.g. apt-get install curl)"
        );
    }
    found
}

/// Runs `command` with `sh`, the README's address replaced by `gateway`; its stdout.
fn run(command: &str, gateway: &str) -> String {
    let command = command.replace(README_GATEWAY, gateway);
    let out = Command::new("sh")
        .args(["-c", &command])
        .output()
        .expect("sh runs (curl must be installed)");
    assert!(
        out.status.success(),
        "{command}: exit {:?}, stderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 reply")
}

/// An HTTP/1.1 reply printed by `curl -i`: status and JSON body.
fn split_head(reply: &str) -> (u16, Value) {
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .expect("headers, blank line, body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    (status, serde_json::from_str(body).expect("JSON body"))
}

/// The `(status, CODE)` a comment names with "here NNN CODE".
fn promised_error(comment: &str) -> Option<(u16, String)> {
    let words: Vec<&str> = comment.split_whitespace().collect();
    words.windows(3).find_map(|w| {
        let status = w[1].parse().ok().filter(|_| w[0] == "(here")?;
        Some((status, w[2].trim_end_matches(')').to_owned()))
    })
}

/// The AAP data of a JSON-RPC `SendMessage` reply, which must not be an error.
fn result_data<'v>(reply: &'v Value, call: &Call) -> &'v Value {
    assert!(
        reply.get("error").is_none(),
        "{}: the README promises an answer, got {reply}",
        call.comment
    );
    &reply["result"]["message"]["parts"][0]["data"]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_readme_call_gets_what_its_comment_promises() {
    if !curl_installed() {
        return;
    }
    let calls = readme_calls();
    assert!(
        calls.len() >= 8,
        "the README's calls were not found: {calls:#?}"
    );
    let demo = DemoProcess::start(&[]).await;
    let gateway = demo.endpoints["gateway"]
        .as_str()
        .expect("gateway URL")
        .trim_end_matches('/')
        .to_owned();
    let mut skills = std::collections::BTreeSet::new();
    for call in &calls {
        let context = &call.comment;
        if call.command.contains(" -i ") {
            let (status, body) = split_head(&run(&call.command, &gateway));
            let (want, code) = promised_error(&call.comment)
                .unwrap_or_else(|| panic!("{context}: a `curl -i` call names its status"));
            assert_eq!(status, want, "{context}: {body}");
            assert!(body.to_string().contains(&code), "{context}: {body}");
            continue;
        }
        let reply: Value = serde_json::from_str(&run(&call.command, &gateway))
            .unwrap_or_else(|e| panic!("{context}: not JSON ({e})"));
        if reply.get("jsonrpc").is_none() {
            // The agent card, whose interface is the address really served.
            assert!(reply["skills"].as_array().is_some_and(|s| !s.is_empty()));
            let url = reply["supportedInterfaces"][0]["url"]
                .as_str()
                .unwrap_or("");
            assert!(url.starts_with(&gateway), "{context}: card URL {url}");
            continue;
        }
        let data = result_data(&reply, call);
        let kind = data["type"].as_str().unwrap_or_default();
        let skill = kind
            .strip_suffix(".response")
            .unwrap_or_else(|| panic!("{context}: reply data type {kind}"));
        assert!(
            call.command.contains(&format!("\"{skill}.request\"")),
            "{context}: answered {kind}"
        );
        skills.insert(skill.to_owned());
        if call.comment.contains("send it twice") {
            let again: Value =
                serde_json::from_str(&run(&call.command, &gateway)).expect("JSON reply");
            assert_eq!(
                result_data(&again, call),
                data,
                "{context}: the second send replays the first answer"
            );
        }
    }
    let all = [
        "dealer.information",
        "inventory.facets",
        "inventory.search",
        "lead.submit",
    ];
    for skill in all {
        assert!(skills.contains(skill), "the README calls {skill}");
    }
}

#[test]
fn the_readme_is_read_as_calls_with_their_comments() {
    let calls = readme_calls();
    assert!(calls.iter().all(|c| c.command.starts_with("curl ")));
    assert!(calls.iter().all(|c| !c.command.contains('\\')));
    let card = &calls[0];
    assert!(card.comment.contains("agent card"), "{card:?}");
    assert!(calls.iter().any(|c| c.comment.contains("send it twice")));
    assert_eq!(
        promised_error("binding: errors come back (here 404 VEHICLE_NOT_FOUND) "),
        Some((404, "VEHICLE_NOT_FOUND".to_owned()))
    );
}
