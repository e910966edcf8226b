//! The `aap-gateway` command line. Everything else lives in the library.

mod cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use aap_gateway::app::App;
use aap_gateway::mapping::Example;
use aap_gateway::settings::{self, LogFormat, Problem, Settings};
use aap_gateway::tools::examples::{self, Failure};
use aap_gateway::{demo, server, telemetry};

/// An Auto Agent Protocol (A2A v1.0) gateway in front of dealers' legacy DMS and CRM systems.
#[derive(Debug, Parser)]
#[command(name = "aap-gateway", version, about, long_about = None)]
struct Cli {
    /// Log format on stderr; `auto` is human on a terminal and JSON otherwise.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormatArg>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormatArg {
    Auto,
    Json,
    Text,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway on the built-in demo configuration (config/demo.yaml) on loopback.
    Demo {
        /// Configuration to use instead of config/demo.yaml.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address of the public (buyer-facing) listener; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Address of the admin listener (/healthz, /readyz); port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:9090")]
        admin_listen: SocketAddr,
        /// Once everything is ready, write the addresses of what was started to this JSON file.
        #[arg(long)]
        endpoints_file: Option<PathBuf>,
    },
    /// Run the gateway in production mode.
    Serve {
        /// The configuration file (YAML); environment overrides: AAP_GATEWAY__SECTION__KEY.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Load the configuration exactly as `serve` would and print every problem as
    /// file:line:col: message; exits 1 on any problem. Makes no network calls.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the example cases embedded in mapping files offline (canned upstream replies) and
    /// show a diff for each failure; exits 1 on any failure. Makes no network calls.
    TestMappings {
        #[arg(long, short)]
        config: PathBuf,
        /// Only the examples of this skill, e.g. inventory.search.
        #[arg(long)]
        skill: Option<String>,
        /// Also print the upstream request(s) each passing example sends (secrets masked).
        #[arg(long)]
        show_requests: bool,
    },
    /// Print the JSON Schema of the configuration file or of a mapping file (docs/schemas/
    /// ships them for editors: `# yaml-language-server: $schema=…`).
    Schema {
        #[command(subcommand)]
        of: cli::SchemaOf,
    },
    /// Print docs/reference.md: every AAP field a mapping produces or reads (type, unit, values,
    /// required) and the twelve AAP error codes, generated from the gateway's own schemas.
    Reference,
    /// Dry run: print the exact upstream request(s) a dealer's mapping sends for an AAP request
    /// (secrets masked) and, given a canned upstream reply, the AAP reply. No network.
    Render {
        #[arg(long, short)]
        config: PathBuf,
        /// The dealer id.
        #[arg(long)]
        dealer: String,
        /// The AAP request (JSON: the DataPart `data`, or a whole SendMessage call); `-` or
        /// absent reads stdin.
        #[arg(long)]
        request: Option<PathBuf>,
        /// A file holding the upstream's reply body, to see the AAP reply it becomes.
        #[arg(long)]
        upstream_reply: Option<PathBuf>,
        /// The HTTP status of that reply.
        #[arg(long, default_value_t = 200)]
        upstream_status: u16,
        /// Its Content-Type (its charset= counts, as for a live reply).
        #[arg(long)]
        upstream_content_type: Option<String>,
    },
    /// Live self-check: run a spread of AAP searches against the dealer's real system twice —
    /// as the search mapping translates them and completed in the gateway from one full scan —
    /// and print every difference with the request that shows it; exits 1 on any.
    Verify {
        #[arg(long, short)]
        config: PathBuf,
        /// The dealer id.
        #[arg(long)]
        dealer: String,
        /// At most this many searches.
        #[arg(long, default_value_t = 60)]
        max_searches: usize,
        /// Pause between searches, to spare a fragile system (e.g. 200ms, 1s).
        #[arg(long, default_value = "200ms")]
        pause: humantime::Duration,
    },
    /// Write a commented mapping folder for a new dealer, every skill stubbed as
    /// UNSUPPORTED_SKILL until filled in, and its entry in the configuration file.
    NewDealer {
        /// The dealer id (letters, digits, `_`, `-`).
        id: String,
        /// What the dealer's inventory system is.
        #[arg(long, value_enum)]
        kind: cli::new_dealer::ScaffoldKind,
        /// The configuration file to add the dealer to (created when it does not exist).
        #[arg(long, short)]
        config: PathBuf,
        /// The mapping folder to create; default `mappings/<id>` next to the configuration.
        #[arg(long)]
        mappings: Option<PathBuf>,
    },
    /// Print the agent card JSON a dealer would serve.
    Card {
        #[arg(long, short)]
        config: PathBuf,
        /// Dealer id; defaults to the first dealer in the file.
        #[arg(long)]
        dealer: Option<String>,
    },
}

/// The gateway allocates many small, short-lived values per request (JSON trees, jq values);
/// mimalloc handles that pattern markedly faster than the system allocator (the 20-vehicle
/// extraction bench: 4.2 ms → 2.9 ms). Built without transparent huge pages (`no_thp`):
/// with them, every region mimalloc gives back and takes again is faulted in as a fresh 2 MiB
/// page the kernel zeroes, which made half of a large feed load page clearing (bench/README.md,
/// "Feed mode at scale").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` that stops quietly when stdout is closed (`aap-gateway card … | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => exit(check(&config, run_examples)),
        Command::TestMappings {
            config,
            skill,
            show_requests,
        } => exit(test_mappings(
            &config,
            skill.as_deref(),
            show_requests,
            run_examples,
        )),
        Command::Reference => cli::reference(),
        Command::Schema { of } => cli::schema(&of),
        Command::Render {
            config,
            dealer,
            request,
            upstream_reply,
            upstream_status,
            upstream_content_type,
        } => cli::render(
            &config,
            &dealer,
            cli::RenderInput {
                request: request.as_deref(),
                upstream_reply: upstream_reply.as_deref(),
                upstream_status,
                upstream_content_type,
            },
        ),
        Command::Verify {
            config,
            dealer,
            max_searches,
            pause,
        } => cli::verify(&config, &dealer, max_searches, pause.into()),
        Command::NewDealer {
            id,
            kind,
            config,
            mappings,
        } => cli::new_dealer::run(&id, kind, &config, mappings.as_deref()),
        Command::Card { config, dealer } => card(&config, dealer.as_deref()),
        Command::Serve { config } => {
            let Some(settings) = load(&config) else {
                return ExitCode::FAILURE;
            };
            let listen = settings.listen;
            let admin = settings.admin_listen;
            run(settings, &config, cli.log_format, listen, admin, None)
        }
        Command::Demo {
            config,
            listen,
            admin_listen,
            endpoints_file,
        } => {
            let config = config.unwrap_or_else(demo::default_config);
            let Some(settings) = load(&config) else {
                return ExitCode::FAILURE;
            };
            run(
                settings,
                &config,
                cli.log_format,
                listen,
                admin_listen,
                Some(endpoints_file),
            )
        }
    }
}

fn load(config: &Path) -> Option<Settings> {
    match settings::load(config) {
        Ok(s) => Some(s),
        Err(problems) => {
            print_problems(&problems);
            None
        }
    }
}

fn print_problems(problems: &[Problem]) {
    for p in problems {
        eprintln!("{p}");
    }
    eprintln!("{} problem(s) found", problems.len());
}

/// Every dealer's mapping examples with their outcomes (dealer id, example, outcome).
type Ran = Vec<(String, Example, Result<(), Failure>)>;

/// Runs the mapping examples: `Err` when they could not run at all.
type Runner = fn(&App) -> Result<Ran, String>;

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn check(config: &Path, run: Runner) -> bool {
    let settings = match settings::load(config) {
        Ok(s) => s,
        Err(problems) => {
            print_problems(&problems);
            return false;
        }
    };
    let warnings = settings.warnings.clone();
    let listen = settings.listen;
    match App::build(settings, listen) {
        Ok(app) => {
            // Examples that could not run checked nothing: never an `ok`.
            let ran = match run(&app) {
                Ok(ran) => ran,
                Err(e) => {
                    eprintln!("{e}");
                    return false;
                }
            };
            // Examples whose reply breaks the AAP response schema are mapping defects.
            let broken: Vec<String> = ran
                .into_iter()
                .filter_map(|(_, example, outcome)| match outcome {
                    Err(failure @ Failure::InvalidReply(_)) => Some(format!(
                        "{}: example `{}` builds a reply that breaks the AAP schema: {}",
                        example.origin,
                        example.case.name,
                        failure.lines().join("; ")
                    )),
                    Err(failure @ Failure::InvalidMapping(_)) => Some(format!(
                        "{}: example `{}`: {}",
                        example.origin,
                        example.case.name,
                        failure.lines().join("; ")
                    )),
                    _ => None,
                })
                .collect();
            if !broken.is_empty() {
                for b in &broken {
                    eprintln!("{b}");
                }
                eprintln!("{} problem(s) found", broken.len());
                return false;
            }
            for w in &warnings {
                eprintln!("{w} (warning)");
            }
            let notes: Vec<_> = app.dealers.iter().flat_map(|d| d.notes()).collect();
            for n in &notes {
                eprintln!("{n} (note)");
            }
            say!(
                "{}: ok ({} dealer(s), {} warning(s), {} note(s))",
                config.display(),
                app.dealers.len(),
                warnings.len(),
                notes.len()
            );
            true
        }
        Err(problems) => {
            print_problems(&problems);
            false
        }
    }
}

fn run_examples(app: &App) -> Result<Ran, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime to run the mapping examples: {e}"))?;
    Ok(rt.block_on(examples::run_all(app)))
}

fn test_mappings(config: &Path, skill: Option<&str>, show_requests: bool, run: Runner) -> bool {
    let Some((app, secrets)) = cli::build(config) else {
        return false;
    };
    let ran = match run(&app) {
        Ok(ran) => ran,
        Err(e) => {
            eprintln!("{e}");
            return false;
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (dealer, example, outcome) in ran {
        if skill.is_some_and(|s| s != example.skill.id()) {
            continue;
        }
        match outcome {
            Ok(()) => {
                passed += 1;
                say!("ok    {dealer} {} — {}", example.skill, example.case.name);
                if show_requests {
                    let text = cli::example_requests(&app, &dealer, &example, &secrets);
                    use std::io::Write as _;
                    let _ = write!(std::io::stdout().lock(), "{text}");
                }
            }
            Err(failure) => {
                failed += 1;
                say!(
                    "FAIL  {dealer} {} — {} ({})",
                    example.skill,
                    example.case.name,
                    example.origin
                );
                for line in failure.lines() {
                    say!("        {line}");
                }
            }
        }
    }
    say!("{passed} passed, {failed} failed");
    failed == 0
}

fn card(config: &Path, dealer: Option<&str>) -> ExitCode {
    let Some(settings) = load(config) else {
        return ExitCode::FAILURE;
    };
    let listen = settings.listen;
    let wanted = dealer
        .map(str::to_owned)
        .or_else(|| settings.dealers.first().map(|d| d.id.clone()));
    let app = match App::build(settings, listen) {
        Ok(app) => app,
        Err(problems) => {
            print_problems(&problems);
            return ExitCode::FAILURE;
        }
    };
    match wanted.as_deref().and_then(|id| app.dealer(id)) {
        Some(d) => {
            say!("{}", String::from_utf8_lossy(&d.card.body));
            ExitCode::SUCCESS
        }
        None => {
            let ids: Vec<&str> = app.settings.dealers.iter().map(|d| d.id.as_str()).collect();
            eprintln!(
                "no dealer `{}`; known: {}",
                wanted.unwrap_or_default(),
                ids.join(", ")
            );
            ExitCode::FAILURE
        }
    }
}

/// The async runtime that serves: as many worker threads as CPUs the process may use (its
/// affinity mask and cgroup CPU quota, as `available_parallelism` reads them) or as
/// `TOKIO_WORKER_THREADS` says, and on one CPU a single-threaded runtime.
///
/// Why one thread on one CPU: a sidecar limited to one CPU, or a gateway pinned to one core,
/// gains nothing from tokio's work-stealing pool, and its one worker still paid for the pool's
/// cross-thread scheduling on every wake-up: the shared bench's search took 20 % more CPU per
/// request on it (bench/README.md, "2026-12-05 (second session)"). Nothing the gateway runs
/// needs a second async thread: reloads, feed loads and the log flusher have threads of their
/// own.
fn async_runtime() -> Result<tokio::runtime::Runtime, String> {
    let workers = match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "TOKIO_WORKER_THREADS must be a whole number of threads above 0, not {v:?}"
                ));
            }
        },
        Err(_) => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    };
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        builder
    };
    builder.enable_all().build().map_err(|e| e.to_string())
}

/// Binds, builds and serves until SIGTERM/SIGINT. `demo` is `Some(endpoints file)` in demo mode.
fn run(
    settings: Settings,
    config: &Path,
    log_format: Option<LogFormatArg>,
    listen: SocketAddr,
    admin_listen: SocketAddr,
    demo: Option<Option<PathBuf>>,
) -> ExitCode {
    let format = match log_format {
        Some(LogFormatArg::Auto) => LogFormat::Auto,
        Some(LogFormatArg::Json) => LogFormat::Json,
        Some(LogFormatArg::Text) => LogFormat::Text,
        None => settings.telemetry.log_format,
    };
    let telemetry = telemetry::init(format, Some(&settings.telemetry));
    for w in &settings.warnings {
        tracing::warn!(location = %w.origin, "{}", w.message);
    }
    let runtime = match async_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        // The demo's legacy systems run in-process; they live as long as the gateway.
        let simulators = match &demo {
            Some(_) => match demo::Simulators::start().await {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("cannot start the demo simulators: {e}");
                    return ExitCode::FAILURE;
                }
            },
            None => None,
        };
        // The demo's simulator addresses first, then the environment; also for reloads.
        let simulator_vars: std::collections::HashMap<String, String> = simulators
            .as_ref()
            .map(|s| {
                demo::Simulators::VARS
                    .into_iter()
                    .filter_map(|name| s.var(name).map(|v| (name.to_owned(), v)))
                    .collect()
            })
            .unwrap_or_default();
        let vars = move |name: &str| {
            simulator_vars.get(name).cloned().or_else(|| std::env::var(name).ok())
        };
        // Listening for SIGHUP from here on, before the gateway says it is ready.
        let reload = server::reload::ReloadSource::new(
            config.to_path_buf(),
            std::sync::Arc::new(vars.clone()),
        );
        let bound = match server::bind_with_vars(settings, listen, admin_listen, &vars).await {
            Ok(b) => b,
            Err(server::StartError::Config(problems)) => {
                print_problems(&problems);
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let server::Bound { app, gateway, admin, gateway_addr, admin_addr } = bound;
        tracing::info!(listen = %gateway_addr, admin = %admin_addr, dealers = app.dealers.len(), "aap-gateway ready");
        if let Some(endpoints_file) = demo {
            {
                use std::io::Write as _;
                let _ = write!(std::io::stdout().lock(), "{}", demo::banner(&app, admin_addr));
            }
            if let Some(path) = endpoints_file {
                let sims = simulators.as_ref().map(demo::Simulators::endpoints).unwrap_or_default();
                let endpoints = demo::endpoints(&app, gateway_addr, admin_addr, sims);
                if let Err(e) = demo::write_endpoints(&path, &endpoints) {
                    eprintln!("cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
        server::run_reloading(app, gateway, admin, server::shutdown_signal(), reload).await;
        ExitCode::SUCCESS
    });
    // After the runtime: the exporter flushes from its own thread.
    telemetry.shutdown();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_config() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml")
    }

    fn no_runtime(_: &App) -> Result<Ran, String> {
        Err("cannot start the runtime to run the mapping examples: test".to_owned())
    }

    /// Examples that could not run checked nothing: `check` and `test-mappings` fail instead
    /// of reporting success with zero examples run.
    #[test]
    fn examples_that_cannot_run_fail_check_and_test_mappings() {
        assert!(check(&demo_config(), run_examples));
        assert!(test_mappings(&demo_config(), None, false, run_examples));
        assert!(!check(&demo_config(), no_runtime));
        assert!(!test_mappings(&demo_config(), None, false, no_runtime));
    }
}
