use super::*;

/// The case (6.1 VM, `live --check --stacks`, gdt_misuse inserted
/// after the tracer started): BPF programs and trampolines below the
/// module's address, kallsyms read before the module existed.
const BEFORE: &str = "ffffffff81000000 T _stext\n\
     ffffffff81234000 T dma_unmap_page_attrs\n\
     ffffffff81234800 t iommu_dma_unmap_page\n\
     ffffffff81300000 D some_data\n\
     ffffffff81400000 T do_one_initcall\n\
     ffffffff81500000 T bpf_trace_run3\n\
     ffffffffc0300000 t bpf_prog_6deef7357e7b4530_t_dma_unmap_in\t[bpf]\n\
     ffffffffc0302000 t bpf_trampoline_6442476666\t[bpf]\n\
     0000000000000000 T hidden\n";
const MODULE: &str = "ffffffffc0a01000 t cmd_double_unmap\t[gdt_misuse]\n\
     ffffffffc0a01400 t gdt_call\t[gdt_misuse]\n";
const MODULES: &str = "gdt_misuse 28672 0 - Live 0xffffffffc0a00000 (OE)\n";
/// A stack from the fentry program on dma_unmap_page_attrs, called by the
/// module: our program, its trampoline, the function, the module, init.
const STACK: [u64; 6] = [
    0xffff_ffff_c030_00e9,
    0xffff_ffff_c030_205f,
    0xffff_ffff_8123_4005,
    0xffff_ffff_c0a0_1020,
    0xffff_ffff_c0a0_1410,
    0xffff_ffff_8140_0059,
];

#[test]
fn frames_name_vmlinux_and_module_functions() {
    let k = Kallsyms::parse(&format!("{BEFORE}{MODULE}"));
    assert_eq!(k.frame(0xffff_ffff_8123_4010), "dma_unmap_page_attrs+0x10");
    assert_eq!(
        k.frame(0xffff_ffff_c0a0_1020),
        "cmd_double_unmap+0x20 [gdt_misuse]"
    );
    assert_eq!(k.frame(0x1234), "0x1234");
    assert!(
        Kallsyms::parse("0000000000000000 T x\n").is_empty(),
        "kptr_restrict view"
    );
}

#[test]
fn a_module_address_is_never_named_after_a_bpf_trampoline() {
    // Read before the module loaded: the table has no module symbols, but
    // /proc/modules already names the range.
    let k = Kallsyms::with_modules(BEFORE, MODULES);
    assert_eq!(
        k.frame(0xffff_ffff_c0a0_1020),
        "0xffffffffc0a01020 [gdt_misuse]"
    );
    // Without the range either, a trampoline reaches one page only.
    let k = Kallsyms::parse(BEFORE);
    assert_eq!(k.frame(0xffff_ffff_c030_418e), "0xffffffffc030418e");
    assert_eq!(
        k.frame(0xffff_ffff_c030_205f),
        "bpf_trampoline_6442476666+0x5f [bpf]"
    );
}

#[test]
fn stacks_start_at_the_dma_api_function_then_its_caller() {
    let k = Kallsyms::with_modules(&format!("{BEFORE}{MODULE}"), MODULES);
    let f = k.frames(&STACK);
    assert_eq!(
        f,
        [
            "dma_unmap_page_attrs+0x5",
            "cmd_double_unmap+0x20 [gdt_misuse]",
            "gdt_call+0x10 [gdt_misuse]",
            "do_one_initcall+0x59",
        ]
    );
    assert_eq!(caller(&f), Some("cmd_double_unmap+0x20 [gdt_misuse]"));
    // A tracepoint program's stack: the glue before the function goes too.
    let tp = [
        0xffff_ffff_c030_0010,
        0xffff_ffff_8150_0040,
        0xffff_ffff_8123_4005,
    ];
    assert_eq!(k.frames(&tp), ["dma_unmap_page_attrs+0x5"]);
}

#[test]
fn a_module_address_only_its_range_knows_is_its_caller() {
    let k = Kallsyms::with_modules(BEFORE, MODULES);
    let f = k.frames(&STACK);
    assert_eq!(f[1], "0xffffffffc0a01020 [gdt_misuse]");
    assert_eq!(caller(&f), Some("0xffffffffc0a01020 [gdt_misuse]"));
}

#[test]
fn an_unloaded_modules_frames_still_name_it_and_a_new_load_replaces_them() {
    let mut k = Kallsyms::with_modules(&format!("{BEFORE}{MODULE}"), MODULES);
    // Unloaded: neither file has it any more.
    k.merge(Kallsyms::with_modules(BEFORE, ""));
    assert_eq!(
        k.frame(0xffff_ffff_c0a0_1020),
        "cmd_double_unmap+0x20 [gdt_misuse]"
    );
    // Another module loads at the same address: its names, not the old ones.
    let other = "ffffffffc0a01000 t other_fn\t[other]\n";
    k.merge(Kallsyms::with_modules(
        &format!("{BEFORE}{other}"),
        "other 8192 0 - Live 0xffffffffc0a00000\n",
    ));
    assert_eq!(k.frame(0xffff_ffff_c0a0_1020), "other_fn+0x20 [other]");
    // gdt_call is gone with its module: the new one's last symbol reaches on.
    assert_eq!(k.frame(0xffff_ffff_c0a0_1410), "other_fn+0x410 [other]");
}

#[test]
fn a_fixed_table_is_never_read_again() {
    let mut s = Symbolizer::fixed(Kallsyms::parse(BEFORE));
    let f = s.frames(&STACK);
    assert_eq!(f[0], "dma_unmap_page_attrs+0x5");
    assert_eq!((s.misses, s.refreshes), (1, 0));
    s.poll();
    assert_eq!(s.refreshes, 0);
}

#[test]
fn proc_modules_lines_parse_with_and_without_taints() {
    let m = parse_modules(
        "nvme 61440 2 - Live 0xffffffffc0400000\n\
         gdt_misuse 28672 0 - Live 0xffffffffc0a00000 (OE)\n\
         hidden 4096 0 - Live 0x0000000000000000\n\
         garbage\n",
    );
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[1].start, m[1].end),
        (0xffff_ffff_c0a0_0000, 0xffff_ffff_c0a0_7000)
    );
}

/// The 7.2 VM: e1000e's text below gdt_misuse's, its /proc/modules size
/// (text, data and rodata, allocated apart since 6.4) reaching over
/// gdt_misuse's text. Each module's own symbols name its frames.
#[test]
fn a_modules_total_size_does_not_claim_the_next_modules_text() {
    let syms = "ffffffffc0900000 t e1000_probe\t[e1000e]\n\
         ffffffffc0910000 t cleanup_module\t[e1000e]\n";
    let modules = "e1000e 401408 0 - Live 0xffffffffc0900000\n\
         gdt_misuse 28672 0 - Live 0xffffffffc0a00000 (OE)\n";
    let k = Kallsyms::with_modules(&format!("{BEFORE}{MODULE}{syms}"), modules);
    assert_eq!(
        k.frame(0xffff_ffff_c0a0_1020),
        "cmd_double_unmap+0x20 [gdt_misuse]"
    );
    assert_eq!(
        k.frame(0xffff_ffff_c091_0010),
        "cleanup_module+0x10 [e1000e]"
    );
    // Before gdt_misuse's symbols are read: its address, its name.
    let k = Kallsyms::with_modules(&format!("{BEFORE}{syms}"), modules);
    assert_eq!(
        k.frame(0xffff_ffff_c0a0_1020),
        "0xffffffffc0a01020 [gdt_misuse]"
    );
    // And tracepoint glue goes with the tracer's frames.
    let tp = "ffffffff81600000 T __traceiter_dma_unmap_phys\n";
    let k = Kallsyms::with_modules(&format!("{BEFORE}{MODULE}{tp}"), MODULES);
    let f = k.frames(&[
        0xffff_ffff_c030_0010,
        0xffff_ffff_8160_0064,
        0xffff_ffff_8123_4005,
    ]);
    assert_eq!(f, ["dma_unmap_page_attrs+0x5"]);
}

/// 7.2's unwinder: from the fexit trampoline straight to the caller. The
/// trampoline's key names the traced function (vmlinux BTF object 1, id
/// 0x647a); with it, the stack still starts at the DMA-API function.
#[test]
fn a_trampoline_stands_for_its_traced_function_where_the_unwinder_skips_it() {
    let k = Kallsyms::with_modules(&format!("{BEFORE}{MODULE}"), MODULES);
    let stack = [
        0xffff_ffff_c030_00e9,
        0xffff_ffff_c030_205f,
        0xffff_ffff_c0a0_1020,
    ];
    let key = (1u64 << 32) | 0x8000_0000 | 0x647a;
    assert_eq!(key, 6_442_476_666, "the key kallsyms showed in the 6.1 VM");
    let traced = |k: u64| (k == key).then(|| "dma_iova_link".to_owned());
    assert_eq!(
        k.frames_with(&stack, &traced),
        [
            "dma_iova_link (traced)",
            "cmd_double_unmap+0x20 [gdt_misuse]"
        ]
    );
    // Where the function's own frame follows (6.1), it is not said twice.
    let traced = |k: u64| (k == key).then(|| "dma_unmap_page_attrs".to_owned());
    assert_eq!(
        k.frames_with(&STACK, &traced)[0],
        "dma_unmap_page_attrs+0x5"
    );
    assert_eq!(
        k.frames_with(&STACK, &traced)[1],
        "cmd_double_unmap+0x20 [gdt_misuse]"
    );
}
