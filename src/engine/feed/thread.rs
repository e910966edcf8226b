//! The feed's own thread: it builds the snapshots and frees the ones they replace.

use std::sync::Arc;
use std::time::Duration;

use super::Snapshot;

/// How long a replaced snapshot waits for the searches still reading it, so that it is freed
/// on the feed's thread rather than by the last search, on an async worker.
pub(super) const RETIRE_WAIT: Duration = Duration::from_secs(2);

/// Frees a replaced snapshot once the searches still reading it are done (waiting at most
/// [`RETIRE_WAIT`]), on the feed's thread: a whole inventory's worth of frees would otherwise
/// fall to the last search, on an async worker.
pub(super) async fn retire(mut old: Arc<Snapshot>, thread: Arc<FeedThread>) {
    let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
    loop {
        match Arc::try_unwrap(old) {
            Ok(snapshot) => {
                thread.free(snapshot);
                return;
            }
            Err(shared) if tokio::time::Instant::now() < deadline => old = shared,
            // Still read after all that: the last reader frees it.
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Moves the calling thread, once, to the operating system's idle scheduling class, where it
/// runs only on CPU no other thread wants and yields it the moment one wakes (Linux
/// `SCHED_IDLE`). Why: a refresh is close to a second of one core's work; at the same priority
/// as the async workers, a search's worker woken next to it waited out the refresh's time
/// slice. The p99 of searches during back-to-back refreshes was 1.14–1.78× (median 1.42×) the
/// p99 without them over nine runs at normal priority, 0.93–1.65× (median 1.17×) at idle
/// (`bench/README.md`). One way only: an unprivileged process cannot raise a thread's priority
/// back, which is why only refreshes get here, never a first load.
fn lower_to_idle() {
    thread_local! {
        static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if LOWERED.replace(true) {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
            thread_native_id, thread_schedule_policy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let set = set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            idle,
        );
        // The library also sets the nice value to 0 after the policy, which fails in a process
        // started at a higher nice value: what counts is the policy.
        match (set, thread_schedule_policy()) {
            (_, Ok(now)) if now == idle => tracing::debug!("feed refreshes run at idle priority"),
            (set, _) => {
                let error = set.err().map(|e| format!("{e:?}"));
                tracing::warn!(
                    ?error,
                    "feed refreshes cannot run at idle priority; they run at normal priority"
                )
            }
        }
    }
}

/// How long the feed's thread waits for its next job before it ends (the next job starts
/// another).
///
/// Why it ends: the allocator (mimalloc) keeps the pages a thread freed in that thread's own
/// heap until the thread allocates or frees again, or ends. A feed's thread that had freed the
/// copy its refresh replaced, and the document it parsed, then slept until the next refresh kept
/// all of it: a group of 100 feeds held 530 MB after their first loads where the live copies
/// needed under half of it (`bench/README.md`, "A group of feeds refreshing"). Back-to-back
/// refreshes keep the thread (and what it frees is reused by the next build, below).
pub(super) const IDLE_END: Duration = Duration::from_secs(1);

type Jobs = std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>>;

/// The one thread that builds a feed's snapshots and frees the copies they replace.
///
/// Why one thread: the allocator (mimalloc) reuses a page once the thread that owns it frees
/// into it. A copy freed on some other, then idle, thread kept its pages committed, and the
/// next refresh, on yet another thread, took fresh memory: refreshes peaked at 1.7× the steady
/// size. Built and freed here, a refresh reuses what the last one freed. Started on first use;
/// ends when the feed is dropped, or after [`IDLE_END`] without a job (the next one starts it
/// again).
#[derive(Debug, Default)]
pub(super) struct FeedThread {
    /// The running thread's queue (`None`: no thread runs).
    jobs: Arc<Jobs>,
}

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The thread's loop: runs `jobs` until the feed is dropped or none comes for [`IDLE_END`].
fn serve(jobs: std::sync::mpsc::Receiver<Job>, queue: std::sync::Weak<Jobs>) {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match jobs.recv_timeout(IDLE_END) {
            Ok(job) => job(),
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let Some(queue) = queue.upgrade() else { return };
                let mut sender = queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // Under the lock no job can be sent: one that came before it is run, else the
                // queue is closed and the next job starts a new thread.
                match jobs.try_recv() {
                    Ok(job) => {
                        drop(sender);
                        job();
                    }
                    Err(_) => {
                        *sender = None;
                        return;
                    }
                }
            }
        }
    }
}

impl FeedThread {
    /// Runs `job` on the thread (started now if it is not running).
    pub(super) fn send(&self, job: Job) -> Result<(), String> {
        let mut jobs = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let job = match jobs.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                // The thread ended (a job it ran aborted it): start another.
                Err(std::sync::mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let queue = Arc::downgrade(&self.jobs);
        std::thread::Builder::new()
            .name("feed-build".to_owned())
            .spawn(move || serve(rx, queue))
            .map_err(|e| format!("cannot start the feed's thread: {e}"))?;
        tx.send(job)
            .map_err(|_| "the feed's thread stopped".to_owned())?;
        *jobs = Some(tx);
        Ok(())
    }

    /// `work`'s result, computed on the thread (moved to the idle priority first when
    /// `at_idle`, see [`lower_to_idle`]); a panic is an error, and the thread lives on. The work
    /// starts now, not when the result is awaited (a streamed build must read while the
    /// connection is pumped).
    pub(super) fn run<T, W>(
        &self,
        at_idle: bool,
        work: W,
    ) -> impl std::future::Future<Output = Result<T, String>> + use<T, W>
    where
        T: Send + 'static,
        W: FnOnce() -> T + Send + 'static,
    {
        let (done, result) = tokio::sync::oneshot::channel();
        let sent = self.send(Box::new(move || {
            if at_idle {
                lower_to_idle();
            }
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = done.send(outcome);
        }));
        async move {
            sent?;
            match result.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(_)) => Err("the build panicked".to_owned()),
                Err(_) => Err("the feed's thread stopped".to_owned()),
            }
        }
    }

    /// Drops `snapshot` on the thread (here, should the thread not start).
    pub(super) fn free(&self, snapshot: Snapshot) {
        if let Err(e) = self.send(Box::new(move || drop(snapshot))) {
            tracing::debug!(error = %e, "freed a replaced feed copy in place");
        }
    }
}
