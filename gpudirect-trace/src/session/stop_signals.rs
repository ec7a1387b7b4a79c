//! SIGINT, SIGTERM and SIGHUP (and SIGUSR1, the flight recorder's trigger)
//! caught from the first moment of `record`.
//!
//! The session driver listens for them only once the session runs, ~0.3 s
//! (more on a loaded host) after the output was created: a signal in
//! between killed the process and left a 0-byte trace, or the temporary
//! file of `--force`, behind (issue 30). [`install`] is called before
//! anything is created; a signal then only sets [`pending`], the command
//! checks it between its steps and the driver once it listens itself.

use std::sync::{
    atomic::{AtomicI32, Ordering},
    Once,
};

static PENDING: AtomicI32 = AtomicI32::new(0);
/// SIGUSR1 (the flight recorder's `signal` trigger) that came before the
/// driver listened: its default action ended the process.
static USER: AtomicI32 = AtomicI32::new(0);
static INSTALL: Once = Once::new();

/// The signals that end a recording.
const STOP: [(i32, &str); 3] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGHUP, "SIGHUP"),
];

/// Catches the stop signals from now on (their default action, ending the
/// process at once, is gone for the rest of its life: the driver's own
/// handlers are registered beside this one, in the same registry).
pub fn install() -> std::io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        for (sig, _) in STOP {
            // SAFETY: the action only stores into an atomic, which is
            // async-signal-safe, and never panics.
            let r = unsafe {
                signal_hook_registry::register(sig, move || {
                    let _ = PENDING.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                })
            };
            if let Err(e) = r {
                result = Err(e);
                return;
            }
        }
        // SAFETY: as above, a store into an atomic.
        let r = unsafe {
            signal_hook_registry::register(libc::SIGUSR1, || {
                USER.store(1, Ordering::SeqCst);
            })
        };
        if let Err(e) = r {
            result = Err(e);
        }
    });
    result
}

/// Whether a SIGUSR1 came since [`install`] that nobody took yet.
pub fn take_user_signal() -> bool {
    USER.swap(0, Ordering::SeqCst) != 0
}

/// The first stop signal caught since [`install`], by name and number.
pub fn pending() -> Option<(&'static str, i32)> {
    let sig = PENDING.load(Ordering::SeqCst);
    STOP.iter()
        .find(|(s, _)| *s == sig)
        .map(|&(s, name)| (name, s))
}
