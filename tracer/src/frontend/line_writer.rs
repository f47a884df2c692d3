//! Output that cannot hold the process hostage: lines go to stdout (or any writer) on a thread
//! of their own through a bounded queue. A reader that stops reading fills the queue, and then
//! [`LineWriter::send`] waits, which a stop (a signal, `--duration`) cancels; a reader that goes
//! away (`cctrace --json | head -1`) ends the run quietly instead of as an error.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use tokio::sync::{mpsc, oneshot};

/// Chunks that may wait for a slow reader: the JSON output's pieces are about 64 KiB, so up to
/// 16 MiB, a second or more of lines under heavy churn.
const QUEUED_CHUNKS: usize = 256;

/// What became of a chunk handed to [`LineWriter::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Written,
    /// The reader went away (EPIPE): nothing more can be written; not an error.
    Closed,
}

/// A failure to write that is an error (a full disk, an I/O error), not a closed pipe. Its
/// message holds the I/O error's words, so that error is not also its source (an error chain
/// would print them twice).
#[derive(Debug, thiserror::Error)]
#[error("writing output: {0}")]
pub struct OutputError(io::Error);

impl From<io::Error> for OutputError {
    fn from(e: io::Error) -> Self {
        Self(e)
    }
}

pub struct LineWriter {
    tx: Option<mpsc::Sender<Vec<u8>>>,
    /// Why the thread stopped writing, if it failed.
    failure: Arc<Mutex<Option<io::Error>>>,
    done: Option<oneshot::Receiver<()>>,
}

impl LineWriter {
    /// Start the writer thread on `out`.
    pub fn spawn(mut out: Box<dyn Write + Send>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(QUEUED_CHUNKS);
        let (done_tx, done) = oneshot::channel();
        let failure = Arc::new(Mutex::new(None));
        let failed = failure.clone();
        std::thread::Builder::new()
            .name("cctrace-output".into())
            .spawn(move || {
                while let Some(chunk) = rx.blocking_recv() {
                    if let Err(e) = out.write_all(&chunk).and_then(|()| out.flush()) {
                        *failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                        break;
                    }
                }
                let _ = done_tx.send(());
            })
            .map_or_else(
                // Without a thread there is no output: report it on the first send.
                |e| *failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e),
                drop,
            );
        Self { tx: Some(tx), failure, done: Some(done) }
    }

    fn outcome_of_failure(&self) -> Result<WriteOutcome, OutputError> {
        let failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        match failure {
            Some(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(OutputError(e)),
            _ => Ok(WriteOutcome::Closed),
        }
    }

    /// Queue `chunk`; waits while the queue is full.
    pub async fn send(&mut self, chunk: Vec<u8>) -> Result<WriteOutcome, OutputError> {
        let Some(tx) = &self.tx else { return Ok(WriteOutcome::Closed) };
        if tx.send(chunk).await.is_ok() {
            return Ok(WriteOutcome::Written);
        }
        self.tx = None;
        self.outcome_of_failure()
    }

    /// Wait until everything queued is written (or the reader went away).
    pub async fn close(&mut self) -> Result<WriteOutcome, OutputError> {
        self.tx = None;
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
        let failed = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
        if failed {
            self.outcome_of_failure()
        } else {
            Ok(WriteOutcome::Written)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::test_support::SharedBuf;

    /// A writer whose reader went away.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A disk that is full.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn writes_in_order_and_close_waits_for_the_last_line() {
        let buf = SharedBuf::default();
        let mut w = LineWriter::spawn(Box::new(buf.clone()));
        for i in 0..500 {
            assert_eq!(w.send(format!("{i}\n").into_bytes()).await.expect("send"), WriteOutcome::Written);
        }
        assert_eq!(w.close().await.expect("close"), WriteOutcome::Written);
        let text = buf.text();
        assert_eq!(text.lines().count(), 500);
        assert_eq!(text.lines().last(), Some("499"));
    }

    #[tokio::test]
    async fn a_closed_reader_is_not_an_error_and_a_full_disk_is() {
        let mut w = LineWriter::spawn(Box::new(Closed));
        let mut outcome = WriteOutcome::Written;
        for _ in 0..3 {
            outcome = w.send(b"x\n".to_vec()).await.expect("no error");
            if outcome == WriteOutcome::Closed {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let outcome = if outcome == WriteOutcome::Closed { outcome } else { w.close().await.expect("no error") };
        assert_eq!(outcome, WriteOutcome::Closed);

        let mut w = LineWriter::spawn(Box::new(Full));
        let _ = w.send(b"x\n".to_vec()).await;
        let err = w.close().await.expect_err("ENOSPC is an error");
        assert!(err.to_string().contains("No space left"), "{err}");
    }
}
