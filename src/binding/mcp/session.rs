//! MCP sessions (Streamable HTTP §Session management): the `Mcp-Session-Id` a client gets from
//! `initialize` and sends on every later request, with the protocol version negotiated then.
//!
//! A session is a few dozen bytes: the dealer it was opened with, the version, its last use.
//! The table is bounded (`bindings.mcp.max_sessions`: a flood of `initialize` evicts the least
//! recently used session rather than growing memory) and forgets sessions idle for
//! `bindings.mcp.session_idle_timeout`; a forgotten session's client gets 404 and initializes
//! again, as the specification prescribes. Nothing a tool call depends on lives in a session, so
//! losing one costs a client one round trip.
//!
//! One table per process ([`SESSIONS`]): sessions belong to the process, not to a
//! configuration, so a reload does not end them (like the metrics and running deliveries the
//! `App` carries over). A session is valid only at the dealer that opened it.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The process's sessions.
pub(super) static SESSIONS: LazyLock<Sessions> = LazyLock::new(Sessions::default);

/// Open sessions by id.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    open: Mutex<HashMap<String, Session>>,
}

#[derive(Debug)]
struct Session {
    dealer: String,
    version: &'static str,
    last_used: Instant,
}

/// The bounds of the table, from `bindings.mcp`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) max: usize,
    pub(super) idle: Duration,
}

impl Sessions {
    /// Opens a session for `dealer` at `version`; returns its id (122 random bits, visible
    /// ASCII as the specification requires). Forgets idle sessions first, then the least
    /// recently used one while the table is full.
    pub(super) fn open(
        &self,
        dealer: &str,
        version: &'static str,
        now: Instant,
        bounds: Bounds,
    ) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, s| now.saturating_duration_since(s.last_used) < bounds.idle);
        while open.len() >= bounds.max.max(1) {
            let oldest = open
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(oldest) => open.remove(&oldest),
                None => break,
            };
        }
        open.insert(
            id.clone(),
            Session {
                dealer: dealer.to_owned(),
                version,
                last_used: now,
            },
        );
        id
    }

    /// The version of session `id` at `dealer`, marking it used; `None` when it is unknown,
    /// idle too long (then forgotten) or another dealer's.
    pub(super) fn resume(
        &self,
        id: &str,
        dealer: &str,
        now: Instant,
        bounds: Bounds,
    ) -> Option<&'static str> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let session = open.get_mut(id)?;
        if session.dealer != dealer {
            return None;
        }
        if now.saturating_duration_since(session.last_used) >= bounds.idle {
            open.remove(id);
            return None;
        }
        session.last_used = now;
        Some(session.version)
    }

    /// Ends session `id` at `dealer`; `false` when there was none.
    pub(super) fn close(&self, id: &str, dealer: &str) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.get(id).is_some_and(|s| s.dealer == dealer) {
            open.remove(id);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "2025-11-25";

    fn bounds(max: usize, idle_secs: u64) -> Bounds {
        Bounds {
            max,
            idle: Duration::from_secs(idle_secs),
        }
    }

    #[test]
    fn a_session_is_valid_at_its_dealer_until_closed() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let b = bounds(10, 60);
        let id = sessions.open("a", V, now, b);
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(sessions.resume(&id, "a", now, b), Some(V));
        assert_eq!(sessions.resume(&id, "b", now, b), None, "another dealer's");
        assert!(!sessions.close(&id, "b"));
        assert!(sessions.close(&id, "a"));
        assert_eq!(sessions.resume(&id, "a", now, b), None);
        assert_ne!(sessions.open("a", V, now, b), id, "ids are not reused");
    }

    #[test]
    fn idle_sessions_are_forgotten_and_use_keeps_one_alive() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let b = bounds(10, 60);
        let kept = sessions.open("a", V, t0, b);
        let idle = sessions.open("a", V, t0, b);
        let t1 = t0 + Duration::from_secs(50);
        assert!(sessions.resume(&kept, "a", t1, b).is_some());
        let t2 = t0 + Duration::from_secs(100);
        assert!(sessions.resume(&kept, "a", t2, b).is_some(), "used at t1");
        assert!(
            sessions.resume(&idle, "a", t2, b).is_none(),
            "idle since t0"
        );
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_used_session() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let b = bounds(3, 3600);
        let ids: Vec<String> = (0..3)
            .map(|i| sessions.open("a", V, t0 + Duration::from_secs(i), b))
            .collect();
        // The oldest is used again: the second becomes the least recently used.
        let t = t0 + Duration::from_secs(10);
        assert!(sessions.resume(&ids[0], "a", t, b).is_some());
        let newest = sessions.open("a", V, t, b);
        assert!(sessions.resume(&ids[1], "a", t, b).is_none(), "evicted");
        for id in [&ids[0], &ids[2], &newest] {
            assert!(sessions.resume(id, "a", t, b).is_some());
        }
        assert_eq!(
            sessions
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            3
        );
    }
}
