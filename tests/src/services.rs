//! Real servers a test starts in a lab namespace, each with a configuration of its own in a
//! directory of its own: sshd (its own host key and authorized key, never the machine's sshd
//! config or keys) serving a bulk pull to `ssh`, and nginx serving a sparse file to `curl`.
//! Each is stopped when its value drops, and dies with the test process (`PR_SET_PDEATHSIG`).

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use cctrace_lab::Netns;

/// A directory of the test's own, removed on drop.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn create(what: &str) -> Result<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cct-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `cmd` made to die with this process, and to keep its output off the test's terminal.
pub(crate) fn tied(mut cmd: Command) -> Command {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: prctl (a raw system call in rustix) is async-signal-safe; it only sets a flag of
    // the child about to exec.
    unsafe {
        cmd.pre_exec(|| {
            let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
            Ok(())
        });
    }
    cmd
}

/// A child process killed and reaped on drop.
#[derive(Debug)]
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server process listening on one address, killed on drop.
#[derive(Debug)]
struct Server {
    process: Reaped,
    addr: SocketAddr,
}

impl Server {
    /// Start `cmd` (run in `ns`; `what` from Debian's `package`) and wait until it accepts
    /// connections on `addr`.
    fn start(ns: &Netns, cmd: Command, addr: SocketAddr, (what, package): (&str, &str)) -> Result<Self> {
        let child = tied(cmd).spawn().with_context(|| format!("starting {what} (apt-get install {package})"))?;
        let mut server = Self { process: Reaped(child), addr };
        wait_listening(ns, addr, &mut server.process.0, what)?;
        Ok(server)
    }
}

/// Wait until something in `ns` accepts TCP connections on `addr`, or `child` exits.
fn wait_listening(ns: &Netns, addr: SocketAddr, child: &mut Child, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let connected = ns
            .spawn_thread("cct-probe", move || {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
            })?
            .join()
            .unwrap_or(false);
        if connected {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited at start ({status})");
        }
        if Instant::now() > deadline {
            bail!("{what} did not listen on {addr} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn keygen(path: &Path) -> Result<()> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output_within(CHILD_DEADLINE)
        .context("ssh-keygen (apt-get install openssh-client)")?;
    if !out.status.success() {
        bail!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// sshd's privilege separation directory, compiled into it: made for the test when missing,
/// and removed again.
const PRIVSEP_DIR: &str = "/run/sshd";

/// sshd in a namespace, on one address and port, with a configuration, host key and
/// authorized key of its own.
#[derive(Debug)]
pub struct Sshd {
    server: Server,
    made_privsep_dir: bool,
    dir: ScratchDir,
}

impl Sshd {
    pub fn start(ns: &Netns, addr: SocketAddr) -> Result<Self> {
        let dir = ScratchDir::create("sshd")?;
        let d = dir.path();
        keygen(&d.join("host_key"))?;
        keygen(&d.join("client_key"))?;
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys"))?;
        let config = format!(
            "ListenAddress {addr}\nHostKey {host}\nPidFile {pid}\nAuthorizedKeysFile {keys}\nStrictModes no\n\
             UsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPrintMotd no\nPrintLastLog no\nAcceptEnv none\n",
            host = d.join("host_key").display(),
            pid = d.join("sshd.pid").display(),
            keys = d.join("authorized_keys").display(),
        );
        std::fs::write(d.join("sshd_config"), config)?;
        let made_privsep_dir = !Path::new(PRIVSEP_DIR).exists();
        if made_privsep_dir {
            std::fs::create_dir(PRIVSEP_DIR).with_context(|| format!("creating {PRIVSEP_DIR}"))?;
        }
        // sshd re-executes itself for each connection: by its absolute path.
        let mut cmd = ns.command("/usr/sbin/sshd");
        cmd.args(["-D", "-f"]).arg(d.join("sshd_config"));
        let server = Server::start(ns, cmd, addr, ("sshd", "openssh-server"));
        let server = match server {
            Ok(server) => server,
            Err(e) => {
                remove_privsep_dir(made_privsep_dir);
                return Err(e);
            }
        };
        Ok(Self { server, made_privsep_dir, dir })
    }

    /// sshd's pid (the listener; each connection is served by a child named sshd too).
    pub fn pid(&self) -> u32 {
        self.server.process.0.id()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// `ssh` from `client` runs `head -c BYTES /dev/zero` here: a bulk pull, its bytes counted
    /// as they arrive.
    pub fn pull(&self, client: &Netns, bytes: u64) -> Result<Pull> {
        let mut cmd = client.command("ssh");
        cmd.args(["-F", "/dev/null", "-i"]).arg(self.dir.path().join("client_key")).args([
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-p",
            &self.addr().port().to_string(),
            &format!("root@{}", self.addr().ip()),
            &format!("exec head -c {bytes} /dev/zero"),
        ]);
        let mut cmd = tied(cmd);
        cmd.stdout(Stdio::piped());
        Pull::start(cmd)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // The listener first; the connections' children go when their clients do.
        let _ = self.server.process.0.kill();
        let _ = self.server.process.0.wait();
        remove_privsep_dir(self.made_privsep_dir);
    }
}

/// Remove the privilege separation directory if the test made it.
fn remove_privsep_dir(made: bool) {
    if made {
        let _ = std::fs::remove_dir(PRIVSEP_DIR);
    }
}

/// A client process whose stdout is a download, counted as it arrives.
#[derive(Debug)]
pub struct Pull {
    process: Reaped,
    received: Arc<AtomicU64>,
}

impl Pull {
    fn start(mut cmd: Command) -> Result<Self> {
        let mut child = cmd.spawn().context("starting the client")?;
        let mut out = child.stdout.take().context("no stdout")?;
        let received = Arc::new(AtomicU64::new(0));
        let counter = received.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        Ok(Self { process: Reaped(child), received })
    }

    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Bits per second received over `window`, from now.
    pub fn rate_over(&self, window: Duration) -> f64 {
        let (b0, t0) = (self.received(), Instant::now());
        std::thread::sleep(window);
        (self.received() - b0) as f64 * 8.0 / t0.elapsed().as_secs_f64()
    }

    /// Whether the client is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.process.0.try_wait(), Ok(None))
    }
}

/// The sparse file nginx serves: larger than any test reads, no disk used.
const BIG_FILE_BYTES: u64 = 64 << 30;

/// nginx in a namespace, one process (no master), serving a sparse file with sendfile.
#[derive(Debug)]
pub struct Nginx {
    server: Server,
    _dir: ScratchDir,
}

impl Nginx {
    pub fn start(ns: &Netns, addr: SocketAddr) -> Result<Self> {
        let dir = ScratchDir::create("nginx")?;
        std::fs::create_dir(dir.path().join("www"))?;
        std::fs::File::create(dir.path().join("www/big"))?.set_len(BIG_FILE_BYTES)?;
        let root = dir.path().join("www");
        Self::serve(ns, &[addr], &root, dir)
    }

    /// nginx serving the files under `root` on each of `addrs` (IPv4 and IPv6 alike), one
    /// process as [`Nginx::start`]'s.
    pub fn serve_dir(ns: &Netns, addrs: &[SocketAddr], root: &Path) -> Result<Self> {
        Self::serve(ns, addrs, root, ScratchDir::create("nginx")?)
    }

    /// nginx with its configuration, pid file and logs in `dir`.
    fn serve(ns: &Netns, addrs: &[SocketAddr], root: &Path, dir: ScratchDir) -> Result<Self> {
        let first = *addrs.first().context("nginx needs an address to listen on")?;
        let d = dir.path();
        let t = d.display();
        let listen: String = addrs.iter().map(|a| format!("listen {a}; ")).collect();
        let config = format!(
            "daemon off;\nmaster_process off;\npid {t}/nginx.pid;\nerror_log {t}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  client_body_temp_path {t};\n  proxy_temp_path {t};\n\
               fastcgi_temp_path {t};\n  uwsgi_temp_path {t};\n  scgi_temp_path {t};\n\
               default_type application/octet-stream;\n  server {{ {listen}root {root}; }}\n}}\n",
            root = root.display()
        );
        std::fs::write(d.join("nginx.conf"), config)?;
        let mut cmd = ns.command("nginx");
        cmd.arg("-p").arg(d).arg("-e").arg(d.join("error.log")).arg("-c").arg(d.join("nginx.conf"));
        Ok(Self { server: Server::start(ns, cmd, first, ("nginx", "nginx"))?, _dir: dir })
    }

    pub fn pid(&self) -> u32 {
        self.server.process.0.id()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// `curl` from `client` downloads the big file, counted as it arrives.
    pub fn pull(&self, client: &Netns) -> Result<Pull> {
        let mut cmd = client.command("curl");
        cmd.args(["-s", "-o", "-", &format!("http://{}/big", self.addr())]);
        let mut cmd = tied(cmd);
        cmd.stdout(Stdio::piped());
        Pull::start(cmd)
    }
}

/// Whether process `pid` still exists.
pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// `ip` in IPv4 or IPv6 as a socket address with `port`.
pub fn at(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}
