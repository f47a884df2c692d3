//! Running the external networking tools (ip, nft, ethtool) with their
//! output captured, so nothing leaks onto a terminal the TUI may own.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::child::{collect_within, describe};
use crate::error::LabError;

/// The networking tools answer in milliseconds; one that has not in this long is stuck (a
/// namespace being torn down under it, a lock held elsewhere) and is killed.
const TOOL_DEADLINE: Duration = Duration::from_secs(60);

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
    let out = collect_within(&mut child, TOOL_DEADLINE, &format!("`{command}`"))?;
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
