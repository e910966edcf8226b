//! Chooses the dealer a request is for, from its host name and path (docs/protocol.md §Choosing
//! the dealer).
//!
//! A dealer matches when its `hosts` (if any) contain the request's host name (port ignored,
//! case-insensitive) and its `path_prefix` (if any) starts the path at a segment boundary. When
//! several match, the most specific wins: the longest path prefix, then a host match over "any
//! host". `App::build` sorts the dealers so the first match is the most specific.

use std::cmp::Reverse;

use crate::settings::DealerSettings;

/// A dealer as routing sees it: where it is served (`hosts`, `path_prefix`).
pub trait Placed {
    fn placement(&self) -> &DealerSettings;
}

/// Orders dealers most specific first.
pub fn sort_by_specificity<D: Placed>(dealers: &mut [D]) {
    dealers.sort_by_key(|d| {
        let s = d.placement();
        (Reverse(s.path_prefix.len()), s.hosts.is_empty())
    });
}

/// The dealer for `host` and `path`, with the path below the dealer's prefix (`/` at least).
pub fn select<'a, 'p, D: Placed>(
    dealers: &'a [D],
    host: Option<&str>,
    path: &'p str,
) -> Option<(&'a D, &'p str)> {
    let host = host.map(strip_port);
    dealers.iter().find_map(|dealer| {
        let s = dealer.placement();
        if !s.hosts.is_empty() {
            let h = host?;
            if !s.hosts.iter().any(|known| known.eq_ignore_ascii_case(h)) {
                return None;
            }
        }
        let rest = path.strip_prefix(s.path_prefix.as_str())?;
        match rest {
            "" => Some((dealer, "/")),
            r if r.starts_with('/') => Some((dealer, r)),
            _ => None,
        }
    })
}

/// `example.com:8080` → `example.com`; `[::1]:8080` → `[::1]`.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    })
}

#[cfg(test)]
mod tests {
    use super::strip_port;

    #[test]
    fn ports_are_ignored() {
        assert_eq!(strip_port("Dealer.Example.com:8443"), "Dealer.Example.com");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("localhost"), "localhost");
    }
}
