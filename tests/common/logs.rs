//! Capturing the log lines one test's thread writes, while the other tests of the binary run.
//!
//! Tracing caches each callsite's interest, and a hint of the most verbose level any subscriber
//! wants, for all threads. A subscriber installed per test (`set_default`) changes both while
//! other threads register callsites and rebuild them: seen in CI as a DEBUG line that never came
//! although WARN lines did. Here one global subscriber, installed once per test binary and never
//! replaced, takes every event up to DEBUG; its writer hands the formatted line to the buffer of
//! the thread that wrote it, if that thread is capturing, and drops it otherwise. Interest and
//! level hint never change after the first capture, so there is nothing left to race.
//!
//! Test runtimes are single-threaded, so the servers and gateway a test starts log on its thread.

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, Once};

thread_local! {
    static CAPTURING: RefCell<Option<Logs>> = const { RefCell::new(None) };
}

/// The lines captured so far; shared with the subscriber's writer while capturing.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

/// Captures this thread's log lines (up to DEBUG, no colours) until the guard is dropped.
pub fn capture() -> (Logs, Capture) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(|| ThreadWriter)
            .init();
    });
    let logs = Logs::default();
    CAPTURING.with(|c| *c.borrow_mut() = Some(logs.clone()));
    (logs, Capture(()))
}

/// Stops the capture of [`capture`] when dropped.
pub struct Capture(());

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURING.with(|c| *c.borrow_mut() = None);
    }
}

struct ThreadWriter;

impl Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURING.with(|c| {
            if let Some(logs) = c.borrow().as_ref() {
                logs.0.lock().expect("lock").extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
