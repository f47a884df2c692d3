//! `cctrace serve` started by a test, its endpoint read over plain HTTP, and the scratch
//! directory it runs in: shared by the Prometheus and the OTLP tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::cctrace_bin;

/// A container as Docker names it, for `--docker-root DIR/docker`: its `config.v2.json` naming
/// `id` as `name`, and a cgroup where Docker would put it, below a top cgroup of the test's own.
pub struct DockerContainer {
    /// Declared first: dropped (removed) before its parent.
    pub cgroup: cctrace_lab::Cgroup,
    _top: cctrace_lab::Cgroup,
}

impl DockerContainer {
    pub fn create(dir: &Path, id: &str, name: &str) -> Result<Self> {
        let config = dir.join("docker/containers").join(id);
        std::fs::create_dir_all(&config)?;
        std::fs::write(
            config.join("config.v2.json"),
            format!(r#"{{"ID":"{id}","Name":"/{name}","State":{{"Pid":1}}}}"#),
        )?;
        let top = cctrace_lab::Cgroup::top()?;
        let cgroup = top.child(&format!("system.slice/docker-{id}.scope"))?;
        Ok(Self { cgroup, _top: top })
    }
}

/// The story's lossy path ([`crate::demo_wan`]) whose sending namespace lives in a Docker-named
/// container: what the metrics tests watch.
pub struct ContainerOnLossyPath {
    /// Declared first: its resident process ends before the namespaces go.
    pub container: DockerContainer,
    pub path: cctrace_lab::EmulatedPath,
}

impl ContainerOnLossyPath {
    pub fn create(dir: &Path, id: &str, name: &str, loss: f64) -> Result<Self> {
        let mut container = DockerContainer::create(dir, id, name)?;
        let path = crate::demo_wan(loss)?;
        container.cgroup.spawn_resident(path.sender())?;
        Ok(Self { container, path })
    }

    /// A sink on the receiver's `port`, and a CUBIC bulk flow to it for `time` from a socket of
    /// the container's cgroup.
    pub fn cubic_bulk(&self, port: u16, time: Duration) -> Result<(cctrace_lab::Sink, cctrace_lab::Sender)> {
        use cctrace_lab::{SendMode, Sender, SenderOptions, Sink, SinkOptions};
        let path = &self.path;
        let sink = Sink::start(path.receiver(), path.receiver_addr(), port, SinkOptions::default())?;
        let sender = Sender::start(
            path.sender(),
            path.receiver_addr(),
            port,
            SenderOptions {
                socket_cgroup: Some(self.container.cgroup.path().to_path_buf()),
                nodelay: true,
                ..SenderOptions::new("cubic", SendMode::Bulk, time)
            },
        )?;
        Ok((sink, sender))
    }
}

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
