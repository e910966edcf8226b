//! Upstream failures in AAP's terms. The upstream client speaks its own [`UpstreamError`] and
//! knows nothing of AAP; the runtime turns each failure into the [`AapError`] the buyer's call
//! ends with (and `binding::wire_error` into a wire code).

use crate::error::AapError;
use crate::upstream::UpstreamError;

/// An upstream failure as the gateway error of a call to `upstream`.
pub trait IntoAap {
    /// `INTERNAL_ERROR` (retryable) on the wire, with this cause logged under the error id; a
    /// full queue is local overload (`RATE_LIMITED`), and a resting upstream carries its retry
    /// hint.
    fn into_aap(self, upstream: &str) -> AapError;
}

impl IntoAap for UpstreamError {
    fn into_aap(self, upstream: &str) -> AapError {
        let upstream = upstream.to_owned();
        match self {
            UpstreamError::Timeout { after } => AapError::UpstreamTimeout { upstream, after },
            UpstreamError::CircuitOpen { retry_after } => AapError::UpstreamResting {
                upstream,
                retry_after,
            },
            UpstreamError::Busy { waited } => AapError::UpstreamBusy { upstream, waited },
            UpstreamError::Paced { retry_after } => AapError::UpstreamRateLimited {
                upstream,
                retry_after,
            },
            UpstreamError::Connect(_)
            | UpstreamError::Auth(_)
            | UpstreamError::HostKey(_)
            | UpstreamError::Rejected { .. } => AapError::UpstreamUnavailable {
                upstream,
                cause: self.to_string(),
            },
            UpstreamError::TooLarge { .. } | UpstreamError::Protocol(_) => {
                AapError::InvalidUpstreamResponse {
                    upstream,
                    cause: self.to_string(),
                }
            }
            UpstreamError::InvalidRequest(_) => {
                AapError::Internal(format!("call to upstream `{upstream}`: {self}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::upstream::UpstreamError;

    #[test]
    fn every_error_maps_to_an_upstream_aap_error() {
        let cases: Vec<(UpstreamError, &str)> = vec![
            (
                UpstreamError::Timeout {
                    after: Duration::from_secs(5),
                },
                "UpstreamTimeout",
            ),
            (
                UpstreamError::Connect("refused".into()),
                "UpstreamUnavailable",
            ),
            (
                UpstreamError::CircuitOpen {
                    retry_after: Duration::from_secs(3),
                },
                "UpstreamResting",
            ),
            (
                UpstreamError::Busy {
                    waited: Duration::from_secs(1),
                },
                "UpstreamBusy",
            ),
            (UpstreamError::Auth("401".into()), "UpstreamUnavailable"),
            (
                UpstreamError::Rejected {
                    reply: "451 4.3.0".into(),
                    permanent: false,
                },
                "UpstreamUnavailable",
            ),
            (
                UpstreamError::Rejected {
                    reply: "550 5.1.1".into(),
                    permanent: true,
                },
                "UpstreamUnavailable",
            ),
            (
                UpstreamError::TooLarge { limit: 1 },
                "InvalidUpstreamResponse",
            ),
            (
                UpstreamError::Protocol("bad".into()),
                "InvalidUpstreamResponse",
            ),
            (UpstreamError::InvalidRequest("x".into()), "Internal"),
        ];
        for (error, expected) in cases {
            let aap = error.into_aap("dms");
            let got = format!("{aap:?}");
            assert!(got.starts_with(expected), "{got} should be {expected}");
            if expected != "Internal" {
                assert!(got.contains("\"dms\""), "{got} names the upstream");
            }
        }
    }
}
