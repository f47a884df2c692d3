//! Ctrl-C, SIGTERM and SIGHUP as one future, so every mode shuts down the same clean way: a
//! closed terminal (an ssh session dropped, a tmux window killed) must not leave programs
//! attached or lab namespaces behind any more than Ctrl-C does.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

/// SIGINT, SIGTERM and SIGHUP, as a [`crate::pipeline::StopSignal`].
pub struct Shutdown {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Shutdown {
    pub fn install() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        })
    }
}

impl crate::pipeline::StopSignal for Shutdown {
    /// The next SIGINT, SIGTERM or SIGHUP (a second one after the first is another stop).
    async fn wait(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}
