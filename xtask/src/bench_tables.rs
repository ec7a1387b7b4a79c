//! `cargo xtask bench`: the host benchmarks' BENCH lines as tables, each
//! measurement next to its goal (issue 17) and whether it met it, by how
//! much. Timing goals are benchmarks, never pass/fail tests: a missed goal
//! is written down, the run still succeeds.

use std::fmt::Write as _;

/// One `BENCH <name> key=value ...` line.
pub struct Line<'a> {
    pub name: &'a str,
    fields: Vec<(&'a str, &'a str)>,
}

impl<'a> Line<'a> {
    pub fn parse(l: &'a str) -> Option<Self> {
        let mut it = l.strip_prefix("BENCH ")?.split_whitespace();
        let name = it.next()?;
        let fields = it.filter_map(|kv| kv.split_once('=')).collect();
        Some(Self { name, fields })
    }

    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn num(&self, key: &str) -> Option<f64> {
        self.get(key)?.parse().ok()
    }

    fn is(&self, key: &str, value: &str) -> bool {
        self.get(key) == Some(value)
    }
}

/// "met (57 <= 100 ns)" or "**missed by 9 ns** (69 > 60 ns)".
pub fn at_most(value: f64, goal: f64, unit: &str) -> String {
    if value <= goal {
        format!("met ({value:.1} <= {goal:.0} {unit})")
    } else {
        format!(
            "**missed by {:.1} {unit}** ({value:.1} > {goal:.0} {unit})",
            value - goal
        )
    }
}

fn at_least(value: f64, goal: f64, what: &str) -> String {
    if value >= goal {
        format!("met ({value:.2} >= {goal:.2} {what})")
    } else {
        format!("**missed** ({value:.2} < {goal:.2} {what})")
    }
}

fn mega(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1} M", v / 1e6)
    } else {
        format!("{:.0} k", v / 1e3)
    }
}

fn reader(out: &mut String, lines: &[Line]) {
    let rows: Vec<&Line> = lines.iter().filter(|l| l.name == "reader_cpu").collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Reader CPU per event (`bench_reader_cpu`)\n\n\
         The real ring filled with the real programs' records, then drained by \
         one thread whose own CPU time (CLOCK_THREAD_CPUTIME_ID) is timed; the \
         fill is not in it. Best of 3 passes of {} events.\n\n\
         | reader | CPU per event | events/s on one core | rate / raw drain's | lost | goal |\n\
         |---|---|---|---|---|---|",
        rows[0].get("events").unwrap_or("?")
    );
    let mut live_ratio = None;
    for r in &rows {
        let (Some(ns), Some(rate), Some(ratio)) = (
            r.num("ns_per_event"),
            r.num("events_per_s_per_core"),
            r.num("vs_raw_rate"),
        ) else {
            continue;
        };
        let who = r.get("reader").unwrap_or("?");
        let goal = match who {
            "live" => {
                live_ratio = Some((ratio, ns));
                at_most(ns, 50.0, "ns")
            }
            "record" => at_most(ns, 70.0, "ns"),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {who} | {ns:.1} ns | {} | {ratio:.2} | {} | {goal} |",
            mega(rate),
            r.get("lost").unwrap_or("?")
        );
    }
    if let Some((ratio, ns)) = live_ratio {
        let _ = writeln!(
            out,
            "\nThe live pipeline at no less than half the raw drain's rate: {} \
             (that would take {:.1} ns per event against the live path's {ns:.1}).",
            at_least(ratio, 0.5, "of the raw rate"),
            ns * ratio / 0.5
        );
    }
    out.push('\n');
}

fn per_hit(out: &mut String, lines: &[Line]) {
    // aggregate-only as it runs by default (one lifetime in 16 timed), then
    // timing every lifetime (`--lifetime-sample 1`), then none.
    let modes = [
        "streaming",
        "aggregate-only",
        "aggregate-only,every-lifetime",
        "aggregate-only,no-lifetimes",
    ];
    let rows: Vec<&Line> = lines.iter().filter(|l| l.name == "program_cost").collect();
    let mut programs: Vec<&str> = rows.iter().filter_map(|l| l.get("program")).collect();
    programs.sort_unstable();
    programs.dedup();
    if programs.is_empty() {
        return;
    }
    let cell = |mode: &str, program: &str| {
        rows.iter()
            .find(|l| l.is("mode", mode) && l.is("program", program))
            .and_then(|l| Some((l.num("ns_per_hit")?, l.num("net_of_floor")?)))
    };
    let floor = |mode: &str| {
        rows.iter()
            .find(|l| l.is("mode", mode) && l.get("accounting_floor_ns").is_some())
            .and_then(|l| l.num("accounting_floor_ns"))
            .map_or("?".into(), |f| format!("{f:.1}"))
    };
    let _ = writeln!(
        out,
        "### Per hit (`bench_program_cost`)\n\n\
         ns per hit net of the empty program's ({} / {} / {} / {} ns: the \
         accounting itself), gross in brackets; 100 000 runs each through \
         BPF_PROG_TEST_RUN, kernel.bpf_stats_enabled. Aggregate-only times \
         one mapping's lifetime in 16 by default; `every lifetime` is \
         `--lifetime-sample 1`.\n\n\
         | program | streaming | aggregate-only | aggregate-only, every lifetime | aggregate-only, no lifetimes |\n\
         |---|---|---|---|---|",
        floor(modes[0]),
        floor(modes[1]),
        floor(modes[2]),
        floor(modes[3])
    );
    for p in &programs {
        let cols: Vec<String> = modes
            .iter()
            .map(|m| cell(m, p).map_or("-".into(), |(g, n)| format!("{n:.1} ({g:.0})")))
            .collect();
        let _ = writeln!(out, "| {p} | {} |", cols.join(" | "));
    }
    out.push_str("\nGoals (the single-mapping hot path, net; issue 28, and issue 17's for no lifetimes):\n\n");
    for p in ["dma_map", "dma_unmap"] {
        let goals = [
            (
                modes[1],
                "aggregate-only (with lifetimes, 1 in 16 timed)",
                40.0,
            ),
            (modes[3], "aggregate-only (no lifetimes)", 20.0),
            (modes[0], "streaming", 50.0),
        ];
        for (mode, what, limit) in goals {
            if let Some((_, n)) = cell(mode, p) {
                let _ = writeln!(
                    out,
                    "- {what} `{p}` at most {limit:.0} ns: {}",
                    at_most(n, limit, "ns")
                );
            }
        }
    }
    out.push('\n');
}

/// `--stacks` per call (issue 28, item 3: at most 700 ns), from
/// bench_stack_cost: streaming dma_map / dma_unmap with and without.
fn stacks(out: &mut String, lines: &[Line]) {
    let rows: Vec<&Line> = lines.iter().filter(|l| l.name == "stack_cost").collect();
    let net = |mode: &str, program: &str| {
        rows.iter()
            .find(|l| l.is("mode", mode) && l.is("program", program))
            .and_then(|l| l.num("net_of_floor"))
    };
    let (Some(base_map), Some(base_unmap)) =
        (net("no-stacks", "dma_map"), net("no-stacks", "dma_unmap"))
    else {
        return;
    };
    let frames = |mode: &str| {
        rows.iter()
            .find_map(|l| l.get("frames").filter(|_| l.is("mode", mode)))
            .unwrap_or("?")
    };
    let _ = writeln!(
        out,
        "### Kernel stacks (`bench_stack_cost`)\n\n\
         Streaming dma_map and dma_unmap through BPF_PROG_TEST_RUN with \
         `--stacks` at three `--stack-depth`s and with `--stacks-every-call`, \
         ns per call added to the same programs without stacks ({base_map:.1} \
         / {base_unmap:.1} ns net). Each unmap undoes the map of 64 calls \
         before, so `--stacks` takes no stack for it (the mapping table \
         holds its map as it should be) but a table lookup. The kernel \
         unwinds the test run's own syscall path ({} frames), shallower than \
         a driver's: this host's floor, not a driver's cost.\n\n\
         | stacks | --stack-depth | frames kept | dma_map | dma_unmap | per call |\n\
         |---|---|---|---|---|---|",
        frames("depth-127")
    );
    let mut default_mean: Option<f64> = None;
    for (mode, which, depth) in [
        ("depth-127", "--stacks", 127),
        ("every-call", "--stacks-every-call", 127),
        ("depth-16", "--stacks", 16),
        ("depth-4", "--stacks", 4),
    ] {
        let (Some(m), Some(u)) = (net(mode, "dma_map"), net(mode, "dma_unmap")) else {
            continue;
        };
        let (m, u) = (m - base_map, u - base_unmap);
        let mean = (m + u) / 2.0;
        if mode == "depth-127" {
            default_mean = Some(mean);
        }
        let _ = writeln!(
            out,
            "| {which} | {depth} | {} | {m:.1} | {u:.1} | {mean:.1} |",
            frames(mode)
        );
    }
    if let Some(w) = default_mean {
        let _ = writeln!(
            out,
            "\nGoal (issue 28): a stack at most 700 ns per call at the default (`--stacks`, \
             every frame), a map and its unmap: {}",
            at_most(w, 700.0, "ns")
        );
    }
    out.push('\n');
}

fn parts(out: &mut String, lines: &[Line]) {
    let rows: Vec<&Line> = lines.iter().filter(|l| l.name == "hot_part").collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "### The hot path's parts (`bench_hot_path_parts`)\n\n\
         Each part alone in a program of the test-support object, net of an \
         empty program in the same run.\n\n| part | ns per hit, net |\n|---|---|\n",
    );
    for r in rows.iter().filter(|r| !r.is("part", "empty")) {
        let _ = writeln!(
            out,
            "| {} | {:.1} |",
            r.get("part").unwrap_or("?"),
            r.num("net_of_empty").unwrap_or(f64::NAN)
        );
    }
    out.push('\n');
}

fn sg(out: &mut String, lines: &[Line]) {
    let rows: Vec<&Line> = lines
        .iter()
        .filter(|l| l.name == "sg_walk" && l.get("mode").is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    let mut sizes: Vec<u64> = rows
        .iter()
        .filter_map(|l| l.get("entries")?.parse().ok())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let cell = |mode: &str, n: u64| {
        rows.iter()
            .find(|l| l.is("mode", mode) && l.get("entries") == Some(&n.to_string()))
            .and_then(|l| Some((l.num("ns_per_hit")?, l.num("ns_per_entry")?)))
            .map_or("-".into(), |(h, e)| format!("{h:.0} ns ({e:.1} per entry)"))
    };
    let none = |mode: &str| {
        rows.iter()
            .find(|l| l.is("mode", mode))
            .and_then(|l| l.num("ns_no_list"))
            .map_or("-".into(), |v| format!("{v:.0} ns"))
    };
    let _ = writeln!(
        out,
        "### Scatter-gather walk (`bench_sg_walk`)\n\n\
         dma_map_sg over real chained lists in kernel memory (arrays of 128, \
         the streamed record checked whole), per hit and per entry over the \
         same program given no list.\n\n\
         | entries | streaming | aggregate-only, no lifetimes |\n|---|---|---|\n\
         | none | {} | {} |",
        none("streaming"),
        none("aggregate-only,no-lifetimes")
    );
    for n in sizes {
        let _ = writeln!(
            out,
            "| {n} | {} | {} |",
            cell("streaming", n),
            cell("aggregate-only,no-lifetimes", n)
        );
    }
    out.push('\n');
}

fn ring(out: &mut String, lines: &[Line]) {
    let Some(cap) = lines.iter().find(|l| l.name == "ring_capacity") else {
        return;
    };
    let _ = writeln!(
        out,
        "### Ring size and wake-ups (`bench_ring_sizing`)\n\n\
         Default ring {} bytes: {} records of {} bytes; the reader is woken at \
         {} bytes of backlog and drains every {} ms on its own. Reader: the \
         session driver (live path) pinned to one CPU; injector: the real \
         dma_map program, paced, on the other.\n\n\
         | offered | achieved/s | lost | wake-ups/s | reader CPU | reader ns/event | record wait p50 / p99 / max | ring covers | goal: no loss |\n\
         |---|---|---|---|---|---|---|---|---|",
        cap.get("ring_bytes").unwrap_or("?"),
        cap.get("records").unwrap_or("?"),
        cap.get("bytes_per_record").unwrap_or("?"),
        cap.get("wakeup_bytes").unwrap_or("?"),
        cap.get("drain_timer_ms").unwrap_or("?"),
    );
    for r in lines.iter().filter(|l| l.name == "ring_load") {
        let offered = r.get("offered").unwrap_or("?");
        let cover = r
            .num("ring_covers_ms")
            .filter(|c| c.is_finite())
            .map_or("-".into(), |c| format!("{c:.1} ms"));
        if r.get("derived").is_some() {
            let _ = writeln!(
                out,
                "| {offered} (derived) | - | - | {} | {}% | - | - | {cover} | - |",
                r.get("wakeups_per_s").unwrap_or("?"),
                r.get("reader_cpu_pct").unwrap_or("?"),
            );
            continue;
        }
        let lost = r.num("lost").unwrap_or(f64::NAN);
        let idle = r.get("injected") == Some("0");
        let _ = writeln!(
            out,
            "| {offered} | {} | {lost:.0} | {:.0} | {:.1}% | {} | {:.2} / {:.2} / {:.2} ms | {cover} | {} |",
            mega(r.num("achieved_per_s").unwrap_or(0.0)),
            r.num("wakeups_per_s").unwrap_or(f64::NAN),
            r.num("reader_cpu_pct").unwrap_or(f64::NAN),
            if idle {
                "-".to_owned()
            } else {
                format!("{:.1}", r.num("reader_ns_per_event").unwrap_or(f64::NAN))
            },
            r.num("wait_p50_ms").unwrap_or(f64::NAN),
            r.num("wait_p99_ms").unwrap_or(f64::NAN),
            r.num("wait_max_ms").unwrap_or(f64::NAN),
            if lost == 0.0 { "met" } else { "**missed**" }
        );
    }
    out.push_str(
        "\n8 M events/s time-scaled (1 M/s into a ring and threshold 8x smaller: \
         the same cover and time to the wake-up in ms):\n\n\
         | ring modelled | ring used | covers | injected | lost | wait p99 |\n|---|---|---|---|---|---|\n",
    );
    for r in lines.iter().filter(|l| l.name == "ring_scaled") {
        let _ = writeln!(
            out,
            "| {} MiB | {} B | {:.1} ms | {} | {} | {:.2} ms |",
            r.get("models_ring_mib").unwrap_or("?"),
            r.get("ring_bytes").unwrap_or("?"),
            r.num("ring_covers_ms").unwrap_or(f64::NAN),
            r.get("injected").unwrap_or("?"),
            r.get("lost").unwrap_or("?"),
            r.num("wait_p99_ms").unwrap_or(f64::NAN),
        );
    }
    out.push('\n');
    for r in lines.iter().filter(|l| l.name == "ring_small") {
        let _ = writeln!(
            out,
            "A {}-byte ring (`--ring-size`) at {}/s: {} lost of {}, {:.0} wake-ups/s \
             (the threshold lowered to a quarter of the ring).",
            r.get("ring_bytes").unwrap_or("?"),
            mega(r.num("rate_per_s").unwrap_or(0.0)),
            r.get("lost").unwrap_or("?"),
            r.get("injected").unwrap_or("?"),
            r.num("wakeups_per_s").unwrap_or(f64::NAN),
        );
    }
    for r in lines.iter().filter(|l| l.name == "ring_stall") {
        let _ = writeln!(
            out,
            "\nA reader stalled {} ms at {}/s (the ring covers {} ms): {} lost, {} \
             expected from (stall - cover) x rate.",
            r.get("stall_ms").unwrap_or("?"),
            mega(r.num("rate_per_s").unwrap_or(0.0)),
            r.get("ring_covers_ms").unwrap_or("?"),
            r.get("lost").unwrap_or("?"),
            r.get("expected_lost").unwrap_or("?"),
        );
    }
    out.push('\n');
}

/// An offered rate: a number, or "max" (unpaced injectors).
fn offered(v: &str) -> String {
    v.parse().map_or_else(|_| v.replace("max", "all-out"), mega)
}

/// Issue 28, item 5: the highest rate each streaming reader keeps up with
/// through the default ring, from `bench_lossless_rate`'s ramp.
fn lossless(out: &mut String, lines: &[Line]) {
    let results: Vec<&Line> = lines.iter().filter(|l| l.name == "lossless_rate").collect();
    if results.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Highest lossless rate (`bench_lossless_rate`)\n\n\
         Issue 28's goal: the event rate at which each mode first loses an event, with the \
         default ring ({} bytes), on this machine (above). The real session driver reads, \
         pinned to one CPU; paced injectors (BPF_PROG_TEST_RUN of the real dma_map program, \
         about 1 M/s each, more threads sharing the CPUs beyond that) offer doubling rates \
         for {} s each until the kernel counts a loss, then the gap is bisected. Where the \
         injectors cannot reach the offered rate any more, one all-out step follows (two \
         unpaced injectors per CPU, the reader's CPU shared three ways); without a loss there \
         the rate is a lower bound, all this machine could offer, and it depends on what \
         else the machine runs (see the load average above). Aggregate-only has no \
         ring and cannot lose to a slow reader (its programs count in kernel maps; a full \
         mapping table is counted apart, as table-full misses), so it has no row.\n\n\
         | mode (reader) | highest lossless (offered / achieved per s) | first loss (offered / achieved per s) | result |\n|---|---|---|---|",
        results[0].get("ring_bytes").unwrap_or("?"),
        results[0].get("window_s").unwrap_or("?"),
    );
    for r in &results {
        let pair = |o: &str, a: &str| match (r.get(o), r.num(a)) {
            (Some("max"), Some(a)) => format!("all-out / {}", mega(a)),
            (Some(o), Some(a)) => format!("{} / {}", offered(o), mega(a)),
            _ => "none".to_owned(),
        };
        let best = pair("highest_lossless_offered", "highest_lossless_achieved");
        let best_a = r.num("highest_lossless_achieved").unwrap_or(0.0);
        let result = if let Some(lost_a) = r.num("first_loss_achieved") {
            if r.is("first_loss_offered", "max") && lost_a <= best_a {
                // All-out lost at a lower rate than a paced step kept:
                // the reader lost its CPU to spinning injectors.
                format!(
                    "no loss paced up to {}/s, the most paced injectors reached; lost only \
                     all-out at {}/s, the reader's CPU shared with spinning injectors",
                    mega(best_a),
                    mega(lost_a)
                )
            } else {
                format!("loses from about {}/s achieved", mega(lost_a))
            }
        } else if r.is("saturated", "1") {
            format!(
                "no loss up to {}/s, the most this machine offered (a lower bound)",
                mega(r.num("highest_lossless_achieved").unwrap_or(0.0))
            )
        } else {
            "no loss within the ramp".to_owned()
        };
        let _ = writeln!(
            out,
            "| streaming ({}) | {best} | {} | {result} |",
            r.get("reader").unwrap_or("?"),
            pair("first_loss_offered", "first_loss_achieved"),
        );
    }
    out.push_str("\nEvery offered rate:\n\n| reader | offered/s | achieved/s | injector threads | lost |\n|---|---|---|---|---|\n");
    for r in lines.iter().filter(|l| l.name == "lossless_step") {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.get("reader").unwrap_or("?"),
            offered(r.get("offered_per_s").unwrap_or("?")),
            mega(r.num("achieved_per_s").unwrap_or(0.0)),
            r.get("injectors").unwrap_or("?"),
            r.get("lost").unwrap_or("?"),
        );
    }
    out.push('\n');
}

/// The tables, in the order of the generated section.
/// Streaming's per-hit cost while a reader drains on another CPU, under
/// aya's reader and the tool's own: the range over rounds, net.
fn with_reader(out: &mut String, lines: &[Line]) {
    let rows: Vec<&Line> = lines
        .iter()
        .filter(|l| l.name == "streaming_with_reader")
        .collect();
    if rows.is_empty() {
        return;
    }
    let range = |reader: &str, program: &str| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|l| l.is("reader", reader) && l.is("program", program))
            .filter_map(|l| l.num("net_of_floor"))
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if v.is_empty() {
            "-".into()
        } else {
            format!("{lo:.1}-{hi:.1}")
        }
    };
    let lost: u64 = rows
        .iter()
        .filter_map(|l| l.get("lost")?.parse::<u64>().ok())
        .sum();
    let _ = writeln!(
        out,
        "### Streaming while the reader drains (`bench_streaming_with_reader`)\n\n\
         ns per hit net of the empty program, the programs on one CPU and a reader \
         on the other waiting for their wake-ups and draining everything, as the \
         session driver does; the range over {} interleaved rounds a reader, \
         each 200 000 maps and unmaps through the default ring. aya's reader \
         stores the consumer position after every record, the tool's own once per \
         64 KiB and when caught up. Records lost in all rounds: {lost}.\n\n\
         | program | aya's reader | the tool's reader |\n|---|---|---|",
        rows.len() / 4
    );
    for p in ["dma_map", "dma_unmap"] {
        let _ = writeln!(out, "| {p} | {} | {} |", range("aya", p), range("own", p));
    }
    out.push('\n');
}

pub fn render(lines: &[&str]) -> String {
    let parsed: Vec<Line> = lines.iter().filter_map(|l| Line::parse(l)).collect();
    let mut out = String::new();
    reader(&mut out, &parsed);
    per_hit(&mut out, &parsed);
    with_reader(&mut out, &parsed);
    parts(&mut out, &parsed);
    sg(&mut out, &parsed);
    stacks(&mut out, &parsed);
    ring(&mut out, &parsed);
    lossless(&mut out, &parsed);
    out
}

#[cfg(test)]
mod tests;
