//! `journalctl -o json` (and `-o json-seq`) lines as the log text they
//! carry.
//!
//! Why: a kernel log exported with `journalctl -k -o json > log` is one
//! JSON object per line. Read as text, its faults were found inside the
//! JSON (the printk text is a string field) but kept its quoting: a cause
//! ending in `"}`, escaped characters as `\"` and `\u001b`, and no time
//! (the time is another field). Here the object's MESSAGE becomes a
//! syslog line, `DATE HOST kernel: [seconds.micros] MESSAGE`: the date from
//! the journal's wall clock (`__REALTIME_TIMESTAMP`, UTC), the seconds
//! from the kernel's own clock where the journal kept it
//! (`_SOURCE_MONOTONIC_TIMESTAMP`, the printk time of kernel records, in
//! microseconds), else the journal's (`__MONOTONIC_TIMESTAMP`, when it
//! received the line), so that faults from a JSON export have the same
//! times as the same log's `dmesg`. A field that is missing is left out.
//!
//! journald writes a MESSAGE that is not valid UTF-8 as an array of bytes;
//! those are read too (invalid sequences replaced). A message of several
//! lines gives each line the same time.

use serde_json::Value;

/// The log lines `line` holds if it is a journald JSON object with a
/// MESSAGE; None for any other line (read as text, as before).
pub fn text_lines(line: &str) -> Option<Vec<String>> {
    // json-seq puts an RS (0x1e) before each object.
    let t = line.trim_start_matches('\u{1e}').trim();
    if !(t.starts_with('{') && t.ends_with('}')) {
        return None;
    }
    let obj = serde_json::from_str::<serde_json::Map<String, Value>>(t).ok()?;
    let message = match obj.get("MESSAGE")? {
        Value::String(s) => s.clone(),
        Value::Array(bytes) => {
            let b: Option<Vec<u8>> = bytes
                .iter()
                .map(|v| v.as_u64().and_then(|n| u8::try_from(n).ok()))
                .collect();
            String::from_utf8_lossy(&b?).into_owned()
        }
        _ => return None,
    };
    let field = |k: &str| obj.get(k).and_then(Value::as_str);
    let micros = |k: &str| field(k).and_then(|v| v.parse::<u64>().ok());
    // A syslog head with the wall-clock time where the journal has it
    // (`journalctl -k` with a printk time, which split_prefix reads whole).
    let mut prefix = micros("__REALTIME_TIMESTAMP").map_or_else(String::new, |us| {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
        format!(
            "{} {} {}: ",
            humantime::format_rfc3339_micros(at),
            field("_HOSTNAME").unwrap_or("-"),
            field("SYSLOG_IDENTIFIER").unwrap_or("kernel"),
        )
    });
    let mono = micros("_SOURCE_MONOTONIC_TIMESTAMP").or_else(|| micros("__MONOTONIC_TIMESTAMP"));
    if let Some(us) = mono {
        prefix += &format!("[{:5}.{:06}] ", us / 1_000_000, us % 1_000_000);
    }
    Some(
        message
            .lines()
            .map(|l| format!("{prefix}{}", l.trim_end_matches('\r')))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_record_becomes_a_dmesg_line_with_its_printk_time() {
        // The fields journalctl -k -o json writes for a kernel record (a
        // subset, in its order).
        let line = r#"{"__CURSOR":"s=1;i=2","__REALTIME_TIMESTAMP":"1796497829803626","__MONOTONIC_TIMESTAMP":"63394856247","_TRANSPORT":"kernel","PRIORITY":"3","SYSLOG_FACILITY":"0","SYSLOG_IDENTIFIER":"kernel","_SOURCE_MONOTONIC_TIMESTAMP":"12345678901","MESSAGE":"NVRM: Xid (PCI:0000:41:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus.","_HOSTNAME":"gpu03"}"#;
        let lines = text_lines(line).expect("a journal record");
        assert_eq!(
            lines,
            vec![
                "2026-12-05T19:10:29.803626Z gpu03 kernel: [12345.678901] NVRM: Xid \
                 (PCI:0000:41:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus."
            ]
        );
        let meta = super::super::kmsg::split_prefix(&lines[0]);
        assert_eq!(
            (meta.timestamp_ns, meta.wall_time.as_deref()),
            (
                Some(12_345_678_901_000),
                Some("2026-12-05T19:10:29.803626Z")
            )
        );
        assert!(meta.body.starts_with("NVRM: Xid"), "{}", meta.body);
    }

    #[test]
    fn byte_array_messages_json_seq_and_the_journal_clock() {
        let line =
            "\u{1e}{\"__MONOTONIC_TIMESTAMP\":\"1500000\",\"MESSAGE\":[68,77,65,82,58,32,255]}";
        assert_eq!(
            text_lines(line).expect("a journal record"),
            vec!["[    1.500000] DMAR: \u{fffd}"]
        );
        // Without a time: the message alone; two lines, two log lines.
        assert_eq!(
            text_lines(r#"{"MESSAGE":"a\nb"}"#).expect("a journal record"),
            vec!["a", "b"]
        );
    }

    #[test]
    fn other_lines_stay_text() {
        for line in [
            "[    1.000000] DMAR: DRHD: handling fault status reg 3",
            "{not json}",
            r#"{"PRIORITY":"3"}"#,
            r#"{"MESSAGE":42}"#,
            r#"{"MESSAGE":[256]}"#,
            "Dec 05 10:11:12 host kernel: {\"MESSAGE\":\"x\"}",
        ] {
            assert_eq!(text_lines(line), None, "{line}");
        }
    }
}
