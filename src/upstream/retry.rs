//! Retry policy pieces: which outcomes are worth another try, how long to wait, and the budget
//! that keeps retries from multiplying the load on a system that is already failing.
//!
//! Only idempotent calls are retried (a second `POST` of a lead could create a second lead), and
//! only on outcomes where the request most likely did no harm and a second try may succeed:
//! connect errors, timeouts, 502, 503 and 504. The wait before retry `n` is drawn uniformly from
//! `0..=min(max_backoff, backoff × 2^(n-1))` ("full jitter"), so callers that failed together do
//! not come back together.
//!
//! The budget: under sustained failure every call would turn into `attempts` calls just when the
//! upstream can least take it. Each call deposits `budget_percent / 100` of a token, each retry
//! withdraws one, over a sliding window of [`WINDOW`]; `budget_min_per_sec` tokens per second are
//! always available so a quiet upstream still gets its retries. This is the scheme of Finagle's
//! and tower's `TpsBudget`, kept small and local.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How far back the budget looks.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
const SLOTS: usize = 10;
const SLOT: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct RetryBudget {
    /// Tokens per call, in hundredths (budget_percent).
    percent: u64,
    /// Retries always allowed per window.
    reserve: u64,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    /// Start of the slot `current`.
    slot_start: Instant,
    current: usize,
    /// Calls per slot.
    calls: [u64; SLOTS],
    /// Retries per slot.
    retries: [u64; SLOTS],
}

impl RetryBudget {
    pub(crate) fn new(budget_percent: u32, min_per_sec: u32) -> RetryBudget {
        RetryBudget {
            percent: u64::from(budget_percent),
            reserve: u64::from(min_per_sec) * WINDOW.as_secs(),
            window: Mutex::new(Window {
                slot_start: Instant::now(),
                current: 0,
                calls: [0; SLOTS],
                retries: [0; SLOTS],
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Window> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        window.advance(Instant::now());
        window
    }

    /// Counts one call (not a retry).
    pub(crate) fn deposit(&self) {
        let mut w = self.lock();
        let i = w.current;
        w.calls[i] += 1;
    }

    /// Takes a token for one retry; `false` when the budget is spent.
    pub(crate) fn try_withdraw(&self) -> bool {
        let mut w = self.lock();
        let calls: u64 = w.calls.iter().sum();
        let retries: u64 = w.retries.iter().sum();
        // retries + 1 <= reserve + calls × percent / 100, in integers.
        if (retries + 1) * 100 <= self.reserve * 100 + calls * self.percent {
            let i = w.current;
            w.retries[i] += 1;
            true
        } else {
            false
        }
    }
}

impl Window {
    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.slot_start);
        let steps = (elapsed.as_millis() / SLOT.as_millis()) as usize;
        if steps == 0 {
            return;
        }
        for _ in 0..steps.min(SLOTS) {
            self.current = (self.current + 1) % SLOTS;
            self.calls[self.current] = 0;
            self.retries[self.current] = 0;
        }
        self.slot_start += SLOT * steps as u32;
    }
}

/// The wait before retry number `retry` (1 = the first retry), with full jitter.
pub(crate) fn backoff(retry: u32, base: Duration, max: Duration) -> Duration {
    let exp = retry.saturating_sub(1).min(20);
    let cap = base.saturating_mul(1 << exp).min(max);
    cap.mul_f64(random_unit())
}

/// A uniform number in `[0, 1]`. Jitter needs no cryptographic quality: `RandomState` keys are
/// random per process and differ per instance, which is plenty.
fn random_unit() -> f64 {
    let bits = RandomState::new().hash_one(Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_allows_the_reserve_then_a_percentage_of_calls() {
        let budget = RetryBudget::new(20, 0);
        assert!(!budget.try_withdraw(), "no calls, no reserve");
        for _ in 0..10 {
            budget.deposit();
        }
        assert!(budget.try_withdraw());
        assert!(budget.try_withdraw());
        assert!(!budget.try_withdraw(), "20% of 10 calls is 2 retries");

        let budget = RetryBudget::new(0, 1);
        let allowed = (0..100).filter(|_| budget.try_withdraw()).count();
        assert_eq!(allowed, 10, "1/s over a 10 s window");
    }

    #[test]
    fn old_slots_expire() {
        let mut w = Window {
            slot_start: Instant::now(),
            current: 0,
            calls: [5; SLOTS],
            retries: [5; SLOTS],
        };
        let later = w.slot_start + WINDOW * 2;
        w.advance(later);
        assert_eq!(w.calls.iter().sum::<u64>(), 0);
        assert_eq!(w.retries.iter().sum::<u64>(), 0);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for _ in 0..100 {
            assert!(backoff(1, base, max) <= base);
            assert!(backoff(2, base, max) <= base * 2);
            assert!(backoff(30, base, max) <= max);
        }
        let distinct: std::collections::HashSet<Duration> =
            (0..20).map(|_| backoff(3, base, max)).collect();
        assert!(distinct.len() > 1, "jittered");
    }
}
