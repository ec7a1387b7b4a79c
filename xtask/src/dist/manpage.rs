//! gpudirect-trace(1) from the binary's own help (every subcommand's
//! `--help`), so that the page never disagrees with the CLI. Debian wants a
//! manual page for every program in /usr/bin.

use std::{path::Path, process::Command};

use anyhow::{bail, Context as _, Result};

use crate::host;

fn help(binary: &Path, args: &[&str]) -> Result<String> {
    // A fixed width, not the terminal's: the same page on every build.
    host::output(
        Command::new(binary)
            .args(args)
            .arg("--help")
            .env("COLUMNS", "78"),
    )
    .with_context(|| format!("{} {} --help", binary.display(), args.join(" ")))
}

/// Subcommand names from clap's "Commands:" block (`  name   summary`).
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "help")
        .collect()
}

/// Verbatim text in roff: no request at a line start, `\` and `-` escaped.
fn verbatim(text: &str) -> String {
    let mut out = String::from(".nf\n");
    for line in text.lines() {
        let l = line.replace('\\', "\\e").replace('-', "\\-");
        if l.starts_with('.') || l.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

pub fn render(binary: &Path, version: &str, date: &str) -> Result<String> {
    let top = help(binary, &[])?;
    let subs = subcommands(&top);
    if subs.is_empty() {
        bail!("no subcommands found in `gpudirect-trace --help`");
    }
    let mut page = format!(
        ".TH GPUDIRECT\\-TRACE 1 \"{date}\" \"gpudirect\\-trace {version}\" \"User Commands\"\n\
         .SH NAME\n\
         gpudirect\\-trace \\- trace DMA, IOMMU and GPUDirect paths with eBPF\n\
         .SH SYNOPSIS\n\
         .B gpudirect\\-trace\n\
         .I COMMAND\n\
         .RI [ OPTIONS ]\n\
         .SH DESCRIPTION\n"
    );
    page.push_str(&verbatim(&top));
    page.push_str(".SH COMMANDS\n");
    for s in &subs {
        page.push_str(&format!(
            ".SS gpudirect\\-trace {}\n",
            s.replace('-', "\\-")
        ));
        page.push_str(&verbatim(&help(binary, &[s])?));
    }
    page.push_str(
        ".SH FILES\n\
         .TP\n\
         .I /lib/systemd/system/gpudirect\\-trace.service\n\
         The Prometheus exporter (not enabled on install: \
         .B systemctl enable \\-\\-now gpudirect\\-trace\n\
         starts it).\n\
         .SH SEE ALSO\n\
         /usr/share/doc/gpudirect\\-trace/README.md and docs/ beside it.\n",
    );
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_subcommands_and_escapes_roff() {
        let top =
            "Usage: x <COMMAND>\n\nCommands:\n  probes   List every probe\n           why\n  \
                   live     Live view\n  help     Print this\n\nOptions:\n  -h, --help\n";
        assert_eq!(subcommands(top), ["probes", "live"]);
        assert_eq!(
            verbatim(".x\n'y\na\\b --z"),
            ".nf\n\\&.x\n\\&'y\na\\eb \\-\\-z\n.fi\n"
        );
    }
}
