//! Podman, rootful, with its store under the test's workspace.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::*;

/// A rootful Podman container with its store, run root and temp files under the workspace;
/// removed on drop.
pub struct Podman {
    pub(super) root: PathBuf,
    pub(super) name: String,
    pub(super) id: String,
    /// The `--ulimit` options this sandbox needed for a container to start (none where
    /// Podman's defaults fit its limits).
    pub ulimits: Vec<String>,
}

impl Podman {
    /// `podman` on this container's store.
    pub fn podman(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root").arg(self.root.join("store"));
        c.arg("--runroot").arg(self.root.join("run"));
        c.arg("--tmpdir").arg(self.root.join("tmp"));
        // No systemd to make scopes (a container, a sandbox): cgroupfs, as Podman would pick.
        if !Path::new("/run/systemd/system").exists() {
            c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"]);
        }
        c
    }

    pub fn start(ws: &Workspace, name: &str) -> Result<Podman, Unavailable> {
        require(&["podman", "conmon"], "podman")?;
        let refused = |e: anyhow::Error| Unavailable::Refused(format!("{e:#}"));
        let p =
            Podman { root: ws.dir().join("podman"), name: name.to_string(), id: String::new(), ulimits: Vec::new() };
        let image = "localhost/cct-runtimes:latest";
        run(p.podman().arg("import").arg(ws.image_tar()).arg(image)).map_err(refused)?;
        // As a user runs it first. In a sandbox whose hard limits are below the RLIMIT_NOFILE and
        // RLIMIT_NPROC Podman asks for by default, runc's setrlimit fails with EPERM: say so, and
        // run it again asking for no more than those limits.
        let run_nginx = |ulimits: &[String]| {
            run(p
                .podman()
                .args(["run", "-d", "--name", name, "--network", "none"])
                .args(ulimits)
                .args(engine_mounts(ws))
                .arg(image)
                .args(["/usr/sbin/nginx", "-c", "/etc/nginx.conf", "-g", "daemon off;"]))
        };
        let mut limited = Vec::new();
        let out = match run_nginx(&[]) {
            Ok(out) => out,
            Err(e) if format!("{e:#}").contains("rlimit") => {
                let mut ulimits = Vec::new();
                use rustix::process::{getrlimit, Resource};
                for (resource, flag) in [(Resource::Nofile, "nofile"), (Resource::Nproc, "nproc")] {
                    let n = getrlimit(resource).maximum.unwrap_or(u64::MAX).min(1024);
                    ulimits.extend(["--ulimit".to_string(), format!("{flag}={n}:{n}")]);
                }
                let msg = format!("{e:#}");
                eprintln!(
                    "podman: the container's limits are refused here ({}); again with {}",
                    msg.find("Error:").map_or(msg.as_str(), |i| &msg[i..]),
                    ulimits.join(" ")
                );
                let _ = run(p.podman().args(["rm", "-f", "-t", "0", name]));
                let out = run_nginx(&ulimits).map_err(refused)?;
                limited = ulimits;
                out
            }
            Err(e) => return Err(refused(e)),
        };
        let mut p = p;
        p.id = out.lines().last().unwrap_or_default().trim().to_string();
        p.ulimits = limited;
        wait_listening(&p).map_err(refused)?;
        Ok(p)
    }
}

impl Container for Podman {
    fn runtime(&self) -> &'static str {
        "podman"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> &str {
        &self.id
    }
    fn pid(&self) -> Result<u32> {
        let out = run(self.podman().args(["inspect", "-f", "{{.State.Pid}}", &self.name]))?;
        out.trim().parse().with_context(|| format!("podman inspect pid: {out:?}"))
    }
    fn listed(&self) -> Result<Vec<(String, String)>> {
        Ok(parse_listing(&run(self.podman().args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"]))?))
    }
    fn engine(&self) -> Option<Command> {
        Some(self.podman())
    }
    fn engine_run_options(&self) -> Vec<String> {
        self.ulimits.clone()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = run(self.podman().args(["rm", "-f", "-t", "0", &self.name]));
        let _ = run(self.podman().args(["rmi", "-a", "-f"]));
    }
}
