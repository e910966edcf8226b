//! Test harness: a throwaway `redis-server` on a free 127.0.0.1 port, killed when dropped.
//!
//! The binary is `$REDIS_SERVER` or `redis-server` on the PATH. Without it [`RedisServer::start`]
//! returns `None` and the calling test returns early, so the suite still passes on a machine
//! without Redis (the skip is printed) — unless `AAP_TEST_REQUIRE_REDIS=1` (set by `.ci/run`),
//! where a missing server fails the test instead of skipping it. Nothing is persisted: `--save "" --appendonly no`.
//!
//! `start` and `restart` block the calling thread while the server boots (milliseconds, at most
//! 5 s); that is fine inside `#[tokio::test]`, where nothing else needs the thread meanwhile.

use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const BOOT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running `redis-server`, stopped (killed and reaped) on drop.
pub struct RedisServer {
    /// `redis://127.0.0.1:{port}/`.
    pub url: String,
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port, or `None` when there is no `redis-server` binary.
    /// Panics if the binary exists but the server does not come up.
    pub fn start() -> Option<RedisServer> {
        let mut last_error = String::new();
        // The free port can be taken between probing and binding it: try a few.
        for _ in 0..3 {
            let port = free_port();
            let mut child = match spawn(port) {
                Ok(child) => child,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    assert!(
                        std::env::var_os("AAP_TEST_REQUIRE_REDIS").is_none_or(|v| v != "1"),
                        "{} not found and AAP_TEST_REQUIRE_REDIS=1",
                        binary()
                    );
                    eprintln!(
                        "skipping this test: {} not found (install Redis, e.g. \
                         apt-get install redis-server, or set REDIS_SERVER)",
                        binary()
                    );
                    return None;
                }
                Err(error) => panic!("cannot run {}: {error}", binary()),
            };
            match wait_until_ready(&mut child, port) {
                Ok(()) => {
                    return Some(RedisServer {
                        url: format!("redis://127.0.0.1:{port}/"),
                        port,
                        child: Some(child),
                    });
                }
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (an outage: connections drop, later connects are refused). Data is lost.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port (stopping the old one first).
    pub fn restart(&mut self) {
        self.stop();
        let mut child = spawn(self.port).expect("respawn redis-server");
        if let Err(error) = wait_until_ready(&mut child, self.port) {
            panic!(
                "redis-server did not restart on port {}: {error}",
                self.port
            );
        }
        self.child = Some(child);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

fn spawn(port: u16) -> io::Result<Child> {
    Command::new(binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
}

/// Waits until the port accepts connections. Instead of sleeping between tries it waits for
/// the server's next log line (at most 50 ms), which is when readiness is likely to change.
fn wait_until_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let (lines, logged) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        // Also keeps draining the log, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for _line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines.send(());
            }
        });
    }
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + BOOT_TIMEOUT;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited with {status} (port {port} taken?)"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "not accepting on port {port} after {BOOT_TIMEOUT:?}"
            ));
        }
        if let Err(RecvTimeoutError::Disconnected) =
            logged.recv_timeout(left.min(Duration::from_millis(50)))
        {
            // The log closed: the server is exiting.
            let status = child.wait().map_err(|e| e.to_string())?;
            return Err(format!("exited with {status} (port {port} taken?)"));
        }
    }
}
