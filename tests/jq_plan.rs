//! Native jq plans (`src/lang/jq/plan/`) against jaq, on the programs that ship.
//!
//! Every jq program of every mapping folder (`mappings/*`, `tests/fixtures/mappings/*`, with the
//! folder's `jq_defs` prepended and `items` wrapped as the loader does) and of the YAML examples
//! in `docs/mappings.md` runs twice, through [`Jq::compile`] (the native plan where there is one)
//! and [`Jq::compile_interpreted`] (jaq), over the mappings' own canned replies, every record in
//! them, and awkward variants of those records. Both must give the same outputs, exactly (integer
//! and float kept apart), or the same error.
//!
//! Each program also runs on the input as a record read off a JSON reply's tape (what the engine
//! does with the records of a list, `Doc::records`), which must give what it gives on the same
//! text decoded into values.
//!
//! Property tests do the same over random JSON for a set of programs, and one test pins which
//! programs of the demo's searches must stay native.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use aap_gateway::engine::Handler;
use aap_gateway::engine::proxy::ResponseSpec;
use aap_gateway::formats::{self, Declared, Format};
use aap_gateway::lang::jq::{Doc, Jq, JqValue, JqVars};
use aap_gateway::mapping::{LoadContext, load_folder};
use aap_gateway::protocol::Skill;
use aap_gateway::schema::Schemas;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use yaml_rust2::{Yaml, YamlLoader};

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// How the loader wraps an `items` program (`mapping::loader::items_program`).
fn items_program(code: &str) -> String {
    format!(
        "({code}) | if type == \"array\" then .[] else error(\"`items` must give an array, got \\(type)\") end"
    )
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn yaml_to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Real(r) => r.parse::<f64>().map_or(Value::Null, Value::from),
        Yaml::Integer(i) => json!(i),
        Yaml::String(s) => json!(s),
        Yaml::Boolean(b) => json!(b),
        Yaml::Array(a) => a.iter().map(yaml_to_json).collect(),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let k = match k {
                        Yaml::String(s) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (k, yaml_to_json(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

fn load_yaml(text: &str) -> Option<Value> {
    let docs = YamlLoader::load_from_str(text).ok()?;
    docs.first().map(yaml_to_json)
}

/// A program as the loader compiles it: where it comes from and its full text.
struct Program {
    at: String,
    code: String,
}

/// The jq programs of one mapping file (`jq_defs` is prepended by the caller).
fn programs_in(file: &str, doc: &Value, defs: Option<&str>, out: &mut Vec<Program>) {
    let with_defs = |code: &str| match defs {
        Some(defs) => format!("{defs}\n{code}"),
        None => code.to_owned(),
    };
    let mut push = |at: &str, code: String| {
        out.push(Program {
            at: format!("{file}{at}"),
            code,
        })
    };
    let str_at = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    for (base, at) in [
        (doc, ""),
        (doc.get("response").unwrap_or(&Value::Null), "/response"),
    ] {
        if let Some(items) = str_at(base, "items") {
            push(&format!("{at}/items"), with_defs(&items_program(&items)));
        }
        for key in ["total", "item", "jq"] {
            if let Some(code) = str_at(base, key) {
                push(&format!("{at}/{key}"), with_defs(&code));
            }
        }
    }
    // Feeds without `items`: the document itself is the list of records.
    if doc.get("item").is_some() && doc.get("items").is_none() {
        push("/items (default)", with_defs(&items_program(".")));
    }
    let rules = doc.get("errors").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        if let Some(code) = rule.get("when").and_then(|w| str_at(w, "jq")) {
            push(&format!("/errors/{i}/when/jq"), with_defs(&code));
        }
    }
}

/// A mapping folder's programs and decoded canned replies.
struct Folder {
    name: String,
    programs: Vec<Program>,
    documents: Vec<JqValue>,
}

fn folder(dir: &Path) -> Folder {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let common = read("common.yaml").and_then(|t| load_yaml(&t));
    let defs = common
        .as_ref()
        .and_then(|c| c.get("jq_defs"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut programs = Vec::new();
    let mut list_elements = Vec::new();
    let mut charset = None;
    let mut documents = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("mapping folder")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    for name in &names {
        let Some(doc) = read(name).and_then(|t| load_yaml(&t)) else {
            continue;
        };
        programs_in(name, &doc, defs.as_deref(), &mut programs);
        for holder in [&doc, doc.get("response").unwrap_or(&Value::Null)] {
            for e in holder
                .get("list_elements")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                list_elements.extend(e.as_str().map(str::to_owned));
            }
            if let Some(label) = holder.get("charset").and_then(Value::as_str) {
                charset = formats::charset(label).ok();
            }
        }
        // Inline canned replies.
        let examples = doc.get("examples").and_then(Value::as_array);
        for example in examples.into_iter().flatten() {
            if let Some(body) = example.pointer("/upstream_reply/body") {
                documents.push(match body {
                    Value::String(s) => JqValue::from_json_slice(s.as_bytes())
                        .unwrap_or_else(|_| JqValue::from_json(body)),
                    other => JqValue::from_json(other),
                });
            }
        }
    }
    let examples = std::fs::read_dir(dir.join("examples"))
        .into_iter()
        .flatten();
    for entry in examples.flatten() {
        let path = entry.path();
        let body = std::fs::read(&path).expect("canned reply");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let format = match ext {
            "json" => Format::Json,
            "csv" => Format::parse(Some("csv"), &[]).expect("csv"),
            _ => Format::parse(Some("xml"), &list_elements).expect("xml"),
        };
        let declared = Declared {
            mapping: charset,
            content_type: None,
        };
        let doc = JqValue::decode(&format, &bytes::Bytes::from(body), declared)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        documents.push(doc);
    }
    Folder {
        name: dir.display().to_string(),
        programs,
        documents,
    }
}

fn mapping_folders() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in ["mappings", "tests/fixtures/mappings"] {
        for entry in std::fs::read_dir(repo(root))
            .expect("mapping root")
            .flatten()
        {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    dirs.sort();
    dirs
}

fn vars() -> JqVars {
    let tables = load_yaml(&read("mappings/demo-toyota/common.yaml"))
        .and_then(|c| c.get("tables").cloned())
        .unwrap_or_default();
    let mut tables = tables.as_object().cloned().unwrap_or_default();
    // The Honda and XML feed folders' table names are the same; lead.submit's own tables:
    tables.insert(
        "outcome_in".into(),
        json!({"Accepted": "received", "Duplicate": "duplicate"}),
    );
    tables.insert(
        "appointment_in".into(),
        json!({"Booked": "confirmed", "Alternatives": "alternatives", "Requested": "requested"}),
    );
    JqVars {
        request: JqValue::from_json(&json!({
            "type": "lead.submit.request",
            "appointment": {"appointment_type": "test_drive", "appointment_at": "2026-05-02T17:00:00Z"},
            "filters": {"make": ["Toyota"]}
        })),
        tables: JqValue::from_json(&Value::Object(tables)),
        dealer: JqValue::from_json(&json!({"id": "demo_toyota", "name": "Demo Toyota"})),
        lead: JqValue::from_json(&json!({"reference": "AAP-1234"})),
    }
}

/// Outputs rendered with jaq's own `Debug`, so that `1` and `1.0` differ; the truthiness of
/// the first; and the one output as JSON text (key order kept).
type Outcome = (
    Result<String, String>,
    Result<bool, String>,
    Result<String, String>,
);

fn outcome(jq: &Jq, input: &JqValue, vars: &JqVars) -> Outcome {
    let all = jq
        .run(input, vars)
        .map(|out| format!("{out:?}"))
        .map_err(|e| e.0);
    let json = jq
        .run_one_json(input, vars)
        .map(|v| v.to_string())
        .map_err(|e| e.0);
    (all, jq.run_bool(input, vars).map_err(|e| e.0), json)
}

/// jaq's outcome, its one output converted to JSON the general way.
fn jaq_outcome(jq: &Jq, input: &JqValue, vars: &JqVars) -> Outcome {
    let (all, first) = (
        jq.run(input, vars)
            .map(|out| format!("{out:?}"))
            .map_err(|e| e.0),
        jq.run_bool(input, vars).map_err(|e| e.0),
    );
    let json = jq
        .run_one(input, vars)
        .map(|v| v.to_json().to_string())
        .map_err(|e| e.0);
    (all, first, json)
}

/// Runs `code` both ways on `input`, and natively on `input` as a record on a tape; `Err`
/// describes a difference.
fn compare(native: &Jq, jaq: &Jq, input: &JqValue, vars: &JqVars) -> Result<(), String> {
    let (got, want) = (outcome(native, input, vars), jaq_outcome(jaq, input, vars));
    if got != want {
        return Err(format!(
            "input {}\n  native: {got:?}\n  jaq:    {want:?}",
            input.to_json()
        ));
    }
    let (on_tape, decoded) = on_tape(native, input, vars);
    if on_tape != decoded {
        return Err(format!(
            "input {}\n  on a tape: {on_tape:?}\n  decoded:   {decoded:?}",
            input.to_json()
        ));
    }
    Ok(())
}

/// `jq`'s one output as JSON text on `input` written out in a reply `{"Items": [input]}`: read
/// off the reply's tape as a record, and decoded into values.
fn on_tape(
    jq: &Jq,
    input: &JqValue,
    vars: &JqVars,
) -> (Result<String, String>, Result<String, String>) {
    let text = serde_json::to_vec(&json!({ "Items": [input.to_json()] })).expect("JSON");
    let body = bytes::Bytes::from(text);
    let doc = Doc::from_json_bytes(&body).expect("parses");
    static PROGRAMS: LazyLock<(Jq, Jq)> = LazyLock::new(|| {
        let compile = |code| Jq::compile(code).expect("compiles");
        (compile(".Items"), compile(".Items[0]"))
    });
    let (items, first) = &*PROGRAMS;
    let records = doc
        .records(items.key_path().expect("a path"))
        .expect("records");
    let on_tape = jq
        .run_one_json_record(&records[0], vars)
        .map(|v| v.to_string())
        .map_err(|e| e.0);
    let decoded = JqValue::from_json_bytes(&body).expect("parses");
    let record = first.run_one(&decoded, vars).expect("the record");
    let decoded = jq
        .run_one_json(&record, vars)
        .map(|v| v.to_string())
        .map_err(|e| e.0);
    (on_tape, decoded)
}

/// Odd values a legacy system sends where a field should be.
fn awkward_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(""),
        json!("   "),
        json!(0),
        json!(-3),
        json!(24990.5),
        json!(1e300),
        json!("12,345"),
        json!("2022"),
        json!("$24,990.60"),
        json!("Call for price"),
        json!("03/15/2026"),
        json!("2026-11-30 14:05:00"),
        json!(true),
        json!(false),
        json!([]),
        json!(["a", null, " b "]),
        json!({}),
        json!({"#text": "x", "@city": "28"}),
        json!("ünïcödé ✓ 🚗"),
        json!("A|B| C |"),
    ]
}

/// `record` itself, then each key dropped, each text padded with white space, and each key set
/// to each awkward value.
fn variants(record: &Value, out: &mut Vec<Value>) {
    out.push(record.clone());
    let Some(fields) = record.as_object() else {
        return;
    };
    for (key, value) in fields {
        let mut dropped = fields.clone();
        dropped.remove(key);
        out.push(Value::Object(dropped));
        if let Some(text) = value.as_str() {
            let mut padded = fields.clone();
            padded.insert(key.clone(), json!(format!(" \u{a0}{text}\t ")));
            out.push(Value::Object(padded));
        }
        for odd in awkward_values() {
            let mut changed = fields.clone();
            changed.insert(key.clone(), odd);
            out.push(Value::Object(changed));
        }
    }
}

/// Documents, records (what `items` programs give) and variants of both, and a few scalars.
fn inputs(folder: &Folder, vars: &JqVars) -> Vec<JqValue> {
    let mut records = Vec::new();
    for doc in &folder.documents {
        for p in folder.programs.iter().filter(|p| p.at.contains("items")) {
            if let Ok(jq) = Jq::compile_interpreted(&p.code)
                && let Ok(out) = jq.run(doc, vars)
            {
                records.extend(out.iter().map(JqValue::to_json));
            }
        }
    }
    let mut values = Vec::new();
    for doc in &folder.documents {
        variants(&doc.to_json(), &mut values);
        // One level down too (`.Items`, `.Inventory`, `.GetVehicleResponse`, …).
        for inner in doc.to_json().as_object().into_iter().flat_map(Map::values) {
            variants(inner, &mut values);
        }
    }
    // Every record as it came, the first three also in every awkward variant.
    for (i, record) in records.iter().enumerate() {
        if i < 3 {
            variants(record, &mut values);
        } else {
            values.push(record.clone());
        }
    }
    values.extend(awkward_values());
    let mut jq_values: Vec<JqValue> = values.iter().map(JqValue::from_json).collect();
    jq_values.extend(folder.documents.iter().cloned());
    jq_values
}

#[test]
fn every_mapping_program_gives_the_same_outputs_natively_and_in_jaq() {
    let vars = vars();
    let mut report = BTreeMap::new();
    let mut failures = Vec::new();
    let mut runs = 0;
    for dir in mapping_folders() {
        let folder = folder(&dir);
        let inputs = inputs(&folder, &vars);
        for program in &folder.programs {
            let (Ok(native), Ok(jaq)) = (
                Jq::compile(&program.code),
                Jq::compile_interpreted(&program.code),
            ) else {
                // Broken fixtures (`tests/fixtures/mappings/broken*`) do not compile either way.
                assert!(
                    Jq::compile(&program.code).is_err()
                        && Jq::compile_interpreted(&program.code).is_err()
                );
                continue;
            };
            report.insert(
                format!("{}/{}", folder.name, program.at),
                native.is_native(),
            );
            for input in &inputs {
                runs += 1;
                if let Err(diff) = compare(&native, &jaq, input, &vars) {
                    failures.push(format!("{}/{}: {diff}", folder.name, program.at));
                }
            }
        }
    }
    for (at, native) in &report {
        eprintln!("{} {at}", if *native { "native  " } else { "fallback" });
    }
    assert!(runs > 10_000, "only {runs} comparisons");
    assert!(
        failures.is_empty(),
        "{} differences, first:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

#[test]
fn documented_examples_give_the_same_outputs_natively_and_in_jaq() {
    let docs = read("docs/mappings.md");
    let vars = vars();
    let mut programs = Vec::new();
    for block in docs.split("```yaml").skip(1) {
        let text = block.split("```").next().unwrap_or("");
        if let Some(doc) = load_yaml(text) {
            let defs = doc
                .get("jq_defs")
                .and_then(Value::as_str)
                .map(str::to_owned);
            programs_in("docs/mappings.md", &doc, defs.as_deref(), &mut programs);
        }
    }
    let folder = Folder {
        name: "docs".into(),
        programs: Vec::new(),
        documents: vec![
            JqValue::from_json_slice(
                &std::fs::read(repo("mappings/demo-toyota/examples/dms-search.json"))
                    .expect("dms-search.json"),
            )
            .expect("JSON"),
        ],
    };
    let mut records = Vec::new();
    let items = folder.documents[0].to_json()["Items"].clone();
    for record in items.as_array().into_iter().flatten().take(2) {
        variants(record, &mut records);
    }
    let mut inputs: Vec<JqValue> = records.iter().map(JqValue::from_json).collect();
    inputs.extend(folder.documents.iter().cloned());
    let mut compiled = 0;
    for program in &programs {
        let (Ok(native), Ok(jaq)) = (
            Jq::compile(&program.code),
            Jq::compile_interpreted(&program.code),
        ) else {
            continue; // uses definitions from another snippet
        };
        compiled += 1;
        for input in &inputs {
            if let Err(diff) = compare(&native, &jaq, input, &vars) {
                panic!("{}: {}\n{diff}", program.at, program.code);
            }
        }
    }
    assert!(compiled > 0, "no documented program compiled");
}

/// Loads a shipped mapping folder as the gateway does.
fn load(dir: &str, dealer_id: &str) -> aap_gateway::mapping::DealerMappings {
    load_path(&repo(dir), dealer_id)
}

/// Loads a mapping folder as the gateway does.
fn load_path(dir: &Path, dealer_id: &str) -> aap_gateway::mapping::DealerMappings {
    let schemas = Schemas::load().expect("schemas");
    let vars = |_: &str| None;
    let metrics = aap_gateway::telemetry::metrics::Metrics::new();
    let ctx = LoadContext {
        schemas: &schemas,
        vars: &vars,
        dealer_id,
        dealer_name: "Demo",
        metrics: &metrics,
        previous: None,
        cache: &aap_gateway::mapping::LoadCache::default(),
    };
    load_folder(dir, &ctx).unwrap_or_else(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        panic!("{} does not load:\n{}", dir.display(), lines.join("\n"))
    })
}

/// `$request` is made a jq value only for mappings whose programs name it; one that reads it
/// in its `item` (or its error rules) gets the request as sent.
#[test]
fn programs_that_read_the_request_get_it() {
    assert!(
        !Jq::compile("{vin: .VIN} | compact")
            .expect("jq")
            .reads_request()
    );
    for reads in ["$request.filters", "\"\\($request)\"", ". as $r | $request"] {
        assert!(Jq::compile(reads).expect("jq").reads_request(), "{reads}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    write(
        "upstreams.yaml",
        "dms: { kind: rest, base_url: \"http://127.0.0.1:9\" }\n",
    );
    write(
        "inventory.search.yaml",
        r#"skill: inventory.search
upstream: dms
request:
  method: GET
  path: /v
  query: { make: "{{ request.filters.make | join(',') }}" }
  supports: { filters: [make] }
errors:
  - when: { status: 404, jq: '$request.filters.make[0] == "Saab"' }
    reply: empty
response:
  items: .Items
  item: |
    { vin: .VIN, status: "available", make: $request.filters.make[0] }
"#,
    );
    let mut loaded = load_path(dir.path(), "d1");
    let Some(Handler::Proxy(search)) = loaded.handlers.remove(&Skill::InventorySearch) else {
        panic!("inventory.search is not a proxy mapping");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let answer = |status: u16, make: &str| {
        let canned = aap_gateway::engine::proxy::Canned::new(
            http::StatusCode::from_u16(status).expect("status"),
            None,
            bytes::Bytes::from_static(br#"{"Items": [{"VIN": "1HGCM82633A004352"}]}"#),
        );
        let request = json!({"type": "inventory.search.request", "filters": {"make": [make]}});
        let transport = aap_gateway::engine::proxy::Transport::Canned(&canned);
        runtime
            .block_on(search.execute_with(transport, &request))
            .map(|data| data.into_value())
    };
    let found = answer(200, "Subaru").expect("search");
    assert_eq!(found["vehicles"][0]["make"], "Subaru", "{found}");
    let none = answer(404, "Saab").expect("the rule reads the request: no listings");
    assert_eq!(none["total"], 0, "{none}");
    assert!(
        answer(404, "Volvo").is_err(),
        "a 404 the rule does not take is an error"
    );
}

#[test]
fn demo_search_programs_are_native() {
    let mut loaded = load("mappings/demo-toyota", "demo_toyota");
    let Some(Handler::Proxy(mapped)) = loaded.handlers.remove(&Skill::InventorySearch) else {
        panic!("Demo Toyota's inventory.search is not a proxy mapping");
    };
    let ResponseSpec::List {
        items,
        total,
        item,
        records,
        ..
    } = &mapped.response
    else {
        panic!("not a list mapping");
    };
    for (name, jq) in [("items", items), ("item", item)] {
        assert!(
            jq.is_native(),
            "demo-toyota {name} fell back to jaq: {}",
            jq.code()
        );
    }
    assert!(
        item.builds_json_directly(),
        "demo-toyota item builds a jaq object first: {}",
        item.code()
    );
    let total = total.as_ref().expect("total");
    assert!(total.is_native(), "demo-toyota total fell back to jaq");
    // `.Items` and `.TotalCount` (after the common `def`s) are read off the reply's tape.
    assert!(
        records.is_some() && total.key_path().is_some(),
        "demo-toyota's items and total are paths of keys"
    );

    // Demo Honda's feed: the loader's programs, from the same text.
    let feed = load_yaml(&read("mappings/demo-honda/feed.yaml")).expect("feed.yaml");
    let mut programs = Vec::new();
    programs_in("feed.yaml", &feed, None, &mut programs);
    assert!(programs.len() >= 2);
    for p in &programs {
        assert!(
            Jq::compile(&p.code).is_ok_and(|jq| jq.is_native()),
            "demo-honda {} fell back",
            p.at
        );
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-1.0e6..1.0e6f64).prop_map(Value::from),
        "[a-zA-Z0-9 ,.$|/:-]{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "",
            " ",
            "Car",
            "New",
            "In Stock",
            "2022",
            "$1,999.50",
            "ü✓"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "a", "b", "VIN", "Items", "Type", "Status", "Photos", "x"
                    ]),
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

/// Programs for the property test: the demo's `vehicle`, its `items`, and constructs.
fn property_programs() -> Vec<String> {
    let common = load_yaml(&read("mappings/demo-toyota/common.yaml")).expect("common.yaml");
    let defs = common["jq_defs"].as_str().expect("jq_defs").to_owned();
    let mut programs = vec![
        format!("{defs}\nvehicle"),
        items_program(".Items"),
        ".TotalCount".into(),
        ".a.b // .x // \"none\"".into(),
        "[.[]?] | length? // 0".into(),
        "{a: .a, b: (.b | nonempty), c: (.x | int), d: (.a | lookup($tables.condition_in))} | compact".into(),
        "if (.a | type) == \"object\" then .a.b else [] end".into(),
        "[.a, .b] | map(select(. != null))".into(),
        ".a + .b".into(),
        ".a - 1, .b * 2".into(),
        ".a < .b and (.x or .a == .b)".into(),
        "\"\\(.a)/\\(.b)\"".into(),
        "try .a.b catch \"bad\"".into(),
        ".[] | .a?".into(),
        "flatten?".into(),
        "-(.a) // 0".into(),
        ".a as $x | .b as $y | {($x | tostring): $y}".into(),
        // Lists of texts: read off a tape as an array of strings, or cut by `split_list`.
        "{f: (.a | split_list(\"|\")), g: (.b | split_list(\", \")), h: .Photos, \
         i: (.a | lower | split_list(\",\"))} | compact"
            .into(),
        "{f: .Photos, g: (.x | split_list(\"|\")), h: (.Photos | length)}".into(),
        ".a | split_list(\"\")".into(),
        ".a | split_list(1)".into(),
        ".Photos | split_list(\"|\")".into(),
        // One value made a list: `[.Key | helper …]` as a record's field.
        "{p: [.a | nonempty], q: [.Photos], r: [.x | split_list(\"|\")], s: [.b | int], \
         t: [.VIN | nonempty | lower]} | compact"
            .into(),
        "{p: [.a | nonempty], q: [.Photos | nonempty]}".into(),
    ];
    programs.retain(|p| Jq::compile_interpreted(p).is_ok());
    programs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_json_gives_the_same_outputs_natively_and_in_jaq(input in arb_json()) {
        let vars = vars();
        let input = JqValue::from_json(&input);
        for code in property_programs() {
            let native = Jq::compile(&code).expect("compiles");
            let jaq = Jq::compile_interpreted(&code).expect("compiles");
            if let Err(diff) = compare(&native, &jaq, &input, &vars) {
                prop_assert!(false, "{code}\n{diff}");
            }
        }
    }
}
