//! Human units for the screen: rates in bit/s multiples, times in ms, sizes in KiB/MiB.
//! Pure functions, so every view formats a value the same way and tests can pin them. Rates,
//! shares and sizes are written by the core's [`units`], as the verdict and the report write
//! them; the compact rate of table cells is the screen's own.

/// `TCP_INFINITE_SSTHRESH`: ssthresh is "not set yet" at or above this.
pub(super) use tracer_common::TCP_INFINITE_SSTHRESH as INFINITE_SSTHRESH;

use crate::analysis::units;

/// A rate in bits/s as the verdict writes it ([`units::rate`]: "4.0 Mbit/s").
pub(super) fn rate(bps: f64) -> String {
    units::rate(bps).to_string()
}

/// An estimated rate as the verdict writes it ([`units::rate_about`]: "about 20 Mbit/s").
pub(super) fn rate_about(bps: f64) -> String {
    units::rate_about(bps).to_string()
}

/// A rate in bits/s in at most 5 characters, SI prefixes, three significant digits ("50.0M",
/// "850k", "1.25G"), for table cells whose title line names the unit.
pub(super) fn rate_compact(bps: f64) -> String {
    if !bps.is_finite() {
        return "∞".into();
    }
    units::si(bps.max(0.0), "").to_string()
}

/// Microseconds as milliseconds with one decimal, no unit (the column header carries it).
pub(super) fn ms(us: u32) -> String {
    // Integer rounding: 30.95 ms must read 31.0, which binary floating point gets wrong.
    let tenths = (u64::from(us) + 50) / 100;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// Bytes in binary multiples ([`units::bytes`]: "1.4 MiB").
pub(super) fn bytes(b: u64) -> String {
    units::bytes(b).to_string()
}

/// A 0..=1 share as a percentage, as the verdict writes it ([`units::pct`]: "2.00%").
pub(super) fn pct(ratio: f64) -> String {
    units::pct(ratio).to_string()
}

/// ssthresh in segments, "-" while it is still infinite (as `ss` leaves it out).
pub(super) fn ssthresh(v: u32) -> String {
    if v >= INFINITE_SSTHRESH {
        "-".into()
    } else {
        v.to_string()
    }
}

/// Cut `s` to at most `max` characters, marking the cut with "…".
pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Cut `s` to at most `max` characters by dropping its middle: an address keeps its start and
/// its port.
pub(super) fn truncate_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    if max < 3 {
        return truncate(s, max);
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    out
}

/// Greedy word wrap to `width` columns; a word longer than a line is split. Done here rather
/// than by ratatui so callers know the exact line count (for scrolling).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let sep = usize::from(len > 0);
            if len + sep + word.len() <= width {
                if sep == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                len += sep + word.len();
                break;
            }
            if len > 0 {
                lines.push(std::mem::take(&mut line));
                len = 0;
                continue;
            }
            // The word alone is too long: fill this line with its head.
            let rest = word.split_off(width);
            lines.push(word.iter().collect());
            word = rest;
        }
    }
    if len > 0 || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// Indent of the rows that continue a command.
const COMMAND_CONTINUES: &str = "    ";
/// Start of the rows that continue a comment: still a comment, visibly a continuation.
const COMMENT_CONTINUES: &str = "#   ";

/// Split one line of shell into its words and the comment after them (`#` at the start of a
/// word, outside quotes, to the end of the line). Quoted text stays inside its word.
fn shell_words(line: &str) -> (Vec<String>, Vec<String>) {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if quoted {
            word.push(c);
            quoted = c != '\'';
            continue;
        }
        match c {
            '\'' => {
                quoted = true;
                word.push(c);
            }
            '\\' => {
                word.push(c);
                word.extend(chars.next());
            }
            '#' if word.is_empty() => {
                let comment = std::iter::once('#').chain(chars).collect::<String>();
                return (words, comment.split_whitespace().map(String::from).collect());
            }
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    (words, Vec::new())
}

/// Wrap one line of shell (a command, a comment, or a command with a trailing comment) to
/// `width` columns so that every row, pasted into a shell, means what the whole line means: a
/// command breaks only between words (never inside quotes) and ends the row with ` \`, a
/// comment continues on rows that start with `#`. A word too long for a row is cut with `…` and
/// ends the rows: no row is ever the tail of a word or a comment, which would run as a command.
pub(super) fn wrap_shell(line: &str, width: usize) -> Vec<String> {
    let width = width.max(COMMAND_CONTINUES.len() + COMMENT_CONTINUES.len() + 4);
    let (words, comment) = shell_words(line);
    let comment_continues = if words.is_empty() {
        COMMENT_CONTINUES.to_string()
    } else {
        format!("{COMMAND_CONTINUES}{COMMENT_CONTINUES}")
    };
    let mut rows = Vec::new();
    let mut row = String::new();
    let mut len = 0;
    let mut fresh = true;
    let mut in_comment = false;
    let count = words.len() + comment.len();
    let tokens = words.iter().map(|w| (w, false)).chain(comment.iter().map(|w| (w, true)));
    for (i, (word, is_comment)) in tokens.enumerate() {
        let mut word: &str = word;
        // A command row keeps room for the " \\" it ends with if a later word breaks it.
        let limit = if is_comment || i + 1 == count { width } else { width - 2 };
        loop {
            let need = word.chars().count() + usize::from(!fresh);
            if len + need <= limit {
                if !fresh {
                    row.push(' ');
                }
                row.push_str(word);
                len += need;
                fresh = false;
                break;
            }
            if fresh && !is_comment {
                row.push_str(&truncate(word, limit - len));
                rows.push(row);
                return rows;
            }
            if fresh {
                // A comment word may be split: its tail goes on a comment row too.
                let head = word.char_indices().nth(limit - len).map_or(word.len(), |(at, _)| at);
                row.push_str(&word[..head]);
                word = &word[head..];
            } else if !in_comment {
                // The line continues: the break is between two words of the command (or
                // before its comment), which the shell joins back together.
                row.push_str(" \\");
            }
            let next = if in_comment || (fresh && is_comment) {
                comment_continues.clone()
            } else {
                COMMAND_CONTINUES.to_string()
            };
            rows.push(std::mem::replace(&mut row, next));
            len = row.chars().count();
            fresh = true;
        }
        in_comment = is_comment;
    }
    if !row.is_empty() || rows.is_empty() {
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(rate(4_000_000.0), "4.0 Mbit/s");
        assert_eq!(rate(850_000.0), "0.8 Mbit/s");
        assert_eq!(rate(1_250_000_000.0), "1.25 Gbit/s");
        assert_eq!(rate(12.0), "0.0 Mbit/s");
        assert_eq!(rate(f64::INFINITY), "∞");
        assert_eq!(rate_compact(50_000_000.0), "50.0M");
        assert_eq!(rate_compact(4_049_000.0), "4.05M");
        assert_eq!(rate_compact(850_000.0), "850k");
        assert_eq!(rate_compact(999_700.0), "1.00M");
        assert_eq!(rate_compact(1_250_000_000.0), "1.25G");
        assert_eq!(rate_compact(950.0), "950");
        assert_eq!(rate_compact(0.0), "0");
        assert_eq!(ms(30_950), "31.0");
        assert_eq!(ms(400), "0.4");
        assert_eq!(ms(u32::MAX), "4294967.3");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(5 << 20), "5.0 MiB");
        assert_eq!(pct(0.0), "0");
        assert_eq!(pct(0.02), "2.00%");
        assert_eq!(pct(0.25), "25.00%");
        assert_eq!(ssthresh(INFINITE_SSTHRESH), "-");
        assert_eq!(ssthresh(u32::MAX), "-");
        assert_eq!(ssthresh(42), "42");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(truncate_middle("[2001:db8::1234:5678]:5201", 12), "[2001:…:5201");
    }

    #[test]
    fn wraps_words_and_splits_long_ones() {
        assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), vec![""]);
        assert_eq!(wrap("x y", 0), vec!["x", "y"]);
    }

    #[test]
    fn shell_lines_wrap_so_every_row_means_what_the_line_means() {
        // Short lines stay whole.
        assert_eq!(wrap_shell("sysctl -w a=b", 40), vec!["sysctl -w a=b"]);
        // A comment continues as a comment.
        assert_eq!(
            wrap_shell("# roll back: sysctl -w x=cubic; rm -f /etc/sysctl.d/90-cctrace-bbr.conf", 40),
            vec!["# roll back: sysctl -w x=cubic; rm -f", "#   /etc/sysctl.d/90-cctrace-bbr.conf"]
        );
        // A command continues with a backslash, never inside its quotes.
        assert_eq!(
            wrap_shell("ip netns exec 'a b c d' sysctl -w net.ipv4.tcp_congestion_control=bbr", 40),
            vec!["ip netns exec 'a b c d' sysctl -w \\", "    net.ipv4.tcp_congestion_control=bbr"]
        );
        // A command's trailing comment continues as a comment; the backslash before it is fine.
        assert_eq!(
            wrap_shell("modprobe tcp_bbr   # bbr is not in net.ipv4.tcp_available_congestion_control", 30),
            vec![
                "modprobe tcp_bbr # bbr is not",
                "    #   in",
                "    #   net.ipv4.tcp_available",
                "    #   _congestion_control"
            ]
        );
        assert_eq!(wrap_shell("modprobe tcp_bbr #bbr-missing", 20), vec!["modprobe tcp_bbr \\", "    #bbr-missing"]);
        // A word too long for a row is cut and ends the rows.
        assert_eq!(wrap_shell("echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bb", 20), vec!["echo \\", "    aaaaaaaaaaaaa…"]);
        // '\'' inside a quoted word is part of the word.
        assert_eq!(
            shell_words(r"ip 'it'\''s x' y # c d"),
            (
                vec!["ip".to_string(), r"'it'\''s x'".to_string(), "y".to_string()],
                vec!["#".to_string(), "c".to_string(), "d".to_string()]
            )
        );
    }

    #[test]
    fn no_wrapped_row_stands_alone_as_a_command() {
        let lines = [
            "# persist: test -e /etc/modules-load.d/cctrace-bbr.conf || echo tcp_bbr > /etc/modules-load.d/cctrace-bbr.conf",
            "# roll back: ip netns exec 'x;id>/tmp/p;#' sysctl -w net.ipv4.tcp_congestion_control=cubic; rm -f /etc/sysctl.d/90-cctrace-bbr.conf",
            "modprobe tcp_bbr   # bbr is not in net.ipv4.tcp_available_congestion_control",
            "nsenter --net=/proc/31337/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr",
        ];
        for line in lines {
            for width in 10..120 {
                let rows = wrap_shell(line, width);
                for pair in rows.windows(2) {
                    assert!(
                        pair[0].ends_with(" \\") || pair[1].trim_start().starts_with('#'),
                        "{width}: {pair:?} in {rows:?}"
                    );
                }
                if line.starts_with('#') {
                    assert!(rows.iter().all(|r| r.starts_with('#')), "{width}: {rows:?}");
                }
            }
        }
    }

    #[test]
    fn wrapped_shell_rows_join_back_into_the_same_command() {
        let line = "ip netns exec 'x;id>/tmp/p;#' sysctl -w net.ipv4.tcp_congestion_control=bbr";
        for width in 20..90 {
            let rows = wrap_shell(line, width);
            assert!(rows.iter().all(|r| r.chars().count() <= width.max(16)), "{width}: {rows:?}");
            if rows.iter().any(|r| r.ends_with('…')) {
                continue;
            }
            // What the shell reads: continuation rows joined by their backslash-newlines.
            let joined = rows.join("\n").replace(" \\\n", " ");
            assert_eq!(shell_words(&joined), shell_words(line), "{width}: {rows:?}");
        }
    }
}
