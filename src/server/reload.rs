//! Hot reload: on SIGHUP, or when the configuration file, the API keys file or a dealer's
//! mapping folder changes (debounced), build a new `App` from disk and swap it in whole. Requests in flight finish on
//! the `App` they started with; an invalid new configuration is refused with every problem
//! logged, located, and the running one keeps serving. Outcomes go to the logs and to
//! `aap_gateway_config_reloads_total{result}`.
//!
//! The listeners stay bound: a changed `listen` / `admin_listen` needs a restart. Idempotency
//! keys and rate-limit buckets carry over when their settings did not change
//! (`App::adopt_state`); when the idempotency settings changed, the stored replies and the
//! deliveries in flight still carry over, and the old claims in Redis are renewed until those
//! deliveries end (`App::retire_replaced`).
//!
//! Directories are watched, not files, so editors that replace a file and Kubernetes, which
//! swaps a ConfigMap mount's `..data` symlink, are both seen.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Running;
use crate::app::App;

/// Quiet time after the last file event before reloading: an editor's save or a `kubectl
/// apply` touches several files at once.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Resolves `${NAME}` in mapping files.
pub type Vars = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where a reload reads from, and the SIGHUP listener.
pub struct ReloadSource {
    /// The configuration file the gateway was started with.
    config: PathBuf,
    /// Resolves `${NAME}` in mapping files (the process environment, plus the demo's
    /// simulator addresses).
    vars: Vars,
    hangup: Hangup,
}

impl ReloadSource {
    /// Also starts listening for SIGHUP, so a SIGHUP sent once the gateway says it is ready
    /// reloads rather than ending the process: make it before announcing readiness. Needs a
    /// Tokio runtime.
    pub fn new(config: PathBuf, vars: Vars) -> ReloadSource {
        ReloadSource {
            config,
            vars,
            hangup: hangup(),
        }
    }
}

impl std::fmt::Debug for ReloadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadSource")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The background tasks of the serving `App`, restarted with each new one.
pub(super) type Background = Arc<Mutex<Vec<JoinHandle<()>>>>;

/// Reloads on every trigger until the task is aborted (at shutdown).
pub(super) async fn watch(state: Arc<Running>, mut source: ReloadSource, background: Background) {
    let (tx, mut changes) = mpsc::unbounded_channel::<()>();
    let mut watcher = watch_files(&state.app.load(), &source.config, &tx);
    let mut hangup = source.hangup.take();
    loop {
        let trigger = tokio::select! {
            Some(()) = next_hangup(&mut hangup) => "SIGHUP",
            Some(()) = changes.recv() => {
                // Wait until the files are quiet.
                while let Ok(Some(())) = tokio::time::timeout(DEBOUNCE, changes.recv()).await {}
                "file change"
            }
        };
        if reload(&state, &source, &background, trigger).await {
            // The new configuration may name other mapping folders.
            drop(watcher);
            watcher = watch_files(&state.app.load(), &source.config, &tx);
        }
    }
}

/// Builds the configuration on disk and swaps it in; `false` (the old one kept) on any problem.
async fn reload(
    state: &Running,
    source: &ReloadSource,
    background: &Background,
    trigger: &'static str,
) -> bool {
    let old = state.app.load_full();
    let (config, vars) = (source.config.clone(), Arc::clone(&source.vars));
    let (listen, admin_listen) = (old.settings.listen, old.settings.admin_listen);
    // Compiling schemas, templates and jq programs is CPU work: off the async workers.
    let running = Arc::clone(&old);
    let built = tokio::task::spawn_blocking(move || {
        let mut settings = crate::settings::load(&config)?;
        settings.listen = listen;
        settings.admin_listen = admin_listen;
        App::rebuild(settings, listen, &*vars, &running)
    })
    .await;
    let problems = match built {
        Ok(Ok(mut app)) => {
            for w in &app.settings.warnings {
                tracing::warn!(location = %w.origin, "{}", w.message);
            }
            app.adopt_state(&old);
            let app = Arc::new(app);
            state.app.store(Arc::clone(&app));
            let mut tasks = background.lock().unwrap_or_else(PoisonError::into_inner);
            for task in tasks.drain(..) {
                task.abort();
            }
            *tasks = app.start_background();
            drop(tasks);
            app.retire_replaced(&old);
            old.metrics.reload(true);
            tracing::info!(
                trigger,
                dealers = app.dealers.len(),
                "configuration reloaded"
            );
            return true;
        }
        Ok(Err(problems)) => problems,
        Err(join) => {
            tracing::error!(error = %join, "configuration reload crashed");
            Vec::new()
        }
    };
    for p in &problems {
        tracing::error!(location = %p.origin, "{}", p.message);
    }
    old.metrics.reload(false);
    tracing::warn!(
        trigger,
        problems = problems.len(),
        "configuration reload refused; the running configuration keeps serving"
    );
    false
}

/// Watches the configuration file's directory, the API keys file's, and every dealer's mapping
/// folder; each change
/// is a message on `tx`. `None` (logged) when the platform cannot watch.
fn watch_files(
    app: &App,
    config: &Path,
    tx: &mpsc::UnboundedSender<()>,
) -> Option<notify::RecommendedWatcher> {
    let tx = tx.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files (our own reload) must not trigger another one.
        if event.is_ok_and(|e| !matches!(e.kind, EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })
    .inspect_err(|e| tracing::warn!(error = %e, "cannot watch files; reload with SIGHUP"))
    .ok()?;
    let config_dir = match config.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let folders = app
        .settings
        .dealers
        .iter()
        .filter_map(|d| d.mappings.as_deref());
    // API keys usually come from a mounted secret, apart from the configuration file.
    let keys_dir = app
        .settings
        .auth
        .as_ref()
        .and_then(|a| a.keys_file.as_deref())
        .and_then(Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty() && *dir != config_dir.as_path());
    for (path, mode) in std::iter::once((config_dir.as_path(), RecursiveMode::NonRecursive))
        .chain(keys_dir.map(|d| (d, RecursiveMode::NonRecursive)))
        .chain(folders.map(|f| (f, RecursiveMode::Recursive)))
    {
        if let Err(e) = watcher.watch(path, mode) {
            tracing::warn!(path = %path.display(), error = %e, "cannot watch for changes");
        }
    }
    Some(watcher)
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

#[cfg(unix)]
fn hangup() -> Hangup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .inspect_err(|e| tracing::warn!(error = %e, "cannot handle SIGHUP"))
        .ok()
}

#[cfg(not(unix))]
fn hangup() -> Hangup {
    None
}

#[cfg(unix)]
async fn next_hangup(hangup: &mut Hangup) -> Option<()> {
    match hangup {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangup) -> Option<()> {
    std::future::pending().await
}
