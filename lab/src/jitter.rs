//! Host timer jitter: how late a thread set up like the emulator's release
//! threads wakes from a precise sleep. On a shared VM (vCPU steal, other
//! tenants) this can reach milliseconds, and no emulator can be more precise
//! than the host lets it be; tests and benchmarks use this to tell an
//! emulator defect from a noisy host.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use crate::error::LabError;
use crate::sys;

/// Wake-up lateness distribution of [`host_timer_jitter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerJitter {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// Sleeps `samples` times for `period` with ppoll on a thread with the
/// emulator's priority and timer slack, and reports how late it woke.
pub fn host_timer_jitter(samples: usize, period: Duration) -> Result<TimerJitter> {
    if samples == 0 || samples > 100_000 || period > Duration::from_secs(1) {
        return Err(LabError::InvalidArgument("jitter probe needs 1..=100000 samples of at most 1 s".into()).into());
    }
    let t = std::thread::Builder::new().name("cct-jitter".into()).spawn(move || -> Result<TimerJitter> {
        sys::set_min_timer_slack();
        sys::raise_thread_priority();
        let mut late = Vec::with_capacity(samples);
        for _ in 0..samples {
            let start = Instant::now();
            sys::ppoll(&mut [], Some(period))?;
            late.push(start.elapsed().saturating_sub(period));
        }
        late.sort_unstable();
        let at = |q: f64| late[((q * samples as f64).ceil() as usize).clamp(1, samples) - 1];
        Ok(TimerJitter { samples, p50: at(0.5), p99: at(0.99), max: late[samples - 1] })
    })?;
    t.join().map_err(|_| anyhow!("jitter thread panicked"))?
}
