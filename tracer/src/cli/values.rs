//! Parsers for numeric command-line values: each has a range and says in one line what it
//! accepts, so bad input is an error message, never a panic or a silent clamp.

use std::time::Duration;

/// Longest `--duration`: ten years, far beyond any trace and far below `Duration`'s limits.
const MAX_DURATION_SECS: f64 = 10.0 * 365.0 * 86_400.0;

/// A positive, finite number of seconds up to ten years.
pub fn duration_secs(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.trim().parse().map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_DURATION_SECS {
        return Err(format!("must be more than 0 and at most {MAX_DURATION_SECS:.0} seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// Seconds between two OTLP metric exports: a whole number from 1 (snapshots are made once a
/// second) to 3600.
pub fn otlp_interval(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<u64>() {
        Ok(secs @ 1..=3600) => Ok(Duration::from_secs(secs)),
        _ => Err(format!("'{text}' is not a whole number of seconds from 1 to 3600")),
    }
}

/// A finite number in `[min, max]`.
pub fn bounded_f64(min: f64, max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text: &str| {
        let v: f64 = text.trim().parse().map_err(|_| format!("'{text}' is not a number"))?;
        if v.is_finite() && (min..=max).contains(&v) {
            Ok(v)
        } else {
            Err(format!("must be a number from {min} to {max}"))
        }
    }
}

/// Ring-buffer size in KiB: a power of two from 4 KiB to 1 GiB (and at least one of the kernel's
/// pages, which loading checks: 16 KiB on some arm64 kernels).
pub fn ring_kib(text: &str) -> Result<u32, String> {
    let kib: u32 = text.trim().parse().map_err(|_| format!("'{text}' is not a whole number of KiB"))?;
    if (4..=1 << 20).contains(&kib) && kib.is_power_of_two() {
        Ok(kib)
    } else {
        Err("must be a power of two from 4 to 1048576 KiB".into())
    }
}

/// The first line of a multi-line error, without clap's `error: ` prefix.
pub fn one_line(message: &str) -> String {
    let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid arguments");
    first.strip_prefix("error: ").unwrap_or(first).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_have_a_range() {
        assert_eq!(duration_secs("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["1e20", "inf", "NaN", "0", "-3", "", "ten"] {
            assert!(duration_secs(bad).is_err(), "{bad}");
        }
        assert!(duration_secs("315360000").is_ok());
        assert_eq!(otlp_interval("15"), Ok(Duration::from_secs(15)));
        for bad in ["0", "3601", "1.5", "-1", "x"] {
            assert!(otlp_interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bounded_numbers_and_ring_sizes() {
        let p = bounded_f64(0.0, 10.0);
        assert_eq!(p("2.5"), Ok(2.5));
        for bad in ["-1", "11", "inf", "NaN", "x"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert_eq!(ring_kib("8192"), Ok(8192));
        for bad in ["3", "5000", "0", "2097152", "-4"] {
            assert!(ring_kib(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn clap_errors_become_one_line() {
        let text =
            "error: invalid value '1e20' for '--duration <S>': must be more\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(text), "invalid value '1e20' for '--duration <S>': must be more");
    }
}
