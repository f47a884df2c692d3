//! The kernel's CONFIG_HZ: TCP chrono counters are kept in jiffies.

use std::io::Read;

/// Find CONFIG_HZ from the kernel config, else by watching jiffies advance.
pub fn kernel_hz() -> Option<u32> {
    config_hz().or_else(measure_hz)
}

/// What decoding assumes where CONFIG_HZ could not be found: Debian's, Ubuntu's and Fedora's
/// x86-64 kernels use 250 (a guess, so nothing that needs the true value may rest on it).
pub const GUESSED_HZ: u32 = 250;

fn parse_config(text: &str) -> Option<u32> {
    text.lines().find_map(|l| l.strip_prefix("CONFIG_HZ=")).and_then(|v| v.trim().parse().ok())
}

fn config_hz() -> Option<u32> {
    if let Ok(f) = std::fs::File::open("/proc/config.gz") {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(f).read_to_string(&mut text).is_ok() {
            if let Some(hz) = parse_config(&text) {
                return Some(hz);
            }
        }
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
    parse_config(&text)
}

fn jiffies_now() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/timer_list").ok()?;
    text.lines().find_map(|l| l.trim().strip_prefix("jiffies:")).and_then(|v| v.trim().parse().ok())
}

/// Count jiffies over 200 ms and round to the nearest standard HZ.
fn measure_hz() -> Option<u32> {
    let start = std::time::Instant::now();
    let j0 = jiffies_now()?;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let j1 = jiffies_now()?;
    let rate = (j1.saturating_sub(j0)) as f64 / start.elapsed().as_secs_f64();
    [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| (f64::from(*a) - rate).abs().total_cmp(&(f64::from(*b) - rate).abs()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_config_hz() {
        assert_eq!(super::parse_config("# x\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"), Some(250));
        assert_eq!(super::parse_config("CONFIG_HZ_1000=y\n"), None);
    }
}
