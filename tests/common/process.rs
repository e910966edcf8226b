//! Test harness: the real `aap-gateway demo` binary as a child process on loopback ephemeral
//! ports, its stderr in a log file, killed when dropped; and a [`Replica`], the binary serving a
//! configuration file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long the demo may take to write its endpoints file.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running demo binary.
pub struct DemoProcess {
    pub child: Child,
    /// The endpoints file it wrote (gateway, admin, simulators, dealers).
    pub endpoints: Value,
    /// Its stderr (JSON log lines).
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl DemoProcess {
    /// Starts `aap-gateway demo --log-format json` with `env` added to its environment and
    /// waits until it is ready.
    pub async fn start(env: &[(&str, &str)]) -> DemoProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let endpoints_file = dir.path().join("endpoints.json");
        let log = dir.path().join("gateway.log");
        let child = demo_command()
            .arg("--endpoints-file")
            .arg(&endpoints_file)
            .args(["--log-format", "json"])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the binary starts");
        let deadline = Instant::now() + START_TIMEOUT;
        let endpoints = loop {
            if let Some(v) = std::fs::read_to_string(&endpoints_file)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            {
                break v;
            }
            assert!(Instant::now() < deadline, "the demo did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        DemoProcess {
            child,
            endpoints,
            log,
            _dir: dir,
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log lines that are JSON objects.
    pub fn log_lines(&self) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// A dealer's JSON-RPC endpoint.
    pub fn jsonrpc_url(&self, id: &str) -> String {
        self.dealer(id)["jsonrpc_url"]
            .as_str()
            .expect("dealer url")
            .to_owned()
    }

    /// A dealer's entry of the endpoints file.
    pub fn dealer(&self, id: &str) -> &Value {
        self.endpoints["dealers"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["id"] == id))
            .unwrap_or_else(|| panic!("no dealer {id} in {}", self.endpoints))
    }
}

impl Drop for DemoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `aap-gateway demo` on loopback ephemeral ports, run from the repository.
pub fn demo_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aap-gateway"));
    command
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

/// Sends `child` SIGTERM and waits until it exits (a graceful stop), at most `within`.
pub async fn terminate(child: &mut Child, within: Duration) {
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(signalled.success());
    let deadline = Instant::now() + within;
    while child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the process did not exit within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replica: the real binary serving `--config`, killed (`SIGKILL`) when dropped.
pub struct Replica {
    pub child: Child,
    /// `http://127.0.0.1:{port}`.
    pub url: String,
    pub admin: String,
    /// Its stderr (JSON log lines).
    pub log: tempfile::NamedTempFile,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port_now() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Starts a replica on two ports picked free a moment before. Another test of this process may
/// take such a port in between (its clients' ephemeral ports come from the same range): a replica
/// that exits because its address is in use is started again on fresh ports. Any other early exit,
/// or no health within 30 s, fails the test with the replica's log.
pub async fn replica(config: &std::path::Path, vars: &HashMap<String, String>) -> Replica {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for _attempt in 0..5 {
        let (port, admin_port) = (free_port_now(), free_port_now());
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(config)
            .envs(vars)
            .env("AAP_GATEWAY__LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "AAP_GATEWAY__ADMIN_LISTEN",
                format!("127.0.0.1:{admin_port}"),
            )
            .stdout(Stdio::null())
            .stderr(log.reopen().expect("log"))
            .spawn()
            .expect("the binary starts");
        let mut replica = Replica {
            child,
            url: format!("http://127.0.0.1:{port}"),
            admin: format!("http://127.0.0.1:{admin_port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = client
                .get(format!("{}/healthz", replica.admin))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return replica;
            }
            let log = || std::fs::read_to_string(replica.log.path()).unwrap_or_default();
            if let Some(status) = replica.child.try_wait().expect("wait") {
                let log = log();
                assert!(
                    log.contains("Address already in use"),
                    "the replica exited ({status}) before it was healthy:\n{log}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica was not healthy within 30 s:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("five replicas in a row found a port taken");
}
