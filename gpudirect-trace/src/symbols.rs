//! Kernel addresses to names, from /proc/kallsyms and /proc/modules.
//!
//! Three things make a naive nearest-symbol lookup blame the wrong code
//! (measured in the 6.1 VM: a driver module inserted while
//! `live --check --stacks` ran had every frame of its own named
//! `bpf_trampoline_6442476666+0x218e [bpf]`):
//! - modules load after the tracer started: the table is refreshed when
//!   /proc/modules changes ([`Symbolizer::poll`]) and on a miss, and a
//!   module's symbols are kept after it unloads (its frames still name it);
//! - modules, BPF programs and trampolines share one address area, and
//!   kallsyms has no sizes: an address inside a module's range (from
//!   /proc/modules) is only ever named by that module's symbols, else shown
//!   as `0xADDR [module]`; a trampoline covers one page, a program 64 KiB;
//! - the tracer's own frames (its programs, their trampolines, the
//!   tracepoint/kprobe glue) come first: they are dropped, so that a stack
//!   starts at the DMA-API function, then its caller, as dma-debug prints.
//!
//! Root sees real addresses; others see zeros (kptr_restrict), and frames
//! then stay addresses.

/// One text symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sym {
    addr: u64,
    name: String,
    module: Option<String>,
}

impl Sym {
    /// A BPF trampoline (`bpf_trampoline_<key> [bpf]`).
    fn is_trampoline(&self) -> bool {
        self.module.as_deref() == Some("bpf") && self.name.starts_with("bpf_trampoline_")
    }
}

/// A module's address range, as /proc/modules gives it: its text's base
/// and its total size. Since 6.4 a module's text, data and rodata are
/// allocated apart (`mod->mem[]`), so base + total reaches past its text
/// into other modules' (7.2 VM: gdt-misuse's functions inside e1000e's
/// range); `text_end` is where its known symbols say its text ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleRange {
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub text_end: u64,
}

/// Parses /proc/modules (`NAME SIZE REFS DEPS STATE ADDR [TAINTS]`); keeps
/// modules with a real address.
pub fn parse_modules(text: &str) -> Vec<ModuleRange> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = *f.first()?;
            let size: u64 = f.get(1)?.parse().ok()?;
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            (addr != 0 && size > 0).then(|| ModuleRange {
                name: name.to_owned(),
                start: addr,
                end: addr.saturating_add(size),
                text_end: addr.saturating_add(size),
            })
        })
        .collect()
}

/// Farther than this past a vmlinux symbol an address is not attributed to
/// it.
const MAX_OFFSET: u64 = 1 << 20;
/// A BPF trampoline is one page; a JIT-ed program rarely passes 64 KiB.
const TRAMPOLINE_SIZE: u64 = 4096;
const BPF_PROG_SIZE: u64 = 64 << 10;

/// Not modules: kallsyms' names for the BPF JIT's and the kernel's own
/// generated code (`[bpf]`, `[__builtin__kprobes]`, `[__builtin__ftrace]`).
fn is_pseudo_module(m: &str) -> bool {
    m == "bpf" || m.starts_with("__builtin__")
}

/// A symbol table: the kallsyms text symbols and the module ranges.
#[derive(Debug, Default)]
pub struct Kallsyms {
    syms: Vec<Sym>,
    modules: Vec<ModuleRange>,
}

impl Kallsyms {
    /// Parses kallsyms text (`ADDR TYPE NAME [MODULE]` lines); keeps text
    /// symbols with a real address. Without module ranges, a module's
    /// symbols are bounded by the next symbol only.
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
        Self {
            syms,
            modules: Vec::new(),
        }
    }

    /// kallsyms and /proc/modules text together.
    pub fn with_modules(kallsyms: &str, modules: &str) -> Self {
        let mut k = Self::parse(kallsyms);
        k.modules = parse_modules(modules);
        k.settle();
        k
    }

    /// Each module's text end: the page after its last known symbol
    /// (module text is page-aligned with STRICT_MODULE_RWX), within its
    /// /proc/modules range. A function that crosses that page is still
    /// named: past every range, a module symbol reaches one page.
    /// `syms` is sorted: each module's range is found by binary search, so
    /// a refresh (merged on the session's loop) costs no pass over every
    /// vmlinux symbol per module.
    fn settle(&mut self) {
        for m in &mut self.modules {
            let lo = self.syms.partition_point(|s| s.addr < m.start);
            let hi = self.syms.partition_point(|s| s.addr < m.end);
            let last = self.syms[lo..hi.max(lo)]
                .iter()
                .rev()
                .find(|s| s.module.as_deref() == Some(m.name.as_str()))
                .map(|s| s.addr);
            m.text_end = match last {
                Some(a) => (a.saturating_add(TRAMPOLINE_SIZE) & !(TRAMPOLINE_SIZE - 1)).min(m.end),
                None => m.end,
            };
        }
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The module whose text holds `ip`: where ranges overlap (a module's
    /// symbols not read yet: its whole /proc/modules size), the one whose
    /// base is nearest below `ip`, then the latest load.
    fn module_at(&self, ip: u64) -> Option<&ModuleRange> {
        self.modules
            .iter()
            .enumerate()
            .filter(|(_, m)| m.start <= ip && ip < m.text_end)
            .max_by_key(|(i, m)| (m.start, *i))
            .map(|(_, m)| m)
    }

    /// The symbol naming `ip` and its offset, or None.
    fn lookup(&self, ip: u64) -> Option<(&Sym, u64)> {
        let i = self.syms.partition_point(|s| s.addr <= ip);
        if let Some(m) = self.module_at(ip) {
            // Inside a module: only that module's own symbols, from its base.
            return self.syms[..i]
                .iter()
                .rev()
                .take_while(|s| s.addr >= m.start)
                .find(|s| s.module.as_deref() == Some(m.name.as_str()))
                .map(|s| (s, ip - s.addr));
        }
        let s = &self.syms[i.checked_sub(1)?];
        let off = ip - s.addr;
        let limit = match s.module.as_deref() {
            Some("bpf") if s.is_trampoline() => TRAMPOLINE_SIZE,
            Some("bpf") => BPF_PROG_SIZE,
            // A module symbol outside every known module range: its module
            // was unloaded before it was ever seen in /proc/modules.
            Some(m) if !is_pseudo_module(m) && !self.modules.is_empty() => TRAMPOLINE_SIZE,
            _ => MAX_OFFSET,
        };
        (off < limit).then_some((s, off))
    }

    /// `name+0xoff [module]`; `0xADDR [module]` inside a module no symbol
    /// covers; the bare address elsewhere.
    pub fn frame(&self, ip: u64) -> String {
        match self.lookup(ip) {
            Some((s, off)) => {
                let m = s
                    .module
                    .as_ref()
                    .map(|m| format!(" [{m}]"))
                    .unwrap_or_default();
                format!("{}+{off:#x}{m}", s.name)
            }
            None => match self.module_at(ip) {
                Some(m) => format!("{ip:#x} [{}]", m.name),
                None => format!("{ip:#x}"),
            },
        }
    }

    /// Whether `ip` falls where the table knows nothing: inside a module
    /// range without its symbols, or past every symbol's reach.
    fn misses(&self, ip: u64) -> bool {
        self.lookup(ip).is_none()
    }

    /// The stack as the user reads it: the tracer's own leading frames
    /// dropped, BPF trampolines dropped wherever they are, each frame named.
    pub fn frames(&self, ips: &[u64]) -> Vec<String> {
        self.frames_with(ips, &|_| None)
    }

    /// `frames`, where `traced` names the function a trampoline stands for
    /// (from its key: `bpf_trampoline_<key>`). 7.2's unwinder goes from a
    /// trampoline straight to the traced function's caller (no `func+0x5`
    /// frame, as 6.1's has): the trampoline frame then becomes
    /// `func (traced)`, so the stack still starts at the DMA-API function.
    pub fn frames_with(&self, ips: &[u64], traced: &dyn Fn(u64) -> Option<String>) -> Vec<String> {
        let mut out = Vec::with_capacity(ips.len());
        let mut leading = true;
        let mut stands_for: Option<String> = None;
        for &ip in ips {
            let sym = self.lookup(ip).map(|(s, _)| s);
            let ours = match sym {
                Some(s) => is_tracer_frame(&s.name, s.module.as_deref()),
                // An unnamed frame before any named one is the tracer's
                // program where the JIT does not publish its symbols
                // (net.core.bpf_jit_kallsyms=0).
                None => leading && self.module_at(ip).is_none() && !self.is_empty(),
            };
            let trampoline = sym.is_some_and(Sym::is_trampoline);
            if trampoline {
                stands_for = sym
                    .and_then(|s| s.name.strip_prefix("bpf_trampoline_"))
                    .and_then(|k| k.parse::<u64>().ok())
                    .and_then(traced);
                continue;
            }
            if leading && ours {
                continue;
            }
            leading = false;
            let frame = self.frame(ip);
            if let Some(f) = stands_for.take() {
                if !frame.starts_with(&format!("{f}+")) {
                    out.push(format!("{f} (traced)"));
                }
            }
            out.push(frame);
        }
        out
    }

    /// Replaces what `fresh` knows anew: vmlinux and the pseudo-modules
    /// (BPF programs come and go) wholesale; a loaded module's symbols
    /// replace whatever was in its range (an earlier module at the same
    /// address). Modules no longer loaded keep their symbols and ranges,
    /// so their frames still name them.
    fn merge(&mut self, fresh: Kallsyms) {
        let loaded = &fresh.modules;
        let overlaps = |a: &ModuleRange| {
            loaded
                .iter()
                .any(|b| a.start < b.text_end && b.start < a.text_end)
        };
        let kept_mods: Vec<ModuleRange> = self.modules.drain(..).filter(|m| !overlaps(m)).collect();
        let kept_syms: Vec<Sym> = self
            .syms
            .drain(..)
            .filter(|s| {
                s.module.as_deref().is_some_and(|m| {
                    !is_pseudo_module(m)
                        && kept_mods
                            .iter()
                            .any(|r| r.name == m && r.start <= s.addr && s.addr < r.end)
                })
            })
            .collect();
        let mut syms = fresh.syms;
        syms.extend(kept_syms);
        syms.sort_by_key(|s| s.addr);
        let mut modules = kept_mods;
        modules.extend(fresh.modules);
        self.syms = syms;
        self.modules = modules;
        self.settle();
    }
}

/// The tracer's own frames, and the kernel glue that calls them: BPF
/// programs and trampolines, the tracepoint, kprobe, ftrace and rethook
/// machinery, the stack walk itself.
fn is_tracer_frame(name: &str, module: Option<&str>) -> bool {
    const GLUE: [&str; 19] = [
        "bpf_trace_run",
        "__traceiter_",
        "__bpf_trace_",
        "trace_call_bpf",
        "bpf_get_stack",
        "__bpf_get_stack",
        "bpf_get_stackid",
        "__bpf_prog_enter",
        "__bpf_prog_exit",
        "kprobe_",
        "__kprobe",
        "kretprobe_",
        "__kretprobe",
        "pre_handler_kretprobe",
        "arch_rethook_",
        "rethook_",
        "ftrace_",
        "arch_ftrace_",
        "perf_trace_",
    ];
    module.is_some_and(|m| m == "bpf" || m == "__builtin__kprobes" || m == "__builtin__ftrace")
        || GLUE.iter().any(|p| name.starts_with(p))
}

/// Where the live symbol table comes from: /proc, or fixed text (tests,
/// offline use).
enum Source {
    Proc,
    Fixed,
}

/// The live symbol table of a tracing session: refreshed when modules load
/// and on a miss, keeping what it learnt of modules since unloaded.
///
/// Reading /proc/kallsyms is the kernel formatting every symbol: under TCG
/// on 7.2 long enough that the ring overflowed while the session's loop
/// waited for it (14 records lost in the dma-misuse-module VM run). A
/// refresh a module load asks for is read on a thread of its own and
/// merged on a later tick; only a stack batch that finds a miss waits.
pub struct Symbolizer {
    table: Kallsyms,
    source: Source,
    /// /proc/modules as last read: a change means a load or an unload.
    modules_text: String,
    /// A refresh being read in the background: (/proc/modules, table).
    pending: Option<std::thread::JoinHandle<Option<(String, Kallsyms)>>>,
    /// When a miss last made a batch wait for a read: misses that stay
    /// misses (freed init code, BPF code without symbols) ask again at
    /// most once per `MISS_REFRESH_EVERY`.
    last_miss_read: Option<std::time::Instant>,
    /// vmlinux's BTF, read when the first trampoline frame is named (its
    /// key names the traced function by BTF id); None where unreadable.
    btf: std::cell::OnceCell<Option<crate::btf::Btf>>,
    /// Times the table was read again (a module loaded, or a miss).
    pub refreshes: u64,
    /// Stack batches that had a frame nothing covered.
    pub misses: u64,
}

/// The function a trampoline key names, for vmlinux functions: the key is
/// `btf_obj_id << 32 | 0x80000000 | btf_id` (kernel/bpf/trampoline.c,
/// bpf_trampoline_compute_key); vmlinux's BTF object is the first, id 1.
fn traced_name(btf: &crate::btf::Btf, key: u64) -> Option<String> {
    ((key >> 32) == 1 && key & 0x8000_0000 != 0)
        .then(|| {
            btf.function_name((key & 0x7fff_ffff) as u32)
                .map(str::to_owned)
        })
        .flatten()
}

const MISS_REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// /proc/modules, then /proc/kallsyms (that order: a module in the first is
/// in the second, unless it unloaded in between).
fn read_proc() -> Option<(String, Kallsyms)> {
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let table = Kallsyms::with_modules(&kallsyms, &modules);
    Some((modules, table))
}

impl Symbolizer {
    /// This host's table, read now.
    pub fn live() -> Self {
        let mut s = Self::new(Kallsyms::default(), Source::Proc);
        if let Some(fresh) = read_proc() {
            s.take(fresh);
        }
        s.refreshes = 0;
        s
    }

    /// A fixed table (nothing is read again).
    pub fn fixed(table: Kallsyms) -> Self {
        Self::new(table, Source::Fixed)
    }

    fn new(table: Kallsyms, source: Source) -> Self {
        Self {
            table,
            source,
            modules_text: String::new(),
            pending: None,
            last_miss_read: None,
            btf: std::cell::OnceCell::new(),
            refreshes: 0,
            misses: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn table(&self) -> &Kallsyms {
        &self.table
    }

    fn take(&mut self, (modules, table): (String, Kallsyms)) {
        self.table.merge(table);
        self.modules_text = modules;
        self.refreshes += 1;
    }

    /// Merges a background read, waiting for it when `wait`.
    fn collect(&mut self, wait: bool) {
        if !wait && !self.pending.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        if let Some(Ok(Some(fresh))) = self.pending.take().map(|h| h.join()) {
            self.take(fresh);
        }
    }

    /// Notices module loads and unloads (called on the session's tick):
    /// /proc/modules is small; kallsyms is read again, in the background,
    /// only when it changed, so a module's symbols are known while it is
    /// loaded.
    pub fn poll(&mut self) {
        if !matches!(self.source, Source::Proc) {
            return;
        }
        self.collect(false);
        if self.pending.is_some() {
            return;
        }
        let now = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        if now != self.modules_text {
            self.modules_text = now;
            self.pending = std::thread::Builder::new()
                .name("gdt-kallsyms".into())
                .spawn(read_proc)
                .ok();
        }
    }

    /// Names a batch of stacks: a refresh in flight is waited for, and a
    /// batch with a frame nothing covers (a module loaded since the last
    /// read) reads the table again first, at most once per 10 s.
    pub fn stacks(&mut self, stacks: &[&[u64]]) -> Vec<Vec<String>> {
        self.collect(true);
        let miss = stacks
            .iter()
            .flat_map(|s| s.iter())
            .any(|&ip| self.table.misses(ip));
        if miss {
            self.misses += 1;
            let due = self
                .last_miss_read
                .is_none_or(|t| t.elapsed() >= MISS_REFRESH_EVERY);
            if matches!(self.source, Source::Proc) && due {
                self.last_miss_read = Some(std::time::Instant::now());
                if let Some(fresh) = read_proc() {
                    self.take(fresh);
                }
            }
        }
        let live = matches!(self.source, Source::Proc);
        let traced = |key: u64| {
            self.btf
                .get_or_init(|| live.then(|| crate::btf::Btf::vmlinux().ok()).flatten())
                .as_ref()
                .and_then(|b| traced_name(b, key))
        };
        stacks
            .iter()
            .map(|s| self.table.frames_with(s, &traced))
            .collect()
    }

    pub fn frames(&mut self, ips: &[u64]) -> Vec<String> {
        self.stacks(&[ips]).pop().unwrap_or_default()
    }
}

/// The first frame of a DMA-API call's stack that is its caller's: past the
/// DMA API, the IOMMU and swiotlb layers (the tracer's own frames are
/// already gone). A module's frame counts even when only its address is
/// known.
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
    frames.iter().map(String::as_str).find(|f| {
        let named = !f.starts_with("0x") || f.ends_with(']');
        named && !LAYERS.iter().any(|p| f.starts_with(p))
    })
}

#[cfg(test)]
#[path = "symbols_tests.rs"]
mod tests;
