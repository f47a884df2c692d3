//! Ctrl-C and SIGTERM as one future, so every mode shuts down the same clean way.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

/// SIGINT and SIGTERM, as a [`crate::pipeline::StopSignal`].
pub struct Shutdown {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Shutdown {
    pub fn install() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
        })
    }
}

impl crate::pipeline::StopSignal for Shutdown {
    /// The next SIGINT or SIGTERM (a second one after the first is another stop).
    async fn wait(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}
