//! The PCI inventory a recording keeps: each function's class device names,
//! from a sysfs tree laid out as the kernel's (links relative, as sysfs
//! writes them).

use std::{fs, os::unix::fs::symlink, path::Path};

use super::{format::MAX_CLASS_NAMES, pci_inventory};

fn function(sysfs: &Path, bdf: &str) {
    fs::create_dir_all(sysfs.join("bus/pci/devices").join(bdf)).expect("function");
}

fn class_link(sysfs: &Path, class: &str, name: &str, target: &str) {
    let dir = sysfs.join("class").join(class);
    fs::create_dir_all(&dir).expect("class dir");
    symlink(target, dir.join(name)).expect("link");
}

#[test]
fn each_function_keeps_the_names_of_its_class_devices() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sysfs = tmp.path();
    for bdf in ["0000:00:04.0", "0000:00:01.0", "0000:01:00.0"] {
        function(sysfs, bdf);
    }
    let nvme = "../../devices/pci0000:00/0000:00:04.0/nvme/nvme0";
    class_link(sysfs, "nvme", "nvme0", nvme);
    class_link(sysfs, "block", "nvme0n1", &format!("{nvme}/nvme0n1"));
    // Behind a switch port: the endpoint, not the port.
    class_link(
        sysfs,
        "net",
        "eth0",
        "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/net/eth0",
    );
    class_link(sysfs, "net", "lo", "../../devices/virtual/net/lo");
    // Bus numbers name nothing a user types.
    class_link(
        sysfs,
        "pci_bus",
        "0000:01",
        "../../devices/pci0000:00/0000:00:01.0/pci_bus/0000:01",
    );
    // A link into a function the inventory lacks is dropped.
    class_link(
        sysfs,
        "block",
        "vdb",
        "../../devices/pci0000:00/0000:00:09.0/virtio3/block/vdb",
    );
    let inv = pci_inventory(sysfs);
    let names = |bdf: &str| {
        inv.iter()
            .find(|d| d.bus_id == bdf)
            .map(|d| d.names.clone())
            .expect(bdf)
    };
    assert_eq!(names("0000:00:04.0"), ["nvme0", "nvme0n1"]);
    assert_eq!(names("0000:01:00.0"), ["eth0"]);
    assert!(
        names("0000:00:01.0").is_empty(),
        "{:?}",
        names("0000:00:01.0")
    );
    assert_eq!(inv.len(), 3);
}

#[test]
fn a_function_keeps_a_bounded_number_of_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sysfs = tmp.path();
    function(sysfs, "0000:00:05.0");
    for i in 0..MAX_CLASS_NAMES + 10 {
        class_link(
            sysfs,
            "hwmon",
            &format!("hwmon{i:02}"),
            &format!("../../devices/pci0000:00/0000:00:05.0/hwmon/hwmon{i:02}"),
        );
    }
    let long = "x".repeat(super::format::MAX_CLASS_NAME + 1);
    class_link(
        sysfs,
        "net",
        &long,
        "../../devices/pci0000:00/0000:00:05.0/net/x",
    );
    let inv = pci_inventory(sysfs);
    let names = &inv[0].names;
    assert_eq!(names.len(), MAX_CLASS_NAMES);
    // The first in name order, whatever order the directory lists them in.
    assert_eq!(names[0], "hwmon00");
    assert_eq!(
        names[MAX_CLASS_NAMES - 1],
        format!("hwmon{:02}", MAX_CLASS_NAMES - 1)
    );
}
