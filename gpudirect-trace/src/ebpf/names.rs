//! Device names: `struct device *` to the name the programs read in-kernel
//! (`DEVICES`), looked up once per record by the session's reader.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use gpudirect_trace_common::{runtime, Counter, CounterKey, DEV_NAME_LEN};

use super::Tracer;

impl Tracer {
    /// The device's name (`dev_name()`), as read in-kernel. Devices whose
    /// name could not be read show as `dev@<address>`.
    pub fn device_name(&mut self, dev: u64) -> Arc<str> {
        self.device_name_ref(dev).clone()
    }

    /// `device_name` without the reference count's two atomic operations
    /// (the session's per-record path). A name that could not be read is
    /// looked up again next time (the kernel may learn it later); its
    /// `dev@<address>` stand-in is kept so that it too is made once.
    pub fn device_name_ref(&mut self, dev: u64) -> &Arc<str> {
        if dev == 0 {
            return &self.unattributed;
        }
        // Only named devices are kept here (a name is never changed once
        // read); `last_dev` is never 0.
        if dev == self.last_dev {
            return &self.last_name;
        }
        // A device named earlier, met again after another one: one lookup
        // and the name kept as the last one.
        if let Some(n) = self.names.get(&dev) {
            self.last_name = n.clone();
            self.last_dev = dev;
            return &self.last_name;
        }
        match self.maps.devices.get(&dev, 0) {
            Ok(v) => {
                self.unnamed.remove(&dev);
                let n = self
                    .names
                    .entry(dev)
                    .or_insert_with(|| Arc::from(c_str(&v.name)));
                self.last_name = n.clone();
                self.last_dev = dev;
                &self.last_name
            }
            Err(_) => self
                .unnamed
                .entry(dev)
                .or_insert_with(|| Arc::from(format!("dev@{dev:#x}"))),
        }
    }
}

/// What the loader keeps of devices that left the bus. The programs' per
/// (device, kind, direction) counters are keyed by `struct device` address
/// and only ever grow; a device that leaves keeps its counts under its own
/// name (`retired`), and whatever device the kernel puts at that address
/// next starts from the counts at the removal (`baselines`), so nothing is
/// counted twice and no count moves to the wrong name.
#[derive(Default)]
pub(super) struct RemovedDevices {
    /// `runtime::DEVICES_EPOCH` as last written (wrapping).
    epoch: u32,
    baselines: BTreeMap<CounterKey, Counter>,
    retired: BTreeMap<(Arc<str>, CounterKey), Counter>,
}

impl Tracer {
    /// A device left the bus (a `remove` uevent, handled after every record
    /// the ring held before it). The names of its `struct device`
    /// addresses are forgotten here and in the programs' `DEVICES` map, so
    /// that a new device the kernel allocates at a freed address (a GPU
    /// rescanned after it fell off the bus) is named afresh; its counts so
    /// far stay with its name (`RemovedDevices`). Returns how many
    /// addresses were forgotten.
    pub fn forget_device(&mut self, name: &str) -> usize {
        // Every cached name was read from `DEVICES` (a plain hash map that
        // nothing else deletes from), so the map alone holds every address
        // of the name, named by a record yet or not.
        let gone: BTreeSet<u64> = self
            .maps
            .devices
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, v)| c_str(&v.name) == name)
            .map(|(dev, _)| dev)
            .collect();
        if gone.is_empty() {
            return 0;
        }
        let name: Arc<str> = Arc::from(name);
        for (k, total) in self.merged_counters() {
            if !gone.contains(&k.dev) {
                continue;
            }
            let base = self.removed.baselines.entry(k).or_default();
            let since = counter_minus(total, *base);
            *base = total;
            if since.count != 0 || since.bytes != 0 {
                let kept = self.removed.retired.entry((name.clone(), k)).or_default();
                kept.count = kept.count.saturating_add(since.count);
                kept.bytes = kept.bytes.saturating_add(since.bytes);
            }
        }
        for dev in &gone {
            self.names.remove(dev);
            self.unnamed.remove(dev);
            // Already gone from the kernel's map (never stored there: the
            // map was full) is the same outcome.
            let _ = self.maps.devices.remove(dev);
            if *dev == self.last_dev {
                self.last_dev = 0;
            }
        }
        // After the names are gone: a program that sees the new epoch and
        // looks for the name must not find the old one.
        self.removed.epoch = self.removed.epoch.wrapping_add(1);
        let _ = self
            .maps
            .runtime
            .set(runtime::DEVICES_EPOCH, self.removed.epoch, 0);
        gone.len()
    }

    /// The per-device counters as users should read them: counts since
    /// each address's last removal under the name it has now, and removed
    /// devices' counts under theirs.
    pub(super) fn counters_by_name(
        &mut self,
        merged: BTreeMap<CounterKey, Counter>,
    ) -> Vec<(Arc<str>, CounterKey, Counter)> {
        let mut out = Vec::with_capacity(merged.len() + self.removed.retired.len());
        for (k, total) in merged {
            let c = match self.removed.baselines.get(&k) {
                Some(base) => counter_minus(total, *base),
                None => total,
            };
            // An address whose device left and nothing came back: no row
            // under a stand-in name.
            if c.count == 0 && c.bytes == 0 && self.removed.baselines.contains_key(&k) {
                continue;
            }
            out.push((self.device_name(k.dev), k, c));
        }
        out.extend(
            self.removed
                .retired
                .iter()
                .map(|((name, k), c)| (name.clone(), *k, *c)),
        );
        out
    }

    /// Whether the programs' `DEVICES` map holds `dev` (host tests).
    #[cfg(feature = "test-support")]
    pub fn device_in_kernel_map(&self, dev: u64) -> bool {
        self.maps.devices.get(&dev, 0).is_ok()
    }
}

fn counter_minus(a: Counter, b: Counter) -> Counter {
    Counter {
        count: a.count.saturating_sub(b.count),
        bytes: a.bytes.saturating_sub(b.bytes),
    }
}

fn c_str(bytes: &[u8; DEV_NAME_LEN]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
