//! The GPU families (serve/metrics_gpu.rs) from recorded NVML answers, checked
//! by the real `promtool check metrics`. Recorded,
//! because no NVIDIA GPU is here: gpu/testdata/h200x2-nvml.json is the 2x H200
//! host's nvidia-smi -q transcribed; the lead's GPU-host run checks live NVML.

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

use gpudirect_trace::{
    gpu::{
        facts::{Fact, RemappedRows},
        process::parse_cgroup,
        NvmlRecord,
    },
    serve::metrics::{render, ContainerLabels, DeviceLabels, Model},
};

const PROMTOOL: &str = "/usr/bin/promtool";
const H200X2: &str = include_str!("../../gpudirect-trace/src/gpu/testdata/h200x2-nvml.json");

pub fn promtool(text: &str) -> (bool, String) {
    let mut check = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = check.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn model() -> Model {
    let mut rec = NvmlRecord::from_json(H200X2).expect("recorded answers");
    // Every optional family present: retired pages and a remapping.
    for g in &mut rec.samples[1].gpus {
        g.retired_pages.single_bit = Fact::Ok(1);
        g.retired_pages.double_bit = Fact::Ok(0);
        g.retired_pages.pending = Fact::Ok(false);
        g.remapped_rows = Fact::Ok(RemappedRows {
            correctable: 1,
            uncorrectable: 0,
            pending: false,
            failure: false,
        });
    }
    let mut m = Model::default();
    let s = rec.last().expect("sample");
    m.add_gpus(&rec.status, s, &mut DeviceLabels::new(256));
    let mut containers = ContainerLabels::new(0);
    let c = parse_cgroup("0::/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope").1;
    containers.label(c.as_ref());
    m.add_container_folds(&containers);
    m
}

#[test]
fn gpu_families_from_recorded_nvml_pass_promtool() {
    let text = render(model(), false).expect("encodes");
    assert!(text.contains("gpudirect_gpu_retired_pages{"), "{text}");
    assert!(
        text.contains("gpudirect_containers_folded_total 1"),
        "{text}"
    );
    let (ok, said) = promtool(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    // promtool reads the Prometheus text format only (given OpenMetrics it
    // reports every counter's HELP, written under the name without _total,
    // as missing); the OpenMetrics form is checked for its shape.
    let om = render(model(), true).expect("encodes");
    assert!(om.ends_with("# EOF\n"));
    assert!(
        om.contains("# TYPE gpudirect_gpu_pcie_replays counter\n"),
        "{om}"
    );
}

/// The flight recorder's families pass promtool too (HELP texts, types,
/// label sets), with every reason of suppression present.
#[test]
fn flight_families_pass_promtool() {
    use gpudirect_trace::flight::FlightStats;
    let mut f = FlightStats::default();
    f.written.insert("fault".into(), 2);
    f.written.insert("xid".into(), 1);
    for reason in ["open", "spacing", "max-snapshots"] {
        f.suppressed.insert(("fault".into(), reason.into()), 1);
    }
    f.failures = 1;
    f.ring_bytes = 1 << 20;
    f.ring_seconds = 59.5;
    f.ring_dropped_events = 42;
    f.last_snapshot_unix_ns = Some(1_796_094_902_000_000_000);
    let mut m = Model::default();
    m.add_flight(&f);
    // promtool reads the Prometheus text format; OpenMetrics must end in EOF.
    let om = render(m.clone(), true).expect("encodes");
    assert!(om.ends_with("# EOF\n"), "{om}");
    let text = render(m, false).expect("encodes");
    let (ok, said) = promtool(&text);
    assert!(ok, "promtool: {said}\n{text}");
    assert!(
        text.contains("gpudirect_snapshots_written_total{trigger=\"fault\"} 2"),
        "{text}"
    );
    assert!(text.contains("reason=\"spacing\""), "{text}");
    assert!(
        text.contains("gpudirect_flight_ring_held_seconds 59"),
        "{text}"
    );
}
