//! Human units for the screen: rates in bit/s multiples, times in ms, sizes in KiB/MiB.
//! Pure functions, so every view formats a value the same way and tests can pin them.

/// `TCP_INFINITE_SSTHRESH`: ssthresh is "not set yet" at or above this.
pub use tracer_common::TCP_INFINITE_SSTHRESH as INFINITE_SSTHRESH;

/// A rate in bits/s with the unit a network engineer expects ("4.0 Mbit/s").
pub fn rate(bps: f64) -> String {
    if !bps.is_finite() {
        return "∞".into();
    }
    let bps = bps.max(0.0);
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.0} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

/// A rate in bits/s in at most 5 characters, SI prefixes, three significant digits ("50.0M",
/// "850k", "1.25G"), for table cells whose title line names the unit.
pub fn rate_compact(bps: f64) -> String {
    if !bps.is_finite() {
        return "∞".into();
    }
    let mut v = bps.max(0.0);
    let mut unit = 0;
    const PREFIX: [&str; 5] = ["", "k", "M", "G", "T"];
    // Step up at 999.5 so rounding never prints "1000".
    while v >= 999.5 && unit + 1 < PREFIX.len() {
        v /= 1000.0;
        unit += 1;
    }
    let p = PREFIX[unit];
    if unit == 0 {
        format!("{v:.0}")
    } else if v < 9.995 {
        format!("{v:.2}{p}")
    } else if v < 99.95 {
        format!("{v:.1}{p}")
    } else {
        format!("{v:.0}{p}")
    }
}

/// Microseconds as milliseconds with one decimal, no unit (the column header carries it).
pub fn ms(us: u32) -> String {
    // Integer rounding: 30.95 ms must read 31.0, which binary floating point gets wrong.
    let tenths = (u64::from(us) + 50) / 100;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// Bytes in binary multiples ("1.4 MiB").
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A 0..=1 share as a percentage. Two decimals below 10 %, because the loss thresholds that
/// matter (0.2 %, 2 %) would vanish at one.
pub fn pct(ratio: f64) -> String {
    if !ratio.is_finite() || ratio <= 0.0 {
        "0".into()
    } else if ratio < 0.1 {
        format!("{:.2}%", ratio * 100.0)
    } else {
        format!("{:.1}%", ratio * 100.0)
    }
}

/// ssthresh in segments, "-" while it is still infinite (as `ss` leaves it out).
pub fn ssthresh(v: u32) -> String {
    if v >= INFINITE_SSTHRESH {
        "-".into()
    } else {
        v.to_string()
    }
}

/// Cut `s` to at most `max` characters, marking the cut with "…".
pub fn truncate(s: &str, max: usize) -> String {
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
pub fn truncate_middle(s: &str, max: usize) -> String {
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
pub fn wrap(text: &str, width: usize) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(rate(4_000_000.0), "4.0 Mbit/s");
        assert_eq!(rate(850_000.0), "850 kbit/s");
        assert_eq!(rate(1_250_000_000.0), "1.25 Gbit/s");
        assert_eq!(rate(12.0), "12 bit/s");
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
        assert_eq!(pct(0.25), "25.0%");
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
}
