//! `aap-gateway new-dealer ID --kind rest|soap|feed --config F`: the first ten minutes of
//! mapping a dealer. Writes a mapping folder whose files say, in comments, what goes where, with
//! every skill stubbed (`unsupported:`, answering `UNSUPPORTED_SKILL`) so `check` accepts the
//! result at once, and adds the dealer to the configuration (creating it when absent).
//! Everything written is loaded back before the command succeeds.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;

/// The dealer's inventory system.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ScaffoldKind {
    /// A REST/JSON API, translated call by call.
    Rest,
    /// A SOAP service, translated call by call.
    Soap,
    /// An inventory export (CSV, JSON or XML) fetched whole and searched in the gateway.
    Feed,
}

pub(crate) fn run(
    id: &str,
    kind: ScaffoldKind,
    config: &Path,
    mappings: Option<&Path>,
) -> ExitCode {
    match scaffold(id, kind, config, mappings) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
            println!(
                "next: `aap-gateway check --config {}`, then fill in upstreams.yaml and one \
                 skill file at a time (delete its `unsupported:` line), with \
                 `aap-gateway render` and `test-mappings` to see what it sends",
                config.display()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn scaffold(
    id: &str,
    kind: ScaffoldKind,
    config: &Path,
    mappings: Option<&Path>,
) -> Result<Vec<PathBuf>, String> {
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!("`{id}` must be letters, digits, `_` or `-`"));
    }
    let config_dir = config
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let folder = match mappings {
        Some(m) => m.to_path_buf(),
        None => config_dir.join("mappings").join(id),
    };
    if folder.exists() {
        return Err(format!(
            "{} exists; choose another folder with --mappings",
            folder.display()
        ));
    }
    let existing = match std::fs::read_to_string(config) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read {}: {e}", config.display())),
    };
    if let Some(text) = &existing {
        if !dealers_is_last(text) {
            return Err(format!(
                "{}: `dealers:` is not the last top-level section, so the entry cannot be \
                 appended safely; add it by hand:\n{}",
                config.display(),
                entry(id, &relative(&folder, config_dir))
            ));
        }
        if text.contains(&format!("id: {id}\n")) {
            return Err(format!("{}: dealer `{id}` exists", config.display()));
        }
    }

    let mut written = Vec::new();
    std::fs::create_dir_all(&folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    let env = id.to_ascii_uppercase().replace('-', "_");
    let mut files = vec![
        ("upstreams.yaml", upstreams(kind, &env)),
        ("common.yaml", COMMON.to_owned()),
    ];
    if let ScaffoldKind::Feed = kind {
        files.push(("feed.yaml", FEED.to_owned()));
    }
    for skill in [
        "inventory.search",
        "inventory.vehicle",
        "inventory.facets",
        "lead.submit",
    ] {
        files.push((skill_file_name(skill), skill_file(skill, kind)));
    }
    for (name, text) in files {
        let path = folder.join(name);
        let text = format!("{}{text}", schema_line(&folder, name));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }

    let folder_ref = relative(&folder, config_dir);
    let new_text = match &existing {
        Some(text) => {
            let mut t = text.clone();
            if !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str(&entry(id, &folder_ref));
            t
        }
        None => format!(
            "{}{NEW_CONFIG}dealers:\n{}",
            schema_line(config_dir, "gateway.yaml"),
            entry(id, &folder_ref)
        ),
    };
    std::fs::write(config, &new_text)
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    written.push(config.to_path_buf());

    // What was written must load: a scaffold that `check` refuses helps nobody.
    let problems = match aap_gateway::settings::load(config) {
        Ok(settings) => {
            let listen = settings.listen;
            aap_gateway::app::App::build(settings, listen).err()
        }
        Err(p) => Some(p),
    };
    if let Some(problems) = problems {
        if let Some(old) = &existing {
            let _ = std::fs::write(config, old);
        }
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(format!(
            "the scaffold does not load (configuration left as it was):\n{}",
            list.join("\n")
        ));
    }
    Ok(written)
}

/// The `# yaml-language-server: $schema=…` line for file `name` written into `dir`, pointing at
/// docs/schemas/ when the command runs in a checkout of the gateway (else no line: the path
/// would dangle).
fn schema_line(dir: &Path, name: &str) -> String {
    let kind = aap_gateway::tools::editor_schema::FileKind::of_file(name);
    let Ok(schemas) = std::fs::canonicalize(Path::new("docs/schemas")) else {
        return String::new();
    };
    let Ok(from) = std::fs::canonicalize(dir) else {
        return String::new();
    };
    let common = from
        .components()
        .zip(schemas.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    for c in schemas.components().skip(common) {
        rel.push(c);
    }
    rel.push(kind.file_name());
    format!("# yaml-language-server: $schema={}\n", rel.display())
}

fn skill_file_name(skill: &str) -> &'static str {
    match skill {
        "inventory.search" => "inventory.search.yaml",
        "inventory.vehicle" => "inventory.vehicle.yaml",
        "inventory.facets" => "inventory.facets.yaml",
        _ => "lead.submit.yaml",
    }
}

/// Whether `dealers:` is the file's last top-level key, so an entry can be appended to it.
fn dealers_is_last(text: &str) -> bool {
    let top: Vec<&str> = text
        .lines()
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) && l.contains(':'))
        .collect();
    top.last().is_some_and(|l| l.starts_with("dealers:"))
}

/// `folder` as the configuration names it: relative to the configuration's folder if inside it.
fn relative(folder: &Path, config_dir: &Path) -> String {
    folder
        .strip_prefix(config_dir)
        .unwrap_or(folder)
        .display()
        .to_string()
}

fn entry(id: &str, folder: &str) -> String {
    let name = id
        .split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "  # Scaffolded by `aap-gateway new-dealer`: dealer.information comes from `profile`,
  # the other skills from the mapping folder once their files are filled in.
  - id: {id}
    path_prefix: /dealers/{id}
    card:
      name: {name}
      description: AAP dealer agent for {name}.
      # url: https://agents.example.com/dealers/{id}/a2a   # the public URL (check warns without)
    mappings: {folder}
    profile:
      name: {name}
      rooftops:
        - name: {name}
          # timezone: America/New_York
          # phones: [{{ name: Sales, value: \"+12125550100\" }}]
"
    )
}

const NEW_CONFIG: &str = "\
# aap-gateway configuration; every key: config/gateway.example.yaml.
listen: 127.0.0.1:8080
admin_listen: 127.0.0.1:9090
# No `aap:` section: the draft AAP identifiers, fine for development (check warns).
";

fn upstreams(kind: ScaffoldKind, env: &str) -> String {
    match kind {
        ScaffoldKind::Rest => format!(
            "# The dealer's systems, by name; skill files refer to them (`upstream: dms`).
# docs/mappings.md §upstreams.yaml has every key. `${{NAME:-default}}` reads the environment:
# set {env}_DMS_URL (and the key) where the gateway runs; secrets never go in this file.
dms:
  kind: rest
  base_url: ${{{env}_DMS_URL:-https://dms.example.invalid}}
  timeouts: {{ connect: 2s, request: 5s }}
  retries: {{ attempts: 2, backoff: 100ms, max_backoff: 1s, budget_percent: 20 }}
  circuit_breaker: {{ failures: 5, cool_down: 30s }}
  # Calls in flight at once: legacy systems are fragile.
  max_concurrency: 8
  # auth:                        # api_key | basic | bearer | oauth2
  #   kind: api_key
  #   header: X-Api-Key
  #   value: ${{{env}_DMS_API_KEY}}
"
        ),
        ScaffoldKind::Soap => format!(
            "# The dealer's systems, by name; skill files refer to them (`upstream: dms`).
# docs/mappings.md §SOAP services has every key. `${{NAME:-default}}` reads the environment:
# set {env}_DMS_URL (and the password) where the gateway runs; secrets never go in this file.
dms:
  kind: soap
  # The service endpoint, e.g. https://dms.example.com/VehicleService.svc
  base_url: ${{{env}_DMS_URL:-https://dms.example.invalid/VehicleService.svc}}
  soap: {{ version: \"1.1\" }}      # \"1.1\" or \"1.2\"
  timeouts: {{ connect: 2s, request: 5s }}
  circuit_breaker: {{ failures: 5, cool_down: 30s }}
  max_concurrency: 4
  # auth:                        # WS-Security UsernameToken, or any HTTP auth
  #   kind: ws_security
  #   username: gateway
  #   password: ${{{env}_DMS_PASSWORD}}
  #   password_type: digest      # digest | text (https only)
"
        ),
        ScaffoldKind::Feed => format!(
            "# The dealer's systems, by name; feed.yaml and skill files refer to them.
# docs/mappings.md §upstreams.yaml has every key. `${{NAME:-default}}` reads the environment:
# set {env}_FEED_URL where the gateway runs; secrets never go in this file.
feed:
  kind: rest
  base_url: ${{{env}_FEED_URL:-https://feeds.example.invalid}}
  timeouts: {{ connect: 2s, request: 30s }}
  # A whole-inventory export can be large.
  max_response_bytes: 33554432
  # auth: {{ kind: basic, username: gateway, password: ${{{env}_FEED_PASSWORD}} }}
"
        ),
    }
}

const COMMON: &str = "\
# Shared by every skill file of this folder (docs/mappings.md §tables).
# `tables` are `tables.x` in templates and `$tables.x` in jq; `jq_defs` are jq definitions,
# e.g. one `vehicle` record mapping shared by search and detail.
tables:
  # The system's words → AAP's (docs/reference.md lists AAP's values).
  condition_in: { New: new, Used: used, Certified: cpo }
  condition_out: { new: New, used: Used, cpo: Certified }
  # Only `available`, `intransit` and `pending` units are ever shown; a status missing from
  # this table maps to nothing, so the unit is hidden rather than published by mistake.
  status_in: { In Stock: available, In Transit: intransit, Pending: pending, Sold: sold }
# jq_defs: |
#   def vehicle: {
#     vin: (.VIN | nonempty), stock: (.Stock | nonempty), year: (.Year | int),
#     make: (.Make | nonempty), model: (.Model | nonempty),
#     condition: (.Condition | lookup($tables.condition_in)),
#     status: (.Status | lookup($tables.status_in)),
#     price: (.Price | dollars), mileage: (.Miles | miles)
#   } | compact;
";

const FEED: &str = "\
# The whole inventory as one document, fetched and cached; search, facets and detail are
# answered from the cache (docs/mappings.md §Searching: proxy mode and feed mode).
# Fill in the path and the item mapping, then serve the skills with `mode: feed`.
upstream: feed
request: { method: GET, path: /inventory.csv }
format: csv            # csv (header row) | json | xml (with list_elements: [...])
# charset: windows-1252  # for exports saved by Excel or labelled Latin-1
refresh: 5m
max_stale: 1h
# Allow-list: only the AAP fields named here are published (docs/reference.md §Vehicle).
item: |
  {
    vin: (.VIN | nonempty),
    stock: (.Stock | nonempty),
    year: (.Year | int),
    make: (.Make | nonempty),
    model: (.Model | nonempty),
    condition: (.Condition | lookup($tables.condition_in)),
    # Sold units are in most exports: map the export's status, never a fixed \"available\".
    status: (.Status | lookup($tables.status_in)),
    price: (.Price | dollars),
    mileage: (.Mileage | miles)
  } | compact
";

/// One skill file: the stub line, then the mapping to write, commented.
fn skill_file(skill: &str, kind: ScaffoldKind) -> String {
    let body = match (skill, kind) {
        ("inventory.search", ScaffoldKind::Feed) => "\
# mode: feed           # answered from feed.yaml's cache with AAP search semantics
",
        ("inventory.vehicle", ScaffoldKind::Feed) => "\
# mode: feed           # found in the cache by VIN, else stock, else vehicle id
",
        ("inventory.facets", _) => "\
# derive: search       # proxy mode: facets computed over the search mapping's results
# mode: feed           # feed mode: facets from the cache
",
        ("inventory.search", ScaffoldKind::Rest) => "\
# upstream: dms
# request:
#   method: GET
#   path: /api/vehicles
#   query:               # name: template; empty values are left out
#     make: \"{{ request.filters.make | join(',') }}\"
#     condition: \"{{ request.filters.condition | map('lookup', tables.condition_out) | join(',') }}\"
#     maxPrice: \"{{ request.filters.price_max }}\"
#   pagination: { style: page, page: page, size: pageSize, first: 1, max_size: 100 }
#   supports:            # only what the system matches exactly as AAP does
#     listing: listable
#     filters: [make, condition, price_max]
#     sort: [price]
# response:
#   items: .Items        # jq: the records of one reply
#   total: .TotalCount   # jq: matches across pages
#   item: vehicle        # jq: one record → one AAP vehicle (common.yaml's jq_defs)
",
        ("inventory.search", ScaffoldKind::Soap) => "\
# upstream: dms
# request:
#   action: urn:dealer:inventory/SearchInventory
#   # The Body's content; every value is XML-escaped; the page is the engine's (page.offset).
#   body: >-
#     <SearchInventory xmlns=\"urn:dealer:inventory\">{% if request.filters.make %}<Make>{{ request.filters.make[0] }}</Make>{% endif %}<StartIndex>{{ page.offset }}</StartIndex><MaxRows>{{ page.size }}</MaxRows></SearchInventory>
#   pagination: { style: offset, max_size: 50 }
#   supports:
#     listing: listable
#     filters: [{ name: make, values: one }]
# response:
#   list_elements: [Unit]
#   items: '.SearchInventoryResponse.Units.Unit? // []'
#   total: .SearchInventoryResponse.Total
#   item: vehicle
",
        ("inventory.vehicle", ScaffoldKind::Rest) => "\
# upstream: dms
# request: { path: \"/api/vehicles/{{ request.vin or request.stock }}\" }
# response: { jq: vehicle }
# errors:
#   - when: { status: 404 }
#     code: VEHICLE_NOT_FOUND
",
        ("inventory.vehicle", ScaffoldKind::Soap) => "\
# upstream: dms
# request:
#   action: urn:dealer:inventory/GetVehicle
#   body: >-
#     <GetVehicle xmlns=\"urn:dealer:inventory\"><Vin>{{ request.vin }}</Vin></GetVehicle>
# response: { jq: .GetVehicleResponse.Vehicle | vehicle }
# errors:
#   - when: { fault: VehicleNotFound }
#     code: VEHICLE_NOT_FOUND
",
        _ => "\
# Leads: docs/leads.md (SOAP, REST JSON, ADF/XML over HTTP or by e-mail). Consent and
# idempotency are the gateway's; the mapping only delivers.
# upstream: crm          # add it to upstreams.yaml
# lead:
#   follow_up_channels: [phone, email]
#   timezone: America/New_York
# request:
#   method: POST
#   path: /api/leads
#   body_format: json
#   body: >-
#     {\"ref\": {{ lead.reference }}, \"first\": {{ request.customer.first_name }},
#      \"last\": {{ request.customer.last_name }}, \"email\": {{ request.customer.email }}}
# response:
#   jq: '{ lead_id: .id, status: \"received\" }'
",
    };
    format!(
        "skill: {skill}
# Not mapped yet: until this line is removed the skill is left off the card and answers
# UNSUPPORTED_SKILL. Write the mapping below (docs/mappings.md; AAP fields and codes in
# docs/reference.md), remove the line, then `aap-gateway check` and `render`.
unsupported: scaffolded by new-dealer
{body}# examples:              # run offline by test-mappings (docs/mappings.md §examples)
#   - name: a first case
#     request: {{ type: {skill}.request }}
#     upstream_reply: {{ status: 200, body_file: examples/reply.json }}
#     expect: {{}}
"
    )
}
