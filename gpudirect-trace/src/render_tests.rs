//! Tests of the text rendering (render.rs).

use std::sync::Arc;

use gpudirect_trace_common::{kind, Counter, CounterKey};

use crate::aggregate::Aggregator;

#[test]
fn a_device_whose_unmaps_the_kernel_skips_gets_a_note_saying_so() {
    let mut agg = Aggregator::new();
    let nvme: Arc<str> = Arc::from("0000:00:04.0");
    // dma_need_unmap() said false 30 times (a counter-only kind).
    let key = CounterKey::new(0x1000, kind::UNMAP_NOT_NEEDED, 0, 0);
    let said_false = Counter {
        count: 30,
        bytes: 0,
    };
    agg.apply_kernel_counters(&[(nvme, key, said_false)]);
    let notes = super::device_notes(&agg.snapshot(1.0, &[]));
    assert!(
        notes.contains("0000:00:04.0: the kernel skips this device's unmaps"),
        "{notes}"
    );
    assert!(notes.contains("said false 30"), "{notes}");
}

#[test]
fn an_empty_trace_is_not_waiting_for_activity_once_it_is_over() {
    let totals = |final_summary| super::Totals {
        kernel: "6.18",
        attached: 24,
        elapsed: 0.1,
        events: 0,
        kernel_hits: Some(0),
        lost: 0,
        missed: 0,
        decode_errors: 0,
        aggregate_only: false,
        final_summary,
    };
    let live = super::live_text(&[], &totals(false));
    assert!(live.contains("(no DMA activity seen yet)"), "{live}");
    let last = super::live_text(&[], &totals(true));
    assert!(last.contains("(no DMA activity in this trace)"), "{last}");
    assert!(!last.contains("yet"), "{last}");
    assert!(last.contains("no probe fired while tracing"), "{last}");
    assert!(!live.contains("no probe fired"), "{live}");
    assert!(
        live.contains("events: 0 in kernel, 0 streamed, 0 LOST"),
        "{live}"
    );
    let unknown = super::live_text(
        &[],
        &super::Totals {
            kernel_hits: None,
            events: 1140,
            ..totals(true)
        },
    );
    assert!(
        unknown.contains(
            "events: ? in kernel (no kernel counter checkpoints around this window), \
             1140 streamed, 0 LOST"
        ),
        "{unknown}"
    );
    // Without the kernel's count, nothing says no probe fired.
    assert!(!unknown.contains("no probe fired"), "{unknown}");
}

/// A row says what its device is: the bus id and its driver, from the
/// inventory the trace started with (sysfs, or a file's header); a device
/// the inventory does not name keeps its bare name.
#[test]
fn a_device_row_names_its_driver() {
    let mut agg = Aggregator::new();
    agg.drivers
        .insert("0000:00:04.0".to_owned(), "nvme".to_owned());
    let key = CounterKey::new(0x1000, kind::DMA_MAP, 0, 0);
    let maps = Counter {
        count: 3,
        bytes: 12288,
    };
    for name in ["0000:00:04.0", "0000:00:05.0"] {
        agg.apply_kernel_counters(&[(Arc::from(name), key, maps)]);
    }
    let devices = agg.snapshot(1.0, &[]);
    assert_eq!(devices[0].driver.as_deref(), Some("nvme"));
    assert_eq!(devices[1].driver, None);
    let totals = super::Totals {
        kernel: "6.18",
        attached: 24,
        elapsed: 1.0,
        events: 0,
        kernel_hits: Some(6),
        lost: 0,
        missed: 0,
        decode_errors: 0,
        aggregate_only: true,
        final_summary: true,
    };
    let text = super::live_text(&devices, &totals);
    let row = |bdf: &str| {
        text.lines()
            .find(|l| l.starts_with(bdf))
            .unwrap_or_else(|| panic!("no row {bdf}: {text}"))
            .to_owned()
    };
    assert!(
        row("0000:00:04.0").starts_with("0000:00:04.0 nvme "),
        "{text}"
    );
    assert!(row("0000:00:05.0").starts_with("0000:00:05.0 "), "{text}");
    let json = serde_json::to_value(&devices).expect("json");
    assert_eq!(json[0]["driver"], "nvme");
    assert!(json[1].get("driver").is_none(), "{json}");
}
