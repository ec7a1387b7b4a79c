//! Bounded `device` label values for the exported metrics: one set shared
//! by every family (DMA, faults, GPUs), so a device keeps one name.

use std::{collections::HashSet, sync::Arc};

use super::OTHER_DEVICE;
use crate::aggregate::UNATTRIBUTED;

/// Bounded device labels. The first `max` devices seen keep their name for
/// the life of the process (a label never moves, so every series stays
/// monotonic); later ones are reported as `device="other"` and counted once
/// each in `gpudirect_devices_folded_total`.
#[derive(Debug)]
pub struct DeviceLabels {
    max: usize,
    admitted: HashSet<Arc<str>>,
    folded: HashSet<Arc<str>>,
}

impl DeviceLabels {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            admitted: HashSet::new(),
            folded: HashSet::new(),
        }
    }

    /// The label value for the device the aggregator calls `device`.
    pub fn label(&mut self, device: &str) -> Arc<str> {
        let name = label_name(device);
        if let Some(l) = self.admitted.get(name) {
            return l.clone();
        }
        if name != OTHER_DEVICE && self.admitted.len() < self.max && !self.folded.contains(name) {
            let l: Arc<str> = Arc::from(name);
            self.admitted.insert(l.clone());
            return l;
        }
        if !self.folded.contains(name) {
            self.folded.insert(Arc::from(name));
        }
        Arc::from(OTHER_DEVICE)
    }

    /// Distinct devices folded into `device="other"` so far.
    pub fn folded(&self) -> u64 {
        self.folded.len() as u64
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
