//! Every mapping example of `docs/` that renders an upstream call runs through the real
//! binary's `test-mappings` with **all optional request fields absent** (docs/mappings.md
//! §`request`): its rendered path, query, headers and body must be sendable and well-formed (a
//! JSON body JSON, an XML body well-formed), and the reply must pass the AAP schema. An ops team
//! copies these blocks; a block that renders `"comments": ,` for a lead without a message would
//! lose leads.
//!
//! The test reads the YAML blocks of `docs/mappings.md` and `docs/leads.md`, completes each with
//! what the block leaves to the reader (the `skill`, an upstream, a canned reply, tables a
//! neighbouring block defines) and fails if a block with a template (`{{`) or an ADF body is
//! not covered here, so a new example in the docs cannot go untested.

use std::path::Path;
use std::process::Command;

/// The YAML blocks of a Markdown file, with the line each starts on.
fn yaml_blocks(doc: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim() == "```yaml" => current = Some((i + 2, String::new())),
            Some(_) if line.trim() == "```" => blocks.extend(current.take()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// The one block of `doc` that starts with `first_line`.
fn block(doc: &str, first_line: &str) -> String {
    let found: Vec<String> = yaml_blocks(doc)
        .into_iter()
        .map(|(_, b)| b)
        .filter(|b| b.lines().next() == Some(first_line))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{doc}: expected one YAML block starting `{first_line}`; the docs changed"
    );
    found.into_iter().next().unwrap_or_default()
}

/// Where the examples go, and what they answer: no network is used.
const UPSTREAMS: &str = r#"
rest: { kind: rest, base_url: "http://127.0.0.1:9" }
graphql:
  kind: rest
  base_url: "http://127.0.0.1:9"
  auth: { kind: oauth2, token_url: "http://127.0.0.1:9/token", client_id: gw, client_secret: s }
soap: { kind: soap, base_url: "http://127.0.0.1:9/svc", soap: { version: "1.1" } }
mail:
  kind: smtp
  base_url: smtp://127.0.0.1:9
  smtp: { from: "Leads <leads@gateway.example>", to: [crm@dealer.example], starttls: off }
"#;

/// A search request and a lead request with nothing optional.
const SEARCH: &str = "{ type: inventory.search.request }";
const LEAD: &str = "{ type: lead.submit.request, customer: { first_name: Ana, last_name: Ruiz, \
                    email: ana@example.com }, consent: { granted_at: \"2026-04-30T10:16:00Z\", \
                    allowed_channels: [email], consent_text: I agree., scope: [lead_submission] }, \
                    source_agent: { name: docs-test } }";

/// One listable vehicle, as a DMS's JSON page and as a SOAP reply.
const JSON_PAGE: &str = r#"'{"items": [{"vin": "1HGCY2F57RA000001", "stock": "D1", "year": 2024, "make": "Honda", "model": "Civic", "condition": "new", "status": "available", "price": 25990}]}'"#;
const SOAP_PAGE: &str = "'<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>\
    <SearchInventoryResponse><Unit><Vin>1HGCY2F57RA000001</Vin><Year>2024</Year><Make>Honda</Make>\
    <Model>Civic</Model></Unit></SearchInventoryResponse></soap:Body></soap:Envelope>'";

/// One mapping folder to test: a skill file made of a docs block and what completes it.
struct Case {
    name: String,
    file: &'static str,
    yaml: String,
}

impl Case {
    /// `block` (top-level keys of a skill file) completed with every key in `extra` that the
    /// block does not set, and one example: `request`, answered by `reply`.
    fn new(name: &str, skill: &'static str, block: &str, extra: &[(&str, &str)]) -> Case {
        let mut yaml = format!("skill: {skill}\n{block}");
        for (key, value) in extra {
            if !block.lines().any(|l| l.starts_with(&format!("{key}:"))) {
                yaml.push_str(&format!("{key}: {value}\n"));
            }
        }
        Case {
            name: name.to_owned(),
            file: match skill {
                "inventory.search" => "inventory.search.yaml",
                "lead.submit" => "lead.submit.yaml",
                "inventory.vehicle" => "inventory.vehicle.yaml",
                other => panic!("no file for {other}"),
            },
            yaml,
        }
    }
}

fn example(name: &str, request: &str, reply: Option<&str>) -> String {
    let reply = reply
        .map(|r| format!(", upstream_reply: {{ status: 200, body: {r} }}"))
        .unwrap_or_default();
    format!("[{{ name: \"{name}, optional fields absent\", request: {request}{reply} }}]")
}

/// Indents `text` under a key.
fn indented(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}\n"))
        .collect::<Vec<_>>()
        .concat()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let json_items = "{ items: .items, item: '{ vin: .vin, stock: .stock, year: .year, make: .make, \
                      model: .model, condition: .condition, status: .status, price: .price }' }";

    // docs/mappings.md §`request`: the annotated search call (tables from §`tables`).
    let request = block("docs/mappings.md", "request:");
    let tables = block("docs/mappings.md", "tables:");
    let mut with_tables = request.clone();
    with_tables.push_str(&tables);
    cases.push(Case::new(
        "mappings-request",
        "inventory.search",
        &with_tables,
        &[
            ("upstream", "rest"),
            ("response", json_items),
            (
                "examples",
                &example("the annotated request", SEARCH, Some(JSON_PAGE)),
            ),
        ],
    ));

    // docs/mappings.md §Paging: the GraphQL recipe (cursors in a JSON body, errors on 200).
    let graphql = block(
        "docs/mappings.md",
        "# A GraphQL DMS: inventory.search.yaml (with `skill` and `upstream`)",
    );
    let graphql_page = r#"'{"data": {"inventory": {"totalCount": 1, "edges": [{"node": {"vin": "1HGCY2F57RA000001", "stockNo": "D1", "year": 2024, "make": "Honda", "model": "Civic", "status": "available", "price": 25990}}], "pageInfo": {"endCursor": "c1", "hasNextPage": false}}}}'"#;
    cases.push(Case::new(
        "mappings-graphql",
        "inventory.search",
        &graphql,
        &[
            ("upstream", "graphql"),
            (
                "examples",
                &example("a GraphQL connection", SEARCH, Some(graphql_page)),
            ),
        ],
    ));

    // docs/mappings.md §Paging: three alternatives in one block.
    let paging = block(
        "docs/mappings.md",
        "# In the query: name the parameters, the gateway adds them to every call.",
    );
    let code: Vec<&str> = paging
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect();
    let alternatives: Vec<usize> = (0..code.len())
        .filter(|&i| code[i].starts_with("pagination:"))
        .collect();
    assert_eq!(alternatives.len(), 3, "§Paging changed:\n{paging}");
    for (n, &i) in alternatives[..2].iter().enumerate() {
        cases.push(Case::new(
            &format!("mappings-paging-query-{n}"),
            "inventory.search",
            &format!("request:\n  path: /vehicles\n  {}\n", code[i]),
            &[
                ("upstream", "rest"),
                ("response", json_items),
                (
                    "examples",
                    &example("paging in the query", SEARCH, Some(JSON_PAGE)),
                ),
            ],
        ));
    }
    let in_body = code[alternatives[2]..].join("\n");
    cases.push(Case::new(
        "mappings-paging-body",
        "inventory.search",
        &format!(
            "request:\n  action: urn:dms/SearchInventory\n{}",
            indented(&in_body)
        ),
        &[
            ("upstream", "soap"),
            (
                "response",
                "{ list_elements: [Unit], items: '.SearchInventoryResponse.Unit', item: '{ vin: .Vin, \
                 year: (.Year | tonumber), make: .Make, model: .Model, status: \"available\" }' }",
            ),
            (
                "examples",
                &example("paging in a SOAP body", SEARCH, Some(SOAP_PAGE)),
            ),
        ],
    ));

    // docs/mappings.md §inventory.vehicle (proxy): a VIN-only detail call. (`takes` needs the
    // search mapping's folder, which tests/vehicle_by_scan.rs runs; here the call itself.)
    let detail = block("docs/mappings.md", "skill: inventory.vehicle");
    let detail: String = detail
        .lines()
        .filter(|l| !l.starts_with("takes:") && !l.starts_with("skill:"))
        .map(|l| format!("{}\n", l.replace("upstream: dms", "upstream: rest")))
        .collect();
    cases.push(Case::new(
        "vehicle-by-vin",
        "inventory.vehicle",
        &detail,
        &[(
            "examples",
            &example(
                "a VIN-only detail call",
                "{ type: inventory.vehicle.request, vin: 1HGCY2F57RA000001 }",
                Some(
                    r#"'{"unit": {"vin": "1HGCY2F57RA000001", "stock": "D1", "year": 2024, "make": "Honda", "model": "Civic", "condition": "new"}}'"#,
                ),
            ),
        )],
    ));

    // docs/mappings.md §Searching: a completed search's scans (`scan_stale`).
    let scans = block(
        "docs/mappings.md",
        "# A completed search's scans (inventory.search.yaml, next to its request and response)",
    );
    cases.push(Case::new(
        "mappings-scans",
        "inventory.search",
        &format!(
            "{scans}request:\n  path: /vehicles\n  query: {{ make: \"{{{{ request.filters.make | join(',') }}}}\" }}\n"
        ),
        &[
            ("upstream", "rest"),
            ("response", json_items),
            (
                "examples",
                &example("scans kept and refreshed", SEARCH, Some(JSON_PAGE)),
            ),
        ],
    ));

    // docs/mappings.md §Searching: one scan for many searches (`scan_query`).
    let every_unit = block(
        "docs/mappings.md",
        "# One scan of every unit per window (inventory.search.yaml)",
    );
    cases.push(Case::new(
        "mappings-scan-query",
        "inventory.search",
        &format!(
            "{every_unit}request:\n  path: /vehicles\n  query: {{ make: \"{{{{ request.filters.make | join(',') }}}}\" }}\n"
        ),
        &[
            ("upstream", "rest"),
            ("response", json_items),
            (
                "examples",
                &example("every unit scanned", SEARCH, Some(JSON_PAGE)),
            ),
        ],
    ));

    // docs/leads.md: the SOAP, REST, ADF and e-mail deliveries.
    let leads = yaml_blocks("docs/leads.md");
    let starting = |needle: &str| -> String {
        let found: Vec<&String> = leads
            .iter()
            .map(|(_, b)| b)
            .filter(|b| b.starts_with("request:") && b.contains(needle))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "docs/leads.md: one request block with {needle}"
        );
        found[0].clone()
    };
    let received = "{ jq: '{ lead_id: \"L-1\", status: \"received\" }' }";
    let soap = starting("action:");
    let soap = soap
        .split("\nresponse:")
        .next()
        .unwrap_or_default()
        .to_owned()
        + "\n";
    assert!(
        soap.contains("action:"),
        "docs/leads.md's SOAP block changed"
    );
    cases.push(Case::new(
        "leads-soap",
        "lead.submit",
        &soap,
        &[
            ("upstream", "soap"),
            // The block's `response` is elided (`+ ...`): only its request is the example's.
            ("response", received),
            (
                "examples",
                &example(
                    "SOAP delivery",
                    LEAD,
                    Some(
                        "'<soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\">\
                         <soap:Body><SubmitLeadResponse/></soap:Body></soap:Envelope>'",
                    ),
                ),
            ),
        ],
    ));
    cases.push(Case::new(
        "leads-rest",
        "lead.submit",
        &starting("path: /api/leads"),
        &[
            ("upstream", "rest"),
            (
                "examples",
                &example("REST delivery", LEAD, Some(r#"'{"leadId": "L-7"}'"#)),
            ),
        ],
    ));
    cases.push(Case::new(
        "leads-adf",
        "lead.submit",
        &starting("body_format: adf"),
        &[
            ("upstream", "rest"),
            (
                "examples",
                &example("ADF delivery", LEAD, Some(r#"'{"id": "A-7"}'"#)),
            ),
        ],
    ));
    cases.push(Case::new(
        "leads-verdict",
        "lead.submit",
        &block(
            "docs/leads.md",
            "# lead.submit.yaml of a CRM that queues leads",
        ),
        &[
            ("upstream", "rest"),
            (
                "examples",
                &example(
                    "a queued lead",
                    LEAD,
                    Some(r#"'{"ticket": "Q-81", "state": "QUEUED"}'"#),
                ),
            ),
        ],
    ));
    cases.push(Case::new(
        "leads-mail",
        "lead.submit",
        &block("docs/leads.md", "mail:"),
        &[
            ("upstream", "mail"),
            ("examples", &example("e-mail delivery", LEAD, None)),
        ],
    ));
    cases
}

/// The blocks that render a call: a template, or a body the gateway writes (ADF).
fn renders_a_call(block: &str) -> bool {
    block.contains("{{") || block.contains("body_format: adf")
}

#[test]
fn every_docs_block_that_renders_a_call_is_covered() {
    let cases = cases();
    let mut uncovered = Vec::new();
    for doc in ["docs/mappings.md", "docs/leads.md"] {
        for (line, block) in yaml_blocks(doc) {
            if !renders_a_call(&block) {
                continue;
            }
            // A block is covered when a case carries its lines (its code lines for §Paging).
            let code = block
                .lines()
                .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
                .find(|l| l.contains("{{") || l.contains("body_format"))
                .unwrap_or_default();
            if !cases.iter().any(|c| c.yaml.contains(code.trim())) {
                uncovered.push(format!("{doc}:{line}"));
            }
        }
    }
    assert!(
        uncovered.is_empty(),
        "docs blocks with templates that no case runs: {uncovered:?}"
    );
}

#[test]
fn docs_mapping_examples_render_with_every_optional_field_absent() {
    let dir = tempfile::tempdir().expect("temp");
    let cases = cases();
    let mut config = String::from("dealers:\n");
    for case in &cases {
        let folder = dir.path().join(&case.name);
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("upstreams.yaml"), UPSTREAMS).expect("upstreams");
        std::fs::write(folder.join(case.file), &case.yaml).expect("skill");
        config.push_str(&format!(
            "  - id: {id}\n    path_prefix: /{id}\n    card: {{ name: {id}, description: Docs example., url: https://{id}.example.com/a2a }}\n    mappings: {id}\n",
            id = case.name
        ));
    }
    let config_path = dir.path().join("gateway.yaml");
    std::fs::write(&config_path, config).expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["test-mappings", "--config"])
        .arg(&config_path)
        .output()
        .expect("run aap-gateway");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let files: Vec<String> = cases
        .iter()
        .map(|c| format!("--- {}/{}\n{}", c.name, c.file, c.yaml))
        .collect();
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        files.join("\n")
    );
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with(&format!("{} passed, 0 failed", cases.len()))),
        "{stdout}"
    );
}

/// The `kind: sftp` upstream of docs/mappings.md §Files on an SFTP server passes `check` as
/// written, its key given through `${VENDOR_SFTP_KEY}` (made here with `ssh-keygen`), which
/// `check` never prints; and without its pinned key it is refused.
#[test]
fn the_sftp_upstream_example_passes_check_and_needs_its_pin() {
    let dir = tempfile::tempdir().expect("temp");
    let key_file = dir.path().join("vendor_key");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key_file)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("AAP_TEST_REQUIRE_SSHD").is_none_or(|v| v != "1"),
            "no ssh-keygen and AAP_TEST_REQUIRE_SSHD=1"
        );
        eprintln!("skipping this test: no ssh-keygen (install openssh-client to run it)");
        return;
    }
    let key = std::fs::read_to_string(&key_file).expect("key");
    let upstream = block("docs/mappings.md", "vendor_sftp:");
    let check = |upstreams: &str| {
        let folder = dir.path().join("vendor");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("upstreams.yaml"), upstreams).expect("upstreams");
        std::fs::write(
            folder.join("feed.yaml"),
            "upstream: vendor_sftp\nrequest: { method: GET, path: /Bestand%20Wohnmobile.csv.gz }\n\
             format: csv\nitem: '{vehicle_id: .VIN, dealer_id: $dealer.id}'\n",
        )
        .expect("feed");
        std::fs::write(
            folder.join("inventory.search.yaml"),
            "skill: inventory.search\nmode: feed\n",
        )
        .expect("skill");
        let config = dir.path().join("gateway.yaml");
        std::fs::write(
            &config,
            "dealers:\n  - id: vendor\n    path_prefix: /vendor\n    card: { name: vendor, \
             description: Docs example., url: https://vendor.example.com/a2a }\n    mappings: vendor\n",
        )
        .expect("config");
        let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["check", "--config"])
            .arg(&config)
            .env("VENDOR_SFTP_KEY", &key)
            .output()
            .expect("run aap-gateway");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            key.lines().skip(1).take(2).all(|l| !text.contains(l)),
            "check printed the key:\n{text}"
        );
        (out.status.success(), text)
    };
    let (ok, text) = check(&upstream);
    assert!(ok, "{text}\n--- upstreams.yaml\n{upstream}");
    let unpinned: String = (upstream.lines())
        .filter(|l| {
            !l.trim_start().starts_with("sftp:") && !l.trim_start().starts_with("host_key:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let (ok, text) = check(&unpinned);
    assert!(!ok, "{text}");
    assert!(
        text.lines().any(|l| l.contains("upstreams.yaml:1:")
            && l.contains("host_key")
            && l.contains("ssh-keyscan -p PORT host | ssh-keygen -lf -")),
        "{text}"
    );
}
