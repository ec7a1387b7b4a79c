//! qemu's `edu` device (docs/specs/edu.rst in qemu): register layout and DMA.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

pub const VENDOR: u16 = 0x1234;
pub const DEVICE: u16 = 0x11e8;
/// The device-internal DMA buffer (4 KiB) as seen from its DMA engine.
pub const BUFFER: u64 = 0x40000;
pub const BUFFER_LEN: u64 = 4096;
/// The device masks DMA addresses to 28 bits by default.
pub const DMA_LIMIT: u64 = 1 << 28;

const REG_ID: usize = 0x00;
const REG_SRC: usize = 0x80;
const REG_DST: usize = 0x88;
const REG_LEN: usize = 0x90;
const REG_CMD: usize = 0x98;
const CMD_START: u64 = 0x1;
const CMD_TO_RAM: u64 = 0x2;

/// DMA direction from the device's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dir {
    /// The device writes RAM at the IOVA (edu buffer → IOVA).
    Write,
    /// The device reads RAM at the IOVA (IOVA → edu buffer).
    Read,
}

/// (source, destination, command) register values for one transfer.
pub fn program(dir: Dir, iova: u64) -> (u64, u64, u64) {
    match dir {
        Dir::Write => (BUFFER, iova, CMD_START | CMD_TO_RAM),
        Dir::Read => (iova, BUFFER, CMD_START),
    }
}

pub fn check_args(iova: u64, len: u64) -> Result<()> {
    if len == 0 || len >= BUFFER_LEN {
        bail!("length must be 1..{BUFFER_LEN} (qemu rejects a full buffer)");
    }
    if iova.checked_add(len).is_none_or(|end| end > DMA_LIMIT) {
        bail!("IOVA range must lie below 2^28 (the edu's DMA mask)");
    }
    Ok(())
}

/// BAR0 of an edu device, mapped into this process.
pub struct Bar0 {
    base: *mut u8,
    len: usize,
}

impl Bar0 {
    /// # Safety
    /// `base` must point at a live mapping of the device's BAR0 of `len` bytes that
    /// outlives the returned value.
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self { base, len }
    }

    fn check(&self, off: usize, size: usize) {
        assert!(
            off + size <= self.len,
            "register offset {off:#x} outside BAR0"
        );
    }

    pub fn read32(&self, off: usize) -> u32 {
        self.check(off, 4);
        // SAFETY: in bounds of the mapping (checked), aligned register.
        unsafe { std::ptr::read_volatile(self.base.add(off) as *const u32) }
    }

    pub fn read64(&self, off: usize) -> u64 {
        self.check(off, 8);
        // SAFETY: as above; the DMA registers accept 8-byte accesses.
        unsafe { std::ptr::read_volatile(self.base.add(off) as *const u64) }
    }

    pub fn write64(&self, off: usize, v: u64) {
        self.check(off, 8);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(self.base.add(off) as *mut u64, v) }
    }

    pub fn id(&self) -> u32 {
        self.read32(REG_ID)
    }

    /// Starts one transfer and waits for the device to finish it.
    pub fn dma(&self, dir: Dir, iova: u64, len: u64, timeout: Duration) -> Result<Duration> {
        check_args(iova, len)?;
        let (src, dst, cmd) = program(dir, iova);
        if self.read64(REG_CMD) & CMD_START != 0 {
            bail!("a DMA transfer is already running");
        }
        self.write64(REG_SRC, src);
        self.write64(REG_DST, dst);
        self.write64(REG_LEN, len);
        let start = Instant::now();
        self.write64(REG_CMD, cmd);
        while self.read64(REG_CMD) & CMD_START != 0 {
            if start.elapsed() > timeout {
                bail!("DMA did not complete within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_program_the_right_registers() {
        assert_eq!(program(Dir::Write, 0x123000), (0x40000, 0x123000, 3));
        assert_eq!(program(Dir::Read, 0x123000), (0x123000, 0x40000, 1));
    }

    #[test]
    fn arguments_are_bounded() {
        assert!(check_args(0x123000, 64).is_ok());
        assert!(check_args(0x123000, 4096).is_err());
        assert!(check_args(0x123000, 0).is_err());
        assert!(check_args(DMA_LIMIT - 8, 64).is_err());
        assert!(check_args(u64::MAX - 1, 64).is_err());
    }
}
