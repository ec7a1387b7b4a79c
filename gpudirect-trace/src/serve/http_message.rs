//! The HTTP/1.1 messages `serve` reads and writes: the request head (line
//! ends per RFC 9112 §2.2: CRLF, or a bare LF, which a recipient may take as
//! a line end) and the response.

use super::auth::Credentials;

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 8 << 10;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// All Accept headers, joined with ",".
    pub accept: String,
    /// The Authorization header (one at most).
    pub authorization: Option<Credentials>,
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

    /// The status line and headers; `Connection: close` (one request per
    /// connection).
    pub fn head(&self) -> String {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        match self.status {
            401 => out.push_str(
                "WWW-Authenticate: Basic realm=\"gpudirect-trace\", charset=\"UTF-8\"\r\n",
            ),
            405 => out.push_str("Allow: GET, HEAD\r\n"),
            429 => out.push_str("Retry-After: 1\r\n"),
            _ => {}
        }
        out.push_str("\r\n");
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Where the request head in `buf` ends: the index of the line feed that
/// ends its last line, the blank line (`\n\n` or `\n\r\n`) after it; the
/// search starts at `from`.
pub fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from.min(buf.len());
    while let Some(p) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + p;
        let rest = &buf[nl + 1..];
        if rest.starts_with(b"\n") || rest.starts_with(b"\r\n") {
            return Some(nl);
        }
        i = nl + 1;
    }
    None
}

/// Parses a request head (up to and excluding the blank line).
pub fn parse_head(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8".to_owned())?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    if line.contains('\r') {
        return Err(format!("a bare CR in the request line {line:?}"));
    }
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
    let mut authorization = None;
    for h in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = h.split_once(':') else {
            return Err(format!("malformed header {h:?}"));
        };
        if h.contains('\r') {
            return Err(format!("a bare CR in header {name:?}"));
        }
        let name = name.trim();
        if name.eq_ignore_ascii_case("accept") {
            accept.push(value.trim());
        } else if name.eq_ignore_ascii_case("authorization") {
            if authorization.is_some() {
                return Err("two Authorization headers".to_owned());
            }
            authorization = Some(Credentials(value.trim().to_owned()));
        }
    }
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        accept: accept.join(","),
        authorization,
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

#[cfg(test)]
mod tests {
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
        assert_eq!(r.authorization, None);
        assert!(parse_head(b"GET /metrics").is_err());
        assert!(parse_head(b"GET metrics HTTP/1.1").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\r\nno colon").is_err());
        assert!(parse_head(b"GET / SPDY/3").is_err());
    }

    #[test]
    fn bare_lf_ends_lines_and_bare_cr_is_refused() {
        let r = parse_head(b"GET /m HTTP/1.1\nAccept: a/b\r\nX: y").expect("bare LF");
        assert_eq!((r.path.as_str(), r.accept.as_str()), ("/m", "a/b"));
        assert!(parse_head(b"GET /m HTTP/1.1\nX: a\rb").is_err());
        assert!(parse_head(b"GET /m\r HTTP/1.1").is_err());
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n", 0), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody", 0), Some(21));
        assert_eq!(head_end(b"GET / HTTP/1.1\nA: b\n\r\n", 0), Some(19));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        assert_eq!(head_end(b"x\n\n", 5), None, "from past the end");
    }

    #[test]
    fn keeps_one_authorization_header_out_of_debug_output() {
        let r = parse_head(b"GET / HTTP/1.1\r\nAuthorization: Basic dTpw").expect("valid");
        assert_eq!(
            r.authorization.as_ref().map(|c| c.0.as_str()),
            Some("Basic dTpw")
        );
        assert!(!format!("{r:?}").contains("dTpw"), "{r:?}");
        assert!(parse_head(b"GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b").is_err());
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

    #[test]
    fn answers_401_with_a_challenge_405_with_allow_and_429_with_retry_after() {
        let h = Response::text(401, "no\n").head();
        assert!(h.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{h}");
        assert!(
            h.contains("\r\nWWW-Authenticate: Basic realm=\"gpudirect-trace\""),
            "{h}"
        );
        assert!(Response::text(405, "")
            .head()
            .contains("Allow: GET, HEAD\r\n"));
        assert!(h.ends_with("\r\n\r\n"));
        let busy = Response::text(429, "").head();
        assert!(
            busy.starts_with("HTTP/1.1 429 Too Many Requests\r\n")
                && busy.contains("Retry-After: 1\r\n"),
            "{busy}"
        );
    }
}
