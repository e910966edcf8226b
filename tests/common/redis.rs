//! Test harness: a throwaway `redis-server` on a free 127.0.0.1 port, killed when dropped.
//!
//! The binary is `$REDIS_SERVER` or `redis-server` on the PATH. Without it [`RedisServer::start`]
//! returns `None` and the calling test returns early, so the suite still passes on a machine
//! without Redis (the skip is printed) — unless `AAP_TEST_REQUIRE_REDIS=1` (set by `.ci/run`),
//! where a missing server fails the test instead of skipping it. Nothing is persisted
//! (`--save "" --appendonly no`) unless the server is made by [`RedisServer::start_persistent`]:
//! then its data lives in a temporary directory, and a restart loads it (an RDB snapshot made
//! by `SAVE`, or the append-only file).
//!
//! A failover is staged with a primary ([`RedisServer::start_primary`]), a replica following it
//! ([`RedisServer::start_replica_of`], `--replicaof`; [`RedisServer::command`] sends it
//! `REPLICAOF NO ONE`), and a [`Relay`] in front, which the gateway is given as its Redis and
//! which is switched to the replica as a Sentinel- or VIP-managed address would be.
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
    /// Arguments besides the port and persistence (the TLS listener's).
    extra: Vec<String>,
    child: Option<Child>,
    /// Where a persistent server keeps its RDB snapshot and append-only file.
    _data: Option<tempfile::TempDir>,
}

/// How [`RedisServer::start_persistent`] keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Only what the last `SAVE` wrote (`dump.rdb`): a restart goes back to that snapshot.
    Snapshot,
    /// An append-only file written to disk every second (`appendfsync everysec`, Redis's
    /// default): a `SIGKILL` loses at most the last second's writes.
    AppendOnly,
}

/// The TLS side of [`RedisServer::start_tls`]: a throwaway CA and a certificate for `localhost`
/// and `127.0.0.1`, made with the `openssl` command.
pub struct Tls {
    /// `rediss://127.0.0.1:{tls_port}/` (the certificate names the address too).
    pub url: String,
    /// The CA's certificate (PEM): what a client must trust.
    pub ca_file: std::path::PathBuf,
    /// Another CA's certificate, which did not sign the server's: trusting only it must fail.
    pub other_ca_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free port, or `None` when there is no `redis-server` binary.
    /// Panics if the binary exists but the server does not come up.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// A server that also listens with TLS on a second free port (client certificates not
    /// required), or `None` when `redis-server` or `openssl` is missing (the test is skipped
    /// unless `AAP_TEST_REQUIRE_REDIS=1`). The plain port stays open, for looking at keys.
    pub fn start_tls() -> Option<(RedisServer, Tls)> {
        let dir = tempfile::tempdir().expect("temp dir");
        if let Err(error) = make_certificates(dir.path()) {
            assert!(
                std::env::var_os("AAP_TEST_REQUIRE_REDIS").is_none_or(|v| v != "1"),
                "cannot make test certificates and AAP_TEST_REQUIRE_REDIS=1: {error}"
            );
            eprintln!("skipping this test: cannot make test certificates: {error}");
            return None;
        }
        let tls_port = free_port();
        let file = |name: &str| dir.path().join(name).display().to_string();
        let extra = [
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            file("server.crt"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        let server = RedisServer::start_with(&extra)?;
        let tls = Tls {
            url: format!("rediss://127.0.0.1:{tls_port}/"),
            ca_file: dir.path().join("ca.crt"),
            other_ca_file: dir.path().join("other-ca.crt"),
            _dir: dir,
        };
        Some((server, tls))
    }

    /// A server keeping its data in a temporary directory as `persistence` says; [`stop`]
    /// kills it with `SIGKILL` (nothing is flushed) and [`restart`] loads what is on disk.
    ///
    /// [`stop`]: RedisServer::stop
    /// [`restart`]: RedisServer::restart
    pub fn start_persistent(persistence: Persistence) -> Option<RedisServer> {
        let data = tempfile::tempdir().expect("temp dir");
        let mut extra = vec![
            "--dir".to_owned(),
            data.path().display().to_string(),
            "--dbfilename".to_owned(),
            "dump.rdb".to_owned(),
        ];
        if persistence == Persistence::AppendOnly {
            extra.extend(["--appendonly", "yes", "--appendfsync", "everysec"].map(String::from));
        }
        let mut server = RedisServer::start_with(&extra)?;
        server._data = Some(data);
        Some(server)
    }

    fn start_with(extra: &[String]) -> Option<RedisServer> {
        let mut last_error = String::new();
        // The free port can be taken between probing and binding it: try a few.
        for _ in 0..3 {
            let port = free_port();
            let mut child = match spawn(port, extra) {
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
                        extra: extra.to_vec(),
                        child: Some(child),
                        _data: None,
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

    /// A plain connection of the test's own, to look at keys the way an operator would.
    pub async fn connect(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url.as_str()).expect("valid url");
        client
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    /// A server that replicas may follow ([`RedisServer::start_replica_of`]): it streams its data
    /// to a new replica at once, from memory. `None` without `redis-server`.
    pub fn start_primary() -> Option<RedisServer> {
        RedisServer::start_with(
            &[
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ]
            .map(String::from),
        )
    }

    /// A server that replicates `primary` (`--replicaof`), loading the primary's data from the
    /// socket (nothing on disk), and waits until it is in sync. `None` without `redis-server`.
    pub fn start_replica_of(primary: &RedisServer) -> Option<RedisServer> {
        let data = tempfile::tempdir().expect("temp dir");
        let extra = [
            "--dir".to_owned(),
            data.path().display().to_string(),
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary.port.to_string(),
            "--repl-diskless-load".to_owned(),
            "swapdb".to_owned(),
            "--repl-diskless-sync".to_owned(),
            "yes".to_owned(),
            "--repl-diskless-sync-delay".to_owned(),
            "0".to_owned(),
        ];
        let mut server = RedisServer::start_with(&extra)?;
        server._data = Some(data);
        let deadline = Instant::now() + BOOT_TIMEOUT;
        while !server
            .command(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica never synced");
            // Blocking, as `start` is (see the module docs): no runtime here to yield to.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    /// Sends one command and gives its reply as text: a status, error or integer line without
    /// its type byte, or a bulk string's content. Panics on a connection failure.
    pub fn command(&self, args: &[&str]) -> String {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).expect("connect");
        stream
            .set_read_timeout(Some(BOOT_TIMEOUT))
            .expect("read timeout");
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        io::Write::write_all(&mut stream, request.as_bytes()).expect("send");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).expect("reply");
        let line = line.trim_end();
        match line.split_at_checked(1) {
            Some(("$", length)) => {
                let length: usize = length.parse().unwrap_or(0);
                let mut body = vec![0; length];
                io::Read::read_exact(&mut reader, &mut body).expect("bulk reply");
                String::from_utf8_lossy(&body).into_owned()
            }
            Some((_, rest)) => rest.to_owned(),
            None => String::new(),
        }
    }

    /// Waits until this replica applied everything `primary` wrote so far.
    pub fn wait_caught_up(&self, primary: &RedisServer) {
        let written = primary.replication_offset();
        let deadline = Instant::now() + BOOT_TIMEOUT;
        while self.replication_offset() < written {
            assert!(Instant::now() < deadline, "the replica never caught up");
            // Blocking, as `start` is (see the module docs): milliseconds.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `master_repl_offset` from `INFO replication`: how far the replication stream it has
    /// written (a primary) or applied (a replica) goes.
    pub fn replication_offset(&self) -> u64 {
        self.command(&["INFO", "replication"])
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Kills the server with `SIGKILL` (an outage: connections drop, later connects are
    /// refused). Data is lost, but for what a persistent server had on disk.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (stopping the old one first): empty, or for a
    /// persistent one with what it had on disk.
    pub fn restart(&mut self) {
        self.stop();
        let mut child = spawn(self.port, &self.extra).expect("respawn redis-server");
        if let Err(error) = wait_until_ready(&mut child, self.port) {
            panic!(
                "redis-server did not restart on port {}: {error}",
                self.port
            );
        }
        self.child = Some(child);
    }
}

/// A TCP relay in front of one Redis at a time, as the address a Sentinel or a VIP manages:
/// [`Relay::switch`] leads new connections to another server and closes every connection
/// relayed so far.
pub struct Relay {
    addr: SocketAddr,
    target: std::sync::Arc<std::sync::Mutex<u16>>,
    switched: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    /// A relay on a free loopback port leading to the server on `port`.
    pub async fn start(port: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let target = std::sync::Arc::new(std::sync::Mutex::new(port));
        let (switched, _) = tokio::sync::watch::channel(0);
        let task = tokio::spawn({
            let (target, switched) = (std::sync::Arc::clone(&target), switched.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let to = *target
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let mut moved = switched.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) =
                            tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, to)).await
                        else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = moved.changed() => {}
                        }
                    });
                }
            }
        });
        Relay {
            addr,
            target,
            switched,
            task,
        }
    }

    /// `redis://127.0.0.1:{relay port}/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// From now on, connections go to the server on `port`; the ones open are closed.
    pub fn switch(&self, port: u16) {
        *self
            .target
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = port;
        self.switched.send_modify(|n| *n += 1);
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

/// A free port that no server of this test process had before. A stopped server's port stays
/// its own: a client riding out that server's outage reconnects by itself, and must find
/// nothing there, not another test's server that the kernel gave the freed port to.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if given.insert(port) {
            return port;
        }
    }
}

fn spawn(port: u16, extra: &[String]) -> io::Result<Child> {
    Command::new(binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .args(extra)
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

/// A CA (`ca.crt`) and a server certificate it signed for `localhost` and `127.0.0.1`
/// (`server.crt`, `server.key`) in `dir`, valid for a day, and an unrelated CA
/// (`other-ca.crt`).
fn make_certificates(dir: &std::path::Path) -> Result<(), String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("openssl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for name in ["ca", "other-ca"] {
        let (key, crt, subject) = (
            format!("{name}.key"),
            format!("{name}.crt"),
            format!("/CN=aap-gateway test {name}"),
        );
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-subj", &subject, "-days", "1"],
                &[
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign",
                ],
                &["-keyout", &key, "-out", &crt],
            ]
            .concat(),
        )?;
    }
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=localhost",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        ]
        .concat(),
    )?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ])
}
