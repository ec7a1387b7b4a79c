//! The domain model every view shares: faults, mapping states, processes,
//! incidents and the trace's clock. Live, record, report, export, serve and
//! explain all use these types; each carries its own `Display`, which the
//! terminal, the text report and the HTML page print alike, and all are
//! Serialize + Deserialize (trace files store them typed).
//!
//! This module depends on no other part of the tool but small formatting
//! helpers (`output`) and the PCI-id normaliser of the fault decoders.

pub mod clock;
pub mod fault;
pub mod incident;
pub mod mapping;
pub mod misuse;
pub mod pci;
pub mod process;

pub use self::{
    clock::{Stamp, TraceClock},
    fault::{Access, Channel, Fault, Source},
    incident::{Category, Incident, IommuChange, MapError},
    mapping::{MapLevel, MappingState},
    process::{task_of, Process, ProcessOrigin, INTERRUPT_PID},
};
