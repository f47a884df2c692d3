//! The one way each number is written for people: a rate, a share, a size. The verdict's text,
//! the TUI and the HTML report all format through here, so one figure reads the same wherever
//! it is shown (and the verdict's wording, part of the JSON output, is the reference).
//!
//! Each returns `impl Display`, written straight into the text it is part of: every flow's
//! verdict is written once a second, and a string apiece would be thousands of allocations.

use std::fmt::Display;

/// A rate in bits/s: `12.5 Mbit/s` below one Gbit/s (one decimal, also below one Mbit/s:
/// `0.4 Mbit/s`), `1.25 Gbit/s` from there; `∞` for a bound that does not apply (no loss).
pub fn rate(bps: f64) -> impl Display {
    std::fmt::from_fn(move |f| {
        if bps.is_infinite() && bps > 0.0 {
            f.write_str("∞")
        } else if bps >= 1e9 {
            write!(f, "{:.2} Gbit/s", bps / 1e9)
        } else {
            write!(f, "{:.1} Mbit/s", bps / 1e6)
        }
    })
}

/// An estimated rate to two significant figures (`about 20 Mbit/s`, `about 4.5 Mbit/s`,
/// `about 1.2 Gbit/s`): what a verdict infers, not what a counter measured.
pub fn rate_about(bps: f64) -> impl Display {
    std::fmt::from_fn(move |f| {
        let (v, unit) = if bps >= 1e9 { (bps / 1e9, "Gbit/s") } else { (bps / 1e6, "Mbit/s") };
        if v >= 10.0 {
            write!(f, "about {v:.0} {unit}")
        } else {
            write!(f, "about {v:.1} {unit}")
        }
    })
}

/// A 0..=1 share as a percentage: two decimals from 0.1 %, three below, so the loss rates that
/// matter (0.02 %, 0.2 %, 2 %) keep their digits; none is a plain `0` (a table column of
/// zeros stays quiet; the verdict names a share only when there is some).
pub fn pct(ratio: f64) -> impl Display {
    std::fmt::from_fn(move |f| {
        if ratio == 0.0 {
            f.write_str("0")
        } else if ratio >= 0.001 {
            write!(f, "{:.2}%", ratio * 100.0)
        } else {
            write!(f, "{:.3}%", ratio * 100.0)
        }
    })
}

/// A plain number to three significant digits with an SI prefix after `sep`: `12.7 M`,
/// `153 M`, `1.25 G`, `870`, `2.50` (chart axes, `sep` " "), or `50.0M`, `850k` (table cells
/// whose title names the unit, `sep` ""). The prefix steps up at 999.5, so rounding never
/// writes `1000`; a whole number below a thousand keeps no decimals. Finite values only: what
/// stands for infinity differs by where the number is shown.
pub fn si(v: f64, sep: &'static str) -> impl Display {
    std::fmt::from_fn(move |f| {
        const PREFIX: [&str; 5] = ["", "k", "M", "G", "T"];
        let mut x = v;
        let mut unit = 0;
        while x.abs() >= 999.5 && unit + 1 < PREFIX.len() {
            x /= 1000.0;
            unit += 1;
        }
        let digits = match x.abs() {
            _ if unit == 0 && x.fract() == 0.0 => 0,
            a if a < 9.995 => 2,
            a if a < 99.95 => 1,
            _ => 0,
        };
        match unit {
            0 => write!(f, "{x:.digits$}"),
            _ => write!(f, "{x:.digits$}{sep}{}", PREFIX[unit]),
        }
    })
}

/// A size in binary multiples: `812 B`, `3.4 KiB`, `1.4 MiB`, `2.0 GiB`, `1.1 TiB`.
pub fn bytes(b: u64) -> impl Display {
    std::fmt::from_fn(move |f| {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = b as f64;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{b} B")
        } else {
            write!(f, "{v:.1} {}", UNITS[unit])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_prefixes() {
        assert_eq!(si(12_700_000.0, " ").to_string(), "12.7 M");
        assert_eq!(si(153_000_000.0, " ").to_string(), "153 M");
        assert_eq!(si(-4_049_000.0, " ").to_string(), "-4.05 M");
        assert_eq!(si(999_700.0, "").to_string(), "1.00M");
        assert_eq!(si(999.6, "").to_string(), "1.00k");
        assert_eq!(si(870.0, " ").to_string(), "870");
        assert_eq!(si(2.5, " ").to_string(), "2.50");
        assert_eq!(si(0.0, "").to_string(), "0");
    }

    #[test]
    fn rates() {
        assert_eq!(rate(84e6).to_string(), "84.0 Mbit/s");
        assert_eq!(rate(3_331_000.0).to_string(), "3.3 Mbit/s");
        assert_eq!(rate(450_000.0).to_string(), "0.5 Mbit/s");
        assert_eq!(rate(0.0).to_string(), "0.0 Mbit/s");
        assert_eq!(rate(999_949_999.0).to_string(), "999.9 Mbit/s");
        assert_eq!(rate(1.25e9).to_string(), "1.25 Gbit/s");
        assert_eq!(rate(f64::INFINITY).to_string(), "∞");
    }

    #[test]
    fn shares() {
        assert_eq!(pct(0.02).to_string(), "2.00%");
        assert_eq!(pct(0.001).to_string(), "0.10%");
        assert_eq!(pct(0.0002).to_string(), "0.020%");
        assert_eq!(pct(0.0).to_string(), "0");
        assert_eq!(pct(0.000_05).to_string(), "0.005%");
        assert_eq!(pct(0.5).to_string(), "50.00%");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(812).to_string(), "812 B");
        assert_eq!(bytes(1023).to_string(), "1023 B");
        assert_eq!(bytes(3 * 1024 + 400).to_string(), "3.4 KiB");
        assert_eq!(bytes(1_468_006).to_string(), "1.4 MiB");
        assert_eq!(bytes(1 << 40).to_string(), "1.0 TiB");
    }
}
