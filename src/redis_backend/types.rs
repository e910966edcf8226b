//! What the calls take and answer, and the reserve script's reply decoded without quoting it.

use std::time::Duration;

use redis::Value;

/// Why a backend call failed. For the gateway both mean the same: no shared decision now.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Redis refused, dropped the connection, or answered with an error.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// No answer within the backend's timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// What [`RedisBackend::reserve`](super::RedisBackend::reserve) found for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was free and is now held: run the call, renew the lease meanwhile, then record
    /// the outcome (or `release`) with `token`. `orphan`: the reference of a delivery whose
    /// replica's lease ran out before it recorded an outcome (`on_ambiguous: resend`).
    Reserved {
        token: String,
        orphan: Option<String>,
    },
    /// Another call with this key is running (maybe on another replica); its lease runs for
    /// `lease_left` unless renewed.
    InFlight {
        fingerprint: String,
        lease_left: Duration,
    },
    /// A call with this key completed: `reply` is its stored reply.
    Done { fingerprint: String, reply: String },
    /// The key's delivery had an unknown outcome and is held for reconciliation. `orphan`: it
    /// was held just now, its replica's lease having run out mid-delivery.
    Held {
        fingerprint: String,
        reference: String,
        orphan: bool,
    },
    /// Redis lost its data: replicas are putting back what they know for `left` more; no key is
    /// handed out meanwhile.
    Recovering { left: Duration },
    /// Redis's epoch is not the caller's (Redis lost its data, or the caller is new): adopt it,
    /// put back what this replica knows, and ask again.
    Epoch(String),
}

/// The terms of a claim (see [`RedisBackend::reserve`](super::RedisBackend::reserve)).
#[derive(Debug, Clone, Copy)]
pub struct Claiming<'a> {
    pub lease: Duration,
    /// How long the entry lives (the reply TTL).
    pub ttl: Duration,
    /// The epoch the caller knows (`""`: none yet).
    pub epoch: &'a str,
    /// How long free keys stay refused after Redis was found empty by a caller that knew it.
    pub recovery: Duration,
    /// `on_ambiguous: hold`: an orphaned delivery is held, not taken over.
    pub hold_orphans: bool,
}

/// A claim this replica holds, as its lease renewal writes it.
#[derive(Debug, Clone, Copy)]
pub struct HeldClaim<'a> {
    pub token: &'a str,
    pub fingerprint: &'a str,
    pub reference: &'a str,
    /// The lead may be on its way: an orphaned claim is then an unknown outcome.
    pub delivering: bool,
}

/// What a lease renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The claim had vanished (Redis restarted empty) and was put back.
    PutBack,
    /// Another claim or an outcome holds the key now.
    Lost,
}

/// An outcome to put back into a Redis that lost it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seed {
    Done {
        fingerprint: String,
        reply: String,
    },
    Held {
        fingerprint: String,
        reference: String,
    },
}

/// Decodes the reserve script's reply by hand: a generic conversion error would quote the
/// stored reply, which may hold a buyer's personal data, into the message.
pub(super) fn parse_reservation(reply: Value, token: String) -> Result<Reservation, BackendError> {
    let malformed =
        || BackendError::Unavailable("malformed reply to the reserve script".to_owned());
    let Value::Array(items) = reply else {
        return Err(malformed());
    };
    let items: Vec<Option<String>> = items.into_iter().map(text).collect();
    let at = |i: usize| items.get(i).cloned().flatten();
    let ms = |i: usize| {
        at(i)
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_millis)
    };
    let reservation = match (at(0).as_deref(), items.len()) {
        (Some("reserved"), 1) => Reservation::Reserved {
            token,
            orphan: None,
        },
        (Some("reserved"), 3) => Reservation::Reserved {
            token,
            orphan: Some(at(2).ok_or_else(malformed)?),
        },
        (Some("inflight"), 3) => Reservation::InFlight {
            fingerprint: at(1).ok_or_else(malformed)?,
            lease_left: ms(2).ok_or_else(malformed)?,
        },
        (Some("done"), 3) => Reservation::Done {
            fingerprint: at(1).ok_or_else(malformed)?,
            reply: at(2).ok_or_else(malformed)?,
        },
        (Some("held"), 3 | 4) => Reservation::Held {
            fingerprint: at(1).ok_or_else(malformed)?,
            reference: at(2).ok_or_else(malformed)?,
            orphan: items.len() == 4,
        },
        (Some("recovering"), 2) => Reservation::Recovering {
            left: ms(1).ok_or_else(malformed)?,
        },
        (Some("epoch"), 2) => Reservation::Epoch(at(1).ok_or_else(malformed)?),
        _ => return Err(malformed()),
    };
    Ok(reservation)
}

fn text(value: Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_replies_are_decoded_strictly() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let array = |items: &[&str]| Value::Array(items.iter().map(|s| bulk(s)).collect());
        let token = || "t".to_owned();
        let parse = |items: &[&str]| parse_reservation(array(items), token()).unwrap();
        assert_eq!(
            parse(&["reserved"]),
            Reservation::Reserved {
                token: token(),
                orphan: None
            }
        );
        assert_eq!(
            parse(&["reserved", "orphan", "aap-1"]),
            Reservation::Reserved {
                token: token(),
                orphan: Some("aap-1".to_owned())
            }
        );
        assert_eq!(
            parse(&["inflight", "ab", "1500"]),
            Reservation::InFlight {
                fingerprint: "ab".to_owned(),
                lease_left: Duration::from_millis(1500)
            }
        );
        assert_eq!(
            parse(&["done", "ab", "{}"]),
            Reservation::Done {
                fingerprint: "ab".to_owned(),
                reply: "{}".to_owned()
            }
        );
        assert_eq!(
            parse(&["held", "ab", "aap-1", "orphan"]),
            Reservation::Held {
                fingerprint: "ab".to_owned(),
                reference: "aap-1".to_owned(),
                orphan: true
            }
        );
        assert_eq!(
            parse(&["recovering", "900"]),
            Reservation::Recovering {
                left: Duration::from_millis(900)
            }
        );
        assert_eq!(parse(&["epoch", "e2"]), Reservation::Epoch("e2".to_owned()));
        let secret = array(&["weird", "ab", "jane@example.com"]);
        let error = parse_reservation(secret, token()).unwrap_err().to_string();
        assert!(!error.contains("jane"), "{error}");
        assert!(parse_reservation(array(&["inflight", "ab", "soon"]), token()).is_err());
    }
}
