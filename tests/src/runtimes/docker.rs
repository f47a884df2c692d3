//! Docker: the host's dockerd when one answers, else one started with state of its own.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::*;

/// dockerd started by this test; stopped (SIGTERM, then SIGKILL) on drop.
pub(super) struct OwnDaemon {
    child: Child,
}

impl Drop for OwnDaemon {
    fn drop(&mut self) {
        let _ = cctrace_lab::child::send_signal(self.child.id(), cctrace_lab::child::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Docker container; removed on drop, with its image, then the daemon if this started it.
pub struct Docker {
    pub(super) host: String,
    pub(super) name: String,
    pub(super) id: String,
    pub(super) image: String,
    // Last: the daemon outlives the container's removal.
    _daemon: Option<OwnDaemon>,
}

impl Docker {
    /// `docker` talking to this container's daemon.
    pub fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.args(["-H", &self.host]);
        c
    }

    /// Use the host's dockerd when one answers, else start one with all its state under the
    /// workspace (no iptables, no bridge: the container gets no network from it).
    pub fn start(ws: &Workspace, name: &str) -> Result<Docker, Unavailable> {
        require(&["dockerd", "docker"], "docker.io")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let system = "unix:///var/run/docker.sock";
        let answers = |host: &str| {
            Command::new("docker")
                .args(["-H", host, "version"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status_within(CHILD_DEADLINE)
                .is_ok_and(|s| s.success())
        };
        let (host, daemon) = if answers(system) {
            (system.to_string(), None)
        } else {
            let state = ws.dir().join("docker");
            fs::create_dir_all(&state).map_err(|e| refused(e.into()))?;
            let host = format!("unix://{}", state.join("docker.sock").display());
            let log_path = state.join("dockerd.log");
            let log = fs::File::create(&log_path).map_err(|e| refused(e.into()))?;
            let err = log.try_clone().map_err(|e| refused(e.into()))?;
            let child = Command::new("dockerd")
                .args(["--iptables=false", "--ip6tables=false", "--bridge=none", "-H", &host])
                .arg("--data-root")
                .arg(state.join("data"))
                .arg("--exec-root")
                .arg(state.join("exec"))
                .arg("--pidfile")
                .arg(state.join("dockerd.pid"))
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(|e| refused(anyhow!("starting dockerd: {e}")))?;
            let mut daemon = OwnDaemon { child };
            let deadline = Instant::now() + Duration::from_secs(60);
            while !answers(&host) {
                if let Ok(Some(status)) = daemon.child.try_wait() {
                    return Err(Unavailable::Refused(format!(
                        "dockerd exited at start-up ({status}): {}",
                        tail(&log_path, 5)
                    )));
                }
                if Instant::now() > deadline {
                    return Err(Unavailable::Refused(format!(
                        "dockerd did not answer within 60 s: {}",
                        tail(&log_path, 5)
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (host, Some(daemon))
        };
        let image = format!("cct-runtimes:{}", std::process::id());
        let mut d = Docker { host, name: name.to_string(), id: String::new(), image: image.clone(), _daemon: daemon };
        run(d.docker().arg("import").arg(ws.image_tar()).arg(&image)).map_err(refused)?;
        let out = run(d
            .docker()
            .args(["run", "-d", "--name", name, "--network", "none"])
            .args(engine_mounts(ws))
            .arg(&image)
            .args(["/usr/sbin/nginx", "-c", "/etc/nginx.conf", "-g", "daemon off;"]))
        .map_err(refused)?;
        d.id = out.trim().to_string();
        wait_listening(&d).map_err(refused)?;
        Ok(d)
    }
}

impl Container for Docker {
    fn runtime(&self) -> &'static str {
        "docker"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.docker().args(["inspect", "-f", "{{.State.Pid}}", &self.name]))?;
        out.trim().parse().with_context(|| format!("docker inspect pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        Ok(parse_listing(&run(self.docker().args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"]))?))
    }
    fn engine(&self) -> Option<Command> {
        Some(self.docker())
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        let _ = run(self.docker().args(["rm", "-f", &self.name]));
        let _ = run(self.docker().args(["rmi", "-f", &self.image]));
    }
}
