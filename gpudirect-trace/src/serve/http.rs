//! A minimal HTTP/1.1 server for `/metrics` and `/healthz`.
//!
//! Why hand-rolled on tokio::net rather than hyper/axum: the exporter answers
//! GET and HEAD on fixed paths with bodies built in memory, one request per
//! connection (`Connection: close`, which Prometheus' scraper handles). That
//! is this file, with explicit bounds (request head at most 8 KiB, sent
//! within 10 s, at most 64 connections at once). hyper with hyper-util, http,
//! http-body, httparse and their futures stack would add more crates than the
//! rest of the binary has, for features a scrape endpoint does not use
//! (keep-alive pipelining, chunked bodies, HTTP/2, upgrades).

use std::{io, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::{watch, Semaphore},
};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 << 10;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// All Accept headers, joined with ",".
    pub accept: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Why a request head could not be read.
#[derive(Debug)]
enum HeadError {
    Io(io::Error),
    TooLarge,
    Closed,
}

/// Parses a request head (up to and excluding the blank line).
pub fn parse_head(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(format!("malformed request line {line:?}"));
    }
    let mut accept = Vec::new();
    for h in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = h.split_once(':') else {
            return Err(format!("malformed header {h:?}"));
        };
        if name.trim().eq_ignore_ascii_case("accept") {
            accept.push(value.trim());
        }
    }
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        accept: accept.join(","),
    })
}

/// Whether an Accept header prefers OpenMetrics to the Prometheus text
/// format: `application/openmetrics-text` with a q-value above zero and at
/// least that of `text/plain` (or `*/*`). Prometheus sends
/// `application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`.
pub fn wants_openmetrics(accept: &str) -> bool {
    let mut om: f64 = 0.0;
    let mut text: f64 = 0.0;
    for range in accept.split(',') {
        let mut params = range.split(';');
        let media = params
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// Serves connections on `listener` with `handler` until `stop` turns true.
pub async fn serve<H>(
    listener: TcpListener,
    handler: Arc<H>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()>
where
    H: Fn(&Request) -> Response + Send + Sync + 'static,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.map_err(io::Error::other)?,
            _ = stop.changed() => return Ok(()),
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, a connection reset before accept(...):
                // the listener is fine, keep serving.
                Err(e) => {
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => return Ok(()),
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection(stream, &*handler).await {
                log::debug!("connection: {e}");
            }
        });
    }
}

async fn connection<H>(mut stream: TcpStream, handler: &H) -> io::Result<()>
where
    H: Fn(&Request) -> Response,
{
    let (response, head_only) =
        match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
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
                Ok(req) if req.method == "GET" || req.method == "HEAD" => {
                    (handler(&req), req.method == "HEAD")
                }
                Ok(req) => (
                    Response::text(405, format!("{} is not supported: GET only\n", req.method)),
                    false,
                ),
            },
        };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if response.status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&response.body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads up to the end of the request head; any body is ignored.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(from + end);
            return Ok(buf);
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    use super::*;

    #[test]
    fn parses_request_line_path_and_accept() {
        let r = parse_head(
            b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\naccept: text/plain\r\nAccept: */*",
        )
        .expect("valid head");
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.accept, "text/plain,*/*");
        assert!(parse_head(b"GET /metrics").is_err());
        assert!(parse_head(b"GET metrics HTTP/1.1").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\r\nno colon").is_err());
        assert!(parse_head(b"GET / SPDY/3").is_err());
    }

    #[test]
    fn negotiates_openmetrics_only_when_preferred() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(prometheus));
        assert!(wants_openmetrics("application/openmetrics-text"));
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain"));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
        assert!(!wants_openmetrics(
            "application/openmetrics-text;q=0.3,text/plain;q=0.9"
        ));
    }

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
        let server = tokio::spawn(serve(listener, handler, stop));

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
