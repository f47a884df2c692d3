//! Recordings: a session's samples, ticks and host facts in one self-describing, compressed,
//! crash-tolerant file, replayed through the same pipeline and analysis as a live run.
//!
//! The file starts with a zstd skippable frame holding `CCTRACE-REC` and the format version,
//! followed by zstd frames (so `zstdcat FILE` shows it), each holding whole JSON Lines of
//! [`Entry`]; the first line is the [`Header`]. The writer closes a frame at least once a
//! second, so a file cut anywhere still replays every complete entry.
//!
//! [`Recording`] records what a pipeline front end sees; [`RecordingSource`] plays it back as
//! an [`EventSource`](crate::source::EventSource) in the pipeline's scripted mode, ticking at the recorded instants.

pub mod anonymize;
pub mod entry;
pub mod player;
pub mod reader;
mod source;
pub mod writer;

#[cfg(test)]
pub(crate) mod fixture;

use anyhow::Result;

use crate::analysis::deep_decisions::Decision;
use crate::analysis::sample::Sample;
use crate::analysis::schema::{ActionRecord, SummaryRecord};
use crate::analysis::udp::SocketReadings;
use crate::analysis::Analysis;
use crate::pipeline::Status;
use crate::side_job::{Beside, SideJob};
use crate::source::SourceCounters;

pub use source::{EntriesSource, RecordingSource};

pub use entry::{Entry, Header};
pub use reader::{ReadError, Reader};
pub use writer::{NewFile, RecordWriter, RecordingStatus};

/// Samples per `Samples` entry at most, so no line grows near the reader's bound however large
/// a batch the kernel hands over.
pub const SAMPLES_PER_ENTRY: usize = 1024;

/// Writes a pipeline's samples, ticks, host facts and end into a recording.
pub struct Recorder {
    writer: RecordWriter,
    /// The analysis's host facts last written ([`Analysis::env_generation`]).
    env_written: Option<u64>,
    /// `--anonymize`: every entry passes through it (the header already did).
    anonymizer: Option<crate::recording::anonymize::Anonymizer>,
}

impl Recorder {
    pub fn new(writer: RecordWriter) -> Self {
        Self { writer, env_written: None, anonymizer: None }
    }

    /// Write pseudonyms instead of addresses and names, with the anonymizer that wrote the header.
    pub fn with_anonymizer(mut self, anonymizer: Option<crate::recording::anonymize::Anonymizer>) -> Self {
        self.anonymizer = anonymizer;
        self
    }

    fn write(&mut self, entry: Entry) {
        let entry = match &mut self.anonymizer {
            Some(a) => a.entry(entry),
            None => entry,
        };
        self.writer.write(entry);
    }

    pub fn status(&self) -> RecordingStatus {
        self.writer.status()
    }

    /// Host facts before anything that was judged with them.
    fn host_if_changed(&mut self, analysis: &Analysis) {
        let generation = analysis.env_generation();
        if self.env_written != Some(generation) {
            self.write(Entry::Host { env: analysis.env.clone() });
            self.env_written = Some(generation);
        }
    }

    fn samples(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<()> {
        self.host_if_changed(analysis);
        for chunk in batch.chunks(SAMPLES_PER_ENTRY) {
            self.write(Entry::Samples { samples: chunk.to_vec() });
        }
        self.writer.check()
    }

    fn decisions(&mut self, batch: &[Decision]) -> Result<()> {
        for chunk in batch.chunks(SAMPLES_PER_ENTRY) {
            self.write(Entry::Decisions { decisions: chunk.to_vec() });
        }
        self.writer.check()
    }

    fn sockets(&mut self, analysis: &Analysis, readings: &SocketReadings) -> Result<()> {
        if readings.udp.is_empty() {
            return Ok(());
        }
        self.host_if_changed(analysis);
        self.write(Entry::Sockets { readings: readings.clone() });
        self.writer.check()
    }

    fn tick(&mut self, analysis: &Analysis, now_ns: u64, counters: SourceCounters) -> Result<()> {
        self.host_if_changed(analysis);
        self.write(Entry::Tick { now_ns, counters });
        self.writer.check()
    }

    /// Something cctrace did to the host.
    fn action(&mut self, action: ActionRecord) -> Result<()> {
        self.write(Entry::Action(action));
        self.writer.check()
    }

    /// The final tick (the one the pipeline judged the summary at) and the end.
    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()> {
        self.tick(analysis, analysis.last_tick_ns(), summary.counters())?;
        let (dropped, _) = self.writer.status().dropped();
        self.write(Entry::End { summary: summary.clone(), dropped_entries: dropped });
        self.writer.close().await
    }
}

/// A front end that also records what it is given (when the recorder is set).
pub type Recording<F> = Beside<F, Recorder>;

impl SideJob for Recorder {
    fn on_batch(&mut self, analysis: &Analysis, batch: &[Sample]) -> Result<()> {
        self.samples(analysis, batch)
    }

    fn on_decisions(&mut self, _analysis: &Analysis, batch: &[Decision]) -> Result<()> {
        self.decisions(batch)
    }

    fn on_sockets(&mut self, analysis: &Analysis, readings: &SocketReadings) -> Result<()> {
        self.sockets(analysis, readings)
    }

    fn on_tick(&mut self, analysis: &Analysis, status: &Status) -> Result<()> {
        self.tick(analysis, status.now_ns, status.counters)
    }

    fn on_actions(&mut self, actions: &[ActionRecord]) -> Result<()> {
        for action in actions {
            self.action(action.clone())?;
        }
        Ok(())
    }

    /// The recording finishes before the front end: it is what outlives the run.
    async fn finish(&mut self, analysis: &Analysis, summary: &SummaryRecord) -> Result<()> {
        Recorder::finish(self, analysis, summary).await
    }
}

#[cfg(test)]
pub(crate) mod tests;
