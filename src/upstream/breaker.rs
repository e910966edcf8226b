//! The circuit breaker: stop calling an upstream that keeps failing.
//!
//! A legacy system that is down or drowning answers slowly or not at all. Without a breaker every
//! buyer call would wait for the full timeout (holding a concurrency slot) and add to the pile
//! the system must work through when it comes back. After `failures` consecutive failed tries
//! the breaker opens and calls fail at once; after `cool_down` exactly one trial call goes through
//! (half-open): its success closes the breaker, its failure opens it for another `cool_down`.
//!
//! Failures are timeouts, connect errors, malformed replies and 5xx statuses. Any other answer
//! (2xx–4xx, or a reply too large to accept) proves the system is up and counts as success. A
//! 5xx reply is judged by its caller ([`super::Verdict`]): a SOAP fault a mapping turns into
//! "no such unit" is an answer, not a failure.

use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use prometheus_client::metrics::gauge::Gauge;
use std::time::{Duration, Instant};

/// The retry hint while a half-open trial decides: it usually takes one round trip.
pub(crate) const TRIAL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail at once until the cool-down ends.
    Open,
    /// The cool-down is over: one trial call decides.
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { trial_in_flight: bool },
}

#[derive(Debug)]
pub(crate) struct Breaker {
    upstream: String,
    threshold: u32,
    cool_down: Duration,
    state: Mutex<State>,
    /// `aap_gateway_upstream_breaker_open`: 1 from opening until a trial closes it.
    open: OnceLock<Gauge>,
}

/// Permission to make one try. Report its outcome with [`Permit::record`]; a permit dropped
/// without a report (the call was cancelled or never reached the upstream) changes nothing,
/// except that a trial permit lets the next caller try instead.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    breaker: &'a Breaker,
    trial: bool,
    recorded: bool,
}

impl Breaker {
    pub(crate) fn new(upstream: &str, threshold: u32, cool_down: Duration) -> Breaker {
        Breaker {
            upstream: upstream.to_owned(),
            threshold: threshold.max(1),
            cool_down,
            state: Mutex::new(State::Closed { failures: 0 }),
            open: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is always valid between statements; a panic elsewhere cannot corrupt it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shows the breaker's state in `gauge` from now on (set once, with the upstream's meter).
    pub(crate) fn attach_gauge(&self, gauge: Gauge) {
        let state = self.lock();
        gauge.set(i64::from(!matches!(*state, State::Closed { .. })));
        let _ = self.open.set(gauge);
    }

    fn show_open(&self, open: bool) {
        if let Some(gauge) = self.open.get() {
            gauge.set(i64::from(open));
        }
    }

    /// The state now; tests read it.
    pub(crate) fn state(&self) -> BreakerState {
        match *self.lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if Instant::now() < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// A permit to try, or, while the breaker is open (or a trial is already running), how long
    /// a caller should wait before asking again: the rest of the cool-down, or
    /// [`TRIAL_RETRY_AFTER`] (at most the cool-down) while the trial runs.
    pub(crate) fn try_acquire(&self) -> Result<Permit<'_>, Duration> {
        let mut state = self.lock();
        let trial = match *state {
            State::Closed { .. } => false,
            State::Open { until } => {
                let now = Instant::now();
                if now < until {
                    return Err(until - now);
                }
                *state = State::HalfOpen {
                    trial_in_flight: true,
                };
                true
            }
            State::HalfOpen {
                trial_in_flight: false,
            } => {
                *state = State::HalfOpen {
                    trial_in_flight: true,
                };
                true
            }
            State::HalfOpen {
                trial_in_flight: true,
            } => return Err(TRIAL_RETRY_AFTER.min(self.cool_down)),
        };
        Ok(Permit {
            breaker: self,
            trial,
            recorded: false,
        })
    }

    pub(crate) fn record(&self, trial: bool, success: bool) {
        let mut state = self.lock();
        match (&mut *state, trial, success) {
            (State::Closed { failures }, false, true) => *failures = 0,
            (State::Closed { failures }, false, false) => {
                *failures += 1;
                if *failures >= self.threshold {
                    tracing::warn!(
                        upstream = %self.upstream,
                        failures = *failures,
                        cool_down_ms = self.cool_down.as_millis() as u64,
                        "circuit breaker opened: calls fail fast until a trial succeeds"
                    );
                    *state = State::Open {
                        until: Instant::now() + self.cool_down,
                    };
                    self.show_open(true);
                }
            }
            (State::HalfOpen { .. }, true, true) => {
                tracing::warn!(upstream = %self.upstream, "circuit breaker closed: trial call succeeded");
                *state = State::Closed { failures: 0 };
                self.show_open(false);
            }
            (State::HalfOpen { .. }, true, false) => {
                tracing::warn!(
                    upstream = %self.upstream,
                    cool_down_ms = self.cool_down.as_millis() as u64,
                    "circuit breaker re-opened: trial call failed"
                );
                *state = State::Open {
                    until: Instant::now() + self.cool_down,
                };
            }
            // A late result of a call admitted before the state changed: the state already
            // reflects newer knowledge.
            _ => {}
        }
    }

    fn release_trial(&self) {
        let mut state = self.lock();
        if let State::HalfOpen { trial_in_flight } = &mut *state {
            *trial_in_flight = false;
        }
    }
}

impl Permit<'_> {
    /// Reports the try's outcome: `success` = the upstream answered sensibly.
    pub(crate) fn record(mut self, success: bool) {
        self.recorded = true;
        self.breaker.record(self.trial, success);
    }

    /// Leaves the report to whoever will judge the reply (see [`super::Verdict`]); returns
    /// whether this try is the half-open trial.
    pub(crate) fn defer(mut self) -> bool {
        self.recorded = true;
        self.trial
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.trial && !self.recorded {
            self.breaker.release_trial();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_a_success_resets_the_count() {
        let b = Breaker::new("dms", 3, Duration::from_secs(60));
        for _ in 0..2 {
            b.try_acquire().expect("closed").record(false);
        }
        b.try_acquire().expect("closed").record(true);
        for _ in 0..2 {
            b.try_acquire().expect("closed").record(false);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        b.try_acquire().expect("closed").record(false);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.try_acquire().is_err());
    }

    #[test]
    fn half_open_lets_exactly_one_trial_through() {
        let b = Breaker::new("dms", 1, Duration::from_secs(60));
        b.try_acquire().expect("closed").record(false);
        assert_eq!(b.state(), BreakerState::Open);
        // Let the cool-down end now.
        *b.lock() = State::Open {
            until: Instant::now(),
        };
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let trial = b.try_acquire().expect("trial");
        assert!(b.try_acquire().is_err(), "second caller during the trial");
        drop(trial); // cancelled: the next caller may try
        let trial = b.try_acquire().expect("trial again");
        trial.record(false);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn an_open_breaker_tells_how_long_it_rests() {
        let b = Breaker::new("dms", 1, Duration::from_secs(60));
        b.try_acquire().expect("closed").record(false);
        let rest = b.try_acquire().expect_err("open");
        assert!(
            rest <= Duration::from_secs(60) && rest > Duration::from_secs(59),
            "{rest:?}"
        );
        *b.lock() = State::Open {
            until: Instant::now(),
        };
        let _trial = b.try_acquire().expect("trial");
        assert_eq!(b.try_acquire().err(), Some(TRIAL_RETRY_AFTER));
    }

    #[test]
    fn a_successful_trial_closes() {
        let b = Breaker::new("dms", 1, Duration::ZERO);
        b.try_acquire().expect("closed").record(false);
        b.try_acquire().expect("trial").record(true);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.try_acquire().is_ok());
    }
}
