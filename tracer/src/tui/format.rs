//! Human units for the screen: rates in bit/s multiples, times in ms, sizes in KiB/MiB.
//! Pure functions, so every view formats a value the same way and tests can pin them.

/// `TCP_INFINITE_SSTHRESH`: ssthresh is "not set yet" at or above this.
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

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

/// Microseconds as milliseconds with one decimal, no unit (the column header carries it).
pub fn ms(us: u32) -> String {
    format!("{:.1}", f64::from(us) / 1000.0)
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
        assert_eq!(ms(30_950), "31.0");
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
    }
}
