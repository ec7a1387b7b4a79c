//! virtio-iommu fault lines.
//!
//! The guest driver (drivers/iommu/virtio-iommu.c, `viommu_fault_handler()`,
//! unchanged from 5.3 to 6.12) does not call report_iommu_fault(): its faults
//! reach only the kernel log (so no iommu:io_page_fault event), as
//! `dev_err_ratelimited(viommu->dev, ...)`:
//! - `"%s fault from EP %u at %#llx [%s%s%s]\n"` when the device set
//!   VIRTIO_IOMMU_FAULT_F_ADDRESS, with the R, W and X letters of
//!   VIRTIO_IOMMU_FAULT_F_READ/WRITE/EXEC;
//! - `"%s fault from EP %u\n"` otherwise.
//!
//! `%s` is "domain" (VIRTIO_IOMMU_FAULT_R_DOMAIN, 1), "page"
//! (VIRTIO_IOMMU_FAULT_R_MAPPING, 2) or "unknown" (R_UNKNOWN, 0, and any
//! other code); `viommu->dev` is the virtio device (`virtio_iommu virtio0:`),
//! not the endpoint. Captured in the VM (Debian 6.12.117, qemu 7.2,
//! virtio-iommu-pci; the edu at 0000:00:03.0 writing to unmapped IOVA
//! 0x123000):
//! `virtio_iommu virtio0: page fault from EP 24 at 0x123000 []`. qemu sets
//! only F_ADDRESS, so the brackets are empty and the access is unknown; it
//! reports each 4-byte access of a DMA, so one 64-byte DMA gives 16 lines
//! (10 printed, then `viommu_fault_handler: N callbacks suppressed`).
//!
//! The endpoint id is what the firmware table says it is. With ACPI VIOT
//! (x86, drivers/acpi/viot.c) a PCI endpoint's id is
//! `((segment - segment_start) << 16) + RID - bdf_start + endpoint_start`,
//! and qemu's VIOT (hw/acpi/viot.c) writes one PCI range per host bridge
//! with endpoint_start = bdf_start and segment 0: the id is the requester
//! id, `bus << 8 | devfn` (24 = 0x18 = 00:03.0 above). This decoder assumes
//! that identity (the common one, also what Arm device trees' `iommu-map`
//! usually give); `device_raw` keeps the endpoint as printed.

use super::{parse_hex, Access, Fault, Source};

/// The PCI id an endpoint id stands for under the identity layout described
/// above (segment in bits 31:16, bus 15:8, device 7:3, function 2:0).
pub fn endpoint_bdf(ep: u32) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        ep >> 16,
        (ep >> 8) & 0xff,
        (ep >> 3) & 0x1f,
        ep & 7
    )
}

fn explain(kind: &str) -> &'static str {
    match kind {
        "page" => {
            "The endpoint accessed an IOVA that its virtio-iommu domain does not map (or maps \
             without this permission): DMA after unmap or after the buffer was freed, a stale \
             descriptor, or an address never mapped for this device. First checks: \
             mapping_state of the address from the map/unmap history, the driver's \
             unmap-before-completion ordering. The endpoint id is read as the PCI requester id \
             (qemu's VIOT layout)."
        }
        "domain" => {
            "The endpoint is not attached to any domain: DMA before its driver probed (and so \
             before the IOMMU attached it) or after release, or with the device's boot bypass \
             off. First checks: `ls /sys/bus/pci/devices/<dev>/iommu_group`, that the \
             virtio_iommu module loaded before the endpoint's driver probed."
        }
        _ => {
            "The virtio-iommu device reported a fault without a known reason (R_UNKNOWN: e.g. \
             an endpoint the device does not know)."
        }
    }
}

/// Decode `... fault from EP N [at ADDR [RWX]]` from virtio-iommu.
pub fn parse(body: &str) -> Option<Fault> {
    let at = body.find(" fault from EP ")?;
    // The word before: the reason; before it, the `virtio_iommu virtioN:` prefix.
    let head = &body[..at];
    let kind = head.rsplit([' ', ':']).next()?;
    if !matches!(kind, "page" | "domain" | "unknown") || !head.contains("virtio") {
        return None;
    }
    let rest = &body[at + " fault from EP ".len()..];
    let (ep_txt, tail) = rest.split_once(' ').unwrap_or((rest.trim(), ""));
    let ep: u32 = ep_txt.trim().parse().ok()?;
    let (code, reason) = match kind {
        "domain" => (1, "endpoint not attached to a domain"),
        "page" => (2, "no mapping for the address (page fault)"),
        _ => (0, "unknown fault reason"),
    };
    let mut f = Fault::new(Source::VirtioIommu, reason, body);
    f.reason_code = Some(code);
    f.device = Some(endpoint_bdf(ep));
    f.device_raw = Some(format!("EP {ep}"));
    f.flags.push(format!("endpoint={ep}"));
    if let Some(addr) = tail.trim().strip_prefix("at ") {
        let (a, perms) = addr.split_once(' ').unwrap_or((addr, ""));
        f.address = parse_hex(a);
        if f.address.is_none() {
            f.partial = true;
        }
        let perms = perms.trim().trim_start_matches('[').trim_end_matches(']');
        f.access = match (
            perms.contains('W'),
            perms.contains('R'),
            perms.contains('X'),
        ) {
            (true, _, _) => Some(Access::Write),
            (_, true, _) => Some(Access::Read),
            (_, _, true) => Some(Access::Exec),
            _ => None,
        };
        for (c, name) in [('R', "read"), ('W', "write"), ('X', "exec")] {
            if perms.contains(c) {
                f.flags.push(name.to_string());
            }
        }
    }
    f.explanation = explain(kind).to_string();
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::parse_line;

    /// The line captured in the VM (Debian 6.12.117, qemu 7.2): edu at
    /// 0000:00:03.0 (requester id 0x18) writing to unmapped IOVA 0x123000.
    const CAPTURED: &str =
        "[    2.175743] virtio_iommu virtio0: page fault from EP 24 at 0x123000 []";

    #[test]
    fn captured_line_decodes_to_the_edu() {
        let f = parse_line(CAPTURED).expect("decoded");
        assert_eq!(f.source, Source::VirtioIommu);
        assert_eq!(f.device.as_deref(), Some("0000:00:03.0"));
        assert_eq!(f.device_raw.as_deref(), Some("EP 24"));
        assert_eq!(f.address, Some(0x123000));
        assert_eq!(f.reason_code, Some(2));
        assert_eq!(f.access, None, "qemu reports no direction");
        assert_eq!(f.timestamp_ns, Some(2_175_743_000));
        assert!(!f.partial);
        let v = serde_json::to_value(&f).expect("json");
        assert_eq!(v["source"], "virtio-iommu");
        assert_eq!(v["address"], "0x123000");
    }

    #[test]
    fn every_printed_shape() {
        let f = parse("virtio_iommu virtio0: page fault from EP 1281 at 0xfffff000 [RW]")
            .expect("page");
        assert_eq!(f.device.as_deref(), Some("0000:05:00.1"));
        assert_eq!(f.access, Some(Access::Write));
        assert!(f.flags.iter().any(|x| x == "read"));
        let d = parse("virtio_iommu virtio1: domain fault from EP 16").expect("domain");
        assert_eq!(d.reason_code, Some(1));
        assert_eq!(d.address, None);
        assert_eq!(d.device.as_deref(), Some("0000:00:02.0"));
        let u = parse("virtio_iommu virtio0: unknown fault from EP 65560 at 0 [R]").expect("u");
        assert_eq!(u.device.as_deref(), Some("0001:00:03.0"));
        assert_eq!(u.address, Some(0));
        assert_eq!(u.access, Some(Access::Read));
        // Not virtio-iommu's, or not a fault line.
        assert!(parse("page fault from EP 24 at 0x1000 []").is_none());
        assert!(parse("virtio_iommu virtio0: page fault from EP x at 0x1000").is_none());
        assert!(parse("virtio_iommu virtio0: input address: 64 bits").is_none());
    }

    #[test]
    fn rate_limited_faults_are_counted() {
        let f = parse_line("[    7.1] viommu_fault_handler: 12 callbacks suppressed").expect("s");
        assert_eq!(f.source, Source::VirtioIommu);
        assert_eq!(f.count, 12);
        assert!(f.partial);
    }
}
