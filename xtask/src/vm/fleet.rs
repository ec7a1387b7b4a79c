//! Fleet scenarios (`# gdt-vm: fleet=node-a,node-b`): one VM per name, all
//! running the same script side by side, each with a virtio-net NIC whose
//! exporter port is forwarded from a host loopback port; a real Prometheus
//! on the host scrapes them (labelled `node=NAME`), evaluates the project's
//! rules file as shipped (deploy/prometheus/gpudirect-trace.rules.yml) and
//! sends to a real Alertmanager (promstack.rs).
//!
//! The scripts and the host meet through the serial console: `fleet STEP`
//! (common.lib) prints `gdt-fleet: STEP` and waits for the host's
//! `gdt-fleet-done STEP ok|fail: WHY`. The steps:
//! - `scraped`: Prometheus has scraped this node's exporter (`up == 1`).
//! - `counted`: Prometheus holds this node's `gpudirect_iommu_faults_total`.
//!   The rules count a counter's birth only where the target was scraped 5
//!   minutes before (their header says why), so a fresh exporter's first
//!   fault alerts when the series grows: the script faults, waits for
//!   `counted`, and faults again.
//! - `done`: a barrier (every VM at `done`, or ended); then the host waits
//!   for the alert in the Alertmanager and a few evaluations more (a wrong
//!   second alert would show by then) and keeps the final alert list, while
//!   every exporter is still up and scraped.
//!
//! The check (the first name is the node the script faults): exactly one
//! active GPUDirectIOMMUFault alert, naming that node, its instance and the
//! edu's bus id; no alert for any other node; a snapshot file in the first
//! node's --snapshot-dir and none in the others' (the scripts list them as
//! `FILE NAME` lines).

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{
    boot_with,
    promstack::{self, Stack, Target},
    qemu::{self, Device},
    BootOpts, Extras, RunSpec,
};
use crate::host;

/// The exporter's port in each guest (serve's default).
pub const SERVE_PORT: u16 = 9435;
/// A fleet scenario, as its header gives it (scenario.rs reads it; this
/// module does not use scenario.rs, which calls it).
pub struct Fleet<'a> {
    pub name: &'a str,
    /// The VMs' names; the first is the one the script faults.
    pub nodes: &'a [String],
}

/// The rule whose alert the fleet scenario expects.
pub const ALERT: &str = "GPUDirectIOMMUFault";

/// A fleet run's line in vm-test's table.
pub struct Outcome {
    pub result: String,
    /// The slowest VM's boot.
    pub boot: Option<f64>,
    /// From the first VM's start to the last one's end.
    pub total: Option<f64>,
}

#[derive(Default)]
struct State {
    at_done: Vec<bool>,
    ended: Vec<bool>,
    /// `SECS NODE STEP` lines: when each step was answered.
    timeline: Vec<String>,
    scraped: usize,
    /// When the last node was first scraped.
    all_scraped: Option<Instant>,
}

struct Shared {
    stack: Stack,
    nodes: Vec<String>,
    state: Mutex<State>,
    changed: Condvar,
    /// The Alertmanager's alerts once every VM reached `done` (or an error).
    verdict: Mutex<Option<Result<Vec<Value>, String>>>,
    start: Instant,
    /// No step waits past this (the scenario's own timeout, less a margin).
    deadline: Instant,
}

impl Shared {
    fn note(&self, node: usize, what: &str) {
        let line = format!(
            "{:6.1}s {} {what}",
            self.start.elapsed().as_secs_f64(),
            self.nodes[node]
        );
        eprintln!("xtask: fleet: {line}");
        if let Ok(mut s) = self.state.lock() {
            s.timeline.push(line);
        }
    }

    fn limit(&self, want: Duration) -> Duration {
        want.min(self.deadline.saturating_duration_since(Instant::now()))
    }

    /// Answers one `gdt-fleet:` request of VM `node`.
    fn step(&self, node: usize, step: &str) -> Result<()> {
        let n = &self.nodes[node];
        match step {
            "scraped" => {
                self.stack.wait_query(
                    &format!(r#"up{{job="{}",node="{n}"}}"#, promstack::JOB),
                    self.limit(Duration::from_secs(120)),
                    |r| r.len() == 1 && r[0].1 == 1.0,
                )?;
                let mut s = self.state.lock().expect("no panics holding it");
                s.scraped += 1;
                if s.scraped == self.nodes.len() {
                    s.all_scraped = Some(Instant::now());
                }
            }
            "counted" => self.stack.wait_query(
                &format!(r#"gpudirect_iommu_faults_total{{node="{n}"}}"#),
                self.limit(Duration::from_secs(60)),
                |r| !r.is_empty() && r.iter().all(|(_, v)| *v >= 1.0),
            )?,
            "done" => {
                let mut s = self.state.lock().expect("no panics holding it");
                s.at_done[node] = true;
                self.changed.notify_all();
                while !(0..self.nodes.len()).all(|i| s.at_done[i] || s.ended[i]) {
                    let left = self.deadline.saturating_duration_since(Instant::now());
                    ensure!(!left.is_zero(), "the other VMs never reached done");
                    s = self.changed.wait_timeout(s, left).expect("lock").0;
                }
                let early: Vec<&str> = (0..self.nodes.len())
                    .filter(|&i| !s.at_done[i])
                    .map(|i| self.nodes[i].as_str())
                    .collect();
                drop(s);
                // The first VM here waits for the alert; the others wait on
                // this lock and take its answer.
                let mut v = self.verdict.lock().expect("no panics holding it");
                if v.is_none() {
                    *v = Some(if early.is_empty() {
                        self.final_alerts().map_err(|e| format!("{e:#}"))
                    } else {
                        Err(format!("{} ended before `fleet done`", early.join(", ")))
                    });
                }
            }
            other => anyhow::bail!("unknown fleet step {other:?}"),
        }
        self.note(node, step);
        Ok(())
    }

    /// Waits (up to 60 s) until an alert of [`ALERT`] is active in the
    /// Alertmanager, then 5 s more, and gives its alerts then.
    fn final_alerts(&self) -> Result<Vec<Value>> {
        let until = Instant::now() + self.limit(Duration::from_secs(60));
        loop {
            let alerts = self.stack.alerts()?;
            if alerts.iter().any(|a| is_active(a, ALERT)) {
                let node = alerts
                    .iter()
                    .find(|a| is_active(a, ALERT))
                    .and_then(|a| a["labels"]["node"].as_str())
                    .and_then(|n| self.nodes.iter().position(|x| x == n))
                    .unwrap_or(0);
                self.note(node, "alert in the Alertmanager");
                break;
            }
            if Instant::now() >= until {
                // No alert: say what Prometheus saw, for the failure message.
                let seen = |q: &str| match self.stack.query(q) {
                    Ok(r) => format!("{q} = {r:?}"),
                    Err(e) => format!("{q}: {e:#}"),
                };
                anyhow::bail!(
                    "no active {ALERT} in the Alertmanager after 60 s; {}; {}; {}; log: {}",
                    seen("gpudirect_iommu_faults_total"),
                    seen("gpudirect:iommu_faults:increase5m"),
                    seen("ALERTS"),
                    self.stack.prometheus_log()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // Five more evaluations and scrapes of every node.
        std::thread::sleep(Duration::from_secs(5));
        let alerts = self.stack.alerts()?;
        // For the log: how close the scrapes came to their timeout (TCG
        // guests on a loaded host answer slowly) and how many failed, since
        // every exporter was first scraped (before, a forward leads to a
        // guest not listening yet, and waits for the timeout).
        let since = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.all_scraped)
            .map_or(60, |t| t.elapsed().as_secs().max(2));
        let per_node = |q: String| -> String {
            self.stack.query(&q).map_or_else(
                |e| format!("{e:#}"),
                |r| {
                    r.iter()
                        .map(|(l, v)| format!("{}={v:.3}", l["node"].as_str().unwrap_or("?")))
                        .collect::<Vec<_>>()
                        .join(" ")
                },
            )
        };
        eprintln!(
            "xtask: fleet: over the last {since}s: slowest scrape (s) {}; failed scrapes {}",
            per_node(format!(
                "max by (node) (max_over_time(scrape_duration_seconds[{since}s]))"
            )),
            per_node(format!(
                "sum by (node) (count_over_time(up[{since}s]) - sum_over_time(up[{since}s]))"
            ))
        );
        Ok(alerts)
    }
}

fn is_active(alert: &Value, name: &str) -> bool {
    alert["labels"]["alertname"] == name && alert["status"]["state"] == "active"
}

/// [`run`] for vm-test's table: a missing Prometheus or Alertmanager is a
/// counted skip (never a pass), a harness error a failure.
pub fn run_or_skip(
    series: &str,
    s: &Fleet,
    opts: &BootOpts,
    spec: &RunSpec,
    binaries: &[PathBuf],
) -> Outcome {
    let o = or_skip(run(series, s, opts, spec, binaries));
    eprintln!("xtask: vm-test {} on {series}: {}", s.name, o.result);
    o
}

fn or_skip(r: Result<Outcome>) -> Outcome {
    r.unwrap_or_else(|e| Outcome {
        result: match super::missing(&e) {
            Some(why) => format!("skip ({why})"),
            None => format!("FAIL (harness: {e:#})"),
        },
        boot: None,
        total: None,
    })
}

/// Boots the fleet `s` on kernel `series` (`spec` is what a single run of
/// its script would be), answers its steps and checks the outcome.
pub fn run(
    series: &str,
    s: &Fleet,
    opts: &BootOpts,
    spec: &RunSpec,
    binaries: &[PathBuf],
) -> Result<Outcome> {
    ensure!(
        spec.devices.contains(&Device::Net),
        "{}: a fleet scenario needs devices=...,net (its exporter is scraped through it)",
        s.name
    );
    let ports = s
        .nodes
        .iter()
        .map(|_| promstack::free_port())
        .collect::<Result<Vec<_>>>()?;
    let targets: Vec<Target> = s
        .nodes
        .iter()
        .zip(&ports)
        .map(|(node, port)| Target {
            node: node.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], *port)),
        })
        .collect();
    let rules = host::repo_root().join("deploy/prometheus/gpudirect-trace.rules.yml");
    let stack = promstack::start(&rules, &targets)?;
    eprintln!(
        "xtask: fleet {}: prometheus on {}, alertmanager on {}, exporters {}",
        s.name,
        stack.prometheus_addr,
        stack.alertmanager_addr,
        targets
            .iter()
            .map(|t| format!("{}={}", t.node, t.addr))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let start = Instant::now();
    let shared = Arc::new(Shared {
        stack,
        nodes: s.nodes.to_vec(),
        state: Mutex::new(State {
            at_done: vec![false; s.nodes.len()],
            ended: vec![false; s.nodes.len()],
            ..State::default()
        }),
        changed: Condvar::new(),
        verdict: Mutex::new(None),
        start,
        deadline: start + spec.timeout.saturating_sub(Duration::from_secs(30)),
    });
    let outcomes: Vec<Result<qemu::Outcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = s
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let shared = Arc::clone(&shared);
                let port = ports[i];
                scope.spawn(move || {
                    let node_spec = RunSpec {
                        kernel: spec.kernel.clone(),
                        devices: spec.devices.clone(),
                        modules: spec.modules.clone(),
                        kmods: spec.kmods.clone(),
                        timeout: spec.timeout,
                        command: spec.command.clone(),
                        prefix: format!("[{series} {}/{node}] ", s.name),
                        // Its own initramfs: the environment differs.
                        label: format!("{}-{node}", s.name),
                    };
                    let hook = {
                        let shared = Arc::clone(&shared);
                        move |line: &str| -> Option<String> {
                            let step = line.trim().strip_prefix("gdt-fleet: ")?.trim();
                            Some(match shared.step(i, step) {
                                Ok(()) => format!("gdt-fleet-done {step} ok"),
                                Err(e) => format!("gdt-fleet-done {step} fail: {e:#}"),
                            })
                        }
                    };
                    let extras = Extras {
                        env: vec![
                            ("GDT_NODE".into(), node.clone()),
                            ("GDT_FLEET_FAULT".into(), s.nodes[0].clone()),
                        ],
                        net_forward: Some((port, SERVE_PORT)),
                        console: Some(Box::new(hook)),
                    };
                    let out = boot_with(&node_spec, opts, binaries, extras);
                    // A VM that ended without reaching `done` must not keep
                    // the others waiting there.
                    if let Ok(mut st) = shared.state.lock() {
                        st.ended[i] = true;
                        shared.changed.notify_all();
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("VM thread panicked")))
            })
            .collect()
    });
    let total = start.elapsed().as_secs_f64();
    let mut vms = Vec::new();
    for (node, out) in s.nodes.iter().zip(outcomes) {
        let out = out.with_context(|| format!("{node}'s VM"))?;
        vms.push(out);
    }
    let boot = vms
        .iter()
        .filter_map(|o| o.boot_secs)
        .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b))));
    let verdict = shared.verdict.lock().map(|v| v.clone()).unwrap_or_default();
    let result = match check(series, s.nodes, &targets, &vms, verdict) {
        Ok(()) => "pass".to_string(),
        Err(e) => format!("FAIL ({e:#})"),
    };
    if let Ok(st) = shared.state.lock() {
        eprintln!(
            "xtask: fleet {} on {series}: {total:.1}s in all; steps:\n  {}",
            s.name,
            st.timeline.join("\n  ")
        );
    }
    Ok(Outcome {
        result,
        boot,
        total: Some(total),
    })
}

/// The snapshot files a VM listed (`FILE gdt-*.gdt` lines).
fn snapshots(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| l.trim().strip_prefix("FILE "))
        .map(str::trim)
        .filter(|f| f.starts_with("gdt-") && f.ends_with(".gdt"))
        .collect()
}

/// Every VM passed, the Alertmanager holds exactly the one alert for the
/// first node, and only the first node wrote a snapshot.
pub fn check(
    series: &str,
    nodes: &[String],
    targets: &[Target],
    vms: &[qemu::Outcome],
    verdict: Option<Result<Vec<Value>, String>>,
) -> Result<()> {
    for (node, o) in nodes.iter().zip(vms) {
        if let Some(p) = &o.problem {
            anyhow::bail!("{node}: {p}");
        }
        ensure!(o.success, "{node}: exit {}", o.exit.unwrap_or(-1));
    }
    let alerts = verdict
        .context("no VM reached `fleet done`")?
        .map_err(|e| anyhow::anyhow!(e))?;
    let faulty = &nodes[0];
    let fired: Vec<&Value> = alerts.iter().filter(|a| is_active(a, ALERT)).collect();
    let names =
        |list: &[&Value]| -> Vec<String> { list.iter().map(|a| a["labels"].to_string()).collect() };
    ensure!(
        fired.len() == 1,
        "want exactly one active {ALERT}, the Alertmanager has {}: {:?}",
        fired.len(),
        names(&fired)
    );
    let l = &fired[0]["labels"];
    let want_instance = targets[0].addr.to_string();
    ensure!(
        l["node"] == faulty.as_str()
            && l["instance"] == want_instance.as_str()
            && l["device"] == Device::Edu.bdf()
            && l["source"] == "vtd",
        "{ALERT} should name node {faulty}, instance {want_instance}, device {}, source vtd: {l}",
        Device::Edu.bdf()
    );
    for node in &nodes[1..] {
        let theirs: Vec<&Value> = alerts
            .iter()
            .filter(|a| a["labels"]["node"] == node.as_str())
            .collect();
        ensure!(
            theirs.is_empty(),
            "{node} faulted nowhere but has alerts: {:?}",
            names(&theirs)
        );
    }
    let counts: Vec<usize> = vms.iter().map(|o| snapshots(&o.lines).len()).collect();
    ensure!(counts[0] >= 1, "{faulty} wrote no snapshot of its fault");
    for (node, n) in nodes.iter().zip(&counts).skip(1) {
        ensure!(*n == 0, "{node} wrote {n} snapshot(s) without a fault");
    }
    eprintln!(
        "xtask: {series}: one {ALERT}: node={} instance={} device={} source={} reason={:?}; \
         no alert for {}; snapshots {}",
        l["node"],
        l["instance"],
        l["device"],
        l["source"],
        l["reason"].as_str().unwrap_or("?"),
        nodes[1..].join(", "),
        nodes
            .iter()
            .zip(&counts)
            .map(|(n, c)| format!("{n}={c}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vm(files: &[&str]) -> qemu::Outcome {
        qemu::Outcome {
            exit: Some(0),
            success: true,
            problem: None,
            lines: files.iter().map(|f| format!("FILE {f}")).collect(),
            boot_secs: Some(5.0),
            sentinel_secs: Some(30.0),
        }
    }

    fn alert(name: &str, node: &str, instance: &str) -> Value {
        json!({
            "labels": {"alertname": name, "node": node, "instance": instance,
                       "device": "0000:00:03.0", "source": "vtd", "job": "gpudirect-trace",
                       "reason": "PTE Write access is not set"},
            "status": {"state": "active"}
        })
    }

    #[test]
    fn one_alert_for_the_faulty_node_and_its_snapshot_only() {
        let nodes = ["node-a".to_string(), "node-b".to_string()];
        let targets = [
            Target {
                node: nodes[0].clone(),
                addr: "127.0.0.1:4001".parse().expect("addr"),
            },
            Target {
                node: nodes[1].clone(),
                addr: "127.0.0.1:4002".parse().expect("addr"),
            },
        ];
        let snap = "gdt-20261203T184340Z-_none_-fault.gdt";
        let good = || vec![vm(&[snap]), vm(&[])];
        let a = alert(ALERT, "node-a", "127.0.0.1:4001");
        let b = alert(ALERT, "node-b", "127.0.0.1:4002");
        let check_with = |vms: &[qemu::Outcome], alerts: Vec<Value>| {
            check("6.12", &nodes, &targets, vms, Some(Ok(alerts)))
        };
        check_with(&good(), vec![a.clone()]).expect("the wanted outcome");
        // Resolved alerts do not count; another rule's alert for the faulty
        // node is not this check's business.
        let mut resolved = b.clone();
        resolved["status"]["state"] = json!("suppressed");
        let other = alert("GPUDirectSnapshotWritten", "node-a", "127.0.0.1:4001");
        assert!(check_with(&good(), vec![a.clone(), other]).is_ok());
        // Each of these must fail.
        let mut wrong_device = a.clone();
        wrong_device["labels"]["device"] = json!("0000:00:04.0");
        let mut wrong_instance = a.clone();
        wrong_instance["labels"]["instance"] = json!("127.0.0.1:4002");
        for alerts in [
            vec![],
            vec![b.clone()],
            vec![a.clone(), b.clone()],
            vec![
                a.clone(),
                resolved.clone(),
                alert("GPUDirectEventsLost", "node-b", "x"),
            ],
            vec![wrong_device],
            vec![wrong_instance],
        ] {
            assert!(check_with(&good(), alerts.clone()).is_err(), "{alerts:?}");
        }
        assert!(check_with(&[vm(&[]), vm(&[])], vec![a.clone()]).is_err());
        assert!(check_with(&[vm(&[snap]), vm(&[snap])], vec![a.clone()]).is_err());
        let mut failed = good();
        failed[1].success = false;
        assert!(check_with(&failed, vec![a.clone()]).is_err());
        assert!(check("6.12", &nodes, &targets, &good(), None).is_err());
        assert!(check("6.12", &nodes, &targets, &good(), Some(Err("x".into()))).is_err());
    }

    #[test]
    fn missing_servers_are_a_counted_skip_other_errors_a_failure() {
        let missing = Err(anyhow::Error::from(super::super::Missing(
            "/usr/bin/prometheus-alertmanager missing".into(),
        ))
        .context("starting the fleet's servers"));
        let r = or_skip(missing).result;
        assert!(r.starts_with("skip (") && r.contains("alertmanager"), "{r}");
        let r = or_skip(Err(anyhow::anyhow!("qemu would not start"))).result;
        assert!(r.starts_with("FAIL (harness: "), "{r}");
    }
}
