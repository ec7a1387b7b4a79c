//! mmap() of a BPF array made with BPF_F_MMAPABLE: the loader reads the
//! programs' per-CPU state without a bpf() call per entry.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

/// A read-only view of a BPF array created with BPF_F_MMAPABLE (5.5+): the
/// values as the programs write them, read without a syscall per entry.
/// Unmapped on drop; the mapping keeps the map alive by itself.
pub struct MapView {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a read-only shared mapping; reads are volatile copies.
unsafe impl Send for MapView {}

impl MapView {
    /// Maps the first `len` bytes of the array behind `fd` (`len` is
    /// rounded up to whole pages, as mmap does).
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared read-only mapping of a file descriptor we
        // borrow; the kernel checks `len` against the array's size.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
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

    /// Element `i` of an array of `T`s whose elements are `stride` bytes
    /// apart (the kernel rounds a value's size up to 8), copied out with a
    /// volatile read: the programs write it while we read. None past the end.
    pub fn get<T: Copy>(&self, i: usize, stride: usize) -> Option<T> {
        let at = i.checked_mul(stride)?;
        if at.checked_add(std::mem::size_of::<T>())? > self.len || stride % 8 != 0 {
            return None;
        }
        // SAFETY: in bounds (checked above), 8-aligned (page-aligned base,
        // stride a multiple of 8, T at most 8-aligned for map values), and
        // T is plain data for which any bytes are a value.
        Some(unsafe { std::ptr::read_volatile(self.ptr.add(at).cast::<T>()) })
    }
}

impl Drop for MapView {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
