//! The fleet summary over real traces written by the recorder's own writer.

use super::*;

#[test]
fn shell_words_quote_what_a_shell_would_split() {
    assert_eq!(shell_word("/var/snaps/gdt-1.gdt"), "/var/snaps/gdt-1.gdt");
    assert_eq!(shell_word("a b's.gdt"), r"'a b'\''s.gdt'");
}

#[test]
fn a_missing_file_is_a_row_not_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gone = dir.path().join("gone.gdt");
    let not_trace = dir.path().join("junk.gdt");
    std::fs::write(&not_trace, b"not a trace at all").expect("write");
    let f = summarize(&[gone, not_trace], |_, _, _| {});
    assert_eq!(f.files.len(), 2);
    assert_eq!(f.damaged_files, 2);
    assert!(f.files.iter().all(|r| r.error.is_some()), "{:?}", f.files);
    assert!(f.hosts.is_empty());
    let t = text::text(&f);
    assert!(t.contains("UNREADABLE"), "{t}");
    // Counts say "1 host", never "1 hosts".
    assert!(
        t.starts_with("Fleet: 2 files, 0 hosts (0 boots), 0 GPUs, 0 devices;"),
        "{t}"
    );
    let one = summarize(&[dir.path().join("gone.gdt")], |_, _, _| {});
    assert!(text::text(&one).starts_with("Fleet: 1 file, 0 hosts"));
}

#[test]
fn directories_are_walked_for_gdt_files_links_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = dir.path().join("node-a");
    std::fs::create_dir(&node).expect("mkdir");
    std::fs::write(node.join("gdt-1.gdt"), b"x").expect("write");
    std::fs::write(node.join(".gdt-2.gdt.tmp-1"), b"x").expect("write");
    std::fs::write(node.join("notes.txt"), b"x").expect("write");
    std::os::unix::fs::symlink("/etc/shadow", node.join("gdt-3.gdt")).expect("symlink");
    let (files, skipped, over) = expand(&[dir.path().to_path_buf()]);
    assert_eq!(files, [node.join("gdt-1.gdt")]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains("gdt-3.gdt: not a regular file"),
        "{skipped:?}"
    );
    assert_eq!(over, 0);
}

/// The real Xid 31 snapshot from the H200, as three hosts (two boots of
/// one), plus a cut copy: hosts apart by name and boot, the shared Xid
/// named as a pattern, the cut file listed as damaged.
#[test]
fn real_snapshots_as_three_hosts_give_hosts_first_causes_and_the_shared_xid() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/gpu-host-h200-session3/flight-xid31.gdt"
    );
    let bytes = std::fs::read(fixture).expect("fixture");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut paths = Vec::new();
    for (host, boot) in [
        ("node-a", "boot-1"),
        ("node-a", "boot-2"),
        ("node-b", "boot-3"),
    ] {
        let copy = crate::tracefile::with_header(&bytes, |h| {
            h.hostname = host.into();
            h.boot_id = boot.into();
        })
        .expect("rewrite");
        let p = dir.path().join(format!("{host}-{boot}.gdt"));
        std::fs::write(&p, &copy).expect("write");
        paths.push(p);
    }
    let cut = dir.path().join("cut.gdt");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
    paths.push(cut);
    let f = summarize(&paths, |_, _, _| {});
    assert_eq!(f.files.len(), 4);
    assert_eq!(f.damaged_files, 1, "{:?}", f.files);
    assert!(
        f.files[3].warnings.iter().any(|w| w.contains("cut short")),
        "{:?}",
        f.files[3]
    );
    // node-a's two boots are two rows, the cut file's own host a fourth.
    let hosts: Vec<(&str, &str)> = f
        .hosts
        .iter()
        .map(|h| (h.host.as_str(), h.boot_id.as_str()))
        .collect();
    assert!(
        hosts.contains(&("node-a", "boot-1")) && hosts.contains(&("node-a", "boot-2")),
        "{hosts:?}"
    );
    let a = f.hosts.iter().find(|h| h.host == "node-a").expect("node-a");
    let first = a.first_cause.as_ref().expect("a first cause");
    assert_eq!(first.kind.to_string(), "xid Xid 31", "{first:?}");
    assert!(
        first.gpu.as_deref().is_some_and(|g| g.contains("H200")),
        "{first:?}"
    );
    let p = f
        .patterns
        .iter()
        .find(|p| p.kind.to_string() == "xid Xid 31")
        .expect("the Xid shared by hosts");
    assert!(p.hosts.len() >= 2, "{p:?}");
    assert!(p.summary.contains("all model 10de:"), "{}", p.summary);
    let t = text::text(&f);
    assert!(t.contains("Shared by hosts:\n  xid Xid 31:"), "{t}");
    assert!(
        t.contains("first: ") && t.contains("gpudirect-trace report "),
        "{t}"
    );
    let page = html::page(&f);
    assert!(
        page.contains("id=\"file-4\" class=\"bad\""),
        "the cut file marked"
    );
    assert!(page.contains("<a href=\"#file-1\">[1]</a>"));
    let json = serde_json::to_value(&f).expect("json");
    assert_eq!(json["files"].as_array().map(Vec::len), Some(4));
    assert!(json["patterns"][0]["hosts"].is_array());
}

/// One boot's snapshots overlap (a later snapshot's ring holds the earlier
/// trigger: on the H200 two snapshots of one boot showed one Xid twice):
/// the host counts each incident once; each file still shows its own.
#[test]
fn overlapping_snapshots_of_one_boot_count_each_incident_once() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/gpu-host-h200-session3/flight-xid31.gdt"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.gdt");
    let b = dir.path().join("b.gdt");
    std::fs::copy(fixture, &a).expect("copy");
    std::fs::copy(fixture, &b).expect("copy");
    let f = summarize(&[a, b], |_, _, _| {});
    let per_file = f.files[0].incidents;
    assert!(per_file > 0);
    assert_eq!(f.files[1].incidents, per_file);
    assert_eq!(f.hosts.len(), 1);
    assert_eq!(f.hosts[0].incidents, per_file, "{:?}", f.hosts[0]);
    assert_eq!(f.by_kind.iter().map(|k| k.count).sum::<u64>(), per_file);
}
