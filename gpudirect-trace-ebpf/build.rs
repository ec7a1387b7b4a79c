//! Linker flags for the eBPF object.
//!
//! bpf-linker passes `--bpf-expand-memcpy-in-order` to LLVM by default. That
//! flag sets LLVM's stores-per-memset limit to 0 for the BPF target, so every
//! zeroing of a struct or array (`Event` fields, a cursor's words) became a
//! call to the exported `memset`: a bpf-to-bpf call into a loop that stores
//! one byte per iteration (2076 call sites in the object at 933d69b, 12 to 28
//! in each DMA-API program). Without the flag LLVM writes them as plain
//! stores of the widest aligned size, up to 128 stores; memcpy is expanded
//! inline either way. Measured on the CI host (release host tests, five
//! interleaved runs of bench_program_cost, ns net, medians): dma_map_sg
//! streaming 165 -> 103, aggregate-only 151 -> 71, without lifetimes
//! 115 -> 49; dma_unmap_sg 166 -> 106, 126 -> 61, 107 -> 50; the
//! single-mapping raw tracepoint programs the same within noise. The
//! verifier has no byte loop to walk per call site: the largest program's
//! verified instructions on 6.18 fell from 35008 to 20265, and the 6.1 VM's
//! sg-many-exact scenario (two tracers loaded under TCG) from 34-36 s to
//! 27.5 s.
fn main() {
    println!("cargo:rustc-link-arg-bins=--disable-expand-memcpy-in-order");
}
