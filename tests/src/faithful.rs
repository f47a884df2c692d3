//! Tests that judge timing on an emulated path trust a run only if the emulator kept its
//! timing: it counts the packets it released late, and a run it reports as unfaithful proves
//! nothing either way, so it is run again; a failure on a faithful run fails at once. The
//! diagnosis tests and the policer test share this one rule.

use anyhow::Result;
use cctrace_lab::EmulatedPath;

/// Share of packets the emulator released more than 0.5 ms late on `paths`, both directions:
/// its own measure of how faithfully it delayed them. A host that stalls (CPU steal on a
/// shared VM, softirq storms) shows up here before it shows up as "queue" in srtt, and a late
/// ACK raises srtt as surely as a late data segment does.
pub fn late_share(paths: &[&EmulatedPath]) -> f64 {
    let (late, sent) = paths
        .iter()
        .flat_map(|p| {
            let s = p.stats();
            [s.forward, s.reverse]
        })
        .fold((0, 0), |(l, n), d| (l + d.late_releases, n + d.forwarded));
    late as f64 / sent.max(1) as f64
}

/// Above this share of late releases the emulated path had delay the test did not ask for, so
/// what cctrace said about queueing cannot be checked against it. (A quiet run measures well
/// under 1 %.)
pub const MAX_LATE_SHARE: f64 = 0.05;

/// Run `scenario` until it holds on a run whose emulator kept its timing, at most `attempts`
/// times. A failure on a faithful run fails at once; only runs shown unfaithful (the emulator
/// reports it was late, or the host queued what the path did not) are tried again, and if none
/// is faithful the test fails saying so.
pub fn on_a_faithful_path(attempts: usize, mut scenario: impl FnMut() -> Result<f64>) -> Result<()> {
    let mut why = Vec::new();
    for attempt in 1..=attempts {
        match scenario() {
            Ok(share) if share <= MAX_LATE_SHARE => return Ok(()),
            Ok(share) => why.push(Unfaithful::Late(share).to_string()),
            Err(e) => {
                let Some(unfaithful) = e.downcast_ref::<Unfaithful>() else { return Err(e) };
                eprintln!("attempt {attempt}: {e:#}");
                why.push(unfaithful.to_string());
            }
        }
    }
    anyhow::bail!("the host could not emulate the path in {attempts} attempts: {why:?}")
}

/// What a scenario returns to [`on_a_faithful_path`]: the emulator's `late` share when
/// `checked` held, else its failure, marked [`Unfaithful`] when the emulator was late.
pub fn judged_on(late: f64, checked: Result<()>) -> Result<f64> {
    match checked {
        Ok(()) => Ok(late),
        Err(e) if late > MAX_LATE_SHARE => Err(e.context(Unfaithful::Late(late))),
        Err(e) => Err(e),
    }
}

/// Why a run's assertions could not be checked against the path the test asked for.
#[derive(Debug)]
pub enum Unfaithful {
    /// The emulator released this share of packets late.
    Late(f64),
    /// cctrace saw queue before losses, rightly waiting to flag, while the emulator's
    /// bottleneck never held enough to delay a packet past cctrace's queue threshold: the
    /// delay came from the host (a stalled sender, receiver or softirq), not the path.
    HostQueue { path_queue_ms: f64, threshold_ms: f64 },
}

impl std::fmt::Display for Unfaithful {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfaithful::Late(share) => write!(f, "the emulator released {:.1}% of packets late", share * 100.0),
            Unfaithful::HostQueue { path_queue_ms, threshold_ms } => write!(
                f,
                "losses looked queued, yet the emulated bottleneck queued at most {path_queue_ms:.1} ms \
                 (cctrace's queue threshold {threshold_ms:.1} ms): the host delayed them"
            ),
        }
    }
}

impl std::error::Error for Unfaithful {}
