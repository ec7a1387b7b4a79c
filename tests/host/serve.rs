//! `gpudirect-trace serve` end to end: events injected through the REAL
//! programs (BPF_PROG_TEST_RUN), served in-process by `serve::start`, checked
//! by `promtool check metrics`, scraped by a real Prometheus server (Debian
//! package, loopback only) and read back through its HTTP query API.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gpudirect_trace::{
    ebpf::{testrun::run_raw_tracepoint, Tracer},
    families::tracepoints,
    serve::{self, ServeOptions},
    session::Session,
};

use crate::{
    inject::{known_kernel_object, load_aggregate_only, load_unattached, run_program},
    require_root,
};

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// One HTTP/1.0 GET (1.0: the answer is never chunked); (status, body).
pub fn http_get(addr: SocketAddr, target: &str, accept: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {target} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n"
    )
    .expect("send request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read response");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_owned())
}

fn free_loopback_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("addr").port()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server on a loopback port with a temporary data directory,
/// scraping `target` every second. Killed (its own child) on drop.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Self {
        Self::with_scrape_configs(&format!(
            "  - job_name: gpudirect\n    static_configs:\n      - targets: ['{target}']\n"
        ))
    }

    /// Scrapes every second what `scrape_configs` (the YAML list's items,
    /// indented by two) says.
    pub fn with_scrape_configs(scrape_configs: &str) -> Self {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} missing: install the Debian package prometheus (cargo xtask bootstrap does)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n{scrape_configs}"
            ),
        )
        .expect("write config");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_loopback_port())
            .parse()
            .expect("addr");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start prometheus");
        Self {
            child,
            addr,
            _dir: dir,
        }
    }

    /// The instant-query result: (labels, value) per series; None while
    /// Prometheus is not answering yet.
    pub fn query(&self, promql: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        let target = format!("/api/v1/query?query={}", url_encode(promql));
        // Not listening yet, or not ready (503) while it starts.
        TcpStream::connect(self.addr).ok()?;
        let (status, body) = http_get(self.addr, &target, "application/json");
        if status != 200 {
            eprintln!("query {promql}: HTTP {status}: {body}");
            return None;
        }
        let doc: serde_json::Value = serde_json::from_str(&body).expect("query answer is JSON");
        assert_eq!(doc["status"], "success", "{body}");
        let result = doc["data"]["result"].as_array().expect("vector result");
        Some(
            result
                .iter()
                .map(|r| {
                    let v = r["value"][1].as_str().expect("value string");
                    (r["metric"].clone(), v.parse().expect("numeric value"))
                })
                .collect(),
        )
    }

    /// Waits until `promql` has exactly one series with value `want`.
    pub fn wait_for(&self, promql: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(r) = self.query(promql) {
                if r.len() == 1 && r[0].1 == want {
                    return;
                }
                last = Some(r);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("{promql} never became {want}; last answer {last:?}");
    }
}

impl Prometheus {
    /// The last scrape error of each active target, by job (empty when the
    /// last scrape succeeded); None while Prometheus is not answering yet.
    pub fn scrape_errors(&self) -> Option<Vec<(String, String)>> {
        TcpStream::connect(self.addr).ok()?;
        let (status, body) = http_get(
            self.addr,
            "/api/v1/targets?state=active",
            "application/json",
        );
        if status != 200 {
            return None;
        }
        let doc: serde_json::Value = serde_json::from_str(&body).expect("targets answer is JSON");
        let targets = doc["data"]["activeTargets"].as_array()?;
        Some(
            targets
                .iter()
                .map(|t| {
                    let job = t["labels"]["job"].as_str().unwrap_or_default().to_owned();
                    (job, t["lastError"].as_str().unwrap_or_default().to_owned())
                })
                .collect(),
        )
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tracer`'s session (streaming or aggregate-only) served with the default
/// options on an ephemeral loopback port.
fn serve_on_loopback(tracer: Tracer, stream: bool) -> serve::Server {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    serve::start(
        Session::from_tracer(tracer, stream),
        listener,
        &ServeOptions::default(),
    )
    .expect("start the metrics server")
}

/// `n` dma_map calls of `size` bytes for `dev` through the session's real
/// program: the k-th at physical address k pages, DMA address `dma` plus k
/// pages, direction to-device.
pub(crate) fn map_pages(server: &serve::Server, dev: u64, n: u64, dma: u64, size: u64) {
    server.with_session(move |s| {
        let fd = s.tracer.program_fd("dma_map").expect("program");
        for i in 0..n {
            let args = [dev, i << 12, dma + (i << 12), size, 1, 0];
            assert_eq!(run_raw_tracepoint(fd, &args, None).expect("run"), 0);
        }
    });
}

#[test]
fn prometheus_scrapes_events_injected_through_the_real_programs() {
    require_root();
    let tracer = load_unattached(8 << 20);
    let pci_dev_offset = u64::from(tracer.offsets.pci_dev_device);
    let device = known_kernel_object();
    let server = serve_on_loopback(tracer, true);
    let addr = server.local_addr();
    let probes = server.with_session(|s| s.tracer.probes.len());
    assert!(probes >= tracepoints().len());
    let run = |program: &str, args: &[u64]| {
        let (program, args) = (program.to_owned(), args.to_vec());
        server.with_session(move |s| run_program(&s.tracer, &program, &args))
    };
    let dev = device.addr;
    for i in 0..3u64 {
        run(
            "dma_map",
            &[dev, 0x1_0000 * i, 0xa000_0000 + i * 0x1000, 4096, 2, 0],
        );
    }
    run("dma_map", &[dev, 0x9_0000, 0xb000_0000, 65536, 1, 0]);
    run("dma_unmap", &[dev, 0xa000_0000, 4096, 2, 0]);
    run("swiotlb_bounced", &[dev, 0xb000_0000, 2048]);
    run("iommu_io_page_fault", &[dev, 0x123000, 1]);
    for xid in [79, 79, 13] {
        run(
            "nvidia_dev_xid",
            &[dev - pci_dev_offset, xid, device.string_addr],
        );
    }

    // The exporter's own answer: valid per promtool, and per format asked.
    let (status, text) = http_get(addr, "/metrics", "*/*");
    assert_eq!(status, 200, "{text}");
    let label = format!("device=\"{}\"", device.name);
    assert!(text.contains(&label), "{label} in\n{text}");
    let (ok, said) = crate::gpu_metrics::promtool(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    let (_, om) = http_get(
        addr,
        "/metrics",
        "application/openmetrics-text;version=1.0.0",
    );
    assert!(om.ends_with("# EOF\n"), "OpenMetrics when asked:\n{om}");
    assert!(!text.contains("# EOF"), "Prometheus text otherwise");
    let (status, health) = http_get(addr, "/healthz", "*/*");
    assert_eq!(status, 200, "{health}");

    // A real Prometheus scraping it (it asks for OpenMetrics).
    let prom = Prometheus::start(addr);
    let d = &device.name;
    prom.wait_for(
        &format!(r#"gpudirect_dma_map_bytes_total{{device="{d}",direction="from_device"}}"#),
        3.0 * 4096.0,
    );
    let expect = [
        (r#"up{job="gpudirect"}"#.to_owned(), 1.0),
        (
            format!(r#"gpudirect_dma_map_bytes_total{{device="{d}",direction="to_device"}}"#),
            65536.0,
        ),
        (
            format!(r#"gpudirect_dma_maps_total{{device="{d}",level="dma"}}"#),
            4.0,
        ),
        (
            format!(r#"gpudirect_dma_unmaps_total{{device="{d}",level="dma"}}"#),
            1.0,
        ),
        (
            format!(r#"gpudirect_mappings_outstanding{{device="{d}",level="dma"}}"#),
            3.0,
        ),
        (
            // OpenMetrics writes le="4096.0", the text format le="4096".
            format!(r#"gpudirect_dma_map_size_bytes_bucket{{device="{d}",le=~"4096(\\.0)?"}}"#),
            3.0,
        ),
        (
            format!(r#"gpudirect_dma_map_size_bytes_count{{device="{d}"}}"#),
            4.0,
        ),
        (
            format!(r#"gpudirect_swiotlb_bounced_bytes_total{{device="{d}"}}"#),
            2048.0,
        ),
        (
            format!(r#"gpudirect_iommu_faults_total{{device="{d}",source="iommu-tracepoint"}}"#),
            1.0,
        ),
        (
            format!(r#"gpudirect_nvidia_xid_total{{device="{d}",xid="79"}}"#),
            2.0,
        ),
        (
            format!(r#"gpudirect_nvidia_xid_total{{device="{d}",xid="13"}}"#),
            1.0,
        ),
        ("gpudirect_events_lost_total".to_owned(), 0.0),
        (r#"gpudirect_events_total{kind="dma_map"}"#.to_owned(), 4.0),
        ("gpudirect_devices_folded_total".to_owned(), 0.0),
        ("count(gpudirect_probe_attached)".to_owned(), probes as f64),
        ("sum(gpudirect_probe_attached)".to_owned(), 0.0),
    ];
    for (promql, want) in &expect {
        let got = prom.query(promql).expect("prometheus answers");
        assert_eq!(got.len(), 1, "{promql}: {got:?}");
        assert_eq!(got[0].1, *want, "{promql}: {got:?}");
    }

    // Later events reach Prometheus on later scrapes: the counter grows.
    run("dma_map", &[dev, 0xf_0000, 0xc000_0000, 4096, 2, 0]);
    prom.wait_for(
        &format!(r#"gpudirect_dma_map_bytes_total{{device="{d}",direction="from_device"}}"#),
        4.0 * 4096.0,
    );
    drop(prom);
    server.stop().expect("the server stops cleanly");
}

/// `gpudirect-trace serve ARGS`: (exit status, stderr).
pub fn serve_cli(args: &[&str]) -> (Option<i32>, String) {
    let out = crate::hostile::bin()
        .arg("serve")
        .args(args)
        .output()
        .expect("run gpudirect-trace serve");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_bad_listen_address_is_a_usage_error() {
    for bad in ["nonsense", "127.0.0.1", "127.0.0.1:99999", "localhost:9435"] {
        let (code, err) = serve_cli(&["--listen", bad]);
        assert_eq!(code, Some(2), "--listen {bad}: {err}");
        assert!(
            err.contains("--listen") && err.contains("IP:PORT") && !err.contains("panicked"),
            "{err}"
        );
    }
    let (code, err) = serve_cli(&["--max-devices", "0"]);
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn serve_on_a_taken_port_fails_with_one_clear_line() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, err) = serve_cli(&["--listen", &addr]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("--listen"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn aggregate_only_serve_exports_the_kernel_counts() {
    require_root();
    let tracer = load_aggregate_only();
    let device = known_kernel_object();
    let server = serve_on_loopback(tracer, false);
    map_pages(&server, device.addr, 20, 0x10_0000, 8192);
    let (status, text) = http_get(server.local_addr(), "/metrics", "text/plain");
    assert_eq!(status, 200);
    let d = &device.name;
    let line = format!(
        "gpudirect_dma_map_bytes_total{{device=\"{d}\",direction=\"to_device\"}} {}\n",
        20 * 8192
    );
    assert!(text.contains(&line), "{line} in\n{text}");
    assert!(
        !text.contains("gpudirect_mappings_outstanding") && !text.contains("_bucket"),
        "no stream, no outstanding mappings or histograms:\n{text}"
    );
    server.stop().expect("stop");
}
