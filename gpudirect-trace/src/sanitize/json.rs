//! Untrusted JSON made safe to keep and to show, before it is parsed: the
//! JSON blocks of a trace file (header, faults, triggers, names, stacks,
//! NVML readings, driver changes) pass through here in the reader, so every
//! string of them, in every view (report text, JSON, HTML, every export),
//! is one field with no control character and a bounded length.
//!
//! One pass over the bytes, no parse tree (an 8 MiB block of `"",` parsed
//! into values first would take ~90 MB):
//! - every control character in a string (C0 with `\n` and ESC, DEL, C1),
//!   escaped (`\n`, `\u001b`) or raw, becomes the text `\xNN`, as
//!   `sanitize::text` shows it: a line feed in a host or process name can
//!   no longer start a line of its own in a report;
//! - a string longer than `TEXT_MAX` bytes is cut there (at a character
//!   boundary) and ends in `…(clipped N bytes)`;
//! - an array's elements past `LIST_MAX` are left out;
//! - nesting deeper than `MAX_DEPTH` is refused (serde would refuse it
//!   too, after the pass had kept a stack for it).
//!
//! What was cut is counted (`Cut`); the reader adds it to its statistics
//! and the report says it. Invalid JSON stays invalid (the block is then
//! undecodable, as before).

/// Bytes of one string at most: a kernel log line is at most 1 KiB
/// (printk), an AER report's raw lines a few, a symbol 512 bytes, a comm
/// 16, a cgroup path rarely 1 KiB.
pub const TEXT_MAX: usize = 4096;
/// Elements of one array at most: NAMES blocks (the longest lists a writer
/// makes) hold about that many names within their 4 MiB.
pub const LIST_MAX: usize = 65536;
/// Nesting deeper than serde_json's own limit (128) is refused here.
pub const MAX_DEPTH: usize = 128;

/// What the pass cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Strings clipped at `TEXT_MAX`.
    pub strings: u64,
    /// Array elements left out past `LIST_MAX`.
    pub list_items: u64,
}

/// Nesting too deep for any block a writer makes.
#[derive(Debug, PartialEq, Eq)]
pub struct TooDeep;

struct Level {
    array: bool,
    items: usize,
    /// Past `LIST_MAX`: the rest of this array is being left out.
    skipping: bool,
}

/// `raw` with every string escaped and clipped and every array cut (see
/// the module's comment); counts in `cut`.
pub fn clean(raw: &[u8], cut: &mut Cut) -> Result<Vec<u8>, TooDeep> {
    let mut out = Vec::with_capacity(raw.len().min(TEXT_MAX * 16));
    let mut stack: Vec<Level> = Vec::new();
    // Bytes are dropped while any open array is being skipped: that is the
    // innermost skipping level and everything inside it.
    let mut skip_depth: Option<usize> = None;
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let emit = skip_depth.is_none();
        match b {
            b'"' => {
                i = string(raw, i, if emit { Some(&mut out) } else { None }, cut);
                continue;
            }
            b'[' | b'{' => {
                if stack.len() >= MAX_DEPTH {
                    return Err(TooDeep);
                }
                if emit {
                    out.push(b);
                }
                stack.push(Level {
                    array: b == b'[',
                    items: 0,
                    skipping: false,
                });
            }
            b']' | b'}' => {
                if let Some(l) = stack.pop() {
                    if l.skipping && skip_depth == Some(stack.len()) {
                        skip_depth = None;
                    }
                }
                if skip_depth.is_none() {
                    out.push(b);
                }
            }
            b',' => {
                let depth = stack.len();
                match stack.last_mut() {
                    Some(l) if l.array && skip_depth.is_none() => {
                        l.items += 1;
                        if l.items >= LIST_MAX {
                            // This comma and every element after it go.
                            l.skipping = true;
                            skip_depth = Some(depth - 1);
                            cut.list_items += 1;
                        } else {
                            out.push(b);
                        }
                    }
                    Some(l) if l.array && l.skipping && skip_depth == Some(depth - 1) => {
                        cut.list_items += 1;
                    }
                    _ if emit => out.push(b),
                    _ => {}
                }
            }
            _ if emit => out.push(b),
            _ => {}
        }
        i += 1;
    }
    Ok(out)
}

/// Appends `\xNN` for code point `c`.
fn hex(out: &mut Vec<u8>, c: u32) {
    out.extend_from_slice(format!("\\\\x{c:02x}").as_bytes());
}

fn is_control(c: u32) -> bool {
    c < 0x20 || (0x7f..=0x9f).contains(&c)
}

/// The string starting at `raw[start]` (its opening quote), into `out`
/// (None: skipped); returns the index after its closing quote.
fn string(raw: &[u8], start: usize, mut out: Option<&mut Vec<u8>>, cut: &mut Cut) -> usize {
    if let Some(o) = out.as_deref_mut() {
        o.push(b'"');
    }
    let mut piece: Vec<u8> = Vec::with_capacity(8);
    let mut len = 0usize;
    let mut clipped = 0usize;
    let mut i = start + 1;
    while i < raw.len() {
        let b = raw[i];
        piece.clear();
        let mut step = 1;
        match b {
            b'"' => break,
            b'\\' => {
                step = 2;
                match raw.get(i + 1) {
                    Some(b'n') => hex(&mut piece, 0x0a),
                    Some(b't') => hex(&mut piece, 0x09),
                    Some(b'r') => hex(&mut piece, 0x0d),
                    Some(b'b') => hex(&mut piece, 0x08),
                    Some(b'f') => hex(&mut piece, 0x0c),
                    Some(b'u') => {
                        step = 6;
                        let code = raw
                            .get(i + 2..i + 6)
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u32::from_str_radix(h, 16).ok());
                        match code {
                            Some(c) if is_control(c) => hex(&mut piece, c),
                            _ => piece.extend_from_slice(&raw[i..(i + 6).min(raw.len())]),
                        }
                    }
                    Some(_) => piece.extend_from_slice(&raw[i..i + 2]),
                    None => piece.push(b'\\'),
                }
            }
            0x00..=0x1f | 0x7f => hex(&mut piece, u32::from(b)),
            // C1 in UTF-8: 0xC2 0x80..0x9F.
            0xc2 if raw.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) => {
                step = 2;
                hex(&mut piece, u32::from(raw[i + 1]));
            }
            _ => piece.push(b),
        }
        let end = (i + step).min(raw.len());
        // Cut only where a character starts (not at a UTF-8 continuation).
        let starts_char = b & 0xc0 != 0x80;
        if clipped == 0 && len + piece.len() > TEXT_MAX && starts_char {
            clipped = end - i;
        } else if clipped > 0 {
            clipped += end - i;
        } else {
            len += piece.len();
            if let Some(o) = out.as_deref_mut() {
                o.extend_from_slice(&piece);
            }
        }
        i = end;
    }
    if let Some(o) = out {
        if clipped > 0 {
            cut.strings += 1;
            o.extend_from_slice(format!("…(clipped {clipped} bytes)").as_bytes());
        }
        o.push(b'"');
    }
    i + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> (String, Cut) {
        let mut cut = Cut::default();
        let out = clean(s.as_bytes(), &mut cut).expect("not too deep");
        (String::from_utf8(out).expect("utf-8"), cut)
    }

    fn parsed(s: &str) -> serde_json::Value {
        serde_json::from_str(&run(s).0).expect("still JSON")
    }

    #[test]
    fn control_characters_in_strings_become_hex_text_in_every_spelling() {
        let v = parsed(
            r#"{"host":"a\nFORGED\r\u001b[2J\u001B]0;x\u0007","k\tey":"\u007f\u009b\u00e9","raw":"x"}"#,
        );
        assert_eq!(v["host"], "a\\x0aFORGED\\x0d\\x1b[2J\\x1b]0;x\\x07");
        assert_eq!(v["k\\x09ey"], "\\x7f\\x9bé");
        // Raw DEL and raw C1 (valid JSON) too; quotes and backslashes stay.
        let v = parsed("{\"a\":\"x\u{7f}y\u{9b}z\\\"q\\\\\"}");
        assert_eq!(v["a"], "x\\x7fy\\x9bz\"q\\");
        // What sanitize::text shows for the same string.
        let plain = "a\nb\u{1b}c\u{9b}";
        let v = parsed(&serde_json::to_string(plain).expect("json"));
        assert_eq!(v, *crate::sanitize::text(plain));
    }

    #[test]
    fn long_strings_are_clipped_at_a_character_and_counted() {
        let long = format!("{}é{}", "x".repeat(TEXT_MAX - 1), "y".repeat(10_000));
        let json =
            serde_json::to_string(&serde_json::json!({"a": long, "b": "short"})).expect("json");
        let (out, cut) = run(&json);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        let a = v["a"].as_str().expect("string");
        assert!(
            a.starts_with(&"x".repeat(TEXT_MAX - 1)),
            "kept up to the limit"
        );
        // The character at the limit stays whole; what follows is cut.
        assert!(
            a.ends_with("é…(clipped 10000 bytes)"),
            "{}",
            &a[a.len() - 40..]
        );
        assert_eq!(v["b"], "short");
        assert_eq!(
            cut,
            Cut {
                strings: 1,
                list_items: 0
            }
        );
    }

    #[test]
    fn arrays_past_the_limit_lose_their_tail_nested_or_not() {
        let big: Vec<serde_json::Value> = (0..LIST_MAX + 5)
            .map(|i| serde_json::json!({"pid": i, "frames": ["a,]", [1, 2]]}))
            .collect();
        let json = serde_json::json!({"list": big, "after": [1, 2, 3]}).to_string();
        let (out, cut) = run(&json);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["list"].as_array().expect("array").len(), LIST_MAX);
        assert_eq!(v["list"][LIST_MAX - 1]["pid"], LIST_MAX - 1);
        assert_eq!(v["after"], serde_json::json!([1, 2, 3]));
        assert_eq!(cut.list_items, 5);
    }

    #[test]
    fn deep_nesting_is_refused_and_plain_json_is_unchanged() {
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(clean(deep.as_bytes(), &mut Cut::default()), Err(TooDeep));
        let plain = r#"{"a":[1,2,{"b":"c d é ✓"}],"n":null,"f":1.5e3,"s":"q\"\\/"}"#;
        assert_eq!(run(plain), (plain.to_owned(), Cut::default()));
    }
}
