//! The in-kernel mapping table of aggregate-only mode, through the real
//! dma_map/dma_unmap programs (BPF_PROG_TEST_RUN): what it holds, what it
//! could not hold and what it could not match, counted exactly. On this
//! kernel (BPF atomics) the table is the slot form; the hash form is the
//! VM matrix's (5.10, nvme-aggregate).

use std::os::fd::{AsRawFd as _, BorrowedFd, RawFd};

use gpudirect_trace::ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions};
use gpudirect_trace_common::{
    lifetime::{slot_of, SLOT_PROBES},
    op, LIFETIME_CACHE,
};

use crate::inject::known_kernel_object;

/// `n` DMA addresses whose probe runs all start at one slot (other 256 KiB
/// windows at the same page offset, found by trying): they compete for the
/// same `SLOT_PROBES` slots.
fn colliding(dev: u64, n: usize) -> Vec<u64> {
    let base = 0x4000_0000u64;
    let first = slot_of(dev, base);
    let mut out = vec![base];
    let mut window = 1u64;
    while out.len() < n {
        let a = base + (window << 18);
        if slot_of(dev, a) == first {
            out.push(a);
        }
        window += 1;
    }
    out
}

/// An aggregate-only tracer with the in-kernel mapping table, driven through
/// its dma_map and dma_unmap programs.
struct Table {
    tracer: Tracer,
    map: RawFd,
    unmap: RawFd,
}

impl Table {
    /// `sample`: one mapping in this many timed (1: every one, exact).
    fn load(bpf_atomics: Option<bool>, sample: u32) -> Self {
        let tracer = Tracer::load(&TracerOptions {
            attach: false,
            stream: false,
            lifetimes: true,
            lifetime_sample: sample,
            bpf_atomics,
            ..Default::default()
        })
        .expect("load");
        let fd = |p| tracer.program_fd(p).expect(p).as_raw_fd();
        let (map, unmap) = (fd("dma_map"), fd("dma_unmap"));
        Self { tracer, map, unmap }
    }

    /// dma_map with `args`, on `cpu` (None: this thread's).
    fn map(&self, args: &[u64], cpu: Option<u32>) {
        self.run(self.map, args, cpu);
    }

    fn unmap(&self, args: &[u64], cpu: Option<u32>) {
        self.run(self.unmap, args, cpu);
    }

    /// Lifetimes the kernel's histograms hold, all devices.
    fn lifetimes(&mut self) -> u64 {
        self.tracer
            .kernel_latency()
            .iter()
            .filter(|(_, o, _)| *o == op::LIFETIME)
            .map(|(_, _, h)| h.count)
            .sum()
    }

    fn run(&self, fd: RawFd, args: &[u64], cpu: Option<u32>) {
        // SAFETY: self.tracer owns the fd and lives as long as self.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        run_raw_tracepoint(fd, args, cpu).expect("test run");
    }
}

#[test]
fn the_slot_table_holds_what_fits_and_counts_the_rest() {
    table_holds_what_fits_and_counts_the_rest(None);
}

/// The form a kernel without BPF atomics gets (5.10, 5.11): the hash, from
/// the object whose compare-and-exchanges were made adds, on this kernel.
#[test]
fn the_hash_form_and_the_patched_object_work_here_too() {
    table_holds_what_fits_and_counts_the_rest(Some(false));
}

fn table_holds_what_fits_and_counts_the_rest(bpf_atomics: Option<bool>) {
    crate::require_root();
    // The hash holds all of the crowd; the slot form all but one.
    let slots = bpf_atomics.is_none();
    let dev = known_kernel_object().addr;
    let mut t = Table::load(bpf_atomics, 1);

    // 100 neighbouring pages (a driver's ring) and one more mapping than a
    // probe run holds, all at one slot.
    let ring: Vec<u64> = (0..100).map(|i| 0x1000_0000 + i * 4096).collect();
    let crowd = colliding(dev, SLOT_PROBES as usize + 1);
    for &a in ring.iter().chain(&crowd) {
        t.map(&[dev, 0x1000, a, 4096, 1, 0], None);
    }
    // A second map of a mapping already held (its unmap never seen) takes
    // its own slot again: still one entry.
    t.map(&[dev, 0x1000, ring[0], 8192, 1, 0], None);

    let held = t.tracer.kernel_mappings();
    let stats = t.tracer.self_stats();
    let crowd_held = if slots {
        SLOT_PROBES as usize
    } else {
        crowd.len()
    };
    let untracked = u64::from(slots);
    assert_eq!(
        held.len(),
        ring.len() + crowd_held,
        "outstanding mappings in the table"
    );
    assert_eq!(
        stats.mappings_untracked, untracked,
        "the crowd's last, counted"
    );
    let first = held
        .iter()
        .find(|(_, k, _)| k.addr == ring[0])
        .expect("ring[0]");
    assert_eq!(first.2.size, 8192, "the newer map of the same address wins");

    // Every unmap ends a lifetime or is counted as unmatched.
    for &a in ring.iter().chain(&crowd) {
        t.unmap(&[dev, a, 4096, 1, 0], None);
    }
    t.unmap(&[dev, 0x7777_0000, 4096, 1, 0], None);
    let stats = t.tracer.self_stats();
    let lifetimes = t.lifetimes();
    assert_eq!(lifetimes, (ring.len() + crowd_held) as u64);
    assert_eq!(
        stats.lifetime_unmatched,
        untracked + 1,
        "the untracked one and a stranger"
    );
    assert!(t.tracer.kernel_mappings().is_empty(), "every slot freed");

    // Freed slots are claimed again.
    for &a in &crowd {
        t.map(&[dev, 0x1000, a, 4096, 1, 0], None);
    }
    assert_eq!(t.tracer.kernel_mappings().len(), crowd_held);
    assert_eq!(t.tracer.self_stats().mappings_untracked, 2 * untracked);
}

/// The lifetime histograms: a CPU keeps its first `LIFETIME_CACHE`
/// devices' in its own state, the rest go to the per-CPU hash; userspace
/// adds both. Six devices on CPU 0 (four cached, two in the hash), device
/// `i` ending `i + 1` lifetimes, and the first device again on the last
/// CPU: every device's count is exact. The device pointers are not
/// devices: the programs cannot name them (`dev@<address>` stand-ins),
/// which is all this needs.
#[test]
fn lifetime_histograms_are_exact_in_the_cpu_cache_and_past_it() {
    crate::require_root();
    let mut t = Table::load(None, 1);
    let devs = LIFETIME_CACHE as u64 + 2;
    let dev = |i: u64| 0xffff_8880_dead_0000 + i * 0x2000;
    let last_cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32 - 1;
    let lifetimes = |i: u64, n: u64, cpu: u32| {
        for j in 0..n {
            let addr = 0x2000_0000 + j * 4096;
            t.map(&[dev(i), 0x1000, addr, 4096, 1, 0], Some(cpu));
            t.unmap(&[dev(i), addr, 4096, 1, 0], Some(cpu));
        }
    };
    for i in 0..devs {
        lifetimes(i, i + 1, 0);
    }
    lifetimes(0, 5, last_cpu);

    let mut by_dev: Vec<(String, u64)> = t
        .tracer
        .kernel_latency()
        .into_iter()
        .filter(|(_, o, _)| *o == op::LIFETIME)
        .map(|(name, _, h)| (name.to_string(), h.count))
        .collect();
    by_dev.sort();
    let mut want: Vec<(String, u64)> = (0..devs)
        .map(|i| {
            (
                format!("dev@{:#x}", dev(i)),
                i + 1 + if i == 0 { 5 } else { 0 },
            )
        })
        .collect();
    want.sort();
    assert_eq!(by_dev, want, "lifetimes per device");
    assert_eq!(t.tracer.self_stats().lifetime_unmatched, 0);
}

/// Sampled lifetimes (the default, 1 in 16), in the slot form and in the
/// hash form (what kernels without BPF atomics get): every mapping is in
/// the table, dated, and every unmap takes its own out; only about one in
/// 16 adds a lifetime, chosen at random. 4096 mappings: 256 timed on
/// average, a standard deviation of 15.5, so 156 to 356 holds all but a
/// 6-sigma run.
#[test]
fn sampled_lifetimes_keep_every_mapping_and_time_one_in_sixteen() {
    crate::require_root();
    for (form, bpf_atomics) in [("slots", None), ("hash", Some(false))] {
        sampled_lifetimes(form, bpf_atomics);
    }
}

fn sampled_lifetimes(form: &str, bpf_atomics: Option<bool>) {
    let dev = known_kernel_object().addr;
    let mut t = Table::load(bpf_atomics, 16);
    let ring: Vec<u64> = (0..4096).map(|i| 0x3000_0000 + i * 4096).collect();
    let before = gpudirect_trace::kernel::monotonic_ns();
    for (i, &a) in ring.iter().enumerate() {
        t.map(&[dev, 0x1000, a, 4096, 1, 0], None);
        // Unmap all but the last 64: those stay outstanding.
        if i >= 64 {
            t.unmap(&[dev, ring[i - 64], 4096, 1, 0], None);
        }
    }
    let held = t.tracer.kernel_mappings();
    assert_eq!(held.len(), 64, "{form}: the last 64 mappings, each held");
    let after = gpudirect_trace::kernel::monotonic_ns();
    for (_, k, v) in &held {
        // Untimed mappings are dated in jiffies: good to a tick or two
        // (10 ms each at HZ=100).
        assert!(
            v.ts_ns + 20_000_000 >= before && v.ts_ns <= after + 20_000_000,
            "{form}: {:#x} dated {} outside [{before}, {after}]",
            k.addr,
            v.ts_ns
        );
        assert_eq!(
            v.event_kind(),
            u32::from(gpudirect_trace_common::kind::DMA_MAP),
            "{form}: the kind, without the TIMED bit"
        );
    }
    for &a in &ring[ring.len() - 64..] {
        t.unmap(&[dev, a, 4096, 1, 0], None);
    }
    assert!(
        t.tracer.kernel_mappings().is_empty(),
        "{form}: every mapping taken out"
    );
    let stats = t.tracer.self_stats();
    assert_eq!(
        stats.lifetime_unmatched, 0,
        "{form}: every unmap found its mapping"
    );
    assert_eq!(stats.mappings_untracked, 0, "{form}");
    let timed = t.lifetimes();
    assert!(
        (156..=356).contains(&timed),
        "{form}: {timed} of 4096 lifetimes timed, where 1 in 16 is 256"
    );
}
