//! The event stream's reader: the consumer side of the BPF ring buffer
//! (`EVENTS`), in place of aya 0.13's `RingBuf`.
//!
//! Why our own: aya's reader tells the kernel its position after every
//! record, with a sequentially consistent store (an `xchg` on x86). The
//! kernel asks for neither. A record stays the reader's until the consumer
//! position passes it; the kernel reads the position with an acquire load
//! (kernel/bpf/ringbuf.c), so a release store is enough (libbpf's
//! ringbuf.c makes one per record). The store per record costs the
//! producers, not the reader: the position shares a cache line that every
//! reserve reads. With a reader draining beside the programs on the 2-CPU
//! CI host, streaming `dma_map` cost 74.6-78.3 ns net under this reader
//! against 82.9-102.6 under aya's; drained alone the reader's own time did
//! not change (docs/benchmarks.md, "Reader CPU per event"). Here the
//! position is told once per `PUBLISH_EVERY` bytes read and whenever the
//! reader has caught up: the producers' free space lags by at most that
//! much, and a reader that caught up leaves the ring with nothing to
//! report (its poll readiness is the producer position against the one
//! told).
//!
//! The layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position
//! (the only page userspace may write); page 1 the producer position; the
//! data pages follow, mapped twice in a row so that a record that wraps
//! around the end reads as one slice. Each record starts with an 8-byte
//! header: its length, with a busy bit (still being written) and a discard
//! bit; records are 8-byte aligned.

use std::{
    os::fd::{AsFd as _, AsRawFd, RawFd},
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use anyhow::Context as _;
use aya::maps::MapData;

use super::sys::Mapping;

/// `BPF_RINGBUF_HDR_SZ`.
const HEADER: usize = 8;
/// `BPF_RINGBUF_BUSY_BIT`: the producer has not submitted the record yet.
const BUSY: u32 = 1 << 31;
/// `BPF_RINGBUF_DISCARD_BIT`: the producer discarded it; skipped.
const DISCARD: u32 = 1 << 30;
/// Bytes read between two stores of the consumer position while the reader
/// is behind (a quarter of the ring at most). 64 KiB is ~900 records; the
/// default ring is 8 MiB.
const PUBLISH_EVERY: usize = 64 << 10;

/// The reader of one BPF ring buffer map.
pub struct EventRing {
    /// Owns the map's fd: the AsyncFd waits on it.
    map: MapData,
    /// Page 0: the consumer position.
    consumer: Mapping,
    /// Page 1 (the producer position) and the data pages, twice.
    producer: Mapping,
    /// Where the data starts in `producer`.
    data_at: usize,
    /// The data's size less one (a power of two).
    mask: usize,
    /// The next record's position.
    pos: usize,
    /// The position last stored for the kernel.
    told: usize,
    /// The producer position last read (records before it are complete or
    /// busy).
    produced: usize,
    publish_every: usize,
}

impl EventRing {
    /// Maps the ring buffer `map` and starts reading where its consumer
    /// position stands.
    pub fn new(map: MapData) -> anyhow::Result<Self> {
        let size = map
            .info()
            .context("reading the ring buffer's size")?
            .max_entries() as usize;
        anyhow::ensure!(
            size.is_power_of_two() && size >= HEADER * 2,
            "the ring buffer's size ({size} bytes) is not a power of two"
        );
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .context("the page size is unknown")?;
        let fd = map.fd().as_fd();
        let consumer =
            Mapping::new(fd, page, 0, true).context("mapping the ring buffer's consumer page")?;
        let producer = Mapping::new(fd, page + 2 * size, page, false)
            .context("mapping the ring buffer's data pages")?;
        let mut ring = Self {
            map,
            consumer,
            producer,
            data_at: page,
            mask: size - 1,
            pos: 0,
            told: 0,
            produced: 0,
            publish_every: PUBLISH_EVERY.min(size / 4),
        };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        (ring.told, ring.produced) = (ring.pos, ring.pos);
        Ok(ring)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: page 0 of the map starts with the kernel's `unsigned long
        // consumer_pos`, page-aligned, mapped writable for as long as self.
        unsafe { &*self.consumer.as_ptr().cast::<AtomicUsize>() }
    }

    fn producer_pos(&self) -> &AtomicUsize {
        // SAFETY: as above, the producer page's `producer_pos` (read-only).
        unsafe { &*self.producer.as_ptr().cast::<AtomicUsize>() }
    }

    /// The next record, or None once the reader has caught up with the
    /// producers (or reached a record still being written). The record's
    /// bytes stay valid while it is borrowed: the kernel may reuse them
    /// only once the consumer position passes them, which only a later
    /// call (it needs `&mut self`) tells it.
    pub fn next_record(&mut self) -> Option<&[u8]> {
        if self.pos.wrapping_sub(self.told) >= self.publish_every {
            self.publish();
        }
        loop {
            if self.pos == self.produced {
                self.produced = self.producer_pos().load(Ordering::Acquire);
                if self.pos == self.produced {
                    self.publish();
                    return None;
                }
            }
            let at = self.data_at + (self.pos & self.mask);
            // SAFETY: `at` is 8-aligned (positions are) and inside the first
            // copy of the data pages; the header is a u32 the producer
            // updates atomically (xchg / smp_store_release).
            let header = unsafe { &*self.producer.as_ptr().add(at).cast::<AtomicU32>() }
                .load(Ordering::Acquire);
            if header & BUSY != 0 {
                self.publish();
                return None;
            }
            let len = (header & !(BUSY | DISCARD)) as usize;
            if len > self.mask + 1 - HEADER {
                // The kernel never writes a record larger than the ring;
                // stop rather than read past the second copy.
                self.publish();
                return None;
            }
            self.pos = self.pos.wrapping_add((len + HEADER + 7) & !7);
            if header & DISCARD != 0 {
                continue;
            }
            // SAFETY: `at + HEADER + len` is at most data_at + 2 * size (the
            // offset is below size, the record at most size): inside the
            // mapping, the second copy standing for the wrap. The acquire
            // load of the header made the producer's writes visible.
            return Some(unsafe {
                std::slice::from_raw_parts(self.producer.as_ptr().add(at + HEADER), len)
            });
        }
    }

    /// The map back, for a benchmark that reads it with aya's reader.
    #[cfg(any(test, feature = "test-support"))]
    pub fn into_map(self) -> MapData {
        self.map
    }

    /// Tells the kernel that every record before `pos` is read.
    fn publish(&mut self) {
        if self.told != self.pos {
            self.consumer_pos().store(self.pos, Ordering::Release);
            self.told = self.pos;
        }
    }
}

impl AsRawFd for EventRing {
    fn as_raw_fd(&self) -> RawFd {
        self.map.fd().as_fd().as_raw_fd()
    }
}
