//! `cctrace serve` started by a test, its endpoint read over plain HTTP, and the scratch
//! directory it runs in: shared by the Prometheus and the OTLP tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::cctrace_bin;

/// A plain HTTP/1.0 GET (the server closes after answering): status and body.
pub fn http_get(addr: SocketAddr, path_and_query: &str, accept: &str, timeout: Duration) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).with_context(|| format!("reading the answer to GET {path_and_query}"))?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no header end in the answer")?;
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).context("no status")?;
    Ok((status, body.to_string()))
}

/// A port free right now on loopback.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `cctrace serve` on a port of its own choosing.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: PathBuf,
}

impl Serve {
    pub fn start(dir: &Path, extra: &[String]) -> Result<Serve> {
        Self::start_under(dir, &[], extra)
    }

    /// Started by `wrapper` (a command line that runs the rest, such as `setpriv ...`).
    pub fn start_under(dir: &Path, wrapper: &[String], extra: &[String]) -> Result<Serve> {
        let stderr = dir.join("serve.stderr");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(cctrace_bin());
                c
            }
            None => Command::new(cctrace_bin()),
        };
        let child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--docker-root"])
            .arg(dir.join("docker"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("starting cctrace serve")?;
        let mut serve = Serve { child, addr: SocketAddr::from(([127, 0, 0, 1], 0)), stderr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = serve.stderr_text();
            if let Some(addr) = text.lines().find_map(|l| {
                l.strip_prefix("cctrace: serving metrics at http://").and_then(|r| r.strip_suffix("/metrics"))
            }) {
                serve.addr = addr.parse().context("the address it serves at")?;
                return Ok(serve);
            }
            if let Some(status) = serve.child.try_wait()? {
                bail!("cctrace serve exited at start-up ({status}): {text}");
            }
            ensure!(Instant::now() < deadline, "cctrace serve did not start within 30 s: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed at the end.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("cct-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
