//! Golden recordings (issue 13): real files replayed by `report` must tell
//! the story their live JSON told while they were written.

use std::path::Path;

use super::{replay, Window};

/// The story `report --json` tells of a file must be the one `record
/// --json` (the live session's final object) told while writing it: the
/// same devices, faults and incidents (and misuse checks where on).
fn same_story(recorded: &serde_json::Value, replayed: &serde_json::Value, what: &str) {
    // The fields the recording's version wrote: a golden file made before a
    // field was added (invalidation_ns, dma_api_ns, ...) cannot say it; and
    // "how" is prose that explains a number, not data.
    fn prune(v: &mut serde_json::Value, like: &serde_json::Value) {
        match (v, like) {
            (serde_json::Value::Object(o), serde_json::Value::Object(l)) => {
                o.retain(|k, _| l.contains_key(k) && k != "how" && k != "events_per_sec");
                for (k, x) in o.iter_mut() {
                    prune(x, &l[k]);
                }
            }
            (serde_json::Value::Array(a), serde_json::Value::Array(l)) => {
                for (x, y) in a.iter_mut().zip(l) {
                    prune(x, y);
                }
            }
            _ => {}
        }
    }
    let devices = |v: &serde_json::Value| {
        let mut ds = v["devices"].clone();
        prune(&mut ds, &recorded["devices"]);
        ds
    };
    assert_eq!(devices(recorded), devices(replayed), "{what}: devices");
    for k in ["faults", "incidents", "misuse"] {
        assert_eq!(recorded[k], replayed[k], "{what}: {k}");
    }
}

fn golden(dir: &str, gdt: &str, json: &str) {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(dir);
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join(json)).expect("golden JSON"))
            .expect("JSON");
    let path = d.join(gdt);
    let mut r = replay(&path, &Window::default()).expect("replay");
    let window_s = (r.last_ns.saturating_sub(r.from_ns)) as f64 / 1e9;
    let devices = r.analysis.agg.snapshot(window_s, &[]);
    let replayed = super::json(&path.display().to_string(), &r, &devices);
    same_story(&recorded, &replayed, &format!("{dir}/{gdt}"));
}

/// The one-H200 recording of session 3 (tests/fixtures/gpu-host-h200-
/// session3): pinned-memory traffic under --check --stacks and a real Xid
/// 31, whose process comes from the driver's line (pid 1130, xid31).
#[test]
fn golden_h200_recording_replays_to_its_live_json() {
    golden("gpu-host-h200-session3", "h200.gdt", "record.json");
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gpu-host-h200-session3");
    let r = replay(&d.join("h200.gdt"), &Window::default()).expect("replay");
    let xid: Vec<_> = r
        .incidents()
        .filter(|i| i.fault.as_ref().and_then(|f| f.xid) == Some(31))
        .collect();
    assert_eq!(xid.len(), 1, "one Xid 31");
    let p = xid[0].process.as_ref().expect("process");
    assert_eq!((p.pid, p.comm.as_deref()), (1130, Some("xid31")));
    let st = &r.analysis.checker.as_ref().expect("checked").stats;
    assert_eq!(
        (st.total(), st.unknown_unmaps, st.unknown_syncs),
        (0, 0, 0),
        "NVIDIA's traffic: no misuse"
    );
}

/// The VFIO DMA-after-unmap recordings from the VM scenario (6.1, 6.12).
#[test]
fn golden_vm_vfio_recordings_replay_to_their_live_json() {
    for k in ["6.1", "6.12"] {
        golden(
            "vm-vfio-after-unmap",
            &format!("vfio-after-unmap-{k}.gdt"),
            &format!("vfio-after-unmap-{k}.json"),
        );
    }
}

/// The flight recorder's snapshot of a real Xid 31 (session 3): the trigger
/// is the Xid, the ring held the seconds before it with the GPU's mappings,
/// and the report shows the Xid with the process from the driver's line
/// (pid 1191, xid31), not the task the tracepoint fired in.
#[test]
fn h200_flight_snapshot_of_a_real_xid_31() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu-host-h200-session3/flight-xid31.gdt");
    let mut r = replay(&f, &Window::default()).expect("replay");
    let snap = r.header.snapshot.clone().expect("a snapshot");
    assert_eq!(
        (snap.trigger.name.as_str(), snap.trigger.label.as_str()),
        ("xid", "xid31")
    );
    assert!(
        snap.trigger.at_ns > snap.ring_from_ns,
        "history before the trigger"
    );
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    let gpu = devices
        .iter()
        .find(|d| d.device == "0000:00:06.0")
        .expect("the GPU");
    assert!(
        gpu.maps > 1000 && gpu.maps == gpu.unmaps,
        "{} maps, {} unmaps",
        gpu.maps,
        gpu.unmaps
    );
    let text = super::text("f", &r, &devices, 11.0);
    let trigger = text
        .lines()
        .find(|l| l.contains("trigger:"))
        .expect("trigger line");
    assert!(trigger.contains("pid 1191 (xid31)"), "{trigger}");
    assert!(text.contains("568 live mapping(s)"), "{text}");
}
