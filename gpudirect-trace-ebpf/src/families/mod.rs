//! Probe families' programs, one file or folder each, as in the loader's
//! `families/<name>/` (which names their tracepoints in the catalog).

pub mod pcie;
pub mod tasks;
