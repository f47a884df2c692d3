//! Reading the samples: the ring buffer the programs write into, drained in batches on a
//! wake-up or a short timer and decoded, beside the start-up listing's samples and the owner
//! scans for flows the kernel side could not name.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use super::counters::CounterMap;
use super::owners;
use super::probe_window::ProbeWindow;
use crate::analysis::event::{decode, DecodeContext, Sample};

/// Decoding the ring's records: what failed, and how many samples the last read held (the next
/// batch is allocated at that size once, rather than grown by doubling: growing 4,096 samples a
/// few at a time was a tenth of cctrace's time under churn).
#[derive(Debug)]
pub(super) struct Decoding {
    ctx: DecodeContext,
    pub(super) errors: u64,
    /// First decode error, kept for the summary.
    pub(super) first_error: Option<String>,
    last_batch: usize,
}

impl Decoding {
    pub(super) fn new(ctx: DecodeContext) -> Self {
        Self { ctx, errors: 0, first_error: None, last_batch: 0 }
    }
}

/// What reading samples needs, borrowed apart from the rest of the source, so that the UDP and
/// deep-mode readers can wait beside it.
pub(super) struct SampleReader<'a> {
    pub(super) ring: &'a mut AsyncFd<RingBuf<MapData>>,
    pub(super) ring_poll: &'a mut tokio::time::Interval,
    pub(super) listing: &'a mut Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>,
    pub(super) listed: &'a mut u64,
    pub(super) decoding: &'a mut Decoding,
    pub(super) owners: &'a mut Option<owners::OwnerLookup>,
    pub(super) probe_window: &'a mut ProbeWindow,
    pub(super) ebpf: &'a mut aya::Ebpf,
    pub(super) counters: &'a CounterMap,
}

/// The next samples (at least one): from the ring first (it is what overflows when not read),
/// then the start-up listing's. The programs wake the reader only when the ring is half full
/// (a wake-up per sample was most of a hook's cost), so the ring is also read on a short timer.
/// With unnamed flows waiting for an owner scan, the reader wakes for it even if no sample
/// comes. Every read, and every tick without samples, steps `tcp_probe`'s window (see
/// `probe_window`). Cancel-safe: records are taken only in the turn that returns them.
pub(super) async fn read_samples(r: SampleReader<'_>) -> Result<Vec<Sample>> {
    let SampleReader { ring, ring_poll, listing, listed, decoding, owners, probe_window, ebpf, counters } = r;
    loop {
        let scan_at = owners.as_ref().and_then(owners::OwnerLookup::due_at);
        let scan_due = async {
            match scan_at {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        let window_at = probe_window.next_step_ns();
        let window_due = async {
            match window_at {
                Some(at) => {
                    let wait = Duration::from_nanos(at.saturating_sub(crate::clock::monotonic_now_ns()));
                    tokio::time::sleep(wait).await;
                }
                None => std::future::pending().await,
            }
        };
        let mut batch = tokio::select! {
            biased;
            guard = ring.readable_mut() => {
                drain_ring(guard.context("waiting on the ring buffer")?, decoding)
            }
            _ = ring_poll.tick() => drain_unwoken(ring.get_mut(), ring_poll, decoding),
            from_listing = next_listed(listing), if listing.is_some() => match from_listing {
                Some(batch) => {
                    *listed += batch.len() as u64;
                    batch
                }
                None => {
                    *listing = None;
                    continue;
                }
            },
            () = scan_due => {
                if let Some(owners) = owners.as_mut() {
                    owners.scan_if_due();
                }
                continue;
            }
            // The window's own time: what the ring holds is read first, so that a window
            // closes on the samples its first segments produced.
            () = window_due => drain_unwoken(ring.get_mut(), ring_poll, decoding),
        };
        let probe_runs = || counters.get(tracer_common::counter::PROBE_RUNS);
        probe_window.step(ebpf, crate::clock::monotonic_now_ns(), &batch, probe_runs);
        if !batch.is_empty() {
            if let Some(owners) = owners.as_mut() {
                owners.fill(&mut batch);
            }
            return Ok(batch);
        }
    }
}

/// Up to one batch of what the ring buffer holds; readiness is cleared once it is dry.
fn drain_ring(
    mut guard: tokio::io::unix::AsyncFdReadyMutGuard<'_, RingBuf<MapData>>,
    decoding: &mut Decoding,
) -> Vec<Sample> {
    let batch = drain(guard.get_inner_mut(), decoding);
    if batch.len() < MAX_BATCH {
        // Drained: wait for the next wake-up. A full batch leaves readiness set.
        guard.clear_ready();
    }
    batch
}

/// Up to one batch of what the ring buffer holds, read on a timer rather than a wake-up; when a
/// full batch leaves more waiting, the poll timer fires again at once.
fn drain_unwoken(
    ring: &mut RingBuf<MapData>,
    ring_poll: &mut tokio::time::Interval,
    decoding: &mut Decoding,
) -> Vec<Sample> {
    let batch = drain(ring, decoding);
    if batch.len() == MAX_BATCH {
        ring_poll.reset_immediately();
    }
    batch
}

/// Samples read from the ring buffer per batch at most.
const MAX_BATCH: usize = 4096;

/// How often the ring buffer is read without a wake-up: the programs wake the reader only when
/// it is half full. At the default 8 MiB (32,768 samples) that is 1.6 million samples a second
/// before a wake-up is needed.
pub(super) const RING_POLL: Duration = Duration::from_millis(20);

/// Up to [`MAX_BATCH`] samples from `ring`, decoded; what does not decode is counted.
fn drain(ring: &mut RingBuf<MapData>, decoding: &mut Decoding) -> Vec<Sample> {
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH {
        let Some(item) = ring.next() else { break };
        if batch.capacity() == 0 {
            // Sized once, at about what the last read held (nothing is allocated while idle).
            batch.reserve_exact(decoding.last_batch.clamp(16, MAX_BATCH));
        }
        match decode(&item, &decoding.ctx) {
            Ok(s) => batch.push(s),
            Err(e) => {
                decoding.errors += 1;
                if decoding.first_error.is_none() {
                    decoding.first_error = Some(e.to_string());
                }
            }
        }
    }
    if !batch.is_empty() {
        decoding.last_batch = batch.len();
    }
    batch
}

/// The next batch of the start-up listing; `None` once it is read to the end.
async fn next_listed(listing: &mut Option<tokio::sync::mpsc::Receiver<Vec<Sample>>>) -> Option<Vec<Sample>> {
    match listing {
        Some(rx) => rx.recv().await,
        None => None,
    }
}
