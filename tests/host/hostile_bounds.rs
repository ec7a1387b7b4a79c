//! Hostile input, the bounds (issue 19): every reader stays within 256 MiB
//! RSS on endless input (the real binary, its peak RSS sampled from /proc),
//! and `serve` answers scrapes during 300 slow clients. Crafted files that
//! ask a reader to keep much are in hostile_budget.rs (issue 30).
//!
//! `cargo test -p gpudirect-trace --test host hostile_bounds`

use std::{
    fs,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::{
    hostile::{assert_stderr_has, bin, run, small_trace},
    require_root,
};

/// The bound every reader must stay under (issue 19).
pub(crate) const RSS_BOUND_KIB: u64 = 256 << 10;

/// Runs `cmd` for at most `limit`, sampling its peak RSS (VmHWM); kills it
/// then. Returns the peak in KiB and whether it was still running.
pub(crate) fn peak_rss(mut child: Child, limit: Duration) -> (u64, bool) {
    let start = Instant::now();
    let mut peak = 0;
    let running = loop {
        peak = peak.max(crate::hostile_budget::vm_hwm_kib(child.id() as i32));
        if child.try_wait().expect("wait").is_some() {
            break false;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (peak, running)
}

/// The command started with no input and its output thrown away: the
/// memory-bound tests watch only its peak RSS and how it ends.
pub(crate) fn spawn_quiet(cmd: &mut Command) -> Child {
    spawn_with_stderr(cmd, Stdio::null())
}

/// As `spawn_quiet`, its stderr sent to `stderr` (a pipe the test keeps).
pub(crate) fn spawn_with_stderr(cmd: &mut Command, stderr: Stdio) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn")
}

#[test]
fn explain_and_report_stay_bounded_on_dev_zero_and_dev_urandom() {
    for input in ["/dev/zero", "/dev/urandom"] {
        // Binary input: explain stops at the first NUL with one message
        // (issue 30; it read forever, bounded in memory only, before).
        let out = run(bin().args(["explain", input]));
        assert_eq!(out.status.code(), Some(1), "explain {input}");
        assert_stderr_has(&out, "binary input");
        // Not a trace: refused at once, whatever follows.
        let out = run(bin().args(["report", input]));
        assert_eq!(out.status.code(), Some(1), "{input}");
        assert_stderr_has(&out, "not a gpudirect-trace recording");
    }
}

/// A FIFO in `dir` whose writer (a thread) sends `head` once, then `unit`
/// over and over, `total` bytes in all (None: until the reader goes away).
fn fed_fifo(dir: &Path, head: Vec<u8>, unit: Vec<u8>, total: Option<u64>) -> PathBuf {
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let path = fifo.clone();
    std::thread::spawn(move || {
        let Ok(mut f) = fs::OpenOptions::new().write(true).open(&path) else {
            return;
        };
        if f.write_all(&head).is_err() {
            return;
        }
        let mut sent = 0u64;
        while total.is_none_or(|t| sent < t) {
            if f.write_all(&unit).is_err() {
                return;
            }
            sent += unit.len() as u64;
        }
    });
    fifo
}

#[test]
fn explain_on_an_endless_fifo_of_faults_stays_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = "[ 1.0] DMAR: [DMA Read NO_PASID] Request device [00:02.0] fault addr 0x9c000 \
                [fault reason 0x06] PTE Read access is not set\n";
    let unit = line.repeat(1000).into_bytes();
    let fifo = fed_fifo(dir.path(), Vec::new(), unit, None);
    let (kib, running) = peak_rss(
        spawn_quiet(bin().arg("explain").arg(&fifo)),
        Duration::from_secs(4),
    );
    assert!(running, "explain keeps reading the FIFO");
    assert!(
        kib < RSS_BOUND_KIB,
        "explain on an endless fault storm: {kib} KiB"
    );
}

#[test]
fn report_on_a_fifo_with_a_300_mib_damaged_tail_stays_bounded() {
    // A valid header, then 300 MiB that hold no block: the old reader kept
    // all of it in memory while scanning (a damaged 2 GB tail: 2.1 GB RSS).
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = fs::read(small_trace()).expect("seed trace");
    let header_end = 16 + 16 + u32::from_le_bytes(trace[16..20].try_into().expect("len")) as usize;
    let fifo = fed_fifo(
        dir.path(),
        trace[..header_end].to_vec(),
        vec![0xff; 1 << 20],
        Some(300 << 20),
    );
    let child = spawn_with_stderr(bin().arg("report").arg(&fifo), Stdio::piped());
    let (kib, running) = peak_rss(child, Duration::from_secs(60));
    assert!(!running, "report read the 300 MiB within 60 s");
    assert!(
        kib < RSS_BOUND_KIB,
        "report over a 300 MiB damaged tail: {kib} KiB"
    );
}

/// One GET with 3 s timeouts; (status, body), None on any failure.
pub(crate) fn try_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let t = Duration::from_secs(3);
    let mut s = TcpStream::connect_timeout(&addr, t).ok()?;
    s.set_read_timeout(Some(t)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// A slow client of `serve` until `done`: a partial request head, a byte
/// every 200 ms, reconnecting whenever the server closes it.
fn slow_client(addr: SocketAddr, done: Arc<AtomicBool>) {
    while !done.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        if s.write_all(b"GET /metrics HTTP/1.1\r\n").is_err() {
            continue;
        }
        let mut buf = [0u8; 64];
        while !done.load(Ordering::Relaxed) {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if s.write_all(b"X").is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
}

#[test]
fn serve_answers_scrapes_during_300_slow_clients() {
    require_root();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut server = spawn_quiet(bin().args(["serve", "--listen", &addr.to_string()]));
    let started = Instant::now();
    while try_get(addr, "/healthz").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..300)
        .map(|_| {
            let done = done.clone();
            std::thread::spawn(move || slow_client(addr, done))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let mut failures = Vec::new();
    for i in 0..10 {
        let t = Instant::now();
        match try_get(addr, "/metrics") {
            Some((200, body)) if body.contains("gpudirect_") => {}
            other => failures.push((i, t.elapsed(), other.map(|(s, _)| s))),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    done.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.join();
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(failures.is_empty(), "scrapes that failed: {failures:?}");
}
