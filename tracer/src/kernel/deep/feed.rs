//! Deep mode's part of the live source: the twins' decisions ring buffer read beside the
//! samples, the session's flows moved onto the twins as new ones show up, and the session ended
//! (flows back, twins unregistered) when the source stops.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use super::session::DeepSession;
use crate::analysis::deep_decisions::{Decision, TwinAlgo};
use crate::analysis::sample::Sample;

/// Deep mode's part of the live source: the twins' session and their decisions ring buffer.
pub(in crate::kernel) struct DeepFeed {
    ring: AsyncFd<RingBuf<MapData>>,
    // After the ring: dropping the session moves flows back and unregisters the twins.
    session: DeepSession,
    next_rescan: tokio::time::Instant,
    last_rescan: tokio::time::Instant,
    received: u64,
    decode_errors: u64,
    /// The twins' own counts (written, lost), read before they were unregistered.
    final_kernel_counts: Option<(u64, u64)>,
}

impl DeepFeed {
    /// A flow of a deep namespace still on an original algorithm (new since the last scan):
    /// move it soon rather than at the next periodic scan, so little of its start is missed.
    pub(in crate::kernel) fn rescan_soon_for(&mut self, batch: &[Sample]) {
        let namespaces = self.session.namespaces();
        let waiting = batch.iter().any(|s| {
            TwinAlgo::ALL.iter().any(|a| a.original() == s.cc) && namespaces.iter().any(|n| n.netns == s.netns)
        });
        if waiting {
            let soon = self.last_rescan + DEEP_RESCAN_SOON;
            self.next_rescan = self.next_rescan.min(soon.max(tokio::time::Instant::now()));
        }
    }
}

impl DeepFeed {
    /// Read the decisions of `session`'s twins; the session is ended by [`DeepFeed::finish`],
    /// or by its Drop.
    pub(in crate::kernel) fn open(session: DeepSession) -> Result<Self> {
        let twins = session.twins().context("the deep-mode twins are not registered")?;
        let fd = twins.decisions_fd().context("the twins' decisions ring buffer")?;
        let map = aya::maps::Map::from_map_data(MapData::from_fd(fd).context("opening the decisions ring buffer")?)
            .context("the decisions map")?;
        let ring = RingBuf::try_from(map).context("the decisions map is not a ring buffer")?;
        // SAFETY: the RingBuf owns its map fd and keeps it open until the AsyncFd (which owns the
        // RingBuf) is dropped; the fd is never replaced or closed behind tokio's back.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .context("registering the decisions ring buffer with tokio")?;
        Ok(Self {
            ring,
            session,
            next_rescan: tokio::time::Instant::now() + DEEP_RESCAN,
            last_rescan: tokio::time::Instant::now(),
            received: 0,
            decode_errors: 0,
            final_kernel_counts: None,
        })
    }

    /// Decisions written and lost by the twins, and received and undecodable here.
    pub(in crate::kernel) fn counters(&self) -> DeepCounters {
        let (written, lost) =
            self.session.twins().map(super::Twins::counters).or(self.final_kernel_counts).unwrap_or_default();
        DeepCounters { written, lost, received: self.received, decode_errors: self.decode_errors }
    }

    /// Deep mode ends with the run: flows back to their algorithm, then the twins go (their
    /// counts are read first, for the summary).
    pub(in crate::kernel) fn finish(&mut self) -> Result<()> {
        if let Some(twins) = self.session.twins() {
            self.final_kernel_counts = Some(twins.counters());
        }
        let moved = self.session.finish().context("putting flows back from the deep-mode twins")?;
        log::info!("deep: moved {} flows back from the twins", moved.switched);
        Ok(())
    }
}

/// Deep mode's decision counts: written and lost by the twins, received and undecodable here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeepCounters {
    pub written: u64,
    pub lost: u64,
    pub received: u64,
    pub decode_errors: u64,
}

/// How often deep mode looks for new flows to move onto the twins...
const DEEP_RESCAN: Duration = Duration::from_secs(1);
/// ...and how soon after a sample shows one (a new connection), at most this often.
const DEEP_RESCAN_SOON: Duration = Duration::from_millis(100);

/// The next decisions from the twins; between reads, new flows are moved onto them.
pub(in crate::kernel) async fn read_decisions(deep: &mut DeepFeed) -> Result<Vec<Decision>> {
    use crate::source::MAX_BATCH;
    loop {
        let mut guard = tokio::select! {
            guard = deep.ring.readable_mut() => guard.context("waiting on the decisions ring buffer")?,
            () = tokio::time::sleep_until(deep.next_rescan) => {
                deep.last_rescan = tokio::time::Instant::now();
                deep.next_rescan = deep.last_rescan + DEEP_RESCAN;
                match deep.session.rescan() {
                    Ok(moved) if moved.switched > 0 => log::info!("deep: moved {} new flows onto the twins", moved.switched),
                    Ok(_) => {}
                    Err(e) => log::warn!("deep: {e:#}"),
                }
                continue;
            }
        };
        let ring = guard.get_inner_mut();
        let mut batch = Vec::new();
        while batch.len() < MAX_BATCH {
            let Some(item) = ring.next() else { break };
            match crate::analysis::deep_decisions::decode(&item) {
                Ok(d) => batch.push(d),
                Err(e) => {
                    deep.decode_errors += 1;
                    log::warn!("deep: {e}");
                }
            }
        }
        if batch.len() < MAX_BATCH {
            guard.clear_ready();
        }
        if !batch.is_empty() {
            deep.received += batch.len() as u64;
            return Ok(batch);
        }
    }
}
