//! deploy/ checks (DESIGN.md "Layout", deploy/): every JSON and YAML file parses; every metric the alerts and the dashboard name
//! exists in a running edge's /metrics; the embedded config and the Kubernetes ConfigMap's edge.toml pass
//! `edge --check`; stop timeouts cover drain_delay + drain + 5 s; the systemd unit passes
//! `systemd-analyze verify` where that tool exists.

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
        "k8s/servicemonitor.yaml",
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
        "servicemonitor",
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

#[test]
fn every_metric_in_the_alerts_and_the_dashboard_is_exported() {
    let origin = Origin::fixed(b"fine");
    // With a health check, so the per-endpoint health series exist.
    let edge = Edge::start(&Cfg::new(Driver::Epoll, origin.addr).health_check("path", "/"));
    // One proxied request so histograms have samples.
    assert_eq!(Client::connect(edge.addr).get("/").status, 200);
    edge.wait_metric("edge_requests_total", &[], 1.0);
    edge.wait_metric("edge_upstream_endpoint_healthy", &[], 1.0);
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

#[test]
fn the_embedded_and_the_configmap_config_pass_check() {
    check(None);
    // The upstream is a cluster DNS name that resolves only inside the cluster: checked with that host
    // replaced by localhost (same port), everything else as shipped.
    let text = configmap_toml().replace("app.default.svc.cluster.local", "localhost");
    let dir = TempDir::new();
    let path = dir.0.join("edge.toml");
    std::fs::write(&path, text).unwrap();
    check(Some(&path));
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
