//! Test harness: the real gateway, in-process, on 127.0.0.1 ephemeral ports.
#![allow(dead_code, unreachable_pub)]

pub mod http_server;
pub mod jsonrpc;
pub mod logs;
pub mod parity;
pub mod process;
pub mod redis;
pub mod schema;
pub mod sshd;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use aap_gateway::server;
use aap_gateway::settings;
use aap_sim::Simulators;
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub const EXT: &str = "https://draft.autoagentprotocol.invalid/extensions/aap/latest";

/// A running gateway; stops (and drains) when dropped.
pub struct Gateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub app: std::sync::Arc<aap_gateway::app::App>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
    client: reqwest::Client,
    /// Every `SendMessage` posted to a JSON-RPC endpoint also runs through the HTTP+JSON
    /// binding, which must reach the same outcome ([`Gateway::with_parity`]).
    parity: bool,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Starts the gateway on the shipped demo configuration.
pub async fn demo() -> Gateway {
    start_file(&repo_path("config/demo.yaml"), None).await
}

/// `demo` with the rate limiter off — per-client quotas and the per-address quota — for suites
/// that post thousands of requests from one address (a fuzzer is one client flooding).
pub async fn demo_unlimited() -> Gateway {
    let env = HashMap::from([(
        "AAP_GATEWAY__RATE_LIMIT__ENABLED".to_owned(),
        "false".to_owned(),
    )]);
    start_gateway(
        &repo_path("config/demo.yaml"),
        None,
        HashMap::new(),
        env,
        false,
    )
    .await
}

/// Starts the legacy simulators (REST DMS and CSV feed) and the gateway on the shipped demo
/// configuration pointed at them (`${DMS_URL}`, `${FEED_URL}`).
pub async fn demo_with_simulators() -> (Gateway, Simulators) {
    let sims = Simulators::start().await.expect("simulators start");
    let gw =
        start_file_with_vars(&repo_path("config/demo.yaml"), None, simulator_vars(&sims)).await;
    (gw, sims)
}

/// `demo_with_simulators` with the per-client rate limiter off, for suites that share one
/// gateway across many tests (all from 127.0.0.1, so one client): the sum of their calls is
/// not a buyer agent's traffic, and how soon it meets the demo's limit depends on the machine.
pub async fn demo_with_simulators_unlimited() -> (Gateway, Simulators) {
    let sims = Simulators::start().await.expect("simulators start");
    let env = HashMap::from([(
        "AAP_GATEWAY__RATE_LIMIT__ENABLED".to_owned(),
        "false".to_owned(),
    )]);
    let config = repo_path("config/demo.yaml");
    let gw = start_gateway(&config, None, simulator_vars(&sims), env, false).await;
    (gw, sims)
}

/// `demo_with_simulators` with environment overrides (`AAP_GATEWAY__…`) of the configuration.
pub async fn demo_with_simulators_env(env: &[(&str, &str)]) -> (Gateway, Simulators) {
    let sims = Simulators::start().await.expect("simulators start");
    let env = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let config = repo_path("config/demo.yaml");
    let gw = start_gateway(&config, None, simulator_vars(&sims), env, false).await;
    (gw, sims)
}

/// The `${NAME}`s of running simulators (`DMS_URL`, `CRM_URL`, …).
pub fn simulator_vars(sims: &Simulators) -> HashMap<String, String> {
    Simulators::VARS
        .into_iter()
        .filter_map(|name| sims.var(name).map(|v| (name.to_owned(), v)))
        .collect()
}

/// A copy of the demo configuration and both demo mapping folders in a temp dir, for tests that
/// need to change a mapping (e.g. smaller timeouts). Edit the files under `root`, then
/// `start` the gateway on them.
pub struct DemoCopy {
    pub dir: tempfile::TempDir,
}

impl DemoCopy {
    pub fn new() -> DemoCopy {
        let dir = tempfile::tempdir().expect("temp dir");
        for dealer in ["demo-toyota", "demo-honda"] {
            copy_dir(
                &repo_path(&format!("mappings/{dealer}")),
                &dir.path().join("mappings").join(dealer),
            );
        }
        std::fs::create_dir_all(dir.path().join("config")).expect("config dir");
        std::fs::copy(
            repo_path("config/demo.yaml"),
            dir.path().join("config/demo.yaml"),
        )
        .expect("copy config");
        DemoCopy { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A file of the copy, relative to its root (e.g. `mappings/demo-toyota/upstreams.yaml`).
    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Replaces `from` (which must occur) with `to` in a file of the copy.
    pub fn edit(&self, relative: &str, from: &str, to: &str) {
        let path = self.path(relative);
        let text = std::fs::read_to_string(&path).expect("read copy");
        assert!(
            text.contains(from),
            "{relative} does not contain {from:?}; the demo files changed"
        );
        std::fs::write(&path, text.replace(from, to)).expect("write copy");
    }

    /// Sets `key: value` on every line of a file of the copy whose content starts with `key:`
    /// (indentation kept), e.g. `set_key("mappings/demo-toyota/upstreams.yaml", "timeouts",
    /// "{ connect: 300ms, request: 500ms }")` for every upstream of the file.
    pub fn set_key(&self, relative: &str, key: &str, value: &str) {
        let path = self.path(relative);
        let text = std::fs::read_to_string(&path).expect("read copy");
        let prefix = format!("{key}:");
        let mut found = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                let trimmed = line.trim_start();
                if trimmed.starts_with(&prefix) {
                    found = true;
                    let indent = &line[..line.len() - trimmed.len()];
                    format!("{indent}{key}: {value}")
                } else {
                    line.to_owned()
                }
            })
            .collect();
        assert!(
            found,
            "{relative} has no `{key}:` line; the demo files changed"
        );
        std::fs::write(&path, lines.join("\n") + "\n").expect("write copy");
    }

    /// Appends `text` (whole lines) to a file of the copy.
    pub fn append(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        let mut content = std::fs::read_to_string(&path).expect("read copy");
        if !content.ends_with('\n') {
            content.push('\n');
        }
        content.push_str(text);
        std::fs::write(&path, content).expect("write copy");
    }

    /// Starts the gateway on the copy, resolving `${NAME}` through `vars`.
    pub async fn start(self, vars: HashMap<String, String>) -> Gateway {
        let config = self.path("config/demo.yaml");
        start_file_with_vars(&config, Some(self.dir), vars).await
    }

    /// `start`, reloading when the copy's files change (hot reload). Edit the files through
    /// `root()` / `path()` after keeping a clone of the root path.
    pub async fn start_reloading(self, vars: HashMap<String, String>) -> Gateway {
        let config = self.path("config/demo.yaml");
        start_gateway(&config, Some(self.dir), vars, HashMap::new(), true).await
    }
}

impl Default for DemoCopy {
    fn default() -> Self {
        DemoCopy::new()
    }
}

/// Copies the folder `from` to `to`, recursively (`to` is created).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Starts the gateway on a configuration given as YAML text.
pub async fn start_yaml(yaml: &str) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).expect("write config");
    start_file(&path, Some(dir)).await
}

/// `start_yaml` with hot reload: the configuration is `dir/gateway.yaml`; edit it, or a file it
/// names, under `dir` (kept alive with the gateway).
pub async fn start_yaml_reloading(dir: tempfile::TempDir, yaml: &str) -> Gateway {
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).expect("write config");
    start_gateway(&path, Some(dir), HashMap::new(), HashMap::new(), true).await
}

async fn start_file(path: &Path, dir: Option<tempfile::TempDir>) -> Gateway {
    start_file_with_vars(path, dir, HashMap::new()).await
}

/// Starts the gateway on the configuration file at `path`, resolving `${NAME}` in mapping files
/// through `vars` first and the process environment second. `dir` is kept alive (and removed)
/// with the gateway.
pub async fn start_file_with_vars(
    path: &Path,
    dir: Option<tempfile::TempDir>,
    vars: HashMap<String, String>,
) -> Gateway {
    start_gateway(path, dir, vars, HashMap::new(), false).await
}

async fn start_gateway(
    path: &Path,
    dir: Option<tempfile::TempDir>,
    vars: HashMap<String, String>,
    env: HashMap<String, String>,
    reloading: bool,
) -> Gateway {
    let settings =
        settings::load_with_env(path, env).unwrap_or_else(|p| panic!("config problems: {p:?}"));
    let local: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let lookup = move |name: &str| vars.get(name).cloned().or_else(|| std::env::var(name).ok());
    let bound = server::bind_with_vars(settings, local, local, &lookup)
        .await
        .unwrap_or_else(|e| panic!("gateway starts: {e} {e:?}"));
    let (stop, stopped) = oneshot::channel::<()>();
    let app = bound.app.clone();
    let (addr, admin) = (bound.gateway_addr, bound.admin_addr);
    let shutdown = async {
        let _ = stopped.await;
    };
    let task = if reloading {
        let source =
            server::reload::ReloadSource::new(path.to_path_buf(), std::sync::Arc::new(lookup));
        tokio::spawn(server::run_reloading(
            bound.app,
            bound.gateway,
            bound.admin,
            shutdown,
            source,
        ))
    } else {
        tokio::spawn(server::run(bound.app, bound.gateway, bound.admin, shutdown))
    };
    Gateway {
        addr,
        admin,
        app,
        stop: Some(stop),
        task: Some(task),
        _dir: dir,
        client: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
        parity: false,
    }
}

/// A JSON-RPC reply as the test sees it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    pub fn error_code(&self) -> i64 {
        self.body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error in {}", self.text))
    }

    /// The `aap.error` payload, found by `@type`.
    pub fn aap_error(&self) -> &Value {
        self.detail("https://autoagentprotocol.org/extensions/aap/error")
            .unwrap_or_else(|| panic!("no aap.error in {}", self.text))
    }

    pub fn aap_code(&self) -> &str {
        self.aap_error()["code"].as_str().unwrap_or_default()
    }

    pub fn detail(&self, type_url: &str) -> Option<&Value> {
        self.body["error"]["data"]
            .as_array()?
            .iter()
            .find(|d| d["@type"] == type_url)
    }

    pub fn error_info(&self) -> &Value {
        let first = &self.body["error"]["data"][0];
        assert_eq!(
            first["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{}",
            self.text
        );
        first
    }

    /// `(instanceLocation, keyword)` of every reported validation failure, sorted.
    pub fn failures(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self.aap_error()["details"]["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["instanceLocation"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            e["keyword"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// The reply's AAP response object (the DataPart `data`).
    pub fn payload(&self) -> &Value {
        &self.body["result"]["message"]["parts"][0]["data"]
    }

    /// An AAP skill error with `code`: JSON-RPC -32000 on HTTP 200, the `aap.error` body and
    /// the `ErrorInfo` reason both naming it.
    pub fn assert_aap_error(&self, code: &str) {
        assert_eq!(self.status, 200, "{}", self.text);
        assert_eq!(self.error_code(), -32000, "{}", self.text);
        assert_eq!(self.aap_code(), code, "{}", self.text);
        assert_eq!(self.aap_error()["type"], "aap.error", "{}", self.text);
        assert_eq!(self.error_info()["reason"], code, "{}", self.text);
    }

    /// A retryable `INTERNAL_ERROR` (JSON-RPC -32603 on HTTP 200) that tells nothing of its
    /// cause: none of `leaks` in the reply, its error id (random hex, which may spell a word)
    /// left out of the text searched.
    pub fn assert_internal_error(&self, context: &str, leaks: &[&str]) {
        assert_eq!(self.status, 200, "{context}: {}", self.text);
        assert_eq!(
            self.body["error"]["code"], -32603,
            "{context}: expected INTERNAL_ERROR, got {}",
            self.text
        );
        assert_eq!(
            self.aap_code(),
            "INTERNAL_ERROR",
            "{context}: {}",
            self.text
        );
        assert_eq!(
            self.aap_error()["retryable"],
            true,
            "{context}: {}",
            self.text
        );
        assert_eq!(
            self.error_info()["reason"],
            "INTERNAL_ERROR",
            "{context}: {}",
            self.text
        );
        let error_id = self.aap_error()["error_id"].as_str().expect("an error id");
        assert!(
            error_id.starts_with("err_") && error_id[4..].bytes().all(|b| b.is_ascii_hexdigit()),
            "{context}: {error_id}"
        );
        let text = self.text.replace(error_id, "err_");
        for leak in leaks {
            assert!(
                !text.contains(leak),
                "{context}: the error exposes `{leak}`: {text}"
            );
        }
    }

    /// The response `data` of a successful reply of `kind` (`inventory.search.response`, …),
    /// whose payload the AAP schemas accept; panics, showing the reply, on anything else.
    pub fn answered(&self, kind: &str) -> &Value {
        assert_eq!(self.status, 200, "{}", self.text);
        assert!(
            self.body.get("error").is_none(),
            "expected {kind}, got an error: {}",
            self.text
        );
        let payload = self.payload();
        assert_eq!(payload["type"], kind, "{}", self.text);
        schema::assert_reply_valid(payload);
        &payload["data"]
    }
}

impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// The admin listener's `/metrics` text (read a value with [`sample`]).
    pub async fn metrics(&self) -> String {
        let reply = self.client.get(self.admin_url("/metrics")).send().await;
        reply.expect("metrics").text().await.expect("metrics text")
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// From now on every `SendMessage` this harness posts to a JSON-RPC endpoint is sent again
    /// through the HTTP+JSON binding (`{endpoint}/message:send`, the `params` as the body, the
    /// same headers), and the two replies must agree: the same skill reply, or the same error
    /// (ErrorInfo reason, `aap.error` code, retryability and details, BadRequest violations) with
    /// the HTTP status of docs/protocol.md §HTTP statuses. Needs `bindings.http_json.enabled` (the demo has it).
    pub fn with_parity(mut self) -> Gateway {
        assert!(
            self.app.settings.http_json,
            "parity needs bindings.http_json.enabled"
        );
        self.parity = true;
        self
    }

    /// The agent card served at `path` (e.g. `/.well-known/agent-card.json`).
    pub async fn card(&self, path: &str) -> Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("card")
            .json()
            .await
            .expect("card JSON")
    }

    /// POSTs raw bytes to `path` with the given headers.
    pub async fn post_raw(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
        let rest = self
            .parity
            .then(|| parity::rest_twin(path, headers, &body))
            .flatten();
        let reply = self.post_once(path, headers, body).await;
        if let Some((rest_path, rest_body)) = rest {
            let twin = self.post_once(&rest_path, headers, rest_body).await;
            parity::assert_same_outcome(&reply, &twin, headers);
        }
        reply
    }

    async fn post_once(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
        let mut req = self.client.post(self.url(path)).body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    /// POSTs a JSON-RPC body with the standard AAP headers.
    pub async fn rpc(&self, path: &str, body: &Value) -> Reply {
        self.post_raw(path, &standard_headers(), body.to_string().into_bytes())
            .await
    }

    /// Calls a skill on `path` with `data` as the DataPart.
    pub async fn send(&self, path: &str, data: Value) -> Reply {
        self.rpc(path, &send_message(data)).await
    }
}

/// A POST of `SendMessage` with `data` to `url` (a dealer's JSON-RPC endpoint), with the
/// standard headers, for tests that call a gateway running as its own process.
pub fn post_send_message(
    client: &reqwest::Client,
    url: &str,
    data: Value,
) -> reqwest::RequestBuilder {
    let mut post = client.post(url).body(send_message(data).to_string());
    for (k, v) in standard_headers() {
        post = post.header(k, v);
    }
    post
}

pub fn standard_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/json"),
        ("a2a-version", "1.0"),
        ("a2a-extensions", EXT),
    ]
}

/// A `dealers:` list entry (YAML, two-space indented) for a profile-only dealer `id` named
/// `name`, serving `dealer.information`; `placement` is an extra line such as
/// `path_prefix: /other` (or empty).
pub fn profile_dealer(id: &str, name: &str, placement: &str) -> String {
    format!(
        r#"
  - id: {id}
    {placement}
    card: {{ name: {name}, description: Test dealer. }}
    profile:
      name: {name}
      rooftops:
        - name: {name}
          phones: [{{ name: Sales, value: "+14085550100" }}]
          address: {{ address_line_1: 1 Main St, city: San Jose, state: CA, zip: "95128" }}
          timezone: America/Los_Angeles
          capabilities: [sales]
"#
    )
}

/// Starts a gateway with `extra` top-level settings and `dealers` (from [`profile_dealer`]).
pub async fn start_profiles(extra: &str, dealers: &[String]) -> Gateway {
    start_yaml(&format!("{extra}\ndealers:{}", dealers.concat())).await
}

/// The lower-case hex SHA-256 of an API key, as `auth.keys[].sha256` holds it.
pub fn sha256_hex(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Asserts that loading the configuration `yaml` reports each `(line, message)` problem, located
/// at that line of the file.
pub fn assert_settings_problems(yaml: &str, expected: &[(usize, &str)]) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gateway.yaml");
    std::fs::write(&path, yaml).expect("write");
    let problems = settings::load_with_env(&path, HashMap::new()).expect_err("problems");
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let all = text.join("\n");
    for (line, message) in expected {
        let located = format!("gateway.yaml:{line}:");
        assert!(
            text.iter()
                .any(|p| p.contains(&located) && p.contains(message)),
            "missing {located} {message:?} in:\n{all}"
        );
    }
}

/// A `SendMessage` request carrying `data` as its one DataPart.
pub fn send_message(data: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": "req-1",
        "method": "SendMessage",
        "params": { "message": { "messageId": "msg-1", "role": "ROLE_USER", "parts": [ { "data": data } ] } }
    })
}

/// Sends `data` to `path` until the demo DMS's circuit breaker opens: every call fails, and
/// the last one is refused without reaching the DMS. Panics if that takes 10 calls.
pub async fn until_the_dms_breaker_opens(
    gw: &Gateway,
    sims: &Simulators,
    path: &str,
    data: &Value,
) {
    for _ in 0..10 {
        let before = sims.dms.received().len();
        let reply = gw.send(path, data.clone()).await;
        assert!(
            reply.body.get("result").is_none(),
            "the DMS is down, yet: {}",
            reply.text
        );
        if sims.dms.received().len() == before {
            return;
        }
    }
    panic!("the breaker never opened");
}

/// The value of the sample `series` (name and labels exactly as exposed) in a metrics scrape,
/// if present.
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// One dealer of [`start_dealers`]: its id (served at `/dealers/{id}/a2a`) and its mapping
/// files by name (`upstreams.yaml`, `inventory.search.yaml`, …).
pub struct TestDealer {
    pub id: String,
    pub files: Vec<(&'static str, String)>,
}

impl TestDealer {
    pub fn new(id: &str, files: Vec<(&'static str, String)>) -> TestDealer {
        TestDealer {
            id: id.to_owned(),
            files,
        }
    }
}

/// The real gateway over `dealers` written into a temporary folder, rate limits off, `${NAME}`s
/// from `vars`: the stand-in tests' dealers, each mapped the way a new user writes it.
pub async fn start_dealers(dealers: &[TestDealer], vars: &[(&str, String)]) -> Gateway {
    let dir = tempfile::tempdir().expect("temp");
    let path = write_dealers(dir.path(), dealers);
    let vars = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    start_file_with_vars(&path, Some(dir), vars).await
}

/// Writes `dealers` into `dir` as [`start_dealers`] runs them: a mapping folder per dealer
/// (`dir/{id}/`) and the configuration naming them, whose path it returns (for `check` and
/// the other commands that read the files).
pub fn write_dealers(dir: &Path, dealers: &[TestDealer]) -> PathBuf {
    let mut folders = Vec::with_capacity(dealers.len());
    for dealer in dealers {
        let folder = dir.join(&dealer.id);
        std::fs::create_dir_all(&folder).expect("folder");
        for (name, text) in &dealer.files {
            std::fs::write(folder.join(name), text).expect("mapping file");
        }
        folders.push((dealer.id.as_str(), folder));
    }
    let listed: Vec<(&str, &Path)> = folders.iter().map(|(id, f)| (*id, f.as_path())).collect();
    write_gateway_yaml(dir, &listed)
}

/// The configuration [`start_dealers`] runs, for mapping folders written already (fixtures):
/// `dir/gateway.yaml` with a dealer per `(id, folder)` at `/dealers/{id}`, rate limits off (one
/// client calls flat out); its path.
pub fn write_gateway_yaml(dir: &Path, dealers: &[(&str, &Path)]) -> PathBuf {
    let mut yaml = String::from(
        "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nrate_limit: { enabled: false }\ndealers:\n",
    );
    for (id, folder) in dealers {
        yaml.push_str(&format!(
            "  - id: {id}\n    path_prefix: /dealers/{id}\n    card: {{ name: {id}, description: Stand-in. }}\n    mappings: {}\n",
            folder.display(),
        ));
    }
    let path = dir.join("gateway.yaml");
    std::fs::write(&path, yaml).expect("config");
    path
}

/// Adds the members of `from` (an object) to `into` (an object), replacing those it has.
pub fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// The ids of the skills an agent card lists, in its order.
pub fn skill_ids(card: &Value) -> Vec<&str> {
    let skills = card["skills"].as_array().expect("skills");
    skills.iter().filter_map(|s| s["id"].as_str()).collect()
}

/// A search reply's `data`: its `total` and its listings' stock numbers, in order.
pub fn total_and_stocks(data: &Value) -> (usize, Vec<String>) {
    let total = data["total"].as_u64().expect("total");
    let stocks = data["vehicles"].as_array().expect("vehicles").iter();
    let stocks = stocks.map(|v| v["stock"].as_str().expect("stock").to_owned());
    (usize::try_from(total).expect("total"), stocks.collect())
}

/// One multi-thread runtime for a test binary's shared fixture: a gateway and its stand-ins
/// started once (a `LazyLock` of the test file's own, built on this runtime) for the plain
/// `#[test]`s and property tests that call it. Never dropped, as the fixture's tasks live on it.
pub static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
});

/// Runs `body` on [`RUNTIME`] once `fixture` is up: started first, outside the body, so that a
/// fixture that cannot start fails as itself.
pub fn run_with<S, F: FnOnce() -> S, T>(
    fixture: &LazyLock<S, F>,
    body: impl std::future::Future<Output = T>,
) -> T {
    LazyLock::force(fixture);
    RUNTIME.block_on(body)
}

/// The binary run as `aap-gateway ARGS --config CONFIG` with `RUST_LOG=warn` and `vars` in its
/// environment: its exit code and all it wrote (stdout, then stderr).
pub fn run_cli(args: &[&str], config: &Path, vars: &[(&str, &str)]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(args)
        .arg("--config")
        .arg(config)
        .envs(vars.iter().copied())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run aap-gateway");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), all)
}

/// `output` has a line that starts `FILE:LINE:` and says `message`.
pub fn assert_located(output: &str, file: &Path, line: usize, message: &str) {
    let at = format!("{}:{line}:", file.display());
    assert!(
        output
            .lines()
            .any(|l| l.starts_with(&at) && l.contains(message)),
        "{at} {message}:\n{output}"
    );
}
