//! A small DevTools-protocol client for the page's browser tests: Debian's
//! headless Chromium driven over `--remote-debugging-pipe` (requests on fd
//! 3, answers and events on fd 4, each message JSON ended by a NUL). It
//! loads a page from a file, records console messages, uncaught exceptions,
//! log entries and network requests, evaluates JavaScript, sends real
//! mouse events and takes screenshots. The browser is the one
//! `cargo xtask bootstrap` installs; a missing one fails the test.

use std::{
    fs::File,
    io::{Read as _, Write as _},
    os::{
        fd::{FromRawFd as _, RawFd},
        unix::process::CommandExt as _,
    },
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use base64::Engine as _;
use serde_json::{json, Value};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// How long one protocol call may take on a loaded 2-core machine.
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

pub struct Browser {
    child: Child,
    tx: File,
    rx: Receiver<Value>,
    next: u64,
    session: String,
    /// Every event received, in order.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

impl Browser {
    /// Starts headless Chromium with a fresh profile and no network
    /// activity of its own, and attaches to one page of `width` x `height`.
    pub fn launch(width: u32, height: u32, scripts: bool) -> Browser {
        assert!(
            Path::new(CHROMIUM).is_file(),
            "{CHROMIUM} is missing: run `cargo xtask bootstrap` (installs Debian's chromium); \
             the page's browser tests cannot pass without it"
        );
        let profile = tempfile::tempdir().expect("profile dir");
        let (to_child, from_us) = pipe();
        let (to_us, from_child) = pipe();
        let mut cmd = Command::new(CHROMIUM);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork
        // and exec. Both ends move above 10 first, so that neither dup2
        // overwrites the other (the pipes may be fds 3 and 4 themselves),
        // and dup2 onto a different fd clears close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                let a = libc::fcntl(to_child, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(from_child, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        // SAFETY: the descriptors are ours; each is wrapped exactly once
        // (the child's ends are closed here, in the parent).
        let (tx, mut rxf) = unsafe {
            libc::close(to_child);
            libc::close(from_child);
            (File::from_raw_fd(from_us), File::from_raw_fd(to_us))
        };
        let (send, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 1 << 20];
            loop {
                let n = match rxf.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Some(at) = buf.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = buf.drain(..=at).collect();
                    let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1]) else {
                        continue;
                    };
                    if send.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            tx,
            rx,
            next: 0,
            session: String::new(),
            events: Vec::new(),
            _profile: profile,
        };
        let target = b.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let id = target["targetId"].as_str().expect("targetId").to_owned();
        let att = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": id, "flatten": true}),
        );
        b.session = att["sessionId"].as_str().expect("sessionId").to_owned();
        for m in [
            "Runtime.enable",
            "Page.enable",
            "Log.enable",
            "Network.enable",
        ] {
            b.call(m, json!({}));
        }
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        if !scripts {
            b.call(
                "Emulation.setScriptExecutionDisabled",
                json!({"value": true}),
            );
        }
        b
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next += 1;
        let id = self.next;
        let mut m = json!({"id": id, "method": method, "params": params});
        if session {
            m["sessionId"] = Value::String(self.session.clone());
        }
        let mut bytes = serde_json::to_vec(&m).expect("json");
        bytes.push(0);
        self.tx.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let v = self
                .receive_by(deadline)
                .unwrap_or_else(|e| panic!("{method}: no answer from chromium ({e})"));
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    /// The browser's next message, if one comes before `deadline`.
    fn receive_by(&self, deadline: Instant) -> Result<Value, RecvTimeoutError> {
        self.rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    /// Loads `file` and waits for its load event.
    pub fn open(&mut self, file: &Path) {
        let url = format!("file://{}", file.display());
        let seen = self.events.len();
        self.call("Page.navigate", json!({"url": url}));
        let loaded = |e: &Value| e["method"] == "Page.loadEventFired";
        if self.events[seen..].iter().any(loaded) {
            return;
        }
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let v = self
                .receive_by(deadline)
                .unwrap_or_else(|e| panic!("{url} did not load ({e})"));
            let done = loaded(&v);
            self.events.push(v);
            if done {
                return;
            }
        }
    }

    /// The value of a JavaScript expression (an exception fails the test).
    pub fn eval(&mut self, js: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{js}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// A real mouse event at page coordinates (CSS px of the viewport).
    pub fn mouse(&mut self, kind: &str, x: f64, y: f64, buttons: u32) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": x, "y": y, "button": if buttons > 0 || kind != "mouseMoved" { "left" } else { "none" },
                   "buttons": buttons, "clickCount": 1}),
        );
    }

    /// PNG of the whole page (not just the viewport).
    pub fn screenshot(&mut self, width: f64, height: f64) -> Vec<u8> {
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("screenshot data"))
            .expect("the screenshot is standard base64")
    }

    /// Uncaught exceptions, console errors and warnings, and error log
    /// entries seen so far.
    pub fn problems(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => {
                        Some(format!("uncaught: {}", p["exceptionDetails"]))
                    }
                    "Runtime.consoleAPICalled"
                        if matches!(p["type"].as_str(), Some("error" | "warning" | "assert")) =>
                    {
                        Some(format!("console.{}: {}", p["type"], p["args"]))
                    }
                    "Log.entryAdded"
                        if matches!(p["entry"]["level"].as_str(), Some("error" | "warning")) =>
                    {
                        Some(format!("log: {}", p["entry"]))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Every URL the page asked the network layer for.
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let mut bytes =
            serde_json::to_vec(&json!({"id": 0, "method": "Browser.close"})).unwrap_or_default();
        bytes.push(0);
        let _ = self.tx.write_all(&bytes);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A decoded screenshot: RGB(A) rows.
pub struct Image {
    pub width: usize,
    pub height: usize,
    channels: usize,
    data: Vec<u8>,
}

impl Image {
    pub fn decode(png_bytes: &[u8]) -> Image {
        let mut dec = png::Decoder::new(png_bytes);
        dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = dec.read_info().expect("a PNG");
        let mut data = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut data).expect("PNG frame");
        data.truncate(info.buffer_size());
        Image {
            width: info.width as usize,
            height: info.height as usize,
            channels: info.color_type.samples(),
            data,
        }
    }

    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * self.channels;
        if self.channels < 3 {
            let g = self.data[i];
            return [g, g, g];
        }
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }

    /// Pixels of the rectangle (CSS px, clamped to the image) for which
    /// `pred` holds.
    pub fn count(&self, r: [f64; 4], pred: impl Fn([u8; 3]) -> bool) -> usize {
        let x0 = (r[0].max(0.0) as usize).min(self.width);
        let y0 = (r[1].max(0.0) as usize).min(self.height);
        let x1 = ((r[0] + r[2]).max(0.0) as usize).min(self.width);
        let y1 = ((r[1] + r[3]).max(0.0) as usize).min(self.height);
        let mut n = 0;
        for y in y0..y1 {
            for x in x0..x1 {
                if pred(self.pixel(x, y)) {
                    n += 1;
                }
            }
        }
        n
    }
}

/// A pixel within `tol` of `#rrggbb` in every channel.
pub fn near(hex: &str, tol: u8) -> impl Fn([u8; 3]) -> bool {
    let h = u32::from_str_radix(hex.trim_start_matches('#'), 16).expect("hex color");
    let c = [(h >> 16) as u8, (h >> 8) as u8, h as u8];
    move |p| (0..3).all(|k| p[k].abs_diff(c[k]) <= tol)
}

/// Not (nearly) white: something is drawn there.
pub fn ink(p: [u8; 3]) -> bool {
    p.iter().any(|&v| v < 235)
}
