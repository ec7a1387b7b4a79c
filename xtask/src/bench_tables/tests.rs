//! The tables' wording and arithmetic, from BENCH lines written by hand.

use super::*;

#[test]
fn goals_say_met_or_missed_by_how_much() {
    assert_eq!(at_most(57.1, 100.0, "ns"), "met (57.1 <= 100 ns)");
    assert_eq!(
        at_most(69.0, 60.0, "ns"),
        "**missed by 9.0 ns** (69.0 > 60 ns)"
    );
    let l = Line::parse("BENCH reader_cpu reader=live ns_per_event=57.1").expect("line");
    assert_eq!((l.name, l.get("reader")), ("reader_cpu", Some("live")));
    let t = render(&[
        "BENCH reader_cpu reader=raw-drain events=8 ns_per_event=6.0 events_per_s_per_core=166000000 vs_raw_rate=1.00 lost=0",
        "BENCH reader_cpu reader=live events=8 ns_per_event=47.0 events_per_s_per_core=21300000 vs_raw_rate=0.11 lost=0",
    ]);
    assert!(
        t.contains("| live | 47.0 ns | 21.3 M | 0.11 | 0 | met (47.0 <= 50 ns) |"),
        "{t}"
    );
    assert!(
        t.contains("**missed** (0.11 < 0.50 of the raw rate)"),
        "{t}"
    );
}

#[test]
fn stacks_are_what_they_add_to_the_same_programs_without() {
    let t = render(&[
        "BENCH stack_cost mode=no-stacks program=dma_map runs=1 ns_per_hit=90.0 net_of_floor=60.0",
        "BENCH stack_cost mode=no-stacks program=dma_unmap runs=1 ns_per_hit=91.0 net_of_floor=61.0",
        "BENCH stack_cost mode=depth-127 program=dma_map runs=1 ns_per_hit=900.0 net_of_floor=870.0",
        "BENCH stack_cost mode=depth-127 program=dma_unmap runs=1 ns_per_hit=700.0 net_of_floor=670.0",
        "BENCH stack_cost mode=depth-127 frames=12",
        "BENCH stack_cost mode=depth-4 program=dma_map runs=1 ns_per_hit=400.0 net_of_floor=370.0",
        "BENCH stack_cost mode=depth-4 program=dma_unmap runs=1 ns_per_hit=300.0 net_of_floor=270.0",
        "BENCH stack_cost mode=depth-4 frames=4",
    ]);
    assert!(t.contains("(60.0 / 61.0 ns net)"), "{t}");
    assert!(t.contains("syscall path (12 frames)"), "{t}");
    assert!(
        t.contains("| --stacks | 127 | 12 | 810.0 | 609.0 | 709.5 |"),
        "{t}"
    );
    assert!(
        t.contains("| --stacks | 4 | 4 | 310.0 | 209.0 | 259.5 |"),
        "{t}"
    );
    assert!(!t.contains("| 16 |"), "{t}");
    assert!(!t.contains("--stacks-every-call |"), "{t}");
    assert!(t.contains("**missed by 9.5 ns** (709.5 > 700 ns)"), "{t}");
}

#[test]
fn lossless_rate_says_where_it_lost_or_that_it_could_not() {
    let t = render(&[
        "BENCH lossless_step reader=live offered_per_s=1000000 achieved_per_s=950000 injectors=2 injected=1900000 received=1900000 lost=0",
        "BENCH lossless_step reader=live offered_per_s=max achieved_per_s=900000 injectors=4 injected=1800000 received=1800000 lost=0",
        "BENCH lossless_rate reader=live ring_bytes=8388608 window_s=2 highest_lossless_offered=1000000 highest_lossless_achieved=950000 first_loss_offered=none first_loss_achieved=none saturated=1",
        "BENCH lossless_rate reader=all ring_bytes=8388608 window_s=2 highest_lossless_offered=500000 highest_lossless_achieved=500000 first_loss_offered=max first_loss_achieved=1100000 saturated=0",
        "BENCH lossless_rate reader=record ring_bytes=8388608 window_s=2 highest_lossless_offered=500000 highest_lossless_achieved=500000 first_loss_offered=750000 first_loss_achieved=740000 saturated=0",
    ]);
    assert!(t.contains("default ring (8388608 bytes)"), "{t}");
    assert!(
        t.contains("| streaming (live) | 1.0 M / 950 k | none | no loss up to 950 k/s"),
        "{t}"
    );
    assert!(
        t.contains(
            "| streaming (record) | 500 k / 500 k | 750 k / 740 k | loses from about 740 k/s achieved |"
        ),
        "{t}"
    );
    assert!(t.contains("| live | 1.0 M | 950 k | 2 | 0 |"), "{t}");
    assert!(t.contains("| live | all-out | 900 k | 4 | 0 |"), "{t}");
    assert!(
        t.contains("| all-out / 1.1 M | loses from about 1.1 M/s achieved |"),
        "{t}"
    );
    let t = render(&[
        "BENCH lossless_rate reader=live ring_bytes=8388608 window_s=2 highest_lossless_offered=2000000 highest_lossless_achieved=1641367 first_loss_offered=max first_loss_achieved=1404242 saturated=0",
    ]);
    assert!(
        t.contains("no loss paced up to 1.6 M/s, the most paced injectors reached; lost only all-out at 1.4 M/s"),
        "{t}"
    );
}

#[test]
fn streaming_with_a_reader_is_each_readers_range_over_rounds() {
    let t = render(&[
        "BENCH streaming_with_reader reader=aya program=dma_map net_of_floor=102.6 lost=0",
        "BENCH streaming_with_reader reader=aya program=dma_unmap net_of_floor=117.2 lost=0",
        "BENCH streaming_with_reader reader=own program=dma_map net_of_floor=76.1 lost=0",
        "BENCH streaming_with_reader reader=own program=dma_unmap net_of_floor=87.7 lost=0",
        "BENCH streaming_with_reader reader=aya program=dma_map net_of_floor=83.3 lost=0",
        "BENCH streaming_with_reader reader=aya program=dma_unmap net_of_floor=91.8 lost=2",
        "BENCH streaming_with_reader reader=own program=dma_map net_of_floor=77.5 lost=0",
        "BENCH streaming_with_reader reader=own program=dma_unmap net_of_floor=88.8 lost=0",
    ]);
    assert!(t.contains("| dma_map | 83.3-102.6 | 76.1-77.5 |"), "{t}");
    assert!(t.contains("| dma_unmap | 91.8-117.2 | 87.7-88.8 |"), "{t}");
    assert!(t.contains("over 2 interleaved rounds"), "{t}");
    assert!(t.contains("Records lost in all rounds: 2."), "{t}");
}
