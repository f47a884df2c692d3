//! The lines cctrace prints on stderr when a run or a recording ends.

use crate::analysis::schema::SummaryRecord;
use crate::recording::RecordingStatus;

/// One line for stderr after the terminal UI: what the run saw and whether anything was lost.
pub(super) fn summary_line(s: &SummaryRecord) -> String {
    let mut line = format!(
        "cctrace: {} samples from {}, {} lost, {} flows",
        s.events_received, s.source, s.events_lost, s.flows_seen
    );
    for (what, n) in [
        ("decode errors", s.decode_errors),
        ("kernel read errors", s.kernel_read_errors),
        ("flows the kernel map could not hold", s.flow_map_full),
        ("samples filtered out in the kernel", s.events_filtered),
        ("flows evicted from the table", s.flows_evicted),
    ] {
        if n > 0 {
            line.push_str(&format!(", {n} {what}"));
        }
    }
    line
}

/// One line for stderr when a recording ends: how much, how long, what was lost.
pub(super) fn recorded_line(status: &RecordingStatus, summary: Option<&SummaryRecord>) -> String {
    let (dropped, dropped_samples) = status.dropped();
    format!(
        "cctrace: recorded {} entries, {} bytes ({}) in {:.1} s to {}; {} samples lost by the kernel, {dropped} entries ({dropped_samples} samples) dropped by the recorder",
        status.entries(),
        status.bytes(),
        crate::analysis::units::bytes(status.bytes()),
        status.elapsed().as_secs_f64(),
        status.path().display(),
        summary.map_or(0, |s| s.events_lost),
    )
}
