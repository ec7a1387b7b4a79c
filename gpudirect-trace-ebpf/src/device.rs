//! Device identity: `struct device *` to its name.
//!
//! The name of a device is `dev_name(dev)`, which after device_add() is
//! `dev->kobj.name` (the bus id, e.g. `0000:00:06.0`). `struct kobject` has had
//! `const char *name` as its first member since the driver core began, and
//! `struct device` has had `kobj` as its first member since 5.0; the loader
//! still takes the offset from the running kernel's BTF when it has one
//! (`KernelOffsets::device_name`), so a reordered or randomised layout
//! (CONFIG_RANDSTRUCT) is read correctly too. Names are read once per device
//! and kept in the `DEVICES` map, so events carry only the pointer.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::map,
    maps::HashMap,
};
use gpudirect_trace_common::{maps, stat, DeviceName, KernelOffsets, DEV_NAME_LEN};

use crate::stats::stat_inc;

#[map]
static DEVICES: HashMap<u64, DeviceName> = HashMap::with_max_entries(maps::DEVICES_CAP, 0);

/// Make sure `DEVICES` knows `dev`'s name. Returns false for a null device or
/// one whose name cannot be read.
#[inline(always)]
pub fn remember_device(dev: u64, off: &KernelOffsets) -> bool {
    if dev == 0 {
        return false;
    }
    if DEVICES.get_ptr(&dev).is_some() {
        return true;
    }
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    let name_ptr: u64 =
        match unsafe { bpf_probe_read_kernel((dev + off.device_name as u64) as *const u64) } {
            Ok(p) if p != 0 => p,
            _ => {
                stat_inc(stat::DEVICE_NAME_FAILED);
                return false;
            }
        };
    remember_name(dev, name_ptr)
}

/// Stores the string at `name_ptr` as the name of `key` (for tracepoints that
/// name a device by string: the key is the string's address with bit 0 set,
/// which no aligned `struct device *` has).
#[inline(always)]
pub fn remember_name(key: u64, name_ptr: u64) -> bool {
    if key == 0 || name_ptr == 0 {
        return false;
    }
    if DEVICES.get_ptr(&key).is_some() {
        return true;
    }
    let dev = key;
    let mut value = DeviceName {
        name: [0u8; DEV_NAME_LEN],
    };
    // SAFETY: as above; the destination is a stack buffer of known size.
    if unsafe { bpf_probe_read_kernel_str_bytes(name_ptr as *const u8, &mut value.name) }.is_err() {
        stat_inc(stat::DEVICE_NAME_FAILED);
        return false;
    }
    if DEVICES.insert(&dev, &value, BPF_NOEXIST as u64).is_err() && DEVICES.get_ptr(&dev).is_none()
    {
        stat_inc(stat::DEVICE_MAP_FULL);
    }
    true
}
