//! The compiled AAP schemas against the payload corpus (`tests/corpus/{valid,invalid}`), the
//! JSON-RPC payloads of seed 000 and the reference examples (SPEC §10.4).
//!
//! Corpus file format: `{"schema": <file>, "instance": {...}, "expect": {"code", "errors": [
//! {"instanceLocation", "keyword"}]}}` (`expect` only on invalid files). An invalid file must fail
//! with exactly the listed `(instanceLocation, keyword)` set — every failure at once, each at the
//! offending field — and, for request schemas, `schema::classify` must pick `expect.code`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use aap_gateway::error::{AapCode, Violation};
use aap_gateway::protocol::Skill;
use aap_gateway::schema::{self, Schemas};
use serde_json::Value;

/// Which validator of `Schemas` checks a schema file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Request(Skill),
    Response(Skill),
    DealerInformation,
}

fn target(schema_file: &str) -> Option<Target> {
    if schema_file == "dealer-information.schema.json" {
        return Some(Target::DealerInformation);
    }
    Skill::ALL.into_iter().find_map(|skill| {
        if skill.request_schema_file() == schema_file {
            Some(Target::Request(skill))
        } else if skill.response_schema_file() == schema_file {
            Some(Target::Response(skill))
        } else {
            None
        }
    })
}

fn check(schemas: &Schemas, target: Target, instance: &Value) -> Vec<Violation> {
    match target {
        Target::Request(skill) => schemas.check_request(skill, instance),
        Target::Response(skill) => schemas.check_response(skill, instance),
        Target::DealerInformation => schemas.check_dealer_information(instance),
    }
}

fn schemas() -> Schemas {
    Schemas::load().expect("the compiled-in schemas load")
}

fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind)
}

struct Case {
    name: String,
    schema: String,
    instance: Value,
    expect: Option<Value>,
}

fn load_corpus(kind: &str) -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(kind))
        .unwrap_or_else(|e| panic!("read tests/corpus/{kind}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("read corpus file");
            let mut file: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
            let schema = file["schema"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no `schema`"))
                .to_owned();
            Case {
                name,
                schema,
                instance: file["instance"].take(),
                expect: file.get_mut("expect").map(Value::take),
            }
        })
        .collect()
}

fn pairs(violations: &[Violation]) -> BTreeSet<(String, String)> {
    violations
        .iter()
        .map(|v| (v.instance_location.clone(), v.keyword.clone()))
        .collect()
}

fn expected_pairs(expect: &Value) -> BTreeSet<(String, String)> {
    expect["errors"]
        .as_array()
        .expect("expect.errors is an array")
        .iter()
        .map(|e| {
            (
                e["instanceLocation"]
                    .as_str()
                    .expect("instanceLocation")
                    .to_owned(),
                e["keyword"].as_str().expect("keyword").to_owned(),
            )
        })
        .collect()
}

/// Corpus files whose schema `Schemas` has no validator for are skipped, loudly: the API only
/// exposes the ten request/response schemas and `DealerInformation`; primitives such as
/// `vehicle.schema.json` or `error.schema.json` are only reachable through them.
fn skip_reason(case: &Case) -> Option<String> {
    target(&case.schema).is_none().then(|| {
        format!(
            "{}: skipped, `Schemas` exposes no validator for {}",
            case.name, case.schema
        )
    })
}

#[test]
fn corpus_is_present_and_every_file_names_a_known_schema() {
    let valid = load_corpus("valid");
    let invalid = load_corpus("invalid");
    assert!(valid.len() >= 40, "valid corpus: {} files", valid.len());
    assert!(
        invalid.len() >= 100,
        "invalid corpus: {} files",
        invalid.len()
    );
    for case in valid.iter().chain(&invalid) {
        if let Some(reason) = skip_reason(case) {
            eprintln!("{reason}");
        }
    }
    for case in &invalid {
        let expect = case
            .expect
            .as_ref()
            .unwrap_or_else(|| panic!("{}: invalid file without `expect`", case.name));
        assert!(
            !expected_pairs(expect).is_empty(),
            "{}: an invalid file must list at least one error",
            case.name
        );
    }
    // Every one of the ten request/response schemas has valid and invalid coverage.
    for skill in Skill::ALL {
        for file in [skill.request_schema_file(), skill.response_schema_file()] {
            assert!(
                valid.iter().any(|c| c.schema == file),
                "no valid corpus file for {file}"
            );
            assert!(
                invalid.iter().any(|c| c.schema == file),
                "no invalid corpus file for {file}"
            );
        }
    }
}

#[test]
fn every_valid_corpus_file_passes_its_schema() {
    let schemas = schemas();
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in load_corpus("valid") {
        let Some(target) = target(&case.schema) else {
            continue;
        };
        checked += 1;
        let violations = check(&schemas, target, &case.instance);
        if !violations.is_empty() {
            failures.push(format!("{} ({}): {violations:?}", case.name, case.schema));
        }
    }
    assert!(checked >= 40, "only {checked} valid files checked");
    assert!(
        failures.is_empty(),
        "valid payloads rejected:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_invalid_corpus_file_fails_with_exactly_the_listed_errors() {
    let schemas = schemas();
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in load_corpus("invalid") {
        let Some(target) = target(&case.schema) else {
            continue;
        };
        checked += 1;
        let expect = case.expect.as_ref().expect("expect");
        let violations = check(&schemas, target, &case.instance);
        let got = pairs(&violations);
        let want = expected_pairs(expect);
        if got != want {
            let missing: Vec<_> = want.difference(&got).collect();
            let extra: Vec<_> = got.difference(&want).collect();
            failures.push(format!(
                "{}: missing {missing:?}, unexpected {extra:?}",
                case.name
            ));
        }
        // Each failure is reported once (no duplicate output units).
        if got.len() != violations.len() {
            failures.push(format!(
                "{}: duplicate violations {violations:?}",
                case.name
            ));
        }
        for v in &violations {
            if v.error.is_empty() {
                failures.push(format!(
                    "{}: empty error message at {}",
                    case.name, v.instance_location
                ));
            }
        }
    }
    assert!(checked >= 100, "only {checked} invalid files checked");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_invalid_request_is_classified_with_the_expected_code() {
    let schemas = schemas();
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in load_corpus("invalid") {
        let Some(Target::Request(skill)) = target(&case.schema) else {
            continue;
        };
        checked += 1;
        let expect = case.expect.as_ref().expect("expect");
        let want = expect["code"].as_str().expect("expect.code");
        let want_code = AapCode::parse(want)
            .unwrap_or_else(|| panic!("{}: `{want}` is no AAP code", case.name));
        let violations = schemas.check_request(skill, &case.instance);
        let got = schema::classify(skill, &case.instance, &violations);
        if got != want_code {
            failures.push(format!("{}: classified {got}, expected {want}", case.name));
        }
    }
    assert!(checked >= 100, "only {checked} invalid requests checked");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Response files are not classified (a bad reply is the gateway's own `INTERNAL_ERROR`); their
/// `expect.code` is the corpus marker `INVALID_RESPONSE`.
#[test]
fn invalid_response_files_are_marked_invalid_response() {
    for case in load_corpus("invalid") {
        if let Some(Target::Response(_)) = target(&case.schema) {
            let code = case.expect.as_ref().expect("expect")["code"].clone();
            assert_eq!(code, "INVALID_RESPONSE", "{}", case.name);
        }
    }
}

/// The `DealerInformation` validator agrees with the response schema that embeds it: a valid
/// `dealer.information.response` carries a valid profile, and an invalid one whose failures all
/// lie under `/data` fails the profile check at the same places, relative to the profile.
#[test]
fn dealer_information_profile_agrees_with_the_response_schema() {
    let schemas = schemas();
    let response_file = Skill::DealerInformation.response_schema_file();
    let mut valid_checked = 0;
    for case in load_corpus("valid")
        .into_iter()
        .filter(|c| c.schema == response_file)
    {
        valid_checked += 1;
        let profile = &case.instance["data"];
        let violations = schemas.check_dealer_information(profile);
        assert!(violations.is_empty(), "{}: {violations:?}", case.name);
    }
    assert!(valid_checked >= 2, "{valid_checked}");

    let mut invalid_checked = 0;
    for case in load_corpus("invalid")
        .into_iter()
        .filter(|c| c.schema == response_file)
    {
        let want = expected_pairs(case.expect.as_ref().expect("expect"));
        let Some(relative) = want
            .iter()
            .map(|(at, kw)| {
                at.strip_prefix("/data/")
                    .map(|r| (format!("/{r}"), kw.clone()))
            })
            .collect::<Option<BTreeSet<_>>>()
        else {
            continue; // some failure is in the response envelope, outside the profile
        };
        invalid_checked += 1;
        let got = pairs(&schemas.check_dealer_information(&case.instance["data"]));
        assert_eq!(got, relative, "{}", case.name);
    }
    assert!(invalid_checked >= 1, "{invalid_checked}");
}

/// Whole-valued floats are integers for the schemas (JSON Schema compares numbers by value),
/// and the gateway also rewrites them to JSON integers before anything else reads them.
#[test]
fn whole_valued_floats_are_integers_and_fractions_are_not() {
    let schemas = schemas();
    let mut data = serde_json::json!({
        "type": "inventory.search.request",
        "filters": { "year_min": 2020.0, "price_max": 30000.0 },
        "pagination": { "skip": 0.0, "limit": 20.0 }
    });
    assert!(
        schemas
            .check_request(Skill::InventorySearch, &data)
            .is_empty()
    );
    aap_gateway::binding::send_message::normalize_numbers(&mut data);
    assert_eq!(data["pagination"]["limit"].as_i64(), Some(20));
    assert_eq!(data["filters"]["year_min"].as_i64(), Some(2020));
    assert!(
        schemas
            .check_request(Skill::InventorySearch, &data)
            .is_empty()
    );

    let mut fractional = serde_json::json!({
        "type": "inventory.search.request",
        "pagination": { "limit": 20.5 }
    });
    aap_gateway::binding::send_message::normalize_numbers(&mut fractional);
    let got = pairs(&schemas.check_request(Skill::InventorySearch, &fractional));
    let want: BTreeSet<_> = [("/pagination/limit".to_owned(), "type".to_owned())].into();
    assert_eq!(got, want);
}

// === shared reference material (../shared beside the clone, as in CI) ===

fn shared_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if dir.join("aap/reference").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: {} not found (CI places shared/ beside the clone); the corpus copies \
             (seed000-*, spec-*, example-*) still cover these payloads",
            dir.display()
        );
        None
    }
}

/// The top-level JSON documents of a text page: a line `{` opens one, the next line `}` closes it.
fn json_blocks(text: &str) -> Vec<Value> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match current.as_mut() {
            None if line == "{" => current = Some(String::from("{\n")),
            None => {}
            Some(buffer) => {
                buffer.push_str(line);
                buffer.push('\n');
                if line == "}" {
                    let text = current.take().expect("open block");
                    blocks.push(
                        serde_json::from_str(&text).unwrap_or_else(|e| {
                            panic!("seed JSON block does not parse: {e}\n{text}")
                        }),
                    );
                }
            }
        }
    }
    blocks
}

fn response_skill(ty: &str) -> Option<Skill> {
    Skill::ALL.into_iter().find(|s| s.response_type() == ty)
}

/// Validates every AAP payload inside a JSON-RPC request or success reply; returns how many
/// were checked. Placeholder payloads (`<scope>.<thing>.request`) and error replies are skipped.
fn check_jsonrpc(schemas: &Schemas, what: &str, envelope: &Value) -> usize {
    let mut checked = 0;
    let parts = envelope["params"]["message"]["parts"]
        .as_array()
        .or_else(|| envelope["result"]["message"]["parts"].as_array());
    for part in parts.into_iter().flatten() {
        let data = &part["data"];
        let ty = data["type"].as_str().unwrap_or_default();
        let (target, media_type) = if let Some(skill) = Skill::from_request_type(ty) {
            (Target::Request(skill), skill.request_media_type())
        } else if let Some(skill) = response_skill(ty) {
            (Target::Response(skill), skill.response_media_type())
        } else {
            eprintln!("{what}: skipped part of type `{ty}` (placeholder, no schema)");
            continue;
        };
        assert_eq!(part["mediaType"], media_type, "{what}: mediaType of {ty}");
        let violations = check(schemas, target, data);
        assert!(violations.is_empty(), "{what} ({ty}): {violations:?}");
        checked += 1;
    }
    checked
}

#[test]
fn every_jsonrpc_payload_of_seed_000_validates() {
    let Some(shared) = shared_dir() else { return };
    let text = std::fs::read_to_string(shared.join("seeds/000_d0f6d3b02f505d5f.txt"))
        .expect("read seed 000");
    let schemas = schemas();
    let blocks = json_blocks(&text);
    let mut checked = 0;
    let mut skills_seen = BTreeSet::new();
    for (i, block) in blocks.iter().enumerate() {
        if block.get("jsonrpc").is_none() {
            continue;
        }
        if block.get("error").is_some() {
            // An error reply: its AAP payload is `aap.error` (error.schema.json), for which
            // `Schemas` has no validator; protocol.rs checks the gateway's own error shape.
            eprintln!("seed block {i}: error reply, skipped");
            continue;
        }
        let n = check_jsonrpc(&schemas, &format!("seed block {i}"), block);
        if n > 0 {
            skills_seen.insert(block["id"].to_string());
        }
        checked += n;
    }
    // Five skills, a request and a response each.
    assert_eq!(checked, 10, "payloads checked");
    assert_eq!(skills_seen.len(), 5, "{skills_seen:?}");
}

#[test]
fn every_reference_example_with_a_schema_validates() {
    let Some(shared) = shared_dir() else { return };
    let dir = shared.join("aap/reference/examples");
    let schemas = schemas();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read examples")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let mut checked = Vec::new();
    for name in &names {
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(name)).expect("read example"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        // `<schema stem>[.<variant>].example.json`; `.jsonrpc.` marks a whole JSON-RPC envelope.
        let stem = name.split('.').next().expect("stem");
        let schema_file = format!("{stem}.schema.json");
        let Some(target) = target(&schema_file) else {
            eprintln!("{name}: skipped, `Schemas` exposes no validator for {schema_file}");
            continue;
        };
        if name.contains(".jsonrpc.") {
            let n = check_jsonrpc(&schemas, name, &value);
            assert!(
                n > 0 || value.get("error").is_some(),
                "{name}: nothing checked"
            );
            if n > 0 {
                checked.push(name.clone());
            }
        } else {
            let violations = check(&schemas, target, &value);
            assert!(violations.is_empty(), "{name}: {violations:?}");
            checked.push(name.clone());
        }
    }
    // search response (plain, motorcycle, JSON-RPC), three lead requests, three vehicle details.
    assert!(checked.len() >= 9, "checked only {checked:?}");
}

/// The corpus copies of the seed and reference payloads are the same documents as in shared/, so
/// the corpus tests above keep covering them when shared/ is absent.
#[test]
fn corpus_copies_match_the_reference_examples() {
    let Some(shared) = shared_dir() else { return };
    let dir = shared.join("aap/reference/examples");
    let valid = load_corpus("valid");
    for case in valid.iter().filter(|c| c.name.starts_with("example-")) {
        // example-inventory-search-response-motorcycle.json ⇐ inventory-search-response.motorcycle.example.json
        let found = std::fs::read_dir(&dir)
            .expect("read examples")
            .filter_map(|e| {
                let path = e.expect("entry").path();
                serde_json::from_str::<Value>(&std::fs::read_to_string(&path).ok()?).ok()
            })
            .any(|v| {
                v == case.instance || v["result"]["message"]["parts"][0]["data"] == case.instance
            });
        assert!(found, "{}: not a copy of any reference example", case.name);
    }
}
