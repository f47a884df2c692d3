//! Writing a recording: entries go through a bounded queue to a thread of their own, which
//! serialises them as JSON Lines and closes a zstd frame at least once a second (and whenever
//! [`FRAME_BYTES`] of lines are buffered). The pipeline never waits on the disk: an entry that
//! does not fit in the queue is dropped and counted.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::oneshot;

use super::entry::{Entry, Header, FORMAT_VERSION};

/// A frame is closed once this many bytes of lines are buffered...
pub const FRAME_BYTES: usize = 256 * 1024;
/// ...and at least this often, so a file cut off by a crash loses at most this much.
pub const FRAME_EVERY: Duration = Duration::from_secs(1);
/// zstd level: JSON Lines of samples compress about 10:1 at 3 for little CPU.
pub const LEVEL: i32 = 3;
/// Entries that may wait for the writer thread before new ones are dropped.
const QUEUED_ENTRIES: usize = 8192;

/// First bytes of every recording: a zstd skippable frame (`zstdcat` passes over it) whose
/// 16-byte payload is `CCTRACE-REC\0` and the format version (u32, little endian).
pub const SKIPPABLE_MAGIC: u32 = 0x184D_2A5C;
pub const MAGIC_PAYLOAD: &[u8; 12] = b"CCTRACE-REC\0";
pub const MAGIC_LEN: usize = 24;

/// The skippable frame a recording starts with.
pub fn magic_frame() -> [u8; MAGIC_LEN] {
    let mut m = [0u8; MAGIC_LEN];
    m[..4].copy_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    m[4..8].copy_from_slice(&16u32.to_le_bytes());
    m[8..20].copy_from_slice(MAGIC_PAYLOAD);
    m[20..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    m
}

/// A new, empty recording file, created before anything else starts so a path that cannot be
/// used fails at once. Removed again if the recording never starts.
pub struct NewFile {
    file: Option<File>,
    path: PathBuf,
}

impl NewFile {
    /// Create `path` for writing: mode 0600, never through a symlink, never over an existing
    /// file.
    pub fn create(path: &Path) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => {
                    anyhow::anyhow!(
                        "cannot record to {}: it already exists (recordings never overwrite)",
                        path.display()
                    )
                }
                _ => anyhow::anyhow!("cannot record to {}: {e}", path.display()),
            })?;
        Ok(Self { file: Some(file), path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        // Still ours and never started: nothing worth keeping.
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Totals shared between the writer thread and everyone who shows them.
#[derive(Debug)]
struct Shared {
    bytes: AtomicU64,
    entries: AtomicU64,
    dropped: AtomicU64,
    dropped_samples: AtomicU64,
    started: Instant,
}

/// What a recording has written so far: for the TUI's header and the closing line.
#[derive(Clone, Debug)]
pub struct RecordingStatus {
    shared: Arc<Shared>,
    path: PathBuf,
}

impl RecordingStatus {
    /// Bytes written to the file (complete frames).
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// Entries serialised (written or in the frame being filled).
    pub fn entries(&self) -> u64 {
        self.shared.entries.load(Ordering::Relaxed)
    }

    /// Entries dropped because the writer fell behind, and the samples they held.
    pub fn dropped(&self) -> (u64, u64) {
        (self.shared.dropped.load(Ordering::Relaxed), self.shared.dropped_samples.load(Ordering::Relaxed))
    }

    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `REC 1m12s 3.4 MiB`, for the TUI's header.
    pub fn badge(&self) -> String {
        format!("REC {} {}", short_duration(self.elapsed()), crate::analysis::units::bytes(self.bytes()))
    }
}

/// `42s`, `1m12s`, `2h03m`.
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The writing end of a recording.
pub struct RecordWriter {
    tx: Option<SyncSender<Entry>>,
    status: RecordingStatus,
    failure: Arc<Mutex<Option<io::Error>>>,
    done: Option<oneshot::Receiver<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RecordWriter {
    /// Start recording into `file`: the magic and the header are written before this returns,
    /// so even a recording cut off at once says what it is.
    pub fn start(mut file: NewFile, header: &Header) -> Result<Self> {
        let out = file.file.take().context("the recording file was already used")?;
        let path = file.path.clone();
        Self::spawn(Box::new(out), path.clone(), header)
            .with_context(|| format!("writing recording {}", path.display()))
    }

    /// Start recording into any writer (tests, benchmarks); `path` only names it.
    pub fn spawn(mut out: Box<dyn Write + Send>, path: PathBuf, header: &Header) -> io::Result<Self> {
        let mut compressor = zstd::bulk::Compressor::new(LEVEL)?;
        compressor.include_checksum(true)?;
        let mut first = serde_json::to_vec(&Entry::Header(header.clone()))?;
        first.push(b'\n');
        let frame = compressor.compress(&first)?;
        out.write_all(&magic_frame())?;
        out.write_all(&frame)?;
        out.flush()?;
        let shared = Arc::new(Shared {
            bytes: AtomicU64::new((MAGIC_LEN + frame.len()) as u64),
            entries: AtomicU64::new(1),
            dropped: AtomicU64::new(0),
            dropped_samples: AtomicU64::new(0),
            started: Instant::now(),
        });
        let (tx, rx) = mpsc::sync_channel::<Entry>(QUEUED_ENTRIES);
        let (done_tx, done) = oneshot::channel();
        let failure = Arc::new(Mutex::new(None));
        let (failed, totals) = (failure.clone(), shared.clone());
        let thread = std::thread::Builder::new().name("cctrace-record".into()).spawn(move || {
            if let Err(e) = write_frames(&rx, out.as_mut(), &mut compressor, &totals) {
                *failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
            }
            let _ = done_tx.send(());
        })?;
        Ok(Self {
            tx: Some(tx),
            status: RecordingStatus { shared, path },
            failure,
            done: Some(done),
            thread: Some(thread),
        })
    }

    /// Queue `entry`; never waits. An entry that does not fit is dropped and counted.
    pub fn write(&self, entry: Entry) {
        let Some(tx) = &self.tx else { return };
        let samples = match &entry {
            Entry::Samples { samples } => samples.len() as u64,
            _ => 0,
        };
        match tx.try_send(entry) {
            Ok(()) => {}
            // A writer that failed reports it through `check`; counting is all that is left.
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.status.shared.dropped.fetch_add(1, Ordering::Relaxed);
                self.status.shared.dropped_samples.fetch_add(samples, Ordering::Relaxed);
            }
        }
    }

    /// The writer's I/O error, if writing failed (a full disk), naming the file.
    pub fn check(&self) -> Result<()> {
        let failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*failure {
            Some(e) => Err(anyhow::anyhow!("writing recording {}: {e}", self.status.path.display())),
            None => Ok(()),
        }
    }

    pub fn status(&self) -> RecordingStatus {
        self.status.clone()
    }

    /// Write what is queued, close the last frame and wait for the file to be complete.
    pub async fn close(&mut self) -> Result<()> {
        self.tx = None;
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
        self.check()
    }
}

impl Drop for RecordWriter {
    fn drop(&mut self) {
        // Whatever ends the run, the lines already queued reach the file.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The writer thread: serialise entries, close a frame when it is full or a second old.
fn write_frames(
    rx: &mpsc::Receiver<Entry>,
    out: &mut dyn Write,
    compressor: &mut zstd::bulk::Compressor<'_>,
    totals: &Shared,
) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(FRAME_BYTES + 64 * 1024);
    let mut frame_started: Option<Instant> = None;
    let mut flush = |buf: &mut Vec<u8>, frame_started: &mut Option<Instant>| -> io::Result<()> {
        *frame_started = None;
        if buf.is_empty() {
            return Ok(());
        }
        let frame = compressor.compress(buf)?;
        buf.clear();
        out.write_all(&frame)?;
        out.flush()?;
        totals.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        Ok(())
    };
    loop {
        let wait = frame_started.map_or(Duration::from_secs(3600), |t| FRAME_EVERY.saturating_sub(t.elapsed()));
        match rx.recv_timeout(wait) {
            Ok(entry) => {
                serde_json::to_writer(&mut buf, &entry)?;
                buf.push(b'\n');
                totals.entries.fetch_add(1, Ordering::Relaxed);
                let started = *frame_started.get_or_insert_with(Instant::now);
                if buf.len() >= FRAME_BYTES || started.elapsed() >= FRAME_EVERY {
                    flush(&mut buf, &mut frame_started)?;
                }
            }
            Err(RecvTimeoutError::Timeout) => flush(&mut buf, &mut frame_started)?,
            Err(RecvTimeoutError::Disconnected) => return flush(&mut buf, &mut frame_started),
        }
    }
}
