//! A minimal writer for the "newc" cpio format the kernel unpacks as an initramfs
//! (see the kernel's Documentation/driver-api/early-userspace/buffer-format.rst).

use std::io::{self, Write};

const MAGIC: &str = "070701";
const TRAILER: &str = "TRAILER!!!";

/// Builds an uncompressed newc archive in memory, entry by entry.
pub struct Writer {
    buf: Vec<u8>,
    next_ino: u32,
    rdev: (u32, u32),
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            next_ino: 1,
            rdev: (0, 0),
        }
    }

    /// A directory (parents must be added first).
    pub fn dir(&mut self, path: &str, mode: u32) {
        self.entry(path, 0o040000 | (mode & 0o7777), 2, &[]);
    }

    /// A regular file with the given permission bits.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, 0o100000 | (mode & 0o7777), 1, data);
    }

    /// A symbolic link pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, 0o120777, 1, target.as_bytes());
    }

    /// A character device node (e.g. /dev/console, 5:1).
    pub fn chardev(&mut self, path: &str, mode: u32, major: u32, minor: u32) {
        self.rdev = (major, minor);
        self.entry(path, 0o020000 | (mode & 0o7777), 1, &[]);
        self.rdev = (0, 0);
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, data: &[u8]) {
        let name = path.trim_start_matches('/');
        let ino = self.next_ino;
        self.next_ino += 1;
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed for reproducible archives
            data.len() as u32,
            0, // devmajor
            0, // devminor
            self.rdev.0,
            self.rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(MAGIC.as_bytes());
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad4();
        self.buf.extend_from_slice(data);
        self.pad4();
    }

    fn pad4(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// Appends the trailer and writes the archive out.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<()> {
        self.next_ino = 0;
        self.entry(TRAILER, 0, 1, &[]);
        out.write_all(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_field(h: &[u8], idx: usize) -> u32 {
        let s = std::str::from_utf8(&h[6 + idx * 8..6 + (idx + 1) * 8]).expect("ascii");
        u32::from_str_radix(s, 16).expect("hex")
    }

    #[test]
    fn file_entry_layout_is_newc() {
        let mut w = Writer::new();
        w.file("/init", 0o755, b"abc");
        let mut out = Vec::new();
        w.finish(&mut out).expect("write");
        assert_eq!(&out[..6], b"070701");
        assert_eq!(header_field(&out, 1), 0o100755);
        assert_eq!(header_field(&out, 6), 3); // filesize
        assert_eq!(header_field(&out, 11), 5); // "init\0"
                                               // 110-byte header + "init\0" = 115, padded to 116; data then padded to 120.
        assert_eq!(&out[110..115], b"init\0");
        assert_eq!(&out[116..119], b"abc");
        assert_eq!(&out[120..126], b"070701");
        assert_eq!(out.len() % 4, 0);
        let tail = String::from_utf8_lossy(&out[120..]);
        assert!(tail.contains("TRAILER!!!"));
    }

    #[test]
    fn symlink_stores_target_as_data() {
        let mut w = Writer::new();
        w.symlink("bin/sh", "busybox");
        let mut out = Vec::new();
        w.finish(&mut out).expect("write");
        assert_eq!(header_field(&out, 1), 0o120777);
        assert_eq!(header_field(&out, 6), 7);
        let name_end = 110 + "bin/sh\0".len();
        let data_start = (name_end + 3) & !3;
        assert_eq!(&out[data_start..data_start + 7], b"busybox");
    }
}
