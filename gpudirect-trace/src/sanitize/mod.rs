//! Terminal-safe text: strings from the kernel, a trace file or the network
//! go through here before they reach a terminal.
//!
//! Why: a process name in an NVIDIA Xid line, a kernel log line given to
//! `explain`, a device name in a crafted trace can carry ESC/CSI/OSC
//! sequences (retitle the terminal, rewrite what is on screen, on some
//! terminals worse). Every control character (C0 including ESC, DEL, C1) is
//! shown as `\xNN` (its code point), the form the kernel itself uses in
//! /dev/kmsg. JSON and HTML output have their own escaping; untrusted JSON
//! (a trace file's blocks) is cleaned field by field before it is parsed
//! (`json`), so what a file names reaches every view escaped alike.

pub mod json;

use std::borrow::Cow;

/// C0 (U+0000..U+001F, ESC among them), DEL and C1 (U+0080..U+009F; a
/// terminal may take U+009B as CSI).
pub fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\x7f'..='\u{9f}')
}

/// Could `s` hold a control character? Bytes only: C1 characters are
/// encoded as 0xC2 0x80..0x9F in UTF-8, so 0xC2 is enough to look closer.
fn may_need(s: &str, keep_newlines: bool) -> bool {
    s.bytes()
        .any(|b| (b < 0x20 && !(keep_newlines && b == b'\n')) || b == 0x7f || b == 0xc2)
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !may_need(s, keep_newlines) {
        return Cow::Borrowed(s);
    }
    if !s
        .chars()
        .any(|c| is_control(c) && !(keep_newlines && c == '\n'))
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_control(c) && !(keep_newlines && c == '\n') {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One field (a name, a reason, a log line): every control character,
/// newlines and tabs included, as `\xNN`.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Text the tool laid out in lines (a rendered report): newlines stay,
/// every other control character becomes `\xNN`.
pub fn multiline(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// Bytes of unknown encoding: invalid UTF-8 replaced (U+FFFD), then [`text`].
pub fn bytes(b: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(b) {
        Cow::Borrowed(s) => text(s),
        Cow::Owned(s) => Cow::Owned(text(&s).into_owned()),
    }
}

/// At most `max` bytes of `s`, cut at a character's boundary: a name kept
/// within a file's or a label's bound without splitting a character.
pub fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn plain_text_is_borrowed_untouched() {
        for s in ["", "0000:00:06.0", "DMAR: [DMA Write] café ünïcode ✓"] {
            assert!(matches!(text(s), Cow::Borrowed(t) if t == s));
        }
        assert!(matches!(text("nvidia-smi"), Cow::Borrowed(_)));
        assert!(matches!(multiline("two\nlines"), Cow::Borrowed(_)));
        // 0xC2 starts ordinary Latin-1 letters too: still borrowed.
        assert!(matches!(text("¡olé!"), Cow::Borrowed(_)));
    }

    #[test]
    fn esc_csi_osc_del_and_c1_are_shown_as_hex() {
        assert_eq!(
            text("\x1b[2J\x1b]0;owned\x07"),
            "\\x1b[2J\\x1b]0;owned\\x07"
        );
        assert_eq!(text("a\x7fb"), "a\\x7fb");
        assert_eq!(text("\u{9b}31m"), "\\x9b31m");
        assert_eq!(text("\u{85}"), "\\x85");
        assert_eq!(text("nul\0"), "nul\\x00");
        assert_eq!(text("line\nbreak\r"), "line\\x0abreak\\x0d");
        assert_eq!(multiline("line\nbreak\r"), "line\nbreak\\x0d");
        // Nothing printable survives as a control character.
        let all: String = (0u32..0x110).filter_map(char::from_u32).collect();
        assert!(!text(&all).chars().any(is_control));
    }

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut("0000:00:04.0", 64), "0000:00:04.0");
        assert_eq!(cut("abcdef", 3), "abc");
        // 'é' is two bytes: a cut inside it leaves it out.
        assert_eq!(cut("caé", 3), "ca");
        assert_eq!(cut("caé", 4), "caé");
        assert_eq!(cut("", 0), "");
    }

    #[test]
    fn invalid_utf8_is_replaced_then_escaped() {
        assert_eq!(bytes(b"ok\xff\x1b"), "ok\u{fffd}\\x1b");
        assert_eq!(bytes(b"fine"), "fine");
    }
}
