//! The deployment files in deploy/ parse and say what docs/metrics.md says:
//! the DaemonSet's capabilities, host mounts and scrape annotations, the
//! ServiceMonitor's port and the systemd unit's hardening (the dashboard and
//! the alerting rules: serve_rules.rs). No root needed.

use std::path::PathBuf;

use serde_yaml::Value;

fn deploy(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml_docs(path: &str) -> Vec<Value> {
    let text = deploy(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn daemonset_has_capabilities_host_mounts_probes_and_scrape_annotations() {
    let docs = yaml_docs("kubernetes/daemonset.yaml");
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    assert_eq!(ds["apiVersion"], "apps/v1");
    let tpl = &ds["spec"]["template"];
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        tpl["metadata"]["labels"]["app.kubernetes.io/name"],
        "the selector matches the pods"
    );
    let ann = &tpl["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "9435");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    let pod = &tpl["spec"];
    assert_ne!(pod["hostPID"], Value::Bool(true), "hostPID is not needed");
    let c = &pod["containers"][0];
    let args = strs(&c["args"]);
    assert_eq!(args.first(), Some(&"serve"), "{args:?}");
    // One address, the pod IP from the downward API; never every address.
    assert!(args.contains(&"--listen=$(POD_IP):9435"), "{args:?}");
    assert!(!args.iter().any(|a| a.contains("0.0.0.0")), "{args:?}");
    let env = c["env"].as_sequence().expect("env");
    let pod_ip = env
        .iter()
        .find(|e| e["name"] == "POD_IP")
        .expect("POD_IP from the downward API");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(c["ports"][0]["containerPort"], 9435);
    assert_eq!(c["ports"][0]["name"], "metrics");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
    }
    let sc = &c["securityContext"];
    let privileged = sc["privileged"] == Value::Bool(true);
    let add = strs(&sc["capabilities"]["add"]);
    assert!(
        privileged || (add.contains(&"BPF") && add.contains(&"PERFMON")),
        "privileged or CAP_BPF + CAP_PERFMON: {add:?}"
    );
    let volumes = pod["volumes"].as_sequence().expect("volumes");
    let mounts = c["volumeMounts"].as_sequence().expect("volumeMounts");
    for host in [
        "/sys/kernel/btf",
        "/sys/kernel/tracing",
        "/sys/fs/bpf",
        "/dev/kmsg",
    ] {
        let vol = volumes
            .iter()
            .find(|v| v["hostPath"]["path"] == host)
            .unwrap_or_else(|| panic!("hostPath volume {host}"));
        let mount = mounts
            .iter()
            .find(|m| m["name"] == vol["name"])
            .unwrap_or_else(|| panic!("{host} is mounted"));
        assert_eq!(mount["mountPath"], host, "{host} at the same path");
        assert_eq!(mount["readOnly"], Value::Bool(true), "{host} read-only");
    }
    let svc = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("a Service for the ServiceMonitor");
    assert_eq!(svc["spec"]["ports"][0]["name"], "metrics");

    let sm = &yaml_docs("kubernetes/servicemonitor.yaml")[0];
    assert_eq!(sm["kind"], "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        svc["metadata"]["labels"]["app.kubernetes.io/name"]
    );
}

#[test]
fn systemd_unit_is_hardened_and_serves_on_loopback() {
    let unit = deploy("systemd/gpudirect-trace.service");
    let get = |key: &str| -> Vec<&str> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect()
    };
    let exec = get("ExecStart");
    assert_eq!(exec.len(), 1, "{exec:?}");
    assert!(
        exec[0].contains("gpudirect-trace serve --listen 127.0.0.1:"),
        "{exec:?}"
    );
    let bounding = get("CapabilityBoundingSet").concat();
    let caps: Vec<&str> = bounding.split_whitespace().collect();
    for cap in ["CAP_BPF", "CAP_PERFMON"] {
        assert!(caps.contains(&cap), "{cap} in {caps:?}");
    }
    assert!(!caps.contains(&"CAP_NET_ADMIN"), "{caps:?}");
    for (key, want) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("LimitMEMLOCK", "infinity"),
    ] {
        assert_eq!(get(key), vec![want], "{key}");
    }
    let ro = get("ReadOnlyPaths").concat();
    assert!(
        ro.contains("/sys/kernel/btf") && ro.contains("/sys/kernel/tracing"),
        "{ro}"
    );
    assert!(unit.contains("[Install]") && get("WantedBy") == vec!["multi-user.target"]);
}
