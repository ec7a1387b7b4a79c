//! deploy/prometheus's alerting and recording rules and deploy/grafana's
//! dashboard, against the exporter's metric declarations
//! (`families::metric_sections`): promtool checks the rules and runs their
//! unit tests, every alert has a case where it fires and one where it must
//! not, every metric name the rules, their tests and the dashboard use is
//! declared, and every alert's series is on the dashboard. No root needed.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use gpudirect_trace::{families::metric_sections, metrics::Type};
use serde_yaml::Value;

const RULES: &str = "gpudirect-trace.rules.yml";
const RULE_TESTS: &str = "gpudirect-trace.rules_test.yml";
const DASHBOARD: &str = "grafana/gpudirect-trace.json";

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    let p = deploy_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml(rel: &str) -> Value {
    serde_yaml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A test whose tool is missing says so on the terminal (libtest captures
/// `eprintln!`, not a direct write) and is counted there as skipped.
fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// promtool from the Debian package (`cargo xtask bootstrap` installs it),
/// else from PATH.
fn promtool() -> Option<PathBuf> {
    let debian = Path::new("/usr/bin/promtool");
    if debian.exists() {
        return Some(debian.to_owned());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("promtool"))
            .find(|p| p.exists())
    })
}

/// Every rule of the rules file: (alert or record name, rule).
fn rules() -> Vec<(String, bool, Value)> {
    let doc = yaml(&format!("prometheus/{RULES}"));
    let groups = doc["groups"].as_sequence().expect("groups");
    let mut out = Vec::new();
    for g in groups {
        for r in g["rules"].as_sequence().expect("rules") {
            let (name, alert) = match (r["alert"].as_str(), r["record"].as_str()) {
                (Some(a), None) => (a, true),
                (None, Some(rec)) => (rec, false),
                _ => panic!("a rule is an alert or a record: {r:?}"),
            };
            out.push((name.to_owned(), alert, r.clone()));
        }
    }
    out
}

/// The `gpudirect_*` metric names (and `up`) a PromQL expression or text
/// names, and the recording rules (`gpudirect:...`) it reads.
fn names_in(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut metrics = BTreeSet::new();
    let mut records = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(|c: char| word(c)) {
        let start = &rest[i..];
        let len = start.find(|c: char| !word(c)).unwrap_or(start.len());
        let token = &start[..len];
        let preceded_by_word = i > 0 && rest[..i].ends_with(['$', '.']);
        if token.starts_with("gpudirect:") {
            records.insert(token.to_owned());
        } else if token.starts_with("gpudirect_") && !preceded_by_word {
            metrics.insert(token.to_owned());
        } else if token == "up" && start[len..].starts_with('{') {
            metrics.insert("up".to_owned());
        }
        rest = &start[len..];
    }
    (metrics, records)
}

/// Every name a series may have per the declarations: counters with
/// `_total`, histograms' `_bucket`, `_sum` and `_count` (what
/// `Metric::exported()` and the encoder write).
fn declared() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in metric_sections() {
        for m in &s.metrics {
            let name = m.exported();
            if m.kind == Type::Histogram {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{suffix}"));
                }
            }
            out.insert(name);
        }
    }
    out
}

/// The metric family a series name belongs to (a histogram's `_bucket`,
/// `_sum` and `_count` are the histogram's).
fn family(name: &str, declared: &BTreeSet<String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if declared.contains(&format!("{base}_bucket")) {
                return base.to_owned();
            }
        }
    }
    name.to_owned()
}

/// Every query of the dashboard: (panel title, expression).
fn dashboard_queries() -> Vec<(String, String)> {
    let dash: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().unwrap_or("?").to_owned();
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for t in targets {
            out.push((title.clone(), t["expr"].as_str().expect("expr").to_owned()));
        }
    }
    for v in dash["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            out.push((format!("variable {}", v["name"]), q.to_owned()));
        }
    }
    for a in dash["annotations"]["list"].as_array().expect("annotations") {
        if let Some(q) = a["expr"].as_str() {
            out.push((format!("annotation {}", a["name"]), q.to_owned()));
        }
    }
    out
}

#[test]
fn promtool_checks_the_rules_and_runs_their_unit_tests() {
    let Some(promtool) = promtool() else {
        skip(
            "serve_rules::promtool_checks_the_rules_and_runs_their_unit_tests",
            "promtool is not installed (Debian package prometheus; `cargo xtask bootstrap` \
             installs it)",
        );
        return;
    };
    let dir = deploy_dir().join("prometheus");
    for args in [["check", "rules", RULES], ["test", "rules", RULE_TESTS]] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", promtool.display()));
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() {
    let tests = yaml(&format!("prometheus/{RULE_TESTS}"));
    assert_eq!(tests["rule_files"][0], RULES);
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in tests["tests"].as_sequence().expect("tests") {
        for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = a["alertname"].as_str().expect("alertname").to_owned();
            let fires = a["exp_alerts"].as_sequence().is_some_and(|s| !s.is_empty());
            let c = cases.entry(name).or_default();
            if fires {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
    }
    let alerts: Vec<String> = rules()
        .into_iter()
        .filter(|(_, alert, _)| *alert)
        .map(|(n, _, _)| n)
        .collect();
    assert!(alerts.len() >= 16, "{alerts:?}");
    for a in &alerts {
        let (fires, quiet) = cases.get(a).copied().unwrap_or_default();
        assert!(
            fires > 0 && quiet > 0,
            "{a}: {fires} firing and {quiet} quiet cases in {RULE_TESTS}"
        );
    }
    for tested in cases.keys() {
        assert!(
            alerts.contains(tested),
            "{RULE_TESTS} tests {tested}, no such alert"
        );
    }
}

/// Alerts about a node or the exporter, not a device.
const NOT_PER_DEVICE: &[&str] = &[
    "GPUDirectEventsLost",
    "GPUDirectSnapshotWritten",
    "GPUDirectSnapshotFailed",
    "GPUDirectExporterDown",
    "GPUDirectExporterAbsent",
];

#[test]
fn every_alert_has_a_runbook_and_names_node_device_and_gpu() {
    for (name, alert, r) in rules() {
        if !alert {
            continue;
        }
        let ann = &r["annotations"];
        let runbook = ann["runbook"].as_str().unwrap_or_default();
        assert!(
            runbook.len() > 40,
            "{name}: a runbook line that says what to do"
        );
        let summary = ann["summary"].as_str().unwrap_or_default();
        // The exporter-absent alert has no node to name: there is none.
        if name != "GPUDirectExporterAbsent" {
            assert!(
                summary.contains("$labels.node") && summary.contains("$labels.instance"),
                "{name}: the node (or instance) in the summary: {summary}"
            );
        }
        if !NOT_PER_DEVICE.contains(&name.as_str()) {
            assert!(
                summary.contains("$labels.device") && summary.contains("$labels.gpu"),
                "{name}: device and GPU in the summary: {summary}"
            );
        }
    }
    // Every per-device rule the alerts read joins the GPU's labels.
    for (name, alert, r) in rules() {
        let expr = r["expr"].as_str().expect("expr");
        if !alert && !name.contains("_total:") {
            assert!(
                expr.contains("group_left (gpu, uuid) gpudirect_gpu_info"),
                "{name}: joins gpu and uuid from gpudirect_gpu_info"
            );
        }
    }
}

#[test]
fn rules_their_tests_and_the_dashboard_use_only_declared_metrics() {
    let declared = declared();
    let mut used: Vec<(String, String)> = Vec::new();
    let records: BTreeSet<String> = rules()
        .into_iter()
        .filter(|(_, alert, _)| !*alert)
        .map(|(n, _, _)| n)
        .collect();
    for (name, _, r) in rules() {
        let mut text = r["expr"].as_str().expect("expr").to_owned();
        for a in r["annotations"].as_mapping().into_iter().flatten() {
            text.push('\n');
            text.push_str(a.1.as_str().unwrap_or_default());
        }
        let (metrics, reads) = names_in(&text);
        for rec in reads {
            assert!(records.contains(&rec), "{name} reads {rec}, no such record");
        }
        used.extend(metrics.into_iter().map(|m| (format!("rule {name}"), m)));
    }
    let tests = read(&format!("prometheus/{RULE_TESTS}"));
    used.extend(
        names_in(&tests)
            .0
            .into_iter()
            .map(|m| (RULE_TESTS.to_owned(), m)),
    );
    for (title, expr) in dashboard_queries() {
        used.extend(names_in(&expr).0.into_iter().map(|m| (title.clone(), m)));
    }
    assert!(used.len() > 30, "{used:?}");
    for (what, name) in &used {
        assert!(
            name == "up" || declared.contains(name),
            "{what}: {name} is not a declared metric (families::metric_sections)"
        );
    }
}

#[test]
fn every_alert_shows_its_series_on_the_dashboard() {
    let declared = declared();
    let all = rules();
    let record_exprs: BTreeMap<String, String> = all
        .iter()
        .filter(|(_, alert, _)| !*alert)
        .map(|(n, _, r)| (n.clone(), r["expr"].as_str().expect("expr").to_owned()))
        .collect();
    // The metrics an expression reads, through the records it reads.
    let sources = |expr: &str| -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut todo = vec![expr.to_owned()];
        while let Some(e) = todo.pop() {
            let (metrics, records) = names_in(&e);
            out.extend(metrics);
            todo.extend(records.iter().filter_map(|r| record_exprs.get(r).cloned()));
        }
        out
    };
    let shown: BTreeSet<String> = dashboard_queries()
        .iter()
        .flat_map(|(_, e)| names_in(e).0)
        .map(|n| family(&n, &declared))
        .collect();
    for (name, alert, r) in &all {
        if !alert {
            continue;
        }
        let series = sources(r["expr"].as_str().expect("expr"));
        assert!(!series.is_empty(), "{name} reads no metric");
        for s in series {
            let f = family(&s, &declared);
            assert!(
                shown.contains(&f),
                "alert {name}: no dashboard panel shows {f}"
            );
        }
    }
}

#[test]
fn dashboard_has_the_panels() {
    let dash: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("dashboard JSON");
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let panels = dash["panels"].as_array().expect("panels");
    let used: BTreeSet<String> = dashboard_queries()
        .iter()
        .flat_map(|(_, e)| names_in(e).0)
        .collect();
    for must in [
        "gpudirect_dma_map_bytes_total",
        "gpudirect_dma_map_size_bytes_bucket",
        "gpudirect_mappings_outstanding",
        "gpudirect_iommu_faults_total",
        "gpudirect_nvidia_xid_total",
        "gpudirect_events_lost_total",
        "gpudirect_iommu_map_latency_seconds_bucket",
        "gpudirect_gpu_info",
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
    // Panels do not overlap (a hand-edited gridPos easily does).
    let mut cells = BTreeSet::new();
    for p in panels {
        let g = &p["gridPos"];
        let n = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("gridPos.{k} of {}", p["title"]))
        };
        for x in n("x")..n("x") + n("w") {
            for y in n("y")..n("y") + n("h") {
                assert!(
                    cells.insert((x, y)),
                    "panel {} overlaps another",
                    p["title"]
                );
            }
        }
    }
}

#[test]
fn metric_names_are_found_in_promql() {
    let (m, r) = names_in(
        r#"sum by (x) (rate(gpudirect_a_total{job="gpudirect-trace"}[5m])) / gpudirect:b:rate5m
           or up{job="x"} and {{ $labels.gpudirect_not }} setup"#,
    );
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        ["gpudirect_a_total", "up"]
    );
    assert_eq!(r.into_iter().collect::<Vec<_>>(), ["gpudirect:b:rate5m"]);
}
