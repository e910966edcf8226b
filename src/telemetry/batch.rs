//! The log writer: request lines are written in batches, everything else at once.
//!
//! Why: a write to stderr is a system call, and under load the one line per request cost a
//! search about as much CPU as its whole response schema check (`bench/README.md`). Like an
//! edge proxy's access log, the request lines (`aap_gateway::request`, `INFO`) are gathered in
//! memory and written together: at most [`INTERVAL`] after the first of them, or as soon as
//! [`CAPACITY`] bytes wait. Any other line (start-up, reloads, warnings, errors) writes what
//! waits before it and then itself, at once, so lines keep their order and problems show
//! without delay. [`Batch::flush`] writes what waits at exit.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

use super::request_line::REQUEST_TARGET;

/// How long a request line may wait to be written.
pub(super) const INTERVAL: Duration = Duration::from_millis(20);

/// How many bytes of waiting lines are written at once, without waiting for [`INTERVAL`].
pub(super) const CAPACITY: usize = 64 * 1024;

/// Lines waiting to be written to `out`.
pub(super) struct Batch<W> {
    state: Mutex<State<W>>,
    /// Signalled when a line arrives while none waits.
    arrived: Condvar,
}

struct State<W> {
    out: W,
    waiting: Vec<u8>,
    /// Whether a flusher thread runs; without one, no line may wait.
    flushed: bool,
}

impl<W: Write + Send + 'static> Batch<W> {
    /// A batch writing to `out`, with a thread that writes waiting lines after [`INTERVAL`].
    pub(super) fn start(out: W) -> Arc<Batch<W>> {
        let batch = Arc::new(Batch {
            state: Mutex::new(State {
                out,
                waiting: Vec::with_capacity(CAPACITY),
                flushed: true,
            }),
            arrived: Condvar::new(),
        });
        let flusher = Arc::downgrade(&batch);
        let spawned = std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || {
                while let Some(batch) = flusher.upgrade() {
                    let mut state = batch.lock();
                    while state.waiting.is_empty() {
                        // A timeout, so that the thread ends after the batch is gone (a
                        // subscriber that was not installed); an installed one never goes.
                        state = batch.wait(state, Duration::from_secs(10));
                        if Arc::strong_count(&batch) == 1 {
                            return;
                        }
                    }
                    // The first line is in; the others gather while this waits (unlocked).
                    state = batch.wait(state, INTERVAL);
                    state.write_waiting();
                    let _ = state.out.flush();
                }
            });
        if spawned.is_err() {
            batch.lock().flushed = false;
        }
        batch
    }

    /// Writes the waiting lines.
    pub(super) fn flush(&self) {
        let mut state = self.lock();
        state.write_waiting();
        let _ = state.out.flush();
    }

    /// Waits, unlocked, for a first line or `timeout`.
    fn wait<'a>(
        &self,
        state: MutexGuard<'a, State<W>>,
        timeout: Duration,
    ) -> MutexGuard<'a, State<W>> {
        self.arrived
            .wait_timeout(state, timeout)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    fn lock(&self) -> MutexGuard<'_, State<W>> {
        // A panic while writing a line leaves nothing half-done that matters here.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a request line; writes the batch when it is full.
    fn gather(&self, line: &[u8]) {
        let mut state = self.lock();
        if !state.flushed {
            let _ = state.out.write_all(line);
            return;
        }
        let first = state.waiting.is_empty();
        state.waiting.extend_from_slice(line);
        if state.waiting.len() >= CAPACITY {
            state.write_waiting();
        } else if first {
            self.arrived.notify_one();
        }
    }

    /// Writes the waiting lines, then `line`.
    fn write_now(&self, line: &[u8]) {
        let mut state = self.lock();
        state.write_waiting();
        let _ = state.out.write_all(line);
    }
}

impl<W: Write> State<W> {
    fn write_waiting(&mut self) {
        if !self.waiting.is_empty() {
            // A failed write loses these lines, as a failed direct write would.
            let _ = self.out.write_all(&self.waiting);
            self.waiting.clear();
        }
    }
}

/// One line on its way: gathered (a request line) or written at once.
pub(super) struct Line<'a, W> {
    batch: &'a Batch<W>,
    gathered: bool,
}

impl<W: Write + Send + 'static> Write for Line<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.gathered {
            self.batch.gather(buf);
        } else {
            self.batch.write_now(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `fmt` layer's writer: a request line at `INFO` is gathered, any other written at once.
#[derive(Clone)]
pub(super) struct Writer<W>(pub(super) Arc<Batch<W>>);

impl<'a, W: Write + Send + 'static> MakeWriter<'a> for Writer<W> {
    type Writer = Line<'a, W>;

    fn make_writer(&'a self) -> Line<'a, W> {
        Line {
            batch: &self.0,
            gathered: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line<'a, W> {
        Line {
            batch: &self.0,
            gathered: meta.target() == REQUEST_TARGET && *meta.level() == Level::INFO,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// What the batch wrote so far.
    #[derive(Clone, Default)]
    struct Out(Arc<Mutex<Vec<u8>>>);

    impl Write for Out {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("out").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Out {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("out").clone()).expect("UTF-8")
        }
    }

    fn line(batch: &Arc<Batch<Out>>, gathered: bool, text: &str) {
        let mut line = Line { batch, gathered };
        line.write_all(text.as_bytes()).expect("write");
    }

    #[test]
    fn request_lines_wait_and_other_lines_write_them_first() {
        let out = Out::default();
        let batch = Batch::start(out.clone());
        line(&batch, true, "r1\n");
        line(&batch, true, "r2\n");
        assert_eq!(out.text(), "", "request lines wait");
        line(&batch, false, "warn\n");
        assert_eq!(out.text(), "r1\nr2\nwarn\n", "in order, at once");
        line(&batch, true, "r3\n");
        batch.flush();
        assert_eq!(out.text(), "r1\nr2\nwarn\nr3\n");
    }

    #[test]
    fn waiting_lines_are_written_after_the_interval_or_when_the_batch_is_full() {
        let out = Out::default();
        let batch = Batch::start(out.clone());
        line(&batch, true, "r1\n");
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.text().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the waiting line was never written"
            );
            std::thread::park_timeout(INTERVAL / 4);
        }
        assert_eq!(out.text(), "r1\n");
        let long = "x".repeat(CAPACITY);
        line(&batch, true, &long);
        assert_eq!(
            out.text().len(),
            3 + CAPACITY,
            "a full batch is written at once"
        );
    }

    #[test]
    fn only_info_request_lines_are_gathered() {
        let batch = Batch::start(Out::default());
        let writer = Writer(batch);
        let gathered = |target: &str, level: Level| {
            let meta = tracing::Metadata::new(
                "event",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], tracing_core_callsite()),
                tracing::metadata::Kind::EVENT,
            );
            writer.make_writer_for(&meta).gathered
        };
        assert!(gathered(REQUEST_TARGET, Level::INFO));
        assert!(!gathered(REQUEST_TARGET, Level::WARN));
        assert!(!gathered("aap_gateway::server", Level::INFO));
    }

    fn tracing_core_callsite() -> tracing::callsite::Identifier {
        struct Site;
        impl tracing::callsite::Callsite for Site {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &tracing::Metadata<'_> {
                unreachable!("not registered")
            }
        }
        static SITE: Site = Site;
        tracing::callsite::Identifier(&SITE)
    }
}
