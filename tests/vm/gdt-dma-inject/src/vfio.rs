//! Driving the device through VFIO (type1 IOMMU): the device is bound to vfio-pci,
//! BAR0 and config space are reached through the VFIO device fd, and the IOVA is
//! mapped (and unmapped) explicitly with VFIO_IOMMU_MAP_DMA / UNMAP_DMA, so iommu
//! map/unmap events come from this task and a DMA after the unmap faults.

use std::{
    ffi::CString,
    fs::{File, OpenOptions},
    os::{
        fd::{AsRawFd, FromRawFd},
        unix::fs::FileExt,
    },
    path::Path,
};

use anyhow::{bail, Context, Result};

use crate::edu::{self, Bar0};

// ioctl numbers: _IO(VFIO_TYPE = ';', VFIO_BASE + n), from include/uapi/linux/vfio.h.
const fn vfio_io(n: u64) -> u64 {
    ((b';' as u64) << 8) | (100 + n)
}
const GET_API_VERSION: u64 = vfio_io(0);
const CHECK_EXTENSION: u64 = vfio_io(1);
const SET_IOMMU: u64 = vfio_io(2);
const GROUP_GET_STATUS: u64 = vfio_io(3);
const GROUP_SET_CONTAINER: u64 = vfio_io(4);
const GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
const DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
const IOMMU_MAP_DMA: u64 = vfio_io(13);
const IOMMU_UNMAP_DMA: u64 = vfio_io(14);

const API_VERSION: i32 = 0;
const TYPE1V2_IOMMU: libc::c_ulong = 3;
const GROUP_FLAGS_VIABLE: u32 = 1;
const DMA_MAP_READ: u32 = 1;
const DMA_MAP_WRITE: u32 = 2;
const BAR0_REGION: u32 = 0;
const CONFIG_REGION: u32 = 7;

#[repr(C)]
#[derive(Default)]
struct GroupStatus {
    argsz: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct RegionInfo {
    argsz: u32,
    flags: u32,
    index: u32,
    cap_offset: u32,
    size: u64,
    offset: u64,
}

#[repr(C)]
struct DmaMap {
    argsz: u32,
    flags: u32,
    vaddr: u64,
    iova: u64,
    size: u64,
}

#[repr(C)]
struct DmaUnmap {
    argsz: u32,
    flags: u32,
    iova: u64,
    size: u64,
}

fn ioctl(fd: &File, req: u64, arg: libc::c_ulong, what: &str) -> Result<i32> {
    // SAFETY: every caller passes a request number with the argument type the
    // kernel expects for it (a value, or a pointer to a live #[repr(C)] struct).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        return Err(std::io::Error::last_os_error()).context(what.to_string());
    }
    Ok(r)
}

/// Binds `bdf` to vfio-pci (driver_override) unless it already is.
fn bind_vfio(bdf: &str) -> Result<()> {
    let dev = Path::new("/sys/bus/pci/devices").join(bdf);
    let driver = std::fs::read_link(dev.join("driver")).ok();
    if driver
        .as_ref()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n == "vfio-pci")
    {
        return Ok(());
    }
    if driver.is_some() {
        std::fs::write(dev.join("driver/unbind"), bdf).context("unbinding current driver")?;
    }
    std::fs::write(dev.join("driver_override"), "vfio-pci").context("driver_override")?;
    std::fs::write("/sys/bus/pci/drivers_probe", bdf)
        .context("binding to vfio-pci (is the vfio-pci module loaded?)")?;
    Ok(())
}

pub struct Device {
    _container: File,
    container: File,
    _group: File,
    device: File,
    bar_map: *mut libc::c_void,
    bar_len: usize,
    pub bar: Bar0,
    config_offset: u64,
}

impl Device {
    pub fn open(bdf: &str) -> Result<Self> {
        bind_vfio(bdf)?;
        let group_link = std::fs::read_link(format!("/sys/bus/pci/devices/{bdf}/iommu_group"))
            .context("device has no IOMMU group (is the IOMMU on?)")?;
        let group_nr = group_link
            .file_name()
            .context("iommu_group link")?
            .to_string_lossy()
            .into_owned();
        let rw = |p: &str| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .with_context(|| format!("opening {p}"))
        };
        let container = rw("/dev/vfio/vfio")?;
        if ioctl(&container, GET_API_VERSION, 0, "VFIO_GET_API_VERSION")? != API_VERSION {
            bail!("unexpected VFIO API version");
        }
        if ioctl(
            &container,
            CHECK_EXTENSION,
            TYPE1V2_IOMMU,
            "VFIO_CHECK_EXTENSION",
        )? == 0
        {
            bail!("VFIO type1v2 IOMMU not supported (vfio_iommu_type1 loaded?)");
        }
        let group = rw(&format!("/dev/vfio/{group_nr}"))?;
        let mut status = GroupStatus {
            argsz: std::mem::size_of::<GroupStatus>() as u32,
            ..Default::default()
        };
        ioctl(
            &group,
            GROUP_GET_STATUS,
            &mut status as *mut _ as _,
            "GROUP_GET_STATUS",
        )?;
        if status.flags & GROUP_FLAGS_VIABLE == 0 {
            bail!("IOMMU group {group_nr} is not viable (bind all its devices to vfio-pci)");
        }
        let cfd: libc::c_int = container.as_raw_fd();
        ioctl(
            &group,
            GROUP_SET_CONTAINER,
            &cfd as *const _ as _,
            "GROUP_SET_CONTAINER",
        )?;
        ioctl(&container, SET_IOMMU, TYPE1V2_IOMMU, "VFIO_SET_IOMMU")?;
        let name = CString::new(bdf)?;
        let dfd = ioctl(
            &group,
            GROUP_GET_DEVICE_FD,
            name.as_ptr() as _,
            "GET_DEVICE_FD",
        )?;
        // SAFETY: the kernel just returned this fd to us; we own it from here on.
        let device = unsafe { File::from_raw_fd(dfd) };

        let region = |index: u32| -> Result<RegionInfo> {
            let mut info = RegionInfo {
                argsz: std::mem::size_of::<RegionInfo>() as u32,
                index,
                ..Default::default()
            };
            ioctl(
                &device,
                DEVICE_GET_REGION_INFO,
                &mut info as *mut _ as _,
                "REGION_INFO",
            )?;
            Ok(info)
        };
        let bar0 = region(BAR0_REGION)?;
        let config_offset = region(CONFIG_REGION)?.offset;
        // Memory space + bus mastering.
        device.write_all_at(&0x0106u16.to_le_bytes(), config_offset + 4)?;
        let bar_len = bar0.size as usize;
        // SAFETY: mapping the BAR0 region of the device fd as VFIO describes it.
        let bar_map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bar_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                device.as_raw_fd(),
                bar0.offset as libc::off_t,
            )
        };
        if bar_map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of BAR0");
        }
        // SAFETY: live mapping of bar_len bytes, unmapped only in Drop.
        let bar = unsafe { Bar0::new(bar_map.cast(), bar_len) };
        let container2 = container.try_clone()?;
        Ok(Self {
            _container: container,
            container: container2,
            _group: group,
            device,
            bar_map,
            bar_len,
            bar,
            config_offset,
        })
    }

    /// Maps `buf` (page aligned, `len` bytes) at `iova` for device read+write.
    pub fn map(&self, buf: *mut u8, len: usize, iova: u64) -> Result<()> {
        let m = DmaMap {
            argsz: std::mem::size_of::<DmaMap>() as u32,
            flags: DMA_MAP_READ | DMA_MAP_WRITE,
            vaddr: buf as u64,
            iova,
            size: len as u64,
        };
        ioctl(
            &self.container,
            IOMMU_MAP_DMA,
            &m as *const _ as _,
            "VFIO_IOMMU_MAP_DMA",
        )?;
        Ok(())
    }

    pub fn unmap(&self, len: usize, iova: u64) -> Result<()> {
        let mut u = DmaUnmap {
            argsz: std::mem::size_of::<DmaUnmap>() as u32,
            flags: 0,
            iova,
            size: len as u64,
        };
        ioctl(
            &self.container,
            IOMMU_UNMAP_DMA,
            &mut u as *mut _ as _,
            "VFIO_IOMMU_UNMAP_DMA",
        )?;
        Ok(())
    }

    pub fn id_ok(&self) -> Result<bool> {
        let mut id = [0u8; 4];
        self.device.read_exact_at(&mut id, self.config_offset)?;
        Ok(u16::from_le_bytes([id[0], id[1]]) == edu::VENDOR
            && u16::from_le_bytes([id[2], id[3]]) == edu::DEVICE)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: unmapping the BAR mapping made in `open`, exactly once.
        unsafe {
            libc::munmap(self.bar_map, self.bar_len);
        }
    }
}

/// A page-aligned anonymous buffer for DMA.
pub struct DmaBuf {
    pub ptr: *mut u8,
    pub len: usize,
}

impl DmaBuf {
    pub fn new(len: usize, fill: u8) -> Result<Self> {
        // SAFETY: plain anonymous private mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap DMA buffer");
        }
        let ptr = p.cast::<u8>();
        // SAFETY: fresh writable mapping of `len` bytes.
        unsafe { std::ptr::write_bytes(ptr, fill, len) };
        Ok(Self { ptr, len })
    }

    /// Bytes among the first `n` that no longer hold `fill`.
    pub fn changed(&self, n: usize, fill: u8) -> usize {
        (0..n.min(self.len))
            // SAFETY: in bounds; volatile because a device wrote it.
            .filter(|&i| unsafe { std::ptr::read_volatile(self.ptr.add(i)) } != fill)
            .count()
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
