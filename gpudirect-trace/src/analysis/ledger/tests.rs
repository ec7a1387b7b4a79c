//! The ledger's merging and counting, on real report lines (cited where
//! they come from) arriving in either order from either channel.

use super::*;
use crate::{
    faults::{parse_line, tracepoint},
    model::incident::Category,
};

fn ledger() -> Ledger {
    Ledger::new(TraceClock::new(40_000_000_000, 0))
}

fn none(_: &Fault) -> Option<MappingState> {
    None
}

/// The H200 host's Xid 31 (driver 580, 2026-12-01): the kernel log line,
/// and the same Xid through nvidia:nvidia_dev_xid, fired in pid 181, whose
/// message is the line's text without `pid=`/`name=` (nv_report_error()
/// gets only the caller's message: faults/xid.rs).
const XID31_LINE: &str = "NVRM: Xid (PCI:0000:00:06): 31, pid=619, name=xid, channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE";
const XID31_MSG: &str = "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE";

fn xid_from_tracepoint(ts: u64, task: u32) -> Fault {
    let mut f = tracepoint::from_xid_event("0000:00:06.0", 31, XID31_MSG);
    f.timestamp_ns = Some(ts);
    if f.process.is_none() {
        f.process = Some(Process::current_task(task));
    }
    f
}

fn xid_from_log(ts: u64) -> Fault {
    let mut f = parse_line(XID31_LINE).expect("an Xid line");
    f.timestamp_ns = Some(ts);
    f
}

#[test]
fn an_xid_from_the_tracepoint_and_its_log_line_is_one_incident() {
    for tracepoint_first in [true, false] {
        let mut l = ledger();
        let (a, b) = if tracepoint_first {
            (
                l.fault(
                    xid_from_tracepoint(46_459_000_000, 181),
                    Channel::Tracepoint,
                    none,
                ),
                l.fault(xid_from_log(46_459_200_000), Channel::KernelLog, none),
            )
        } else {
            (
                l.fault(xid_from_log(46_459_000_000), Channel::KernelLog, none),
                l.fault(
                    xid_from_tracepoint(46_459_200_000, 181),
                    Channel::Tracepoint,
                    none,
                ),
            )
        };
        assert_eq!((a, b), (Outcome::New(1), Outcome::Merged(1)));
        assert_eq!(l.incidents().len(), 1);
        let i = &l.incidents()[0];
        assert_eq!(i.category, Category::Xid);
        assert_eq!(
            i.at.t_s, 6.459,
            "the earlier report's time, on the trace clock"
        );
        assert_eq!(
            i.process,
            Some(Process::reported(619, Some("xid".into()))),
            "the process the driver names, never the task the tracepoint ran in"
        );
        let f = i.fault.as_ref().expect("fault");
        assert_eq!(f.seen_in.len(), 2);
        assert!(!i.text.contains("Xid 31: Xid 31"), "{}", i.text);
        let counted: u64 = l.counts().values().sum();
        assert_eq!(counted, 1, "counted once");
    }
}

#[test]
fn reports_from_one_channel_never_merge_and_the_window_is_bounded() {
    let mut l = ledger();
    let a = l.fault(xid_from_log(41_000_000_000), Channel::KernelLog, none);
    let b = l.fault(xid_from_log(41_100_000_000), Channel::KernelLog, none);
    assert_eq!(
        (a, b),
        (Outcome::New(1), Outcome::New(2)),
        "two lines, two Xids"
    );
    // A tracepoint report merges into the first open one only.
    let c = l.fault(
        xid_from_tracepoint(41_000_100_000, 181),
        Channel::Tracepoint,
        none,
    );
    assert_eq!(c, Outcome::Merged(1));
    let d = l.fault(
        xid_from_tracepoint(41_100_100_000, 181),
        Channel::Tracepoint,
        none,
    );
    assert_eq!(d, Outcome::Merged(2));
    // Too late to be the same event.
    let late = l.fault(
        xid_from_tracepoint(41_100_000_000 + MERGE_WINDOW_NS + 1, 181),
        Channel::Tracepoint,
        none,
    );
    assert_eq!(late, Outcome::New(3));
    assert_eq!(l.counts().values().sum::<u64>(), 3);
}

#[test]
fn an_amd_vi_page_fault_and_its_tracepoint_merge_on_device_and_address() {
    // drivers/iommu/amd/iommu.c amd_iommu_report_page_fault(): report_iommu_fault()
    // (the tracepoint) first, then the log line
    // (https://bugzilla.kernel.org/show_bug.cgi?id=216865).
    let mut l = ledger();
    let mut tp =
        tracepoint::from_io_page_fault("", "0000:03:00.0", 0xfffff000, 0, "iommu:io_page_fault");
    tp.timestamp_ns = Some(42_000_000_000);
    tp.process = Some(Process::current_task(7));
    let mut log = parse_line("[   42.000100] amdgpu 0000:03:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0000 address=0xfffff000 flags=0x0000]").expect("AMD-Vi line");
    log.timestamp_ns = Some(42_000_100_000);
    assert_eq!(l.fault(tp, Channel::Tracepoint, none), Outcome::New(1));
    assert_eq!(l.fault(log, Channel::KernelLog, none), Outcome::Merged(1));
    let f = l.incidents()[0].fault.as_ref().expect("fault");
    assert_eq!(
        f.source,
        Source::AmdVi,
        "the log's decoding is the richer one"
    );
    assert_eq!(l.incidents()[0].category, Category::IommuFault);
    assert_eq!(l.counts().values().sum::<u64>(), 1);
}

#[test]
fn vtd_faults_have_no_second_channel_and_rate_limit_counts_add_up() {
    let mut l = ledger();
    let mut f = parse_line("DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x200000 [fault reason 0x05] PTE Write access is not set").expect("VT-d");
    f.timestamp_ns = Some(41_000_000_000);
    let mapping = |_: &Fault| Some(MappingState::NeverMapped { device_seen: true });
    assert_eq!(
        l.fault(f.clone(), Channel::KernelLog, mapping),
        Outcome::New(1)
    );
    assert_eq!(l.fault(f, Channel::Tracepoint, none), Outcome::New(2));
    let mut storm = parse_line("dmar_fault: 893 callbacks suppressed").expect("suppressed");
    storm.timestamp_ns = Some(41_500_000_000);
    l.fault(storm, Channel::KernelLog, none);
    assert_eq!(l.counts().values().sum::<u64>(), 2 + 893);
    assert_eq!(
        l.incidents()[0]
            .fault
            .as_ref()
            .and_then(|f| f.mapping.clone()),
        Some(MappingState::NeverMapped { device_seen: true })
    );
}

#[test]
fn old_incidents_are_evicted_and_counted() {
    let mut l = ledger();
    for i in 0..INCIDENTS_KEPT as u64 + 5 {
        l.iommu_change(
            "0000:00:04.0",
            40_000_000_000 + i,
            1,
            IommuChange::DomainAttach,
        );
    }
    assert_eq!(l.incidents().len(), INCIDENTS_KEPT);
    assert_eq!(l.evicted(), 5);
    assert_eq!(l.incidents()[0].id, 6);
    assert!(l.get(5).is_none() && l.get(6).is_some());
}
