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

// ---------------------------------------------------------------------------------------------
// The lead fault tests' shared setup (lead_proof, lead_soak, lead_reload).

/// A copy of the demo for replicas under lead faults: a `request_timeout` deadline (buyers hear
/// "in progress" and retry), 1 s to read a request body, and the quotas out of the way (buyers
/// retry every lead on every replica, far above a real buyer's rate).
pub fn lead_fault_demo(request_timeout: &str) -> super::DemoCopy {
    let files = super::DemoCopy::new();
    files.edit(
        "config/demo.yaml",
        "request_timeout: 15s",
        &format!("request_timeout: {request_timeout}\n  body_read_timeout: 1s"),
    );
    unlimited_lead_quotas(&files);
    files
}

/// Lifts the demo's `lead.submit` and default quotas far above what the tests send.
pub fn unlimited_lead_quotas(files: &super::DemoCopy) {
    files.edit(
        "config/demo.yaml",
        "lead.submit: { rate: 60/min, burst: 20 }",
        "lead.submit: { rate: 100000/min, burst: 10000 }",
    );
    files.edit(
        "config/demo.yaml",
        "default: { rate: 100/s, burst: 200 }",
        "default: { rate: 100000/s, burst: 100000 }",
    );
}

/// Makes `dealer` (a mapping folder: `demo-honda`) send leads as JSON to a CRM at the URL in
/// `${url_var}`: an upstream `crm_json` with `timeouts`, `POST /leads` with the lead's reference
/// as `external_ref` and the customer as sent, and the CRM's `leadId` as the lead id.
pub fn send_leads_as_json(files: &super::DemoCopy, dealer: &str, url_var: &str, timeouts: &str) {
    files.append(
        &format!("mappings/{dealer}/upstreams.yaml"),
        &format!("\ncrm_json:\n  kind: rest\n  base_url: ${{{url_var}}}\n  timeouts: {timeouts}\n"),
    );
    std::fs::write(
        files.path(&format!("mappings/{dealer}/lead.submit.yaml")),
        "skill: lead.submit\nupstream: crm_json\nrequest:\n  method: POST\n  path: /leads\n  body: |\n    { \"external_ref\": {{ lead.reference }}, \"customer\": {{ request.customer }} }\nresponse:\n  jq: '{ lead_id: .leadId, status: \"received\" }'\n",
    )
    .expect("write mapping");
}

/// A `lead.submit` request for `vehicle` from `customer`, with a grant for e-mail and phone,
/// sent by `agent` under `key`.
pub fn lead_request(
    customer: serde_json::Value,
    vehicle: &aap_sim::inventory::Vehicle,
    agent: &str,
    key: &str,
) -> serde_json::Value {
    serde_json::json!({
        "type": "lead.submit.request",
        "customer": customer,
        "consent": {
            "granted_at": "2026-04-30T10:16:00Z",
            "allowed_channels": ["email", "phone"],
            "consent_text": "I agree to share my contact info with the dealer about this vehicle.",
            "scope": ["lead_submission"]
        },
        "vehicle_of_interest": {
            "vin": vehicle.vin, "year": vehicle.year, "make": vehicle.make,
            "model": vehicle.model, "condition": "new"
        },
        "source_agent": { "name": agent },
        "submitted_at": "2026-04-30T10:16:05Z",
        "idempotency_key": key
    })
}

/// The first unit in stock of `units` (a simulator's inventory).
pub fn in_stock(units: Vec<aap_sim::inventory::Vehicle>) -> aap_sim::inventory::Vehicle {
    units
        .into_iter()
        .find(|u| u.status == aap_sim::inventory::Status::InStock)
        .expect("a unit in stock")
}

/// Locks `mutex`, a poisoned one too (a failed assertion elsewhere must not hide behind it).
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
