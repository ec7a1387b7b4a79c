//! A minimal HTTP/1.1 server for `/metrics` and `/healthz`.
//!
//! Why hand-rolled on tokio::net rather than hyper/axum: the exporter answers
//! GET and HEAD on fixed paths with bodies built in memory, one request per
//! connection (`Connection: close`, which Prometheus' scraper handles). That
//! is this file, with explicit bounds. hyper with hyper-util, http,
//! http-body, httparse and their futures stack would add more crates than the
//! rest of the binary has, for features a scrape endpoint does not use
//! (keep-alive pipelining, chunked bodies, HTTP/2, upgrades).
//!
//! Under abuse (issue 19: 64 connection slots held 10 s each let 193 idle
//! loopback connections time out every scrape): a connection gets
//! [`HEAD_TIMEOUT`] for its request head and [`REQUEST_DEADLINE`] for all of
//! it, answer included; at most [`MAX_PER_PEER`] connections per peer
//! address and [`MAX_CONNECTIONS`] in all, and when a new one would pass a
//! limit the oldest *idle* one (no complete request yet) is closed for it. A
//! scraper's request arrives at once, so it is answered before it could be
//! the oldest idle connection; slow clients only evict each other.
//!
//! With a web config (web_config.rs): the TLS handshake happens in the
//! connection's task, within the same [`HEAD_TIMEOUT`] as the request head
//! (a failed handshake closes the connection: rustls sends the alert), and
//! with basic auth a request without the right password gets 401 (auth.rs
//! bounds what wrong passwords cost).

use std::{
    collections::BTreeMap,
    io,
    net::IpAddr,
    os::fd::{AsRawFd as _, RawFd},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    net::TcpListener,
    sync::watch,
    task::AbortHandle,
    time::Instant,
};

pub use super::http_message::{wants_openmetrics, Request, Response, MAX_HEAD};
use super::{
    auth::{BasicAuth, Verdict},
    http_message::{head_end, parse_head},
    web_config::WebConfig,
};
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection may take in all: head, answer and sending it (a client
/// that does not read its answer cannot hold a connection either).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Connections from one peer address at once.
pub const MAX_PER_PEER: usize = 32;
/// Connections at once in all (well below the default 1024 descriptors).
pub const MAX_CONNECTIONS: usize = 256;

/// Why a request head could not be read.
#[derive(Debug)]
enum HeadError {
    Io(io::Error),
    TooLarge,
    Closed,
}

struct Entry {
    peer: IpAddr,
    /// The socket, to see whether a request waits in it unread; -1 in tests.
    fd: RawFd,
    /// Its bytes are TLS records (which hide where the request head ends).
    tls: bool,
    /// No complete request head yet: may be closed for a newer connection.
    idle: Arc<AtomicBool>,
    abort: Option<AbortHandle>,
}

/// The open connections, oldest first (ids grow).
#[derive(Default)]
struct Conns {
    next: u64,
    open: BTreeMap<u64, Entry>,
    /// Connections closed for a newer one, and refused ones (all busy).
    evicted: u64,
    refused: u64,
}

impl Conns {
    /// Closes the oldest idle connection that `pick` selects. One whose
    /// complete request waits unread in its socket (its task has not run
    /// since it arrived) is not idle: under a flood of reconnecting slow
    /// clients on the scraper's own address, the scraper's connection could
    /// otherwise be evicted before it was read (seen in 2 of 4 runs).
    fn evict(&mut self, pick: impl Fn(&Entry) -> bool) -> bool {
        let victim = self
            .open
            .iter()
            .find(|(_, e)| {
                e.idle.load(Ordering::Relaxed) && pick(e) && !request_waiting(e.fd, e.tls)
            })
            .map(|(&id, _)| id);
        let Some(id) = victim else {
            return false;
        };
        if let Some(e) = self.open.remove(&id) {
            if let Some(a) = e.abort {
                a.abort();
            }
        }
        self.evicted += 1;
        true
    }

    /// Makes room for a connection from `peer` (closing the oldest idle one
    /// past a limit); None when every connection in the way is busy. A
    /// `ready` one (its request head arrived with it) starts busy.
    fn admit(
        &mut self,
        peer: IpAddr,
        fd: RawFd,
        tls: bool,
        ready: bool,
    ) -> Option<(u64, Arc<AtomicBool>)> {
        let same = self.open.values().filter(|e| e.peer == peer).count();
        if same >= MAX_PER_PEER && !self.evict(|e| e.peer == peer) {
            self.refused += 1;
            return None;
        }
        if self.open.len() >= MAX_CONNECTIONS && !self.evict(|_| true) {
            self.refused += 1;
            return None;
        }
        let id = self.next;
        self.next += 1;
        let idle = Arc::new(AtomicBool::new(!ready));
        self.open.insert(
            id,
            Entry {
                peer,
                fd,
                tls,
                idle: idle.clone(),
                abort: None,
            },
        );
        Some((id, idle))
    }
}

/// Whether a complete request head waits unread in socket `fd`; over TLS,
/// whether anything does (a handshake or request its task has not read yet).
fn request_waiting(fd: RawFd, tls: bool) -> bool {
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; MAX_HEAD + 4];
    // SAFETY: recv into a buffer we own. MSG_PEEK leaves the bytes for the
    // connection's task, MSG_DONTWAIT never blocks. The table entry goes
    // with the task that owns the socket (on the server's one thread, in
    // the same step), so `fd` is that socket; were it stale, the answer
    // would only be wrong, nothing else happens.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0 && (tls || head_end(&buf[..n as usize], 0).is_some())
}

fn lock(c: &Mutex<Conns>) -> std::sync::MutexGuard<'_, Conns> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes a connection from the table when its task ends (or is aborted).
struct Registered(Arc<Mutex<Conns>>, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.0).open.remove(&self.1);
    }
}

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Serves connections on `listener` with `handler` until `stop` turns true,
/// over TLS and with basic auth where `web` says so.
pub async fn serve<H>(
    listener: TcpListener,
    handler: Arc<H>,
    web: WebConfig,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()>
where
    H: Fn(&Request) -> Response + Send + Sync + 'static,
{
    // A longer accept queue than std's 128: with hundreds of clients
    // reconnecting, SYNs beyond it are dropped and a scrape waits for the
    // 1 s SYN retransmission (measured on loopback). Linux lets listen()
    // on a listening socket change it; the kernel caps it at somaxconn.
    // SAFETY: listen() on the descriptor this listener owns.
    unsafe { libc::listen(listener.as_raw_fd(), 1024) };
    let conns = Arc::new(Mutex::new(Conns::default()));
    let tls = web.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of descriptors, a connection reset before accept(...):
                // the listener is fine, keep serving.
                Err(e) => {
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        // What the client sent already: under load a scraper's whole
        // request is there by the time it is accepted (it was sent right
        // after the handshake), so it is busy, never evicted, from the start.
        // Over TLS the bytes are the handshake's: left for rustls to read.
        let mut early = vec![0u8; MAX_HEAD + 1];
        let n = match tls {
            None => stream.try_read(&mut early).unwrap_or(0),
            Some(_) => 0,
        };
        early.truncate(n);
        let ready = head_end(&early, 0).is_some();
        let fd = stream.as_raw_fd();
        let Some((id, idle)) = lock(&conns).admit(peer.ip(), fd, tls.is_some(), ready) else {
            // Every connection in the way is being answered: refuse this
            // one at once instead of letting it wait (best effort, no wait;
            // over TLS, where no HTTP can come before a handshake, closed).
            if tls.is_none() {
                let _ = stream.try_write(BUSY);
            }
            continue;
        };
        let handler = handler.clone();
        let registered = Registered(conns.clone(), id);
        let (tls, auth) = (tls.clone(), web.auth.clone());
        let task = tokio::spawn(async move {
            let _registered = registered;
            let c = Connection {
                head_by: Instant::now() + HEAD_TIMEOUT,
                idle: &idle,
                auth: auth.as_deref(),
                peer: peer.ip(),
            };
            let served = async {
                match tls {
                    None => c.serve(stream, early, &*handler).await,
                    Some(acceptor) => {
                        let tls = tokio::time::timeout_at(c.head_by, acceptor.accept(stream))
                            .await
                            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake"))?
                            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake: {e}")))?;
                        c.serve(tls, early, &*handler).await
                    }
                }
            };
            match tokio::time::timeout(REQUEST_DEADLINE, served).await {
                Err(_) => log::debug!("connection: over the {REQUEST_DEADLINE:?} deadline"),
                Ok(Err(e)) => log::debug!("connection: {e}"),
                Ok(Ok(())) => {}
            }
        });
        if let Some(e) = lock(&conns).open.get_mut(&id) {
            e.abort = Some(task.abort_handle());
        }
        // Let the new connection read its request before the next accept:
        // on a current-thread runtime a burst of accepts could otherwise
        // evict it before it ran (a scraper's request is already there).
        tokio::task::yield_now().await;
    }
    let open = std::mem::take(&mut lock(&conns).open);
    for e in open.into_values() {
        if let Some(a) = e.abort {
            a.abort();
        }
    }
    Ok(())
}

/// One connection's request and answer.
struct Connection<'a> {
    /// The request head (and TLS handshake) must be in by then.
    head_by: Instant,
    /// Cleared once the head is in: the connection is then busy.
    idle: &'a AtomicBool,
    auth: Option<&'a BasicAuth>,
    peer: IpAddr,
}

impl Connection<'_> {
    async fn serve<S, H>(&self, mut stream: S, early: Vec<u8>, handler: &H) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        H: Fn(&Request) -> Response,
    {
        let head = tokio::time::timeout_at(self.head_by, read_head(&mut stream, early)).await;
        self.idle.store(false, Ordering::Relaxed);
        let (response, head_only) = match head {
            Err(_) => (
                Response::text(408, "request head not received in time\n"),
                false,
            ),
            Ok(Err(HeadError::Closed)) => return Ok(()),
            Ok(Err(HeadError::Io(e))) => return Err(e),
            Ok(Err(HeadError::TooLarge)) => (
                Response::text(431, format!("request head over {MAX_HEAD} bytes\n")),
                false,
            ),
            Ok(Ok(head)) => match parse_head(&head) {
                Err(e) => (Response::text(400, format!("{e}\n")), false),
                Ok(req) if req.method != "GET" && req.method != "HEAD" => (
                    Response::text(405, format!("{} is not supported: GET only\n", req.method)),
                    false,
                ),
                Ok(req) => {
                    let verdict = match self.auth {
                        None => Verdict::Allowed,
                        Some(a) => a.check(req.authorization.as_ref(), self.peer).await,
                    };
                    let response = match verdict {
                        Verdict::Allowed => handler(&req),
                        Verdict::Denied => {
                            Response::text(401, "unauthorized: user and password needed\n")
                        }
                        Verdict::Busy => Response::text(
                            429,
                            "another password check from this address is in progress\n",
                        ),
                    };
                    (response, req.method == "HEAD")
                }
            },
        };
        let mut out = response.head();
        if !head_only {
            out.push_str(&response.body);
        }
        stream.write_all(out.as_bytes()).await?;
        stream.shutdown().await
    }
}

/// Reads up to the end of the request head (after the bytes already read,
/// `buf`); any body is ignored.
async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, HeadError> {
    if let Some(end) = head_end(&buf, 0) {
        buf.truncate(end);
        return Ok(buf);
    }
    let mut chunk = [0u8; 1024];
    loop {
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let n = stream.read(&mut chunk).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf, from) {
            buf.truncate(end);
            return Ok(buf);
        }
    }
}

#[cfg(test)]
#[path = "http_abuse_tests.rs"]
mod abuse_tests;

#[cfg(test)]
#[path = "http_tls_tests.rs"]
mod tls_tests;

#[cfg(test)]
mod tests {
    use tokio::{io::AsyncReadExt as _, net::TcpStream};

    use super::*;

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(request).await.expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn answers_get_head_and_rejects_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop_tx, stop) = watch::channel(false);
        let handler =
            Arc::new(|r: &Request| Response::text(200, format!("{} {}", r.path, r.accept)));
        let server = tokio::spawn(serve(listener, handler, WebConfig::default(), stop));

        let ok = exchange(addr, b"GET /p HTTP/1.1\r\nAccept: x/y\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Length: 6\r\n") && ok.ends_with("\r\n\r\n/p x/y"),
            "{ok}"
        );
        let head = exchange(addr, b"HEAD /p HTTP/1.1\r\n\r\n").await;
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let post = exchange(addr, b"POST /p HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert!(
            post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"),
            "{post}"
        );
        // Bare LF line ends (RFC 9112 §2.2 lets a server take them): answered
        // at once, not after the head timeout.
        let t = std::time::Instant::now();
        let lf = exchange(addr, b"GET /lf HTTP/1.1\nAccept: a/b\n\n").await;
        assert!(lf.ends_with("\r\n\r\n/lf a/b"), "{lf}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let bad = exchange(addr, b"hello\r\n\r\n").await;
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
        // One byte over the limit, so the server has read all of it when it
        // answers (unread bytes at close would reset the connection).
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 1, b'a');
        let huge = exchange(addr, &big).await;
        assert!(huge.starts_with("HTTP/1.1 431"), "{huge}");

        stop_tx.send(true).expect("stop");
        server.await.expect("join").expect("served without error");
    }
}
