//! The misuse checks' families (`serve --check`): findings by device and
//! check, and what could not be checked. Labels are fixed sets: `device`
//! (through the device-label cap) and `check` (model::misuse::Check).

use super::{DeviceLabels, Model};
use crate::analysis::misuse::CheckStats;
use crate::metrics;

impl Model {
    pub fn add_misuse(&mut self, st: &CheckStats, labels: &mut DeviceLabels) {
        for (dev, checks) in &st.findings {
            let device = labels.label(dev).to_string();
            for (check, &n) in checks {
                let l = vec![("device", device.clone()), ("check", check.to_string())];
                self.add(&metrics::misuse::DMA_MISUSE_TOTAL, l, n);
            }
        }
        for (dev, callers) in &st.map_failures {
            let device = labels.label(dev).to_string();
            let n = callers.iter().fold(0u64, |a, r| a.saturating_add(r.count));
            let l = vec![("device", device), ("check", "map-failure".to_owned())];
            self.add(&metrics::misuse::DMA_MISUSE_TOTAL, l, n);
        }
        for (what, n) in [
            ("unknown-unmap", st.unknown_unmaps),
            ("unknown-sync", st.unknown_syncs),
            ("untracked-map", st.untracked_maps),
            ("unproven", st.unproven),
        ] {
            let l = vec![("reason", what.to_owned())];
            self.add(&metrics::misuse::DMA_MISUSE_UNCHECKED_TOTAL, l, n);
        }
    }
}
