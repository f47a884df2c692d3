//! Reading the samples: the ring buffer the programs write into, drained in batches and
//! decoded when the programs wake the reader (the ring half full), at the pipeline's ticks
//! ([`take_queued`]) and at the probe window's times, beside the start-up listing's samples
//! and the owner scans for flows the kernel side could not name.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

use super::counters::CounterMap;
use super::probe_window::ProbeWindow;
use crate::analysis::sample::{decode, DecodeContext, Sample};
use crate::host::owners;
use crate::source::MAX_BATCH;

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
    /// The ring holds more than the last read took (a full batch, or the programs were
    /// detached and what they wrote is to be read): the next read takes it without waiting.
    pub(super) more_queued: &'a mut bool,
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
/// (a wake-up per sample was most of a hook's cost), and nothing here wakes on a timer to look
/// for samples: the pipeline takes what the ring holds at each tick ([`take_queued`]). With
/// unnamed flows waiting for an owner scan, the reader wakes for it; while `tcp_probe`'s
/// window is being planned, for the window's times (see `probe_window`). Cancel-safe: records
/// are taken only in the turn that returns them.
pub(super) async fn read_samples(r: SampleReader<'_>) -> Result<Vec<Sample>> {
    let SampleReader { ring, more_queued, listing, listed, decoding, owners, probe_window, ebpf, counters } = r;
    loop {
        let scan_at = owners.as_ref().and_then(owners::OwnerLookup::due_at);
        let scan_due = async {
            match scan_at {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        let window_at = probe_window.next_step_ns();
        // A wake-up for the window is part of what a window costs: this thread's CPU from here
        // to the window's branch is the switch back into it and the runtime's turn.
        let asleep_cpu_ns = window_at.map(|_| crate::clock::thread_cpu_ns());
        let mut woke_for_window = None;
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
            () = std::future::ready(()), if *more_queued => drain_queued(ring.get_mut(), more_queued, decoding),
            guard = ring.readable_mut() => {
                drain_ring(guard.context("waiting on the ring buffer")?, decoding)
            }
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
            () = window_due => {
                woke_for_window = Some(crate::clock::thread_cpu_ns());
                drain_queued(ring.get_mut(), more_queued, decoding)
            }
        };
        if let (Some(asleep), Some(woke)) = (asleep_cpu_ns, woke_for_window) {
            probe_window.charge_wake_up(woke.saturating_sub(asleep));
        }
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

/// What the ring holds now, without waiting (up to a batch; more is read at once by the next
/// [`read_samples`]), with the probe window stepped on it: the pipeline's tick takes it.
pub(super) fn take_queued(r: SampleReader<'_>) -> Vec<Sample> {
    let SampleReader { ring, more_queued, decoding, owners, probe_window, ebpf, counters, .. } = r;
    let mut batch = drain_queued(ring.get_mut(), more_queued, decoding);
    let probe_runs = || counters.get(tracer_common::counter::PROBE_RUNS);
    probe_window.step(ebpf, crate::clock::monotonic_now_ns(), &batch, probe_runs);
    if let Some(owners) = owners.as_mut() {
        owners.fill(&mut batch);
    }
    batch
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

/// Up to one batch of what the ring buffer holds, read without a wake-up; a full batch leaves
/// `more_queued` set, so the next read comes at once.
fn drain_queued(ring: &mut RingBuf<MapData>, more_queued: &mut bool, decoding: &mut Decoding) -> Vec<Sample> {
    let batch = drain(ring, decoding);
    *more_queued = batch.len() == MAX_BATCH;
    batch
}

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
