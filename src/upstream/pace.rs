//! The pace of calls to one upstream: the ceiling the dealer sets (`max_requests_per_second`)
//! and the limits the upstream states itself — a `Retry-After` on `429` / `503`, and
//! `X-RateLimit-Remaining` with `X-RateLimit-Reset` (or the IETF draft's `RateLimit-Remaining`
//! / `RateLimit-Reset`).
//!
//! Each call reserves the earliest start the pace allows, in the order calls ask (a fair queue:
//! no caller overtakes another), and waits for it; a call whose start would be further away than
//! `timeouts.queue` is refused at once with the wait as its retry hint, and reserves nothing, so
//! a burst of buyers is spread over time or turned away instead of passed on to the DMS.
//!
//! Spacing: `1 / max_requests_per_second` between starts; while the upstream's window lasts,
//! `reset / remaining` (its remaining calls spread over what is left of the window); with
//! `remaining: 0`, or after a `Retry-After`, nothing starts before the window ends.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, StatusCode};

/// The longest wait an upstream's own headers can impose: a bogus `Reset` must not shut a
/// dealer's system off for a day.
const LONGEST_WINDOW: Duration = Duration::from_secs(3600);

#[derive(Debug)]
pub(crate) struct Pacer {
    /// `1 / max_requests_per_second`, when set.
    spacing: Option<Duration>,
    /// Whether any pace applies (a ceiling, or headers seen): calls skip the lock otherwise.
    engaged: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The earliest start of the next call.
    next: Instant,
    /// The spacing the upstream's headers ask for, until `window_end`.
    stated: Duration,
    window_end: Instant,
}

impl Pacer {
    pub(crate) fn new(max_per_second: Option<f64>) -> Pacer {
        let spacing = max_per_second
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        let now = Instant::now();
        Pacer {
            spacing,
            engaged: AtomicBool::new(spacing.is_some()),
            state: Mutex::new(State {
                next: now,
                stated: Duration::ZERO,
                window_end: now,
            }),
        }
    }

    /// Reserves the start of one call: how long to wait for it, or `Err(wait)` when that is past
    /// `bound` (nothing reserved).
    pub(crate) fn reserve(&self, bound: Duration) -> Result<Duration, Duration> {
        if !self.engaged.load(Ordering::Relaxed) {
            return Ok(Duration::ZERO);
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let start = state.next.max(now);
        let wait = start - now;
        if wait > bound {
            return Err(wait);
        }
        let stated = if start < state.window_end {
            state.stated
        } else {
            Duration::ZERO
        };
        state.next = start + self.spacing.unwrap_or(Duration::ZERO).max(stated);
        Ok(wait)
    }

    /// Learns the upstream's own limits from a reply.
    pub(crate) fn observe(&self, status: StatusCode, headers: &HeaderMap) {
        let told = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                retry_after(headers).map(|after| (after, 0))
            }
            _ => None,
        };
        let Some((window, remaining)) = told.or_else(|| stated_window(headers)) else {
            return;
        };
        let now = Instant::now();
        let window = window.min(LONGEST_WINDOW);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.engaged.store(true, Ordering::Relaxed);
        if remaining == 0 {
            // Nothing more until the window ends.
            state.next = state.next.max(now + window);
            state.stated = Duration::ZERO;
        } else {
            state.stated = window / remaining;
            state.window_end = now + window;
        }
    }
}

/// A reply's `Retry-After` (RFC 9110 §10.2.3): seconds, or an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (or `RateLimit-*`): (what is left of the
/// window, calls left in it). `Reset` is seconds from now, or a Unix time when it is one.
pub fn stated_window(headers: &HeaderMap) -> Option<(Duration, u32)> {
    let number = |names: [&str; 2]| -> Option<u64> {
        names.iter().find_map(|name| {
            let text = headers.get(*name)?.to_str().ok()?.trim();
            // `RateLimit-Remaining: 10, 10;w=1` (several policies): the first value.
            let first = text.split([',', ';']).next()?.trim();
            first.parse::<u64>().ok()
        })
    };
    let remaining = number(["x-ratelimit-remaining", "ratelimit-remaining"])?;
    let reset = number(["x-ratelimit-reset", "ratelimit-reset"])?;
    let window = if reset > 1_000_000_000 {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Duration::from_secs(reset.saturating_sub(now))
    } else {
        Duration::from_secs(reset)
    };
    Some((window, u32::try_from(remaining).unwrap_or(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("value"));
        }
        map
    }

    #[test]
    fn a_ceiling_spaces_calls_in_order_and_refuses_past_the_bound() {
        let pacer = Pacer::new(Some(10.0));
        let bound = Duration::from_millis(250);
        let waits: Vec<Result<Duration, Duration>> = (0..5).map(|_| pacer.reserve(bound)).collect();
        // 0, 100, 200 ms reserved; the 4th would start 300 ms from now: refused, reserving nothing.
        assert!(waits[0].is_ok_and(|w| w < Duration::from_millis(10)));
        assert!(waits[1].is_ok_and(|w| w > Duration::from_millis(80)));
        assert!(waits[2].is_ok_and(|w| w > Duration::from_millis(180)));
        assert!(waits[3].is_err_and(|w| w > bound));
        assert!(
            waits[4].is_err(),
            "a refused call reserved nothing, the next is refused too"
        );
    }

    #[test]
    fn no_ceiling_and_no_headers_never_wait() {
        let pacer = Pacer::new(None);
        for _ in 0..100 {
            assert_eq!(pacer.reserve(Duration::ZERO), Ok(Duration::ZERO));
        }
        pacer.observe(StatusCode::OK, &headers(&[("content-type", "x")]));
        assert_eq!(pacer.reserve(Duration::ZERO), Ok(Duration::ZERO));
    }

    #[test]
    fn the_upstreams_own_limits_hold_the_following_calls() {
        let pacer = Pacer::new(None);
        pacer.observe(
            StatusCode::OK,
            &headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")]),
        );
        let wait = pacer
            .reserve(Duration::from_secs(5))
            .expect("within the bound");
        assert!(wait > Duration::from_millis(1900), "{wait:?}");
        assert!(pacer.reserve(Duration::from_secs(1)).is_err());

        let pacer = Pacer::new(None);
        pacer.observe(
            StatusCode::OK,
            &headers(&[("X-RateLimit-Remaining", "4"), ("X-RateLimit-Reset", "2")]),
        );
        let first = pacer.reserve(Duration::from_secs(5)).expect("now");
        let second = pacer.reserve(Duration::from_secs(5)).expect("spaced");
        assert!(first < Duration::from_millis(10));
        assert!(
            second > Duration::from_millis(450),
            "4 calls over 2 s: {second:?}"
        );

        let pacer = Pacer::new(None);
        pacer.observe(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "3")]),
        );
        assert!(
            pacer
                .reserve(Duration::from_secs(1))
                .is_err_and(|w| w > Duration::from_secs(2))
        );
        // A Retry-After on a 200 means nothing.
        let pacer = Pacer::new(None);
        pacer.observe(StatusCode::OK, &headers(&[("retry-after", "3")]));
        assert_eq!(pacer.reserve(Duration::ZERO), Ok(Duration::ZERO));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_resets_read_unix_times() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", " 7 ")])),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let read = retry_after(&headers(&[("retry-after", &later)])).expect("a date");
        assert!(read > Duration::from_secs(28) && read <= Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
            + 20;
        let (window, left) = stated_window(&headers(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", &unix.to_string()),
        ]))
        .expect("stated");
        assert_eq!(left, 5);
        assert!(window > Duration::from_secs(18) && window <= Duration::from_secs(20));
        assert_eq!(
            stated_window(&headers(&[
                ("ratelimit-remaining", "10, 10;w=1"),
                ("ratelimit-reset", "1")
            ])),
            Some((Duration::from_secs(1), 10))
        );
    }
}
