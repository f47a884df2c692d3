//! The diagnosis' thresholds, each with why it has its value; the defaults suit a host doing
//! media streaming and bulk transfers. (Which flows are heavy by them: `heavy`.)

use crate::analysis::flow_table::{DEFAULT_QUEUE_RATIO, DEFAULT_QUEUE_SLACK_US};

/// Thresholds; the defaults suit a host doing media streaming and bulk transfers.
#[derive(Clone, Debug)]
pub struct DiagnosisConfig {
    /// Snapshots are taken at each evaluation; this many make the judging window.
    pub window: usize,
    /// Fewer observed seconds than this: "not enough data".
    pub min_observed_secs: f64,
    /// A flow is heavy once it moved this many bytes in total...
    pub heavy_min_bytes: u64,
    /// ...and moves at least this rate (bits/s) over the window, or keeps its cwnd full.
    pub heavy_min_bps: f64,
    /// Share of the window the sender must have been backlogged to count as bulk.
    pub min_busy_share: f64,
    /// Share of the window stalled by rwnd / sndbuf that decides those verdicts.
    pub stall_share: f64,
    /// Share of samples with a full cwnd that makes a flow cwnd-limited.
    pub cwnd_full_share: f64,
    /// Share of samples with a full cwnd that makes a slow flow heavy all the same: it wants
    /// more than it gets (nearly always full, unlike a flow that fills its window now and then).
    pub wants_more_cwnd_full_share: f64,
    /// Share of samples with nothing to send that makes a flow application-limited.
    pub no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited that makes a flow so. Lower than
    /// the others: in loss recovery cwnd shrinks to what is in flight, hiding the idle time.
    pub app_limited_share: f64,
    /// Share of samples with a send buffer under 60 % full that makes a flow application-limited.
    pub sndbuf_low_share: f64,
    /// Share of samples held by the send buffer (the writer waits for room, the buffer is
    /// full, nearly all of it in flight, the congestion window has room: see
    /// [`crate::analysis::flow_table::SampleCounts::sndbuf_bound`]) that makes a flow
    /// send-buffer-limited. Asked before the application: with nothing left unsent, the
    /// kernel marks such a flow's rate samples application-limited. Measured on the 200 ms,
    /// 200 Mbit/s path with the kernel's default 4 MiB `tcp_wmem` max: BBR under iperf3 and
    /// under the lab's sender 0.43-1.0 of the samples of each window; CUBIC there 0 (its
    /// congestion window is full), a paced stream 0 (its writer never waits).
    pub sndbuf_bound_share: f64,
    /// A writer waiting for room in the send buffer in at least this share of samples had
    /// more to send: the flow is not application-limited, whatever its rate samples say
    /// (measured: 1.0 for every bulk sender, CUBIC or BBR, iperf3 or the lab's; 0 for paced
    /// streams).
    pub writer_waiting_share: f64,
    /// What a full send buffer keeps in flight per round trip for a BBR sender held by it, as
    /// a share of the buffer: the rate a buffer allows is `buffer x share / RTT`. Measured on
    /// the 200 ms path: 4 MiB gave 100-110 Mbit/s (0.60-0.66 of the buffer per min_rtt; the
    /// writer is woken only when a third is free, and part of the buffer is per-packet
    /// overhead).
    pub sndbuf_carried_share: f64,
    /// A send buffer binds only when the flow gets at least this share of what the buffer
    /// allows at its RTT (the buffer x `sndbuf_carried_share` / srtt): then a larger one would
    /// carry more. A writer waiting on a full buffer is no evidence alone: at 1.5 % random loss
    /// a BBR sender's queue fills with data SACKed but not yet acknowledged, and on a 40 ms,
    /// 200 Mbit/s path it got 177.1 Mbit/s with the default 4 MiB maximum and 178.9 with 64 MiB
    /// (0.36 of the 491 Mbit/s 4 MiB allows at 41 ms), while BBR held by 4 MiB on the 240 ms path
    /// gets 0.8 of the 84 Mbit/s it allows, and 1.1 of it on the 200 ms path.
    pub sndbuf_binds_share: f64,
    /// The share of a receive buffer the kernel offers as window (`tcp_adv_win_scale` 1 gives
    /// half; Linux 6.x measures the ratio per socket, from the payload of what it received).
    pub rcvbuf_window_share: f64,
    /// A loss-based flow's next limit is its send buffer when the path carried at least this
    /// share of what the namespace's `tcp_wmem` max lets BBR carry at its RTT without a queue:
    /// the buffer, not the path, is then what would hold BBR.
    pub buffer_reached_share: f64,
    /// The fix sizes a buffer maximum for this many times the rate the path has shown (or the
    /// buffer allowed, when the flow reached it): the path's ceiling above that is unknown,
    /// and autotuning grows a socket's buffer only as far as its window needs, so a higher
    /// maximum costs memory only for the flows that use it.
    pub buffer_headroom: f64,
    /// The largest maximum the fix sets (256 MiB): one socket may grow to it, so it is kept
    /// under a quarter of the host's TCP memory pressure level as well.
    pub buffer_cap_bytes: u64,
    /// Loss episodes (see [`crate::analysis::flow_table::LossEpisode`]) are judged over this many
    /// seconds: at 0.05 % loss on 80 ms a CUBIC flow loses about once every 3 s, so a five-second
    /// horizon would see 0-2; thirty see about ten, enough for the share of clean episodes to mean
    /// something.
    pub loss_horizon_secs: f64,
    /// Episodes (after slow start) needed before the loss pattern is judged at all. Two: at
    /// 0.05 % on 80 ms a third comes only ~10 s after slow start, too late to flag within 15 s;
    /// both must then be without a queue (`clean_episode_share`), so one noisy RTT delays the
    /// flag rather than raising it.
    pub min_loss_episodes: usize,
    /// A loss episode "had a queue" when srtt at the loss exceeded min_rtt by more than
    /// `min_rtt * queue_ratio + queue_slack_us`. A drop-tail bottleneck drops when its queue is
    /// full, so a flow overflowing it sees at least queue/rate there: a quarter BDP is
    /// `0.25 * min_rtt`, well above `0.1 * min_rtt + 2 ms` for any path over 13 ms. A random
    /// loss on an uncongested path shows 0-2 ms (ACK clocking, emulator or NIC scheduling);
    /// the 2 ms slack absorbs that on short paths, the relative part on long ones (measured:
    /// 0.3-1.5 ms typical, single outliers to 6 ms on a busy 2-core host). Buffers shallower than
    /// `0.1 BDP + 2 ms` cannot be told from noise this way; the delivery rate then still shows
    /// the path's ceiling. The flow table uses the same rule for "delivery without queueing".
    pub queue_ratio: f64,
    pub queue_slack_us: f64,
    /// Share of judged episodes without a queue that makes the losses non-congestive (a clear
    /// majority: one noisy RTT sample must not flip the verdict).
    pub clean_episode_share: f64,
    /// Share of judged episodes with a queue that makes a loss-based flow path-limited.
    pub queued_episode_share: f64,
    /// For rate-based senders (BBR), which keep losing at a full bottleneck as they probe,
    /// only part of their losses come at a full queue: this share of episodes with a queue
    /// (and at least two) means they fill the path.
    pub rate_based_queued_share: f64,
    /// A rate-based sender delivering at least this share of the best rate seen without
    /// queueing is at the path's ceiling: its delivery rate stays flat whatever its window.
    /// (Not used for loss-based senders: their best clean rate may date from a slow start cut
    /// short by random loss.)
    pub ceiling_share: f64,
    /// Mean srtt above `min_rtt * (1 + standing_queue_ratio) + standing_queue_slack_us` over
    /// the window is a standing queue: the flow fills the bottleneck's buffer (CUBIC on a deep
    /// buffer may not lose for a long time). Above the 1-3 ms jitter of clean paths and the
    /// ~3 ms of small-window flows on long paths, below the half-full quarter-BDP buffer.
    pub standing_queue_ratio: f64,
    pub standing_queue_slack_us: f64,
    /// Retransmitted share of bytes, over the episodes' span, below which loss is not judged
    /// (0.02 %: below it a flow on a 30 ms path could reach ~33 Mbit/s per the Mathis bound and
    /// loses less than once per 5000 segments, too rarely for a verdict within a horizon).
    pub min_loss_ratio: f64,
    /// The flow's goodput must be at most this times its CC's response function at the measured
    /// loss-event rate and RTT: then its loss response explains its rate.
    pub response_slack: f64,
    /// "At least N available" is said only when the best delivery rate seen without queueing
    /// (in three samples) is at least this times the current goodput.
    pub available_ratio: f64,
    /// The reordering note (`reordering`): at least this many segments retransmitted over the
    /// flow's life, and at least this share of them reported spurious by DSACK. See
    /// docs/flagging.md for the measurements behind both.
    pub reordering_min_retrans: u32,
    pub reordering_spurious_share: f64,
    /// Evaluations a new verdict must persist before it replaces the old one.
    pub confirm: u32,
    /// Evaluations the flag condition must fail before the flag is cleared.
    pub release: u32,
    /// Policers (see `policer`). Episodes after slow start without a queue needed to read a
    /// policer at all: three, so one coincidence of two rates is not a plateau.
    pub policer_min_episodes: usize,
    /// A loss cycle (from one loss to the next) counts towards a plateau when at least this
    /// many min_rtts long: BBRv1's long-term samples span at least 4 round trips, and a second
    /// loss within one cut's aftermath (measured 0.03-0.09 s after the first on a 30 ms path)
    /// is part of it.
    pub policer_min_cycle_rtts: f64,
    /// Two delivery rates "agree" within this share (plus 4 kbit/s): BBRv1's long-term
    /// sampling uses 1/8. Measured behind a 20 Mbit/s policer, 1.5 s bucket: every loss cycle
    /// delivered 19.0-19.5 Mbit/s (the policed 20 less headers); at 0.1 % random loss cycles
    /// scatter over 4-17 Mbit/s, at 1 % over 2-9.
    pub policer_rate_tolerance: f64,
    /// Share of the loss cycles whose rates must agree with their median to make a plateau.
    pub policer_consistent_share: f64,
    /// Median segments lost per loss that make the losses bursts (a policer drops all a flow
    /// sends above its rate until the cut: measured 4-35, median 11, behind the deep bucket,
    /// against 1 at 0.1 % and 1 % random loss and ~2.5 in the bursty-loss model).
    pub policer_burst_segments: f64,
    /// A slow start cut by a loss of at least this share of its flight (BBR's long-term
    /// sampling calls an interval lossy at 20 %; measured 27 of 38 segments behind a 10 ms
    /// bucket, 1 of 173 at 1 % random loss), from a flight of at least this many segments
    /// (a random burst of 2-4 losses in a 10-segment initial window is a large share too).
    pub policer_start_loss_share: f64,
    pub policer_min_start_flight: f64,
    /// ...and the flow never delivered more than this times the median rate at its later
    /// losses (CUBIC's sawtooth under a ceiling loses anywhere from 0.5 to 1 of it: measured
    /// 1.5-2.1 behind the 10 ms bucket, while random loss lets slow start run 4-18 times past
    /// the rate it settles at, and a deep bucket's drain 7 times).
    pub policer_start_overshoot: f64,
    /// ...and its loss cycles since deliver at least this share of that rate. Behind the 10 ms
    /// bucket CUBIC's cycles delivered 6.3 Mbit/s of the 17.9 its start showed (0.35); at
    /// 0.05 % random loss on an 80 ms path, with a start whose queue the smoothed RTT missed,
    /// 8.5-14 of 127 (under 0.12), while its delivery rates before the losses, read from
    /// bunched ACKs, met the overshoot bound above.
    pub policer_start_settled_share: f64,
    /// A policed loss-based flow is flagged only when its goodput is below this share of the
    /// policed rate as its losses show it: a quarter or more of what the policer passes is
    /// left unused. Measured behind 20 Mbit/s policers on a 30 ms path: CUBIC through a 10 ms
    /// bucket gets 0.4-0.8 of the ~18 Mbit/s its losses show (BBR 19 Mbit/s), through a
    /// 1.5 s bucket 0.82-0.91 of the ~22 Mbit/s they show (BBR the same): switching helps the
    /// first and gains nothing on the second.
    pub policer_flag_below: f64,
}

impl Default for DiagnosisConfig {
    fn default() -> Self {
        Self {
            window: 5,
            min_observed_secs: 3.0,
            heavy_min_bytes: 500_000,
            heavy_min_bps: 1_000_000.0,
            min_busy_share: 0.7,
            stall_share: 0.3,
            cwnd_full_share: 0.5,
            wants_more_cwnd_full_share: 0.9,
            no_backlog_share: 0.6,
            app_limited_share: 0.4,
            sndbuf_low_share: 0.5,
            sndbuf_bound_share: 0.3,
            writer_waiting_share: 0.5,
            sndbuf_carried_share: 0.6,
            sndbuf_binds_share: 0.5,
            rcvbuf_window_share: 0.5,
            buffer_reached_share: 0.8,
            buffer_headroom: 4.0,
            buffer_cap_bytes: 256 << 20,
            loss_horizon_secs: 30.0,
            min_loss_episodes: 2,
            queue_ratio: DEFAULT_QUEUE_RATIO,
            queue_slack_us: DEFAULT_QUEUE_SLACK_US,
            clean_episode_share: 0.75,
            queued_episode_share: 0.5,
            rate_based_queued_share: 0.2,
            ceiling_share: 0.8,
            standing_queue_ratio: 0.15,
            standing_queue_slack_us: 3_000.0,
            min_loss_ratio: 0.0002,
            response_slack: 2.0,
            available_ratio: 1.5,
            reordering_min_retrans: 4,
            reordering_spurious_share: 0.5,
            confirm: 2,
            release: 5,
            policer_min_episodes: 3,
            policer_min_cycle_rtts: 4.0,
            policer_rate_tolerance: 0.125,
            policer_consistent_share: 0.75,
            policer_burst_segments: 4.0,
            policer_start_loss_share: 0.2,
            policer_min_start_flight: 20.0,
            policer_start_overshoot: 3.0,
            policer_start_settled_share: 0.2,
            policer_flag_below: 0.75,
        }
    }
}
