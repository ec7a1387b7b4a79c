//! The readers' memory bound (issues 19 and 30): whatever the bytes, the
//! trace reader, a report's replay of it (everything it keeps: tables,
//! mappings, handles, incidents, names, stacks, series, within the readers'
//! memory budget), `explain`'s line reader and `import`'s reading of
//! ftrace text never hold more than 256 MiB at once.
//! A counting global allocator measures the peak of live heap bytes while
//! one input is read; crossing the bound aborts the run with the input.
//!
//! The first byte picks how the rest is fed: as it is, or repeated up to
//! 1 MiB (streams longer than the fuzzer's inputs: fault storms, endless
//! continuation lines, damage to scan). Bombs fit in a few bytes: a zstd
//! frame may declare a huge decompressed size, an EVENTS payload a huge
//! count (seeds in corpus/memory). That a long damaged stream is not kept
//! (the 2 GB tail of issue 19) is tested where it can be long: the unit
//! test `damage_is_scanned_in_bounded_memory_and_the_next_block_found` and
//! the host tests in tests/host/hostile.rs (real binary, /dev/zero, FIFOs).
#![no_main]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    io::Read,
    sync::atomic::{AtomicUsize, Ordering},
};

use gpudirect_trace::{
    faults::explain::collect_from,
    ftrace,
    report::{replay_from, Window},
    tracefile::TraceReader,
};
use libfuzzer_sys::fuzz_target;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only
// counters are updated around it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                grew(new - l.size());
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const BOUND: usize = 256 << 20;
/// Long enough for storms, short enough for hundreds of runs a second.
const REPEAT_TO: u64 = 1 << 20;

/// `data` again and again, `total` bytes in all.
struct Cycle<'a> {
    data: &'a [u8],
    at: usize,
    left: u64,
}

impl Read for Cycle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 || self.data.is_empty() {
            return Ok(0);
        }
        let n = buf
            .len()
            .min(self.data.len() - self.at)
            .min(self.left as usize);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at = (self.at + n) % self.data.len();
        self.left -= n as u64;
        Ok(n)
    }
}

fn source(data: &[u8]) -> Box<dyn Read + '_> {
    match data.split_first() {
        Some((mode, rest)) if mode & 1 == 1 => Box::new(Cycle {
            data: rest,
            at: 0,
            left: REPEAT_TO,
        }),
        Some((_, rest)) => Box::new(rest),
        None => Box::new(&[][..]),
    }
}

/// The most heap `f` held at once above what was live before it: each
/// reader's own peak, whatever the one before it left behind.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - base
}

fuzz_target!(|data: &[u8]| {
    let trace_peak = peak_during(|| {
        if let Ok(mut reader) = TraceReader::new(source(data)) {
            while let Ok(Some(_)) = reader.next_item() {}
        }
    });
    assert!(trace_peak < BOUND, "trace reader held {trace_peak} bytes");
    // The replay `report` makes of it, with all it keeps.
    let replay_peak = peak_during(|| {
        if let Ok(reader) = TraceReader::new(source(data)) {
            let path = std::path::Path::new("fuzz-input");
            let _ = replay_from(path, reader, &Window::default());
        }
    });
    assert!(
        replay_peak < BOUND,
        "a report's replay held {replay_peak} bytes"
    );
    let explain_peak = peak_during(|| {
        let _ = collect_from(std::io::BufReader::new(source(data)));
    });
    assert!(explain_peak < BOUND, "explain held {explain_peak} bytes");
    let import_peak = peak_during(|| {
        let _ = ftrace::import(
            std::io::BufReader::new(source(data)),
            std::io::sink(),
            "fuzz-input",
        );
    });
    assert!(import_peak < BOUND, "import held {import_peak} bytes");
});
