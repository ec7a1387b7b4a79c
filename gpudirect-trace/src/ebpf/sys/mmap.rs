//! mmap() of BPF map memory: the programs' arrays made with
//! BPF_F_MMAPABLE (the loader reads the per-CPU state without a bpf() call
//! per entry) and the ring buffer's pages (`super::super::ring`).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

/// A shared mapping of `len` bytes of a BPF map's memory from `offset`,
/// unmapped on drop; the mapping keeps the map alive by itself.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: shared memory the kernel writes concurrently anyway; users read
// it through volatile or atomic accesses.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to whole pages, as mmap does) from
    /// `offset`, read-only unless `writable`.
    pub fn new(fd: BorrowedFd<'_>, len: usize, offset: usize, writable: bool) -> io::Result<Self> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh shared mapping of a file descriptor we borrow; the
        // kernel checks `len`, `offset` and `prot` against the map.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A read-only view of a BPF array created with BPF_F_MMAPABLE (5.5+): the
/// values as the programs write them, read without a syscall per entry.
pub struct MapView(Mapping);

impl MapView {
    /// Maps the first `len` bytes of the array behind `fd`.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        Mapping::new(fd, len, 0, false).map(Self)
    }

    /// Element `i` of an array of `T`s whose elements are `stride` bytes
    /// apart (the kernel rounds a value's size up to 8), copied out with a
    /// volatile read: the programs write it while we read. None past the end.
    pub fn get<T: Copy>(&self, i: usize, stride: usize) -> Option<T> {
        let at = i.checked_mul(stride)?;
        if at.checked_add(std::mem::size_of::<T>())? > self.0.bytes() || stride % 8 != 0 {
            return None;
        }
        // SAFETY: in bounds (checked above), 8-aligned (page-aligned base,
        // stride a multiple of 8, T at most 8-aligned for map values), and
        // T is plain data for which any bytes are a value.
        Some(unsafe { std::ptr::read_volatile(self.0.as_ptr().add(at).cast::<T>()) })
    }
}
