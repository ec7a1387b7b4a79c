//! Incidents named after the process behind them: at once where the session
//! knows the name, later where the name arrives after the incident.

use std::sync::Arc;

use gpudirect_trace_common::{kind, Event, DMA_MAPPING_ERROR};

use super::Analysis;
use crate::{aggregate::ProcName, decode::Record, model::TraceClock};

fn map_error(pid: u32) -> Record {
    Record::Event(Event {
        kind: kind::DMA_MAP_ERR,
        pid,
        tid: pid,
        ts_ns: 1_000,
        addr: DMA_MAPPING_ERROR,
        size: 4096,
        ..Default::default()
    })
}

fn name(a: &mut Analysis, pid: u32, comm: &str) {
    a.agg.names.insert(
        pid,
        ProcName {
            pid,
            comm: Some(comm.into()),
            container: None,
        },
    );
}

fn comm(a: &Analysis, id: u64) -> Option<String> {
    a.ledger.get(id)?.process.clone()?.comm
}

#[test]
fn a_failed_maps_process_is_named_now_or_when_its_name_arrives() {
    // The dma-misuse-module scenario's map failure stayed `pid N [current
    // task]`: only misuse findings were named when names arrived.
    let mut a = Analysis::new(TraceClock::default());
    let dev: Arc<str> = Arc::from("0000:00:03.0");
    name(&mut a, 7, "modprobe");
    let known = a.record(&map_error(7), &dev).expect("an incident").id();
    let later = a.record(&map_error(8), &dev).expect("an incident").id();
    assert_eq!(comm(&a, known).as_deref(), Some("modprobe"));
    assert_eq!(comm(&a, later), None);
    // Its task mapped nothing, so no process row asks for its name.
    assert!(a.agg.unnamed_pids().is_empty());
    assert_eq!(a.unnamed_pids(), [8]);
    // The short-lived writer's exit record, drained after its failed map.
    name(&mut a, 8, "echo");
    a.name_incidents();
    assert_eq!(comm(&a, later).as_deref(), Some("echo"));
    assert!(a.unnamed_pids().is_empty());
}
