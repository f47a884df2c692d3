//! The flow table's settings, and the one rule of what counts as queueing in a sample (which
//! the diagnosis' loss episodes share).

use tracer_common::NS_PER_SEC;

#[derive(Clone, Debug)]
pub struct TableConfig {
    /// Window over which throughput and retransmission rates are computed.
    pub rate_window_ns: u64,
    /// Width of one history bucket (one chart point).
    pub history_step_ns: u64,
    /// History buckets kept for the flows worth charting (see `charted_flows`).
    pub history_len: usize,
    /// History buckets kept for every other flow.
    pub short_history_len: usize,
    /// How many flows keep the full `history_len`: the busiest by throughput. A charted flow
    /// stays charted while it is among twice as many, so flows near the cut do not flap.
    pub charted_flows: usize,
    /// How long a closed flow stays visible.
    pub closed_linger_ns: u64,
    /// A flow with no sample for this long is dropped (it may still exist, but is idle).
    pub idle_timeout_ns: u64,
    /// Hard bound on flows kept; the least recently updated are evicted first.
    pub max_flows: usize,
    /// What counts as queueing in a sample (srtt above min_rtt by more than
    /// `min_rtt * queue_ratio + queue_slack_us`). The diagnosis judges loss episodes with the
    /// same rule; [`crate::analysis::Analysis`] copies it from [`DiagnosisConfig`] so there is
    /// one source of truth.
    ///
    /// [`DiagnosisConfig`]: crate::analysis::diagnosis::DiagnosisConfig
    pub queue_ratio: f64,
    pub queue_slack_us: f64,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            rate_window_ns: NS_PER_SEC,
            history_step_ns: NS_PER_SEC,
            history_len: 300,
            short_history_len: 30,
            charted_flows: 1_000,
            closed_linger_ns: 30 * NS_PER_SEC,
            idle_timeout_ns: 300 * NS_PER_SEC,
            max_flows: 50_000,
            queue_ratio: DEFAULT_QUEUE_RATIO,
            queue_slack_us: DEFAULT_QUEUE_SLACK_US,
        }
    }
}

/// Default of [`TableConfig::queue_ratio`] and the diagnosis' episode threshold: see
/// `DiagnosisConfig::queue_ratio` for why.
pub const DEFAULT_QUEUE_RATIO: f64 = 0.1;
pub const DEFAULT_QUEUE_SLACK_US: f64 = 2_000.0;

/// Queueing threshold in microseconds for a path of `min_rtt_us`.
pub fn queue_threshold_us(min_rtt_us: u32, ratio: f64, slack_us: f64) -> f64 {
    f64::from(min_rtt_us) * ratio + slack_us
}
