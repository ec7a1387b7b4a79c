//! Device names after a device leaves the bus. The programs read a
//! device's name once and keep it by `struct device` address; the kernel
//! may give a freed device's address to the next device it makes (a GPU
//! rescanned after it fell off the bus), so a `remove` uevent must make
//! both sides forget it, and its counts must stay its own. The removal
//! itself is simulated (a call, not a uevent: no device can be hot-removed
//! on the CI host); the programs, the maps and the names are the real ones.

use gpudirect_trace_common::kind;

use crate::inject::Injector;

#[test]
fn a_removed_devices_address_is_named_and_counted_afresh_simulated_removal() {
    let mut inj = Injector::as_root();
    let dev = inj.device.addr;
    let name = inj.device.name.clone();
    // A map at the device's address, which the programs must name from the
    // device itself: the first device there, and the next one after it.
    let map_and_name = |inj: &mut Injector, why: &str| {
        inj.run("dma_map", &[dev, 0x1_0000_0000, 0xfeed_0000, 4096, 2, 0]);
        assert_eq!(inj.drain_all(), 1, "{why}");
        assert!(inj.tracer.device_in_kernel_map(dev), "{why}");
        assert_eq!(&*inj.tracer.device_name(dev), name.as_str(), "{why}");
    };

    map_and_name(&mut inj, "the program kept the name");

    assert_eq!(inj.tracer.forget_device("no-such-device"), 0);
    assert_eq!(
        inj.tracer.forget_device(&name),
        1,
        "one address had that name"
    );
    assert!(
        !inj.tracer.device_in_kernel_map(dev),
        "gone from the programs' map"
    );
    // Nothing names it now, not even the last-device cache: a record for
    // that address before the kernel reads a name again shows the stand-in.
    assert_eq!(
        &*inj.tracer.device_name(dev),
        format!("dev@{dev:#x}").as_str()
    );

    // The next device at that address is named afresh, although its key
    // still sits in this CPU's counter cache: the devices epoch the loader
    // bumped makes the cached slot ask for the name again.
    map_and_name(&mut inj, "the programs read the name again");

    // Counts: the removed device keeps its one map, the new one starts
    // from zero, and nothing is counted twice.
    let maps: Vec<u64> = inj
        .tracer
        .kernel_counters()
        .into_iter()
        .filter(|(n, k, _)| **n == *name && k.dev == dev && k.event_kind() == kind::DMA_MAP)
        .map(|(_, _, c)| c.count)
        .collect();
    assert_eq!(maps, [1, 1], "the new device's row, then the removed one's");
}
