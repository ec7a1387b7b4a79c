//! Host integration tests: need root and a BPF-capable kernel (CI runs them
//! as root on the project machine's 6.18 kernel).
//!
//! No device does DMA on that machine, so events are injected through the
//! REAL loaded programs with BPF_PROG_TEST_RUN on the raw tracepoints: the
//! arguments are synthetic, but verifier, maps, ring buffer, decoding and
//! aggregation are the production ones. Where a program needs a
//! `struct device *`, the test passes a real kernel object whose first word
//! points at a string it can learn from userspace (see
//! `inject::known_kernel_object`): the device name the programs read must be
//! exactly that string.

mod bench;
mod bench_concurrent;
mod bench_lossless;
mod bench_parts;
mod bench_reader;
mod bench_ring;
mod bench_sg;
mod counters;
mod crafted;
mod deploy;
mod device_names;
mod fleet_report;
mod flight;
mod gpu_metrics;
mod hostile;
mod hostile_bounds;
mod hostile_budget;
mod hostile_capture;
mod hostile_cli;
mod hostile_damage;
mod hostile_outputs;
mod hostile_snapdir;
mod import;
mod inject;
mod inval;
mod lifetimes;
mod misuse;
mod pcie;
mod program_log;
mod rare_wakeups;
mod record;
mod ring;
mod serve;
mod serve_rules;
mod serve_tls;
mod sg_walk;
mod stack_depth;
mod test_support;

use gpudirect_trace::{
    ebpf::{Status, Tracer, TracerOptions},
    families::{hooks, tracepoints},
    kernel,
    model::incident::Category,
};
use gpudirect_trace_common::{kind, level, TaskState};
use inject::{load_aggregate_only, load_unattached, Injector};

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "host integration tests load BPF programs: run them as root (cargo xtask test does)"
    );
}

#[test]
fn every_program_passes_the_verifier() {
    require_root();
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        ..Default::default()
    })
    .expect("load the eBPF object");
    for p in &tracer.probes {
        // Timing hooks whose functions this kernel lacks cannot be verified
        // against them; every other program must pass the verifier.
        // Nor is the interrupt-context read a program: its row says whether
        // kallsyms had the addresses.
        if p.status == Status::Unavailable
            && (p.name.starts_with("time:")
                || p.name.starts_with("learn:")
                || p.name == gpudirect_trace::ebpf::task_context::NAME)
        {
            continue;
        }
        assert_eq!(p.status, Status::Loaded, "{}: {}", p.name, p.reason);
    }
    let timed = tracer
        .probes
        .iter()
        .filter(|p| p.status == Status::Loaded && p.kind == "kprobe/kretprobe");
    assert!(
        timed.count() >= 6,
        "the timing programs (kprobe variants) pass the verifier"
    );
    assert_eq!(
        tracer.probes.len(),
        tracepoints().len() + hooks().count() + 1 // the interrupt-context row (ebpf::task_context)
    );
}

/// A kernel that refuses the typed ksym of the preempt count (forced here:
/// BTF id 1 is a type, not a per-CPU variable; "pseudo btf_id 1 in ldimm64
/// isn't KIND_VAR") still gets every DMA-API program: the loader loads the
/// object again without it, and the interrupt-context row says why.
#[test]
fn a_refused_preempt_count_ksym_falls_back_forced_bad_btf_id() {
    use gpudirect_trace::ebpf::task_context::{Ksym, KsymUse, NAME};
    require_root();
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        preempt_count_ksym: KsymUse::Forced(Ksym {
            btf_id: 1,
            member: 0,
        }),
        ..Default::default()
    })
    .expect("load the eBPF object");
    let failed = tracer.failed();
    assert!(
        failed.is_empty(),
        "probes failed after the fallback: {failed:?}"
    );
    let row = tracer
        .probes
        .iter()
        .find(|p| p.name == NAME)
        .expect("the interrupt-context row");
    let refused = row
        .reason
        .split_once("the kernel refused the typed ksym (")
        .and_then(|(_, r)| r.split_once(" probe(s) failed with it"))
        .and_then(|(n, _)| n.parse::<usize>().ok())
        .unwrap_or_else(|| panic!("the row tells no refusal: {}", row.reason));
    assert!(
        refused >= 10,
        "the first load failed {refused} probe(s): {}",
        row.reason
    );
}

#[test]
fn probe_table_matches_what_the_kernel_offers() {
    require_root();
    let out = hostile::run_ok(&["probes", "--json"]);
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("probes --json is JSON");
    let all = doc["probes"].as_array().expect("probes array");
    assert_eq!(
        all.len(),
        tracepoints().len() + hooks().count() + 1 // the interrupt-context row (ebpf::task_context)
    );
    let probes: Vec<_> = all
        .iter()
        .filter(|p| p["kind"] == "raw_tracepoint")
        .collect();
    assert_eq!(probes.len(), tracepoints().len());
    let tracefs = kernel::ensure_tracefs().expect("tracefs available as root");
    for p in &probes {
        let name = p["name"].as_str().expect("name");
        let status = p["status"].as_str().expect("status");
        let (group, event) = name.split_once(':').expect("group:event");
        let exists = tracefs.join("events").join(group).join(event).is_dir();
        assert_ne!(status, "failed", "{name}: {}", p["reason"]);
        if exists {
            assert_eq!(
                status, "attached",
                "{name} exists in tracefs: {}",
                p["reason"]
            );
        } else {
            assert_eq!(
                status, "unavailable",
                "{name} is not in tracefs: {}",
                p["reason"]
            );
            assert!(!p["reason"].as_str().unwrap_or("").is_empty());
        }
    }
    // The iommu:* tracepoints exist on every kernel this project supports.
    for must in ["iommu:map", "iommu:unmap", "iommu:io_page_fault"] {
        let p = probes.iter().find(|p| p["name"] == must).expect(must);
        assert_eq!(p["status"], "attached", "{must}: {}", p["reason"]);
    }
}

#[test]
fn injected_dma_events_are_decoded_attributed_and_aggregated() {
    require_root();
    let mut inj = Injector::new(load_unattached(8 << 20));
    let dev = inj.device.addr;
    // dma_map_phys(dev, phys, dma_addr, size, dir, attrs): 3 maps from device
    // (dir 2), 1 to device (dir 1); 2 unmaps.
    for i in 0..3u64 {
        inj.run(
            "dma_map",
            &[
                dev,
                0x1_0000_0000 + i * 0x1000,
                0xfeed_0000 + i * 0x1000,
                4096,
                2,
                0,
            ],
        );
    }
    inj.run("dma_map", &[dev, 0x2_0000_0000, 0xbeef_0000, 65536, 1, 0]);
    for i in 0..2u64 {
        inj.run("dma_unmap", &[dev, 0xfeed_0000 + i * 0x1000, 4096, 2, 0]);
    }
    // swiotlb_bounced(dev, dev_addr, size)
    inj.run("swiotlb_bounced", &[dev, 0xbeef_0000, 2048]);
    // iommu:map(iova, paddr, size) carries no device.
    inj.run("iommu_map", &[0xffff_f000, 0x3_0000_0000, 8192]);

    let received = inj.drain_all();
    assert_eq!(
        received, 8,
        "every injected event comes out of the ring buffer"
    );
    let snap = inj.snapshot();
    let name = inj.device.name.clone();
    let platform = snap
        .iter()
        .find(|d| d.device == name)
        .unwrap_or_else(|| panic!("events attributed to {name:?}; got {snap:?}"));
    assert_eq!((platform.maps, platform.unmaps), (4, 2));
    assert_eq!(platform.bytes_mapped, 3 * 4096 + 65536);
    assert_eq!(
        (platform.bytes_from_device, platform.bytes_to_device),
        (3 * 4096, 65536)
    );
    assert_eq!(
        (platform.outstanding_mappings, platform.outstanding_bytes),
        (2, 4096 + 65536)
    );
    assert_eq!(
        (
            platform.families.swiotlb.swiotlb_bounces,
            platform.families.swiotlb.swiotlb_bounced_bytes
        ),
        (1, 2048)
    );
    assert_eq!(platform.map_size.max, 65536);
    let iommu = snap
        .iter()
        .find(|d| d.device == gpudirect_trace::aggregate::UNATTRIBUTED)
        .expect("iommu:map without a device is reported as unattributed");
    assert_eq!(
        (iommu.level, iommu.maps, iommu.bytes_mapped),
        ("iommu", 1, 8192)
    );

    let stats = inj.tracer.self_stats();
    assert_eq!(stats.hits[kind::DMA_MAP as usize], 4);
    assert_eq!(stats.hits[kind::DMA_UNMAP as usize], 2);
    assert_eq!(stats.lost_events, 0);
}

#[test]
fn aggregate_only_mode_counts_in_kernel_without_streaming() {
    require_root();
    let tracer = load_aggregate_only();
    let mut inj = Injector::new(tracer);
    let dev = inj.device.addr;
    for i in 0..50u64 {
        inj.run(
            "dma_map",
            &[dev, 0x1000 * i, 0x10_0000 + 0x1000 * i, 4096, 1, 0],
        );
    }
    assert_eq!(
        inj.drain_all(),
        0,
        "hot events are not streamed in aggregate-only mode"
    );
    let platform = inj.device_row();
    assert_eq!(
        (
            platform.maps,
            platform.bytes_mapped,
            platform.bytes_to_device
        ),
        (50, 50 * 4096, 50 * 4096)
    );
}

#[test]
fn faults_and_xids_are_streamed_with_device_and_message() {
    let mut inj = Injector::as_root();
    let dev = inj.device.addr;
    // iommu:io_page_fault(dev, iova, flags=IOMMU_FAULT_WRITE)
    inj.run("iommu_io_page_fault", &[dev, 0x123000, 1]);
    // nvidia:nvidia_dev_xid(struct pci_dev *, NvU32 xid, const char *msg):
    // a pci_dev pointer such that its embedded device is the stand-in, and a
    // kernel string as the message text.
    let pci_dev = dev - u64::from(inj.tracer.offsets.pci_dev_device);
    inj.run("nvidia_dev_xid", &[pci_dev, 79, inj.device.string_addr]);
    // ras:aer_event(const char *dev_name, u32 status, u8 severity, u8
    // tlp_header_valid, struct pcie_tlp_log *): the device is named by a
    // string; status bit 0 = Receiver Error, corrected; no header.
    inj.run("ras_aer_event", &[inj.device.string_addr, 0x1, 2, 0, 0]);
    assert_eq!(inj.drain_all(), 3);
    let incidents: Vec<_> = inj.analysis.ledger.incidents().iter().collect();
    assert_eq!(incidents.len(), 3, "{incidents:#?}");
    let fault = incidents
        .iter()
        .find(|n| n.category == Category::IommuFault)
        .expect("fault");
    assert_eq!(fault.device, inj.device.name);
    assert_eq!(fault.address, Some(0x123000));
    assert!(fault.text.contains("write"), "{}", fault.text);
    let xid = incidents
        .iter()
        .find(|n| n.category == Category::Xid)
        .expect("xid");
    assert_eq!(xid.device, inj.device.name);
    assert!(
        xid.text.starts_with("Xid 79: "),
        "the Xid's number and the driver's message: {}",
        xid.text
    );
    let aer = incidents
        .iter()
        .find(|n| n.category == Category::Aer)
        .expect("aer");
    assert_eq!(
        aer.device, inj.device.name,
        "named from the tracepoint's string"
    );
    let aer_fault = aer.fault.as_ref().expect("AER fault");
    assert!(
        aer.text.contains("corrected") && aer_fault.reason_code == Some(1),
        "{}",
        aer.text
    );
    let d = inj.snapshot();
    let dev = d
        .iter()
        .find(|d| d.device == inj.device.name)
        .expect("device");
    assert_eq!(
        (dev.faults, dev.xids),
        (2, 1),
        "IOMMU + AER faults, one Xid"
    );
    // The PCIe health family counts the tracepoint's report by severity and
    // status bit on the device it names.
    let aer = dev.families.pcie.pcie_aer.as_ref().expect("AER counted");
    assert_eq!((aer.corrected, aer.nonfatal, aer.fatal), (1, 0, 0));
    assert_eq!(aer.errors.get("corrected:RxErr"), Some(&1), "{aer:?}");
}

#[test]
fn ring_overflow_loss_is_counted_exactly() {
    require_root();
    // The smallest ring buffer (one page): most of the burst cannot fit.
    let mut inj = Injector::new(load_unattached(4096));
    let dev = inj.device.addr;
    let injected = 1000u64;
    for i in 0..injected {
        inj.run("dma_map", &[dev, i << 12, i << 12, 4096, 0, 0]);
    }
    let received = inj.drain_all() as u64;
    let lost = inj.tracer.self_stats().lost_events;
    assert!(
        lost > 0,
        "a 4 KiB ring must overflow with {injected} events"
    );
    assert_eq!(
        received + lost,
        injected,
        "received {received} + lost {lost}"
    );
    // The in-kernel counters saw every event regardless.
    let platform = inj.device_row();
    assert_eq!(platform.maps, injected);
}

#[test]
fn bad_flags_give_usage_and_exit_2() {
    let out = hostile::bin()
        .args(["live", "--interval", "soon"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--interval") && !err.contains("panicked"),
        "{err}"
    );
}

/// The timing hooks' entry state of one call at `level` on device `dev`.
fn one_call(level: usize, dev: u64) -> TaskState {
    let mut s = TaskState::default();
    s.ts[level][0] = 1;
    s.dev[level][0] = dev;
    s
}

/// Makes `state` the calls in flight on thread `tid`, as the hooks would.
fn in_flight(inj: &mut Injector, tid: u32, state: &TaskState) {
    inj.tracer.set_task_state(tid, state).expect("write TASKS");
}

#[test]
fn iommu_events_take_the_device_of_the_call_in_flight_on_their_task() {
    let mut inj = Injector::as_root();
    let dev = inj.device.addr;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    // As if dma_map_page_attrs(dev, ...) had been entered on this thread (the
    // timing hooks' entry state; fentry/kprobes do not exist on the CI host):
    // the iommu:map it causes must carry dev.
    in_flight(&mut inj, tid, &one_call(level::DMA_API, dev));
    inj.run("iommu_map", &[0xfff0_0000, 0x5000_0000, 4096]);
    // An interrupt handler's DMA-API call nested on top of the task's own
    // (nesting slot 1): the IOMMU work is the handler's, so its device wins
    // over the interrupted call's (a bogus device here: it must not show).
    let mut nested = TaskState::default();
    nested.ts[level::DMA_API] = [1, 2];
    nested.dev[level::DMA_API] = [0xdead_0000, dev];
    in_flight(&mut inj, tid, &nested);
    inj.run("iommu_map", &[0xfff1_0000, 0x5100_0000, 4096]);
    // As if VFIO's iommu_unmap on a domain whose device is known were in flight.
    in_flight(&mut inj, tid, &one_call(level::IOMMU, dev));
    inj.run("iommu_unmap", &[0xfff0_0000, 4096, 4096]);
    // Nothing in flight: stays unattributed, never guessed.
    in_flight(&mut inj, tid, &TaskState::default());
    inj.run("iommu_map", &[0xeee0_0000, 0x6000_0000, 8192]);

    assert_eq!(inj.drain_all(), 4);
    let snap = inj.snapshot();
    let d = snap
        .iter()
        .find(|d| d.device == inj.device.name)
        .unwrap_or_else(|| panic!("attributed row; got {snap:?}"));
    assert_eq!((d.iommu.maps, d.iommu.unmaps), (2, 1));
    assert_eq!((d.iommu_via_dma_api, d.iommu_via_domain), (2, 1));
    assert!(
        !snap.iter().any(|d| d.device.contains("dead")),
        "the interrupted call's device took the handler's event: {snap:?}"
    );
    assert_eq!(d.iommu.lifetime_ns.count, 1, "map->unmap lifetime recorded");
    assert_eq!(
        d.iommu.outstanding_mappings, 1,
        "the nested map is not unmapped"
    );
    let un = snap
        .iter()
        .find(|d| d.device == gpudirect_trace::aggregate::UNATTRIBUTED)
        .expect("unattributed row");
    assert_eq!((un.iommu.maps, un.iommu.bytes_mapped), (1, 8192));
}

/// /dev/kmsg (root can read it): a snapshot ends by itself at EAGAIN, and
/// the follower's poll returns instead of blocking.
#[test]
fn kmsg_is_read_without_blocking() {
    require_root();
    let (lines, _lost) =
        gpudirect_trace::faults::kmsg::read_kmsg_snapshot().expect("read /dev/kmsg as root");
    assert!(
        lines.iter().all(|l| l.contains(';')),
        "records keep their header"
    );
    let mut f = gpudirect_trace::faults::KmsgFollower::open().expect("follow /dev/kmsg");
    f.poll().expect("poll returns at EAGAIN");
}

/// The running kernel's BTF (every kernel this suite runs on has it: the
/// CI host and the VMs): struct device starts with its kobject, whose name
/// comes first, and iommu:map's prototype has the 3 arguments the program
/// reads. (Was a lib test that passed silently without BTF.)
#[test]
fn running_kernel_btf_gives_the_offsets() {
    let btf = gpudirect_trace::btf::Btf::vmlinux()
        .expect("the host tests need /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)");
    assert_eq!(btf.member_offset("device", "kobj"), Some(0));
    assert_eq!(btf.member_offset("kobject", "name"), Some(0));
    assert_eq!(btf.tracepoint_args("map"), Some(3), "iommu:map has 3 args");
}
