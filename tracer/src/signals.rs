//! Ctrl-C and SIGTERM as one future, so every mode shuts down the same clean way.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

/// Resolves on the first SIGINT or SIGTERM.
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

    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}
