//! One clock in every view: seconds since the start of the trace, with the
//! kernel's monotonic nanoseconds beside them and the wall-clock time where
//! the start's wall time is known.
//!
//! Every event the programs stream carries `bpf_ktime_get_ns()`
//! (CLOCK_MONOTONIC); kernel log records carry the printk clock, which on the
//! kernels supported here runs with it to within microseconds outside suspend.
//! A trace's start is the monotonic time the session (or recording) began.

use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The start of a trace: where relative seconds count from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceClock {
    /// CLOCK_MONOTONIC at the start, nanoseconds.
    pub start_mono_ns: u64,
    /// Wall-clock time at the start, nanoseconds since the Unix epoch; 0 when
    /// unknown.
    pub start_unix_ns: u64,
}

/// One instant, as every view shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    /// Seconds since the start of the trace (negative for events stamped
    /// just before it, between the first attach and the start).
    pub t_s: f64,
    /// The kernel's CLOCK_MONOTONIC nanoseconds.
    pub mono_ns: u64,
    /// UTC wall-clock time (RFC 3339, milliseconds) where known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub wall: Option<String>,
}

impl TraceClock {
    pub fn new(start_mono_ns: u64, start_unix_ns: u64) -> Self {
        Self {
            start_mono_ns,
            start_unix_ns,
        }
    }

    /// A clock starting now.
    pub fn now() -> Self {
        let unix = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self::new(crate::kernel::monotonic_ns(), unix)
    }

    /// Seconds since the start.
    pub fn rel_s(&self, mono_ns: u64) -> f64 {
        (mono_ns as i128 - self.start_mono_ns as i128) as f64 / 1e9
    }

    pub fn wall(&self, mono_ns: u64) -> Option<String> {
        if self.start_unix_ns == 0 {
            return None;
        }
        let unix = self.start_unix_ns as i128 + (mono_ns as i128 - self.start_mono_ns as i128);
        let unix = u64::try_from(unix).ok()?;
        let t = UNIX_EPOCH.checked_add(Duration::from_nanos(unix))?;
        Some(humantime::format_rfc3339_millis(t).to_string())
    }

    pub fn stamp(&self, mono_ns: u64) -> Stamp {
        Stamp {
            t_s: round_us(self.rel_s(mono_ns)),
            mono_ns,
            wall: self.wall(mono_ns),
        }
    }
}

/// Seconds rounded to the microsecond, so that JSON written and read back
/// compares equal (and no view shows more digits than the clock deserves).
fn round_us(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

impl std::fmt::Display for Stamp {
    /// `12.345678s` (the relative seconds every view shows).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.6}s", self.t_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_seconds_and_wall_time_from_one_start() {
        let c = TraceClock::new(40_000_000_000, 1_764_556_800_000_000_000);
        let s = c.stamp(46_459_000_000);
        assert_eq!(s.t_s, 6.459);
        assert_eq!(s.mono_ns, 46_459_000_000);
        assert_eq!(s.wall.as_deref(), Some("2025-12-01T02:40:06.459Z"));
        assert_eq!(s.to_string(), "6.459000s");
        assert_eq!(c.rel_s(39_500_000_000), -0.5, "just before the start");
        assert_eq!(TraceClock::new(5, 0).wall(10), None, "no wall time known");
    }
}
