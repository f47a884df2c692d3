//! A recording as a source for the one pipeline: from its file ([`RecordingSource`], for
//! `cctrace replay`) or from entries already read ([`EntriesSource`], for the exports, which may
//! anonymize them first). Both read entries the same way, in [`EntryFeed`]: samples, ticks, host
//! facts, decisions, socket readings and actions in their recorded order, the recorded summary
//! kept aside.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::entry::{Entry, Header};
use super::reader::Reader;
use crate::analysis::sample::Sample;
use crate::analysis::schema::SummaryRecord;
use crate::source::{BoxFuture, EventSource, SourceCounters, SourceItem};

/// What a recording's entries mean to the pipeline, and the totals they carry.
#[derive(Default)]
struct EntryFeed {
    counters: SourceCounters,
    received: u64,
    summary: Option<SummaryRecord>,
}

impl EntryFeed {
    /// The pipeline's item for `entry`; `None` for what only this feed keeps (the header, the
    /// recorded summary).
    fn item(&mut self, entry: Entry) -> Option<SourceItem> {
        Some(match entry {
            Entry::Samples { samples } => {
                self.received += samples.len() as u64;
                SourceItem::Batch(samples)
            }
            Entry::Decisions { decisions } => SourceItem::Decisions(decisions),
            Entry::Tick { now_ns, counters } => {
                self.counters = counters;
                SourceItem::Tick { now_ns, counters }
            }
            Entry::Host { env } => SourceItem::Host(Box::new(env)),
            Entry::Sockets { readings } => SourceItem::Sockets(readings),
            Entry::End { summary, .. } => {
                self.counters = summary.counters();
                self.summary = Some(summary);
                return None;
            }
            Entry::Action(record) => SourceItem::Action(record),
            Entry::Header(_) => return None,
        })
    }

    /// What the recorded source reported at the last tick read (at its end: its totals).
    fn counters(&self) -> SourceCounters {
        SourceCounters { received: self.counters.received.max(self.received), ..self.counters }
    }
}

/// Batches only, from a source of items (ticks and host facts need the pipeline's scripted
/// mode).
async fn next_batch(read: &mut impl FnMut() -> Result<Option<SourceItem>>) -> Result<Option<Vec<Sample>>> {
    loop {
        match read()? {
            None => return Ok(None),
            Some(SourceItem::Batch(b)) => return Ok(Some(b)),
            Some(_) => {}
        }
    }
}

/// A recording played back: its samples, ticks and host facts as [`SourceItem`]s, for the
/// pipeline's scripted mode.
pub struct RecordingSource {
    reader: Reader<std::io::BufReader<std::fs::File>>,
    header: Header,
    path: PathBuf,
    feed: EntryFeed,
}

impl RecordingSource {
    /// Open `path` and read its header.
    pub fn open(path: &Path) -> Result<Self> {
        let mut reader = Reader::open(path).with_context(|| format!("opening recording {}", path.display()))?;
        let first = reader.next_entry().with_context(|| format!("reading recording {}", path.display()))?;
        let Some(Entry::Header(header)) = first else {
            anyhow::bail!(
                "recording {} truncated at byte {} before its header",
                path.display(),
                reader.truncated().unwrap_or(0)
            );
        };
        Ok(Self { reader, header, path: path.to_path_buf(), feed: EntryFeed::default() })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Where the file ended before its end entry, once it was read to its end.
    pub fn truncated(&self) -> Option<u64> {
        self.reader.truncated()
    }

    /// The recorded run's summary, once its end was read.
    pub fn recorded_summary(&self) -> Option<&SummaryRecord> {
        self.feed.summary.as_ref()
    }

    /// The next item of the recording.
    pub(crate) fn read_item(&mut self) -> Result<Option<SourceItem>> {
        loop {
            let entry =
                self.reader.next_entry().with_context(|| format!("reading recording {}", self.path.display()))?;
            let Some(entry) = entry else { return Ok(None) };
            if let Some(item) = self.feed.item(entry) {
                return Ok(Some(item));
            }
        }
    }
}

impl EventSource for RecordingSource {
    /// The samples only (ticks and host facts need the pipeline's scripted mode).
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move { next_batch(&mut || self.read_item()).await })
    }

    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(async move { self.read_item() })
    }

    /// What the recorded source reported at the last tick read (at its end: its totals).
    fn counters(&self) -> SourceCounters {
        self.feed.counters()
    }

    fn describe(&self) -> String {
        format!("recording {}", self.path.display())
    }
}

/// Entries already read (and perhaps anonymized), as a source for the pipeline's scripted mode.
pub struct EntriesSource {
    entries: std::vec::IntoIter<Entry>,
    header: Option<Header>,
    feed: EntryFeed,
}

impl EntriesSource {
    /// `entries` in order; a leading header is kept aside ([`EntriesSource::header`]).
    pub fn new(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut entries: std::vec::IntoIter<Entry> = entries.into_iter().collect::<Vec<_>>().into_iter();
        let header = match entries.as_slice().first() {
            Some(Entry::Header(h)) => {
                let h = h.clone();
                entries.next();
                Some(h)
            }
            _ => None,
        };
        Self { entries, header, feed: EntryFeed::default() }
    }

    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// The recorded run's summary, once its end was read.
    pub fn recorded_summary(&self) -> Option<&SummaryRecord> {
        self.feed.summary.as_ref()
    }

    fn read_item(&mut self) -> Result<Option<SourceItem>> {
        for entry in self.entries.by_ref() {
            if let Some(item) = self.feed.item(entry) {
                return Ok(Some(item));
            }
        }
        Ok(None)
    }
}

impl EventSource for EntriesSource {
    fn next_batch(&mut self) -> BoxFuture<'_, Result<Option<Vec<Sample>>>> {
        Box::pin(async move { next_batch(&mut || self.read_item()).await })
    }

    fn next_item(&mut self) -> BoxFuture<'_, Result<Option<SourceItem>>> {
        Box::pin(async move { self.read_item() })
    }

    fn counters(&self) -> SourceCounters {
        self.feed.counters()
    }

    fn describe(&self) -> String {
        "recorded entries".into()
    }
}
