//! `deploy/` against the binary it deploys (issue 7: "CI parses every manifest and chart
//! template, and checks that ports, probe paths and config file paths in deploy/ match the
//! binary's defaults and the shipped config").
//!
//! Every YAML file under `deploy/kubernetes` is parsed, and the Helm chart is rendered in both
//! modes by Helm's own engine (`deploy/check/render-chart.py`, helm-python-sdk: Helm v4's Go SDK
//! in a wheel; `bash deploy/check/setup.sh` installs it, and without it the chart part is
//! skipped, except under `CI=true`). For each resulting pod spec the gateway container's view is
//! rebuilt in a temporary directory (its ConfigMap and Secret volumes, `items` and all) with its
//! environment (literal values, `secretKeyRef`, `envFrom`), and then:
//!
//! - the real binary runs `check` and `test-mappings` on the `--config` of the container args,
//!   with exactly that environment (so the Secret must provide every `${NAME}`);
//! - the configuration's `listen` / `admin_listen` (read by the library, as `serve` reads them)
//!   must be the binary's default ports, be reachable from outside the pod, and equal the
//!   container ports, the Services' target ports (public port only; admin only on a ClusterIP
//!   Service), the probe ports, the ServiceMonitor / scrape annotations;
//! - the real binary serves that configuration (`serve`, listeners moved to free loopback ports
//!   through the documented environment overrides) and answers the probe paths on the admin
//!   listener and not on the public one, and the dealer's agent card on the public one;
//! - security context, resources, shutdown timing, replicas vs the shared-state backends (more
//!   than one replica needs Redis for both the rate limits and the idempotency keys), HPA / PDB /
//!   Service selectors are checked for consistency.
//!
//! The Dockerfile is parsed line by line (EXPOSE, USER, ENTRYPOINT/CMD, COPY, its ignore file),
//! the mapping copies are compared with `deploy/config`, and the Grafana dashboard and
//! `docs/operations.md` must use exactly the agreed metric names ([`METRICS`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aap_gateway::settings::{self, LimitBackend, Settings};
use base64::Engine as _;
use yaml_rust2::{Yaml, YamlLoader};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_aap-gateway");

/// The example mapping folder every deployment example carries (copies of deploy/config).
const MAPPING_FOLDER: &str = "example-toyota";

/// Metric names: the original six, the four that issue 7 asks for (upstream errors, idempotency
/// replays and conflicts, feed-cache age), mapping events (issue 13) and the front door's of
/// issue 15 (requests in flight and waiting, connections open, refused and timed out; Redis
/// fallbacks and degradation).
/// docs/operations.md §Metrics lists them with their labels; the dashboard uses nothing else.
const METRICS: &[(&str, MetricKind)] = &[
    ("aap_gateway_requests_total", MetricKind::Counter),
    (
        "aap_gateway_request_duration_seconds",
        MetricKind::Histogram,
    ),
    (
        "aap_gateway_upstream_duration_seconds",
        MetricKind::Histogram,
    ),
    ("aap_gateway_upstream_errors_total", MetricKind::Counter),
    ("aap_gateway_upstream_breaker_open", MetricKind::Gauge),
    ("aap_gateway_mapping_events_total", MetricKind::Counter),
    ("aap_gateway_rate_limited_total", MetricKind::Counter),
    ("aap_gateway_idempotency_replays_total", MetricKind::Counter),
    (
        "aap_gateway_idempotency_conflicts_total",
        MetricKind::Counter,
    ),
    ("aap_gateway_feed_cache_age_seconds", MetricKind::Gauge),
    ("aap_gateway_feed_listable_vehicles", MetricKind::Gauge),
    ("aap_gateway_feed_refreshes_total", MetricKind::Counter),
    ("aap_gateway_config_reloads_total", MetricKind::Counter),
    ("aap_gateway_build_info", MetricKind::Gauge),
    ("aap_gateway_requests_in_flight", MetricKind::Gauge),
    ("aap_gateway_requests_waiting", MetricKind::Gauge),
    ("aap_gateway_connections_open", MetricKind::Gauge),
    ("aap_gateway_connections_refused_total", MetricKind::Counter),
    (
        "aap_gateway_connections_timed_out_total",
        MetricKind::Counter,
    ),
    ("aap_gateway_redis_fallbacks_total", MetricKind::Counter),
    ("aap_gateway_redis_degraded", MetricKind::Gauge),
    (
        "aap_gateway_lead_outcome_unknown_total",
        MetricKind::Counter,
    ),
    ("aap_gateway_lead_in_progress_total", MetricKind::Counter),
    ("aap_gateway_lead_deliveries_running", MetricKind::Gauge),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// What the pod must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The gateway alone in its pod.
    Standalone,
    /// The gateway next to the legacy app's container.
    Sidecar,
}

// === tests ===

#[test]
fn kubernetes_manifests_parse_with_known_kinds() {
    for (folder, mode) in [("sidecar", Mode::Sidecar), ("standalone", Mode::Standalone)] {
        let set = kubernetes_set(folder);
        check_kinds(&set);
        let kinds: BTreeSet<&str> = set.docs.iter().map(|d| kind(&d.yaml)).collect();
        let mut wanted = vec![
            "ConfigMap",
            "Secret",
            "Deployment",
            "Service",
            "Kustomization",
        ];
        if mode == Mode::Standalone {
            wanted.extend(["HorizontalPodAutoscaler", "PodDisruptionBudget"]);
        }
        for k in wanted {
            assert!(kinds.contains(k), "deploy/kubernetes/{folder}: no {k}");
        }
        // `kubectl apply -k` must see every manifest of the folder, and nothing else.
        let kustomization = set.one("Kustomization");
        let listed: BTreeSet<String> = seq(&kustomization.yaml["resources"])
            .iter()
            .map(|r| string(r, "Kustomization resource").to_owned())
            .collect();
        let files: BTreeSet<String> = yaml_files(&root().join("deploy/kubernetes").join(folder))
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .filter(|f| f != "kustomization.yaml")
            .collect();
        assert_eq!(
            listed, files,
            "deploy/kubernetes/{folder}/kustomization.yaml"
        );
    }
}

/// Both manifest folders and the chart (by default, in both modes) ship a NetworkPolicy for
/// the gateway's pod; `check_set` then holds it to the pod (see `check_network_policy`).
#[test]
fn network_policies_are_shipped_and_fit_their_pods() {
    for folder in ["sidecar", "standalone"] {
        let set = kubernetes_set(folder);
        assert_eq!(
            set.all("NetworkPolicy").count(),
            1,
            "deploy/kubernetes/{folder}: a NetworkPolicy"
        );
    }
    let Some(python) = helm_python() else { return };
    let chart = "deploy/helm/aap-gateway";
    let secret = with_secret();
    for (label, values, set_json, mode) in [
        ("defaults", vec![], vec![secret.as_str()], Mode::Standalone),
        (
            "ci/sidecar-values.yaml",
            vec![format!("{chart}/ci/sidecar-values.yaml")],
            vec![],
            Mode::Sidecar,
        ),
        (
            "another release name",
            vec![],
            vec![secret.as_str(), r#"{"fullnameOverride": "dealer-gw"}"#],
            Mode::Standalone,
        ),
    ] {
        let set = render_chart(&python, chart, label, &values, &set_json);
        assert_eq!(set.all("NetworkPolicy").count(), 1, "{label}");
        check_set(&set, mode);
        if mode == Mode::Sidecar {
            // The legacy container's port is on no ingress rule (check_set: exactly the
            // gateway's two ports are open), even though the container declares it.
            let policy = &set.one("NetworkPolicy").yaml;
            let text = format!("{:?}", policy["spec"]["ingress"]);
            assert!(!text.contains("8000"), "{label}: {text}");
        }
    }
}

/// `networkPolicy.enabled: false` renders none; `networkPolicy.egress.enabled: false` keeps the
/// ingress rules and leaves egress open; an empty `from` or a destination without ports is
/// refused at render time (each would allow everything).
#[test]
fn helm_network_policies_can_be_turned_off_and_refuse_open_rules() {
    let Some(python) = helm_python() else { return };
    let chart = "deploy/helm/aap-gateway";
    let secret = with_secret();
    let off = render_chart(
        &python,
        chart,
        "networkPolicy off",
        &[],
        &[&secret, r#"{"networkPolicy": {"enabled": false}}"#],
    );
    assert_eq!(off.all("NetworkPolicy").count(), 0);
    let ingress_only = render_chart(
        &python,
        chart,
        "egress off",
        &[],
        &[
            &secret,
            r#"{"networkPolicy": {"egress": {"enabled": false}}}"#,
        ],
    );
    let spec = &ingress_only.one("NetworkPolicy").yaml["spec"];
    assert_eq!(
        seq(&spec["policyTypes"]),
        [Yaml::String("Ingress".to_owned())]
    );
    assert!(spec["egress"].is_badvalue());
    assert_eq!(seq(&spec["ingress"]).len(), 2);
    check_set(&ingress_only, Mode::Standalone);
    for (label, set_json, message) in [
        (
            "empty ingressFrom",
            r#"{"networkPolicy": {"ingressFrom": []}}"#,
            "ingressFrom",
        ),
        (
            "empty peer",
            r#"{"networkPolicy": {"monitoringFrom": [{}]}}"#,
            "monitoringFrom",
        ),
        (
            "destination without ports",
            r#"{"networkPolicy": {"egress": {"to": [{"cidr": "10.1.0.0/16"}]}}}"#,
            "ports",
        ),
        (
            "destination without peer",
            r#"{"networkPolicy": {"egress": {"to": [{"ports": [443]}]}}}"#,
            "egress/to/0",
        ),
    ] {
        let error = render_chart_error(&python, chart, &[&secret, set_json]);
        assert!(error.contains(message), "{label}: {error}");
    }
}

/// A Redis URL or upstream whose port the egress rules do not allow is caught: the check is
/// not a formality.
#[test]
fn an_upstream_port_outside_the_egress_rules_is_caught() {
    let set = kubernetes_set("standalone");
    let pods = gateway_pods(&set);
    let pod = &pods[0];
    let view = PodView::build(&set, pod);
    let config = view.host_path(&pod.config_path);
    let checked = Checked {
        name: "standalone, CRM moved to port 8443",
        set: &set,
        pod,
        ports: container_ports(pod.container),
        settings: load_settings(&config, &view.env),
    };
    let mut env = view.env.clone();
    check_network_policy(&checked, &env);
    env.insert(
        "CRM_URL".to_owned(),
        "https://crm.example-dealer-group.com:8443".to_owned(),
    );
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_network_policy(&checked, &env);
    }));
    assert!(caught.is_err(), "CRM_URL on 8443 passed the egress check");
}

#[test]
fn sidecar_manifests_match_the_binary() {
    let set = kubernetes_set("sidecar");
    check_set(&set, Mode::Sidecar);
}

#[test]
fn standalone_manifests_match_the_binary() {
    let set = kubernetes_set("standalone");
    check_set(&set, Mode::Standalone);
}

/// What the replicas rule of `check_set` reads is what the binary does: the standalone pod's
/// environment makes the gateway's own settings loader choose Redis for both shared stores,
/// and the documented override (`…__BACKEND=memory`) really turns each back to memory (so a
/// pod built that way is one `check_replicas` refuses). The Helm chart, which computes the
/// environment itself, refuses several replicas without Redis at render time.
#[test]
fn several_replicas_refuse_a_memory_backend() {
    let set = kubernetes_set("standalone");
    let pods = gateway_pods(&set);
    let pod = &pods[0];
    let view = PodView::build(&set, pod);
    let config = view.host_path(&pod.config_path);
    let shipped = load_settings(&config, &view.env);
    assert!(matches!(
        shipped.rate_limit.backend,
        LimitBackend::Redis { .. }
    ));
    assert!(matches!(
        shipped.idempotency.backend,
        LimitBackend::Redis { .. }
    ));
    for section in ["RATE_LIMIT", "IDEMPOTENCY"] {
        let mut env = view.env.clone();
        env.insert(
            format!("{}__{section}__BACKEND", settings::ENV_PREFIX),
            "memory".to_owned(),
        );
        let loaded = load_settings(&config, &env);
        let backend = match section {
            "RATE_LIMIT" => &loaded.rate_limit.backend,
            _ => &loaded.idempotency.backend,
        };
        assert_eq!(
            *backend,
            LimitBackend::Memory,
            "{section}: the override is read"
        );
    }

    let Some(python) = helm_python() else { return };
    let chart = "deploy/helm/aap-gateway";
    for (label, set_json) in [
        ("autoscaled", r#"{"redis": {"enabled": false}}"#),
        (
            "3 replicas",
            r#"{"redis": {"enabled": false}, "autoscaling": {"enabled": false}, "replicaCount": 3}"#,
        ),
    ] {
        let error = render_chart_error(&python, chart, &[&with_secret(), set_json]);
        assert!(
            error.contains("several replicas need redis.enabled"),
            "{label}: {error}"
        );
    }
    let one = r#"{"redis": {"enabled": false}, "autoscaling": {"enabled": false}, "replicaCount": 1, "podDisruptionBudget": {"enabled": false}}"#;
    render_chart(&python, chart, "one replica", &[], &[&with_secret(), one]);
}

/// `--set-json` giving the chart's Secret every value the example mappings and Redis read.
fn with_secret() -> String {
    r#"{"secret": {"create": true, "stringData": {"DMS_API_KEY": "test-dms-api-key", "CRM_PASSWORD": "test-crm-password", "REDIS_URL": "redis://:test-redis-password@redis:6379/0"}}}"#.to_owned()
}

/// The chart invents no credentials: without a Secret, with an empty or placeholder one, or
/// without the Redis URL that `redis.enabled` reads, it refuses to render.
#[test]
fn helm_chart_requires_a_secret_and_no_placeholders() {
    let Some(python) = helm_python() else { return };
    let chart = "deploy/helm/aap-gateway";
    let cases = [
        ("defaults", r#"{}"#, "set secret.name to an existing Secret"),
        (
            "empty",
            r#"{"secret": {"create": true}}"#,
            "needs the values in secret.stringData",
        ),
        (
            "placeholder",
            r#"{"secret": {"create": true, "stringData": {"DMS_API_KEY": "replace-me", "REDIS_URL": "redis://r"}}}"#,
            "replace-me placeholder",
        ),
        (
            "no redis url",
            r#"{"secret": {"create": true, "stringData": {"DMS_API_KEY": "k"}}}"#,
            "secret.stringData.REDIS_URL",
        ),
    ];
    for (label, set_json, message) in cases {
        let error = render_chart_error(&python, chart, &[set_json]);
        assert!(error.contains(message), "{label}: {error}");
    }
    // An existing Secret by name: nothing created, the pods read it.
    let set = render_chart(
        &python,
        chart,
        "existing secret",
        &[],
        &[r#"{"secret": {"name": "dealer-secrets"}}"#],
    );
    assert!(set.all("Secret").next().is_none(), "{}", set.name);
    let text = format!("{:?}", set.one("Deployment").yaml);
    assert!(text.contains("dealer-secrets"), "{text}");
}

#[test]
fn helm_chart_renders_in_both_modes_and_matches_the_binary() {
    let Some(python) = helm_python() else { return };
    let chart = "deploy/helm/aap-gateway";
    let secret = with_secret();
    let renders: [(&str, Vec<String>, Vec<&str>, Mode); 3] = [
        ("defaults", vec![], vec![&secret], Mode::Standalone),
        (
            "ci/sidecar-values.yaml",
            vec![format!("{chart}/ci/sidecar-values.yaml")],
            vec![],
            Mode::Sidecar,
        ),
        (
            "serviceMonitor.enabled",
            vec![],
            vec![&secret, r#"{"serviceMonitor": {"enabled": true}}"#],
            Mode::Standalone,
        ),
    ];
    for (label, values, set_json, mode) in renders {
        let set = render_chart(&python, chart, label, &values, &set_json);
        check_kinds(&set);
        check_set(&set, mode);
        let kinds: BTreeSet<&str> = set.docs.iter().map(|d| kind(&d.yaml)).collect();
        if mode == Mode::Standalone {
            for k in ["HorizontalPodAutoscaler", "PodDisruptionBudget", "Secret"] {
                assert!(kinds.contains(k), "{}: no {k}", set.name);
            }
        }
        if label == "serviceMonitor.enabled" {
            assert!(
                kinds.contains("ServiceMonitor"),
                "{}: no ServiceMonitor",
                set.name
            );
        }
    }
}

#[test]
fn dockerfile_runs_the_manifests_config_as_non_root() {
    let docker = Dockerfile::read(&root().join("deploy/Dockerfile"));
    let last = docker.stages.last().expect("a FROM");
    assert!(
        last.from.starts_with("gcr.io/distroless/") || last.from.contains("slim"),
        "the runtime image should be distroless or slim, not {}",
        last.from
    );
    assert!(
        docker.all().all(|(i, _)| i != "HEALTHCHECK"),
        "no HEALTHCHECK: Kubernetes probes /healthz and /readyz on the admin port"
    );

    // ENTRYPOINT + CMD: `aap-gateway serve --config P`, P the manifests' config path.
    let entrypoint = json_array(last.get("ENTRYPOINT").expect("ENTRYPOINT"));
    assert_eq!(entrypoint, ["aap-gateway"], "ENTRYPOINT");
    let cmd = json_array(last.get("CMD").expect("CMD"));
    let config_path = config_arg(&cmd).expect("CMD: serve --config FILE");
    assert_eq!(cmd[0], "serve", "CMD");
    for folder in ["sidecar", "standalone"] {
        let set = kubernetes_set(folder);
        for pod in gateway_pods(&set) {
            assert_eq!(
                pod.config_path, config_path,
                "{}: --config differs from the image's CMD",
                set.name
            );
        }
    }

    // The binary lands on the PATH; the example configuration at the path CMD names.
    let copies: Vec<Vec<&str>> = last
        .all("COPY")
        .map(|a| a.split_whitespace().collect())
        .collect();
    assert!(
        copies
            .iter()
            .any(|c| c.first().is_some_and(|f| f.starts_with("--from="))
                && c.last() == Some(&"/usr/local/bin/aap-gateway")),
        "the binary must be copied to /usr/local/bin/aap-gateway (ENTRYPOINT uses the PATH)"
    );
    let config_copy = copies
        .iter()
        .find(|c| c.first() == Some(&"deploy/config/"))
        .expect("COPY deploy/config/ <dir>/ in the runtime stage");
    let (dir, file) = config_path.rsplit_once('/').expect("absolute config path");
    assert_eq!(
        config_copy.last().map(|d| d.trim_end_matches('/')),
        Some(dir),
        "deploy/config must be copied to the directory of --config"
    );
    let image_config = root().join("deploy/config").join(file);
    assert!(image_config.is_file(), "{} missing", image_config.display());

    // USER: numeric, the uid the manifests run as.
    let user = last.get("USER").expect("USER");
    let uid: i64 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user} must be numeric (runAsNonRoot checks it)"));
    assert_ne!(uid, 0, "USER must not be root");
    assert_eq!(uid, DOCKER_UID, "USER vs the manifests' runAsUser");

    // EXPOSE: the image's configuration's listeners, which are the binary's default ports.
    let exposed: BTreeSet<u16> = last
        .all("EXPOSE")
        .flat_map(|a| a.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().expect("EXPOSE port"))
        .collect();
    let env = example_env();
    let image_settings = load_settings(&image_config, &env);
    let ports = BTreeSet::from([
        image_settings.listen.port(),
        image_settings.admin_listen.port(),
    ]);
    assert_eq!(exposed, ports, "EXPOSE vs listen/admin_listen of {file}");
    let (listen, admin) = binary_default_ports();
    assert_eq!(ports, BTreeSet::from([listen, admin]), "binary defaults");
    let out = run(&["check", "--config"], &image_config, &env);
    assert!(out.0, "the image's configuration fails check:\n{}", out.2);
}

#[test]
fn docker_build_context_holds_what_cargo_needs() {
    let docker = Dockerfile::read(&root().join("deploy/Dockerfile"));
    // Every COPY from the build context, and every input of `cargo build` among them.
    let sources: Vec<&str> = docker
        .all()
        .filter(|(i, _)| *i == "COPY")
        .filter(|(_, a)| !a.starts_with("--from="))
        .flat_map(|(_, a)| {
            let words: Vec<&str> = a.split_whitespace().collect();
            words[..words.len() - 1].to_vec()
        })
        .collect();
    let needed = build_inputs();
    for n in &needed {
        assert!(
            sources
                .iter()
                .any(|s| s.trim_end_matches('/') == n.as_str()),
            "the Dockerfile does not copy {n}, which the build needs"
        );
    }
    let ignore = std::fs::read_to_string(root().join("deploy/Dockerfile.dockerignore"))
        .expect("deploy/Dockerfile.dockerignore");
    let rules: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        rules.first(),
        Some(&"*"),
        "the ignore file is an allow-list"
    );
    for source in sources {
        let source = source.trim_end_matches('/');
        assert!(
            rules.iter().any(|r| r.strip_prefix('!').is_some_and(
                |allowed| source == allowed || source.starts_with(&format!("{allowed}/"))
            )),
            "deploy/Dockerfile.dockerignore does not let `{source}` through"
        );
    }
}

#[test]
fn config_and_mapping_copies_are_identical() {
    let config_dir = root().join("deploy/config");
    let mapping_dir = config_dir.join("mappings").join(MAPPING_FOLDER);
    let files: BTreeMap<String, String> = std::fs::read_dir(&mapping_dir)
        .expect("deploy/config mapping folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).expect("name");
            (name.to_owned(), read(&p))
        })
        .collect();
    assert!(files.contains_key("upstreams.yaml"), "{files:?}");

    for folder in ["sidecar", "standalone"] {
        let set = kubernetes_set(folder);
        let configmap = set.one("ConfigMap");
        let data = &configmap.yaml["data"];
        for (file, content) in &files {
            let key = format!("{MAPPING_FOLDER}__{file}");
            assert_eq!(
                data[key.as_str()].as_str(),
                Some(content.as_str()),
                "deploy/kubernetes/{folder}/configmap.yaml `{key}` differs from \
                 deploy/config/mappings/{MAPPING_FOLDER}/{file}"
            );
        }
        let keys = hash(data, "ConfigMap data").len();
        assert_eq!(
            keys,
            files.len() + 1,
            "{folder}: gateway.yaml + the mapping files"
        );
    }
    // The sidecar's configuration is the image's.
    let sidecar = kubernetes_set("sidecar");
    assert_eq!(
        sidecar.one("ConfigMap").yaml["data"]["gateway.yaml"].as_str(),
        Some(read(&config_dir.join("gateway.yaml")).as_str()),
        "deploy/kubernetes/sidecar/configmap.yaml gateway.yaml differs from deploy/config/gateway.yaml"
    );
    // The chart's default mappings.
    let values = load_yaml(&root().join("deploy/helm/aap-gateway/values.yaml"));
    let chart = &values[0]["mappings"][MAPPING_FOLDER];
    assert_eq!(hash(chart, "values.yaml mappings").len(), files.len());
    for (file, content) in &files {
        assert_eq!(
            chart[file.as_str()].as_str(),
            Some(content.as_str()),
            "deploy/helm/aap-gateway/values.yaml mappings.{MAPPING_FOLDER}.{file} differs"
        );
    }
}

#[test]
fn grafana_dashboard_and_docs_use_the_agreed_metric_names() {
    let path = root().join("deploy/grafana/aap-gateway.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&path)).expect("the dashboard is JSON");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(variables.contains(&"datasource"), "{variables:?}");

    let mut exprs = Vec::new();
    collect_queries(&dashboard, &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut seen = BTreeSet::new();
    for expr in &exprs {
        for name in metric_names(expr) {
            let base = metric_base(&name)
                .unwrap_or_else(|| panic!("dashboard: `{name}` is not an agreed metric: {expr}"));
            seen.insert(base);
        }
    }
    let agreed: BTreeSet<&str> = METRICS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        seen, agreed,
        "the dashboard should show every agreed metric"
    );
    for (name, kind) in METRICS {
        if *kind == MetricKind::Histogram {
            for q in ["0.5", "0.99"] {
                let wanted = format!("histogram_quantile({q}, sum by (le");
                assert!(
                    exprs
                        .iter()
                        .any(|e| e.contains(&wanted) && e.contains(&format!("{name}_bucket"))),
                    "dashboard: no p{} of {name}",
                    &q[2..]
                );
            }
        }
    }
    // Every panel queries the chosen data source.
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
        }
    }

    let ops = read(&root().join("docs/operations.md"));
    for (name, _) in METRICS {
        assert!(
            ops.contains(name),
            "docs/operations.md does not list {name}"
        );
    }
}

// === one deployment: the checks ===

/// The uid the image runs as (distroless `nonroot`); the Dockerfile test ties it to `USER`.
const DOCKER_UID: i64 = 65532;

/// Checks one set of manifests (a Kubernetes folder or one chart render) against the binary.
fn check_set(set: &Set, mode: Mode) {
    let pods = gateway_pods(set);
    assert_eq!(
        pods.len(),
        1,
        "{}: one Deployment runs the gateway",
        set.name
    );
    let pod = &pods[0];
    let name = set.name.as_str();
    let containers = seq(&pod.spec["containers"]).len();
    match mode {
        Mode::Standalone => assert_eq!(containers, 1, "{name}: the gateway alone"),
        Mode::Sidecar => assert!(containers >= 2, "{name}: the legacy app and the gateway"),
    }

    // The container's view of its files and environment; the binary accepts it.
    let view = PodView::build(set, pod);
    let config = view.host_path(&pod.config_path);
    assert!(
        config.is_file(),
        "{name}: --config {} is in no mounted volume (or not among its items)",
        pod.config_path
    );
    let (ok, stdout, stderr) = run(&["check", "--config"], &config, &view.env);
    assert!(
        ok && stdout.contains(": ok ("),
        "{name}: aap-gateway check fails with the pod's files and environment:\n{stderr}"
    );
    let (ok, stdout, _) = run(&["test-mappings", "--config"], &config, &view.env);
    assert!(ok, "{name}: aap-gateway test-mappings fails:\n{stdout}");

    let pod = Checked {
        name,
        set,
        pod,
        ports: container_ports(pod.container),
        settings: load_settings(&config, &view.env),
    };
    check_listeners(&pod);
    let probes = check_probes(&pod);
    check_services(&pod);
    check_metrics_discovery(&pod);
    check_security(&pod);
    check_shutdown(&pod);
    check_replicas(&pod);
    if mode == Mode::Sidecar {
        check_sidecar(&pod, &view.env);
    }
    if set.all("NetworkPolicy").next().is_some() {
        check_network_policy(&pod, &view.env);
    }
    serve_and_probe(name, &config, &view.env, &pod.settings, &probes);
}

/// A gateway pod with what the binary makes of its configuration.
struct Checked<'a> {
    name: &'a str,
    set: &'a Set,
    pod: &'a GatewayPod<'a>,
    /// The gateway container's ports by name.
    ports: BTreeMap<String, u16>,
    /// The configuration as `serve` reads it (file plus the pod's `AAP_GATEWAY__*`).
    settings: Settings,
}

impl Checked<'_> {
    fn listen(&self) -> u16 {
        self.settings.listen.port()
    }

    fn admin(&self) -> u16 {
        self.settings.admin_listen.port()
    }

    fn labels(&self) -> &Yaml {
        &self.pod.template["metadata"]["labels"]
    }

    /// The Services that send traffic to this pod.
    fn services(&self) -> Vec<&Doc> {
        self.set
            .all("Service")
            .filter(|s| selects(&s.yaml["spec"]["selector"], self.labels()))
            .collect()
    }

    fn port(&self, port: &Yaml, what: &str) -> u16 {
        resolve_port(&self.ports, port, &format!("{} {what}", self.name))
    }
}

/// The listeners: the binary's default ports (as in the shipped example), reachable on the pod
/// IP, and exactly the container's ports.
fn check_listeners(c: &Checked<'_>) {
    let name = c.name;
    let ports = (c.listen(), c.admin());
    assert_eq!(
        ports,
        binary_default_ports(),
        "{name}: listen/admin_listen ports should be the binary's defaults"
    );
    let shipped = load_settings(
        &root().join("config/gateway.example.yaml"),
        &BTreeMap::new(),
    );
    assert_eq!(
        ports,
        (shipped.listen.port(), shipped.admin_listen.port()),
        "{name}: ports differ from config/gateway.example.yaml"
    );
    for addr in [c.settings.listen, c.settings.admin_listen] {
        assert!(
            addr.ip().is_unspecified(),
            "{name}: {addr} is not reachable by kubelet probes, Services or Prometheus; \
             listen on 0.0.0.0 (or [::]) inside a pod"
        );
    }
    let numbers: BTreeSet<u16> = c.ports.values().copied().collect();
    assert_eq!(
        numbers,
        BTreeSet::from([c.listen(), c.admin()]),
        "{name}: containerPorts vs listen/admin_listen"
    );
}

/// Liveness and readiness: HTTP on the admin port, the binary's paths. Returns the paths.
fn check_probes(c: &Checked<'_>) -> BTreeMap<&'static str, String> {
    let name = c.name;
    let mut paths = BTreeMap::new();
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c.pod.container[probe]["httpGet"];
        assert!(!get.is_badvalue(), "{name}: {probe}.httpGet missing");
        let port = c.port(&get["port"], probe);
        assert_eq!(port, c.admin(), "{name}: {probe} must use the admin port");
        paths.insert(probe, string(&get["path"], probe).to_owned());
    }
    assert_eq!(paths["livenessProbe"], "/healthz", "{name}");
    assert_eq!(paths["readinessProbe"], "/readyz", "{name}");
    paths
}

/// A public Service targets `listen`; the admin port only ever on a ClusterIP Service of its
/// own; and no Service selects nothing (a selector typo is silent in Kubernetes).
fn check_services(c: &Checked<'_>) {
    let name = c.name;
    let services = c.services();
    let mut public = 0;
    for s in &services {
        let targets: BTreeSet<u16> = seq(&s.yaml["spec"]["ports"])
            .iter()
            .map(|p| {
                let target = if p["targetPort"].is_badvalue() {
                    &p["port"]
                } else {
                    &p["targetPort"]
                };
                c.port(target, &format!("Service {}", s.name()))
            })
            .collect();
        assert_eq!(targets.len(), 1, "{name}: Service {} mixes ports", s.name());
        if targets.contains(&c.listen()) {
            public += 1;
        } else {
            assert!(targets.contains(&c.admin()), "{name}: Service {}", s.name());
            let ty = s.yaml["spec"]["type"].as_str().unwrap_or("ClusterIP");
            assert_eq!(
                ty, "ClusterIP",
                "{name}: the admin port must stay cluster-internal"
            );
        }
    }
    assert!(
        public >= 1,
        "{name}: no Service targets the public port {}",
        c.listen()
    );
    for s in c.set.all("Service") {
        assert!(
            selects(&s.yaml["spec"]["selector"], c.labels()),
            "{name}: Service {} selects no pod",
            s.name()
        );
    }
}

/// Scrape annotations and ServiceMonitors point at the admin port and /metrics.
fn check_metrics_discovery(c: &Checked<'_>) {
    let name = c.name;
    let annotations = &c.pod.template["metadata"]["annotations"];
    if annotations["prometheus.io/scrape"].as_str() == Some("true") {
        let port = annotations["prometheus.io/port"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(port, c.admin().to_string(), "{name}: prometheus.io/port");
        let path = annotations["prometheus.io/path"].as_str();
        assert_eq!(path, Some("/metrics"), "{name}: prometheus.io/path");
    }
    let services = c.services();
    for monitor in c.set.all("ServiceMonitor") {
        let selector = &monitor.yaml["spec"]["selector"]["matchLabels"];
        let service = services
            .iter()
            .find(|s| selects(selector, &s.yaml["metadata"]["labels"]))
            .unwrap_or_else(|| panic!("{name}: ServiceMonitor selects no Service of the pod"));
        for endpoint in seq(&monitor.yaml["spec"]["endpoints"]) {
            let port_name = string(&endpoint["port"], "ServiceMonitor endpoint port");
            let port = seq(&service.yaml["spec"]["ports"])
                .iter()
                .find(|p| p["name"].as_str() == Some(port_name))
                .unwrap_or_else(|| panic!("{name}: no Service port named {port_name}"));
            let target = c.port(&port["targetPort"], "ServiceMonitor");
            assert_eq!(target, c.admin(), "{name}: ServiceMonitor port");
            assert_eq!(endpoint["path"].as_str(), Some("/metrics"), "{name}");
        }
    }
}

/// Non-root as the image's uid, read-only root, no privilege, RuntimeDefault seccomp; resources.
fn check_security(c: &Checked<'_>) {
    let name = c.name;
    let container = c.pod.container;
    let own = &container["securityContext"];
    // A container setting wins over the pod's.
    let effective = |key: &str| -> Yaml {
        if own[key].is_badvalue() {
            c.pod.spec["securityContext"][key].clone()
        } else {
            own[key].clone()
        }
    };
    assert_eq!(
        effective("runAsNonRoot"),
        Yaml::Boolean(true),
        "{name}: runAsNonRoot"
    );
    assert_eq!(
        effective("runAsUser"),
        Yaml::Integer(DOCKER_UID),
        "{name}: runAsUser"
    );
    let seccomp = effective("seccompProfile");
    assert_eq!(
        seccomp["type"].as_str(),
        Some("RuntimeDefault"),
        "{name}: seccomp"
    );
    assert_eq!(
        own["readOnlyRootFilesystem"],
        Yaml::Boolean(true),
        "{name}: read-only root"
    );
    assert_eq!(
        own["allowPrivilegeEscalation"],
        Yaml::Boolean(false),
        "{name}: escalation"
    );
    assert!(
        seq(&own["capabilities"]["drop"])
            .iter()
            .any(|d| d.as_str() == Some("ALL")),
        "{name}: drop ALL capabilities"
    );
    for [kind, resource] in [
        ["requests", "cpu"],
        ["requests", "memory"],
        ["limits", "memory"],
    ] {
        assert!(
            !container["resources"][kind][resource].is_badvalue(),
            "{name}: resources.{kind}.{resource}"
        );
    }
}

/// SIGTERM: the grace period covers the preStop pause and the gateway's drain.
fn check_shutdown(c: &Checked<'_>) {
    let grace = c.pod.spec["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    let pause = c.pod.container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap_or(0);
    let drain = i64::try_from(c.settings.limits.shutdown_grace.as_secs()).expect("seconds");
    assert!(
        grace > pause + drain,
        "{}: terminationGracePeriodSeconds {grace} must exceed the preStop pause {pause} s + \
         limits.shutdown_grace {drain} s",
        c.name
    );
}

/// An HPA owns the replica count; more than one replica shares its limits and its idempotency
/// keys through Redis; PDBs and HPAs point at this pod.
fn check_replicas(c: &Checked<'_>) {
    let name = c.name;
    let hpas: Vec<&Doc> = c.set.all("HorizontalPodAutoscaler").collect();
    for hpa in &hpas {
        let target = &hpa.yaml["spec"]["scaleTargetRef"];
        assert_eq!(
            target["kind"].as_str(),
            Some("Deployment"),
            "{name}: HPA target"
        );
        let wanted = Some(c.pod.deployment.name());
        assert_eq!(target["name"].as_str(), wanted, "{name}: HPA target");
    }
    let replicas = &c.pod.deployment.yaml["spec"]["replicas"];
    let most = match hpas.first() {
        Some(hpa) => {
            assert!(
                replicas.is_badvalue(),
                "{name}: with an HPA the Deployment must not set replicas (apply would fight it)"
            );
            hpa.yaml["spec"]["maxReplicas"]
                .as_i64()
                .expect("maxReplicas")
        }
        None => replicas.as_i64().unwrap_or(1),
    };
    if most > 1 {
        // Per replica, a buyer gets N quotas, and a lead.submit retry on another replica runs
        // again instead of replaying the first reply.
        assert!(
            matches!(c.settings.rate_limit.backend, LimitBackend::Redis { .. }),
            "{name}: up to {most} replicas: rate_limit.backend must be redis"
        );
        assert!(
            matches!(c.settings.idempotency.backend, LimitBackend::Redis { .. }),
            "{name}: up to {most} replicas: idempotency.backend must be redis"
        );
    }
    for pdb in c.set.all("PodDisruptionBudget") {
        assert!(
            selects(&pdb.yaml["spec"]["selector"]["matchLabels"], c.labels()),
            "{name}: the PodDisruptionBudget selects no pod"
        );
    }
    if !hpas.is_empty() {
        assert!(
            c.set.all("PodDisruptionBudget").next().is_some(),
            "{name}: an autoscaled Deployment wants a PodDisruptionBudget"
        );
    }
}

/// Sidecar: no port clash in the pod, and loopback URLs in the gateway's environment name a
/// port of the other container(s).
fn check_sidecar(c: &Checked<'_>, env: &BTreeMap<String, String>) {
    let name = c.name;
    let others: BTreeSet<u16> = seq(&c.pod.spec["containers"])
        .iter()
        .filter(|o| o["name"] != c.pod.container["name"])
        .flat_map(|o| container_ports(o).into_values())
        .collect();
    let own: BTreeSet<u16> = c.ports.values().copied().collect();
    assert!(
        others.is_disjoint(&own),
        "{name}: port clash inside the pod"
    );
    let loopback: Vec<u16> = env.values().filter_map(|v| loopback_port(v)).collect();
    assert!(
        !loopback.is_empty(),
        "{name}: no upstream points into the pod"
    );
    for port in loopback {
        assert!(
            others.contains(&port),
            "{name}: 127.0.0.1:{port} is no port of the legacy container ({others:?})"
        );
    }
}

/// The NetworkPolicy of the gateway's pod: exactly one selects it; it isolates both directions;
/// its ingress opens exactly the public and the admin port, each in a rule of its own with
/// named, non-empty peers (an empty `from` or a rule without ports admits everyone or every
/// port) — so no other port of the pod, the sidecar's legacy app included, is reachable; its
/// egress allows DNS (UDP and TCP 53) and reaches the port of every upstream, Redis and
/// collector URL in the pod's environment that is not on loopback, and nothing without a
/// destination and ports.
fn check_network_policy(c: &Checked<'_>, env: &BTreeMap<String, String>) {
    let name = c.name;
    let policies: Vec<&Doc> = c
        .set
        .all("NetworkPolicy")
        .filter(|p| selects(&p.yaml["spec"]["podSelector"]["matchLabels"], c.labels()))
        .collect();
    assert_eq!(
        policies.len(),
        c.set.all("NetworkPolicy").count(),
        "{name}: a NetworkPolicy selects no gateway pod (a selector typo is silent)"
    );
    let [policy] = policies[..] else {
        panic!(
            "{name}: {} NetworkPolicies select the gateway pod",
            policies.len()
        );
    };
    let spec = &policy.yaml["spec"];
    let types: BTreeSet<&str> = seq(&spec["policyTypes"])
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert!(types.contains("Ingress"), "{name}: policyTypes {types:?}");

    let peers_named = |peers: &Yaml, what: &str| {
        let list = seq(peers);
        assert!(
            !list.is_empty(),
            "{name}: {what} with no peer admits everyone"
        );
        for peer in list {
            assert!(
                peer.as_hash().is_some_and(|h| !h.is_empty()),
                "{name}: {what}: an empty peer"
            );
        }
    };
    let rule_ports = |rule: &Yaml, what: &str| -> Vec<(String, u16)> {
        let ports = seq(&rule["ports"]);
        assert!(
            !ports.is_empty(),
            "{name}: {what} without ports opens every port"
        );
        ports
            .iter()
            .map(|p| {
                let protocol = p["protocol"].as_str().unwrap_or("TCP").to_owned();
                let port = match &p["port"] {
                    Yaml::Integer(n) => u16::try_from(*n).expect("port"),
                    other => panic!("{name}: {what}: port {other:?} (use numbers: a legacy container may share a port name)"),
                };
                (protocol, port)
            })
            .collect()
    };

    let mut opened = BTreeSet::new();
    for (i, rule) in seq(&spec["ingress"]).iter().enumerate() {
        let what = format!("ingress rule {i}");
        peers_named(&rule["from"], &what);
        let ports = rule_ports(rule, &what);
        assert_eq!(ports.len(), 1, "{name}: {what} mixes ports: {ports:?}");
        assert_eq!(ports[0].0, "TCP", "{name}: {what}");
        assert!(opened.insert(ports[0].1), "{name}: {what} repeats a port");
    }
    assert_eq!(
        opened,
        BTreeSet::from([c.listen(), c.admin()]),
        "{name}: the policy must open the public and admin ports and nothing else"
    );

    if !types.contains("Egress") {
        assert!(
            spec["egress"].is_badvalue(),
            "{name}: egress rules without Egress"
        );
        return;
    }
    let mut reachable = BTreeSet::new();
    for (i, rule) in seq(&spec["egress"]).iter().enumerate() {
        let what = format!("egress rule {i}");
        peers_named(&rule["to"], &what);
        reachable.extend(rule_ports(rule, &what));
    }
    for protocol in ["UDP", "TCP"] {
        assert!(
            reachable.contains(&(protocol.to_owned(), 53)),
            "{name}: no DNS over {protocol}"
        );
    }
    for (var, value) in env {
        let Some(port) = url_port(value) else {
            continue;
        };
        if loopback_port(value).is_some() {
            continue;
        }
        assert!(
            reachable.contains(&("TCP".to_owned(), port)),
            "{name}: {var} ({}) needs TCP port {port}, which the NetworkPolicy's egress does not allow",
            value.split('@').next_back().unwrap_or_default()
        );
    }
}

/// The port a URL connects to (explicit, or its scheme's), for http(s) and redis(s) URLs.
fn url_port(value: &str) -> Option<u16> {
    let (scheme, rest) = value.split_once("://")?;
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        "redis" => 6379,
        "rediss" => 6380,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host_port.starts_with('[') => {
            port.parse().ok().or(Some(default))
        }
        _ => Some(default),
    }
}

/// Runs `serve` on the pod's files with the listeners moved to free loopback ports, and checks
/// what the manifests rely on: probe paths on the admin listener (not the public one), the
/// dealer's card on the public one, and (once served) the metric names on /metrics.
fn serve_and_probe(
    name: &str,
    config: &Path,
    env: &BTreeMap<String, String>,
    settings: &Settings,
    probes: &BTreeMap<&'static str, String>,
) {
    // A port picked free a moment before may be taken by another test in between: a `serve`
    // that exits on an address in use is started again on fresh ports.
    let (public, admin, _log, _child) = 'start: {
        for _attempt in 0..5 {
            let (public, admin) = (free_port(), free_port());
            let log = tempfile::NamedTempFile::new().expect("log file");
            let child = Command::new(BIN)
                .args(["serve", "--config"])
                .arg(config)
                .env_clear()
                .envs(env)
                .env("AAP_GATEWAY__LISTEN", format!("127.0.0.1:{public}"))
                .env("AAP_GATEWAY__ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
                .stdout(Stdio::null())
                .stderr(log.reopen().expect("log"))
                .spawn()
                .expect("aap-gateway serve starts");
            let mut child = Running(child);
            let logs = || std::fs::read_to_string(log.path()).unwrap_or_default();

            let ready = &probes["readinessProbe"];
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok((200, _)) = get(admin, ready, "localhost") {
                    break 'start (public, admin, log, child);
                }
                if let Ok(Some(status)) = child.0.try_wait() {
                    let logs = logs();
                    assert!(
                        logs.contains("Address already in use"),
                        "{name}: serve exited ({status}):\n{logs}"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{name}: {ready} never answered 200:\n{}",
                    logs()
                );
                pause(Duration::from_millis(50));
            }
        }
        panic!("{name}: five starts in a row found a port taken");
    };
    for path in probes.values() {
        let (status, _) = get(admin, path, "localhost").expect("admin listener");
        assert_eq!(status, 200, "{name}: GET {path} on the admin listener");
        let (status, _) = get(public, path, "localhost").expect("public listener");
        assert_ne!(
            status, 200,
            "{name}: {path} answers on the public listener too; the probes must target admin"
        );
    }
    let host = settings
        .dealers
        .iter()
        .find_map(|d| d.hosts.first())
        .map_or("localhost", String::as_str);
    let (status, body) = get(public, "/.well-known/agent-card.json", host).expect("public");
    assert_eq!(
        status, 200,
        "{name}: the agent card for Host {host}: {body}"
    );
    assert!(body.contains("\"skills\""), "{name}: {body}");

    // Metrics land in parallel (issue 7); once /metrics is served its names are the contract.
    if let Ok((200, scrape)) = get(admin, "/metrics", "localhost") {
        let families: BTreeSet<String> = scrape
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .filter(|n| n.starts_with("aap_gateway_"))
            .map(str::to_owned)
            .collect();
        for family in &families {
            assert!(
                metric_base(family).is_some(),
                "{name}: /metrics serves `{family}`, which is not an agreed name (METRICS)"
            );
        }
        assert!(
            families.contains("aap_gateway_build_info"),
            "{name}: /metrics without aap_gateway_build_info"
        );
    }
}

// === pods and their view of the world ===

/// A Deployment whose pod runs the gateway.
struct GatewayPod<'a> {
    deployment: &'a Doc,
    template: &'a Yaml,
    spec: &'a Yaml,
    container: &'a Yaml,
    /// `--config` of the container args.
    config_path: String,
}

fn gateway_pods(set: &Set) -> Vec<GatewayPod<'_>> {
    let mut pods = Vec::new();
    for deployment in set.all("Deployment") {
        let template = &deployment.yaml["spec"]["template"];
        let spec = &template["spec"];
        let gateways: Vec<&Yaml> = seq(&spec["containers"])
            .iter()
            .filter(|c| c["name"].as_str() == Some("aap-gateway"))
            .collect();
        let [container] = gateways[..] else {
            assert!(gateways.is_empty(), "{}: two gateway containers", set.name);
            continue;
        };
        assert!(
            container["command"].is_badvalue(),
            "{}: keep the image's ENTRYPOINT (aap-gateway); pass args",
            set.name
        );
        let args: Vec<String> = seq(&container["args"])
            .iter()
            .map(|a| string(a, "args").to_owned())
            .collect();
        assert_eq!(
            args.first().map(String::as_str),
            Some("serve"),
            "{}",
            set.name
        );
        let config_path =
            config_arg(&args).unwrap_or_else(|| panic!("{}: args lack --config FILE", set.name));
        pods.push(GatewayPod {
            deployment,
            template,
            spec,
            container,
            config_path,
        });
    }
    pods
}

/// The gateway container's files (volumes) and environment, rebuilt in a temporary directory.
struct PodView {
    dir: tempfile::TempDir,
    env: BTreeMap<String, String>,
}

impl PodView {
    fn build(set: &Set, pod: &GatewayPod<'_>) -> PodView {
        let name = &set.name;
        let dir = tempfile::tempdir().expect("temp dir");
        let volumes = seq(&pod.spec["volumes"]);
        let mounts = seq(&pod.container["volumeMounts"]);
        assert!(
            !mounts.is_empty(),
            "{name}: the gateway mounts no configuration"
        );
        for mount in mounts {
            let volume_name = string(&mount["name"], "volumeMount name");
            let mount_path = string(&mount["mountPath"], "mountPath");
            assert!(
                mount["subPath"].is_badvalue(),
                "{name}: subPath mounts never see ConfigMap updates (hot reload)"
            );
            let volume = volumes
                .iter()
                .find(|v| v["name"].as_str() == Some(volume_name))
                .unwrap_or_else(|| panic!("{name}: no volume {volume_name}"));
            let (source, data) = if !volume["configMap"].is_badvalue() {
                let cm = &volume["configMap"];
                let doc = set.named("ConfigMap", string(&cm["name"], "configMap name"));
                (cm, config_map_data(doc))
            } else if !volume["secret"].is_badvalue() {
                let s = &volume["secret"];
                let doc = set.named("Secret", string(&s["secretName"], "secretName"));
                (s, secret_data(doc))
            } else if !volume["emptyDir"].is_badvalue() {
                continue;
            } else {
                panic!("{name}: volume {volume_name}: only configMap, secret and emptyDir here");
            };
            assert_eq!(
                mount["readOnly"],
                Yaml::Boolean(true),
                "{name}: mount {mount_path} read-only"
            );
            let base = dir.path().join(relative(mount_path));
            let items = &source["items"];
            let files: Vec<(String, String)> = if items.is_badvalue() {
                data.keys().map(|k| (k.clone(), k.clone())).collect()
            } else {
                let listed: Vec<(String, String)> = seq(items)
                    .iter()
                    .map(|i| {
                        let key = string(&i["key"], "item key").to_owned();
                        (key, string(&i["path"], "item path").to_owned())
                    })
                    .collect();
                // A key without an item never reaches the pod: a mapping file silently lost.
                for key in data.keys() {
                    assert!(
                        listed.iter().any(|(k, _)| k == key),
                        "{name}: `{key}` of {volume_name} is not in the volume's items"
                    );
                }
                listed
            };
            for (key, path) in files {
                let content = data
                    .get(&key)
                    .unwrap_or_else(|| panic!("{name}: {volume_name} has no key `{key}`"));
                let target = base.join(relative(&path));
                std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
                std::fs::write(&target, content).expect("write");
            }
        }

        // The environment: envFrom first, `env` entries take precedence (as in Kubernetes).
        let mut env = BTreeMap::new();
        for from in seq(&pod.container["envFrom"]) {
            let prefix = from["prefix"].as_str().unwrap_or_default();
            let data = if !from["secretRef"].is_badvalue() {
                secret_data(set.named("Secret", string(&from["secretRef"]["name"], "secretRef")))
            } else {
                config_map_data(
                    set.named("ConfigMap", string(&from["configMapRef"]["name"], "ref")),
                )
            };
            for (k, v) in data {
                env.insert(format!("{prefix}{k}"), v);
            }
        }
        for e in seq(&pod.container["env"]) {
            let var = string(&e["name"], "env name").to_owned();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_owned()
            } else if !e["valueFrom"]["secretKeyRef"].is_badvalue() {
                let r = &e["valueFrom"]["secretKeyRef"];
                let secret = secret_data(set.named("Secret", string(&r["name"], "secret")));
                let key = string(&r["key"], "secretKeyRef key");
                secret
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: {var}: Secret has no key {key}"))
                    .clone()
            } else if !e["valueFrom"]["configMapKeyRef"].is_badvalue() {
                let r = &e["valueFrom"]["configMapKeyRef"];
                let cm = config_map_data(set.named("ConfigMap", string(&r["name"], "cm")));
                cm[string(&r["key"], "configMapKeyRef key")].clone()
            } else {
                // fieldRef / resourceFieldRef: known only in a cluster.
                "from-the-cluster".to_owned()
            };
            env.insert(var, value);
        }
        PodView { dir, env }
    }

    /// Where an absolute path of the container is in the rebuilt tree.
    fn host_path(&self, container_path: &str) -> PathBuf {
        self.dir.path().join(relative(container_path))
    }
}

fn config_map_data(doc: &Doc) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(data) = doc.yaml["data"].as_hash() {
        for (k, v) in data {
            out.insert(
                string(k, "data key").to_owned(),
                string(v, "data value").to_owned(),
            );
        }
    }
    out
}

fn secret_data(doc: &Doc) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(data) = doc.yaml["data"].as_hash() {
        for (k, v) in data {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(string(v, "Secret data"))
                .expect("Secret data is base64");
            out.insert(
                string(k, "key").to_owned(),
                String::from_utf8(bytes).expect("UTF-8 secret"),
            );
        }
    }
    if let Some(data) = doc.yaml["stringData"].as_hash() {
        for (k, v) in data {
            out.insert(
                string(k, "key").to_owned(),
                string(v, "stringData").to_owned(),
            );
        }
    }
    out
}

fn container_ports(container: &Yaml) -> BTreeMap<String, u16> {
    seq(&container["ports"])
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let number = p["containerPort"].as_i64().expect("containerPort");
            let name = p["name"]
                .as_str()
                .map_or_else(|| i.to_string(), str::to_owned);
            (name, u16::try_from(number).expect("port"))
        })
        .collect()
}

/// A port given by number or by the name of a container port.
fn resolve_port(ports: &BTreeMap<String, u16>, port: &Yaml, what: &str) -> u16 {
    match port {
        Yaml::Integer(n) => u16::try_from(*n).expect("port"),
        Yaml::String(s) => *ports
            .get(s)
            .unwrap_or_else(|| panic!("{what}: no container port named `{s}`")),
        other => panic!("{what}: port {other:?}"),
    }
}

/// `selector` (a label map) matches `labels`; an empty selector matches nothing here.
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    match selector.as_hash() {
        Some(sel) if !sel.is_empty() => sel.iter().all(|(k, v)| {
            labels
                .as_hash()
                .and_then(|l| l.get(k))
                .is_some_and(|lv| lv == v)
        }),
        _ => false,
    }
}

fn loopback_port(value: &str) -> Option<u16> {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
        .then(|| port.parse().ok())
        .flatten()
}

// === the binary ===

fn run(args: &[&str], config: &Path, env: &BTreeMap<String, String>) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg(config)
        .env_clear()
        .envs(env)
        .output()
        .expect("run aap-gateway");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The settings `serve` would use: the file plus the `AAP_GATEWAY__*` part of `env`.
fn load_settings(config: &Path, env: &BTreeMap<String, String>) -> Settings {
    let overrides: HashMap<String, String> = env
        .iter()
        .filter(|(k, _)| k.starts_with(settings::ENV_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    settings::load_with_env(config, overrides).unwrap_or_else(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        panic!("{}:\n{}", config.display(), lines.join("\n"))
    })
}

/// The ports of `listen` and `admin_listen` when a configuration does not set them.
fn binary_default_ports() -> (u16, u16) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("minimal.yaml");
    std::fs::write(
        &path,
        "dealers:\n  - id: d\n    card: { name: D, description: D }\n",
    )
    .expect("write");
    let s = load_settings(&path, &BTreeMap::new());
    (s.listen.port(), s.admin_listen.port())
}

/// The environment the example manifests give the gateway (for the image's own config).
fn example_env() -> BTreeMap<String, String> {
    let set = kubernetes_set("sidecar");
    let pods = gateway_pods(&set);
    PodView::build(&set, &pods[0]).env
}

/// Kills and reaps the gateway when a check fails halfway.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A plain HTTP/1.1 GET on 127.0.0.1: (status, body).
fn get(port: u16, path: &str, host: &str) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// These tests are plain `#[test]`s: no async runtime whose worker a sleep could block.
#[allow(
    clippy::disallowed_methods,
    reason = "no async runtime in this test; polling a child process"
)]
fn pause(d: Duration) {
    std::thread::sleep(d);
}

// === Helm ===

/// The interpreter with helm-python-sdk (deploy/check/setup.sh), or `None` to skip.
fn helm_python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("DEPLOY_CHECK_PYTHON").map(PathBuf::from),
        std::env::var_os("CARGO_TARGET_DIR")
            .map(|t| PathBuf::from(t).join("deploy-venv/bin/python")),
        Some(root().join("target/deploy-venv/bin/python")),
    ];
    if let Some(python) = candidates.into_iter().flatten().find(|p| p.exists()) {
        return Some(python);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !ci,
        "CI: the Helm chart must be rendered; run `bash deploy/check/setup.sh` first"
    );
    eprintln!(
        "skipping the Helm chart: no renderer (run `bash deploy/check/setup.sh`, or set \
         DEPLOY_CHECK_PYTHON)"
    );
    None
}

/// Renders the chart expecting Helm to refuse; returns its message.
fn render_chart_error(python: &Path, chart: &str, set_json: &[&str]) -> String {
    let mut cmd = Command::new(python);
    cmd.current_dir(root())
        .arg("deploy/check/render-chart.py")
        .arg(chart);
    for j in set_json {
        cmd.args(["--set-json", j]);
    }
    let out = cmd.output().expect("run render-chart.py");
    assert!(
        !out.status.success(),
        "helm rendered {set_json:?}:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

fn render_chart(
    python: &Path,
    chart: &str,
    label: &str,
    values: &[String],
    set_json: &[&str],
) -> Set {
    let mut cmd = Command::new(python);
    cmd.current_dir(root())
        .arg("deploy/check/render-chart.py")
        .arg(chart);
    for v in values {
        cmd.args(["--values", v]);
    }
    for j in set_json {
        cmd.args(["--set-json", j]);
    }
    let out = cmd.output().expect("run render-chart.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm ({label}): {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("helm chart ({label})");
    Set {
        docs: parse_stream(&name, &stdout),
        name,
    }
}

// === manifests ===

/// One parsed YAML document and where it came from.
struct Doc {
    origin: String,
    yaml: Yaml,
}

impl Doc {
    fn name(&self) -> &str {
        self.yaml["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// The manifests of one deployment: a Kubernetes folder or one chart render.
struct Set {
    name: String,
    docs: Vec<Doc>,
}

impl Set {
    fn all<'a>(&'a self, k: &str) -> impl Iterator<Item = &'a Doc> + use<'a> {
        let k = k.to_owned();
        self.docs.iter().filter(move |d| kind(&d.yaml) == k)
    }

    fn one(&self, k: &str) -> &Doc {
        let found: Vec<&Doc> = self.all(k).collect();
        assert_eq!(found.len(), 1, "{}: one {k}", self.name);
        found[0]
    }

    fn named(&self, k: &str, name: &str) -> &Doc {
        self.all(k)
            .find(|d| d.name() == name)
            .unwrap_or_else(|| panic!("{}: no {k} named {name}", self.name))
    }
}

fn kubernetes_set(folder: &str) -> Set {
    let dir = root().join("deploy/kubernetes").join(folder);
    let mut docs = Vec::new();
    for path in yaml_files(&dir) {
        let origin = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        docs.extend(parse_stream(&origin, &read(&path)));
    }
    Set {
        name: format!("deploy/kubernetes/{folder}"),
        docs,
    }
}

/// Every document has a kind this project uses, its API version, and a unique name.
fn check_kinds(set: &Set) {
    const KNOWN: &[(&str, &str)] = &[
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("apps/v1", "Deployment"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("policy/v1", "PodDisruptionBudget"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
    ];
    assert!(!set.docs.is_empty(), "{}: no manifests", set.name);
    let mut seen = BTreeSet::new();
    for doc in &set.docs {
        let api = doc.yaml["apiVersion"].as_str().unwrap_or_default();
        let k = kind(&doc.yaml);
        assert!(
            KNOWN.contains(&(api, k)),
            "{}: apiVersion `{api}` kind `{k}` is not one of {KNOWN:?}",
            doc.origin
        );
        if k != "Kustomization" {
            assert!(!doc.name().is_empty(), "{}: {k} without a name", doc.origin);
            assert!(
                seen.insert((k, doc.name())),
                "{}: two {k} named {}",
                set.name,
                doc.name()
            );
        }
    }
}

fn parse_stream(origin: &str, text: &str) -> Vec<Doc> {
    YamlLoader::load_from_str(text)
        .unwrap_or_else(|e| panic!("{origin}: not YAML: {e}"))
        .into_iter()
        .filter(|y| !matches!(y, Yaml::Null | Yaml::BadValue))
        .map(|yaml| {
            assert!(
                yaml.as_hash().is_some(),
                "{origin}: a document is not a mapping"
            );
            Doc {
                origin: origin.to_owned(),
                yaml,
            }
        })
        .collect()
}

fn load_yaml(path: &Path) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()))
}

fn kind(y: &Yaml) -> &str {
    y["kind"].as_str().unwrap_or_default()
}

fn seq(y: &Yaml) -> &[Yaml] {
    y.as_vec().map_or(&[], Vec::as_slice)
}

fn hash<'a>(y: &'a Yaml, what: &str) -> &'a yaml_rust2::yaml::Hash {
    y.as_hash()
        .unwrap_or_else(|| panic!("{what}: not a mapping"))
}

fn string<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {y:?}"))
}

fn config_arg(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" || a == "-c" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_owned)
        }
    })
}

// === Dockerfile ===

struct Stage {
    from: String,
    /// (INSTRUCTION in upper case, arguments)
    instructions: Vec<(String, String)>,
}

impl Stage {
    fn all<'a>(&'a self, instruction: &str) -> impl Iterator<Item = &'a str> + use<'a> {
        let instruction = instruction.to_owned();
        self.instructions
            .iter()
            .filter(move |(i, _)| *i == instruction)
            .map(|(_, a)| a.as_str())
    }

    /// The last one counts (as for CMD, ENTRYPOINT and USER).
    fn get(&self, instruction: &str) -> Option<&str> {
        self.all(instruction).last()
    }
}

struct Dockerfile {
    stages: Vec<Stage>,
}

impl Dockerfile {
    fn read(path: &Path) -> Dockerfile {
        let text = read(path);
        let mut logical = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            if let Some(head) = trimmed.strip_suffix('\\') {
                current.push_str(head);
                current.push(' ');
            } else {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
        let mut stages: Vec<Stage> = Vec::new();
        for line in logical {
            let (instruction, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            let instruction = instruction.to_ascii_uppercase();
            let args = args.trim().to_owned();
            if instruction == "FROM" {
                let image = args
                    .split_whitespace()
                    .find(|w| !w.starts_with("--"))
                    .unwrap_or_default();
                stages.push(Stage {
                    from: image.to_owned(),
                    instructions: Vec::new(),
                });
            } else if let Some(stage) = stages.last_mut() {
                stage.instructions.push((instruction, args));
            }
        }
        Dockerfile { stages }
    }

    fn all(&self) -> impl Iterator<Item = (&str, &str)> {
        self.stages
            .iter()
            .flat_map(|s| s.instructions.iter().map(|(i, a)| (i.as_str(), a.as_str())))
    }
}

fn json_array(text: &str) -> Vec<String> {
    serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("`{text}` must be the exec (JSON array) form: {e}"))
}

/// Top-level paths `cargo build --release --bin aap-gateway` reads: the manifest and lock file,
/// the targets' folders, and whatever `include_str!`/`include_bytes!` reach from src/.
fn build_inputs() -> BTreeSet<String> {
    let mut needed = BTreeSet::from([
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "src".to_owned(),
    ]);
    let manifest = read(&root().join("Cargo.toml"));
    if manifest.contains("[[bench]]") {
        needed.insert("benches".to_owned());
    }
    if root().join("build.rs").exists() {
        needed.insert("build.rs".to_owned());
    }
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let text = read(&path);
            for macro_name in ["include_str!(\"", "include_bytes!(\""] {
                for piece in text.split(macro_name).skip(1) {
                    let Some(rel) = piece.split('"').next() else {
                        continue;
                    };
                    let joined = normalize(&path.parent().expect("dir").join(rel));
                    if let Ok(inside) = joined.strip_prefix(root())
                        && let Some(Component::Normal(top)) = inside.components().next()
                    {
                        needed.insert(top.to_string_lossy().into_owned());
                    }
                }
            }
        }
    }
    needed
}

// === metrics ===

/// The agreed metric a series name belongs to: histograms add `_bucket`, `_sum` and `_count`,
/// and OpenMetrics exposition may add `_created` to counters and histograms.
fn metric_base(series: &str) -> Option<&'static str> {
    METRICS.iter().find_map(|(name, kind)| {
        let suffixes: &[&str] = match kind {
            MetricKind::Counter => &["_created"],
            MetricKind::Gauge => &[],
            MetricKind::Histogram => &["_bucket", "_sum", "_count", "_created"],
        };
        // A counter `x_total` has its creation time as `x_created`.
        let stem = name.strip_suffix("_total").unwrap_or(name);
        let matches = series == *name
            || suffixes.iter().any(|s| {
                series
                    .strip_suffix(s)
                    .is_some_and(|b| b == *name || b == stem)
            });
        matches.then_some(*name)
    })
}

/// Every `aap_gateway_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("aap_gateway_") {
        let preceded = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded {
            names.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// PromQL in a dashboard: panel targets' `expr`, and template variables' queries.
fn collect_queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if s.contains("aap_gateway_") => {
                        out.push(s.clone());
                    }
                    _ => collect_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_queries(i, out)),
        _ => {}
    }
}

// === files ===

fn root() -> &'static Path {
    Path::new(ROOT)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `*.yaml` / `*.yml` below `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// An absolute container path as a relative one; `..` is refused.
fn relative(path: &str) -> PathBuf {
    let p = Path::new(path.trim_start_matches('/'));
    assert!(
        p.components().all(|c| matches!(c, Component::Normal(_))),
        "unexpected path {path}"
    );
    p.to_path_buf()
}

/// `a/b/../c` → `a/c`, lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
