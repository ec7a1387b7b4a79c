//! Driving the device through sysfs: PCI config space (bus mastering) and an mmap
//! of BAR0 through /sys/bus/pci/devices/BDF/resource0. The device stays bound to no
//! driver; the IOMMU puts it in a DMA domain with nothing mapped, so any IOVA faults.

use std::{
    fs::{File, OpenOptions},
    os::{fd::AsRawFd, unix::fs::FileExt},
    path::PathBuf,
};

use anyhow::{bail, Context, Result};

use crate::edu::{self, Bar0};

/// PCI command register: memory space + bus master + SERR.
const COMMAND: u16 = 0x0106;

pub struct Device {
    dir: PathBuf,
    _resource: File,
    map: *mut libc::c_void,
    len: usize,
    pub bar: Bar0,
}

impl Device {
    pub fn open(bdf: &str, check_id: bool) -> Result<Self> {
        let dir = PathBuf::from("/sys/bus/pci/devices").join(bdf);
        let config = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("config"))
            .with_context(|| format!("opening {}/config", dir.display()))?;
        let mut id = [0u8; 4];
        config.read_exact_at(&mut id, 0)?;
        let (vendor, device) = (
            u16::from_le_bytes([id[0], id[1]]),
            u16::from_le_bytes([id[2], id[3]]),
        );
        if check_id && (vendor, device) != (edu::VENDOR, edu::DEVICE) {
            bail!("{bdf} is {vendor:04x}:{device:04x}, not an edu device (1234:11e8)");
        }
        config
            .write_all_at(&COMMAND.to_le_bytes(), 4)
            .context("enabling memory space and bus mastering")?;

        let resource = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("resource0"))
            .with_context(|| format!("opening {}/resource0", dir.display()))?;
        let len = resource.metadata()?.len() as usize;
        if len < 0x100 {
            bail!("BAR0 of {bdf} is only {len} bytes");
        }
        // SAFETY: mapping a sysfs resource file we hold open; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                resource.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of resource0");
        }
        // SAFETY: `map` is a live mapping of `len` bytes, unmapped only in Drop.
        let bar = unsafe { Bar0::new(map.cast(), len) };
        Ok(Self {
            dir,
            _resource: resource,
            map,
            len,
            bar,
        })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `open`, exactly once.
        unsafe {
            libc::munmap(self.map, self.len);
        }
    }
}
