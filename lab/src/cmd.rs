//! Running the external networking tools (ip, nft, ethtool) with their
//! output captured, so nothing leaks onto a terminal the TUI may own.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::error::LabError;

/// Renders a command line for error messages.
fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion and returns its stdout; a non-zero exit is an
/// error carrying stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    run_with_stdin(cmd, None)
}

/// Like [`run`], feeding `input` on stdin (used for `nft -f -` scripts so a
/// ruleset change is one atomic transaction).
pub(crate) fn run_with_stdin(cmd: &mut Command, input: Option<&str>) -> Result<String> {
    let command = describe(cmd);
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| LabError::ToolMissing {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;
    if let Some(input) = input {
        // Take the pipe so it is closed (EOF for the child) before waiting.
        let mut stdin = child.stdin.take().context("child stdin missing")?;
        stdin.write_all(input.as_bytes()).with_context(|| format!("writing stdin of `{command}`"))?;
    }
    let out = child.wait_with_output().with_context(|| format!("waiting for `{command}`"))?;
    if !out.status.success() {
        return Err(LabError::CommandFailed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
