//! Bounded `device` label values for the exported metrics: one set shared
//! by every family (DMA, faults, GPUs), so a device keeps one name.

use std::{collections::HashSet, sync::Arc};

use super::OTHER_DEVICE;
use crate::aggregate::UNATTRIBUTED;

/// The first `max` distinct names seen keep their name for the life of the
/// process (a label never moves, so every series stays monotonic); later
/// ones fold into the caller's `other`, each remembered once (while fewer
/// than `max_folded` are) for its folded counter. Devices and containers
/// are capped alike.
#[derive(Debug)]
pub struct BoundedLabels {
    max: usize,
    max_folded: usize,
    admitted: HashSet<Arc<str>>,
    folded: HashSet<Arc<str>>,
}

impl BoundedLabels {
    pub fn new(max: usize, max_folded: usize) -> Self {
        Self {
            max,
            max_folded,
            admitted: HashSet::new(),
            folded: HashSet::new(),
        }
    }

    /// `name` as its own label, or None where it folds into `other`. A
    /// `reserved` name (one the caller gives a meaning) always folds.
    pub fn admit(&mut self, name: &str, reserved: bool) -> Option<Arc<str>> {
        if let Some(l) = self.admitted.get(name) {
            return Some(l.clone());
        }
        if !reserved && self.admitted.len() < self.max && !self.folded.contains(name) {
            let l: Arc<str> = Arc::from(name);
            self.admitted.insert(l.clone());
            return Some(l);
        }
        if self.folded.len() < self.max_folded && !self.folded.contains(name) {
            self.folded.insert(Arc::from(name));
        }
        None
    }

    /// Distinct names folded so far.
    pub fn folded(&self) -> u64 {
        self.folded.len() as u64
    }
}

/// Bounded device labels: later devices are reported as `device="other"`
/// and counted once each in `gpudirect_devices_folded_total`.
#[derive(Debug)]
pub struct DeviceLabels(BoundedLabels);

impl DeviceLabels {
    pub fn new(max: usize) -> Self {
        Self(BoundedLabels::new(max, usize::MAX))
    }

    /// The label value for the device the aggregator calls `device`.
    pub fn label(&mut self, device: &str) -> Arc<str> {
        let name = label_name(device);
        self.0
            .admit(name, name == OTHER_DEVICE)
            .unwrap_or_else(|| Arc::from(OTHER_DEVICE))
    }

    /// Distinct devices folded into `device="other"` so far.
    pub fn folded(&self) -> u64 {
        self.0.folded()
    }
}

/// Label values carry no addresses and no spaces: the unattributed IOMMU row
/// becomes `unattributed`, devices whose name could not be read (shown as
/// `dev@<address>` elsewhere) become `unnamed`, faults without a device
/// (`-`) `unknown`.
fn label_name(device: &str) -> &str {
    if device == UNATTRIBUTED {
        "unattributed"
    } else if device == "-" || device.is_empty() {
        "unknown"
    } else if device.starts_with("dev@") {
        "unnamed"
    } else {
        device
    }
}
