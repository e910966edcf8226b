//! The mapping author's subcommands (`reference`, `render`, `new-dealer`, `verify`,
//! `test-mappings --show-requests`), kept out of `main.rs` so the serving commands stay short.

pub(crate) mod new_dealer;

use std::io::Read as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;

use aap_gateway::app::App;
use aap_gateway::settings::{self, Settings};
use aap_gateway::tools::{reference, render};

/// What `aap-gateway schema` prints.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SchemaOf {
    /// The configuration file.
    Config,
    /// A mapping file: `upstreams`, `common`, `feed` or `skill` (any `<skill>.yaml`).
    Mapping {
        #[arg(value_enum)]
        file: MappingFile,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum MappingFile {
    Upstreams,
    Common,
    Feed,
    Skill,
}

/// `aap-gateway schema config|mapping FILE`: the JSON Schema docs/schemas/ ships.
pub(crate) fn schema(of: &SchemaOf) -> ExitCode {
    use aap_gateway::tools::editor_schema::{FileKind, schema};
    let kind = match of {
        SchemaOf::Config => FileKind::Config,
        SchemaOf::Mapping { file } => match file {
            MappingFile::Upstreams => FileKind::Upstreams,
            MappingFile::Common => FileKind::Common,
            MappingFile::Feed => FileKind::Feed,
            MappingFile::Skill => FileKind::Skill,
        },
    };
    say(&schema(kind));
    ExitCode::SUCCESS
}

/// `aap-gateway reference`: docs/reference.md on stdout.
pub(crate) fn reference() -> ExitCode {
    say(&reference::markdown());
    ExitCode::SUCCESS
}

/// Where `render` takes the AAP request and the canned upstream reply from.
pub(crate) struct RenderInput<'a> {
    pub(crate) request: Option<&'a Path>,
    pub(crate) upstream_reply: Option<&'a Path>,
    pub(crate) upstream_status: u16,
    pub(crate) upstream_content_type: Option<String>,
}

/// `aap-gateway render`: the dry run of one AAP request at one dealer.
pub(crate) fn render(config: &Path, dealer: &str, input: RenderInput<'_>) -> ExitCode {
    let text = match input.request {
        Some(p) if p != Path::new("-") => {
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        }
        _ => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map(|_| text)
                .map_err(|e| format!("cannot read the request from stdin: {e}"))
        }
    };
    let data = text.and_then(|t| {
        serde_json::from_str(&t).map_err(|e| format!("the request is not JSON: {e}"))
    });
    let data = match data.and_then(render::aap_data) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let reply = match input.upstream_reply {
        Some(p) => match std::fs::read(p) {
            Ok(body) => Some(render::CannedReply {
                status: input.upstream_status,
                content_type: input.upstream_content_type,
                body,
            }),
            Err(e) => return fail(&format!("cannot read {}: {e}", p.display())),
        },
        None => None,
    };
    let Some((app, secrets)) = build(config) else {
        return ExitCode::FAILURE;
    };
    let Some(d) = app.dealer(dealer) else {
        return unknown_dealer(&app, dealer);
    };
    let outcome =
        runtime().and_then(|rt| rt.block_on(render::dry_run(&app, d, data, reply, &secrets)));
    match outcome {
        Ok(text) => {
            say(&text);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// `aap-gateway verify`: the dealer's search mapping against the gateway's own search over a
/// full scan; exits 1 on any difference.
pub(crate) fn verify(
    config: &Path,
    dealer: &str,
    max: usize,
    pause: std::time::Duration,
) -> ExitCode {
    use std::io::IsTerminal as _;
    let Some((app, _)) = build(config) else {
        return ExitCode::FAILURE;
    };
    let Some(d) = app.dealer(dealer) else {
        return unknown_dealer(&app, dealer);
    };
    let terminal = std::io::stderr().is_terminal();
    let mut progress = |done: usize, of: usize| {
        if terminal {
            eprint!("\r\x1b[2Ksearch {done}/{of}");
            if done == of {
                eprintln!();
            }
        }
    };
    let outcome = runtime().and_then(|rt| {
        rt.block_on(aap_gateway::tools::verify::verify(
            d,
            &app.metrics,
            max,
            pause,
            &mut progress,
        ))
    });
    let report = match outcome {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let scan = &report.scan;
    // Which side is trusted, and why: the scan's listings are what the gateway's answers are
    // computed from; what else it read explains a total that counts more.
    let mut text = format!(
        "scan: read {} upstream records, every one its paging reaches (a walk that could not \
         be whole is refused); {} are listings, the gateway's answers are computed over them",
        scan.records(),
        scan.listings
    );
    let left_out = scan.left_out();
    if !left_out.is_empty() {
        text.push_str(&format!("; left out: {left_out}"));
    }
    text.push('\n');
    if let Some(total) = report.upstream_total {
        let why = match total.cmp(&scan.listings) {
            std::cmp::Ordering::Equal => String::new(),
            std::cmp::Ordering::Greater if !left_out.is_empty() => format!(
                ", {} more than the listings: its count includes records the scan left out",
                total - scan.listings
            ),
            _ => ", not the listings' count (see the differences)".to_owned(),
        };
        text.push_str(&format!(
            "upstream: the mapping answers {total} for a search without filters{why}\n"
        ));
    }
    for diff in &report.differences {
        text.push_str(&format!(
            "DIFF  {}\n      request: {}\n",
            diff.what, diff.request
        ));
        if let Some(fix) = &diff.fix {
            text.push_str(&format!("      fix: {fix}\n"));
        }
    }
    text.push_str(&format!(
        "verify {dealer}: {} searches over {} listings, {} difference(s)",
        report.searches,
        scan.listings,
        report.differences.len()
    ));
    say(&text);
    if report.differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The rendered upstream calls of a passing example, indented under its `ok` line.
pub(crate) fn example_requests(
    app: &App,
    dealer: &str,
    example: &aap_gateway::mapping::Example,
    secrets: &[String],
) -> String {
    let Some(d) = app.dealer(dealer) else {
        return String::new();
    };
    match runtime() {
        Ok(rt) => rt
            .block_on(render::example_requests(d, example, secrets))
            .lines()
            .map(|l| format!("        {l}\n"))
            .collect(),
        Err(_) => String::new(),
    }
}

/// Loads and builds as `serve` would, also returning the secret-looking values the mapping
/// files were given through `${NAME}` (to mask them in printed requests).
pub(crate) fn build(config: &Path) -> Option<(App, Vec<String>)> {
    let settings: Settings = match settings::load(config) {
        Ok(s) => s,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            eprintln!("{} problem(s) found", problems.len());
            return None;
        }
    };
    let mut secrets: Vec<String> = settings
        .dealers
        .iter()
        .filter_map(|d| d.mappings.as_deref())
        .flat_map(secret_defaults)
        .collect();
    let seen = Mutex::new(Vec::new());
    let vars = |name: &str| {
        let value = std::env::var(name).ok();
        if let (Some(v), true) = (&value, looks_secret(name))
            && let Ok(mut seen) = seen.lock()
        {
            seen.push(v.clone());
        }
        value
    };
    let listen = settings.listen;
    match App::build_with_vars(settings, listen, &vars) {
        Ok(app) => {
            secrets.extend(seen.into_inner().unwrap_or_default());
            Some((app, secrets))
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            eprintln!("{} problem(s) found", problems.len());
            None
        }
    }
}

/// A variable named like a credential (`DMS_API_KEY`, `CRM_PASSWORD`, `FEED_TOKEN` …).
fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASS",
        "TOKEN",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// The `${NAME:-default}` defaults of secret-looking names in a mapping folder's files: what
/// the gateway sends when the variable is unset (the demo's keys).
fn secret_defaults(folder: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut rest = text.as_str();
        while let Some(start) = rest.find("${") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find('}') else { break };
            if let Some((name, default)) = rest[..end].split_once(":-")
                && looks_secret(name)
            {
                out.push(default.to_owned());
            }
            rest = &rest[end..];
        }
    }
    out
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn unknown_dealer(app: &App, dealer: &str) -> ExitCode {
    let ids: Vec<&str> = app.settings.dealers.iter().map(|d| d.id.as_str()).collect();
    fail(&format!("no dealer `{dealer}`; known: {}", ids.join(", ")))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{}", message.trim_end());
    ExitCode::FAILURE
}

/// Writes to stdout, stopping quietly when it is closed (`… | head`).
fn say(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}
