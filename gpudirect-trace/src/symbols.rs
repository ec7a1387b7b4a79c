//! Kernel addresses to names, from /proc/kallsyms (vmlinux and module
//! symbols alike: modules' lines end in `[module]`). Root sees real
//! addresses; others see zeros (kptr_restrict), and frames then stay
//! addresses.

use std::sync::OnceLock;

/// One text symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sym {
    addr: u64,
    name: String,
    module: Option<String>,
}

#[derive(Debug, Default)]
pub struct Kallsyms {
    syms: Vec<Sym>,
}

/// Farther than this past a symbol an address is not attributed to it (the
/// next symbol is missing from the list, e.g. a module unloaded since).
const MAX_OFFSET: u64 = 1 << 20;

impl Kallsyms {
    /// Parses kallsyms text (`ADDR TYPE NAME [MODULE]` lines); keeps text
    /// symbols with a real address.
    pub fn parse(text: &str) -> Self {
        let mut syms: Vec<Sym> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let typ = it.next()?;
                let name = it.next()?;
                if addr == 0 || !matches!(typ, "t" | "T" | "w" | "W") {
                    return None;
                }
                let module = it
                    .next()
                    .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_owned());
                Some(Sym {
                    addr,
                    name: name.to_owned(),
                    module,
                })
            })
            .collect();
        syms.sort_by_key(|s| s.addr);
        Self { syms }
    }

    /// This host's symbols, read once.
    pub fn host() -> &'static Kallsyms {
        static HOST: OnceLock<Kallsyms> = OnceLock::new();
        HOST.get_or_init(|| {
            std::fs::read_to_string("/proc/kallsyms")
                .map(|t| Kallsyms::parse(&t))
                .unwrap_or_default()
        })
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// `name+0xoff [module]`, or the address where no symbol covers it.
    pub fn frame(&self, ip: u64) -> String {
        let i = self.syms.partition_point(|s| s.addr <= ip);
        match i.checked_sub(1).map(|i| &self.syms[i]) {
            Some(s) if ip - s.addr < MAX_OFFSET => {
                let m = s
                    .module
                    .as_ref()
                    .map(|m| format!(" [{m}]"))
                    .unwrap_or_default();
                format!("{}+{:#x}{m}", s.name, ip - s.addr)
            }
            _ => format!("{ip:#x}"),
        }
    }

    pub fn frames(&self, ips: &[u64]) -> Vec<String> {
        ips.iter().map(|&ip| self.frame(ip)).collect()
    }
}

/// The first frame of a DMA-API call's stack that is its caller's: past the
/// BPF trampoline, the DMA API, the IOMMU and swiotlb layers.
pub fn caller(frames: &[String]) -> Option<&str> {
    const LAYERS: [&str; 10] = [
        "bpf_",
        "dma_",
        "__dma_",
        "iommu_",
        "intel_",
        "swiotlb_",
        "trace_",
        "__traceiter_",
        "kprobe",
        "ftrace",
    ];
    frames
        .iter()
        .map(String::as_str)
        .find(|f| !LAYERS.iter().any(|p| f.starts_with(p)) && !f.starts_with("0x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_name_vmlinux_and_module_functions() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81234000 T dma_unmap_page_attrs\n\
             ffffffff81234800 t iommu_dma_unmap_page\n\
             ffffffff81300000 D some_data\n\
             ffffffffc0a01000 t cmd_double_unmap\t[gdt_misuse]\n\
             ffffffffc0a01400 t gdt_call\t[gdt_misuse]\n\
             0000000000000000 T hidden\n",
        );
        assert_eq!(k.frame(0xffff_ffff_8123_4010), "dma_unmap_page_attrs+0x10");
        assert_eq!(
            k.frame(0xffff_ffff_c0a0_1020),
            "cmd_double_unmap+0x20 [gdt_misuse]"
        );
        assert_eq!(k.frame(0x1234), "0x1234");
        let f = k.frames(&[
            0xffff_ffff_8123_4810,
            0xffff_ffff_8123_4010,
            0xffff_ffff_c0a0_1020,
        ]);
        assert_eq!(caller(&f), Some("cmd_double_unmap+0x20 [gdt_misuse]"));
        assert!(
            Kallsyms::parse("0000000000000000 T x\n").is_empty(),
            "kptr_restrict view"
        );
    }
}
