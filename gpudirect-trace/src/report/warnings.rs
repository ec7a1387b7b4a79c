//! What a report warns about: the file's damage, cuts and numbering, a
//! window that misses the recording, what the memory budget dropped. Said
//! on stderr, in the JSON's `warnings` and on the HTML page.

use super::{Replay, MAX_DEVICES};
use crate::tracefile::{self, ReadStats};

/// Warnings about the file itself (truncation, damage, unclean end).
pub fn read_warnings(path: &str, stats: &ReadStats, file_len: u64) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(at) = stats.truncated_at {
        w.push(format!(
            "{path} is cut short: readable up to byte offset {at} of {file_len} \
             (recorder killed or disk full?); the rest is ignored"
        ));
    } else if !stats.clean_end {
        w.push(format!(
            "{path} has no end block: the recorder did not finish (read all {file_len} bytes)"
        ));
    }
    if stats.corrupt_regions > 0 {
        w.push(format!(
            "{} damaged region(s) ({} bytes) skipped",
            stats.corrupt_regions, stats.skipped_bytes
        ));
    }
    counted(
        &mut w,
        stats.unknown_blocks,
        "block(s) of a newer format version skipped",
    );
    counted(
        &mut w,
        stats.undecodable_blocks,
        "block(s) with a valid checksum did not decode and were skipped",
    );
    if stats.preamble_damaged {
        w.push(format!(
            "{path}'s preamble is damaged (its checksum is wrong): its format version was not \
             trusted, the file was read as version {}.{}",
            stats.version.0, stats.version.1
        ));
    }
    w.extend(sequence_warnings(&stats.sequence));
    w
}

/// What the blocks' sequence numbers (1.3) said: blocks missing, repeated,
/// swapped, unnumbered, and where.
fn sequence_warnings(s: &tracefile::sequence::SequenceStats) -> Vec<String> {
    let mut w = Vec::new();
    if s.missing > 0 {
        let at: Vec<String> = s
            .gaps
            .iter()
            .map(|g| {
                let blocks = if g.first == g.last {
                    format!("#{}", g.first)
                } else {
                    format!("#{}..#{}", g.first, g.last)
                };
                if g.after_offset > 0 {
                    format!("{blocks} (before byte offset {})", g.after_offset)
                } else {
                    blocks
                }
            })
            .collect();
        w.push(format!(
            "{} numbered block(s) are missing ({}{}): removed or lost; what they held is not in \
             the streamed counts (the kernel's counters, where the file has them, are complete)",
            s.missing,
            at.join(", "),
            if (s.gaps.len() as u64) < s.missing && s.gaps.len() >= 16 {
                ", ..."
            } else {
                ""
            }
        ));
    }
    counted(
        &mut w,
        s.repeated,
        "block(s) appear again with a number read before: the copies were skipped",
    );
    counted(
        &mut w,
        s.reordered,
        "block(s) are out of order (after blocks numbered later): read where they are",
    );
    counted(
        &mut w,
        s.unnumbered,
        "block(s) have no valid sequence number before them (inserted, or their number \
             was damaged): read all the same",
    );
    w
}

/// Warnings about what the file made a reader cut (crafted files only: no
/// writer makes strings or lists that long).
pub fn clip_warnings(stats: &ReadStats) -> Vec<String> {
    let mut w = Vec::new();
    if stats.clipped_strings > 0 {
        w.push(format!(
            "{} string(s) longer than {} bytes were clipped there",
            stats.clipped_strings,
            crate::sanitize::json::TEXT_MAX
        ));
    }
    if stats.cut_list_items > 0 {
        w.push(format!(
            "{} list element(s) past the first {} of a list were left out",
            stats.cut_list_items,
            crate::sanitize::json::LIST_MAX
        ));
    }
    w
}

/// Every warning of a replay: the file's damage and cuts, a window that
/// misses the recording, what the memory budget dropped.
pub fn warnings(path: &str, r: &Replay) -> Vec<String> {
    let mut w = read_warnings(path, &r.stats, r.file_len);
    w.extend(clip_warnings(&r.stats));
    if r.window.from.is_some() && r.from_ns > r.end_ns {
        w.push(format!(
            "--from {:.3}s is past the recording's end (its last record is at {:.3}s): \
             the window is empty",
            r.seconds(r.from_ns),
            r.seconds(r.end_ns)
        ));
    }
    if r.analysis.agg.folded > 0 {
        w.push(format!(
            "the file names more devices than a report keeps apart ({MAX_DEVICES}, or fewer \
             within its memory budget): the others are counted together as {}",
            crate::aggregate::FOLDED_DEVICES
        ));
    }
    w.extend(crate::memory_budget::note());
    w
}

/// Adds "`n` `what`" to `w` when `n` is not 0: the form of most warnings
/// about a file (so many blocks were skipped, repeated, ...).
fn counted(w: &mut Vec<String>, n: u64, what: &str) {
    if n > 0 {
        w.push(format!("{n} {what}"));
    }
}
