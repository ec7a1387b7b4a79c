//! The PCIe health family's metrics, declared once (docs/metrics.md's table
//! is made from them).

use crate::metrics::{Metric, Type::Counter};

pub const AER_STATUS_BITS_TOTAL: Metric = Metric {
    name: "gpudirect_pcie_aer_status_bits",
    kind: Counter,
    unit: None,
    labels: &["device", "severity", "error"],
    help: "PCIe AER status bits set in the errors the kernel handled (ras:aer_event), \
           by severity and bit.",
    doc: "set bits of the AER status register of each error `ras:aer_event` reported, by \
          severity (`corrected`, `nonfatal`, `fatal`) and status bit (aer.c's names: \
          `RxErr`, `BadTLP`, `CmpltTO`, ...): exact when the kernel log rate-limits its \
          lines (`gpudirect_pcie_aer_errors_total` counts the reports)",
};

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&AER_STATUS_BITS_TOTAL];
