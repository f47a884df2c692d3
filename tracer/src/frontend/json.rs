//! `--json`: JSON Lines, one [`Record`] per line. Flows that changed are printed once per
//! interval, every kernel sample as it arrives with `--events`, and the summary last.

use std::collections::{HashMap, HashSet};

use anyhow::Result;

use crate::analysis::deep_decisions::Decision;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{
    ActionRecord, DecisionRecord, FlowRecord, Record, SampleRecord, SummaryRecord, UdpRecord,
};
use crate::analysis::time::WallClock;
use crate::analysis::Analysis;
use crate::frontend::line_writer::{LineWriter, WriteOutcome};
use crate::pipeline::{Control, FrontEnd, Status};

/// Formatted lines are handed to the writer in pieces of about this size, not a tick's worth at
/// once: under churn a tick is ten thousand flow lines, and buffers of megabytes each tick,
/// queued for a slow reader, left the heap fragmented (a third of cctrace's memory).
const CHUNK_BYTES: usize = 64 * 1024;

/// The JSON Lines front end of the pipeline.
pub struct JsonOutput {
    out: LineWriter,
    clock: WallClock,
    /// Print every sample as it arrives (`"type":"sample"`), for debugging and tests.
    events: bool,
    /// Flows with samples since they were last printed.
    dirty: HashSet<u64>,
    /// UDP flows by cookie: the reading last printed.
    udp_printed: HashMap<u64, u64>,
    buf: Vec<u8>,
    /// Lost samples already reported on stderr.
    lost_said: u64,
}

/// One line (without the `cctrace: ` prefix) when more samples were lost than the `said`
/// already reported: a loss is reported when it happens, not only in the final summary.
pub fn lost_line(said: u64, lost: u64) -> Option<String> {
    (lost > said).then(|| {
        format!(
            "{} samples lost so far ({} since the last report): the kernel's ring buffer was full \
             (a larger --ring-kib or --sample-ms keeps up)",
            lost,
            lost - said
        )
    })
}

impl JsonOutput {
    pub fn new(out: LineWriter, clock: WallClock, events: bool) -> Self {
        Self { out, clock, events, dirty: HashSet::new(), udp_printed: HashMap::new(), buf: Vec::new(), lost_said: 0 }
    }

    fn push(&mut self, record: &Record) -> Result<()> {
        serde_json::to_writer(&mut self.buf, record)?;
        self.buf.push(b'\n');
        Ok(())
    }

    /// Every flow with new samples, in cookie order, handed to the writer in pieces of about
    /// [`CHUNK_BYTES`].
    async fn push_dirty_flows(&mut self, analysis: &Analysis) -> Result<Control> {
        let mut cookies: Vec<u64> = self.dirty.drain().collect();
        cookies.sort_unstable();
        for cookie in cookies {
            if let Some(flow) = analysis.table.get(cookie) {
                let record = Record::Flow(FlowRecord::of(flow, analysis.verdict(flow), &self.clock, &analysis.env));
                self.push(&record)?;
            }
            if self.buf.len() >= CHUNK_BYTES && self.send().await? == Control::Stop {
                return Ok(Control::Stop);
            }
        }
        Ok(Control::Continue)
    }

    /// Every heavy UDP flow with a reading since it was last printed, in cookie order.
    fn push_udp_flows(&mut self, analysis: &Analysis) -> Result<()> {
        for flow in analysis.udp.flows() {
            let ts = flow.latest.ts_ns;
            if self.udp_printed.get(&flow.cookie()) == Some(&ts) {
                continue;
            }
            self.udp_printed.insert(flow.cookie(), ts);
            let record = Record::UdpFlow(UdpRecord::of(flow, analysis.udp_verdict(flow), &self.clock, &analysis.env));
            self.push(&record)?;
        }
        self.udp_printed.retain(|cookie, _| analysis.udp.get(*cookie).is_some());
        Ok(())
    }

    /// Hand what was formatted to the writer. A closed output stops the run quietly.
    async fn send(&mut self) -> Result<Control> {
        if self.buf.is_empty() {
            return Ok(Control::Continue);
        }
        // Sized once for the next piece rather than grown by doubling.
        let next = Vec::with_capacity(self.buf.len().min(2 * CHUNK_BYTES));
        let chunk = std::mem::replace(&mut self.buf, next);
        match self.out.send(chunk).await? {
            WriteOutcome::Written => Ok(Control::Continue),
            WriteOutcome::Closed => Ok(Control::Stop),
        }
    }
}

impl FrontEnd for JsonOutput {
    async fn on_batch(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<Control> {
        for s in batch {
            self.dirty.insert(s.cookie);
            if self.events {
                let record = Record::Sample(SampleRecord::of(s, &self.clock, &analysis.env));
                self.push(&record)?;
            }
        }
        self.send().await
    }

    async fn on_decisions(&mut self, _analysis: &Analysis, batch: &[Decision]) -> Result<Control> {
        for d in batch {
            self.push(&Record::Decision(DecisionRecord::of(d, &self.clock)))?;
        }
        self.send().await
    }

    async fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<Control> {
        if let Some(line) = lost_line(self.lost_said, status.counters.lost) {
            eprintln!("cctrace: {line}");
            self.lost_said = status.counters.lost;
        }
        if self.push_dirty_flows(analysis).await? == Control::Stop {
            return Ok(Control::Stop);
        }
        self.push_udp_flows(analysis)?;
        self.send().await
    }

    /// A replayed recording's action, in its place among the flows (`replay --json`).
    async fn on_action(&mut self, analysis: &Analysis, action: &ActionRecord) -> Result<Control> {
        // The flows as they were just before it, then the action.
        if self.push_dirty_flows(analysis).await? == Control::Stop {
            return Ok(Control::Stop);
        }
        self.push(&Record::Action(action.clone()))?;
        self.send().await
    }

    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()> {
        if self.push_dirty_flows(analysis).await? == Control::Stop {
            return Ok(());
        }
        self.push_udp_flows(analysis)?;
        self.push(&Record::Summary(summary.clone()))?;
        if self.send().await? == Control::Continue {
            self.out.close().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn losses_are_reported_once_each_as_they_grow() {
        assert_eq!(super::lost_line(0, 0), None);
        assert_eq!(
            super::lost_line(0, 12).as_deref(),
            Some(
                "12 samples lost so far (12 since the last report): the kernel's ring buffer was full (a larger \
                 --ring-kib or --sample-ms keeps up)"
            )
        );
        assert!(super::lost_line(12, 30).is_some_and(|l| l.starts_with("30 samples lost so far (18 since")));
        assert_eq!(super::lost_line(30, 30), None);
    }

    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::analysis::diagnosis::DiagnosisConfig;
    use crate::analysis::environment::Environment;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::TableConfig;
    use crate::analysis::sample::SampleReason;
    use crate::pipeline::{self, NoStop, PipelineOptions};
    use crate::source::FeedSource;
    use crate::test_support::SharedBuf;

    async fn run_feed(src: &mut FeedSource, events: bool) -> Vec<Value> {
        let buf = SharedBuf::default();
        let mut front = JsonOutput::new(LineWriter::spawn(Box::new(buf.clone())), WallClock::fixed(0), events);
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
        let opts = PipelineOptions { tick: Duration::from_millis(100), ..PipelineOptions::default() };
        pipeline::run(src, &mut analysis, &mut front, &opts, || 0, &mut NoStop).await.expect("runs");
        buf.text().lines().map(|l| serde_json::from_str(l).expect("json")).collect()
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn prints_flows_and_a_summary_with_lost_events() {
        let mut a = sample(7, 0);
        a.snd_ssthresh = 42;
        let mut b = sample(7, 500);
        b.bytes_acked = 625_000;
        b.reason = SampleReason::Destroy;
        b.snd_ssthresh = 42;
        let mut src = FeedSource::new(vec![vec![a], vec![b]]).with_lost(3);
        let lines = run_feed(&mut src, false).await;
        let last = lines.last().expect("summary");
        assert_eq!(last["type"], "summary");
        assert_eq!(last["events_received"], 2);
        assert_eq!(last["events_lost"], 3);
        assert_eq!(last["kernel_read_errors"], 0);
        assert_eq!(last["flow_map_full"], 0);
        assert_eq!(last["flows_seen"], 1);
        let flow = &lines[lines.len() - 2];
        assert_eq!(flow["type"], "flow");
        assert_eq!(flow["cookie"], 7);
        assert_eq!(flow["closed"], true);
        assert_eq!(flow["ssthresh"], 42);
        assert_eq!(flow["rtt"], 30.0);
        assert_eq!(flow["throughput_bps"], 10_000_000);
        assert_eq!(flow["src"], "198.18.0.1");
        assert_eq!(flow["dport"], 5201);
        assert_eq!(flow["limited_by"], "unknown");
        assert!(flow["verdict"].as_str().is_some_and(|v| v.starts_with("not enough data yet")), "{flow}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn samples_use_the_flow_objects_names() {
        let mut src = FeedSource::new(vec![vec![sample(9, 0)]]);
        let lines = run_feed(&mut src, true).await;
        let s = lines.iter().find(|l| l["type"] == "sample").expect("a sample line");
        let f = lines.iter().find(|l| l["type"] == "flow").expect("a flow line");
        for key in ["cwnd", "ssthresh", "rtt", "minrtt", "retrans", "sport", "state", "ca_state", "bytes_acked"] {
            assert!(s.get(key).is_some(), "sample lacks {key}: {s}");
            assert_eq!(s[key], f[key], "{key} differs between sample and flow");
        }
        assert_eq!(s["state"], "ESTAB");
        assert_eq!(s["reason"], "periodic");
        assert!(s.get("snd_cwnd").is_none() && s.get("srtt_us").is_none(), "no raw names: {s}");
    }

    /// Items as given, then the end: decisions next to samples, as a deep-mode source yields them.
    struct Items(std::collections::VecDeque<crate::source::SourceItem>);

    impl crate::source::EventSource for Items {
        fn next_batch(
            &mut self,
        ) -> crate::source::BoxFuture<'_, anyhow::Result<Option<Vec<crate::analysis::sample::Sample>>>> {
            Box::pin(async { Ok(None) })
        }
        fn next_item(&mut self) -> crate::source::BoxFuture<'_, anyhow::Result<Option<crate::source::SourceItem>>> {
            Box::pin(async move { Ok(self.0.pop_front()) })
        }
        fn counters(&self) -> crate::source::SourceCounters {
            crate::source::SourceCounters::default()
        }
        fn describe(&self) -> String {
            "items".into()
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn decisions_are_printed_as_they_arrive_and_kept_with_their_flow() {
        use crate::source::SourceItem;
        let cut = crate::recording::tests::cut(7, 2_000_000_000);
        let mut src = Items(
            vec![
                SourceItem::Batch(vec![sample(7, 0)]),
                SourceItem::Decisions(vec![cut]),
                SourceItem::Batch(vec![sample(7, 500)]),
            ]
            .into(),
        );
        let buf = SharedBuf::default();
        let mut front = JsonOutput::new(LineWriter::spawn(Box::new(buf.clone())), WallClock::fixed(0), false);
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
        let opts = PipelineOptions { tick: Duration::from_millis(100), ..PipelineOptions::default() };
        pipeline::run(&mut src, &mut analysis, &mut front, &opts, || 0, &mut NoStop).await.expect("runs");
        let lines: Vec<Value> = buf.text().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        let d = lines.iter().find(|l| l["type"] == "decision").expect("a decision line");
        assert_eq!(d["kind"], "ssthresh_cut");
        assert_eq!(d["algo"], "cubic");
        assert_eq!(d["cookie"], 7);
        assert_eq!((d["cwnd_before"].as_u64(), d["ssthresh_after"].as_u64()), (Some(68), Some(47)));
        assert_eq!(d["text"], "loss: ssthresh 47, cwnd 68 → 47");
        assert_eq!(analysis.decisions.loss_responses(7), 1);
    }

    /// Says stop at an instant of the test's clock.
    struct StopAt(tokio::time::Instant);

    impl crate::pipeline::StopSignal for StopAt {
        async fn wait(&mut self) {
            tokio::time::sleep_until(self.0).await;
        }
    }

    /// A reader that stopped reading: every write blocks for good.
    struct Stalled;

    impl std::io::Write for Stalled {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            loop {
                std::thread::park();
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_reader_cannot_keep_a_stop_from_ending_the_run() {
        // Enough samples to fill the writer's queue many times over, printed as events.
        let batches: Vec<Vec<_>> = (0..2_000).map(|i| vec![sample(i % 50, i)]).collect();
        let mut src = FeedSource::new(batches);
        let mut front = JsonOutput::new(LineWriter::spawn(Box::new(Stalled)), WallClock::fixed(0), true);
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
        let opts = PipelineOptions { tick: Duration::from_millis(50), ..PipelineOptions::default() };
        let mut stop = StopAt(tokio::time::Instant::now() + Duration::from_millis(300));
        let run = pipeline::run(&mut src, &mut analysis, &mut front, &opts, || 0, &mut stop);
        let summary = tokio::time::timeout(Duration::from_secs(10), run).await.expect("stopped").expect("no error");
        assert!(summary.events_received < 2_000, "the output stalled the intake: {summary:?}");
    }

    /// A live-like source: its batches, then nothing ever again (it never ends); once told to
    /// stop producing, it knows it has delivered everything.
    struct OpenSource {
        batches: std::collections::VecDeque<Vec<Sample>>,
        received: u64,
        stopped: bool,
    }

    impl crate::source::EventSource for OpenSource {
        fn next_batch(&mut self) -> crate::source::BoxFuture<'_, anyhow::Result<Option<Vec<Sample>>>> {
            Box::pin(async move {
                match self.batches.pop_front() {
                    Some(b) => {
                        self.received += b.len() as u64;
                        Ok(Some(b))
                    }
                    None => std::future::pending().await,
                }
            })
        }
        fn counters(&self) -> crate::source::SourceCounters {
            crate::source::SourceCounters {
                received: self.received,
                kernel_emitted: Some(self.received),
                ..crate::source::SourceCounters::default()
            }
        }
        fn describe(&self) -> String {
            "open test source".into()
        }
        fn stop_producing(&mut self) -> anyhow::Result<()> {
            self.stopped = true;
            Ok(())
        }
        fn drained(&self) -> bool {
            self.stopped && self.batches.is_empty()
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_final_drain_ends_once_the_source_has_delivered_everything() {
        let batches = (0..20).map(|i| vec![sample(1, i)]).collect();
        let mut src = OpenSource { batches, received: 0, stopped: false };
        let mut front = JsonOutput::new(LineWriter::spawn(Box::new(std::io::sink())), WallClock::fixed(0), false);
        let mut analysis = Analysis::new(TableConfig::default(), DiagnosisConfig::default(), Environment::default());
        let opts = PipelineOptions { final_drain: Duration::from_secs(60), ..PipelineOptions::default() };
        let mut stop = StopAt(tokio::time::Instant::now() + Duration::from_millis(200));
        let run = pipeline::run(&mut src, &mut analysis, &mut front, &opts, || 0, &mut stop);
        let summary = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the drain waited out its deadline though everything was delivered")
            .expect("no error");
        assert_eq!(summary.events_received, 20);
    }

    #[test]
    fn infinite_ssthresh_is_null() {
        let mut t = crate::analysis::flow_table::FlowTable::new(TableConfig::default());
        t.ingest(&sample(1, 0));
        let v = serde_json::to_value(Record::Flow(FlowRecord::of(
            t.get(1).expect("flow"),
            None,
            &WallClock::fixed(0),
            &Environment::default(),
        )))
        .expect("json");
        assert!(v["ssthresh"].is_null());
        assert_eq!(v["limited_by"], "unknown");
        assert_eq!(v["flagged"], false);
        assert_eq!(v["ca_state"], "Open");
        assert!(v["fix"].is_null());
    }
}
