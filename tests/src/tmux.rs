//! A terminal for the terminal UI: a detached tmux session of a given size, its screen read
//! back as text and keys sent to it.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A tmux session that is killed on drop.
pub struct Tmux {
    name: String,
}

impl Tmux {
    pub fn start(command: &str, cols: u16, rows: u16) -> Result<Self> {
        Self::start_named(&format!("cct-tui-{}", std::process::id()), command, cols, rows)
    }

    /// A session of its own name (`cct-...`), for a test that runs more than one.
    pub fn start_named(name: &str, command: &str, cols: u16, rows: u16) -> Result<Self> {
        let name = name.to_string();
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", &cols.to_string(), "-y", &rows.to_string(), command])
            .env("TERM", "xterm-256color")
            .status_within(CHILD_DEADLINE)
            .context("running tmux (apt-get install tmux)")?;
        if !status.success() {
            bail!("tmux new-session failed");
        }
        Ok(Self { name })
    }

    pub fn screen(&self) -> Result<String> {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.name]).output_within(CHILD_DEADLINE)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn keys(&self, keys: &[&str]) -> Result<()> {
        Command::new("tmux").args(["send-keys", "-t", &self.name]).args(keys).status_within(CHILD_DEADLINE)?;
        Ok(())
    }

    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen()?;
            if pred(&screen) {
                return Ok(screen);
            }
            if Instant::now() > deadline {
                bail!("timed out after {timeout:?} waiting for {what}; screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.name]).status_within(CHILD_DEADLINE);
    }
}
