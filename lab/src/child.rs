//! Waiting for child processes with a deadline. A test that reads a child's output to its end
//! hangs for ever when the child never ends (a lost signal, a peer that never closes): every wait
//! here is bounded, and a child that overstays is killed and reported with what it printed.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
pub use rustix::process::Signal;

/// The bound the tests put on a program they run to its end: the longest (the demo with
/// `--duration 12`, a headless browser) take well under a minute; one still running after this
/// is stuck, and is killed.
pub const CHILD_DEADLINE: Duration = Duration::from_secs(120);

/// How often a bounded wait looks at the child: short next to any deadline used here.
const POLL: Duration = Duration::from_millis(20);

/// How long [`interrupt_within`] gives a child to act on SIGINT before sending it again.
pub const INTERRUPT_AGAIN: Duration = Duration::from_secs(1);

/// How long a child's pipes may stay open after it exited: a grandchild it left running holds
/// them, and the wait must not become unbounded through it.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// `Command::output` and `Command::status` with a deadline.
pub trait OutputWithin {
    /// Run to the end with stdin closed, collecting stdout and stderr. A child still running
    /// after `timeout` is killed, and the error names the command and what it had printed.
    fn output_within(&mut self, timeout: Duration) -> Result<Output>;

    /// Run to the end with the standard streams as the command sets them (inherited unless
    /// set); a child still running after `timeout` is killed.
    fn status_within(&mut self, timeout: Duration) -> Result<ExitStatus>;
}

impl OutputWithin for Command {
    fn output_within(&mut self, timeout: Duration) -> Result<Output> {
        let shown = describe(self);
        let mut child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `{shown}`"))?;
        collect_within(&mut child, timeout, &shown)
    }

    fn status_within(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let shown = describe(self);
        let mut child = self.spawn().with_context(|| format!("starting `{shown}`"))?;
        wait_within(&mut child, timeout, &format!("`{shown}`"))
    }
}

/// Wait for a child whose stdout and stderr are piped (or not captured) and collect them, with a
/// deadline: killed after `timeout`, and the error says what it printed by then.
pub fn collect_within(child: &mut Child, timeout: Duration, what: &str) -> Result<Output> {
    collect_while(child, |child| wait_within(child, timeout, what))
}

/// `child`'s output, read while `wait` waits for it to end (and kills it when it overstays).
fn collect_while(child: &mut Child, wait: impl FnOnce(&mut Child) -> Result<ExitStatus>) -> Result<Output> {
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let waited = wait(child);
    // The pipes close once the child is gone (killed on timeout), so the readers end, unless a
    // grandchild holds them: then what was read so far is all there is.
    let grace = Instant::now() + PIPE_GRACE;
    let stdout = stdout.map(|r| collected(&r, grace)).unwrap_or_default();
    let stderr = stderr.map(|r| collected(&r, grace)).unwrap_or_default();
    match waited {
        Ok(status) => Ok(Output { status, stdout, stderr }),
        Err(e) => Err(e.context(format!("it printed on stdout: {:?}; on stderr: {:?}", tail(&stdout), tail(&stderr)))),
    }
}

/// Stop `child` with SIGINT and collect what it printed, as [`collect_within`] does. The signal
/// is sent again every [`INTERRUPT_AGAIN`] while the child lives: a program that installs its
/// handler only after it starts work (bpftrace sets its SIGINT handler after attaching, and has
/// been seen to sit in its loop for ever after a SIGINT sent then) ends on the next one.
pub fn interrupt_within(child: &mut Child, timeout: Duration, what: &str) -> Result<Output> {
    collect_while(child, |child| interrupt_until_exit(child, timeout, what))
}

/// SIGINT to `child` now and every [`INTERRUPT_AGAIN`] until it exits; killed after `timeout`.
fn interrupt_until_exit(child: &mut Child, timeout: Duration, what: &str) -> Result<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        let _ = send_signal(child.id(), Signal::INT);
        let left = deadline.saturating_duration_since(Instant::now());
        if let Some(status) = exit_within(child, left.min(INTERRUPT_AGAIN), what)? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{what} (pid {}) was still running {timeout:?} after SIGINT (sent every {INTERRUPT_AGAIN:?}) and was killed",
                child.id()
            );
        }
    }
}

/// Wait for `child` to exit; after `timeout` kill it (SIGKILL) and fail.
pub fn wait_within(child: &mut Child, timeout: Duration, what: &str) -> Result<ExitStatus> {
    match exit_within(child, timeout, what)? {
        Some(status) => Ok(status),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} (pid {}) was still running after {timeout:?} and was killed", child.id());
        }
    }
}

/// `child`'s exit status if it exits within `timeout`; `None`, and the child left running,
/// if it does not.
fn exit_within(child: &mut Child, timeout: Duration, what: &str) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().with_context(|| format!("waiting for {what}"))? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Read a pipe on a thread of its own, sending each chunk as it comes.
fn drain(mut pipe: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Everything a reader sent until its pipe closed, or until `deadline`.
fn collected(reader: &Receiver<Vec<u8>>, deadline: Instant) -> Vec<u8> {
    let mut bytes = Vec::new();
    while let Ok(chunk) = reader.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        bytes.extend_from_slice(&chunk);
    }
    bytes
}

/// The last kilobyte of what a child printed: enough to see where it stopped.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(1024);
    let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
    text[start..].to_string()
}

/// A command line for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Send `signal` to process `pid`; a pid no process can have (0, beyond `i32`) is an error and
/// nothing is sent.
pub fn send_signal(pid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
    let pid = pid.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    Ok(rustix::process::kill_process(pid, signal)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_lets_the_first_sigint_pass_ends_on_the_next() {
        use std::io::BufRead;
        use std::os::unix::process::ExitStatusExt;
        // The first SIGINT only resets the handler, as a program that sets its own too late
        // would lose it; the one sent a second later ends it.
        // SIGINT back to its default first: a shell cannot trap a signal ignored when it
        // started, and a run started in the background by a shell without job control has
        // SIGINT ignored throughout.
        let mut child = Command::new("env")
            .args([
                "--default-signal=INT",
                "sh",
                "-c",
                "trap 'trap - INT' INT; echo ready; while :; do sleep 0.05; done",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut ready).expect("ready");
        assert_eq!(ready, "ready\n");
        let started = Instant::now();
        let out = interrupt_within(&mut child, Duration::from_secs(10), "sh").expect("ends on a later SIGINT");
        assert_eq!(out.status.signal(), Some(libc::SIGINT), "{:?}", out.status);
        let took = started.elapsed();
        assert!(took >= INTERRUPT_AGAIN && took < 3 * INTERRUPT_AGAIN, "ended after {took:?}");
    }

    #[test]
    fn a_child_that_ends_gives_its_output() {
        let out =
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]).output_within(Duration::from_secs(10));
        let out = out.expect("sh ran");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_child_that_overstays_is_killed_and_reported_with_what_it_printed() {
        let started = Instant::now();
        let err = Command::new("sh")
            .args(["-c", "echo waiting; exec sleep 60"])
            .output_within(Duration::from_millis(300))
            .expect_err("sleep 60 cannot finish in 0.3 s");
        assert!(started.elapsed() < Duration::from_secs(10), "the wait was bounded: {:?}", started.elapsed());
        let text = format!("{err:#}");
        assert!(text.contains("was still running after 300ms"), "{text}");
        assert!(text.contains("waiting"), "says what it printed: {text}");
    }

    #[test]
    fn a_grandchild_holding_the_pipes_does_not_hold_the_wait() {
        let started = Instant::now();
        let out = Command::new("sh").args(["-c", "sleep 30 & echo $!"]).output_within(Duration::from_secs(10));
        let out = out.expect("sh ran");
        let grandchild: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("a pid");
        send_signal(grandchild, Signal::KILL).expect("the sleep this test started");
        assert!(started.elapsed() < Duration::from_secs(8), "bounded by the grace: {:?}", started.elapsed());
    }
}
