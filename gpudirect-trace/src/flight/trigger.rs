//! What makes the flight recorder write a snapshot.

use std::str::FromStr;

use crate::model::{incident::Category, Incident};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AerSeverity {
    Corrected,
    NonFatal,
    Fatal,
    /// Non-fatal or fatal.
    Uncorrected,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Any decoded IOMMU fault (VT-d, AMD-Vi, SMMU, virtio-iommu,
    /// iommu:io_page_fault).
    Fault,
    /// An NVIDIA Xid (only these numbers, when given).
    Xid(Vec<u32>),
    /// A PCIe AER error (at least this severity, when given).
    Aer(Option<AerSeverity>),
    /// A DMA-API mapping that failed.
    MapError,
    /// A DMA-API misuse (`--check`), of these checks only when given.
    Misuse(Vec<crate::model::misuse::Check>),
    /// A PCIe link change or presence: `link-down`, `downtrain` or
    /// `removed` (the `LinkChange` names).
    Link(&'static str),
    /// SIGUSR1.
    Signal,
    /// `-- CMD` exited with a non-zero status.
    Exit,
}

/// The triggers `--trigger` takes, for help and errors.
pub const KNOWN: &str = "fault, xid[=N,N...], aer[=corrected|nonfatal|fatal|uncorrected], \
                         map-error, misuse[=CHECK,CHECK...] (with --check), link-down, downtrain, \
                         removed (a PCIe link down or below its maximum, a device gone), \
                         signal (SIGUSR1), exit (-- CMD exited non-zero)";

impl FromStr for Trigger {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = match s.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (s.trim(), None),
        };
        let no_arg = |t: Trigger| match arg {
            None => Ok(t),
            Some(_) => Err(format!("trigger {name} takes no value")),
        };
        match name {
            "fault" => no_arg(Trigger::Fault),
            "map-error" => no_arg(Trigger::MapError),
            "signal" => no_arg(Trigger::Signal),
            "exit" => no_arg(Trigger::Exit),
            "link-down" => no_arg(Trigger::Link("link-down")),
            "downtrain" => no_arg(Trigger::Link("downtrain")),
            "removed" => no_arg(Trigger::Link("removed")),
            "misuse" => match arg {
                None => Ok(Trigger::Misuse(Vec::new())),
                Some(list) => list
                    .split(',')
                    .map(|c| {
                        crate::model::misuse::Check::parse(c.trim()).ok_or_else(|| {
                            let all: Vec<_> = crate::model::misuse::Check::ALL
                                .iter()
                                .map(|c| c.as_str())
                                .collect();
                            format!("unknown misuse check {c:?} (checks: {})", all.join(", "))
                        })
                    })
                    .collect::<Result<_, _>>()
                    .map(Trigger::Misuse),
            },
            "xid" => match arg {
                None => Ok(Trigger::Xid(Vec::new())),
                Some(list) => list
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("xid={list}: {n:?} is not an Xid number"))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Trigger::Xid),
            },
            "aer" => Ok(Trigger::Aer(match arg {
                None => None,
                Some("corrected") => Some(AerSeverity::Corrected),
                Some("nonfatal" | "non-fatal") => Some(AerSeverity::NonFatal),
                Some("fatal") => Some(AerSeverity::Fatal),
                Some("uncorrected") => Some(AerSeverity::Uncorrected),
                Some(other) => {
                    return Err(format!(
                        "aer={other}: the severity is corrected, nonfatal, fatal or uncorrected"
                    ))
                }
            })),
            other => Err(format!("unknown trigger {other:?}; known: {KNOWN}")),
        }
    }
}

/// The severity of an AER fault, from the reason both decoders write
/// ("PCIe AER corrected: ...", "PCIe Uncorrected (Fatal) error: ...").
pub fn aer_severity(reason: &str) -> Option<AerSeverity> {
    let r = reason.to_ascii_lowercase();
    if r.contains("non-fatal") {
        Some(AerSeverity::NonFatal)
    } else if r.contains("fatal") {
        Some(AerSeverity::Fatal)
    } else if r.contains("uncorrected") {
        Some(AerSeverity::NonFatal)
    } else if r.contains("corrected") {
        Some(AerSeverity::Corrected)
    } else {
        None
    }
}

impl Trigger {
    pub fn name(&self) -> &'static str {
        match self {
            Trigger::Fault => "fault",
            Trigger::Xid(_) => "xid",
            Trigger::Aer(_) => "aer",
            Trigger::MapError => "map-error",
            Trigger::Misuse(_) => "misuse",
            Trigger::Link(name) => name,
            Trigger::Signal => "signal",
            Trigger::Exit => "exit",
        }
    }

    /// The label a file is named with, if `inc` fires this trigger.
    pub fn fires(&self, inc: &Incident) -> Option<String> {
        let f = inc.fault.as_ref();
        match (self, inc.category) {
            (Trigger::Fault, Category::IommuFault) => Some("fault".into()),
            (Trigger::MapError, Category::MapError) => Some("map-error".into()),
            (Trigger::Link(want), Category::Link) => inc
                .link
                .as_ref()
                .filter(|c| c.name() == *want)
                .map(|c| c.name().to_owned()),
            (Trigger::Misuse(list), Category::Misuse) => {
                let c = inc.misuse.as_ref()?.check;
                (list.is_empty() || list.contains(&c)).then(|| format!("misuse-{c}"))
            }
            (Trigger::Xid(list), Category::Xid) => {
                let x = f.and_then(|f| f.xid);
                match x {
                    Some(x) if list.is_empty() || list.contains(&x) => Some(format!("xid{x}")),
                    None if list.is_empty() => Some("xid".into()),
                    _ => None,
                }
            }
            (Trigger::Aer(want), Category::Aer) => {
                let got = f.and_then(|f| aer_severity(&f.reason));
                let ok = match (want, got) {
                    (None, _) => true,
                    (
                        Some(AerSeverity::Uncorrected),
                        Some(AerSeverity::NonFatal | AerSeverity::Fatal),
                    ) => true,
                    (Some(w), Some(g)) => *w == g,
                    (Some(_), None) => false,
                };
                let sev = match got {
                    Some(AerSeverity::Corrected) => "aer-corrected",
                    Some(AerSeverity::Fatal) => "aer-fatal",
                    Some(_) => "aer-nonfatal",
                    None => "aer",
                };
                ok.then(|| sev.to_owned())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_trigger_and_names_the_known_ones_on_error() {
        assert_eq!("fault".parse(), Ok(Trigger::Fault));
        assert_eq!("xid=79,31".parse(), Ok(Trigger::Xid(vec![79, 31])));
        assert_eq!("xid".parse(), Ok(Trigger::Xid(vec![])));
        assert_eq!(
            "aer=fatal".parse(),
            Ok(Trigger::Aer(Some(AerSeverity::Fatal)))
        );
        let e = "xdi".parse::<Trigger>().expect_err("unknown");
        assert!(e.contains("known: fault, xid"), "{e}");
        assert!("xid=seventy".parse::<Trigger>().is_err());
        assert!("fault=1".parse::<Trigger>().is_err());
        assert!("aer=bad".parse::<Trigger>().is_err());
        assert_eq!("downtrain".parse(), Ok(Trigger::Link("downtrain")));
        assert!("removed=1".parse::<Trigger>().is_err());
    }

    #[test]
    fn link_triggers_fire_on_their_change_only() {
        use crate::model::pci::LinkChange;
        let mut led = crate::analysis::Ledger::new(crate::model::TraceClock::new(0, 0));
        let down = led.link("0000:01:00.0", 5, LinkChange::Down { reason: "x".into() });
        let gone = led.link("0000:01:00.0", 6, LinkChange::Removed { how: "x".into() });
        let (down, gone) = (led.get(down).expect("in"), led.get(gone).expect("in"));
        let t = Trigger::Link("link-down");
        assert_eq!(t.fires(down).as_deref(), Some("link-down"));
        assert_eq!(t.fires(gone), None);
        assert_eq!(
            Trigger::Link("removed").fires(gone).as_deref(),
            Some("removed")
        );
    }

    #[test]
    fn aer_severity_from_both_decoders_wording() {
        assert_eq!(
            aer_severity("PCIe AER corrected: Receiver Error"),
            Some(AerSeverity::Corrected)
        );
        assert_eq!(
            aer_severity("PCIe Uncorrected (Fatal) error: SDES"),
            Some(AerSeverity::Fatal)
        );
        assert_eq!(
            aer_severity("PCIe AER uncorrected (non-fatal) error"),
            Some(AerSeverity::NonFatal)
        );
    }
}
