//! The public listener's connections: caps when they are accepted, deadlines while they live.
//!
//! - **Caps** ([`Gate`]): `connections.max` open at once, and `connections.max_per_ip` per
//!   client address (IPv6 per /64). Trusted proxies are exempt from the per-address cap: every
//!   buyer arrives through them. A connection over a cap is closed as soon as it is accepted,
//!   before a byte is read, so a flood costs one accept each.
//! - **Deadlines** ([`Watched`]): a new connection must send its first byte within
//!   `first_byte_timeout` and complete its first request head within `header_read_timeout` of
//!   that; with no request in flight it may stay open `idle_timeout`. A socket that sends
//!   nothing, half an HTTP/2 preface, or only pings is closed. Reads alone never extend a
//!   deadline — only requests do — so trickling bytes buys nothing. Hyper's own timers cover
//!   the rest (HTTP/1 header reads, HTTP/2 keep-alive pings).

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use crate::rate_limit::bucket_ip;
use crate::settings::ConnectionSettings;
use crate::telemetry::metrics::{GaugeGuard, Metrics};

/// The HTTP/1 and HTTP/2 server settings of the public listener.
pub fn builder(settings: &ConnectionSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.http2_max_concurrent_streams)
        .keep_alive_interval(settings.http2_keep_alive_interval)
        .keep_alive_timeout(settings.http2_keep_alive_timeout);
    builder
}

/// The connection caps, shared by the accept loop and every open connection.
#[derive(Debug)]
pub struct Gate {
    total: Arc<Semaphore>,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// An admitted connection's place under the caps; released when dropped.
#[derive(Debug)]
pub struct Admitted {
    gate: Arc<Gate>,
    /// The per-address count this connection is in (`None`: a trusted proxy).
    ip: Option<IpAddr>,
    _total: OwnedSemaphorePermit,
    _open: GaugeGuard,
}

impl Gate {
    pub fn new(max: usize) -> Arc<Gate> {
        Arc::new(Gate {
            total: Arc::new(Semaphore::new(max.max(1))),
            per_ip: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a connection from `peer`, or `None` (counted) when a cap is reached.
    pub fn admit(
        self: &Arc<Gate>,
        peer: IpAddr,
        max_per_ip: usize,
        trusted: &[ipnet::IpNet],
        metrics: &Metrics,
    ) -> Option<Admitted> {
        let Ok(total) = Arc::clone(&self.total).try_acquire_owned() else {
            metrics.connection_refused("max");
            return None;
        };
        let peer = peer.to_canonical();
        let ip = if trusted.iter().any(|net| net.contains(&peer)) {
            None
        } else {
            let key = bucket_ip(peer);
            let mut counts = self.per_ip.lock().unwrap_or_else(PoisonError::into_inner);
            let count = counts.entry(key).or_insert(0);
            if *count >= max_per_ip {
                drop(counts);
                metrics.connection_refused("max_per_ip");
                return None;
            }
            *count += 1;
            Some(key)
        };
        Some(Admitted {
            gate: Arc::clone(self),
            ip,
            _total: total,
            _open: metrics.connection_open(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(ip) = self.ip {
            let mut counts = self
                .gate
                .per_ip
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(count) = counts.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&ip);
                }
            }
        }
    }
}

const FIRST_BYTE: u8 = 0;
const HEADER: u8 = 1;
const IDLE: u8 = 2;
/// No deadline armed.
const NONE: u64 = u64::MAX;

/// One connection's deadline, shared by its IO ([`Watched`]) and its requests
/// ([`Watch::request_started`]).
#[derive(Debug)]
pub struct Watch {
    base: Instant,
    /// Milliseconds after `base`, or [`NONE`].
    deadline: AtomicU64,
    phase: AtomicU8,
    active: AtomicUsize,
    header_read_timeout: Duration,
    idle_timeout: Duration,
}

/// A request in flight on a connection: no deadline runs until the last one ends.
#[derive(Debug)]
pub struct InFlight(Arc<Watch>);

impl Watch {
    pub fn new(settings: &ConnectionSettings) -> Arc<Watch> {
        let watch = Arc::new(Watch {
            base: Instant::now(),
            deadline: AtomicU64::new(NONE),
            phase: AtomicU8::new(FIRST_BYTE),
            active: AtomicUsize::new(0),
            header_read_timeout: settings.header_read_timeout,
            idle_timeout: settings.idle_timeout,
        });
        watch.arm(settings.first_byte_timeout);
        watch
    }

    fn arm(&self, after: Duration) {
        let at = (self.base.elapsed() + after).as_millis();
        self.deadline
            .store(u64::try_from(at).unwrap_or(NONE - 1), Ordering::Release);
    }

    /// Called as each request starts; the returned guard re-arms the idle deadline when the
    /// connection's last request ends.
    pub fn request_started(self: &Arc<Watch>) -> InFlight {
        self.active.fetch_add(1, Ordering::AcqRel);
        self.phase.store(IDLE, Ordering::Release);
        self.deadline.store(NONE, Ordering::Release);
        InFlight(Arc::clone(self))
    }

    fn first_byte(&self) {
        if self
            .phase
            .compare_exchange(FIRST_BYTE, HEADER, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.arm(self.header_read_timeout);
        }
    }

    /// The armed deadline, unless a request is in flight.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        let at = self.deadline.load(Ordering::Acquire);
        if at == NONE || self.active.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(tokio::time::Instant::from_std(
            self.base + Duration::from_millis(at),
        ))
    }

    fn phase_name(&self) -> &'static str {
        match self.phase.load(Ordering::Acquire) {
            FIRST_BYTE => "first_byte",
            HEADER => "header",
            _ => "idle",
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.arm(self.0.idle_timeout);
        }
    }
}

/// A connection's socket that fails its reads once the [`Watch`]'s deadline passes, which
/// makes hyper close the connection.
#[derive(Debug)]
pub struct Watched<IO> {
    io: IO,
    watch: Arc<Watch>,
    sleep: Pin<Box<Sleep>>,
    metrics: Arc<Metrics>,
}

impl<IO> Watched<IO> {
    pub fn new(io: IO, watch: Arc<Watch>, metrics: Arc<Metrics>) -> Watched<IO> {
        Watched {
            io,
            watch,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            metrics,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        if let Poll::Ready(result) = Pin::new(&mut this.io).poll_read(cx, buf) {
            if buf.filled().len() > before {
                this.watch.first_byte();
            }
            return Poll::Ready(result);
        }
        let Some(deadline) = this.watch.deadline() else {
            // A request is in flight (it re-arms the deadline when it ends, and hyper reads
            // again after answering) or nothing is armed.
            return Poll::Pending;
        };
        if this.sleep.deadline() != deadline {
            this.sleep.as_mut().reset(deadline);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let phase = this.watch.phase_name();
                this.metrics.connection_timed_out(phase);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connection {phase} deadline passed"),
                )))
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ConnectionSettings {
        ConnectionSettings {
            max: 3,
            max_per_ip: 2,
            first_byte_timeout: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            http2_max_concurrent_streams: 10,
            http2_keep_alive_interval: Duration::from_secs(1),
            http2_keep_alive_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn caps_count_per_address_and_in_total_and_free_places_on_close() {
        let metrics = Metrics::new();
        let gate = Gate::new(4);
        let proxies: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let admit = |peer: &str, per_ip: usize| gate.admit(ip(peer), per_ip, &proxies, &metrics);
        let first = admit("192.0.2.1", 2);
        let second = admit("192.0.2.1", 2);
        assert!(first.is_some() && second.is_some());
        assert!(admit("192.0.2.1", 2).is_none(), "per address");
        // One IPv6 /64 is one client.
        let _v6 = admit("2001:db8::1", 1).expect("a place");
        assert!(admit("2001:db8::2", 1).is_none(), "same /64");
        // A trusted proxy is exempt from the per-address cap, not from the total.
        let _proxy = admit("10.0.0.1", 1).expect("a place");
        assert!(admit("10.0.0.1", 1).is_none(), "total");
        drop(first);
        assert!(
            admit("10.0.0.1", 1).is_some(),
            "a closed connection frees its place"
        );
    }

    #[tokio::test]
    async fn deadlines_pause_while_a_request_is_in_flight() {
        let watch = Watch::new(&settings());
        assert!(watch.deadline().is_some(), "first byte");
        let request = watch.request_started();
        assert!(watch.deadline().is_none());
        let second = watch.request_started();
        drop(request);
        assert!(watch.deadline().is_none(), "one still in flight");
        drop(second);
        assert!(watch.deadline().is_some(), "idle");
        assert_eq!(watch.phase_name(), "idle");
    }
}
