//! Continuations of the bounded scatterlist walk, for kernels without
//! bpf_loop() (5.10 to 5.16).
//!
//! There a walking program (the `_nl` build of the dma_map_sg, dma_unmap_sg,
//! dma_map_sgtable and dma_sync_sg hooks) walks `SG_PREFIX + SG_BOUNDED_REST`
//! steps, all the verifier accepts in one program; when the list goes on it
//! tail-calls its continuation (`t_<slot>_cont` / `k_<slot>_cont`), which
//! walks on with the same cursor and tail-calls itself until the list ends
//! or the kernel's tail-call limit (`SG_TAIL_CALLS`) stops it; the last one
//! builds the record. A continuation must be of its caller's program type
//! (and, for fentry/fexit, loaded against the same function), so each is
//! loaded here next to the program it continues and put into `SG_CONT_T`
//! (tracing) or `SG_CONT_K` (kprobe) at that program's scratch slot.

#[cfg(any(test, feature = "test-support"))]
use anyhow::Context as _;
use aya::{
    maps::ProgramArray,
    programs::{KProbe, Program},
    Btf as AyaBtf, Ebpf,
};
use gpudirect_trace_common::{sg_scratch, SG_BOUNDED_REST, SG_PREFIX, SG_TAIL_CALLS};

use super::explain::{Env, Stage, Target};

/// The scratch slots (fentry/fexit, kprobe) of a DMA-API spec's walking
/// programs, by the spec's slot name.
fn slots(slot: &str) -> Option<(u32, u32)> {
    Some(match slot {
        "dma_map_sg" => (sg_scratch::FEXIT_MAP, sg_scratch::KRET_MAP),
        "dma_unmap_sg" => (sg_scratch::FENTRY_UNMAP, sg_scratch::KPROBE_UNMAP),
        "dma_map_sgt" => (sg_scratch::FEXIT_SGTABLE, sg_scratch::KRET_SGTABLE),
        "sync_sg_cpu" => (sg_scratch::BTF_SYNC_CPU, sg_scratch::REGS_SYNC_CPU),
        "sync_sg_dev" => (sg_scratch::BTF_SYNC_DEV, sg_scratch::REGS_SYNC_DEV),
        _ => return None,
    })
}

/// Entries one walk reaches with every continuation (chain entries count as
/// steps).
pub const fn reach() -> u32 {
    SG_PREFIX + SG_BOUNDED_REST * (1 + SG_TAIL_CALLS)
}

/// Loads the continuation of `slot`'s walking program and registers it;
/// `btf` Some: the fentry/fexit build on `func`, None: the kprobe build.
pub fn load(
    ebpf: &mut Ebpf,
    slot: &str,
    func: &str,
    btf: Option<&AyaBtf>,
    env: &Env,
) -> Result<(), String> {
    let why = |e: &aya::programs::ProgramError| {
        let target = match btf {
            Some(_) => Target::Fentry { name: func },
            None => Target::Kprobe { name: func },
        };
        super::explain::program_error(e, Stage::Load, target, env)
    };
    let (t, k) = slots(slot).ok_or_else(|| format!("no continuation for slot {slot}"))?;
    let (name, array, index) = match btf {
        Some(_) => (format!("t_{slot}_cont"), "SG_CONT_T", t),
        None => (format!("k_{slot}_cont"), "SG_CONT_K", k),
    };
    let prog = ebpf
        .program_mut(&name)
        .ok_or_else(|| format!("program {name} missing"))?;
    let fd = match (prog, btf) {
        (Program::FEntry(p), Some(btf)) => {
            p.load(func, btf).map_err(|e| why(&e))?;
            p.fd().and_then(|fd| fd.try_clone().map_err(Into::into))
        }
        (Program::FExit(p), Some(btf)) => {
            p.load(func, btf).map_err(|e| why(&e))?;
            p.fd().and_then(|fd| fd.try_clone().map_err(Into::into))
        }
        (Program::KProbe(p), None) => {
            let p: &mut KProbe = p;
            p.load().map_err(|e| why(&e))?;
            p.fd().and_then(|fd| fd.try_clone().map_err(Into::into))
        }
        _ => return Err(format!("program {name} is not of its caller's type")),
    }
    .map_err(|e| format!("{name}: {e}"))?;
    let mut map: ProgramArray<_> = ebpf
        .map_mut(array)
        .ok_or_else(|| format!("map {array} missing"))?
        .try_into()
        .map_err(|e: aya::maps::MapError| e.to_string())?;
    map.set(index, &fd, 0)
        .map_err(|e| format!("{array}[{index}]: {e}"))
}

impl super::Tracer {
    /// Test support: loads `bench_sg_bounded` and its continuation, and
    /// registers the continuation for tail calls (as the loader does for
    /// the hooks' bounded walks on kernels without bpf_loop()).
    #[cfg(any(test, feature = "test-support"))]
    pub fn load_bounded_walk(&mut self, with_continuation: bool) -> anyhow::Result<()> {
        self.load_unattached("bench_sg_bounded")?;
        if !with_continuation {
            return Ok(());
        }
        self.load_unattached("bench_sg_bounded_cont")?;
        let fd = self
            .ebpf
            .program("bench_sg_bounded_cont")
            .context("bench_sg_bounded_cont")?
            .fd()?
            .try_clone()?;
        let mut array: aya::maps::ProgramArray<_> = self
            .ebpf
            .map_mut("SG_CONT_R")
            .context("map SG_CONT_R missing")?
            .try_into()?;
        array.set(gpudirect_trace_common::sg_scratch::TP_MAP, &fd, 0)?;
        Ok(())
    }
}
