//! Keeps the runtime's timer driver from being woken by every request's timeouts.
//!
//! Why: tokio's timer driver plans its next wake when its thread parks, for the earliest timer
//! then set. A timer set later that falls *before* that planned wake makes tokio wake the
//! driver (a write to its eventfd, and one more turn of the event loop), in case the thread is
//! asleep past it. Between requests the gateway often has no timer set at all, so the first
//! timeout a request sets (its body read, its upstream call) did that nearly every time: at a
//! steady 2,000 searches a second, 0.6 system calls a request and a tenth of the gateway's CPU
//! (`bench/README.md`, ninth session). A timer that fires every [`WAKE_WITHIN`] keeps the
//! planned wake at most that far off, so timeouts of that length or longer (every one the
//! gateway sets on a request: seconds) never move it. The cost: one wake a second when idle.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

/// The longest the driver's planned wake lies ahead.
pub(super) const WAKE_WITHIN: Duration = Duration::from_secs(1);

/// Starts the ticking timer on the current runtime; it runs until the handle is aborted.
pub(super) fn keep_near() -> JoinHandle<()> {
    tokio::spawn(async {
        let mut every = tokio::time::interval(WAKE_WITHIN);
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            every.tick().await;
        }
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::Duration;

    /// Write system calls made by this thread so far (Linux's per-thread I/O accounting).
    fn writes_by_this_thread() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
        io.lines()
            .find_map(|line| line.strip_prefix("syscw: "))
            .and_then(|n| n.trim().parse().ok())
            .expect("syscw in /proc/thread-self/io")
    }

    /// Like requests: the driver wakes from a park with no other timer due (here, after a
    /// short sleep), then a timeout of seconds is set and the work ends before it. Gives the
    /// writes this thread made while setting and clearing those timeouts, and how long the
    /// fifty took.
    fn writes_for_requests(keep_near: bool) -> (u64, Duration) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let started = std::time::Instant::now();
            let ticking = keep_near.then(super::keep_near);
            let mut writes = 0;
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let before = writes_by_this_thread();
                // Pending once, so that the timeout's timer is set, as an upstream call's is.
                let work = async {
                    tokio::task::yield_now().await;
                    7
                };
                assert_eq!(
                    tokio::time::timeout(Duration::from_secs(3), work).await,
                    Ok(7)
                );
                writes += writes_by_this_thread() - before;
            }
            if let Some(ticking) = ticking {
                ticking.abort();
            }
            (writes, started.elapsed())
        })
    }

    #[test]
    fn a_requests_timeout_does_not_wake_the_driver() {
        // Without the ticking timer each of the fifty timeouts wakes the driver (the measure
        // works); with it, none does. (Slack for the tick itself: one a second that the fifty
        // took, which a loaded machine stretches.)
        assert!(writes_for_requests(false).0 >= 40);
        let (writes, took) = writes_for_requests(true);
        assert!(writes <= 1 + took.as_secs(), "{writes} writes in {took:?}");
    }
}
