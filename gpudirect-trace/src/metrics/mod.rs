//! Every exported metric is declared once, as a [`Metric`]: name, type,
//! unit, labels, HELP line and the description docs/metrics.md gives it
//! (in the manner of ebpf_exporter's config). A probe family declares its
//! own (`families/<name>/metrics.rs`); the tool's own are here. `serve`
//! emits series only through a declaration (its model takes a `&Metric`,
//! through [`Sink`]), and docs/metrics.md's tables are made from them
//! (`families::metric_sections`): a test fails when the file and the
//! declarations drift (`GDT_BLESS=1 cargo test -p gpudirect-trace
//! families::` rewrites the tables).

pub mod flight;
pub mod misuse;
pub mod timing;
pub mod tracer;

/// A series' labels, in the declaration's order.
pub type Labels = Vec<(&'static str, String)>;

/// Where a family writes its series (serve's model).
pub trait Sink {
    fn add(&mut self, m: &'static Metric, labels: Labels, v: u64);
    fn add_f64(&mut self, m: &'static Metric, labels: Labels, v: f64);
}

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

/// Text a declaration is written with (never built at run time).
type Text = &'static str;
type LabelNames = &'static [&'static str];

/// The constructors take the HELP line and the documentation as arguments, so
/// no declaration can leave them out; the kind is the constructor's name, a
/// unit is added with [`Metric::in_unit`].
impl Metric {
    /// A counter (exported with `_total`).
    pub const fn counter(name: Text, labels: LabelNames, help: Text, doc: Text) -> Self {
        Self::new(Type::Counter, name, labels, help, doc)
    }

    pub const fn gauge(name: Text, labels: LabelNames, help: Text, doc: Text) -> Self {
        Self::new(Type::Gauge, name, labels, help, doc)
    }

    pub const fn histogram(name: Text, labels: LabelNames, help: Text, doc: Text) -> Self {
        Self::new(Type::Histogram, name, labels, help, doc)
    }

    const fn new(kind: Type, name: Text, labels: LabelNames, help: Text, doc: Text) -> Self {
        Self {
            name,
            kind,
            unit: None,
            labels,
            help,
            doc,
        }
    }

    /// The same metric measured in `unit` (which its exported name then carries).
    pub const fn in_unit(self, unit: Unit) -> Self {
        Self {
            unit: Some(unit),
            ..self
        }
    }

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
    pub metrics: Vec<&'static Metric>,
}

impl Section {
    pub fn new(id: &'static str, metrics: Vec<&'static Metric>) -> Self {
        Self { id, metrics }
    }
}

/// The table of section `s` as docs/metrics.md has it.
pub fn table(s: &Section) -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for m in &s.metrics {
        out.push_str(&m.doc_row());
        out.push('\n');
    }
    out
}

/// `doc` with every section's table put between its markers
/// (`<!-- metrics:ID -->` ... `<!-- /metrics:ID -->`); None where a marker
/// is missing.
pub fn with_tables(doc: &str, sections: &[Section]) -> Option<String> {
    let mut out = doc.to_owned();
    for s in sections {
        let open = format!("<!-- metrics:{} -->\n", s.id);
        let close = format!("<!-- /metrics:{} -->", s.id);
        let a = out.find(&open)? + open.len();
        let b = a + out[a..].find(&close)?;
        out.replace_range(a..b, &table(s));
    }
    Some(out)
}
