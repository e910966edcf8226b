//! The limiter and client identification on the cases the gateway meets.

use super::*;
use std::collections::HashMap;

fn settings(rate: u32, per: Duration, burst: u32) -> RateLimitSettings {
    RateLimitSettings {
        enabled: true,
        backend: crate::settings::LimitBackend::Memory,
        on_backend_error: OnBackendError::Local,
        redis_timeout: Duration::from_millis(50),
        trusted_proxies: Vec::new(),
        client_ip_header: ClientIpHeader::XForwardedFor,
        per_ip: Quota {
            count: 1000,
            period: Duration::from_secs(1),
            burst: 1000,
        },
        default: Quota {
            count: rate,
            period: per,
            burst,
        },
        skills: HashMap::new(),
        per_dealer: HashMap::new(),
    }
}

fn ip(n: u8) -> Client {
    Client::Ip(IpAddr::from([192, 0, 2, n]))
}

/// One call through both stages, as the pipeline runs them (the schema passing between).
fn both(
    l: &Limiter<FakeRelativeClock>,
    dealer: u16,
    id: &str,
    skill: Skill,
    c: &Client,
) -> Result<(), AapError> {
    futures_lite(async {
        l.check(dealer, id, skill, c).await?;
        l.check_dealer(dealer, id, skill).await
    })
}

fn admitted(l: &Limiter<FakeRelativeClock>, skill: Skill, c: &Client) -> bool {
    both(l, 0, "d", skill, c).is_ok()
}

/// Polls a future that never waits (memory backend) to completion.
fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(f)
}

#[test]
fn admitted_calls_over_a_window_are_burst_plus_rate_times_time() {
    let clock = FakeRelativeClock::default();
    let l = Limiter::with_fake_clock(
        &settings(10, Duration::from_secs(1), 20),
        &[],
        clock.clone(),
    );
    let c = ip(1);
    let mut admitted_count = 0;
    // 10 s in 1 ms steps, a call attempted every step.
    for _ in 0..10_000 {
        if admitted(&l, Skill::InventorySearch, &c) {
            admitted_count += 1;
        }
        clock.advance(Duration::from_millis(1));
    }
    assert!(
        (119..=121).contains(&admitted_count),
        "burst 20 + 10/s × 10 s = 120, got {admitted_count}"
    );
}

#[test]
fn disabled_limits_admit_every_call_and_hold_no_buckets() {
    let mut s = settings(1, Duration::from_secs(60), 1);
    s.enabled = false;
    let l = Limiter::with_fake_clock(&s, &[], FakeRelativeClock::default());
    assert!((0..100).all(|_| admitted(&l, Skill::InventorySearch, &ip(1))));
    assert!(l.is_empty());
}

#[test]
fn a_refusal_says_exactly_when_to_retry() {
    let clock = FakeRelativeClock::default();
    let l = Limiter::with_fake_clock(&settings(2, Duration::from_secs(1), 1), &[], clock.clone());
    let c = ip(1);
    assert!(admitted(&l, Skill::InventorySearch, &c));
    clock.advance(Duration::from_millis(100));
    match futures_lite(l.check(0, "d", Skill::InventorySearch, &c)) {
        Err(AapError::RateLimited { retry_after }) => {
            assert_eq!(retry_after, Duration::from_millis(400));
        }
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_millis(400));
    assert!(admitted(&l, Skill::InventorySearch, &c));
}

#[test]
fn skills_clients_and_dealers_have_separate_buckets() {
    let clock = FakeRelativeClock::default();
    let mut s = settings(1, Duration::from_secs(60), 1);
    s.skills.insert(
        Skill::LeadSubmit,
        Quota {
            count: 1,
            period: Duration::from_secs(600),
            burst: 2,
        },
    );
    let l = Limiter::with_fake_clock(&s, &[], clock);
    let c = ip(1);
    assert!(admitted(&l, Skill::InventorySearch, &c));
    assert!(!admitted(&l, Skill::InventorySearch, &c));
    // Another skill, another bucket (and lead.submit its own quota: burst 2).
    assert!(admitted(&l, Skill::InventoryVehicle, &c));
    assert!(admitted(&l, Skill::LeadSubmit, &c));
    assert!(admitted(&l, Skill::LeadSubmit, &c));
    assert!(!admitted(&l, Skill::LeadSubmit, &c));
    // Another client, another dealer.
    assert!(admitted(&l, Skill::InventorySearch, &ip(2)));
    assert!(futures_lite(l.check(1, "e", Skill::InventorySearch, &c)).is_ok());
}

#[test]
fn a_dealers_lead_quota_holds_across_clients_and_says_when_to_retry() {
    let clock = FakeRelativeClock::default();
    let mut s = settings(100, Duration::from_secs(1), 100);
    s.per_dealer.insert(
        Skill::LeadSubmit,
        Quota {
            count: 6,
            period: Duration::from_secs(60),
            burst: 3,
        },
    );
    let l = Limiter::with_fake_clock(&s, &[], clock.clone());
    // Three leads from three clients spend the dealer's burst...
    for n in 1..=3 {
        assert!(admitted(&l, Skill::LeadSubmit, &ip(n)), "lead {n}");
    }
    // ...so a fourth client, well within its own quota, is refused with the dealer's wait.
    match both(&l, 0, "d", Skill::LeadSubmit, &ip(4)) {
        Err(AapError::RateLimited { retry_after }) => {
            assert_eq!(retry_after, Duration::from_secs(10));
        }
        other => panic!("{other:?}"),
    }
    // Other skills and other dealers are not held back.
    assert!(admitted(&l, Skill::InventorySearch, &ip(4)));
    assert!(both(&l, 1, "e", Skill::LeadSubmit, &ip(4)).is_ok());
    clock.advance(Duration::from_secs(10));
    assert!(admitted(&l, Skill::LeadSubmit, &ip(4)));
}

#[test]
fn an_api_key_can_carry_its_own_quota() {
    let clock = FakeRelativeClock::default();
    let partner: Arc<str> = Arc::from("partner");
    let quota = Quota {
        count: 100,
        period: Duration::from_secs(1),
        burst: 50,
    };
    let l = Limiter::with_fake_clock(
        &settings(1, Duration::from_secs(60), 1),
        &[(Arc::clone(&partner), quota)],
        clock,
    );
    let key = Client::Key(partner);
    for _ in 0..50 {
        assert!(admitted(&l, Skill::InventorySearch, &key));
    }
    assert!(!admitted(&l, Skill::InventorySearch, &key));
}

#[test]
fn memory_stays_bounded_with_a_million_distinct_clients() {
    let clock = FakeRelativeClock::default();
    let mut l = Limiter::with_fake_clock(
        &settings(10, Duration::from_secs(1), 20),
        &[],
        clock.clone(),
    );
    l.set_max_keys(50_000);
    let mut peak = 0;
    for i in 0..1_000_000u32 {
        let c = Client::Ip(IpAddr::from(i.to_be_bytes()));
        let _ = l.check_local(&l.default, (0, Skill::InventorySearch, c));
        // One call refills in 100 ms; a new client every 10 µs (10,000 live at a time).
        clock.advance(Duration::from_micros(10));
        if i % 10_000 == 0 {
            peak = peak.max(l.len());
        }
    }
    peak = peak.max(l.len());
    assert!(peak <= 50_000, "peak {peak} buckets");
    clock.advance(Duration::from_secs(1));
    l.sweep();
    assert_eq!(l.len(), 0, "idle buckets are swept");
}

#[test]
fn only_the_configured_header_names_the_client_and_only_from_trusted_proxies() {
    use ClientIpHeader::{Forwarded, XForwardedFor, XRealIp};
    let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut h = HeaderMap::new();
    h.insert(
        "x-forwarded-for",
        "203.0.113.9, 198.51.100.7, 10.1.1.1".parse().unwrap(),
    );
    // A client-written `Forwarded` the proxy passed along untouched.
    h.insert("forwarded", "for=192.0.2.200".parse().unwrap());
    h.insert("x-real-ip", "198.51.100.50".parse().unwrap());
    let proxy = ip("10.0.0.5");
    let stranger = ip("192.0.2.44");
    // Via our proxy: the right-most untrusted hop (the left one could be forged), and the
    // forged `Forwarded` is not read.
    assert_eq!(
        client_ip(proxy, &h, &trusted, XForwardedFor),
        ip("198.51.100.7")
    );
    // From anyone else every header is ignored.
    for header in [XForwardedFor, Forwarded, XRealIp] {
        assert_eq!(client_ip(stranger, &h, &trusted, header), stranger);
    }
    // A proxy that writes `Forwarded`: quoted IPv6 with a port.
    h.insert(
        "forwarded",
        "for=192.0.2.1, for=\"[2001:db8::7]:4711\";proto=https"
            .parse()
            .unwrap(),
    );
    assert_eq!(client_ip(proxy, &h, &trusted, Forwarded), ip("2001:db8::7"));
    // One that sets `X-Real-IP`.
    assert_eq!(client_ip(proxy, &h, &trusted, XRealIp), ip("198.51.100.50"));
    // Only trusted hops: the peer itself.
    let mut only_proxies = HeaderMap::new();
    only_proxies.insert("x-forwarded-for", "10.2.2.2".parse().unwrap());
    assert_eq!(
        client_ip(proxy, &only_proxies, &trusted, XForwardedFor),
        proxy
    );
}

/// Issue 38 item 14: a hop a trusted proxy wrote but that names no address (`for=unknown`,
/// an obfuscated `_id`, garbage) ends the walk; the attacker's own entry to its left never
/// becomes the client.
#[test]
fn an_unreadable_hop_from_a_trusted_proxy_ends_the_walk_at_that_proxy() {
    use ClientIpHeader::{Forwarded, XForwardedFor, XRealIp};
    let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let proxy = ip("10.0.0.5");
    let with = |name: &'static str, value: &str| {
        let mut h = HeaderMap::new();
        h.insert(name, value.parse().unwrap());
        h
    };
    // The attacker wrote 198.51.100.66 itself; our proxy could only say `unknown`.
    for value in [
        "for=198.51.100.66, for=unknown",
        "for=198.51.100.66, for=_hidden",
        "for=198.51.100.66, by=10.0.0.5",
    ] {
        let h = with("forwarded", value);
        assert_eq!(client_ip(proxy, &h, &trusted, Forwarded), proxy, "{value}");
    }
    let h = with("x-forwarded-for", "198.51.100.66, unknown");
    assert_eq!(client_ip(proxy, &h, &trusted, XForwardedFor), proxy);
    // Behind a second trusted proxy that wrote `unknown`: that proxy's address stands.
    let h = with("forwarded", "for=198.51.100.66, for=_x, for=10.3.3.3");
    assert_eq!(client_ip(proxy, &h, &trusted, Forwarded), ip("10.3.3.3"));
    let h = with("x-forwarded-for", "198.51.100.66, garbage, 10.3.3.3");
    assert_eq!(
        client_ip(proxy, &h, &trusted, XForwardedFor),
        ip("10.3.3.3")
    );
    let h = with("x-real-ip", "unknown");
    assert_eq!(client_ip(proxy, &h, &trusted, XRealIp), proxy);
    // Readable hops still walk as before.
    let h = with("forwarded", "for=198.51.100.66, for=192.0.2.9");
    assert_eq!(client_ip(proxy, &h, &trusted, Forwarded), ip("192.0.2.9"));
}

#[test]
fn an_ipv6_client_is_counted_by_its_64_and_a_mapped_ipv4_as_ipv4() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(bucket_ip(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
    assert_eq!(
        bucket_ip(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")),
        bucket_ip(ip("2001:db8:1:2::9"))
    );
    assert_ne!(
        bucket_ip(ip("2001:db8:1:3::1")),
        bucket_ip(ip("2001:db8:1:2::1"))
    );
    assert_eq!(bucket_ip(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    assert_eq!(bucket_ip(ip("192.0.2.7")), ip("192.0.2.7"));
}

#[test]
fn the_per_address_quota_counts_a_whole_ipv6_64_as_one_client() {
    let clock = FakeRelativeClock::default();
    let mut s = settings(10, Duration::from_secs(1), 20);
    s.per_ip = Quota {
        count: 1,
        period: Duration::from_secs(60),
        burst: 3,
    };
    let l = Limiter::with_fake_clock(&s, &[], clock);
    let host = |n: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, n]);
    assert!((1..=3).all(|n| l.check_address(host(n)).is_ok()));
    assert!(matches!(
        l.check_address(host(4)),
        Err(AapError::RateLimited { .. })
    ));
    // Another /64, another client.
    assert!(
        l.check_address(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]))
            .is_ok()
    );
}

#[test]
fn calls_beyond_the_concurrency_limit_are_shed() {
    let s = settings(10, Duration::from_secs(1), 20);
    let l = Limiter::new(&s, &[], None, 2);
    let a = l.admit().expect("slot");
    let _b = l.admit().expect("slot");
    assert!(
        matches!(l.admit(), Err(AapError::Overloaded { retry_after }) if retry_after == OVERLOAD_RETRY_AFTER)
    );
    drop(a);
    assert!(l.admit().is_ok());
}
