//! The real binary's terminal UI in tmux, against the emulated lossy path of `cctrace demo`.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_tests::{cctrace_bin, require_kernel, serial};

/// A tmux session that is killed on drop.
struct Tmux {
    name: String,
}

impl Tmux {
    fn start(command: &str, cols: u16, rows: u16) -> Result<Self> {
        let name = format!("cct-tui-{}", std::process::id());
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", &cols.to_string(), "-y", &rows.to_string(), command])
            .env("TERM", "xterm-256color")
            .status()
            .context("running tmux (apt-get install tmux)")?;
        if !status.success() {
            bail!("tmux new-session failed");
        }
        Ok(Self { name })
    }

    fn screen(&self) -> Result<String> {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.name]).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn keys(&self, keys: &[&str]) -> Result<()> {
        Command::new("tmux").args(["send-keys", "-t", &self.name]).args(keys).status()?;
        Ok(())
    }

    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> Result<String> {
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
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.name]).status();
    }
}

/// Screen text with box borders removed and lines joined, so wrapped sentences match.
fn flowing(screen: &str) -> String {
    screen
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '│' || c == '┃' || c.is_whitespace()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn demo_in_tmux_flags_cubic_opens_detail_and_quits_cleanly() -> Result<()> {
    require_kernel!();
    let _serial = serial();
    // After cctrace exits, the shell prints its exit code and the terminal modes it left.
    let command = format!(
        "{} demo --duration 90; echo CCTRACE_EXIT=$?; stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' '; echo TERMINAL_CHECKED; sleep 60",
        cctrace_bin().display()
    );
    let tmux = Tmux::start(&command, 120, 40)?;
    let started = Instant::now();
    // How soon a flow is flagged is the diagnosis tests' claim (measured there from the flow's
    // start, on a path whose emulator kept time); here it is that the UI shows the flag. The
    // limit leaves room for a host that stalls for seconds (CPU steal on a shared VM).
    tmux.wait_for("a flagged CUBIC flow on screen", Duration::from_secs(40), |s| {
        s.lines().any(|l| l.starts_with('⚑') && l.contains("cubic"))
    })?;
    eprintln!("flagged after {:.1} s", started.elapsed().as_secs_f64());

    // Narrow the table to the CUBIC bulk flow by its process name and open it.
    tmux.keys(&["/"])?;
    tmux.keys(&["-l", "cubic-bulk"])?;
    tmux.keys(&["Enter"])?;
    // One table row left: the header and the table title name the filter too, so count the
    // rows (lines with the flow's endpoints), not every mention of the name, nor the findings
    // strip's lines (`⚑ cubic-bulk → peer`).
    tmux.wait_for("the filtered table", Duration::from_secs(5), |s| {
        let rows: Vec<&str> = s.lines().filter(|l| l.contains(":5201") && !l.contains(" → ")).collect();
        rows.len() == 1 && rows[0].contains("cubic-bulk")
    })?;
    tmux.keys(&["Enter"])?;
    let detail = tmux.wait_for("the detail view with its verdict", Duration::from_secs(5), |s| {
        let text = flowing(s);
        text.contains("FLAGGED") && text.contains("held back by loss-based congestion control")
    })?;
    let text = flowing(&detail);
    assert!(text.contains("Mathis bound"), "{detail}");
    assert!(text.contains("limited by cwnd"), "{detail}");
    // The fix is at the end of the verdict panel: scroll there as a user would.
    tmux.keys(&["End"])?;
    tmux.wait_for("the fix at the end of the verdict", Duration::from_secs(5), |s| {
        flowing(s).contains("sysctl -w net.ipv4.tcp_congestion_control=bbr")
    })?;

    tmux.keys(&["q"])?;
    let after = tmux.wait_for("cctrace to exit", Duration::from_secs(15), |s| s.contains("TERMINAL_CHECKED"))?;
    assert!(after.contains("CCTRACE_EXIT=0"), "{after}");
    // Raw mode undone: canonical input and echo are back on.
    let modes = after.lines().find(|l| l.contains("icanon")).unwrap_or_default();
    assert!(
        modes.split_whitespace().any(|w| w == "icanon") && modes.split_whitespace().any(|w| w == "echo"),
        "{after}"
    );
    // The alternate screen is gone: none of the UI is left on the normal screen.
    assert!(!after.contains("q quit"), "{after}");
    // The demo's namespaces are gone.
    let list = Command::new("ip").args(["netns", "list"]).output()?;
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains("esnd") && !list.contains("ercv"), "namespaces left: {list}");
    Ok(())
}
