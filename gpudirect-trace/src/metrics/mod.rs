//! Every exported metric, declared once: name, type, unit, labels, HELP
//! line and the description docs/metrics.md gives it (in the manner of
//! ebpf_exporter's config). `serve` emits series only through these
//! declarations (`serve::metrics::Model` takes a `&Metric`, so a metric
//! without a declaration cannot be written), and docs/metrics.md's tables
//! are made from them: a test fails when the file and the declarations
//! drift (`GDT_BLESS=1 cargo test -p gpudirect-trace metrics::` rewrites
//! the tables).

pub mod dma;
pub mod flight;
pub mod gpu;
pub mod misuse;

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Counter,
    Gauge,
    Histogram,
}

/// A base unit, written into the exported name (and OpenMetrics' `# UNIT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Seconds,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Seconds => "seconds",
        }
    }
}

/// One metric family.
#[derive(Debug, PartialEq, Eq)]
pub struct Metric {
    /// The name without unit or `_total` (prometheus-client adds them).
    pub name: &'static str,
    pub kind: Type,
    pub unit: Option<Unit>,
    /// The label names every series of it has, in this order.
    pub labels: &'static [&'static str],
    /// The HELP line: one sentence.
    pub help: &'static str,
    /// What docs/metrics.md says of it (Markdown).
    pub doc: &'static str,
}

impl Metric {
    /// The name as exported: with unit and `_total` suffixes.
    pub fn exported(&self) -> String {
        let mut n = self.name.to_owned();
        if let Some(u) = self.unit {
            n = format!("{n}_{}", u.as_str());
        }
        if self.kind == Type::Counter {
            n.push_str("_total");
        }
        n
    }

    /// Its row in docs/metrics.md.
    fn doc_row(&self) -> String {
        let kind = match self.kind {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        };
        let labels = match self.labels {
            [] => " ".to_owned(),
            l => format!(" {} ", l.join(", ")),
        };
        format!("| `{}` | {kind} |{labels}| {} |", self.exported(), self.doc)
    }
}

/// A table of docs/metrics.md: its marker and its metrics, in order.
pub struct Section {
    pub id: &'static str,
    pub metrics: &'static [&'static Metric],
}

pub const SECTIONS: &[Section] = &[
    Section {
        id: "dma",
        metrics: dma::ALL,
    },
    Section {
        id: "flight",
        metrics: flight::ALL,
    },
    Section {
        id: "misuse",
        metrics: misuse::ALL,
    },
    Section {
        id: "gpu",
        metrics: gpu::ALL,
    },
];

/// Every declared metric.
pub fn all() -> impl Iterator<Item = &'static Metric> {
    SECTIONS.iter().flat_map(|s| s.metrics.iter().copied())
}

/// The table of section `s` as docs/metrics.md has it.
pub fn table(s: &Section) -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for m in s.metrics {
        out.push_str(&m.doc_row());
        out.push('\n');
    }
    out
}

/// `doc` with every section's table put between its markers
/// (`<!-- metrics:ID -->` ... `<!-- /metrics:ID -->`); None where a marker
/// is missing.
pub fn with_tables(doc: &str) -> Option<String> {
    let mut out = doc.to_owned();
    for s in SECTIONS {
        let open = format!("<!-- metrics:{} -->\n", s.id);
        let close = format!("<!-- /metrics:{} -->", s.id);
        let a = out.find(&open)? + open.len();
        let b = a + out[a..].find(&close)?;
        out.replace_range(a..b, &table(s));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_declared_once_with_help_and_doc() {
        let mut seen = std::collections::BTreeSet::new();
        for m in all() {
            assert!(seen.insert(m.exported()), "{} declared twice", m.exported());
            assert!(m.name.starts_with("gpudirect_"), "{}", m.name);
            assert!(!m.help.is_empty() && !m.doc.is_empty(), "{} lacks help", m.name);
            assert!(!m.help.contains('\n') && !m.doc.contains('\n'), "{}", m.name);
        }
    }

    /// docs/metrics.md's tables are the declarations' (GDT_BLESS=1 rewrites
    /// them).
    #[test]
    fn docs_metrics_md_is_made_from_the_declarations() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
        let doc = std::fs::read_to_string(&path).expect("docs/metrics.md");
        let want = with_tables(&doc).expect("docs/metrics.md has every section's markers");
        if std::env::var_os("GDT_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write docs/metrics.md");
            return;
        }
        assert!(
            doc == want,
            "docs/metrics.md's tables differ from the declarations in src/metrics/: run \
             `GDT_BLESS=1 cargo test -p gpudirect-trace metrics::` and commit"
        );
    }
}
