//! PCI devices' uevents (NETLINK_KOBJECT_UEVENT): driver bind and unbind
//! (the misuse checks' leak check runs when a driver lets its device go;
//! the kernel sends `unbind` after the driver's remove() returned,
//! drivers/base/dd.c __device_release_driver, so every unmap remove() made
//! is already in the ring when the uevent arrives), and devices added to
//! and removed from the bus (the PCIe health family's presence, on every
//! kernel).

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use tokio::io::unix::AsyncFd;

use crate::model::pci::{DriverChange, PciUevent, Presence};

/// The kernel's multicast group of uevents (lib/kobject_uevent.c).
const KERNEL_GROUP: u32 = 1;
/// The largest uevent (UEVENT_BUFFER_SIZE is 2048) with room to spare.
const BUF: usize = 8192;

pub enum Uevents {
    /// Opened, not yet registered with the runtime (the session opens it
    /// before the driver's runtime exists).
    Opened(Option<OwnedFd>),
    Async(AsyncFd<OwnedFd>),
}

impl Uevents {
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2); the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_KOBJECT_UEVENT,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = KERNEL_GROUP;
        // SAFETY: `addr` is a valid sockaddr_nl of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Uevents::Opened(Some(fd)))
    }

    fn registered(&mut self) -> io::Result<&AsyncFd<OwnedFd>> {
        if let Uevents::Opened(fd) = self {
            let fd = fd
                .take()
                .ok_or_else(|| io::Error::other("uevent socket lost"))?;
            // SAFETY: the AsyncFd owns the socket from here on.
            let a = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            *self = Uevents::Async(a);
        }
        match self {
            Uevents::Async(a) => Ok(a),
            Uevents::Opened(_) => Err(io::Error::other("uevent socket not registered")),
        }
    }

    /// The PCI uevents waiting now, without waiting (the end of a session:
    /// an unbind just before the stop still counts).
    pub fn pending(&self) -> Vec<PciUevent> {
        let fd = match self {
            Uevents::Opened(Some(fd)) => fd.as_raw_fd(),
            Uevents::Opened(None) => return Vec::new(),
            Uevents::Async(a) => a.get_ref().as_raw_fd(),
        };
        let mut out = Vec::new();
        let mut buf = vec![0u8; BUF];
        loop {
            // SAFETY: `buf` is valid for BUF bytes.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), BUF, libc::MSG_DONTWAIT) };
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    continue;
                }
                return out;
            }
            if let Some(c) = parse(&buf[..n as usize], crate::kernel::monotonic_ns()) {
                out.push(c);
            }
        }
    }

    /// Waits for uevents; returns the PCI ones among them, stamped with
    /// CLOCK_MONOTONIC at arrival.
    pub async fn next(&mut self) -> io::Result<Vec<PciUevent>> {
        let fd = self.registered()?;
        loop {
            let mut guard = fd.readable().await?;
            let mut out = Vec::new();
            let mut buf = vec![0u8; BUF];
            loop {
                // SAFETY: `buf` is valid for BUF bytes.
                let n = unsafe {
                    libc::recv(
                        guard.get_inner().as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        BUF,
                        libc::MSG_DONTWAIT,
                    )
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::WouldBlock {
                        guard.clear_ready();
                        break;
                    }
                    // ENOBUFS: uevents were dropped for us; later ones
                    // still come.
                    if e.raw_os_error() == Some(libc::ENOBUFS) {
                        continue;
                    }
                    return Err(e);
                }
                if let Some(c) = parse(&buf[..n as usize], crate::kernel::monotonic_ns()) {
                    out.push(c);
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}

/// One kernel uevent (`ACTION@DEVPATH\0KEY=VALUE\0...`), if it is a PCI
/// device's driver binding or unbinding, or its arrival or departure.
pub fn parse(msg: &[u8], ts_ns: u64) -> Option<PciUevent> {
    let mut fields = msg.split(|&b| b == 0).filter(|f| !f.is_empty());
    let head = std::str::from_utf8(fields.next()?).ok()?;
    // udev's re-broadcasts start with "libudev"; only the kernel's count.
    let (action, _) = head.split_once('@')?;
    if !matches!(action, "bind" | "unbind" | "add" | "remove") {
        return None;
    }
    let (mut subsystem, mut driver, mut slot) = (None, None, None);
    let mut devpath = None;
    for f in fields {
        let Ok(f) = std::str::from_utf8(f) else {
            continue;
        };
        match f.split_once('=') {
            Some(("SUBSYSTEM", v)) => subsystem = Some(v),
            Some(("DRIVER", v)) => driver = Some(v),
            Some(("PCI_SLOT_NAME", v)) => slot = Some(v),
            Some(("DEVPATH", v)) => devpath = Some(v),
            _ => {}
        }
    }
    if subsystem != Some("pci") {
        return None;
    }
    let device = slot.or_else(|| devpath?.rsplit('/').next())?;
    let device = crate::model::pci::normalize_bdf(device)?;
    if matches!(action, "add" | "remove") {
        return Some(PciUevent::Presence(Presence {
            ts_ns,
            device,
            upstream: devpath.and_then(crate::model::pci::parent_from_devpath),
            added: action == "add",
        }));
    }
    Some(PciUevent::Driver(DriverChange {
        ts_ns,
        device,
        driver: (action == "bind").then(|| driver.unwrap_or("").to_owned()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_binds_and_unbinds_from_kernel_uevents() {
        // As 6.12 sends them for `echo 0000:00:03.0 > .../unbind` and bind.
        let unbind = b"unbind@/devices/pci0000:00/0000:00:03.0\0ACTION=unbind\0\
            DEVPATH=/devices/pci0000:00/0000:00:03.0\0SUBSYSTEM=pci\0\
            PCI_CLASS=FF0000\0PCI_ID=1234:11E8\0PCI_SLOT_NAME=0000:00:03.0\0SEQNUM=2471\0";
        let Some(PciUevent::Driver(c)) = parse(unbind, 7) else {
            panic!("an unbind")
        };
        assert_eq!(
            (c.device.as_str(), c.driver.as_deref(), c.ts_ns),
            ("0000:00:03.0", None, 7)
        );
        let bind = b"bind@/devices/pci0000:00/0000:00:03.0\0ACTION=bind\0\
            DEVPATH=/devices/pci0000:00/0000:00:03.0\0SUBSYSTEM=pci\0DRIVER=gdt-misuse\0\
            PCI_SLOT_NAME=0000:00:03.0\0SEQNUM=2475\0";
        let Some(PciUevent::Driver(c)) = parse(bind, 8) else {
            panic!("a bind")
        };
        assert_eq!(c.driver.as_deref(), Some("gdt-misuse"));
        // Other subsystems and actions, udev's copies, garbage: nothing.
        assert!(parse(b"unbind@/devices/virtual/net/x\0SUBSYSTEM=net\0", 0).is_none());
        assert!(parse(
            b"change@/devices/pci0000:00/0000:00:03.0\0SUBSYSTEM=pci\0",
            0
        )
        .is_none());
        assert!(parse(b"libudev\0\xfe\xed\xca\xfe", 0).is_none());
        assert!(parse(b"", 0).is_none());
        assert!(parse(&[0xff; 64], 0).is_none());
    }

    #[test]
    fn pci_devices_added_and_removed() {
        // As 7.2 sends it when qemu's device_del takes the NIC behind a
        // root port away.
        let remove = b"remove@/devices/pci0000:00/0000:00:02.0/0000:01:00.0\0ACTION=remove\0\
            DEVPATH=/devices/pci0000:00/0000:00:02.0/0000:01:00.0\0SUBSYSTEM=pci\0\
            PCI_CLASS=20000\0PCI_ID=8086:10D3\0PCI_SLOT_NAME=0000:01:00.0\0SEQNUM=1811\0";
        assert_eq!(
            parse(remove, 9),
            Some(PciUevent::Presence(Presence {
                ts_ns: 9,
                device: "0000:01:00.0".into(),
                upstream: Some("0000:00:02.0".into()),
                added: false,
            }))
        );
        let add = b"add@/devices/pci0000:00/0000:00:04.0\0ACTION=add\0\
            DEVPATH=/devices/pci0000:00/0000:00:04.0\0SUBSYSTEM=pci\0PCI_SLOT_NAME=0000:00:04.0\0";
        let Some(PciUevent::Presence(p)) = parse(add, 1) else {
            panic!("an add")
        };
        assert!(p.added && p.upstream.is_none());
    }
}
