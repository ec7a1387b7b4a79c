//! Reading log text line by line in bounded memory.
//!
//! Why: `explain` read its whole input into one buffer (`explain /dev/zero`
//! reached 18.7 GB in 15 s) and `BufRead::read_line` grows without bound on
//! input without a newline. Here a line longer than [`MAX_LINE`] keeps its
//! first `MAX_LINE` bytes and the rest up to the newline is skipped and
//! counted. Invalid UTF-8 is replaced, never an error (one bad byte used to
//! reject all of `explain -`).

use std::{
    borrow::Cow,
    io::{self, BufRead},
};

/// Longest line kept. A printk record is at most ~1 KiB of text (8 KiB in
/// /dev/kmsg with its `\xNN` escaping); journalctl adds ~100 bytes.
pub const MAX_LINE: usize = 64 << 10;

/// Lines of `R`, each at most `max` bytes.
pub struct BoundedLines<R> {
    src: R,
    max: usize,
    buf: Vec<u8>,
    /// Lines that were longer than `max` (their tail was skipped).
    pub truncated: u64,
    /// A NUL byte is an error (`text`): log text has none, and binary input
    /// without newlines (/dev/zero) would otherwise be skipped forever.
    text_only: bool,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(src: R, max: usize) -> Self {
        Self {
            src,
            max,
            buf: Vec::new(),
            truncated: 0,
            text_only: false,
        }
    }

    /// Lines of text: a NUL byte stops the reading with InvalidData.
    pub fn text(src: R, max: usize) -> Self {
        Self {
            text_only: true,
            ..Self::new(src, max)
        }
    }

    /// The next line without its `\n` (and `\r`), UTF-8 replaced where
    /// invalid; None at the end of the input. Borrowed from the reader's
    /// buffer where the line is valid UTF-8: `import` reads millions of
    /// lines, and a copy and a character-wise check of each were a tenth
    /// of its time (perf, 2 M events).
    pub fn next_line(&mut self) -> io::Result<Option<Cow<'_, str>>> {
        self.buf.clear();
        let mut any = false;
        let mut over = false;
        loop {
            let chunk = match self.src.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                if !any {
                    return Ok(None);
                }
                break;
            }
            any = true;
            let (take, found) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if self.text_only && memchr::memchr(0, &chunk[..take]).is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "binary input (a NUL byte): explain reads kernel log text",
                ));
            }
            let room = self.max - self.buf.len();
            if take > room {
                over = true;
            }
            self.buf.extend_from_slice(&chunk[..take.min(room)]);
            self.src.consume(take + usize::from(found));
            if found {
                break;
            }
        }
        if over {
            self.truncated += 1;
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        // from_utf8's check is word-wise; from_utf8_lossy's is not.
        Ok(Some(match std::str::from_utf8(&self.buf) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(&self.buf),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use super::*;

    fn all(input: &[u8], max: usize) -> (Vec<String>, u64) {
        let mut r = BoundedLines::new(BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().expect("read") {
            out.push(l.into_owned());
        }
        (out, r.truncated)
    }

    #[test]
    fn lines_crlf_last_line_and_invalid_utf8() {
        let (l, t) = all(b"one\r\ntwo\n\nbad \xff byte\nlast", 100);
        assert_eq!(l, vec!["one", "two", "", "bad \u{fffd} byte", "last"]);
        assert_eq!(t, 0);
        assert_eq!(all(b"", 100).0, Vec::<String>::new());
        assert_eq!(all(b"x\n", 100).0, vec!["x"]);
    }

    #[test]
    fn an_overlong_line_keeps_its_head_and_the_next_line_is_intact() {
        let mut input = vec![b'a'; 1000];
        input.extend_from_slice(b"\nnext\n");
        let (l, t) = all(&input, 10);
        assert_eq!(l, vec!["aaaaaaaaaa", "next"]);
        assert_eq!(t, 1);
    }

    #[test]
    fn endless_input_without_newline_stays_bounded() {
        // 64 MiB of zeros, never a newline: one line of MAX_LINE bytes.
        let zeros = io::repeat(0).take(64 << 20);
        let mut r = BoundedLines::new(BufReader::new(zeros), MAX_LINE);
        let line = r.next_line().expect("read").expect("a line");
        assert_eq!(line.len(), MAX_LINE);
        assert!(r.buf.capacity() <= 2 * MAX_LINE);
        assert_eq!(r.truncated, 1);
        assert!(r.next_line().expect("read").is_none());
    }

    #[test]
    fn text_lines_stop_at_the_first_nul() {
        let zeros = io::repeat(0);
        let mut r = BoundedLines::text(BufReader::new(zeros), MAX_LINE);
        let e = r.next_line().expect_err("binary");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut r = BoundedLines::text(BufReader::new(&b"ok\nbad\0\n"[..]), MAX_LINE);
        assert_eq!(r.next_line().expect("text").as_deref(), Some("ok"));
        assert!(r.next_line().is_err());
    }
}
