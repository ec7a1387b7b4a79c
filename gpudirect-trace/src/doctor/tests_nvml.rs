//! NVML findings from recorded NVML answers (no NVIDIA library here): the 2x
//! H200 host's answers (gpu/testdata/h200x2-nvml.json, transcribed from its
//! nvidia-smi -q) over the host's real /sys and /proc snapshot, and those
//! answers changed to show each failure the doctor must catch.

use std::{fs, path::Path};

use super::{
    capture, diagnose, diagnose_with,
    findings::Severity,
    report::Report,
    testutil::{assert_has, find, fixture, Synth, FIXTURE, GPU0, GPU1},
    tree::Tree,
};
use crate::gpu::{
    facts::{Bar1, RemappedRows, NVML_FILE},
    identity::IndexSource,
    Fact, NvmlRecord,
};

const H200X2: &str = include_str!("../gpu/testdata/h200x2-nvml.json");

fn h200() -> NvmlRecord {
    NvmlRecord::from_json(H200X2).expect("recorded answers")
}

fn run(rec: &NvmlRecord, baseline: Option<&NvmlRecord>) -> Report {
    diagnose_with(&fixture(), rec, baseline).expect("diagnose")
}

fn ids(r: &Report, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.id.starts_with(prefix))
        .map(|f| format!("{} {}", f.id, f.device))
        .collect();
    v.sort();
    v
}

#[test]
fn recorded_nvml_h200_host_is_healthy_and_named_as_users_know_it() {
    let r = run(&h200(), None);
    let st = find(&r, "nvml.status", "host");
    assert!(st.summary.contains("driver 580.159.04") && st.summary.contains("2 GPU(s)"));
    for bdf in [GPU0, GPU1] {
        let b = find(&r, "gpu.bar1", bdf);
        assert_eq!(b.severity, Severity::Ok);
        assert_has(&b.summary, "0% used (1 MiB of 262144 MiB)");
        assert_has(&b.evidence[0], "nvmlDeviceGetBAR1MemoryInfo");
        assert_eq!(find(&r, "gpu.link", bdf).severity, Severity::Ok);
        assert_eq!(find(&r, "gpu.remapped_rows", bdf).severity, Severity::Ok);
        assert_eq!(find(&r, "gpu.ecc", bdf).severity, Severity::Ok);
        // Hopper remaps rows instead of retiring pages: an info note, no finding.
        let na = find(&r, "nvml.facts_unavailable", bdf);
        assert_eq!(na.severity, Severity::Info);
        assert_eq!(na.evidence.len(), 3, "{:?}", na.evidence);
    }
    // nvidia-smi-q.txt: Replays Since Reset 1 (06.0) and 2 (07.0), unchanged
    // over the recording's two readings one second apart.
    let rp = find(&r, "gpu.pcie_replays", GPU1);
    assert_eq!(rp.severity, Severity::Ok);
    assert_has(&rp.summary, "steady at 2 over 1 s");
    assert!(r.findings.iter().all(|f| f.id != "gpu.persistence_off"));
    assert!(r.findings.iter().all(|f| f.id != "nvml.unavailable"));
    assert_eq!(
        r.gpus[0].to_string(),
        "GPU0 NVIDIA H200 (GPU-acbd8c60..., 0000:00:06.0)"
    );
    assert_eq!(r.gpus[1].index_source, IndexSource::Nvml);
    let text = r.to_text(false);
    assert!(
        text.contains("  GPU1 NVIDIA H200 (GPU-1059d476..., 0000:00:07.0)\n"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&r.to_json().expect("json")).expect("parse");
    assert_eq!(
        v["gpus"][0]["uuid"],
        "GPU-acbd8c60-66a2-c5f7-967a-de51ca969cb3"
    );
    assert_eq!(v["gpus"][1]["bus_id"], GPU1);
    assert_eq!(v["gpus"][1]["index"], 1);
}

#[test]
fn recorded_nvml_bar1_nearly_full_and_small() {
    let mut rec = h200();
    for s in &mut rec.samples {
        s.gpus[0].bar1 = Fact::Ok(Bar1 {
            total: 256 << 20,
            used: 240 << 20,
        });
        s.gpus[1].bar1 = Fact::Ok(Bar1 {
            total: 262144 << 20,
            used: 200_000 << 20,
        });
    }
    let r = run(&rec, None);
    let b = find(&r, "gpu.bar1", GPU0);
    assert_eq!(b.severity, Severity::Problem);
    assert_has(&b.summary, "93% used (240 MiB of 256 MiB): nearly full");
    assert_has(&b.summary, "warn at 75%, problem at 90%");
    assert!(b.advice.contains("registrations"), "{}", b.advice);
    assert_eq!(find(&r, "gpu.bar1.small", GPU0).severity, Severity::Warn);
    assert_eq!(find(&r, "gpu.bar1", GPU1).severity, Severity::Warn);
    assert!(r
        .findings
        .iter()
        .all(|f| !(f.id == "gpu.bar1.small" && f.device == GPU1)));
}

#[test]
fn recorded_nvml_link_below_max_busy_is_a_problem_idle_may_be_power_saving() {
    let mut rec = h200();
    for s in &mut rec.samples {
        let busy = &mut s.gpus[0];
        busy.pcie.gen_current = Fact::Ok(4);
        busy.pcie.width_current = Fact::Ok(8);
        let idle = &mut s.gpus[1];
        idle.pcie.gen_current = Fact::Ok(1);
        idle.performance_state = Fact::Ok(8);
    }
    let r = run(&rec, None);
    let busy = find(&r, "gpu.link.below_max", GPU0);
    assert_eq!(busy.severity, Severity::Problem);
    assert_has(
        &busy.summary,
        "Gen4 x8, below its maximum Gen5 x16 in P0 (not idle)",
    );
    let idle = find(&r, "gpu.link.below_max", GPU1);
    assert_eq!(idle.severity, Severity::Info);
    assert!(idle.summary.contains("P8") && idle.summary.contains("may be power saving"));
    assert_has(&idle.evidence[0], "Gen1 x16 now, Gen5 x16 max; P8");
}

#[test]
fn recorded_nvml_replays_rising_between_readings_and_against_a_baseline() {
    let mut rec = h200();
    rec.samples[1].gpus[0].pcie.replays = Fact::Ok(4);
    let r = run(&rec, None);
    let w = find(&r, "gpu.pcie_replays", GPU0);
    assert_eq!(w.severity, Severity::Warn);
    assert_has(&w.summary, "+3 in 1 s (180.0/min, above DCGM's 8/min)");
    assert!(w.advice.contains("Xid 79"), "{}", w.advice);
    assert_eq!(w.evidence.len(), 2);
    // Against a capture taken an hour earlier with 0 and 2 replays: +1 and +0.
    let mut base = h200();
    for s in &mut base.samples {
        s.taken_unix_ms -= 3_600_000;
        s.gpus[0].pcie.replays = Fact::Ok(0);
    }
    let r = run(&h200(), Some(&base));
    let slow = find(&r, "gpu.pcie_replays", GPU0);
    assert_eq!(slow.severity, Severity::Info);
    assert_has(&slow.summary, "+1 in 3600 s (0.02/min)");
    assert_has(&slow.evidence[0], "0 at baseline");
    let steady = find(&r, "gpu.pcie_replays", GPU1);
    assert_eq!(steady.severity, Severity::Ok);
    // A counter lower than the baseline's: reset between the two.
    for s in &mut base.samples {
        s.gpus[1].pcie.replays = Fact::Ok(50);
    }
    let r = run(&h200(), Some(&base));
    assert!(find(&r, "gpu.pcie_replays", GPU1)
        .summary
        .contains("driver was reloaded"));
    // One reading only: the count, and how to tell whether it rises.
    let mut one = h200();
    one.samples.truncate(1);
    let r = run(&one, None);
    let single = find(&r, "gpu.pcie_replays", GPU1);
    assert_eq!(single.severity, Severity::Info);
    assert!(single.advice.contains("--baseline"), "{}", single.advice);
}

#[test]
fn recorded_nvml_memory_errors_persistence_and_lost_gpu() {
    let mut rec = h200();
    for s in &mut rec.samples {
        let g = &mut s.gpus[0];
        g.remapped_rows = Fact::Ok(RemappedRows {
            correctable: 1,
            uncorrectable: 2,
            pending: true,
            failure: false,
        });
        g.ecc.volatile_uncorrected = Fact::Ok(3);
        g.persistence_mode = Fact::Ok(false);
        g.retired_pages.single_bit = Fact::Ok(0);
        g.retired_pages.double_bit = Fact::Ok(1);
        g.retired_pages.pending = Fact::Ok(true);
        let g = &mut s.gpus[1];
        g.remapped_rows = Fact::Ok(RemappedRows {
            correctable: 0,
            uncorrectable: 5,
            pending: false,
            failure: true,
        });
        g.ecc.aggregate_uncorrected = Fact::Ok(5);
        s.errors
            .push("NVML device 2: GPU is lost (fallen off the bus?)".into());
    }
    let r = run(&rec, None);
    assert_eq!(find(&r, "gpu.remapped_rows", GPU0).severity, Severity::Warn);
    assert!(find(&r, "gpu.remapped_rows", GPU0).advice.contains("reset"));
    assert_eq!(
        find(&r, "gpu.remapped_rows", GPU1).severity,
        Severity::Problem
    );
    assert_eq!(find(&r, "gpu.ecc", GPU0).severity, Severity::Problem);
    assert!(find(&r, "gpu.ecc", GPU0)
        .summary
        .contains("3 uncorrectable"));
    assert_eq!(find(&r, "gpu.ecc", GPU1).severity, Severity::Warn);
    assert_eq!(find(&r, "gpu.retired_pages", GPU0).severity, Severity::Warn);
    assert_eq!(
        find(&r, "gpu.persistence_off", GPU0).severity,
        Severity::Warn
    );
    let lost = find(&r, "nvml.device_error", "host");
    assert_eq!(lost.severity, Severity::Problem);
    assert!(lost.advice.contains("Xid 79"));
    assert_eq!(r.findings[0].severity, Severity::Problem, "worst first");
}

#[test]
fn without_nvml_one_note_and_identities_from_proc() {
    // The fixture directory has no nvml.json: as on a host without NVML.
    let r = diagnose(&fixture()).expect("diagnose");
    assert_eq!(ids(&r, "nvml."), ["nvml.unavailable host"]);
    assert!(ids(&r, "gpu.").is_empty(), "{:?}", ids(&r, "gpu."));
    let n = find(&r, "nvml.unavailable", "host");
    assert!(
        n.summary
            .starts_with("NVML not available (this capture has no nvml.json"),
        "{}",
        n.summary
    );
    assert_eq!(r.gpus.len(), 2);
    assert_eq!(r.gpus[1].index_source, IndexSource::PciOrder);
    assert_eq!(
        r.gpus[1].uuid.as_deref(),
        Some("GPU-1059d476-8b2b-30f0-4f63-3d3ca6c66616")
    );
    // A host with no NVIDIA GPU at all: the same single note, saying nothing is missed.
    let s = Synth::new("");
    let r = diagnose(&s.tree()).expect("diagnose");
    assert_eq!(ids(&r, "nvml."), ["nvml.unavailable host"]);
    assert!(find(&r, "nvml.unavailable", "host")
        .summary
        .contains("nothing is missed"));
    // A damaged nvml.json is the reason, not a crash.
    s.file(&format!("/{NVML_FILE}"), "{");
    let r = diagnose(&s.tree()).expect("diagnose");
    let n = find(&r, "nvml.unavailable", "host");
    assert_has(&n.summary, "parsing recorded NVML answers");
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

fn unpack(archive: &Path, to: &Path) {
    let gz = flate2::read::GzDecoder::new(fs::File::open(archive).expect("open"));
    tar::Archive::new(gz).unpack(to).expect("unpack");
}

#[test]
fn recorded_nvml_capture_keeps_the_answers_and_root_gives_the_same_findings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = tmp.path().join("host");
    copy_tree(Path::new(FIXTURE), &host);
    let mut rec = h200();
    rec.samples[1].gpus[1].pcie.replays = Fact::Ok(40);
    fs::write(host.join(NVML_FILE), rec.to_json()).expect("write nvml.json");
    let before = diagnose(&Tree::captured(&host).expect("tree")).expect("diagnose");
    assert_eq!(
        find(&before, "gpu.pcie_replays", GPU1).severity,
        Severity::Warn
    );

    let out = tmp.path().join("snap.tar.gz");
    capture::write(
        &Tree::captured(&host).expect("tree"),
        &out,
        crate::outfile::Options::default(),
    )
    .expect("capture");
    let root = tmp.path().join("root");
    unpack(&out, &root);
    let kept = NvmlRecord::read(&root.join(NVML_FILE)).expect("nvml.json in the capture");
    assert_eq!(kept, rec);
    let after = diagnose(&Tree::captured(&root).expect("tree")).expect("diagnose");
    let all = |r: &Report| {
        let mut v: Vec<String> = r
            .findings
            .iter()
            .map(|f| serde_json::to_string(f).expect("json"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(all(&after), all(&before));
    assert_eq!(after.gpus, before.gpus);

    // The same capture as a --baseline, in each of its three forms.
    for b in [out.clone(), root.clone(), root.join(NVML_FILE)] {
        assert_eq!(
            super::baseline::read(&b).expect("baseline"),
            rec,
            "{}",
            b.display()
        );
    }
    let without = tmp.path().join("old.tar.gz");
    {
        let f = fs::File::create(&without).expect("create");
        let mut t = tar::Builder::new(flate2::write::GzEncoder::new(
            f,
            flate2::Compression::fast(),
        ));
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_mode(0o600);
        t.append_data(&mut h, "dmesg.txt", &b"x\n"[..])
            .expect("append");
        t.into_inner().expect("tar").finish().expect("gz");
    }
    let e = super::baseline::read(&without).expect_err("no nvml.json");
    assert!(e.to_string().contains("has no nvml.json"), "{e}");
}
