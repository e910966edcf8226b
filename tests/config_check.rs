//! `aap-gateway check`: every problem at once, each located as `file:line:col: message`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use aap_gateway::settings;

fn check(config: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["check", "--config", config])
        .output()
        .expect("run aap-gateway check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn shipped_configs_pass_check() {
    for config in ["config/demo.yaml", "config/gateway.example.yaml"] {
        let (ok, stdout, stderr) = check(config);
        assert!(ok, "{config}: {stderr}");
        assert!(stdout.contains(": ok ("), "{stdout}");
        // The draft URI is allowed but always flagged.
        assert!(stderr.contains("draft AAP extension URI"), "{stderr}");
    }
}

#[test]
fn broken_config_reports_every_problem_with_its_location() {
    let (ok, _, stderr) = check("tests/fixtures/config/broken.yaml");
    assert!(!ok);
    let f = "tests/fixtures/config/broken.yaml";
    let expected = [
        format!("{f}:1:1: `not-an-address` is not a socket address like 0.0.0.0:8080"),
        format!(
            "{f}:4:3: `https://autoagentprotocol.org/extensions/aap/v1.3` names the frozen AAP v1 contract; this gateway speaks AAP 2.0"
        ),
        format!("{f}:7:3: must be between 1024 and 16777216"),
        format!("{f}:8:3: `soon` is not a duration like 15s or 500ms: expected number at 0"),
        format!("{f}:9:3: must be at least 1"),
        format!("{f}:10:3: `low` is not one of idle, normal"),
        format!("{f}:12:3: `xml` is not one of auto, json, text"),
        format!(
            "{f}:15:5: `a2a/` must be a path like /a2a (leading `/`, no trailing `/`, no query)"
        ),
        format!(
            "{f}:16:1: unknown key `colour`; expected one of listen, admin_listen, aap, bindings, limits, connections, telemetry, idempotency, rate_limit, auth, provider, dealers"
        ),
        format!("{f}:18:5: `bad id!` must be letters, digits, `_` or `-`"),
        format!("{f}:19:13: `name` must not be empty"),
        format!(
            "{f}:26:7: unknown field `tagline`, expected one of `name`, `description`, `url`, `version`, `documentation_url`, `icon_url`, `provider`"
        ),
        format!(
            "{f}:31:5: `/dealers/x/` must look like /dealers/my-dealer (leading `/`, no trailing `/`)"
        ),
        "13 problem(s) found".to_owned(),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines, expected, "\n{stderr}");
}

#[test]
fn profile_is_checked_against_the_aap_schema_at_load() {
    let (ok, _, stderr) = check("tests/fixtures/config/bad-profile.yaml");
    assert!(!ok);
    let f = "tests/fixtures/config/bad-profile.yaml";
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{f}:8:18: profile/rooftops/0/geo/latitude: maximum: must be <= 90"),
            format!(
                "{f}:9:45: profile/rooftops/0/phones/0/extension: additionalProperties: is not allowed"
            ),
            format!("{f}:10:7: dealer `two` serves no skill; give it a `profile`"),
            "3 problem(s) found".to_owned(),
        ]
    );
}

#[test]
fn yaml_syntax_errors_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.yaml");
    std::fs::write(&path, "dealers:\n  - id: x\n    card: { name: [unclosed\n").unwrap();
    let problems = settings::load_with_env(&path, HashMap::new()).unwrap_err();
    assert_eq!(problems.len(), 1);
    let text = problems[0].to_string();
    assert!(text.starts_with(&format!("{}:", path.display())), "{text}");
    assert!(text.contains("invalid YAML"), "{text}");
}

#[test]
fn environment_overrides_win_and_their_problems_name_the_variable() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    let env = HashMap::from([
        (
            "AAP_GATEWAY__LIMITS__MAX_BODY_BYTES".to_owned(),
            "131072".to_owned(),
        ),
        (
            "AAP_GATEWAY__LISTEN".to_owned(),
            "127.0.0.1:18080".to_owned(),
        ),
    ]);
    let s = settings::load_with_env(&demo, env).unwrap();
    assert_eq!(s.limits.max_body_bytes, 131_072);
    assert_eq!(s.listen.to_string(), "127.0.0.1:18080");

    let env = HashMap::from([
        (
            "AAP_GATEWAY__LIMITS__REQUEST_TIMEOUT".to_owned(),
            "forever".to_owned(),
        ),
        (
            "AAP_GATEWAY__TELEMETRY__LOG_FORMAT".to_owned(),
            "yaml".to_owned(),
        ),
    ]);
    let problems = settings::load_with_env(&demo, env).unwrap_err();
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "env AAP_GATEWAY__LIMITS__REQUEST_TIMEOUT: `forever` is not a duration like 15s or 500ms: expected number at 0",
            "env AAP_GATEWAY__TELEMETRY__LOG_FORMAT: `yaml` is not one of auto, json, text",
        ]
    );
}

#[test]
fn replicas_share_one_redis_set_from_the_environment() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    let var = |k: &str, v: &str| (format!("AAP_GATEWAY__{k}"), v.to_owned());
    let env = HashMap::from([
        var("RATE_LIMIT__BACKEND", "redis"),
        var("RATE_LIMIT__REDIS_URL", "redis://redis:6379/0"),
        var("IDEMPOTENCY__BACKEND", "redis"),
        var("IDEMPOTENCY__ON_BACKEND_ERROR", "deny"),
    ]);
    let s = settings::load_with_env(&demo, env).unwrap();
    let shared = settings::LimitBackend::Redis {
        url: "redis://redis:6379/0".to_owned(),
    };
    assert_eq!(s.rate_limit.backend, shared);
    // The idempotency store defaults to the rate limiter's Redis.
    assert_eq!(s.idempotency.backend, shared);
    assert_eq!(
        s.idempotency.on_backend_error,
        settings::OnBackendError::Deny
    );
    assert!(s.rate_limit.enabled);

    let env = HashMap::from([
        var("IDEMPOTENCY__BACKEND", "redis"),
        var("IDEMPOTENCY__LOCK_TTL", "10ms"),
        var("RATE_LIMIT__ENABLED", "false"),
    ]);
    let problems = settings::load_with_env(&demo, env).unwrap_err();
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "env AAP_GATEWAY__IDEMPOTENCY__BACKEND: `backend: redis` needs `redis_url` like redis://host:6379/0 (rediss:// for TLS)",
            "env AAP_GATEWAY__IDEMPOTENCY__LOCK_TTL: must be at least 1s: it is renewed every third of it, each renewal a Redis call",
        ]
    );
}

#[test]
fn a_lease_too_short_for_its_renewals_and_an_unknown_ambiguity_policy_are_refused() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    let var = |k: &str, v: &str| (format!("AAP_GATEWAY__{k}"), v.to_owned());
    let env = HashMap::from([
        var("IDEMPOTENCY__LOCK_TTL", "2s"),
        var("IDEMPOTENCY__REDIS_TIMEOUT", "500ms"),
        var("IDEMPOTENCY__ON_AMBIGUOUS", "maybe"),
        var("IDEMPOTENCY__MAX_BYTES", "100"),
    ]);
    let problems = settings::load_with_env(&demo, env).unwrap_err();
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "env AAP_GATEWAY__IDEMPOTENCY__LOCK_TTL: must be at least 6 × redis_timeout: a renewal every third of it has to get through even when Redis is slow",
            "env AAP_GATEWAY__IDEMPOTENCY__MAX_BYTES: must be at least 65536 (64 KiB): one stored reply can take a few KiB",
            "env AAP_GATEWAY__IDEMPOTENCY__ON_AMBIGUOUS: `maybe` is not one of resend, hold",
        ]
    );
    // The defaults: a 6 s lease, resend, 64 MiB.
    let s = settings::load_with_env(&demo, HashMap::new()).unwrap();
    assert_eq!(s.idempotency.lock_ttl, std::time::Duration::from_secs(6));
    assert_eq!(s.idempotency.on_ambiguous, settings::OnAmbiguous::Resend);
    assert_eq!(s.idempotency.max_bytes, 64 * 1024 * 1024);
}

#[test]
fn card_command_prints_the_served_card() {
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "card",
            "--config",
            "config/demo.yaml",
            "--dealer",
            "demo_honda",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let card: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(card["name"], "Demo Honda");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "http://127.0.0.1:8080/dealers/demo-honda/a2a"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["card", "--config", "config/demo.yaml", "--dealer", "nobody"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("known: demo_toyota, demo_honda"));
}

#[test]
fn broken_mappings_report_every_problem_with_its_location() {
    let (ok, _, stderr) = check("tests/fixtures/mappings/broken.yaml");
    assert!(!ok);
    let d = "tests/fixtures/mappings/broken";
    let expected = [
        format!("{d}/dealer.information.yaml:6:14: maximum: must be <= 90"),
        format!(
            "{d}/inventory.facets.yaml:1:1: file `inventory.facets.yaml` serves `inventory.search`; name it `inventory.search.yaml`"
        ),
        format!(
            "{d}/inventory.search.yaml:2:1: unknown upstream `dmz`; upstreams.yaml defines: crm, dms"
        ),
        format!(
            "{d}/inventory.search.yaml:5:10: template: unexpected `}}`, expected end of variable block (template line 1)"
        ),
        format!(
            "{d}/inventory.search.yaml:8:17: `pages` is not a paging style; use `page`, `offset`, `cursor` or `next_link`"
        ),
        format!("{d}/inventory.search.yaml:10:18: jq: unclosed `[`"),
        format!(
            "{d}/inventory.search.yaml:15:27: jq: undefined function `tonumbr/0`; besides jq's builtins the gateway's helpers are nonempty/0, lookup/1, dollars/0, dollars/1, miles/0, miles/1, int/0, int/1, num/0, num/1, legacy_date/0, legacy_datetime/1, lower/0, upper/0, title/0, compact/0, split_list/1"
        ),
        format!("{d}/inventory.vehicle.yaml:6:5: `Bad Header` is not a valid header name"),
        // common.yaml's `def vehicle` gives no `status`: every unit would answer VEHICLE_UNAVAILABLE.
        format!(
            "{d}/inventory.vehicle.yaml:8:3: the mapping never sets `status`, so every vehicle would be hidden (AAP shows only `available`, `intransit` and `pending` units): map the upstream's status, e.g. `status: (.Status | lookup($tables.status_in))`, or write `status: \"available\"` if the upstream lists only units in stock"
        ),
        format!(
            "{d}/inventory.vehicle.yaml:10:13: must be a status code, a list of them, or a class like \"4xx\""
        ),
        format!(
            "{d}/inventory.vehicle.yaml:13:5: `VEHICLE_GONE` is not an AAP error code; use one of UNSUPPORTED_SKILL, SCHEMA_VALIDATION_FAILED, MISSING_REQUIRED_FIELD, INVALID_CONDITION, VEHICLE_NOT_FOUND, VEHICLE_UNAVAILABLE, CONTACT_CONSENT_REQUIRED, INVALID_CONSENT, APPOINTMENT_TIME_UNAVAILABLE, IDEMPOTENCY_CONFLICT, RATE_LIMITED, INTERNAL_ERROR"
        ),
        format!("{d}/upstreams.yaml:3:3: `${{BROKEN_DMS_URL}}` is not set (environment variable)"),
        format!(
            "{d}/upstreams.yaml:7:27: unknown field `colour`, expected one of `attempts`, `backoff`, `max_backoff`, `budget_percent`, `budget_min_per_sec`"
        ),
        "13 problem(s) found".to_owned(),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines, expected, "\n{stderr}");
}

#[test]
fn shipped_mappings_pass_their_examples() {
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test-mappings", "--config", "config/demo.yaml"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with(" passed, 0 failed")),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn a_failing_example_shows_its_diff() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/demo-honda");
    let dst = dir.path().join("mappings");
    std::fs::create_dir_all(dst.join("examples")).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
        }
    }
    std::fs::copy(src.join("examples/feed.csv"), dst.join("examples/feed.csv")).unwrap();
    let search = dst.join("inventory.search.yaml");
    let text = std::fs::read_to_string(&search)
        .unwrap()
        .replace("price: 6899", "price: 6999");
    std::fs::write(&search, text).unwrap();
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        "dealers:\n  - id: d\n    card: { name: D, description: D, url: https://d.example.com/a2a }\n    mappings: mappings\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["test-mappings", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        stdout.contains("FAIL  d inventory.search — motorcycles by price"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reply.vehicles[0].price: expected 6999, got 6899"),
        "{stdout}"
    );
}

/// A configuration of one dealer whose `inventory.search.yaml` is `search` (a REST upstream
/// beside it), in a temporary folder; the folder (removed on drop) and the config file.
fn one_search_dealer(search: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp");
    let mappings = dir.path().join("mappings");
    std::fs::create_dir_all(&mappings).expect("write");
    std::fs::write(
        mappings.join("upstreams.yaml"),
        "dms: { kind: rest, base_url: \"http://127.0.0.1:9\" }\n",
    )
    .expect("write");
    std::fs::write(mappings.join("inventory.search.yaml"), search).expect("write");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        "dealers:\n  - id: d\n    card: { name: D, description: D, url: https://d.example.com/a2a }\n    mappings: mappings\n",
    )
    .expect("write");
    (dir, config)
}

/// Runs `test-mappings` on one dealer whose `inventory.search.yaml` is `search` (a REST
/// upstream beside it); returns (success, stdout).
fn test_search_mapping(search: &str) -> (bool, String) {
    let (_dir, config) = one_search_dealer(search);
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["test-mappings", "--config"])
        .arg(&config)
        .output()
        .expect("run aap-gateway");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A search mapping whose status table knows `In Stock`, answered by `reply`, expecting `expect`.
fn status_table_search(reply: &str, expect: &str) -> String {
    format!(
        "skill: inventory.search\nupstream: dms\nrequest: {{ path: /stock }}\n\
         tables: {{ status_in: {{ In Stock: available }} }}\n\
         response:\n  items: .units\n  item: '{{ vin: .vin, year: .year, make: .make, model: .model, \
         status: (.status | lookup($tables.status_in)) }}'\n\
         examples:\n  - name: the stock list\n    request: {{ type: inventory.search.request }}\n    \
         upstream_reply: {{ status: 200, body: '{reply}' }}\n    expect: {expect}\n"
    )
}

#[test]
fn an_example_whose_every_unit_is_hidden_says_why() {
    // The DMS writes statuses its own way: the table misses `INSTOCK`, so no unit is listable.
    let units = r#"{"units": [{"vin": "1HGCY2F57RA000001", "year": 2024, "make": "Honda", "model": "Civic", "status": "INSTOCK"}]}"#;
    let (ok, stdout) = test_search_mapping(&status_table_search(units, "{ total: 1 }"));
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("every listing was dropped") && stdout.contains("set `status`"),
        "{stdout}"
    );
    // The same mapping over a DMS page with no units at all (however long its body) is fine.
    let none = r#"{"units": [], "message": "No units match the requested criteria at this time."}"#;
    let (ok, stdout) = test_search_mapping(&status_table_search(none, "{ vehicles: [] }"));
    assert!(ok, "{stdout}");
    let (ok, stdout) = test_search_mapping(&status_table_search(none, "{}"));
    assert!(ok, "an empty upstream page hides nothing: {stdout}");
}

/// Issue 37 item 8: a page past the end (`skip` beyond the listings) hid nothing, so it is
/// never blamed on `status`: the example's own expectation decides.
#[test]
fn a_page_past_the_end_is_not_blamed_on_status() {
    let units = r#"{"units": [{"vin": "1HGCY2F57RA000001", "year": 2024, "make": "Honda", "model": "Civic", "status": "In Stock"}]}"#;
    let past_the_end = status_table_search(units, "{ total: 1, vehicles: [] }").replace(
        "request: { type: inventory.search.request }",
        "request: { type: inventory.search.request, pagination: { skip: 5 } }",
    );
    let (ok, stdout) = test_search_mapping(&past_the_end);
    assert!(ok, "{stdout}");
    let wrong = past_the_end.replace("expect: { total: 1, vehicles: [] }", "expect: { total: 2 }");
    let (ok, stdout) = test_search_mapping(&wrong);
    assert!(!ok, "{stdout}");
    assert!(
        !stdout.contains("set `status`"),
        "the real difference, not a guess: {stdout}"
    );
}

#[test]
fn warnings_point_at_their_key_or_at_the_file_when_the_key_is_absent() {
    let f = "tests/fixtures/config/no-aap-section.yaml";
    let (ok, _, stderr) = check(f);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    // No `aap:` section: the file, not `listen:` on line 1.
    assert!(
        lines.contains(
            &format!(
                "{f}: the draft AAP extension URI is for development only; never publish it (warning)"
            )
            .as_str()
        ),
        "{stderr}"
    );
    // `card.url` absent: the dealer's card, where the key belongs.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{f}:6:5: card.url is not set"))),
        "{stderr}"
    );
    // With the key present, its own line.
    let (_, _, stderr) = check("config/demo.yaml");
    assert!(
        stderr
            .contains("config/demo.yaml:9:3: the draft AAP extension URI is for development only"),
        "{stderr}"
    );
}

/// `check` on one dealer whose search maps to `dms` of `upstreams` (the whole upstreams.yaml).
fn check_with_upstreams(upstreams: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("temp");
    let mappings = dir.path().join("mappings");
    std::fs::create_dir_all(&mappings).expect("mkdir");
    std::fs::write(mappings.join("upstreams.yaml"), upstreams).expect("write");
    let units = r#"{"units": [{"vin": "1HGCY2F57RA000001", "year": 2024, "make": "Honda", "model": "Civic", "status": "In Stock"}]}"#;
    std::fs::write(
        mappings.join("inventory.search.yaml"),
        status_table_search(units, "{ total: 1 }"),
    )
    .expect("write");
    let config = dir.path().join("gateway.yaml");
    std::fs::write(
        &config,
        "dealers:\n  - id: d\n    card: { name: D, description: D, url: https://d.example.com/a2a }\n    mappings: mappings\n",
    )
    .expect("write");
    check(config.to_str().expect("utf-8 path"))
}

#[test]
fn credentials_in_clear_outside_loopback_are_refused_unless_allowed() {
    let cases = [
        (
            "dms: { kind: rest, base_url: \"http://dms.dealer.example\", auth: { kind: bearer, token: t0k } }\n",
            "upstreams.yaml:1:20: `dms` sends its credentials over plain http://",
        ),
        (
            "dms: { kind: rest, base_url: \"https://dms.dealer.example\", tls: { insecure_skip_verify: true } }\n",
            "upstreams.yaml:1:67: `dms` certificates are not verified",
        ),
        (
            "dms: { kind: rest, base_url: \"http://dms.dealer.example\" }\n\
             mail: { kind: smtp, base_url: \"smtp://mail.dealer.example\", smtp: { from: a@b.example, to: [c@d.example], starttls: off } }\n",
            "upstreams.yaml:2:107: `mail` with `starttls: off` lead e-mails",
        ),
    ];
    for (upstreams, refused) in cases {
        let (ok, _, stderr) = check_with_upstreams(upstreams);
        assert!(!ok, "{upstreams}");
        let line = stderr.lines().find(|l| l.contains(refused));
        assert!(
            line.is_some_and(|l| l.contains("`allow_plaintext: true`")),
            "{refused}\n{stderr}"
        );
        // Allowed explicitly: `check` passes and notes it.
        let allowed = upstreams.replace(" }\n", ", allow_plaintext: true }\n");
        let (ok, stdout, stderr) = check_with_upstreams(&allowed);
        assert!(ok, "{allowed}\n{stderr}");
        assert!(
            stderr
                .lines()
                .any(|l| l.ends_with("(allowed by `allow_plaintext: true`) (note)")),
            "{stderr}"
        );
        assert!(stdout.contains("note(s)"), "{stdout}");
    }
    // No credentials, or a loopback host (a sidecar's legacy app): nothing to say.
    for fine in [
        "dms: { kind: rest, base_url: \"http://dms.dealer.example\" }\n",
        "dms: { kind: rest, base_url: \"http://127.0.0.1:8000\", auth: { kind: bearer, token: t0k } }\n",
        "dms: { kind: rest, base_url: \"http://[::1]:8000\", auth: { kind: bearer, token: t0k } }\n",
        "dms: { kind: rest, base_url: \"https://dms.dealer.example\", auth: { kind: bearer, token: t0k } }\n",
    ] {
        let (ok, _, stderr) = check_with_upstreams(fine);
        assert!(ok, "{fine}\n{stderr}");
        assert!(!stderr.contains("allow_plaintext"), "{fine}\n{stderr}");
    }
}

/// `check` on one dealer whose `inventory.search.yaml` has `response` as given; its stderr.
fn check_search_response(response: &str) -> String {
    let search = format!(
        "skill: inventory.search\nupstream: dms\nrequest: {{ path: /stock }}\n\
         tables: {{ status_in: {{ In Stock: available }} }}\nresponse:\n{response}"
    );
    let (_dir, config) = one_search_dealer(&search);
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(ok, "{stderr}");
    stderr
}

#[test]
fn check_notes_what_a_search_mapping_costs_off_the_fast_paths() {
    let item = "status: (.status | lookup($tables.status_in))";
    // A path of keys and a native item: nothing to say about extraction.
    let fast = check_search_response(&format!(
        "  items: .data.units\n  item: '{{ vin: .vin, {item} }}'\n"
    ));
    assert!(
        !fast.contains("interpreter") && !fast.contains("not a path of keys"),
        "no extraction note expected:\n{fast}"
    );
    // `floor` is outside the native subset; `items` that filters is not a path.
    let slow = check_search_response(&format!(
        "  items: '[.units[] | select(.vin != null)]'\n  item: '{{ vin: .vin, year: (.year | floor), {item} }}'\n"
    ));
    let notes: Vec<&str> = slow.lines().filter(|l| l.ends_with("(note)")).collect();
    assert!(
        notes.iter().any(|l| l.contains("inventory.search.yaml:7:")
            && l.contains("`item` runs in jaq's interpreter")),
        "{slow}"
    );
    assert!(
        notes.iter().any(|l| l.contains("inventory.search.yaml:6:")
            && l.contains("`items` is not a path of keys")),
        "{slow}"
    );
}

#[test]
fn scan_stale_without_scan_cache_is_refused_where_it_is_written() {
    let search = |keys: &str| {
        format!(
            "skill: inventory.search\nupstream: dms\n{keys}request: {{ path: /stock }}\n\
             response:\n  items: .units\n  item: '{{ vin: .vin, status: \"available\" }}'\n"
        )
    };
    let (_dir, config) = one_search_dealer(&search("scan_cache: 0s\nscan_stale: 30s\n"));
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("inventory.search.yaml:4:")
                && l.contains("`scan_stale`")
                && l.contains("set `scan_cache`")),
        "{stderr}"
    );
    let (_dir, config) = one_search_dealer(&search("scan_cache: 30s\nscan_stale: 1m\n"));
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(ok, "{stderr}");
}

#[test]
fn scan_query_every_unit_without_scan_cache_is_refused_where_it_is_written() {
    let search = |keys: &str| {
        format!(
            "skill: inventory.search\nupstream: dms\n{keys}request: {{ path: /stock }}\n\
             response:\n  items: .units\n  item: '{{ vin: .vin, status: \"available\" }}'\n"
        )
    };
    let (_dir, config) = one_search_dealer(&search("scan_cache: 0s\nscan_query: every_unit\n"));
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("inventory.search.yaml:4:")
                && l.contains("`scan_query: every_unit`")
                && l.contains("set `scan_cache`")),
        "{stderr}"
    );
    let (_dir, config) = one_search_dealer(&search("scan_query: every_units\n"));
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(!ok, "a misspelt value is refused: {stderr}");
    assert!(stderr.contains("every_unit"), "{stderr}");
    let (_dir, config) = one_search_dealer(&search("scan_cache: 30s\nscan_query: every_unit\n"));
    let (ok, _, stderr) = check(config.to_str().expect("UTF-8 path"));
    assert!(ok, "{stderr}");
}
