//! Device names: `struct device *` to the name the programs read in-kernel
//! (`DEVICES`), looked up once per record by the session's reader.

use std::sync::Arc;

use gpudirect_trace_common::DEV_NAME_LEN;

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

fn c_str(bytes: &[u8; DEV_NAME_LEN]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
