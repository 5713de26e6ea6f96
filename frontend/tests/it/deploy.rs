//! deploy/ checks (DESIGN.md "Layout", deploy/): every JSON and YAML file parses; every metric the alerts and the dashboard name
//! exists in a running edge's /metrics; the embedded config and the Kubernetes ConfigMap's edge.toml pass
//! `edge --check`, as shipped and with its opt-in `[server.tls]` block uncommented (a self-signed
//! certificate made here in place of the Secret's files); the TLS pieces of the manifests agree
//! (certificate paths under the Secret mount, which is optional, ports); a plain
//! `kubectl apply -f deploy/k8s/` needs no CRD (the ServiceMonitor is in deploy/k8s/prometheus-operator/);
//! stop timeouts cover drain_delay + drain + 5 s; the systemd unit passes `systemd-analyze verify` where
//! that tool exists.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use edge_core::config::Config;

use crate::harness::{Cfg, Client, Driver, Edge, Origin, TempDir};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    let p = deploy_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Every YAML document of a file.
fn yaml_docs(text: &str) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .collect()
}

#[test]
fn the_deploy_layout_of_design_md_is_there() {
    for f in [
        "edge.toml",
        "Dockerfile",
        "seccomp-io_uring.json",
        "systemd/edge.service",
        "ecs/task-definition.json",
        "k8s/deployment.yaml",
        "k8s/service.yaml",
        "k8s/configmap.yaml",
        "k8s/pdb.yaml",
        "k8s/hpa.yaml",
        "k8s/prometheus-operator/servicemonitor.yaml",
        "prometheus/alerts.yaml",
        "grafana/dashboard.json",
    ] {
        assert!(deploy_dir().join(f).is_file(), "deploy/{f} is missing");
    }
    let kinds: Vec<String> = [
        "deployment",
        "service",
        "configmap",
        "pdb",
        "hpa",
        "prometheus-operator/servicemonitor",
    ]
    .iter()
    .flat_map(|f| yaml_docs(&read(&format!("k8s/{f}.yaml"))))
    .map(|d| d["kind"].as_str().unwrap_or("").to_string())
    .collect();
    for k in [
        "Deployment",
        "Service",
        "ConfigMap",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
    ] {
        assert!(
            kinds.iter().any(|x| x == k),
            "no {k} in deploy/k8s: {kinds:?}"
        );
    }
}

#[test]
fn a_plain_apply_of_deploy_k8s_needs_no_crd() {
    // `kubectl apply -f deploy/k8s/` takes the files of that directory (not its subdirectories): every
    // object there must be of a built-in kind, so the apply works without the Prometheus Operator.
    let builtin = ["v1", "apps/v1", "policy/v1", "autoscaling/v2"];
    let dir = deploy_dir().join("k8s");
    let mut top = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.extension().is_some_and(|x| x == "yaml") {
            top.push(p);
        }
    }
    assert!(top.len() >= 5, "{top:?}");
    for p in &top {
        for d in yaml_docs(&std::fs::read_to_string(p).unwrap()) {
            let api = d["apiVersion"].as_str().unwrap_or("");
            assert!(
                builtin.contains(&api),
                "{}: {} of apiVersion {api} needs a CRD: move it to a subdirectory",
                p.display(),
                d["kind"].as_str().unwrap_or("?")
            );
        }
    }
    let operator = yaml_docs(&read("k8s/prometheus-operator/servicemonitor.yaml"));
    assert!(operator
        .iter()
        .any(|d| d["apiVersion"] == "monitoring.coreos.com/v1" && d["kind"] == "ServiceMonitor"));
}

#[test]
fn every_json_and_yaml_file_under_deploy_parses() {
    let mut all = Vec::new();
    files(&deploy_dir(), &mut all);
    let mut checked = 0;
    for p in &all {
        let text = std::fs::read_to_string(p).unwrap();
        match p.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                serde_json::from_str::<serde_json::Value>(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                checked += 1;
            }
            Some("yaml" | "yml") => {
                use serde::Deserialize;
                for d in serde_yaml::Deserializer::from_str(&text) {
                    serde_yaml::Value::deserialize(d)
                        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                }
                checked += 1;
            }
            _ => {}
        }
    }
    assert!(checked >= 10, "only {checked} JSON/YAML files found");
}

/// `edge_*` names in a text, without regex prefixes such as `edge_upstream_.*`.
fn metric_names(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(off) = text[i..].find("edge_") {
        let start = i + off;
        let word_start =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let name = &text[start..end];
        if word_start && !name.ends_with('_') && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
        i = end.max(start + 1);
    }
    out
}

/// A self-signed certificate for `localhost` (rcgen's default validity) written as `cert` and `key` in
/// `dir`; returns their paths.
fn self_signed(dir: &Path, cert: &str, key: &str) -> (PathBuf, PathBuf) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (c, k) = (dir.join(cert), dir.join(key));
    std::fs::write(&c, made.cert.pem()).unwrap();
    std::fs::write(&k, made.signing_key.serialize_pem()).unwrap();
    (c, k)
}

/// The TLS listener's address from edge's `startup.ready` line (`tls=ADDR`).
fn tls_addr(edge: &Edge) -> String {
    let ready = edge
        .log()
        .into_iter()
        .find(|l| l.contains("startup.ready"))
        .expect("startup.ready line");
    let at = ready.find("tls=").expect("tls= in startup.ready") + "tls=".len();
    let addr = ready[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches('"');
    assert!(addr.parse::<std::net::SocketAddr>().is_ok(), "tls={addr}");
    addr.to_string()
}

#[test]
fn every_metric_in_the_alerts_and_the_dashboard_is_exported() {
    let origin = Origin::fixed(b"fine");
    // With a health check, so the per-endpoint health series exist, and with a TLS listener, so the
    // certificate expiry gauge (exported only for served certificates) exists.
    let dir = TempDir::new();
    let (cert, key) = self_signed(&dir.0, "cert.pem", "key.pem");
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let edge = Edge::start_args(
        &Cfg::new(Driver::Epoll, origin.addr).health_check("path", "/"),
        &[
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
    );
    // One proxied request so histograms have samples.
    assert_eq!(Client::connect(edge.addr).get("/").status, 200);
    // One TLS handshake, made by `edge healthcheck` (https:// without verification), for the handshake
    // counters and histogram.
    let out = Command::new(env!("CARGO_BIN_EXE_edge"))
        .args(["healthcheck", "--url"])
        .arg(format!("https://{}/_health", tls_addr(&edge)))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "edge healthcheck over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at_least_one = |v: f64| v >= 1.0;
    let limit = Duration::from_secs(5);
    edge.wait_metric_where("edge_requests_total", &[], limit, at_least_one);
    let full = ["result=\"full\""];
    let handshakes =
        edge.wait_metric_where("edge_tls_handshakes_total", &full, limit, at_least_one);
    assert!(handshakes >= 1.0, "no full TLS handshake counted");
    edge.wait_metric("edge_upstream_endpoint_healthy", &[], 1.0);
    let expiry = edge.metric("edge_tls_certificate_expiry_timestamp_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now, "certificate expiry {expiry} not after {now}");
    let text = edge.metrics();
    let exported = |name: &str| {
        text.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']) || rest.starts_with("_bucket"))
        })
    };
    for file in ["prometheus/alerts.yaml", "grafana/dashboard.json"] {
        let names = metric_names(&read(file));
        assert!(names.len() >= 5, "{file}: names found {names:?}");
        let missing: Vec<_> = names.iter().filter(|n| !exported(n)).collect();
        assert!(
            missing.is_empty(),
            "deploy/{file} names metrics edge does not export: {missing:?}"
        );
    }
    // DESIGN.md "Observability": each metric has a `# HELP` line.
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(families.len() >= 20, "metric families: {families:?}");
    let without_help: Vec<_> = families
        .iter()
        .filter(|f| !text.contains(&format!("# HELP {f} ")))
        .collect();
    assert!(without_help.is_empty(), "no # HELP line: {without_help:?}");
}

fn check(config: Option<&Path>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_edge"));
    cmd.arg("--check");
    if let Some(p) = config {
        cmd.arg("--config").arg(p);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "edge --check {config:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ConfigMap's edge.toml.
fn configmap_toml() -> String {
    let docs = yaml_docs(&read("k8s/configmap.yaml"));
    docs[0]["data"]["edge.toml"]
        .as_str()
        .expect("data.edge.toml")
        .to_string()
}

/// The ConfigMap's edge.toml with its opt-in TLS block uncommented as its comment says: every line from
/// `# [server.tls]` to the blank line after it loses its leading `# `.
fn configmap_toml_with_tls() -> String {
    let mut out = String::new();
    let mut in_block = false;
    for line in configmap_toml().lines() {
        in_block = (in_block && !line.trim().is_empty()) || line == "# [server.tls]";
        let line = match in_block {
            true => line
                .strip_prefix("# ")
                .or(line.strip_prefix('#'))
                .unwrap_or(line),
            false => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Where the Deployment mounts the `edge-tls` Secret.
const TLS_MOUNT: &str = "/etc/edge/tls";

#[test]
fn the_embedded_and_the_configmap_config_pass_check() {
    check(None);
    // The upstream is a cluster DNS name that resolves only inside the cluster: checked with that host
    // replaced by localhost (same port). The certificate and key are the Secret's files in the pod:
    // checked with a self-signed pair of the same names in a temp dir (`--check` loads and validates them).
    // Everything else as shipped.
    let dir = TempDir::new();
    self_signed(&dir.0, "tls.crt", "tls.key");
    // As shipped, TLS is off: the pods need no Secret.
    let shipped = configmap_toml();
    let c = Config::parse(&shipped, "configmap edge.toml").unwrap();
    assert!(c.server.tls.is_none(), "TLS is opt-in in the ConfigMap");
    // With the opt-in block uncommented.
    let with_tls = configmap_toml_with_tls();
    assert!(
        with_tls.contains(&format!("{TLS_MOUNT}/")),
        "the ConfigMap's TLS block names no file under {TLS_MOUNT}"
    );
    for (name, text) in [("plain.toml", shipped), ("tls.toml", with_tls)] {
        let text = text
            .replace("app.default.svc.cluster.local", "localhost")
            .replace(&format!("{TLS_MOUNT}/"), &format!("{}/", dir.0.display()));
        let path = dir.0.join(name);
        std::fs::write(&path, text).unwrap();
        check(Some(&path));
    }
}

/// The port of a `host:port` listener address.
fn port(addr: &str) -> u64 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn the_tls_setup_agrees_across_the_deploy_files() {
    // Kubernetes: the ConfigMap's opt-in [server.tls] serves files of the Secret volume (optional, so pods
    // start without the Secret), on the container port named https, which the Service's 443 targets.
    let c = Config::parse(&configmap_toml_with_tls(), "configmap edge.toml").unwrap();
    let tls = c
        .server
        .tls
        .as_ref()
        .expect("an opt-in [server.tls] block in the ConfigMap");
    let dep = &yaml_docs(&read("k8s/deployment.yaml"))[0];
    let pod = &dep["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(TLS_MOUNT))
        .expect("a volumeMount at /etc/edge/tls");
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the tls volume");
    let secret = &volume["secret"];
    assert!(
        secret["secretName"].is_string(),
        "the tls volume is a Secret"
    );
    assert_eq!(
        secret["optional"].as_bool(),
        Some(true),
        "the pods must start without the TLS Secret"
    );
    let files: Vec<String> = secret["items"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| format!("{TLS_MOUNT}/{}", i["path"].as_str().unwrap()))
        .collect();
    for cert in &tls.certificates {
        for f in [&cert.cert, &cert.key] {
            assert!(
                files.contains(f),
                "{f} is not a file of the Secret: {files:?}"
            );
        }
    }
    let https = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("https"))
        .expect("a container port named https");
    assert_eq!(https["containerPort"].as_u64(), Some(port(&tls.listen)));
    let svc = &yaml_docs(&read("k8s/service.yaml"))[0];
    assert!(
        svc["spec"]["ports"].as_sequence().unwrap().iter().any(|p| {
            p["port"].as_u64() == Some(443) && p["targetPort"].as_str() == Some("https")
        }),
        "the Service has no 443 -> https"
    );

    // ECS: --tls-listen's port is mapped, and the certificate files are on a mounted volume.
    let ecs: serde_json::Value = serde_json::from_str(&read("ecs/task-definition.json")).unwrap();
    let edge = &ecs["containerDefinitions"][0];
    let args: Vec<&str> = edge["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let flag = |name: &str| {
        let i = args
            .iter()
            .position(|a| *a == name)
            .unwrap_or_else(|| panic!("no {name}"));
        args[i + 1]
    };
    let mapped: Vec<u64> = edge["portMappings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["containerPort"].as_u64().unwrap())
        .collect();
    assert!(
        mapped.contains(&port(flag("--tls-listen"))),
        "ECS maps {mapped:?}"
    );
    let mounts = edge["mountPoints"].as_array().expect("ECS mountPoints");
    for f in [flag("--tls-cert"), flag("--tls-key")] {
        assert!(
            mounts
                .iter()
                .any(|m| { f.starts_with(&format!("{}/", m["containerPath"].as_str().unwrap())) }),
            "ECS: {f} is on no mounted volume"
        );
    }

    // Docker: the image exposes the TLS port the examples use.
    let docker = read("Dockerfile");
    let expose = docker
        .lines()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("EXPOSE");
    assert!(
        expose.split_whitespace().any(|p| p == "8443"),
        "EXPOSE {expose}"
    );
}

/// drain_delay + drain + 5 s of the ConfigMap's config, seconds.
fn drain_budget() -> u64 {
    let c = Config::parse(&configmap_toml(), "configmap edge.toml").unwrap();
    let t = &c.server.timeouts;
    (t.drain_delay.0 + t.drain.0 + Duration::from_secs(5)).as_secs()
}

#[test]
fn stop_timeouts_cover_drain_delay_plus_drain_plus_5s() {
    let need = drain_budget();
    let dep = &yaml_docs(&read("k8s/deployment.yaml"))[0];
    let pod = &dep["spec"]["template"]["spec"];
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        grace >= pre_stop + need,
        "k8s grace {grace} < preStop {pre_stop} + {need}"
    );
    let probe = &pod["containers"][0]["readinessProbe"]["httpGet"]["path"];
    assert_eq!(probe.as_str(), Some("/_health"));
    let live = &pod["containers"][0]["livenessProbe"]["httpGet"];
    assert_eq!(live["path"].as_str(), Some("/_live"));
    assert_eq!(live["port"].as_str(), Some("admin"));

    let ecs: serde_json::Value = serde_json::from_str(&read("ecs/task-definition.json")).unwrap();
    let stop = ecs["containerDefinitions"][0]["stopTimeout"]
        .as_u64()
        .unwrap();
    assert!(
        (need..=120).contains(&stop),
        "ECS stopTimeout {stop} outside {need}..=120"
    );

    let unit = read("systemd/edge.service");
    let stop = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("TimeoutStopSec=N");
    assert!(stop >= need, "systemd TimeoutStopSec {stop} < {need}");
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("NotifyAccess=all"));
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIP systemd unit check: systemd-analyze is not installed here\n",
        );
        return;
    };
    assert!(out.status.success());
    // The unit names /usr/local/bin/edge; verify checks that its commands exist, so point them at the
    // binary under test.
    let dir = TempDir::new();
    let unit = dir.0.join("edge.service");
    std::fs::write(
        &unit,
        read("systemd/edge.service").replace("/usr/local/bin/edge", env!("CARGO_BIN_EXE_edge")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("edge.service:"),
        "systemd-analyze verify: {err}"
    );
}
