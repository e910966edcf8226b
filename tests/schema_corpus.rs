//! The project's AAP schemas (`schemas/`, compiled in) against the payload corpus
//! (`tests/corpus/{valid,invalid}`) and against the public reference material kept in
//! `tests/reference/` (origin and licence in its README): the payloads of the two AAP binding
//! pages, the reference examples, and the reference schemas' own verdict on every corpus file.
//!
//! Corpus file format: `{"schema": <file>, "instance": {...}, "expect": {"code", "errors": [
//! {"instanceLocation", "keyword"}]}}` (`expect` only on invalid files). An invalid file must fail
//! with exactly the listed `(instanceLocation, keyword)` set — every failure at once, each at the
//! offending field — and, for request schemas, `schema::classify` must pick `expect.code`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use aap_gateway::error::{AapCode, Violation};
use aap_gateway::protocol::{Payload, Skill};
use aap_gateway::schema::{self, Schemas};
use serde_json::{Value, json};

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
        Target::Response(skill) => {
            schemas.check_response(skill, &Payload::Json(Arc::new(instance.clone())))
        }
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

// === public reference material (tests/reference, origin and licence in its README) ===

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference")
}

fn read_reference(path: &str) -> String {
    let path = reference_dir().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
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

/// The AAP payloads inside a JSON-RPC request or success reply, or inside an HTTP+JSON
/// `SendMessageRequest` / `SendMessageResponse`, with the schema each belongs to. Placeholder
/// payloads (`<scope>.<thing>.request`) are left out, loudly.
fn payloads<'a>(what: &str, envelope: &'a Value) -> Vec<(Target, &'a Value, &'a Value)> {
    let parts = envelope["params"]["message"]["parts"]
        .as_array()
        .or_else(|| envelope["result"]["message"]["parts"].as_array())
        .or_else(|| envelope["message"]["parts"].as_array());
    let mut found = Vec::new();
    for part in parts.into_iter().flatten() {
        let data = &part["data"];
        let ty = data["type"].as_str().unwrap_or_default();
        let target = if let Some(skill) = Skill::from_request_type(ty) {
            Target::Request(skill)
        } else if let Some(skill) = response_skill(ty) {
            Target::Response(skill)
        } else {
            eprintln!("{what}: skipped part of type `{ty}` (placeholder, no schema)");
            continue;
        };
        found.push((target, data, &part["mediaType"]));
    }
    found
}

fn media_type(target: Target) -> &'static str {
    match target {
        Target::Request(skill) => skill.request_media_type(),
        Target::Response(skill) => skill.response_media_type(),
        Target::DealerInformation => unreachable!("no DataPart carries a bare profile"),
    }
}

/// Validates every AAP payload of a JSON-RPC envelope; returns how many were checked.
fn check_payloads_of_envelope(schemas: &Schemas, what: &str, envelope: &Value) -> usize {
    let found = payloads(what, envelope);
    for (target, data, part_media_type) in &found {
        let ty = &data["type"];
        assert_eq!(
            *part_media_type,
            media_type(*target),
            "{what}: mediaType of {ty}"
        );
        let violations = check(schemas, *target, data);
        assert!(violations.is_empty(), "{what} ({ty}): {violations:?}");
    }
    found.len()
}

#[test]
fn every_jsonrpc_payload_of_the_jsonrpc_binding_page_validates() {
    let text = read_reference("seeds/jsonrpc-binding.txt");
    let schemas = schemas();
    let blocks = json_blocks(&text);
    let mut checked = 0;
    let mut skills_seen = BTreeSet::new();
    for (i, block) in blocks.iter().enumerate() {
        if block.get("jsonrpc").is_none() {
            continue;
        }
        if block.get("error").is_some() {
            // An error reply: its AAP payload is `aap.error`, for which `Schemas` has no
            // validator; protocol.rs checks the gateway's own error shape.
            eprintln!("seed block {i}: error reply, skipped");
            continue;
        }
        let n = check_payloads_of_envelope(&schemas, &format!("seed block {i}"), block);
        if n > 0 {
            skills_seen.insert(block["id"].to_string());
        }
        checked += n;
    }
    // Five skills, a request and a response each.
    assert_eq!(checked, 10, "payloads checked");
    assert_eq!(skills_seen.len(), 5, "{skills_seen:?}");
}

/// The bodies of the `curl -d '…'` calls of a page.
fn curl_bodies(text: &str) -> Vec<Value> {
    text.split("curl -X POST")
        .skip(1)
        .map(|call| {
            let body = call
                .split_once("-d '")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(body, _)| body)
                .unwrap_or_else(|| panic!("a curl call without a -d body: {call:.200}"));
            serde_json::from_str(body).unwrap_or_else(|e| panic!("curl body: {e}\n{body}"))
        })
        .collect()
}

/// The AAP v1.0 HTTP+JSON page sends one request per skill. Three are still valid AAP; two use
/// fields the current contract dropped (`docs/protocol.md` records both decisions), and must be
/// refused exactly there and nowhere else.
#[test]
fn the_v1_0_http_json_page_requests_validate_except_the_two_dropped_fields() {
    let text = read_reference("seeds/http-json-binding-v1.0.txt");
    let schemas = schemas();
    let bodies = curl_bodies(&text);
    assert_eq!(bodies.len(), 5, "one call per skill");
    let mut seen = BTreeSet::new();
    for body in &bodies {
        let found = payloads("v1.0 page", body);
        assert_eq!(found.len(), 1, "{body}");
        let (target, data, part_media_type) = found[0];
        let Target::Request(skill) = target else {
            panic!("a request body carries {target:?}");
        };
        seen.insert(skill);
        // The v1.0 page names the vehicle media type after its schema file.
        if skill != Skill::InventoryVehicle {
            assert_eq!(*part_media_type, media_type(target), "{skill:?}");
        }
        let got = pairs(&check(&schemas, target, data));
        let want: BTreeSet<(String, String)> = match skill {
            Skill::InventoryVehicle => [("/zip".into(), "additionalProperties".into())].into(),
            Skill::LeadSubmit => [
                (
                    "/consent/source_agent".into(),
                    "additionalProperties".into(),
                ),
                ("/source_agent".into(), "type".into()),
            ]
            .into(),
            _ => BTreeSet::new(),
        };
        assert_eq!(got, want, "{skill:?}: {data}");
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
}

#[test]
fn every_reference_example_with_a_schema_validates() {
    let dir = reference_dir().join("aap/examples");
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
            let n = check_payloads_of_envelope(&schemas, name, &value);
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

/// The corpus copies (`example-*`) are the same documents as the reference examples.
#[test]
fn corpus_copies_match_the_reference_examples() {
    let dir = reference_dir().join("aap/examples");
    let examples: Vec<Value> = std::fs::read_dir(&dir)
        .expect("read examples")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            serde_json::from_str::<Value>(&std::fs::read_to_string(&path).ok()?).ok()
        })
        .collect();
    let valid = load_corpus("valid");
    let copies: Vec<_> = valid
        .iter()
        .filter(|c| c.name.starts_with("example-"))
        .collect();
    assert!(copies.len() >= 9, "{} copies", copies.len());
    for case in copies {
        let found = examples.iter().any(|v| {
            *v == case.instance || v["result"]["message"]["parts"][0]["data"] == case.instance
        });
        assert!(found, "{}: not a copy of any reference example", case.name);
    }
}

/// The reference schemas, loaded by `$id`, one validator per schema file (formats checked).
static REFERENCE: LazyLock<HashMap<String, jsonschema::Validator>> = LazyLock::new(|| {
    let mut files = Vec::new();
    json_files(&reference_dir().join("aap/schemas"), &mut files);
    let mut resources = Vec::new();
    let mut ids = Vec::new();
    for file in &files {
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(file).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let id = schema["$id"].as_str().expect("$id").to_owned();
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        ids.push((name.to_owned(), id.clone()));
        resources.push((id, schema));
    }
    let registry = jsonschema::Registry::new()
        .extend(resources)
        .and_then(|b| b.prepare())
        .expect("reference registry");
    ids.into_iter()
        .map(|(name, id)| {
            let validator = jsonschema::draft202012::options()
                .should_validate_formats(true)
                .with_registry(&registry)
                .build(&json!({ "$ref": id }))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, validator)
        })
        .collect()
});

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

/// Whether JSON Pointer `outer` is `inner` or one of its ancestors.
fn encloses(outer: &str, inner: &str) -> bool {
    inner == outer || inner.starts_with(&format!("{outer}/"))
}

/// Where the project's schemas are deliberately stricter than the reference schemas: rules the
/// AAP documentation states in prose and the reference schemas leave out. Each entry is a corpus
/// file and the places only the project's schemas report, with the reason.
const STRICTER: [(&str, &[&str], &str); 6] = [
    (
        "lead-text-over-the-length-caps.json",
        &[
            "/customer/first_name",
            "/customer/last_name",
            "/customer/email",
            "/customer/address/country",
            "/customer/address/state",
            "/customer/address/city",
            "/customer/address/address_line_1",
            "/customer/address/address_line_2",
            "/customer/address/zip",
            "/consent/consent_text",
            "/source_agent/name",
            "/source_agent/url",
            "/source_agent/agent_card_url",
            "/vehicle_of_interest/make",
            "/vehicle_of_interest/model",
            "/vehicle_of_interest/trim",
            "/vehicle_of_interest/notes",
            "/vehicle_of_interest/features/1",
            "/trade_in/description",
            "/trade_in/exterior_color",
        ],
        "length caps on a lead's free text (docs/leads.md §Field lengths)",
    ),
    (
        "resp-facets-bad-values.json",
        &["/data/statuses/0/value"],
        "a status facet counts only units a buyer may see (available, intransit, pending)",
    ),
    (
        "resp-lead-confirmed-with-proposed-times.json",
        &["/data/appointment/proposed_times"],
        "`proposed_times` only when the appointment is `proposed`",
    ),
    (
        "resp-lead-confirmed-without-time.json",
        &["/data/appointment/confirmed_at"],
        "a `confirmed` appointment carries `confirmed_at`",
    ),
    (
        "resp-lead-proposed-without-times.json",
        &["/data/appointment/proposed_times"],
        "a `proposed` appointment carries `proposed_times`",
    ),
    (
        "resp-lead-requested-with-times.json",
        &[
            "/data/appointment/confirmed_at",
            "/data/appointment/proposed_times",
        ],
        "`confirmed_at` and `proposed_times` only when confirmed or proposed",
    ),
];

/// An independent oracle over the whole corpus: the reference schemas accept exactly the files
/// the project's schemas accept, and fail the invalid ones at the same places. (The project
/// reports a missing or unknown property at the property itself, where JSON Schema reports it
/// at the object that holds it; so places agree when one encloses the other.)
#[test]
fn the_reference_schemas_agree_with_the_projects_on_every_corpus_file() {
    let schemas = schemas();
    let mut disagreements = Vec::new();
    let mut checked = 0;
    for case in load_corpus("valid")
        .into_iter()
        .chain(load_corpus("invalid"))
    {
        let Some(target) = target(&case.schema) else {
            continue;
        };
        let reference = REFERENCE
            .get(&case.schema)
            .unwrap_or_else(|| panic!("{}: no reference schema {}", case.name, case.schema));
        checked += 1;
        let ours = pairs(&check(&schemas, target, &case.instance));
        let theirs: BTreeSet<String> = reference
            .iter_errors(&case.instance)
            .map(|e| e.instance_path().to_string())
            .collect();
        let stricter = STRICTER
            .iter()
            .find(|(file, _, _)| *file == case.name)
            .map_or(&[][..], |(_, places, _)| *places);
        for place in stricter {
            assert!(
                ours.iter().any(|(at, _)| at == place),
                "{}: the project's schemas no longer fail at {place}; update STRICTER",
                case.name
            );
        }
        let our_places: BTreeSet<String> = ours
            .iter()
            .map(|(at, _)| at.clone())
            .filter(|at| !stricter.contains(&at.as_str()))
            .collect();
        let matched = theirs
            .iter()
            .all(|t| our_places.iter().any(|o| encloses(t, o)))
            && our_places
                .iter()
                .all(|o| theirs.iter().any(|t| encloses(t, o)));
        if our_places.is_empty() != theirs.is_empty() || !matched {
            disagreements.push(format!(
                "{}: ours {ours:?}, reference at {theirs:?}",
                case.name
            ));
        }
    }
    assert!(checked >= 140, "only {checked} corpus files checked");
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
