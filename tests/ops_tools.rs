//! The mapping author's tools through the real binary: `reference` (docs/reference.md may not
//! drift from the schemas), `render` (the exact upstream request, secrets masked; the AAP reply
//! from a canned upstream reply), `test-mappings --show-requests`, and `new-dealer` (a scaffold
//! `check` accepts, every skill answering UNSUPPORTED_SKILL until filled in).

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

fn gateway(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        // The demo's defaults, whatever the machine's environment says.
        .env_remove("DMS_API_KEY")
        .env_remove("CRM_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run aap-gateway");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().expect("wait")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `aap-gateway render --config config/demo.yaml --dealer demo_toyota` and `extra`.
fn render_demo(extra: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut args = vec![
        "render",
        "--config",
        "config/demo.yaml",
        "--dealer",
        "demo_toyota",
    ];
    args.extend_from_slice(extra);
    gateway(&args, stdin)
}

// ---------------------------------------------------------------------------------------------
// reference

/// CI's drift check: docs/reference.md is exactly what `aap-gateway reference` prints.
/// `AAP_REGENERATE=1` rewrites it instead.
#[test]
fn reference_doc_is_generated_from_the_schemas() {
    let out = gateway(&["reference"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let generated = text(&out.stdout);
    let path = common::repo_path("docs/reference.md");
    if std::env::var_os("AAP_REGENERATE").is_some() {
        std::fs::write(&path, &generated).expect("write docs/reference.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/reference.md is stale: regenerate it with `AAP_REGENERATE=1 cargo test --test \
         ops_tools reference_doc` (or `aap-gateway reference > docs/reference.md`)"
    );
    // What mapping authors asked for, present.
    for needle in [
        "| `price` | integer | US dollars (whole) |",
        "| `filters.body` | array of string |",
        "| `sort.field` | string |  | `price`, `list_price`, `msrp`, `mileage`, `year`",
        "| `DUPLICATE_LEAD`",
    ] {
        assert_eq!(
            generated.contains(needle),
            !needle.contains("DUPLICATE"),
            "{needle}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// render

const SEARCH: &str = r#"{"type":"inventory.search.request","filters":{"make":["Toyota"],"condition":["used"],"price_max":30000},"sort":{"field":"price","order":"asc"},"pagination":{"limit":2}}"#;

#[test]
fn render_prints_the_exact_upstream_request_with_secrets_masked() {
    let out = render_demo(&[], Some(SEARCH));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    assert!(
        stdout.contains(
            "GET http://127.0.0.1:7001/api/v2/vehicles?make=Toyota&type=Pre-Owned&maxPrice=30000"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("sortBy=price&sortDir=asc"), "{stdout}");
    assert!(stdout.contains("page=1&pageSize=2"), "{stdout}");
    // The API key header is there, its value never.
    assert!(stdout.contains("x-api-key: ****"), "{stdout}");
    assert!(!stdout.contains("demo-dms-key"), "{stdout}");
    assert!(stdout.contains("user-agent: aap-gateway/"), "{stdout}");
    assert!(stdout.contains("--upstream-reply"), "{stdout}");
}

#[test]
fn render_with_a_canned_reply_shows_the_aap_reply() {
    let out = render_demo(
        &[
            "--request",
            "-",
            "--upstream-reply",
            "mappings/demo-toyota/examples/dms-search.json",
        ],
        Some(SEARCH),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    let reply = stdout
        .split("── AAP reply ──\n")
        .nth(1)
        .expect("an AAP reply section");
    let reply: serde_json::Value = serde_json::from_str(reply.trim()).expect("JSON reply");
    assert_eq!(reply["type"], "inventory.search.response");
    assert_eq!(reply["data"]["limit"], 2);
    assert_eq!(reply["data"]["vehicles"][0]["vin"], "5YFB4MDE9GP400942");
}

#[test]
fn render_masks_soap_passwords_and_reads_a_whole_jsonrpc_call() {
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": {"type": "inventory.vehicle.request", "vin": "4T1DAACKXRU176220"}}]}}
    });
    let out = render_demo(&[], Some(&call.to_string()));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    assert!(
        stdout.contains("POST http://127.0.0.1:7004/dms/VehicleService.svc"),
        "{stdout}"
    );
    assert!(stdout.contains("<Vin>4T1DAACKXRU176220</Vin>"), "{stdout}");
    assert!(stdout.contains("soap-envelope"), "{stdout}");
    // The demo's plain-text UsernameToken password never shows.
    assert!(!stdout.contains("dms-secret"), "{stdout}");
    assert!(stdout.contains(">****</"), "{stdout}");
}

#[test]
fn render_refuses_what_the_gateway_would_refuse() {
    let out = render_demo(
        &[],
        Some(r#"{"type":"inventory.search.request","filters":{"condition":["excellent"]}}"#),
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("INVALID_CONDITION"), "{stderr}");
    assert!(stderr.contains("/filters/condition/0"), "{stderr}");
}

#[test]
fn test_mappings_can_show_the_requests_of_passing_examples() {
    let out = gateway(
        &[
            "test-mappings",
            "--config",
            "config/demo.yaml",
            "--skill",
            "inventory.search",
            "--show-requests",
        ],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("GET http://127.0.0.1:7001/api/v2/vehicles?make=Toyota"),
        "{stdout}"
    );
    assert!(!stdout.contains("demo-dms-key"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// new-dealer

fn check(config: &Path) -> (bool, String) {
    let out = gateway(
        &["check", "--config", config.to_str().expect("utf-8 path")],
        None,
    );
    (out.status.success(), text(&out.stderr) + &text(&out.stdout))
}

#[tokio::test]
async fn new_dealer_writes_a_scaffold_check_accepts_with_every_skill_unsupported() {
    for kind in ["rest", "soap", "feed"] {
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("gateway.yaml");
        let id = format!("lakeview-{kind}");
        let out = gateway(
            &[
                "new-dealer",
                &id,
                "--kind",
                kind,
                "--config",
                config.to_str().expect("utf-8"),
            ],
            None,
        );
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
        let folder = dir.path().join("mappings").join(&id);
        for file in [
            "upstreams.yaml",
            "common.yaml",
            "inventory.search.yaml",
            "inventory.vehicle.yaml",
            "inventory.facets.yaml",
            "lead.submit.yaml",
        ] {
            assert!(folder.join(file).is_file(), "{kind}: {file}");
        }
        assert_eq!(folder.join("feed.yaml").is_file(), kind == "feed");
        // Run in a checkout, it names the editor schemas.
        let first = std::fs::read_to_string(folder.join("inventory.search.yaml")).expect("read");
        let target = first
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# yaml-language-server: $schema="))
            .expect("a schema line");
        assert!(folder.join(target).is_file(), "{target}");
        assert!(
            target.ends_with("docs/schemas/skill.schema.json"),
            "{target}"
        );
        let (ok, output) = check(&config);
        assert!(ok, "{kind}: {output}");
        for skill in [
            "inventory.search",
            "inventory.vehicle",
            "inventory.facets",
            "lead.submit",
        ] {
            assert!(
                output.contains(&format!(
                    "{skill} is not mapped yet and answers UNSUPPORTED_SKILL"
                )),
                "{kind}: {output}"
            );
        }

        // A second dealer is appended to the same configuration.
        let out = gateway(
            &[
                "new-dealer",
                "second",
                "--kind",
                kind,
                "--config",
                config.to_str().expect("utf-8"),
            ],
            None,
        );
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
        assert!(check(&config).0);
        // The same id again is refused, and nothing is overwritten.
        let again = gateway(
            &[
                "new-dealer",
                "second",
                "--kind",
                kind,
                "--config",
                config.to_str().expect("utf-8"),
            ],
            None,
        );
        assert!(!again.status.success());

        if kind == "rest" {
            // Served: dealer.information from the profile; every other skill UNSUPPORTED_SKILL.
            let gw = common::start_file_with_vars(&config, None, Default::default()).await;
            let path = format!("/dealers/{id}/a2a");
            let info = gw
                .send(&path, json!({ "type": "dealer.information.request" }))
                .await;
            assert!(info.body.get("result").is_some(), "{}", info.text);
            let search = gw
                .send(&path, json!({ "type": "inventory.search.request" }))
                .await;
            assert_eq!(search.aap_code(), "UNSUPPORTED_SKILL");
            let card = gw
                .card(&format!("/dealers/{id}/.well-known/agent-card.json"))
                .await;
            let skills = common::skill_ids(&card);
            assert_eq!(skills, ["dealer.information"], "{card}");
        }
    }
}

#[test]
fn unsupported_next_to_a_mapping_is_a_problem() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("gateway.yaml");
    let out = gateway(
        &[
            "new-dealer",
            "x",
            "--kind",
            "rest",
            "--config",
            config.to_str().expect("utf-8"),
        ],
        None,
    );
    assert!(out.status.success());
    let facets = dir.path().join("mappings/x/inventory.facets.yaml");
    let mut text_now = std::fs::read_to_string(&facets).expect("read");
    text_now.push_str("derive: search\n");
    std::fs::write(&facets, text_now).expect("write");
    let (ok, output) = check(&config);
    assert!(!ok);
    assert!(
        output.contains("`unsupported` next to a mapping: remove `unsupported` to serve the skill"),
        "{output}"
    );
}

// ---------------------------------------------------------------------------------------------
// verify

/// `verify` against the demo's REST DMS simulator (started here, on an ephemeral port).
fn verify(config: &Path, sims: &aap_sim::Simulators) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aap-gateway"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["verify", "--config"])
        .arg(config)
        .args([
            "--dealer",
            "demo_toyota",
            "--max-searches",
            "200",
            "--pause",
            "1ms",
        ]);
    for (name, value) in common::simulator_vars(sims) {
        command.env(name, value);
    }
    command.output().expect("run verify")
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_finds_no_difference_where_the_mapping_is_true() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    let out = tokio::task::block_in_place(|| verify(&common::repo_path("config/demo.yaml"), &sims));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("searches over 216 listings, 0 difference(s)"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_reports_a_false_supports_declaration_with_the_request_that_shows_it() {
    let sims = aap_sim::Simulators::start().await.expect("simulators");
    // The DMS matches stock numbers case-insensitively, AAP exactly: declaring `stock` is wrong.
    let copy = common::DemoCopy::new();
    copy.edit(
        "mappings/demo-toyota/inventory.search.yaml",
        "filters: [make, model,",
        "filters: [stock, make, model,",
    );
    copy.edit(
        "mappings/demo-toyota/inventory.search.yaml",
        "    vin: \"{{ request.filters.vin }}\"\n",
        "    vin: \"{{ request.filters.vin }}\"\n    stock: \"{{ request.filters.stock }}\"\n",
    );
    let out = tokio::task::block_in_place(|| verify(&copy.path("config/demo.yaml"), &sims));
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}{}", text(&out.stderr));
    let diff = stdout
        .lines()
        .position(|l| {
            l.starts_with(
                "DIFF  total: the mapping answers 1; the gateway, searching the 216 listings its \
                 scan read, 0",
            )
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    let request = stdout.lines().nth(diff + 1).unwrap_or_default();
    assert!(request.contains(r#""filters":{"stock":"#), "{stdout}");
    let fix = stdout.lines().nth(diff + 2).unwrap_or_default();
    assert_eq!(
        fix,
        "      fix: drop `stock` from `supports.filters`, or make the template send what AAP means",
        "{stdout}"
    );
}

#[test]
fn render_says_why_no_call_was_made() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("gateway.yaml");
    let config = config.to_str().expect("utf-8");
    let out = gateway(
        &["new-dealer", "x", "--kind", "rest", "--config", config],
        None,
    );
    assert!(out.status.success());
    std::fs::write(
        dir.path().join("mappings/x/inventory.vehicle.yaml"),
        "skill: inventory.vehicle\nupstream: dms\nrequest: { path: \"/v/{{ request.vin | frob }}\" }\nresponse: { jq: '{vin: .vin, status: \"available\"}' }\n",
    )
    .expect("write");
    let out = gateway(
        &["render", "--config", config, "--dealer", "x"],
        Some(r#"{"type":"inventory.vehicle.request","vin":"4T1DAACKXRU176220"}"#),
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no upstream call"), "{stdout}");
    assert!(stdout.contains("filter frob is unknown"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// schema

/// The shipped configuration and mapping files (what an ops team copies).
fn shipped_yaml() -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for dir in ["config", "mappings", "deploy/config"] {
        walk(&common::repo_path(dir), &mut out);
    }
    out.sort();
    out
}

/// docs/schemas/ is exactly what `aap-gateway schema` prints (`AAP_REGENERATE=1` rewrites it);
/// every shipped YAML file names its schema on its first line, and is valid against it.
#[test]
fn editor_schemas_are_generated_shipped_named_and_hold_for_the_shipped_files() {
    use aap_gateway::tools::editor_schema::FileKind;
    let args = |kind: FileKind| -> Vec<&'static str> {
        match kind {
            FileKind::Config => vec!["schema", "config"],
            FileKind::Upstreams => vec!["schema", "mapping", "upstreams"],
            FileKind::Common => vec!["schema", "mapping", "common"],
            FileKind::Feed => vec!["schema", "mapping", "feed"],
            FileKind::Skill => vec!["schema", "mapping", "skill"],
        }
    };
    let mut validators = Vec::new();
    for kind in FileKind::ALL {
        let out = gateway(&args(kind), None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let generated = text(&out.stdout);
        let path = common::repo_path(&format!("docs/schemas/{}", kind.file_name()));
        if std::env::var_os("AAP_REGENERATE").is_some() {
            std::fs::write(&path, &generated).expect("write schema");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is stale: regenerate with `AAP_REGENERATE=1 cargo test --test ops_tools \
             editor_schemas`",
            path.display()
        );
        let schema: serde_json::Value = serde_json::from_str(&generated).expect("JSON");
        let validator = jsonschema::draft7::new(&schema).expect("a valid draft-7 schema");
        validators.push((kind, validator));
    }
    // The schemas do refuse: an unknown key, a value of the wrong type.
    let config = &validators[0].1;
    assert!(!config.is_valid(&json!({ "colour": "red", "dealers": [] })));
    assert!(!config.is_valid(&json!({ "dealers": [], "limits": { "max_body_bytes": "big" } })));
    let files = shipped_yaml();
    assert!(files.len() >= 20, "{files:?}");
    for file in files {
        let source = std::fs::read_to_string(&file).expect("read");
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let kind = FileKind::of_file(name);
        let first = source.lines().next().unwrap_or_default();
        let target = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| panic!("{}: no schema line", file.display()));
        let resolved = file.parent().expect("dir").join(target);
        assert_eq!(
            std::fs::canonicalize(&resolved).ok(),
            std::fs::canonicalize(common::repo_path(&format!(
                "docs/schemas/{}",
                kind.file_name()
            )))
            .ok(),
            "{}: {target}",
            file.display()
        );
        let (value, _) = aap_gateway::settings::yaml::parse(&file, &source).expect("YAML");
        let (_, validator) = validators
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("validator");
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", file.display());
    }
}
