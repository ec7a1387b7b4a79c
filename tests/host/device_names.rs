//! Device names after a device leaves the bus. The programs read a
//! device's name once and keep it by `struct device` address; the kernel
//! may give a freed device's address to the next device it makes (a GPU
//! rescanned after it fell off the bus), so a `remove` uevent must make
//! both sides forget it, and its counts must stay its own. The removal
//! itself is simulated (a call, not a uevent: no device can be hot-removed
//! on the CI host); the programs, the maps and the names are the real ones.

use gpudirect_trace::faults::normalize_bdf;
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

/// `live --device nvme0`: the tables name the PCI function a class device
/// sits on, so the name is turned into that bus id on the running host
/// (before, the table stayed empty for the whole session). Any block or
/// network device of this host with a PCI function above it serves; a
/// name the host lacks and a bus id it lacks are said before the session.
#[test]
fn live_device_names_of_this_host_become_their_pci_function() {
    crate::require_root();
    let under_pci = ["block", "net"].iter().find_map(|class| {
        std::fs::read_dir(format!("/sys/class/{class}"))
            .ok()?
            .flatten()
            .find_map(|e| {
                let real = std::fs::canonicalize(e.path()).ok()?;
                let bdf = real
                    .iter()
                    .filter_map(|c| c.to_str())
                    .rfind(|c| normalize_bdf(c).as_deref() == Some(*c))?
                    .to_owned();
                Some((e.file_name().to_string_lossy().into_owned(), bdf))
            })
    });
    let run = |device: &str| {
        let out = crate::hostile::bin()
            .args(["live", "--duration", "0.2", "--device", device])
            .output()
            .expect("run live");
        let err = crate::hostile::stderr(&out);
        assert!(out.status.success(), "--device {device}: {err}");
        err
    };
    match under_pci {
        Some((name, bdf)) => {
            let err = run(&name);
            assert!(
                err.contains(&format!("--device {name}: PCI device {bdf}")),
                "{err}"
            );
            // 0.2 s may see no DMA of it: the end then names it as typed.
            if err.contains("matched no device") {
                assert!(
                    err.contains(&format!("--device {name} ({bdf}) matched no device")),
                    "{err}"
                );
            }
        }
        None => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED live_device_names_of_this_host_become_their_pci_function \
                 (the name part): no block or network device under a PCI function here"
            );
        }
    }
    let err = run("gdt-no-such-device");
    assert!(
        err.contains("--device gdt-no-such-device: no device of that name on this host"),
        "{err}"
    );
    let err = run("ffff:ff:1f.7");
    assert!(
        err.contains("no PCI device ffff:ff:1f.7 on this host"),
        "{err}"
    );
}
