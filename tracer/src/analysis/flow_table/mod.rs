//! The flow table: every TCP flow seen, its latest sample, derived rates, time per CA state and
//! a bounded history for charts. Pure code: no aya, no terminal, no clock of its own (times come
//! from the samples and from the caller), so it runs the same on live data, recordings and tests.
//!
//! Memory is bounded by design: at most `max_flows` flows, each with a short chart history
//! (`short_history_len` compact points, allocated only once a flow reaches its second bucket);
//! only the `charted_flows` busiest flows (and the one a front end asks to keep) hold the full
//! `history_len`. A full table evicts the least recently updated flow through an ordered index,
//! in O(log n), not by scanning; the index is brought up to date when a flow is about to be
//! evicted, not on every sample.
//!
//! One file per job: `config` (settings and the queueing rule), `flow` (one flow brought
//! up to date by each sample), `rates`, `counts`, `loss` (loss episodes), `receive` (what a receiving flow shows of its
//! peer's sender) and `history`
//! (chart points) for the parts of a flow, and `table` (the bounded table of flows).

mod config;
mod counts;
mod flow;
mod history;
mod loss;
mod rates;
mod receive;
mod table;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::analysis::flow_table::config::{
    queue_threshold_us, TableConfig, DEFAULT_QUEUE_RATIO, DEFAULT_QUEUE_SLACK_US,
};
pub use crate::analysis::flow_table::counts::SampleCounts;
pub use crate::analysis::flow_table::flow::Flow;
pub use crate::analysis::flow_table::history::{HistoryIter, HistoryPoint};
pub use crate::analysis::flow_table::loss::{
    EpisodeKind, LossEpisode, LossTracker, LOSS_LOOKBACK_NS, MAX_EPISODES, TRACK_MIN_BYTES as SENDER_TRACK_MIN_BYTES,
};
pub use crate::analysis::flow_table::rates::Rates;
pub use crate::analysis::flow_table::receive::{Cut, Progress, ReceiveEpisode, ReceiveTracker, MAX_RECEIVE_EPISODES};
pub use crate::analysis::flow_table::table::{FlowTable, Ingested, TableChanges};
