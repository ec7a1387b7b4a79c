//! An event's body as `key=value` pairs, in either of the two forms ftrace
//! prints it:
//!
//! - the event's print format (TP_printk), the default: `0000:00:04.0
//!   dir=TO_DEVICE dma_addr=ffe00000 size=4096 ...`, lists as `{0x1,0x2}`;
//! - its fields (`options/fields`, 6.3+; and the form a persistent ring
//!   buffer read after a reboot takes when the kernel's addresses moved,
//!   kernel/trace/trace.c print_trace_fmt()): every
//!   field of the event's `format` file by its own name, `name=0x10
//!   (16)` for a number, the text of a string, and a dynamic array as its
//!   bytes, `00,10,00,00,...` (kernel/trace/trace_output.c,
//!   print_fields()).
//!
//! The accessors answer in the print format's vocabulary (its keys, the
//! direction's number), so the events are read by one set of rules: the
//! names a field has in the format file where they differ are `ALIASES`.

/// A body's words: `key=value` pairs (a value may be a `{a,b,...}` list,
/// maybe without its closing brace when the line was cut) and the words
/// without `=`, in order.
pub struct Fields<'a> {
    pub words: Vec<&'a str>,
    pairs: Vec<(&'a str, &'a str)>,
    /// The body is the fields form (its first word is `name=value`; every
    /// print format starts with a word without `=`).
    by_field: bool,
}

/// A print format's key, and the name of the field that holds its value
/// where the format file names it otherwise (6.18's include/trace/events/
/// dma.h, iommu.h).
const ALIASES: &[(&str, &str)] = &[
    ("dma_addr", "addr"),        // dma_unmap_phys / _page / _resource
    ("phys_addrs", "addrs"),     // dma_unmap_sg
    ("dma_addrs", "phys_addrs"), // dma_map_sg_err prints its pages as dma_addrs=
    ("sizes", "lengths"),        // dma_map_sg, dma_sync_sg_*
    ("nents", "full_nents"),     // dma_map_sg (6.18+)
    ("ents", "full_ents"),       // dma_map_sg (6.18+)
    ("groupID", "gid"),          // iommu add/remove_device_to_group
];

/// DMA_ATTR_MMIO (include/linux/dma-mapping.h, 6.18): the fields form
/// prints `attrs` as a number, the print format as names.
const DMA_ATTR_MMIO: u64 = 1 << 10;

// The accessors carry #[inline]: they run for each key of each event, and
// out of events.rs's module thin LTO left them out of line (an import of
// 2 M events took 6-9% more CPU than with them in events.rs; with
// #[inline], 2-4%, side by side on one host).
impl<'a> Fields<'a> {
    pub fn of(body: &'a str) -> Self {
        let mut f = Fields {
            words: Vec::new(),
            pairs: Vec::new(),
            by_field: false,
        };
        let mut rest = trim_start(body);
        f.by_field = rest[..blank(rest)].contains('=');
        while !rest.is_empty() {
            let word_end = blank(rest);
            let eq = rest[..word_end].find('=');
            let Some(eq) = eq else {
                f.words.push(&rest[..word_end]);
                rest = trim_start(&rest[word_end..]);
                continue;
            };
            let key = &rest[..eq];
            let after = &rest[eq + 1..];
            let len = if after.starts_with('{') {
                after.find('}').map_or(after.len(), |i| i + 1)
            } else {
                blank(after)
            };
            f.pairs.push((key, &after[..len]));
            rest = trim_start(&after[len..]);
        }
        f
    }

    /// The value of `key` as printed (in the fields form: of the field
    /// `ALIASES` names when the body has no `key`).
    #[inline]
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let find = |k: &str| self.pairs.iter().find(|(p, _)| *p == k).map(|(_, v)| *v);
        find(key).or_else(|| {
            let alias = ALIASES.iter().find(|(k, _)| *k == key)?.1;
            self.by_field.then(|| find(alias)).flatten()
        })
    }

    /// `%llx` (bare) and `0x%llx` alike.
    #[inline]
    pub fn hex(&self, key: &str) -> Option<u64> {
        hex(self.get(key)?)
    }

    /// A count or size: decimal in the print formats, `0x...` in the
    /// fields form.
    #[inline]
    pub fn dec(&self, key: &str) -> Option<u64> {
        number(self.get(key)?)
    }

    /// A C `int` (an errno): `-5` printed, `0xfffffffb (-5)` as a field.
    pub fn signed(&self, key: &str) -> Option<i64> {
        let v = self.get(key)?;
        match v.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok().map(|n| i64::from(n as i32)),
            None => v.parse().ok(),
        }
    }

    /// A list of numbers, and whether it was whole: `{0x1000,0x2000}` as
    /// printed; as a field, the array's bytes, little-endian, 4 to a value
    /// for the lengths (`unsigned int[]`), 8 for the addresses (`u64[]`).
    pub fn list(&self, key: &str) -> (Vec<u64>, bool) {
        let Some(v) = self.get(key) else {
            return (Vec::new(), false);
        };
        if self.by_field && !v.starts_with('{') {
            return bytes_list(v, if key == "sizes" { 4 } else { 8 });
        }
        let inner = v.strip_prefix('{').unwrap_or(v);
        let (inner, whole) = match inner.strip_suffix('}') {
            Some(i) => (i, true),
            None => (inner, false),
        };
        let mut out = Vec::new();
        let mut whole = whole;
        for x in inner.split(',').filter(|x| !x.is_empty()) {
            match hex(x) {
                Some(n) => out.push(n),
                // A number cut in the middle: the list is not whole.
                None => whole = false,
            }
        }
        (out, whole)
    }

    /// `nents=3/5`: (listed, full); `nents=5` or a field: (5, 5).
    pub fn count(&self, key: &str) -> Option<(u64, u64)> {
        let v = self.get(key)?;
        match v.split_once('/') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => number(v).map(|n| (n, n)),
        }
    }

    /// The direction as enum dma_data_direction numbers it (0
    /// bidirectional, 1 to the device, 2 from it, 3 none).
    #[inline]
    pub fn dir(&self) -> u32 {
        match self.get("dir") {
            Some("TO_DEVICE") => 1,
            Some("FROM_DEVICE") => 2,
            Some("NONE") => 3,
            Some(v) if self.by_field => number(v).filter(|&n| n <= 3).unwrap_or(0) as u32,
            _ => 0,
        }
    }

    /// The device: the body's first word (`dev_name: NAME` for swiotlb);
    /// as fields, `device=` (`dev_name=`).
    #[inline]
    pub fn device(&self) -> Option<&'a str> {
        if self.by_field {
            return self.get("device").or_else(|| self.get("dev_name"));
        }
        match self.words.first()? {
            &"dev_name:" => self.words.get(1).copied(),
            w => Some(w),
        }
    }

    /// io_page_fault's device: `IOMMU:DRIVER DEVICE iova=...` printed.
    pub fn fault_device(&self) -> Option<&'a str> {
        if self.by_field {
            return self.get("device");
        }
        self.words.get(1).copied()
    }

    /// DMA_ATTR_MMIO among the attributes (`attrs=MMIO|...` printed, a
    /// number as a field).
    #[inline]
    pub fn mmio(&self) -> bool {
        match self.get("attrs") {
            Some(a) if self.by_field => number(a).is_some_and(|n| n & DMA_ATTR_MMIO != 0),
            Some(a) => a.split('|').any(|x| x == "MMIO"),
            None => false,
        }
    }
}

/// A dynamic array's bytes as the fields form prints them (`00,10,...`),
/// `size` bytes a value, little-endian; whole when every byte read and
/// none left over (a line cut short, or `<OVERFLOW>`, is not).
fn bytes_list(v: &str, size: usize) -> (Vec<u64>, bool) {
    let mut out = Vec::new();
    let (mut value, mut at, mut whole) = (0u64, 0usize, true);
    for b in v.split(',').filter(|b| !b.is_empty()) {
        let Some(byte) = (b.len() == 2)
            .then(|| u8::from_str_radix(b, 16).ok())
            .flatten()
        else {
            whole = false;
            break;
        };
        value |= u64::from(byte) << (8 * at);
        at += 1;
        if at == size {
            out.push(value);
            (value, at) = (0, 0);
        }
    }
    (out, whole && at == 0)
}

/// Decimal, or `0x` hexadecimal (the fields form).
#[inline]
fn number(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Where the first blank of `s` is (its length if none). The kernel's
/// formats separate fields with ASCII blanks; searching bytes rather than
/// Unicode characters took 17% off an import of 2 M events (3.07 to 2.55 s
/// of CPU), as this runs for every word of every line.
#[inline]
fn blank(s: &str) -> usize {
    s.bytes()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(s.len())
}

#[inline]
fn trim_start(s: &str) -> &str {
    s.trim_start_matches(|c: char| c.is_ascii_whitespace())
}

/// `%llx` (bare) and `0x%llx` alike: the kernel log decoders' reader.
#[inline]
fn hex(s: &str) -> Option<u64> {
    crate::faults::parse_hex(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_body_answers_in_the_print_formats_terms() {
        // 6.18's dma_map_sg with options/fields: 2 entries, lengths 0x1000
        // and 0x2000, in the format file's order.
        let f = Fields::of(
            "device=0000:00:04.0 full_nents=0x2 (2) full_ents=0x2 (2) truncated=(0) \
             phys_addrs=00,10,00,00,00,00,00,00,00,20,00,00,00,00,00,00 \
             dma_addrs=00,f0,ff,ff,00,00,00,00,00,e0,ff,ff,00,00,00,00 \
             lengths=00,10,00,00,00,20,00,00 dir=0x2 (2) attrs=0x400 (1024)",
        );
        assert_eq!(f.device(), Some("0000:00:04.0"));
        assert_eq!(f.count("nents"), Some((2, 2)));
        assert_eq!(f.list("dma_addrs"), (vec![0xffff_f000, 0xffff_e000], true));
        assert_eq!(f.list("sizes"), (vec![0x1000, 0x2000], true));
        assert_eq!(f.list("phys_addrs"), (vec![0x1000, 0x2000], true));
        assert_eq!((f.dir(), f.mmio()), (2, true));
        // Cut in the middle of a value: what was whole is kept, and said.
        let cut = Fields::of("device=d dma_addrs=00,10,00,00,00,00,00,00,00,20");
        assert_eq!(cut.list("dma_addrs"), (vec![0x1000], false));
        let err = Fields::of("device=d err=0xfffffffb (-5)");
        assert_eq!(err.signed("err"), Some(-5));
        assert_eq!(Fields::of("d dir=x err=-12").signed("err"), Some(-12));
    }

    #[test]
    fn print_format_bodies_do_not_take_aliases() {
        // A print format's body never starts with `key=`; its keys are
        // its own (no `addr` stands for `dma_addr` there).
        let f = Fields::of("0000:00:04.0 dir=TO_DEVICE addr=1000 size=4096 attrs=MMIO");
        assert_eq!(f.get("dma_addr"), None);
        assert_eq!(
            (f.device(), f.dir(), f.mmio()),
            (Some("0000:00:04.0"), 1, true)
        );
        assert_eq!(f.dec("size"), Some(4096));
    }
}
