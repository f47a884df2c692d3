//! What a recording holds, one [`Entry`] per line: the one definition of the file's schema.

use serde::{Deserialize, Serialize};

use crate::analysis::deep_decisions::Decision;
use crate::analysis::environment::Environment;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::source::SourceCounters;

/// `Header::format` of every recording.
pub const FORMAT: &str = "cctrace-recording";
/// Bumped on any change a reader of the previous version would misread.
pub const FORMAT_VERSION: u32 = 1;

/// One line of a recording, tagged by `"type"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
#[allow(clippy::large_enum_variant)] // read and written one at a time
pub enum Entry {
    /// The first line: what, where and how this was recorded.
    Header(Header),
    /// One batch of samples, in the order the analysis got them.
    Samples { samples: Vec<Sample> },
    /// One batch of deep mode's decision events, in the order the analysis got them.
    Decisions { decisions: Vec<Decision> },
    /// The pipeline ticked at `now_ns` (monotonic, the samples' clock): a replay ticks at the
    /// same instants, so it judges flows exactly as the live run did.
    Tick { now_ns: u64, counters: SourceCounters },
    /// The host facts changed (containers, namespaces, their default CC), from this point on.
    Host { env: Environment },
    /// Readings of heavy UDP sockets and TCP routes (once a second, live).
    Sockets { readings: crate::analysis::udp::SocketReadings },
    /// Something cctrace did to the host (a fix applied or undone), at its time.
    Action(ActionRecord),
    /// The last line of a recording that ended cleanly.
    End {
        summary: SummaryRecord,
        /// Entries the recorder dropped because the disk fell behind (the replay misses them).
        #[serde(default)]
        dropped_entries: u64,
    },
}

/// Self-description of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The cctrace that wrote it.
    pub cctrace_version: String,
    pub host: String,
    pub kernel: String,
    /// Wall clock and CLOCK_MONOTONIC at the same instant when recording started: maps the
    /// samples' monotonic times to dates.
    pub start_unix_ns: u64,
    pub start_monotonic_ns: u64,
    /// Kernel sampling interval per flow and the pipeline's tick, milliseconds.
    pub sample_interval_ms: u64,
    pub tick_ms: u64,
    /// The filter in force (`container=jellyfin`, ...), empty for none.
    pub filters: Vec<String>,
    /// What the samples came from (`live kernel (6/6 hooks)`) and each hook's status line.
    pub source: String,
    pub hooks: Vec<String>,
    /// The thresholds a flow counts as heavy by ([`crate::analysis::diagnosis::DiagnosisConfig`]):
    /// a replay judges with the same ones.
    #[serde(default)]
    pub heavy_min_bytes: Option<u64>,
    #[serde(default)]
    pub heavy_min_bps: Option<f64>,
    /// Addresses and process names were replaced by pseudonyms.
    #[serde(default)]
    pub anonymized: bool,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::analysis::container::{CgroupInfo, Container, Runtime};

    #[test]
    fn a_host_entry_reads_back_as_written() {
        let env = Environment {
            host_netns: 4_026_531_840,
            netns_pids: HashMap::from([(4_026_532_561, 4242)]),
            netns_names: HashMap::from([(4_026_532_561, "cct-edge".to_string())]),
            netns_cc: HashMap::from([(4_026_532_561, "cubic".to_string())]),
            cgroups: HashMap::from([(
                77,
                CgroupInfo {
                    path: "/lxc/102/ns".into(),
                    container: Some(Container {
                        runtime: Runtime::Proxmox,
                        id: "102".into(),
                        name: None,
                        pod: None,
                        lxc_path: None,
                    }),
                },
            )]),
            ..Environment::default()
        };
        let line = serde_json::to_string(&Entry::Host { env: env.clone() }).expect("write");
        let back: Entry = serde_json::from_str(&line).expect("read");
        assert_eq!(back, Entry::Host { env });
    }
}
