//! `cargo xtask`: the project's one entry point for bootstrap, build, tests, VMs.
fn main() {}
