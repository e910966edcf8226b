//! `idempotency` and `rate_limit`: their quotas, and the memory or Redis backend both use.

use std::collections::HashMap;
use std::time::Duration;

use super::file::{FileIdempotency, FileQuota, FileRateLimit};
use super::load::ConfigLoader;
use super::types::{
    ClientIpHeader, IdempotencySettings, LimitBackend, OnAmbiguous, OnBackendError, Quota,
    RateLimitSettings,
};
use super::yaml;

impl ConfigLoader {
    pub(super) fn idempotency(
        &mut self,
        file: FileIdempotency,
        rate_limit_redis_url: Option<String>,
    ) -> Option<IdempotencySettings> {
        // One Redis for both is the common case: `idempotency.redis_url` defaults to the
        // rate limiter's.
        let url = file.redis_url.clone().or(rate_limit_redis_url);
        let backend = self.backend("/idempotency", &file.backend, url.as_deref());
        let on_backend_error =
            self.on_backend_error("/idempotency/on_backend_error", &file.on_backend_error);
        let redis_timeout = self.duration("/idempotency/redis_timeout", &file.redis_timeout);
        let lock_ttl = self.duration("/idempotency/lock_ttl", &file.lock_ttl);
        if lock_ttl.is_some_and(|t| t < Duration::from_secs(1)) {
            self.problem(
                "/idempotency/lock_ttl",
                "must be at least 1s: it is renewed every third of it, each renewal a Redis call",
            );
        }
        if let (Some(lease), Some(redis)) = (lock_ttl, redis_timeout)
            && lease >= Duration::from_secs(1)
            && lease < redis * 6
        {
            self.problem(
                "/idempotency/lock_ttl",
                "must be at least 6 × redis_timeout: a renewal every third of it has to get \
                 through even when Redis is slow",
            );
        }
        let on_ambiguous = match file.on_ambiguous.as_str() {
            "resend" => Some(OnAmbiguous::Resend),
            "hold" => Some(OnAmbiguous::Hold),
            other => {
                self.problem(
                    "/idempotency/on_ambiguous",
                    format!("`{other}` is not one of resend, hold"),
                );
                None
            }
        };
        let ttl = self.duration("/idempotency/ttl", &file.ttl);
        if ttl.is_some_and(|t| t < Duration::from_secs(24 * 3600)) {
            self.warn(
                "/idempotency/ttl",
                "shorter than the 24 h docs/protocol.md §Idempotency recommends: a buyer retrying \
                 later gets a second lead",
            );
        }
        let max_entries = if file.max_entries == 0 {
            self.problem("/idempotency/max_entries", "must be at least 1");
            None
        } else {
            usize::try_from(file.max_entries).ok()
        };
        let max_bytes = if file.max_bytes < 64 * 1024 {
            self.problem(
                "/idempotency/max_bytes",
                "must be at least 65536 (64 KiB): one stored reply can take a few KiB",
            );
            None
        } else {
            Some(usize::try_from(file.max_bytes).unwrap_or(usize::MAX))
        };
        Some(IdempotencySettings {
            backend: backend?,
            on_backend_error: on_backend_error?,
            redis_timeout: redis_timeout?,
            lock_ttl: lock_ttl.filter(|t| *t >= Duration::from_secs(1))?,
            ttl: ttl?,
            max_entries: max_entries?,
            max_bytes: max_bytes?,
            on_ambiguous: on_ambiguous?,
        })
    }

    pub(super) fn quota(&mut self, pointer: &str, file: &FileQuota) -> Option<Quota> {
        let parsed = file.rate.split_once('/').and_then(|(count, unit)| {
            let count: u32 = count.trim().parse().ok().filter(|c| *c > 0)?;
            let period = match unit.trim() {
                "s" | "sec" | "second" => Duration::from_secs(1),
                "m" | "min" | "minute" => Duration::from_secs(60),
                "h" | "hour" => Duration::from_secs(3600),
                other => humantime::parse_duration(other)
                    .ok()
                    .filter(|d| !d.is_zero())?,
            };
            Some((count, period))
        });
        let Some((count, period)) = parsed else {
            self.problem(
                &format!("{pointer}/rate"),
                format!("`{}` is not a rate like 10/s, 600/min or 5/10s", file.rate),
            );
            return None;
        };
        if file.burst == 0 {
            self.problem(&format!("{pointer}/burst"), "must be at least 1");
            return None;
        }
        Some(Quota {
            count,
            period,
            burst: file.burst,
        })
    }

    /// `backend: memory | redis` with the `redis_url` a Redis backend needs.
    fn backend(&mut self, section: &str, name: &str, url: Option<&str>) -> Option<LimitBackend> {
        match (name, url) {
            ("memory", _) => Some(LimitBackend::Memory),
            // Checked here, where the problem can name the variable or line it came from.
            ("redis", Some(url)) => match super::paths::redis_client(url) {
                Ok(_) => Some(LimitBackend::Redis {
                    url: url.to_owned(),
                }),
                Err(message) => {
                    self.problem(&format!("{section}/redis_url"), message);
                    None
                }
            },
            ("redis", None) => {
                self.problem(
                    &format!("{section}/backend"),
                    "`backend: redis` needs `redis_url` like redis://host:6379/0 (rediss:// for TLS)",
                );
                None
            }
            (other, _) => {
                self.problem(
                    &format!("{section}/backend"),
                    format!("`{other}` is not a backend; expected memory or redis"),
                );
                None
            }
        }
    }

    fn on_backend_error(&mut self, pointer: &str, value: &str) -> Option<OnBackendError> {
        match value {
            "local" => Some(OnBackendError::Local),
            "deny" => Some(OnBackendError::Deny),
            other => {
                self.problem(pointer, format!("`{other}` is not one of local, deny"));
                None
            }
        }
    }

    pub(super) fn rate_limit(&mut self, file: FileRateLimit) -> Option<RateLimitSettings> {
        let backend = self.backend("/rate_limit", &file.backend, file.redis_url.as_deref());
        let on_backend_error =
            self.on_backend_error("/rate_limit/on_backend_error", &file.on_backend_error);
        let redis_timeout = self.duration("/rate_limit/redis_timeout", &file.redis_timeout);
        let mut trusted_proxies = Vec::new();
        for (i, cidr) in file.trusted_proxies.iter().enumerate() {
            let parsed = cidr
                .parse::<ipnet::IpNet>()
                .or_else(|_| cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match parsed {
                Ok(net) => trusted_proxies.push(net),
                Err(_) => self.problem(
                    &format!("/rate_limit/trusted_proxies/{i}"),
                    format!("`{cidr}` is not an address or CIDR like 10.0.0.0/8"),
                ),
            }
        }
        let client_ip_header = match file.client_ip_header.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Some(ClientIpHeader::XForwardedFor),
            "forwarded" => Some(ClientIpHeader::Forwarded),
            "x-real-ip" => Some(ClientIpHeader::XRealIp),
            _ => {
                self.problem(
                    "/rate_limit/client_ip_header",
                    format!(
                        "`{}` is not one of x-forwarded-for, forwarded, x-real-ip",
                        file.client_ip_header
                    ),
                );
                None
            }
        };
        let default = self.quota("/rate_limit/default", &file.default);
        let skills = self.skill_quotas("/rate_limit/skills", &file.skills);
        let per_dealer = self.skill_quotas("/rate_limit/per_dealer", &file.per_dealer);
        let per_ip = match &file.per_ip {
            Some(quota) => self.quota("/rate_limit/per_ip", quota),
            None => default
                .map(|d| Quota::per_ip_default(std::iter::once(d).chain(skills.values().copied()))),
        };
        Some(RateLimitSettings {
            enabled: file.enabled,
            backend: backend?,
            on_backend_error: on_backend_error?,
            redis_timeout: redis_timeout?,
            trusted_proxies,
            client_ip_header: client_ip_header?,
            per_ip: per_ip?,
            default: default?,
            skills,
            per_dealer,
        })
    }

    /// A map of skill id → quota (`rate_limit.skills`, `rate_limit.per_dealer`).
    fn skill_quotas(
        &mut self,
        base: &str,
        file: &std::collections::BTreeMap<String, FileQuota>,
    ) -> HashMap<crate::protocol::Skill, Quota> {
        let mut quotas = HashMap::new();
        for (name, quota) in file {
            let pointer = yaml::push_pointer(base, name);
            match crate::protocol::Skill::from_id(name) {
                Some(skill) => {
                    if let Some(q) = self.quota(&pointer, quota) {
                        quotas.insert(skill, q);
                    }
                }
                None => self.problem(
                    &pointer,
                    format!(
                        "`{name}` is not an AAP skill; use one of {}",
                        crate::protocol::Skill::ids()
                    ),
                ),
            }
        }
        quotas
    }
}
