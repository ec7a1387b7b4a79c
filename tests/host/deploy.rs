//! The deployment files in deploy/ parse and say what docs/metrics.md says:
//! the DaemonSet's capabilities, host mounts and scrape annotations, the
//! ServiceMonitor's port, the systemd unit's hardening, and a dashboard whose
//! every query names metrics the exporter really exports. No root needed.

use std::{collections::BTreeSet, path::PathBuf, sync::Arc};

use gpudirect_trace::{
    aggregate::UNATTRIBUTED,
    analysis::Analysis,
    decode::Record,
    ebpf::{ProbeStatus, SelfStats, Status},
    model::TraceClock,
    serve::metrics::{DeviceLabels, FaultCount, Model},
};
use gpudirect_trace_common::{kind, op, Event, XidEvent, XID_MSG_LEN};
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

/// A model with every family the exporter can emit.
fn every_exported_name() -> BTreeSet<String> {
    // Through the analysis, as a session takes records: the ledger counts
    // faults and Xids.
    let mut agg = Analysis::new(TraceClock::default());
    let dev: Arc<str> = Arc::from("0000:41:00.0");
    let e = |k: u16, size: u64| {
        Record::Event(Event {
            kind: k,
            size,
            dir: 1,
            ..Default::default()
        })
    };
    for k in [
        kind::DMA_MAP,
        kind::DMA_ALLOC,
        kind::SWIOTLB_BOUNCED,
        kind::DMA_MAP_SG_ERR,
        kind::IO_PAGE_FAULT,
    ] {
        agg.record(&e(k, 4096), &dev);
    }
    agg.record(&e(kind::IOMMU_MAP, 4096), &Arc::from(UNATTRIBUTED));
    let xid = XidEvent {
        event: Event {
            kind: kind::NV_XID,
            ..Default::default()
        },
        xid: 79,
        msg_truncated: 0,
        msg: [0; XID_MSG_LEN],
    };
    agg.record(&Record::Xid(xid), &dev);
    let stats = SelfStats {
        hits: vec![1; kind::COUNT as usize],
        ..Default::default()
    };
    let mut labels = DeviceLabels::new(8);
    let probe = ProbeStatus {
        name: "iommu:map",
        kind: "raw_tracepoint",
        program: "iommu_map",
        status: Status::Attached,
        reason: String::new(),
        hot: true,
    };
    let latency = Event {
        kind: kind::LATENCY,
        size: 1500,
        aux: u64::from(op::IOMMU_MAP),
        ..Default::default()
    };
    agg.record(&Record::Event(latency), &dev);
    let fault = |source: &str| FaultCount {
        device: dev.to_string(),
        source: source.to_owned(),
        reason: "r".to_owned(),
        count: 1,
    };
    let faults = [fault("vtd"), fault("aer")];
    let model = Model::build(&agg.agg, &stats, &[probe], &faults, &mut labels, true);
    model.exported_names().into_iter().collect()
}

#[test]
fn dashboard_queries_only_exported_metrics_and_has_the_panels() {
    let dash: serde_json::Value =
        serde_json::from_str(&deploy("grafana/gpudirect-trace.json")).expect("dashboard JSON");
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let panels = dash["panels"].as_array().expect("panels");
    let exported = every_exported_name();
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            for (i, _) in expr.match_indices("gpudirect_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| exported.contains(*b)))
                    .unwrap_or(&name)
                    .to_owned();
                assert!(
                    exported.contains(&base),
                    "panel {}: {name} is not exported ({exported:?})",
                    p["title"]
                );
                used.insert(base);
            }
        }
    }
    for must in [
        "gpudirect_dma_map_bytes_total",
        "gpudirect_dma_map_size_bytes",
        "gpudirect_mappings_outstanding",
        "gpudirect_iommu_faults_total",
        "gpudirect_nvidia_xid_total",
        "gpudirect_events_lost_total",
        "gpudirect_iommu_map_latency_seconds",
    ] {
        assert!(used.contains(must), "a panel shows {must}");
    }
    let heatmap = panels
        .iter()
        .find(|p| p["type"] == "heatmap")
        .expect("a heatmap panel");
    assert_eq!(heatmap["targets"][0]["format"], "heatmap");
    assert!(heatmap["targets"][0]["expr"]
        .as_str()
        .is_some_and(|e| e.contains("gpudirect_dma_map_size_bytes_bucket") && e.contains("le")));
}
