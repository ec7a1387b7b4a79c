//! PCI device ids as the kernel and drivers print them, and drivers
//! binding to and letting go of devices.

use serde::{Deserialize, Serialize};

/// A driver bound to a PCI device (`driver` is its name) or let it go
/// (None), as its uevent said; recorded in trace files (DRIVERS blocks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverChange {
    /// CLOCK_MONOTONIC when the uevent arrived.
    pub ts_ns: u64,
    pub device: String,
    pub driver: Option<String>,
}

/// Normalise a printed PCI address to `ssss:bb:dd.f` (lower-case hex).
/// Accepts `bb:dd.f`, `0xbb:0xdd.f`, `ssss:bb:dd.f`, and NVRM's `ssss:bb:dd`
/// (function 0 assumed).
pub fn normalize_bdf(s: &str) -> Option<String> {
    let s = s.trim().trim_start_matches("PCI:");
    let strip = |p: &str| {
        let p = p.trim();
        let p = p
            .strip_prefix("0x")
            .or_else(|| p.strip_prefix("0X"))
            .unwrap_or(p);
        u32::from_str_radix(p, 16).ok()
    };
    let (left, func) = match s.rsplit_once('.') {
        Some((l, f)) => (l, strip(f)?),
        None => (s, 0),
    };
    let parts: Vec<&str> = left.split(':').collect();
    let (seg, bus, dev) = match (parts.len(), s.contains('.')) {
        (2, true) => (0, strip(parts[0])?, strip(parts[1])?),
        (3, _) => (strip(parts[0])?, strip(parts[1])?, strip(parts[2])?),
        _ => return None,
    };
    if seg > 0xffff || bus > 0xff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{seg:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_normalisation_covers_every_printed_shape() {
        assert_eq!(normalize_bdf("00:03.0").as_deref(), Some("0000:00:03.0"));
        assert_eq!(
            normalize_bdf("0x00:0x02.0").as_deref(),
            Some("0000:00:02.0")
        );
        assert_eq!(
            normalize_bdf("0000:06:00.0").as_deref(),
            Some("0000:06:00.0")
        );
        assert_eq!(
            normalize_bdf("PCI:0008:01:00").as_deref(),
            Some("0008:01:00.0")
        );
        assert_eq!(normalize_bdf("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(normalize_bdf("garbage"), None);
        assert_eq!(normalize_bdf("00:40.0"), None, "device number > 0x1f");
    }
}
